/* legacy_avx2.c - products of the legacy and IQ4 quants (Q4_1, Q5_0, Q5_1,
 * IQ4_NL, IQ4_XS weights) of the AVX2 variant; compiled with -mavx2 -mfma
 * -mf16c. The unpacking, the panel of 8 weight rows and the float step are
 * legacy_x86.h's; this file adds the 256-bit integer sums of a unit, two
 * paths over groups of 8 weight rows:
 *  - direct (one activation row: decode): rows r and r + 4 share a vector
 *    (one per 128-bit half), their nibbles split into values 0..15 and
 *    16..31 against the matching activation halves, and three hadds leave
 *    the 8 rows' sums in row order; the next group's rows are prefetched a
 *    slice per unit;
 *  - panel (LA_PANEL_NX activation rows or more): the units of the 8 rows
 *    are unpacked once into a panel, and per activation row each row's
 *    unit gives 8 int32 lanes (maddubs, madd), reduced by hadds.
 * Both give the exact integer sums, then lx_step's float step, so results
 * are bit-identical to legacy_ref.c. The same paths read weights in the
 * R8 layout of kernels/repack.h (mul_mat_r8: whole groups here, a range's
 * partial groups by the reference), only the addresses of a unit's bytes
 * differing (lx_qs_of, lx_scales8). */
#include <immintrin.h>

#include "kernels/kernels_avx2_int.h"
#include "kernels/legacy_x86.h"

#define LA_PANEL_NX 2 /* activation rows from which the panel is built */

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

/* la_lanes - 8 int32 lanes summing to the exact products of the 32
 * quants q (a = lx_abs(q)) with the 32 activation quants xv. */
static inline __attribute__((always_inline)) __m256i la_lanes(st_dtype t, __m256i a, __m256i q,
                                                              __m256i xv)
{
    const __m256i xs = lx_unsigned(t) ? xv : _mm256_sign_epi8(xv, q);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(a, xs), _mm256_set1_epi16(1));
}

/* la_dot8 - lane r = the exact sum of the products of the quants of
 * panel row r (a[r], q[r]) with xv. */
static inline __attribute__((always_inline)) __m256i la_dot8(st_dtype t, const __m256i *a,
                                                             const __m256i *q, __m256i xv)
{
    __m256i p[LX_ROWS];
    for (int r = 0; r < LX_ROWS; r++)
        p[r] = la_lanes(t, a[r], q[r], xv);
    return la_reduce8(p);
}

/* la_fifth2 - the fifth bits (as 16) of values [16 h, 16 h + 16) of two
 * rows: row a's qh in the low 128 bits, row b's in the high ones. */
static inline __m256i la_fifth2(const uint8_t *qa, const uint8_t *qb, int h)
{
    int32_t wa, wb;
    memcpy(&wa, qa, sizeof wa);
    memcpy(&wb, qb, sizeof wb);
    const __m256i words = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi32(wa)),
                                                  _mm_set1_epi32(wb), 1);
    const char b0 = (char)(2 * h), b1 = (char)(2 * h + 1);
    const __m256i spread = _mm256_setr_epi8(b0, b0, b0, b0, b0, b0, b0, b0, b1, b1, b1, b1, b1, b1,
                                            b1, b1, b0, b0, b0, b0, b0, b0, b0, b0, b1, b1, b1, b1,
                                            b1, b1, b1, b1);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i bytes = _mm256_shuffle_epi8(words, spread);
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
    return _mm256_and_si256(set, _mm256_set1_epi8(1 << 4));
}

/* la_pair_lanes - 8 int32 lanes: the low 4 sum to the exact products of
 * unit u of lane p with the activation quants, the high 4 those of lane
 * p + 4 (layouts as lx_qs_of's); xlo / xhi hold activation values 0..15 /
 * 16..31 in both halves. Pair sums of unsigned quants (<= 31) or of
 * Q5_0's (|q| <= 16) stay below 2^15 when two products are added in
 * int16; IQ4 levels (<= 127) are widened first. */
