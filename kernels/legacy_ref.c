/* legacy_ref.c - the scalar reference of the legacy and IQ4 quants (see
 * legacy.h).
 *
 * Design. Each 32 values of a weight row are first unpacked to their 32
 * signed integer quants in element order (lg_unpack, the bit layout's one
 * definition here: low nibble of qs[j] = value j, high nibble = value
 * j + 16, fifth bit of value k = bit k of qh); dequantization and the
 * products are written on those quants, with the float operations of
 * ggml's dequantizers and dot products (legacy.h). */
#include "kernels/legacy.h"

#include <math.h>
#include <string.h>

#include "kernels/fp16.h"
#include "kernels/kernels_ref.h"

const int8_t st_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                    1,    13,   25,  38,  53,  69,  89,  113};

#define LG_HALF (ST_QK / 2) /* values per nibble half of a block */
#define LG_Q5_BIAS 16       /* Q5_0 quants are q - 16 */

/* lg_nibbles - the 32 4-bit quants of qs (16 bytes) in element order. */
static void lg_nibbles(const uint8_t *qs, int q[ST_QK])
{
    for (int j = 0; j < LG_HALF; j++) {
        q[j] = qs[j] & 0x0f;
        q[j + LG_HALF] = qs[j] >> 4;
    }
}

/* lg_fifth - adds bit k of the little-endian 32-bit qh as 16 to q[k]. */
static void lg_fifth(const uint8_t qh[4], int q[ST_QK])
{
    uint32_t h;
    memcpy(&h, qh, sizeof h);
    for (int k = 0; k < ST_QK; k++)
        q[k] |= (int)((h >> k) & 1) << 4;
}

/* lg_unpack - the signed quants of 32-value unit u of a row of t (for
 * IQ4_XS, sub-block u % 8 of super-block u / 8; without its scale). */
static void lg_unpack(st_dtype t, const void *row, int64_t u, int q[ST_QK])
{
    switch (t) {
    case ST_DT_Q4_1:
        lg_nibbles(((const st_block_q4_1 *)row)[u].qs, q);
        return;
    case ST_DT_Q5_0: {
        const st_block_q5_0 *b = (const st_block_q5_0 *)row + u;
        lg_nibbles(b->qs, q);
        lg_fifth(b->qh, q);
        for (int k = 0; k < ST_QK; k++)
            q[k] -= LG_Q5_BIAS;
        return;
    }
    case ST_DT_Q5_1: {
        const st_block_q5_1 *b = (const st_block_q5_1 *)row + u;
        lg_nibbles(b->qs, q);
        lg_fifth(b->qh, q);
        return;
    }
    case ST_DT_IQ4_NL:
        lg_nibbles(((const st_block_iq4_nl *)row)[u].qs, q);
        break;
    default: /* ST_DT_IQ4_XS */
        lg_nibbles(((const st_block_iq4_xs *)row)[u / ST_IQ4_SUBS].qs + (u % ST_IQ4_SUBS) * LG_HALF,
                   q);
        break;
    }
    for (int k = 0; k < ST_QK; k++)
        q[k] = st_iq4nl_values[q[k]];
}

/* ---- dequantization ---- */

void st_lg_to_float_q4_1(const void *src, float *dst, int64_t n)
{
    const st_block_q4_1 *b = src;
    for (int64_t u = 0; u < n / ST_QK; u++) {
        int q[ST_QK];
        lg_unpack(ST_DT_Q4_1, src, u, q);
        const float d = st_f16_to_f32(b[u].d);
        const float m = st_f16_to_f32(b[u].m);
        for (int k = 0; k < ST_QK; k++)
            dst[u * ST_QK + k] = (float)q[k] * d + m;
    }
}

void st_lg_to_float_q5_0(const void *src, float *dst, int64_t n)
{
    const st_block_q5_0 *b = src;
    for (int64_t u = 0; u < n / ST_QK; u++) {
        int q[ST_QK];
        lg_unpack(ST_DT_Q5_0, src, u, q);
        const float d = st_f16_to_f32(b[u].d);
        for (int k = 0; k < ST_QK; k++)
            dst[u * ST_QK + k] = (float)q[k] * d;
    }
}

void st_lg_to_float_q5_1(const void *src, float *dst, int64_t n)
{
    const st_block_q5_1 *b = src;
    for (int64_t u = 0; u < n / ST_QK; u++) {
        int q[ST_QK];
        lg_unpack(ST_DT_Q5_1, src, u, q);
        const float d = st_f16_to_f32(b[u].d);
        const float m = st_f16_to_f32(b[u].m);
        for (int k = 0; k < ST_QK; k++)
            dst[u * ST_QK + k] = (float)q[k] * d + m;
    }
}

void st_lg_to_float_iq4_nl(const void *src, float *dst, int64_t n)
{
    const st_block_iq4_nl *b = src;
    for (int64_t u = 0; u < n / ST_QK; u++) {
        int q[ST_QK];
        lg_unpack(ST_DT_IQ4_NL, src, u, q);
        const float d = st_f16_to_f32(b[u].d);
        for (int k = 0; k < ST_QK; k++)
            dst[u * ST_QK + k] = d * (float)q[k];
    }
}

void st_lg_to_float_iq4_xs(const void *src, float *dst, int64_t n)
{
    const st_block_iq4_xs *b = src;
    for (int64_t u = 0; u < n / ST_QK; u++) {
        int q[ST_QK];
        lg_unpack(ST_DT_IQ4_XS, src, u, q);
        const st_block_iq4_xs *blk = &b[u / ST_IQ4_SUBS];
        const float dl = st_f16_to_f32(blk->d) * (float)st_iq4xs_scale(blk, (int)(u % ST_IQ4_SUBS));
        for (int k = 0; k < ST_QK; k++)
            dst[u * ST_QK + k] = dl * (float)q[k];
    }
}

