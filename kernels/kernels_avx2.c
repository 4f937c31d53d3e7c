/* kernels_avx2.c - the AVX2 + FMA + F16C variant of the kernels: its table,
 * the conversions and the row operations (the products are in
 * kernels_avx2_q.c and kernels_avx2_f.c).
 *
 * Design. Conversions are bit-identical to the reference (the tests demand
 * it, and converted files must match llama.cpp's byte for byte): the same
 * float operations in the same order, done 8 lanes at a time; blocks
 * holding a NaN, whose handling in the reference depends on element order,
 * go to the reference's own block quantizers (kernels_ref.h), and tails to
 * fp16.h's scalar conversions. Rounding of
 * Q8_0 is round-half-away-from-zero like roundf: truncate, then step away
 * from zero when the exact remainder is at least one half.
 * Row operations follow the reference's formulas with vector arithmetic:
 * rope rotates by the angles of kernels/rope.h with the same
 * multiplications; GELU is the reference's (a table lookup); rmsnorm and
 * softmax keep their double sums (in 4 lanes);
 * softmax and silu use a vector expf (Cephes' polynomial, about 1 ulp),
 * within the tests' 2e-6 / 1e-6 relative bounds. argmax and the f32
 * copies are the reference's functions (argmax's tie and NaN rules are
 * order-defined, and it runs once per token). */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/fp16.h"
#include "kernels/kernels_avx2_int.h"
#include "kernels/kernels_ref.h"
#include "kernels/kquant.h"
#include "kernels/legacy.h"
#include "kernels/variants.h"

/* ---- vector helpers ---- */

/* a2_exp - e^x for 8 lanes: +Inf above 88.72, 0 below -87.33, NaN kept. */
static inline __m256 a2_exp(__m256 x)
{
    const __m256 hi = _mm256_set1_ps(88.72283935546875f);
    const __m256 lo = _mm256_set1_ps(-87.33654022216797f);
    const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    const __m256 fn = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(fn, _mm256_set1_ps(0.693359375f), xc);
    r = _mm256_fnmadd_ps(fn, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* 2^n: n in [-126, 128]; split as 2^(n/2) * 2^(n - n/2) so n = 128 stays finite */
    const __m256i n = _mm256_cvtps_epi32(fn);
    const __m256i n1 = _mm256_srai_epi32(n, 1);
    const __m256i n2 = _mm256_sub_epi32(n, n1);
    const __m256 s1 = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
    const __m256 s2 = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
    __m256 e = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    e = _mm256_blendv_ps(e, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
    e = _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LT_OQ), e);
    return _mm256_blendv_ps(e, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

static inline float a2_hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline double a2_hsum_pd(__m256d v)
{
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
    return _mm_cvtsd_f64(s);
}

static inline int a2_has_nan(const float *x, int64_t n)
{
    __m256 m = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        m = _mm256_or_ps(m, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    int nan = _mm256_movemask_ps(m) != 0;
    for (; i < n; i++)
        nan |= x[i] != x[i];
    return nan;
}

/* ---- conversions to float ---- */

static void a2_f16_to_float(const void *src, float *dst, int64_t n)
{
    const uint16_t *s = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm_loadu_si128((const __m128i *)(s + i));
        __m256 f = _mm256_cvtph_ps(h);
        const __m256i h32 = _mm256_cvtepu16_epi32(h);
        const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(h32, _mm256_set1_epi32(0x7fff)),
                                               _mm256_set1_epi32(0x7c00));
        if (!_mm256_testz_si256(nan, nan)) { /* the reference keeps a NaN's payload as is */
            const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(h32, _mm256_set1_epi32(0x8000)),
                                                   16);
            const __m256i man = _mm256_slli_epi32(_mm256_and_si256(h32, _mm256_set1_epi32(0x3ff)),
                                                  13);
            const __m256i bits = _mm256_or_si256(_mm256_or_si256(sign, man),
                                                 _mm256_set1_epi32(0x7f800000));
            f = _mm256_blendv_ps(f, _mm256_castsi256_ps(bits), _mm256_castsi256_ps(nan));
        }
        _mm256_storeu_ps(dst + i, f);
    }
    for (; i < n; i++)
        dst[i] = st_f16_to_f32(s[i]);
}

static void a2_bf16_to_float(const void *src, float *dst, int64_t n)
{
    const uint16_t *s = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + i)));
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
    }
    for (; i < n; i++)
        dst[i] = st_bf16_to_f32(s[i]);
}

