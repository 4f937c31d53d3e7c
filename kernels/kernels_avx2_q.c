/* kernels_avx2_q.c - Q8_0 and Q4_0 matrix products, AVX2.
 *
 * Design. The reference defines each output element as: for every block,
 * the exact integer sum sumi of the 32 products, then
 * sum = sum + (float)sumi * (d_w * d_x) in float, block after block. Every
 * path here computes exactly that: integer sums are exact whatever the
 * order of their terms, and the float steps are the same three operations
 * (no FMA) in the same block order. So the results are bit-identical to the
 * reference, and therefore independent of the batch, of the row's place in
 * it and of the [i0, i1) split (INV-7) by construction, whichever path a
 * call takes. Four paths:
 *  - row1: one weight row, one activation row (tails of the others);
 *  - rows8 (decode, nx = 1):
 *    8 weight rows against one activation row; each row's block gives 8
 *    int32 lanes (maddubs with the sign trick for Q8_0, unsigned nibbles
 *    for Q4_0), the 8 rows' lanes are reduced with hadd into one vector
 *    whose lane r is row r's sumi, and the float accumulator has lane r =
 *    output row r;
 *  - rows4 (Q8_0, 2 <= nx < Q8_MIN_NX_PANEL: decode of a few sessions):
 *    4 weight rows against up to 4 activation rows; each weight block is
 *    loaded and made |w| once for all of them, and the (row, activation)
 *    sums are reduced with hadds into vectors of 8 pairs;
 *  - panel (prefill and larger batches): 8 weight rows are transposed once
 *    into a stack panel in which each 32-byte vector holds 4 consecutive
 *    bytes of each of the 8 rows; then every activation row (4 at a time)
 *    broadcasts its 4 bytes and one maddubs + madd adds 4 products to each
 *    row's lane. The panel is reused by all activation rows, so the
 *    transposition is amortized; lanes are again output rows, so no
 *    horizontal sum is needed. While a panel is used, the next group's
 *    blocks are prefetched a few lines per block (a burst at the start
 *    overflowed the miss queue: Q8_0 with 8 activation rows from memory
 *    went from 22.6 to 13.1 ms per 32000 x 2048 product on one core).
 * The thresholds were measured on one core with the weights streamed from
 * memory (32000 x 2048): for Q8_0, rows4 beats the panel up to 4 rows
 * (5.0 against 6.9 ms at 2 rows) and loses from 5; for Q4_0 the panel
 * already matches rows4 at 2 rows, so Q4_0 has no rows4 path.
 * Q8_0 uses the sign trick (maddubs(|w|, sign(x, w))): exact for all
 * weights in [-128, 127] since activations are in [-127, 127]. Q4_0 keeps
 * the nibbles unsigned (0..15) and starts each block's integer sum at
 * -8 * sum(x), which is again the exact sum of (q - 8) * x.
 * Q4_0 products of unsigned nibbles are at most 2 * 15 * 128 per 16-bit
 * pair, so 8 of them add up in 16 bits without overflow: the panel path
 * sums a block's 8 chunks in int16 and widens once per block, and the
 * decode path adds low- and high-nibble products in int16 before widening. Block sums of
 * the activations (for the -8 offset) are computed once per call and
 * k-panel, not once per weight row.
 * Panels and per-panel activation sums and scales live on the stack (about
 * 66 KiB); nothing is allocated. */
#include <immintrin.h>
#include <string.h>

#include "kernels/kernels_avx2_int.h"

#define Q_PANEL_BLOCKS 64 /* blocks per k-panel of the panel path */
#define Q_XGROUP 64       /* activation rows whose block sums are kept at once */
/* activation rows from which the panel path pays (weights streamed from
 * memory, one thread; `strata bench kernels` batch and prefill shapes) */
#define Q8_MIN_NX_PANEL 5
#define Q4_MIN_NX_PANEL 2
#define Q_DECODE_BLOCKS 1024 /* blocks whose activation sums the decode path keeps */

typedef struct q_panel {
    __m256i w[Q_PANEL_BLOCKS * 8]; /* [block][chunk]: 4 bytes of each of 8 rows */
    __m256i a[Q_PANEL_BLOCKS * 8]; /* Q8_0: |w| of the same bytes */
    __m256 d[Q_PANEL_BLOCKS];      /* d_w of the 8 rows */
} q_panel;

