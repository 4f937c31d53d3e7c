/* repack.h - the row-interleaved ("R8") layout of Q8_0, Q4_0, Q4_K, Q6_K,
 * Q4_1, Q5_0, Q5_1, IQ4_NL and IQ4_XS weights.
 *
 * A GGUF matrix stores each row's blocks one after another. Products that
 * use 8 rows at a time (every SIMD path) then read 8 separate streams and
 * rearrange the bytes before multiplying. The R8 layout is the same bytes
 * in the order those paths use them, made once at load time from the
 * GGUF rows (the file stays the source; st_r8_repack is deterministic).
 *
 * Rows are taken in groups of 8 (the matrix must have a multiple of 8
 * rows). Group g occupies the bytes of rows [8g, 8g + 8) of the plain
 * matrix, i.e. 8 * row_bytes bytes at offset 8g * row_bytes, so row
 * offsets and sizes are unchanged. Inside a group, "group block" b holds
 * block b of the 8 rows:
 *  - Q8_0 (272 bytes = 8 x 34): the 8 scales d[r] (f16, r = 0..7), then
 *    8 chunks c = 0..7 of 32 bytes: byte 4r + k of chunk c is qs[4c + k]
 *    of row r (4 consecutive quants of each row).
 *  - Q4_0 (144 bytes = 8 x 18): the 8 scales, then 4 vectors v = 0..3 of
 *    32 bytes: byte 4r + k of vector v is qs[4v + k] of row r. Since a
 *    plain Q4_0 byte qs[e] holds element e in its low nibble and element
 *    16 + e in its high one, the low nibbles of vector v are chunk v
 *    (elements 4v..4v+3) and the high nibbles chunk v + 4.
 *  - Q4_K (1152 bytes = 8 x 144, "group block" b holds super-block b):
 *    the 8 d[r] (f16) at ST_R8_Q4K_D, the 8 dmin[r] at ST_R8_Q4K_DMIN,
 *    scale bytes 0..7 of row r at ST_R8_Q4K_SC8 + 8r, scale bytes 8..11
 *    at ST_R8_Q4K_SC4 + 4r, then 16 lines L = 0..15 of 64 bytes at
 *    ST_R8_Q4K_QS + 64L: byte 8r + k of line L is qs[8L + k] of row r.
 *    Line L's low nibbles are elements 64c + 8(L % 4) + k of sub-block
 *    2c (c = L / 4), its high nibbles the elements 32 further, of
 *    sub-block 2c + 1.
 *  - Q6_K (1680 bytes = 8 x 210): the 8 d[r] at ST_R8_Q6K_D, scales
 *    0..7 of row r at ST_R8_Q6K_SC_LO + 8r, scales 8..15 at
 *    ST_R8_Q6K_SC_HI + 8r, then 24 lines of 64 bytes, each holding one
 *    8-byte piece of each row (byte 8r + k of a line = byte 8j + k of the
 *    row's ql or qh), in the order a product reads them: for h = 0, 1 and
 *    lq = 0..3, qh piece 4h + lq, then the ql pieces 8h + lq and 8h + 4 +
 *    lq it completes (ST_R8_Q6K_QH(j), ST_R8_Q6K_QL(j): their offsets).
 *  - Q4_1, Q5_0, Q5_1, IQ4_NL (8 x 20, 22, 24, 18 bytes): the 8 d[r]
 *    (f16) at 0, then (Q4_1, Q5_1) the 8 m[r] at ST_R8_LG_M, (Q5_0, Q5_1)
 *    the 8 qh[r] (4 bytes each) at ST_R8_LG_QH(t), then the 8 rows' 16
 *    nibble bytes side by side at ST_R8_LG_QS(t) + 16r.
 *  - IQ4_XS (8 x 136): the 8 d[r] at 0, the 8 scales_h[r] at
 *    ST_R8_XS_SH, the 8 scales_l[r] (4 bytes each) at ST_R8_XS_SL, then
 *    per sub-block s the 8 rows' 16 nibble bytes side by side at
 *    ST_R8_XS_QS + 128 s + 16 r.
 *    (These five keep each row's bytes whole: the products still unpack
 *    rows, but read one stream and load the 8 rows' scales at once.)
 * A chunk vector lines up the 8 rows' products with the same 4 (Q4_K: 8)
 * activation bytes, so one broadcast of those bytes feeds 8 output rows at
 * once and each output row stays in its own lane (Q4_K: its two lanes):
 * no horizontal sums across rows. */
#ifndef ST_KERNELS_REPACK_H
#define ST_KERNELS_REPACK_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

#define ST_R8_ROWS 8 /* rows per group */

