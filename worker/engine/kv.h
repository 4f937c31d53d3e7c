/* kv.h - the KV cache of one session for the layers of one stage.
 *
 * Keys and values are f32, laid out per layer as [n_ctx][kv_dim] (kv_dim =
 * n_head_kv * head_dim), so one KV head of consecutive positions is a
 * strided run of rows. The cache records how many positions are filled;
 * a forward pass may append at n_filled or rewrite from an earlier
 * position (teacher forcing, re-prefill), never leave a gap. Its size is
 * st_kv_bytes (common/model/llama.h), the one count the coordinator reserves. */
#ifndef ST_KV_H
#define ST_KV_H

#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/model/llama.h" /* st_kv_bytes: the bytes of a cache */

typedef struct st_kv {
    int64_t n_layers; /* layers of the owning stage */
    int64_t n_ctx;    /* positions */
    int64_t kv_dim;   /* floats per position per layer */
    int64_t n_filled; /* positions [0, n_filled) hold valid entries */
    float *k;         /* [n_layers][n_ctx][kv_dim] */
    float *v;         /* [n_layers][n_ctx][kv_dim] */
} st_kv;

/* st_kv_alloc - a zeroed cache; ST_ENOMEM (with the bytes asked) if the
 * allocation fails, ST_EOVERFLOW if the size does not fit. */
st_err st_kv_alloc(int64_t n_layers, int64_t n_ctx, int64_t kv_dim, st_kv **out);

/* st_kv_free - frees; NULL is a no-op. */
void st_kv_free(st_kv *kv);

/* st_kv_reset - forgets every position (the memory is reused). */
void st_kv_reset(st_kv *kv);

#endif
