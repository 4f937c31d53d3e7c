/* convert_x86.c - AVX2 / F16C / SSE4.2 / PCLMULQDQ variants of the wire
 * conversions and CRC32C.
 *
 * Built with -mavx2 -mfma -mf16c; reached only through st_convert_get(),
 * which checks cpuid and xgetbv first. Each function reproduces the scalar
 * reference of convert_ref.c bit for bit on finite inputs:
 * - f16: clamp to +-65504 (counted with per-lane integer counters), then
 *   vcvtps2ph with an explicit round-to-nearest-even immediate;
 * - bf16: the integer round-to-nearest-even of fp16.h on 8 lanes, with the
 *   subnormal flush done by a blend;
 * - i8: max|x| as an integer max over the absolute bit patterns (ordered
 *   like the floats for finite values, and above 0x7f7fffff exactly when a
 *   value is non-finite), then x * inv rounded by vroundps (nearest even,
 *   independent of MXCSR) and packed with saturation;
 * - crc32c: the crc32 instruction on three interleaved lanes of a fixed
 *   length, combined by multiplying the earlier lanes' registers by
 *   x^(8 L) mod P with one carry-less multiply (pclmulqdq) and one crc32
 *   (constants below; the tests check the result against the reference on
 *   every length class).
 * Non-finite inputs are detected by OR-ing lane masks; only when one was
 * seen does a scalar pass find the first index. Tails use the reference's
 * scalar code (fp16.h's conversions, kernels_ref.h's i8 rounding). */
#include "kernels/convert.h"

#include <immintrin.h>
#include <string.h>

#include "kernels/fp16.h"
#include "kernels/kernels_ref.h"

/* x86_first_nonfinite - index of the first NaN/Inf in src[0..n), or n. */
static size_t x86_first_nonfinite(const float *src, size_t n, uint32_t limit)
{
    for (size_t i = 0; i < n; i++)
        if ((st_f32_bits(src[i]) & 0x7fffffffu) > limit)
            return i;
    return n;
}

/* x86_amax_bad - whether the lane maximum of |bits| in amax exceeds limit. */
static int x86_amax_bad(__m256i amax, uint32_t limit)
{
    uint32_t lanes[8];
    _mm256_storeu_si256((__m256i *)lanes, amax);
    int bad = 0;
    for (int k = 0; k < 8; k++)
        bad |= lanes[k] > limit;
    return bad;
}

/* x86_copy16 - 16 floats, collecting max |bits| in *amax. */
static inline void x86_copy16(const float *src, float *dst, __m256i *amax)
{
    const __m256i absm = _mm256_set1_epi32(0x7fffffff);
    __m256i a = _mm256_loadu_si256((const __m256i *)src);
    __m256i b = _mm256_loadu_si256((const __m256i *)(src + 8));
    *amax = _mm256_max_epu32(*amax, _mm256_and_si256(a, absm));
    *amax = _mm256_max_epu32(*amax, _mm256_and_si256(b, absm));
    _mm256_storeu_si256((__m256i *)dst, a);
    _mm256_storeu_si256((__m256i *)(dst + 8), b);
}

static size_t x86_f32_copy(const float *src, float *dst, size_t n)
{
    __m256i amax = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        x86_copy16(src + i, dst + i, &amax);
    int anybad = x86_amax_bad(amax, 0x7f7fffffu);
    for (; i < n; i++) {
        if ((st_f32_bits(src[i]) & 0x7fffffffu) > 0x7f7fffffu)
            anybad = 1;
        dst[i] = src[i];
    }
    return anybad ? x86_first_nonfinite(src, n, 0x7f7fffffu) : n;
}

/* x86_f16_block - 8 values: clamp, convert, and count the lanes the clamp
 * changed or that are NaN (NaN != anything), so *cnt counts clamped and
 * non-finite values together. */
