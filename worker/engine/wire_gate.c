/* wire_gate.c - the wire accuracy gate (see wire_gate.h). */
#include "worker/engine/wire_gate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "worker/engine/local.h"

/* The packet buffer: two halves (the codec's packet, then zstd's), each
 * room for a WG_MAX_TOKENS-token f32 packet with its header and zstd's
 * worst-case expansion. */
#define WG_MAX_TOKENS 128 /* the local engine's prefill chunk: tokens per hook call */
#define WG_PACKET_SLACK 65536
#define WG_BYTES_PER_VALUE 6

struct st_wgate {
    st_local l;
    const atomic_int *cancel;
    float *ref;      /* [n_steps][n_vocab] reference logits */
    int32_t *path;   /* [n_prompt + n_steps] */
    size_t n_prompt; /* of path */
    int64_t n_steps;
};

typedef struct wg_hook {
    st_wire_ctx *wctx;
    st_wire_dtype dtype;
    int64_t n_layer;
    uint8_t *buf;
    size_t cap;
    st_wgate_figs *f;
    st_err err;
} wg_hook;

/* wg_layer_hook - after each layer but the last: the hidden state through
 * an encode and decode of h->dtype, and its zstd sizes measured. */
static void wg_layer_hook(void *arg, int64_t layer, float *hidden, int64_t n_tok, int64_t n_embd)
{
    wg_hook *h = arg;
    if (layer + 1 >= h->n_layer || h->err != ST_OK)
        return; /* the last layer's output goes to the head, not over a wire */
    static const uint8_t plan[ST_WIRE_PLAN_HASH_SIZE];
    st_wire_hdr hdr = {.version = ST_WIRE_VERSION,
                       .dtype = h->dtype,
                       .stage = 1,
                       .epoch = 1,
                       .n_rows = 1,
                       .hidden = (uint32_t)n_embd,
                       .n_tokens = (uint32_t)n_tok};
    memcpy(hdr.plan_hash, plan, sizeof plan);
    st_wire_row row = {.session_id = 1, .pos0 = 0, .n_tokens = (uint32_t)n_tok};
    st_wire_opts o = {.dtype = h->dtype};
    st_wire_stats stats = {0};
    size_t len = 0;
    st_err e = st_wire_encode_buf(&hdr, &row, hidden, &o, h->wctx, h->buf, h->cap / 2, &len,
                                  &stats);
    if (e == ST_OK) {
        st_wire_expect exp = {.epoch = 1,
                              .plan_hash = plan,
                              .stage = 1,
                              .hidden = (uint32_t)n_embd,
                              .max_tokens = (uint32_t)n_tok};
        st_wire_hdr got;
        st_wire_row grow;
        e = st_wire_decode(h->wctx, h->buf, len, &exp, &got, &grow, 1, hidden,
                           (size_t)(n_tok * n_embd));
    }
    h->f->clamps += stats.n_clamped;
    /* the same hidden states with zstd (level 1), and byte planes for 16-bit
     * payloads: the compression ratio on real activations */
    for (int planes = 0; e == ST_OK && planes < 2; planes++) {
        if (planes && !st_wire_dtype_planes(h->dtype))
            break;
        st_wire_opts oz = {.dtype = h->dtype, .zstd_level = 1, .plane_split = planes != 0};
        st_wire_stats sz = {0};
        size_t zl = 0;
        e = st_wire_encode_buf(&hdr, &row, hidden, &oz, h->wctx, h->buf + h->cap / 2, h->cap / 2,
                               &zl, &sz);
        if (planes) {
            h->f->plane_bytes += sz.wire_bytes;
        } else {
            h->f->raw_bytes += sz.raw_bytes;
            h->f->zstd_bytes += sz.wire_bytes;
        }
    }
    h->err = e;
}

static void wg_top5(const float *x, int64_t n, int64_t out[ST_WGATE_TOPK])
{
    for (int k = 0; k < ST_WGATE_TOPK; k++) {
        int64_t best = -1;
        for (int64_t i = 0; i < n; i++) {
            int taken = 0;
            for (int j = 0; j < k; j++)
                taken |= out[j] == i;
            if (!taken && (best < 0 || x[i] > x[best]))
                best = i;
        }
        out[k] = best;
    }
}

/* wg_compare - one step's logits got against the reference's ref. */
static void wg_compare(const float *ref, const float *got, int64_t n, st_wgate_figs *s)
{
    int64_t r5[ST_WGATE_TOPK], g5[ST_WGATE_TOPK];
    wg_top5(ref, n, r5);
    wg_top5(got, n, g5);
    double scale = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)ref[i] - got[i]);
        if (d > s->max_err)
            s->max_err = d;
        if (fabs(ref[i]) > scale)
            scale = fabs(ref[i]);
    }
    int overlap = 0;
    for (int a = 0; a < ST_WGATE_TOPK; a++)
        for (int b = 0; b < ST_WGATE_TOPK; b++)
            overlap += r5[a] == g5[b];
    s->steps++;
    s->top1_agree += r5[0] == g5[0];
    s->top5_sum += overlap;
    if (ref[r5[0]] - ref[r5[1]] > ST_WGATE_MARGIN * scale) {
        s->margin_steps++;
        s->margin_fail += r5[0] != g5[0];
    }
}

static bool wg_cancelled(const st_wgate *g)
{
    return g->cancel != NULL && atomic_load(g->cancel) != 0;
}

