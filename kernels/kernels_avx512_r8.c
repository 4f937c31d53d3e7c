/* kernels_avx512_r8.c - Q8_0 and Q4_0 products on R8 (row-interleaved)
 * weights, AVX-512 with VNNI; compiled with -mavx512f -mavx512bw
 * -mavx512vl -mavx512vnni (and AVX2, FMA, F16C).
 *
 * Design. kernels_avx2_r8.c's scheme (lanes are output rows, activation
 * bytes broadcast, no horizontal sums) with two changes:
 *  - two R8 groups (16 weight rows) side by side in one 512-bit register:
 *    lanes 0..7 are group g's rows, lanes 8..15 group g + 1's; a range
 *    with an odd number of groups takes its last one alone, loaded in both
 *    halves and stored from the low half only (each lane's arithmetic is
 *    the same either way);
 *  - vpdpbusd (unsigned bytes times signed bytes, 4 products added to an
 *    int32 lane, no saturation) does maddubs + madd + add in one
 *    instruction. It needs an unsigned weight operand: Q4_0's nibbles are
 *    (q = u - 8, corrected by -8 * sum(x) as in AVX2), Q8_0's quants are
 *    offset by 128 (u = w ^ 0x80 = w + 128, corrected by -128 * sum(x)).
 * Integer block sums stay exact (|u| <= 255, |x| <= 127, 32 products per
 * block), then block after block sum = sum + (float)sumi * (d_w * d_x)
 * with separate multiply and add, lane by lane: results are bit-identical
 * to the reference and to mul_mat on the plain matrix, for any batch and
 * row range (INV-7). Rows outside whole groups go to the reference's R8
 * product (same bits).
 *
 * Blocking as in AVX2: k-panels of R5_KP blocks, activation rows in groups
 * of R5_XG (block scales and exact block sums computed once per k-panel by
 * avx2_x_blocks), R5_C activation rows per pass over a pair's slice (each
 * with an int32 and an f32 accumulator: 16 of the 32 registers), the next
 * pair's blocks prefetched while the current ones are used. */
#include <immintrin.h>
#include <string.h>

#include "kernels/kernels_avx2_int.h"
#include "kernels/repack.h"

#define R5_KP 64         /* blocks per k-panel */
#define R5_XG 64         /* activation rows per group */
#define R5_C 8           /* activation rows per pass */
#define R5_GROUPS 2      /* R8 groups per 512-bit register */
#define R5_LOW8 0x00ffu  /* the lanes of the first group */
#define R5_ALL16 0xffffu /* the lanes of both groups */
#define R5_Q4_OFF 8      /* Q4_0: q = nibble - 8 */
#define R5_Q8_OFF 128    /* Q8_0: u = q + 128 */
#define R5_CACHE_LINE 64

/* r5_pf - what r5_rows prefetches: blocks of the next pair's k-panel
 * slices (base0/base1; base0 NULL: none), this pass's share of them. */
typedef struct r5_pf {
    const uint8_t *base0, *base1;
    size_t gbb;
    int64_t part, nparts;
} r5_pf;

/* r5_bcast4 - the 4 bytes at p in every 32-bit lane. */
static inline __m512i r5_bcast4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm512_set1_epi32(v);
}

/* r5_join - 32 bytes of group block o0 (low half) and o1 (high half). */
static inline __m512i r5_join(const uint8_t *o0, const uint8_t *o1)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)o0)),
                              _mm256_loadu_si256((const __m256i *)o1), 1);
}

/* r5_rows - C activation rows against the k-panel slices gb0 and gb1 (the
 * same slice when the pair has one group: mask R5_LOW8) of nbp group
 * blocks; yr[j][0..16) (or [0..8)) continue (or, when first, start) the
 * rows' sums. xr[j]: activation row j's block of the slice's first block;
 * sx[j][bb]: that block's exact sum; dx[j][bb]: its scale as f32. */
