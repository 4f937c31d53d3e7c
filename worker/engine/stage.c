/* stage.c - the forward pass of a stage (see stage.h).
 *
 * A batch is processed as a sequence of fork-join phases on the pool; each
 * phase splits its items between threads and never splits a reduction:
 *   pre         per token   the residual add, rmsnorm or silu that feeds a
 *                           product, fused with the conversion of its input
 *                           to the weight's activation dtype
 *   matmul      per group of 8 output rows of W, for all tokens at once
 *               (chunks of groups claimed from a counter, not halved
 *               ahead of time: see STAGE_CHUNKS_PER_THREAD)
 *   rope+store  per token   add the q/k/v biases (qwen2), rotate q and k
 *                           (normal or NEOX pairing), write k and v into
 *                           the KV cache
 *   attention   per (token, head) against the token's own session's cache
 * A layer is 10 phases: pre, qkv, rope, attention, convert, o,
 * add+norm+convert, gate/up, silu+convert, down; the add ending a layer
 * runs in the next layer's first phase (or alone after the last layer, or
 * when a layer hook must see the residual stream). Fusing changes which
 * phase runs a step, never the step: every element is still computed by
 * one thread in one fixed order, so the result of a token does not depend
 * on the batch, its place in it, the chunking of a prompt or the number of
 * threads (INV-7).
 *
 * Scratch buffers are allocated once per context for max_tokens tokens;
 * the per-thread attention scores for the model's context length. */
#include "worker/engine/stage.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define STAGE_MAX_MM 3

typedef struct stage_mm {
    const st_weight *w;
    float *y; /* [n_tok][w->n_out] */
} stage_mm;

/* Per-token work run in the same phase as the conversion of a matmul's
 * input (each token's steps in this order, by the thread owning it):
 * x += q (the residual add), xb = rmsnorm(x) * norm, g = silu(g) * u. */
typedef struct stage_pre {
    bool add;
    const float *norm;
    bool silu;
} stage_pre;

/* Rows of a matrix are dealt to threads in groups of this many (the SIMD
 * kernels work on 8 rows at once; results do not depend on the split). */
#define STAGE_ROW_GROUP 8

/* A matmul phase cuts each matrix into about this many chunks per thread
 * (contiguous runs of row groups) that the threads claim one at a time
 * from a shared counter. A static half per thread would leave one core
 * idle whenever the other thread is preempted or runs on a slower core
 * (a sidecar shares its machine; a VM's cores are not equally fast): with
 * claiming, the other thread takes the remaining chunks and the phase
 * waits for at most one chunk. Which thread computes a chunk does not
 * change its bits (the kernels' results do not depend on the row range). */
#define STAGE_CHUNKS_PER_THREAD 4

struct st_stage_ctx {
    const st_model *m;
    const st_hparams *hp;
    st_pool *pool;
    const st_kernel_ops *ops;
    int64_t max_tokens;
    int64_t max_ctx;
    int nth;
    st_layer_hook hook;
    void *hook_arg;

    /* scratch, each for max_tokens tokens */
    float *x;         /* [T][n_embd] residual stream */
    float *xb;        /* [T][max(n_embd, n_ff)] normed input / attention out / ffn act */
    float *q;         /* [T][n_embd] queries, then projection outputs */
    float *k;         /* [T][kv_dim] */
    float *v;         /* [T][kv_dim] */
    float *g;         /* [T][n_ff] gate */
    float *u;         /* [T][n_ff] up */
    uint8_t *xq;      /* [T][row bytes of max(n_embd, n_ff) in the widest activation dtype] */
    float *scores;    /* [nth][max_ctx] */
    int64_t *tok_row; /* [T] row of each token */
    int64_t *tok_pos; /* [T] position of each token */

    /* the phase being run (set by the driver thread before st_pool_run) */
    const st_batch_row *rows;
    int64_t n_tok;
    int64_t layer;
    const float *norm_w;
    const float *src;  /* phase input */
    float *dst;        /* phase output */
    int64_t width;     /* floats per token of src/dst */
    st_dtype act;      /* activation dtype of a convert phase */
    size_t act_stride; /* bytes per converted row */
    stage_mm mm[STAGE_MAX_MM];
    int n_mm;
    const int64_t *sel;  /* head: selected token indices */
    stage_pre pre;       /* per-token work fused before a convert */
    bool conv;           /* the pre phase also converts src to act */
    atomic_long mm_next; /* matmul phase: the next chunk to claim (0 at its start) */
};

