/* wire_enc.c - encoding activation packets (see wire.c for the design).
 *
 * The encoder validates everything it is given, then converts the hidden
 * states chunk by chunk (WIRE_CHUNK_BYTES of payload at a time) straight
 * into the packet, feeding each chunk to the checksum while it is still in
 * cache; with zstd each converted chunk (byte planes split per token when
 * asked) is streamed into one frame written straight into the packet,
 * with the pledged size so the frame declares its content size, and the
 * frame's bytes go to the checksum as they come. The checksum order
 * (payload, rows, header) is what makes this single pass possible. */
#include <math.h>
#include <stdlib.h>

#include "common/wire/wire.h"
#include "common/wire/wire_impl.h"

/* What validation of the encoder's inputs yields. */
typedef struct wire_enc_plan {
    uint32_t n_tokens;
    uint64_t rec; /* payload bytes per token */
    uint64_t raw_len;
    size_t payload_off;
    size_t bound; /* packet size bound */
} wire_enc_plan;

static st_err wire_enc_check(const st_wire_hdr *h, const st_wire_row *rows, const st_wire_opts *o,
                             wire_enc_plan *p)
{
    if (h == NULL || rows == NULL || o == NULL)
        return st_errorf(ST_EINVAL, "wire encode: header, rows and options are required");
    if ((unsigned)o->dtype >= ST_WIRE_DT_COUNT)
        return st_errorf(ST_ETYPE, "wire encode: dtype %u is not f32, bf16, f16 or i8",
                         (unsigned)o->dtype);
    if (o->zstd_level != 0 &&
        (o->zstd_level < ZSTD_minCLevel() || o->zstd_level > ZSTD_maxCLevel()))
        return st_errorf(ST_ERANGE, "wire encode: zstd level %d outside [%d, %d] (0 = off)",
                         o->zstd_level, ZSTD_minCLevel(), ZSTD_maxCLevel());
    if (o->plane_split && (o->zstd_level == 0 || !st_wire_dtype_planes(o->dtype)))
        return st_errorf(
            ST_EINVAL,
            "wire encode: plane split needs zstd and a 16-bit dtype (have %s, zstd level %d)",
            st_wire_dtype_name(o->dtype), o->zstd_level);
    if (h->n_rows == 0 || h->n_rows > ST_WIRE_MAX_ROWS)
        return st_errorf(ST_ERANGE, "wire encode: n_rows %u outside [1, %u]", h->n_rows,
                         ST_WIRE_MAX_ROWS);
    if (h->hidden == 0 || h->hidden > ST_WIRE_MAX_HIDDEN)
        return st_errorf(ST_ERANGE, "wire encode: hidden %u outside [1, %u]", h->hidden,
                         ST_WIRE_MAX_HIDDEN);
    uint64_t sum = 0;
    for (uint32_t r = 0; r < h->n_rows; r++) {
        if (rows[r].n_tokens == 0)
            return st_errorf(ST_ERANGE, "wire encode: row %u (session %llu) has 0 tokens", r,
                             (unsigned long long)rows[r].session_id);
        if (rows[r].n_tokens > UINT32_MAX - rows[r].pos0)
            return st_errorf(ST_ERANGE, "wire encode: row %u: pos0 %u + %u tokens overflow u32", r,
                             rows[r].pos0, rows[r].n_tokens);
        sum += rows[r].n_tokens;
    }
    if (sum > UINT32_MAX)
        return st_errorf(ST_ERANGE, "wire encode: %llu tokens in one packet (at most %u)",
                         (unsigned long long)sum, UINT32_MAX);
    p->n_tokens = (uint32_t)sum;
    p->rec = st_wire_token_bytes(o->dtype, h->hidden);
    p->raw_len = sum * p->rec;
    p->payload_off = ST_WIRE_HDR_SIZE + (size_t)h->n_rows * ST_WIRE_ROW_SIZE;
    size_t wire_max = (size_t)p->raw_len;
    if (o->zstd_level != 0) {
        wire_max = ZSTD_compressBound((size_t)p->raw_len);
        if (ZSTD_isError(wire_max))
            return st_errorf(ST_EOVERFLOW,
                             "wire encode: raw payload of %llu bytes too large for zstd",
                             (unsigned long long)p->raw_len);
    }
    p->bound = p->payload_off + wire_max;
    return ST_OK;
}

st_err st_wire_encode_size(const st_wire_hdr *h, const st_wire_row *rows, const st_wire_opts *o,
                           size_t *out)
{
    wire_enc_plan p;
    st_err e = wire_enc_check(h, rows, o, &p);
    if (e == ST_OK)
        *out = p.bound;
    return e;
}