static inline __attribute__((always_inline)) void
r5_rows(int q4, int C, const uint8_t *gb0, const uint8_t *gb1, __mmask16 mask, int64_t nbp,
        const st_block_q8_0 *const *xr, const int32_t *const *sx, const float *const *dx,
        float *const *yr, int first, const r5_pf *pf)
{
    const size_t gbb = q4 ? 8 * sizeof(st_block_q4_0) : 8 * sizeof(st_block_q8_0);
    const size_t dbytes = 8 * sizeof(uint16_t); /* the 8 scales before the quants */
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    const int32_t off = q4 ? R5_Q4_OFF : R5_Q8_OFF;
    __m512 acc[R5_C];
    for (int j = 0; j < C; j++)
        acc[j] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask, yr[j]);
    for (int64_t bb = 0; bb < nbp; bb++) {
        if (pf->base0 != NULL) {
            const size_t at = (size_t)((pf->part * nbp + bb) / pf->nparts) * gbb;
            for (size_t o = 0; o < gbb; o += R5_CACHE_LINE) {
                _mm_prefetch((const char *)(pf->base0 + at + o), _MM_HINT_T0);
                _mm_prefetch((const char *)(pf->base1 + at + o), _MM_HINT_T0);
            }
        }
        const uint8_t *o0 = gb0 + (size_t)bb * gbb, *o1 = gb1 + (size_t)bb * gbb;
        const __m256i dh = _mm256_inserti128_si256(_mm256_castsi128_si256(
                                                       _mm_loadu_si128((const __m128i *)o0)),
                                                   _mm_loadu_si128((const __m128i *)o1), 1);
        const __m512 dw = _mm512_cvtph_ps(dh);
        __m512i s[R5_C];
        for (int j = 0; j < C; j++)
            s[j] = _mm512_setzero_si512();
        if (q4) {
#pragma GCC unroll 1
            for (int v = 0; v < 4; v++) {
                const __m512i raw = r5_join(o0 + dbytes + 32 * v, o1 + dbytes + 32 * v);
                const __m512i lo = _mm512_and_si512(raw, m4);
                const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
                for (int j = 0; j < C; j++) {
                    s[j] = _mm512_dpbusd_epi32(s[j], lo, r5_bcast4(xr[j][bb].qs + 4 * v));
                    s[j] = _mm512_dpbusd_epi32(s[j], hi, r5_bcast4(xr[j][bb].qs + 16 + 4 * v));
                }
            }
        } else {
#pragma GCC unroll 1
            for (int c = 0; c < 8; c++) {
                const __m512i u = _mm512_xor_si512(r5_join(o0 + dbytes + 32 * c,
                                                           o1 + dbytes + 32 * c),
                                                   flip);
                for (int j = 0; j < C; j++)
                    s[j] = _mm512_dpbusd_epi32(s[j], u, r5_bcast4(xr[j][bb].qs + 4 * c));
            }
        }
        for (int j = 0; j < C; j++) {
            const __m512i corr = _mm512_set1_epi32(off * sx[j][bb]);
            const __m512 si = _mm512_cvtepi32_ps(_mm512_sub_epi32(s[j], corr));
            const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(dx[j][bb]));
            acc[j] = _mm512_add_ps(acc[j], _mm512_mul_ps(si, d));
        }
    }
    for (int j = 0; j < C; j++)
        _mm512_mask_storeu_ps(yr[j], mask, acc[j]);
}

/* r5_rows_x - r5_rows with C as a compile-time constant (q4 is tested
 * once per block, outside the products). */