static void a2_q8_0_to_float(const void *src, float *dst, int64_t n)
{
    const st_block_q8_0 *b = src;
    for (int64_t ib = 0; ib < n / ST_QK; ib++) {
        const __m256 d = _mm256_set1_ps(st_f16_to_f32(b[ib].d));
        for (int j = 0; j < ST_QK; j += 8) {
            int64_t q;
            memcpy(&q, b[ib].qs + j, 8);
            const __m256i v = _mm256_cvtepi8_epi32(_mm_cvtsi64_si128(q));
            _mm256_storeu_ps(dst + ib * ST_QK + j, _mm256_mul_ps(_mm256_cvtepi32_ps(v), d));
        }
    }
}

static void a2_q4_0_to_float(const void *src, float *dst, int64_t n)
{
    const st_block_q4_0 *b = src;
    for (int64_t ib = 0; ib < n / ST_QK; ib++) {
        const __m256 d = _mm256_set1_ps(st_f16_to_f32(b[ib].d));
        const __m128i v = _mm_loadu_si128((const __m128i *)b[ib].qs);
        const __m128i m = _mm_set1_epi8(0x0f);
        const __m128i lo = _mm_sub_epi8(_mm_and_si128(v, m), _mm_set1_epi8(8));
        const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_set1_epi8(8));
        const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
        for (int k = 0; k < 4; k++) {
            const __m256i q = _mm256_cvtepi8_epi32(parts[k]);
            _mm256_storeu_ps(dst + ib * ST_QK + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
        }
    }
}

/* ---- conversions from float ---- */

static void a2_f16_from_float(const float *src, void *dst, int64_t n)
{
    uint16_t *d = dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128((__m128i *)(d + i), h);
    }
    for (; i < n; i++)
        d[i] = st_f32_to_f16(src[i]);
}

static void a2_bf16_from_float(const float *src, void *dst, int64_t n)
{
    uint16_t *d = dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i x = _mm256_loadu_si256((const __m256i *)(src + i));
        const __m256i hi16 = _mm256_srli_epi32(x, 16);
        const __m256i absx = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
        const __m256i nan = _mm256_cmpgt_epi32(absx, _mm256_set1_epi32(0x7f800000));
        const __m256i tiny = _mm256_cmpeq_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7f800000)),
                                                _mm256_setzero_si256());
        const __m256i rnd =
            _mm256_add_epi32(x, _mm256_add_epi32(_mm256_set1_epi32(0x7fff),
                                                 _mm256_and_si256(hi16, _mm256_set1_epi32(1))));
        __m256i r = _mm256_srli_epi32(rnd, 16);
        r = _mm256_blendv_epi8(r, _mm256_and_si256(hi16, _mm256_set1_epi32(0x8000)), tiny);
        r = _mm256_blendv_epi8(r, _mm256_or_si256(hi16, _mm256_set1_epi32(0x40)), nan);
        const __m128i p = _mm_packus_epi32(_mm256_castsi256_si128(r),
                                           _mm256_extracti128_si256(r, 1));
        _mm_storeu_si128((__m128i *)(d + i), p);
    }
    for (; i < n; i++)
        d[i] = st_f32_to_bf16(src[i]);
}

/* a2_block_amax - max |x| of 32 floats (no NaN among them). */
static inline float a2_block_amax(const __m256 v[4])
{
    const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v[0], abs), _mm256_and_ps(v[1], abs)),
                             _mm256_max_ps(_mm256_and_ps(v[2], abs), _mm256_and_ps(v[3], abs)));
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static void a2_q8_0_from_float(const float *src, void *dst, int64_t n)
{
    st_block_q8_0 *b = dst;
    const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
    const __m256 half = _mm256_set1_ps(0.5f);
    const __m256 one = _mm256_set1_ps(1.0f);
    for (int64_t ib = 0; ib < n / ST_QK; ib++) {
        const float *x = src + ib * ST_QK;
        if (a2_has_nan(x, ST_QK)) {
            st_ref_q8_0_block(x, &b[ib]);
            continue;
        }
        __m256 v[4];
        for (int k = 0; k < 4; k++)
            v[k] = _mm256_loadu_ps(x + 8 * k);
        const float amax = a2_block_amax(v);
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[ib].d = st_f32_to_f16(d);
        __m256i q[4];
        for (int k = 0; k < 4; k++) {
            const __m256 s = _mm256_mul_ps(v[k], _mm256_set1_ps(id));
            const __m256 t = _mm256_round_ps(s, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            const __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(s, t));
            const __m256 step = _mm256_or_ps(_mm256_and_ps(s, sign), one);
            __m256 r = _mm256_add_ps(t, _mm256_and_ps(_mm256_cmp_ps(frac, half, _CMP_GE_OQ), step));
            r = _mm256_and_ps(r, _mm256_cmp_ps(s, s, _CMP_ORD_Q)); /* inf * 0: NaN -> 0 */
            r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
            q[k] = _mm256_cvttps_epi32(r);
        }
        const __m256i p01 = _mm256_packs_epi32(q[0], q[1]);
        const __m256i p23 = _mm256_packs_epi32(q[2], q[3]);
        const __m256i p = _mm256_packs_epi16(p01, p23);
        const __m256i o = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)b[ib].qs, o);
    }
}

