/* step.c - packing and opening the STEP frame (the layout and the rules
 * are in step.h). The meta length is written and read byte by byte, so
 * the frame's byte order does not depend on the host's. A received
 * StepMeta is bounded before protobuf-c allocates (pbuf_budget.h): its
 * size (ST_STEP_META_MAX), then its rows counted on the wire bytes
 * (ST_WIRE_MAX_ROWS), then the decoding budget of its size. */
#include "common/wire/step.h"

#include <assert.h>
#include <string.h>

#include "common/base/le.h"
#include "common/wire/pbuf_budget.h"
#include "common/wire/wire.h"

#define STEP_META_F_ROWS 4 /* StepMeta.rows (strata.proto) */

static_assert(ST_STEP_LEN_BYTES == sizeof(uint32_t),
              "the meta length is a little-endian u32 (le.h)");

st_err st_step_split(const uint8_t *body, size_t len, st_step_parts *out)
{
    memset(out, 0, sizeof *out);
    if (len < ST_STEP_LEN_BYTES)
        return st_errorf(ST_ETRUNC, "STEP frame of %zu bytes has no meta length", len);
    uint32_t ml = st_le_ld32(body);
    if (ml > len - ST_STEP_LEN_BYTES)
        return st_errorf(ST_ETRUNC, "STEP meta of %u bytes in a body of %zu", ml, len);
    out->meta = body + ST_STEP_LEN_BYTES;
    out->meta_len = ml;
    out->pkt = out->meta + ml;
    out->pkt_len = len - ST_STEP_LEN_BYTES - ml;
    return ST_OK;
}

st_err st_step_open(st_env *env, uint8_t *buf, size_t len, st_step_parts *out, uint64_t *sender)
{
    memset(out, 0, sizeof *out);
    *sender = 0;
    st_env_frame f;
    st_err e = st_env_open(env, buf, len, &f);
    if (e != ST_OK)
        return e;
    if (f.kind != ST_ENV_STEP)
        return st_errorf(ST_EPROTO, "frame of kind %d on the data socket", (int)f.kind);
    *sender = f.sender;
    if (f.body_len == 0) { /* a dialer's hello (msg.h) */
        out->hello = true;
        return ST_OK;
    }
    return st_step_split(f.body, f.body_len, out);
}

st_err st_step_meta_unpack(const st_step_parts *p, uint64_t sender, Strata__StepMeta **out)
{
    *out = NULL;
    if (p->meta_len > ST_STEP_META_MAX)
        return st_errorf(ST_ERANGE, "StepMeta of %zu bytes from sender %llu; at most %zu",
                         p->meta_len, (unsigned long long)sender, ST_STEP_META_MAX);
    static const uint32_t rows_path[] = {STEP_META_F_ROWS};
    size_t n_rows;
    st_err e = st_pb_count(p->meta, p->meta_len, rows_path, 1, &n_rows);
    if (e != ST_OK)
        return st_errwrap(e, "malformed StepMeta (%zu bytes) from sender %llu", p->meta_len,
                          (unsigned long long)sender);
    if (n_rows > ST_WIRE_MAX_ROWS)
        return st_errorf(ST_ERANGE,
                         "StepMeta of %zu bytes from sender %llu has %zu rows; at "
                         "most %u",
                         p->meta_len, (unsigned long long)sender, n_rows, ST_WIRE_MAX_ROWS);
    ProtobufCMessage *m;
    if ((e = st_pb_unpack(&strata__step_meta__descriptor, p->meta, p->meta_len, "StepMeta", sender,
                          &m)) != ST_OK)
        return e;
    *out = (Strata__StepMeta *)m;
    return ST_OK;
}

