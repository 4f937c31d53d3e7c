/* kquant_avx512.c - K-quant products (Q2_K .. Q6_K weights, Q8_K
 * activations) of the AVX-512 variant; compiled with -mavx512f -mavx512bw
 * -mavx512vl (and AVX2, FMA, F16C).
 *
 * Design. The unpacking, the integer scheme and the float order are
 * kquant_x86.h's (the AVX2 variant's); tiles of 2..8 activation rows take
 * each block's products 64 values at a time: two unpacked 32-value chunks
 * and their scale vectors joined in one 512-bit register, then
 * _mm512_maddubs_epi16 and _mm512_madd_epi16 (the same integer products
 * and int32 lanes as AVX2, folded to 256 bits before the offsets), so the
 * exact integer sums, and the results, are bit-identical to kquant_ref.c.
 * A single activation row (decode) takes the AVX2 row product (there the
 * unpacking dominates and 512-bit joins would only add work), except for
 * Q4_K and Q5_K, whose one scale per 32-value chunk lets vpdpbusd and one
 * vpmulld replace the per-chunk scale vectors (k5_row1_q45).
 *
 * Prompt path (kp_*, nx >= KP_MIN_NX activation rows): lanes are
 * activation rows instead of values. Per call and k-panel of KP_SB
 * super-blocks, up to KP_TILES * 16 activation rows are transposed into a
 * panel (per 4-value chunk, one 512-bit vector holding those 4 quants of
 * 16 rows; the bsums as int16 pairs the same way; the scales). Each weight
 * super-block is unpacked once (kquant_x86.h) for all of them; each 4-byte
 * chunk of its unsigned quants is broadcast and vpdpbusd adds its 4
 * products to the 16 rows' lanes, a 16-value group's sum is multiplied by
 * the group's scale (vpmulld), and vpdpwssd takes the offset and min terms
 * from the bsum pairs. These are the exact sumi and summ of every row;
 * each lane then takes st_kq_step's float operations in order, super-block
 * after super-block, in an accumulator of KP_WR weight rows kept across
 * k-panels: bit-identical to the reference and to the tile path, so the
 * switch at KP_MIN_NX rows keeps batch invariance (INV-7). Needs VNNI.
 *
 * Q4_K and Q6_K weights in the R8 layout (k5_groups): fewer than KP_MIN_NX
 * activation rows take kquant_avx512_r8.c's kernels, more the panel path
 * above with each super-block gathered back from its group block
 * (kp_unpack_q4_k_r8, kp_unpack_q6_k_r8: the same unpacked values). */
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "kernels/kernels_avx2_int.h"
#include "kernels/kquant_x86.h"
#include "kernels/repack.h"

#define K5_PAIRS (KA_CHUNKS / 2) /* 64-value chunks per super-block */

static inline __m512i k5_join(__m256i lo, __m256i hi)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* k5_tile - ka_tile_fn with 512-bit products. */
static void k5_tile(ka_unpack_fn unpack, size_t bb, int64_t nb, const unsigned char *wr,
                    const unsigned char *xb, size_t x_stride, int64_t nt, float out[KA_TILE])
{
    ka_block kb;
    __m256 acc = _mm256_setzero_ps();
    __m256i vi[KA_TILE], vm[KA_TILE];
    float dx[KA_TILE];
    for (int t = 0; t < KA_TILE; t++) {
        vi[t] = vm[t] = _mm256_setzero_si256();
        dx[t] = 0.0f;
    }
    __m512i u[K5_PAIRS], sc[K5_PAIRS];
    for (int64_t b = 0; b < nb; b++) {
        unpack(wr + (size_t)b * bb, &kb);
        for (int c = 0; c < K5_PAIRS; c++) {
            u[c] = k5_join(kb.u[2 * c], kb.u[2 * c + 1]);
            sc[c] = k5_join(kb.scv[2 * c], kb.scv[2 * c + 1]);
        }
        for (int64_t t = 0; t < nt; t++) {
            const st_block_q8_k *xr = (const st_block_q8_k *)(xb + (size_t)t * x_stride) + b;
            __m512i a = _mm512_setzero_si512();
            for (int c = 0; c < K5_PAIRS; c++) {
                const __m512i y = _mm512_loadu_si512((const void *)(xr->qs + 64 * c));
                a = _mm512_add_epi32(a, _mm512_madd_epi16(_mm512_maddubs_epi16(u[c], y), sc[c]));
            }
            const __m256i a8 = _mm256_add_epi32(_mm512_castsi512_si256(a),
                                                _mm512_extracti64x4_epi64(a, 1));
            const __m256i bs = _mm256_loadu_si256((const __m256i *)xr->bsums);
            vi[t] = _mm256_sub_epi32(a8, _mm256_madd_epi16(bs, kb.scoff));
            vm[t] = kb.has_min ? _mm256_madd_epi16(bs, kb.m) : _mm256_setzero_si256();
            dx[t] = xr->d;
        }
        acc = ka_tile_step(acc, &kb, vi, vm, dx);
    }
    _mm256_storeu_ps(out, acc);
}

