/* stage.c - the forward pass of a stage (see stage.h).
 *
 * The pass over a batch of T tokens (T = the sum of the rows' n_tok), one
 * row of each buffer per token, in the names the code uses:
 *
 *   x = embed(tokens) * embd_scale, or the previous stage's   x   [T][n_embd]
 *       hidden states
 *   for each layer l in [first, last):
 *       xb  = rmsnorm(x) * attn_norm                          xb  [T][n_embd]
 *       q   = xb Wq + bq                                      q   [T][q_dim]
 *       k   = xb Wk + bk,  v = xb Wv + bv  (biases: qwen2)    k,v [T][kv_dim]
 *       q, k per head: rmsnorm(.) * q_norm, k_norm (qwen3, gemma3), or
 *       over all of q and of k (olmoe)
 *       rotate q and k by position; K[pos] = k, V[pos] = v in the row's cache
 *       (converted to the cache's dtype by the kernels' from_float)
 *       att = softmax(cap(scale q K^T)) V  per head, over the  att [T][q_dim]
 *             window of the layer (sliding-window layers: the last swa_window
 *             positions; cap: the soft-cap, gemma2)
 *       xb2 = att Wo                                          xb2 [T][n_embd]
 *       x  += xb2, or rmsnorm(xb2) * attn_post_norm (gemma)
 *       xb  = rmsnorm(x) * ffn_norm
 *       hb  = xb Wgate,  hb2 = xb Wup                         hb,hb2 [T][n_ff]
 *       hb  = act(hb) * hb2   (act: silu, or the tanh GELU: gemma)
 *       xb2 = hb Wdown
 *       (a mixture of experts instead: xb2 = the weighted sum of the FFNs
 *       of the experts the router picks for each token; stage_moe.c)
 *       x  += xb2, or rmsnorm(xb2) * ffn_post_norm (gemma)
 *   out = x, or on the last stage the logits of the selected tokens sel:
 *       xb  = rmsnorm(x[sel]) * output_norm;  out = xb Wout   [n_sel][n_vocab]
 *       out = cap * tanh(out / cap) with the final soft-cap (gemma2)
 *
 * Each buffer has the one role its name says (xb2 is "a branch's output,
 * to be added to x": the attention's, then the FFN's). A matrix product
 * reads its input converted to its weights' activation dtype (xq) unless
 * that dtype is f32, when it reads the floats in place.
 *
 * Execution: every step is a fork-join phase on the pool (st_pool_run)
 * whose job struct holds its inputs and outputs; the phase splits its items
 * between threads and never splits a reduction:
 *   prep        per token   the steps before a product: the residual add
 *                           (after the branch's post-norm, if any), rmsnorm
 *                           or act(gate) * up, then the conversion of the
 *                           product's input to the activation dtype
 *   matmul      per group of 8 output rows of W, for all tokens at once
 *               (chunks of groups claimed from a counter, not halved
 *               ahead of time: see STAGE_CHUNKS_PER_THREAD)
 *   rope+store  per token
 *   attention   per (token, head) against the token's own session's cache
 * A layer is 10 phases: prep, qkv, rope+store, attention, convert, o,
 * prep (add + norm + convert), gate/up, prep (silu + convert), down; the
 * add ending a layer (x += xb2) runs in the next layer's first prep phase,
 * or alone after the last layer or when a layer hook must see x. Fusing
 * changes which phase runs a step, never the step: every element is still
 * computed by one thread in one fixed order, so the result of a token does
 * not depend on the batch, its place in it, the chunking of a prompt or the
 * number of threads (INV-7).
 *
 * Scratch is allocated once per context for max_tokens tokens (xq for the
 * widest converted row of this stage's weights); the per-thread attention
 * scores for the model's context length. */
#include "worker/engine/stage_impl.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- phases: each job names its inputs and outputs; fn(job, ith, nth)
 * runs on every pool thread. The context is read only for the model and
 * its sizes, the kernels and the batch layout. ---- */

typedef struct stage_embed_job {
    const st_stage_ctx *c;
    float *x; /* out [T][n_embd] */
} stage_embed_job;

