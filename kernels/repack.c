/* repack.c - the R8 layout (see repack.h): scalar, deterministic, the one
 * definition of the byte order that every R8 kernel reads. A dtype's
 * layout is a list of pieces: a piece moves len bytes at offset src of
 * each plain block to offset dst + len * r of the group block (r the
 * row's place in its group), so the 8 rows' copies of a piece sit side by
 * side. Any range of whole groups can be repacked alone (groups are
 * independent and keep their offsets), so callers may split the work
 * between threads. */
#include "kernels/repack.h"

#include <stddef.h>
#include <string.h>

/* r8_piece - len bytes at src of a plain block go to dst + len * r. */
typedef struct r8_piece {
    uint16_t src, len, dst;
} r8_piece;

#define R8_MAX_PIECES 27 /* Q6_K: d, 2 scale pieces, 16 + 8 quant lines */

typedef struct r8_layout {
    int n;
    r8_piece p[R8_MAX_PIECES];
} r8_layout;

/* Q8_0 and Q4_0: the scale, then 4-byte quant pieces c (8 resp. 4) */
#define R8_Q_D                                                                                     \
    {                                                                                              \
        0, 2, 0                                                                                    \
    }
#define R8_Q_C(c)                                                                                  \
    {                                                                                              \
        2 + 4 * (c), 4, 16 + 32 * (c)                                                              \
    }
static const r8_layout r8_q8_0 = {9,
                                  {R8_Q_D, R8_Q_C(0), R8_Q_C(1), R8_Q_C(2), R8_Q_C(3), R8_Q_C(4),
                                   R8_Q_C(5), R8_Q_C(6), R8_Q_C(7)}};
static const r8_layout r8_q4_0 = {5, {R8_Q_D, R8_Q_C(0), R8_Q_C(1), R8_Q_C(2), R8_Q_C(3)}};

/* Q4_K: d, dmin, scale bytes 0..7 and 8..11, then 8-byte quant lines L */
#define R8_K4_L(L)                                                                                 \
    {                                                                                              \
        offsetof(st_block_q4_k, qs) + 8 * (L), 8, ST_R8_Q4K_QS + 64 * (L)                          \
    }
static const r8_layout r8_q4_k = {20,
                                  {{offsetof(st_block_q4_k, d), 2, ST_R8_Q4K_D},
                                   {offsetof(st_block_q4_k, dmin), 2, ST_R8_Q4K_DMIN},
                                   {offsetof(st_block_q4_k, scales), 8, ST_R8_Q4K_SC8},
                                   {offsetof(st_block_q4_k, scales) + 8, 4, ST_R8_Q4K_SC4},
                                   R8_K4_L(0),
                                   R8_K4_L(1),
                                   R8_K4_L(2),
                                   R8_K4_L(3),
                                   R8_K4_L(4),
                                   R8_K4_L(5),
                                   R8_K4_L(6),
                                   R8_K4_L(7),
                                   R8_K4_L(8),
                                   R8_K4_L(9),
                                   R8_K4_L(10),
                                   R8_K4_L(11),
                                   R8_K4_L(12),
                                   R8_K4_L(13),
                                   R8_K4_L(14),
                                   R8_K4_L(15)}};

/* Q6_K: d, scales 0..7 and 8..15, the 16 8-byte lines of ql, the 8 of qh */
#define R8_K6_L(L)                                                                                 \
    {                                                                                              \
        offsetof(st_block_q6_k, ql) + 8 * (L), 8, ST_R8_Q6K_QL(L)                                  \
    }
#define R8_K6_H(M)                                                                                 \
    {                                                                                              \
        offsetof(st_block_q6_k, qh) + 8 * (M), 8, ST_R8_Q6K_QH(M)                                  \
    }
