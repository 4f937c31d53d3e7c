/* kquant_x86.h - the parts of the x86 K-quant products shared by the AVX2
 * (kquant_avx2.c) and AVX-512 (kquant_avx512.c) variants: the unpacked
 * super-block, its unpacking per type, the integer lanes of one block
 * against one Q8_K block, the one-row product and the driver over output
 * rows and tiles of activation rows. Needs AVX2 + F16C (every including
 * file is compiled with them). Private to kernels/.
 *
 * Design. A weight super-block is unpacked once into the form every type
 * shares here: 8 vectors of 32 UNSIGNED quants u (chunk c = values
 * 32c..32c+31, the order of the Q8_K quants), 16 int16 scales (one per 16
 * values), an offset off with q = u - off (Q3_K: 4, Q6_K: 32, others 0),
 * 16 mins and d, dmin. For each activation row then
 *   sum_g sc_g * sum(u * q8)  : maddubs_epi16 (u <= 63, |q8| <= 127, pair
 *                               sums <= 16002: no saturation), then
 *                               madd_epi16 with the scales;
 *   - off * sum_g sc_g * bsums_g  and  summ = sum_g m_g * bsums_g
 *                             : madd_epi16 over the 16 bsums;
 * all exact in int32 (|terms| < 2^29), so sumi and summ equal the
 * reference's and st_kq_step adds them in the same float order: results
 * are bit-identical to kquant_ref.c. A weight block is unpacked once per
 * tile of up to KA_TILE activation rows, each row keeping its own running
 * sum block after block (batch invariant): a tile reduces its rows'
 * integer lanes together (hadd tree) and takes the float steps of its rows
 * in one vector, lane t doing exactly the scalar step of row t. */
#ifndef ST_KERNELS_KQUANT_X86_H
#define ST_KERNELS_KQUANT_X86_H

#include <immintrin.h>
#include <string.h>

#include "kernels/kquant.h"

#define KA_CHUNKS (ST_QK_K / 32) /* 32-value chunks per super-block */
#define KA_GROUPS (ST_QK_K / 16) /* 16-value groups (scales, bsums) */
#define KA_TILE 8                /* activation rows sharing one unpacked block */

typedef struct ka_block {
    __m256i u[KA_CHUNKS];
    __m256i scv[KA_CHUNKS]; /* chunk c: scale of group 2c (low 128 bits), 2c+1 (high) */
    __m256i sc;             /* 16 int16: the scale of each group */
    __m256i scoff;          /* 16 int16: off * scale of each group (|.| <= 4096) */
    __m256i m;              /* 16 int16 mins (zero without) */
    int has_min;
    float d, dmin;
} ka_block;

static inline int32_t ka_hsum(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

static inline float ka_h2f(uint16_t h) { return _cvtsh_ss(h); }

/* ka_scales - kb->sc, kb->scv and kb->scoff from the 16 int16 scales sc: the
 * 32-bit pair (sc[2c], sc[2c+1]) broadcast, then its low half spread over
 * the low 128 bits and its high half over the high ones. */
static inline void ka_scales(ka_block *kb, __m256i sc, int off)
{
    const __m256i spread = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2,
                                            3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
    for (int c = 0; c < KA_CHUNKS; c++) {
        const __m256i pair = _mm256_permutevar8x32_epi32(sc, _mm256_set1_epi32(c));
        kb->scv[c] = _mm256_shuffle_epi8(pair, spread);
    }
    kb->sc = sc;
    kb->scoff = _mm256_mullo_epi16(sc, _mm256_set1_epi16((int16_t)off));
}

/* ka_words - the 12 packed scale bytes of Q3_K / Q4_K / Q5_K as three
 * little-endian 32-bit words. */
static inline void ka_words(const uint8_t *q, uint32_t w[3]) { memcpy(w, q, 12); }

#define KA_LO4 0x0f0f0f0fu /* the low nibble of each byte */
#define KA_LO6 0x3f3f3f3fu /* the low 6 bits of each byte */
#define KA_LO2 0x03030303u /* the low 2 bits of each byte */

/* ka_scales_k4 - Q4_K / Q5_K: the 8 six-bit scales and mins (see
 * st_kq_scale_min_k4) four bytes at a time, each doubled to its two
 * 16-value groups, as int16. */
static inline void ka_scales_k4(const uint8_t *q, __m256i *sc, __m256i *m)
{
    uint32_t w[3];
    ka_words(q, w);
    const uint32_t s_lo = w[0] & KA_LO6, m_lo = w[1] & KA_LO6;
    const uint32_t s_hi = (w[2] & KA_LO4) | (((w[0] >> 6) & KA_LO2) << 4);
    const uint32_t m_hi = ((w[2] >> 4) & KA_LO4) | (((w[1] >> 6) & KA_LO2) << 4);
    const __m128i sv = _mm_setr_epi32((int)s_lo, (int)s_hi, 0, 0);
    const __m128i mv = _mm_setr_epi32((int)m_lo, (int)m_hi, 0, 0);
    *sc = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(sv, sv));
    *m = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mv, mv));
}