/* x[t] = tok_embd[token t] */
static void stage_ph_embed(void *arg, int ith, int nth)
{
    const stage_embed_job *j = arg;
    const st_stage_ctx *c = j->c;
    const st_weight *te = st_model_tok_embd(c->m);
    const int64_t n_embd = c->hp->n_embd;
    long b, e;
    st_pool_split((long)c->n_tok, ith, nth, &b, &e);
    for (long t = b; t < e; t++) {
        const st_batch_row *r = &c->rows[c->tok_row[t]];
        int32_t id = r->tokens[c->tok_pos[t] - r->pos];
        float *xt = j->x + t * n_embd;
        c->ops->to_float[te->dtype]((const uint8_t *)te->data + (size_t)id * te->row_bytes, xt,
                                    n_embd);
        if (c->hp->embd_scale != 1.0f)
            for (int64_t i = 0; i < n_embd; i++)
                xt[i] *= c->hp->embd_scale;
    }
}

/* x += add; xb = rmsnorm(x) * norm (add.add NULL: the norm alone) */
stage_prep stage_add_norm(float *x, stage_pending add, const float *norm, float *xb)
{
    return (stage_prep){.x = x, .add = add, .norm = norm, .xb = xb};
}

/* gate = act(gate) * up */
static stage_prep stage_gated(float *gate, const float *up, st_ffn_act act)
{
    return (stage_prep){.gate = gate, .up = up, .act = act};
}

/* x += add alone */
static stage_prep stage_add(float *x, stage_pending add)
{
    return (stage_prep){.x = x, .add = add};
}

static bool stage_prep_empty(stage_prep p)
{
    return p.add.add == NULL && p.norm == NULL && p.gate == NULL;
}

typedef struct stage_prep_job {
    const st_stage_ctx *c;
    int64_t n_tok; /* tokens */
    stage_prep prep;
    const float *in; /* [n_tok][width] to convert after prep, or NULL */
    int64_t width;   /* floats per token of in */
    st_dtype act;    /* the dtype in is converted to */
    uint8_t *xq;     /* out [n_tok][stride bytes] */
    size_t stride;   /* bytes per converted row */
} stage_prep_job;

static void stage_ph_prep(void *arg, int ith, int nth)
{
    const stage_prep_job *j = arg;
    const st_kernel_ops *ops = j->c->ops;
    const st_hparams *hp = j->c->hp;
    const stage_prep *p = &j->prep;
    long b, e;
    st_pool_split((long)j->n_tok, ith, nth, &b, &e);
    for (long t = b; t < e; t++) {
        if (p->add.add) {
            float *a = p->add.add + t * hp->n_embd;
            if (p->add.post)
                ops->rmsnorm(a, p->add.post, a, hp->n_embd, hp->rms_eps);
            ops->add(p->x + t * hp->n_embd, a, hp->n_embd);
        }
        if (p->norm)
            ops->rmsnorm(p->x + t * hp->n_embd, p->norm, p->xb + t * hp->n_embd, hp->n_embd,
                         hp->rms_eps);
        if (p->gate)
            (p->act == ST_FFN_GELU_TANH ? ops->gelu_mul : ops->silu_mul)(
                p->gate + t * hp->n_ff, p->up + t * hp->n_ff, hp->n_ff);
        if (j->in)
            ops->from_float[j->act](j->in + t * j->width, j->xq + (size_t)t * j->stride, j->width);
    }
}

typedef struct stage_matmul_job {
    const st_stage_ctx *c;
    const stage_mm *mm; /* the products, each with its own input */
    int n_mm;
    const long *chunk0; /* [n_mm + 1]: mm[i]'s chunks are [chunk0[i], chunk0[i + 1]) */
    atomic_long next;   /* the next chunk to claim (0 at the start) */
} stage_matmul_job;

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
    stage_matmul_job *j = arg;
    const st_kernel_ops *ops = j->c->ops;
    const long total = j->chunk0[j->n_mm];
    int i = 0;
    for (;;) {
        long k = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (k >= total)
            return;
        while (k >= j->chunk0[i + 1]) /* chunks are claimed in increasing order */
            i++;
        const stage_mm *mm = &j->mm[i];
        const st_weight *w = mm->w;
        long per = stage_mm_chunk(w->n_out, nth) * STAGE_ROW_GROUP;
        long b = (k - j->chunk0[i]) * per, e = b + per < (long)w->n_out ? b + per : (long)w->n_out;
        (w->r8 ? ops->mul_mat_r8 : ops->mul_mat)[w->dtype](w->n_in, w->data, w->row_bytes, b, e,
                                                           mm->in, mm->stride, mm->n_tok, mm->y,
                                                           w->n_out);
    }
}

