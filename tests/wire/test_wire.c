/* test_wire.c - the activation packet codec: round trips of every dtype
 * with and without zstd and byte planes, through caller buffers, odd
 * addresses and nng messages; f16 clamp counting; NaN rejection; argument
 * errors; bytes per token; negotiation. main() also runs the conversion and
 * malformed-corpus suites, and `--write-corpus DIR` writes fuzz seeds.
 *
 * Usage: test_wire [--exhaustive | --write-corpus DIR] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/convert.h"
#include "kernels/fp16.h"
#include "tests/wire/wire_test.h"

uint64_t wt_next(wt_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double wt_unit(wt_rng *r) { return (double)(wt_next(r) >> 11) * 0x1p-53; }

float wt_gauss(wt_rng *r)
{
    double u = wt_unit(r), v = wt_unit(r);
    return (float)(sqrt(-2.0 * log(u + 0x1p-60)) * cos(6.283185307179586 * v));
}

void wt_activations(float *x, size_t n_tok, uint32_t hidden, uint64_t seed)
{
    wt_rng r = {seed};
    for (size_t t = 0; t < n_tok; t++) {
        for (uint32_t i = 0; i < hidden; i++) {
            float v = wt_gauss(&r);
            if (i % 977 == 13) /* a few outlier channels */
                v *= 20.0f;
            if (wt_next(&r) % 1000 == 0)
                v *= 50.0f;
            x[t * hidden + i] = v;
        }
    }
}

const uint8_t *wt_plan_hash(void)
{
    static const uint8_t h[ST_WIRE_PLAN_HASH_SIZE] =
        {WT_PLAN_BYTE, WT_PLAN_BYTE, WT_PLAN_BYTE, WT_PLAN_BYTE, WT_PLAN_BYTE, WT_PLAN_BYTE,
         WT_PLAN_BYTE, WT_PLAN_BYTE, WT_PLAN_BYTE, WT_PLAN_BYTE, WT_PLAN_BYTE, WT_PLAN_BYTE,
         WT_PLAN_BYTE, WT_PLAN_BYTE, WT_PLAN_BYTE, WT_PLAN_BYTE, WT_PLAN_BYTE, WT_PLAN_BYTE,
         WT_PLAN_BYTE, WT_PLAN_BYTE, WT_PLAN_BYTE, WT_PLAN_BYTE, WT_PLAN_BYTE, WT_PLAN_BYTE,
         WT_PLAN_BYTE, WT_PLAN_BYTE, WT_PLAN_BYTE, WT_PLAN_BYTE, WT_PLAN_BYTE, WT_PLAN_BYTE,
         WT_PLAN_BYTE, WT_PLAN_BYTE};
    return h;
}

void wt_put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

void wt_put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void wt_header(st_wire_hdr *h, uint32_t hidden)
{
    memset(h, 0, sizeof *h);
    h->epoch = WT_EPOCH;
    h->stage = WT_STAGE;
    h->n_rows = 3;
    h->hidden = hidden;
    memcpy(h->plan_hash, wt_plan_hash(), ST_WIRE_PLAN_HASH_SIZE);
}

void wt_build(wt_pkt *p, st_wire_dtype dt, int zstd_level, int planes, uint32_t hidden)
{
    memset(p, 0, sizeof *p);
    wt_header(&p->h, hidden);
    p->rows[0] = (st_wire_row){.session_id = 1001, .pos0 = 17, .n_tokens = 1};
    p->rows[1] = (st_wire_row){.session_id = 1002, .pos0 = 0, .n_tokens = 2};
    p->rows[2] = (st_wire_row){.session_id = 1003, .pos0 = 5, .n_tokens = 3};
    p->n_floats = 6 * (size_t)hidden;
    p->x = malloc(p->n_floats * sizeof *p->x);
    wt_activations(p->x, 6, hidden, 5 + hidden + (uint64_t)dt);
    st_wire_opts o = {.dtype = dt, .zstd_level = zstd_level, .plane_split = planes != 0};
    st_wire_ctx *ctx;
    ck_assert_int_eq(st_wire_ctx_new(0, &ctx), ST_OK);
    size_t cap;
    ck_assert_int_eq(st_wire_encode_size(&p->h, p->rows, &o, &cap), ST_OK);
    p->buf = malloc(cap + 64);
    st_err e = st_wire_encode_buf(&p->h, p->rows, p->x, &o, ctx, p->buf, cap, &p->len, NULL);
    ck_assert_msg(e == ST_OK, "wt_build: %s", st_errmsg(e));
    st_wire_ctx_free(ctx);
}