/* ka_scales_q3 - Q3_K: the 16 signed scales (see st_kq_scales_q3) four
 * bytes at a time, as int16. */
static inline __m256i ka_scales_q3(const uint8_t *q)
{
    uint32_t w[3];
    ka_words(q, w);
    const uint32_t s0 = (w[0] & KA_LO4) | ((w[2] & KA_LO2) << 4);
    const uint32_t s1 = (w[1] & KA_LO4) | (((w[2] >> 2) & KA_LO2) << 4);
    const uint32_t s2 = ((w[0] >> 4) & KA_LO4) | (((w[2] >> 4) & KA_LO2) << 4);
    const uint32_t s3 = ((w[1] >> 4) & KA_LO4) | (((w[2] >> 6) & KA_LO2) << 4);
    const __m128i v = _mm_setr_epi32((int)s0, (int)s1, (int)s2, (int)s3);
    return _mm256_sub_epi16(_mm256_cvtepu8_epi16(v), _mm256_set1_epi16(32));
}

/* Q2_K: chunk 4h + j is bits 2j..2j+1 of the 32 bytes qs[32h..]; scales[g]
 * holds group g's scale (low nibble) and min (high nibble). */
static inline void ka_unpack_q2_k(const void *blk, ka_block *kb)
{
    const st_block_q2_k *b = blk;
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; h++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
        for (int j = 0; j < 4; j++)
            kb->u[4 * h + j] = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3);
    }
    const __m128i raw = _mm_loadu_si128((const __m128i *)b->scales);
    const __m128i m4 = _mm_set1_epi8(0x0f);
    ka_scales(kb, _mm256_cvtepu8_epi16(_mm_and_si128(raw, m4)), 0);
    kb->m = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), m4));
    kb->has_min = 1;
    kb->d = ka_h2f(b->d);
    kb->dmin = ka_h2f(b->dmin);
}

/* Q3_K: Q2_K's low bits plus 4 * (bit 4h + j of hmask[l]); q = u - 4. */
static inline void ka_unpack_q3_k(const void *blk, ka_block *kb)
{
    const st_block_q3_k *b = blk;
    const __m256i m3 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(4);
    const __m256i hm = _mm256_loadu_si256((const __m256i *)b->hmask);
    for (int h = 0; h < 2; h++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
        for (int j = 0; j < 4; j++) {
            const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3);
            /* bit k = 4h + j of each byte moved to its bit 2 (no bit of the
             * other byte of a 16-bit lane reaches bit 2 or 10), masked: 4 where set */
            const int k = 4 * h + j;
            const __m256i hb = k < 2 ? _mm256_slli_epi16(hm, 2 - k) : _mm256_srli_epi16(hm, k - 2);
            kb->u[4 * h + j] = _mm256_or_si256(lo, _mm256_and_si256(hb, m4));
        }
    }
    ka_scales(kb, ka_scales_q3(b->scales), 4);
    kb->m = _mm256_setzero_si256();
    kb->has_min = 0;
    kb->d = ka_h2f(b->d);
    kb->dmin = 0.0f;
}
/* Q4_K / Q5_K: chunk 2c is the low nibbles of qs[32c..32c+31], chunk 2c+1
 * the high ones; Q5_K adds 16 * bit 2c (resp. 2c + 1) of qh[l] (qh NULL:
 * Q4_K). ka_unpack_q45_u - the quants only, into u. */
