/* model.c - binding a stage's tensors from a GGUF file (see model.h).
 *
 * The file is the source of truth: the weights are views into the
 * read-only mapping, except that st_model_place may afterwards move the
 * matrices into memory of its own (huge pages), rewritten into the R8
 * layout (kernels/repack.h) where the kernels have one, deterministically
 * from those views. Validation is complete
 * before the engine sees a pointer: every tensor the stage needs must
 * exist, have a supported type, and have exactly the shape the
 * hyperparameters imply; norms and biases must be f32. Key and tensor
 * names come from common/model/arch.h, the hyperparameters from common/model/llama.h
 * (st_hparams_from_gguf). A missing key or tensor is
 * ST_EMISSING, a contradicting shape ST_ESHAPE, each naming the culprit. */
#include "worker/engine/model.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/base/clock.h"
#include "common/base/log.h"
#include "kernels/repack.h"

/* The attention's matrices (wq, wk, wv, wo): the first of a layer's
 * ST_LAYER_MATRICES, all a mixture-of-experts layer has besides its router
 * and experts. */
#define MODEL_ATTN_MATRICES 4

struct st_model {
    atomic_uint refs; /* holders (st_model_ref); the last st_model_close frees */
    st_gguf *owned;   /* the file, if we opened it */
    const st_gguf *g;
    st_hparams hp;
    int64_t first, last;
    bool has_embd, has_head;
    st_weight tok_embd; /* [n_vocab rows of n_embd] */
    const float *out_norm;
    st_weight output; /* n_embd -> n_vocab */
    st_layer *layers; /* [last - first] */
    const float *rope_freqs, *rope_long, *rope_short; /* [n_rot / 2] each, or NULL */
    size_t resident;
    size_t weight_bytes;
    uint8_t id[32];
    void *own_buf; /* the placed matrices (st_model_place), or NULL */
    size_t own_len;
};

/* model_tensor - finds name and checks its dims equal (ne0, ne1). */
static st_err model_tensor(st_model *m, const char *name, int64_t ne0, int64_t ne1,
                           const st_gguf_tensor **out)
{
    const st_gguf_tensor *t = st_gguf_find_tensor(m->g, name);
    if (t == NULL)
        return st_errorf(ST_EMISSING, "tensor '%s' is missing", name);
    int64_t want_dims = ne1 > 1 ? 2 : 1;
    bool ok = t->ne[0] == ne0 && t->ne[1] == ne1 && t->ne[2] == 1 && t->ne[3] == 1 &&
              (int64_t)t->n_dims <= 2 && ((int64_t)t->n_dims == want_dims || ne1 == 1);
    if (!ok)
        return st_errorf(ST_ESHAPE,
                         "tensor '%s' has shape [%lld, %lld, %lld, %lld]; the hyperparameters "
                         "imply [%lld, %lld]",
                         name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                         (long long)t->ne[3], (long long)ne0, (long long)ne1);
    m->resident += st_gguf_touch(m->g, t);
    m->weight_bytes += t->nbytes;
    *out = t;
    return ST_OK;
}

/* model_tensor3 - finds name and checks its dims equal (ne0, ne1, ne2): a
 * stack of ne2 matrices. */
static st_err model_tensor3(st_model *m, const char *name, int64_t ne0, int64_t ne1, int64_t ne2,
                            const st_gguf_tensor **out)
{
    const st_gguf_tensor *t = st_gguf_find_tensor(m->g, name);
    if (t == NULL)
        return st_errorf(ST_EMISSING, "tensor '%s' is missing", name);
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != ne2 || t->ne[3] != 1 || t->n_dims != 3)
        return st_errorf(ST_ESHAPE,
                         "tensor '%s' has shape [%lld, %lld, %lld, %lld]; the hyperparameters "
                         "imply [%lld, %lld, %lld]",
                         name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                         (long long)t->ne[3], (long long)ne0, (long long)ne1, (long long)ne2);
    m->resident += st_gguf_touch(m->g, t);
    m->weight_bytes += t->nbytes;
    *out = t;
    return ST_OK;
}