static void *stage_alloc(size_t n, size_t size, bool *fail)
{
    if (*fail)
        return NULL;
    void *p = calloc(n ? n : 1, size);
    if (p == NULL)
        *fail = true;
    return p;
}

st_err st_stage_ctx_open(const st_model *m, int64_t max_tokens, st_pool *pool,
                         const st_kernel_ops *ops, st_stage_ctx **out)
{
    *out = NULL;
    const st_hparams *hp = st_model_hparams(m);
    if (max_tokens < 1 || max_tokens > (1 << 20))
        return st_errorf(ST_EINVAL, "max_tokens %lld out of range 1..2^20", (long long)max_tokens);
    st_stage_ctx *c = calloc(1, sizeof *c);
    if (c == NULL)
        return st_errorf(ST_ENOMEM, "stage context");
    c->m = m;
    c->hp = hp;
    c->pool = pool;
    c->ops = ops;
    c->max_tokens = max_tokens;
    c->max_ctx = hp->n_ctx_train;
    c->nth = st_pool_size(pool);
    size_t T = (size_t)max_tokens;
    size_t wide = (size_t)(hp->n_ff > hp->n_embd ? hp->n_ff : hp->n_embd);
    bool fail = false;
    c->x = stage_alloc(T * (size_t)hp->n_embd, sizeof(float), &fail);
    c->xb = stage_alloc(T * wide, sizeof(float), &fail);
    c->q = stage_alloc(T * (size_t)hp->n_embd, sizeof(float), &fail);
    c->k = stage_alloc(T * (size_t)hp->kv_dim, sizeof(float), &fail);
    c->v = stage_alloc(T * (size_t)hp->kv_dim, sizeof(float), &fail);
    c->g = stage_alloc(T * (size_t)hp->n_ff, sizeof(float), &fail);
    c->u = stage_alloc(T * (size_t)hp->n_ff, sizeof(float), &fail);
    c->xq = stage_alloc(T * wide, sizeof(float), &fail); /* f32 is the widest act dtype */
    c->scores = stage_alloc((size_t)c->nth * (size_t)c->max_ctx, sizeof(float), &fail);
    c->tok_row = stage_alloc(T, sizeof(int64_t), &fail);
    c->tok_pos = stage_alloc(T, sizeof(int64_t), &fail);
    if (fail) {
        st_stage_ctx_close(c);
        return st_errorf(ST_ENOMEM, "stage scratch for %lld tokens", (long long)max_tokens);
    }
    *out = c;
    return ST_OK;
}

void st_stage_ctx_close(st_stage_ctx *c)
{
    if (c == NULL)
        return;
    free(c->x);
    free(c->xb);
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->g);
    free(c->u);
    free(c->xq);
    free(c->scores);
    free(c->tok_row);
    free(c->tok_pos);
    free(c);
}

void st_stage_set_hook(st_stage_ctx *c, st_layer_hook hook, void *arg)
{
    c->hook = hook;
    c->hook_arg = arg;
}

st_err st_stage_kv_alloc(const st_stage_ctx *c, int64_t n_ctx, st_kv **out)
{
    if (n_ctx < 1 || n_ctx > c->max_ctx)
        return st_errorf(ST_ERANGE, "KV context %lld is outside 1..%lld (the model's context)",
                         (long long)n_ctx, (long long)c->max_ctx);
    return st_kv_alloc(st_model_last(c->m) - st_model_first(c->m), n_ctx, c->hp->kv_dim, out);
}

size_t st_stage_n_out(const st_stage_ctx *c, const st_batch_row *rows, size_t n_rows,
                      st_stage_out mode)
{
    size_t n = 0;
    for (size_t i = 0; i < n_rows; i++) {
        if (mode == ST_OUT_LOGITS)
            n += rows[i].all_logits ? (size_t)rows[i].n_tok : 1;
        else
            n += (size_t)rows[i].n_tok;
    }
    return n * (size_t)(mode == ST_OUT_LOGITS ? c->hp->n_vocab : c->hp->n_embd);
}

