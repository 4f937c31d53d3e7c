/* minfo.h - what the coordinator needs to know about a model, read from
 * its GGUF metadata and tensor table only (the coordinator never links the
 * stage engine): the hyperparameters that bound requests, and the bytes
 * per layer that placement divides among workers. */
#ifndef ST_COORD_MINFO_H
#define ST_COORD_MINFO_H

#include <stdint.h>

#include "common/err.h"
#include "common/gguf.h"

typedef struct st_minfo {
    uint32_t n_layer;
    uint32_t n_embd;
    uint32_t n_head;
    uint32_t n_head_kv;
    uint32_t n_vocab;
    uint32_t n_ctx_train;
    uint64_t kv_bytes_per_token_layer; /* K and V, f32: 2 * kv_dim * 4 */
    uint64_t *layer_bytes;             /* [n_layer]: weights of blk.L.* */
    uint64_t embd_bytes;               /* token_embd.weight */
    uint64_t head_bytes;               /* output_norm + output (or the tied embedding) */
    uint64_t total_bytes;              /* every tensor */
    char dtype[8];                     /* weight dtype with the most layer bytes */
    uint8_t model_id[32];
    char name[128];                    /* general.name, or "" */
} st_minfo;

/* st_minfo_from_gguf - reads g's hyperparameters (a supported
 * architecture of common/arch.h; block_count,
 * embedding_length, head counts, context_length, vocab_size or the
 * embedding's ne[1]) and sums tensor bytes per layer. ST_EMISSING /
 * ST_ETYPE / ST_ERANGE / ST_ESHAPE name the key or tensor at fault. */
st_err st_minfo_from_gguf(const st_gguf *g, st_minfo *out);

/* st_minfo_free - frees the per-layer table; a zeroed struct is a no-op. */
void st_minfo_free(st_minfo *m);

#endif