/* model_vec - an f32 vector of n values (norm weights, rope factors). */
static st_err model_vec(st_model *m, const char *name, int64_t n, const float **out)
{
    const st_gguf_tensor *t = NULL;
    st_err e = model_tensor(m, name, n, 1, &t);
    if (e != ST_OK)
        return e;
    if (t->dtype != ST_DT_F32)
        return st_errorf(ST_ETYPE, "tensor '%s' has type %s; f32 is required", name,
                         st_dtype_info_of(t->dtype)->name);
    *out = t->data;
    return ST_OK;
}

static st_err model_norm(st_model *m, const char *name, const float **out)
{
    return model_vec(m, name, m->hp.n_embd, out);
}

/* model_opt_vec - tensor t (of layer l) as a vector of n when the
 * architecture requires it or makes it optional and the file has it;
 * NULL otherwise (an absent tensor the file has was refused by
 * st_arch_from_gguf). */
static st_err model_opt_vec(st_model *m, st_arch_tensor t, int64_t l, int64_t n,
                            const float **out)
{
    char name[ST_ARCH_NAME_MAX];
    st_arch_tensor_name(t, l, name);
    *out = NULL;
    const st_arch_need need = st_arch_tensor_need(m->hp.arch, m->hp.n_expert > 0, t);
    if (need == ST_AN_ABSENT || (need == ST_AN_OPTIONAL && !st_gguf_find_tensor(m->g, name)))
        return ST_OK;
    return model_vec(m, name, n, out);
}

/* model_view - rows [r0, r0 + n_out) of w as a weight of its own. */
static st_weight model_view(const st_weight *w, int64_t r0, int64_t n_out)
{
    st_weight v = *w;
    v.data = (const uint8_t *)w->data + (size_t)r0 * w->row_bytes;
    v.n_out = n_out;
    return v;
}

/* model_weight_of - w: t's data as a matrix of n_out rows of n_in,
 * after checking that Strata computes with t's dtype. */
static st_err model_weight_of(const st_gguf_tensor *t, const char *name, int64_t n_in,
                              int64_t n_out, st_weight *w)
{
    size_t rb;
    if (st_row_size(t->dtype, n_in, &rb) != ST_K_OK)
        return st_errorf(ST_ESHAPE, "tensor '%s': row of %lld is not a multiple of the %s block",
                         name, (long long)n_in, st_dtype_info_of(t->dtype)->name);
    /* the reference table is the set of dtypes Strata computes with (every
     * SIMD table covers the same dtypes, falling back to the reference) */
    const st_kernel_ops *ref = st_kernels_ref();
    if (ref->mul_mat[t->dtype] == NULL || ref->to_float[t->dtype] == NULL)
        return st_errorf(ST_ETYPE,
                         "tensor '%s' has dtype %s (ggml type %u), which has no "
                         "kernel yet",
                         name, st_dtype_info_of(t->dtype)->name, t->ggml_type);
    w->data = t->data;
    w->dtype = t->dtype;
    w->n_in = n_in;
    w->n_out = n_out;
    w->row_bytes = rb;
    return ST_OK;
}

static st_err model_weight(st_model *m, const char *name, int64_t n_in, int64_t n_out, st_weight *w)
{
    const st_gguf_tensor *t = NULL;
    st_err e = model_tensor(m, name, n_in, n_out, &t);
    return e != ST_OK ? e : model_weight_of(t, name, n_in, n_out, w);
}

/* model_bind_experts - the router (f32, as llama.cpp's loader requires
 * nothing else of it: Strata computes it as an f32 product) and each
 * expert's three matrices, views of slice e of the stacked tensors. */