static inline float q_h2f(uint16_t h) { return _cvtsh_ss(h); }

static inline int32_t q_hsum_i32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x55));
    return _mm_cvtsi128_si32(s);
}

/* q_reduce8 - lane r of the result = sum of the 8 lanes of p[r]. */
static inline __m256i q_reduce8(const __m256i p[8])
{
    const __m256i h01 = _mm256_hadd_epi32(p[0], p[1]);
    const __m256i h23 = _mm256_hadd_epi32(p[2], p[3]);
    const __m256i h45 = _mm256_hadd_epi32(p[4], p[5]);
    const __m256i h67 = _mm256_hadd_epi32(p[6], p[7]);
    const __m256i a = _mm256_hadd_epi32(h01, h23); /* rows 0-3: low half sums | high half */
    const __m256i b = _mm256_hadd_epi32(h45, h67); /* rows 4-7 */
    const __m256i lo = _mm256_permute2x128_si256(a, b, 0x20);
    const __m256i hi = _mm256_permute2x128_si256(a, b, 0x31);
    return _mm256_add_epi32(lo, hi);
}

/* q_transpose8 - out[c] = dword c of r[0], ..., dword c of r[7]. */
static inline void q_transpose8(const __m256i r[8], __m256i out[8])
{
    const __m256i t0 = _mm256_unpacklo_epi32(r[0], r[1]);
    const __m256i t1 = _mm256_unpackhi_epi32(r[0], r[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(r[2], r[3]);
    const __m256i t3 = _mm256_unpackhi_epi32(r[2], r[3]);
    const __m256i t4 = _mm256_unpacklo_epi32(r[4], r[5]);
    const __m256i t5 = _mm256_unpackhi_epi32(r[4], r[5]);
    const __m256i t6 = _mm256_unpacklo_epi32(r[6], r[7]);
    const __m256i t7 = _mm256_unpackhi_epi32(r[6], r[7]);
    const __m256i u0 = _mm256_unpacklo_epi64(t0, t2); /* dword 0 | dword 4, rows 0-3 */
    const __m256i u1 = _mm256_unpackhi_epi64(t0, t2); /* 1 | 5 */
    const __m256i u2 = _mm256_unpacklo_epi64(t1, t3); /* 2 | 6 */
    const __m256i u3 = _mm256_unpackhi_epi64(t1, t3); /* 3 | 7 */
    const __m256i u4 = _mm256_unpacklo_epi64(t4, t6);
    const __m256i u5 = _mm256_unpackhi_epi64(t4, t6);
    const __m256i u6 = _mm256_unpacklo_epi64(t5, t7);
    const __m256i u7 = _mm256_unpackhi_epi64(t5, t7);
    out[0] = _mm256_permute2x128_si256(u0, u4, 0x20);
    out[4] = _mm256_permute2x128_si256(u0, u4, 0x31);
    out[1] = _mm256_permute2x128_si256(u1, u5, 0x20);
    out[5] = _mm256_permute2x128_si256(u1, u5, 0x31);
    out[2] = _mm256_permute2x128_si256(u2, u6, 0x20);
    out[6] = _mm256_permute2x128_si256(u2, u6, 0x31);
    out[3] = _mm256_permute2x128_si256(u3, u7, 0x20);
    out[7] = _mm256_permute2x128_si256(u3, u7, 0x31);
}

/* q4_unpack - the 32 nibbles of a Q4_0 block as bytes 0..15, in element
 * order (low nibbles are elements 0..15, high nibbles 16..31). */
static inline __m256i q4_unpack(const uint8_t *qs)
{
    const __m128i v = _mm_loadu_si128((const __m128i *)qs);
    const __m256i b = _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1);
    return _mm256_and_si256(b, _mm256_set1_epi8(0x0f));
}

/* q8_lanes - 8 int32 lanes summing to the exact dot of two Q8_0 blocks. */
static inline __m256i q8_lanes(const int8_t *wq, __m256i x)
{
    const __m256i w = _mm256_loadu_si256((const __m256i *)wq);
    const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* q4_lanes - 8 int32 lanes summing to sum(q * x), q the unsigned nibbles. */
static inline __m256i q4_lanes(const uint8_t *qs, __m256i x)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(q4_unpack(qs), x), _mm256_set1_epi16(1));
}

