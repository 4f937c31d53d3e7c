/* kernels_avx512_f.c - F32, F16 and BF16 matrix products of the AVX-512
 * variant; compiled with -mavx512f -mavx512bw -mavx512vl (and AVX2, FMA,
 * F16C).
 *
 * Design. kernels_avx2_f.c's scheme at twice the width: every output
 * element has exactly one order of operations, whatever path computes it:
 * one 16-lane f32 accumulator, acc = fma(w[k..k+16], x[k..k+16], acc) for
 * k = 0, 16, ... below n rounded down to 16 (inputs widened exactly:
 * vcvtph2ps on 512 bits for f16, a 16-bit shift for bf16), then f5_hsum's
 * fixed tree, then the n % 16 remaining products added one by one
 * (multiply, then add). The order differs from the AVX2 variant's (16
 * lanes, not 8), so results may differ from it in the last bits, within
 * the SIMD bound of the tests (2 n u sum|w x|); they do not depend on the
 * batch, the row's place in it or the [i0, i1) split (INV-7).
 *
 * Tiles: R weight rows by C activation rows keep R * C accumulators in
 * registers (32 zmm), each weight vector loaded and widened once for C
 * rows, each activation vector once for R rows. One activation row
 * (decode) takes 8 x 1 tiles, up to 3 rows 8 x nx (BF16: 2 x 1, 2 x nx:
 * fewer weight streams at once; 1.11x decode tok/s on a TinyLlama-shaped
 * BF16 model, pair median of 5; F16 measured 0.94x with 2 and keeps 8);
 * more rows 4 x 6 tiles
 * (24 accumulators: the widening is a third of the work per FMA of 4 x 3;
 * BF16, which needs no widening, 6 x 4: fewer passes over the activations
 * per weight row, 1.13x the GFLOP/s of 4 x 6 on 5632 x 2048 x 64, where
 * 8 x 3 gave 1.07x and 5 x 5 0.88x).
 * Zen 5 executes 512-bit FMAs at full width, so a zmm FMA is twice the
 * work of a ymm one per instruction. */
#include <immintrin.h>

#include "kernels/fp16.h"
#include "kernels/kernels_avx2_int.h"

#define F5_LANES 16 /* f32 lanes of a zmm register */
#define F5_DEC_R 8  /* weight rows of a decode tile (F32, F16) */
#define B5_DEC_R 2  /* BF16: fewer rows, so fewer memory streams at once */
#define F5_DEC_C 3  /* at most this many activation rows take decode tiles */
#define F5_PRE_R 4  /* weight rows of a prefill tile */
#define F5_PRE_C 6  /* activation rows of a prefill tile */
#define B5_PRE_R 6  /* BF16 prefill tiles: 6 x 4 (1.13x the GFLOP/s of 4 x 6) */
#define B5_PRE_C 4
#define F5_LINE 64  /* bytes per cache line (the prefetch step) */