st_err st_step_max_frame(uint32_t hidden, uint32_t max_tokens, size_t *out)
{
    *out = 0;
    /* f32 with zstd's bound is the largest packet of any dtype and mode */
    st_wire_hdr h = {.n_rows = 1, .hidden = hidden};
    st_wire_row row = {.n_tokens = max_tokens};
    st_wire_opts o = {.dtype = ST_WIRE_F32, .zstd_level = ST_WIRE_ZSTD_DEFAULT_LEVEL};
    size_t pkt;
    st_err e = st_wire_encode_size(&h, &row, &o, &pkt);
    if (e != ST_OK)
        return st_errwrap(ST_ERANGE, "STEP frame of %u tokens of %u floats", max_tokens, hidden);
    size_t body = ST_STEP_LEN_BYTES + ST_STEP_META_MAX + pkt +
                  (size_t)(ST_WIRE_MAX_ROWS - 1) * ST_WIRE_ROW_SIZE;
    if (body > ST_ENV_MAX_BODY)
        return st_errorf(ST_ERANGE,
                         "STEP frame of %u tokens of %u floats: %zu bytes, beyond "
                         "%u",
                         max_tokens, hidden, body, ST_ENV_MAX_BODY);
    *out = ST_ENV_HDR + body + ST_ENV_MAC;
    return ST_OK;
}

void st_step_meta_free(Strata__StepMeta *m)
{
    if (m)
        strata__step_meta__free_unpacked(m, NULL);
}

/* step_alloc - a frame with room for meta_len meta bytes (left for the
 * caller to write at *meta_at) and a packet of up to pkt_cap bytes. */
static st_err step_alloc(const st_env *env, size_t meta_len, size_t pkt_cap, st_step_out *o,
                         uint8_t **meta_at)
{
    memset(o, 0, sizeof *o);
    *meta_at = NULL;
    if (meta_len > ST_ENV_MAX_BODY - ST_STEP_LEN_BYTES ||
        pkt_cap > ST_ENV_MAX_BODY - ST_STEP_LEN_BYTES - meta_len)
        return st_errorf(ST_ERANGE,
                         "STEP frame of a %zu-byte meta and a %zu-byte packet would "
                         "exceed %u bytes",
                         meta_len, pkt_cap, ST_ENV_MAX_BODY);
    size_t body = ST_STEP_LEN_BYTES + meta_len + pkt_cap;
    int rv = nng_msg_alloc(&o->msg, st_env_size(env, body));
    if (rv != 0) {
        o->msg = NULL;
        return st_err_nng(rv, "STEP frame");
    }
    uint8_t *b = (uint8_t *)nng_msg_body(o->msg) + ST_ENV_HDR;
    st_le_st32(b, (uint32_t)meta_len); /* below ST_ENV_MAX_BODY: fits */
    *meta_at = b + ST_STEP_LEN_BYTES;
    o->pkt = *meta_at + meta_len;
    o->pkt_cap = pkt_cap;
    o->meta_len = meta_len;
    return ST_OK;
}

st_err st_step_begin(const st_env *env, const uint8_t *meta, size_t meta_len, size_t pkt_cap,
                     st_step_out *o)
{
    uint8_t *at = NULL;
    st_err e = step_alloc(env, meta_len, pkt_cap, o, &at);
    if (e == ST_OK && meta_len > 0)
        memcpy(at, meta, meta_len);
    return e;
}

st_err st_step_finish(st_env *env, st_step_out *o, size_t pkt_len, nng_msg **out)
{
    *out = NULL;
    st_err e = ST_OK;
    if (pkt_len > o->pkt_cap)
        e = st_errorf(ST_EINVAL, "STEP packet of %zu bytes in room for %zu", pkt_len, o->pkt_cap);
    if (e == ST_OK)
        e = st_env_seal(env, ST_ENV_STEP, nng_msg_body(o->msg),
                        ST_STEP_LEN_BYTES + o->meta_len + pkt_len);
    int rv;
    if (e == ST_OK && pkt_len < o->pkt_cap && (rv = nng_msg_chop(o->msg, o->pkt_cap - pkt_len)))
        e = st_err_nng(rv, "STEP frame");
    if (e != ST_OK) {
        st_step_abort(o);
        return e;
    }
    *out = o->msg;
    memset(o, 0, sizeof *o);
    return ST_OK;
}

void st_step_abort(st_step_out *o)
{
    if (o->msg)
        nng_msg_free(o->msg);
    memset(o, 0, sizeof *o);
}

st_err st_step_pack(st_env *env, const Strata__StepMeta *meta, nng_msg **out)
{
    *out = NULL;
    st_step_out o;
    uint8_t *at = NULL;
    size_t ml = strata__step_meta__get_packed_size(meta);
    st_err e = step_alloc(env, ml, 0, &o, &at);
    if (e != ST_OK)
        return e;
    strata__step_meta__pack(meta, at);
    return st_step_finish(env, &o, 0, out);
}
