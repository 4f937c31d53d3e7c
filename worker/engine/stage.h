/* stage.h - the forward pass of a layer range over a batch of rows.
 *
 * A batch holds rows of different sessions; a row is n_tok consecutive
 * tokens of one session starting at position pos (a decode row has one
 * token, a prefill chunk up to the chunk size). The stage runs its layers
 * [first, last) over all tokens of all rows at once: one pass over each
 * weight matrix serves every row, attention of each token reads only its
 * own session's KV. Every token's result is bit-identical whatever batch
 * it is in, its place there, the chunking of its prompt and the thread
 * count (INV-7): matrix products split the work by output rows, attention
 * by (token, head), and no reduction is ever split.
 *
 * Input: on the first stage, token ids (rows[i].tokens); otherwise the
 * hidden states [n_tokens][n_embd] from the previous stage. Output: the
 * hidden states [n_tokens][n_embd] after layer last-1, or, on the last
 * stage with ST_OUT_LOGITS, the logits [n_out][n_vocab] of each row's last
 * token (or of every token when the row asks for all_logits).
 *
 * A context owns the scratch for up to max_tokens tokens per batch; no
 * allocation happens per batch. One context is driven by one thread. */
#ifndef ST_STAGE_H
#define ST_STAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/base/pool.h"
#include "kernels/kernels.h"
#include "worker/engine/kv.h"
#include "worker/engine/model.h"

typedef struct st_batch_row {
    st_kv *kv;             /* this session's cache for this stage's layers */
    int64_t pos;           /* position of the row's first token */
    int64_t n_tok;         /* tokens in the row (>= 1) */
    const int32_t *tokens; /* [n_tok] ids; required on the first stage */
    bool all_logits;       /* logits for every token, not only the last */
} st_batch_row;

typedef enum st_stage_out {
    ST_OUT_HIDDEN = 0, /* hidden states after the last layer of the stage */
    ST_OUT_LOGITS = 1, /* logits (last stage only) */
} st_stage_out;

/* A hook called after every layer with the residual stream (the hidden
 * states, [n_tok][n_embd]); it may modify them (wire emulation, dumps). */
typedef void (*st_layer_hook)(void *arg, int64_t layer, float *hidden, int64_t n_tok,
                              int64_t n_embd);

typedef struct st_stage_ctx st_stage_ctx;

/* st_stage_ctx_open - scratch for batches of up to max_tokens tokens of
 * model m, run on pool with kernels ops. m, pool and ops are borrowed. */
st_err st_stage_ctx_open(const st_model *m, int64_t max_tokens, st_pool *pool,
                         const st_kernel_ops *ops, st_stage_ctx **out);

/* st_stage_ctx_close - frees; NULL is a no-op. */
void st_stage_ctx_close(st_stage_ctx *c);

/* st_stage_set_hook - installs (or with NULL removes) a layer hook. */
void st_stage_set_hook(st_stage_ctx *c, st_layer_hook hook, void *arg);

/* st_stage_kv_alloc - a KV cache of n_ctx positions for this stage, of
 * dtype t (st_kv_alloc: f32, f16 or q8_0, q8_0 only for a head dimension
 * that is a multiple of 32, refused by name otherwise). */
st_err st_stage_kv_alloc(const st_stage_ctx *c, int64_t n_ctx, st_dtype t, st_kv **out);

/* st_stage_expert_counts - *out: the tokens this context has routed to
 * each of the n_expert experts of layer (a layer of the stage), since it
 * was opened ([n_expert], valid while the context lives; it changes with
 * each st_stage_forward, so read it between passes). ST_EINVAL for a
 * dense model, ST_ERANGE for a layer outside the stage. */
st_err st_stage_expert_counts(const st_stage_ctx *c, int64_t layer, const uint64_t **out);

/* st_stage_n_out - floats st_stage_forward writes for these rows. */
size_t st_stage_n_out(const st_stage_ctx *c, const st_batch_row *rows, size_t n_rows,
                      st_stage_out mode);

/* st_stage_forward - runs the stage over the batch (see the file comment).
 * Checks before computing: rows non-empty and within max_tokens, token ids
 * within the vocabulary, positions within each cache and without gaps, a
 * session at most once per batch, out_cap large enough. On success each
 * row's cache has n_filled = pos + n_tok. */
st_err st_stage_forward(st_stage_ctx *c, const st_batch_row *rows, size_t n_rows, const float *in,
                        st_stage_out mode, float *out, size_t out_cap);

#endif