static void a2_q4_0_from_float(const float *src, void *dst, int64_t n)
{
    st_block_q4_0 *b = dst;
    const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int64_t ib = 0; ib < n / ST_QK; ib++) {
        const float *x = src + ib * ST_QK;
        if (a2_has_nan(x, ST_QK)) {
            st_ref_q4_0_block(x, &b[ib]);
            continue;
        }
        __m256 v[4];
        for (int k = 0; k < 4; k++)
            v[k] = _mm256_loadu_ps(x + 8 * k);
        const float amax = a2_block_amax(v);
        float max = 0.0f;
        if (amax > 0.0f) { /* the first element of largest magnitude, as the reference scans */
            const __m256 a = _mm256_set1_ps(amax);
            uint32_t mask = 0;
            for (int k = 0; k < 4; k++)
                mask |= (uint32_t)_mm256_movemask_ps(
                            _mm256_cmp_ps(_mm256_and_ps(v[k], abs), a, _CMP_EQ_OQ))
                        << (8 * k);
            max = x[__builtin_ctz(mask)];
        }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[ib].d = st_f32_to_f16(d);
        __m256i q[4];
        for (int k = 0; k < 4; k++) {
            const __m256 t = _mm256_add_ps(_mm256_mul_ps(v[k], _mm256_set1_ps(id)),
                                           _mm256_set1_ps(8.5f));
            __m256 r = _mm256_min_ps(t, _mm256_set1_ps(15.0f));
            r = _mm256_and_ps(r, _mm256_cmp_ps(t, _mm256_setzero_ps(), _CMP_GE_OQ));
            q[k] = _mm256_cvttps_epi32(r);
        }
        const __m256i lo = _mm256_or_si256(q[0], _mm256_slli_epi32(q[2], 4)); /* elements 0..7 */
        const __m256i hi = _mm256_or_si256(q[1], _mm256_slli_epi32(q[3], 4)); /* 8..15 */
        const __m128i w0 = _mm_packs_epi32(_mm256_castsi256_si128(lo),
                                           _mm256_extracti128_si256(lo, 1));
        const __m128i w1 = _mm_packs_epi32(_mm256_castsi256_si128(hi),
                                           _mm256_extracti128_si256(hi, 1));
        _mm_storeu_si128((__m128i *)b[ib].qs, _mm_packus_epi16(w0, w1));
    }
}

/* ---- row and element-wise operations ---- */

static void a2_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps)
{
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const __m256 sq = _mm256_mul_ps(v, v);
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(sq, 1)));
    }
    double sum = a2_hsum_pd(_mm256_add_pd(s0, s1));
    for (; i < n; i++)
        sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    const __m256 sv = _mm256_set1_ps(scale);
    for (i = 0; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), sv);
        _mm256_storeu_ps(y + i, _mm256_mul_ps(v, _mm256_loadu_ps(w + i)));
    }
    for (; i < n; i++)
        y[i] = (x[i] * scale) * w[i];
}

/* a2_rope - (x0, x1) pairs are adjacent: 4 pairs per vector, rotated by
 * cc = (c0, c0, c1, c1, ...) and ss = (-s0, s0, -s1, s1, ...) built from
 * cs, with the reference's multiplications. */
