/* kquant_avx512_r8.c - Q4_K and Q6_K products on R8 (row-interleaved) weights for
 * few activation rows (decode, batched decode), AVX-512 with VNNI;
 * compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni (and AVX2,
 * FMA, F16C).
 *
 * Design. One 512-bit register holds a quant line of an R8 group block
 * (repack.h): 8 bytes of each of the group's 8 rows, row r in int32 lanes
 * 2r and 2r + 1. The 8 activation bytes that line's low (resp. high)
 * nibbles meet are broadcast to every 64-bit lane, so vpdpbusd (unsigned
 * nibbles times signed Q8_K quants, 4 products per lane, no saturation)
 * adds the products of all 8 rows at once; 4 lines make a 32-value
 * sub-block, whose lane sums (|.| <= 16 * 15 * 127) are multiplied by the
 * row's 6-bit sub-block scale (vpshufb spreads scale j of row r over both
 * of its lanes; vpmulld). The mins: vpdpwssd of (m_j, m_j) int16 pairs
 * with the Q8_K bsums pairs (2j, 2j + 1), two sub-blocks per 64-bit lane.
 * The 6-bit scales and mins of the 8 rows are unpacked together from
 * their packed bytes (8 of them per row in one 64-bit lane, the other 4
 * per row zero-extended beside them). Each row's two lanes are added
 * (exact: the integers are sumi and summ of the reference, whatever the
 * order), then the 8 rows take st_kq_step's float operations lane by lane
 * (mul, mul, sub, add: no FMA contraction in this C11 build), super-block
 * after super-block: bit-identical to kquant_ref.c on the plain matrix,
 * for any batch and any split of the rows (INV-7).
 *
 * Q6_K the same way: a qh line and the two ql lines it completes give 4
 * vectors of unsigned 6-bit quants u (q = u - 32); a 16-value group is
 * two lines, its lane sums P minus 32 * bsums (from one lane of each row)
 * are sum((u - 32) * q8) exactly, and are multiplied by the group's
 * signed scale (vpshufb to the top byte of each lane, then an arithmetic
 * shift). No mins: the float step's dmin and summ are 0, as in the
 * reference.
 *
 * Loops: group after group (8 rows, 8 * row_bytes contiguous bytes, which
 * the hardware prefetcher streams); per group, activation rows in chunks
 * of R4_C, each chunk going through the whole group row (a group of a
 * TinyLlama matrix, 9 to 25 KiB, stays in L1/L2 between chunks). */
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#include "kernels/kernels_avx2_int.h"
#include "kernels/kquant.h"
#include "kernels/repack.h"

#define R4_C 4                                      /* activation rows per pass over a group */
#define R4_GBB (ST_R8_ROWS * sizeof(st_block_q4_k)) /* bytes of a group block */
#define R4_LINE 64                                  /* bytes of a quant line */
#define R4_LINES_PER_SUB 4                          /* quant lines per sub-block pair */
#define R4_SUBS 8                                   /* 32-value sub-blocks per super-block */
#define R4_Z 0x80                                   /* vpshufb: a zero byte */

/* r4_scales - the 6-bit scales (*sc) and mins (*mn) of the 8 rows of a
 * group block: 64-bit lane r holds row r's 8 values as bytes (the
 * unpacking of st_kq_scale_min_k4, 8 rows at once). a: lane r = packed
 * bytes 0..7 (words w0, w1) of row r; w2: lane r = packed bytes 8..11. */
