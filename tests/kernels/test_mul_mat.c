/* test_mul_mat.c - the products (mul_mat) of the float and Q8_0 / Q4_0
 * dtypes, in every variant present (tk_util.h): accuracy against a
 * double-precision oracle with a per-dtype bound; batch invariance (a row
 * alone, in a batch, at another place in it, under any [i0, i1) split);
 * the blocked prefill paths (wide rows, more activation rows than a tile)
 * and every small batch size, where Q8_0 / Q4_0 must equal the reference
 * bit for bit. The K-quant products are in test_kquant.c. A suite of the
 * 'kernels' test (test_kernels.c runs it). */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "tests/kernels/tk_suites.h"
#include "tests/kernels/tk_util.h"

typedef struct tk_mm {
    st_dtype t, act;
    int64_t n, rows, nx;
    size_t w_stride, x_stride;
    unsigned char *w, *x; /* in t, resp. act */
    float *wf, *xf;       /* dequantized (exact values the kernel sees) */
} tk_mm;

static void tk_mm_init(tk_mm *m, const st_kernel_ops *ops, st_dtype t, int64_t n, int64_t rows,
                       int64_t nx, uint64_t seed)
{
    tk_rng r = {seed};
    m->t = t;
    m->act = st_dtype_info_of(t)->act;
    m->n = n;
    m->rows = rows;
    m->nx = nx;
    ck_assert_int_eq(st_row_size(t, n, &m->w_stride), ST_K_OK);
    ck_assert_int_eq(st_row_size(m->act, n, &m->x_stride), ST_K_OK);
    m->w = tk_alloc(m->w_stride * rows);
    m->x = tk_alloc(m->x_stride * nx);
    m->wf = tk_alloc(sizeof(float) * n * rows);
    m->xf = tk_alloc(sizeof(float) * n * nx);
    float *tmp = tk_alloc(sizeof(float) * n);
    for (int64_t i = 0; i < rows; i++) {
        tk_fill(&r, tmp, n, 0.1f);
        ops->from_float[t](tmp, m->w + i * m->w_stride, n);
        ops->to_float[t](m->w + i * m->w_stride, m->wf + i * n, n);
    }
    for (int64_t j = 0; j < nx; j++) {
        tk_fill(&r, tmp, n, 2.0f);
        ops->from_float[m->act](tmp, m->x + j * m->x_stride, n);
        ops->to_float[m->act](m->x + j * m->x_stride, m->xf + j * n, n);
    }
    free(tmp);
}

static void tk_mm_free(tk_mm *m)
{
    free(m->w);
    free(m->x);
    free(m->wf);
    free(m->xf);
}

/* tk_mm_bound - allowed |y - exact| given sum_k |w_k x_k|: the reference's
 * own order is tight (f16/bf16: exact products summed in double, so one
 * final rounding; Q8_0/Q4_0: one rounding per block); other variants may
 * accumulate in float. */
static double tk_mm_bound(const st_kernel_ops *ops, st_dtype t, int64_t n, double sumabs,
                          double exact)
{
    if (ops->variant == ST_KVAR_REF && (t == ST_DT_F16 || t == ST_DT_BF16))
        return 0x1p-24 * fabs(exact) + (double)n * 0x1p-52 * sumabs + 1e-30; /* one rounding */
    const double u = 0x1p-24;
    double c;
    if (ops->variant != ST_KVAR_REF)
        c = 2.0 * (double)n * u;
    else if (t == ST_DT_F32)
        c = 1.01 * (double)n * u;
    else
        c = 2.0 * ((double)(n / 32) + 1.0) * u;
    return c * sumabs + 1e-30;
}

/* tk_mm_exact - dot(row i of W, row j of X) of the values the kernel
 * sees, in double; *sumabs = the sum of the products' magnitudes. */
static double tk_mm_exact(const tk_mm *m, int64_t i, int64_t j, double *sumabs)
{
    double s = 0.0, sa = 0.0;
    for (int64_t c = 0; c < m->n; c++) {
        const double p = (double)m->wf[i * m->n + c] * (double)m->xf[j * m->n + c];
        s += p;
        sa += fabs(p);
    }
    *sumabs = sa;
    return s;
}

/* tk_mm_check_alone - each of the first nx activation rows, multiplied
 * alone (nx = 1), gives the bits of its row of y (row j at y + j * ld). */
static void tk_mm_check_alone(const st_kernel_ops *ops, const tk_mm *m, int64_t nx, const float *y,
                              int64_t ld)
{
    float *one = tk_alloc(sizeof(float) * m->rows);
    for (int64_t j = 0; j < nx; j++) {
        ops->mul_mat[m->t](m->n, m->w, m->w_stride, 0, m->rows, m->x + j * m->x_stride, m->x_stride,
                           1, one, m->rows);
        ck_assert_msg(memcmp(one, y + j * ld, sizeof(float) * m->rows) == 0,
                      "%s %s: row %ld alone differs from the batch of %ld", ops->name,
                      st_dtype_info_of(m->t)->name, (long)j, (long)nx);
    }
    free(one);
}