static inline __m128i x86_f16_block(__m256 x, __m256i *cnt)
{
    const __m256 fmax = _mm256_set1_ps(ST_F16_MAX);
    const __m256 fmin = _mm256_set1_ps(-ST_F16_MAX);
    __m256 c = _mm256_min_ps(_mm256_max_ps(x, fmin), fmax);
    *cnt = _mm256_sub_epi32(*cnt, _mm256_castps_si256(_mm256_cmp_ps(c, x, _CMP_NEQ_UQ)));
    return _mm256_cvtps_ph(c, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

/* x86_f16_16 - 16 values to f16. */
static inline void x86_f16_16(const float *src, uint16_t *dst, __m256i *cnt)
{
    __m128i h0 = x86_f16_block(_mm256_loadu_ps(src), cnt);
    __m128i h1 = x86_f16_block(_mm256_loadu_ps(src + 8), cnt);
    _mm_storeu_si128((__m128i *)dst, h0);
    _mm_storeu_si128((__m128i *)(dst + 8), h1);
}

static uint64_t x86_hsum_epi32(__m256i v)
{
    uint32_t lanes[8];
    _mm256_storeu_si256((__m256i *)lanes, v);
    uint64_t s = 0;
    for (int k = 0; k < 8; k++)
        s += lanes[k];
    return s;
}

static size_t x86_f32_to_f16(const float *src, uint16_t *dst, size_t n, uint64_t *n_clamped)
{
    uint64_t flagged = 0; /* clamped or non-finite */
    size_t i = 0;
    while (i + 16 <= n) {
        /* per-lane counters stay far below 2^32 within one block */
        size_t end = n - i > ((size_t)1 << 24) ? i + ((size_t)1 << 24) : n;
        __m256i cnt = _mm256_setzero_si256();
        for (; i + 16 <= end; i += 16)
            x86_f16_16(src + i, dst + i, &cnt);
        flagged += x86_hsum_epi32(cnt);
    }
    for (; i < n; i++) {
        float x = src[i];
        if ((st_f32_bits(x) & 0x7fffffffu) > 0x7f7fffffu) {
            flagged++;
            continue;
        }
        if (x > ST_F16_MAX) {
            x = ST_F16_MAX;
            flagged++;
        } else if (x < -ST_F16_MAX) {
            x = -ST_F16_MAX;
            flagged++;
        }
        dst[i] = st_f32_to_f16(x);
    }
    if (flagged != 0) { /* rare: tell clamped from non-finite */
        size_t bad = x86_first_nonfinite(src, n, 0x7f7fffffu);
        if (bad != n)
            return bad;
    }
    *n_clamped += flagged;
    return n;
}

/* x86_first_bad16 - index of the first 16-bit code whose exponent field
 * (mask) is all ones, or n. */
static size_t x86_first_bad16(const uint16_t *src, size_t n, uint16_t mask)
{
    for (size_t i = 0; i < n; i++)
        if ((src[i] & mask) == mask)
            return i;
    return n;
}

/* x86_bad16 - lanes of v whose exponent field (mask) is all ones. */
static inline __m128i x86_bad16(__m128i v, __m128i mask)
{
    return _mm_cmpeq_epi16(_mm_and_si128(v, mask), mask);
}

static size_t x86_f16_to_f32(const uint16_t *src, float *dst, size_t n)
{
    const __m128i em = _mm_set1_epi16(0x7c00);
    __m128i bad = _mm_setzero_si128();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m128i h0 = _mm_loadu_si128((const __m128i *)(src + i));
        __m128i h1 = _mm_loadu_si128((const __m128i *)(src + i + 8));
        bad = _mm_or_si128(bad, _mm_or_si128(x86_bad16(h0, em), x86_bad16(h1, em)));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h0));
        _mm256_storeu_ps(dst + i + 8, _mm256_cvtph_ps(h1));
    }
    for (; i + 8 <= n; i += 8) {
        __m128i h0 = _mm_loadu_si128((const __m128i *)(src + i));
        bad = _mm_or_si128(bad, x86_bad16(h0, em));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h0));
    }
    if (i < n) { /* tail through a padded vector: same instruction, same NaN rule */
        uint16_t h[8] = {0};
        float f[8];
        memcpy(h, src + i, (n - i) * sizeof h[0]);
        __m128i h0 = _mm_loadu_si128((const __m128i *)h);
        bad = _mm_or_si128(bad, x86_bad16(h0, em));
        _mm256_storeu_ps(f, _mm256_cvtph_ps(h0));
        memcpy(dst + i, f, (n - i) * sizeof f[0]);
    }
    return _mm_testz_si128(bad, bad) ? n : x86_first_bad16(src, n, 0x7c00u);
}

/* x86_bf16_block - 8 values to 8 bf16 codes in the low halves of 32-bit
 * lanes; *amax collects max |bits| (non-finite or rounding to Inf shows
 * as a value >= 0x7f7f8000). A subnormal input (|bits| < 0x00800000) keeps
 * only its sign: the low 15 bits of its rounded code are cleared. */
