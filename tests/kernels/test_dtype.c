/* test_dtype.c - the dtype table (names, ggml type numbers, block
 * geometry, activation dtypes), row sizes, and variant selection with the
 * completeness of every variant's table. A suite of the 'kernels' test. */
#include <check.h>
#include <stdlib.h>

#include "kernels/kernels.h"
#include "tests/kernels/tk_suites.h"
#include "tests/kernels/tk_util.h"

/* ---- dtype table ---- */

START_TEST(test_dtype_table)
{
    static const struct {
        st_dtype t;
        const char *name;
        uint32_t ggml;
        int64_t blck;
        size_t bytes;
        st_dtype act;
    } want[] = {
        {ST_DT_F32, "f32", 0, 1, 4, ST_DT_F32},
        {ST_DT_F16, "f16", 1, 1, 2, ST_DT_F16},
        {ST_DT_BF16, "bf16", 30, 1, 2, ST_DT_BF16},
        {ST_DT_Q8_0, "q8_0", 8, 32, 34, ST_DT_Q8_0},
        {ST_DT_Q4_0, "q4_0", 2, 32, 18, ST_DT_Q8_0},
        {ST_DT_Q2_K, "q2_k", 10, 256, 84, ST_DT_Q8_K},
        {ST_DT_Q3_K, "q3_k", 11, 256, 110, ST_DT_Q8_K},
        {ST_DT_Q4_K, "q4_k", 12, 256, 144, ST_DT_Q8_K},
        {ST_DT_Q5_K, "q5_k", 13, 256, 176, ST_DT_Q8_K},
        {ST_DT_Q6_K, "q6_k", 14, 256, 210, ST_DT_Q8_K},
        {ST_DT_Q8_K, "q8_k", 15, 256, 292, ST_DT_Q8_K},
        {ST_DT_Q4_1, "q4_1", 3, 32, 20, ST_DT_Q8_1},
        {ST_DT_Q5_0, "q5_0", 6, 32, 22, ST_DT_Q8_0},
        {ST_DT_Q5_1, "q5_1", 7, 32, 24, ST_DT_Q8_1},
        {ST_DT_IQ4_NL, "iq4_nl", 20, 32, 18, ST_DT_Q8_0},
        {ST_DT_IQ4_XS, "iq4_xs", 23, 256, 136, ST_DT_Q8_K},
        {ST_DT_Q8_1, "q8_1", 9, 32, 36, ST_DT_Q8_1},
    };
    for (size_t k = 0; k < sizeof(want) / sizeof(want[0]); k++) {
        const st_dtype_info *info = st_dtype_info_of(want[k].t);
        ck_assert_ptr_nonnull(info);
        ck_assert_str_eq(info->name, want[k].name);
        ck_assert_uint_eq(info->ggml_type, want[k].ggml);
        ck_assert_int_eq(info->blck, want[k].blck);
        ck_assert_uint_eq(info->blck_bytes, want[k].bytes);
        ck_assert_int_eq(info->act, want[k].act);
        st_dtype t = ST_DT_COUNT;
        ck_assert_int_eq(st_dtype_from_ggml(want[k].ggml, &t), ST_K_OK);
        ck_assert_int_eq(t, want[k].t);
        t = ST_DT_COUNT;
        ck_assert_int_eq(st_dtype_from_name(want[k].name, &t), ST_K_OK);
        ck_assert_int_eq(t, want[k].t);
    }
    st_dtype t;
    ck_assert_ptr_null(st_dtype_info_of(ST_DT_COUNT));
    ck_assert_int_eq(st_dtype_from_ggml(21, &t), ST_K_ETYPE); /* ggml's iq3_s: unsupported */
    ck_assert_int_eq(st_dtype_from_ggml(16, &t), ST_K_ETYPE); /* ggml's iq2_xxs: unsupported */
    ck_assert_int_eq(st_dtype_from_name("q4_K", &t), ST_K_ETYPE);
    ck_assert_int_eq(st_dtype_from_name("F32", &t), ST_K_ETYPE);
}
END_TEST

