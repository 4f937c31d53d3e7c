/* gguf.c - the validating GGUF reader.
 *
 * Design. A GGUF file is a header, a list of typed metadata pairs, a table
 * of tensor descriptions and an aligned data section. Every number in the
 * first three parts is attacker-controlled, so the parser walks them with
 * a bounds-checked cursor (gg_cur) that never reads past the buffer and
 * turns each short read into ST_ETRUNC naming the field and its offset.
 * Counts are checked against the bytes that remain before anything is
 * allocated for them: a pair needs at least 13 bytes, a tensor description
 * at least 32, an array element at least its own size (8 for a string), so
 * a forged count can never make us allocate more than a small multiple of
 * the file size.
 *
 * Parsing is three passes over what the file declares:
 *   1. header and pairs (values decoded into st_gguf_kv; scalar arrays are
 *      left in the mapping, string arrays get an owned st_gguf_str table);
 *   2. the tensor table (shape, type, byte size, all with overflow checks);
 *   3. cross checks that need everything: general.alignment, offsets
 *      aligned and inside the file, no two tensors overlapping, no
 *      duplicate keys or names. Duplicates and overlaps are found by sorting
 *      index arrays (O(n log n), so a hostile file with 100k entries costs
 *      milliseconds, not minutes); the sorted indexes also serve lookups.
 *
 * Nothing here touches tensor bytes: the data section is only mapped, so a
 * stage that reads only its layers makes only them resident.
 *
 * Files. This one holds the parser, open and close; gguf_access.c holds
 * what reads an opened file (lookups in the sorted indexes, typed getters,
 * array elements, the model id, touch / release / residency); the handle
 * and the helpers both use are in the private gguf_impl.h. */
#include "common/model/gguf_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GG_MAGIC "GGUF"
#define GG_DEFAULT_ALIGNMENT 32
#define GG_MIN_KV_BYTES 13     /* u64 key length + u32 type + 1 value byte */
#define GG_MIN_TENSOR_BYTES 32 /* name len, n_dims, one dim, type, offset */

/* A bounds-checked read position in the buffer. */
typedef struct gg_cur {
    const uint8_t *p;
    size_t len;
    size_t off;
} gg_cur;

static size_t gg_left(const gg_cur *c) { return c->len - c->off; }

/* The readers below fail with a bare ST_ETRUNC and no detail: every caller
 * knows which field it was reading and records the detail itself. */
static st_err gg_read(gg_cur *c, void *dst, size_t n)
{
    if (gg_left(c) < n)
        return ST_ETRUNC;
    memcpy(dst, c->p + c->off, n);
    c->off += n;
    return ST_OK;
}

static st_err gg_u32(gg_cur *c, uint32_t *v)
{
    return gg_read(c, v, sizeof *v); /* GGUF is little-endian, as we are */
}

static st_err gg_u64(gg_cur *c, uint64_t *v) { return gg_read(c, v, sizeof *v); }

/* gg_str - a u64 length and that many bytes; on failure s->len holds the
 * length read (or 0 if even that was missing). */
static st_err gg_str(gg_cur *c, st_gguf_str *s)
{
    s->len = 0;
    s->data = NULL;
    if (gg_u64(c, &s->len))
        return ST_ETRUNC;
    if (s->len > gg_left(c))
        return ST_ETRUNC;
    s->data = (const char *)c->p + c->off;
    c->off += (size_t)s->len;
    return ST_OK;
}

/* Size of one scalar of type t, or 0 for STRING, ARRAY and unknown types. */
size_t gg_scalar_size(uint32_t t)
{
    switch (t) {
    case ST_GGUF_UINT8:
    case ST_GGUF_INT8:
    case ST_GGUF_BOOL:
        return 1;
    case ST_GGUF_UINT16:
    case ST_GGUF_INT16:
        return 2;
    case ST_GGUF_UINT32:
    case ST_GGUF_INT32:
    case ST_GGUF_FLOAT32:
        return 4;
    case ST_GGUF_UINT64:
    case ST_GGUF_INT64:
    case ST_GGUF_FLOAT64:
        return 8;
    default:
        return 0;
    }
}

