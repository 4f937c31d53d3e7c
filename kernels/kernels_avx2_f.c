/* kernels_avx2_f.c - F32, F16 and BF16 matrix products, AVX2 + FMA + F16C.
 *
 * Design. Every output element has exactly one order of operations,
 * whatever path computes it: one 8-lane f32 accumulator, acc = fma(w[k..k+8],
 * x[k..k+8], acc) for k = 0, 8, ... below n rounded down to 8 (inputs
 * widened exactly: F16C for f16, a 16-bit shift for bf16), then f_hsum's
 * fixed tree, then the n % 8 remaining products added one by one (multiply,
 * then add). The paths only differ in how many elements they compute at
 * once: a tile of R weight rows by C activation rows keeps R * C
 * accumulators in registers and loads (and widens) each weight vector once
 * for C rows and each activation vector once for R rows. Decode (few
 * activation rows) uses 8 x 1 tiles; prefill 4 x 3, which runs near the
 * FMA peak (widening on the fly was measured faster than widening panels
 * to f32 first). So results do not depend on the batch, the row's place in
 * it or the [i0, i1) split (INV-7).
 * Accuracy: about n/8 sequential roundings per lane, within the bound the
 * tests give SIMD variants (2 n u sum|w x|). */
#include <immintrin.h>
#include <string.h>

#include "kernels/fp16.h"
#include "kernels/kernels_avx2_int.h"

/* f_load8 - 8 elements of a t row from element k, widened to f32. */
static inline __attribute__((always_inline)) __m256 f_load8(st_dtype t, const void *p, int64_t k)
{
    if (t == ST_DT_F32)
        return _mm256_loadu_ps((const float *)p + k);
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + k));
    if (t == ST_DT_F16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* f_hsum - the fixed reduction tree of an accumulator. */
static inline float f_hsum(__m256 acc)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* f_tile - y[j][i + r] for r < R, j < C. w: row i; x: row 0 of the tile. */
static inline __attribute__((always_inline)) void f_tile(st_dtype t, int R, int C, int64_t n,
                                                         const uint8_t *w, size_t ws,
                                                         const uint8_t *x, size_t xs, float *y,
                                                         int64_t ys)
{
    __m256 acc[8][3];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < C; j++)
            acc[r][j] = _mm256_setzero_ps();
    const int64_t n8 = n & ~(int64_t)7;
    for (int64_t k = 0; k < n8; k += 8) {
        __m256 xv[3];
        for (int j = 0; j < C; j++)
            xv[j] = f_load8(t, x + (size_t)j * xs, k);
        for (int r = 0; r < R; r++) {
            const __m256 wv = f_load8(t, w + (size_t)r * ws, k);
            for (int j = 0; j < C; j++)
                acc[r][j] = _mm256_fmadd_ps(wv, xv[j], acc[r][j]);
        }
    }
    for (int r = 0; r < R; r++) {
        for (int j = 0; j < C; j++) {
            float s = f_hsum(acc[r][j]);
            for (int64_t k = n8; k < n; k++)
                s += ki_load1(t, w + (size_t)r * ws, k) * ki_load1(t, x + (size_t)j * xs, k);
            y[j * ys + r] = s;
        }
    }
}

/* f_mul_mat - dispatch of tiles over [i0, i1) x [0, nx). */
static inline __attribute__((always_inline)) void f_mul_mat(st_dtype t, int64_t n, const void *wv,
                                                            size_t ws, int64_t i0, int64_t i1,
                                                            const void *xv, size_t xs, int64_t nx,
                                                            float *y, int64_t ys)
{
    const uint8_t *w = wv;
    const uint8_t *x = xv;
    int64_t i = i0;
    if (nx < 3) {
        for (; i + 8 <= i1; i += 8)
            for (int64_t j = 0; j < nx; j++)
                f_tile(t, 8, 1, n, w + (size_t)i * ws, ws, x + (size_t)j * xs, xs, y + j * ys + i,
                       ys);
    } else {
        for (; i + 4 <= i1; i += 4) {
            int64_t j = 0;
            for (; j + 3 <= nx; j += 3)
                f_tile(t, 4, 3, n, w + (size_t)i * ws, ws, x + (size_t)j * xs, xs, y + j * ys + i,
                       ys);
            for (; j < nx; j++)
                f_tile(t, 4, 1, n, w + (size_t)i * ws, ws, x + (size_t)j * xs, xs, y + j * ys + i,
                       ys);
        }
    }
    for (; i < i1; i++)
        for (int64_t j = 0; j < nx; j++)
            f_tile(t, 1, 1, n, w + (size_t)i * ws, ws, x + (size_t)j * xs, xs, y + j * ys + i, ys);
}

void avx2_mul_mat_f32(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                      const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    f_mul_mat(ST_DT_F32, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}

void avx2_mul_mat_f16(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                      const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    f_mul_mat(ST_DT_F16, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}

void avx2_mul_mat_bf16(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                       const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    f_mul_mat(ST_DT_BF16, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}