void wt_free(wt_pkt *p)
{
    free(p->buf);
    free(p->x);
}

void wt_expect(st_wire_expect *e)
{
    memset(e, 0, sizeof *e);
    e->epoch = WT_EPOCH;
    e->plan_hash = wt_plan_hash();
    e->stage = WT_STAGE;
    e->hidden = WT_HIDDEN;
    e->max_tokens = WT_MAX_TOKENS;
}

/* wt_reference - what decoding must yield, from the scalar references. */
static void wt_reference(st_wire_dtype dt, const float *x, size_t n_tok, uint32_t hidden,
                         float *out)
{
    const st_convert_ops *ref = st_convert_ref();
    size_t n = n_tok * hidden;
    uint16_t *h = malloc(n * 2 + 2);
    int8_t *q = malloc(n + 1);
    uint64_t c = 0;
    switch (dt) {
    case ST_WIRE_F32:
        memcpy(out, x, n * sizeof *x);
        break;
    case ST_WIRE_F16:
        ck_assert_uint_eq(ref->f32_to_f16(x, h, n, &c), n);
        ref->f16_to_f32(h, out, n);
        break;
    case ST_WIRE_BF16:
        ck_assert_uint_eq(ref->f32_to_bf16(x, h, n), n);
        ref->bf16_to_f32(h, out, n);
        break;
    default:
        for (size_t t = 0; t < n_tok; t++) {
            float s;
            ck_assert_uint_eq(ref->f32_to_i8(x + t * hidden, q, hidden, &s), hidden);
            ref->i8_to_f32(q, s, out + t * hidden, hidden);
        }
    }
    free(h);
    free(q);
}

/* wt_roundtrip - encode with ctx, decode, compare with the references and
 * with what a reference-only context encodes. */