static void a2_rope(float *x, int64_t n_head, int64_t head_dim, int64_t n_rot, const float *cs)
{
    const __m256 sign = _mm256_setr_ps(-1.0f, 1.0f, -1.0f, 1.0f, -1.0f, 1.0f, -1.0f, 1.0f);
    for (int64_t h = 0; h < n_head; h++) {
        float *xh = x + h * head_dim;
        int64_t k = 0;
        for (; k + 8 <= n_rot; k += 8) {
            const __m256 t = _mm256_loadu_ps(cs + k);                   /* c0 s0 c1 s1 ... */
            const __m256 cc = _mm256_moveldup_ps(t);                    /* c0 c0 c1 c1 ... */
            const __m256 ss = _mm256_mul_ps(_mm256_movehdup_ps(t), sign); /* -s0 s0 ... */
            const __m256 v = _mm256_loadu_ps(xh + k);
            const __m256 sw = _mm256_permute_ps(v, 0xb1); /* (x1, x0, x3, x2, ...) */
            _mm256_storeu_ps(xh + k, _mm256_add_ps(_mm256_mul_ps(v, cc), _mm256_mul_ps(sw, ss)));
        }
        for (; k + 1 < n_rot; k += 2) {
            const float c = cs[k], s = cs[k + 1];
            const float x0 = xh[k], x1 = xh[k + 1];
            xh[k] = x0 * c - x1 * s;
            xh[k + 1] = x0 * s + x1 * c;
        }
    }
}

/* a2_rope_neox - the pairs (i, i + n_rot/2) are two contiguous runs, so
 * 8 pairs rotate with plain loads once cs is split into cos and sin runs. */
#define A2_ROPE_PAIRS 64 /* pairs whose cos/sin are split at once */
static void a2_rope_neox(float *x, int64_t n_head, int64_t head_dim, int64_t n_rot,
                         const float *cs)
{
    const int64_t half = n_rot / 2;
    float cc[A2_ROPE_PAIRS], ss[A2_ROPE_PAIRS];
    for (int64_t p0 = 0; p0 < half; p0 += A2_ROPE_PAIRS) {
        const int64_t np = half - p0 < A2_ROPE_PAIRS ? half - p0 : A2_ROPE_PAIRS;
        for (int64_t p = 0; p < np; p++) {
            cc[p] = cs[2 * (p0 + p)];
            ss[p] = cs[2 * (p0 + p) + 1];
        }
        for (int64_t h = 0; h < n_head; h++) {
            float *x0p = x + h * head_dim + p0, *x1p = x0p + half;
            int64_t k = 0;
            for (; k + 8 <= np; k += 8) {
                const __m256 x0 = _mm256_loadu_ps(x0p + k), x1 = _mm256_loadu_ps(x1p + k);
                const __m256 c = _mm256_loadu_ps(cc + k), sn = _mm256_loadu_ps(ss + k);
                _mm256_storeu_ps(x0p + k,
                                 _mm256_sub_ps(_mm256_mul_ps(x0, c), _mm256_mul_ps(x1, sn)));
                _mm256_storeu_ps(x1p + k,
                                 _mm256_add_ps(_mm256_mul_ps(x0, sn), _mm256_mul_ps(x1, c)));
            }
            for (; k < np; k++) {
                const float a = x0p[k], b = x1p[k];
                x0p[k] = a * cc[k] - b * ss[k];
                x1p[k] = a * ss[k] + b * cc[k];
            }
        }
    }
}

static void a2_softmax(float *x, int64_t n)
{
    float max = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        max = x[i] > max ? x[i] : max;
    const __m256 mv = _mm256_set1_ps(max);
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 e = a2_exp(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
        _mm256_storeu_ps(x + i, e);
    }
    double sum = a2_hsum_pd(_mm256_add_pd(s0, s1));
    for (; i < n; i++) {
        const float e = expf(x[i] - max);
        sum += (double)e;
        x[i] = e;
    }
    const float inv = (float)(1.0 / sum);
    const __m256 iv = _mm256_set1_ps(inv);
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), iv));
    for (; i < n; i++)
        x[i] *= inv;
}

static void a2_silu_mul(float *g, const float *u, int64_t n)
{
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 neg = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(g + i);
        const __m256 e = a2_exp(_mm256_xor_ps(v, neg));
        const __m256 s = _mm256_div_ps(v, _mm256_add_ps(one, e));
        _mm256_storeu_ps(g + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++)
        g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void a2_add(float *y, const float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
    for (; i < n; i++)
        y[i] += x[i];
}

static inline float a2_dot(const float *a, const float *b, int64_t n)
{
    __m256 acc = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), acc);
    float s = a2_hsum(acc);
    for (; k < n; k++)
        s += a[k] * b[k];
    return s;
}

