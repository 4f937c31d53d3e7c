/* model.h - a llama-family model, or the part of it that one stage needs.
 *
 * The architectures are those of common/model/arch.h (llama, qwen2, qwen3,
 * gemma2, gemma3, phi3): their key and tensor names, which tensors a layer
 * has and rope layout come from there; the hyperparameters (st_hparams)
 * are read by common/model/llama.h. Fused tensors are bound as views of
 * their rows: attn_qkv as wq, wk and wv (rows q, then k, then v), a fused
 * ffn_up (phi3) as w_gate (its first n_ff rows) and w_up (the rest).
 * A mixture of experts (hp.n_expert > 0) binds, per layer, the router
 * (ffn_gate_inp, f32) and each expert's slice of the stacked
 * ffn_{gate,up,down}_exps tensors (GGUF ne2 = the expert) as st_expert
 * matrices, instead of w_gate, w_up and w_down.
 *
 * st_model_open() maps a GGUF file, reads and checks the hyperparameters,
 * and binds the tensors of the layer range [first, last): the token
 * embedding too when first == 0, the output norm and head (or the tied
 * embedding when the file has no output.weight) when last == n_layer.
 * The range may be empty at either end: [0, 0) binds the embedding alone
 * and [n_layer, n_layer) the output norm and head alone (a stage of no
 * layers, whose forward pass embeds or applies the head).
 * Only those tensors are touched, so the process's resident memory follows
 * its share of the model; st_model_resident() reports the bytes touched.
 * Every tensor's type and shape is checked against the hyperparameters
 * before use. Weights are immutable after open (and after st_model_place).
 *
 * Ownership. A model is shared by reference: st_model_open gives the
 * caller one reference, st_model_ref adds one, st_model_close drops one,
 * and the last drop frees it. Holders may compute on a placed model from
 * any thread at once (nothing in it changes); st_model_place must run
 * before the model is shared. A worker keeps its stage's weights across
 * plans that keep its layer range this way (worker/daemon/dm_plan.c). */
#ifndef ST_MODEL_H
#define ST_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "common/model/arch.h"
#include "common/base/err.h"
#include "common/model/gguf.h"
#include "common/model/llama.h"
#include "common/base/pool.h"
#include "kernels/kernels.h"

/* A weight matrix mapping n_in inputs to n_out outputs: n_out rows of
 * row_bytes bytes, each n_in elements of dtype (GGUF ne0 = n_in). */
typedef struct st_weight {
    const void *data;
    st_dtype dtype;
    bool r8; /* data is in the R8 layout of kernels/repack.h */
    int64_t n_in;
    int64_t n_out;
    size_t row_bytes;
} st_weight;

/* ST_LAYER_MATRICES - the weight matrices of a dense layer (st_layer below). */
#define ST_LAYER_MATRICES 7

/* One expert of a mixture-of-experts layer: slice e of the layer's stacked
 * ffn_{gate,up,down}_exps tensors, each bound as a matrix of its own. */
typedef struct st_expert {
    st_weight gate; /* n_embd -> n_ff_exp */
    st_weight up;   /* n_embd -> n_ff_exp */
    st_weight down; /* n_ff_exp -> n_embd */
} st_expert;

/* ST_EXPERT_MATRICES - the matrices of an expert (st_expert). */
#define ST_EXPERT_MATRICES 3

typedef struct st_layer {
    const float *attn_norm;      /* [n_embd] */
    st_weight wq;                /* n_embd -> q_dim */
    st_weight wk;                /* n_embd -> kv_dim */
    st_weight wv;                /* n_embd -> kv_dim */
    const float *bq;             /* [q_dim] added to q, or NULL (no bias) */
    const float *bk;             /* [kv_dim] added to k, or NULL */
    const float *bv;             /* [kv_dim] added to v, or NULL */
    const float *q_norm;         /* [head_dim] RMS norm of each q head, or NULL */
    const float *k_norm;         /* [head_dim] RMS norm of each k head, or NULL */
    st_weight wo;                /* q_dim -> n_embd */
    const float *attn_post_norm; /* [n_embd] RMS norm of the attention's output, or NULL */
    const float *ffn_norm;       /* [n_embd] */
    st_weight w_gate;            /* n_embd -> n_ff (a dense layer; unset with experts) */
    st_weight w_up;              /* n_embd -> n_ff */
    st_weight w_down;            /* n_ff -> n_embd */
    const float *ffn_post_norm;  /* [n_embd] RMS norm of the FFN's output, or NULL */
    st_weight w_router;          /* n_embd -> n_expert, f32 (ffn_gate_inp); unset when dense */
    st_expert *experts;          /* [n_expert], or NULL: a dense layer */
} st_layer;