START_TEST(test_row_size)
{
    size_t sz = 0;
    ck_assert_int_eq(st_row_size(ST_DT_F32, 3, &sz), ST_K_OK);
    ck_assert_uint_eq(sz, 12);
    ck_assert_int_eq(st_row_size(ST_DT_BF16, 7, &sz), ST_K_OK);
    ck_assert_uint_eq(sz, 14);
    ck_assert_int_eq(st_row_size(ST_DT_Q8_0, 256, &sz), ST_K_OK);
    ck_assert_uint_eq(sz, 8 * 34);
    ck_assert_int_eq(st_row_size(ST_DT_Q4_0, 256, &sz), ST_K_OK);
    ck_assert_uint_eq(sz, 8 * 18);
    ck_assert_int_eq(st_row_size(ST_DT_Q4_K, 512, &sz), ST_K_OK);
    ck_assert_uint_eq(sz, 2 * 144);
    ck_assert_int_eq(st_row_size(ST_DT_Q8_K, 768, &sz), ST_K_OK);
    ck_assert_uint_eq(sz, 3 * 292);
    ck_assert_int_eq(st_row_size(ST_DT_Q6_K, 288, &sz), ST_K_ESHAPE);
    ck_assert_int_eq(st_row_size(ST_DT_Q4_0, 0, &sz), ST_K_OK);
    ck_assert_uint_eq(sz, 0);
    sz = 777;
    const int64_t bad[] = {1, 31, 33, 48, 255, -32, -1};
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        ck_assert_int_eq(st_row_size(ST_DT_Q8_0, bad[k], &sz), ST_K_ESHAPE);
        ck_assert_int_eq(st_row_size(ST_DT_Q4_0, bad[k], &sz), ST_K_ESHAPE);
    }
    ck_assert_uint_eq(sz, 777); /* untouched on error */
    ck_assert_int_eq(st_row_size(ST_DT_F32, -1, &sz), ST_K_ESHAPE);
    ck_assert_int_eq(st_row_size(ST_DT_COUNT, 32, &sz), ST_K_ETYPE);
    ck_assert_int_eq(st_row_size(ST_DT_F32, INT64_MAX, &sz), ST_K_ESHAPE); /* overflow */
}
END_TEST

/* ---- variant selection ---- */

START_TEST(test_select)
{
    const st_kernel_ops *ref = st_kernels_ref();
    ck_assert_ptr_nonnull(ref);
    ck_assert_str_eq(ref->name, "ref");
    ck_assert_ptr_eq(st_kernels_get(ST_KVAR_REF), ref);
    ck_assert_ptr_null(st_kernels_get(ST_KVAR_COUNT));
    ck_assert_ptr_eq(st_kernels_select(1), ref);
    const st_kernel_ops *best = st_kernels_select(0);
    ck_assert_ptr_nonnull(best);
    ck_assert_ptr_eq(st_kernels_get(best->variant), best);
    ck_assert_int_eq(setenv("STRATA_KERNELS", "ref", 1), 0);
    ck_assert_ptr_eq(st_kernels_select(0), ref);
    unsetenv("STRATA_KERNELS");
    for (int i = 0; i < tk_variant_count(); i++) {
        const st_kernel_ops *ops = tk_variant(i);
        ck_assert_ptr_eq(st_kernels_get(ops->variant), ops);
        ck_assert_str_eq(ops->name, st_kvariant_name(ops->variant));
        for (int t = 0; t < TK_N_PLAIN_DTYPES; t++) {
            ck_assert_ptr_nonnull(ops->to_float[t]);
            ck_assert_ptr_nonnull(ops->from_float[t]);
            ck_assert_ptr_nonnull(ops->mul_mat[t]);
        }
        /* K-quants, legacy and IQ4 quants: read (to_float: embedding
         * rows), never written; each has a product with its activation
         * dtype; the activation dtypes Q8_K and Q8_1 are never weights */
        for (int t = TK_N_PLAIN_DTYPES; t < ST_DT_COUNT; t++) {
            ck_assert_ptr_nonnull(ops->to_float[t]);
            const st_dtype act = st_dtype_info_of((st_dtype)t)->act;
            ck_assert(act == ST_DT_Q8_K || act == ST_DT_Q8_1 || act == ST_DT_Q8_0);
            ck_assert_ptr_nonnull(ops->from_float[act]);
            if (t == ST_DT_Q8_K || t == ST_DT_Q8_1) {
                ck_assert_int_eq(act, t);
                ck_assert_ptr_nonnull(ops->from_float[t]);
                ck_assert_ptr_null(ops->mul_mat[t]);
            } else {
                ck_assert_ptr_null(ops->from_float[t]);
                ck_assert_ptr_nonnull(ops->mul_mat[t]);
            }
        }
        ck_assert(ops->rmsnorm && ops->rope && ops->rope_neox && ops->softmax && ops->silu_mul &&
                  ops->add && ops->attn_head && ops->argmax);
    }
}
END_TEST

Suite *tk_dtype_suite(void)
{
    Suite *s = suite_create("dtype");
    TCase *tc = tcase_create("dtype");
    tcase_add_test(tc, test_dtype_table);
    tcase_add_test(tc, test_row_size);
    tcase_add_test(tc, test_select);
    suite_add_tcase(s, tc);
    suite_add_tcase(s, tk_variants_tcase());
    return s;
}