/* wire_enc_nonfinite - the error for element idx (over all tokens). */
static st_err wire_enc_nonfinite(const st_wire_hdr *h, const st_wire_row *rows, const float *hidden,
                                 st_wire_dtype dt, uint64_t idx)
{
    uint64_t tok = idx / h->hidden, i = idx % h->hidden, first = 0;
    uint32_t r = 0;
    while (r + 1 < h->n_rows && tok >= first + rows[r].n_tokens)
        first += rows[r++].n_tokens;
    float v = hidden[idx];
    if (isfinite(v)) /* finite, but beyond bf16's or i8's range */
        return st_errorf(ST_ERANGE,
                         "wire encode: value %g at row %u (session %llu) token %llu index %llu is "
                         "out of %s's range",
                         (double)v, r, (unsigned long long)rows[r].session_id,
                         (unsigned long long)(tok - first), (unsigned long long)i,
                         st_wire_dtype_name(dt));
    return st_errorf(
        ST_ERANGE,
        "wire encode: non-finite value %g at row %u (session %llu) token %llu index %llu",
        (double)v, r, (unsigned long long)rows[r].session_id, (unsigned long long)(tok - first),
        (unsigned long long)i);
}

/* wire_enc_elems - converts n floats (16-bit or f32 dtypes) into dst,
 * and when crc is not NULL folds the bytes into *crc in the same pass;
 * returns n or the index of the first value that cannot be sent. */
static size_t wire_enc_elems(const st_convert_ops *cv, st_wire_dtype dt, const float *src,
                             void *dst, size_t n, uint64_t *clamped, uint32_t *crc)
{
    switch (dt) {
    case ST_WIRE_F32:
        return crc ? cv->f32_copy_crc(src, dst, n, crc) : cv->f32_copy(src, dst, n);
    case ST_WIRE_F16:
        return crc ? cv->f32_to_f16_crc(src, dst, n, clamped, crc)
                   : cv->f32_to_f16(src, dst, n, clamped);
    case ST_WIRE_BF16:
        return crc ? cv->f32_to_bf16_crc(src, dst, n, crc) : cv->f32_to_bf16(src, dst, n);
    default:
        return 0;
    }
}

/* wire_enc_tokens - k whole tokens into records at dst (i8: scale then
 * values); returns k * hidden or the index of the first bad value. */
static size_t wire_enc_tokens(const st_convert_ops *cv, st_wire_dtype dt, uint32_t hidden,
                              const float *src, unsigned char *dst, size_t k, uint64_t *clamped)
{
    if (dt != ST_WIRE_I8)
        return wire_enc_elems(cv, dt, src, dst, k * (size_t)hidden, clamped, NULL);
    for (size_t t = 0; t < k; t++) {
        float scale;
        unsigned char *rec = dst + t * (4 + (size_t)hidden);
        size_t r = cv->f32_to_i8(src + t * (size_t)hidden, (int8_t *)(rec + 4), hidden, &scale);
        if (r != hidden)
            return t * (size_t)hidden + r;
        uint32_t sb;
        memcpy(&sb, &scale, 4);
        st_le_st32(rec, sb);
    }
    return k * (size_t)hidden;
}

/* wire_enc_plain - payload without zstd; *bad = index of a bad value or
 * UINT64_MAX. */
static st_err wire_enc_plain(st_wire_ctx *ctx, st_wire_dtype dt, uint32_t hidden,
                             const wire_enc_plan *p, const float *src, unsigned char *pay,
                             wire_integ *g, uint64_t *clamped, uint64_t *bad)
{
    const st_convert_ops *cv = ctx->cv;
    const size_t align = st_wire_value_bytes(dt);
    const bool direct = ((uintptr_t)pay % align) == 0;
    unsigned char *s = NULL;
    if (dt == ST_WIRE_I8 || !direct) { /* whole tokens per chunk */
        size_t tpc = p->rec >= WIRE_CHUNK_BYTES ? 1 : WIRE_CHUNK_BYTES / (size_t)p->rec;
        if (!direct) {
            st_err e = wire_scratch(ctx, 0, tpc * (size_t)p->rec, &s);
            if (e != ST_OK)
                return e;
        }
        for (uint64_t t = 0; t < p->n_tokens; t += tpc) {
            size_t k = (size_t)(p->n_tokens - t < tpc ? p->n_tokens - t : tpc);
            unsigned char *dst = direct ? pay + t * p->rec : s;
            size_t r = wire_enc_tokens(cv, dt, hidden, src + t * hidden, dst, k, clamped);
            if (r != k * (size_t)hidden) {
                *bad = t * hidden + r;
                return ST_OK;
            }
            if (!direct)
                memcpy(pay + t * p->rec, s, k * (size_t)p->rec);
            wire_integ_update(g, pay + t * p->rec, k * (size_t)p->rec);
        }
        return ST_OK;
    }
    const size_t esz = st_wire_value_bytes(dt);
    const size_t per = WIRE_CHUNK_BYTES / esz;
    const uint64_t n = (uint64_t)p->n_tokens * hidden;
    for (uint64_t i = 0; i < n; i += per) {
        size_t k = (size_t)(n - i < per ? n - i : per);
        size_t r = wire_enc_elems(cv, dt, src + i, pay + i * esz, k, clamped, &g->crc);
        if (r != k) {
            *bad = i + r;
            return ST_OK;
        }
    }
    return ST_OK;
}