static void wt_roundtrip(st_wire_dtype dt, int level, int planes, uint32_t hidden,
                         const st_wire_row *rows, uint32_t n_rows, size_t misalign)
{
    size_t n_tok = 0;
    for (uint32_t r = 0; r < n_rows; r++)
        n_tok += rows[r].n_tokens;
    size_t n = n_tok * hidden;
    float *x = malloc(n * sizeof *x), *want = malloc(n * sizeof *want);
    float *got = malloc((n + 8) * sizeof *got);
    wt_activations(x, n_tok, hidden, 1000 + hidden * 7 + n_tok);
    wt_reference(dt, x, n_tok, hidden, want);
    st_wire_hdr h;
    wt_header(&h, hidden);
    h.n_rows = n_rows;
    st_wire_opts o = {.dtype = dt, .zstd_level = level, .plane_split = planes != 0};
    st_wire_ctx *ctx, *rctx;
    ck_assert_int_eq(st_wire_ctx_new(0, &ctx), ST_OK);
    ck_assert_int_eq(st_wire_ctx_new(1, &rctx), ST_OK);
    size_t cap, len, rlen;
    ck_assert_int_eq(st_wire_encode_size(&h, rows, &o, &cap), ST_OK);
    unsigned char *mem = malloc(cap + 16), *rmem = malloc(cap + 16);
    unsigned char *buf = mem + misalign;
    st_wire_stats st;
    st_err e = st_wire_encode_buf(&h, rows, x, &o, ctx, buf, cap, &len, &st);
    ck_assert_msg(e == ST_OK, "%s", st_errmsg(e));
    ck_assert_int_eq(st_wire_encode_buf(&h, rows, x, &o, rctx, rmem, cap, &rlen, NULL), ST_OK);
    ck_assert_msg(len == rlen && memcmp(buf, rmem, len) == 0,
                  "%s zstd %d planes %d: SIMD and reference packets differ", st_wire_dtype_name(dt),
                  level, planes);
    ck_assert_uint_eq(st.packet_bytes, len);
    ck_assert_uint_eq(st.raw_bytes, n_tok * (dt == ST_WIRE_F32  ? 4 * hidden
                                             : dt == ST_WIRE_I8 ? 4 + hidden
                                                                : 2 * hidden));
    ck_assert_uint_eq(st.wire_bytes + ST_WIRE_HDR_SIZE + n_rows * ST_WIRE_ROW_SIZE, len);
    if (level == 0)
        ck_assert_uint_eq(st.wire_bytes, st.raw_bytes);

    st_wire_expect ex;
    wt_expect(&ex);
    ex.hidden = hidden;
    st_wire_hdr d;
    st_wire_row rd[8];
    for (int k = 0; k < 2; k++) { /* SIMD and reference decoders */
        for (size_t i = 0; i < n + 8; i++)
            got[i] = -7.0f;
        e = st_wire_decode(k ? rctx : ctx, buf, len, &ex, &d, rd, 8, got, n);
        ck_assert_msg(e == ST_OK, "decode %s zstd %d planes %d hidden %u: %s",
                      st_wire_dtype_name(dt), level, planes, hidden, st_errmsg(e));
        ck_assert_msg(memcmp(got, want, n * sizeof *got) == 0, "%s zstd %d: values differ",
                      st_wire_dtype_name(dt), level);
        ck_assert(got[n] == -7.0f); /* nothing beyond the tokens */
    }
    ck_assert_uint_eq(d.epoch, WT_EPOCH);
    ck_assert_uint_eq(d.stage, WT_STAGE);
    ck_assert_int_eq(d.dtype, dt);
    ck_assert_uint_eq(d.n_tokens, n_tok);
    ck_assert_uint_eq(d.flags, (level ? ST_WIRE_F_ZSTD : 0u) | (planes ? ST_WIRE_F_PLANES : 0u));
    ck_assert(memcmp(d.plan_hash, wt_plan_hash(), ST_WIRE_PLAN_HASH_SIZE) == 0);
    for (uint32_t r = 0; r < n_rows; r++) {
        ck_assert_uint_eq(rd[r].session_id, rows[r].session_id);
        ck_assert_uint_eq(rd[r].pos0, rows[r].pos0);
        ck_assert_uint_eq(rd[r].n_tokens, rows[r].n_tokens);
    }
    st_wire_ctx_free(ctx);
    st_wire_ctx_free(rctx);
    free(mem);
    free(rmem);
    free(x);
    free(want);
    free(got);
}

/* Combinations of the round-trip loop test: dtype x zstd x planes. */
typedef struct wt_combo {
    st_wire_dtype dt;
    int level, planes;
} wt_combo;

static size_t wt_combos(wt_combo *c)
{
    static const int levels[] = {0, 1, 3};
    size_t n = 0;
    for (int dt = 0; dt < ST_WIRE_DT_COUNT; dt++)
        for (size_t l = 0; l < 3; l++)
            for (int planes = 0; planes <= 1; planes++) {
                bool sixteen = dt == ST_WIRE_F16 || dt == ST_WIRE_BF16;
                if (planes && (!levels[l] || !sixteen))
                    continue;
                if (c != NULL)
                    c[n] = (wt_combo){(st_wire_dtype)dt, levels[l], planes};
                n++;
            }
    return n;
}

START_TEST(test_roundtrip)
{
    wt_combo c[64];
    ck_assert_uint_le(wt_combos(NULL), 64);
    wt_combos(c);
    static const uint32_t hiddens[] = {1, 7, 64, 1000, 4096};
    static const st_wire_row rows[4] = {
        {.session_id = 11, .pos0 = 0, .n_tokens = 1},
        {.session_id = 12, .pos0 = 40, .n_tokens = 5},
        {.session_id = 13, .pos0 = 3, .n_tokens = 1},
        {.session_id = 14, .pos0 = 100, .n_tokens = 9},
    };
    for (size_t k = 0; k < sizeof hiddens / sizeof hiddens[0]; k++)
        wt_roundtrip(c[_i].dt, c[_i].level, c[_i].planes, hiddens[k], rows, 4, 0);
}
END_TEST

