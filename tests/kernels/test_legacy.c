/* test_legacy.c - the legacy and IQ4 quant kernels (Q4_1, Q5_0, Q5_1,
 * IQ4_NL, IQ4_XS weights; Q8_1 activations) of every variant.
 *
 * - Layouts: blocks packed here from chosen integer quants (this file's
 *   own packer, written from the layouts of kernels.h) dequantize to
 *   exactly (float)q * d (+ m), IQ4 levels included; llama.cpp's own
 *   dequantization of whole files is test_kquant_oracle.c's.
 * - Q8_1: d and quants as the Q8_0 quantizer's, s = f16(sum(q) * amax /
 *   127) computed here; llama.cpp's bytes on a fixed input are
 *   test_kquant_oracle.c's.
 * - Products of random rows (every bit random, sane scales): each
 *   variant's mul_mat of one row equals the double dot of the dequantized
 *   weights and activations within float rounding (plus, for Q4_1 / Q5_1,
 *   the f16 rounding of s, llama.cpp's own approximation).
 * - mul_mat: each SIMD variant equals the reference bit for bit for many
 *   shapes, batch sizes and [i0, i1) splits (integer block sums are exact
 *   and the float steps are the same), and rows alone equal rows in a
 *   batch.
 * A suite of the 'kernels' test (test_kernels.c runs it). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/fp16.h"
#include "kernels/kernels.h"
#include "tests/kernels/tk_suites.h"
#include "tests/kernels/tk_util.h"

#define TL_U 0x1p-24     /* float's unit roundoff */
#define TL_MAX_BLOCK 136 /* the largest block here (IQ4_XS) */
/* a Q8_1 value's error in units of amax / 127: half a step, plus 127 times
 * the f16 rounding of d (2^-11), plus slack */
#define TL_Q8_ERR 0.57f

static const st_dtype tl_types[] = {ST_DT_Q4_1, ST_DT_Q5_0, ST_DT_Q5_1, ST_DT_IQ4_NL, ST_DT_IQ4_XS};
#define TL_NTYPES (sizeof tl_types / sizeof tl_types[0])

/* ggml's kvalues_iq4nl, written out again here (the oracle of the layout) */
static const int tl_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                  1,    13,   25,  38,  53,  69,  89,  113};

/* tl_has_min - Q4_1 and Q5_1 carry an f16 m after d. */
static int tl_has_min(st_dtype t) { return t == ST_DT_Q4_1 || t == ST_DT_Q5_1; }

/* tl_pack32 - the 16 nibble bytes and (5-bit types) the 32-bit qh of 32
 * unsigned quants c (0..15 or 0..31). */
static void tl_pack32(const int c[ST_QK], uint8_t qs[16], uint8_t qh[4])
{
    uint32_t h = 0;
    for (int j = 0; j < 16; j++)
        qs[j] = (uint8_t)((c[j] & 15) | ((c[j + 16] & 15) << 4));
    for (int k = 0; k < ST_QK; k++)
        h |= (uint32_t)((c[k] >> 4) & 1) << k;
    qh[0] = (uint8_t)h;
    qh[1] = (uint8_t)(h >> 8);
    qh[2] = (uint8_t)(h >> 16);
    qh[3] = (uint8_t)(h >> 24);
}

