/* stage_impl.h - what the files of the stage's forward pass share (not a
 * public interface: stage.h is). stage.c runs the pass and its dense
 * layers; stage_moe.c the FFN of a mixture-of-experts layer. The context
 * (st_stage_ctx) is owned by stage.c, which allocates it (the MoE scratch
 * too) and sets the batch layout; stage_moe.c reads it and writes only
 * its moe_* scratch, the output named by its caller and the counters. */
#ifndef ST_STAGE_IMPL_H
#define ST_STAGE_IMPL_H

#include <stdatomic.h>

#include "worker/engine/stage.h"

/* A product y = in W^T over n_tok rows of in: y [n_tok][w->n_out] from
 * in [n_tok][stride bytes], in w's activation dtype (or f32 read in place). */
typedef struct stage_mm {
    const st_weight *w;
    float *y;
    const void *in;
    size_t stride;
    int64_t n_tok;
} stage_mm;

/* The most weight matrices one matmul phase serves (q, k and v). */
#define STAGE_MAX_MM 3

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

/* The largest context st_stage_ctx_open accepts, in tokens per batch. */
#define STAGE_MAX_TOKENS (1 << 20)

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

    /* activations, for T <= max_tokens tokens (see the file comment) */
    float *x;         /* [T][n_embd] the residual stream */
    float *xb;        /* [T][n_embd] rmsnorm(x) * norm: a branch's input */
    float *q;         /* [T][q_dim] queries (n_head heads of head_dim) */
    float *k;         /* [T][kv_dim] keys (n_head_kv heads of head_dim) */
    float *v;         /* [T][kv_dim] values */
    float *att;       /* [T][q_dim] attention output, heads side by side */
    float *xb2;       /* [T][n_embd] a branch's output, to be added to x */
    float *hb;        /* [T][n_ff] gate, then silu(gate) * up */
    float *hb2;       /* [T][n_ff] up */
    uint8_t *xq;      /* [T][act_bytes] a product's input in its activation dtype */
    size_t act_bytes; /* the widest converted input row of this stage's weights */
    float *scores;    /* [nth][max_ctx] attention scores, a row per thread */
    float *rope_cs;   /* [nth][n_rot] a token's rope angles (cos, sin), a row per thread */

    /* a mixture of experts' scratch (stage_moe.c; NULL in a dense model), for
     * T tokens routed to n_used experts each: R = T * n_used rows, each a
     * (token, expert) pair, grouped by expert */
    float *moe_logits;     /* [T][n_expert] the router's logits, then probabilities */
    int32_t *moe_sel;      /* [T][n_used] each token's experts, most probable first */
    float *moe_w;          /* [T][n_used] their weights */
    int32_t *moe_row_tok;  /* [R] the token of each grouped row */
    int32_t *moe_slot_row; /* [T][n_used] the grouped row of each (token, slot) */
    int64_t *moe_off;      /* [n_expert + 1] each expert's first grouped row */
    float *moe_gate;       /* [R][n_ff_exp] gate, then act(gate) * up */
    float *moe_up;         /* [R][n_ff_exp] up */
    float *moe_y;          /* [R][n_embd] each row's expert output */
    stage_mm *moe_mm;      /* [2 n_expert] the products of one matmul phase */
    long *moe_chunk0;      /* [2 n_expert + 1] their first chunks */
    uint64_t *moe_count;   /* [n_layers][n_expert] tokens routed to each expert
                            * by this context since it was opened */
    uint8_t *moe_xtok;     /* [T][act_bytes] each token's xb converted for the
                            * experts' gate (copied to its rows in xq) */

    /* the batch being run (set once per st_stage_forward) */
    const st_batch_row *rows;
    int64_t n_tok;    /* T */
    int64_t *tok_row; /* [T] the row of each token */
    int64_t *tok_pos; /* [T] the position of each token */
    int64_t *sel;     /* [T] the tokens whose logits the head computes */
};


/* A branch's output waiting to be added to x: add [T][n_embd], first
 * normalized in place by post (rmsnorm(add) * post) when post is not NULL. */
typedef struct stage_pending {
    float *add;
    const float *post;
} stage_pending;

/* The per-token steps before a product, run by the thread owning the
 * token in this order; a step whose pointer is NULL is skipped:
 *   add = rmsnorm(add) * post;  x += add;  xb = rmsnorm(x) * norm;
 *   gate = act(gate) * up */
typedef struct stage_prep {
    float *x;           /* [T][n_embd] the residual stream */
    stage_pending add;  /* a branch's output, or add.add NULL */
    const float *norm;  /* [n_embd] the norm's weights, or NULL */
    float *xb;          /* [T][n_embd] the norm's output */
    float *gate;        /* [T][n_ff] gate, or NULL */
    const float *up;    /* [T][n_ff] up */
    st_ffn_act act;     /* the gate's activation */
} stage_prep;

/* stage_add_norm - the prep x += add; xb = rmsnorm(x) * norm. */
stage_prep stage_add_norm(float *x, stage_pending add, const float *norm, float *xb);

/* stage_matmuls - the steps of prep, then y_i = in W_i^T for the n_mm
 * (<= STAGE_MAX_MM) products of mm, all reading in (n_in = width) over
 * n_tok tokens (their in, stride and n_tok are set here). */
void stage_matmuls(st_stage_ctx *c, int64_t n_tok, stage_prep prep, const float *in,
                   int64_t width, const stage_mm *mm, int n_mm);

/* stage_run_mm - one matmul phase over n_mm products, each with its own
 * input (in, stride, n_tok set), sharing the threads chunk by chunk;
 * chunk0 is scratch of n_mm + 1. */
void stage_run_mm(st_stage_ctx *c, const stage_mm *mm, int n_mm, long *chunk0);

/* stage_moe_alloc - the moe_* scratch of c for max_tokens tokens (nothing
 * for a dense model); ST_ENOMEM. Freed by stage_moe_free. */
st_err stage_moe_alloc(st_stage_ctx *c);
void stage_moe_free(st_stage_ctx *c);

/* llama.cpp's floor of the sum a renormalization divides by: the smallest
 * normal f16, 2^-14 (build_moe_ffn's ggml_clamp) */
#define STAGE_MOE_WEIGHT_SUM_MIN 6.103515625e-5f

/* stage_moe_route_token - one token's routing as llama.cpp computes it
 * (stage_moe.c's file comment): p [n_expert], in: the router's logits, out:
 * their softmax; sel [n_used]: the experts of largest probability, most
 * probable first, equal probabilities in index order; w [n_used]: as
 * stage_moe_weights. Exposed for the engine tests. */
void stage_moe_route_token(float *p, int64_t n_expert, int64_t n_used, bool norm, int32_t *sel,
                           float *w);

/* stage_moe_weights - w[s] = p[sel[s]] for the n_used slots, divided by
 * max(their sum (in double, then rounded to float), STAGE_MOE_WEIGHT_SUM_MIN)
 * when norm (the architecture's moe_norm_w). */
void stage_moe_weights(const float *p, const int32_t *sel, int64_t n_used, bool norm, float *w);

/* stage_moe_ffn - the FFN of mixture-of-experts layer l over the batch:
 * x += pending; xb = rmsnorm(x) * ffn_norm; the router, each token's
 * experts and weights (llama.cpp's routing, stage_moe.c), the experts'
 * products over the tokens routed to them, and xb2 = the weighted sum of
 * each token's experts' outputs. Returns the pending x += xb2. */
stage_pending stage_moe_ffn(st_stage_ctx *c, int64_t l, stage_pending pending);

#endif