static inline __m256i x86_bf16_block(__m256i b, __m256i *amax)
{
    const __m256i absm = _mm256_set1_epi32(0x7fffffff);
    const __m256i one = _mm256_set1_epi32(1);
    const __m256i bias = _mm256_set1_epi32(0x7fff);
    const __m256i minnorm = _mm256_set1_epi32(0x00800000);
    __m256i a = _mm256_and_si256(b, absm);
    *amax = _mm256_max_epu32(*amax, a);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), one);
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(b, _mm256_add_epi32(bias, lsb)), 16);
    __m256i sub = _mm256_cmpgt_epi32(minnorm, a);
    return _mm256_andnot_si256(_mm256_and_si256(sub, bias), r);
}

/* x86_bf16_16 - 16 values to bf16. */
static inline void x86_bf16_16(const float *src, uint16_t *dst, __m256i *amax)
{
    __m256i a = x86_bf16_block(_mm256_loadu_si256((const __m256i *)src), amax);
    __m256i b = x86_bf16_block(_mm256_loadu_si256((const __m256i *)(src + 8)), amax);
    _mm256_storeu_si256((__m256i *)dst, _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8));
}

static size_t x86_f32_to_bf16(const float *src, uint16_t *dst, size_t n)
{
    __m256i amax = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        x86_bf16_16(src + i, dst + i, &amax);
    int anybad = x86_amax_bad(amax, 0x7f7f7fffu);
    for (; i < n; i++) {
        if ((st_f32_bits(src[i]) & 0x7fffffffu) >= 0x7f7f8000u) {
            anybad = 1;
            continue;
        }
        dst[i] = st_f32_to_bf16(src[i]);
    }
    return anybad ? x86_first_nonfinite(src, n, 0x7f7f7fffu) : n;
}

static size_t x86_bf16_to_f32(const uint16_t *src, float *dst, size_t n)
{
    const __m256i em = _mm256_set1_epi16(0x7f80);
    __m256i bad = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(src + i));
        bad = _mm256_or_si256(bad, _mm256_cmpeq_epi16(_mm256_and_si256(v, em), em));
        __m256i a = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(v)), 16);
        __m256i b = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(v, 1)), 16);
        _mm256_storeu_si256((__m256i *)(dst + i), a);
        _mm256_storeu_si256((__m256i *)(dst + i + 8), b);
    }
    int anybad = !_mm256_testz_si256(bad, bad);
    for (; i < n; i++) {
        anybad |= (src[i] & 0x7f80u) == 0x7f80u;
        dst[i] = st_bf16_to_f32(src[i]);
    }
    return anybad ? x86_first_bad16(src, n, 0x7f80u) : n;
}

/* x86_i8_q - round_half_even(x * inv) for 8 values. |x * inv| is at most
 * 127 * (1 + 2^-23), so the result is within [-127, 127] and the
 * reference's clamp never acts; the saturating packs would keep it anyway. */
static inline __m256i x86_i8_q(const float *p, __m256 inv)
{
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(p), inv);
    return _mm256_cvttps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

static size_t x86_f32_to_i8(const float *src, int8_t *dst, size_t n, float *scale)
{
    const __m256i absm = _mm256_set1_epi32(0x7fffffff);
    __m256i m0 = _mm256_setzero_si256(), m1 = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i a = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(src + i)), absm);
        __m256i b = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(src + i + 8)), absm);
        m0 = _mm256_max_epi32(m0, a);
        m1 = _mm256_max_epi32(m1, b);
    }
    uint32_t lanes[8];
    _mm256_storeu_si256((__m256i *)lanes, _mm256_max_epi32(m0, m1));
    uint32_t mb = 0;
    for (int k = 0; k < 8; k++)
        mb = lanes[k] > mb ? lanes[k] : mb;
    for (; i < n; i++) {
        uint32_t a = st_f32_bits(src[i]) & 0x7fffffffu;
        mb = a > mb ? a : mb;
    }
    if (mb > 0x7effffffu) /* >= 2^127, Inf, NaN */
        return x86_first_nonfinite(src, n, 0x7effffffu);
    float amax = st_bits_f32(mb);
    if (amax < 0x1p-126f) {
        *scale = 0.0f;
        memset(dst, 0, n);
        return n;
    }
    *scale = amax / 127.0f;
    float invs = 127.0f / amax;
    __m256 inv = _mm256_set1_ps(invs);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (i = 0; i + 32 <= n; i += 32) {
        __m256i a = x86_i8_q(src + i, inv);
        __m256i b = x86_i8_q(src + i + 8, inv);
        __m256i c = x86_i8_q(src + i + 16, inv);
        __m256i d = x86_i8_q(src + i + 24, inv);
        __m256i ab = _mm256_packs_epi32(a, b);
        __m256i cd = _mm256_packs_epi32(c, d);
        __m256i q = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd), perm);
        _mm256_storeu_si256((__m256i *)(dst + i), q);
    }
    st_conv_ref_i8_round(src + i, dst + i, n - i, invs);
    return n;
}