START_TEST(test_mul_mat_accuracy)
{
    const st_kernel_ops *ops = tk_variant(_i);
    /* 37 and 200 (float dtypes only: not whole Q8_0/Q4_0 blocks) leave
     * tails after the 8- and 16-lane steps of the SIMD float products */
    const int64_t ns[] = {32, 256, 768, 37, 200};
    const size_t n_block_ns = 3;
    for (int t = 0; t < TK_N_PLAIN_DTYPES; t++) {
        const size_t nn = st_dtype_info_of((st_dtype)t)->blck == 1 ? sizeof(ns) / sizeof(ns[0])
                                                                   : n_block_ns;
        for (size_t k = 0; k < nn; k++) {
            tk_mm m;
            const int64_t n = ns[k], rows = 13, nx = 3;
            tk_mm_init(&m, ops, (st_dtype)t, n, rows, nx, 100 + (uint64_t)t * 10 + k);
            float *y = tk_alloc(sizeof(float) * rows * nx);
            ops->mul_mat[t](n, m.w, m.w_stride, 0, rows, m.x, m.x_stride, nx, y, rows);
            for (int64_t j = 0; j < nx; j++) {
                for (int64_t i = 0; i < rows; i++) {
                    double sa;
                    const double s = tk_mm_exact(&m, i, j, &sa);
                    const double e = fabs((double)y[j * rows + i] - s);
                    ck_assert_msg(e <= tk_mm_bound(ops, (st_dtype)t, n, sa, s),
                                  "%s %s n=%ld y[%ld][%ld]=%.9g exact %.9g (err %g, sumabs %g)",
                                  ops->name, st_dtype_info_of((st_dtype)t)->name, (long)n, (long)j,
                                  (long)i, (double)y[j * rows + i], s, e, sa);
                }
            }
            free(y);
            tk_mm_free(&m);
        }
    }
}
END_TEST

START_TEST(test_mul_mat_batch_invariance)
{
    const st_kernel_ops *ops = tk_variant(_i);
    for (int t = 0; t < TK_N_PLAIN_DTYPES; t++) {
        tk_mm m;
        const int64_t n = 256, rows = 37, nx = 5, ys = rows + 3;
        tk_mm_init(&m, ops, (st_dtype)t, n, rows, nx, 900 + (uint64_t)t);
        float *full = tk_alloc(sizeof(float) * ys * nx);
        float *perm = tk_alloc(sizeof(float) * ys * nx);
        float *split = tk_alloc(sizeof(float) * ys * nx);
        unsigned char *xp = tk_alloc(m.x_stride * nx);
        ops->mul_mat[t](n, m.w, m.w_stride, 0, rows, m.x, m.x_stride, nx, full, ys);
        tk_mm_check_alone(ops, &m, nx, full, ys); /* each row alone (nx = 1) */
        /* rows rotated to other places in the batch */
        for (int64_t j = 0; j < nx; j++)
            memcpy(xp + ((j + 2) % nx) * m.x_stride, m.x + j * m.x_stride, m.x_stride);
        ops->mul_mat[t](n, m.w, m.w_stride, 0, rows, xp, m.x_stride, nx, perm, ys);
        for (int64_t j = 0; j < nx; j++)
            ck_assert(memcmp(perm + ((j + 2) % nx) * ys, full + j * ys, sizeof(float) * rows) == 0);
        /* output rows split in uneven ranges */
        const int64_t cuts[] = {0, 1, 8, 9, 30, rows};
        for (size_t c = 0; c + 1 < sizeof(cuts) / sizeof(cuts[0]); c++)
            ops->mul_mat[t](n, m.w, m.w_stride, cuts[c], cuts[c + 1], m.x, m.x_stride, nx, split,
                            ys);
        for (int64_t j = 0; j < nx; j++)
            ck_assert(memcmp(split + j * ys, full + j * ys, sizeof(float) * rows) == 0);
        free(full);
        free(perm);
        free(split);
        free(xp);
        tk_mm_free(&m);
    }
}
END_TEST

/* Prefill shapes: wide rows (5632 = TinyLlama's FFN) and more activation
 * rows than one tile (70 > 64), so the blocked paths of the SIMD variants
 * run. Q8_0/Q4_0 variants must equal the reference bit for bit (integer
 * block sums); float dtypes stay within their bound. Every activation row
 * must also equal its own 1-row product (batch invariance). */
