/* arch.h - the model architectures Strata runs: the one home of their GGUF
 * key names, tensor names, optional tensors and rotary layout.
 *
 * Design. A GGUF file names its architecture in general.architecture; its
 * hyperparameter keys are "<arch>.<suffix>" (the suffixes are shared by
 * every architecture, in one table), and its tensors follow llama.cpp's
 * names ("token_embd.weight", "blk.N.attn_q.weight", ...), also one table.
 * Per architecture, a row says which tensors are required, optional or
 * must be absent, and how rope pairs a head's dimensions. Everything that
 * reads keys or tensor names (the stage's model binding, the coordinator's
 * model facts, the worker's stage sizes) goes through here; no other file
 * spells a key or tensor name.
 *
 * Supported: "llama" (q/k/v biases optional, as llama.cpp loads them;
 * normal rope), "qwen2" (q/k/v biases required; NEOX rope), "qwen3"
 * (per-head q/k RMS norms, head_dim from attention.key_length), "gemma2"
 * (sqrt(n_embd) input scale, GELU FFN, post-attention and post-FFN norms,
 * attention and final logit soft-caps, sliding window on alternate layers),
 * "gemma3" (gemma2 without soft-caps, with q/k norms, a sliding window on
 * five layers of six, local layers on their own rope base) and "phi3"
 * (fused attn_qkv, gate and up fused in ffn_up; long/short rope factors);
 * mixtures of experts: "llama" with expert_count > 0 (Mixtral), "qwen3moe"
 * (qwen3's attention, experts of expert_feed_forward_length, renormalized
 * top-k weights) and "olmoe" (q/k norms over the whole projection, top-k
 * weights not renormalized).
 * Each row below says what differs; st_hparams (llama.h) reads the keys.
 * All tie the output head to the token embedding when output.weight is
 * absent. Rope scaling: "none", "linear" (rope.scaling.factor or
 * rope.scale_linear), "yarn" (factor, original context, attention factor,
 * yarn_log_multiplier) and "longrope", plus frequency factors
 * (rope_freqs.weight: Llama 3.1's; rope_factors_long/short.weight:
 * Phi-3's); any other type is refused by name (st_arch_from_gguf).
 *
 * This file is the table; common/model/llama.h computes from it (hyperparameters,
 * bytes per layer, KV bytes). Keys outside the architecture's prefix that
 * every llama-family file carries (general.*, tokenizer.ggml.*) are named
 * here too (st_arch_gkey), for the writer of such files (`strata convert`)
 * and the readers that go through this table (the tokenizer's loader,
 * common/text/tok_load.c, and the coordinator's eos fallback among them). */
#ifndef ST_ARCH_H
#define ST_ARCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/model/gguf.h"

typedef enum st_rope_layout {
    ST_ROPE_NORM = 0, /* pairs (2i, 2i + 1) of the rotated dims (llama) */
    ST_ROPE_NEOX = 1, /* pairs (i, i + n_rot / 2) (GPT-NeoX, qwen2) */
} st_rope_layout;

