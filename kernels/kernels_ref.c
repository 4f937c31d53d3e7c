/* kernels_ref.c - the scalar reference variant of every kernel.
 *
 * Design. This file defines what each operation computes, down to the
 * order of its floating-point operations; SIMD variants are measured against
 * it. The numerics follow llama.cpp's CPU backend, whose outputs are the
 * project's golden references:
 * - conversions: f16/bf16 by fp16.h (round to nearest even); Q8_0 and Q4_0
 *   by the same arithmetic as ggml's reference quantizers, so a converted
 *   file is byte-identical to one written by llama.cpp's quantizer;
 * - products: one dot product per output element, in a fixed order: f32
 *   accumulates sequentially in float; f16 and bf16 multiply the widened
 *   values in float and accumulate in double; Q8_0 and Q4_0 (activations in
 *   Q8_0 blocks) take an exact integer sum per block and add
 *   sumi * (d_w * d_x) to a float accumulator, block after block; the
 *   K-quants (activations in Q8_K) likewise per super-block (kquant_ref.c);
 * - rmsnorm sums squares in double, softmax sums exponentials in double,
 *   rope multiplies by the angles of kernels/rope.h (computed there once
 *   per token, as ggml does); GELU reads ggml's f16 table.
 * Because each output element of mul_mat depends only on its own weight row
 * and activation row, the result cannot depend on the batch size, the row's
 * place in the batch or the [i0, i1) split (batch invariance, INV-7).
 * Nothing here allocates, locks or keeps state. */
#include "kernels/kernels_ref.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "kernels/fp16.h"
#include "kernels/kquant.h"
#include "kernels/legacy.h"
#include "kernels/repack.h"

/* ---- conversions to float ---- */

void st_ref_f32_to_float(const void *src, float *dst, int64_t n)
{
    memmove(dst, src, (size_t)n * sizeof(float));
}

static void ref_f16_to_float(const void *src, float *dst, int64_t n)
{
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = st_f16_to_f32(s[i]);
}

static void ref_bf16_to_float(const void *src, float *dst, int64_t n)
{
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = st_bf16_to_f32(s[i]);
}

static void ref_q8_0_to_float(const void *src, float *dst, int64_t n)
{
    const st_block_q8_0 *b = src;
    for (int64_t ib = 0; ib < n / ST_QK; ib++) {
        const float d = st_f16_to_f32(b[ib].d);
        for (int j = 0; j < ST_QK; j++)
            dst[ib * ST_QK + j] = (float)b[ib].qs[j] * d;
    }
}

static void ref_q4_0_to_float(const void *src, float *dst, int64_t n)
{
    const st_block_q4_0 *b = src;
    for (int64_t ib = 0; ib < n / ST_QK; ib++) {
        const float d = st_f16_to_f32(b[ib].d);
        for (int j = 0; j < ST_QK / 2; j++) {
            const int lo = (b[ib].qs[j] & 0x0f) - 8;
            const int hi = (b[ib].qs[j] >> 4) - 8;
            dst[ib * ST_QK + j] = (float)lo * d;
            dst[ib * ST_QK + j + ST_QK / 2] = (float)hi * d;
        }
    }
}

/* ---- conversions from float ---- */

void st_ref_f32_from_float(const float *src, void *dst, int64_t n)
{
    memmove(dst, src, (size_t)n * sizeof(float));
}

static void ref_f16_from_float(const float *src, void *dst, int64_t n)
{
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++)
        d[i] = st_f32_to_f16(src[i]);
}

static void ref_bf16_from_float(const float *src, void *dst, int64_t n)
{
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++)
        d[i] = st_f32_to_bf16(src[i]);
}

/* ref_round_q8 - roundf(v) as an int8 in [-127, 127]. For finite inputs of
 * a well-formed block this is exactly ggml's (int8_t)roundf(v); NaN (only
 * from NaN inputs) becomes 0 and out-of-range values (only from a
 * subnormal scale) saturate, where ggml's cast would be undefined. */
static int8_t ref_round_q8(float v)
{
    if (!(v == v))
        return 0;
    float r = roundf(v);
    if (r > 127.0f)
        return 127;
    if (r < -127.0f)
        return -127;
    return (int8_t)r;
}