/* ---- prompt path: activation rows in lanes ---- */

#define KP_LANES 16              /* activation rows per tile (int32 lanes) */
#define KP_TILES 4               /* tiles per pass: 64 activation rows */
#define KP_SB 2                  /* super-blocks per k-panel */
#define KP_WR 128                /* weight rows per accumulator chunk */
#define KP_MIN_NX 16             /* activation rows from which the panel path runs */
#define KP_QCH (ST_QK_K / 4)     /* 4-quant chunks per super-block */
#define KP_GCH 4                 /* 4-quant chunks per 16-value group */
#define KP_PAIRS (KA_GROUPS / 2) /* int16 pairs of bsums per super-block */
#define KP_ALIGN 64              /* a cache line, the panel's alignment */
#define KP_PF_AHEAD 4            /* weight rows prefetched ahead */

/* kp_xpanel - KP_SB super-blocks of up to KP_TILES * 16 activation rows,
 * row j0 + 16 t + l in lane l of tile t (zero past the last row):
 * q[s][t][c]: quants 4c..4c+3; bs[s][t][p]: bsums 2p (low 16 bits) and
 * 2p + 1 (high); d[s][t]: the Q8_K scales. */
typedef struct kp_xpanel {
    _Alignas(KP_ALIGN) int32_t q[KP_SB][KP_TILES][KP_QCH][KP_LANES];
    _Alignas(KP_ALIGN) int32_t bs[KP_SB][KP_TILES][KP_PAIRS][KP_LANES];
    _Alignas(KP_ALIGN) float d[KP_SB][KP_TILES][KP_LANES];
} kp_xpanel;

/* kp_xbuild - fills P with super-blocks [b0, b0 + nsb) of activation rows
 * [j0, j0 + nr) (rows x_stride bytes apart from xb). */
static void kp_xbuild(kp_xpanel *P, const unsigned char *xb, size_t x_stride, int64_t j0,
                      int64_t nr, int64_t b0, int64_t nsb)
{
    memset(P, 0, sizeof *P);
    for (int64_t r = 0; r < nr; r++) {
        const int t = (int)(r / KP_LANES), l = (int)(r % KP_LANES);
        const st_block_q8_k *xr = (const st_block_q8_k *)(xb + (size_t)(j0 + r) * x_stride) + b0;
        for (int64_t sb = 0; sb < nsb; sb++) {
            for (int c = 0; c < KP_QCH; c++)
                memcpy(&P->q[sb][t][c][l], xr[sb].qs + 4 * c, sizeof(int32_t));
            for (int p = 0; p < KP_PAIRS; p++)
                memcpy(&P->bs[sb][t][p][l], xr[sb].bsums + 2 * p, sizeof(int32_t));
            P->d[sb][t][l] = xr[sb].d;
        }
    }
}

/* kp_bcast - dword k of v in every lane (from registers: the unpacked
 * block is never stored and reloaded in pieces, which would stall on
 * store forwarding). */
