/* kernels_avx2_r8.c - Q8_0 and Q4_0 products on R8 (row-interleaved)
 * weights, AVX2.
 *
 * Design. The R8 layout (kernels/repack.h) stores each group block as the
 * 8 rows' scales followed by chunk vectors in which 4 consecutive quants
 * of each of the 8 rows sit side by side. That is exactly the panel that
 * kernels_avx2_q.c builds on the stack for every 8 rows, so here the
 * panel is memory itself: one path serves decode (1 activation row),
 * small batches and prefill. For every chunk, C (<= 4) activation rows
 * broadcast their 4 bytes, and maddubs + madd add 4 products to each
 * weight row's lane; lanes are output rows, so no horizontal sums, and
 * the 8 scales are one 16-byte load. A thread's rows are one contiguous
 * region read front to back, and the next group's blocks are prefetched
 * while the current ones are used, spread over the iterations.
 *
 * Exactness is the reference's: exact integer block sums (Q8_0 with the
 * sign trick, |w| in [0, 128] times x in [-127, 127]; Q4_0 with unsigned
 * nibbles summed in int16 over a block, <= 8 * 2 * 15 * 127, then the
 * exact -8 * sum(x) correction), and then, block after block,
 * sum = sum + (float)sumi * (d_w * d_x) with separate multiply and add.
 * So every result is bit-identical to mul_mat on the plain matrix, for
 * any batch and row range (INV-7). Rows outside whole groups (a range not
 * starting or ending on a multiple of 8, which the engine never asks for)
 * go to the reference's R8 product, which gives the same bits.
 *
 * Blocking: k-panels of R8_KP blocks (so one group's slice stays in L1
 * while up to 64 activation rows use it 4 at a time), activation rows in
 * groups of R8_XG whose block sums (Q4_0) and scales are computed once
 * per k-panel. Scratch lives on the stack (about 33 KiB). */
#include <immintrin.h>
#include <string.h>

#include "kernels/kernels_avx2_int.h"
#include "kernels/repack.h"

#define R8_KP 64 /* blocks per k-panel */
#define R8_XG 64 /* activation rows per group */

/* r8_pf - what r8_rows prefetches: blocks of the next group's k-panel
 * slice (base; NULL: none), this activation chunk's share of them. */
typedef struct r8_pf {
    const uint8_t *base;
    size_t gbb;
    int64_t part, nparts;
} r8_pf;

/* r8_bcast4 - the 4 bytes at p in every 32-bit lane. */
static inline __m256i r8_bcast4(const int8_t *p)
{
    return _mm256_castps_si256(_mm256_broadcast_ss((const float *)(const void *)p));
}

/* r8_rows - C activation rows against one group's k-panel slice gb of
 * nbp group blocks; yr[j][0..8) continue (or, when first, start) the
 * rows' sums. xr[j] points at activation row j's block of the slice's
 * first block; sx[j][bb] (Q4_0) is that block's exact sum, dx[j][bb] its
 * scale as f32. */
static inline __attribute__((always_inline)) void
r8_rows(int q4, int C, const uint8_t *gb, int64_t nbp, const st_block_q8_0 *const *xr,
        const int32_t *const *sx, const float *const *dx, float *const *yr, int first,
        const r8_pf *pf)
{
    const size_t gbb = q4 ? 8 * sizeof(st_block_q4_0) : 8 * sizeof(st_block_q8_0);
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 acc[4];
    for (int j = 0; j < C; j++)
        acc[j] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(yr[j]);
    for (int64_t bb = 0; bb < nbp; bb++) {
        if (pf->base != NULL) {
            const uint8_t *t = pf->base + (size_t)((pf->part * nbp + bb) / pf->nparts) * gbb;
            for (size_t o = 0; o < gbb; o += 64)
                _mm_prefetch((const char *)(t + o), _MM_HINT_T0);
        }
        const uint8_t *o = gb + (size_t)bb * gbb;
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)o));
        __m256i s[4];
        if (q4) {
            __m256i h[4];
            for (int j = 0; j < C; j++)
                h[j] = _mm256_setzero_si256();
#pragma GCC unroll 1
            for (int v = 0; v < 4; v++) {
                const __m256i raw = _mm256_loadu_si256((const __m256i *)(o + 16 + 32 * v));
                const __m256i lo = _mm256_and_si256(raw, m4);
                const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
                for (int j = 0; j < C; j++) {
                    const __m256i pl = _mm256_maddubs_epi16(lo, r8_bcast4(xr[j][bb].qs + 4 * v));
                    const __m256i ph = _mm256_maddubs_epi16(hi,
                                                            r8_bcast4(xr[j][bb].qs + 16 + 4 * v));
                    h[j] = _mm256_add_epi16(h[j], _mm256_add_epi16(pl, ph));
                }
            }
            for (int j = 0; j < C; j++) /* 8 chunks of pairs <= 3810 each fit int16 */
                s[j] = _mm256_sub_epi32(_mm256_madd_epi16(h[j], ones),
                                        _mm256_set1_epi32(8 * sx[j][bb]));
        } else {
            for (int j = 0; j < C; j++)
                s[j] = _mm256_setzero_si256();
                /* not unrolled: unrolled, GCC reassociates the chunk sums into
                 * a tree whose partial sums spill out of the 16 registers */
#pragma GCC unroll 1
            for (int c = 0; c < 8; c++) {
                const __m256i wv = _mm256_loadu_si256((const __m256i *)(o + 16 + 32 * c));
                const __m256i av = _mm256_sign_epi8(wv, wv);
                for (int j = 0; j < C; j++) {
                    const __m256i xb = r8_bcast4(xr[j][bb].qs + 4 * c);
                    const __m256i p = _mm256_maddubs_epi16(av, _mm256_sign_epi8(xb, wv));
                    s[j] = _mm256_add_epi32(s[j], _mm256_madd_epi16(p, ones));
                }
            }
        }
        for (int j = 0; j < C; j++) {
            const __m256 d = _mm256_mul_ps(dw, _mm256_broadcast_ss(&dx[j][bb]));
            acc[j] = _mm256_add_ps(acc[j], _mm256_mul_ps(_mm256_cvtepi32_ps(s[j]), d));
        }
    }
    for (int j = 0; j < C; j++)
        _mm256_storeu_ps(yr[j], acc[j]);
}

