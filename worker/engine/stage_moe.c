/* stage_moe.c - the FFN of a mixture-of-experts layer (see stage_impl.h).
 *
 * What llama.cpp computes (llm_graph_context::build_moe_ffn, softmax
 * gating), for each token t of the batch, with xb its normalized input:
 *
 *   logits = xb Wrouter                                  [n_expert]  f32 product
 *   p      = softmax(logits)            (max subtracted, the sum in double,
 *                                        then scaled by 1 / sum)
 *   sel    = the n_used experts of largest p, most probable first; equal
 *            probabilities in index order (llama.cpp's argsort is std::sort,
 *            whose insertion sort for the 16 or fewer experts of a row keeps
 *            index order; beyond 16, exact ties are unordered there)
 *   w_s    = p[sel_s], divided by max(sum of the w, 2^-14) when the
 *            architecture renormalizes (arch.moe_norm_w; the sum in double)
 *   y_s    = down_e(act(gate_e xb) * up_e xb)   for e = sel_s  [n_embd]
 *   xb2    = w_0 y_0 + w_1 y_1 + ...   (each product, then the sums in
 *            slot order, as llama.cpp's ggml_mul then chain of ggml_add)
 *
 * Execution, in phases over the batch (stage.c's file comment), five per
 * layer (a dense FFN has four):
 *   prep+route  per token: the prep x += pending, xb = rmsnorm(x) *
 *               ffn_norm; the router's f32 product of the token alone;
 *               softmax, top-k, weights; xb converted to the experts'
 *               gate/up activation dtype, once per token (moe_xtok)
 *   group       on the calling thread: the R = T * n_used (token, expert)
 *               rows in expert order (a counting sort; tokens in batch order
 *               within an expert), the per-expert counters, and row r of xq
 *               = a copy of its token's converted xb (the bytes converting
 *               it again would give)
 *   gate/up     one matmul phase: for each expert with rows, its gate and
 *               up over its rows only (so each selected expert's matrices
 *               are read once per batch, and a decode step reads only the
 *               n_used experts' bytes); when up's activation dtype differs
 *               from gate's, gate alone, a gather phase converting each
 *               row's xb for up, then up
 *   act         per row: gate = act(gate) * up, converted for down
 *   down        one matmul phase, as gate/up
 *   combine     per token: xb2 = the weighted sum in slot order
 * A row's result depends only on its token's input and expert (the kernels
 * compute each (row of W, input row) dot product the same way wherever the
 * input row sits), so a token's output does not depend on the other
 * tokens of the batch nor on the experts they chose (INV-7). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "worker/engine/stage_impl.h"

st_err stage_moe_alloc(st_stage_ctx *c)
{
    const st_hparams *hp = c->hp;
    if (hp->n_expert == 0)
        return ST_OK;
    const size_t T = (size_t)c->max_tokens, ne = (size_t)hp->n_expert,
                 nu = (size_t)hp->n_expert_used, R = T * nu;
    const size_t nl = (size_t)(st_model_last(c->m) - st_model_first(c->m));
    c->moe_logits = calloc(T * ne, sizeof *c->moe_logits);
    c->moe_sel = calloc(R, sizeof *c->moe_sel);
    c->moe_w = calloc(R, sizeof *c->moe_w);
    c->moe_row_tok = calloc(R, sizeof *c->moe_row_tok);
    c->moe_slot_row = calloc(R, sizeof *c->moe_slot_row);
    c->moe_off = calloc(ne + 1, sizeof *c->moe_off);
    c->moe_gate = calloc(R * (size_t)hp->n_ff_exp, sizeof *c->moe_gate);
    c->moe_up = calloc(R * (size_t)hp->n_ff_exp, sizeof *c->moe_up);
    c->moe_y = calloc(R * (size_t)hp->n_embd, sizeof *c->moe_y);
    c->moe_mm = calloc(2 * ne, sizeof *c->moe_mm);
    c->moe_chunk0 = calloc(2 * ne + 1, sizeof *c->moe_chunk0);
    c->moe_count = calloc((nl ? nl : 1) * ne, sizeof *c->moe_count);
    c->moe_xtok = calloc(T, c->act_bytes ? c->act_bytes : 1);
    if (!c->moe_xtok || !c->moe_logits || !c->moe_sel || !c->moe_w || !c->moe_row_tok || !c->moe_slot_row ||
        !c->moe_off || !c->moe_gate || !c->moe_up || !c->moe_y || !c->moe_mm || !c->moe_chunk0 ||
        !c->moe_count)
        return st_errorf(ST_ENOMEM, "mixture-of-experts scratch for %zu tokens", T);
    return ST_OK;
}

void stage_moe_free(st_stage_ctx *c)
{
    free(c->moe_logits);
    free(c->moe_sel);
    free(c->moe_w);
    free(c->moe_row_tok);
    free(c->moe_slot_row);
    free(c->moe_off);
    free(c->moe_gate);
    free(c->moe_up);
    free(c->moe_y);
    free(c->moe_mm);
    free(c->moe_chunk0);
    free(c->moe_count);
    free(c->moe_xtok);
}

/* ---- route: per token */

