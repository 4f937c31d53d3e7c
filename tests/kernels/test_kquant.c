/* test_kquant.c - the K-quant kernels (Q2_K .. Q6_K weights, Q8_K
 * activations) of every variant.
 *
 * - The shared files synth-s-{q2_k,q3_k_m,q4_k_m,q5_k_m,q6_k}.gguf (written
 *   by llama.cpp's quantizer from synth-s-f32.gguf): every block of every
 *   K-quant tensor dequantizes to finite values close to the f32 original
 *   (a relative RMS error bound per type: a wrong bit layout gives ~1), and
 *   every row's product with a Q8_K activation equals
 *   dot(dequant(w), dequant(q8k(x))) within float rounding.
 * - Random blocks (every bit pattern, sane scales): the same consistency.
 * - Q8_K quantize/dequantize round trips: error <= d / 2, the largest
 *   magnitude maps to -127 * sign, bsums are the sums of 16 quants.
 * - mul_mat: rows alone equal rows in a batch, any [i0, i1) split equals
 *   the whole, and each SIMD variant equals the reference bit for bit
 *   (the super-block sums are exact integers).
 * A suite of the 'kernels' test (test_kernels.c runs it). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/fp16.h"
#include "kernels/kernels.h"
#include "tests/kernels/tk_gguf.h"
#include "tests/kernels/tk_suites.h"
#include "tests/kernels/tk_util.h"

#define TQ_U 0x1p-24 /* float's unit roundoff */

static const st_dtype tq_types[] = {ST_DT_Q2_K, ST_DT_Q3_K, ST_DT_Q4_K, ST_DT_Q5_K, ST_DT_Q6_K};
#define TQ_NTYPES (sizeof tq_types / sizeof tq_types[0])

/* tq_scale_offsets - where a block of t keeps its f16 d and (0 if none)
 * f16 dmin; the min part of a value is what dequantizing a copy with d = 0
 * gives: (0 * sc) * q - dmin * m. */
static void tq_scale_offsets(st_dtype t, size_t *d_off, size_t *dmin_off, int *has_min)
{
    *has_min = 1;
    switch (t) {
    case ST_DT_Q2_K:
        *d_off = offsetof(st_block_q2_k, d);
        *dmin_off = offsetof(st_block_q2_k, dmin);
        return;
    case ST_DT_Q3_K:
        *d_off = offsetof(st_block_q3_k, d);
        break;
    case ST_DT_Q4_K:
        *d_off = offsetof(st_block_q4_k, d);
        *dmin_off = offsetof(st_block_q4_k, dmin);
        return;
    case ST_DT_Q5_K:
        *d_off = offsetof(st_block_q5_k, d);
        *dmin_off = offsetof(st_block_q5_k, dmin);
        return;
    default:
        *d_off = offsetof(st_block_q6_k, d);
        break;
    }
    *dmin_off = 0;
    *has_min = 0;
}

/* tq_check_row - dequantizes row w (n values of t): all finite; then the
 * product with x (Q8_K) by ops equals the double dot of the dequantized
 * values within (nb + 10) u times the magnitude of the terms, the min parts
 * counted separately (they cancel against the scaled quants). Returns the
 * dequantized row in wf. */
static void tq_check_row(const st_kernel_ops *ops, st_dtype t, const uint8_t *w, int64_t n,
                         const void *x, const float *xf, float *wf, float *mf, const char *what)
{
    const st_kernel_ops *ref = st_kernels_ref();
    const size_t bb = st_dtype_info_of(t)->blck_bytes;
    ops->to_float[t](w, wf, n);
    /* (assertions only on failure: Check logs every assertion it evaluates) */
    for (int64_t v = 0; v < n; v++)
        if (!isfinite(wf[v]))
            ck_abort_msg("%s: value %lld is %g", what, (long long)v, (double)wf[v]);
    /* the min parts: each block with d = 0 */
    size_t d_off, dmin_off;
    int has_min;
    tq_scale_offsets(t, &d_off, &dmin_off, &has_min);
    memset(mf, 0, sizeof(float) * (size_t)n);
    if (has_min) {
        uint8_t blk[sizeof(st_block_q5_k)];
        for (int64_t b = 0; b < n / ST_QK_K; b++) {
            memcpy(blk, w + (size_t)b * bb, bb);
            blk[d_off] = blk[d_off + 1] = 0;
            ref->to_float[t](blk, mf + b * ST_QK_K, ST_QK_K);
        }
    }
    double s = 0.0, mag = 0.0;
    for (int64_t v = 0; v < n; v++) {
        s += (double)wf[v] * (double)xf[v];
        mag += (fabs((double)wf[v] - (double)mf[v]) + 2.0 * fabs((double)mf[v])) * fabs(xf[v]);
    }
    float y = NAN;
    ops->mul_mat[t](n, w, 0, 0, 1, x, 0, 1, &y, 1);
    const double bound = ((double)(n / ST_QK_K) + 10.0) * TQ_U * mag + 1e-30;
    if (!(fabs((double)y - s) <= bound))
        ck_abort_msg("%s %s: kernel %.9g, dequantized dot %.9g (err %g > %g)", ops->name, what,
                     (double)y, s, fabs((double)y - s), bound);
}