/* a2_attn_load8 - 8 values of a typed K/V row from element d as floats
 * (Q8_0: d * qs, d % 8 == 0 so the 8 lie in one block; the half d widened
 * by F16C, exactly as fp16.h does). */
static inline __m256 a2_attn_load8(const void *row, st_dtype t, int64_t d)
{
    if (t == ST_DT_F16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + d)));
    if (t == ST_DT_Q8_0) {
        const st_block_q8_0 *b = (const st_block_q8_0 *)row + d / ST_QK;
        const __m128i q8 = _mm_loadl_epi64((const __m128i *)(b->qs + d % ST_QK));
        return _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(b->d)),
                             _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)));
    }
    return _mm256_loadu_ps((const float *)row + d);
}

/* a2_attn_dot - dot(q, k row) of n values (n % 8 == 0; Q8_0: n % 32 == 0):
 * f16 one 8-lane FMA accumulator over the widened values; Q8_0 per block
 * an 8-lane sum of q_i * qs_i, then acc += d * that sum. */
static inline float a2_attn_dot(const float *q, const void *k, st_dtype t, int64_t n)
{
    __m256 acc = _mm256_setzero_ps();
    if (t == ST_DT_Q8_0) {
        const st_block_q8_0 *b = k;
        for (int64_t i = 0; i < n / ST_QK; i++) {
            __m256 bs = _mm256_setzero_ps();
            for (int j = 0; j < ST_QK; j += 8) {
                const __m128i q8 = _mm_loadl_epi64((const __m128i *)(b[i].qs + j));
                bs = _mm256_fmadd_ps(_mm256_loadu_ps(q + i * ST_QK + j),
                                     _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)), bs);
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(b[i].d)), bs, acc);
        }
        return a2_hsum(acc);
    }
    for (int64_t d = 0; d < n; d += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), a2_attn_load8(k, t, d), acc);
    return a2_hsum(acc);
}

/* a2_attn_typed - attn_head over an f16 or Q8_0 cache, head_dim % 8 == 0;
 * called with a constant t so each dtype gets its own loops. */
static inline __attribute__((always_inline)) void a2_attn_typed(const st_attn_args *a,
                                                                 st_dtype t)
{
    const char *k = a->k, *v = a->v;
    const int64_t hd = a->head_dim;
    for (int64_t i = a->kv0; i < a->n_kv; i++)
        a->scores[i] = a2_attn_dot(a->q, k + (size_t)i * a->kv_stride, t, hd) * a->scale;
    if (a->softcap != 0.0f)
        for (int64_t i = a->kv0; i < a->n_kv; i++)
            a->scores[i] = a->softcap * tanhf(a->scores[i] / a->softcap);
    const float *p = a->scores + a->kv0;
    const int64_t n = a->n_kv - a->kv0;
    a2_softmax(a->scores + a->kv0, n);
    v += (size_t)a->kv0 * a->kv_stride;
    int64_t d = 0;
    for (; d + 32 <= hd; d += 32) {
        __m256 o0 = _mm256_setzero_ps(), o1 = o0, o2 = o0, o3 = o0;
        for (int64_t i = 0; i < n; i++) {
            const __m256 pi = _mm256_set1_ps(p[i]);
            const char *vt = v + (size_t)i * a->kv_stride;
            o0 = _mm256_fmadd_ps(pi, a2_attn_load8(vt, t, d), o0);
            o1 = _mm256_fmadd_ps(pi, a2_attn_load8(vt, t, d + 8), o1);
            o2 = _mm256_fmadd_ps(pi, a2_attn_load8(vt, t, d + 16), o2);
            o3 = _mm256_fmadd_ps(pi, a2_attn_load8(vt, t, d + 24), o3);
        }
        _mm256_storeu_ps(a->out + d, o0);
        _mm256_storeu_ps(a->out + d + 8, o1);
        _mm256_storeu_ps(a->out + d + 16, o2);
        _mm256_storeu_ps(a->out + d + 24, o3);
    }
    for (; d < hd; d += 8) {
        __m256 o = _mm256_setzero_ps();
        for (int64_t i = 0; i < n; i++)
            o = _mm256_fmadd_ps(_mm256_set1_ps(p[i]),
                                a2_attn_load8(v + (size_t)i * a->kv_stride, t, d), o);
        _mm256_storeu_ps(a->out + d, o);
    }
}