static void r5_rows_x(int q4, int C, const uint8_t *gb0, const uint8_t *gb1, __mmask16 mask,
                      int64_t nbp, const st_block_q8_0 *const *xr, const int32_t *const *sx,
                      const float *const *dx, float *const *yr, int first, const r5_pf *pf)
{
    switch (C) {
    case 8:
        r5_rows(q4, 8, gb0, gb1, mask, nbp, xr, sx, dx, yr, first, pf);
        break;
    case 7:
        r5_rows(q4, 7, gb0, gb1, mask, nbp, xr, sx, dx, yr, first, pf);
        break;
    case 6:
        r5_rows(q4, 6, gb0, gb1, mask, nbp, xr, sx, dx, yr, first, pf);
        break;
    case 5:
        r5_rows(q4, 5, gb0, gb1, mask, nbp, xr, sx, dx, yr, first, pf);
        break;
    case 4:
        r5_rows(q4, 4, gb0, gb1, mask, nbp, xr, sx, dx, yr, first, pf);
        break;
    case 3:
        r5_rows(q4, 3, gb0, gb1, mask, nbp, xr, sx, dx, yr, first, pf);
        break;
    case 2:
        r5_rows(q4, 2, gb0, gb1, mask, nbp, xr, sx, dx, yr, first, pf);
        break;
    default:
        r5_rows(q4, 1, gb0, gb1, mask, nbp, xr, sx, dx, yr, first, pf);
        break;
    }
}

/* r5_mul_mat - whole groups [g0, g1) of an R8 matrix (rows 8 g0 ...). */
static void r5_mul_mat(int q4, int64_t n, const uint8_t *w, size_t ws, int64_t g0, int64_t g1,
                       const uint8_t *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    int32_t sums[R5_XG][R5_KP]; /* exact sums of activation blocks */
    float dxs[R5_XG][R5_KP];    /* activation scales as f32 */
    const size_t gbb = q4 ? 8 * sizeof(st_block_q4_0) : 8 * sizeof(st_block_q8_0);
    const size_t gbytes = 8 * ws; /* one group */
    const int64_t nb = n / ST_QK;
    for (int64_t j0 = 0; j0 < nx; j0 += R5_XG) {
        const int64_t nxg = nx - j0 < R5_XG ? nx - j0 : R5_XG;
        for (int64_t b0 = 0; b0 < nb; b0 += R5_KP) {
            const int64_t nbp = nb - b0 < R5_KP ? nb - b0 : R5_KP;
            avx2_x_blocks(x, x_stride, j0, nxg, b0, nbp, R5_KP, &dxs[0][0], &sums[0][0]);
            const int64_t nparts = (nxg + R5_C - 1) / R5_C;
            for (int64_t g = g0; g < g1; g += R5_GROUPS) {
                const int pair = g + 1 < g1;
                const uint8_t *gb0 = w + (size_t)g * gbytes + (size_t)b0 * gbb;
                const uint8_t *gb1 = pair ? gb0 + gbytes : gb0;
                const __mmask16 mask = pair ? R5_ALL16 : R5_LOW8;
                const int next = g + R5_GROUPS < g1;
                const uint8_t *nb0 = next ? gb0 + R5_GROUPS * gbytes : NULL;
                const uint8_t *nb1 = next && g + R5_GROUPS + 1 < g1 ? nb0 + gbytes : nb0;
                for (int64_t j = 0; j < nxg; j += R5_C) {
                    const int C = nxg - j < R5_C ? (int)(nxg - j) : R5_C;
                    const r5_pf pf = {nb0, nb1, gbb, j / R5_C, nparts};
                    const st_block_q8_0 *xr[R5_C];
                    const int32_t *sx[R5_C];
                    const float *dx[R5_C];
                    float *yr[R5_C];
                    for (int k = 0; k < C; k++) {
                        xr[k] = (const st_block_q8_0 *)(x + (size_t)(j0 + j + k) * x_stride) + b0;
                        sx[k] = sums[j + k];
                        dx[k] = dxs[j + k];
                        yr[k] = y + (j0 + j + k) * y_stride + 8 * g;
                    }
                    r5_rows_x(q4, C, gb0, gb1, mask, nbp, xr, sx, dx, yr, b0 == 0, &pf);
                }
            }
        }
    }
}