static inline __m512i kp_bcast(__m512i v, int k)
{
    return _mm512_permutexvar_epi32(_mm512_set1_epi32(k), v);
}

/* kp_block - one unpacked weight super-block against tiles [0, nt) of
 * super-block sb of P: acc[t] (16 rows' sums of this weight row) takes
 * st_kq_step lane by lane. */
static inline __attribute__((always_inline)) void
kp_block(int nt, const ka_block *kb, const kp_xpanel *P, int sb, __m512 acc[KP_TILES])
{
    const int per = KP_LANES;                             /* dwords per 512-bit register */
    const __m512i sc = _mm512_cvtepi16_epi32(kb->sc);     /* the 16 group scales as int32 */
    const __m512i so = _mm512_castsi256_si512(kb->scoff); /* dword p: pair (2p, 2p + 1) */
    const __m512i mn = _mm512_castsi256_si512(kb->m);
    __m512i si[KP_TILES], sm[KP_TILES], neg[KP_TILES];
    for (int t = 0; t < nt; t++)
        si[t] = sm[t] = neg[t] = _mm512_setzero_si512();
    for (int h = 0; h < K5_PAIRS; h++) {
        const __m512i uu = k5_join(kb->u[2 * h], kb->u[2 * h + 1]); /* chunks 16h .. 16h+15 */
        for (int gg = 0; gg < per / KP_GCH; gg++) {
            const int g = (per / KP_GCH) * h + gg;
            __m512i p[KP_TILES];
            for (int t = 0; t < nt; t++)
                p[t] = _mm512_setzero_si512();
            for (int k = KP_GCH * gg; k < KP_GCH * (gg + 1); k++) {
                const __m512i w = kp_bcast(uu, k);
                for (int t = 0; t < nt; t++)
                    p[t] = _mm512_dpbusd_epi32(p[t], w,
                                               _mm512_load_si512(P->q[sb][t][per * h + k]));
            }
            const __m512i s = kp_bcast(sc, g);
            for (int t = 0; t < nt; t++)
                si[t] = _mm512_add_epi32(si[t], _mm512_mullo_epi32(p[t], s));
        }
    }
    for (int p = 0; p < KP_PAIRS; p++) {
        const __m512i o = kp_bcast(so, p), m = kp_bcast(mn, p);
        for (int t = 0; t < nt; t++) {
            const __m512i b = _mm512_load_si512(P->bs[sb][t][p]);
            neg[t] = _mm512_dpwssd_epi32(neg[t], o, b);
            sm[t] = _mm512_dpwssd_epi32(sm[t], m, b);
        }
    }
    const __m512 d = _mm512_set1_ps(kb->d), dmin = _mm512_set1_ps(kb->dmin);
    for (int t = 0; t < nt; t++) {
        const __m512 dx = _mm512_load_ps(P->d[sb][t]);
        const __m512 fi = _mm512_cvtepi32_ps(_mm512_sub_epi32(si[t], neg[t]));
        const __m512 fm = kb->has_min ? _mm512_cvtepi32_ps(sm[t]) : _mm512_setzero_ps();
        const __m512 term = _mm512_sub_ps(_mm512_mul_ps(_mm512_mul_ps(dx, d), fi),
                                          _mm512_mul_ps(_mm512_mul_ps(dx, dmin), fm));
        acc[t] = _mm512_add_ps(acc[t], term);
    }
}

/* kp_unpack_q4_k_r8 - ka_unpack_q4_k of super-block b of row i of a Q4_K
 * R8 matrix (w at row 0, plain rows of w_stride bytes): the row's 16
 * 8-byte quant pieces gathered from the group block's lines, its scale
 * bytes copied (the same values as the plain block's, so the same kb). */
