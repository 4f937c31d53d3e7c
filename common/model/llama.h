/* llama.h - the llama-family model schema: what a GGUF file of a supported
 * architecture says about its model, read in one place for every reader
 * (the stage's model binding, the worker daemon's memory check, the
 * coordinator's model facts, `strata plan --dry-run`).
 *
 * Two files share the schema: common/model/arch.{h,c} is the table (key
 * suffixes, tensor names, which tensors each architecture requires, rope
 * layout, which part of a split model a tensor belongs to), and this
 * module is what is computed from it: the hyperparameters with their
 * defaults and checks, the bytes of each layer, of the embedding and of
 * the head, the bytes of a stage's weights, and the bytes of a KV cache.
 * The worker's and the coordinator's memory accounting both call these
 * functions, so they agree by construction. */
#ifndef ST_LLAMA_H
#define ST_LLAMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/model/arch.h"
#include "common/base/err.h"
#include "common/model/gguf.h"
#include "kernels/kernels.h"
#include "kernels/rope.h"

/* Defaults of optional keys (llama.cpp's). */
#define ST_LLAMA_DEFAULT_CTX 2048           /* <arch>.context_length */
#define ST_LLAMA_DEFAULT_ROPE_BASE 10000.0f /* <arch>.rope.freq_base */

/* The largest count a hyperparameter key may hold (2^31). */
#define ST_LLAMA_MAX_COUNT (1ull << 31)

/* The KV cache's dtype when no --cache-type is given: f16, as llama.cpp. */
#define ST_KV_DEFAULT_DTYPE ST_DT_F16

/* How a file scales rope (rope.scaling.type; llama.cpp's names). */
typedef enum st_rope_scaling {
    ST_ROPE_SCALING_NONE = 0, /* "none", or "linear" without a factor */
    ST_ROPE_SCALING_LINEAR,   /* "linear": angles * 1 / factor */
    ST_ROPE_SCALING_YARN,     /* "yarn" */
    ST_ROPE_SCALING_LONGROPE, /* "longrope" (Phi-3): long/short factors */
} st_rope_scaling;

typedef struct st_hparams {
    const st_arch *arch; /* the architecture's row of common/model/arch.h */
    st_rope_layout rope; /* pairing of rotated dims (arch->rope) */
    int64_t n_embd;      /* model width */
    int64_t n_layer;     /* blocks */
    int64_t n_head;      /* query heads */
    int64_t n_head_kv;   /* key/value heads (GQA when < n_head) */
    int64_t head_dim;    /* attention.key_length, else n_embd / n_head */
    int64_t q_dim;       /* n_head * head_dim: q rows, attn_output inputs */
    int64_t kv_dim;      /* n_head_kv * head_dim */
    int64_t n_ff;        /* FFN width */
    int64_t n_vocab;     /* vocabulary */
    int64_t n_ctx_train; /* context the model was trained for */
    int64_t n_rot;       /* rotated dims per head (rope.dimension_count) */
    float rope_base;     /* rope.freq_base */
    float rms_eps;       /* attention.layer_norm_rms_epsilon */

    /* rope scaling (kernels/rope.h computes the angles from these) */
    st_rope_scaling rope_scaling;
    float rope_freq_scale;  /* 1 / rope.scaling.factor (1: none) */
    float rope_ext_factor;  /* 1 for YaRN, else 0 */
    float rope_attn_factor; /* cos/sin multiplier (YaRN's and rope.scaling.attn_factor) */
    int64_t n_ctx_orig;     /* rope.scaling.original_context_length, else n_ctx_train */
    float rope_base_swa;    /* sliding-window layers' base */
    float rope_scale_swa;   /* sliding-window layers' freq_scale */

    /* attention */
    float attn_scale;     /* scores = attn_scale * q.k */
    float attn_softcap;   /* 0: none; else s = cap * tanh(s / cap) */
    int64_t swa_window;   /* 0: no sliding window; else keys p0 with p - p0 < window */
    int64_t swa_period;   /* sliding-window layers: il % period < period - 1 */
    float final_softcap;  /* 0: none; logits l = cap * tanh(l / cap) */
    float embd_scale;     /* the embedding row times this (1: none) */

    /* mixture of experts (n_expert 0: a dense model; see arch.h st_arch_moe) */
    int64_t n_expert;      /* expert_count: experts per layer */
    int64_t n_expert_used; /* expert_used_count: experts each token is routed to */
    int64_t n_ff_exp;      /* an expert's FFN width (the row's moe_ff_key) */
} st_hparams;

/* The most experts per layer (ST_MOE_MAX_EXPERT) and per token
 * (ST_MOE_MAX_USED) the engine runs: llama.cpp's LLAMA_MAX_EXPERTS is 512;
 * a token's routing is computed in arrays of this size. */
#define ST_MOE_MAX_EXPERT 512
#define ST_MOE_MAX_USED 64

/* st_hparams_layer_swa - whether layer il attends through the sliding window. */
bool st_hparams_layer_swa(const st_hparams *hp, int64_t il);

/* st_hparams_window_start - the first position a token at pos attends to
 * in layer il: pos - swa_window + 1 on a sliding-window layer (at least
 * 0), else 0. */
int64_t st_hparams_window_start(const st_hparams *hp, int64_t il, int64_t pos);

/* st_hparams_rope - the rope parameters of layer il: the sliding-window
 * base and scale on sliding-window layers, else the global ones with the
 * file's scaling; factors: the frequency factors the stage bound for the
 * layer (rope_freqs, or Phi-3's long or short factors), or NULL. */