void st_ref_q8_0_block(const float *x, st_block_q8_0 *b)
{
    float amax = 0.0f;
    for (int j = 0; j < ST_QK; j++) {
        const float a = fabsf(x[j]);
        amax = amax > a ? amax : a;
    }
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = st_f32_to_f16(d);
    for (int j = 0; j < ST_QK; j++)
        b->qs[j] = ref_round_q8(x[j] * id);
}

static void ref_q8_0_from_float(const float *src, void *dst, int64_t n)
{
    st_block_q8_0 *b = dst;
    for (int64_t ib = 0; ib < n / ST_QK; ib++)
        st_ref_q8_0_block(src + ib * ST_QK, &b[ib]);
}

/* ref_nibble_q4 - ggml's MIN(15, (int8_t)(v + 8.5f)) for v in [-8, 8],
 * with NaN mapped to 0 and the range clamped instead of undefined. */
static uint8_t ref_nibble_q4(float v)
{
    const float t = v + 8.5f;
    if (!(t >= 0.0f))
        return 0;
    if (t >= 15.0f)
        return 15;
    return (uint8_t)(int)t;
}

void st_ref_q4_0_block(const float *x, st_block_q4_0 *b)
{
    float amax = 0.0f;
    float max = 0.0f;
    for (int j = 0; j < ST_QK; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b->d = st_f32_to_f16(d);
    for (int j = 0; j < ST_QK / 2; j++) {
        const uint8_t lo = ref_nibble_q4(x[j] * id);
        const uint8_t hi = ref_nibble_q4(x[j + ST_QK / 2] * id);
        b->qs[j] = (uint8_t)(lo | (hi << 4));
    }
}

static void ref_q4_0_from_float(const float *src, void *dst, int64_t n)
{
    st_block_q4_0 *b = dst;
    for (int64_t ib = 0; ib < n / ST_QK; ib++)
        st_ref_q4_0_block(src + ib * ST_QK, &b[ib]);
}

/* ---- dot products: one output element each ---- */

static float ref_dot_f32(int64_t n, const void *wv, const void *xv)
{
    const float *w = wv;
    const float *x = xv;
    float sum = 0.0f;
    for (int64_t k = 0; k < n; k++)
        sum += w[k] * x[k];
    return sum;
}

static float ref_dot_f16(int64_t n, const void *wv, const void *xv)
{
    const uint16_t *w = wv;
    const uint16_t *x = xv;
    double sum = 0.0;
    for (int64_t k = 0; k < n; k++)
        sum += (double)(st_f16_to_f32(w[k]) * st_f16_to_f32(x[k]));
    return (float)sum;
}

static float ref_dot_bf16(int64_t n, const void *wv, const void *xv)
{
    const uint16_t *w = wv;
    const uint16_t *x = xv;
    double sum = 0.0;
    for (int64_t k = 0; k < n; k++)
        sum += (double)(st_bf16_to_f32(w[k]) * st_bf16_to_f32(x[k]));
    return (float)sum;
}

static float ref_dot_q8_0(int64_t n, const void *wv, const void *xv)
{
    const st_block_q8_0 *w = wv;
    const st_block_q8_0 *x = xv;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / ST_QK; ib++) {
        int32_t sumi = 0;
        for (int j = 0; j < ST_QK; j++)
            sumi += (int32_t)w[ib].qs[j] * (int32_t)x[ib].qs[j];
        sum += (float)sumi * (st_f16_to_f32(w[ib].d) * st_f16_to_f32(x[ib].d));
    }
    return sum;
}

static float ref_dot_q4_0(int64_t n, const void *wv, const void *xv)
{
    const st_block_q4_0 *w = wv;
    const st_block_q8_0 *x = xv;
    float sum = 0.0f;
    for (int64_t ib = 0; ib < n / ST_QK; ib++) {
        int32_t sumi = 0;
        for (int j = 0; j < ST_QK / 2; j++) {
            const int32_t lo = (w[ib].qs[j] & 0x0f) - 8;
            const int32_t hi = (w[ib].qs[j] >> 4) - 8;
            sumi += lo * (int32_t)x[ib].qs[j] + hi * (int32_t)x[ib].qs[j + ST_QK / 2];
        }
        sum += (float)sumi * (st_f16_to_f32(w[ib].d) * st_f16_to_f32(x[ib].d));
    }
    return sum;
}