/* q_sum_x - the exact sum of the 32 activations of a Q8_0 block. */
static inline int32_t q_sum_x(__m256i x)
{
    const __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), x);
    return q_hsum_i32(_mm256_madd_epi16(s16, _mm256_set1_epi16(1)));
}

/* ---- row1: one output element ---- */

static float q8_row1(int64_t nb, const st_block_q8_0 *w, const st_block_q8_0 *x)
{
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const __m256i xv = _mm256_loadu_si256((const __m256i *)x[b].qs);
        const int32_t sumi = q_hsum_i32(q8_lanes(w[b].qs, xv));
        sum += (float)sumi * (q_h2f(w[b].d) * q_h2f(x[b].d));
    }
    return sum;
}

static float q4_row1(int64_t nb, const st_block_q4_0 *w, const st_block_q8_0 *x)
{
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const __m256i xv = _mm256_loadu_si256((const __m256i *)x[b].qs);
        const int32_t sumi = q_hsum_i32(q4_lanes(w[b].qs, xv)) - 8 * q_sum_x(xv);
        sum += (float)sumi * (q_h2f(w[b].d) * q_h2f(x[b].d));
    }
    return sum;
}

/* ---- rows8: 8 weight rows, one activation row ---- */

/* q_prefetch - prefetches slice bb (of pf_step bytes) of the next group's
 * rows (contiguous in memory), one group ahead: the hardware prefetcher
 * does not keep up with 8 short row streams (measured: Q4_0 decode from
 * memory on one core went from about 6 to 10-12 GB/s). */
static inline void q_prefetch(const uint8_t *pf, size_t pf_len, size_t pf_step, int64_t bb)
{
    if (pf == NULL)
        return;
    const size_t o0 = (size_t)bb * pf_step;
    const size_t o1 = o0 + pf_step < pf_len ? o0 + pf_step : pf_len;
    for (size_t o = o0; o < o1; o += 64)
        _mm_prefetch((const char *)(pf + o), _MM_HINT_T0);
}

/* q_dw8 - the f16 scales of 8 rows' blocks at byte offset off, as f32. */
static inline __m256 q_dw8(const uint8_t *w, size_t ws, size_t off)
{
    __m128i l[8];
    for (int r = 0; r < 8; r++)
        l[r] = _mm_loadu_si128((const __m128i *)(w + (size_t)r * ws + off));
    const __m128i a = _mm_unpacklo_epi16(l[0], l[1]);
    const __m128i b = _mm_unpacklo_epi16(l[2], l[3]);
    const __m128i c = _mm_unpacklo_epi16(l[4], l[5]);
    const __m128i d = _mm_unpacklo_epi16(l[6], l[7]);
    const __m128i ab = _mm_unpacklo_epi32(a, b);
    const __m128i cd = _mm_unpacklo_epi32(c, d);
    return _mm256_cvtph_ps(_mm_unpacklo_epi64(ab, cd));
}

static void q8_rows8(int64_t nb, const uint8_t *w, size_t ws, const st_block_q8_0 *x, float *y,
                     const uint8_t *pf)
{
    const size_t pf_step = ((8 * ws + (size_t)nb - 1) / (size_t)nb + 63) & ~(size_t)63;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        q_prefetch(pf, 8 * ws, pf_step, b);
        const __m256i xv = _mm256_loadu_si256((const __m256i *)x[b].qs);
        const size_t off = (size_t)b * sizeof(st_block_q8_0);
        __m256i p[8];
        for (int r = 0; r < 8; r++)
            p[r] = q8_lanes((const int8_t *)(w + (size_t)r * ws + off + 2), xv);
        const __m256i s = q_reduce8(p);
        const __m256 d = _mm256_mul_ps(q_dw8(w, ws, off), _mm256_set1_ps(q_h2f(x[b].d)));
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(s), d));
    }
    _mm256_storeu_ps(y, acc);
}

/* q4_rows8 - continues (or, when first, starts) y[0..8) over blocks
 * [b0, b0 + nbp) of 8 rows; sx[bb] = sum of activation block b0 + bb.
 * Rows r and r + 4 share a vector (one per 128-bit half), so nibbles are
 * unpacked two rows at a time and the reduction needs only three hadds,
 * which leave the 8 row sums in row order. */
