/* kquant_avx2_r8.c - Q4_K and Q6_K products on R8 (row-interleaved)
 * weights for the AVX2 variant; compiled with -mavx2 -mfma -mf16c only
 * (no AVX-512, no VNNI, no AVX-VNNI).
 *
 * Contract: avx2_mul_mat_r8_q4_k / _q6_k are the mul_mat_r8 contract of
 * kernels.h (weights in the R8 layout of repack.h, any nx, any row range
 * [i0, i1)); every result is bit-identical to kquant_ref.c's product on
 * the plain matrix, for any batch and any split of the rows (INV-7).
 * Rows outside whole groups of 8 go to the reference's R8 product.
 *
 * Design: lanes are weight rows (kquant_avx512_r8.c's groups scheme in
 * 256 bits), for every number of activation rows. A 64-byte quant line of
 * a group block (8 bytes of each of the 8 rows) is two registers,
 * "halves": rows 0..3 and rows 4..7, row r in one 64-bit lane (two int32
 * lanes). The 8 activation bytes a line meets are broadcast to every
 * 64-bit lane (_mm256_set1_epi64x), and _mm256_maddubs_epi16 multiplies
 * the unsigned weight values with them, pair sums in int16: Q4_K
 * 2 * 15 * 128 = 3840, the 4 lines of a sub-block added in int16 <= 15360;
 * Q6_K 2 * 63 * 128 = 16128, the 2 lines of a 16-value group added
 * <= 32256 < 32767: no saturation, exact. _mm256_madd_epi16 with the
 * sub-block's (group's) scale spread as int16 over the row's 4 int16
 * lanes gives the scaled sums in int32 (exact: |.| < 2^29 over a
 * super-block, offsets included). Q4_K mins: madd_epi16 of (m_j, m_j) pairs with the Q8_K
 * bsums; Q6_K's q = u - 32: 32 * sum_g sc_g * bsums_g the same way, taken
 * off the scaled sums. A row's two lanes added are the reference's sumi
 * and summ exactly (integer sums, whatever the order), so each lane then
 * takes st_kq_step's float operations in its order with explicit
 * _mm_mul / _sub / _add (no FMA; the C11 build does not contract either),
 * 4 rows per half, super-block after super-block: bit-identical to the
 * reference on the plain matrix.
 *
 * Loops: group after group (8 * row_bytes contiguous bytes, streamed by
 * the hardware prefetcher); per group, activation rows in chunks of R2K_C,
 * each chunk going through the whole group (a TinyLlama group, 9 to 37
 * KiB, stays in L1/L2 between chunks); per super-block, half after half.
 *
 * No prompt path. The planned one (each row gathered back to its plain
 * bytes, then kquant_avx2.c's plain product: bit-identical by
 * construction) was built and measured against these kernels with
 * `strata bench kernels --kernels avx2` (AMD EPYC Zen 5 restricted to
 * AVX2, 2 threads, best of 5 alternated runs, GFLOP/s gathered rows /
 * groups): Q4_K nx=16 106 / 207, nx=32 111 / 213, nx=64 113 / 211,
 * prefill 5632 x 2048 x 64 113 / 212, nx=256 66 / 194; Q6_K 102 / 186,
 * 111 / 122, 114 / 221, 111 / 215, 67 / 88. The groups kernels won at
 * every width (they read each activation byte once per 8 weight rows and
 * unpack each weight line once per R2K_C activation rows, where the plain
 * tile unpacks every super-block per weight row and tile of 8), so they
 * serve every nx and there is no switch point. */
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "kernels/kernels_avx2_int.h"
#include "kernels/kquant.h"
#include "kernels/repack.h"

/* R2K_C - activation rows per pass over a group: 8 (every decode batch
 * in one pass). Best of 6 alternated runs, GFLOP/s for C = 4 / 6 / 8,
 * same bench: Q4_K nx=8 228 / 239 / 302, prefill 289 / 293 / 328; Q6_K
 * nx=8 153 / 183 / 200, prefill 171 / 208 / 227. */