static st_err model_bind_experts(st_model *m, char n[][ST_ARCH_NAME_MAX], st_layer *L)
{
    const st_hparams *hp = &m->hp;
    const int64_t ne = hp->n_expert, f = hp->n_ff_exp, d = hp->n_embd;
    st_err e = model_weight(m, n[ST_AT_FFN_GATE_INP], d, ne, &L->w_router);
    if (e != ST_OK)
        return e;
    if (L->w_router.dtype != ST_DT_F32)
        return st_errorf(ST_ETYPE, "tensor '%s' has type %s; f32 is required",
                         n[ST_AT_FFN_GATE_INP], st_dtype_info_of(L->w_router.dtype)->name);
    const struct {
        st_arch_tensor t;
        int64_t n_in, n_out;
        size_t off; /* of the st_weight in st_expert */
    } parts[ST_EXPERT_MATRICES] = {
        {ST_AT_FFN_GATE_EXPS, d, f, offsetof(st_expert, gate)},
        {ST_AT_FFN_UP_EXPS, d, f, offsetof(st_expert, up)},
        {ST_AT_FFN_DOWN_EXPS, f, d, offsetof(st_expert, down)},
    };
    if ((L->experts = calloc((size_t)ne, sizeof *L->experts)) == NULL)
        return st_errorf(ST_ENOMEM, "the table of %lld experts", (long long)ne);
    for (int i = 0; i < ST_EXPERT_MATRICES; i++) {
        const st_gguf_tensor *t = NULL;
        st_weight w = {0};
        if ((e = model_tensor3(m, n[parts[i].t], parts[i].n_in, parts[i].n_out, ne, &t)) ||
            (e = model_weight_of(t, n[parts[i].t], parts[i].n_in, parts[i].n_out, &w)))
            return e;
        for (int64_t x = 0; x < ne; x++) {
            st_weight *dst = (st_weight *)((uint8_t *)&L->experts[x] + parts[i].off);
            *dst = model_view(&w, x * parts[i].n_out, parts[i].n_out);
        }
    }
    return ST_OK;
}

/* model_bind_qkv - wq, wk, wv: from attn_qkv's rows when the layer has
 * it (then attn_q, attn_k and attn_v must be absent), else the three. */
static st_err model_bind_qkv(st_model *m, int64_t l, char n[][ST_ARCH_NAME_MAX], st_layer *L)
{
    const st_hparams *hp = &m->hp;
    if (st_gguf_find_tensor(m->g, n[ST_AT_ATTN_QKV]) == NULL) {
        st_err e;
        if ((e = model_weight(m, n[ST_AT_ATTN_Q], hp->n_embd, hp->q_dim, &L->wq)) ||
            (e = model_weight(m, n[ST_AT_ATTN_K], hp->n_embd, hp->kv_dim, &L->wk)) ||
            (e = model_weight(m, n[ST_AT_ATTN_V], hp->n_embd, hp->kv_dim, &L->wv)))
            return e;
        return ST_OK;
    }
    const st_arch_tensor split[] = {ST_AT_ATTN_Q, ST_AT_ATTN_K, ST_AT_ATTN_V};
    for (size_t i = 0; i < sizeof split / sizeof split[0]; i++)
        if (st_gguf_find_tensor(m->g, n[split[i]]) != NULL)
            return st_errorf(ST_EINVAL, "layer %lld has both '%s' and '%s'", (long long)l,
                             n[ST_AT_ATTN_QKV], n[split[i]]);
    st_weight qkv;
    st_err e =
        model_weight(m, n[ST_AT_ATTN_QKV], hp->n_embd, hp->q_dim + 2 * hp->kv_dim, &qkv);
    if (e != ST_OK)
        return e;
    L->wq = model_view(&qkv, 0, hp->q_dim);
    L->wk = model_view(&qkv, hp->q_dim, hp->kv_dim);
    L->wv = model_view(&qkv, hp->q_dim + hp->kv_dim, hp->kv_dim);
    return ST_OK;
}

/* model_bind_ffn - w_gate, w_up, w_down; a fused ffn_up (phi3) holds the
 * gate's n_ff rows, then the up projection's. */
static st_err model_bind_ffn(st_model *m, char n[][ST_ARCH_NAME_MAX], st_layer *L)
{
    const st_hparams *hp = &m->hp;
    st_err e;
    if (hp->n_expert > 0)
        return model_bind_experts(m, n, L);
    if (hp->arch->fused_up) {
        st_weight up;
        if ((e = model_weight(m, n[ST_AT_FFN_UP], hp->n_embd, 2 * hp->n_ff, &up)))
            return e;
        L->w_gate = model_view(&up, 0, hp->n_ff);
        L->w_up = model_view(&up, hp->n_ff, hp->n_ff);
    } else if ((e = model_weight(m, n[ST_AT_FFN_GATE], hp->n_embd, hp->n_ff, &L->w_gate)) ||
               (e = model_weight(m, n[ST_AT_FFN_UP], hp->n_embd, hp->n_ff, &L->w_up))) {
        return e;
    }
    return model_weight(m, n[ST_AT_FFN_DOWN], hp->n_ff, hp->n_embd, &L->w_down);
}

