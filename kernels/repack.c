/* repack.c - the R8 layout (see repack.h): scalar, deterministic, the one
 * definition of the byte order that every R8 kernel reads. Both dtypes
 * move whole 4-byte pieces: Q8_0 chunk c = qs[4c..4c+3], Q4_0 vector v =
 * qs[4v..4v+3] (whose low nibbles are elements 4v.. and high nibbles
 * elements 16 + 4v..). Any range of whole groups can be repacked alone
 * (groups are independent and keep their offsets), so callers may split
 * the work between threads. */
#include "kernels/repack.h"

#include <string.h>

/* r8_group_block_bytes - bytes of one group block of t (8 plain blocks). */
static size_t r8_group_block_bytes(st_dtype t)
{
    return ST_R8_ROWS * st_dtype_info_of(t)->blck_bytes;
}

int st_r8_supported(st_dtype t) { return t == ST_DT_Q8_0 || t == ST_DT_Q4_0; }

int st_r8_repack(st_dtype t, int64_t n, const void *src, size_t row_bytes, int64_t rows, void *dst)
{
    if (!st_r8_supported(t))
        return ST_K_ETYPE;
    size_t rb;
    if (st_row_size(t, n, &rb) != ST_K_OK || rb != row_bytes || rows < 0 || rows % ST_R8_ROWS != 0)
        return ST_K_ESHAPE;
    const int64_t nb = n / ST_QK;
    const size_t gbb = r8_group_block_bytes(t);
    const int nchunk = (int)((gbb / ST_R8_ROWS - 2) / 4); /* Q8_0: 8, Q4_0: 4 */
    const uint8_t *s = src;
    uint8_t *d = dst;
    for (int64_t g = 0; g < rows / ST_R8_ROWS; g++) {
        const uint8_t *sg = s + (size_t)g * ST_R8_ROWS * row_bytes;
        uint8_t *dg = d + (size_t)g * ST_R8_ROWS * row_bytes;
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *o = dg + (size_t)b * gbb;
            for (int r = 0; r < ST_R8_ROWS; r++) {
                const uint8_t *blk = sg + (size_t)r * row_bytes + (size_t)b * (gbb / ST_R8_ROWS);
                memcpy(o + 2 * r, blk, 2);       /* the f16 scale */
                for (int c = 0; c < nchunk; c++) /* 4 quant bytes per chunk */
                    memcpy(o + 16 + 32 * c + 4 * r, blk + 2 + 4 * c, 4);
            }
        }
    }
    return ST_K_OK;
}

/* r8_block_at - group block b of the group holding row i, and i's place r. */
static const uint8_t *r8_block_at(const void *w, size_t row_bytes, int64_t i, int64_t b, size_t gbb,
                                  int *r)
{
    const int64_t g = i / ST_R8_ROWS;
    *r = (int)(i % ST_R8_ROWS);
    return (const uint8_t *)w + (size_t)g * ST_R8_ROWS * row_bytes + (size_t)b * gbb;
}

void st_r8_gather(st_dtype t, const void *w, size_t row_bytes, int64_t i, int64_t b, void *out)
{
    const size_t gbb = r8_group_block_bytes(t);
    const int nchunk = (int)((gbb / ST_R8_ROWS - 2) / 4);
    int r;
    const uint8_t *o = r8_block_at(w, row_bytes, i, b, gbb, &r);
    uint8_t *d = out;
    memcpy(d, o + 2 * r, 2); /* the scale */
    for (int c = 0; c < nchunk; c++)
        memcpy(d + 2 + 4 * c, o + 16 + 32 * c + 4 * r, 4);
}