void stage_run_mm(st_stage_ctx *c, const stage_mm *mm, int n_mm, long *chunk0)
{
    chunk0[0] = 0;
    for (int i = 0; i < n_mm; i++) {
        long groups = (long)((mm[i].w->n_out + STAGE_ROW_GROUP - 1) / STAGE_ROW_GROUP);
        long per = stage_mm_chunk(mm[i].w->n_out, c->nth);
        chunk0[i + 1] = chunk0[i] + (groups + per - 1) / per;
    }
    stage_matmul_job j = {.c = c, .mm = mm, .n_mm = n_mm, .chunk0 = chunk0};
    atomic_init(&j.next, 0); /* published to the threads by st_pool_run */
    st_pool_run(c->pool, stage_ph_matmul, &j);
}

typedef struct stage_rope_job {
    const st_stage_ctx *c;
    int64_t layer;
    float *q; /* [T][q_dim] in/out */
    float *k; /* [T][kv_dim] in/out */
    float *v; /* [T][kv_dim] in/out */
} stage_rope_job;

/* stage_head_norm - x[h] = rmsnorm(x[h]) * w for each of n_head heads of head_dim */
static void stage_head_norm(const st_stage_ctx *c, float *x, int64_t n_head, const float *w)
{
    const st_hparams *hp = c->hp;
    for (int64_t h = 0; h < n_head; h++)
        c->ops->rmsnorm(x + h * hp->head_dim, w, x + h * hp->head_dim, hp->head_dim, hp->rms_eps);
}

/* q += bq, k += bk, v += bv (the biases the layer has); q and k heads
 * normalized (the layer's q_norm, k_norm); rotate q and k by the token's
 * position (normal or NEOX pairing, the layer's rope parameters and the
 * row's frequency factors); K[pos] = k, V[pos] = v */
static void stage_ph_rope_store(void *arg, int ith, int nth)
{
    const stage_rope_job *j = arg;
    const st_stage_ctx *c = j->c;
    const st_hparams *hp = c->hp;
    const st_kernel_ops *ops = c->ops;
    const int64_t li = j->layer - st_model_first(c->m);
    const st_layer *L = st_model_layer(c->m, j->layer);
    const bool neox = hp->rope == ST_ROPE_NEOX;
    float *cs = c->rope_cs + (size_t)ith * (size_t)hp->n_rot;
    long b, e;
    st_pool_split((long)c->n_tok, ith, nth, &b, &e);
    for (long t = b; t < e; t++) {
        int64_t pos = c->tok_pos[t];
        float *qt = j->q + t * hp->q_dim;
        float *kt = j->k + t * hp->kv_dim;
        float *vt = j->v + t * hp->kv_dim;
        st_kv *kv = c->rows[c->tok_row[t]].kv;
        if (L->bq != NULL)
            ops->add(qt, L->bq, hp->q_dim);
        if (L->bk != NULL)
            ops->add(kt, L->bk, hp->kv_dim);
        if (L->bv != NULL)
            ops->add(vt, L->bv, hp->kv_dim);
        if (L->q_norm != NULL && hp->arch->qk_norm_full) /* olmoe: all of q, all of k */
            ops->rmsnorm(qt, L->q_norm, qt, hp->q_dim, hp->rms_eps);
        else if (L->q_norm != NULL)
            stage_head_norm(c, qt, hp->n_head, L->q_norm);
        if (L->k_norm != NULL && hp->arch->qk_norm_full)
            ops->rmsnorm(kt, L->k_norm, kt, hp->kv_dim, hp->rms_eps);
        else if (L->k_norm != NULL)
            stage_head_norm(c, kt, hp->n_head_kv, L->k_norm);
        st_rope_params rp;
        st_hparams_rope(hp, j->layer, st_model_rope_factors(c->m, kv->n_ctx), &rp);
        st_rope_cs(&rp, pos, cs);
        (neox ? ops->rope_neox : ops->rope)(qt, hp->n_head, hp->head_dim, hp->n_rot, cs);
        (neox ? ops->rope_neox : ops->rope)(kt, hp->n_head_kv, hp->head_dim, hp->n_rot, cs);
        const size_t off = st_kv_row(kv, li, pos);
        ops->from_float[kv->dtype](kt, kv->k + off, hp->kv_dim);
        ops->from_float[kv->dtype](vt, kv->v + off, hp->kv_dim);
    }
}