static void q4_rows8(int64_t b0, int64_t nbp, const uint8_t *w, size_t ws, const st_block_q8_0 *x,
                     const int32_t *sx, float *y, int first, const uint8_t *pf, int64_t nb)
{
    const size_t pf_step = ((8 * ws + (size_t)nb - 1) / (size_t)nb + 63) & ~(size_t)63;
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 acc = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y);
    for (int64_t bb = 0; bb < nbp; bb++) {
        const int64_t b = b0 + bb;
        q_prefetch(pf, 8 * ws, pf_step, b);
        const __m256i xv = _mm256_loadu_si256((const __m256i *)x[b].qs);
        const __m256i xlo = _mm256_permute2x128_si256(xv, xv, 0x00); /* x[0..16) twice */
        const __m256i xhi = _mm256_permute2x128_si256(xv, xv, 0x11); /* x[16..32) twice */
        const size_t off = (size_t)b * sizeof(st_block_q4_0) + 2;
        __m256i v[4];
        for (int r = 0; r < 4; r++) {
            const __m256i q = _mm256_loadu2_m128i((const __m128i *)(w + (size_t)(r + 4) * ws + off),
                                                  (const __m128i *)(w + (size_t)r * ws + off));
            const __m256i lo = _mm256_and_si256(q, m4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            /* 16-bit lanes: sums of 4 products <= 4 * 15 * 128, no overflow */
            const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, xlo),
                                               _mm256_maddubs_epi16(hi, xhi));
            v[r] = _mm256_madd_epi16(p, ones); /* [row r: 4 | row r + 4: 4] */
        }
        const __m256i h01 = _mm256_hadd_epi32(v[0], v[1]); /* [0 0 1 1 | 4 4 5 5] */
        const __m256i h23 = _mm256_hadd_epi32(v[2], v[3]); /* [2 2 3 3 | 6 6 7 7] */
        const __m256i s = _mm256_hadd_epi32(h01, h23);     /* [0 1 2 3 | 4 5 6 7] */
        const __m256i si = _mm256_sub_epi32(s, _mm256_set1_epi32(8 * sx[bb]));
        const __m256 d = _mm256_mul_ps(q_dw8(w, ws, off - 2), _mm256_set1_ps(q_h2f(x[b].d)));
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(si), d));
    }
    _mm256_storeu_ps(y, acc);
}

/* ---- rows4: 4 weight rows, a few activation rows ---- */

/* q_ld16 - the 16 bits at p (any alignment). */
static inline short q_ld16(const uint8_t *p)
{
    short v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* q_pair4 - lanes [r of ja | r of jb] (r = 0..3) of the row sums left by
 * q_h4 for two activation rows: each row's sum is split over lanes r and
 * r + 4 of its q_h4 vector. */
static inline __m256i q_pair4(__m256i ha, __m256i hb)
{
    return _mm256_add_epi32(_mm256_permute2x128_si256(ha, hb, 0x20),
                            _mm256_permute2x128_si256(ha, hb, 0x31));
}

/* q8_rows4 - C (1..4) activation rows against 4 Q8_0 weight rows, all nb
 * blocks: yr[j][0..4) = the four rows' sums for activation row j. The
 * weight block is loaded once for all C activation rows; per block, the
 * 4 x C lane vectors are reduced with hadds into ceil(C / 2) vectors whose
 * lanes are (activation row, weight row) pairs, and each pair's float
 * accumulator is one lane. pf: the next group, prefetched a slice per
 * block (NULL: none). */
static inline __attribute__((always_inline)) void q8_rows4(int C, int64_t nb, const uint8_t *w,
                                                           size_t ws,
                                                           const st_block_q8_0 *const *xr,
                                                           float *const *yr, const uint8_t *pf)
{
    const size_t pf_step = ((4 * ws + (size_t)nb - 1) / (size_t)nb + 63) & ~(size_t)63;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t b = 0; b < nb; b++) {
        q_prefetch(pf, 4 * ws, pf_step, b);
        const size_t off = (size_t)b * sizeof(st_block_q8_0);
        __m256i h[4];
        __m256i p[2][4];
        for (int r = 0; r < 4; r++) {
            const __m256i wv = _mm256_loadu_si256((const __m256i *)(w + (size_t)r * ws + off + 2));
            const __m256i av = _mm256_sign_epi8(wv, wv);
            for (int j = 0; j < C; j++) {
                const __m256i xv = _mm256_loadu_si256((const __m256i *)xr[j][b].qs);
                p[r & 1][j] = _mm256_madd_epi16(_mm256_maddubs_epi16(av, _mm256_sign_epi8(xv, wv)),
                                                ones);
            }
            if (r & 1)
                for (int j = 0; j < C; j++) {
                    const __m256i hh = _mm256_hadd_epi32(p[0][j], p[1][j]);
                    h[j] = r == 1 ? hh : _mm256_hadd_epi32(h[j], hh);
                }
        }
        /* h[j] = [rows 0..3 (first half) | rows 0..3 (second half)] of x_j */
        const __m128 dw = _mm_cvtph_ps(_mm_set_epi16(0, 0, 0, 0, q_ld16(w + 3 * ws + off),
                                                     q_ld16(w + 2 * ws + off), q_ld16(w + ws + off),
                                                     q_ld16(w + off)));
        const __m256 dw2 = _mm256_set_m128(dw, dw);
        for (int k = 0; 2 * k < C; k++) {
            const int ja = 2 * k, jb = 2 * k + 1 < C ? 2 * k + 1 : 2 * k;
            const __m256i si = q_pair4(h[ja], h[jb]);
            const __m256 dx = _mm256_set_m128(_mm_set1_ps(q_h2f(xr[jb][b].d)),
                                              _mm_set1_ps(q_h2f(xr[ja][b].d)));
            acc[k] = _mm256_add_ps(acc[k],
                                   _mm256_mul_ps(_mm256_cvtepi32_ps(si), _mm256_mul_ps(dw2, dx)));
        }
    }
    for (int k = 0; 2 * k < C; k++) {
        _mm_storeu_ps(yr[2 * k], _mm256_castps256_ps128(acc[k]));
        if (2 * k + 1 < C)
            _mm_storeu_ps(yr[2 * k + 1], _mm256_extractf128_ps(acc[k], 1));
    }
}