static st_err model_bind_layer(st_model *m, int64_t l, st_layer *L)
{
    const st_hparams *hp = &m->hp;
    char n[ST_AT_COUNT][ST_ARCH_NAME_MAX];
    for (int i = ST_AT_FIRST_LAYER; i < ST_AT_COUNT; i++)
        st_arch_tensor_name((st_arch_tensor)i, l, n[i]);
    const bool qk_full = hp->arch->qk_norm_full; /* olmoe: over all of q and k */
    st_err e;
    if ((e = model_norm(m, n[ST_AT_ATTN_NORM], &L->attn_norm)) ||
        (e = model_bind_qkv(m, l, n, L)) ||
        (e = model_opt_vec(m, ST_AT_ATTN_Q_BIAS, l, hp->q_dim, &L->bq)) ||
        (e = model_opt_vec(m, ST_AT_ATTN_K_BIAS, l, hp->kv_dim, &L->bk)) ||
        (e = model_opt_vec(m, ST_AT_ATTN_V_BIAS, l, hp->kv_dim, &L->bv)) ||
        (e = model_opt_vec(m, ST_AT_ATTN_Q_NORM, l, qk_full ? hp->q_dim : hp->head_dim,
                           &L->q_norm)) ||
        (e = model_opt_vec(m, ST_AT_ATTN_K_NORM, l, qk_full ? hp->kv_dim : hp->head_dim,
                           &L->k_norm)) ||
        (e = model_weight(m, n[ST_AT_ATTN_OUT], hp->q_dim, hp->n_embd, &L->wo)) ||
        (e = model_opt_vec(m, ST_AT_ATTN_POST_NORM, l, hp->n_embd, &L->attn_post_norm)) ||
        (e = model_norm(m, n[ST_AT_FFN_NORM], &L->ffn_norm)) || (e = model_bind_ffn(m, n, L)) ||
        (e = model_opt_vec(m, ST_AT_FFN_POST_NORM, l, hp->n_embd, &L->ffn_post_norm)))
        return e;
    return ST_OK;
}

st_err st_model_open_gguf(const st_gguf *g, int64_t first, int64_t last, st_model **out)
{
    *out = NULL;
    st_model *m = calloc(1, sizeof *m);
    if (m == NULL)
        return st_errorf(ST_ENOMEM, "model");
    atomic_init(&m->refs, 1);
    m->g = g;
    st_err e = st_hparams_from_gguf(g, &m->hp);
    if (e != ST_OK)
        goto fail;
    if (last < 0)
        last = m->hp.n_layer;
    /* an empty range is allowed at either end only: [0, 0) is the
     * embedding alone, [n_layer, n_layer) the head alone (a client's ends
     * of a chain of shard servers, docs/shards.md) */
    const bool end_only = first == last && (first == 0 || last == m->hp.n_layer);
    if (first < 0 || (first >= last && !end_only) || last > m->hp.n_layer) {
        e = st_errorf(ST_ERANGE, "layer range [%lld, %lld) is not inside [0, %lld)",
                      (long long)first, (long long)last, (long long)m->hp.n_layer);
        goto fail;
    }
    m->first = first;
    m->last = last;
    m->has_embd = first == 0;
    m->has_head = last == m->hp.n_layer;
    if ((e = st_gguf_model_id(g, m->id)))
        goto fail;
    m->layers = calloc(last > first ? (size_t)(last - first) : 1, sizeof *m->layers);
    if (m->layers == NULL) {
        e = st_errorf(ST_ENOMEM, "layers");
        goto fail;
    }
    char embd[ST_ARCH_NAME_MAX], name[ST_ARCH_NAME_MAX];
    st_arch_tensor_name(ST_AT_TOKEN_EMBD, 0, embd);
    if (m->has_embd && (e = model_weight(m, embd, m->hp.n_embd, m->hp.n_vocab, &m->tok_embd)))
        goto fail;
    for (int64_t l = first; l < last; l++)
        if ((e = model_bind_layer(m, l, &m->layers[l - first])))
            goto fail;
    if (last > first &&
        ((e = model_opt_vec(m, ST_AT_ROPE_FREQS, 0, m->hp.n_rot / 2, &m->rope_freqs)) ||
         (e = model_opt_vec(m, ST_AT_ROPE_LONG, 0, m->hp.n_rot / 2, &m->rope_long)) ||
         (e = model_opt_vec(m, ST_AT_ROPE_SHORT, 0, m->hp.n_rot / 2, &m->rope_short))))
        goto fail;
    if (m->has_head) {
        if ((e = model_norm(m, st_arch_tensor_name(ST_AT_OUTPUT_NORM, 0, name), &m->out_norm)))
            goto fail;
        const bool tied = st_arch_head_tied(g);
        const char *head = tied ? embd : st_arch_tensor_name(ST_AT_OUTPUT, 0, name);
        if (m->has_embd && tied) {
            m->output = m->tok_embd; /* tied, already touched */
        } else if ((e = model_weight(m, head, m->hp.n_embd, m->hp.n_vocab, &m->output))) {
            goto fail;
        }
    }
    *out = m;
    return ST_OK;
fail:
    st_model_close(m);
    return e;
}