/* wire_zpush - streams in[0, n) into the frame, feeding output to g. */
static st_err wire_zpush(ZSTD_CCtx *c, const void *src, size_t n, ZSTD_outBuffer *out,
                         ZSTD_EndDirective mode, wire_integ *g)
{
    ZSTD_inBuffer in = {src, n, 0};
    for (;;) {
        size_t before = out->pos;
        size_t r = ZSTD_compressStream2(c, out, &in, mode);
        if (ZSTD_isError(r))
            return st_err_zstd(r, "wire encode: zstd");
        wire_integ_update(g, (unsigned char *)out->dst + before, out->pos - before);
        bool done = mode == ZSTD_e_end ? r == 0 : in.pos == in.size;
        if (done)
            return ST_OK;
        if (out->pos == out->size)
            return st_errorf(ST_EINTERNAL, "wire encode: zstd output exceeded its bound %zu",
                             out->size);
    }
}

/* wire_enc_zstd - payload as one zstd frame into pay[0, cap). */
static st_err wire_enc_zstd(st_wire_ctx *ctx, const st_wire_opts *o, uint32_t hidden,
                            const wire_enc_plan *p, const float *src, unsigned char *pay,
                            size_t cap, wire_integ *g, uint64_t *clamped, uint64_t *bad,
                            size_t *wire_len)
{
    if (ctx->cctx == NULL && (ctx->cctx = ZSTD_createCCtx()) == NULL)
        return st_errorf(ST_ENOMEM, "wire: ZSTD_createCCtx failed");
    ZSTD_CCtx *c = ctx->cctx;
    size_t r = ZSTD_CCtx_reset(c, ZSTD_reset_session_and_parameters);
    if (!ZSTD_isError(r))
        r = ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, o->zstd_level);
    if (!ZSTD_isError(r))
        r = ZSTD_CCtx_setParameter(c, ZSTD_c_windowLog, ST_WIRE_ZSTD_WINDOW_LOG);
    if (!ZSTD_isError(r))
        r = ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 0);
    if (!ZSTD_isError(r))
        r = ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, 1);
    if (!ZSTD_isError(r))
        r = ZSTD_CCtx_setPledgedSrcSize(c, p->raw_len);
    if (ZSTD_isError(r))
        return st_err_zstd(r, "wire encode: zstd setup");
    size_t tpc = p->rec >= WIRE_CHUNK_BYTES ? 1 : WIRE_CHUNK_BYTES / (size_t)p->rec;
    unsigned char *s0 = NULL, *s1 = NULL;
    st_err e = wire_scratch(ctx, 0, tpc * (size_t)p->rec, &s0);
    if (e == ST_OK && o->plane_split)
        e = wire_scratch(ctx, 1, tpc * (size_t)p->rec, &s1);
    ZSTD_outBuffer out = {pay, cap, 0};
    for (uint64_t t = 0; e == ST_OK && t < p->n_tokens; t += tpc) {
        size_t k = (size_t)(p->n_tokens - t < tpc ? p->n_tokens - t : tpc);
        size_t n = wire_enc_tokens(ctx->cv, o->dtype, hidden, src + t * hidden, s0, k, clamped);
        if (n != k * (size_t)hidden) {
            *bad = t * hidden + n;
            return ST_OK;
        }
        const unsigned char *chunk = s0;
        if (o->plane_split) {
            for (size_t j = 0; j < k; j++)
                wire_split_planes((const uint16_t *)(const void *)(s0 + j * p->rec),
                                  s1 + j * p->rec, hidden);
            chunk = s1;
        }
        e = wire_zpush(c, chunk, k * (size_t)p->rec, &out, ZSTD_e_continue, g);
    }
    if (e == ST_OK)
        e = wire_zpush(c, NULL, 0, &out, ZSTD_e_end, g);
    *wire_len = out.pos;
    return e;
}