static inline void kp_unpack_q4_k_r8(const unsigned char *w, size_t w_stride, int64_t i, int64_t b,
                                     ka_block *kb)
{
    const __m512i lines = _mm512_setr_epi64(0, 64, 128, 192, 256, 320, 384, 448);
    const int r = (int)(i % ST_R8_ROWS);
    const unsigned char *o = w + (size_t)(i / ST_R8_ROWS) * ST_R8_ROWS * w_stride +
                             (size_t)b * ST_R8_ROWS * sizeof(st_block_q4_k);
    const unsigned char *q = o + ST_R8_Q4K_QS + 8 * r;
    const __m512i q0 = _mm512_i64gather_epi64(lines, (const void *)q, 1);
    const __m512i q1 = _mm512_i64gather_epi64(lines, (const void *)(q + 8 * 64), 1);
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i qc[4] = {_mm512_castsi512_si256(q0), _mm512_extracti64x4_epi64(q0, 1),
                           _mm512_castsi512_si256(q1), _mm512_extracti64x4_epi64(q1, 1)};
    for (int c = 0; c < 4; c++) {
        kb->u[2 * c] = _mm256_and_si256(qc[c], m4);
        kb->u[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(qc[c], 4), m4);
    }
    uint8_t scales[ST_K_SCALE_BYTES];
    memcpy(scales, o + ST_R8_Q4K_SC8 + 8 * r, 8);
    memcpy(scales + 8, o + ST_R8_Q4K_SC4 + 4 * r, 4);
    __m256i sc, m;
    ka_scales_k4(scales, &sc, &m);
    ka_scales(kb, sc, 0);
    kb->m = m;
    kb->has_min = 1;
    uint16_t d, dmin;
    memcpy(&d, o + ST_R8_Q4K_D + 2 * r, sizeof d);
    memcpy(&dmin, o + ST_R8_Q4K_DMIN + 2 * r, sizeof dmin);
    kb->d = ka_h2f(d);
    kb->dmin = ka_h2f(dmin);
}

/* kp_unpack_q6_k_r8 - ka_unpack_q6_k of super-block b of row i of a Q6_K
 * R8 matrix: the plain block rebuilt from its 8-byte pieces (gathered from
 * the group block's lines), then unpacked as usual. */
static inline void kp_unpack_q6_k_r8(const unsigned char *w, size_t w_stride, int64_t i, int64_t b,
                                     ka_block *kb)
{
    /* the lines of ql pieces 0..7 and of qh pieces 0..7 (ql 8..15: +12 lines) */
    const __m512i ql_lines = _mm512_setr_epi64(ST_R8_Q6K_QL(0), ST_R8_Q6K_QL(1), ST_R8_Q6K_QL(2),
                                               ST_R8_Q6K_QL(3), ST_R8_Q6K_QL(4), ST_R8_Q6K_QL(5),
                                               ST_R8_Q6K_QL(6), ST_R8_Q6K_QL(7));
    const __m512i qh_lines = _mm512_setr_epi64(ST_R8_Q6K_QH(0), ST_R8_Q6K_QH(1), ST_R8_Q6K_QH(2),
                                               ST_R8_Q6K_QH(3), ST_R8_Q6K_QH(4), ST_R8_Q6K_QH(5),
                                               ST_R8_Q6K_QH(6), ST_R8_Q6K_QH(7));
    const int r = (int)(i % ST_R8_ROWS);
    const unsigned char *o = w + (size_t)(i / ST_R8_ROWS) * ST_R8_ROWS * w_stride +
                             (size_t)b * ST_R8_ROWS * sizeof(st_block_q6_k);
    const unsigned char *p = o + 8 * r;
    st_block_q6_k blk;
    _mm512_storeu_si512((void *)blk.ql, _mm512_i64gather_epi64(ql_lines, (const void *)p, 1));
    _mm512_storeu_si512((void *)(blk.ql + 64),
                        _mm512_i64gather_epi64(ql_lines,
                                               (const void *)(p + ST_R8_Q6K_QL(8) -
                                                              ST_R8_Q6K_QL(0)),
                                               1));
    _mm512_storeu_si512((void *)blk.qh, _mm512_i64gather_epi64(qh_lines, (const void *)p, 1));
    memcpy(blk.scales, o + ST_R8_Q6K_SC_LO + 8 * r, 8);
    memcpy(blk.scales + 8, o + ST_R8_Q6K_SC_HI + 8 * r, 8);
    memcpy(&blk.d, o + ST_R8_Q6K_D + 2 * r, sizeof blk.d);
    ka_unpack_q6_k(&blk, kb);
}