/* r8_rows_x - r8_rows with q4 and C as compile-time constants. */
static void r8_rows_x(int q4, int C, const uint8_t *gb, int64_t nbp, const st_block_q8_0 *const *xr,
                      const int32_t *const *sx, const float *const *dx, float *const *yr, int first,
                      const r8_pf *pf)
{
    if (q4) {
        switch (C) {
        case 4:
            r8_rows(1, 4, gb, nbp, xr, sx, dx, yr, first, pf);
            break;
        case 3:
            r8_rows(1, 3, gb, nbp, xr, sx, dx, yr, first, pf);
            break;
        case 2:
            r8_rows(1, 2, gb, nbp, xr, sx, dx, yr, first, pf);
            break;
        default:
            r8_rows(1, 1, gb, nbp, xr, sx, dx, yr, first, pf);
            break;
        }
    } else {
        switch (C) {
        case 4:
            r8_rows(0, 4, gb, nbp, xr, sx, dx, yr, first, pf);
            break;
        case 3:
            r8_rows(0, 3, gb, nbp, xr, sx, dx, yr, first, pf);
            break;
        case 2:
            r8_rows(0, 2, gb, nbp, xr, sx, dx, yr, first, pf);
            break;
        default:
            r8_rows(0, 1, gb, nbp, xr, sx, dx, yr, first, pf);
            break;
        }
    }
}

/* r8_mul_mat - whole groups [g0, g1) of an R8 matrix (rows 8 g0 ...). */
static void r8_mul_mat(int q4, int64_t n, const uint8_t *w, size_t ws, int64_t g0, int64_t g1,
                       const uint8_t *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    int32_t sums[R8_XG][R8_KP]; /* Q4_0: exact sums of activation blocks */
    float dxs[R8_XG][R8_KP];    /* activation scales as f32 */
    const size_t gbb = q4 ? 8 * sizeof(st_block_q4_0) : 8 * sizeof(st_block_q8_0);
    const size_t gbytes = 8 * ws; /* one group */
    const int64_t nb = n / ST_QK;
    for (int64_t j0 = 0; j0 < nx; j0 += R8_XG) {
        const int64_t nxg = nx - j0 < R8_XG ? nx - j0 : R8_XG;
        for (int64_t b0 = 0; b0 < nb; b0 += R8_KP) {
            const int64_t nbp = nb - b0 < R8_KP ? nb - b0 : R8_KP;
            avx2_x_blocks(x, x_stride, j0, nxg, b0, nbp, R8_KP, &dxs[0][0],
                          q4 ? &sums[0][0] : NULL);
            const int64_t nparts = (nxg + 3) / 4;
            for (int64_t g = g0; g < g1; g++) {
                const uint8_t *gb = w + (size_t)g * gbytes + (size_t)b0 * gbb;
                for (int64_t j = 0; j < nxg; j += 4) {
                    const int C = nxg - j < 4 ? (int)(nxg - j) : 4;
                    const r8_pf pf = {g + 1 < g1 ? gb + gbytes : NULL, gbb, j / 4, nparts};
                    avx2_xchunk xc;
                    avx2_xchunk_at(&xc, C, x, x_stride, j0, j, b0, &sums[0][0], &dxs[0][0], R8_KP,
                                   y, y_stride, 8 * g);
                    r8_rows_x(q4, C, gb, nbp, xc.xr, xc.sx, xc.dx, xc.yr, b0 == 0, &pf);
                }
            }
        }
    }
}

/* r8_groups - st_r8_groups_fn of Q8_0 and Q4_0. */
static void r8_groups(st_dtype t, int64_t n, const void *w, size_t w_stride, int64_t g0, int64_t g1,
                      const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    r8_mul_mat(t == ST_DT_Q4_0, n, w, w_stride, g0, g1, x, x_stride, nx, y, y_stride);
}

void avx2_mul_mat_r8_q8_0(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                          const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    st_r8_mul_mat_groups(ST_DT_Q8_0, r8_groups, n, w, w_stride, i0, i1, x, x_stride, nx, y,
                         y_stride);
}

void avx2_mul_mat_r8_q4_0(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                          const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    st_r8_mul_mat_groups(ST_DT_Q4_0, r8_groups, n, w, w_stride, i0, i1, x, x_stride, nx, y,
                         y_stride);
}
