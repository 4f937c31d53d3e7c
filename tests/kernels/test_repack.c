/* test_repack.c - the R8 weight layout (kernels/repack.h) and the products
 * on it: the layout's bytes are where repack.h says, gathering gives back
 * every plain block, repacking is deterministic, bad shapes are refused,
 * and mul_mat_r8 of every variant equals the plain reference mul_mat bit
 * for bit at every batch size 1..12 (K-quants: 1..20, across the switch to
 * its panel path), at prefill width (70 rows of 5632), and over uneven
 * row ranges, including ranges that do not start or end on a group of 8.
 * Q8_0, Q4_0, Q4_K, Q6_K, Q4_1, Q5_0, Q5_1, IQ4_NL and IQ4_XS products
 * are required of every variant (tr_expects). */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/fp16.h"
#include "kernels/kernels.h"
#include "kernels/repack.h"
#include "tests/kernels/tk_util.h"

typedef struct tr_mat {
    st_dtype t;
    int64_t n, rows, nx;
    size_t ws, xs;
    uint8_t *w, *wr, *x; /* plain weights, R8 weights, activations (Q8_0 or Q8_K) */
} tr_mat;

/* tr_random_k - rows of random Q4_K or Q6_K super-blocks (every quant
 * and scale bit random, d and dmin sane halves), row 1 all extreme (Q4_K:
 * quants 15, scales and mins 63; Q6_K: quants 63, scales -1) and row 2's
 * Q6_K scales -128. */
static void tr_random_k(tk_rng *r, st_dtype t, uint8_t *w, size_t ws, int64_t rows)
{
    for (size_t k = 0; k < ws * (size_t)rows; k++)
        w[k] = (uint8_t)tk_next(r);
    if (rows > 2)
        memset(w + ws, 0xff, ws);
    const size_t bb = st_dtype_info_of(t)->blck_bytes;
    for (size_t b = 0; b < ws * (size_t)rows / bb; b++) {
        const uint16_t d = st_f32_to_f16(ldexpf(1.0f + 0.5f * tk_unif(r), -8));
        const uint16_t dmin = st_f32_to_f16(ldexpf(1.0f + 0.5f * tk_unif(r), -9));
        if (t == ST_DT_Q4_K) {
            st_block_q4_k *blk = (st_block_q4_k *)(void *)(w + b * bb);
            blk->d = d;
            blk->dmin = dmin;
        } else {
            st_block_q6_k *blk = (st_block_q6_k *)(void *)(w + b * bb);
            blk->d = d;
            if (b * bb / ws == 2)
                memset(blk->scales, 0x80, sizeof blk->scales);
        }
    }
}

/* tr_lg - the legacy and IQ4 quants (Q4_1 .. IQ4_XS), which Strata never
 * quantizes: their rows are random bytes with sane d (and m). */
static int tr_lg(st_dtype t) { return t >= ST_DT_Q4_1 && t <= ST_DT_IQ4_XS; }

/* tr_random_lg - rows of random blocks of a tr_lg type (every bit random,
 * d and m sane halves; d is every block's first field, m, when there is
 * one, its second). */
static void tr_random_lg(tk_rng *r, st_dtype t, uint8_t *w, size_t ws, int64_t rows)
{
    for (size_t k = 0; k < ws * (size_t)rows; k++)
        w[k] = (uint8_t)tk_next(r);
    const size_t bb = st_dtype_info_of(t)->blck_bytes;
    for (size_t b = 0; b < ws * (size_t)rows / bb; b++) {
        const uint16_t d = st_f32_to_f16(ldexpf(1.0f + 0.5f * tk_unif(r), -8));
        const uint16_t m = st_f32_to_f16(ldexpf(tk_unif(r), -4));
        memcpy(w + b * bb, &d, sizeof d);
        if (t == ST_DT_Q4_1 || t == ST_DT_Q5_1)
            memcpy(w + b * bb + sizeof d, &m, sizeof m);
    }
}

/* tr_init - random weights (quantized from floats, plus a few raw extreme
 * quants: -128 for Q8_0; K-quants: tr_random_k; legacy and IQ4 quants:
 * tr_random_lg) and activations (in the weights' activation dtype); wr =
 * the R8 repacking of w. */