/* moe_softmax - p = softmax(p) in place, as ggml's soft_max: exp(x - max),
 * the sum in double, then each times (float)(1 / sum). */
static void moe_softmax(float *p, int64_t n)
{
    float max = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        max = p[i] > max ? p[i] : max;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        p[i] = expf(p[i] - max);
        sum += (double)p[i];
    }
    const float scale = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++)
        p[i] *= scale;
}

/* moe_top_k - sel: the k indices of the largest p, largest first, equal
 * values in index order (a stable descending sort's first k). */
static void moe_top_k(const float *p, int64_t n, int64_t k, int32_t *sel)
{
    for (int64_t s = 0; s < k; s++) {
        int32_t best = -1;
        for (int32_t i = 0; i < (int32_t)n; i++) {
            bool taken = false;
            for (int64_t q = 0; q < s && !taken; q++)
                taken = sel[q] == i;
            if (!taken && (best < 0 || p[i] > p[best]))
                best = i;
        }
        sel[s] = best;
    }
}

void stage_moe_weights(const float *p, const int32_t *sel, int64_t n_used, bool norm, float *w)
{
    double sum = 0.0;
    for (int64_t s = 0; s < n_used; s++) {
        w[s] = p[sel[s]];
        sum += (double)w[s];
    }
    if (norm) {
        const float div = (float)sum > STAGE_MOE_WEIGHT_SUM_MIN ? (float)sum
                                                                 : STAGE_MOE_WEIGHT_SUM_MIN;
        for (int64_t s = 0; s < n_used; s++)
            w[s] /= div;
    }
}

void stage_moe_route_token(float *p, int64_t n_expert, int64_t n_used, bool norm, int32_t *sel,
                           float *w)
{
    moe_softmax(p, n_expert);
    moe_top_k(p, n_expert, n_used, sel);
    stage_moe_weights(p, sel, n_used, norm, w);
}

/* ---- prep and route: per token */

typedef struct moe_prep_job {
    const st_stage_ctx *c;
    const st_layer *L;
    stage_pending add; /* x += add first (after its post-norm), or add.add NULL */
    st_dtype act;      /* the experts' gate activation dtype */
    size_t stride;     /* bytes of a converted row (moe_xtok) */
} moe_prep_job;

/* Per token, by the thread owning it: x += add; xb = rmsnorm(x) * ffn_norm;
 * logits = xb Wrouter (the f32 product of this one token: the kernels'
 * result for a (row, token) pair does not depend on the batch); the
 * token's experts and weights; moe_xtok[t] = xb converted for gate. */
static void moe_ph_prep_route(void *arg, int ith, int nth)
{
    const moe_prep_job *j = arg;
    const st_stage_ctx *c = j->c;
    const st_kernel_ops *ops = c->ops;
    const st_hparams *hp = c->hp;
    const st_weight *wr = &j->L->w_router;
    const int64_t n = hp->n_embd, ne = hp->n_expert, nu = hp->n_expert_used;
    long b, e;
    st_pool_split((long)c->n_tok, ith, nth, &b, &e);
    for (long t = b; t < e; t++) {
        float *x = c->x + t * n, *xb = c->xb + t * n, *p = c->moe_logits + t * ne;
        if (j->add.add) {
            float *a = j->add.add + t * n;
            if (j->add.post)
                ops->rmsnorm(a, j->add.post, a, n, hp->rms_eps);
            ops->add(x, a, n);
        }
        ops->rmsnorm(x, j->L->ffn_norm, xb, n, hp->rms_eps);
        (wr->r8 ? ops->mul_mat_r8 : ops->mul_mat)[wr->dtype](wr->n_in, wr->data, wr->row_bytes, 0,
                                                             wr->n_out, xb, (size_t)n * sizeof *xb,
                                                             1, p, wr->n_out);
        stage_moe_route_token(p, ne, nu, hp->arch->moe_norm_w, c->moe_sel + t * nu,
                              c->moe_w + t * nu);
        ops->from_float[j->act](xb, c->moe_xtok + (size_t)t * j->stride, n);
    }
}

/* ---- group: on the calling thread */

