/* test_attn.c - attn_head over a typed KV cache (f32, f16, Q8_0), every
 * variant present.
 *
 * Oracle: the K and V rows are made in f32, converted to the cache dtype
 * with the reference from_float and read back with the reference to_float
 * (both checked on their own in test_kernels.c); the expected output is
 * computed in double from those dequantized values: scores in double,
 * rounded to float, the soft cap in double, an exact softmax over
 * [kv0, n_kv), the weighted sum of V in double. Every variant must be
 * within 2e-5 * sum_t p_t |v_t[d]| + 1e-9 of it (the bound of the f32 test
 * before typed caches), and within twice that of the reference. Positions
 * before kv0 hold large values, so a kernel attending to them fails.
 * The reference's f32 path with kv0 = 0 and softcap = 0 must equal, bit
 * for bit, the formula of the f32-only reference it replaced (sequential
 * float dot, times scale, the reference softmax, out[d] += p_t * v_t[d] in
 * t order). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "tests/kernels/tk_suites.h"
#include "tests/kernels/tk_util.h"

#define TA_HEAD_DIM 64
#define TA_N_HEAD_KV 2 /* the head under test is the second: a nonzero offset in the row */
#define TA_KV_DIM (TA_HEAD_DIM * TA_N_HEAD_KV)
#define TA_MAX_KV 100
#define TA_FAR 1000.0f /* K and V values before kv0 */

typedef struct ta_case {
    int64_t n_kv, kv0;
    float softcap;
} ta_case;

static const ta_case ta_cases[] = {
    {1, 0, 0.0f}, {7, 0, 0.0f}, {100, 0, 0.0f}, {100, 37, 0.0f},
    {100, 0, 30.0f}, {100, 60, 5.0f}, {33, 32, 0.0f},
};
static const st_dtype ta_dtypes[] = {ST_DT_F32, ST_DT_F16, ST_DT_Q8_0};

/* ta_data - one case's cache in dtype t: f32 rows made at random (far
 * values before kv0), converted by the reference; kd/vd the dequantized
 * rows [n_kv][kv_dim]. */
typedef struct ta_data {
    float q[TA_HEAD_DIM];
    unsigned char k[TA_MAX_KV * TA_KV_DIM * 4], v[TA_MAX_KV * TA_KV_DIM * 4];
    float kd[TA_MAX_KV * TA_KV_DIM], vd[TA_MAX_KV * TA_KV_DIM];
    size_t row, head; /* bytes of a row and of a head in t */
} ta_data;

static void ta_make(ta_data *x, st_dtype t, const ta_case *c, tk_rng *r)
{
    const st_kernel_ops *ref = st_kernels_ref();
    float kf[TA_KV_DIM], vf[TA_KV_DIM];
    ck_assert_int_eq(st_row_size(t, TA_KV_DIM, &x->row), ST_K_OK);
    ck_assert_int_eq(st_row_size(t, TA_HEAD_DIM, &x->head), ST_K_OK);
    tk_fill(r, x->q, TA_HEAD_DIM, 2.0f);
    for (int64_t p = 0; p < c->n_kv; p++) {
        tk_fill(r, kf, TA_KV_DIM, 2.0f);
        tk_fill(r, vf, TA_KV_DIM, 1.0f);
        if (p < c->kv0)
            for (int i = 0; i < TA_KV_DIM; i++) {
                kf[i] = TA_FAR;
                vf[i] = TA_FAR;
            }
        ref->from_float[t](kf, x->k + (size_t)p * x->row, TA_KV_DIM);
        ref->from_float[t](vf, x->v + (size_t)p * x->row, TA_KV_DIM);
        ref->to_float[t](x->k + (size_t)p * x->row, x->kd + p * TA_KV_DIM, TA_KV_DIM);
        ref->to_float[t](x->v + (size_t)p * x->row, x->vd + p * TA_KV_DIM, TA_KV_DIM);
    }
}

static void ta_run(const st_kernel_ops *ops, const ta_data *x, st_dtype t, const ta_case *c,
                   float *out)
{
    float scores[TA_MAX_KV];
    const st_attn_args a = {.q = x->q,
                            .k = x->k + x->head,
                            .v = x->v + x->head,
                            .kv_stride = x->row,
                            .kv_dtype = t,
                            .kv0 = c->kv0,
                            .n_kv = c->n_kv,
                            .head_dim = TA_HEAD_DIM,
                            .scale = 1.0f / sqrtf((float)TA_HEAD_DIM),
                            .softcap = c->softcap,
                            .scores = scores,
                            .out = out};
    ops->attn_head(&a);
}

/* ta_expect - the double oracle over the dequantized rows of head 1; sa[d]
 * = sum_t p_t |v_t[d]|. */