/* q8_mul_mat_rows4 - rows [i0, i0 + 4 * ng4) against nx activation rows
 * (few: nx < Q8_MIN_NX_PANEL): each 4-row group is read from memory once
 * and used by the activation rows, 4 at a time, while it sits in L1. */
static void q8_mul_mat_rows4(int64_t nb, const uint8_t *w, size_t ws, int64_t i0, int64_t ng4,
                             const uint8_t *x, size_t x_stride, int64_t nx, float *y,
                             int64_t y_stride)
{
    for (int64_t g = 0; g < ng4; g++) {
        const int64_t i = i0 + 4 * g;
        const uint8_t *wg = w + (size_t)i * ws;
        for (int64_t j0 = 0; j0 < nx; j0 += 4) {
            const int C = nx - j0 < 4 ? (int)(nx - j0) : 4;
            const st_block_q8_0 *xr[4];
            float *yr[4];
            for (int c = 0; c < C; c++) {
                xr[c] = (const st_block_q8_0 *)(x + (size_t)(j0 + c) * x_stride);
                yr[c] = y + (j0 + c) * y_stride + i;
            }
            /* the first activation chunk prefetches the next group */
            const uint8_t *pf = j0 == 0 && g + 1 < ng4 ? wg + 4 * ws : NULL;
            switch (C) {
            case 4:
                q8_rows4(4, nb, wg, ws, xr, yr, pf);
                break;
            case 3:
                q8_rows4(3, nb, wg, ws, xr, yr, pf);
                break;
            case 2:
                q8_rows4(2, nb, wg, ws, xr, yr, pf);
                break;
            default:
                q8_rows4(1, nb, wg, ws, xr, yr, pf);
                break;
            }
        }
    }
}

/* ---- panel path ---- */

/* q8_panel_build - transposes blocks [b0, b0 + nbp) of 8 rows. */
static void q8_panel_build(q_panel *P, const uint8_t *w, size_t ws, int64_t b0, int64_t nbp)
{
    for (int64_t bb = 0; bb < nbp; bb++) {
        const size_t off = (size_t)(b0 + bb) * sizeof(st_block_q8_0);
        __m256i r[8];
        for (int k = 0; k < 8; k++)
            r[k] = _mm256_loadu_si256((const __m256i *)(w + (size_t)k * ws + off + 2));
        q_transpose8(r, &P->w[bb * 8]);
        for (int c = 0; c < 8; c++)
            P->a[bb * 8 + c] = _mm256_sign_epi8(P->w[bb * 8 + c], P->w[bb * 8 + c]);
        P->d[bb] = q_dw8(w, ws, off);
    }
}