static inline void ka_unpack_q45_u(const uint8_t *qs, const uint8_t *qh, __m256i u[KA_CHUNKS])
{
    const __m256i m4 = _mm256_set1_epi8(0x0f), m1 = _mm256_set1_epi8(1);
    const __m256i h = qh ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
        __m256i lo = _mm256_and_si256(q, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if (qh != NULL) {
            const __m256i b0 = _mm256_and_si256(_mm256_srli_epi16(h, 2 * c), m1);
            const __m256i b1 = _mm256_and_si256(_mm256_srli_epi16(h, 2 * c + 1), m1);
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(b0, 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(b1, 4));
        }
        u[2 * c] = lo;
        u[2 * c + 1] = hi;
    }
}

static inline void ka_unpack_q45(uint16_t d, uint16_t dmin, const uint8_t *scales,
                                 const uint8_t *qs, const uint8_t *qh, ka_block *kb)
{
    ka_unpack_q45_u(qs, qh, kb->u);
    __m256i sc, m;
    ka_scales_k4(scales, &sc, &m);
    ka_scales(kb, sc, 0);
    kb->m = m;
    kb->has_min = 1;
    kb->d = ka_h2f(d);
    kb->dmin = ka_h2f(dmin);
}

static inline void ka_unpack_q4_k(const void *blk, ka_block *kb)
{
    const st_block_q4_k *b = blk;
    ka_unpack_q45(b->d, b->dmin, b->scales, b->qs, NULL, kb);
}

static inline void ka_unpack_q5_k(const void *blk, ka_block *kb)
{
    const st_block_q5_k *b = blk;
    ka_unpack_q45(b->d, b->dmin, b->scales, b->qs, b->qh, kb);
}

/* Q6_K: per half h, chunks 4h + k (k = 0..3): low nibbles of ql[64h..+31],
 * of ql[64h+32..+63], high nibbles of each, with bits 2k..2k+1 of
 * qh[32h + l] on top; q = u - 32. */
static inline void ka_unpack_q6_k(const void *blk, ka_block *kb)
{
    const st_block_q6_k *b = blk;
    const __m256i m4 = _mm256_set1_epi8(0x0f), m3 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; h++) {
        const __m256i l0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
        const __m256i l1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
        const __m256i nib[4] = {_mm256_and_si256(l0, m4), _mm256_and_si256(l1, m4),
                                _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4)};
        for (int k = 0; k < 4; k++) {
            const __m256i top = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), m3);
            kb->u[4 * h + k] = _mm256_or_si256(nib[k], _mm256_slli_epi16(top, 4));
        }
    }
    ka_scales(kb, _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales)), 32);
    kb->m = _mm256_setzero_si256();
    kb->has_min = 0;
    kb->d = ka_h2f(b->d);
    kb->dmin = 0.0f;
}

/* ka_block_vecs - the lanes of sumi and summ of an unpacked block with one
 * Q8_K block (their sums are the exact sumi and summ). */
static inline void ka_block_vecs(const ka_block *kb, const st_block_q8_k *x, __m256i *vi,
                                 __m256i *vm)
{
    __m256i acc = _mm256_setzero_si256();
    for (int c = 0; c < KA_CHUNKS; c++) {
        const __m256i y = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * c));
        const __m256i p = _mm256_maddubs_epi16(kb->u[c], y);
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, kb->scv[c]));
    }
    /* the offsets: off * sum_g sc_g * bsums_g, taken from acc lane by lane */
    const __m256i bs = _mm256_loadu_si256((const __m256i *)x->bsums);
    *vi = _mm256_sub_epi32(acc, _mm256_madd_epi16(bs, kb->scoff));
    *vm = kb->has_min ? _mm256_madd_epi16(bs, kb->m) : _mm256_setzero_si256();
}