/* ---- phases (each runs on every pool thread) ---- */

static void stage_ph_embed(void *arg, int ith, int nth)
{
    st_stage_ctx *c = arg;
    const st_weight *te = st_model_tok_embd(c->m);
    long b, e;
    st_pool_split((long)c->n_tok, ith, nth, &b, &e);
    for (long t = b; t < e; t++) {
        const st_batch_row *r = &c->rows[c->tok_row[t]];
        int32_t id = r->tokens[c->tok_pos[t] - r->pos];
        c->ops->to_float[te->dtype]((const uint8_t *)te->data + (size_t)id * te->row_bytes,
                                    c->x + t * c->hp->n_embd, c->hp->n_embd);
    }
}

/* norm: dst[t] = rmsnorm(src[sel ? sel[t] : t]) * norm_w, width n_embd */
static void stage_ph_norm(void *arg, int ith, int nth)
{
    st_stage_ctx *c = arg;
    int64_t n = c->hp->n_embd;
    long b, e;
    st_pool_split((long)c->n_tok, ith, nth, &b, &e);
    for (long t = b; t < e; t++) {
        int64_t s = c->sel ? c->sel[t] : t;
        c->ops->rmsnorm(c->src + s * n, c->norm_w, c->dst + t * n, n, c->hp->rms_eps);
    }
}

/* pre: the fused per-token steps of c->pre, then (if c->conv) the
 * conversion of src rows (width floats) to the activation dtype */
static void stage_ph_pre(void *arg, int ith, int nth)
{
    st_stage_ctx *c = arg;
    const st_hparams *hp = c->hp;
    long b, e;
    st_pool_split((long)c->n_tok, ith, nth, &b, &e);
    for (long t = b; t < e; t++) {
        float *xt = c->x + t * hp->n_embd;
        if (c->pre.add)
            c->ops->add(xt, c->q + t * hp->n_embd, hp->n_embd);
        if (c->pre.norm)
            c->ops->rmsnorm(xt, c->pre.norm, c->xb + t * hp->n_embd, hp->n_embd, hp->rms_eps);
        if (c->pre.silu)
            c->ops->silu_mul(c->g + t * hp->n_ff, c->u + t * hp->n_ff, hp->n_ff);
        if (c->conv)
            c->ops->from_float[c->act](c->src + t * c->width, c->xq + (size_t)t * c->act_stride,
                                       c->width);
    }
}

/* stage_mm_chunk - the row groups per chunk of a matrix of n_out rows
 * when nth threads share it. */
static long stage_mm_chunk(int64_t n_out, int nth)
{
    long groups = (long)((n_out + STAGE_ROW_GROUP - 1) / STAGE_ROW_GROUP);
    long parts = (long)nth * STAGE_CHUNKS_PER_THREAD;
    return nth == 1 ? groups : (groups + parts - 1) / parts;
}

static void stage_ph_matmul(void *arg, int ith, int nth)
{
    (void)ith;
    st_stage_ctx *c = arg;
    const void *x = c->act == ST_DT_F32 ? (const void *)c->src : (const void *)c->xq;
    long n_chunks[STAGE_MAX_MM], total = 0;
    for (int i = 0; i < c->n_mm; i++) {
        long groups = (long)((c->mm[i].w->n_out + STAGE_ROW_GROUP - 1) / STAGE_ROW_GROUP);
        long per = stage_mm_chunk(c->mm[i].w->n_out, nth);
        n_chunks[i] = (groups + per - 1) / per;
        total += n_chunks[i];
    }
    for (;;) {
        long k = atomic_fetch_add_explicit(&c->mm_next, 1, memory_order_relaxed);
        if (k >= total)
            return;
        int i = 0;
        while (k >= n_chunks[i])
            k -= n_chunks[i++];
        const st_weight *w = c->mm[i].w;
        long per = stage_mm_chunk(w->n_out, nth) * STAGE_ROW_GROUP;
        long b = k * per, e = b + per < (long)w->n_out ? b + per : (long)w->n_out;
        (w->r8 ? c->ops->mul_mat_r8 : c->ops->mul_mat)[w->dtype](w->n_in, w->data, w->row_bytes, b,
                                                                 e, x, c->act_stride, c->n_tok,
                                                                 c->mm[i].y, w->n_out);
    }
}