/* moe_group - the rows of the batch's (token, slot) pairs in expert order:
 * moe_off[e] .. moe_off[e + 1] are expert e's rows, tokens in batch order;
 * counts each expert's tokens for layer li of the stage; xq[r] = the
 * converted row of r's token (moe_xtok, stride bytes a row: the bytes a
 * conversion of the row would give). */
static void moe_group(st_stage_ctx *c, int64_t li, size_t stride)
{
    const int64_t ne = c->hp->n_expert, nu = c->hp->n_expert_used, T = c->n_tok;
    int64_t *off = c->moe_off;
    memset(off, 0, (size_t)(ne + 1) * sizeof *off);
    for (int64_t i = 0; i < T * nu; i++)
        off[c->moe_sel[i] + 1]++;
    uint64_t *count = c->moe_count + li * ne;
    for (int64_t e = 0; e < ne; e++) {
        count[e] += (uint64_t)off[e + 1];
        off[e + 1] += off[e];
    }
    /* fill: each expert's next free row, starting at its first */
    int64_t next[ST_MOE_MAX_EXPERT];
    memcpy(next, off, (size_t)ne * sizeof *next);
    for (int64_t t = 0; t < T; t++)
        for (int64_t s = 0; s < nu; s++) {
            int64_t r = next[c->moe_sel[t * nu + s]]++;
            c->moe_row_tok[r] = (int32_t)t;
            c->moe_slot_row[t * nu + s] = (int32_t)r;
            memcpy(c->xq + (size_t)r * stride, c->moe_xtok + (size_t)t * stride, stride);
        }
}

/* ---- gather, act, combine: per row or per token */

typedef struct moe_rows_job {
    const st_stage_ctx *c;
    const float *xb; /* gather: [T][n_embd] the tokens' inputs */
    float *gate;     /* act: [R][n_ff_exp] gate, then act(gate) * up */
    const float *up; /* act: [R][n_ff_exp] */
    st_dtype act;    /* the dtype rows are converted to */
    size_t stride;   /* bytes per converted row */
} moe_rows_job;

/* xq[r] = xb[token of r], converted (for up when its dtype is not gate's) */
static void moe_ph_gather(void *arg, int ith, int nth)
{
    const moe_rows_job *j = arg;
    const st_stage_ctx *c = j->c;
    const int64_t n = c->hp->n_embd;
    long b, e;
    st_pool_split((long)(c->n_tok * c->hp->n_expert_used), ith, nth, &b, &e);
    for (long r = b; r < e; r++)
        c->ops->from_float[j->act](j->xb + (int64_t)c->moe_row_tok[r] * n,
                                   c->xq + (size_t)r * j->stride, n);
}

/* gate[r] = act(gate[r]) * up[r]; xq[r] = gate[r], converted */
static void moe_ph_act(void *arg, int ith, int nth)
{
    const moe_rows_job *j = arg;
    const st_stage_ctx *c = j->c;
    const int64_t n = c->hp->n_ff_exp;
    long b, e;
    st_pool_split((long)(c->n_tok * c->hp->n_expert_used), ith, nth, &b, &e);
    for (long r = b; r < e; r++) {
        float *g = j->gate + r * n;
        (c->hp->arch->ffn_act == ST_FFN_GELU_TANH ? c->ops->gelu_mul : c->ops->silu_mul)(
            g, j->up + r * n, n);
        c->ops->from_float[j->act](g, c->xq + (size_t)r * j->stride, n);
    }
}

typedef struct moe_combine_job {
    const st_stage_ctx *c;
    float *out; /* [T][n_embd] */
} moe_combine_job;

/* out[t] = w_0 y[row(t, 0)] + w_1 y[row(t, 1)] + ... */
static void moe_ph_combine(void *arg, int ith, int nth)
{
    const moe_combine_job *j = arg;
    const st_stage_ctx *c = j->c;
    const int64_t n = c->hp->n_embd, nu = c->hp->n_expert_used;
    long b, e;
    st_pool_split((long)c->n_tok, ith, nth, &b, &e);
    for (long t = b; t < e; t++) {
        float *o = j->out + t * n;
        for (int64_t s = 0; s < nu; s++) {
            const float w = c->moe_w[t * nu + s];
            const float *y = c->moe_y + (int64_t)c->moe_slot_row[t * nu + s] * n;
            for (int64_t i = 0; i < n; i++) {
                const float wy = y[i] * w; /* ggml_mul, then ggml_add: two roundings */
                o[i] = s == 0 ? wy : o[i] + wy;
            }
        }
    }
}

/* The expert matrices a matmul phase computes (moe_experts_mm). */
enum { MOE_GATE = 1, MOE_UP = 2, MOE_DOWN = 4 };