typedef struct stage_attn_job {
    const st_stage_ctx *c;
    int64_t layer;
    const float *q; /* [T][q_dim] */
    float *att;     /* out [T][n_embd] */
    float *scores;  /* [nth][max_ctx] */
} stage_attn_job;

/* att[t][h] = softmax(cap(attn_scale q[t][h] K^T)) V over the positions
 * [kv0, pos] of token t's session (st_hparams_window_start), K and V of the KV
 * head serving head h */
static void stage_ph_attn(void *arg, int ith, int nth)
{
    const stage_attn_job *j = arg;
    const st_stage_ctx *c = j->c;
    const st_hparams *hp = c->hp;
    const int64_t li = j->layer - st_model_first(c->m);
    const int64_t group = hp->n_head / hp->n_head_kv;
    float *scores = j->scores + (size_t)ith * (size_t)c->max_ctx;
    long b, e;
    st_pool_split((long)(c->n_tok * hp->n_head), ith, nth, &b, &e);
    for (long it = b; it < e; it++) {
        int64_t t = it / hp->n_head, h = it % hp->n_head;
        const st_kv *kv = c->rows[c->tok_row[t]].kv;
        const int64_t pos = c->tok_pos[t];
        const size_t base = st_kv_row(kv, li, 0) + (size_t)(h / group) * kv->head_bytes;
        const st_attn_args a = {.q = j->q + t * hp->q_dim + h * hp->head_dim,
                                .k = kv->k + base,
                                .v = kv->v + base,
                                .kv_stride = kv->row_bytes,
                                .kv_dtype = kv->dtype,
                                .kv0 = st_hparams_window_start(hp, j->layer, pos),
                                .n_kv = pos + 1,
                                .head_dim = hp->head_dim,
                                .scale = hp->attn_scale,
                                .softcap = hp->attn_softcap,
                                .scores = scores,
                                .out = j->att + t * hp->q_dim + h * hp->head_dim};
        c->ops->attn_head(&a);
    }
}

typedef struct stage_norm_job {
    const st_stage_ctx *c;
    const float *x;     /* [T][n_embd] */
    const int64_t *sel; /* [n_sel] tokens of x */
    int64_t n_sel;
    const float *norm; /* [n_embd] */
    float *xb;         /* out [n_sel][n_embd] */
} stage_norm_job;

/* xb[i] = rmsnorm(x[sel[i]]) * norm */
static void stage_ph_norm_sel(void *arg, int ith, int nth)
{
    const stage_norm_job *j = arg;
    const st_hparams *hp = j->c->hp;
    const int64_t n = hp->n_embd;
    long b, e;
    st_pool_split((long)j->n_sel, ith, nth, &b, &e);
    for (long i = b; i < e; i++)
        j->c->ops->rmsnorm(j->x + j->sel[i] * n, j->norm, j->xb + i * n, n, hp->rms_eps);
}

typedef struct stage_softcap_job {
    const st_stage_ctx *c;
    float *logits; /* [n_sel][n_vocab] in/out */
    int64_t n_sel;
} stage_softcap_job;

/* logits = cap * tanh(logits * (1 / cap)), cap the final soft-cap (the
 * operations of llama.cpp's graph: scale, tanh, scale) */
static void stage_ph_softcap(void *arg, int ith, int nth)
{
    const stage_softcap_job *j = arg;
    const st_hparams *hp = j->c->hp;
    const float cap = hp->final_softcap, inv = 1.0f / cap;
    long b, e;
    st_pool_split((long)j->n_sel, ith, nth, &b, &e);
    for (long i = b; i < e; i++) {
        float *l = j->logits + (size_t)i * (size_t)hp->n_vocab;
        for (int64_t k = 0; k < hp->n_vocab; k++)
            l[k] = tanhf(l[k] * inv) * cap;
    }
}

/* ---- drivers: one call per step of the pass, inputs and outputs named ---- */

static void stage_embed(st_stage_ctx *c, float *x)
{
    stage_embed_job j = {c, x};
    st_pool_run(c->pool, stage_ph_embed, &j);
}

/* stage_prep_only - the steps of prep over the batch, as a phase of their own. */
static void stage_prep_only(st_stage_ctx *c, stage_prep prep)
{
    stage_prep_job j = {.c = c, .n_tok = c->n_tok, .prep = prep};
    st_pool_run(c->pool, stage_ph_prep, &j);
}