START_TEST(test_layouts)
{
    const st_kernel_ops *ops = tk_variant(_i);
    tk_rng r = {77};
    for (int rep = 0; rep < 50; rep++) {
        int c[ST_QK_K];
        for (int k = 0; k < ST_QK_K; k++)
            c[k] = (int)(tk_next(&r) % 32);
        const float d = st_f16_to_f32(st_f32_to_f16(0.01f * (1.0f + tk_unif(&r))));
        const float m = st_f16_to_f32(st_f32_to_f16(0.3f * tk_unif(&r)));
        float y[ST_QK_K];
        uint8_t qh[4];
        /* the 32-value types: one block of the first 32 quants */
        st_block_q4_1 b41 = {.d = st_f32_to_f16(d), .m = st_f32_to_f16(m)};
        int c4[ST_QK];
        for (int k = 0; k < ST_QK; k++)
            c4[k] = c[k] & 15;
        tl_pack32(c4, b41.qs, qh);
        ops->to_float[ST_DT_Q4_1](&b41, y, ST_QK);
        for (int k = 0; k < ST_QK; k++)
            ck_assert_float_eq(y[k], (float)c4[k] * d + m);
        st_block_iq4_nl bnl = {.d = st_f32_to_f16(d)};
        memcpy(bnl.qs, b41.qs, sizeof bnl.qs);
        ops->to_float[ST_DT_IQ4_NL](&bnl, y, ST_QK);
        for (int k = 0; k < ST_QK; k++)
            ck_assert_float_eq(y[k], d * (float)tl_levels[c4[k]]);
        st_block_q5_0 b50 = {.d = st_f32_to_f16(d)};
        tl_pack32(c, b50.qs, b50.qh);
        ops->to_float[ST_DT_Q5_0](&b50, y, ST_QK);
        for (int k = 0; k < ST_QK; k++)
            ck_assert_float_eq(y[k], (float)(c[k] - 16) * d);
        st_block_q5_1 b51 = {.d = st_f32_to_f16(d), .m = st_f32_to_f16(m)};
        tl_pack32(c, b51.qs, b51.qh);
        ops->to_float[ST_DT_Q5_1](&b51, y, ST_QK);
        for (int k = 0; k < ST_QK; k++)
            ck_assert_float_eq(y[k], (float)c[k] * d + m);
        /* IQ4_XS: 8 sub-blocks with 6-bit scales ls */
        st_block_iq4_xs bxs = {.d = st_f32_to_f16(d)};
        int ls[8];
        for (int s = 0; s < 8; s++) {
            ls[s] = (int)(tk_next(&r) % 64);
            bxs.scales_l[s / 2] |= (uint8_t)((ls[s] & 15) << (4 * (s % 2)));
            bxs.scales_h |= (uint16_t)((ls[s] >> 4) << (2 * s));
            int cs[ST_QK];
            for (int k = 0; k < ST_QK; k++)
                cs[k] = c[s * ST_QK + k] & 15;
            tl_pack32(cs, bxs.qs + 16 * s, qh);
        }
        ops->to_float[ST_DT_IQ4_XS](&bxs, y, ST_QK_K);
        for (int k = 0; k < ST_QK_K; k++)
            ck_assert_float_eq(y[k],
                               (d * (float)(ls[k / ST_QK] - 32)) * (float)tl_levels[c[k] & 15]);
    }
}
END_TEST

START_TEST(test_q8_1)
{
    const st_kernel_ops *ops = tk_variant(_i);
    tk_rng r = {4321};
    const int64_t nb = 9, n = nb * ST_QK;
    float *x = tk_alloc(sizeof(float) * n), *y = tk_alloc(sizeof(float) * n);
    st_block_q8_1 *q = tk_alloc(sizeof(st_block_q8_1) * nb);
    st_block_q8_0 *q0 = tk_alloc(sizeof(st_block_q8_0) * nb);
    for (int rep = 0; rep < 100; rep++) {
        tk_fill(&r, x, n, ldexpf(1.0f, rep % 12 - 2)); /* f16 d stays normal */
        if (rep % 3 == 1)                              /* an all-zero block */
            memset(x + 2 * ST_QK, 0, sizeof(float) * ST_QK);
        ops->from_float[ST_DT_Q8_1](x, q, n);
        ops->from_float[ST_DT_Q8_0](x, q0, n);
        ops->to_float[ST_DT_Q8_1](q, y, n);
        for (int64_t b = 0; b < nb; b++) {
            float amax = 0.0f;
            int sum = 0;
            for (int k = 0; k < ST_QK; k++) {
                amax = fmaxf(amax, fabsf(x[b * ST_QK + k]));
                sum += q[b].qs[k];
            }
            ck_assert_uint_eq(q[b].d, q0[b].d);
            ck_assert_mem_eq(q[b].qs, q0[b].qs, ST_QK);
            ck_assert_uint_eq(q[b].s, st_f32_to_f16((float)sum * (amax / 127.0f)));
            const float d = st_f16_to_f32(q[b].d);
            for (int k = 0; k < ST_QK; k++)
                if (y[b * ST_QK + k] != (float)q[b].qs[k] * d ||
                    !(fabsf(y[b * ST_QK + k] - x[b * ST_QK + k]) <= TL_Q8_ERR * amax / 127.0f))
                    ck_abort_msg("block %lld value %d: %g -> %g", (long long)b, k,
                                 (double)x[b * ST_QK + k], (double)y[b * ST_QK + k]);
        }
    }
    free(x);
    free(y);
    free(q);
    free(q0);
}
END_TEST

/* tl_random_row - nb random blocks of t (every bit random) whose f16 d (and
 * m) are then set to sane values. */