/* ---- shared files ---- */

typedef struct tq_file_stats {
    double err2[ST_DT_COUNT], ref2[ST_DT_COUNT];
    int64_t values[ST_DT_COUNT];
} tq_file_stats;

static void tq_check_file(const st_kernel_ops *ops, const char *file, tq_file_stats *st)
{
    tk_gguf gq, gf;
    tk_gguf_load(&gq, file);
    tk_gguf_load(&gf, "synth-s-f32.gguf");
    tk_rng r = {4711};
    int tensors = 0;
    for (uint64_t i = 0; i < gq.nt; i++) {
        const tk_tensor *q = &gq.t[i];
        st_dtype t;
        if (st_dtype_from_ggml(q->type, &t) != ST_K_OK || t < ST_DT_Q2_K || t > ST_DT_Q6_K)
            continue;
        const tk_tensor *f = tk_gguf_find(&gf, q->name);
        ck_assert_msg(f != NULL && f->nelem == q->nelem && f->ne0 == q->ne0, "%s: %s", file,
                      q->name);
        size_t rs, xs;
        ck_assert_int_eq(st_row_size(t, q->ne0, &rs), ST_K_OK);
        ck_assert_int_eq(st_row_size(ST_DT_Q8_K, q->ne0, &xs), ST_K_OK);
        const int64_t n = q->ne0, rows = q->nelem / n;
        ck_assert(gq.data + q->off + (size_t)rows * rs <= gq.buf + gq.len);
        float *xr = tk_alloc(sizeof(float) * (size_t)n), *xf = tk_alloc(sizeof(float) * (size_t)n);
        float *wf = tk_alloc(sizeof(float) * (size_t)n), *mf = tk_alloc(sizeof(float) * (size_t)n);
        float *orig = tk_alloc(sizeof(float) * (size_t)n);
        uint8_t *x = tk_alloc(xs), *w = tk_alloc(rs);
        for (int64_t row = 0; row < rows; row++) {
            for (int64_t v = 0; v < n; v++)
                xr[v] = tk_unif(&r);
            ops->from_float[ST_DT_Q8_K](xr, x, n);
            ops->to_float[ST_DT_Q8_K](x, xf, n);
            memcpy(w, gq.data + q->off + (size_t)row * rs, rs); /* aligned copy */
            char what[192];
            snprintf(what, sizeof what, "%s %s row %lld", file, q->name, (long long)row);
            tq_check_row(ops, t, w, n, x, xf, wf, mf, what);
            memcpy(orig, gf.data + f->off + (size_t)(row * n) * 4, (size_t)n * 4);
            for (int64_t v = 0; v < n; v++) {
                st->err2[t] += ((double)wf[v] - orig[v]) * ((double)wf[v] - orig[v]);
                st->ref2[t] += (double)orig[v] * orig[v];
            }
            st->values[t] += n;
        }
        tensors++;
        free(xr);
        free(xf);
        free(wf);
        free(mf);
        free(orig);
        free(x);
        free(w);
    }
    ck_assert_msg(tensors > 0, "%s: no K-quant tensor", file);
    free(gq.buf);
    free(gq.t);
    free(gf.buf);
    free(gf.t);
}