void stage_matmuls(st_stage_ctx *c, int64_t n_tok, stage_prep prep, const float *in,
                   int64_t width, const stage_mm *mm, int n_mm)
{
    bool done[STAGE_MAX_MM] = {false};
    bool prep_done = stage_prep_empty(prep);
    for (int i = 0; i < n_mm; i++) {
        if (done[i])
            continue;
        st_dtype act = st_dtype_info_of(mm[i].w->dtype)->act;
        size_t stride = 0;
        st_row_size(act, width, &stride); /* checked at model open */
        bool conv = act != ST_DT_F32;
        stage_mm group[STAGE_MAX_MM];
        int n_group = 0;
        for (int k = i; k < n_mm; k++) {
            if (!done[k] && st_dtype_info_of(mm[k].w->dtype)->act == act) {
                group[n_group] = mm[k];
                group[n_group].in = conv ? (const void *)c->xq : (const void *)in;
                group[n_group].stride = stride;
                group[n_group++].n_tok = n_tok;
                done[k] = true;
            }
        }
        if (conv || !prep_done) {
            stage_prep_job pj = {.c = c,
                                 .n_tok = n_tok,
                                 .prep = prep_done ? (stage_prep){0} : prep,
                                 .in = conv ? in : NULL,
                                 .width = width,
                                 .act = act,
                                 .xq = c->xq,
                                 .stride = stride};
            st_pool_run(c->pool, stage_ph_prep, &pj);
        }
        prep_done = true;
        long chunk0[STAGE_MAX_MM + 1];
        stage_run_mm(c, group, n_group, chunk0);
    }
}

static void stage_rope_store(st_stage_ctx *c, int64_t layer, float *q, float *k, float *v)
{
    stage_rope_job j = {c, layer, q, k, v};
    st_pool_run(c->pool, stage_ph_rope_store, &j);
}

static void stage_attention(st_stage_ctx *c, int64_t layer, const float *q, float *att)
{
    stage_attn_job j = {c, layer, q, att, c->scores};
    st_pool_run(c->pool, stage_ph_attn, &j);
}

static void stage_softcap(st_stage_ctx *c, float *logits, int64_t n_sel)
{
    stage_softcap_job j = {c, logits, n_sel};
    st_pool_run(c->pool, stage_ph_softcap, &j);
}

static void stage_norm_sel(st_stage_ctx *c, const float *x, const int64_t *sel, int64_t n_sel,
                           const float *norm, float *xb)
{
    stage_norm_job j = {c, x, sel, n_sel, norm, xb};
    st_pool_run(c->pool, stage_ph_norm_sel, &j);
}

/* stage_layer - layer l over the batch: first x += pending (the previous
 * layer's residual add, deferred to here; add NULL: none), then the
 * attention block with its residual add, then the FFN, whose output it
 * leaves in xb2 for the caller's x += xb2 (after the FFN's post-norm: the
 * returned pending add). */
static stage_pending stage_layer(st_stage_ctx *c, int64_t l, stage_pending pending)
{
    const st_hparams *hp = c->hp;
    const st_layer *L = st_model_layer(c->m, l);
    const int64_t T = c->n_tok, n_embd = hp->n_embd, n_ff = hp->n_ff;
    float *x = c->x, *xb = c->xb, *xb2 = c->xb2, *att = c->att;
    float *q = c->q, *k = c->k, *v = c->v, *hb = c->hb, *hb2 = c->hb2;

    /* attention: x += pending; xb = rmsnorm(x) * attn_norm;
     * q = xb Wq, k = xb Wk, v = xb Wv */
    stage_mm qkv[] = {{.w = &L->wq, .y = q}, {.w = &L->wk, .y = k}, {.w = &L->wv, .y = v}};
    stage_matmuls(c, T, stage_add_norm(x, pending, L->attn_norm, xb), xb, n_embd, qkv, 3);
    /* q += bq, k += bk, v += bv; q, k head norms; rotate q, k; K[pos] = k, V[pos] = v */
    stage_rope_store(c, l, q, k, v);
    /* att = softmax(cap(scale q K^T)) V over the layer's window */
    stage_attention(c, l, q, att);
    /* xb2 = att Wo */
    stage_mm o[] = {{.w = &L->wo, .y = xb2}};
    stage_matmuls(c, T, (stage_prep){0}, att, hp->q_dim, o, 1);

    /* FFN: x += xb2 (the attention's residual add, after its post-norm);
     * xb = rmsnorm(x) * ffn_norm; hb = xb Wgate, hb2 = xb Wup */
    stage_pending attn_out = {xb2, L->attn_post_norm};
    if (L->experts != NULL)
        return stage_moe_ffn(c, l, attn_out);
    stage_mm gate_up[] = {{.w = &L->w_gate, .y = hb}, {.w = &L->w_up, .y = hb2}};
    stage_matmuls(c, T, stage_add_norm(x, attn_out, L->ffn_norm, xb), xb, n_embd, gate_up, 2);
    /* hb = act(hb) * hb2; xb2 = hb Wdown */
    stage_mm down[] = {{.w = &L->w_down, .y = xb2}};
    stage_matmuls(c, T, stage_gated(hb, hb2, hp->arch->ffn_act), hb, n_ff, down, 1);
    return (stage_pending){xb2, L->ffn_post_norm};
}