static void stage_ph_rope_store(void *arg, int ith, int nth)
{
    st_stage_ctx *c = arg;
    const st_hparams *hp = c->hp;
    int64_t li = c->layer - st_model_first(c->m);
    long b, e;
    st_pool_split((long)c->n_tok, ith, nth, &b, &e);
    const st_layer *L = st_model_layer(c->m, c->layer);
    const bool neox = hp->rope == ST_ROPE_NEOX;
    for (long t = b; t < e; t++) {
        int64_t pos = c->tok_pos[t];
        float *qt = c->q + t * hp->n_embd;
        float *kt = c->k + t * hp->kv_dim;
        float *vt = c->v + t * hp->kv_dim;
        if (L->bq != NULL)
            c->ops->add(qt, L->bq, hp->n_embd);
        if (L->bk != NULL)
            c->ops->add(kt, L->bk, hp->kv_dim);
        if (L->bv != NULL)
            c->ops->add(vt, L->bv, hp->kv_dim);
        (neox ? c->ops->rope_neox : c->ops->rope)(qt, hp->n_head, hp->head_dim, hp->n_rot, pos,
                                                  hp->rope_base);
        (neox ? c->ops->rope_neox : c->ops->rope)(kt, hp->n_head_kv, hp->head_dim, hp->n_rot, pos,
                                                  hp->rope_base);
        st_kv *kv = c->rows[c->tok_row[t]].kv;
        size_t off = ((size_t)li * (size_t)kv->n_ctx + (size_t)pos) * (size_t)hp->kv_dim;
        memcpy(kv->k + off, kt, (size_t)hp->kv_dim * sizeof(float));
        memcpy(kv->v + off, vt, (size_t)hp->kv_dim * sizeof(float));
    }
}

static void stage_ph_attn(void *arg, int ith, int nth)
{
    st_stage_ctx *c = arg;
    const st_hparams *hp = c->hp;
    int64_t li = c->layer - st_model_first(c->m);
    int64_t group = hp->n_head / hp->n_head_kv;
    float scale = 1.0f / sqrtf((float)hp->head_dim);
    float *scores = c->scores + (size_t)ith * (size_t)c->max_ctx;
    long b, e;
    st_pool_split((long)(c->n_tok * hp->n_head), ith, nth, &b, &e);
    for (long it = b; it < e; it++) {
        int64_t t = it / hp->n_head, h = it % hp->n_head;
        st_kv *kv = c->rows[c->tok_row[t]].kv;
        size_t base = (size_t)li * (size_t)kv->n_ctx * (size_t)hp->kv_dim +
                      (size_t)(h / group) * (size_t)hp->head_dim;
        c->ops->attn_head(c->q + t * hp->n_embd + h * hp->head_dim, kv->k + base, kv->v + base,
                          hp->kv_dim, c->tok_pos[t] + 1, hp->head_dim, scale, scores,
                          c->xb + t * hp->n_embd + h * hp->head_dim);
    }
}

/* ---- drivers ---- */

static void stage_run(st_stage_ctx *c, st_pool_fn fn) { st_pool_run(c->pool, fn, c); }

/* stage_matmuls - y_i = src W_i^T for the n weights (all with n_in =
 * width), converting src once per activation dtype. The per-token steps
 * of pre run first, fused into the first conversion phase (or alone when
 * the first group needs no conversion). */