static const r8_layout r8_q6_k = {27,
                                  {{offsetof(st_block_q6_k, d), 2, ST_R8_Q6K_D},
                                   {offsetof(st_block_q6_k, scales), 8, ST_R8_Q6K_SC_LO},
                                   {offsetof(st_block_q6_k, scales) + 8, 8, ST_R8_Q6K_SC_HI},
                                   R8_K6_L(0),
                                   R8_K6_L(1),
                                   R8_K6_L(2),
                                   R8_K6_L(3),
                                   R8_K6_L(4),
                                   R8_K6_L(5),
                                   R8_K6_L(6),
                                   R8_K6_L(7),
                                   R8_K6_L(8),
                                   R8_K6_L(9),
                                   R8_K6_L(10),
                                   R8_K6_L(11),
                                   R8_K6_L(12),
                                   R8_K6_L(13),
                                   R8_K6_L(14),
                                   R8_K6_L(15),
                                   R8_K6_H(0),
                                   R8_K6_H(1),
                                   R8_K6_H(2),
                                   R8_K6_H(3),
                                   R8_K6_H(4),
                                   R8_K6_H(5),
                                   R8_K6_H(6),
                                   R8_K6_H(7)}};

/* Q4_1, Q5_0, Q5_1, IQ4_NL: d, m, qh, the 16 nibble bytes (repack.h) */
static const r8_layout r8_q4_1 = {3,
                                  {{offsetof(st_block_q4_1, d), 2, 0},
                                   {offsetof(st_block_q4_1, m), 2, ST_R8_LG_M},
                                   {offsetof(st_block_q4_1, qs), 16, ST_R8_LG_QS(ST_DT_Q4_1)}}};
static const r8_layout r8_q5_0 = {3,
                                  {{offsetof(st_block_q5_0, d), 2, 0},
                                   {offsetof(st_block_q5_0, qh), 4, ST_R8_LG_QH(ST_DT_Q5_0)},
                                   {offsetof(st_block_q5_0, qs), 16, ST_R8_LG_QS(ST_DT_Q5_0)}}};
static const r8_layout r8_q5_1 = {4,
                                  {{offsetof(st_block_q5_1, d), 2, 0},
                                   {offsetof(st_block_q5_1, m), 2, ST_R8_LG_M},
                                   {offsetof(st_block_q5_1, qh), 4, ST_R8_LG_QH(ST_DT_Q5_1)},
                                   {offsetof(st_block_q5_1, qs), 16, ST_R8_LG_QS(ST_DT_Q5_1)}}};
static const r8_layout r8_iq4_nl = {2,
                                    {{offsetof(st_block_iq4_nl, d), 2, 0},
                                     {offsetof(st_block_iq4_nl, qs), 16,
                                      ST_R8_LG_QS(ST_DT_IQ4_NL)}}};

/* IQ4_XS: d, scales_h, scales_l, then sub-block s's 16 nibble bytes */
#define R8_XS_S(s)                                                                                 \
    {                                                                                              \
        offsetof(st_block_iq4_xs, qs) + 16 * (s), 16, ST_R8_XS_QS + 128 * (s)                      \
    }
static const r8_layout r8_iq4_xs = {11,
                                    {{offsetof(st_block_iq4_xs, d), 2, 0},
                                     {offsetof(st_block_iq4_xs, scales_h), 2, ST_R8_XS_SH},
                                     {offsetof(st_block_iq4_xs, scales_l), 4, ST_R8_XS_SL},
                                     R8_XS_S(0),
                                     R8_XS_S(1),
                                     R8_XS_S(2),
                                     R8_XS_S(3),
                                     R8_XS_S(4),
                                     R8_XS_S(5),
                                     R8_XS_S(6),
                                     R8_XS_S(7)}};