/* moe_experts_mm - one matmul phase: for each expert with rows, the
 * products of which (MOE_GATE into moe_gate, MOE_UP into moe_up, MOE_DOWN
 * into moe_y) over its rows of xq (stride bytes each). */
static void moe_experts_mm(st_stage_ctx *c, const st_layer *L, unsigned which, size_t stride)
{
    const st_hparams *hp = c->hp;
    int n = 0;
    for (int64_t e = 0; e < hp->n_expert; e++) {
        const int64_t r0 = c->moe_off[e], nr = c->moe_off[e + 1] - r0;
        const stage_mm row = {.in = c->xq + (size_t)r0 * stride, .stride = stride, .n_tok = nr};
        if (nr == 0)
            continue;
        if (which & MOE_GATE) {
            c->moe_mm[n] = row;
            c->moe_mm[n].w = &L->experts[e].gate;
            c->moe_mm[n++].y = c->moe_gate + r0 * hp->n_ff_exp;
        }
        if (which & MOE_UP) {
            c->moe_mm[n] = row;
            c->moe_mm[n].w = &L->experts[e].up;
            c->moe_mm[n++].y = c->moe_up + r0 * hp->n_ff_exp;
        }
        if (which & MOE_DOWN) {
            c->moe_mm[n] = row;
            c->moe_mm[n].w = &L->experts[e].down;
            c->moe_mm[n++].y = c->moe_y + r0 * hp->n_embd;
        }
    }
    stage_run_mm(c, c->moe_mm, n, c->moe_chunk0);
}

/* moe_act_of - the activation dtype of w and its converted row's bytes. */
static st_dtype moe_act_of(const st_weight *w, size_t *stride)
{
    st_dtype act = st_dtype_info_of(w->dtype)->act;
    st_row_size(act, w->n_in, stride); /* whole blocks: checked at ctx open */
    return act;
}

stage_pending stage_moe_ffn(st_stage_ctx *c, int64_t l, stage_pending pending)
{
    const st_layer *L = st_model_layer(c->m, l);

    /* the experts' gate and up over their rows (one bank of experts shares
     * a dtype: the stacked tensor's; gate and up may differ) */
    size_t s_gate, s_up;
    st_dtype a_gate = moe_act_of(&L->experts[0].gate, &s_gate);
    st_dtype a_up = moe_act_of(&L->experts[0].up, &s_up);
    /* x += pending; xb = rmsnorm(x) * ffn_norm; logits = xb Wrouter; each
     * token's experts and weights; xb converted for gate, once per token */
    moe_prep_job pj = {.c = c, .L = L, .add = pending, .act = a_gate, .stride = s_gate};
    st_pool_run(c->pool, moe_ph_prep_route, &pj);
    /* the rows in expert order, each a copy of its token's converted xb */
    moe_group(c, l - st_model_first(c->m), s_gate);
    if (a_gate == a_up) {
        moe_experts_mm(c, L, MOE_GATE | MOE_UP, s_gate);
    } else { /* the rows converted again for up */
        moe_experts_mm(c, L, MOE_GATE, s_gate);
        moe_rows_job gj = {.c = c, .xb = c->xb, .act = a_up, .stride = s_up};
        st_pool_run(c->pool, moe_ph_gather, &gj);
        moe_experts_mm(c, L, MOE_UP, s_up);
    }
    /* gate = act(gate) * up, converted for down; y = down over the rows */
    size_t s_down;
    moe_rows_job aj = {.c = c,
                       .gate = c->moe_gate,
                       .up = c->moe_up,
                       .act = moe_act_of(&L->experts[0].down, &s_down)};
    aj.stride = s_down;
    st_pool_run(c->pool, moe_ph_act, &aj);
    moe_experts_mm(c, L, MOE_DOWN, s_down);

    /* xb2 = the weighted sum of each token's experts' outputs */
    moe_combine_job cj = {c, c->xb2};
    st_pool_run(c->pool, moe_ph_combine, &cj);
    return (stage_pending){c->xb2, L->ffn_post_norm};
}

st_err st_stage_expert_counts(const st_stage_ctx *c, int64_t layer, const uint64_t **out)
{
    *out = NULL;
    const int64_t first = st_model_first(c->m), last = st_model_last(c->m);
    if (c->hp->n_expert == 0)
        return st_errorf(ST_EINVAL, "the model has no experts");
    if (layer < first || layer >= last)
        return st_errorf(ST_ERANGE, "layer %lld is outside the stage's [%lld, %lld)",
                         (long long)layer, (long long)first, (long long)last);
    *out = c->moe_count + (layer - first) * c->hp->n_expert;
    return ST_OK;
}