/* kp_rows - weight rows [i0, i0 + nw) (nw <= KP_WR) against activation
 * rows [j0, j0 + nr) (nr <= KP_TILES * 16), through the whole row; P and
 * acc are scratch. r8 (0: plain rows): wb is a matrix of dtype r8 (Q4_K or
 * Q6_K) in the R8 layout (unpack unused; i0 and nw multiples of 8). */
static inline __attribute__((always_inline)) void
kp_rows(int nt, int r8, ka_unpack_fn unpack, size_t bb, int64_t nb, const unsigned char *wb,
        size_t w_stride, int64_t i0, int64_t nw, const unsigned char *xb, size_t x_stride,
        int64_t j0, int64_t nr, float *y, int64_t y_stride, kp_xpanel *P,
        float acc[KP_WR][KP_TILES][KP_LANES])
{
    memset(acc, 0, sizeof(float) * KP_WR * KP_TILES * KP_LANES);
    for (int64_t b0 = 0; b0 < nb; b0 += KP_SB) {
        const int64_t nsb = nb - b0 < KP_SB ? nb - b0 : KP_SB;
        kp_xbuild(P, xb, x_stride, j0, nr, b0, nsb);
        for (int64_t r = 0; r < nw; r++) {
            const unsigned char *wr = wb + (size_t)(i0 + r) * w_stride;
            /* this k-panel's piece of a row KP_PF_AHEAD rows on: the rows are
             * read in pieces KP_SB super-blocks long, too short for the
             * hardware prefetchers */
            if (r8 && r % ST_R8_ROWS == 0 && r + ST_R8_ROWS < nw) {
                /* the next group's k-panel: its 8 rows' pieces side by side */
                const size_t gbb = ST_R8_ROWS * bb;
                const unsigned char *pf = wb + (size_t)(i0 + r + ST_R8_ROWS) * w_stride +
                                          (size_t)b0 * gbb;
                for (size_t o = 0; o < (size_t)nsb * gbb; o += KP_ALIGN)
                    _mm_prefetch((const char *)(pf + o), _MM_HINT_T0);
            } else if (!r8 && r + KP_PF_AHEAD < nw) {
                const unsigned char *pf = wr + (size_t)KP_PF_AHEAD * w_stride + (size_t)b0 * bb;
                for (size_t o = 0; o < (size_t)nsb * bb; o += KP_ALIGN)
                    _mm_prefetch((const char *)(pf + o), _MM_HINT_T0);
            }
            __m512 a[KP_TILES];
            for (int t = 0; t < nt; t++)
                a[t] = _mm512_load_ps(acc[r][t]);
            for (int64_t sb = 0; sb < nsb; sb++) {
                ka_block kb;
                if (r8 == ST_DT_Q4_K)
                    kp_unpack_q4_k_r8(wb, w_stride, i0 + r, b0 + sb, &kb);
                else if (r8 == ST_DT_Q6_K)
                    kp_unpack_q6_k_r8(wb, w_stride, i0 + r, b0 + sb, &kb);
                else
                    unpack(wr + (size_t)(b0 + sb) * bb, &kb);
                kp_block(nt, &kb, P, (int)sb, a);
            }
            for (int t = 0; t < nt; t++)
                _mm512_store_ps(acc[r][t], a[t]);
        }
    }
    for (int64_t j = 0; j < nr; j++)
        for (int64_t r = 0; r < nw; r++)
            y[(j0 + j) * y_stride + i0 + r] = acc[r][j / KP_LANES][j % KP_LANES];
}

