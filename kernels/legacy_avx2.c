/* legacy_avx2.c - products of the legacy and IQ4 quants (Q4_1, Q5_0, Q5_1,
 * IQ4_NL, IQ4_XS weights) of the AVX2 variant; compiled with -mavx2 -mfma
 * -mf16c. The unpacking, the panel of 8 weight rows and the float step are
 * legacy_x86.h's; this file adds the 256-bit dot of a unit: per weight row
 * maddubs(|q|, sign(x, q)) and madd into 8 int32 lanes, the 8 rows' lanes
 * reduced by hadds into one vector whose lane r is row r's exact sumi.
 * Results are bit-identical to legacy_ref.c. */
#include <immintrin.h>

#include "kernels/kernels_avx2_int.h"
#include "kernels/legacy_x86.h"

/* la_reduce8 - lane r of the result = the sum of the 8 lanes of p[r]. */
static inline __m256i la_reduce8(const __m256i p[LX_ROWS])
{
    const __m256i h01 = _mm256_hadd_epi32(p[0], p[1]);
    const __m256i h23 = _mm256_hadd_epi32(p[2], p[3]);
    const __m256i h45 = _mm256_hadd_epi32(p[4], p[5]);
    const __m256i h67 = _mm256_hadd_epi32(p[6], p[7]);
    const __m256i a = _mm256_hadd_epi32(h01, h23); /* rows 0-3: low half sums | high half */
    const __m256i b = _mm256_hadd_epi32(h45, h67); /* rows 4-7 */
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                            _mm256_permute2x128_si256(a, b, 0x31));
}

/* la_dot8 - lane r = the exact sum of the products of unit k of panel row
 * r with the 32 activation quants xv. */
static inline __m256i la_dot8(const lx_panel *P, int64_t k, __m256i xv)
{
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i p[LX_ROWS];
    for (int r = 0; r < LX_ROWS; r++)
        p[r] = _mm256_madd_epi16(
            _mm256_maddubs_epi16(P->a[k][r], _mm256_sign_epi8(xv, P->q[k][r])), ones);
    return la_reduce8(p);
}

/* la_mul_mat - the mul_mat contract for weight type t: groups of 8 rows,
 * each unpacked a panel at a time and used by every activation row. */
static inline __attribute__((always_inline)) void la_mul_mat(st_dtype t, int64_t n, const void *wv,
                                                             size_t w_stride, int64_t i0,
                                                             int64_t i1, const void *xv,
                                                             size_t x_stride, int64_t nx,
                                                             float *y, int64_t y_stride)
{
    const uint8_t *w = wv;
    const uint8_t *x = xv;
    const int64_t nu = n / ST_QK;
    lx_panel P;
    for (int64_t i = i0; i < i1; i += LX_ROWS) {
        const int nr = i1 - i < LX_ROWS ? (int)(i1 - i) : LX_ROWS;
        for (int64_t u0 = 0; u0 < nu; u0 += LX_PANEL_UNITS) {
            const int64_t np = nu - u0 < LX_PANEL_UNITS ? nu - u0 : LX_PANEL_UNITS;
            lx_panel_build(t, &P, w + (size_t)i * w_stride, w_stride, nr, u0, np);
            for (int64_t j = 0; j < nx; j++) {
                const uint8_t *xr = x + (size_t)j * x_stride;
                float *yr = y + j * y_stride + i;
                __m256 acc = u0 == 0 ? _mm256_setzero_ps() : lx_load(yr, nr);
                __m256i si = _mm256_setzero_si256();
                for (int64_t k = 0; k < np; k++) {
                    const lx_x xu = lx_x_at(t, xr, u0 + k);
                    acc = lx_step(t, &P, k, u0 + k, la_dot8(&P, k, xu.v), &xu, acc, &si);
                }
                lx_store(yr, acc, nr);
            }
        }
    }
}

void avx2_mul_mat_q4_1(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                       const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    la_mul_mat(ST_DT_Q4_1, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}

void avx2_mul_mat_q5_0(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                       const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    la_mul_mat(ST_DT_Q5_0, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}

void avx2_mul_mat_q5_1(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                       const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    la_mul_mat(ST_DT_Q5_1, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}

void avx2_mul_mat_iq4_nl(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                         const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    la_mul_mat(ST_DT_IQ4_NL, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}

void avx2_mul_mat_iq4_xs(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                         const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    la_mul_mat(ST_DT_IQ4_XS, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}
