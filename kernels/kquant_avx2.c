/* kquant_avx2.c - K-quant products (Q2_K .. Q6_K weights, Q8_K activations)
 * of the AVX2 variant; compiled with -mavx2 -mfma -mf16c. The unpacking,
 * the integer scheme and the float order are kquant_x86.h's; this file
 * adds the 256-bit tile. Results are bit-identical to kquant_ref.c. Q4_K
 * and Q6_K weights in the R8 layout have their own products in
 * kquant_avx2_r8.c. */
#include <immintrin.h>

#include "kernels/kernels_avx2_int.h"
#include "kernels/kquant_x86.h"

/* ka_tile - one weight row against nt (2..8) activation rows: the 8 rows'
 * integer sums reduced together, then st_kq_step lane by lane in vector
 * form (mul, mul, sub, add: the scalar step's operations and order). */
static void ka_tile(ka_unpack_fn unpack, size_t bb, int64_t nb, const unsigned char *wr,
                    const unsigned char *xb, size_t x_stride, int64_t nt, float out[KA_TILE])
{
    ka_block kb;
    __m256 acc = _mm256_setzero_ps();
    __m256i vi[KA_TILE], vm[KA_TILE];
    float dx[KA_TILE];
    for (int t = 0; t < KA_TILE; t++) {
        vi[t] = vm[t] = _mm256_setzero_si256();
        dx[t] = 0.0f;
    }
    for (int64_t b = 0; b < nb; b++) {
        unpack(wr + (size_t)b * bb, &kb);
        for (int64_t t = 0; t < nt; t++) {
            const st_block_q8_k *xr = (const st_block_q8_k *)(xb + (size_t)t * x_stride) + b;
            ka_block_vecs(&kb, xr, &vi[t], &vm[t]);
            dx[t] = xr->d;
        }
        acc = ka_tile_step(acc, &kb, vi, vm, dx);
    }
    _mm256_storeu_ps(out, acc);
}

void avx2_mul_mat_q2_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                       const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    ka_mul_mat(ka_tile, ka_unpack_q2_k, sizeof(st_block_q2_k), n, w, w_stride, i0, i1, x, x_stride,
               nx, y, y_stride);
}

void avx2_mul_mat_q3_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                       const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    ka_mul_mat(ka_tile, ka_unpack_q3_k, sizeof(st_block_q3_k), n, w, w_stride, i0, i1, x, x_stride,
               nx, y, y_stride);
}

void avx2_mul_mat_q4_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                       const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    ka_mul_mat(ka_tile, ka_unpack_q4_k, sizeof(st_block_q4_k), n, w, w_stride, i0, i1, x, x_stride,
               nx, y, y_stride);
}

void avx2_mul_mat_q5_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                       const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    ka_mul_mat(ka_tile, ka_unpack_q5_k, sizeof(st_block_q5_k), n, w, w_stride, i0, i1, x, x_stride,
               nx, y, y_stride);
}

void avx2_mul_mat_q6_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                       const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    ka_mul_mat(ka_tile, ka_unpack_q6_k, sizeof(st_block_q6_k), n, w, w_stride, i0, i1, x, x_stride,
               nx, y, y_stride);
}