START_TEST(test_large_and_misaligned)
{
    st_wire_row big = {.session_id = 5, .pos0 = 0, .n_tokens = 256};
    wt_roundtrip(ST_WIRE_F16, 1, 1, 4096, &big, 1, 0);
    wt_roundtrip(ST_WIRE_I8, 1, 0, 2048, &big, 1, 0);
    wt_roundtrip(ST_WIRE_BF16, 0, 0, 4096, &big, 1, 0);
    st_wire_row rows[2] = {{.session_id = 1, .pos0 = 0, .n_tokens = 3},
                           {.session_id = 2, .pos0 = 9, .n_tokens = 2}};
    for (int dt = 0; dt < ST_WIRE_DT_COUNT; dt++)
        for (size_t mis = 1; mis < 4; mis++) {
            wt_roundtrip((st_wire_dtype)dt, 0, 0, 33, rows, 2, mis);
            wt_roundtrip((st_wire_dtype)dt, 1, 0, 33, rows, 2, mis);
        }
}
END_TEST

START_TEST(test_nng_msg)
{
    wt_pkt p;
    wt_build(&p, ST_WIRE_BF16, 1, 1, WT_HIDDEN);
    st_wire_opts o = {.dtype = ST_WIRE_BF16, .zstd_level = 1, .plane_split = true};
    st_wire_ctx *ctx;
    ck_assert_int_eq(st_wire_ctx_new(0, &ctx), ST_OK);
    nng_msg *m = NULL;
    st_wire_stats st;
    ck_assert_int_eq(st_wire_encode(&p.h, p.rows, p.x, &o, ctx, &m, &st), ST_OK);
    ck_assert_uint_eq(nng_msg_len(m), st.packet_bytes);
    ck_assert_uint_eq(nng_msg_len(m), p.len);
    ck_assert(memcmp(nng_msg_body(m), p.buf, p.len) == 0);
    st_wire_expect ex;
    wt_expect(&ex);
    st_wire_hdr h;
    st_wire_row rows[3];
    float *out = malloc(p.n_floats * sizeof *out), *want = malloc(p.n_floats * sizeof *want);
    ck_assert_int_eq(st_wire_decode(ctx, nng_msg_body(m), nng_msg_len(m), &ex, &h, rows, 3, out,
                                    p.n_floats),
                     ST_OK);
    wt_reference(ST_WIRE_BF16, p.x, 6, WT_HIDDEN, want);
    ck_assert(memcmp(out, want, p.n_floats * sizeof *out) == 0);
    nng_msg_free(m);
    /* an encode error leaves no message behind */
    p.x[3] = NAN;
    m = NULL;
    ck_assert_int_eq(st_wire_encode(&p.h, p.rows, p.x, &o, ctx, &m, NULL), ST_ERANGE);
    ck_assert_ptr_null(m);
    st_wire_ctx_free(ctx);
    free(out);
    free(want);
    wt_free(&p);
}
END_TEST

START_TEST(test_f16_clamp)
{
    st_wire_hdr h;
    wt_header(&h, 8);
    h.n_rows = 1;
    st_wire_row row = {.session_id = 3, .pos0 = 0, .n_tokens = 2};
    float x[16] = {1.0f,  65504.0f, 65505.0f, -65504.5f, 1e6f, -3e38f, 70000.0f, 0.5f,
                   -1e5f, 2.0f,     3.0f,     65519.0f,  4.0f, 5.0f,   6.0f,     -65503.0f};
    for (int level = 0; level <= 1; level++) {
        st_wire_opts o = {.dtype = ST_WIRE_F16, .zstd_level = level};
        st_wire_ctx *ctx;
        ck_assert_int_eq(st_wire_ctx_new(0, &ctx), ST_OK);
        unsigned char buf[1024];
        size_t len;
        st_wire_stats st;
        ck_assert_int_eq(st_wire_encode_buf(&h, &row, x, &o, ctx, buf, sizeof buf, &len, &st),
                         ST_OK);
        ck_assert_uint_eq(st.n_clamped, 7);
        st_wire_expect ex;
        wt_expect(&ex);
        ex.hidden = 8;
        st_wire_hdr d;
        st_wire_row rd;
        float out[16];
        ck_assert_int_eq(st_wire_decode(ctx, buf, len, &ex, &d, &rd, 1, out, 16), ST_OK);
        ck_assert(out[1] == 65504.0f && out[2] == 65504.0f && out[3] == -65504.0f);
        ck_assert(out[4] == 65504.0f && out[5] == -65504.0f && out[6] == 65504.0f);
        ck_assert(out[8] == -65504.0f && out[11] == 65504.0f && out[15] == -65504.0f);
        st_wire_ctx_free(ctx);
    }
}
END_TEST