st_err st_model_open(const char *path, int64_t first, int64_t last, st_model **out)
{
    *out = NULL;
    st_gguf *g;
    st_err e = st_gguf_open(path, &g);
    if (e != ST_OK)
        return e;
    e = st_model_open_gguf(g, first, last, out);
    if (e != ST_OK) {
        st_gguf_close(g);
        return e;
    }
    (*out)->owned = g;
    return ST_OK;
}

bool st_model_serves_r8(const st_kernel_ops *ops, st_dtype t)
{
    /* the reference reads the plain layout, which defines the results */
    return ops->variant != ST_KVAR_REF && st_r8_supported(t) && ops->mul_mat_r8[t] != NULL;
}

/* model_r8_ok - whether w is to be repacked for ops. */
static bool model_r8_ok(const st_weight *w, const st_kernel_ops *ops)
{
    return st_model_serves_r8(ops, w->dtype) && w->n_out % ST_R8_ROWS == 0;
}

/* model_place_job - one matrix being placed: its rows split among the
 * pool's threads in whole groups of ST_R8_ROWS. */
typedef struct model_place_job {
    const st_weight *w;
    uint8_t *dst; /* w->n_out * w->row_bytes bytes */
    bool r8;      /* repack, else copy as it is */
} model_place_job;

static void model_place_run(void *arg, int ith, int nth)
{
    const model_place_job *j = arg;
    const st_weight *w = j->w;
    long g0, g1;
    st_pool_split((long)((w->n_out + ST_R8_ROWS - 1) / ST_R8_ROWS), ith, nth, &g0, &g1);
    const int64_t r0 = (int64_t)g0 * ST_R8_ROWS;
    const int64_t r1 = (int64_t)g1 * ST_R8_ROWS < w->n_out ? (int64_t)g1 * ST_R8_ROWS : w->n_out;
    if (r0 >= r1)
        return;
    const size_t off = (size_t)r0 * w->row_bytes;
    if (j->r8) /* shapes were checked at bind: st_r8_repack cannot refuse */
        (void)st_r8_repack(w->dtype, w->n_in, (const uint8_t *)w->data + off, w->row_bytes,
                           r1 - r0, j->dst + off);
    else
        memcpy(j->dst + off, (const uint8_t *)w->data + off, (size_t)(r1 - r0) * w->row_bytes);
}