/* Decodes one scalar of type t at p into kv's value union. */
st_err gg_decode_scalar(st_gguf_kv *kv, uint32_t t, const uint8_t *p, size_t at)
{
    uint8_t u8;
    uint16_t u16;
    uint32_t u32;
    uint64_t u64;
    float f32;
    switch (t) {
    case ST_GGUF_UINT8:
        memcpy(&u8, p, 1);
        kv->v.u64 = u8;
        break;
    case ST_GGUF_INT8:
        memcpy(&u8, p, 1);
        kv->v.i64 = (int8_t)u8;
        break;
    case ST_GGUF_UINT16:
        memcpy(&u16, p, 2);
        kv->v.u64 = u16;
        break;
    case ST_GGUF_INT16:
        memcpy(&u16, p, 2);
        kv->v.i64 = (int16_t)u16;
        break;
    case ST_GGUF_UINT32:
        memcpy(&u32, p, 4);
        kv->v.u64 = u32;
        break;
    case ST_GGUF_INT32:
        memcpy(&u32, p, 4);
        kv->v.i64 = (int32_t)u32;
        break;
    case ST_GGUF_UINT64:
        memcpy(&u64, p, 8);
        kv->v.u64 = u64;
        break;
    case ST_GGUF_INT64:
        memcpy(&u64, p, 8);
        kv->v.i64 = (int64_t)u64;
        break;
    case ST_GGUF_FLOAT32:
        memcpy(&f32, p, 4);
        kv->v.f64 = f32;
        break;
    case ST_GGUF_FLOAT64:
        memcpy(&kv->v.f64, p, 8);
        break;
    case ST_GGUF_BOOL:
        memcpy(&u8, p, 1);
        if (u8 > 1)
            return st_errorf(ST_EFORMAT,
                             "gguf: key '%.*s': bool value %u at offset %zu is not 0 or 1",
                             gg_shown(kv->key), kv->key.data, u8, at);
        kv->v.u64 = u8;
        break;
    default:
        return st_errorf(ST_EINTERNAL, "gguf: decode of non-scalar type %u", t);
    }
    return ST_OK;
}

/* Parses the array body of kv (element type, count, values). */
static st_err gg_parse_array(gg_cur *c, st_gguf_kv *kv)
{
    int w = gg_shown(kv->key);
    size_t at = c->off;
    uint32_t et;
    if (gg_u32(c, &et))
        return st_errorf(ST_ETRUNC,
                         "gguf: key '%.*s': array element type at offset %zu is truncated", w,
                         kv->key.data, at);
    if (et == ST_GGUF_ARRAY)
        return st_errorf(ST_EFORMAT, "gguf: key '%.*s': nested array at offset %zu", w,
                         kv->key.data, at);
    if (et >= ST_GGUF_TYPE_COUNT)
        return st_errorf(ST_ETYPE, "gguf: key '%.*s': unknown array element type %u at offset %zu",
                         w, kv->key.data, et, at);
    uint64_t n;
    at = c->off;
    if (gg_u64(c, &n))
        return st_errorf(ST_ETRUNC, "gguf: key '%.*s': array length at offset %zu is truncated", w,
                         kv->key.data, at);
    size_t esz = et == ST_GGUF_STRING ? 8 : gg_scalar_size(et);
    if (n > gg_left(c) / esz)
        return st_errorf(ST_ETRUNC,
                         "gguf: key '%.*s': array of %llu elements (offset %zu) cannot fit in the "
                         "%zu bytes left",
                         w, kv->key.data, (unsigned long long)n, at, gg_left(c));
    kv->arr_type = (st_gguf_type)et;
    kv->arr_n = n;
    if (et != ST_GGUF_STRING) {
        kv->arr_data = c->p + c->off;
        if (et == ST_GGUF_BOOL) {
            for (uint64_t i = 0; i < n; i++)
                if (c->p[c->off + i] > 1)
                    return st_errorf(ST_EFORMAT,
                                     "gguf: key '%.*s': bool element %llu is not 0 or 1", w,
                                     kv->key.data, (unsigned long long)i);
        }
        c->off += (size_t)(n * esz);
        return ST_OK;
    }
    kv->arr_strs = calloc(n ? (size_t)n : 1, sizeof *kv->arr_strs);
    if (kv->arr_strs == NULL)
        return st_errorf(ST_ENOMEM, "gguf: key '%.*s': %llu strings", w, kv->key.data,
                         (unsigned long long)n);
    kv->arr_data = NULL;
    for (uint64_t i = 0; i < n; i++) {
        st_gguf_str s;
        at = c->off;
        if (gg_str(c, &s))
            return st_errorf(ST_ETRUNC,
                             "gguf: key '%.*s': string %llu at offset %zu: length %llu exceeds the "
                             "%zu bytes left",
                             w, kv->key.data, (unsigned long long)i, at, (unsigned long long)s.len,
                             gg_left(c));
        kv->arr_strs[i] = s;
    }
    return ST_OK;
}