START_TEST(test_nan_rejected)
{
    static const uint32_t bad[] = {0x7fc00000u, 0x7f800000u, 0xff800000u};
    for (int dt = 0; dt < ST_WIRE_DT_COUNT; dt++)
        for (int level = 0; level <= 1; level++)
            for (size_t b = 0; b < 3; b++) {
                wt_pkt p;
                wt_build(&p, (st_wire_dtype)dt, 0, 0, WT_HIDDEN);
                /* row 2 (session 1003) starts at token 3; token 1 of it is token 4 */
                p.x[4 * WT_HIDDEN + 5] = st_bits_f32(bad[b]);
                st_wire_opts o = {.dtype = (st_wire_dtype)dt, .zstd_level = level};
                st_wire_ctx *ctx;
                ck_assert_int_eq(st_wire_ctx_new(0, &ctx), ST_OK);
                size_t len, cap;
                ck_assert_int_eq(st_wire_encode_size(&p.h, p.rows, &o, &cap), ST_OK);
                unsigned char *buf = malloc(cap);
                st_err e = st_wire_encode_buf(&p.h, p.rows, p.x, &o, ctx, buf, cap, &len, NULL);
                ck_assert_int_eq(e, ST_ERANGE);
                const char *d = st_errdetail();
                ck_assert_msg(strstr(d, "row 2") && strstr(d, "session 1003") &&
                                  strstr(d, "token 1 ") && strstr(d, "index 5"),
                              "detail: %s", d);
                free(buf);
                st_wire_ctx_free(ctx);
                wt_free(&p);
            }
    /* bf16 refuses finite values that would round to Inf; f16 clamps them */
    wt_pkt p;
    wt_build(&p, ST_WIRE_F32, 0, 0, WT_HIDDEN);
    p.x[7] = 3.4e38f;
    st_wire_ctx *ctx;
    ck_assert_int_eq(st_wire_ctx_new(0, &ctx), ST_OK);
    unsigned char *buf = malloc(p.len + 1024);
    size_t len;
    st_wire_opts o = {.dtype = ST_WIRE_BF16};
    ck_assert_int_eq(st_wire_encode_buf(&p.h, p.rows, p.x, &o, ctx, buf, p.len, &len, NULL),
                     ST_ERANGE);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "bf16"));
    o.dtype = ST_WIRE_F16;
    ck_assert_int_eq(st_wire_encode_buf(&p.h, p.rows, p.x, &o, ctx, buf, p.len, &len, NULL), ST_OK);
    free(buf);
    st_wire_ctx_free(ctx);
    wt_free(&p);
}
END_TEST