START_TEST(test_shared_files)
{
    const st_kernel_ops *ops = tk_variant(_i);
    static const char *const files[] = {"synth-s-q2_k.gguf", "synth-s-q3_k_m.gguf",
                                        "synth-s-q4_k_m.gguf", "synth-s-q5_k_m.gguf",
                                        "synth-s-q6_k.gguf"};
    /* relative RMS error of the dequantized weights against synth-s-f32 */
    static const double max_rel[ST_DT_COUNT] = {[ST_DT_Q2_K] = 0.45,
                                                [ST_DT_Q3_K] = 0.25,
                                                [ST_DT_Q4_K] = 0.12,
                                                [ST_DT_Q5_K] = 0.06,
                                                [ST_DT_Q6_K] = 0.03};
    tq_file_stats st;
    memset(&st, 0, sizeof st);
    for (size_t k = 0; k < sizeof files / sizeof files[0]; k++)
        tq_check_file(ops, files[k], &st);
    for (size_t k = 0; k < TQ_NTYPES; k++) {
        const st_dtype t = tq_types[k];
        ck_assert_msg(st.values[t] > 0, "no %s tensor in the files", st_dtype_info_of(t)->name);
        const double rel = sqrt(st.err2[t] / st.ref2[t]);
        printf("kquant: %s %-5s %9lld values, relative RMS error vs f32 %.4f (bound %.2f)\n",
               ops->name, st_dtype_info_of(t)->name, (long long)st.values[t], rel, max_rel[t]);
        ck_assert_msg(rel <= max_rel[t], "%s: relative RMS error %.4f > %.2f",
                      st_dtype_info_of(t)->name, rel, max_rel[t]);
    }
}
END_TEST

/* ---- random blocks ---- */

/* tq_random_row - nb random blocks of t (every bit random) whose f16
 * scales are then set to sane values in [2^-10, 2^-6). */
static void tq_random_row(tk_rng *r, st_dtype t, uint8_t *w, int64_t nb)
{
    const size_t bb = st_dtype_info_of(t)->blck_bytes;
    for (size_t i = 0; i < (size_t)nb * bb; i++)
        w[i] = (uint8_t)tk_next(r);
    size_t d_off, dmin_off;
    int has_min;
    tq_scale_offsets(t, &d_off, &dmin_off, &has_min);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = w + (size_t)b * bb;
        const uint16_t d = st_f32_to_f16(ldexpf(1.0f + 0.5f * tk_unif(r), -8));
        const uint16_t dm = st_f32_to_f16(ldexpf(1.0f + 0.5f * tk_unif(r), -9));
        memcpy(blk + d_off, &d, 2);
        if (has_min)
            memcpy(blk + dmin_off, &dm, 2);
    }
}

START_TEST(test_random_blocks)
{
    const st_kernel_ops *ops = tk_variant(_i);
    tk_rng r = {99 + (uint64_t)_i};
    const int64_t nb = 7, n = nb * ST_QK_K;
    float *xr = tk_alloc(sizeof(float) * n), *xf = tk_alloc(sizeof(float) * n);
    float *wf = tk_alloc(sizeof(float) * n), *mf = tk_alloc(sizeof(float) * n);
    uint8_t *x = tk_alloc(sizeof(st_block_q8_k) * nb), *w = tk_alloc(sizeof(st_block_q6_k) * nb);
    for (size_t k = 0; k < TQ_NTYPES; k++) {
        for (int rep = 0; rep < 200; rep++) {
            tq_random_row(&r, tq_types[k], w, nb);
            const float amp = ldexpf(1.0f, rep % 13 - 6);
            for (int64_t v = 0; v < n; v++)
                xr[v] = tk_unif(&r) * amp;
            ops->from_float[ST_DT_Q8_K](xr, x, n);
            ops->to_float[ST_DT_Q8_K](x, xf, n);
            char what[64];
            snprintf(what, sizeof what, "random %s #%d", st_dtype_info_of(tq_types[k])->name, rep);
            tq_check_row(ops, tq_types[k], w, n, x, xf, wf, mf, what);
        }
    }
    free(xr);
    free(xf);
    free(wf);
    free(mf);
    free(x);
    free(w);
}
END_TEST

/* ---- Q8_K ---- */