/* ---- few activation rows: one group at a time, whole rows ----
 * Q8_0 with R5D_C or fewer activation rows (decode) reads the matrix as
 * one sequential stream: group after group through the whole row (no
 * k-panels), each group block by 64-byte loads (two chunks of the 8 rows,
 * lanes 0..7 the first, 8..15 the second), the activation dwords moved to
 * those halves by vpermd; the halves' exact sums are added before the
 * float step, which is r5_rows' (same bits). One thread streaming a
 * 32000 x 2048 matrix: Q8_0 1.19x r5_mul_mat's GB/s (pair median). Q4_0
 * measured 0.86x that way at first, but with the decode's 2 threads (the
 * pool's row chunks) it reads 58 -> 75-91 GB/s at one row, 0.80-0.91 ->
 * 0.62-0.66 ms at two, 0.91 -> 0.82-0.87 ms at three, and loses at four
 * (1.06-1.11 -> 1.12-1.27 ms): end to end, TinyLlama-shaped Q4_0 decode
 * went from 55-60 to 83-84 tok/s. So Q4_0 takes it up to R5D_Q4_C rows.
 * Q8_0 at four rows is faster in r5_mul_mat: one thread, the 32000 x 2048
 * matrix, 3 alternated runs (Zen 5 class EPYC): 2.46-2.70 ms here against
 * 1.98-2.06 ms there; at three rows they tie (1.91-2.10 / 1.93-2.11), at
 * two this path wins (1.65 / 1.94). Four-row batches are what a pipeline
 * of two batches in flight gives 8 sessions. So Q8_0 stops at R5D_C = 3. */
#define R5D_C 3       /* at most this many activation rows (Q8_0) */
#define R5D_Q4_C 3    /* at most this many for Q4_0 */
#define R5D_MAXB 1024 /* and at most this many blocks per row (n <= 32768) */
#define R5D_HALF 8    /* lanes of a chunk */

/* r5d_idx[k] - vpermd indices: dword 2k of the activation in lanes 0..7,
 * dword 2k + 1 in lanes 8..15. */
#define R5D_IDX(c)                                                                                 \
    {                                                                                              \
        c, c, c, c, c, c, c, c, c + 1, c + 1, c + 1, c + 1, c + 1, c + 1, c + 1, c + 1             \
    }
static const int32_t r5d_idx[4][16] = {R5D_IDX(0), R5D_IDX(2), R5D_IDX(4), R5D_IDX(6)};

static inline __attribute__((always_inline)) void
r5d_group(int q4, int C, const uint8_t *gb, int64_t nb, const st_block_q8_0 *const *xr,
          const int32_t *const *sx, const float *const *dx, float *const *yr)
{
    const size_t gbb = q4 ? 8 * sizeof(st_block_q4_0) : 8 * sizeof(st_block_q8_0);
    const size_t dbytes = 8 * sizeof(uint16_t); /* the 8 scales before the quants */
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    const int32_t off = q4 ? R5_Q4_OFF : R5_Q8_OFF;
    __m256 acc[R5D_C];
    for (int t = 0; t < C; t++)
        acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *o = gb + (size_t)b * gbb;
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)o));
        __m512i xv[R5D_C], s[R5D_C];
        for (int t = 0; t < C; t++) {
            xv[t] = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)xr[t][b].qs));
            s[t] = _mm512_setzero_si512();
        }
        if (q4) {
            for (int k = 0; k < 2; k++) {
                const __m512i raw = _mm512_loadu_si512((const void *)(o + dbytes + 64 * k));
                const __m512i lo = _mm512_and_si512(raw, m4);
                const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
                const __m512i il = _mm512_loadu_si512((const void *)r5d_idx[k]);
                const __m512i ih = _mm512_loadu_si512((const void *)r5d_idx[k + 2]);
                for (int t = 0; t < C; t++) {
                    s[t] = _mm512_dpbusd_epi32(s[t], lo, _mm512_permutexvar_epi32(il, xv[t]));
                    s[t] = _mm512_dpbusd_epi32(s[t], hi, _mm512_permutexvar_epi32(ih, xv[t]));
                }
            }
        } else {
            for (int k = 0; k < 4; k++) {
                const __m512i u =
                    _mm512_xor_si512(_mm512_loadu_si512((const void *)(o + dbytes + 64 * k)), flip);
                const __m512i ix = _mm512_loadu_si512((const void *)r5d_idx[k]);
                for (int t = 0; t < C; t++)
                    s[t] = _mm512_dpbusd_epi32(s[t], u, _mm512_permutexvar_epi32(ix, xv[t]));
            }
        }
        for (int t = 0; t < C; t++) {
            const __m256i s8 = _mm256_add_epi32(_mm512_castsi512_si256(s[t]),
                                                _mm512_extracti64x4_epi64(s[t], 1));
            const __m256 si = _mm256_cvtepi32_ps(
                _mm256_sub_epi32(s8, _mm256_set1_epi32(off * sx[t][b])));
            const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(dx[t][b]));
            acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(si, d));
        }
    }
    for (int t = 0; t < C; t++)
        _mm256_storeu_ps(yr[t], acc[t]);
}