st_err st_wgate_open(const char *path, int threads, int64_t n_ctx, st_wgate **out)
{
    *out = NULL;
    st_wgate *g = calloc(1, sizeof *g);
    if (g == NULL)
        return st_errorf(ST_ENOMEM, "wire gate");
    st_err e = st_local_open(&g->l, path, threads, NULL, WG_MAX_TOKENS, n_ctx,
                             ST_DT_F32); /* the wire's effect alone, as before typed caches */
    if (e != ST_OK) {
        free(g);
        return e;
    }
    *out = g;
    return ST_OK;
}

void st_wgate_close(st_wgate *g)
{
    if (g == NULL)
        return;
    st_local_close(&g->l);
    free(g->ref);
    free(g->path);
    free(g);
}

void st_wgate_cancel(st_wgate *g, const atomic_int *flag) { g->cancel = flag; }

int64_t st_wgate_n_layer(const st_wgate *g) { return st_model_hparams(g->l.m)->n_layer; }

int64_t st_wgate_n_embd(const st_wgate *g) { return st_model_hparams(g->l.m)->n_embd; }

int64_t st_wgate_n_ctx(const st_wgate *g) { return g->l.n_ctx; }

st_err st_wgate_reference(st_wgate *g, const int32_t *prompt, size_t n_prompt, int64_t n_steps)
{
    if (n_prompt < 1 || n_steps < 1)
        return st_errorf(ST_EINVAL, "a wire gate needs a prompt and a step");
    if ((int64_t)n_prompt + n_steps > g->l.n_ctx)
        return st_errorf(ST_ERANGE, "prompt + n exceeds the context of %lld",
                         (long long)g->l.n_ctx);
    size_t V = (size_t)g->l.n_vocab;
    free(g->ref);
    free(g->path);
    g->ref = malloc((size_t)n_steps * V * sizeof(float));
    g->path = malloc(((size_t)n_steps + n_prompt) * sizeof *g->path);
    g->n_steps = 0;
    if (g->ref == NULL || g->path == NULL)
        return st_errorf(ST_ENOMEM, "%lld steps of %zu logits", (long long)n_steps, V);
    memcpy(g->path, prompt, n_prompt * sizeof *g->path);
    g->n_prompt = n_prompt;
    st_err e = st_local_eval(&g->l, prompt, (int64_t)n_prompt, 0);
    for (int64_t s = 0; e == ST_OK && s < n_steps; s++) {
        memcpy(g->ref + (size_t)s * V, g->l.logits, V * sizeof(float));
        int32_t id = (int32_t)g->l.ops->argmax(g->l.logits, g->l.n_vocab);
        g->path[n_prompt + (size_t)s] = id;
        if (wg_cancelled(g))
            e = st_errorf(ST_ECANCELED, "the wire gate was cancelled");
        else if (s + 1 < n_steps)
            e = st_local_eval(&g->l, &id, 1, (int64_t)n_prompt + s);
    }
    if (e == ST_OK)
        g->n_steps = n_steps;
    return e;
}

st_err st_wgate_run(st_wgate *g, st_wire_dtype d, st_wgate_figs *out)
{
    memset(out, 0, sizeof *out);
    if (g->n_steps == 0)
        return st_errorf(ST_EINVAL, "st_wgate_run before a reference");
    int64_t n_embd = st_wgate_n_embd(g);
    wg_hook hk = {.dtype = d, .n_layer = st_wgate_n_layer(g), .f = out};
    hk.cap = 2 * (WG_PACKET_SLACK + (size_t)WG_MAX_TOKENS * (size_t)n_embd * WG_BYTES_PER_VALUE);
    st_err e = st_wire_ctx_new(0, &hk.wctx);
    if (e == ST_OK && (hk.buf = malloc(hk.cap)) == NULL)
        e = st_errorf(ST_ENOMEM, "wire gate packets");
    if (e != ST_OK) {
        st_wire_ctx_free(hk.wctx);
        return e;
    }
    size_t V = (size_t)g->l.n_vocab, np = g->n_prompt;
    st_stage_set_hook(g->l.ctx, wg_layer_hook, &hk);
    e = st_local_eval(&g->l, g->path, (int64_t)np, 0);
    for (int64_t s = 0; e == ST_OK && hk.err == ST_OK && s < g->n_steps; s++) {
        wg_compare(g->ref + (size_t)s * V, g->l.logits, g->l.n_vocab, out);
        if (wg_cancelled(g))
            e = st_errorf(ST_ECANCELED, "the wire gate was cancelled");
        else if (s + 1 < g->n_steps)
            e = st_local_eval(&g->l, &g->path[np + (size_t)s], 1, (int64_t)np + s);
    }
    st_stage_set_hook(g->l.ctx, NULL, NULL);
    if (e == ST_OK)
        e = hk.err;
    st_wire_ctx_free(hk.wctx);
    free(hk.buf);
    return e;
}

st_err st_wgate_i8(const char *path, int threads, const atomic_int *cancel, st_wgate_figs *out)
{
    memset(out, 0, sizeof *out);
    const int32_t prompt[] = {ST_WGATE_CALIB_ID};
    const size_t n_prompt = sizeof prompt / sizeof prompt[0];
    st_wgate *g;
    st_err e = st_wgate_open(path, threads, (int64_t)n_prompt + ST_WGATE_CALIB_STEPS, &g);
    if (e != ST_OK)
        return e;
    st_wgate_cancel(g, cancel);
    if ((e = st_wgate_reference(g, prompt, n_prompt, ST_WGATE_CALIB_STEPS)) == ST_OK)
        e = st_wgate_run(g, ST_WIRE_I8, out);
    st_wgate_close(g);
    return e;
}