#define R2K_C 8
#define R2K_HALVES 2    /* registers per quant line: rows 0..3, rows 4..7 */
#define R2K_HALF 32     /* bytes of a half line: 8 bytes of each of 4 rows */
#define R2K_HALF_ROWS 4 /* rows per half */
#define R2K_LINE 64     /* bytes of a quant line */
#define R2K_Z 0x80      /* vpshufb: a zero byte (0x80 + j still is one) */

/* ---- Q4_K ---- */

#define R2K_Q4_GBB (ST_R8_ROWS * sizeof(st_block_q4_k)) /* bytes of a group block */
#define R2K_Q4_LINES_PER_SUB 4                          /* quant lines per sub-block pair */
#define R2K_Q4_PAIRS 4                                  /* sub-block pairs per super-block */

/* r2k_q4_scales - the 6-bit scales (*sc) and mins (*mn) of the 4 rows of
 * half h of a group block: 64-bit lane r holds row 4h + r's 8 values as
 * bytes (st_kq_scale_min_k4's unpacking, 4 rows at once). a: lane r =
 * packed bytes 0..7 (words w0, w1); w2: lane r = packed bytes 8..11. */
static inline void r2k_q4_scales(const uint8_t *gb, int h, __m256i *sc, __m256i *mn)
{
    const __m256i a = _mm256_loadu_si256((const __m256i *)(gb + ST_R8_Q4K_SC8 + R2K_HALF * h));
    const __m256i w2 = _mm256_cvtepu32_epi64(
        _mm_loadu_si128((const __m128i *)(gb + ST_R8_Q4K_SC4 + 16 * h)));
    const __m256i lo6 = _mm256_set1_epi64x(0x000000003f3f3f3fll); /* low dword, 6 bits a byte */
    const __m256i hi4 = _mm256_set1_epi64x(0x0f0f0f0f00000000ll); /* high dword, 4 bits */
    const __m256i hi2 = _mm256_set1_epi64x(0x3030303000000000ll); /* high dword, bits 4..5 */
    /* scales 0..3 = w0 & 63; scales 4..7 = (w2 & 15) | ((w0 >> 6) << 4) */
    *sc = _mm256_or_si256(_mm256_or_si256(_mm256_and_si256(a, lo6),
                                          _mm256_and_si256(_mm256_slli_epi64(w2, 32), hi4)),
                          _mm256_and_si256(_mm256_slli_epi64(a, 30), hi2));
    /* mins 0..3 = w1 & 63; mins 4..7 = (w2 >> 4) | ((w1 >> 6) << 4) */
    *mn = _mm256_or_si256(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi64(a, 32), lo6),
                                          _mm256_and_si256(_mm256_slli_epi64(w2, 28), hi4)),
                          _mm256_and_si256(_mm256_srli_epi64(a, 2), hi2));
}

/* r2k_pick - v's bytes chosen by the vpshufb control base + k (bytes of
 * base that are R2K_Z stay zero bytes). */
static inline __m256i r2k_pick(__m256i v, __m256i base, int k)
{
    return _mm256_shuffle_epi8(v, _mm256_add_epi8(base, _mm256_set1_epi8((char)k)));
}

/* r2k_bq - the 8 bytes at p in every 64-bit lane. */
static inline __m256i r2k_bq(const void *p)
{
    int64_t v;
    memcpy(&v, p, sizeof v);
    return _mm256_set1_epi64x(v);
}

/* r2k_df - the 4 f16 at p as f32. */
static inline __m128 r2k_df(const uint8_t *p)
{
    return _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)p));
}

/* r2k_q4_group - C activation rows (xr[t]: row t's Q8_K blocks) against
 * the whole group at gb (nb group blocks): yr[t][0..8) = the 8 rows'
 * results. */