static inline __attribute__((always_inline)) __m256i
la_pair_lanes(st_dtype t, int r8, const uint8_t *const row[LX_ROWS], int p, int64_t u, __m256i xlo,
              __m256i xhi)
{
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const uint8_t *ha, *hb;
    const uint8_t *qa = lx_qs_of(t, r8, row, p, u, &ha);
    const uint8_t *qb = lx_qs_of(t, r8, row, p + LX_ROWS / 2, u, &hb);
    const __m256i v = _mm256_loadu2_m128i((const __m128i *)qb, (const __m128i *)qa);
    __m256i lo = _mm256_and_si256(v, m4);
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    if (t == ST_DT_Q5_0 || t == ST_DT_Q5_1) {
        lo = _mm256_or_si256(lo, la_fifth2(ha, hb, 0));
        hi = _mm256_or_si256(hi, la_fifth2(ha, hb, 1));
    }
    if (lx_unsigned(t))
        return _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo, xlo),
                                                  _mm256_maddubs_epi16(hi, xhi)),
                                 ones);
    if (t == ST_DT_Q5_0) {
        lo = _mm256_sub_epi8(lo, _mm256_set1_epi8(LX_Q5_BIAS));
        hi = _mm256_sub_epi8(hi, _mm256_set1_epi8(LX_Q5_BIAS));
        return _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(lo),
                                                                       _mm256_sign_epi8(xlo, lo)),
                                                  _mm256_maddubs_epi16(_mm256_abs_epi8(hi),
                                                                       _mm256_sign_epi8(xhi, hi))),
                                 ones);
    }
    lo = lx_levels(lo);
    hi = lx_levels(hi);
    return _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(lo),
                                                                   _mm256_sign_epi8(xlo, lo)),
                                              ones),
                            _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(hi),
                                                                   _mm256_sign_epi8(xhi, hi)),
                                              ones));
}

/* la_direct - the 8 lanes (nr of them stored) against one activation row
 * xr, each unit unpacked and used at once, lanes p and p + 4 sharing a
 * vector (one per 128-bit half), so the 8 lanes' sums come out of three
 * hadds in lane order. */
static inline __attribute__((always_inline)) void la_direct(st_dtype t, int r8, int64_t nu,
                                                            const uint8_t *const row[LX_ROWS],
                                                            int nr, const uint8_t *xr, float *y,
                                                            const lx_pf *pf)
{
    __m256 acc = _mm256_setzero_ps();
    __m256i si = _mm256_setzero_si256();
    for (int64_t u = 0; u < nu; u++) {
        lx_prefetch(pf, u);
        const lx_x xu = lx_x_at(t, xr, u);
        const __m256i xlo = _mm256_permute2x128_si256(xu.v, xu.v, 0x00); /* x[0..16) twice */
        const __m256i xhi = _mm256_permute2x128_si256(xu.v, xu.v, 0x11); /* x[16..32) twice */
        __m256i v[LX_ROWS / 2];
        for (int p = 0; p < LX_ROWS / 2; p++)
            v[p] = la_pair_lanes(t, r8, row, p, u, xlo, xhi);
        const __m256i h01 = _mm256_hadd_epi32(v[0], v[1]); /* [0 0 1 1 | 4 4 5 5] */
        const __m256i h23 = _mm256_hadd_epi32(v[2], v[3]); /* [2 2 3 3 | 6 6 7 7] */
        lx_scales sc;
        lx_scales8(t, r8, row, u, &sc);
        acc = lx_step(t, &sc, u, _mm256_hadd_epi32(h01, h23), &xu, acc, &si);
    }
    lx_store(y, acc, nr);
}

/* la_mul_mat - the mul_mat contract for weight type t over rows [i0, i1)
 * (R8, r8 = 1: whole groups only): groups of 8 rows; below LA_PANEL_NX
 * activation rows la_direct, from LA_PANEL_NX on a panel at a time is
 * unpacked once and used by every activation row. */
