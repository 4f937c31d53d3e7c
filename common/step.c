/* step.c - packing and opening the STEP frame (the layout and the rules
 * are in step.h). The meta length is written and read byte by byte, so
 * the frame's byte order does not depend on the host's. */
#include "common/step.h"

#include <string.h>

#define STEP_BITS_PER_BYTE 8

static void step_put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < ST_STEP_LEN_BYTES; i++)
        p[i] = (uint8_t)(v >> (STEP_BITS_PER_BYTE * i));
}

static uint32_t step_get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < ST_STEP_LEN_BYTES; i++)
        v |= (uint32_t)p[i] << (STEP_BITS_PER_BYTE * i);
    return v;
}

st_err st_step_split(const uint8_t *body, size_t len, st_step_parts *out)
{
    memset(out, 0, sizeof *out);
    if (len < ST_STEP_LEN_BYTES)
        return st_errorf(ST_ETRUNC, "STEP frame of %zu bytes has no meta length", len);
    uint32_t ml = step_get_u32(body);
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
    return st_step_split(f.body, f.body_len, out);
}

st_err st_step_meta_unpack(const st_step_parts *p, uint64_t sender, Strata__StepMeta **out)
{
    *out = strata__step_meta__unpack(NULL, p->meta_len, p->meta);
    if (*out == NULL)
        return st_errorf(ST_EFORMAT, "malformed StepMeta (%zu bytes) from sender %llu",
                         p->meta_len, (unsigned long long)sender);
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
        return st_errorf(ST_ERANGE, "STEP frame of a %zu-byte meta and a %zu-byte packet would "
                         "exceed %u bytes", meta_len, pkt_cap, ST_ENV_MAX_BODY);
    size_t body = ST_STEP_LEN_BYTES + meta_len + pkt_cap;
    int rv = nng_msg_alloc(&o->msg, st_env_size(env, body));
    if (rv != 0) {
        o->msg = NULL;
        return st_err_nng(rv, "STEP frame");
    }
    uint8_t *b = (uint8_t *)nng_msg_body(o->msg) + ST_ENV_HDR;
    step_put_u32(b, (uint32_t)meta_len); /* below ST_ENV_MAX_BODY: fits */
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