static inline __attribute__((always_inline)) void
r2k_q4_group(int C, const uint8_t *gb, int64_t nb, const st_block_q8_k *const *xr, float *const *yr)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const char z = (char)R2K_Z;
    /* scale j of each row as int16 over its 4 int16 lanes: base + j */
    const __m256i pick_sc = _mm256_setr_epi8(0, z, 0, z, 0, z, 0, z, 8, z, 8, z, 8, z, 8, z, 0, z,
                                             0, z, 0, z, 0, z, 8, z, 8, z, 8, z, 8, z);
    /* int16 pairs (m_2q, m_2q), (m_2q+1, m_2q+1) of each row: base + 2q */
    const __m256i pick_mn = _mm256_setr_epi8(0, z, 0, z, 1, z, 1, z, 8, z, 8, z, 9, z, 9, z, 0, z,
                                             0, z, 1, z, 1, z, 8, z, 8, z, 9, z, 9, z);
    __m128 acc[R2K_C][R2K_HALVES];
    for (int t = 0; t < C; t++)
        acc[t][0] = acc[t][1] = _mm_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *o = gb + (size_t)b * R2K_Q4_GBB;
        for (int h = 0; h < R2K_HALVES; h++) {
            __m256i sc, mn;
            r2k_q4_scales(o, h, &sc, &mn);
            __m256i s[R2K_C];
            for (int t = 0; t < C; t++)
                s[t] = _mm256_setzero_si256();
            for (int c = 0; c < R2K_Q4_PAIRS; c++) {
                __m256i lo[R2K_Q4_LINES_PER_SUB], hi[R2K_Q4_LINES_PER_SUB];
                for (int k = 0; k < R2K_Q4_LINES_PER_SUB; k++) {
                    const __m256i raw = _mm256_loadu_si256((
                        const __m256i *)(o + ST_R8_Q4K_QS +
                                         R2K_LINE * (R2K_Q4_LINES_PER_SUB * c + k) + R2K_HALF * h));
                    lo[k] = _mm256_and_si256(raw, m4);
                    hi[k] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
                }
                const __m256i sl = r2k_pick(sc, pick_sc, 2 * c);
                const __m256i sh = r2k_pick(sc, pick_sc, 2 * c + 1);
                for (int t = 0; t < C; t++) {
                    const int8_t *q = xr[t][b].qs + 64 * c;
                    __m256i pl = _mm256_maddubs_epi16(lo[0], r2k_bq(q));
                    __m256i ph = _mm256_maddubs_epi16(hi[0], r2k_bq(q + 32));
                    for (int k = 1; k < R2K_Q4_LINES_PER_SUB; k++) {
                        pl = _mm256_add_epi16(pl, _mm256_maddubs_epi16(lo[k], r2k_bq(q + 8 * k)));
                        ph = _mm256_add_epi16(ph,
                                              _mm256_maddubs_epi16(hi[k], r2k_bq(q + 32 + 8 * k)));
                    }
                    s[t] = _mm256_add_epi32(s[t], _mm256_add_epi32(_mm256_madd_epi16(pl, sl),
                                                                   _mm256_madd_epi16(ph, sh)));
                }
            }
            __m256i mq[R2K_Q4_PAIRS];
            for (int q = 0; q < R2K_Q4_PAIRS; q++)
                mq[q] = r2k_pick(mn, pick_mn, 2 * q);
            /* [d of rows 4h.. 4h+3 | dmin of the same rows] */
            const __m256 dd = _mm256_set_m128(r2k_df(o + ST_R8_Q4K_DMIN + 8 * h),
                                              r2k_df(o + ST_R8_Q4K_D + 8 * h));
            for (int t = 0; t < C; t++) {
                __m256i m = _mm256_madd_epi16(mq[0], r2k_bq(xr[t][b].bsums));
                for (int q = 1; q < R2K_Q4_PAIRS; q++)
                    m = _mm256_add_epi32(m,
                                         _mm256_madd_epi16(mq[q], r2k_bq(xr[t][b].bsums + 4 * q)));
                /* [sumi of the 4 rows | summ of the 4 rows] */
                const __m256i im = _mm256_permute4x64_epi64(_mm256_hadd_epi32(s[t], m), 0xd8);
                /* (dx * d) * sumi and (dx * dmin) * summ, then their difference */
                const __m256 p = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(xr[t][b].d), dd),
                                               _mm256_cvtepi32_ps(im));
                const __m128 term = _mm_sub_ps(_mm256_castps256_ps128(p),
                                               _mm256_extractf128_ps(p, 1));
                acc[t][h] = _mm_add_ps(acc[t][h], term);
            }
        }
    }
    for (int t = 0; t < C; t++) {
        _mm_storeu_ps(yr[t], acc[t][0]);
        _mm_storeu_ps(yr[t] + R2K_HALF_ROWS, acc[t][1]);
    }
}