static void ta_expect(const ta_data *x, const ta_case *c, double *want, double *sa)
{
    const float scale = 1.0f / sqrtf((float)TA_HEAD_DIM);
    double sc[TA_MAX_KV], p[TA_MAX_KV], mx = -INFINITY, sum = 0.0;
    for (int64_t t = c->kv0; t < c->n_kv; t++) {
        double s = 0.0;
        for (int d = 0; d < TA_HEAD_DIM; d++)
            s += (double)x->q[d] * x->kd[t * TA_KV_DIM + TA_HEAD_DIM + d];
        float sf = (float)(s * scale);
        double sv = c->softcap != 0.0f ? c->softcap * tanh((double)sf / c->softcap) : sf;
        sc[t] = sv;
        mx = sv > mx ? sv : mx;
    }
    for (int64_t t = c->kv0; t < c->n_kv; t++)
        sum += (p[t] = exp(sc[t] - mx));
    for (int d = 0; d < TA_HEAD_DIM; d++) {
        want[d] = 0.0;
        sa[d] = 0.0;
        for (int64_t t = c->kv0; t < c->n_kv; t++) {
            const double v = x->vd[t * TA_KV_DIM + TA_HEAD_DIM + d];
            want[d] += p[t] / sum * v;
            sa[d] += p[t] / sum * fabs(v);
        }
    }
}

START_TEST(test_attn_typed)
{
    const st_kernel_ops *ops = tk_variant(_i);
    const st_kernel_ops *ref = st_kernels_ref();
    static ta_data x;
    tk_rng r = {11};
    for (size_t it = 0; it < sizeof ta_dtypes / sizeof ta_dtypes[0]; it++) {
        const st_dtype t = ta_dtypes[it];
        for (size_t ic = 0; ic < sizeof ta_cases / sizeof ta_cases[0]; ic++) {
            const ta_case *c = &ta_cases[ic];
            ta_make(&x, t, c, &r);
            float out[TA_HEAD_DIM], rout[TA_HEAD_DIM];
            double want[TA_HEAD_DIM], sa[TA_HEAD_DIM];
            ta_run(ops, &x, t, c, out);
            ta_run(ref, &x, t, c, rout);
            ta_expect(&x, c, want, sa);
            for (int d = 0; d < TA_HEAD_DIM; d++) {
                const double bound = 2e-5 * sa[d] + 1e-9;
                ck_assert_msg(fabs(out[d] - want[d]) <= bound,
                              "%s attn %s n_kv %ld kv0 %ld softcap %g out[%d]=%g want %g",
                              ops->name, st_dtype_info_of(t)->name, (long)c->n_kv, (long)c->kv0,
                              (double)c->softcap, d, (double)out[d], want[d]);
                ck_assert_msg(fabs(out[d] - rout[d]) <= 2 * bound,
                              "%s attn %s n_kv %ld kv0 %ld: out[%d]=%g, the reference %g",
                              ops->name, st_dtype_info_of(t)->name, (long)c->n_kv, (long)c->kv0,
                              d, (double)out[d], (double)rout[d]);
            }
        }
    }
}
END_TEST

START_TEST(test_attn_ref_f32_formula)
{
    const st_kernel_ops *ref = st_kernels_ref();
    static ta_data x;
    tk_rng r = {5};
    const ta_case c = {TA_MAX_KV, 0, 0.0f};
    ta_make(&x, ST_DT_F32, &c, &r);
    float out[TA_HEAD_DIM], sc[TA_MAX_KV], o[TA_HEAD_DIM] = {0};
    ta_run(ref, &x, ST_DT_F32, &c, out);
    const float scale = 1.0f / sqrtf((float)TA_HEAD_DIM);
    const float *k = (const float *)(x.k + x.head), *v = (const float *)(x.v + x.head);
    for (int64_t t = 0; t < c.n_kv; t++) {
        float s = 0.0f;
        for (int d = 0; d < TA_HEAD_DIM; d++)
            s += x.q[d] * k[t * TA_KV_DIM + d];
        sc[t] = s * scale;
    }
    ref->softmax(sc, c.n_kv);
    for (int64_t t = 0; t < c.n_kv; t++)
        for (int d = 0; d < TA_HEAD_DIM; d++)
            o[d] += sc[t] * v[t * TA_KV_DIM + d];
    ck_assert_int_eq(memcmp(out, o, sizeof o), 0);
}
END_TEST

Suite *tk_attn_suite(void)
{
    Suite *s = suite_create("attn");
    tk_variants_print("attn");
    TCase *tc = tcase_create("attn");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_attn_typed, 0, tk_variant_count());
    tcase_add_test(tc, test_attn_ref_f32_formula);
    suite_add_tcase(s, tc);
    return s;
}