static void x86_i8_to_f32(const int8_t *src, float scale, float *dst, size_t n)
{
    __m256 s = _mm256_set1_ps(scale);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(src + i));
        __m256 a = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
        __m256 b = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v, 8)));
        _mm256_storeu_ps(dst + i, _mm256_mul_ps(a, s));
        _mm256_storeu_ps(dst + i + 8, _mm256_mul_ps(b, s));
    }
    for (; i < n; i++)
        dst[i] = (float)src[i] * scale;
}

/* Lane lengths of the 3-way CRC with, for each, x^(8 L - 33) and
 * x^(16 L - 33) mod P (reflected). */
typedef struct x86_crc_lane {
    size_t len;
    uint32_t k1, k2;
} x86_crc_lane;

static const x86_crc_lane x86_crc_lanes[3] = {
    {8192, 0x54a86326u, 0x1dc403ccu},
    {1024, 0x170076fau, 0xa51b6135u},
    {128, 0x0d3b6092u, 0xb9e02b86u},
};

/* x86_crc_shift - the CRC register c advanced over L zero bytes, given
 * k = x^(8 L - 33) mod P: the carry-less product c * k is 63 bits, and the
 * crc32 instruction over it multiplies by x^32 (and one more x comes from
 * the reflected product) and reduces mod P. */
__attribute__((target("pclmul,sse4.2"))) static inline uint32_t x86_crc_shift(uint32_t c,
                                                                              uint32_t k)
{
    __m128i p = _mm_clmulepi64_si128(_mm_cvtsi32_si128((int)c), _mm_cvtsi32_si128((int)k), 0);
    return (uint32_t)_mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(p));
}

static inline uint64_t x86_load64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

__attribute__((target("pclmul,sse4.2"))) static uint32_t x86_crc32c(uint32_t crc, const void *buf,
                                                                    size_t n)
{
    const unsigned char *p = buf;
    uint64_t c = (uint32_t)~crc;
    for (int l = 0; l < 3; l++) {
        const size_t len = x86_crc_lanes[l].len;
        while (n >= 3 * len) {
            uint64_t c1 = 0, c2 = 0;
            for (size_t j = 0; j < len; j += 8) {
                c = _mm_crc32_u64(c, x86_load64(p + j));
                c1 = _mm_crc32_u64(c1, x86_load64(p + len + j));
                c2 = _mm_crc32_u64(c2, x86_load64(p + 2 * len + j));
            }
            c = x86_crc_shift((uint32_t)c, x86_crc_lanes[l].k2) ^
                x86_crc_shift((uint32_t)c1, x86_crc_lanes[l].k1) ^ (uint32_t)c2;
            p += 3 * len;
            n -= 3 * len;
        }
    }
    for (; n >= 8; n -= 8, p += 8)
        c = _mm_crc32_u64(c, x86_load64(p));
    uint32_t c32 = (uint32_t)c;
    for (; n > 0; n--, p++)
        c32 = _mm_crc32_u8(c32, *p);
    return ~c32;
}

/* The encoders with the checksum folded in: three lanes of the output are
 * converted in step, each 16 values followed by the crc32 of the bytes
 * just stored (still in L1, and on the integer ports while the vector
 * ports convert), then the lanes are combined as in x86_crc32c. What is
 * left after the lane rounds goes through the plain function and
 * x86_crc32c. */
typedef enum x86_kind { X86_K_F32, X86_K_F16, X86_K_BF16 } x86_kind;

__attribute__((target("pclmul,sse4.2"), always_inline)) static inline uint64_t
x86_conv16_crc(x86_kind k, const float *src, unsigned char *dst, __m256i *acc, uint64_t c)
{
    size_t bytes;
    switch (k) {
    case X86_K_F32:
        x86_copy16(src, (float *)(void *)dst, acc);
        bytes = 64;
        break;
    case X86_K_F16:
        x86_f16_16(src, (uint16_t *)(void *)dst, acc);
        bytes = 32;
        break;
    default:
        x86_bf16_16(src, (uint16_t *)(void *)dst, acc);
        bytes = 32;
        break;
    }
    for (size_t b = 0; b < bytes; b += 8)
        c = _mm_crc32_u64(c, x86_load64(dst + b));
    return c;
}

/* x86_fused - converts the largest lane-round prefix of src[0, n) into
 * dst, folding its bytes into *crc; returns how many values it took. */