/* Parses the key, type and value of one pair. */
static st_err gg_parse_kv(gg_cur *c, st_gguf_kv *kv, uint64_t idx)
{
    size_t at = c->off;
    if (gg_str(c, &kv->key))
        return st_errorf(
            ST_ETRUNC,
            "gguf: key of pair %llu at offset %zu: length %llu exceeds the %zu bytes left",
            (unsigned long long)idx, at, (unsigned long long)kv->key.len, gg_left(c));
    int w = gg_shown(kv->key);
    uint32_t t;
    at = c->off;
    if (gg_left(c) < 4)
        return st_errorf(ST_ETRUNC, "gguf: key '%.*s': value type at offset %zu is truncated", w,
                         kv->key.data, at);
    if (gg_u32(c, &t))
        return st_errorf(ST_EINTERNAL, "gguf: key '%.*s': type read failed", w, kv->key.data);
    if (t >= ST_GGUF_TYPE_COUNT)
        return st_errorf(ST_ETYPE, "gguf: key '%.*s': unknown value type %u at offset %zu", w,
                         kv->key.data, t, at);
    kv->type = (st_gguf_type)t;
    at = c->off;
    if (t == ST_GGUF_ARRAY)
        return gg_parse_array(c, kv);
    if (t == ST_GGUF_STRING) {
        if (gg_str(c, &kv->v.str))
            return st_errorf(ST_ETRUNC,
                             "gguf: key '%.*s': string value at offset %zu: length %llu exceeds "
                             "the %zu bytes left",
                             w, kv->key.data, at, (unsigned long long)kv->v.str.len, gg_left(c));
        return ST_OK;
    }
    size_t sz = gg_scalar_size(t);
    if (gg_left(c) < sz)
        return st_errorf(ST_ETRUNC,
                         "gguf: key '%.*s': value at offset %zu needs %zu bytes, %zu left", w,
                         kv->key.data, at, sz, gg_left(c));
    st_err e = gg_decode_scalar(kv, t, c->p + c->off, at);
    c->off += sz;
    return e;
}

