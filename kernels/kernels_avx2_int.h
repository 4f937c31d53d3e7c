/* kernels_avx2_int.h - private interface between the files of the AVX2
 * variant (kernels_avx2.c: table, conversions, row ops; kernels_avx2_q.c:
 * Q8_0 / Q4_0 products; kernels_avx2_r8.c: the same on R8 weights;
 * kernels_avx2_f.c: F32 / F16 / BF16 products; kquant_avx2.c: K-quant
 * products; kquant_avx2_r8.c: Q4_K / Q6_K products on R8 weights;
 * legacy_avx2.c: Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS products).
 * Compiled only with -mavx2 -mfma -mf16c; not part of the public API. */
#ifndef ST_KERNELS_AVX2_INT_H
#define ST_KERNELS_AVX2_INT_H

#include "kernels/fp16.h"
#include "kernels/kernels.h"

/* avx2_mul_mat_q8_0 / avx2_mul_mat_q4_0 - the mul_mat contract of
 * kernels.h for Q8_0 (resp. Q4_0) weights and Q8_0 activations, with
 * results bit-identical to the reference: exact integer block sums, then
 * sum = sum + (float)sumi * (d_w * d_x) block after block in float. */
void avx2_mul_mat_q8_0(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                       const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void avx2_mul_mat_q4_0(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                       const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);

/* avx2_mul_mat_r8_q8_0 / avx2_mul_mat_r8_q4_0 - the mul_mat_r8 contract of
 * kernels.h (weights in the R8 layout of kernels/repack.h), results
 * bit-identical to the reference on the plain matrix. */
void avx2_mul_mat_r8_q8_0(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                          const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void avx2_mul_mat_r8_q4_0(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                          const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);

/* avx2_mul_mat_r8_q4_k / _q6_k (kquant_avx2_r8.c) - the mul_mat_r8
 * contract of kernels.h for Q4_K / Q6_K weights (Q8_K activations),
 * results bit-identical to the reference on the plain matrix. */
void avx2_mul_mat_r8_q4_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                          const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void avx2_mul_mat_r8_q6_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                          const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);

/* avx2_x_blocks - for activation rows [j0, j0 + nxg) (Q8_0, rows x_stride
 * bytes apart) and their blocks [b0, b0 + nbp): dx[j * ld + bb] = the
 * scale of block b0 + bb of row j0 + j as f32 and, when sums is not NULL,
 * sums[j * ld + bb] = the exact sum of its 32 quants (the -8 offset of
 * Q4_0 products). Shared by the panel and R8 paths. */
void avx2_x_blocks(const uint8_t *x, size_t x_stride, int64_t j0, int64_t nxg, int64_t b0,
                   int64_t nbp, int64_t ld, float *dx, int32_t *sums);

/* avx2_xchunk - up to 4 activation rows as the panel and R8 paths take
 * them: row j's blocks from the k-panel's first, its block sums and scales
 * (from avx2_x_blocks) and where its 8 outputs go. */
typedef struct avx2_xchunk {
    const st_block_q8_0 *xr[4];
    const int32_t *sx[4];
    const float *dx[4];
    float *yr[4];
} avx2_xchunk;

/* avx2_xchunk_at - fills c for activation rows [j0 + j, j0 + j + C) of x
 * (rows x_stride bytes apart) at k-panel block b0, whose block sums and
 * scales are rows [j, j + C) of sums and dx (ld entries apart), and whose
 * outputs start at column col of y (rows y_stride floats apart). */
void avx2_xchunk_at(avx2_xchunk *c, int C, const uint8_t *x, size_t x_stride, int64_t j0, int64_t j,
                    int64_t b0, const int32_t *sums, const float *dx, int64_t ld, float *y,
                    int64_t y_stride, int64_t col);

/* avx2_mul_mat_f32 / _f16 / _bf16 - the mul_mat contract for float
 * weights (activations in the same dtype). Each output element has one
 * fixed order: an 8-lane f32 accumulator fed by FMA over k in steps of 8,
 * reduced by avx2_hsum's tree, then the n % 8 tail added sequentially. */
void avx2_mul_mat_f32(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                      const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void avx2_mul_mat_f16(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                      const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void avx2_mul_mat_bf16(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                       const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);

/* avx2_mul_mat_q2_k .. _q6_k (kquant_avx2.c) - the mul_mat contract for
 * K-quant weights and Q8_K activations, bit-identical to the reference
 * (exact integer super-block sums, then st_kq_step block after block). */
void avx2_mul_mat_q2_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                       const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void avx2_mul_mat_q3_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                       const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void avx2_mul_mat_q4_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                       const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void avx2_mul_mat_q5_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                       const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void avx2_mul_mat_q6_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                       const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);

/* avx512_mul_mat_f32 / _f16 / _bf16 (kernels_avx512_f.c, built with
 * AVX-512 F/BW/VL) - the mul_mat contract for float weights with one fixed
 * order per element: a 16-lane f32 accumulator fed by FMA over k in steps
 * of 16, a fixed reduction tree, then the n % 16 tail added sequentially.
 * Only called through the AVX-512 table. */
void avx512_mul_mat_f32(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                        const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void avx512_mul_mat_f16(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                        const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void avx512_mul_mat_bf16(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                         const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);

/* avx512_mul_mat_r8_q8_0 / _q4_0 (kernels_avx512_r8.c, built with AVX-512
 * F/BW/VL and VNNI) - the mul_mat_r8 contract of kernels.h, results
 * bit-identical to the reference on the plain matrix; only called through
 * the AVX-512 table. */
void avx512_mul_mat_r8_q8_0(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                            const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void avx512_mul_mat_r8_q4_0(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                            const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);

/* avx512_mul_mat_q2_k .. _q6_k (kquant_avx512.c, built with AVX-512
 * F/BW/VL) - the same contract and results with 512-bit products; only
 * called through the AVX-512 table (kernels_avx2.c), itself only handed
 * out after select.c's AVX-512 check. */
void avx512_mul_mat_q2_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                         const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void avx512_mul_mat_q3_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                         const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void avx512_mul_mat_q4_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                         const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void avx512_mul_mat_q5_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                         const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void avx512_mul_mat_q6_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                         const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);

/* avx512_mul_mat_r8_q4_k / _q6_k (kquant_avx512.c) - the mul_mat_r8
 * contract of kernels.h for Q4_K / Q6_K, results bit-identical to the
 * reference on the plain matrix; only called through the AVX-512 table. */
void avx512_mul_mat_r8_q4_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                            const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void avx512_mul_mat_r8_q6_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                            const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);

/* avx512_r8_q4_k_groups / _q6_k_groups (kquant_avx512_r8.c) - whole R8
 * groups [g0, g1) (rows 8 g0 .. 8 g1) of a Q4_K / Q6_K R8 matrix against
 * nx activation rows (any nx; fastest for few), by the mul_mat_r8 contract
 * otherwise. */
void avx512_r8_q4_k_groups(int64_t n, const void *w, size_t w_stride, int64_t g0, int64_t g1,
                           const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void avx512_r8_q6_k_groups(int64_t n, const void *w, size_t w_stride, int64_t g0, int64_t g1,
                           const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);

/* avx2_mul_mat_q4_1 .. _iq4_xs (legacy_avx2.c) - the mul_mat contract for
 * Q4_1, Q5_0, Q5_1, IQ4_NL and IQ4_XS weights (activations in Q8_1, Q8_0,
 * Q8_1, Q8_0, Q8_K), bit-identical to the reference (legacy.h's order). */
void avx2_mul_mat_q4_1(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                       const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void avx2_mul_mat_q5_0(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                       const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void avx2_mul_mat_q5_1(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                       const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void avx2_mul_mat_iq4_nl(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                         const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void avx2_mul_mat_iq4_xs(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                         const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);

/* avx2_mul_mat_r8_q4_1 .. _iq4_xs (legacy_avx2.c) - the mul_mat_r8
 * contract of kernels.h for the same types (R8 layout of repack.h),
 * results bit-identical to the reference on the plain matrix. */
void avx2_mul_mat_r8_q4_1(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                          const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void avx2_mul_mat_r8_q5_0(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                          const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void avx2_mul_mat_r8_q5_1(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                          const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void avx2_mul_mat_r8_iq4_nl(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                            const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void avx2_mul_mat_r8_iq4_xs(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                            const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);

/* avx512_mul_mat_q4_1 .. _iq4_xs (legacy_avx512.c, built with AVX-512
 * F/BW/VL/VNNI) - the same contract and results as avx2_mul_mat_q4_1 ..
 * _iq4_xs, with VNNI products from 2 activation rows on; only called
 * through the AVX-512 table. */
void avx512_mul_mat_q4_1(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                         const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void avx512_mul_mat_q5_0(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                         const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void avx512_mul_mat_q5_1(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                         const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void avx512_mul_mat_iq4_nl(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                           const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);
void avx512_mul_mat_iq4_xs(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                           const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride);

/* ki_load1 - element k of a t row (F32, F16 or BF16) as f32: the tails of
 * the float products of every x86 variant. */
static inline __attribute__((always_inline)) float ki_load1(st_dtype t, const void *p, int64_t k)
{
    if (t == ST_DT_F32)
        return ((const float *)p)[k];
    const uint16_t h = ((const uint16_t *)p)[k];
    return t == ST_DT_F16 ? st_f16_to_f32(h) : st_bf16_to_f32(h);
}

#endif
