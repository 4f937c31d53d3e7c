/* embed_local.h - the ends of a model without its layers: the token
 * embedding, the output norm and head, and the tokenizer, computed by the
 * stage engine as stages of no layers ([0, 0) and [n_layer, n_layer),
 * worker/engine/model.h), so their results are bit-identical to those of a
 * whole-model run (`strata run`). Used by the client library (the ends of
 * a chain of shard servers, include/strata.h) and the embedding service.
 * Only token_embd, output_norm and output (or the tied embedding) are
 * touched. One thread at a time. */
#ifndef ST_WORKER_EMBED_LOCAL_H
#define ST_WORKER_EMBED_LOCAL_H

#include <stdbool.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/model/llama.h"
#include "common/text/tokenizer.h"

/* bytes of a model id (BLAKE2b of the metadata and tensor table) */
#define ST_ENDS_ID_BYTES 32
/* tokens per engine pass of the embedding or the head */
#define ST_ENDS_MAX_TOKENS 128

typedef struct st_ends st_ends;

/* st_ends_open - maps path and binds the embedding (embd) and/or the head
 * (head), with the tokenizer (neither: the tokenizer alone, for a client
 * whose ends are remote); threads 0: the cores. */
st_err st_ends_open(const char *path, int threads, bool force_ref, bool embd, bool head,
                    st_ends **out);

/* st_ends_close - frees; NULL is a no-op. */
void st_ends_close(st_ends *e);

const st_hparams *st_ends_hparams(const st_ends *e);
const st_tokenizer *st_ends_tok(const st_ends *e);
/* st_ends_model_id - the model id (32 bytes), as shard servers give it. */
const uint8_t *st_ends_model_id(const st_ends *e);
/* st_ends_kernels - the kernel variant's name. */
const char *st_ends_kernels(const st_ends *e);

/* st_ends_embed - the embedding rows of ids[0..n) into out[n][n_embd];
 * ST_ERANGE for an id outside the vocabulary. */
st_err st_ends_embed(st_ends *e, const int32_t *ids, int64_t n, float *out);

/* st_ends_logits - the output norm and head applied to the n final hidden
 * states hidden[n][n_embd]: out[n][n_vocab]. */
st_err st_ends_logits(st_ends *e, const float *hidden, int64_t n, float *out);

#endif