/* r2k_q4_group_x - r2k_q4_group with C (1..R2K_C) a compile-time constant. */
static void r2k_q4_group_x(int C, const uint8_t *gb, int64_t nb, const st_block_q8_k *const *xr,
                           float *const *yr)
{
    switch (C) {
    case 8:
        r2k_q4_group(8, gb, nb, xr, yr);
        break;
    case 7:
        r2k_q4_group(7, gb, nb, xr, yr);
        break;
    case 6:
        r2k_q4_group(6, gb, nb, xr, yr);
        break;
    case 5:
        r2k_q4_group(5, gb, nb, xr, yr);
        break;
    case 4:
        r2k_q4_group(4, gb, nb, xr, yr);
        break;
    case 3:
        r2k_q4_group(3, gb, nb, xr, yr);
        break;
    case 2:
        r2k_q4_group(2, gb, nb, xr, yr);
        break;
    default:
        r2k_q4_group(1, gb, nb, xr, yr);
        break;
    }
}

/* ---- Q6_K ---- */

#define R2K_Q6_GBB (ST_R8_ROWS * sizeof(st_block_q6_k)) /* bytes of a group block */
#define R2K_Q6_OFF_SHIFT 5                              /* q = u - 32: 32 = 1 << 5 */

/* r2k_q6_u - the 32 unsigned 6-bit values (4 rows x 8) that half hh of
 * the line pair (qh piece jh, ql piece jl) holds at offset index f (0: low
 * nibbles with qh bits 0..1; 1: high nibbles, bits 4..5; 2: low nibbles,
 * bits 2..3; 3: high nibbles, bits 6..7; f = 0, 1 take the first ql
 * piece of the pair, 2, 3 the second: see r2k_q6_group). */
static inline __m256i r2k_q6_u(const uint8_t *o, int hh, int jh, int jl, int f)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    const __m256i qh = _mm256_loadu_si256((const __m256i *)(o + ST_R8_Q6K_QH(jh) + R2K_HALF * hh));
    const __m256i ql = _mm256_loadu_si256((const __m256i *)(o + ST_R8_Q6K_QL(jl) + R2K_HALF * hh));
    /* bits 2k..2k+1 of qh to bits 4..5, k = 0, 2, 1, 3 for f = 0..3 */
    __m256i top;
    switch (f) {
    case 0:
        top = _mm256_slli_epi16(qh, 4);
        break;
    case 1:
        top = qh;
        break;
    case 2:
        top = _mm256_slli_epi16(qh, 2);
        break;
    default:
        top = _mm256_srli_epi16(qh, 2);
        break;
    }
    const __m256i nib = (f % 2) ? _mm256_srli_epi16(ql, 4) : ql;
    return _mm256_or_si256(_mm256_and_si256(nib, m4), _mm256_and_si256(top, m30));
}

