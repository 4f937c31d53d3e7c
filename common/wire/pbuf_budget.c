/* pbuf_budget.c - the decoding budget and the wire-level field counter
 * (the rules are in pbuf_budget.h). */
#include "common/wire/pbuf_budget.h"

#include <stdlib.h>

#define PB_VARINT_MAX_BYTES ST_PB_VARINT_MAX /* a 64-bit varint */
#define PB_VARINT_BITS 7
#define PB_VARINT_MORE 0x80u
#define PB_TAG_TYPE_BITS 3
#define PB_TAG_TYPE_MASK 0x7u
#define PB_FIXED64_BYTES 8
#define PB_FIXED32_BYTES 4

/* wire types of the protobuf encoding */
enum { PB_WT_VARINT = 0, PB_WT_FIXED64 = 1, PB_WT_LEN = 2, PB_WT_FIXED32 = 5 };

size_t st_pb_budget_limit(size_t len)
{
    size_t extra = ST_PB_BUDGET_EXTRA_MAX;
    if (len < (ST_PB_BUDGET_EXTRA_MAX - ST_PB_BUDGET_SLACK) / ST_PB_BUDGET_FACTOR)
        extra = ST_PB_BUDGET_FACTOR * len + ST_PB_BUDGET_SLACK;
    return len > SIZE_MAX - extra ? SIZE_MAX : len + extra;
}

static void *pb_budget_alloc(void *data, size_t size)
{
    st_pb_budget *b = data;
    size_t want = size > SIZE_MAX - ST_PB_ALLOC_OVERHEAD ? SIZE_MAX : size + ST_PB_ALLOC_OVERHEAD;
    if (b->refused != 0 || want > b->limit - b->used) {
        if (b->refused == 0)
            b->refused = want;
        return NULL; /* protobuf-c then frees what it had and fails the unpack */
    }
    void *p = malloc(size);
    if (p != NULL)
        b->used += want;
    return p;
}

static void pb_budget_free(void *data, void *p)
{
    (void)data;
    free(p);
}

void st_pb_budget_init(st_pb_budget *b, size_t limit)
{
    b->pa.alloc = pb_budget_alloc;
    b->pa.free = pb_budget_free;
    b->pa.allocator_data = b;
    b->limit = limit;
    b->used = 0;
    b->refused = 0;
}

bool st_pb_budget_exceeded(const st_pb_budget *b) { return b->refused != 0; }

st_err st_pb_unpack(const ProtobufCMessageDescriptor *d, const uint8_t *buf, size_t len,
                    const char *kind, uint64_t sender, ProtobufCMessage **out)
{
    st_pb_budget b;
    st_pb_budget_init(&b, st_pb_budget_limit(len));
    *out = protobuf_c_message_unpack(d, &b.pa, len, buf);
    if (*out != NULL)
        return ST_OK;
    if (st_pb_budget_exceeded(&b))
        return st_errorf(ST_ERANGE,
                         "%s of %zu bytes from sender %llu would decode to more than "
                         "its budget of %zu bytes (%zu allocated, %zu more asked)",
                         kind, len, (unsigned long long)sender, b.limit, b.used, b.refused);
    return st_errorf(ST_EFORMAT, "malformed %s (%zu bytes) from sender %llu", kind, len,
                     (unsigned long long)sender);
}

/* pb_varint - reads a varint at buf[*at..len) into *v; false when it is
 * cut short or longer than 10 bytes. */
static bool pb_varint(const uint8_t *buf, size_t len, size_t *at, uint64_t *v)
{
    *v = 0;
    for (int i = 0; i < PB_VARINT_MAX_BYTES && *at < len; i++) {
        uint8_t byte = buf[(*at)++];
        *v |= (uint64_t)(byte & ~PB_VARINT_MORE) << (PB_VARINT_BITS * i);
        if ((byte & PB_VARINT_MORE) == 0)
            return true;
    }
    return false;
}

/* pb_skip - steps *at over a value of wire type wt; false when malformed
 * (groups, reserved wire types, values past the end). For a
 * length-delimited value, *sub and *sub_len get its bytes. */
static bool pb_skip(const uint8_t *buf, size_t len, size_t *at, unsigned wt, const uint8_t **sub,
                    size_t *sub_len)
{
    uint64_t v;
    size_t n;
    switch (wt) {
    case PB_WT_VARINT:
        return pb_varint(buf, len, at, &v);
    case PB_WT_FIXED64:
        n = PB_FIXED64_BYTES;
        break;
    case PB_WT_FIXED32:
        n = PB_FIXED32_BYTES;
        break;
    case PB_WT_LEN:
        if (!pb_varint(buf, len, at, &v) || v > len - *at)
            return false;
        n = (size_t)v;
        *sub = buf + *at;
        *sub_len = n;
        break;
    default:
        return false;
    }
    if (n > len - *at)
        return false;
    *at += n;
    return true;
}

/* pb_count - adds to *count the occurrences of path's last field in
 * buf[0..len) (st_pb_count; depth >= 1). */
static st_err pb_count(const uint8_t *buf, size_t len, const uint32_t *path, size_t depth,
                       size_t *count)
{
    size_t at = 0;
    while (at < len) {
        uint64_t tag;
        if (!pb_varint(buf, len, &at, &tag))
            return st_errorf(ST_EFORMAT, "field tag cut short at byte %zu of %zu", at, len);
        unsigned wt = (unsigned)(tag & PB_TAG_TYPE_MASK);
        uint64_t field = tag >> PB_TAG_TYPE_BITS;
        const uint8_t *sub = NULL;
        size_t sub_len = 0;
        if (!pb_skip(buf, len, &at, wt, &sub, &sub_len))
            return st_errorf(ST_EFORMAT,
                             "field %llu (wire type %u) malformed before byte %zu "
                             "of %zu",
                             (unsigned long long)field, wt, at, len);
        if (field != path[0])
            continue;
        if (depth == 1) {
            (*count)++;
        } else if (wt == PB_WT_LEN) {
            st_err e = pb_count(sub, sub_len, path + 1, depth - 1, count);
            if (e != ST_OK)
                return e;
        }
    }
    return ST_OK;
}

st_err st_pb_count(const uint8_t *buf, size_t len, const uint32_t *path, size_t depth,
                   size_t *count)
{
    *count = 0;
    if (depth < 1 || depth > ST_PB_MAX_DEPTH)
        return st_errorf(ST_EINVAL, "field path of depth %zu (1..%d)", depth, ST_PB_MAX_DEPTH);
    return pb_count(buf, len, path, depth, count);
}

size_t st_pb_put_varint(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    while (v >= PB_VARINT_MORE) {
        p[n++] = (uint8_t)(v | PB_VARINT_MORE);
        v >>= PB_VARINT_BITS;
    }
    p[n++] = (uint8_t)v;
    return n;
}

size_t st_pb_put_tag(uint8_t *p, uint32_t field, unsigned wt)
{
    return st_pb_put_varint(p, ((uint64_t)field << PB_TAG_TYPE_BITS) | (wt & PB_TAG_TYPE_MASK));
}