st_err st_wire_encode_buf(const st_wire_hdr *h, const st_wire_row *rows, const float *hidden,
                          const st_wire_opts *o, st_wire_ctx *ctx, void *buf, size_t cap,
                          size_t *len, st_wire_stats *stats)
{
    wire_enc_plan p;
    st_err e = wire_enc_check(h, rows, o, &p);
    if (e != ST_OK)
        return e;
    if (hidden == NULL || ctx == NULL || buf == NULL || len == NULL)
        return st_errorf(ST_EINVAL, "wire encode: hidden, ctx, buf and len are required");
    if (cap < p.bound)
        return st_errorf(ST_ERANGE, "wire encode: buffer of %zu bytes, the packet may need %zu",
                         cap, p.bound);
    unsigned char *b = buf;
    unsigned char *pay = b + p.payload_off;
    wire_integ g;
    wire_integ_init(&g, ctx->cv);
    uint64_t clamped = 0, bad = UINT64_MAX;
    size_t wire_len = (size_t)p.raw_len;
    if (o->zstd_level != 0)
        e = wire_enc_zstd(ctx, o, h->hidden, &p, hidden, pay, cap - p.payload_off, &g, &clamped,
                          &bad, &wire_len);
    else
        e = wire_enc_plain(ctx, o->dtype, h->hidden, &p, hidden, pay, &g, &clamped, &bad);
    if (e == ST_OK && bad != UINT64_MAX)
        e = wire_enc_nonfinite(h, rows, hidden, o->dtype, bad);
    if (e != ST_OK)
        return e;
    for (uint32_t r = 0; r < h->n_rows; r++) {
        unsigned char *q = b + ST_WIRE_HDR_SIZE + (size_t)r * ST_WIRE_ROW_SIZE;
        st_le_st64(q, rows[r].session_id);
        st_le_st32(q + 8, rows[r].pos0);
        st_le_st32(q + 12, rows[r].n_tokens);
    }
    wire_integ_update(&g, b + ST_WIRE_HDR_SIZE, p.payload_off - ST_WIRE_HDR_SIZE);
    memset(b, 0, ST_WIRE_HDR_SIZE);
    uint32_t flags = (o->zstd_level ? ST_WIRE_F_ZSTD : 0) | (o->plane_split ? ST_WIRE_F_PLANES : 0);
    st_le_st32(b + ST_WIRE_OFF_MAGIC, ST_WIRE_MAGIC);
    st_le_st16(b + ST_WIRE_OFF_VERSION, ST_WIRE_VERSION);
    st_le_st16(b + ST_WIRE_OFF_HDR_LEN, ST_WIRE_HDR_SIZE);
    st_le_st32(b + ST_WIRE_OFF_FLAGS, flags);
    b[ST_WIRE_OFF_DTYPE] = (unsigned char)o->dtype;
    st_le_st16(b + ST_WIRE_OFF_STAGE, h->stage);
    st_le_st64(b + ST_WIRE_OFF_EPOCH, h->epoch);
    memcpy(b + ST_WIRE_OFF_PLAN, h->plan_hash, ST_WIRE_PLAN_HASH_SIZE);
    st_le_st32(b + ST_WIRE_OFF_N_ROWS, h->n_rows);
    st_le_st32(b + ST_WIRE_OFF_HIDDEN, h->hidden);
    st_le_st32(b + ST_WIRE_OFF_N_TOKENS, p.n_tokens);
    st_le_st64(b + ST_WIRE_OFF_RAW_LEN, p.raw_len);
    st_le_st64(b + ST_WIRE_OFF_WIRE_LEN, wire_len);
    wire_integ_header(&g, b);
    wire_integ_final(&g, b + ST_WIRE_OFF_TAG);
    *len = p.payload_off + wire_len;
    if (stats != NULL) {
        stats->packet_bytes = *len;
        stats->raw_bytes = p.raw_len;
        stats->wire_bytes = wire_len;
        stats->n_clamped = clamped;
    }
    return ST_OK;
}

st_err st_wire_encode(const st_wire_hdr *h, const st_wire_row *rows, const float *hidden,
                      const st_wire_opts *o, st_wire_ctx *ctx, nng_msg **out, st_wire_stats *stats)
{
    if (out == NULL)
        return st_errorf(ST_EINVAL, "wire encode: out is NULL");
    size_t bound, len;
    st_err e = st_wire_encode_size(h, rows, o, &bound);
    if (e != ST_OK)
        return e;
    nng_msg *m;
    int rv = nng_msg_alloc(&m, bound);
    if (rv != 0)
        return st_err_nng(rv, "wire encode: nng_msg_alloc");
    e = st_wire_encode_buf(h, rows, hidden, o, ctx, nng_msg_body(m), bound, &len, stats);
    if (e == ST_OK && len < bound && (rv = nng_msg_chop(m, bound - len)) != 0)
        e = st_err_nng(rv, "wire encode: nng_msg_chop");
    if (e != ST_OK) {
        nng_msg_free(m);
        return e;
    }
    *out = m;
    return ST_OK;
}
