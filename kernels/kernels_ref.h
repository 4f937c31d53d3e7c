/* kernels_ref.h - the pieces of the scalar references that the SIMD
 * variants call instead of carrying copies of them: for inputs their
 * vector code leaves to the reference (a Q8_0 / Q4_0 block holding a NaN,
 * whose result depends on element order), for the tails of the wire
 * conversions, and for kernels no variant vectorizes (argmax, f32 copies).
 * One definition each, so a variant cannot drift from the reference it is
 * tested against. Defined in kernels_ref.c and convert_ref.c, which are
 * compiled without ISA flags, so any variant may call them. The K-quant
 * reference pieces are in kquant.h. Not part of the public API. */
#ifndef ST_KERNELS_REF_H
#define ST_KERNELS_REF_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

/* st_ref_q8_0_block - ggml's reference Q8_0 quantizer on one block of
 * ST_QK values: d = absmax / 127, quants roundf(x / d) (NaN -> 0, clamped
 * to [-127, 127]). */
void st_ref_q8_0_block(const float *x, st_block_q8_0 *b);

/* st_ref_q4_0_block - ggml's reference Q4_0 quantizer on one block of
 * ST_QK values: d = max / -8 (max: the first value of largest magnitude),
 * nibbles min(15, (int)(x / d + 8.5)) (NaN -> 0). */
void st_ref_q4_0_block(const float *x, st_block_q4_0 *b);

/* st_ref_dot_fn - one output element: the dot product of a weight row of
 * n values and an activation row converted to the weight's partner dtype. */
typedef float (*st_ref_dot_fn)(int64_t n, const void *w, const void *x);

/* st_ref_mul_mat_dot - mul_mat (kernels.h) by one dot call per output
 * element: the reference products of the block-quantized dtypes
 * (kquant_ref.c, legacy_ref.c). */
void st_ref_mul_mat_dot(st_ref_dot_fn dot, int64_t n, const void *w, size_t w_stride, int64_t i0,
                        int64_t i1, const void *x, size_t x_stride, int64_t nx, float *y,
                        int64_t y_stride);

/* st_ref_gelu_mul - the reference's gelu_mul (kernels.h), which every
 * variant uses as it is: it reads a table. */
void st_ref_gelu_mul(float *g, const float *u, int64_t n);

/* st_ref_f32_to_float / st_ref_f32_from_float - copies n floats (the F32
 * entries of to_float and from_float; src and dst may overlap). */
void st_ref_f32_to_float(const void *src, float *dst, int64_t n);
void st_ref_f32_from_float(const float *src, void *dst, int64_t n);

/* st_ref_attn_head - the reference attn_head (kernels.h): the SIMD
 * variants call it for what their vector code leaves to it (a head_dim
 * that is not a multiple of 8). */
void st_ref_attn_head(const st_attn_args *a);

/* st_ref_argmax - the argmax contract of kernels.h: the first index of the
 * largest value, in element order. */
int64_t st_ref_argmax(const float *x, int64_t n);

/* st_conv_ref_i8_round - dst[i] = round_half_even(src[i] * inv) clamped to
 * [-127, 127], the per-value step of the reference i8 encoder (convert.h's
 * f32_to_i8), for finite src with |src[i] * inv| < 2^22. */
void st_conv_ref_i8_round(const float *src, int8_t *dst, size_t n, float inv);

#endif