static inline void r4_scales(const uint8_t *gb, __m512i *sc, __m512i *mn)
{
    const __m512i a = _mm512_loadu_si512((const void *)(gb + ST_R8_Q4K_SC8));
    const __m512i w2 = _mm512_cvtepu32_epi64(
        _mm256_loadu_si256((const __m256i *)(gb + ST_R8_Q4K_SC4)));
    const __m512i lo6 = _mm512_set1_epi64(0x000000003f3f3f3fll); /* low dword, 6 bits a byte */
    const __m512i hi4 = _mm512_set1_epi64(0x0f0f0f0f00000000ll); /* high dword, 4 bits */
    const __m512i hi2 = _mm512_set1_epi64(0x3030303000000000ll); /* high dword, bits 4..5 */
    /* scales 0..3 = w0 & 63; scales 4..7 = (w2 & 15) | ((w0 >> 6) << 4) */
    *sc = _mm512_or_si512(_mm512_or_si512(_mm512_and_si512(a, lo6),
                                          _mm512_and_si512(_mm512_slli_epi64(w2, 32), hi4)),
                          _mm512_and_si512(_mm512_slli_epi64(a, 30), hi2));
    /* mins 0..3 = w1 & 63; mins 4..7 = (w2 >> 4) | ((w1 >> 6) << 4) */
    *mn = _mm512_or_si512(_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi64(a, 32), lo6),
                                          _mm512_and_si512(_mm512_slli_epi64(w2, 28), hi4)),
                          _mm512_and_si512(_mm512_srli_epi64(a, 2), hi2));
}

/* r4_pick_sc - vpshufb control: byte j of each 64-bit lane zero-extended
 * into both of its 32-bit lanes. */
static inline __m512i r4_pick_sc(int j)
{
    const char z = (char)R4_Z, a = (char)j, b = (char)(8 + j);
    return _mm512_broadcast_i32x4(_mm_setr_epi8(a, z, z, z, a, z, z, z, b, z, z, z, b, z, z, z));
}

/* r4_pick_mn - vpshufb control: bytes 2q and 2q + 1 of each 64-bit lane
 * as the int16 pairs (m_2q, m_2q) and (m_2q+1, m_2q+1) of its two 32-bit
 * lanes. */
static inline __m512i r4_pick_mn(int q)
{
    const char z = (char)R4_Z, a = (char)(2 * q), b = (char)(2 * q + 1);
    const char c = (char)(8 + 2 * q), d = (char)(8 + 2 * q + 1);
    return _mm512_broadcast_i32x4(_mm_setr_epi8(a, z, a, z, b, z, b, z, c, z, c, z, d, z, d, z));
}

/* r4_bq - the 8 bytes at p in every 64-bit lane. */
static inline __m512i r4_bq(const void *p)
{
    int64_t v;
    memcpy(&v, p, sizeof v);
    return _mm512_set1_epi64(v);
}

/* r4_rows_sum - each row's two lanes added, as 8 int32 (row order). */
static inline __m256i r4_rows_sum(__m512i v)
{
    return _mm512_cvtepi64_epi32(_mm512_add_epi64(v, _mm512_srli_epi64(v, 32)));
}

/* r4_group - C activation rows (xr[t]: row t's Q8_K blocks) against the
 * whole group at gb (nb group blocks): yr[t][0..8) = the 8 rows' results. */