/* Hyperparameter keys: "<arch>.<suffix>". */
typedef enum st_arch_key {
    ST_AK_CONTEXT_LENGTH = 0,
    ST_AK_EMBEDDING_LENGTH,
    ST_AK_BLOCK_COUNT,
    ST_AK_FEED_FORWARD_LENGTH,
    ST_AK_HEAD_COUNT,
    ST_AK_HEAD_COUNT_KV,
    ST_AK_ROPE_DIMENSION_COUNT,
    ST_AK_ROPE_FREQ_BASE,
    ST_AK_ROPE_SCALING_TYPE,
    ST_AK_ROPE_SCALE_LINEAR,
    ST_AK_RMS_EPS,
    ST_AK_VOCAB_SIZE,
    ST_AK_EXPERT_COUNT, /* present and nonzero: a mixture of experts */
    ST_AK_KEY_LENGTH,             /* attention.key_length: head_dim when present */
    ST_AK_VALUE_LENGTH,           /* attention.value_length: must equal key_length */
    ST_AK_ROPE_FREQ_BASE_SWA,     /* rope.freq_base_swa: sliding-window layers' base */
    ST_AK_ROPE_SCALING_FACTOR,    /* rope.scaling.factor */
    ST_AK_ROPE_SCALING_ORIG_CTX,  /* rope.scaling.original_context_length */
    ST_AK_ROPE_SCALING_ATTN,      /* rope.scaling.attn_factor */
    ST_AK_ROPE_YARN_LOG_MUL,      /* rope.scaling.yarn_log_multiplier */
    ST_AK_SLIDING_WINDOW,         /* attention.sliding_window */
    ST_AK_SLIDING_WINDOW_PATTERN, /* attention.sliding_window_pattern (a period) */
    ST_AK_ATTN_SOFTCAP,           /* attn_logit_softcapping */
    ST_AK_FINAL_SOFTCAP,          /* final_logit_softcapping */
    ST_AK_EXPERT_USED_COUNT,      /* expert_used_count: experts per token */
    ST_AK_EXPERT_FF_LENGTH,       /* expert_feed_forward_length (qwen3moe's expert width) */
    ST_AK_COUNT
} st_arch_key;

/* Keys without the architecture's prefix. */
typedef enum st_arch_gkey {
    ST_AG_ARCHITECTURE = 0, /* general.architecture: the row of the table */
    ST_AG_NAME,             /* general.name */
    ST_AG_FILE_TYPE,        /* general.file_type (llama.cpp's ftype number) */
    ST_AG_ALIGNMENT,        /* general.alignment */
    ST_AG_TOK_MODEL,        /* tokenizer.ggml.model ("llama": SentencePiece, "gpt2": BPE) */
    ST_AG_TOK_TOKENS,       /* tokenizer.ggml.tokens */
    ST_AG_TOK_SCORES,       /* tokenizer.ggml.scores */
    ST_AG_TOK_TYPES,        /* tokenizer.ggml.token_type */
    ST_AG_TOK_BOS,          /* tokenizer.ggml.bos_token_id */
    ST_AG_TOK_EOS,          /* tokenizer.ggml.eos_token_id */
    ST_AG_TOK_UNK,          /* tokenizer.ggml.unknown_token_id */
    ST_AG_TOK_EOT,          /* tokenizer.ggml.eot_token_id */
    ST_AG_TOK_MERGES,       /* tokenizer.ggml.merges ("left right" pairs of a BPE vocabulary) */
    ST_AG_TOK_PRE,          /* tokenizer.ggml.pre (a BPE vocabulary's pre-tokenizer) */
    ST_AG_TOK_ADD_BOS,      /* tokenizer.ggml.add_bos_token */
    ST_AG_TOK_ADD_SPACE,    /* tokenizer.ggml.add_space_prefix */
    ST_AG_CHAT_TEMPLATE,    /* tokenizer.chat_template (common/text/chat.h) */
    ST_AG_COUNT
} st_arch_gkey;