/* a2_attn_f32 - attn_head over an f32 cache: the f32-only kernel of before
 * the typed cache (same operations in the same order) over [kv0, n_kv),
 * with the soft cap applied to the scores before the softmax. */
static void a2_attn_f32(const st_attn_args *a)
{
    const float *q = a->q;
    const int64_t kv_stride = (int64_t)(a->kv_stride / sizeof(float));
    const float *k = (const float *)a->k + a->kv0 * kv_stride;
    const float *v = (const float *)a->v + a->kv0 * kv_stride;
    const int64_t n_kv = a->n_kv - a->kv0, head_dim = a->head_dim;
    float *scores = a->scores + a->kv0, *out = a->out;
    for (int64_t t = 0; t < n_kv; t++)
        scores[t] = a2_dot(q, k + t * kv_stride, head_dim) * a->scale;
    if (a->softcap != 0.0f)
        for (int64_t t = 0; t < n_kv; t++)
            scores[t] = a->softcap * tanhf(scores[t] / a->softcap);
    a2_softmax(scores, n_kv);
    int64_t d = 0;
    for (; d + 32 <= head_dim; d += 32) {
        __m256 o0 = _mm256_setzero_ps(), o1 = o0, o2 = o0, o3 = o0;
        for (int64_t t = 0; t < n_kv; t++) {
            const __m256 p = _mm256_set1_ps(scores[t]);
            const float *vt = v + t * kv_stride + d;
            o0 = _mm256_fmadd_ps(p, _mm256_loadu_ps(vt), o0);
            o1 = _mm256_fmadd_ps(p, _mm256_loadu_ps(vt + 8), o1);
            o2 = _mm256_fmadd_ps(p, _mm256_loadu_ps(vt + 16), o2);
            o3 = _mm256_fmadd_ps(p, _mm256_loadu_ps(vt + 24), o3);
        }
        _mm256_storeu_ps(out + d, o0);
        _mm256_storeu_ps(out + d + 8, o1);
        _mm256_storeu_ps(out + d + 16, o2);
        _mm256_storeu_ps(out + d + 24, o3);
    }
    for (; d + 8 <= head_dim; d += 8) {
        __m256 o = _mm256_setzero_ps();
        for (int64_t t = 0; t < n_kv; t++)
            o = _mm256_fmadd_ps(_mm256_set1_ps(scores[t]), _mm256_loadu_ps(v + t * kv_stride + d),
                                o);
        _mm256_storeu_ps(out + d, o);
    }
    for (; d < head_dim; d++) {
        float o = 0.0f;
        for (int64_t t = 0; t < n_kv; t++)
            o += scores[t] * v[t * kv_stride + d];
        out[d] = o;
    }
}

/* a2_attn_head - attn_head: f32 by a2_attn_f32; f16 and Q8_0 by
 * a2_attn_typed, an f16 head_dim not a multiple of 8 by the reference. */
static void a2_attn_head(const st_attn_args *a)
{
    const int64_t lane = 8;
    if (a->kv_dtype == ST_DT_F16 && a->head_dim % lane == 0)
        a2_attn_typed(a, ST_DT_F16);
    else if (a->kv_dtype == ST_DT_Q8_0)
        a2_attn_typed(a, ST_DT_Q8_0);
    else if (a->kv_dtype == ST_DT_F32)
        a2_attn_f32(a);
    else
        st_ref_attn_head(a);
}