static void stage_matmuls(st_stage_ctx *c, const float *src, int64_t width, const stage_mm *mm,
                          int n, stage_pre pre)
{
    bool done[STAGE_MAX_MM] = {false};
    bool pre_done = !pre.add && pre.norm == NULL && !pre.silu;
    for (int i = 0; i < n; i++) {
        if (done[i])
            continue;
        st_dtype act = st_dtype_info_of(mm[i].w->dtype)->act;
        c->n_mm = 0;
        for (int j = i; j < n; j++) {
            if (!done[j] && st_dtype_info_of(mm[j].w->dtype)->act == act) {
                c->mm[c->n_mm++] = mm[j];
                done[j] = true;
            }
        }
        c->src = src;
        c->width = width;
        c->act = act;
        size_t rs = 0;
        st_row_size(act, width, &rs); /* checked at model open */
        c->act_stride = rs;
        c->conv = act != ST_DT_F32;
        c->pre = pre_done ? (stage_pre){0} : pre;
        if (c->conv || !pre_done)
            stage_run(c, stage_ph_pre);
        pre_done = true;
        atomic_store(&c->mm_next, 0); /* published to the threads by st_pool_run */
        stage_run(c, stage_ph_matmul);
    }
}

static void stage_norm(st_stage_ctx *c, const float *src, const float *w, float *dst)
{
    c->src = src;
    c->norm_w = w;
    c->dst = dst;
    stage_run(c, stage_ph_norm);
}

/* stage_pre_only - runs the per-token steps of pre as a phase of its own. */
static void stage_pre_only(st_stage_ctx *c, stage_pre pre)
{
    c->pre = pre;
    c->conv = false;
    stage_run(c, stage_ph_pre);
}

/* stage_layer - layer l. On entry the pending steps `in` (the previous
 * layer's residual add and this layer's attention norm, when they could be
 * fused) are still to run; returns whether the residual add of this
 * layer's FFN output is still pending (left for the next fused phase). */
static bool stage_layer(st_stage_ctx *c, int64_t l, stage_pre in, bool fuse_out)
{
    const st_hparams *hp = c->hp;
    const st_layer *L = st_model_layer(c->m, l);
    c->layer = l;
    c->sel = NULL;

    in.norm = L->attn_norm;
    stage_mm qkv[3] = {{&L->wq, c->q}, {&L->wk, c->k}, {&L->wv, c->v}};
    stage_matmuls(c, c->xb, hp->n_embd, qkv, 3, in);
    stage_run(c, stage_ph_rope_store);
    stage_run(c, stage_ph_attn);
    stage_mm o[1] = {{&L->wo, c->q}};
    stage_matmuls(c, c->xb, hp->n_embd, o, 1, (stage_pre){0});

    stage_mm gu[2] = {{&L->w_gate, c->g}, {&L->w_up, c->u}};
    stage_matmuls(c, c->xb, hp->n_embd, gu, 2, (stage_pre){.add = true, .norm = L->ffn_norm});
    stage_mm d[1] = {{&L->w_down, c->q}};
    stage_matmuls(c, c->g, hp->n_ff, d, 1, (stage_pre){.silu = true});
    if (fuse_out)
        return true;
    stage_pre_only(c, (stage_pre){.add = true});
    return false;
}