/* Parses one tensor description and computes its byte size. */
static st_err gg_parse_tensor(gg_cur *c, st_gguf_tensor *t, uint64_t idx)
{
    size_t at = c->off;
    if (gg_str(c, &t->name))
        return st_errorf(
            ST_ETRUNC,
            "gguf: name of tensor %llu at offset %zu: length %llu exceeds the %zu bytes left",
            (unsigned long long)idx, at, (unsigned long long)t->name.len, gg_left(c));
    int w = gg_shown(t->name);
    at = c->off;
    if (gg_u32(c, &t->n_dims))
        return st_errorf(ST_ETRUNC, "gguf: tensor '%.*s': n_dims at offset %zu is truncated", w,
                         t->name.data, at);
    if (t->n_dims < 1 || t->n_dims > ST_GGUF_MAX_DIMS)
        return st_errorf(ST_ESHAPE, "gguf: tensor '%.*s': n_dims %u at offset %zu is not in 1..%d",
                         w, t->name.data, t->n_dims, at, ST_GGUF_MAX_DIMS);
    for (int d = 0; d < ST_GGUF_MAX_DIMS; d++)
        t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t v;
        at = c->off;
        if (gg_u64(c, &v))
            return st_errorf(ST_ETRUNC, "gguf: tensor '%.*s': dim %u at offset %zu is truncated", w,
                             t->name.data, d, at);
        if (v < 1 || v > (uint64_t)INT64_MAX)
            return st_errorf(ST_ESHAPE,
                             "gguf: tensor '%.*s': dim %u is %lld (offset %zu), must be >= 1", w,
                             t->name.data, d, (long long)v, at);
        t->ne[d] = (int64_t)v;
    }
    at = c->off;
    if (gg_u32(c, &t->ggml_type))
        return st_errorf(ST_ETRUNC, "gguf: tensor '%.*s': type at offset %zu is truncated", w,
                         t->name.data, at);
    if (st_dtype_from_ggml(t->ggml_type, &t->dtype) != ST_K_OK)
        return st_errorf(ST_ETYPE, "gguf: tensor '%.*s': unsupported ggml type %u (offset %zu)", w,
                         t->name.data, t->ggml_type, at);
    at = c->off;
    if (gg_u64(c, &t->offset))
        return st_errorf(ST_ETRUNC, "gguf: tensor '%.*s': data offset at offset %zu is truncated",
                         w, t->name.data, at);

    int64_t nel = t->ne[0];
    int64_t rows = 1;
    for (int d = 1; d < ST_GGUF_MAX_DIMS; d++) {
        if (__builtin_mul_overflow(rows, t->ne[d], &rows) ||
            __builtin_mul_overflow(nel, t->ne[d], &nel))
            return st_errorf(
                ST_EOVERFLOW,
                "gguf: tensor '%.*s': element count overflows (%lld x %lld x %lld x %lld)", w,
                t->name.data, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                (long long)t->ne[3]);
    }
    const st_dtype_info *di = st_dtype_info_of(t->dtype);
    if (t->ne[0] % di->blck != 0)
        return st_errorf(ST_ESHAPE,
                         "gguf: tensor '%.*s': ne0 %lld is not a multiple of %s's block of %lld", w,
                         t->name.data, (long long)t->ne[0], di->name, (long long)di->blck);
    size_t row;
    if (st_row_size(t->dtype, t->ne[0], &row) != ST_K_OK)
        return st_errorf(ST_ESHAPE, "gguf: tensor '%.*s': bad row of %lld %s elements", w,
                         t->name.data, (long long)t->ne[0], di->name);
    if ((uint64_t)rows > SIZE_MAX || __builtin_mul_overflow(row, (size_t)rows, &t->nbytes) ||
        t->nbytes > (size_t)INT64_MAX)
        return st_errorf(ST_EOVERFLOW,
                         "gguf: tensor '%.*s': byte size overflows (%lld rows of %zu bytes)", w,
                         t->name.data, (long long)rows, row);
    return ST_OK;
}

/* qsort over index arrays: the comparison context is passed through a
 * small wrapper struct sorted alongside (qsort has no context argument). */
typedef struct gg_ref {
    const st_gguf_str *s; /* key or name */
    uint64_t off;         /* tensor offset (overlap sort) */
    uint64_t idx;
} gg_ref;

int gg_cmp_str(st_gguf_str a, st_gguf_str b)
{
    size_t n = a.len < b.len ? (size_t)a.len : (size_t)b.len;
    int r = n ? memcmp(a.data, b.data, n) : 0;
    if (r)
        return r;
    return a.len < b.len ? -1 : a.len > b.len;
}

static int gg_cmp_ref_str(const void *x, const void *y)
{
    const gg_ref *a = x, *b = y;
    int r = gg_cmp_str(*a->s, *b->s);
    if (r)
        return r;
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}

