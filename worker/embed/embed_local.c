/* embed_local.c - a model's ends on the stage engine (see embed_local.h).
 *
 * Each end is a stage of no layers: the engine's forward pass of [0, 0)
 * embeds token ids (and returns the rows), that of [n_layer, n_layer)
 * applies the output norm and head to hidden states given as input. Such
 * a stage has no KV cache; the engine still checks a row's positions
 * against one, so each pass hands it an empty cache header of no layers
 * (no memory behind it: nothing is stored for zero layers). */
#include "worker/embed/embed_local.h"

#include <stdlib.h>
#include <string.h>

#include "common/model/gguf.h"
#include "worker/engine/stage.h"

struct st_ends {
    st_gguf *g;
    st_model *embd, *head; /* either may be NULL */
    st_stage_ctx *ectx, *hctx;
    st_pool *pool;
    const st_kernel_ops *ops;
    st_tokenizer *tok;
    st_hparams hp;
    uint8_t id[ST_ENDS_ID_BYTES];
};

st_err st_ends_open(const char *path, int threads, bool force_ref, bool embd, bool head,
                    st_ends **out)
{
    *out = NULL;
    st_ends *x = calloc(1, sizeof *x);
    if (x == NULL)
        return st_errorf(ST_ENOMEM, "model ends");
    x->ops = st_kernels_select(force_ref);
    st_err e;
    if ((e = st_gguf_open(path, &x->g)) || (e = st_hparams_from_gguf(x->g, &x->hp)) ||
        (e = st_tok_from_gguf(x->g, &x->tok)) || (e = st_pool_open(threads, 1, &x->pool)))
        goto fail;
    const int64_t L = x->hp.n_layer;
    if (embd && ((e = st_model_open_gguf(x->g, 0, 0, &x->embd)) ||
                 (e = st_stage_ctx_open(x->embd, ST_ENDS_MAX_TOKENS, x->pool, x->ops, &x->ectx))))
        goto fail;
    if (head && ((e = st_model_open_gguf(x->g, L, L, &x->head)) ||
                 (e = st_model_place(x->head, x->ops, x->pool)) ||
                 (e = st_stage_ctx_open(x->head, ST_ENDS_MAX_TOKENS, x->pool, x->ops, &x->hctx))))
        goto fail;
    if ((e = st_gguf_model_id(x->g, x->id)) != ST_OK)
        goto fail;
    *out = x;
    return ST_OK;
fail:
    st_ends_close(x);
    return e;
}

void st_ends_close(st_ends *x)
{
    if (x == NULL)
        return;
    st_stage_ctx_close(x->ectx);
    st_stage_ctx_close(x->hctx);
    st_model_close(x->embd);
    st_model_close(x->head);
    st_pool_close(x->pool);
    st_tok_free(x->tok);
    st_gguf_close(x->g);
    free(x);
}

const st_hparams *st_ends_hparams(const st_ends *x) { return &x->hp; }
const st_tokenizer *st_ends_tok(const st_ends *x) { return x->tok; }
const uint8_t *st_ends_model_id(const st_ends *x) { return x->id; }
const char *st_ends_kernels(const st_ends *x) { return x->ops->name; }

/* ends_pass - one pass of n <= ST_ENDS_MAX_TOKENS tokens through ctx. */
static st_err ends_pass(st_ends *x, st_stage_ctx *ctx, const int32_t *ids, const float *in,
                        int64_t n, st_stage_out mode, float *out, size_t cap)
{
    st_kv none = {.n_layers = 0, .n_ctx = n, .kv_dim = x->hp.kv_dim, .n_filled = 0};
    st_batch_row row = {.kv = &none, .pos = 0, .n_tok = n, .tokens = ids, .all_logits = true};
    return st_stage_forward(ctx, &row, 1, in, mode, out, cap);
}

st_err st_ends_embed(st_ends *x, const int32_t *ids, int64_t n, float *out)
{
    if (x->ectx == NULL)
        return st_errorf(ST_EINVAL, "the embedding is not loaded");
    const size_t w = (size_t)x->hp.n_embd;
    for (int64_t d = 0; d < n; d += ST_ENDS_MAX_TOKENS) {
        int64_t k = n - d < ST_ENDS_MAX_TOKENS ? n - d : ST_ENDS_MAX_TOKENS;
        st_err e = ends_pass(x, x->ectx, ids + d, NULL, k, ST_OUT_HIDDEN, out + (size_t)d * w,
                             (size_t)k * w);
        if (e != ST_OK)
            return e;
    }
    return ST_OK;
}

st_err st_ends_logits(st_ends *x, const float *hidden, int64_t n, float *out)
{
    if (x->hctx == NULL)
        return st_errorf(ST_EINVAL, "the head is not loaded");
    const size_t w = (size_t)x->hp.n_embd, v = (size_t)x->hp.n_vocab;
    for (int64_t d = 0; d < n; d += ST_ENDS_MAX_TOKENS) {
        int64_t k = n - d < ST_ENDS_MAX_TOKENS ? n - d : ST_ENDS_MAX_TOKENS;
        st_err e = ends_pass(x, x->hctx, NULL, hidden + (size_t)d * w, k, ST_OUT_LOGITS,
                             out + (size_t)d * v, (size_t)k * v);
        if (e != ST_OK)
            return e;
    }
    return ST_OK;
}