/* ---- context ---- */

static void *stage_alloc(size_t n, size_t size, bool *fail)
{
    if (*fail)
        return NULL;
    void *p = calloc(n ? n : 1, size);
    if (p == NULL)
        *fail = true;
    return p;
}

/* stage_act_row - raises *max to the bytes of w's input row converted to
 * its activation dtype; nothing when that dtype is f32 and the product
 * reads its input in place, unless gathered: an expert's input rows are
 * gathered into xq whatever their dtype (stage_moe.c). */
static st_err stage_act_row(const st_weight *w, bool gathered, size_t *max)
{
    st_dtype act = st_dtype_info_of(w->dtype)->act;
    size_t rs = 0;
    if (act == ST_DT_F32 && !gathered)
        return ST_OK;
    if (st_row_size(act, w->n_in, &rs) != 0)
        return st_errorf(ST_EINVAL, "a weight's input of %lld values is not whole blocks of %s",
                         (long long)w->n_in, st_dtype_info_of(act)->name);
    if (rs > *max)
        *max = rs;
    return ST_OK;
}

/* stage_act_bytes - the widest converted input row of the stage's
 * products (every layer matrix and the output head). */
static st_err stage_act_bytes(const st_model *m, size_t *out)
{
    size_t max = 0;
    st_err e = ST_OK;
    for (int64_t l = st_model_first(m); l < st_model_last(m) && e == ST_OK; l++) {
        const st_layer *L = st_model_layer(m, l);
        const st_weight *ws[ST_LAYER_MATRICES] = {&L->wq,     &L->wk,   &L->wv,    &L->wo,
                                                  &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; i < ST_LAYER_MATRICES && e == ST_OK; i++)
            if (ws[i]->n_out > 0) /* a mixture of experts has no dense FFN */
                e = stage_act_row(ws[i], false, &max);
        for (int64_t x = 0; L->experts != NULL && x < st_model_hparams(m)->n_expert && e == ST_OK;
             x++) {
            if ((e = stage_act_row(&L->experts[x].gate, true, &max)) ||
                (e = stage_act_row(&L->experts[x].up, true, &max)))
                break;
            e = stage_act_row(&L->experts[x].down, true, &max);
        }
    }
    if (e == ST_OK && st_model_has_head(m))
        e = stage_act_row(st_model_output(m), false, &max);
    *out = max;
    return e;
}