/* f5_load - 16 elements of a t row from element k, widened to f32. */
static inline __attribute__((always_inline)) __m512 f5_load(st_dtype t, const void *p, int64_t k)
{
    if (t == ST_DT_F32)
        return _mm512_loadu_ps((const float *)p + k);
    const __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)p + k));
    if (t == ST_DT_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* f5_hsum - the fixed reduction tree of an accumulator: high 256 bits onto
 * the low ones, then 128, 64, 32. */
static inline float f5_hsum(__m512 acc)
{
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(acc),
                                   _mm256_castpd_ps(
                                       _mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ---- BF16 with AVX512_BF16 ----
 * vdpbf16ps multiplies bf16 pairs exactly and adds the two products to an
 * f32 lane one after the other, each add rounded to nearest even, with
 * subnormal inputs read as zero and subnormal sums flushed to zero (an
 * error below 2^-126 per product, inside the bound). Weights and
 * activations are used as stored, 32 values per register, no widening:
 * one 16-lane accumulator per output element over k in steps of 32, the
 * fixed f5_hsum tree, then the n % 32 remaining products one by one. */

#define B5_STEP 32 /* bf16 values per 512-bit register */

static inline __attribute__((always_inline)) __m512bh b5_load(const uint8_t *p, int64_t k)
{
    return (__m512bh)_mm512_loadu_si512((const void *)((const uint16_t *)(const void *)p + k));
}

/* b5_tile - f5_tile for BF16 with vdpbf16ps. */
static inline __attribute__((always_inline)) void b5_tile(int R, int C, int64_t n, const uint8_t *w,
                                                          size_t ws, const uint8_t *x, size_t xs,
                                                          float *y, int64_t ys, const uint8_t *pf)
{
    __m512 acc[F5_DEC_R][F5_PRE_C];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < C; j++)
            acc[r][j] = _mm512_setzero_ps();
    const int64_t n32 = n & ~(int64_t)(B5_STEP - 1);
    for (int64_t k = 0; k < n32; k += B5_STEP) {
        __m512bh xv[F5_PRE_C];
        for (int j = 0; j < C; j++)
            xv[j] = b5_load(x + (size_t)j * xs, k);
        if (pf != NULL) /* B5_STEP values are one cache line */
            for (int r = 0; r < R; r++)
                _mm_prefetch((const char *)(pf + (size_t)r * ws + (size_t)k * sizeof(uint16_t)),
                             _MM_HINT_T0);
        for (int r = 0; r < R; r++) {
            const __m512bh wv = b5_load(w + (size_t)r * ws, k);
            for (int j = 0; j < C; j++)
                acc[r][j] = _mm512_dpbf16_ps(acc[r][j], wv, xv[j]);
        }
    }
    for (int r = 0; r < R; r++) {
        for (int j = 0; j < C; j++) {
            float s = f5_hsum(acc[r][j]);
            for (int64_t k = n32; k < n; k++)
                s += ki_load1(ST_DT_BF16, w + (size_t)r * ws, k) *
                     ki_load1(ST_DT_BF16, x + (size_t)j * xs, k);
            y[j * ys + r] = s;
        }
    }
}

/* f5_tile - y[j][i + r] for r < R, j < C. w: row i; x: row 0 of the tile;
 * pf: the next tile's row 0, prefetched a cache line at a time as w is
 * read (each row is a short stream: the hardware prefetchers start cold
 * on each), or NULL. */
static inline __attribute__((always_inline)) void f5_tile(st_dtype t, int R, int C, int64_t n,
                                                          const uint8_t *w, size_t ws,
                                                          const uint8_t *x, size_t xs, float *y,
                                                          int64_t ys, const uint8_t *pf)
{
    if (t == ST_DT_BF16) {
        b5_tile(R, C, n, w, ws, x, xs, y, ys, pf);
        return;
    }
    const size_t es = t == ST_DT_F32 ? sizeof(float) : sizeof(uint16_t);
    __m512 acc[F5_DEC_R][F5_PRE_C];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < C; j++)
            acc[r][j] = _mm512_setzero_ps();
    const int64_t n16 = n & ~(int64_t)(F5_LANES - 1);
    for (int64_t k = 0; k < n16; k += F5_LANES) {
        __m512 xv[F5_PRE_C];
        for (int j = 0; j < C; j++)
            xv[j] = f5_load(t, x + (size_t)j * xs, k);
        if (pf != NULL && ((size_t)k * es) % F5_LINE == 0)
            for (int r = 0; r < R; r++)
                _mm_prefetch((const char *)(pf + (size_t)r * ws + (size_t)k * es), _MM_HINT_T0);
        for (int r = 0; r < R; r++) {
            const __m512 wv = f5_load(t, w + (size_t)r * ws, k);
            for (int j = 0; j < C; j++)
                acc[r][j] = _mm512_fmadd_ps(wv, xv[j], acc[r][j]);
        }
    }
    for (int r = 0; r < R; r++) {
        for (int j = 0; j < C; j++) {
            float s = f5_hsum(acc[r][j]);
            for (int64_t k = n16; k < n; k++)
                s += ki_load1(t, w + (size_t)r * ws, k) * ki_load1(t, x + (size_t)j * xs, k);
            y[j * ys + r] = s;
        }
    }
}

/* f5_tile_c - f5_tile with C (1..F5_PRE_C) turned into a constant, so each
 * shape keeps its accumulators in registers. */
static inline __attribute__((always_inline)) void f5_tile_c(st_dtype t, int R, int64_t C, int64_t n,
                                                            const uint8_t *w, size_t ws,
                                                            const uint8_t *x, size_t xs, float *y,
                                                            int64_t ys, const uint8_t *pf)
{
    switch (C) {
    case 1:
        f5_tile(t, R, 1, n, w, ws, x, xs, y, ys, pf);
        break;
    case 2:
        f5_tile(t, R, 2, n, w, ws, x, xs, y, ys, pf);
        break;
    case 3:
        f5_tile(t, R, 3, n, w, ws, x, xs, y, ys, pf);
        break;
    case 4:
        f5_tile(t, R, 4, n, w, ws, x, xs, y, ys, pf);
        break;
    case 5:
        f5_tile(t, R, 5, n, w, ws, x, xs, y, ys, pf);
        break;
    default:
        f5_tile(t, R, 6, n, w, ws, x, xs, y, ys, pf);
        break;
    }
}

/* f5_mul_mat - dispatch of tiles over [i0, i1) x [0, nx). */
static inline __attribute__((always_inline)) void f5_mul_mat(st_dtype t, int64_t n, const void *wv,
                                                             size_t ws, int64_t i0, int64_t i1,
                                                             const void *xv, size_t xs, int64_t nx,
                                                             float *y, int64_t ys)
{
    const uint8_t *w = wv;
    const uint8_t *x = xv;
    int64_t i = i0;
    if (nx <= F5_DEC_C && t == ST_DT_BF16) {
        for (; i + B5_DEC_R <= i1; i += B5_DEC_R) {
            const uint8_t *next = i + 2 * B5_DEC_R <= i1 ? w + (size_t)(i + B5_DEC_R) * ws : NULL;
            f5_tile_c(t, B5_DEC_R, nx, n, w + (size_t)i * ws, ws, x, xs, y + i, ys, next);
        }
    } else if (nx <= F5_DEC_C) {
        for (; i + F5_DEC_R <= i1; i += F5_DEC_R) {
            const uint8_t *next = i + 2 * F5_DEC_R <= i1 ? w + (size_t)(i + F5_DEC_R) * ws : NULL;
            f5_tile_c(t, F5_DEC_R, nx, n, w + (size_t)i * ws, ws, x, xs, y + i, ys, next);
        }
    } else if (t == ST_DT_BF16) {
        for (; i + B5_PRE_R <= i1; i += B5_PRE_R) {
            for (int64_t j = 0; j < nx; j += B5_PRE_C) {
                const int64_t c = nx - j < B5_PRE_C ? nx - j : B5_PRE_C;
                f5_tile_c(t, B5_PRE_R, c, n, w + (size_t)i * ws, ws, x + (size_t)j * xs, xs,
                          y + j * ys + i, ys, NULL);
            }
        }
    } else {
        for (; i + F5_PRE_R <= i1; i += F5_PRE_R) {
            for (int64_t j = 0; j < nx; j += F5_PRE_C) {
                const int64_t c = nx - j < F5_PRE_C ? nx - j : F5_PRE_C;
                f5_tile_c(t, F5_PRE_R, c, n, w + (size_t)i * ws, ws, x + (size_t)j * xs, xs,
                          y + j * ys + i, ys, NULL);
            }
        }
    }
    for (; i < i1; i++)
        for (int64_t j = 0; j < nx; j++)
            f5_tile(t, 1, 1, n, w + (size_t)i * ws, ws, x + (size_t)j * xs, xs, y + j * ys + i, ys,
                    NULL);
}

void avx512_mul_mat_f32(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                        const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    f5_mul_mat(ST_DT_F32, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}

void avx512_mul_mat_f16(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                        const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    f5_mul_mat(ST_DT_F16, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}

void avx512_mul_mat_bf16(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                         const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    f5_mul_mat(ST_DT_BF16, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}
