/* legacy.h - private interface of the legacy and IQ4 quant kernels (Q4_1,
 * Q5_0, Q5_1, IQ4_NL, IQ4_XS weights; Q8_1 activations; block layouts in
 * kernels.h).
 *
 * The scalar functions here are the reference the "ref" table points at;
 * the SIMD tables point at the same to_float / from_float functions and
 * have their own products (legacy_avx2.c, legacy_avx512.c). Not part of
 * the public API.
 *
 * Products follow llama.cpp's scheme: the activation row is quantized to
 * the weight's partner (Q8_0 for Q5_0 and IQ4_NL, Q8_1 for Q4_1 and Q5_1,
 * Q8_K for IQ4_XS); every 32 values of a weight row give their signed
 * quants q (Q4_1: 0..15, Q5_0: q - 16, Q5_1: 0..31, IQ4_NL / IQ4_XS: the
 * st_iq4nl_values level), and the exact integer sumi = sum(q * q8). Then,
 * block after block, one float accumulator takes
 *     Q5_0, IQ4_NL:  sum += (float)sumi * (d_w * d_x)
 *     Q4_1, Q5_1:    sum += (float)sumi * (d_w * d_x) + m_w * s_x
 *     IQ4_XS:        sum += (float)sumi * (d_w * d_x), per super-block of
 *                    256, sumi = sum over its 8 sub-blocks of (ls - 32) * sumi_s
 * (no FMA). The integers are exact whatever order a SIMD variant adds them
 * in (|sumi| < 2^28), so variants equal the reference bit for bit. */
#ifndef ST_KERNELS_LEGACY_H
#define ST_KERNELS_LEGACY_H

#include "kernels/kernels.h"

#define ST_IQ4_SUBS (ST_QK_K / ST_QK) /* 32-value sub-blocks per IQ4_XS block */
#define ST_IQ4_SCALE_BIAS 32          /* an IQ4_XS sub-block scale is ls - 32 */

/* st_iq4nl_values - ggml's kvalues_iq4nl: the 16 signed levels a 4-bit
 * IQ4_NL / IQ4_XS quant indexes (|level| <= 127). */
extern const int8_t st_iq4nl_values[16];

/* st_iq4xs_scale_of - the signed scale ls - 32 of sub-block s (0..7) of an
 * IQ4_XS block with these scales_h and scales_l[4]. */
static inline int st_iq4xs_scale_of(uint16_t scales_h, const uint8_t *scales_l, int s)
{
    const int lo = (scales_l[s / 2] >> (4 * (s % 2))) & 0x0f;
    const int hi = (scales_h >> (2 * s)) & 3;
    return (lo | (hi << 4)) - ST_IQ4_SCALE_BIAS;
}

/* st_iq4xs_scale - the signed scale ls - 32 of sub-block s (0..7) of b. */
static inline int st_iq4xs_scale(const st_block_iq4_xs *b, int s)
{
    return st_iq4xs_scale_of(b->scales_h, b->scales_l, s);
}

/* st_lg_to_float_<t> - dequantize n values (n a multiple of t's block) as
 * ggml's dequantizers do: Q4_1 / Q5_1 (float)q * d + m, Q5_0 (float)(q - 16)
 * * d, IQ4_NL d * level, IQ4_XS (d * (float)(ls - 32)) * level, Q8_1
 * (float)q * d. */
void st_lg_to_float_q4_1(const void *src, float *dst, int64_t n);
void st_lg_to_float_q5_0(const void *src, float *dst, int64_t n);
void st_lg_to_float_q5_1(const void *src, float *dst, int64_t n);
void st_lg_to_float_iq4_nl(const void *src, float *dst, int64_t n);
void st_lg_to_float_iq4_xs(const void *src, float *dst, int64_t n);
void st_lg_to_float_q8_1(const void *src, float *dst, int64_t n);

/* st_lg_from_float_q8_1 - ggml's reference Q8_1 quantizer
 * (quantize_row_q8_1_ref): per block Q8_0's d = absmax / 127 and quants
 * roundf(x / d) (st_ref_q8_0_block, NaN -> 0), and s = f16((float)sum(q)
 * * d) with d the f32 scale before its rounding to f16. */
void st_lg_from_float_q8_1(const float *src, void *dst, int64_t n);

/* st_lg_dot_<t> - the scalar product of n values of a weight row of t and
 * an activation row in t's partner dtype, in the order described above. */
float st_lg_dot_q4_1(int64_t n, const void *w, const void *x);
float st_lg_dot_q5_0(int64_t n, const void *w, const void *x);
float st_lg_dot_q5_1(int64_t n, const void *w, const void *x);
float st_lg_dot_iq4_nl(int64_t n, const void *w, const void *x);
float st_lg_dot_iq4_xs(int64_t n, const void *w, const void *x);

/* st_lg_mul_mat_<t> - the mul_mat contract of kernels.h with the dots above. */
void st_lg_mul_mat_q4_1(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                        const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void st_lg_mul_mat_q5_0(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                        const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void st_lg_mul_mat_q5_1(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                        const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void st_lg_mul_mat_iq4_nl(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                          const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void st_lg_mul_mat_iq4_xs(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                          const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);

#endif
