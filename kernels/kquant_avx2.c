/* kquant_avx2.c - K-quant products (Q2_K .. Q6_K weights, Q8_K activations)
 * of the AVX2 variant; compiled with -mavx2 -mfma -mf16c. The unpacking,
 * the integer scheme and the float order are kquant_x86.h's; this file
 * adds the 256-bit tile. Results are bit-identical to kquant_ref.c. */
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

#define KA_MUL_MAT(T)                                                                        \
    void avx2_mul_mat_##T(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1, \
                          const void *x, size_t x_stride, int64_t nx, float *y,              \
                          int64_t y_stride)                                                  \
    {                                                                                        \
        ka_mul_mat(ka_tile, ka_unpack_##T, sizeof(st_block_##T), n, w, w_stride, i0, i1, x,  \
                   x_stride, nx, y, y_stride);                                               \
    }
KA_MUL_MAT(q2_k)
KA_MUL_MAT(q3_k)
KA_MUL_MAT(q4_k)
KA_MUL_MAT(q5_k)
KA_MUL_MAT(q6_k)