static void tr_init(tr_mat *m, st_dtype t, int64_t n, int64_t rows, int64_t nx, uint64_t seed)
{
    const st_kernel_ops *ref = st_kernels_ref();
    m->t = t;
    m->n = n;
    m->rows = rows;
    m->nx = nx;
    ck_assert_int_eq(st_row_size(t, n, &m->ws), ST_K_OK);
    const st_dtype act = st_dtype_info_of(t)->act;
    const int kq = t == ST_DT_Q4_K || t == ST_DT_Q6_K || tr_lg(t);
    ck_assert_int_eq(st_row_size(act, n, &m->xs), ST_K_OK);
    m->w = tk_alloc(m->ws * (size_t)rows);
    m->wr = tk_alloc(m->ws * (size_t)rows);
    m->x = tk_alloc(m->xs * (size_t)nx);
    float *tmp = tk_alloc(sizeof(float) * (size_t)n);
    tk_rng r = {seed};
    for (int64_t i = 0; i < rows + nx; i++) {
        for (int64_t k = 0; k < n; k++)
            tmp[k] = (float)((double)(tk_next(&r) >> 11) * 0x1p-53 - 0.5) *
                     (i < rows ? 0.2f : 4.0f);
        if (i < rows && !kq)
            ref->from_float[t](tmp, m->w + (size_t)i * m->ws, n);
        else if (i >= rows)
            ref->from_float[act](tmp, m->x + (size_t)(i - rows) * m->xs, n);
    }
    if (tr_lg(t))
        tr_random_lg(&r, t, m->w, m->ws, rows);
    else if (kq)
        tr_random_k(&r, t, m->w, m->ws, rows);
    if (t == ST_DT_Q8_0) /* the extreme quant the sign trick must handle */
        for (int64_t i = 0; i < rows; i += 3)
            ((st_block_q8_0 *)(void *)(m->w + (size_t)i * m->ws))[0].qs[i % 32] = -128;
    ck_assert_int_eq(st_r8_repack(t, n, m->w, m->ws, rows, m->wr), ST_K_OK);
    free(tmp);
}

static void tr_free(tr_mat *m)
{
    free(m->w);
    free(m->wr);
    free(m->x);
}

START_TEST(test_layout)
{
    /* Q8_0: byte 16 + 32c + 4r + k of group block b = qs[4c + k] of row r */
    tr_mat m;
    tr_init(&m, ST_DT_Q8_0, 64, 16, 1, 1);
    for (int64_t i = 0; i < 16; i++)
        for (int64_t b = 0; b < 2; b++) {
            const st_block_q8_0 *p = (const st_block_q8_0 *)(const void *)(m.w + i * m.ws) + b;
            const uint8_t *o = m.wr + (size_t)(i / 8) * 8 * m.ws + (size_t)b * 272;
            ck_assert(memcmp(o + 2 * (i % 8), &p->d, 2) == 0);
            for (int c = 0; c < 8; c++)
                ck_assert(memcmp(o + 16 + 32 * c + 4 * (i % 8), p->qs + 4 * c, 4) == 0);
            st_block_q8_0 g;
            st_r8_gather(ST_DT_Q8_0, m.wr, m.ws, i, b, &g);
            ck_assert(memcmp(&g, p, sizeof g) == 0);
        }
    tr_free(&m);
    /* Q4_0: low nibble = element 4v + k, high nibble = element 16 + 4v + k */
    tr_init(&m, ST_DT_Q4_0, 64, 16, 1, 2);
    for (int64_t i = 0; i < 16; i++)
        for (int64_t b = 0; b < 2; b++) {
            const st_block_q4_0 *p = (const st_block_q4_0 *)(const void *)(m.w + i * m.ws) + b;
            const uint8_t *o = m.wr + (size_t)(i / 8) * 8 * m.ws + (size_t)b * 144;
            ck_assert(memcmp(o + 2 * (i % 8), &p->d, 2) == 0);
            for (int v = 0; v < 4; v++)
                for (int k = 0; k < 4; k++) {
                    const uint8_t byte = o[16 + 32 * v + 4 * (i % 8) + k];
                    ck_assert_int_eq(byte & 0x0f, p->qs[4 * v + k] & 0x0f);
                    ck_assert_int_eq(byte >> 4, p->qs[4 * v + k] >> 4);
                }
            st_block_q4_0 g;
            st_r8_gather(ST_DT_Q4_0, m.wr, m.ws, i, b, &g);
            ck_assert(memcmp(&g, p, sizeof g) == 0);
        }
    /* deterministic: a second repacking gives the same bytes */
    uint8_t *again = tk_alloc(m.ws * 16);
    ck_assert_int_eq(st_r8_repack(ST_DT_Q4_0, 64, m.w, m.ws, 16, again), ST_K_OK);
    ck_assert(memcmp(again, m.wr, m.ws * 16) == 0);
    free(again);
    tr_free(&m);
}
END_TEST

