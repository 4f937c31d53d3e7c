/* kv.h - the KV cache of one session for the layers of one stage.
 *
 * Keys and values are stored in the cache's dtype (f32, f16 or Q8_0: see
 * st_kv_bytes in common/model/llama.h for the choice and its default),
 * laid out per layer as [n_ctx][row_bytes], a row being the kv_dim =
 * n_head_kv * head_dim values of one position in that dtype (Q8_0: kv_dim
 * / 32 blocks, head_dim a multiple of 32 so no block spans two heads). One
 * KV head of consecutive positions is a strided run of rows. The stage
 * converts a new k/v row with the kernels' from_float of the dtype. The
 * cache records how many positions are filled; a forward pass may append at
 * n_filled or rewrite from an earlier position (teacher forcing,
 * re-prefill), never leave a gap. Its size is st_kv_bytes, the one count
 * the coordinator reserves. */
#ifndef ST_KV_H
#define ST_KV_H

#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/model/llama.h" /* st_kv_bytes: the bytes of a cache */
#include "kernels/kernels.h"

typedef struct st_kv {
    int64_t n_layers; /* layers of the owning stage */
    int64_t n_ctx;    /* positions */
    int64_t kv_dim;   /* values per position per layer */
    int64_t head_dim; /* values per KV head */
    int64_t n_filled; /* positions [0, n_filled) hold valid entries */
    st_dtype dtype;   /* ST_DT_F32, ST_DT_F16 or ST_DT_Q8_0 */
    size_t row_bytes; /* bytes of one position's kv_dim values in dtype */
    size_t head_bytes; /* bytes of one KV head's head_dim values in dtype */
    uint8_t *k;       /* [n_layers][n_ctx][row_bytes] */
    uint8_t *v;       /* [n_layers][n_ctx][row_bytes] */
} st_kv;

/* st_kv_alloc - a zeroed cache of dtype t; ST_EINVAL naming the cache type
 * when t is not one (st_kv_dtype_check), ST_ENOMEM (with the bytes asked)
 * if the allocation fails, ST_EOVERFLOW if the size does not fit. */
st_err st_kv_alloc(int64_t n_layers, int64_t n_ctx, int64_t kv_dim, int64_t head_dim, st_dtype t,
                   st_kv **out);

/* st_kv_row - byte offset of layer li's row at position pos in k or v. */
static inline size_t st_kv_row(const st_kv *kv, int64_t li, int64_t pos)
{
    return ((size_t)li * (size_t)kv->n_ctx + (size_t)pos) * kv->row_bytes;
}

/* st_kv_free - frees; NULL is a no-op. */
void st_kv_free(st_kv *kv);

/* st_kv_reset - forgets every position (the memory is reused). */
void st_kv_reset(st_kv *kv);

#endif