static inline __attribute__((always_inline)) void
r4_group(int C, const uint8_t *gb, int64_t nb, const st_block_q8_k *const *xr, float *const *yr)
{
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m256 acc[R4_C];
    for (int t = 0; t < C; t++)
        acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *o = gb + (size_t)b * R4_GBB;
        __m512i sc, mn;
        r4_scales(o, &sc, &mn);
        __m512i s[R4_C];
        for (int t = 0; t < C; t++)
            s[t] = _mm512_setzero_si512();
        for (int c = 0; c < R4_SUBS / 2; c++) {
            __m512i lo[R4_LINES_PER_SUB], hi[R4_LINES_PER_SUB];
            for (int k = 0; k < R4_LINES_PER_SUB; k++) {
                const __m512i raw = _mm512_loadu_si512(
                    (const void *)(o + ST_R8_Q4K_QS + R4_LINE * (R4_LINES_PER_SUB * c + k)));
                lo[k] = _mm512_and_si512(raw, m4);
                hi[k] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
            }
            const __m512i sl = _mm512_shuffle_epi8(sc, r4_pick_sc(2 * c));
            const __m512i sh = _mm512_shuffle_epi8(sc, r4_pick_sc(2 * c + 1));
            for (int t = 0; t < C; t++) {
                const int8_t *q = xr[t][b].qs + 64 * c;
                __m512i pl = _mm512_setzero_si512(), ph = _mm512_setzero_si512();
                for (int k = 0; k < R4_LINES_PER_SUB; k++) {
                    pl = _mm512_dpbusd_epi32(pl, lo[k], r4_bq(q + 8 * k));
                    ph = _mm512_dpbusd_epi32(ph, hi[k], r4_bq(q + 32 + 8 * k));
                }
                s[t] = _mm512_add_epi32(s[t], _mm512_add_epi32(_mm512_mullo_epi32(pl, sl),
                                                               _mm512_mullo_epi32(ph, sh)));
            }
        }
        __m512i mq[R4_SUBS / 2];
        for (int q = 0; q < R4_SUBS / 2; q++)
            mq[q] = _mm512_shuffle_epi8(mn, r4_pick_mn(q));
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(o + ST_R8_Q4K_D)));
        const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(o + ST_R8_Q4K_DMIN)));
        for (int t = 0; t < C; t++) {
            __m512i m = _mm512_setzero_si512();
            for (int q = 0; q < R4_SUBS / 2; q++)
                m = _mm512_dpwssd_epi32(m, mq[q], r4_bq(xr[t][b].bsums + 4 * q));
            const __m256 fi = _mm256_cvtepi32_ps(r4_rows_sum(s[t]));
            const __m256 fm = _mm256_cvtepi32_ps(r4_rows_sum(m));
            const __m256 dx = _mm256_set1_ps(xr[t][b].d);
            const __m256 term = _mm256_sub_ps(_mm256_mul_ps(_mm256_mul_ps(dx, d), fi),
                                              _mm256_mul_ps(_mm256_mul_ps(dx, dmin), fm));
            acc[t] = _mm256_add_ps(acc[t], term);
        }
    }
    for (int t = 0; t < C; t++)
        _mm256_storeu_ps(yr[t], acc[t]);
}

/* r4_group_x - r4_group with C a compile-time constant. */
static void r4_group_x(int C, const uint8_t *gb, int64_t nb, const st_block_q8_k *const *xr,
                       float *const *yr)
{
    switch (C) {
    case 4:
        r4_group(4, gb, nb, xr, yr);
        break;
    case 3:
        r4_group(3, gb, nb, xr, yr);
        break;
    case 2:
        r4_group(2, gb, nb, xr, yr);
        break;
    default:
        r4_group(1, gb, nb, xr, yr);
        break;
    }
}

/* ---- Q6_K ---- */

#define R6_GBB (ST_R8_ROWS * sizeof(st_block_q6_k)) /* bytes of a group block */
#define R6_OFF_SHIFT 5                              /* q = u - 32: 32 = 1 << 5 */
#define R6_Z R4_Z

/* r6_ctrl_sc[j] - vpshufb control: byte j of each 64-bit lane into the top
 * byte of both of its 32-bit lanes (then >> 24, arithmetic: the int8). */
#define R6_SC(j)                                                                                   \
    {                                                                                              \
        R6_Z, R6_Z, R6_Z, j, R6_Z, R6_Z, R6_Z, j, R6_Z, R6_Z, R6_Z, 8 + j, R6_Z, R6_Z, R6_Z, 8 + j \
    }
static const uint8_t r6_ctrl_sc[8][16] = {R6_SC(0), R6_SC(1), R6_SC(2), R6_SC(3),
                                          R6_SC(4), R6_SC(5), R6_SC(6), R6_SC(7)};
/* r6_ctrl_pair[q] - vpshufb control: bytes 4q..4q+3 of each 64-bit lane
 * into the high bytes of its 4 int16 lanes (then >> 8, arithmetic) */