static void tl_random_row(tk_rng *r, st_dtype t, uint8_t *w, int64_t nb)
{
    const size_t bb = st_dtype_info_of(t)->blck_bytes;
    for (size_t i = 0; i < (size_t)nb * bb; i++)
        w[i] = (uint8_t)tk_next(r);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = w + (size_t)b * bb;
        const uint16_t d = st_f32_to_f16(ldexpf(1.0f + 0.5f * tk_unif(r), -8));
        const uint16_t m = st_f32_to_f16(ldexpf(tk_unif(r), -4));
        memcpy(blk, &d, 2); /* d is every block's first field */
        if (tl_has_min(t))
            memcpy(blk + 2, &m, 2);
    }
}

/* tl_check_row - ops' product of row w (n values of t) with the activation
 * row x (t's activation dtype, dequantized xf) against the double dot of
 * the dequantized values: within (nb + 10) u of the terms' magnitude, plus
 * for Q4_1 / Q5_1 2^-9 |m * s| + 2^-24 |m| per block (s = d * sum(q)
 * rounded to f16, maybe subnormal, where the dequantized activations use
 * f16 d). */
static void tl_check_row(const st_kernel_ops *ops, st_dtype t, const uint8_t *w, int64_t n,
                         const void *x, const float *xf, float *wf, const char *what)
{
    ops->to_float[t](w, wf, n);
    double s = 0.0, mag = 0.0;
    for (int64_t v = 0; v < n; v++) {
        s += (double)wf[v] * (double)xf[v];
        mag += fabs((double)wf[v] * (double)xf[v]);
    }
    double extra = 0.0;
    if (tl_has_min(t)) {
        const size_t bb = st_dtype_info_of(t)->blck_bytes;
        const st_block_q8_1 *xq = x;
        for (int64_t b = 0; b < n / ST_QK; b++) {
            uint16_t m;
            memcpy(&m, w + (size_t)b * bb + 2, 2);
            const double mf = fabs((double)st_f16_to_f32(m));
            extra += 0x1p-9 * mf * fabs((double)st_f16_to_f32(xq[b].s)) + 0x1p-24 * mf;
        }
    }
    float y = NAN;
    ops->mul_mat[t](n, w, 0, 0, 1, x, 0, 1, &y, 1);
    const double bound = ((double)(n / ST_QK) + 10.0) * TL_U * mag + extra + 1e-30;
    if (!(fabs((double)y - s) <= bound))
        ck_abort_msg("%s %s: kernel %.9g, dequantized dot %.9g (err %g > %g)", ops->name, what,
                     (double)y, s, fabs((double)y - s), bound);
}

START_TEST(test_random_rows)
{
    const st_kernel_ops *ops = tk_variant(_i);
    const st_kernel_ops *ref = st_kernels_ref();
    tk_rng r = {199 + (uint64_t)_i};
    const int64_t n = 3 * ST_QK_K;
    float *xr = tk_alloc(sizeof(float) * n), *xf = tk_alloc(sizeof(float) * n);
    float *wf = tk_alloc(sizeof(float) * n);
    uint8_t *x = tk_alloc(sizeof(st_block_q8_k) * (size_t)(n / ST_QK_K));
    uint8_t *w = tk_alloc(TL_MAX_BLOCK * (size_t)(n / ST_QK));
    for (size_t k = 0; k < TL_NTYPES; k++) {
        const st_dtype t = tl_types[k];
        const st_dtype act = st_dtype_info_of(t)->act;
        for (int rep = 0; rep < 200; rep++) {
            tl_random_row(&r, t, w, n / st_dtype_info_of(t)->blck);
            tk_fill(&r, xr, n, ldexpf(1.0f, rep % 13 - 6));
            ref->from_float[act](xr, x, n);
            ref->to_float[act](x, xf, n);
            char what[64];
            snprintf(what, sizeof what, "random %s #%d", st_dtype_info_of(t)->name, rep);
            tl_check_row(ops, t, w, n, x, xf, wf, what);
        }
    }
    free(xr);
    free(xf);
    free(wf);
    free(x);
    free(w);
}
END_TEST

/* tl_matrix - m random rows of t (n values) and nx activation rows in t's
 * activation dtype; row strides in *ws, *xs. */