/* r8_layout_of - the pieces of t (repack.h's byte order), or NULL. */
static const r8_layout *r8_layout_of(st_dtype t)
{
    switch (t) {
    case ST_DT_Q8_0:
        return &r8_q8_0;
    case ST_DT_Q4_0:
        return &r8_q4_0;
    case ST_DT_Q4_K:
        return &r8_q4_k;
    case ST_DT_Q6_K:
        return &r8_q6_k;
    case ST_DT_Q4_1:
        return &r8_q4_1;
    case ST_DT_Q5_0:
        return &r8_q5_0;
    case ST_DT_Q5_1:
        return &r8_q5_1;
    case ST_DT_IQ4_NL:
        return &r8_iq4_nl;
    case ST_DT_IQ4_XS:
        return &r8_iq4_xs;
    default:
        return NULL;
    }
}

int st_r8_supported(st_dtype t) { return r8_layout_of(t) != NULL; }

int st_r8_repack(st_dtype t, int64_t n, const void *src, size_t row_bytes, int64_t rows, void *dst)
{
    if (!st_r8_supported(t))
        return ST_K_ETYPE;
    size_t rb;
    if (st_row_size(t, n, &rb) != ST_K_OK || rb != row_bytes || rows < 0 || rows % ST_R8_ROWS != 0)
        return ST_K_ESHAPE;
    const st_dtype_info *info = st_dtype_info_of(t);
    const r8_layout *l = r8_layout_of(t);
    const int64_t nb = n / info->blck;
    const size_t bb = info->blck_bytes, gbb = ST_R8_ROWS * bb;
    const uint8_t *s = src;
    uint8_t *d = dst;
    for (int64_t g = 0; g < rows / ST_R8_ROWS; g++) {
        const uint8_t *sg = s + (size_t)g * ST_R8_ROWS * row_bytes;
        uint8_t *dg = d + (size_t)g * ST_R8_ROWS * row_bytes;
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *o = dg + (size_t)b * gbb;
            for (int r = 0; r < ST_R8_ROWS; r++) {
                const uint8_t *blk = sg + (size_t)r * row_bytes + (size_t)b * bb;
                for (int k = 0; k < l->n; k++)
                    memcpy(o + l->p[k].dst + (size_t)l->p[k].len * r, blk + l->p[k].src,
                           l->p[k].len);
            }
        }
    }
    return ST_K_OK;
}

void st_r8_gather(st_dtype t, const void *w, size_t row_bytes, int64_t i, int64_t b, void *out)
{
    const st_dtype_info *info = st_dtype_info_of(t);
    const r8_layout *l = r8_layout_of(t);
    const size_t gbb = ST_R8_ROWS * info->blck_bytes;
    const int64_t g = i / ST_R8_ROWS;
    const int r = (int)(i % ST_R8_ROWS);
    const uint8_t *o = (const uint8_t *)w + (size_t)g * ST_R8_ROWS * row_bytes + (size_t)b * gbb;
    uint8_t *d = out;
    for (int k = 0; k < l->n; k++)
        memcpy(d + l->p[k].src, o + l->p[k].dst + (size_t)l->p[k].len * r, l->p[k].len);
}

void st_r8_mul_mat_groups(st_dtype t, st_r8_groups_fn *groups, int64_t n, const void *w,
                          size_t w_stride, int64_t i0, int64_t i1, const void *x, size_t x_stride,
                          int64_t nx, float *y, int64_t y_stride)
{
    const st_kernel_ops *ref = st_kernels_ref();
    const int64_t g0 = (i0 + ST_R8_ROWS - 1) / ST_R8_ROWS, g1 = i1 / ST_R8_ROWS;
    if (g1 <= g0) {
        ref->mul_mat_r8[t](n, w, w_stride, i0, i1, x, x_stride, nx, y, y_stride);
        return;
    }
    if (i0 < ST_R8_ROWS * g0)
        ref->mul_mat_r8[t](n, w, w_stride, i0, ST_R8_ROWS * g0, x, x_stride, nx, y, y_stride);
    groups(t, n, w, w_stride, g0, g1, x, x_stride, nx, y, y_stride);
    if (ST_R8_ROWS * g1 < i1)
        ref->mul_mat_r8[t](n, w, w_stride, ST_R8_ROWS * g1, i1, x, x_stride, nx, y, y_stride);
}
