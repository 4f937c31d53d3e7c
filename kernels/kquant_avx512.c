/* kquant_avx512.c - K-quant products (Q2_K .. Q6_K weights, Q8_K
 * activations) of the AVX-512 variant; compiled with -mavx512f -mavx512bw
 * -mavx512vl (and AVX2, FMA, F16C).
 *
 * Design. The unpacking, the integer scheme and the float order are
 * kquant_x86.h's (the AVX2 variant's); tiles of 2..8 activation rows take
 * each block's products 64 values at a time: two unpacked 32-value chunks
 * and their scale vectors joined in one 512-bit register, then
 * _mm512_maddubs_epi16 and _mm512_madd_epi16 (the same integer products
 * and int32 lanes as AVX2, folded to 256 bits before the offsets), so the
 * exact integer sums, and the results, are bit-identical to kquant_ref.c.
 * A single activation row (decode) takes the AVX2 row product: there the
 * unpacking dominates and 512-bit joins would only add work. */
#include <immintrin.h>

#include "kernels/kernels_avx2_int.h"
#include "kernels/kquant_x86.h"

#define K5_PAIRS (KA_CHUNKS / 2) /* 64-value chunks per super-block */

static inline __m512i k5_join(__m256i lo, __m256i hi)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* k5_tile - ka_tile_fn with 512-bit products. */
static void k5_tile(ka_unpack_fn unpack, size_t bb, int64_t nb, const unsigned char *wr,
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
    __m512i u[K5_PAIRS], sc[K5_PAIRS];
    for (int64_t b = 0; b < nb; b++) {
        unpack(wr + (size_t)b * bb, &kb);
        for (int c = 0; c < K5_PAIRS; c++) {
            u[c] = k5_join(kb.u[2 * c], kb.u[2 * c + 1]);
            sc[c] = k5_join(kb.scv[2 * c], kb.scv[2 * c + 1]);
        }
        for (int64_t t = 0; t < nt; t++) {
            const st_block_q8_k *xr = (const st_block_q8_k *)(xb + (size_t)t * x_stride) + b;
            __m512i a = _mm512_setzero_si512();
            for (int c = 0; c < K5_PAIRS; c++) {
                const __m512i y = _mm512_loadu_si512((const void *)(xr->qs + 64 * c));
                a = _mm512_add_epi32(a, _mm512_madd_epi16(_mm512_maddubs_epi16(u[c], y), sc[c]));
            }
            const __m256i a8 = _mm256_add_epi32(_mm512_castsi512_si256(a),
                                                _mm512_extracti64x4_epi64(a, 1));
            const __m256i bs = _mm256_loadu_si256((const __m256i *)xr->bsums);
            vi[t] = _mm256_sub_epi32(a8, _mm256_madd_epi16(bs, kb.scoff));
            vm[t] = kb.has_min ? _mm256_madd_epi16(bs, kb.m) : _mm256_setzero_si256();
            dx[t] = xr->d;
        }
        acc = ka_tile_step(acc, &kb, vi, vm, dx);
    }
    _mm256_storeu_ps(out, acc);
}

void avx512_mul_mat_q2_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                        const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    ka_mul_mat(k5_tile, ka_unpack_q2_k, sizeof(st_block_q2_k), n, w, w_stride, i0, i1, x,
               x_stride, nx, y, y_stride);
}

void avx512_mul_mat_q3_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                        const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    ka_mul_mat(k5_tile, ka_unpack_q3_k, sizeof(st_block_q3_k), n, w, w_stride, i0, i1, x,
               x_stride, nx, y, y_stride);
}

void avx512_mul_mat_q4_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                        const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    ka_mul_mat(k5_tile, ka_unpack_q4_k, sizeof(st_block_q4_k), n, w, w_stride, i0, i1, x,
               x_stride, nx, y, y_stride);
}

void avx512_mul_mat_q5_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                        const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    ka_mul_mat(k5_tile, ka_unpack_q5_k, sizeof(st_block_q5_k), n, w, w_stride, i0, i1, x,
               x_stride, nx, y, y_stride);
}

void avx512_mul_mat_q6_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                        const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    ka_mul_mat(k5_tile, ka_unpack_q6_k, sizeof(st_block_q6_k), n, w, w_stride, i0, i1, x,
               x_stride, nx, y, y_stride);
}