START_TEST(test_layout_q4_k)
{
    /* the offsets of repack.h, piece by piece, and gathering back */
    tr_mat m;
    tr_init(&m, ST_DT_Q4_K, 512, 16, 1, 3);
    const size_t gbb = 8 * sizeof(st_block_q4_k);
    for (int64_t i = 0; i < 16; i++)
        for (int64_t b = 0; b < 2; b++) {
            const st_block_q4_k *p = (const st_block_q4_k *)(const void *)(m.w + i * m.ws) + b;
            const uint8_t *o = m.wr + (size_t)(i / 8) * 8 * m.ws + (size_t)b * gbb;
            const int r = (int)(i % 8);
            ck_assert(memcmp(o + ST_R8_Q4K_D + 2 * r, &p->d, 2) == 0);
            ck_assert(memcmp(o + ST_R8_Q4K_DMIN + 2 * r, &p->dmin, 2) == 0);
            ck_assert(memcmp(o + ST_R8_Q4K_SC8 + 8 * r, p->scales, 8) == 0);
            ck_assert(memcmp(o + ST_R8_Q4K_SC4 + 4 * r, p->scales + 8, 4) == 0);
            for (int L = 0; L < 16; L++)
                ck_assert(memcmp(o + ST_R8_Q4K_QS + 64 * L + 8 * r, p->qs + 8 * L, 8) == 0);
            st_block_q4_k g;
            st_r8_gather(ST_DT_Q4_K, m.wr, m.ws, i, b, &g);
            ck_assert(memcmp(&g, p, sizeof g) == 0);
        }
    ck_assert_int_eq(ST_R8_Q4K_QS + 16 * 64, (int)gbb);
    tr_free(&m);
}
END_TEST

START_TEST(test_layout_q6_k)
{
    tr_mat m;
    tr_init(&m, ST_DT_Q6_K, 512, 16, 1, 4);
    const size_t gbb = 8 * sizeof(st_block_q6_k);
    for (int64_t i = 0; i < 16; i++)
        for (int64_t b = 0; b < 2; b++) {
            const st_block_q6_k *p = (const st_block_q6_k *)(const void *)(m.w + i * m.ws) + b;
            const uint8_t *o = m.wr + (size_t)(i / 8) * 8 * m.ws + (size_t)b * gbb;
            const int r = (int)(i % 8);
            ck_assert(memcmp(o + ST_R8_Q6K_D + 2 * r, &p->d, 2) == 0);
            ck_assert(memcmp(o + ST_R8_Q6K_SC_LO + 8 * r, p->scales, 8) == 0);
            ck_assert(memcmp(o + ST_R8_Q6K_SC_HI + 8 * r, p->scales + 8, 8) == 0);
            for (int L = 0; L < 16; L++)
                ck_assert(memcmp(o + ST_R8_Q6K_QL(L) + 8 * r, p->ql + 8 * L, 8) == 0);
            for (int M = 0; M < 8; M++)
                ck_assert(memcmp(o + ST_R8_Q6K_QH(M) + 8 * r, p->qh + 8 * M, 8) == 0);
            st_block_q6_k g;
            st_r8_gather(ST_DT_Q6_K, m.wr, m.ws, i, b, &g);
            ck_assert(memcmp(&g, p, sizeof g) == 0);
        }
    /* the 24 lines fill the group block, in the order the products read them */
    ck_assert_int_eq(ST_R8_Q6K_LINES + 24 * ST_R8_Q6K_LINE, (int)gbb);
    ck_assert_int_eq(ST_R8_Q6K_QH(0), ST_R8_Q6K_LINES);
    ck_assert_int_eq(ST_R8_Q6K_QL(0), ST_R8_Q6K_LINES + 64);
    ck_assert_int_eq(ST_R8_Q6K_QL(4), ST_R8_Q6K_LINES + 128);
    ck_assert_int_eq(ST_R8_Q6K_QL(15), ST_R8_Q6K_LINES + 23 * 64);
    tr_free(&m);
}
END_TEST

/* the legacy and IQ4 quants: each plain piece where repack.h says (d, m,
 * qh, the nibble bytes), and gathering gives back every plain block */