static void tl_matrix(tk_rng *r, st_dtype t, int64_t n, int64_t m, int64_t nx, uint8_t **w,
                      size_t *ws, uint8_t **x, size_t *xs)
{
    const st_dtype act = st_dtype_info_of(t)->act;
    ck_assert_int_eq(st_row_size(t, n, ws), ST_K_OK);
    ck_assert_int_eq(st_row_size(act, n, xs), ST_K_OK);
    *w = tk_alloc(*ws * (size_t)m);
    *x = tk_alloc(*xs * (size_t)nx);
    for (int64_t i = 0; i < m; i++)
        tl_random_row(r, t, *w + (size_t)i * *ws, n / st_dtype_info_of(t)->blck);
    float *xr = tk_alloc(sizeof(float) * (size_t)n);
    for (int64_t j = 0; j < nx; j++) {
        tk_fill(r, xr, n, 1.0f + (float)j);
        st_kernels_ref()->from_float[act](xr, *x + (size_t)j * *xs, n);
    }
    free(xr);
}

START_TEST(test_simd_equals_ref)
{
    const st_kernel_ops *ops = tk_variant(_i);
    const st_kernel_ops *ref = st_kernels_ref();
    /* n: one unit, a super-block, more than one panel of 32 units with a
     * tail (IQ4_XS: 9 super-blocks = 72 units) */
    static const int64_t ns[] = {ST_QK, ST_QK_K, 9 * ST_QK_K, 37 * ST_QK};
    static const int64_t ms[] = {1, 7, 8, 13, 24};
    static const int64_t nxs[] = {1, 2, 3, 5, 9};
    tk_rng r = {5150};
    int compared = 0;
    for (size_t k = 0; k < TL_NTYPES; k++) {
        const st_dtype t = tl_types[k];
        for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
            if (ns[a] % st_dtype_info_of(t)->blck != 0)
                continue;
            for (size_t b = 0; b < sizeof ms / sizeof ms[0]; b++) {
                const int64_t n = ns[a], m = ms[b], nx = nxs[(a + b) % 5];
                uint8_t *w, *x;
                size_t ws, xs;
                tl_matrix(&r, t, n, m, nx, &w, &ws, &x, &xs);
                float *want = tk_alloc(sizeof(float) * (size_t)(m * nx));
                float *got = tk_alloc(sizeof(float) * (size_t)(m * nx));
                ref->mul_mat[t](n, w, ws, 0, m, x, xs, nx, want, m);
                /* the whole range, then split at 3 and at 8 */
                ops->mul_mat[t](n, w, ws, 0, m, x, xs, nx, got, m);
                ck_assert_msg(memcmp(got, want, sizeof(float) * (size_t)(m * nx)) == 0,
                              "%s %s n %lld m %lld nx %lld: differs from ref", ops->name,
                              st_dtype_info_of(t)->name, (long long)n, (long long)m, (long long)nx);
                for (int64_t cut = 3; cut <= 8; cut += 5) {
                    if (cut >= m)
                        continue;
                    memset(got, 0xff, sizeof(float) * (size_t)(m * nx));
                    ops->mul_mat[t](n, w, ws, 0, cut, x, xs, nx, got, m);
                    ops->mul_mat[t](n, w, ws, cut, m, x, xs, nx, got, m);
                    ck_assert_msg(memcmp(got, want, sizeof(float) * (size_t)(m * nx)) == 0,
                                  "%s %s split at %lld: differs from ref", ops->name,
                                  st_dtype_info_of(t)->name, (long long)cut);
                }
                /* each activation row alone */
                for (int64_t j = 0; j < nx; j++) {
                    ops->mul_mat[t](n, w, ws, 0, m, x + (size_t)j * xs, xs, 1, got, m);
                    ck_assert_msg(memcmp(got, want + j * m, sizeof(float) * (size_t)m) == 0,
                                  "%s %s row %lld alone: differs", ops->name,
                                  st_dtype_info_of(t)->name, (long long)j);
                }
                compared++;
                free(want);
                free(got);
                free(w);
                free(x);
            }
        }
    }
    printf("legacy: %s mul_mat of Q4_1/Q5_0/Q5_1/IQ4_NL/IQ4_XS equal to ref on %d shapes\n",
           ops->name, compared);
}
END_TEST

Suite *tl_legacy_suite(void)
{
    Suite *s = suite_create("legacy");
    tk_variants_print("legacy");
    TCase *tc = tcase_create("legacy");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_layouts, 0, tk_variant_count());
    tcase_add_loop_test(tc, test_q8_1, 0, tk_variant_count());
    tcase_add_loop_test(tc, test_random_rows, 0, tk_variant_count());
    tcase_add_loop_test(tc, test_simd_equals_ref, 0, tk_variant_count());
    suite_add_tcase(s, tc);
    return s;
}