void st_lg_to_float_q8_1(const void *src, float *dst, int64_t n)
{
    const st_block_q8_1 *b = src;
    for (int64_t u = 0; u < n / ST_QK; u++) {
        const float d = st_f16_to_f32(b[u].d);
        for (int k = 0; k < ST_QK; k++)
            dst[u * ST_QK + k] = (float)b[u].qs[k] * d;
    }
}

/* ---- Q8_1 quantization ---- */

void st_lg_from_float_q8_1(const float *src, void *dst, int64_t n)
{
    st_block_q8_1 *b = dst;
    for (int64_t u = 0; u < n / ST_QK; u++) {
        st_block_q8_0 q8;
        st_ref_q8_0_block(src + u * ST_QK, &q8);
        /* the f32 d that st_ref_q8_0_block rounded to f16: absmax / 127 */
        float amax = 0.0f;
        for (int k = 0; k < ST_QK; k++) {
            const float a = fabsf(src[u * ST_QK + k]);
            amax = amax > a ? amax : a;
        }
        const float d = amax / 127.0f;
        int sum = 0;
        for (int k = 0; k < ST_QK; k++)
            sum += q8.qs[k];
        b[u].d = q8.d;
        b[u].s = st_f32_to_f16((float)sum * d);
        memcpy(b[u].qs, q8.qs, sizeof b[u].qs);
    }
}

/* ---- products ---- */

/* lg_sumi - the exact sum of the 32 products of unit u of row w (type t)
 * with the 32 activation quants x8. */
static int32_t lg_sumi(st_dtype t, const void *w, int64_t u, const int8_t *x8)
{
    int q[ST_QK];
    lg_unpack(t, w, u, q);
    int32_t s = 0;
    for (int k = 0; k < ST_QK; k++)
        s += q[k] * (int32_t)x8[k];
    return s;
}

float st_lg_dot_q4_1(int64_t n, const void *wv, const void *xv)
{
    const st_block_q4_1 *w = wv;
    const st_block_q8_1 *x = xv;
    float sum = 0.0f;
    for (int64_t u = 0; u < n / ST_QK; u++) {
        const int32_t sumi = lg_sumi(ST_DT_Q4_1, wv, u, x[u].qs);
        sum += (float)sumi * (st_f16_to_f32(w[u].d) * st_f16_to_f32(x[u].d)) +
               st_f16_to_f32(w[u].m) * st_f16_to_f32(x[u].s);
    }
    return sum;
}

float st_lg_dot_q5_1(int64_t n, const void *wv, const void *xv)
{
    const st_block_q5_1 *w = wv;
    const st_block_q8_1 *x = xv;
    float sum = 0.0f;
    for (int64_t u = 0; u < n / ST_QK; u++) {
        const int32_t sumi = lg_sumi(ST_DT_Q5_1, wv, u, x[u].qs);
        sum += (float)sumi * (st_f16_to_f32(w[u].d) * st_f16_to_f32(x[u].d)) +
               st_f16_to_f32(w[u].m) * st_f16_to_f32(x[u].s);
    }
    return sum;
}

float st_lg_dot_q5_0(int64_t n, const void *wv, const void *xv)
{
    const st_block_q5_0 *w = wv;
    const st_block_q8_0 *x = xv;
    float sum = 0.0f;
    for (int64_t u = 0; u < n / ST_QK; u++) {
        const int32_t sumi = lg_sumi(ST_DT_Q5_0, wv, u, x[u].qs);
        sum += (float)sumi * (st_f16_to_f32(w[u].d) * st_f16_to_f32(x[u].d));
    }
    return sum;
}

float st_lg_dot_iq4_nl(int64_t n, const void *wv, const void *xv)
{
    const st_block_iq4_nl *w = wv;
    const st_block_q8_0 *x = xv;
    float sum = 0.0f;
    for (int64_t u = 0; u < n / ST_QK; u++) {
        const int32_t sumi = lg_sumi(ST_DT_IQ4_NL, wv, u, x[u].qs);
        sum += (float)sumi * (st_f16_to_f32(w[u].d) * st_f16_to_f32(x[u].d));
    }
    return sum;
}

float st_lg_dot_iq4_xs(int64_t n, const void *wv, const void *xv)
{
    const st_block_iq4_xs *w = wv;
    const st_block_q8_k *x = xv;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / ST_QK_K; b++) {
        int32_t sumi = 0;
        for (int s = 0; s < ST_IQ4_SUBS; s++)
            sumi += st_iq4xs_scale(&w[b], s) *
                    lg_sumi(ST_DT_IQ4_XS, wv, b * ST_IQ4_SUBS + s, x[b].qs + s * ST_QK);
        sum += (float)sumi * (st_f16_to_f32(w[b].d) * x[b].d);
    }
    return sum;
}

void st_lg_mul_mat_q4_1(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                        const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    st_ref_mul_mat_dot(st_lg_dot_q4_1, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}

void st_lg_mul_mat_q5_0(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                        const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    st_ref_mul_mat_dot(st_lg_dot_q5_0, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}

void st_lg_mul_mat_q5_1(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                        const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    st_ref_mul_mat_dot(st_lg_dot_q5_1, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}

void st_lg_mul_mat_iq4_nl(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                          const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    st_ref_mul_mat_dot(st_lg_dot_iq4_nl, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}

void st_lg_mul_mat_iq4_xs(int64_t n, const void *w, size_t w_stride, int64_t i0, int64_t i1,
                          const void *x, size_t x_stride, int64_t nx, float *y, int64_t y_stride)
{
    st_ref_mul_mat_dot(st_lg_dot_iq4_xs, n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
}