/* Tensors: global ones, then the per-layer ones ("blk.N." prefix). */
typedef enum st_arch_tensor {
    ST_AT_TOKEN_EMBD = 0, /* [n_embd, n_vocab] */
    ST_AT_OUTPUT_NORM,    /* [n_embd] f32 */
    ST_AT_OUTPUT,         /* [n_embd, n_vocab]; absent: tied to the embedding */
    ST_AT_ROPE_FREQS,     /* [n_rot/2] f32 rope frequency factors (Llama 3.1) */
    ST_AT_ROPE_LONG,      /* [n_rot/2] f32 factors beyond the original context (Phi-3) */
    ST_AT_ROPE_SHORT,     /* [n_rot/2] f32 factors within it (Phi-3) */
    ST_AT_ATTN_NORM,      /* [n_embd] f32 */
    ST_AT_ATTN_Q,         /* [n_embd, q_dim] (q_dim = n_head * head_dim) */
    ST_AT_ATTN_K,         /* [n_embd, kv_dim] */
    ST_AT_ATTN_V,         /* [n_embd, kv_dim] */
    ST_AT_ATTN_QKV,       /* [n_embd, q_dim + 2 kv_dim]: q, k, v rows fused (phi3) */
    ST_AT_ATTN_Q_BIAS,    /* [q_dim] f32 */
    ST_AT_ATTN_K_BIAS,    /* [kv_dim] f32 */
    ST_AT_ATTN_V_BIAS,    /* [kv_dim] f32 */
    ST_AT_ATTN_Q_NORM,    /* [head_dim] f32, RMS norm of each q head */
    ST_AT_ATTN_K_NORM,    /* [head_dim] f32, RMS norm of each k head */
    ST_AT_ATTN_OUT,       /* [q_dim, n_embd] */
    ST_AT_ATTN_POST_NORM, /* [n_embd] f32, RMS norm of the attention's output */
    ST_AT_FFN_NORM,       /* [n_embd] f32 */
    ST_AT_FFN_GATE,       /* [n_embd, n_ff] */
    ST_AT_FFN_UP,         /* [n_embd, n_ff], or [n_embd, 2 n_ff]: gate rows first (phi3) */
    ST_AT_FFN_DOWN,       /* [n_ff, n_embd] */
    ST_AT_FFN_POST_NORM,  /* [n_embd] f32, RMS norm of the FFN's output */
    ST_AT_FFN_GATE_INP,   /* [n_embd, n_expert] f32: the router of a mixture of experts */
    ST_AT_FFN_GATE_EXPS,  /* [n_embd, n_ff_exp, n_expert]: expert e's gate is slice e */
    ST_AT_FFN_UP_EXPS,    /* [n_embd, n_ff_exp, n_expert] */
    ST_AT_FFN_DOWN_EXPS,  /* [n_ff_exp, n_embd, n_expert] */
    ST_AT_COUNT
} st_arch_tensor;

#define ST_AT_FIRST_LAYER ST_AT_ATTN_NORM /* the first per-layer tensor */

typedef enum st_arch_need {
    ST_AN_ABSENT = 0, /* must not be in the file (its meaning is not implemented) */
    ST_AN_REQUIRED = 1,
    ST_AN_OPTIONAL = 2,
} st_arch_need;

/* Whether an architecture's layers may be mixtures of experts: then the
 * file's <arch>.expert_count is above 0 and every layer's FFN is a router
 * (ffn_gate_inp) and stacked experts (ffn_{gate,up,down}_exps) instead of
 * ffn_gate, ffn_up and ffn_down (st_arch_tensor_need). */
typedef enum st_arch_moe {
    ST_MOE_NEVER = 0, /* dense only: an expert_count above 0 is refused */
    ST_MOE_MAY,       /* dense, or experts when expert_count > 0 (llama: Mixtral) */
    ST_MOE_ALWAYS,    /* experts only: expert_count must be above 0 */
} st_arch_moe;

/* The FFN's activation: down(act(gate h) * up h). */
typedef enum st_ffn_act {
    ST_FFN_SILU = 0,      /* silu(x) = x / (1 + exp(-x)) */
    ST_FFN_GELU_TANH = 1, /* the tanh GELU (kernels.h gelu_mul) */
} st_ffn_act;