static void q4_panel_build(q_panel *P, const uint8_t *w, size_t ws, int64_t b0, int64_t nbp)
{
    for (int64_t bb = 0; bb < nbp; bb++) {
        const size_t off = (size_t)(b0 + bb) * sizeof(st_block_q4_0);
        __m256i r[8];
        for (int k = 0; k < 8; k++)
            r[k] = q4_unpack(w + (size_t)k * ws + off + 2);
        q_transpose8(r, &P->w[bb * 8]);
        P->d[bb] = q_dw8(w, ws, off);
    }
}

/* q_bcast4 - the 4 bytes at p in every 32-bit lane (a load-only broadcast;
 * through a GPR and vpbroadcastd from a register it costs two more uops). */
static inline __m256i q_bcast4(const int8_t *p)
{
    return _mm256_castps_si256(_mm256_broadcast_ss((const float *)(const void *)p));
}

/* q_pf - what q_panel_rows prefetches while it computes: blocks of the
 * next 8-row group's current k-panel (base = its row 0 at the panel's
 * first block; NULL: nothing). Activation chunk `part` of `nparts` takes
 * its share of the blocks, spread over its iterations, so the loads are
 * in flight long before the next panel is built and never come in one
 * burst that overflows the miss queue. */
typedef struct q_pf {
    const uint8_t *base;
    size_t ws, bs;
    int64_t part, nparts;
} q_pf;

/* q_panel_rows - C (1..4) activation rows against the panel's 8 weight
 * rows: y_j[0..8) continues (or, when first, starts) the block sums.
 * xr[j] points at the panel's first block of row j; for Q4_0, sx[j][bb]
 * is the exact sum of the activations of that block. */
static inline __attribute__((always_inline)) void
q_panel_rows(const q_panel *P, int64_t nbp, int q4, int C, const st_block_q8_0 *const *xr,
             const int32_t *const *sx, const float *const *dx, float *const *yr, int first,
             const q_pf *pf)
{
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[4];
    for (int j = 0; j < C; j++)
        acc[j] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(yr[j]);
    for (int64_t bb = 0; bb < nbp; bb++) {
        if (pf->base != NULL) {
            const int64_t t = (pf->part * nbp + bb) / pf->nparts;
            for (int r = 0; r < 8; r++)
                _mm_prefetch((const char *)(pf->base + (size_t)r * pf->ws + (size_t)t * pf->bs),
                             _MM_HINT_T0);
        }
        __m256i s[4], h[4];
        for (int j = 0; j < C; j++) {
            s[j] = _mm256_setzero_si256();
            h[j] = _mm256_setzero_si256();
        }
        /* not unrolled: unrolled, GCC reassociates the chunk sums into a
         * tree whose partial sums spill out of the 16 registers */
#pragma GCC unroll 1
        for (int c = 0; c < 8; c++) {
            const __m256i wv = P->w[bb * 8 + c];
            if (q4) {
                for (int j = 0; j < C; j++) {
                    const __m256i xb = q_bcast4(xr[j][bb].qs + 4 * c);
                    h[j] = _mm256_add_epi16(h[j], _mm256_maddubs_epi16(wv, xb));
                }
            } else {
                const __m256i av = P->a[bb * 8 + c];
                for (int j = 0; j < C; j++) {
                    const __m256i xb = q_bcast4(xr[j][bb].qs + 4 * c);
                    const __m256i p = _mm256_maddubs_epi16(av, _mm256_sign_epi8(xb, wv));
                    s[j] = _mm256_add_epi32(s[j], _mm256_madd_epi16(p, ones));
                }
            }
        }
        if (q4) /* 8 chunks of pairs <= 3840 each fit int16; widen once */
            for (int j = 0; j < C; j++)
                s[j] = _mm256_sub_epi32(_mm256_madd_epi16(h[j], ones),
                                        _mm256_set1_epi32(8 * sx[j][bb]));
        for (int j = 0; j < C; j++) {
            const __m256 d = _mm256_mul_ps(P->d[bb], _mm256_broadcast_ss(&dx[j][bb]));
            acc[j] = _mm256_add_ps(acc[j], _mm256_mul_ps(_mm256_cvtepi32_ps(s[j]), d));
        }
    }
    for (int j = 0; j < C; j++)
        _mm256_storeu_ps(yr[j], acc[j]);
}