__attribute__((target("pclmul,sse4.2"), always_inline)) static inline size_t
x86_fused(x86_kind k, const float *src, void *dst, size_t n, __m256i *acc, uint32_t *crc)
{
    const size_t esz = k == X86_K_F32 ? 4 : 2;
    unsigned char *d = dst;
    uint64_t c = (uint32_t) ~*crc;
    size_t i = 0;
    for (int l = 0; l < 3; l++) {
        const size_t le = x86_crc_lanes[l].len / esz; /* a multiple of 16 */
        while (n - i >= 3 * le) {
            uint64_t c1 = 0, c2 = 0;
            for (size_t j = i; j < i + le; j += 16) {
                c = x86_conv16_crc(k, src + j, d + j * esz, acc, c);
                c1 = x86_conv16_crc(k, src + le + j, d + (le + j) * esz, acc, c1);
                c2 = x86_conv16_crc(k, src + 2 * le + j, d + (2 * le + j) * esz, acc, c2);
            }
            c = x86_crc_shift((uint32_t)c, x86_crc_lanes[l].k2) ^
                x86_crc_shift((uint32_t)c1, x86_crc_lanes[l].k1) ^ (uint32_t)c2;
            i += 3 * le;
        }
    }
    *crc = ~(uint32_t)c;
    return i;
}

__attribute__((target("pclmul,sse4.2"))) static size_t
x86_f32_copy_crc(const float *src, float *dst, size_t n, uint32_t *crc)
{
    __m256i amax = _mm256_setzero_si256();
    uint32_t c = *crc;
    size_t i = x86_fused(X86_K_F32, src, dst, n, &amax, &c);
    if (x86_amax_bad(amax, 0x7f7fffffu))
        return x86_first_nonfinite(src, n, 0x7f7fffffu);
    size_t r = x86_f32_copy(src + i, dst + i, n - i);
    if (r != n - i)
        return i + r;
    *crc = x86_crc32c(c, dst + i, (n - i) * 4);
    return n;
}

__attribute__((target("pclmul,sse4.2"))) static size_t
x86_f32_to_f16_crc(const float *src, uint16_t *dst, size_t n, uint64_t *n_clamped, uint32_t *crc)
{
    __m256i cnt = _mm256_setzero_si256();
    uint32_t c = *crc;
    size_t i = 0;
    uint64_t flagged = 0;
    while (i < n) { /* per-lane counters stay far below 2^32 within one block */
        size_t part = n - i > ((size_t)1 << 24) ? (size_t)1 << 24 : n - i;
        size_t done = x86_fused(X86_K_F16, src + i, dst + i, part, &cnt, &c);
        flagged += x86_hsum_epi32(cnt);
        cnt = _mm256_setzero_si256();
        i += done;
        if (done < part)
            break;
    }
    if (flagged != 0) {
        size_t bad = x86_first_nonfinite(src, i, 0x7f7fffffu);
        if (bad != i)
            return bad;
    }
    size_t r = x86_f32_to_f16(src + i, dst + i, n - i, &flagged);
    if (r != n - i)
        return i + r;
    *n_clamped += flagged;
    *crc = x86_crc32c(c, dst + i, (n - i) * 2);
    return n;
}

__attribute__((target("pclmul,sse4.2"))) static size_t
x86_f32_to_bf16_crc(const float *src, uint16_t *dst, size_t n, uint32_t *crc)
{
    __m256i amax = _mm256_setzero_si256();
    uint32_t c = *crc;
    size_t i = x86_fused(X86_K_BF16, src, dst, n, &amax, &c);
    if (x86_amax_bad(amax, 0x7f7f7fffu))
        return x86_first_nonfinite(src, n, 0x7f7f7fffu);
    size_t r = x86_f32_to_bf16(src + i, dst + i, n - i);
    if (r != n - i)
        return i + r;
    *crc = x86_crc32c(c, dst + i, (n - i) * 2);
    return n;
}

static const st_convert_ops x86_ops = {
    .name = "avx2",
    .variant = ST_CONV_X86,
    .f32_copy = x86_f32_copy,
    .f32_to_f16 = x86_f32_to_f16,
    .f16_to_f32 = x86_f16_to_f32,
    .f32_to_bf16 = x86_f32_to_bf16,
    .bf16_to_f32 = x86_bf16_to_f32,
    .f32_to_i8 = x86_f32_to_i8,
    .i8_to_f32 = x86_i8_to_f32,
    .crc32c = x86_crc32c,
    .f32_copy_crc = x86_f32_copy_crc,
    .f32_to_f16_crc = x86_f32_to_f16_crc,
    .f32_to_bf16_crc = x86_f32_to_bf16_crc,
};

const st_convert_ops *st_convert_x86_ops(void) { return &x86_ops; }