/* ka_hsum8 - lane t of the result = the sum of the 8 lanes of v[t]. */
static inline __m256i ka_hsum8(const __m256i v[KA_TILE])
{
    const __m256i h01 = _mm256_hadd_epi32(v[0], v[1]), h23 = _mm256_hadd_epi32(v[2], v[3]);
    const __m256i h45 = _mm256_hadd_epi32(v[4], v[5]), h67 = _mm256_hadd_epi32(v[6], v[7]);
    const __m256i a = _mm256_hadd_epi32(h01, h23), b = _mm256_hadd_epi32(h45, h67);
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                            _mm256_permute2x128_si256(a, b, 0x31));
}

typedef void (*ka_unpack_fn)(const void *blk, ka_block *kb);

/* ka_row1 - one weight row against one activation row: scalar float steps. */
static inline float ka_row1(ka_unpack_fn unpack, size_t bb, int64_t nb, const unsigned char *wr,
                            const st_block_q8_k *xr)
{
    ka_block kb;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        unpack(wr + (size_t)b * bb, &kb);
        __m256i vi, vm;
        ka_block_vecs(&kb, &xr[b], &vi, &vm);
        acc = st_kq_step(acc, xr[b].d, kb.d, kb.dmin, ka_hsum(vi), kb.has_min ? ka_hsum(vm) : 0);
    }
    return acc;
}

/* ka_tile_step - the float steps of a tile's rows for one block: lane t
 * of acc becomes st_kq_step(acc[t], dx[t], d, dmin, sum(vi[t]), sum(vm[t]))
 * (mul, mul, sub, add: the scalar step's operations in its order). */
static inline __m256 ka_tile_step(__m256 acc, const ka_block *kb, const __m256i vi[KA_TILE],
                                  const __m256i vm[KA_TILE], const float dx[KA_TILE])
{
    const __m256 si = _mm256_cvtepi32_ps(ka_hsum8(vi));
    const __m256 sm = kb->has_min ? _mm256_cvtepi32_ps(ka_hsum8(vm)) : _mm256_setzero_ps();
    const __m256 d = _mm256_loadu_ps(dx);
    const __m256 term = _mm256_sub_ps(_mm256_mul_ps(_mm256_mul_ps(d, _mm256_set1_ps(kb->d)), si),
                                      _mm256_mul_ps(_mm256_mul_ps(d, _mm256_set1_ps(kb->dmin)),
                                                    sm));
    return _mm256_add_ps(acc, term);
}

/* ka_tile_fn - one weight row (nb blocks of bb bytes at wr) against nt
 * (2..KA_TILE) activation rows x_stride bytes apart from xb: out[t] = row
 * t's result. */
typedef void (*ka_tile_fn)(ka_unpack_fn unpack, size_t bb, int64_t nb, const unsigned char *wr,
                           const unsigned char *xb, size_t x_stride, int64_t nt,
                           float out[KA_TILE]);

static inline void ka_mul_mat(ka_tile_fn tile, ka_unpack_fn unpack, size_t bb, int64_t n,
                              const void *w, size_t w_stride, int64_t i0, int64_t i1, const void *x,
                              size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    const unsigned char *wb = w;
    const unsigned char *xb = x;
    const int64_t nb = n / ST_QK_K;
    for (int64_t i = i0; i < i1; i++) {
        const unsigned char *wr = wb + (size_t)i * w_stride;
        for (int64_t j0 = 0; j0 < nx; j0 += KA_TILE) {
            const int64_t nt = nx - j0 < KA_TILE ? nx - j0 : KA_TILE;
            const unsigned char *xt = xb + (size_t)j0 * x_stride;
            if (nt == 1) {
                y[j0 * y_stride + i] = ka_row1(unpack, bb, nb, wr, (const st_block_q8_k *)xt);
                continue;
            }
            float out[KA_TILE];
            tile(unpack, bb, nb, wr, xt, x_stride, nt, out);
            for (int64_t t = 0; t < nt; t++)
                y[(j0 + t) * y_stride + i] = out[t];
        }
    }
}

#endif