static inline __attribute__((always_inline)) void
la_mul_mat(st_dtype t, int r8, int64_t n, const void *wv, size_t w_stride, int64_t i0, int64_t i1,
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
        if (nx < LA_PANEL_NX) {
            for (int64_t j = 0; j < nx; j++) {
                /* the next group while reading this one the first time */
                const lx_pf pf = lx_pf_of(j == 0 && i + LX_ROWS < i1, row[0] + LX_ROWS * w_stride,
                                          w_stride, nu);
                la_direct(t, r8, nu, row, nr, x + (size_t)j * x_stride, y + j * y_stride + i, &pf);
            }
            continue;
        }
        for (int64_t u0 = 0; u0 < nu; u0 += LX_PANEL_UNITS) {
            const int64_t np = nu - u0 < LX_PANEL_UNITS ? nu - u0 : LX_PANEL_UNITS;
            lx_panel_build(t, r8, &P, row, u0, np);
            for (int64_t j = 0; j < nx; j++) {
                const uint8_t *xr = x + (size_t)j * x_stride;
                float *yr = y + j * y_stride + i;
                __m256 acc = u0 == 0 ? _mm256_setzero_ps() : lx_load(yr, nr);
                __m256i si = _mm256_setzero_si256();
                for (int64_t k = 0; k < np; k++) {
                    const lx_x xu = lx_x_at(t, xr, u0 + k);
                    acc = lx_step(t, &P.s[k], u0 + k, la_dot8(t, P.a[k], P.q[k], xu.v), &xu, acc,
                                  &si);
                }
                lx_store(yr, acc, nr);
            }
        }
    }
}

/* la_r8_groups - the st_r8_groups_fn of the five types: whole groups
 * [g0, g1) of an R8 matrix. */
static void la_r8_groups(st_dtype t, int64_t n, const void *w, size_t w_stride, int64_t g0,
                         int64_t g1, const void *x, size_t x_stride, int64_t nx, float *y,
                         int64_t y_stride)
{
    const int64_t i0 = LX_ROWS * g0, i1 = LX_ROWS * g1;
    switch (t) {
    case ST_DT_Q4_1:
        la_mul_mat(ST_DT_Q4_1, 1, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
        return;
    case ST_DT_Q5_0:
        la_mul_mat(ST_DT_Q5_0, 1, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
        return;
    case ST_DT_Q5_1:
        la_mul_mat(ST_DT_Q5_1, 1, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
        return;
    case ST_DT_IQ4_NL:
        la_mul_mat(ST_DT_IQ4_NL, 1, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
        return;
    default:
        la_mul_mat(ST_DT_IQ4_XS, 1, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
        return;
    }
}

void avx2_mul_mat_q4_1(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                       const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    la_mul_mat(ST_DT_Q4_1, 0, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}

void avx2_mul_mat_q5_0(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                       const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    la_mul_mat(ST_DT_Q5_0, 0, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}

void avx2_mul_mat_q5_1(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                       const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    la_mul_mat(ST_DT_Q5_1, 0, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}

void avx2_mul_mat_iq4_nl(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                         const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    la_mul_mat(ST_DT_IQ4_NL, 0, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}

void avx2_mul_mat_iq4_xs(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                         const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    la_mul_mat(ST_DT_IQ4_XS, 0, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}

void avx2_mul_mat_r8_q4_1(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                          const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    st_r8_mul_mat_groups(ST_DT_Q4_1, la_r8_groups, n, w, w_stride, i0, i1, x, x_stride, nx, y,
                         y_stride);
}

void avx2_mul_mat_r8_q5_0(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                          const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    st_r8_mul_mat_groups(ST_DT_Q5_0, la_r8_groups, n, w, w_stride, i0, i1, x, x_stride, nx, y,
                         y_stride);
}

void avx2_mul_mat_r8_q5_1(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                          const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    st_r8_mul_mat_groups(ST_DT_Q5_1, la_r8_groups, n, w, w_stride, i0, i1, x, x_stride, nx, y,
                         y_stride);
}

void avx2_mul_mat_r8_iq4_nl(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                            const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    st_r8_mul_mat_groups(ST_DT_IQ4_NL, la_r8_groups, n, w, w_stride, i0, i1, x, x_stride, nx, y,
                         y_stride);
}

void avx2_mul_mat_r8_iq4_xs(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                            const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    st_r8_mul_mat_groups(ST_DT_IQ4_XS, la_r8_groups, n, w, w_stride, i0, i1, x, x_stride, nx, y,
                         y_stride);
}