typedef struct st_arch {
    const char *name; /* general.architecture, and the key prefix */
    st_rope_layout rope;
    st_arch_need need[ST_AT_COUNT];
    st_ffn_act ffn_act;
    bool fused_up;       /* ffn_up holds gate then up rows (2 n_ff) */
    bool embd_scale;     /* the embedding row is multiplied by sqrt(n_embd) */
    float attn_softcap;  /* attention soft-cap when attn_logit_softcapping is
                          * absent (0: none, and the key is not read) */
    bool final_softcap_key; /* reads final_logit_softcapping */
    float final_softcap;    /* ... and its default when absent (0: none) */
    uint32_t swa_period; /* sliding-window layers: il % period < period - 1
                          * (0: none); the pattern key overrides it */
    uint32_t swa_window; /* window when attention.sliding_window is absent (0:
                          * no sliding window unless the key gives one) */
    bool swa_own_rope;   /* sliding-window layers rotate with rope.freq_base_swa
                          * (default ST_LLAMA_DEFAULT_ROPE_BASE) and no scaling;
                          * else with the global base and scaling (or the key's
                          * base, when present) */
    const char *chat_format; /* the chat format (a name of common/text/chat.h) of a
                              * file without tokenizer.chat_template, or NULL:
                              * none implied (llama: Llama 2, 3 or Mistral) */
    uint32_t wide_scale_layers; /* a model of exactly this many layers scales
                                 * scores by 1/sqrt(n_embd/n_head) rather than
                                 * 1/sqrt(head_dim), as llama.cpp does for Gemma
                                 * 27B (0: never) */
    bool qk_norm_full;   /* attn_q_norm / attn_k_norm normalize the whole q
                          * ([q_dim]) and k ([kv_dim]) before the split into
                          * heads (olmoe), not each head ([head_dim]) */
    /* mixture of experts (routing as llama.cpp's build_moe_ffn: softmax over
     * the router's logits, the expert_used_count most probable experts) */
    st_arch_moe moe;
    bool moe_norm_w;        /* the chosen probabilities are divided by their sum
                             * (llama, qwen3moe), else used as they are (olmoe) */
    st_arch_key moe_ff_key; /* the key of the experts' width: feed_forward_length
                             * (llama, olmoe) or expert_feed_forward_length (qwen3moe) */
} st_arch;

/* Longest key or tensor name built here, with its NUL. */
#define ST_ARCH_NAME_MAX 96

/* st_arch_from_gguf - the architecture of g (general.architecture), after
 * checking that g asks for nothing the engine does not implement: a rope
 * scaling type other than those of the file comment, experts where the
 * row has none (or none where it needs them), and tensors the
 * architecture marks absent (st_arch_tensor_need). ST_ETYPE names an unsupported architecture or rope scaling type,
 * ST_EINVAL a present tensor or scale that is not supported. */
st_err st_arch_from_gguf(const st_gguf *g, const st_arch **out);

/* st_arch_tensor_need - whether tensor t is required, optional or absent
 * in a file of architecture a, whose layers are mixtures of experts when
 * moe: then the dense ffn_gate/ffn_up/ffn_down are absent and the router and
 * the three stacked expert tensors required; else the expert tensors are
 * absent. Everything else is the row's need[]. */
st_arch_need st_arch_tensor_need(const st_arch *a, bool moe, st_arch_tensor t);

/* st_arch_by_name - the row of architecture name, or NULL if unsupported. */
const st_arch *st_arch_by_name(const char *name);

/* st_arch_key_name - "<arch>.<suffix>" of key k into buf; returns buf. */
const char *st_arch_key_name(const st_arch *a, st_arch_key k, char buf[ST_ARCH_NAME_MAX]);

/* st_arch_gkey_name - the full name of key k (a static string). */
const char *st_arch_gkey_name(st_arch_gkey k);

/* st_arch_tensor_name - the file's name of tensor t ("blk.<layer>." prefix
 * for per-layer tensors; layer is ignored for global ones); returns buf. */
const char *st_arch_tensor_name(st_arch_tensor t, int64_t layer, char buf[ST_ARCH_NAME_MAX]);

/* st_arch_find - tensor t of layer in g, or NULL when the file has none. */
const st_gguf_tensor *st_arch_find(const st_gguf *g, st_arch_tensor t, int64_t layer);

/* st_arch_head_tied - whether g's head is the token embedding (no output.weight). */
bool st_arch_head_tied(const st_gguf *g);

/* Where a tensor's bytes belong when a model is split into stages. */
typedef enum st_arch_part {
    ST_AP_OTHER = 0, /* neither a layer, the embedding nor the head */
    ST_AP_ROPE,      /* rope factors: read by every stage with layers */
    ST_AP_LAYER,     /* "blk.N.*": layer N */
    ST_AP_EMBD,      /* the token embedding (also the head's, when tied) */
    ST_AP_HEAD,      /* output norm and output */
} st_arch_part;

/* st_arch_part_of - the part tensor name belongs to; *layer is its layer
 * for ST_AP_LAYER (-1 otherwise). */
st_arch_part st_arch_part_of(st_gguf_str name, int64_t *layer);

#endif