typedef struct st_model st_model;

/* st_model_open - maps path and binds the tensors of layers [first, last)
 * (see the file comment). last < 0 means n_layer. */
st_err st_model_open(const char *path, int64_t first, int64_t last, st_model **out);

/* st_model_open_gguf - the same over an open file; the model borrows g,
 * which must outlive it. */
st_err st_model_open_gguf(const st_gguf *g, int64_t first, int64_t last, st_model **out);

/* st_model_serves_r8 - whether a matrix of dtype t (with a multiple of 8
 * rows) is served in the R8 layout with kernels ops: the rule of
 * st_model_place, also used by the worker's self-measurement. */
bool st_model_serves_r8(const st_kernel_ops *ops, st_dtype t);

/* st_model_place - moves the stage's matrices (every layer matrix and an
 * untied output head) out of the file's mapping into memory the model
 * owns, advised to huge pages: in the R8 layout of kernels/repack.h where
 * ops has an R8 product for the dtype and the matrix has a multiple of 8
 * rows, else copied as they are. Why: decode streams every weight byte
 * once per token, and through the mapping's 4 KiB pages the TLB misses
 * cost ~25% of the bytes per second (TinyLlama-shaped F16, 2 threads:
 * 17 -> 22 tok/s). The token embedding (read row by row) and a head tied
 * to it stay views of the file. The reference kernels get plain copies
 * (they read the plain layout that defines the results; the R8 products
 * give the same bits). Matrices are placed one at a time, each split over
 * pool's threads (pool may be NULL: the calling thread), and the file's
 * pages of each are released before the next, so the peak is the stage
 * plus its largest matrix. On ST_ENOMEM the model is unchanged. Logs what
 * it placed and how long it took. */
st_err st_model_place(st_model *m, const st_kernel_ops *ops, st_pool *pool);

/* st_model_ref - one more reference to m (see Ownership); returns m
 * (NULL gives NULL). Thread-safe. */
st_model *st_model_ref(st_model *m);

/* st_model_close - drops a reference; the last one frees the model and
 * closes the file if st_model_open opened it. Thread-safe. */
void st_model_close(st_model *m);

const st_hparams *st_model_hparams(const st_model *m);
const st_gguf *st_model_gguf(const st_model *m);
int64_t st_model_first(const st_model *m);
int64_t st_model_last(const st_model *m);
bool st_model_has_embd(const st_model *m);
bool st_model_has_head(const st_model *m);
/* st_model_layer - the weights of absolute layer l (first <= l < last). */
const st_layer *st_model_layer(const st_model *m, int64_t l);
const st_weight *st_model_tok_embd(const st_model *m); /* NULL unless has_embd */
const float *st_model_output_norm(const st_model *m);  /* NULL unless has_head */
const st_weight *st_model_output(const st_model *m);   /* NULL unless has_head */
/* st_model_rope_factors - the rope frequency factors for a session of
 * n_ctx positions ([n_rot / 2]), or NULL when the file has none: Llama
 * 3.1's rope_freqs; Phi-3's long factors when n_ctx exceeds the original
 * context (st_hparams.n_ctx_orig), its short ones otherwise (llama.cpp's
 * rule). NULL too on a stage of no layers. */
const float *st_model_rope_factors(const st_model *m, int64_t n_ctx);
/* st_model_resident - bytes of weights this stage touched at open. */
size_t st_model_resident(const st_model *m);
/* st_model_id - the model id (BLAKE2b of metadata and tensor table). */
const uint8_t *st_model_id(const st_model *m);
/* st_model_weight_bytes - bytes of the weights bound by this stage. */
size_t st_model_weight_bytes(const st_model *m);

#endif
