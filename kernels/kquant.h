/* kquant.h - private interface of the K-quant kernels (Q2_K .. Q6_K weights,
 * Q8_K activations; block layouts in kernels.h).
 *
 * The scalar functions here are the reference the "ref" table points at;
 * SIMD variants put them in their own tables for what they do not
 * vectorize, and call them for edge cases (a row's remainder), so every
 * table covers every K-quant dtype. Not part of the public API.
 *
 * Products follow llama.cpp's scheme: the activation row is quantized to
 * Q8_K (per super-block f32 d = max / -127, quants round(x / d)); each
 * super-block of a weight row gives exact integers, sumi = sum over its
 * sub-blocks s of sc_s * sum(q * q8), and (Q2_K, Q4_K, Q5_K) summ = sum of
 * m_s * (the bsums of the sub-block's Q8_K quants); then, super-block after
 * super-block, a float accumulator takes
 *     sum += (d_x * d_w) * (float)sumi - (d_x * dmin_w) * (float)summ
 * (Q3_K, Q6_K: no summ term). The integers are exact whatever order a SIMD
 * variant adds them in, so variants equal the reference bit for bit. */
#ifndef ST_KERNELS_KQUANT_H
#define ST_KERNELS_KQUANT_H

#include "kernels/kernels.h"

/* st_kq_to_float_<t> - dequantize n values (n a multiple of ST_QK_K). */
void st_kq_to_float_q2_k(const void *src, float *dst, int64_t n);
void st_kq_to_float_q3_k(const void *src, float *dst, int64_t n);
void st_kq_to_float_q4_k(const void *src, float *dst, int64_t n);
void st_kq_to_float_q5_k(const void *src, float *dst, int64_t n);
void st_kq_to_float_q6_k(const void *src, float *dst, int64_t n);
void st_kq_to_float_q8_k(const void *src, float *dst, int64_t n);

/* st_kq_from_float_q8_k - ggml's reference Q8_K quantizer: per super-block
 * the value of largest magnitude max gives d = 1 / (-127 / max), quants
 * round-half-even(x * (-127 / max)) capped at 127, bsums their sums of 16;
 * an all-zero super-block is all zero. NaN inputs give quant 0. */
void st_kq_from_float_q8_k(const float *src, void *dst, int64_t n);

/* st_kq_dot_<t> - the scalar product of n values of a weight row of t and
 * an activation row in Q8_K, in the order described above. */
float st_kq_dot_q2_k(int64_t n, const void *w, const void *x);
float st_kq_dot_q3_k(int64_t n, const void *w, const void *x);
float st_kq_dot_q4_k(int64_t n, const void *w, const void *x);
float st_kq_dot_q5_k(int64_t n, const void *w, const void *x);
float st_kq_dot_q6_k(int64_t n, const void *w, const void *x);

/* st_kq_mul_mat_<t> - the mul_mat contract of kernels.h with the dots above. */
void st_kq_mul_mat_q2_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                        const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void st_kq_mul_mat_q3_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                        const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void st_kq_mul_mat_q4_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                        const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void st_kq_mul_mat_q5_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                        const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void st_kq_mul_mat_q6_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                        const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);

/* st_kq_step - one super-block's term added to the running sum, the one
 * float formula of every variant (dx: the Q8_K scale; d, dmin: the weight
 * block's; sumi, summ: its exact integer sums). */
static inline float st_kq_step(float sum, float dx, float d, float dmin, int32_t sumi, int32_t summ)
{
    return sum + ((dx * d) * (float)sumi - (dx * dmin) * (float)summ);
}

/* ---- unpacking helpers shared by the reference and the SIMD variants ---- */

/* st_kq_scale_min_k4 - the 6-bit scale (*sc) and min (*m) of sub-block j
 * (0..7) of a Q4_K / Q5_K super-block from its 12 packed bytes: bytes 0..3
 * hold scales 0..3 in their low 6 bits, bytes 4..7 mins 0..3; for j >= 4
 * the low 4 bits come from the nibbles of bytes 8..11 and the top 2 bits
 * from the spare top bits of bytes 0..7. */
static inline void st_kq_scale_min_k4(int j, const uint8_t *q, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* st_kq_scales_q3 - the 16 signed scales (6-bit value - 32) of a Q3_K
 * super-block: the low 4 bits of scale j are the low (j < 8) or high
 * (j >= 8) nibble of byte j % 8; its top 2 bits are bits 2 (j / 4) .. of
 * byte 8 + j % 4. */
static inline void st_kq_scales_q3(const uint8_t *q, int8_t out[16])
{
    for (int j = 0; j < 16; j++) {
        const int lo = j < 8 ? (q[j] & 0x0f) : (q[j - 8] >> 4);
        const int hi = (q[8 + j % 4] >> (2 * (j / 4))) & 3;
        out[j] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

#endif