typedef float (*ref_dot_fn)(int64_t n, const void *w, const void *x);

/* ref_mul_mat - applies dot to every (weight row i, activation row j). */
static void ref_mul_mat(ref_dot_fn dot, int64_t n, const void *w, size_t w_stride, int64_t i0,
                        int64_t i1, const void *x, size_t x_stride, int64_t nx, float *y,
                        int64_t y_stride)
{
    const unsigned char *wb = w;
    const unsigned char *xb = x;
    for (int64_t i = i0; i < i1; i++) {
        const void *wrow = wb + (size_t)i * w_stride;
        for (int64_t j = 0; j < nx; j++)
            y[j * y_stride + i] = dot(n, wrow, xb + (size_t)j * x_stride);
    }
}

static void ref_mul_mat_f32(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                            const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    ref_mul_mat(ref_dot_f32, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}

static void ref_mul_mat_f16(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                            const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    ref_mul_mat(ref_dot_f16, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}

static void ref_mul_mat_bf16(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                             const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    ref_mul_mat(ref_dot_bf16, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}

static void ref_mul_mat_q8_0(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                             const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    ref_mul_mat(ref_dot_q8_0, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}

static void ref_mul_mat_q4_0(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                             const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    ref_mul_mat(ref_dot_q4_0, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}

/* ref_mul_mat_r8 - each weight block gathered back to its plain form,
 * then the plain reference dot of that block alone: the running float sum
 * sees the same terms in the same order (Q8_0 / Q4_0: (float)sumi * (d_w *
 * d_x); K-quants: st_kq_step's term; legacy and IQ4 quants: legacy.h's
 * term), and sum + (0 + t) == sum + t
 * exactly (sum starts at +0 and is never -0), so results equal mul_mat's. */
static void ref_mul_mat_r8(st_dtype t, ref_dot_fn dot, int64_t n, const void *w, size_t w_stride,
                           int64_t i0, int64_t i1, const void *x, size_t x_stride, int64_t nx,
                           float *y, int64_t y_stride)
{
    const unsigned char *xb = x;
    const int64_t blck = st_dtype_info_of(t)->blck;
    const size_t xbb = st_dtype_info_of(st_dtype_info_of(t)->act)->blck_bytes;
    for (int64_t i = i0; i < i1; i++) {
        for (int64_t j = 0; j < nx; j++) {
            const unsigned char *xr = xb + (size_t)j * x_stride;
            float sum = 0.0f;
            for (int64_t b = 0; b < n / blck; b++) {
                union {
                    st_block_q8_0 q8;
                    st_block_q4_0 q4;
                    st_block_q4_k q4k;
                    st_block_q6_k q6k;
                    st_block_q4_1 q41;
                    st_block_q5_0 q50;
                    st_block_q5_1 q51;
                    st_block_iq4_nl nl;
                    st_block_iq4_xs xs;
                } blk;
                st_r8_gather(t, w, w_stride, i, b, &blk);
                sum += dot(blck, &blk, xr + (size_t)b * xbb);
            }
            y[j * y_stride + i] = sum;
        }
    }
}

static void ref_mul_mat_r8_q8_0(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                                const void *x, size_t x_stride, int64_t nx, float *y,
                                int64_t y_stride)
{
    ref_mul_mat_r8(ST_DT_Q8_0, ref_dot_q8_0, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}

static void ref_mul_mat_r8_q4_0(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                                const void *x, size_t x_stride, int64_t nx, float *y,
                                int64_t y_stride)
{
    ref_mul_mat_r8(ST_DT_Q4_0, ref_dot_q4_0, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}

static void ref_mul_mat_r8_q4_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                                const void *x, size_t x_stride, int64_t nx, float *y,
                                int64_t y_stride)
{
    ref_mul_mat_r8(ST_DT_Q4_K, st_kq_dot_q4_k, n, w, w_stride, i0, i1, x, x_stride, nx, y,
                   y_stride);
}

static void ref_mul_mat_r8_q6_k(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                                const void *x, size_t x_stride, int64_t nx, float *y,
                                int64_t y_stride)
{
    ref_mul_mat_r8(ST_DT_Q6_K, st_kq_dot_q6_k, n, w, w_stride, i0, i1, x, x_stride, nx, y,
                   y_stride);
}

static void ref_mul_mat_r8_q4_1(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                                const void *x, size_t x_stride, int64_t nx, float *y,
                                int64_t y_stride)
{
    ref_mul_mat_r8(ST_DT_Q4_1, st_lg_dot_q4_1, n, w, w_stride, i0, i1, x, x_stride, nx, y,
                   y_stride);
}

static void ref_mul_mat_r8_q5_0(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                                const void *x, size_t x_stride, int64_t nx, float *y,
                                int64_t y_stride)
{
    ref_mul_mat_r8(ST_DT_Q5_0, st_lg_dot_q5_0, n, w, w_stride, i0, i1, x, x_stride, nx, y,
                   y_stride);
}

static void ref_mul_mat_r8_q5_1(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                                const void *x, size_t x_stride, int64_t nx, float *y,
                                int64_t y_stride)
{
    ref_mul_mat_r8(ST_DT_Q5_1, st_lg_dot_q5_1, n, w, w_stride, i0, i1, x, x_stride, nx, y,
                   y_stride);
}

static void ref_mul_mat_r8_iq4_nl(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                                  const void *x, size_t x_stride, int64_t nx, float *y,
                                  int64_t y_stride)
{
    ref_mul_mat_r8(ST_DT_IQ4_NL, st_lg_dot_iq4_nl, n, w, w_stride, i0, i1, x, x_stride, nx, y,
                   y_stride);
}

static void ref_mul_mat_r8_iq4_xs(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                                  const void *x, size_t x_stride, int64_t nx, float *y,
                                  int64_t y_stride)
{
    ref_mul_mat_r8(ST_DT_IQ4_XS, st_lg_dot_iq4_xs, n, w, w_stride, i0, i1, x, x_stride, nx, y,
                   y_stride);
}

/* ---- element-wise and row operations ---- */

static void ref_rmsnorm(const float *x, const float *w, float *y, int64_t n, float eps)
{
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (int64_t i = 0; i < n; i++)
        y[i] = (x[i] * scale) * w[i];
}

static void ref_rope(float *x, int64_t n_head, int64_t head_dim, int64_t n_rot, const float *cs)
{
    for (int64_t h = 0; h < n_head; h++) {
        float *xh = x + h * head_dim;
        for (int64_t i = 0; i + 1 < n_rot; i += 2) {
            const float c = cs[i];
            const float s = cs[i + 1];
            const float x0 = xh[i];
            const float x1 = xh[i + 1];
            xh[i] = x0 * c - x1 * s;
            xh[i + 1] = x0 * s + x1 * c;
        }
    }
}

static void ref_rope_neox(float *x, int64_t n_head, int64_t head_dim, int64_t n_rot,
                          const float *cs)
{
    const int64_t half = n_rot / 2;
    for (int64_t h = 0; h < n_head; h++) {
        float *xh = x + h * head_dim;
        for (int64_t i = 0; i < half; i++) {
            const float c = cs[2 * i];
            const float s = cs[2 * i + 1];
            const float x0 = xh[i];
            const float x1 = xh[i + half];
            xh[i] = x0 * c - x1 * s;
            xh[i + half] = x0 * s + x1 * c;
        }
    }
}

static void ref_softmax(float *x, int64_t n)
{
    float max = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        max = x[i] > max ? x[i] : max;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const float e = expf(x[i] - max);
        sum += (double)e;
        x[i] = e;
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++)
        x[i] *= inv;
}

static void ref_silu_mul(float *g, const float *u, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

/* The tanh GELU's constants and range (ggml's): outside (-GELU_RANGE,
 * GELU_RANGE) it is 0, resp. x, and inside it is read from a table of
 * every f16 input, built once on first use (pthread_once: constant after). */
#define REF_GELU_COEF_A 0.044715f
#define REF_GELU_SQRT_2_OVER_PI 0.79788456080286535587989211986876f
#define REF_GELU_RANGE 10.0f
#define REF_F16_VALUES (1 << 16)

static uint16_t ref_gelu_table[REF_F16_VALUES];
static pthread_once_t ref_gelu_once = PTHREAD_ONCE_INIT;

static void ref_gelu_table_init(void)
{
    for (uint32_t i = 0; i < REF_F16_VALUES; i++) {
        const float x = st_f16_to_f32((uint16_t)i);
        const float y =
            0.5f * x *
            (1.0f + tanhf(REF_GELU_SQRT_2_OVER_PI * x * (1.0f + REF_GELU_COEF_A * x * x)));
        ref_gelu_table[i] = st_f32_to_f16(y);
    }
}

void st_ref_gelu_mul(float *g, const float *u, int64_t n)
{
    (void)pthread_once(&ref_gelu_once, ref_gelu_table_init);
    for (int64_t i = 0; i < n; i++) {
        const float x = g[i];
        float y;
        if (x <= -REF_GELU_RANGE)
            y = 0.0f;
        else if (x >= REF_GELU_RANGE)
            y = x;
        else
            y = st_f16_to_f32(ref_gelu_table[st_f32_to_f16(x)]);
        g[i] = y * u[i];
    }
}

static void ref_add(float *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += x[i];
}

/* ref_attn_elem - element d of the K or V row r of a typed cache, as
 * float: f16 widened, Q8_0 d * qs (exact in float: 11 x 8 bits). */
static inline float ref_attn_elem(const void *r, st_dtype t, int64_t d)
{
    switch (t) {
    case ST_DT_F16:
        return st_f16_to_f32(((const uint16_t *)r)[d]);
    case ST_DT_Q8_0: {
        const st_block_q8_0 *b = (const st_block_q8_0 *)r + d / ST_QK;
        return st_f16_to_f32(b->d) * (float)b->qs[d % ST_QK];
    }
    default:
        return ((const float *)r)[d];
    }
}

/* ref_attn_dot - dot(q, k row): f32 as ref_dot_f32 (sequential in float);
 * f16 sequential in float over the widened values; Q8_0 per block the
 * float sum of q_i * qs_i in element order, times the block's d, added to
 * a float accumulator block after block. */
static float ref_attn_dot(const float *q, const void *k, st_dtype t, int64_t n)
{
    if (t == ST_DT_F32)
        return ref_dot_f32(n, q, k);
    if (t == ST_DT_F16) {
        const uint16_t *h = k;
        float sum = 0.0f;
        for (int64_t i = 0; i < n; i++)
            sum += q[i] * st_f16_to_f32(h[i]);
        return sum;
    }
    const st_block_q8_0 *b = k;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / ST_QK; i++) {
        float bs = 0.0f;
        for (int j = 0; j < ST_QK; j++)
            bs += q[i * ST_QK + j] * (float)b[i].qs[j];
        sum += bs * st_f16_to_f32(b[i].d);
    }
    return sum;
}

void st_ref_attn_head(const st_attn_args *a)
{
    const char *k = a->k, *v = a->v;
    for (int64_t t = a->kv0; t < a->n_kv; t++) {
        float s = ref_attn_dot(a->q, k + (size_t)t * a->kv_stride, a->kv_dtype, a->head_dim) *
                  a->scale;
        if (a->softcap != 0.0f)
            s = a->softcap * tanhf(s / a->softcap);
        a->scores[t] = s;
    }
    float *p = a->scores + a->kv0;
    const int64_t n = a->n_kv - a->kv0;
    ref_softmax(p, n);
    for (int64_t d = 0; d < a->head_dim; d++)
        a->out[d] = 0.0f;
    for (int64_t t = 0; t < n; t++) {
        const void *vt = v + (size_t)(a->kv0 + t) * a->kv_stride;
        for (int64_t d = 0; d < a->head_dim; d++)
            a->out[d] += p[t] * ref_attn_elem(vt, a->kv_dtype, d);
    }
}

int64_t st_ref_argmax(const float *x, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++) {
        if (x[i] > x[best])
            best = i;
    }
    return best;
}

static const st_kernel_ops ref_ops = {
    .name = "ref",
    .variant = ST_KVAR_REF,
    .to_float = {[ST_DT_F32] = st_ref_f32_to_float,
                 [ST_DT_F16] = ref_f16_to_float,
                 [ST_DT_BF16] = ref_bf16_to_float,
                 [ST_DT_Q8_0] = ref_q8_0_to_float,
                 [ST_DT_Q4_0] = ref_q4_0_to_float,
                 [ST_DT_Q2_K] = st_kq_to_float_q2_k,
                 [ST_DT_Q3_K] = st_kq_to_float_q3_k,
                 [ST_DT_Q4_K] = st_kq_to_float_q4_k,
                 [ST_DT_Q5_K] = st_kq_to_float_q5_k,
                 [ST_DT_Q6_K] = st_kq_to_float_q6_k,
                 [ST_DT_Q8_K] = st_kq_to_float_q8_k,
                 /* legacy and IQ4 quants (legacy_ref.c) */
                 [ST_DT_Q4_1] = st_lg_to_float_q4_1,
                 [ST_DT_Q5_0] = st_lg_to_float_q5_0,
                 [ST_DT_Q5_1] = st_lg_to_float_q5_1,
                 [ST_DT_IQ4_NL] = st_lg_to_float_iq4_nl,
                 [ST_DT_IQ4_XS] = st_lg_to_float_iq4_xs,
                 [ST_DT_Q8_1] = st_lg_to_float_q8_1},
    .from_float = {[ST_DT_F32] = st_ref_f32_from_float,
                   [ST_DT_F16] = ref_f16_from_float,
                   [ST_DT_BF16] = ref_bf16_from_float,
                   [ST_DT_Q8_0] = ref_q8_0_from_float,
                   [ST_DT_Q4_0] = ref_q4_0_from_float,
                   [ST_DT_Q8_K] = st_kq_from_float_q8_k,
                   [ST_DT_Q8_1] = st_lg_from_float_q8_1},
    .mul_mat = {[ST_DT_F32] = ref_mul_mat_f32,
                [ST_DT_F16] = ref_mul_mat_f16,
                [ST_DT_BF16] = ref_mul_mat_bf16,
                [ST_DT_Q8_0] = ref_mul_mat_q8_0,
                [ST_DT_Q4_0] = ref_mul_mat_q4_0,
                [ST_DT_Q2_K] = st_kq_mul_mat_q2_k,
                [ST_DT_Q3_K] = st_kq_mul_mat_q3_k,
                [ST_DT_Q4_K] = st_kq_mul_mat_q4_k,
                [ST_DT_Q5_K] = st_kq_mul_mat_q5_k,
                [ST_DT_Q6_K] = st_kq_mul_mat_q6_k,
                [ST_DT_Q4_1] = st_lg_mul_mat_q4_1,
                [ST_DT_Q5_0] = st_lg_mul_mat_q5_0,
                [ST_DT_Q5_1] = st_lg_mul_mat_q5_1,
                [ST_DT_IQ4_NL] = st_lg_mul_mat_iq4_nl,
                [ST_DT_IQ4_XS] = st_lg_mul_mat_iq4_xs},
    .mul_mat_r8 = {[ST_DT_Q8_0] = ref_mul_mat_r8_q8_0,
                   [ST_DT_Q4_0] = ref_mul_mat_r8_q4_0,
                   [ST_DT_Q4_K] = ref_mul_mat_r8_q4_k,
                   [ST_DT_Q6_K] = ref_mul_mat_r8_q6_k,
                   [ST_DT_Q4_1] = ref_mul_mat_r8_q4_1,
                   [ST_DT_Q5_0] = ref_mul_mat_r8_q5_0,
                   [ST_DT_Q5_1] = ref_mul_mat_r8_q5_1,
                   [ST_DT_IQ4_NL] = ref_mul_mat_r8_iq4_nl,
                   [ST_DT_IQ4_XS] = ref_mul_mat_r8_iq4_xs},
    .rmsnorm = ref_rmsnorm,
    .rope = ref_rope,
    .rope_neox = ref_rope_neox,
    .softmax = ref_softmax,
    .silu_mul = ref_silu_mul,
    .gelu_mul = st_ref_gelu_mul,
    .add = ref_add,
    .attn_head = st_ref_attn_head,
    .argmax = st_ref_argmax,
};

const st_kernel_ops *st_kernels_ref(void) { return &ref_ops; }