/* r2k_q6_group - r2k_q4_group for Q6_K (no mins; 16 groups of 16 values).
 * Line pair (h, lq): qh piece 4h + lq and ql pieces 8h + lq, 8h + 4 + lq
 * hold the values 128h + off + 8lq + k, off = 0, 64 (first ql piece's low,
 * high nibbles), 32, 96 (second's): f = 0..3 above. Group 8h + off / 16 +
 * pq is lines lq = 2pq and 2pq + 1. The -32 offsets: sum_g sc_g * bsums_g
 * by madd_epi16 of int16 scale pairs (4 groups per 64-bit lane) with the
 * bsums, times 32, taken from the scaled sums. */
static inline __attribute__((always_inline)) void
r2k_q6_group(int C, const uint8_t *gb, int64_t nb, const st_block_q8_k *const *xr, float *const *yr)
{
    static const int offs[4] = {0, 64, 32, 96};
    const char z = (char)R2K_Z;
    /* scale g of each row into the high byte of its 4 int16 lanes: base + g */
    const __m256i pick_sc = _mm256_setr_epi8(z, 0, z, 0, z, 0, z, 0, z, 8, z, 8, z, 8, z, 8, z, 0,
                                             z, 0, z, 0, z, 0, z, 8, z, 8, z, 8, z, 8);
    /* scales 4q' .. 4q' + 3 of each row into the high bytes of its int16 lanes: base + 4q' */
    const __m256i pick_pr = _mm256_setr_epi8(z, 0, z, 1, z, 2, z, 3, z, 8, z, 9, z, 10, z, 11, z, 0,
                                             z, 1, z, 2, z, 3, z, 8, z, 9, z, 10, z, 11);
    __m128 acc[R2K_C][R2K_HALVES];
    for (int t = 0; t < C; t++)
        acc[t][0] = acc[t][1] = _mm_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *o = gb + (size_t)b * R2K_Q6_GBB;
        for (int hh = 0; hh < R2K_HALVES; hh++) {
            const __m256i sclo = _mm256_loadu_si256(
                (const __m256i *)(o + ST_R8_Q6K_SC_LO + R2K_HALF * hh));
            const __m256i schi = _mm256_loadu_si256(
                (const __m256i *)(o + ST_R8_Q6K_SC_HI + R2K_HALF * hh));
            __m256i s[R2K_C];
            for (int t = 0; t < C; t++)
                s[t] = _mm256_setzero_si256();
            for (int h = 0; h < 2; h++) {
                const __m256i sch = h ? schi : sclo;
                for (int pq = 0; pq < 2; pq++) {
                    for (int f = 0; f < 4; f++) {
                        const int l0 = 2 * pq, l1 = 2 * pq + 1, second = f / 2;
                        const __m256i u0 = r2k_q6_u(o, hh, 4 * h + l0, 8 * h + 4 * second + l0, f);
                        const __m256i u1 = r2k_q6_u(o, hh, 4 * h + l1, 8 * h + 4 * second + l1, f);
                        const __m256i sc = _mm256_srai_epi16(r2k_pick(sch, pick_sc,
                                                                      offs[f] / 16 + pq),
                                                             8);
                        for (int t = 0; t < C; t++) {
                            const int8_t *q = xr[t][b].qs + 128 * h + offs[f] + 16 * pq;
                            const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(u0, r2k_bq(q)),
                                                               _mm256_maddubs_epi16(u1,
                                                                                    r2k_bq(q + 8)));
                            s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(p, sc));
                        }
                    }
                }
            }
            __m256i sp[4]; /* int16 scales of groups 4q .. 4q + 3 of each row */
            for (int q = 0; q < 4; q++)
                sp[q] = _mm256_srai_epi16(r2k_pick(q < 2 ? sclo : schi, pick_pr, 4 * (q % 2)), 8);
            const __m128 d = r2k_df(o + ST_R8_Q6K_D + 8 * hh);
            const __m128 zero = _mm_setzero_ps();
            for (int t = 0; t < C; t++) {
                __m256i off = _mm256_madd_epi16(sp[0], r2k_bq(xr[t][b].bsums));
                for (int q = 1; q < 4; q++)
                    off = _mm256_add_epi32(off, _mm256_madd_epi16(sp[q],
                                                                  r2k_bq(xr[t][b].bsums + 4 * q)));
                const __m256i si = _mm256_sub_epi32(s[t], _mm256_slli_epi32(off, R2K_Q6_OFF_SHIFT));
                /* the 4 rows' sumi in the low 128 bits */
                const __m256i r = _mm256_permute4x64_epi64(_mm256_hadd_epi32(si, si), 0xd8);
                const __m128 fi = _mm_cvtepi32_ps(_mm256_castsi256_si128(r));
                const __m128 dx = _mm_set1_ps(xr[t][b].d);
                /* st_kq_step with dmin = 0 and summ = 0, operation for operation */
                const __m128 term = _mm_sub_ps(_mm_mul_ps(_mm_mul_ps(dx, d), fi),
                                               _mm_mul_ps(_mm_mul_ps(dx, zero), zero));
                acc[t][hh] = _mm_add_ps(acc[t][hh], term);
            }
        }
    }
    for (int t = 0; t < C; t++) {
        _mm_storeu_ps(yr[t], acc[t][0]);
        _mm_storeu_ps(yr[t] + R2K_HALF_ROWS, acc[t][1]);
    }
}