START_TEST(test_layout_lg)
{
    static const st_dtype ts[] = {ST_DT_Q4_1, ST_DT_Q5_0, ST_DT_Q5_1, ST_DT_IQ4_NL, ST_DT_IQ4_XS};
    for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++) {
        const st_dtype t = ts[k];
        tr_mat m;
        tr_init(&m, t, 512, 16, 1, 60 + k);
        const size_t bb = st_dtype_info_of(t)->blck_bytes, gbb = 8 * bb;
        for (int64_t i = 0; i < 16; i++)
            for (int64_t b = 0; b < 512 / st_dtype_info_of(t)->blck; b++) {
                const uint8_t *p = m.w + i * m.ws + b * bb;
                const uint8_t *g = m.wr + (i / 8) * 8 * m.ws + b * gbb;
                const int r = (int)(i % 8);
                ck_assert_mem_eq(g + 2 * r, p, 2); /* d */
                if (t == ST_DT_IQ4_XS) {
                    ck_assert_mem_eq(g + ST_R8_XS_SH + 2 * r, p + 2, 2);
                    ck_assert_mem_eq(g + ST_R8_XS_SL + 4 * r, p + 4, 4);
                    for (int s = 0; s < 8; s++)
                        ck_assert_mem_eq(g + ST_R8_XS_QS + 128 * s + 16 * r, p + 8 + 16 * s, 16);
                } else {
                    const size_t qs = bb - 16; /* the nibbles end every block */
                    ck_assert_mem_eq(g + ST_R8_LG_QS(t) + 16 * r, p + qs, 16);
                    if (t == ST_DT_Q4_1 || t == ST_DT_Q5_1)
                        ck_assert_mem_eq(g + ST_R8_LG_M + 2 * r, p + 2, 2);
                    if (t == ST_DT_Q5_0 || t == ST_DT_Q5_1)
                        ck_assert_mem_eq(g + ST_R8_LG_QH(t) + 4 * r, p + qs - 4, 4);
                }
                uint8_t back[sizeof(st_block_iq4_xs)];
                st_r8_gather(t, m.wr, m.ws, i, b, back);
                ck_assert_mem_eq(back, p, bb);
            }
        tr_free(&m);
    }
}
END_TEST

START_TEST(test_bad_shapes)
{
    uint8_t src[8 * 34 * 2], dst[8 * 34 * 2];
    memset(src, 0, sizeof src);
    memset(dst, 0xaa, sizeof dst);
    ck_assert_int_eq(st_r8_repack(ST_DT_Q8_0, 64, src, 68, 7, dst), ST_K_ESHAPE); /* rows */
    ck_assert_int_eq(st_r8_repack(ST_DT_Q8_0, 64, src, 70, 8, dst), ST_K_ESHAPE); /* stride */
    ck_assert_int_eq(st_r8_repack(ST_DT_Q8_0, 48, src, 51, 8, dst), ST_K_ESHAPE); /* n % 32 */
    ck_assert_int_eq(st_r8_repack(ST_DT_F16, 64, src, 128, 8, dst), ST_K_ETYPE);
    ck_assert_int_eq(st_r8_repack(ST_DT_Q4_K, 128, src, 72, 8, dst), ST_K_ESHAPE); /* n % 256 */
    ck_assert_int_eq(st_r8_repack(ST_DT_Q5_K, 256, src, 176, 8, dst), ST_K_ETYPE);
    for (size_t k = 0; k < sizeof dst; k++)
        ck_assert_int_eq(dst[k], 0xaa); /* untouched */
    ck_assert(st_r8_supported(ST_DT_Q8_0) && st_r8_supported(ST_DT_Q4_0));
    ck_assert(st_r8_supported(ST_DT_Q4_K) && st_r8_supported(ST_DT_Q6_K));
    ck_assert(!st_r8_supported(ST_DT_Q5_K) && !st_r8_supported(ST_DT_Q2_K));
    ck_assert(!st_r8_supported(ST_DT_F32) && !st_r8_supported(ST_DT_BF16));
    ck_assert(st_r8_supported(ST_DT_Q4_1) && st_r8_supported(ST_DT_IQ4_XS));
    ck_assert(!st_r8_supported(ST_DT_Q8_1) && !st_r8_supported(ST_DT_Q8_K));
}
END_TEST

/* tr_check - mul_mat_r8 of ops over [i0, i1) equals the reference's plain
 * mul_mat over the same rows, bit for bit. */
