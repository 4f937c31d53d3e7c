/* legacy_x86.h - the parts of the x86 products of the legacy and IQ4 quants
 * (Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS) shared by the AVX2 (legacy_avx2.c)
 * and AVX-512 (legacy_avx512.c) variants: unpacking 32 values to signed
 * bytes, the panel of 8 weight rows, the activation side of a unit and the
 * float step. Needs AVX2 + F16C (every including file is compiled with
 * them). Private to kernels/.
 *
 * Design. Every type is brought to one form: per 32-value unit of a weight
 * row, 32 signed quants q in element order (|q| <= 127: Q4_1 0..15, Q5_0
 * -16..15, Q5_1 0..31, IQ4 levels -127..113), so a unit's products with 32
 * activation quants x (|x| <= 127) are unsigned-by-signed byte products:
 * q * x directly for the unsigned types (Q4_1, Q5_1), |q| * sign(x, q)
 * otherwise, whose pair sums (<= 2 * 127 * 127) fit int16: every integer
 * sum is exact. The variants take 8 weight rows at a time, either unit by
 * unit (one activation row: unpacked and used at once) or through a panel
 * of LX_PANEL_UNITS units of the 8 rows unpacked once (about 19 KiB on the
 * stack) and used by every activation row; either way each activation row
 * gets, per unit, one int32 lane per weight row holding the unit's sumi,
 * and lx_step adds it with legacy.h's float formula lane by lane: the
 * reference's scalar operations in its order, so results equal
 * legacy_ref.c bit for bit whichever path ran. A group of fewer than 8
 * rows (the end of [i0, i1)) repeats its last row in the missing lanes and
 * stores only its own. */
#ifndef ST_KERNELS_LEGACY_X86_H
#define ST_KERNELS_LEGACY_X86_H

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "kernels/legacy.h"
#include "kernels/repack.h"

#define LX_ROWS 8         /* weight rows of a panel: one float lane each */
#define LX_PANEL_UNITS 32 /* 32-value units per panel (a multiple of ST_IQ4_SUBS) */
#define LX_Q5_BIAS 16     /* Q5_0 quants are q - 16 */

/* lx_scales - the float and integer scales of one unit of 8 rows: d_w
 * (IQ4_XS: of the unit's super-block, set at its last sub-block only), m_w
 * (Q4_1 / Q5_1), ls - 32 (IQ4_XS). */
typedef struct lx_scales {
    __m256 d, m;
    __m256i sc;
} lx_scales;

typedef struct lx_panel {
    __m256i a[LX_PANEL_UNITS][LX_ROWS]; /* |q| of unit u of row r (Q4_1, Q5_1: q) */
    __m256i q[LX_PANEL_UNITS][LX_ROWS]; /* q (the signs) */
    lx_scales s[LX_PANEL_UNITS];
} lx_panel;

/* lx_x - the activation side of one unit: its 32 quants and its scales
 * (sx: Q8_1's s, else 0). */
typedef struct lx_x {
    __m256i v;
    float dx, sx;
} lx_x;

static inline float lx_h2f(uint16_t h) { return _cvtsh_ss(h); }

/* lx_unsigned - whether t's quants are all >= 0 (Q4_1, Q5_1): their
 * products need no sign trick (maddubs(q, x) directly). */
static inline int lx_unsigned(st_dtype t) { return t == ST_DT_Q4_1 || t == ST_DT_Q5_1; }

/* lx_block_bytes - bytes of one block of weight dtype t. */
static inline size_t lx_block_bytes(st_dtype t)
{
    switch (t) {
    case ST_DT_Q4_1:
        return sizeof(st_block_q4_1);
    case ST_DT_Q5_0:
        return sizeof(st_block_q5_0);
    case ST_DT_Q5_1:
        return sizeof(st_block_q5_1);
    case ST_DT_IQ4_NL:
        return sizeof(st_block_iq4_nl);
    default:
        return sizeof(st_block_iq4_xs);
    }
}

/* lx_nibbles - the 32 nibbles of qs (16 bytes) as bytes in element order. */
static inline __m256i lx_nibbles(const uint8_t *qs)
{
    const __m128i v = _mm_loadu_si128((const __m128i *)qs);
    const __m256i b = _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1);
    return _mm256_and_si256(b, _mm256_set1_epi8(0x0f));
}