#define R6_PR(q)                                                                                   \
    {                                                                                              \
        R6_Z, 4 * (q), R6_Z, 4 * (q) + 1, R6_Z, 4 * (q) + 2, R6_Z, 4 * (q) + 3, R6_Z, 8 + 4 * (q), \
            R6_Z, 9 + 4 * (q), R6_Z, 10 + 4 * (q), R6_Z, 11 + 4 * (q)                              \
    }
static const uint8_t r6_ctrl_pair[2][16] = {R6_PR(0), R6_PR(1)};

static inline __m512i r6_ctrl(const uint8_t c[16])
{
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)c));
}

/* r6_group - r4_group for Q6_K (no mins; 16 groups of 16 values). Line
 * pair (h, lq): qh line 4h + lq and ql lines 8h + lq, 8h + 4 + lq give the
 * values 128h + 8lq + off + k, off = 0, 64 (first ql line's nibbles), 32,
 * 96 (second's); group g = 8h + off / 16 + lq / 2. The -32 offsets: o =
 * sum_g sc_g * bsums_g by vpdpwssd of int16 scale pairs (4 groups per
 * 64-bit lane) with the bsums, taken from the scaled sums once. */
static inline __attribute__((always_inline)) void
r6_group(int C, const uint8_t *gb, int64_t nb, const st_block_q8_k *const *xr, float *const *yr)
{
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    static const int offs[4] = {0, 64, 32, 96};
    __m256 acc[R4_C];
    for (int t = 0; t < C; t++)
        acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *o = gb + (size_t)b * R6_GBB;
        const __m512i sclo = _mm512_loadu_si512((const void *)(o + ST_R8_Q6K_SC_LO));
        const __m512i schi = _mm512_loadu_si512((const void *)(o + ST_R8_Q6K_SC_HI));
        __m512i s[R4_C];
        for (int t = 0; t < C; t++)
            s[t] = _mm512_setzero_si512();
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m512i sch = h ? schi : sclo;
#pragma GCC unroll 2
            for (int pq = 0; pq < 2; pq++) {
                __m512i u[2][4]; /* [lq - 2 pq][off index] */
                for (int e = 0; e < 2; e++) {
                    const int lq = 2 * pq + e;
                    const __m512i qh = _mm512_loadu_si512(
                        (const void *)(o + ST_R8_Q6K_QH(4 * h + lq)));
                    const __m512i l0 = _mm512_loadu_si512(
                        (const void *)(o + ST_R8_Q6K_QL(8 * h + lq)));
                    const __m512i l1 = _mm512_loadu_si512(
                        (const void *)(o + ST_R8_Q6K_QL(8 * h + 4 + lq)));
                    /* (bits 2k..2k+1 of qh) << 4, k = 0, 2, 1, 3 as off = 0, 64, 32, 96 */
                    const __m512i h0 = _mm512_and_si512(_mm512_slli_epi16(qh, 4), m30);
                    const __m512i h1 = _mm512_and_si512(_mm512_slli_epi16(qh, 2), m30);
                    const __m512i h2 = _mm512_and_si512(qh, m30);
                    const __m512i h3 = _mm512_and_si512(_mm512_srli_epi16(qh, 2), m30);
                    u[e][0] = _mm512_or_si512(_mm512_and_si512(l0, m4), h0);
                    u[e][1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l0, 4), m4), h2);
                    u[e][2] = _mm512_or_si512(_mm512_and_si512(l1, m4), h1);
                    u[e][3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l1, 4), m4), h3);
                }
                for (int f = 0; f < 4; f++) {
                    const int gi = offs[f] / 16 + pq; /* the group's index within the half */
                    const __m512i sc =
                        _mm512_srai_epi32(_mm512_shuffle_epi8(sch, r6_ctrl(r6_ctrl_sc[gi])), 24);
                    for (int t = 0; t < C; t++) {
                        const int8_t *q = xr[t][b].qs + 128 * h + offs[f] + 16 * pq;
                        __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[0][f], r4_bq(q));
                        p = _mm512_dpbusd_epi32(p, u[1][f], r4_bq(q + 8));
                        s[t] = _mm512_add_epi32(s[t], _mm512_mullo_epi32(p, sc));
                    }
                }
            }
        }
        __m512i sp[4]; /* int16 scale pairs: groups 4q .. 4q + 3 of each row */
        for (int q = 0; q < 4; q++)
            sp[q] = _mm512_srai_epi16(_mm512_shuffle_epi8(q < 2 ? sclo : schi,
                                                          r6_ctrl(r6_ctrl_pair[q % 2])),
                                      8);
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(o + ST_R8_Q6K_D)));
        const __m256 zero = _mm256_setzero_ps();
        for (int t = 0; t < C; t++) {
            __m512i off = _mm512_setzero_si512();
            for (int q = 0; q < 4; q++)
                off = _mm512_dpwssd_epi32(off, sp[q], r4_bq(xr[t][b].bsums + 4 * q));
            const __m512i si = _mm512_sub_epi32(s[t], _mm512_slli_epi32(off, R6_OFF_SHIFT));
            const __m256 fi = _mm256_cvtepi32_ps(r4_rows_sum(si));
            const __m256 dx = _mm256_set1_ps(xr[t][b].d);
            /* st_kq_step with dmin = 0 and summ = 0, operation for operation */
            const __m256 term = _mm256_sub_ps(_mm256_mul_ps(_mm256_mul_ps(dx, d), fi),
                                              _mm256_mul_ps(_mm256_mul_ps(dx, zero), zero));
            acc[t] = _mm256_add_ps(acc[t], term);
        }
    }
    for (int t = 0; t < C; t++)
        _mm256_storeu_ps(yr[t], acc[t]);
}