static int gg_cmp_ref_off(const void *x, const void *y)
{
    const gg_ref *a = x, *b = y;
    if (a->off != b->off)
        return a->off < b->off ? -1 : 1;
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}

/* Sorts the n strings at strs (stride bytes apart) into *sorted and fails
 * on the first duplicate; what names the kind ("key", "tensor name"). */
static st_err gg_sort_unique(const void *first, size_t stride, uint64_t n, const char *what,
                             uint64_t **sorted)
{
    gg_ref *refs = malloc((n ? (size_t)n : 1) * sizeof *refs);
    *sorted = malloc((n ? (size_t)n : 1) * sizeof **sorted);
    if (refs == NULL || *sorted == NULL) {
        free(refs);
        return st_errorf(ST_ENOMEM, "gguf: index of %llu %ss", (unsigned long long)n, what);
    }
    for (uint64_t i = 0; i < n; i++) {
        refs[i].s = (const st_gguf_str *)((const char *)first + i * stride);
        refs[i].idx = i;
        refs[i].off = 0;
    }
    qsort(refs, (size_t)n, sizeof *refs, gg_cmp_ref_str);
    for (uint64_t i = 0; i < n; i++) {
        if (i > 0 && gg_cmp_str(*refs[i - 1].s, *refs[i].s) == 0) {
            st_gguf_str s = *refs[i].s;
            unsigned long long a = refs[i - 1].idx, b = refs[i].idx;
            free(refs);
            return st_errorf(ST_EFORMAT, "gguf: duplicate %s '%.*s' (entries %llu and %llu)", what,
                             gg_shown(s), s.data, a, b);
        }
        (*sorted)[i] = refs[i].idx;
    }
    free(refs);
    return ST_OK;
}

/* Reads general.alignment if present: an unsigned integer, a power of two. */
static st_err gg_alignment(st_gguf *g)
{
    g->alignment = GG_DEFAULT_ALIGNMENT;
    const st_gguf_kv *kv = st_gguf_find_kv(g, ST_GGUF_KEY_ALIGNMENT);
    if (kv == NULL)
        return ST_OK;
    uint64_t a;
    if (kv->type == ST_GGUF_UINT8 || kv->type == ST_GGUF_UINT16 || kv->type == ST_GGUF_UINT32 ||
        kv->type == ST_GGUF_UINT64)
        a = kv->v.u64;
    else if (kv->type == ST_GGUF_INT8 || kv->type == ST_GGUF_INT16 || kv->type == ST_GGUF_INT32 ||
             kv->type == ST_GGUF_INT64)
        a = kv->v.i64 < 0 ? 0 : (uint64_t)kv->v.i64;
    else
        return st_errorf(ST_ETYPE, "gguf: key 'general.alignment' has non-integer type %d",
                         kv->type);
    if (a == 0 || (a & (a - 1)) != 0 || a > (1u << 30))
        return st_errorf(ST_EFORMAT,
                         "gguf: key 'general.alignment' = %llu is not a power of two in 1..2^30",
                         (unsigned long long)a);
    g->alignment = (size_t)a;
    return ST_OK;
}

/* Places every tensor in the data section and checks alignment, bounds and
 * overlaps. */