/* lx_fifth - byte k = 16 if bit k of the little-endian 32-bit qh is set,
 * else 0: byte k / 8 of qh is spread over bytes 8 (k / 8) .. 8 (k / 8) + 7
 * (each 128-bit lane holds the whole word), then bit k % 8 is tested. */
static inline __m256i lx_fifth(const uint8_t *qh)
{
    int32_t h;
    memcpy(&h, qh, sizeof h);
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                            2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(h), spread);
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
    return _mm256_and_si256(set, _mm256_set1_epi8(1 << 4));
}

/* lx_levels - the IQ4 levels of 32 nibbles (bytes 0..15). */
static inline __m256i lx_levels(__m256i nib)
{
    const __m128i t = _mm_loadu_si128((const __m128i *)st_iq4nl_values);
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(t), nib);
}

/* lx_qs_of - where unit u of lane r keeps its 16 nibble bytes, and in *qh
 * (Q5_0, Q5_1; else NULL) its 4 bytes of fifth bits. Plain layout (r8 =
 * 0): row[r] is the lane's row; R8 layout (r8 = 1, kernels/repack.h):
 * row[0] is the group's first row, every lane in that group. */
static inline __attribute__((always_inline)) const uint8_t *
lx_qs_of(st_dtype t, int r8, const uint8_t *const row[LX_ROWS], int r, int64_t u,
         const uint8_t **qh)
{
    const size_t bb = lx_block_bytes(t);
    const int64_t blk = t == ST_DT_IQ4_XS ? u / ST_IQ4_SUBS : u;
    const size_t sub = (size_t)(u % ST_IQ4_SUBS);
    *qh = NULL;
    if (r8) {
        const uint8_t *g = row[0] + (size_t)blk * LX_ROWS * bb;
        if (t == ST_DT_IQ4_XS)
            return g + ST_R8_XS_QS + ST_QK / 2 * (LX_ROWS * sub + (size_t)r);
        if (t == ST_DT_Q5_0 || t == ST_DT_Q5_1)
            *qh = g + ST_R8_LG_QH(t) + sizeof(uint32_t) * (size_t)r;
        return g + ST_R8_LG_QS(t) + ST_QK / 2 * (size_t)r;
    }
    const uint8_t *b = row[r] + (size_t)blk * bb;
    switch (t) {
    case ST_DT_Q4_1:
        return b + offsetof(st_block_q4_1, qs);
    case ST_DT_Q5_0:
        *qh = b + offsetof(st_block_q5_0, qh);
        return b + offsetof(st_block_q5_0, qs);
    case ST_DT_Q5_1:
        *qh = b + offsetof(st_block_q5_1, qh);
        return b + offsetof(st_block_q5_1, qs);
    case ST_DT_IQ4_NL:
        return b + offsetof(st_block_iq4_nl, qs);
    default:
        return b + offsetof(st_block_iq4_xs, qs) + ST_QK / 2 * sub;
    }
}

/* lx_unpack - the signed quants of unit u of lane r (IQ4_XS: without the
 * sub-block's scale). */
static inline __attribute__((always_inline)) __m256i
lx_unpack(st_dtype t, int r8, const uint8_t *const row[LX_ROWS], int r, int64_t u)
{
    const uint8_t *qh;
    const uint8_t *qs = lx_qs_of(t, r8, row, r, u, &qh);
    const __m256i nib = lx_nibbles(qs);
    switch (t) {
    case ST_DT_Q4_1:
        return nib;
    case ST_DT_Q5_0:
        return _mm256_sub_epi8(_mm256_or_si256(nib, lx_fifth(qh)), _mm256_set1_epi8(LX_Q5_BIAS));
    case ST_DT_Q5_1:
        return _mm256_or_si256(nib, lx_fifth(qh));
    default:
        return lx_levels(nib);
    }
}

/* lx_rows - the 8 row pointers of the nr (1..8) rows at w, ws bytes apart;
 * lanes r >= nr repeat row nr - 1. */
static inline void lx_rows(const uint8_t *w, size_t ws, int nr, const uint8_t *row[LX_ROWS])
{
    for (int r = 0; r < LX_ROWS; r++)
        row[r] = w + (size_t)(r < nr ? r : nr - 1) * ws;
}