/* r6_group_x - r6_group with C a compile-time constant. */
static void r6_group_x(int C, const uint8_t *gb, int64_t nb, const st_block_q8_k *const *xr,
                       float *const *yr)
{
    switch (C) {
    case 4:
        r6_group(4, gb, nb, xr, yr);
        break;
    case 3:
        r6_group(3, gb, nb, xr, yr);
        break;
    case 2:
        r6_group(2, gb, nb, xr, yr);
        break;
    default:
        r6_group(1, gb, nb, xr, yr);
        break;
    }
}

/* r8k_groups - whole groups [g0, g1) by r4_group_x (q6 = 0) or r6_group_x. */
static void r8k_groups(int q6, int64_t n, const void *w, size_t w_stride, int64_t g0, int64_t g1,
                       const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    const uint8_t *wb = w, *xb = x;
    const int64_t nb = n / ST_QK_K;
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *gb = wb + (size_t)g * ST_R8_ROWS * w_stride;
        for (int64_t j = 0; j < nx; j += R4_C) {
            const int C = nx - j < R4_C ? (int)(nx - j) : R4_C;
            const st_block_q8_k *xr[R4_C];
            float *yr[R4_C];
            for (int t = 0; t < C; t++) {
                xr[t] = (const st_block_q8_k *)(xb + (size_t)(j + t) * x_stride);
                yr[t] = y + (j + t) * y_stride + ST_R8_ROWS * g;
            }
            if (q6)
                r6_group_x(C, gb, nb, xr, yr);
            else
                r4_group_x(C, gb, nb, xr, yr);
        }
    }
}

void avx512_r8_q6_k_groups(int64_t n, const void *w, size_t w_stride, int64_t g0, int64_t g1,
                           const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    r8k_groups(1, n, w, w_stride, g0, g1, x, x_stride, nx, y, y_stride);
}

void avx512_r8_q4_k_groups(int64_t n, const void *w, size_t w_stride, int64_t g0, int64_t g1,
                           const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    r8k_groups(0, n, w, w_stride, g0, g1, x, x_stride, nx, y, y_stride);
}