static const st_kernel_ops a2_ops = {
    .name = "avx2",
    .variant = ST_KVAR_AVX2,
    .to_float = {[ST_DT_F32] = st_ref_f32_to_float,
                 [ST_DT_F16] = a2_f16_to_float,
                 [ST_DT_BF16] = a2_bf16_to_float,
                 [ST_DT_Q8_0] = a2_q8_0_to_float,
                 [ST_DT_Q4_0] = a2_q4_0_to_float,
                 [ST_DT_Q2_K] = st_kq_to_float_q2_k,
                 [ST_DT_Q3_K] = st_kq_to_float_q3_k,
                 [ST_DT_Q4_K] = st_kq_to_float_q4_k,
                 [ST_DT_Q5_K] = st_kq_to_float_q5_k,
                 [ST_DT_Q6_K] = st_kq_to_float_q6_k,
                 [ST_DT_Q8_K] = st_kq_to_float_q8_k,
                 /* legacy and IQ4 quants: the reference's (legacy_ref.c) */
                 [ST_DT_Q4_1] = st_lg_to_float_q4_1,
                 [ST_DT_Q5_0] = st_lg_to_float_q5_0,
                 [ST_DT_Q5_1] = st_lg_to_float_q5_1,
                 [ST_DT_IQ4_NL] = st_lg_to_float_iq4_nl,
                 [ST_DT_IQ4_XS] = st_lg_to_float_iq4_xs,
                 [ST_DT_Q8_1] = st_lg_to_float_q8_1},
    .from_float = {[ST_DT_F32] = st_ref_f32_from_float,
                   [ST_DT_F16] = a2_f16_from_float,
                   [ST_DT_BF16] = a2_bf16_from_float,
                   [ST_DT_Q8_0] = a2_q8_0_from_float,
                   [ST_DT_Q4_0] = a2_q4_0_from_float,
                   [ST_DT_Q8_K] = st_kq_from_float_q8_k,
                   [ST_DT_Q8_1] = st_lg_from_float_q8_1},
    .mul_mat = {[ST_DT_F32] = avx2_mul_mat_f32,
                [ST_DT_F16] = avx2_mul_mat_f16,
                [ST_DT_BF16] = avx2_mul_mat_bf16,
                [ST_DT_Q8_0] = avx2_mul_mat_q8_0,
                [ST_DT_Q4_0] = avx2_mul_mat_q4_0,
                [ST_DT_Q2_K] = avx2_mul_mat_q2_k,
                [ST_DT_Q3_K] = avx2_mul_mat_q3_k,
                [ST_DT_Q4_K] = avx2_mul_mat_q4_k,
                [ST_DT_Q5_K] = avx2_mul_mat_q5_k,
                [ST_DT_Q6_K] = avx2_mul_mat_q6_k,
                [ST_DT_Q4_1] = avx2_mul_mat_q4_1,
                [ST_DT_Q5_0] = avx2_mul_mat_q5_0,
                [ST_DT_Q5_1] = avx2_mul_mat_q5_1,
                [ST_DT_IQ4_NL] = avx2_mul_mat_iq4_nl,
                [ST_DT_IQ4_XS] = avx2_mul_mat_iq4_xs},
    .mul_mat_r8 = {[ST_DT_Q8_0] = avx2_mul_mat_r8_q8_0,
                   [ST_DT_Q4_0] = avx2_mul_mat_r8_q4_0,
                   [ST_DT_Q4_K] = avx2_mul_mat_r8_q4_k,
                   [ST_DT_Q6_K] = avx2_mul_mat_r8_q6_k,
                   [ST_DT_Q4_1] = avx2_mul_mat_r8_q4_1,
                   [ST_DT_Q5_0] = avx2_mul_mat_r8_q5_0,
                   [ST_DT_Q5_1] = avx2_mul_mat_r8_q5_1,
                   [ST_DT_IQ4_NL] = avx2_mul_mat_r8_iq4_nl,
                   [ST_DT_IQ4_XS] = avx2_mul_mat_r8_iq4_xs},
    .rmsnorm = a2_rmsnorm,
    .rope = a2_rope,
    .rope_neox = a2_rope_neox,
    .softmax = a2_softmax,
    .silu_mul = a2_silu_mul,
    .gelu_mul = st_ref_gelu_mul,
    .add = a2_add,
    .attn_head = a2_attn_head,
    .argmax = st_ref_argmax,
};

const st_kernel_ops *st_kernels_avx2_table(void) { return &a2_ops; }

/* The AVX-512 variant: this table with the 512-bit K-quant products of
 * kquant_avx512.c and the legacy / IQ4 products of legacy_avx512.c
 * (bit-identical to the AVX2 ones) and the 16-lane float
 * products of kernels_avx512_f.c (their own order, within the float bound);
 * every other kernel is the AVX2 one. Defined here to share the static AVX2
 * kernels; holds no AVX-512 instruction itself. */