/* lx_scales8 - the scales of unit u of the 8 lanes (layouts as
 * lx_qs_of's). Plain: the f16 d and m (every block's first two 16-bit
 * fields) are loaded 16 bytes per row (a block is at least 18 bytes) and
 * interleaved; R8: the 8 d and the 8 m are side by side. */
static inline __attribute__((always_inline)) void
lx_scales8(st_dtype t, int r8, const uint8_t *const row[LX_ROWS], int64_t u, lx_scales *s)
{
    const size_t bb = lx_block_bytes(t);
    const int64_t blk = t == ST_DT_IQ4_XS ? u / ST_IQ4_SUBS : u;
    const uint8_t *g = row[0] + (size_t)blk * LX_ROWS * bb; /* R8 only */
    if (t == ST_DT_IQ4_XS) {
        int32_t sc[LX_ROWS];
        for (int r = 0; r < LX_ROWS; r++) {
            uint16_t sh;
            const uint8_t *psh = r8 ? g + ST_R8_XS_SH + sizeof sh * (size_t)r
                                    : row[r] + (size_t)blk * bb +
                                          offsetof(st_block_iq4_xs, scales_h);
            const uint8_t *psl = r8 ? g + ST_R8_XS_SL + sizeof(uint32_t) * (size_t)r
                                    : row[r] + (size_t)blk * bb +
                                          offsetof(st_block_iq4_xs, scales_l);
            memcpy(&sh, psh, sizeof sh);
            sc[r] = st_iq4xs_scale_of(sh, psl, (int)(u % ST_IQ4_SUBS));
        }
        s->sc = _mm256_loadu_si256((const __m256i *)sc);
        if (u % ST_IQ4_SUBS != ST_IQ4_SUBS - 1)
            return;
    }
    if (r8) {
        s->d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)g));
        if (lx_unsigned(t))
            s->m = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + ST_R8_LG_M)));
        return;
    }
    __m128i l[LX_ROWS];
    for (int r = 0; r < LX_ROWS; r++)
        l[r] = _mm_loadu_si128((const __m128i *)(row[r] + (size_t)blk * bb));
    const __m128i ab = _mm_unpacklo_epi32(_mm_unpacklo_epi16(l[0], l[1]),
                                          _mm_unpacklo_epi16(l[2], l[3])); /* d0-3 | m0-3 */
    const __m128i cd = _mm_unpacklo_epi32(_mm_unpacklo_epi16(l[4], l[5]),
                                          _mm_unpacklo_epi16(l[6], l[7])); /* d4-7 | m4-7 */
    s->d = _mm256_cvtph_ps(_mm_unpacklo_epi64(ab, cd));
    if (lx_unsigned(t))
        s->m = _mm256_cvtph_ps(_mm_unpackhi_epi64(ab, cd));
}

/* lx_abs - what the byte products take as unsigned: |q|, or q itself for
 * the unsigned types. */
static inline __attribute__((always_inline)) __m256i lx_abs(st_dtype t, __m256i q)
{
    return lx_unsigned(t) ? q : _mm256_abs_epi8(q);
}

/* lx_panel_build - units [u0, u0 + nu) of the 8 lanes into P. */
static inline __attribute__((always_inline)) void lx_panel_build(st_dtype t, int r8, lx_panel *P,
                                                                 const uint8_t *const row[LX_ROWS],
                                                                 int64_t u0, int64_t nu)
{
    for (int64_t k = 0; k < nu; k++) {
        for (int r = 0; r < LX_ROWS; r++) {
            P->q[k][r] = lx_unpack(t, r8, row, r, u0 + k);
            P->a[k][r] = lx_abs(t, P->q[k][r]);
        }
        lx_scales8(t, r8, row, u0 + k, &P->s[k]);
    }
}

/* lx_x_at - unit u of the activation row xr of weight type t (Q8_0 for
 * Q5_0 and IQ4_NL, Q8_1 for Q4_1 and Q5_1, Q8_K for IQ4_XS). */
