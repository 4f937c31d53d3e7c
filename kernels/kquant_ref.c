/* kquant_ref.c - the scalar reference of the K-quants (see kquant.h).
 *
 * Design. Each weight super-block is first unpacked to one common form:
 * 256 signed quants q, 16 signed scales sc and 16 mins m (one per 16
 * values; a Q4_K/Q5_K sub-block of 32 gives its scale and min to two of
 * them), and the f32 d and dmin (0 for Q3_K and Q6_K). Then
 *   dequantization: x[v] = (d * sc[v / 16]) * q[v] - dmin * m[v / 16]
 *     (the float order of ggml's dequantizers: d*sc first, the min last);
 *   product with a Q8_K block: sumi = sum_g sc[g] * sum_{v in g} q[v] * q8[v],
 *     summ = sum_g m[g] * bsums[g], exact in int32 (|sumi| < 2^28), then
 *     sum += (dx * d) * (float)sumi - (dx * dmin) * (float)summ.
 * The unpacking is the format's whole definition, written once per type,
 * from the bit layouts of ggml's block_q2_K ... block_q6_K. */
#include "kernels/kquant.h"

#include <math.h>
#include <string.h>

#include "kernels/fp16.h"
#include "kernels/kernels_ref.h"

#define KQ_GROUPS (ST_QK_K / 16) /* sub-blocks of 16 values (and Q8_K bsums) */
#define KQ_HALF 128              /* Q2_K, Q3_K and Q6_K pack 128 values per pass */
#define KQ_Q8K_MAX 127.0f        /* Q8_K quants lie in [-127, 127] */

typedef struct kq_unpacked {
    int8_t q[ST_QK_K];
    int8_t sc[KQ_GROUPS];
    uint8_t m[KQ_GROUPS];
    float d, dmin;
} kq_unpacked;

/* Q2_K: 2-bit quants; byte 32 h + l of qs holds, at bits 2 j, the quant of
 * value 128 h + 32 j + l; scales[g]: scale in the low nibble, min in the high. */
static void kq_unpack_q2_k(const st_block_q2_k *b, kq_unpacked *u)
{
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++)
                u->q[KQ_HALF * h + 32 * j + l] = (int8_t)((b->qs[32 * h + l] >> (2 * j)) & 3);
    for (int g = 0; g < KQ_GROUPS; g++) {
        u->sc[g] = (int8_t)(b->scales[g] & 0x0f);
        u->m[g] = (uint8_t)(b->scales[g] >> 4);
    }
    u->d = st_f16_to_f32(b->d);
    u->dmin = st_f16_to_f32(b->dmin);
}

/* Q3_K: Q2_K's 2-bit layout plus a high bit, hmask[l] bit 4 h + j for
 * value 128 h + 32 j + l; a clear high bit subtracts 4. */
static void kq_unpack_q3_k(const st_block_q3_k *b, kq_unpacked *u)
{
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) {
                const int lo = (b->qs[32 * h + l] >> (2 * j)) & 3;
                const int hb = (b->hmask[l] >> (4 * h + j)) & 1;
                u->q[KQ_HALF * h + 32 * j + l] = (int8_t)(lo - (hb ? 0 : 4));
            }
    st_kq_scales_q3(b->scales, u->sc);
    memset(u->m, 0, sizeof u->m);
    u->d = st_f16_to_f32(b->d);
    u->dmin = 0.0f;
}

/* Q4_K and Q5_K: chunk c of 64 values is byte 32 c + l of qs, low nibble
 * for value 64 c + l, high nibble for 64 c + 32 + l; Q5_K's fifth bit of
 * those two is bit 2 c, resp. 2 c + 1, of qh[l]. */
static void kq_unpack_q45(uint16_t d, uint16_t dmin, const uint8_t *scales, const uint8_t *qs,
                          const uint8_t *qh, kq_unpacked *u)
{
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            int lo = qs[32 * c + l] & 0x0f, hi = qs[32 * c + l] >> 4;
            if (qh != NULL) {
                lo |= ((qh[l] >> (2 * c)) & 1) << 4;
                hi |= ((qh[l] >> (2 * c + 1)) & 1) << 4;
            }
            u->q[64 * c + l] = (int8_t)lo;
            u->q[64 * c + 32 + l] = (int8_t)hi;
        }
    for (int j = 0; j < 8; j++) {
        int sc, m;
        st_kq_scale_min_k4(j, scales, &sc, &m);
        u->sc[2 * j] = u->sc[2 * j + 1] = (int8_t)sc;
        u->m[2 * j] = u->m[2 * j + 1] = (uint8_t)m;
    }
    u->d = st_f16_to_f32(d);
    u->dmin = st_f16_to_f32(dmin);
}