static st_err gg_place_tensors(st_gguf *g)
{
    size_t a = g->alignment;
    size_t pad = (a - g->table_end % a) % a;
    g->data_off = g->table_end + pad; /* may exceed len when there are no tensors */
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        st_gguf_tensor *t = &g->tensors[i];
        int w = gg_shown(t->name);
        if (t->offset % a != 0)
            return st_errorf(
                ST_EFORMAT,
                "gguf: tensor '%.*s': data offset %llu is not a multiple of the alignment %zu", w,
                t->name.data, (unsigned long long)t->offset, a);
        uint64_t begin, end;
        if (__builtin_add_overflow((uint64_t)g->data_off, t->offset, &begin) ||
            __builtin_add_overflow(begin, (uint64_t)t->nbytes, &end) || end > g->len)
            return st_errorf(ST_ETRUNC,
                             "gguf: tensor '%.*s': data [%llu, +%zu) at file offset %zu+%llu lies "
                             "outside the file of %zu bytes",
                             w, t->name.data, (unsigned long long)t->offset, t->nbytes, g->data_off,
                             (unsigned long long)t->offset, g->len);
        t->data = g->base + begin;
    }
    if (g->n_tensors < 2)
        return ST_OK;
    gg_ref *refs = malloc((size_t)g->n_tensors * sizeof *refs);
    if (refs == NULL)
        return st_errorf(ST_ENOMEM, "gguf: overlap index of %llu tensors",
                         (unsigned long long)g->n_tensors);
    for (uint64_t i = 0; i < g->n_tensors; i++)
        refs[i] = (gg_ref){&g->tensors[i].name, g->tensors[i].offset, i};
    qsort(refs, (size_t)g->n_tensors, sizeof *refs, gg_cmp_ref_off);
    for (uint64_t i = 1; i < g->n_tensors; i++) {
        const st_gguf_tensor *p = &g->tensors[refs[i - 1].idx];
        const st_gguf_tensor *q = &g->tensors[refs[i].idx];
        if (p->offset + p->nbytes > q->offset) {
            free(refs);
            return st_errorf(ST_EOVERLAP,
                             "gguf: tensors '%.*s' [%llu, %llu) and '%.*s' [%llu, %llu) overlap",
                             gg_shown(p->name), p->name.data, (unsigned long long)p->offset,
                             (unsigned long long)(p->offset + p->nbytes), gg_shown(q->name),
                             q->name.data, (unsigned long long)q->offset,
                             (unsigned long long)(q->offset + q->nbytes));
        }
    }
    free(refs);
    return ST_OK;
}

static st_err gg_parse(st_gguf *g)
{
    gg_cur c = {g->base, g->len, 0};
    char magic[4];
    if (g->len < 4)
        return st_errorf(ST_ETRUNC, "gguf: file of %zu bytes is shorter than the magic", g->len);
    st_err e = gg_read(&c, magic, 4);
    if (e)
        return st_errorf(ST_EINTERNAL, "gguf: magic read failed");
    if (memcmp(magic, GG_MAGIC, 4) != 0)
        return st_errorf(ST_EFORMAT,
                         "gguf: bad magic %02x %02x %02x %02x at offset 0 (want \"GGUF\")",
                         (uint8_t)magic[0], (uint8_t)magic[1], (uint8_t)magic[2],
                         (uint8_t)magic[3]);
    if (gg_u32(&c, &g->version))
        return st_errorf(ST_ETRUNC,
                         "gguf: header truncated at version (offset 4, file of %zu bytes)", g->len);
    if (g->version != 2 && g->version != 3)
        return st_errorf(ST_EVERSION, "gguf: version %u at offset 4 is not supported (2 or 3)",
                         g->version);
    if (gg_u64(&c, &g->n_tensors) || gg_u64(&c, &g->n_kv))
        return st_errorf(ST_ETRUNC, "gguf: header truncated at its counts (file of %zu bytes)",
                         g->len);
    if (g->n_kv > gg_left(&c) / GG_MIN_KV_BYTES)
        return st_errorf(ST_ETRUNC, "gguf: n_kv %llu (offset 16) cannot fit in the %zu bytes left",
                         (unsigned long long)g->n_kv, gg_left(&c));
    if (g->n_tensors > gg_left(&c) / GG_MIN_TENSOR_BYTES)
        return st_errorf(ST_ETRUNC,
                         "gguf: n_tensors %llu (offset 8) cannot fit in the %zu bytes left",
                         (unsigned long long)g->n_tensors, gg_left(&c));

    g->kvs = calloc(g->n_kv ? (size_t)g->n_kv : 1, sizeof *g->kvs);
    if (g->kvs == NULL)
        return st_errorf(ST_ENOMEM, "gguf: %llu pairs", (unsigned long long)g->n_kv);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        e = gg_parse_kv(&c, &g->kvs[i], i);
        if (e)
            return e;
    }
    e = gg_sort_unique(g->kvs, sizeof *g->kvs, g->n_kv, "key", &g->kv_sorted);
    if (e)
        return e;
    e = gg_alignment(g);
    if (e)
        return e;

    if (g->n_tensors > gg_left(&c) / GG_MIN_TENSOR_BYTES)
        return st_errorf(
            ST_ETRUNC,
            "gguf: n_tensors %llu (offset 8) cannot fit in the %zu bytes left after the metadata",
            (unsigned long long)g->n_tensors, gg_left(&c));
    g->tensors = calloc(g->n_tensors ? (size_t)g->n_tensors : 1, sizeof *g->tensors);
    if (g->tensors == NULL)
        return st_errorf(ST_ENOMEM, "gguf: %llu tensors", (unsigned long long)g->n_tensors);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        e = gg_parse_tensor(&c, &g->tensors[i], i);
        if (e)
            return e;
    }
    g->table_end = c.off;
    e = gg_sort_unique(g->tensors, sizeof *g->tensors, g->n_tensors, "tensor name", &g->t_sorted);
    if (e)
        return e;
    return gg_place_tensors(g);
}