/* Offsets inside a Q4_K group block (see above). */
#define ST_R8_Q4K_D 0     /* 8 f16 d */
#define ST_R8_Q4K_DMIN 16 /* 8 f16 dmin */
#define ST_R8_Q4K_SC8 32  /* 8 x scale bytes 0..7 */
#define ST_R8_Q4K_SC4 96  /* 8 x scale bytes 8..11 */
#define ST_R8_Q4K_QS 128  /* 16 lines of 64 quant bytes */

/* Offsets inside a Q6_K group block (see above). */
#define ST_R8_Q6K_D 0       /* 8 f16 d */
#define ST_R8_Q6K_SC_LO 16  /* 8 x scales 0..7 */
#define ST_R8_Q6K_SC_HI 80  /* 8 x scales 8..15 */
#define ST_R8_Q6K_LINES 144 /* 24 lines of 64 quant bytes */
#define ST_R8_Q6K_LINE 64   /* bytes of a line */
/* the line of qh piece j (0..7) and of ql piece j (0..15) */
#define ST_R8_Q6K_QH(j) (ST_R8_Q6K_LINES + ST_R8_Q6K_LINE * (12 * ((j) / 4) + 3 * ((j) % 4)))
#define ST_R8_Q6K_QL(j)                                                                            \
    (ST_R8_Q6K_LINES + ST_R8_Q6K_LINE * (12 * ((j) / 8) + 3 * ((j) % 4) + 1 + ((j) % 8) / 4))

/* Offsets inside a Q4_1 / Q5_0 / Q5_1 / IQ4_NL group block (see above). */
#define ST_R8_LG_M 16 /* 8 f16 m (Q4_1, Q5_1) */
/* 8 x 4 bytes of qh (Q5_0, Q5_1) */
#define ST_R8_LG_QH(t) ((t) == ST_DT_Q5_1 ? 32 : 16)
/* 8 x 16 nibble bytes */
#define ST_R8_LG_QS(t)                                                                             \
    ((t) == ST_DT_Q5_1 ? 64 : (t) == ST_DT_Q5_0 ? 48 : (t) == ST_DT_Q4_1 ? 32 : 16)

/* Offsets inside an IQ4_XS group block (see above). */
#define ST_R8_XS_SH 16 /* 8 x scales_h */
#define ST_R8_XS_SL 32 /* 8 x scales_l[4] */
#define ST_R8_XS_QS 64 /* per sub-block 8 x 16 nibble bytes */

/* st_r8_supported - whether dtype t has an R8 layout (Q8_0, Q4_0, Q4_K,
 * Q6_K, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS). */
int st_r8_supported(st_dtype t);

/* st_r8_repack - writes the R8 layout of the plain matrix src (rows rows of
 * row_bytes bytes of n elements of t) to dst, which holds rows * row_bytes
 * bytes and must not overlap src. Returns ST_K_ETYPE if t has no R8
 * layout, ST_K_ESHAPE if rows is not a multiple of 8 or row_bytes does not
 * match n; dst is untouched then. Groups are independent: a slice of whole
 * groups (src and dst advanced by 8 g row_bytes, rows a multiple of 8) can
 * be repacked alone, by one thread each. */
int st_r8_repack(st_dtype t, int64_t n, const void *src, size_t row_bytes, int64_t rows, void *dst);

/* st_r8_gather - block b of row i of an R8 matrix of t (w at row 0, plain
 * row size row_bytes), written to out as the plain block (t's block bytes:
 * 34 for Q8_0, ..., 210 for Q6_K; b counts t's blocks). t must have an R8
 * layout. */
void st_r8_gather(st_dtype t, const void *w, size_t row_bytes, int64_t i, int64_t b, void *out);

/* st_r8_groups_fn - a SIMD variant's R8 product of t over whole groups
 * [g0, g1) (rows [8 g0, 8 g1)); the other arguments as mul_mat_r8's. */
typedef void st_r8_groups_fn(st_dtype t, int64_t n, const void *w, size_t w_stride, int64_t g0,
                             int64_t g1, const void *x, size_t x_stride, int64_t nx, float *y,
                             int64_t y_stride);

/* st_r8_mul_mat_groups - the mul_mat_r8 contract for rows [i0, i1) of t,
 * built from a variant's whole-group product: the whole groups inside
 * [i0, i1) by groups, the rows outside them (a range's last partial group)
 * by the reference's R8 product, which gives the same bits. Every SIMD
 * mul_mat_r8 entry is this with its own groups. */
void st_r8_mul_mat_groups(st_dtype t, st_r8_groups_fn *groups, int64_t n, const void *w,
                          size_t w_stride, int64_t i0, int64_t i1, const void *x, size_t x_stride,
                          int64_t nx, float *y, int64_t y_stride);

#endif