static inline __attribute__((always_inline)) lx_x lx_x_at(st_dtype t, const uint8_t *xr, int64_t u)
{
    lx_x o;
    o.sx = 0.0f;
    if (t == ST_DT_Q4_1 || t == ST_DT_Q5_1) {
        const st_block_q8_1 *b = (const st_block_q8_1 *)(const void *)xr + u;
        o.v = _mm256_loadu_si256((const __m256i *)b->qs);
        o.dx = lx_h2f(b->d);
        o.sx = lx_h2f(b->s);
    } else if (t == ST_DT_IQ4_XS) {
        const st_block_q8_k *b = (const st_block_q8_k *)(const void *)xr + u / ST_IQ4_SUBS;
        o.v = _mm256_loadu_si256((const __m256i *)(b->qs + (u % ST_IQ4_SUBS) * ST_QK));
        o.dx = b->d;
    } else {
        const st_block_q8_0 *b = (const st_block_q8_0 *)(const void *)xr + u;
        o.v = _mm256_loadu_si256((const __m256i *)b->qs);
        o.dx = lx_h2f(b->d);
    }
    return o;
}

/* lx_step - the unit u with scales sc and lane r = the exact sumi of row
 * r: legacy.h's float step per lane. IQ4_XS adds (ls - 32) * sumi to the
 * integer sum *si and takes the float step at the super-block's last
 * sub-block (then clears *si). */
static inline __attribute__((always_inline)) __m256 lx_step(st_dtype t, const lx_scales *sc,
                                                            int64_t u, __m256i s8, const lx_x *x,
                                                            __m256 acc, __m256i *si)
{
    const __m256 dx = _mm256_set1_ps(x->dx);
    if (t == ST_DT_IQ4_XS) {
        *si = _mm256_add_epi32(*si, _mm256_mullo_epi32(s8, sc->sc));
        if (u % ST_IQ4_SUBS != ST_IQ4_SUBS - 1)
            return acc;
        const __m256 term = _mm256_mul_ps(_mm256_cvtepi32_ps(*si), _mm256_mul_ps(sc->d, dx));
        *si = _mm256_setzero_si256();
        return _mm256_add_ps(acc, term);
    }
    const __m256 term = _mm256_mul_ps(_mm256_cvtepi32_ps(s8), _mm256_mul_ps(sc->d, dx));
    if (lx_unsigned(t))
        return _mm256_add_ps(acc, _mm256_add_ps(term, _mm256_mul_ps(sc->m, _mm256_set1_ps(x->sx))));
    return _mm256_add_ps(acc, term);
}

/* lx_pf - the prefetch of the next group of 8 rows (contiguous, 8 * ws
 * bytes from base) spread over the nu units of the current one: a slice
 * of step bytes per unit (the hardware prefetcher does not keep up with 8
 * short row streams; see kernels_avx2_q.c). */
typedef struct lx_pf {
    const uint8_t *base; /* NULL: no prefetch */
    size_t len, step;
} lx_pf;

/* lx_pf_of - the prefetch of the 8 rows at base (ws bytes apart) over nu
 * units, or none when !on. */
static inline lx_pf lx_pf_of(int on, const uint8_t *base, size_t ws, int64_t nu)
{
    const size_t len = LX_ROWS * ws;
    const size_t line = 64;
    lx_pf p = {on ? base : NULL, len,
               ((len + (size_t)nu - 1) / (size_t)nu + line - 1) & ~(line - 1)};
    return p;
}

/* lx_prefetch - slice u of pf. */
static inline void lx_prefetch(const lx_pf *pf, int64_t u)
{
    if (pf->base == NULL)
        return;
    const size_t o0 = (size_t)u * pf->step;
    const size_t o1 = o0 + pf->step < pf->len ? o0 + pf->step : pf->len;
    for (size_t o = o0; o < o1; o += 64)
        _mm_prefetch((const char *)(pf->base + o), _MM_HINT_T0);
}

/* lx_store - the nr (1..8) lanes of acc to y[0..nr). */
static inline void lx_store(float *y, __m256 acc, int nr)
{
    if (nr == LX_ROWS) {
        _mm256_storeu_ps(y, acc);
        return;
    }
    float t[LX_ROWS];
    _mm256_storeu_ps(t, acc);
    memcpy(y, t, sizeof(float) * (size_t)nr);
}

/* lx_load - acc from y[0..nr) (the other lanes 0). */
static inline __m256 lx_load(const float *y, int nr)
{
    if (nr == LX_ROWS)
        return _mm256_loadu_ps(y);
    float t[LX_ROWS] = {0};
    memcpy(t, y, sizeof(float) * (size_t)nr);
    return _mm256_loadu_ps(t);
}

#endif