static void tr_check(const st_kernel_ops *ops, const tr_mat *m, int64_t nx, int64_t i0, int64_t i1)
{
    const st_kernel_ops *ref = st_kernels_ref();
    float *a = tk_alloc(sizeof(float) * (size_t)(m->rows * nx));
    float *b = tk_alloc(sizeof(float) * (size_t)(m->rows * nx));
    for (int64_t k = 0; k < m->rows * nx; k++)
        a[k] = b[k] = -1.0f;
    ops->mul_mat_r8[m->t](m->n, m->wr, m->ws, i0, i1, m->x, m->xs, nx, a, m->rows);
    ref->mul_mat[m->t](m->n, m->w, m->ws, i0, i1, m->x, m->xs, nx, b, m->rows);
    for (int64_t j = 0; j < nx; j++)
        for (int64_t i = 0; i < m->rows; i++)
            ck_assert_msg(memcmp(&a[j * m->rows + i], &b[j * m->rows + i], sizeof(float)) == 0,
                          "%s %s n=%ld nx=%ld rows [%ld, %ld): y[%ld][%ld] = %.9g, plain "
                          "reference %.9g",
                          ops->name, st_dtype_info_of(m->t)->name, (long)m->n, (long)nx, (long)i0,
                          (long)i1, (long)j, (long)i, (double)a[j * m->rows + i],
                          (double)b[j * m->rows + i]);
    free(a);
    free(b);
}

/* tr_expects - whether variant ops must have an R8 product for t: every
 * variant (reference, AVX2, AVX-512) has one for each of Q8_0, Q4_0, Q4_K
 * and Q6_K, so a variant that lost one fails here instead of silently
 * serving the reference's. */
static bool tr_expects(const st_kernel_ops *ops, st_dtype t)
{
    (void)ops;
    return t == ST_DT_Q8_0 || t == ST_DT_Q4_0 || t == ST_DT_Q4_K || t == ST_DT_Q6_K || tr_lg(t);
}

START_TEST(test_products)
{
    const st_kernel_ops *ops = tk_variant(_i);
    const st_dtype ts[] = {ST_DT_Q8_0, ST_DT_Q4_0, ST_DT_Q4_K,   ST_DT_Q6_K,  ST_DT_Q4_1,
                           ST_DT_Q5_0, ST_DT_Q5_1, ST_DT_IQ4_NL, ST_DT_IQ4_XS};
    for (int k = 0; k < (int)(sizeof ts / sizeof ts[0]); k++) {
        const int kq = ts[k] == ST_DT_Q4_K || ts[k] == ST_DT_Q6_K;
        const int n1 = kq || ts[k] == ST_DT_IQ4_XS ? 1024 : 1056; /* a multiple of the block */
        if (!tr_expects(ops, ts[k]))
            continue;
        ck_assert_msg(ops->mul_mat_r8[ts[k]] != NULL, "%s has no R8 product for %s", ops->name,
                      st_dtype_info_of(ts[k])->name);
        tr_mat m;
        /* every batch size a decode step can have (Q4_K: and the switch to
         * the panel path at 16); 24 rows = 3 groups */
        const int64_t max_nx = kq ? 20 : 12;
        tr_init(&m, ts[k], n1, 24, max_nx, 30 + (uint64_t)k);
        for (int64_t nx = 1; nx <= max_nx; nx++) {
            tr_check(ops, &m, nx, 0, 24);
            tr_check(ops, &m, nx, 8, 16);  /* one group */
            tr_check(ops, &m, nx, 3, 21);  /* partial groups at both ends */
            tr_check(ops, &m, nx, 17, 19); /* inside one group */
        }
        tr_free(&m);
        /* prefill width: several k-panels, more activation rows than a group */
        tr_init(&m, ts[k], 5632, 16, 70, 40 + (uint64_t)k);
        tr_check(ops, &m, 70, 0, 16);
        tr_check(ops, &m, 1, 0, 16);
        tr_free(&m);
        if (kq) { /* a long row: 160 super-blocks */
            tr_init(&m, ts[k], 40960, 8, 17, 50 + (uint64_t)k);
            tr_check(ops, &m, 17, 0, 8);
            tr_check(ops, &m, 3, 0, 8);
            tr_free(&m);
        }
    }
}
END_TEST

static Suite *repack_suite(void)
{
    Suite *s = suite_create("repack");
    tk_variants_print("repack");
    TCase *tc = tcase_create("repack");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_layout);
    tcase_add_test(tc, test_layout_q4_k);
    tcase_add_test(tc, test_layout_q6_k);
    tcase_add_test(tc, test_layout_lg);
    tcase_add_test(tc, test_bad_shapes);
    tcase_add_loop_test(tc, test_products, 0, tk_variant_count());
    suite_add_tcase(s, tc);
    suite_add_tcase(s, tk_variants_tcase());
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(repack_suite());
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