st_err st_stage_ctx_open(const st_model *m, int64_t max_tokens, st_pool *pool,
                         const st_kernel_ops *ops, st_stage_ctx **out)
{
    *out = NULL;
    const st_hparams *hp = st_model_hparams(m);
    if (max_tokens < 1 || max_tokens > STAGE_MAX_TOKENS)
        return st_errorf(ST_EINVAL, "max_tokens %lld out of range 1..2^20", (long long)max_tokens);
    size_t act_bytes = 0;
    st_err e = stage_act_bytes(m, &act_bytes);
    if (e != ST_OK)
        return e;
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
    c->act_bytes = act_bytes;
    const size_t T = (size_t)max_tokens, n_embd = (size_t)hp->n_embd, n_ff = (size_t)hp->n_ff,
                 kv_dim = (size_t)hp->kv_dim;
    bool fail = false;
    c->x = stage_alloc(T * n_embd, sizeof(float), &fail);
    c->xb = stage_alloc(T * n_embd, sizeof(float), &fail);
    c->q = stage_alloc(T * (size_t)hp->q_dim, sizeof(float), &fail);
    c->k = stage_alloc(T * kv_dim, sizeof(float), &fail);
    c->v = stage_alloc(T * kv_dim, sizeof(float), &fail);
    c->att = stage_alloc(T * (size_t)hp->q_dim, sizeof(float), &fail);
    c->xb2 = stage_alloc(T * n_embd, sizeof(float), &fail);
    c->hb = stage_alloc(T * n_ff, sizeof(float), &fail);
    c->hb2 = stage_alloc(T * n_ff, sizeof(float), &fail);
    /* a mixture of experts converts a row per (token, expert) */
    const size_t xq_rows = T * (size_t)(hp->n_expert_used > 0 ? hp->n_expert_used : 1);
    c->xq = stage_alloc(xq_rows * act_bytes, 1, &fail);
    c->scores = stage_alloc((size_t)c->nth * (size_t)c->max_ctx, sizeof(float), &fail);
    c->rope_cs = stage_alloc((size_t)c->nth * (size_t)hp->n_rot, sizeof(float), &fail);
    c->tok_row = stage_alloc(T, sizeof(int64_t), &fail);
    c->tok_pos = stage_alloc(T, sizeof(int64_t), &fail);
    c->sel = stage_alloc(T, sizeof(int64_t), &fail);
    if (fail || stage_moe_alloc(c) != ST_OK) {
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
    free(c->att);
    free(c->xb2);
    free(c->hb);
    free(c->hb2);
    free(c->xq);
    free(c->scores);
    free(c->rope_cs);
    free(c->tok_row);
    free(c->tok_pos);
    free(c->sel);
    stage_moe_free(c);
    free(c);
}

void st_stage_set_hook(st_stage_ctx *c, st_layer_hook hook, void *arg)
{
    c->hook = hook;
    c->hook_arg = arg;
}

st_err st_stage_kv_alloc(const st_stage_ctx *c, int64_t n_ctx, st_dtype t, st_kv **out)
{
    if (n_ctx < 1 || n_ctx > c->max_ctx)
        return st_errorf(ST_ERANGE, "KV context %lld is outside 1..%lld (the model's context)",
                         (long long)n_ctx, (long long)c->max_ctx);
    return st_kv_alloc(st_model_last(c->m) - st_model_first(c->m), n_ctx, c->hp->kv_dim,
                       c->hp->head_dim, t, out);
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

/* ---- the pass ---- */

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
    const size_t hidden_bytes = (size_t)n_tok * (size_t)hp->n_embd * sizeof(float);

    /* x = embed(tokens), or the previous stage's hidden states */
    if (in != NULL)
        memcpy(c->x, in, hidden_bytes);
    else
        stage_embed(c, c->x);

    /* the layers; each ends with x += xb2 (its FFN's output), deferred into
     * the next layer's first phase unless a hook must see x in between */
    stage_pending pending = {0}; /* a deferred x += pending */
    for (int64_t l = st_model_first(c->m); l < st_model_last(c->m); l++) {
        stage_pending out = stage_layer(c, l, pending);
        bool defer = c->hook == NULL && l + 1 < st_model_last(c->m);
        if (defer) {
            pending = out;
        } else {
            stage_prep_only(c, stage_add(c->x, out)); /* x += xb2 */
            pending = (stage_pending){0};
        }
        if (c->hook)
            c->hook(c->hook_arg, l, c->x, n_tok, hp->n_embd);
    }
    for (size_t i = 0; i < n_rows; i++)
        rows[i].kv->n_filled = rows[i].pos + rows[i].n_tok;

    if (mode == ST_OUT_HIDDEN) {
        memcpy(out, c->x, hidden_bytes);
        return ST_OK;
    }
    /* the head over the selected tokens, compacted into out:
     * xb = rmsnorm(x[sel]) * output_norm; out = xb Wout */
    int64_t n_sel = 0;
    t = 0;
    for (size_t i = 0; i < n_rows; i++) {
        for (int64_t j = 0; j < rows[i].n_tok; j++, t++)
            if (rows[i].all_logits || j == rows[i].n_tok - 1)
                c->sel[n_sel++] = t;
    }
    stage_norm_sel(c, c->x, c->sel, n_sel, st_model_output_norm(c->m), c->xb);
    stage_mm head[] = {{.w = st_model_output(c->m), .y = out}};
    stage_matmuls(c, n_sel, (stage_prep){0}, c->xb, hp->n_embd, head, 1);
    if (hp->final_softcap != 0.0f)
        stage_softcap(c, out, n_sel);
    return ST_OK;
}