static void q_panel_x(const q_panel *P, int64_t nbp, int q4, int C, const st_block_q8_0 *const *xr,
                      const int32_t *const *sx, const float *const *dx, float *const *yr, int first,
                      const q_pf *pf)
{
    switch (C) {
    case 4:
        if (q4)
            q_panel_rows(P, nbp, 1, 4, xr, sx, dx, yr, first, pf);
        else
            q_panel_rows(P, nbp, 0, 4, xr, sx, dx, yr, first, pf);
        break;
    case 3:
        if (q4)
            q_panel_rows(P, nbp, 1, 3, xr, sx, dx, yr, first, pf);
        else
            q_panel_rows(P, nbp, 0, 3, xr, sx, dx, yr, first, pf);
        break;
    case 2:
        if (q4)
            q_panel_rows(P, nbp, 1, 2, xr, sx, dx, yr, first, pf);
        else
            q_panel_rows(P, nbp, 0, 2, xr, sx, dx, yr, first, pf);
        break;
    default:
        if (q4)
            q_panel_rows(P, nbp, 1, 1, xr, sx, dx, yr, first, pf);
        else
            q_panel_rows(P, nbp, 0, 1, xr, sx, dx, yr, first, pf);
        break;
    }
}

void avx2_x_blocks(const uint8_t *x, size_t x_stride, int64_t j0, int64_t nxg, int64_t b0,
                   int64_t nbp, int64_t ld, float *dx, int32_t *sums)
{
    for (int64_t j = 0; j < nxg; j++) {
        const st_block_q8_0 *xb = (const st_block_q8_0 *)(x + (size_t)(j0 + j) * x_stride) + b0;
        for (int64_t bb = 0; bb < nbp; bb++) {
            dx[j * ld + bb] = q_h2f(xb[bb].d);
            if (sums != NULL)
                sums[j * ld + bb] = q_sum_x(_mm256_loadu_si256((const __m256i *)xb[bb].qs));
        }
    }
}

void avx2_xchunk_at(avx2_xchunk *c, int C, const uint8_t *x, size_t x_stride, int64_t j0, int64_t j,
                    int64_t b0, const int32_t *sums, const float *dx, int64_t ld, float *y,
                    int64_t y_stride, int64_t col)
{
    for (int k = 0; k < C; k++) {
        c->xr[k] = (const st_block_q8_0 *)(x + (size_t)(j0 + j + k) * x_stride) + b0;
        c->sx[k] = sums + (j + k) * ld;
        c->dx[k] = dx + (j + k) * ld;
        c->yr[k] = y + (j0 + j + k) * y_stride + col;
    }
}

/* q_mul_mat_panel - rows [i0, i0 + 8 * ng) by the panel path. */
static void q_mul_mat_panel(int q4, int64_t n, const uint8_t *w, size_t w_stride, int64_t i0,
                            int64_t ng, const uint8_t *x, size_t x_stride, int64_t nx, float *y,
                            int64_t y_stride)
{
    q_panel P;
    int32_t sums[Q_XGROUP][Q_PANEL_BLOCKS]; /* Q4_0: exact sums of activation blocks */
    float dxs[Q_XGROUP][Q_PANEL_BLOCKS];    /* activation scales as f32 */
    const int64_t nb = n / ST_QK;
    for (int64_t j0 = 0; j0 < nx; j0 += Q_XGROUP) {
        const int64_t nxg = nx - j0 < Q_XGROUP ? nx - j0 : Q_XGROUP;
        for (int64_t b0 = 0; b0 < nb; b0 += Q_PANEL_BLOCKS) {
            const int64_t nbp = nb - b0 < Q_PANEL_BLOCKS ? nb - b0 : Q_PANEL_BLOCKS;
            avx2_x_blocks(x, x_stride, j0, nxg, b0, nbp, Q_PANEL_BLOCKS, &dxs[0][0],
                          q4 ? &sums[0][0] : NULL);
            for (int64_t g = 0; g < ng; g++) {
                const int64_t i = i0 + 8 * g;
                const uint8_t *wg = w + (size_t)i * w_stride;
                if (q4)
                    q4_panel_build(&P, wg, w_stride, b0, nbp);
                else
                    q8_panel_build(&P, wg, w_stride, b0, nbp);
                const size_t bs = q4 ? sizeof(st_block_q4_0) : sizeof(st_block_q8_0);
                const int64_t nparts = (nxg + 3) / 4;
                for (int64_t j = 0; j < nxg; j += 4) {
                    const q_pf pf = {g + 1 < ng ? wg + 8 * w_stride + (size_t)b0 * bs : NULL,
                                     w_stride, bs, j / 4, nparts};
                    const int C = nxg - j < 4 ? (int)(nxg - j) : 4;
                    avx2_xchunk xc;
                    avx2_xchunk_at(&xc, C, x, x_stride, j0, j, b0, &sums[0][0], &dxs[0][0],
                                   Q_PANEL_BLOCKS, y, y_stride, i);
                    q_panel_x(&P, nbp, q4, C, xc.xr, xc.sx, xc.dx, xc.yr, b0 == 0, &pf);
                }
            }
        }
    }
}