static const st_kernel_ops a5_ops = {
    .name = "avx512",
    .variant = ST_KVAR_AVX512,
    .to_float = {[ST_DT_F32] = st_ref_f32_to_float,
                 [ST_DT_F16] = a2_f16_to_float,
                 [ST_DT_BF16] = a2_bf16_to_float,
                 [ST_DT_Q8_0] = a2_q8_0_to_float,
                 [ST_DT_Q4_0] = a2_q4_0_to_float,
                 [ST_DT_Q2_K] = st_kq_to_float_q2_k,
                 [ST_DT_Q3_K] = st_kq_to_float_q3_k,
                 [ST_DT_Q4_K] = st_kq_to_float_q4_k,
                 [ST_DT_Q5_K] = st_kq_to_float_q5_k,
                 [ST_DT_Q6_K] = st_kq_to_float_q6_k,
                 [ST_DT_Q8_K] = st_kq_to_float_q8_k,
                 /* legacy and IQ4 quants: the reference's (legacy_ref.c) */
                 [ST_DT_Q4_1] = st_lg_to_float_q4_1,
                 [ST_DT_Q5_0] = st_lg_to_float_q5_0,
                 [ST_DT_Q5_1] = st_lg_to_float_q5_1,
                 [ST_DT_IQ4_NL] = st_lg_to_float_iq4_nl,
                 [ST_DT_IQ4_XS] = st_lg_to_float_iq4_xs,
                 [ST_DT_Q8_1] = st_lg_to_float_q8_1},
    .from_float = {[ST_DT_F32] = st_ref_f32_from_float,
                   [ST_DT_F16] = a2_f16_from_float,
                   [ST_DT_BF16] = a2_bf16_from_float,
                   [ST_DT_Q8_0] = a2_q8_0_from_float,
                   [ST_DT_Q4_0] = a2_q4_0_from_float,
                   [ST_DT_Q8_K] = st_kq_from_float_q8_k,
                   [ST_DT_Q8_1] = st_lg_from_float_q8_1},
    .mul_mat = {[ST_DT_F32] = avx512_mul_mat_f32,
                [ST_DT_F16] = avx512_mul_mat_f16,
                [ST_DT_BF16] = avx512_mul_mat_bf16,
                [ST_DT_Q8_0] = avx2_mul_mat_q8_0,
                [ST_DT_Q4_0] = avx2_mul_mat_q4_0,
                [ST_DT_Q2_K] = avx512_mul_mat_q2_k,
                [ST_DT_Q3_K] = avx512_mul_mat_q3_k,
                [ST_DT_Q4_K] = avx512_mul_mat_q4_k,
                [ST_DT_Q5_K] = avx512_mul_mat_q5_k,
                [ST_DT_Q6_K] = avx512_mul_mat_q6_k,
                [ST_DT_Q4_1] = avx512_mul_mat_q4_1,
                [ST_DT_Q5_0] = avx512_mul_mat_q5_0,
                [ST_DT_Q5_1] = avx512_mul_mat_q5_1,
                [ST_DT_IQ4_NL] = avx512_mul_mat_iq4_nl,
                [ST_DT_IQ4_XS] = avx512_mul_mat_iq4_xs},
    .mul_mat_r8 = {[ST_DT_Q8_0] = avx512_mul_mat_r8_q8_0,
                   [ST_DT_Q4_0] = avx512_mul_mat_r8_q4_0,
                   [ST_DT_Q4_K] = avx512_mul_mat_r8_q4_k,
                   [ST_DT_Q6_K] = avx512_mul_mat_r8_q6_k,
                   [ST_DT_Q4_1] = avx2_mul_mat_r8_q4_1,
                   [ST_DT_Q5_0] = avx2_mul_mat_r8_q5_0,
                   [ST_DT_Q5_1] = avx2_mul_mat_r8_q5_1,
                   [ST_DT_IQ4_NL] = avx2_mul_mat_r8_iq4_nl,
                   [ST_DT_IQ4_XS] = avx2_mul_mat_r8_iq4_xs},
    .rmsnorm = a2_rmsnorm,
    .rope = a2_rope,
    .rope_neox = a2_rope_neox,
    .softmax = a2_softmax,
    .silu_mul = a2_silu_mul,
    .gelu_mul = st_ref_gelu_mul,
    .add = a2_add,
    .attn_head = a2_attn_head,
    .argmax = st_ref_argmax,
};

const st_kernel_ops *st_kernels_avx512_table(void) { return &a5_ops; }