START_TEST(test_q8_k_roundtrip)
{
    const st_kernel_ops *ops = tk_variant(_i);
    tk_rng r = {1234};
    const int64_t nb = 5, n = nb * ST_QK_K;
    float *x = tk_alloc(sizeof(float) * n), *y = tk_alloc(sizeof(float) * n);
    st_block_q8_k *q = tk_alloc(sizeof(st_block_q8_k) * nb);
    for (int rep = 0; rep < 100; rep++) {
        const float amp = ldexpf(1.0f, rep % 40 - 20);
        for (int64_t v = 0; v < n; v++)
            x[v] = tk_unif(&r) * amp;
        if (rep % 4 == 1) /* an all-zero super-block */
            memset(x + ST_QK_K, 0, sizeof(float) * ST_QK_K);
        ops->from_float[ST_DT_Q8_K](x, q, n);
        ops->to_float[ST_DT_Q8_K](q, y, n);
        for (int64_t b = 0; b < nb; b++) {
            const float *xb = x + b * ST_QK_K;
            float amax = 0.0f, max = 0.0f;
            for (int v = 0; v < ST_QK_K; v++)
                if (fabsf(xb[v]) > amax) {
                    amax = fabsf(xb[v]);
                    max = xb[v];
                }
            if (amax == 0.0f) {
                ck_assert(q[b].d == 0.0f);
                for (int v = 0; v < ST_QK_K; v++)
                    if (q[b].qs[v] != 0 || y[b * ST_QK_K + v] != 0.0f)
                        ck_abort_msg("zero block: value %d is %g", v, (double)y[b * ST_QK_K + v]);
                continue;
            }
            /* d = max / -127 (as 1 / (-127 / max)); the extreme maps to -127 */
            ck_assert(fabs((double)q[b].d * -127.0 / (double)max - 1.0) < 4 * TQ_U);
            for (int g = 0; g < ST_QK_K / 16; g++) {
                int sum = 0;
                for (int l = 0; l < 16; l++)
                    sum += q[b].qs[16 * g + l];
                if (q[b].bsums[g] != sum)
                    ck_abort_msg("bsums[%d] %d != %d", g, q[b].bsums[g], sum);
            }
            for (int v = 0; v < ST_QK_K; v++) {
                const double err = fabs((double)y[b * ST_QK_K + v] - xb[v]);
                if (q[b].qs[v] < -127 || (xb[v] == max && q[b].qs[v] != -127) ||
                    !(err <= 0.5 * fabs((double)q[b].d) * (1.0 + 1e-5) + 1e-30))
                    ck_abort_msg("value %g -> quant %d, %g (d %g)", (double)xb[v], q[b].qs[v],
                                 (double)y[b * ST_QK_K + v], (double)q[b].d);
            }
        }
    }
    free(x);
    free(y);
    free(q);
}
END_TEST

/* ---- mul_mat: batch invariance, splits, variants against the reference ---- */