/* kp_mul_mat - the mul_mat contract by the panel path (r8: see kp_rows). */
static void kp_mul_mat(int r8, ka_unpack_fn unpack, size_t bb, int64_t n, const void *w,
                       size_t w_stride, int64_t i0, int64_t i1, const void *x, size_t x_stride,
                       int64_t nx, float *y, int64_t y_stride)
{
    kp_xpanel P;
    _Alignas(KP_ALIGN) float acc[KP_WR][KP_TILES][KP_LANES]; /* kp_rows' sums */
    const int64_t nb = n / ST_QK_K;
    const int64_t per = KP_TILES * KP_LANES;
    for (int64_t j0 = 0; j0 < nx; j0 += per) {
        const int64_t nr = nx - j0 < per ? nx - j0 : per;
        const int nt = (int)((nr + KP_LANES - 1) / KP_LANES);
        for (int64_t i = i0; i < i1; i += KP_WR) {
            const int64_t nw = i1 - i < KP_WR ? i1 - i : KP_WR;
            switch (nt) {
            case 1:
                kp_rows(1, r8, unpack, bb, nb, w, w_stride, i, nw, x, x_stride, j0, nr, y, y_stride,
                        &P, acc);
                break;
            case 2:
                kp_rows(2, r8, unpack, bb, nb, w, w_stride, i, nw, x, x_stride, j0, nr, y, y_stride,
                        &P, acc);
                break;
            case 3:
                kp_rows(3, r8, unpack, bb, nb, w, w_stride, i, nw, x, x_stride, j0, nr, y, y_stride,
                        &P, acc);
                break;
            default:
                kp_rows(KP_TILES, r8, unpack, bb, nb, w, w_stride, i, nw, x, x_stride, j0, nr, y,
                        y_stride, &P, acc);
                break;
            }
        }
    }
}

/* ---- decode of Q4_K / Q5_K: one activation row ---- */

/* k5_row1_q45 - ka_row1 for Q4_K (qh_off 0) and Q5_K super-blocks of bb
 * bytes (d, dmin, scales at 0, 2, 4; qh at qh_off, qs at qs_off), with
 * VNNI: one scale per 32-value chunk, so vpdpbusd gives each chunk's
 * products in 8 lanes, ka_hsum8 the 8 chunk sums (<= 32 * 31 * 127) and
 * one vpmulld their scaled terms; the mins as in ka_block_vecs. The exact
 * sumi and summ of the reference, then its scalar step. */
static inline __attribute__((always_inline)) float k5_row1_q45(size_t bb, size_t qh_off,
                                                               size_t qs_off, int64_t nb,
                                                               const unsigned char *wr,
                                                               const st_block_q8_k *xr)
{
    const __m256i lo16 = _mm256_set1_epi32(0xffff);
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const unsigned char *blk = wr + (size_t)b * bb;
        uint16_t d, dmin;
        memcpy(&d, blk, sizeof d);
        memcpy(&dmin, blk + sizeof d, sizeof dmin);
        __m256i sc, m; /* int16 per 16-value group: each chunk's value twice */
        ka_scales_k4(blk + 2 * sizeof d, &sc, &m);
        __m256i u[KA_CHUNKS], p[KA_CHUNKS];
        ka_unpack_q45_u(blk + qs_off, qh_off ? blk + qh_off : NULL, u);
        for (int c = 0; c < KA_CHUNKS; c++)
            p[c] = _mm256_dpbusd_epi32(_mm256_setzero_si256(), u[c],
                                       _mm256_loadu_si256((const __m256i *)(xr[b].qs + 32 * c)));
        const __m256i terms = _mm256_mullo_epi32(ka_hsum8(p), _mm256_and_si256(sc, lo16));
        const __m256i bs = _mm256_loadu_si256((const __m256i *)xr[b].bsums);
        acc = st_kq_step(acc, xr[b].d, ka_h2f(d), ka_h2f(dmin), ka_hsum(terms),
                         ka_hsum(_mm256_madd_epi16(bs, m)));
    }
    return acc;
}

/* k5_q45_row1 - one activation row against rows [i0, i1) of a Q4_K
 * (q5 = 0) or Q5_K matrix by k5_row1_q45. */