/* r5d_group_x - r5d_group with q4 and C compile-time constants. */
static void r5d_group_x(int q4, int C, const uint8_t *gb, int64_t nb,
                        const st_block_q8_0 *const *xr, const int32_t *const *sx,
                        const float *const *dx, float *const *yr)
{
#define R5D_CASE(Q, N)                                                                             \
    if (q4 == Q && C == N) {                                                                       \
        r5d_group(Q, N, gb, nb, xr, sx, dx, yr);                                                   \
        return;                                                                                    \
    }
    R5D_CASE(0, 1)
    R5D_CASE(0, 2)
    R5D_CASE(0, 3)
    R5D_CASE(1, 1)
    R5D_CASE(1, 2)
    R5D_CASE(1, 3)
#undef R5D_CASE
}

/* r5d_mul_mat - whole groups [g0, g1) against nx <= R5D_C activation rows
 * of nb <= R5D_MAXB blocks. */
static void r5d_mul_mat(int q4, int64_t n, const uint8_t *w, size_t ws, int64_t g0, int64_t g1,
                        const uint8_t *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    int32_t sums[R5D_C][R5D_MAXB]; /* exact sums of activation blocks */
    float dxs[R5D_C][R5D_MAXB];    /* activation scales as f32 */
    const int64_t nb = n / ST_QK;
    avx2_x_blocks(x, x_stride, 0, nx, 0, nb, R5D_MAXB, &dxs[0][0], &sums[0][0]);
    const st_block_q8_0 *xr[R5D_C];
    const int32_t *sx[R5D_C];
    const float *dx[R5D_C];
    for (int t = 0; t < nx; t++) {
        xr[t] = (const st_block_q8_0 *)(x + (size_t)t * x_stride);
        sx[t] = sums[t];
        dx[t] = dxs[t];
    }
    for (int64_t g = g0; g < g1; g++) {
        float *yr[R5D_C];
        for (int t = 0; t < nx; t++)
            yr[t] = y + t * y_stride + ST_R8_ROWS * g;
        r5d_group_x(q4, (int)nx, w + (size_t)g * ST_R8_ROWS * ws, nb, xr, sx, dx, yr);
    }
}

/* r5_groups - st_r8_groups_fn of Q8_0 and Q4_0: few activation rows by
 * r5d_mul_mat, the rest by r5_mul_mat. */
static void r5_groups(st_dtype t, int64_t n, const void *w, size_t w_stride, int64_t g0, int64_t g1,
                      const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    const int64_t few = t == ST_DT_Q4_0 ? R5D_Q4_C : R5D_C;
    if (nx <= few && n / ST_QK <= R5D_MAXB)
        r5d_mul_mat(t == ST_DT_Q4_0, n, w, w_stride, g0, g1, x, x_stride, nx, y, y_stride);
    else
        r5_mul_mat(t == ST_DT_Q4_0, n, w, w_stride, g0, g1, x, x_stride, nx, y, y_stride);
}

void avx512_mul_mat_r8_q8_0(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                            const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    st_r8_mul_mat_groups(ST_DT_Q8_0, r5_groups, n, w, w_stride, i0, i1, x, x_stride, nx, y,
                         y_stride);
}

void avx512_mul_mat_r8_q4_0(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                            const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    st_r8_mul_mat_groups(ST_DT_Q4_0, r5_groups, n, w, w_stride, i0, i1, x, x_stride, nx, y,
                         y_stride);
}
