/* tk_suites.h - the suites of the kernel tests besides test_kernels.c's
 * own: dtypes and variants (test_dtype.c), products (test_mul_mat.c),
 * K-quants (test_kquant.c, test_kquant_oracle.c) and the legacy and IQ4
 * quants (test_legacy.c), all run by
 * test_kernels.c's main. Test code only. */
#ifndef ST_TESTS_TK_SUITES_H
#define ST_TESTS_TK_SUITES_H

#include <check.h>

#include "kernels/kernels.h"

/* The dtypes before the K-quants: float types and 32-value blocks, each
 * with a from_float (the generic op tests of test_kernels.c and
 * test_mul_mat.c cover them). */
#define TK_N_PLAIN_DTYPES ST_DT_Q2_K

/* tk_dtype_suite - the dtype table, row sizes and variant selection. */
Suite *tk_dtype_suite(void);

/* tk_mul_mat_suite - the float and Q8_0 / Q4_0 products (test_mul_mat.c). */
Suite *tk_mul_mat_suite(void);

/* tk_attn_suite - attn_head over f32, f16 and Q8_0 caches (test_attn.c). */
Suite *tk_attn_suite(void);

/* tq_kquant_suite - the K-quant tests of every variant. */
Suite *tq_kquant_suite(void);

/* tqo_oracle_suite - every variant's dequantization of the shared K-quant,
 * BF16, legacy and IQ4 quant files, and its Q8_1 quantizer, equal
 * llama.cpp's (test_kquant_oracle.c). */
Suite *tqo_oracle_suite(void);

/* tl_legacy_suite - the Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS and Q8_1 kernels
 * of every variant (test_legacy.c). */
Suite *tl_legacy_suite(void);

#endif