START_TEST(test_encode_args)
{
    wt_pkt p;
    wt_build(&p, ST_WIRE_F32, 0, 0, WT_HIDDEN);
    st_wire_ctx *ctx;
    ck_assert_int_eq(st_wire_ctx_new(0, &ctx), ST_OK);
    unsigned char *buf = malloc(p.len + 4096);
    size_t len, cap;
    st_wire_opts o = {.dtype = ST_WIRE_F32, .plane_split = true, .zstd_level = 1};
    ck_assert_int_eq(st_wire_encode_size(&p.h, p.rows, &o, &cap), ST_EINVAL);
    o = (st_wire_opts){.dtype = ST_WIRE_F16, .plane_split = true};
    ck_assert_int_eq(st_wire_encode_size(&p.h, p.rows, &o, &cap), ST_EINVAL);
    o = (st_wire_opts){.dtype = ST_WIRE_F16, .zstd_level = 99};
    ck_assert_int_eq(st_wire_encode_size(&p.h, p.rows, &o, &cap), ST_ERANGE);
    o = (st_wire_opts){.dtype = (st_wire_dtype)9};
    ck_assert_int_eq(st_wire_encode_size(&p.h, p.rows, &o, &cap), ST_ETYPE);
    o = (st_wire_opts){.dtype = ST_WIRE_F32};
    ck_assert_int_eq(st_wire_encode_buf(&p.h, p.rows, p.x, &o, ctx, buf, p.len - 1, &len, NULL),
                     ST_ERANGE);
    ck_assert_int_eq(st_wire_encode_buf(&p.h, p.rows, p.x, &o, ctx, buf, p.len, &len, NULL), ST_OK);
    ck_assert_uint_eq(len, p.len);
    ck_assert(memcmp(buf, p.buf, len) == 0); /* deterministic */
    p.rows[1].n_tokens = 0;
    ck_assert_int_eq(st_wire_encode_size(&p.h, p.rows, &o, &cap), ST_ERANGE);
    p.rows[1].n_tokens = 2;
    p.rows[1].pos0 = UINT32_MAX - 1;
    ck_assert_int_eq(st_wire_encode_size(&p.h, p.rows, &o, &cap), ST_ERANGE);
    p.rows[1].pos0 = 0;
    p.h.n_rows = 0;
    ck_assert_int_eq(st_wire_encode_size(&p.h, p.rows, &o, &cap), ST_ERANGE);
    p.h.n_rows = 3;
    p.h.hidden = ST_WIRE_MAX_HIDDEN + 1;
    ck_assert_int_eq(st_wire_encode_size(&p.h, p.rows, &o, &cap), ST_ERANGE);
    free(buf);
    st_wire_ctx_free(ctx);
    wt_free(&p);
}
END_TEST

START_TEST(test_token_bytes)
{
    ck_assert_uint_eq(st_wire_token_bytes(ST_WIRE_F32, 4096), 16384);
    ck_assert_uint_eq(st_wire_token_bytes(ST_WIRE_BF16, 4096), 8192);
    ck_assert_uint_eq(st_wire_token_bytes(ST_WIRE_F16, 4096), 8192);
    ck_assert_uint_eq(st_wire_token_bytes(ST_WIRE_I8, 4096), 4100); /* f32 scale + int8 values */
    ck_assert_uint_eq(st_wire_token_bytes(ST_WIRE_F32, ST_WIRE_MAX_HIDDEN), 4ull << 20);
    ck_assert_uint_eq(st_wire_token_bytes(ST_WIRE_DT_COUNT, 64), 0);
    /* the table's other properties (common/wire/wire.c) */
    ck_assert_uint_eq(st_wire_value_bytes(ST_WIRE_F32), 4);
    ck_assert_uint_eq(st_wire_value_bytes(ST_WIRE_BF16), 2);
    ck_assert_uint_eq(st_wire_value_bytes(ST_WIRE_F16), 2);
    ck_assert_uint_eq(st_wire_value_bytes(ST_WIRE_I8), 1);
    ck_assert_uint_eq(st_wire_value_bytes(ST_WIRE_DT_COUNT), 0);
    ck_assert(!st_wire_dtype_planes(ST_WIRE_F32));
    ck_assert(st_wire_dtype_planes(ST_WIRE_BF16));
    ck_assert(st_wire_dtype_planes(ST_WIRE_F16));
    ck_assert(!st_wire_dtype_planes(ST_WIRE_I8));
    ck_assert(!st_wire_dtype_planes(ST_WIRE_DT_COUNT));
    const st_wire_dtype by_precision[] = {ST_WIRE_F32, ST_WIRE_F16, ST_WIRE_BF16, ST_WIRE_I8};
    for (size_t k = 0; k < ST_WIRE_DT_COUNT; k++)
        ck_assert_int_eq(st_wire_dtype_by_precision(k), by_precision[k]);
    ck_assert_int_eq(st_wire_dtype_by_precision(ST_WIRE_DT_COUNT), ST_WIRE_DT_COUNT);
    /* the packets' raw length is tokens x this */
    wt_pkt p;
    for (int dt = 0; dt < ST_WIRE_DT_COUNT; dt++) {
        wt_build(&p, (st_wire_dtype)dt, 0, 0, WT_HIDDEN);
        ck_assert_uint_eq(p.len - ST_WIRE_HDR_SIZE - 3 * ST_WIRE_ROW_SIZE,
                          6 * st_wire_token_bytes((st_wire_dtype)dt, WT_HIDDEN));
        wt_free(&p);
    }
}
END_TEST