st_err st_model_place(st_model *m, const st_kernel_ops *ops, st_pool *pool)
{
    if (m->own_buf != NULL)
        return ST_OK;
    const int64_t nl = m->last - m->first;
    /* a dense layer's matrices, or the router and the experts' */
    const size_t per_layer =
        m->hp.n_expert > 0 ? MODEL_ATTN_MATRICES + 1 + (size_t)m->hp.n_expert * ST_EXPERT_MATRICES
                           : ST_LAYER_MATRICES;
    const size_t cap = (size_t)nl * per_layer + 1;
    st_weight **ws = calloc(cap, sizeof *ws);
    if (ws == NULL)
        return st_errorf(ST_ENOMEM, "placing the weights: weight list");
    size_t n = 0, total = 0, n_r8 = 0, r8_bytes = 0;
    for (int64_t l = 0; l < nl; l++) {
        st_layer *L = &m->layers[l];
        st_weight *lw[ST_LAYER_MATRICES] = {&L->wq,     &L->wk,   &L->wv,    &L->wo,
                                            &L->w_gate, &L->w_up, &L->w_down};
        const int n_lw = L->experts != NULL ? MODEL_ATTN_MATRICES : ST_LAYER_MATRICES;
        for (int k = 0; k < n_lw; k++)
            ws[n++] = lw[k];
        if (L->experts != NULL) {
            ws[n++] = &L->w_router;
            for (int64_t x = 0; x < m->hp.n_expert; x++) {
                ws[n++] = &L->experts[x].gate;
                ws[n++] = &L->experts[x].up;
                ws[n++] = &L->experts[x].down;
            }
        }
    }
    const bool tied = m->has_embd && m->has_head && m->output.data == m->tok_embd.data;
    if (m->has_head && !tied)
        ws[n++] = &m->output;
    for (size_t k = 0; k < n; k++)
        total += (size_t)ws[k]->n_out * ws[k]->row_bytes;
    st_err e = ST_OK;
    if (total == 0)
        goto out;
    const double t0 = st_now_s();
    void *buf = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) {
        e = st_errorf(ST_ENOMEM, "placing the weights: %zu bytes", total);
        goto out;
    }
    /* advice: streamed weights through 4 KiB pages miss the TLB so often
     * that decode reads ~25% fewer bytes per second (see model.h) */
    (void)madvise(buf, total, MADV_HUGEPAGE);
    uint8_t *p = buf;
    for (size_t k = 0; k < n; k++) { /* one matrix at a time: the file's pages go as we go */
        const size_t bytes = (size_t)ws[k]->n_out * ws[k]->row_bytes;
        model_place_job job = {ws[k], p, model_r8_ok(ws[k], ops)};
        if (pool != NULL)
            st_pool_run(pool, model_place_run, &job);
        else
            model_place_run(&job, 0, 1);
        st_gguf_release(m->g, ws[k]->data, bytes);
        ws[k]->data = p;
        ws[k]->r8 = job.r8;
        n_r8 += job.r8;
        r8_bytes += job.r8 ? bytes : 0;
        p += bytes;
    }
    m->own_buf = buf;
    m->own_len = total;
    st_log(ST_LOG_INFO, "model",
           "%zu matrices (%.1f MiB) placed in huge-page memory in %.2f s: %zu (%.1f MiB) "
           "repacked in the R8 layout for the %s kernels, %zu copied as they are",
           n, (double)total / (1 << 20), st_now_s() - t0, n_r8, (double)r8_bytes / (1 << 20),
           ops->name, n - n_r8);
out:
    free(ws);
    return e;
}

st_model *st_model_ref(st_model *m)
{
    if (m != NULL)
        atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed);
    return m;
}

void st_model_close(st_model *m)
{
    if (m == NULL)
        return;
    /* acq_rel: every holder's reads of the weights happen before the free */
    if (atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (m->own_buf != NULL)
        munmap(m->own_buf, m->own_len);
    for (int64_t l = 0; m->layers != NULL && l < m->last - m->first; l++)
        free(m->layers[l].experts);
    free(m->layers);
    st_gguf_close(m->owned);
    free(m);
}

const st_hparams *st_model_hparams(const st_model *m) { return &m->hp; }
const st_gguf *st_model_gguf(const st_model *m) { return m->g; }
int64_t st_model_first(const st_model *m) { return m->first; }
int64_t st_model_last(const st_model *m) { return m->last; }
bool st_model_has_embd(const st_model *m) { return m->has_embd; }
bool st_model_has_head(const st_model *m) { return m->has_head; }
const st_layer *st_model_layer(const st_model *m, int64_t l) { return &m->layers[l - m->first]; }
const st_weight *st_model_tok_embd(const st_model *m) { return m->has_embd ? &m->tok_embd : NULL; }
const float *st_model_output_norm(const st_model *m) { return m->has_head ? m->out_norm : NULL; }

const float *st_model_rope_factors(const st_model *m, int64_t n_ctx)
{
    if (m->rope_freqs != NULL)
        return m->rope_freqs;
    return n_ctx > m->hp.n_ctx_orig ? m->rope_long : m->rope_short;
}
const st_weight *st_model_output(const st_model *m) { return m->has_head ? &m->output : NULL; }
size_t st_model_resident(const st_model *m) { return m->resident; }
const uint8_t *st_model_id(const st_model *m) { return m->id; }
size_t st_model_weight_bytes(const st_model *m) { return m->weight_bytes; }