START_TEST(test_mul_mat_invariance_and_variants)
{
    const st_kernel_ops *ops = tk_variant(_i);
    const st_kernel_ops *ref = st_kernels_ref();
    tk_rng r = {31337};
    /* batch sizes: every one up to 9 (the 2..8-row tiles), then the
     * AVX-512 prompt path's (16 rows and more: one to four 16-lane tiles,
     * full and partial, and a second pass of 64); 45 weight rows (more than
     * one 32-row chunk of it); 3 super-blocks (a partial k-panel) */
    const int64_t bns[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 31, 64, 70};
    const int64_t n = 3 * ST_QK_K, rows = 45, nx = 70;
    const size_t xs = sizeof(st_block_q8_k) * 3, ws = sizeof(st_block_q6_k) * 3;
    uint8_t *w = tk_alloc(ws * rows), *x = tk_alloc(xs * nx);
    float *xr = tk_alloc(sizeof(float) * n);
    float *y = tk_alloc(sizeof(float) * rows * nx), *yr = tk_alloc(sizeof(float) * rows * nx);
    float *ys = tk_alloc(sizeof(float) * rows * nx), *one = tk_alloc(sizeof(float) * rows);
    for (int64_t j = 0; j < nx; j++) {
        for (int64_t v = 0; v < n; v++)
            xr[v] = tk_unif(&r);
        ref->from_float[ST_DT_Q8_K](xr, x + j * xs, n);
    }
    for (size_t k = 0; k < TQ_NTYPES; k++) {
        const st_dtype t = tq_types[k];
        size_t rs;
        ck_assert_int_eq(st_row_size(t, n, &rs), ST_K_OK);
        for (int64_t i = 0; i < rows; i++)
            tq_random_row(&r, t, w + i * rs, 3);
        for (size_t kb = 0; kb < sizeof(bns) / sizeof(bns[0]); kb++) {
            const int64_t bn = bns[kb];
            ops->mul_mat[t](n, w, rs, 0, rows, x, xs, bn, y, rows);
            ref->mul_mat[t](n, w, rs, 0, rows, x, xs, bn, yr, rows);
            const int64_t cuts[] = {0, 3, 7, 16, 20, rows};
            for (int c = 0; c + 1 < 6; c++)
                ops->mul_mat[t](n, w, rs, cuts[c], cuts[c + 1], x, xs, bn, ys, rows);
            for (int64_t j = 0; j < bn; j++) {
                ops->mul_mat[t](n, w, rs, 0, rows, x + j * xs, xs, 1, one, rows);
                for (int64_t i = 0; i < rows; i++) {
                    const float a = y[j * rows + i];
                    if (a != yr[j * rows + i] || a != ys[j * rows + i] || a != one[i])
                        ck_abort_msg("%s %s nx=%lld y[%lld][%lld] %.9g: ref %.9g, split %.9g, "
                                     "alone %.9g",
                                     ops->name, st_dtype_info_of(t)->name, (long long)bn,
                                     (long long)j, (long long)i, (double)a,
                                     (double)yr[j * rows + i], (double)ys[j * rows + i],
                                     (double)one[i]);
                }
            }
        }
    }
    free(w);
    free(x);
    free(xr);
    free(y);
    free(yr);
    free(ys);
    free(one);
}
END_TEST

/* Variants' conversions: to_float of every K-quant (random blocks) and
 * Q8_K's from_float equal the reference's bytes. */
START_TEST(test_variant_conversions)
{
    const st_kernel_ops *ops = tk_variant(_i); /* _i >= 1: a SIMD variant */
    const st_kernel_ops *ref = st_kernels_ref();
    tk_rng r = {555};
    const int64_t nb = 4, n = nb * ST_QK_K;
    uint8_t *w = tk_alloc(sizeof(st_block_q8_k) * nb), *qa = tk_alloc(sizeof(st_block_q8_k) * nb);
    uint8_t *qb = tk_alloc(sizeof(st_block_q8_k) * nb);
    float *a = tk_alloc(sizeof(float) * n), *b = tk_alloc(sizeof(float) * n);
    for (size_t k = 0; k < TQ_NTYPES; k++) {
        tq_random_row(&r, tq_types[k], w, nb);
        ref->to_float[tq_types[k]](w, a, n);
        ops->to_float[tq_types[k]](w, b, n);
        ck_assert_msg(memcmp(a, b, sizeof(float) * n) == 0, "%s to_float %s", ops->name,
                      st_dtype_info_of(tq_types[k])->name);
    }
    for (int64_t v = 0; v < n; v++)
        a[v] = tk_unif(&r) * ldexpf(1.0f, (int)(v % 31) - 15);
    ref->from_float[ST_DT_Q8_K](a, qa, n);
    ops->from_float[ST_DT_Q8_K](a, qb, n);
    ck_assert(memcmp(qa, qb, sizeof(st_block_q8_k) * nb) == 0);
    free(w);
    free(qa);
    free(qb);
    free(a);
    free(b);
}
END_TEST

Suite *tq_kquant_suite(void)
{
    Suite *s = suite_create("kquant");
    tk_variants_print("kquant");
    const int nv = tk_variant_count();
    TCase *tc = tcase_create("kquant");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_q8_k_roundtrip, 0, nv);
    tcase_add_loop_test(tc, test_random_blocks, 0, nv);
    tcase_add_loop_test(tc, test_mul_mat_invariance_and_variants, 0, nv);
    tcase_add_loop_test(tc, test_variant_conversions, 1, nv); /* against the reference */
    tcase_add_loop_test(tc, test_shared_files, 0, nv);
    suite_add_tcase(s, tc);
    return s;
}