static void k5_q45_row1(int q5, int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                        const void *x, float *y)
{
    const size_t bb = q5 ? sizeof(st_block_q5_k) : sizeof(st_block_q4_k);
    const size_t qh_off = q5 ? offsetof(st_block_q5_k, qh) : 0;
    const size_t qs_off = q5 ? offsetof(st_block_q5_k, qs) : offsetof(st_block_q4_k, qs);
    const unsigned char *wb = w;
    for (int64_t i = i0; i < i1; i++)
        y[i] = q5 ? k5_row1_q45(bb, qh_off, qs_off, n / ST_QK_K, wb + (size_t)i * w_stride, x)
                  : k5_row1_q45(bb, 0, qs_off, n / ST_QK_K, wb + (size_t)i * w_stride, x);
}

/* k5_mul_mat - the panel path from KP_MIN_NX activation rows, tiles below. */
static inline void k5_mul_mat(ka_unpack_fn unpack, size_t bb, int64_t n, const void *w,
                              size_t w_stride, int64_t i0, int64_t i1, const void *x,
                              size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    if (nx >= KP_MIN_NX)
        kp_mul_mat(0, unpack, bb, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
    else
        ka_mul_mat(k5_tile, unpack, bb, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}

void avx512_mul_mat_q2_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                         const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    k5_mul_mat(ka_unpack_q2_k, sizeof(st_block_q2_k), n, w, w_stride, i0, i1, x, x_stride, nx, y,
               y_stride);
}

void avx512_mul_mat_q3_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                         const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    k5_mul_mat(ka_unpack_q3_k, sizeof(st_block_q3_k), n, w, w_stride, i0, i1, x, x_stride, nx, y,
               y_stride);
}

void avx512_mul_mat_q4_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                         const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    if (nx == 1) {
        k5_q45_row1(0, n, w, w_stride, i0, i1, x, y);
        return;
    }
    k5_mul_mat(ka_unpack_q4_k, sizeof(st_block_q4_k), n, w, w_stride, i0, i1, x, x_stride, nx, y,
               y_stride);
}

void avx512_mul_mat_q5_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                         const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    if (nx == 1) {
        k5_q45_row1(1, n, w, w_stride, i0, i1, x, y);
        return;
    }
    k5_mul_mat(ka_unpack_q5_k, sizeof(st_block_q5_k), n, w, w_stride, i0, i1, x, x_stride, nx, y,
               y_stride);
}

void avx512_mul_mat_q6_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                         const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    k5_mul_mat(ka_unpack_q6_k, sizeof(st_block_q6_k), n, w, w_stride, i0, i1, x, x_stride, nx, y,
               y_stride);
}

/* k5_groups - st_r8_groups_fn of Q4_K and Q6_K: from KP_MIN_NX
 * activation rows the panel path, below kquant_avx512_r8.c's kernels. */
static void k5_groups(st_dtype t, int64_t n, const void *w, size_t w_stride, int64_t g0, int64_t g1,
                      const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    const int q4 = t == ST_DT_Q4_K;
    if (nx >= KP_MIN_NX)
        kp_mul_mat((int)t, NULL, q4 ? sizeof(st_block_q4_k) : sizeof(st_block_q6_k), n, w, w_stride,
                   ST_R8_ROWS * g0, ST_R8_ROWS * g1, x, x_stride, nx, y, y_stride);
    else if (q4)
        avx512_r8_q4_k_groups(n, w, w_stride, g0, g1, x, x_stride, nx, y, y_stride);
    else
        avx512_r8_q6_k_groups(n, w, w_stride, g0, g1, x, x_stride, nx, y, y_stride);
}

void avx512_mul_mat_r8_q4_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                            const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    st_r8_mul_mat_groups(ST_DT_Q4_K, k5_groups, n, w, w_stride, i0, i1, x, x_stride, nx, y,
                         y_stride);
}

void avx512_mul_mat_r8_q6_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                            const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    st_r8_mul_mat_groups(ST_DT_Q6_K, k5_groups, n, w, w_stride, i0, i1, x, x_stride, nx, y,
                         y_stride);
}