START_TEST(test_mul_mat_wide)
{
    const st_kernel_ops *ops = tk_variant(_i);
    const st_kernel_ops *ref = st_kernels_ref();
    for (int t = 0; t < TK_N_PLAIN_DTYPES; t++) {
        tk_mm m;
        const int64_t n = 5632, rows = 19, nx = 70;
        tk_mm_init(&m, ref, (st_dtype)t, n, rows, nx, 4242 + (uint64_t)t);
        float *y = tk_alloc(sizeof(float) * rows * nx);
        float *yr = tk_alloc(sizeof(float) * rows * nx);
        ops->mul_mat[t](n, m.w, m.w_stride, 0, rows, m.x, m.x_stride, nx, y, rows);
        ref->mul_mat[t](n, m.w, m.w_stride, 0, rows, m.x, m.x_stride, nx, yr, rows);
        tk_mm_check_alone(ops, &m, nx, y, rows);
        for (int64_t j = 0; j < nx; j++) {
            for (int64_t i = 0; i < rows; i++) {
                if (t == ST_DT_Q8_0 || t == ST_DT_Q4_0) {
                    ck_assert_msg(y[j * rows + i] == yr[j * rows + i],
                                  "%s %s: y[%ld][%ld] %.9g != reference %.9g", ops->name,
                                  st_dtype_info_of((st_dtype)t)->name, (long)j, (long)i,
                                  (double)y[j * rows + i], (double)yr[j * rows + i]);
                } else {
                    double sa;
                    const double s = tk_mm_exact(&m, i, j, &sa);
                    ck_assert(fabs((double)y[j * rows + i] - s) <=
                              tk_mm_bound(ops, (st_dtype)t, n, sa, s));
                }
            }
        }
        free(y);
        free(yr);
        tk_mm_free(&m);
    }
}
END_TEST

/* Every batch size a step can have (1..12 activation rows) against 23
 * weight rows (groups of 8 and of 4 plus a tail of 3), whole and split at
 * uneven places: each path of the quantized variants (one row, 8-row
 * decode, 4-row small batch, panel) and each switch between them must
 * equal the reference bit for bit, and every row must equal its own
 * 1-row product. Float dtypes must equal their own 1-row products. */
START_TEST(test_mul_mat_small_batches)
{
    const st_kernel_ops *ops = tk_variant(_i);
    const st_kernel_ops *ref = st_kernels_ref();
    for (int t = 0; t < TK_N_PLAIN_DTYPES; t++) {
        const int exact = t == ST_DT_Q8_0 || t == ST_DT_Q4_0;
        const int64_t n = 1056, rows = 23, nxmax = 12;
        tk_mm m;
        tk_mm_init(&m, ref, (st_dtype)t, n, rows, nxmax, 7000 + (uint64_t)t);
        float *y = tk_alloc(sizeof(float) * rows * nxmax);
        float *yr = tk_alloc(sizeof(float) * rows * nxmax);
        float *ys = tk_alloc(sizeof(float) * rows * nxmax);
        for (int64_t nx = 1; nx <= nxmax; nx++) {
            ops->mul_mat[t](n, m.w, m.w_stride, 0, rows, m.x, m.x_stride, nx, y, rows);
            ref->mul_mat[t](n, m.w, m.w_stride, 0, rows, m.x, m.x_stride, nx, yr, rows);
            const int64_t cuts[] = {0, 3, 7, 16, 20, rows};
            for (int c = 0; c + 1 < 6; c++)
                ops->mul_mat[t](n, m.w, m.w_stride, cuts[c], cuts[c + 1], m.x, m.x_stride, nx, ys,
                                rows);
            tk_mm_check_alone(ops, &m, nx, y, rows);
            for (int64_t j = 0; j < nx; j++) {
                ck_assert_msg(memcmp(ys + j * rows, y + j * rows, sizeof(float) * rows) == 0,
                              "%s %s: split ranges differ (row %ld of %ld)", ops->name,
                              st_dtype_info_of((st_dtype)t)->name, (long)j, (long)nx);
                if (exact)
                    ck_assert_msg(memcmp(yr + j * rows, y + j * rows, sizeof(float) * rows) == 0,
                                  "%s %s: row %ld of a batch of %ld differs from the reference",
                                  ops->name, st_dtype_info_of((st_dtype)t)->name, (long)j,
                                  (long)nx);
            }
        }
        free(y);
        free(yr);
        free(ys);
        tk_mm_free(&m);
    }
}
END_TEST

Suite *tk_mul_mat_suite(void)
{
    Suite *s = suite_create("mul_mat");
    tk_variants_print("mul_mat");
    const int nv = tk_variant_count();
    TCase *tc = tcase_create("mul_mat");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_mul_mat_accuracy, 0, nv);
    tcase_add_loop_test(tc, test_mul_mat_batch_invariance, 0, nv);
    tcase_add_loop_test(tc, test_mul_mat_wide, 0, nv);
    tcase_add_loop_test(tc, test_mul_mat_small_batches, 0, nv);
    suite_add_tcase(s, tc);
    return s;
}