/* r2k_q6_group_x - r2k_q6_group with C (1..R2K_C) a compile-time constant. */
static void r2k_q6_group_x(int C, const uint8_t *gb, int64_t nb, const st_block_q8_k *const *xr,
                           float *const *yr)
{
    switch (C) {
    case 8:
        r2k_q6_group(8, gb, nb, xr, yr);
        break;
    case 7:
        r2k_q6_group(7, gb, nb, xr, yr);
        break;
    case 6:
        r2k_q6_group(6, gb, nb, xr, yr);
        break;
    case 5:
        r2k_q6_group(5, gb, nb, xr, yr);
        break;
    case 4:
        r2k_q6_group(4, gb, nb, xr, yr);
        break;
    case 3:
        r2k_q6_group(3, gb, nb, xr, yr);
        break;
    case 2:
        r2k_q6_group(2, gb, nb, xr, yr);
        break;
    default:
        r2k_q6_group(1, gb, nb, xr, yr);
        break;
    }
}

/* r2k_groups - st_r8_groups_fn of Q4_K and Q6_K: whole groups [g0, g1) by
 * r2k_q4_group_x or r2k_q6_group_x. */
static void r2k_groups(st_dtype t, int64_t n, const void *wv, size_t w_stride, int64_t g0,
                       int64_t g1, const void *xv, size_t x_stride, int64_t nx, float *y,
                       int64_t y_stride)
{
    const uint8_t *w = wv, *x = xv;
    const int64_t nb = n / ST_QK_K;
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *gb = w + (size_t)g * ST_R8_ROWS * w_stride;
        for (int64_t j = 0; j < nx; j += R2K_C) {
            const int C = nx - j < R2K_C ? (int)(nx - j) : R2K_C;
            const st_block_q8_k *xr[R2K_C];
            float *yr[R2K_C];
            for (int k = 0; k < C; k++) {
                xr[k] = (const st_block_q8_k *)(const void *)(x + (size_t)(j + k) * x_stride);
                yr[k] = y + (j + k) * y_stride + ST_R8_ROWS * g;
            }
            if (t == ST_DT_Q6_K)
                r2k_q6_group_x(C, gb, nb, xr, yr);
            else
                r2k_q4_group_x(C, gb, nb, xr, yr);
        }
    }
}

void avx2_mul_mat_r8_q4_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                          const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    st_r8_mul_mat_groups(ST_DT_Q4_K, r2k_groups, n, w, w_stride, i0, i1, x, x_stride, nx, y,
                         y_stride);
}

void avx2_mul_mat_r8_q6_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                          const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    st_r8_mul_mat_groups(ST_DT_Q6_K, r2k_groups, n, w, w_stride, i0, i1, x, x_stride, nx, y,
                         y_stride);
}