static st_err gg_open_common(st_gguf *g, st_gguf **out)
{
    st_err e = gg_parse(g);
    if (e) {
        st_gguf_close(g);
        return e;
    }
    *out = g;
    return ST_OK;
}

st_err st_gguf_open_mem(const void *buf, size_t len, st_gguf **out)
{
    *out = NULL;
    if (buf == NULL && len > 0)
        return st_errorf(ST_EINVAL, "gguf: NULL buffer of %zu bytes", len);
    st_gguf *g = calloc(1, sizeof *g);
    if (g == NULL)
        return st_errorf(ST_ENOMEM, "gguf: handle");
    static const uint8_t empty[1];
    g->base = buf ? buf : empty;
    g->len = len;
    return gg_open_common(g, out);
}

st_err st_gguf_open(const char *path, st_gguf **out)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int en = errno;
        return st_errorf(en == ENOENT ? ST_ENOENT : ST_EIO, "gguf: open '%s': %s", path,
                         strerror(en));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int en = errno;
        close(fd);
        return st_errorf(ST_EIO, "gguf: stat '%s': %s", path, strerror(en));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return st_errorf(ST_EINVAL, "gguf: '%s' is not a regular file", path);
    }
    if (sb.st_size < 24) {
        close(fd);
        return st_errorf(ST_ETRUNC, "gguf: '%s' has %lld bytes, less than a GGUF header", path,
                         (long long)sb.st_size);
    }
    size_t len = (size_t)sb.st_size;
    void *p = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    int en = errno;
    close(fd);
    if (p == MAP_FAILED)
        return st_errorf(ST_EIO, "gguf: mmap '%s' (%zu bytes): %s", path, len, strerror(en));
    st_gguf *g = calloc(1, sizeof *g);
    if (g == NULL) {
        munmap(p, len);
        return st_errorf(ST_ENOMEM, "gguf: handle");
    }
    g->base = p;
    g->len = len;
    g->mapped = true;
    st_err e = gg_open_common(g, out);
    if (e) {
        char detail[512];
        snprintf(detail, sizeof detail, "%s", st_errdetail());
        return st_errorf(e, "%s (file '%s')", detail, path);
    }
    return ST_OK;
}

void st_gguf_close(st_gguf *g)
{
    if (g == NULL)
        return;
    if (g->kvs != NULL)
        for (uint64_t i = 0; i < g->n_kv; i++)
            free(g->kvs[i].arr_strs);
    free(g->kvs);
    free(g->kv_sorted);
    free(g->tensors);
    free(g->t_sorted);
    if (g->mapped)
        munmap((void *)g->base, g->len);
    free(g);
}
