/* legacy_avx512.c - products of the legacy and IQ4 quants (Q4_1, Q5_0,
 * Q5_1, IQ4_NL, IQ4_XS weights) of the AVX-512 variant; compiled with
 * AVX-512 F/BW/VL/VNNI (and AVX2, FMA, F16C). Only called through the
 * AVX-512 table, itself only handed out after select.c's AVX-512 check.
 *
 * Design. One activation row (decode) takes the AVX2 direct path
 * (legacy_avx2.c), whose cost is the weights' unpacking. From LA5_PANEL_NX
 * activation rows on, the 8 rows' units are unpacked once into
 * legacy_x86.h's panel, and per activation row each unit's products are
 * two rows per 512-bit register: vpdpbusd of |q| (q for the unsigned
 * types) with the activation quants negated where q < 0, 16 int32 lanes
 * per pair of rows, then a fixed shuffle tree leaves the 8 rows' sums in
 * row order. The sums are exact integers and lx_step takes legacy.h's
 * float step, so results equal legacy_ref.c (and the AVX2 variant) bit
 * for bit. */
#include <immintrin.h>

#include "kernels/kernels_avx2_int.h"
#include "kernels/legacy_x86.h"

#define LA5_PANEL_NX 2 /* activation rows from which the panel is built */

/* la5_sum8 - lane r of the result = the sum of the 8 int32 lanes of row r,
 * from d[i] = [row 2i: 8 lanes | row 2i + 1: 8 lanes]: 128-bit chunks
 * regrouped so chunk c holds 4 partial sums of row c (P) and of row c + 4
 * (Q), then summed within the chunk; lane 0 of chunk c is row c's total,
 * lane 1 row c + 4's. */
static inline __m256i la5_sum8(const __m512i d[LX_ROWS / 2])
{
    const __m512i p = _mm512_add_epi32(_mm512_shuffle_i32x4(d[0], d[1], 0x88),
                                       _mm512_shuffle_i32x4(d[0], d[1], 0xDD));
    const __m512i q = _mm512_add_epi32(_mm512_shuffle_i32x4(d[2], d[3], 0x88),
                                       _mm512_shuffle_i32x4(d[2], d[3], 0xDD));
    const __m512i e = _mm512_add_epi32(_mm512_unpacklo_epi32(p, q), _mm512_unpackhi_epi32(p, q));
    const __m512i f = _mm512_add_epi32(e, _mm512_shuffle_epi32(e, (_MM_PERM_ENUM)0x4E));
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_castsi512_si256(_mm512_permutexvar_epi32(idx, f));
}

/* la5_dot8 - lane r = the exact sum of the products of unit k of panel row
 * r with the 32 activation quants xv. */
static inline __attribute__((always_inline)) __m256i la5_dot8(st_dtype t, const lx_panel *P,
                                                              int64_t k, __m256i xv)
{
    const __m512i x2 = _mm512_broadcast_i64x4(xv);
    __m512i d[LX_ROWS / 2];
    for (int i = 0; i < LX_ROWS / 2; i++) {
        const __m512i a = _mm512_loadu_si512((const void *)&P->a[k][2 * i]);
        __m512i xs = x2;
        if (!lx_unsigned(t)) {
            const __m512i q = _mm512_loadu_si512((const void *)&P->q[k][2 * i]);
            xs = _mm512_mask_sub_epi8(x2, _mm512_movepi8_mask(q), _mm512_setzero_si512(), x2);
        }
        d[i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), a, xs);
    }
    return la5_sum8(d);
}

/* la5_mul_mat - the mul_mat contract for weight type t (see the top). */
static inline __attribute__((always_inline)) void
la5_mul_mat(st_dtype t, int64_t n, const void *wv, size_t w_stride, int64_t i0, int64_t i1,
            const void *xv, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    const uint8_t *w = wv;
    const uint8_t *x = xv;
    const int64_t nu = n / ST_QK;
    lx_panel P;
    for (int64_t i = i0; i < i1; i += LX_ROWS) {
        const int nr = i1 - i < LX_ROWS ? (int)(i1 - i) : LX_ROWS;
        const uint8_t *row[LX_ROWS];
        lx_rows(w + (size_t)i * w_stride, w_stride, nr, row);
        for (int64_t u0 = 0; u0 < nu; u0 += LX_PANEL_UNITS) {
            const int64_t np = nu - u0 < LX_PANEL_UNITS ? nu - u0 : LX_PANEL_UNITS;
            lx_panel_build(t, 0, &P, row, u0, np);
            for (int64_t j = 0; j < nx; j++) {
                const uint8_t *xr = x + (size_t)j * x_stride;
                float *yr = y + j * y_stride + i;
                __m256 acc = u0 == 0 ? _mm256_setzero_ps() : lx_load(yr, nr);
                __m256i si = _mm256_setzero_si256();
                for (int64_t k = 0; k < np; k++) {
                    const lx_x xu = lx_x_at(t, xr, u0 + k);
                    acc = lx_step(t, &P.s[k], u0 + k, la5_dot8(t, &P, k, xu.v), &xu, acc, &si);
                }
                lx_store(yr, acc, nr);
            }
        }
    }
}

void avx512_mul_mat_q4_1(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                         const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    if (nx < LA5_PANEL_NX)
        avx2_mul_mat_q4_1(n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
    else
        la5_mul_mat(ST_DT_Q4_1, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}

void avx512_mul_mat_q5_0(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                         const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    if (nx < LA5_PANEL_NX)
        avx2_mul_mat_q5_0(n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
    else
        la5_mul_mat(ST_DT_Q5_0, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}

void avx512_mul_mat_q5_1(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                         const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    if (nx < LA5_PANEL_NX)
        avx2_mul_mat_q5_1(n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
    else
        la5_mul_mat(ST_DT_Q5_1, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}

void avx512_mul_mat_iq4_nl(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                           const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    if (nx < LA5_PANEL_NX)
        avx2_mul_mat_iq4_nl(n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
    else
        la5_mul_mat(ST_DT_IQ4_NL, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}

void avx512_mul_mat_iq4_xs(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                           const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    if (nx < LA5_PANEL_NX)
        avx2_mul_mat_iq4_xs(n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
    else
        la5_mul_mat(ST_DT_IQ4_XS, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}
