/* repack.c - the R8 layout (see repack.h): scalar, deterministic, the one
 * definition of the byte order that every R8 kernel reads. */
#include "kernels/repack.h"

#include <string.h>

/* r8_group_block_bytes - bytes of one group block of t (8 plain blocks). */
static size_t r8_group_block_bytes(st_dtype t)
{
    return ST_R8_ROWS * st_dtype_info_of(t)->blck_bytes;
}

/* r8_q4 - the 4-bit quant (0..15) of element e of a plain Q4_0 block. */
static uint8_t r8_q4(const st_block_q4_0 *b, int e)
{
    return e < ST_QK / 2 ? (uint8_t)(b->qs[e] & 0x0f) : (uint8_t)(b->qs[e - ST_QK / 2] >> 4);
}

int st_r8_supported(st_dtype t) { return t == ST_DT_Q8_0 || t == ST_DT_Q4_0; }

int st_r8_repack(st_dtype t, int64_t n, const void *src, size_t row_bytes, int64_t rows,
                 void *dst)
{
    if (!st_r8_supported(t))
        return ST_K_ETYPE;
    size_t rb;
    if (st_row_size(t, n, &rb) != ST_K_OK || rb != row_bytes || rows < 0 ||
        rows % ST_R8_ROWS != 0)
        return ST_K_ESHAPE;
    const int64_t nb = n / ST_QK;
    const size_t gbb = r8_group_block_bytes(t);
    const uint8_t *s = src;
    uint8_t *d = dst;
    for (int64_t g = 0; g < rows / ST_R8_ROWS; g++) {
        const uint8_t *sg = s + (size_t)g * ST_R8_ROWS * row_bytes;
        uint8_t *dg = d + (size_t)g * ST_R8_ROWS * row_bytes;
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *o = dg + (size_t)b * gbb;
            for (int r = 0; r < ST_R8_ROWS; r++) {
                const uint8_t *blk = sg + (size_t)r * row_bytes + (size_t)b * (gbb / ST_R8_ROWS);
                memcpy(o + 2 * r, blk, 2); /* the f16 scale */
                if (t == ST_DT_Q8_0) {
                    const st_block_q8_0 *q = (const st_block_q8_0 *)(const void *)blk;
                    for (int c = 0; c < 8; c++)
                        memcpy(o + 16 + 32 * c + 4 * r, q->qs + 4 * c, 4);
                } else {
                    st_block_q4_0 q;
                    memcpy(&q, blk, sizeof q);
                    for (int v = 0; v < 4; v++)
                        for (int k = 0; k < 4; k++)
                            o[16 + 32 * v + 4 * r + k] =
                                (uint8_t)(r8_q4(&q, 4 * v + k) | r8_q4(&q, 16 + 4 * v + k) << 4);
                }
            }
        }
    }
    return ST_K_OK;
}

/* r8_block_at - group block b of the group holding row i, and i's place r. */
static const uint8_t *r8_block_at(const void *w, size_t row_bytes, int64_t i, int64_t b,
                                  size_t gbb, int *r)
{
    const int64_t g = i / ST_R8_ROWS;
    *r = (int)(i % ST_R8_ROWS);
    return (const uint8_t *)w + (size_t)g * ST_R8_ROWS * row_bytes + (size_t)b * gbb;
}

void st_r8_gather_q8_0(const void *w, size_t row_bytes, int64_t i, int64_t b, st_block_q8_0 *out)
{
    int r;
    const uint8_t *o = r8_block_at(w, row_bytes, i, b, r8_group_block_bytes(ST_DT_Q8_0), &r);
    memcpy(&out->d, o + 2 * r, 2);
    for (int c = 0; c < 8; c++)
        memcpy(out->qs + 4 * c, o + 16 + 32 * c + 4 * r, 4);
}

void st_r8_gather_q4_0(const void *w, size_t row_bytes, int64_t i, int64_t b, st_block_q4_0 *out)
{
    int r;
    const uint8_t *o = r8_block_at(w, row_bytes, i, b, r8_group_block_bytes(ST_DT_Q4_0), &r);
    memcpy(&out->d, o + 2 * r, 2);
    uint8_t q[ST_QK];
    for (int v = 0; v < 4; v++)
        for (int k = 0; k < 4; k++) {
            const uint8_t byte = o[16 + 32 * v + 4 * r + k];
            q[4 * v + k] = byte & 0x0f;
            q[16 + 4 * v + k] = byte >> 4;
        }
    for (int e = 0; e < ST_QK / 2; e++)
        out->qs[e] = (uint8_t)(q[e] | q[e + ST_QK / 2] << 4);
}