void st_hparams_rope(const st_hparams *hp, int64_t il, const float *factors, st_rope_params *out);

/* st_hparams_from_gguf - reads the hyperparameters of g and checks them:
 * a supported architecture and rope scaling type (st_arch_from_gguf);
 * embedding_length, block_count, head_count, feed_forward_length and
 * layer_norm_rms_epsilon present; counts in 1..2^31; heads dividing the
 * width, KV heads dividing heads; rotated dims even and within a head;
 * epsilon in (0, 1), base positive and finite. Optional keys default to
 * head_count (head_count_kv), ST_LLAMA_DEFAULT_CTX (context_length), the
 * head dim (rope.dimension_count), ST_LLAMA_DEFAULT_ROPE_BASE and the
 * token embedding's rows (vocab_size). ST_EMISSING / ST_ETYPE / ST_ERANGE
 * / ST_ESHAPE name the key or tensor at fault. */
st_err st_hparams_from_gguf(const st_gguf *g, st_hparams *hp);

/* st_kv_bytes - bytes of a KV cache of n_layers layers, n_ctx positions
 * and kv_dim values per position and layer, K and V, each row of kv_dim
 * values in dtype t (st_row_size: f32 4 bytes a value, f16 2, Q8_0 34 per
 * 32); 0 when a dimension is not positive, t is not a cache type
 * (st_kv_dtype_check without the head), kv_dim is not a multiple of t's
 * block or the size overflows. The worker allocates this and the
 * coordinator reserves it (st_minfo.kv_bytes_per_token_layer is this for
 * one layer and position). */
size_t st_kv_bytes(int64_t n_layers, int64_t n_ctx, int64_t kv_dim, st_dtype t);

/* st_kv_dtype_from_name - the cache type named "f32", "f16" or "q8_0"
 * (--cache-type); NULL names ST_KV_DEFAULT_DTYPE. ST_EINVAL naming the
 * value and the accepted names otherwise. */
st_err st_kv_dtype_from_name(const char *name, st_dtype *out);

/* st_kv_dtype_check - ST_OK if t is a cache type (f32, f16, q8_0) usable
 * with heads of head_dim values: Q8_0 needs head_dim a multiple of 32 (a
 * block never spans two heads); else ST_EINVAL naming the type and the
 * head dimension. */
st_err st_kv_dtype_check(st_dtype t, int64_t head_dim);

/* What placement and the memory checks need to know about a model: its
 * hyperparameters that bound requests, and the bytes of its tensors by
 * the part of a split model they belong to (st_arch_part_of): "blk.N.*"
 * (biases included) to layer N, token_embd to the embedding, output_norm
 * and output to the head, which holds the embedding too when tied (no
 * output.weight), and the rope factor tensors (rope_freqs, Phi-3's long and
 * short factors) to every stage with layers. Other tensors count in the
 * total only. */
typedef struct st_minfo {
    uint32_t n_layer;
    uint32_t n_embd;
    uint32_t n_head;
    uint32_t n_head_kv;
    uint32_t n_vocab;
    uint32_t n_ctx_train;
    uint32_t head_dim;                 /* values per KV head */
    uint32_t kv_dim;                   /* K (or V) values per position and layer */
    uint64_t kv_bytes_per_token_layer; /* st_kv_bytes(1, 1, kv_dim, ST_KV_DEFAULT_DTYPE);
                                        * a coordinator with another --cache-type
                                        * sets it with that type */
    uint64_t *layer_bytes;             /* [n_layer]: every tensor of blk.L.* */
    uint64_t *layer_expert_bytes;      /* [n_layer]: of those, the stacked expert
                                        * tensors (all experts; 0 in a dense model) */
    uint32_t n_expert;                 /* experts per layer (0: dense) */
    uint32_t n_expert_used;            /* experts a token is routed to */
    uint64_t embd_bytes;               /* token_embd.weight */
    uint64_t head_bytes;               /* output_norm + output (or the tied embedding) */
    uint64_t rope_bytes;               /* rope factor tensors: read by every stage with layers */
    uint64_t total_bytes;              /* every tensor */
    bool head_tied;                    /* no output.weight: the head is the embedding */
    char dtype[8];                     /* weight dtype with the most layer bytes */
    uint8_t model_id[32];
    char name[128]; /* general.name, or "" */
} st_minfo;

/* st_minfo_from_gguf - the facts of g: its hyperparameters
 * (st_hparams_from_gguf, the one reader) and its tensor bytes by part.
 * Besides the hyperparameters' errors, ST_ESHAPE names a tensor of a layer
 * beyond block_count, ST_EMISSING a layer without tensors. On error *out
 * holds nothing to free. */
st_err st_minfo_from_gguf(const st_gguf *g, st_minfo *out);

/* st_minfo_layer_active_bytes - the weight bytes one token reads in layer
 * l: the layer's bytes with its experts counted for the n_expert_used of
 * n_expert a token is routed to (the layer's bytes in a dense model). The
 * price of a token's compute and of its decode bandwidth; memory is
 * layer_bytes. */
uint64_t st_minfo_layer_active_bytes(const st_minfo *m, uint32_t l);

/* st_minfo_free - frees the per-layer tables; a zeroed struct is a no-op. */
void st_minfo_free(st_minfo *m);

/* st_minfo_stage_bytes - bytes of the weights a stage of layers
 * [first, last) holds: its layers (and the rope factors when it has any
 * layer), the embedding when first == 0, the
 * head when last == n_layer, a tied embedding once when it is both.
 * Requires first < last <= n_layer. */
uint64_t st_minfo_stage_bytes(const st_minfo *m, uint32_t first, uint32_t last);

#endif