/* Q6_K: per half h, the low nibbles of ql[64 h + l] and ql[64 h + 32 + l]
 * give values 128 h + l and + 32, their high nibbles + 64 and + 96; the
 * 2-bit pairs of qh[32 h + l] (bits 0, 2, 4, 6) are those four values'
 * top bits; quants are offset by 32; scales are int8. */
static void kq_unpack_q6_k(const st_block_q6_k *b, kq_unpacked *u)
{
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = b->ql + 64 * h;
        const uint8_t *qh = b->qh + 32 * h;
        int8_t *q = u->q + KQ_HALF * h;
        for (int l = 0; l < 32; l++) {
            q[l] = (int8_t)(((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32);
            q[l + 32] = (int8_t)(((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32);
            q[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            q[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
    }
    memcpy(u->sc, b->scales, sizeof u->sc);
    memset(u->m, 0, sizeof u->m);
    u->d = st_f16_to_f32(b->d);
    u->dmin = 0.0f;
}

typedef void (*kq_unpack_fn)(const void *block, kq_unpacked *u);

static void kq_up_q2(const void *b, kq_unpacked *u) { kq_unpack_q2_k(b, u); }
static void kq_up_q3(const void *b, kq_unpacked *u) { kq_unpack_q3_k(b, u); }
static void kq_up_q4(const void *b, kq_unpacked *u)
{
    const st_block_q4_k *k = b;
    kq_unpack_q45(k->d, k->dmin, k->scales, k->qs, NULL, u);
}
static void kq_up_q5(const void *b, kq_unpacked *u)
{
    const st_block_q5_k *k = b;
    kq_unpack_q45(k->d, k->dmin, k->scales, k->qs, k->qh, u);
}
static void kq_up_q6(const void *b, kq_unpacked *u) { kq_unpack_q6_k(b, u); }

/* ---- dequantization ---- */

static void kq_to_float(kq_unpack_fn unpack, size_t bytes, const void *src, float *dst, int64_t n)
{
    const unsigned char *s = src;
    kq_unpacked u;
    for (int64_t ib = 0; ib < n / ST_QK_K; ib++) {
        unpack(s + (size_t)ib * bytes, &u);
        float *y = dst + ib * ST_QK_K;
        for (int v = 0; v < ST_QK_K; v++) {
            const float dl = u.d * (float)u.sc[v / 16];
            const float ml = u.dmin * (float)u.m[v / 16];
            y[v] = dl * (float)u.q[v] - ml;
        }
    }
}

void st_kq_to_float_q2_k(const void *s, float *d, int64_t n)
{
    kq_to_float(kq_up_q2, sizeof(st_block_q2_k), s, d, n);
}
void st_kq_to_float_q3_k(const void *s, float *d, int64_t n)
{
    kq_to_float(kq_up_q3, sizeof(st_block_q3_k), s, d, n);
}
void st_kq_to_float_q4_k(const void *s, float *d, int64_t n)
{
    kq_to_float(kq_up_q4, sizeof(st_block_q4_k), s, d, n);
}
void st_kq_to_float_q5_k(const void *s, float *d, int64_t n)
{
    kq_to_float(kq_up_q5, sizeof(st_block_q5_k), s, d, n);
}
void st_kq_to_float_q6_k(const void *s, float *d, int64_t n)
{
    kq_to_float(kq_up_q6, sizeof(st_block_q6_k), s, d, n);
}

void st_kq_to_float_q8_k(const void *src, float *dst, int64_t n)
{
    const st_block_q8_k *b = src;
    for (int64_t ib = 0; ib < n / ST_QK_K; ib++)
        for (int v = 0; v < ST_QK_K; v++)
            dst[ib * ST_QK_K + v] = b[ib].d * (float)b[ib].qs[v];
}

/* ---- activations to Q8_K ---- */

/* kq_round_q8k - round half to even of v, capped at 127 (ggml's
 * MIN(127, nearest_int(v))); NaN gives 0 and the floor -127 guards
 * values only a non-finite block could produce. */
static int8_t kq_round_q8k(float v)
{
    if (!(v == v))
        return 0;
    const float r = rintf(v);
    if (r > KQ_Q8K_MAX)
        return (int8_t)KQ_Q8K_MAX;
    if (r < -KQ_Q8K_MAX)
        return (int8_t)-KQ_Q8K_MAX;
    return (int8_t)r;
}

void st_kq_from_float_q8_k(const float *src, void *dst, int64_t n)
{
    st_block_q8_k *b = dst;
    for (int64_t ib = 0; ib < n / ST_QK_K; ib++) {
        const float *x = src + ib * ST_QK_K;
        float amax = 0.0f, max = 0.0f;
        for (int v = 0; v < ST_QK_K; v++) {
            const float a = fabsf(x[v]);
            if (a > amax) {
                amax = a;
                max = x[v];
            }
        }
        memset(&b[ib], 0, sizeof b[ib]);
        if (amax == 0.0f)
            continue;
        const float iscale = -KQ_Q8K_MAX / max;
        for (int v = 0; v < ST_QK_K; v++)
            b[ib].qs[v] = kq_round_q8k(iscale * x[v]);
        for (int g = 0; g < KQ_GROUPS; g++) {
            int sum = 0;
            for (int l = 0; l < 16; l++)
                sum += b[ib].qs[16 * g + l];
            b[ib].bsums[g] = (int16_t)sum;
        }
        b[ib].d = 1.0f / iscale;
    }
}

/* ---- products ---- */

static float kq_dot(kq_unpack_fn unpack, size_t bytes, int64_t n, const void *w, const void *xv)
{
    const unsigned char *wb = w;
    const st_block_q8_k *x = xv;
    kq_unpacked u;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / ST_QK_K; ib++) {
        unpack(wb + (size_t)ib * bytes, &u);
        int32_t sumi = 0, summ = 0;
        for (int g = 0; g < KQ_GROUPS; g++) {
            int32_t s = 0;
            for (int l = 0; l < 16; l++)
                s += (int32_t)u.q[16 * g + l] * (int32_t)x[ib].qs[16 * g + l];
            sumi += (int32_t)u.sc[g] * s;
            summ += (int32_t)u.m[g] * (int32_t)x[ib].bsums[g];
        }
        sum = st_kq_step(sum, x[ib].d, u.d, u.dmin, sumi, summ);
    }
    return sum;
}

float st_kq_dot_q2_k(int64_t n, const void *w, const void *x)
{
    return kq_dot(kq_up_q2, sizeof(st_block_q2_k), n, w, x);
}
float st_kq_dot_q3_k(int64_t n, const void *w, const void *x)
{
    return kq_dot(kq_up_q3, sizeof(st_block_q3_k), n, w, x);
}
float st_kq_dot_q4_k(int64_t n, const void *w, const void *x)
{
    return kq_dot(kq_up_q4, sizeof(st_block_q4_k), n, w, x);
}
float st_kq_dot_q5_k(int64_t n, const void *w, const void *x)
{
    return kq_dot(kq_up_q5, sizeof(st_block_q5_k), n, w, x);
}
float st_kq_dot_q6_k(int64_t n, const void *w, const void *x)
{
    return kq_dot(kq_up_q6, sizeof(st_block_q6_k), n, w, x);
}

void st_ref_mul_mat_dot(st_ref_dot_fn dot, int64_t n, const void *w, size_t w_stride, int64_t i0,
                        int64_t i1, const void *x, size_t x_stride, int64_t nx, float *y,
                        int64_t y_stride)
{
    const unsigned char *wb = w;
    const unsigned char *xb = x;
    for (int64_t i = i0; i < i1; i++)
        for (int64_t j = 0; j < nx; j++)
            y[j * y_stride + i] = dot(n, wb + (size_t)i * w_stride, xb + (size_t)j * x_stride);
}

void st_kq_mul_mat_q2_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                        const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    st_ref_mul_mat_dot(st_kq_dot_q2_k, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}

void st_kq_mul_mat_q3_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                        const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    st_ref_mul_mat_dot(st_kq_dot_q3_k, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}

void st_kq_mul_mat_q4_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                        const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    st_ref_mul_mat_dot(st_kq_dot_q4_k, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}

void st_kq_mul_mat_q5_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                        const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    st_ref_mul_mat_dot(st_kq_dot_q5_k, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}

void st_kq_mul_mat_q6_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                        const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    st_ref_mul_mat_dot(st_kq_dot_q6_k, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}