/* q_mul_mat - dispatch shared by Q8_0 (q4 = 0) and Q4_0 (q4 = 1). */
static void q_mul_mat(int q4, int64_t n, const void *wv, size_t w_stride, int64_t i0, int64_t i1,
                      const void *xv, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    const uint8_t *w = wv;
    const uint8_t *x = xv;
    const int64_t nb = n / ST_QK;
    const int64_t ng = (i1 - i0) / 8;
    int64_t done = i0; /* rows [i0, done) are computed by a blocked path */
    if (nx >= (q4 ? Q4_MIN_NX_PANEL : Q8_MIN_NX_PANEL) && ng > 0) {
        q_mul_mat_panel(q4, n, w, w_stride, i0, ng, x, x_stride, nx, y, y_stride);
        done = i0 + 8 * ng;
    } else if (!q4 && nx >= 2 && (i1 - i0) / 4 > 0) {
        const int64_t ng4 = (i1 - i0) / 4;
        q8_mul_mat_rows4(nb, w, w_stride, i0, ng4, x, x_stride, nx, y, y_stride);
        done = i0 + 4 * ng4;
    } else if (ng > 0) {
        for (int64_t j = 0; j < nx; j++) {
            const st_block_q8_0 *xr = (const st_block_q8_0 *)(x + (size_t)j * x_stride);
            float *yr = y + j * y_stride;
            if (!q4) {
                for (int64_t g = 0; g < ng; g++)
                    q8_rows8(nb, w + (size_t)(i0 + 8 * g) * w_stride, w_stride, xr, yr + i0 + 8 * g,
                             g + 1 < ng ? w + (size_t)(i0 + 8 * g + 8) * w_stride : NULL);
                continue;
            }
            int32_t sx[Q_DECODE_BLOCKS];
            for (int64_t b0 = 0; b0 < nb; b0 += Q_DECODE_BLOCKS) {
                const int64_t nbp = nb - b0 < Q_DECODE_BLOCKS ? nb - b0 : Q_DECODE_BLOCKS;
                for (int64_t bb = 0; bb < nbp; bb++)
                    sx[bb] = q_sum_x(_mm256_loadu_si256((const __m256i *)xr[b0 + bb].qs));
                for (int64_t g = 0; g < ng; g++)
                    q4_rows8(b0, nbp, w + (size_t)(i0 + 8 * g) * w_stride, w_stride, xr, sx,
                             yr + i0 + 8 * g, b0 == 0,
                             g + 1 < ng ? w + (size_t)(i0 + 8 * g + 8) * w_stride : NULL, nb);
            }
        }
        done = i0 + 8 * ng;
    }
    for (int64_t i = done; i < i1; i++) {
        for (int64_t j = 0; j < nx; j++) {
            const st_block_q8_0 *xr = (const st_block_q8_0 *)(x + (size_t)j * x_stride);
            const uint8_t *wr = w + (size_t)i * w_stride;
            y[j * y_stride + i] = q4 ? q4_row1(nb, (const st_block_q4_0 *)wr, xr)
                                     : q8_row1(nb, (const st_block_q8_0 *)wr, xr);
        }
    }
}

void avx2_mul_mat_q8_0(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                       const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    q_mul_mat(0, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}

void avx2_mul_mat_q4_0(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                       const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    q_mul_mat(1, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}