START_TEST(test_names_and_ratio)
{
    st_wire_dtype d;
    for (int i = 0; i < ST_WIRE_DT_COUNT; i++) {
        ck_assert_int_eq(st_wire_dtype_from_name(st_wire_dtype_name((st_wire_dtype)i), &d), ST_OK);
        ck_assert_int_eq(d, i);
    }
    ck_assert_int_eq(st_wire_dtype_from_name("q8", &d), ST_ETYPE);
    /* ST_WIRE_DTYPE_NAMES spells the table's names in code order */
    char names[64] = "";
    for (int i = 0; i < ST_WIRE_DT_COUNT; i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                 st_wire_dtype_name((st_wire_dtype)i));
    ck_assert_str_eq(names, ST_WIRE_DTYPE_NAMES);
    /* zstd makes activation-like f16 smaller */
    st_wire_row row = {.session_id = 1, .pos0 = 0, .n_tokens = 32};
    float *x = malloc(32 * 2048 * sizeof *x);
    wt_activations(x, 32, 2048, 77);
    st_wire_hdr h;
    wt_header(&h, 2048);
    h.n_rows = 1;
    st_wire_ctx *ctx;
    ck_assert_int_eq(st_wire_ctx_new(0, &ctx), ST_OK);
    size_t cap, len;
    st_wire_opts o = {.dtype = ST_WIRE_F16, .zstd_level = 1, .plane_split = true};
    ck_assert_int_eq(st_wire_encode_size(&h, &row, &o, &cap), ST_OK);
    unsigned char *buf = malloc(cap);
    st_wire_stats st;
    ck_assert_int_eq(st_wire_encode_buf(&h, &row, x, &o, ctx, buf, cap, &len, &st), ST_OK);
    ck_assert_msg(st.wire_bytes < st.raw_bytes * 95 / 100, "zstd ratio %.3f",
                  (double)st.raw_bytes / (double)st.wire_bytes);
    free(buf);
    free(x);
    st_wire_ctx_free(ctx);
}
END_TEST

Suite *wt_codec_suite(void)
{
    Suite *s = suite_create("wire_codec");
    TCase *tc = tcase_create("codec");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_roundtrip, 0, (int)wt_combos(NULL));
    tcase_add_test(tc, test_large_and_misaligned);
    tcase_add_test(tc, test_nng_msg);
    tcase_add_test(tc, test_f16_clamp);
    tcase_add_test(tc, test_nan_rejected);
    tcase_add_test(tc, test_encode_args);
    tcase_add_test(tc, test_token_bytes);
    tcase_add_test(tc, test_names_and_ratio);
    suite_add_tcase(s, tc);
    return s;
}

/* The corpus is written from inside a test: the packet builders use
 * Check's assertions, which need a running test. */
static const char *wt_corpus_dir;

START_TEST(test_write_corpus) { ck_assert_int_eq(wt_write_corpus(wt_corpus_dir), 0); }
END_TEST

int main(int argc, char **argv)
{
    int exhaustive = argc == 2 && strcmp(argv[1], "--exhaustive") == 0;
    int corpus = argc == 3 && strcmp(argv[1], "--write-corpus") == 0;
    if (argc > 1 && !exhaustive && !corpus) {
        fprintf(stderr, "usage: test_wire [--exhaustive | --write-corpus DIR]\n");
        return 2;
    }
    SRunner *sr;
    if (corpus) {
        wt_corpus_dir = argv[2];
        Suite *s = suite_create("wire_write_corpus");
        TCase *tc = tcase_create("write");
        tcase_add_test(tc, test_write_corpus);
        suite_add_tcase(s, tc);
        sr = srunner_create(s);
    } else {
        sr = srunner_create(wt_convert_suite(exhaustive));
        if (!exhaustive) {
            srunner_add_suite(sr, wt_codec_suite());
            srunner_add_suite(sr, wt_corpus_suite());
        }
    }
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