static st_err stage_check(st_stage_ctx *c, const st_batch_row *rows, size_t n_rows, const float *in,
                          st_stage_out mode, size_t out_cap, int64_t *n_tok)
{
    const st_hparams *hp = c->hp;
    int64_t n_layers = st_model_last(c->m) - st_model_first(c->m);
    if (n_rows == 0)
        return st_errorf(ST_EINVAL, "empty batch");
    if (mode == ST_OUT_LOGITS && !st_model_has_head(c->m))
        return st_errorf(ST_EINVAL, "logits asked of a stage without the output head");
    if (!st_model_has_embd(c->m) && in == NULL)
        return st_errorf(ST_EINVAL, "a stage without the embedding needs input hidden states");
    int64_t total = 0;
    for (size_t i = 0; i < n_rows; i++) {
        const st_batch_row *r = &rows[i];
        if (r->n_tok < 1 || r->n_tok > c->max_tokens)
            return st_errorf(ST_ERANGE, "row %zu: %lld tokens (1..%lld allowed)", i,
                             (long long)r->n_tok, (long long)c->max_tokens);
        total += r->n_tok;
        if (total > c->max_tokens)
            return st_errorf(ST_ERANGE, "batch of more than %lld tokens", (long long)c->max_tokens);
        if (r->kv == NULL || r->kv->n_layers != n_layers || r->kv->kv_dim != hp->kv_dim)
            return st_errorf(ST_EINVAL, "row %zu: KV cache missing or of another stage", i);
        if (r->kv->n_ctx > c->max_ctx)
            return st_errorf(ST_ERANGE, "row %zu: KV cache larger than the context", i);
        if (r->pos < 0 || r->pos > r->kv->n_filled || r->pos + r->n_tok > r->kv->n_ctx)
            return st_errorf(ST_ERANGE,
                             "row %zu: positions [%lld, %lld) do not fit the cache "
                             "(%lld filled of %lld)",
                             i, (long long)r->pos, (long long)(r->pos + r->n_tok),
                             (long long)r->kv->n_filled, (long long)r->kv->n_ctx);
        if (in == NULL) {
            if (r->tokens == NULL)
                return st_errorf(ST_EINVAL, "row %zu: no token ids", i);
            for (int64_t j = 0; j < r->n_tok; j++)
                if (r->tokens[j] < 0 || r->tokens[j] >= hp->n_vocab)
                    return st_errorf(ST_ERANGE,
                                     "row %zu: token id %d outside the vocabulary "
                                     "of %lld",
                                     i, r->tokens[j], (long long)hp->n_vocab);
        }
        for (size_t j = 0; j < i; j++)
            if (rows[j].kv == r->kv)
                return st_errorf(ST_EINVAL, "rows %zu and %zu share one session's cache", j, i);
    }
    if (st_stage_n_out(c, rows, n_rows, mode) > out_cap)
        return st_errorf(ST_ERANGE, "output buffer of %zu floats is too small", out_cap);
    *n_tok = total;
    return ST_OK;
}

st_err st_stage_forward(st_stage_ctx *c, const st_batch_row *rows, size_t n_rows, const float *in,
                        st_stage_out mode, float *out, size_t out_cap)
{
    const st_hparams *hp = c->hp;
    int64_t n_tok = 0;
    st_err e = stage_check(c, rows, n_rows, in, mode, out_cap, &n_tok);
    if (e != ST_OK)
        return e;
    c->rows = rows;
    c->n_tok = n_tok;
    int64_t t = 0;
    for (size_t i = 0; i < n_rows; i++)
        for (int64_t j = 0; j < rows[i].n_tok; j++, t++) {
            c->tok_row[t] = (int64_t)i;
            c->tok_pos[t] = rows[i].pos + j;
        }
    if (in != NULL)
        memcpy(c->x, in, (size_t)n_tok * (size_t)hp->n_embd * sizeof(float));
    else
        stage_run(c, stage_ph_embed);

    /* the residual add ending a layer is fused into the next layer's first
     * phase, unless a hook must see the residual stream between layers */
    bool pending_add = false;
    for (int64_t l = st_model_first(c->m); l < st_model_last(c->m); l++) {
        bool fuse = c->hook == NULL && l + 1 < st_model_last(c->m);
        pending_add = stage_layer(c, l, (stage_pre){.add = pending_add}, fuse);
        if (c->hook)
            c->hook(c->hook_arg, l, c->x, n_tok, hp->n_embd);
    }
    for (size_t i = 0; i < n_rows; i++)
        rows[i].kv->n_filled = rows[i].pos + rows[i].n_tok;

    if (mode == ST_OUT_HIDDEN) {
        memcpy(out, c->x, (size_t)n_tok * (size_t)hp->n_embd * sizeof(float));
        return ST_OK;
    }
    /* head: the selected tokens, compacted, into out */
    int64_t n_sel = 0;
    t = 0;
    for (size_t i = 0; i < n_rows; i++) {
        for (int64_t j = 0; j < rows[i].n_tok; j++, t++)
            if (rows[i].all_logits || j == rows[i].n_tok - 1)
                c->tok_row[n_sel++] = t; /* tok_row is free now: reuse as the selection */
    }
    c->sel = c->tok_row;
    c->n_tok = n_sel;
    stage_norm(c, c->x, st_model_output_norm(c->m), c->xb);
    c->sel = NULL;
    stage_mm head[1] = {{st_model_output(c->m), out}};
    stage_matmuls(c, c->xb, hp->n_embd, head, 1, (stage_pre){0});
    return ST_OK;
}
