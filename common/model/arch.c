/* arch.c - the architecture table, key and tensor names (see arch.h). */
#include "common/model/arch.h"

#include <stdio.h>
#include <string.h>

#define ARCH_LAYER_PREFIX "blk."
#define ARCH_LAYER_MAX (1 << 30) /* larger layer numbers are not layers of ours */


static const char *const arch_key_suffix[ST_AK_COUNT] = {
    [ST_AK_CONTEXT_LENGTH] = "context_length",
    [ST_AK_EMBEDDING_LENGTH] = "embedding_length",
    [ST_AK_BLOCK_COUNT] = "block_count",
    [ST_AK_FEED_FORWARD_LENGTH] = "feed_forward_length",
    [ST_AK_HEAD_COUNT] = "attention.head_count",
    [ST_AK_HEAD_COUNT_KV] = "attention.head_count_kv",
    [ST_AK_ROPE_DIMENSION_COUNT] = "rope.dimension_count",
    [ST_AK_ROPE_FREQ_BASE] = "rope.freq_base",
    [ST_AK_ROPE_SCALING_TYPE] = "rope.scaling.type",
    [ST_AK_ROPE_SCALE_LINEAR] = "rope.scale_linear",
    [ST_AK_RMS_EPS] = "attention.layer_norm_rms_epsilon",
    [ST_AK_VOCAB_SIZE] = "vocab_size",
    [ST_AK_EXPERT_COUNT] = "expert_count",
    [ST_AK_KEY_LENGTH] = "attention.key_length",
    [ST_AK_VALUE_LENGTH] = "attention.value_length",
    [ST_AK_ROPE_FREQ_BASE_SWA] = "rope.freq_base_swa",
    [ST_AK_ROPE_SCALING_FACTOR] = "rope.scaling.factor",
    [ST_AK_ROPE_SCALING_ORIG_CTX] = "rope.scaling.original_context_length",
    [ST_AK_ROPE_SCALING_ATTN] = "rope.scaling.attn_factor",
    [ST_AK_ROPE_YARN_LOG_MUL] = "rope.scaling.yarn_log_multiplier",
    [ST_AK_SLIDING_WINDOW] = "attention.sliding_window",
    [ST_AK_SLIDING_WINDOW_PATTERN] = "attention.sliding_window_pattern",
    [ST_AK_ATTN_SOFTCAP] = "attn_logit_softcapping",
    [ST_AK_FINAL_SOFTCAP] = "final_logit_softcapping",
    [ST_AK_EXPERT_USED_COUNT] = "expert_used_count",
    [ST_AK_EXPERT_FF_LENGTH] = "expert_feed_forward_length",
};

static const char *const arch_gkey_names[ST_AG_COUNT] = {
    [ST_AG_ARCHITECTURE] = "general.architecture",
    [ST_AG_NAME] = "general.name",
    [ST_AG_FILE_TYPE] = "general.file_type",
    [ST_AG_ALIGNMENT] = ST_GGUF_KEY_ALIGNMENT,
    [ST_AG_TOK_MODEL] = "tokenizer.ggml.model",
    [ST_AG_TOK_TOKENS] = "tokenizer.ggml.tokens",
    [ST_AG_TOK_SCORES] = "tokenizer.ggml.scores",
    [ST_AG_TOK_TYPES] = "tokenizer.ggml.token_type",
    [ST_AG_TOK_BOS] = "tokenizer.ggml.bos_token_id",
    [ST_AG_TOK_EOS] = "tokenizer.ggml.eos_token_id",
    [ST_AG_TOK_UNK] = "tokenizer.ggml.unknown_token_id",
    [ST_AG_TOK_EOT] = "tokenizer.ggml.eot_token_id",
    [ST_AG_TOK_MERGES] = "tokenizer.ggml.merges",
    [ST_AG_TOK_PRE] = "tokenizer.ggml.pre",
    [ST_AG_TOK_ADD_BOS] = "tokenizer.ggml.add_bos_token",
    [ST_AG_TOK_ADD_SPACE] = "tokenizer.ggml.add_space_prefix",
    [ST_AG_CHAT_TEMPLATE] = "tokenizer.chat_template",
};

/* names without the ".weight"/".bias" kind, and which kind */
static const struct {
    const char *base;
    const char *kind;
} arch_tensor_names[ST_AT_COUNT] = {
    [ST_AT_TOKEN_EMBD] = {"token_embd", "weight"},
    [ST_AT_OUTPUT_NORM] = {"output_norm", "weight"},
    [ST_AT_OUTPUT] = {"output", "weight"},
    [ST_AT_ROPE_FREQS] = {"rope_freqs", "weight"},
    [ST_AT_ROPE_LONG] = {"rope_factors_long", "weight"},
    [ST_AT_ROPE_SHORT] = {"rope_factors_short", "weight"},
    [ST_AT_ATTN_NORM] = {"attn_norm", "weight"},
    [ST_AT_ATTN_Q] = {"attn_q", "weight"},
    [ST_AT_ATTN_K] = {"attn_k", "weight"},
    [ST_AT_ATTN_V] = {"attn_v", "weight"},
    [ST_AT_ATTN_QKV] = {"attn_qkv", "weight"},
    [ST_AT_ATTN_Q_BIAS] = {"attn_q", "bias"},
    [ST_AT_ATTN_K_BIAS] = {"attn_k", "bias"},
    [ST_AT_ATTN_V_BIAS] = {"attn_v", "bias"},
    [ST_AT_ATTN_Q_NORM] = {"attn_q_norm", "weight"},
    [ST_AT_ATTN_K_NORM] = {"attn_k_norm", "weight"},
    [ST_AT_ATTN_OUT] = {"attn_output", "weight"},
    [ST_AT_ATTN_POST_NORM] = {"post_attention_norm", "weight"},
    [ST_AT_FFN_NORM] = {"ffn_norm", "weight"},
    [ST_AT_FFN_GATE] = {"ffn_gate", "weight"},
    [ST_AT_FFN_UP] = {"ffn_up", "weight"},
    [ST_AT_FFN_DOWN] = {"ffn_down", "weight"},
    [ST_AT_FFN_POST_NORM] = {"post_ffw_norm", "weight"},
    [ST_AT_FFN_GATE_INP] = {"ffn_gate_inp", "weight"},
    [ST_AT_FFN_GATE_EXPS] = {"ffn_gate_exps", "weight"},
    [ST_AT_FFN_UP_EXPS] = {"ffn_up_exps", "weight"},
    [ST_AT_FFN_DOWN_EXPS] = {"ffn_down_exps", "weight"},
};

/* what every architecture requires; rows below add what differs, and a
 * tensor a row does not name is ST_AN_ABSENT (0). attn_qkv is optional
 * everywhere, as in llama.cpp: a layer has either it or attn_q, attn_k and
 * attn_v (worker/engine/model.c binds either). */
#define ARCH_CORE_NEEDS                                                                            \
    [ST_AT_TOKEN_EMBD] = ST_AN_REQUIRED, [ST_AT_OUTPUT_NORM] = ST_AN_REQUIRED,                     \
    [ST_AT_ATTN_NORM] = ST_AN_REQUIRED, [ST_AT_ATTN_Q] = ST_AN_REQUIRED,                           \
    [ST_AT_ATTN_K] = ST_AN_REQUIRED, [ST_AT_ATTN_V] = ST_AN_REQUIRED,                              \
    [ST_AT_ATTN_QKV] = ST_AN_OPTIONAL, [ST_AT_ATTN_OUT] = ST_AN_REQUIRED,                          \
    [ST_AT_FFN_NORM] = ST_AN_REQUIRED, [ST_AT_FFN_UP] = ST_AN_REQUIRED,                            \
    [ST_AT_FFN_DOWN] = ST_AN_REQUIRED

/* the llama layer: core, an optional untied head, a gate projection */
#define ARCH_BASE_NEEDS                                                                            \
    ARCH_CORE_NEEDS, [ST_AT_OUTPUT] = ST_AN_OPTIONAL, [ST_AT_FFN_GATE] = ST_AN_REQUIRED

/* Gemma's layer: post-attention and post-FFN norms (with GELU and the
 * scaled input of the rows) */
#define ARCH_GEMMA_NEEDS                                                                           \
    ARCH_CORE_NEEDS, [ST_AT_FFN_GATE] = ST_AN_REQUIRED, [ST_AT_ATTN_POST_NORM] = ST_AN_REQUIRED,   \
                     [ST_AT_FFN_POST_NORM] = ST_AN_REQUIRED

/* Gemma 2 and 3's period of sliding-window layers, Gemma 2's window, and
 * the layer count of their 27B models (see st_arch.wide_scale_layers) */
#define ARCH_GEMMA2_SWA_PERIOD 2
#define ARCH_GEMMA2_SWA_WINDOW 4096
#define ARCH_GEMMA2_27B_LAYERS 46
#define ARCH_GEMMA2_ATTN_SOFTCAP 50.0f /* llama.cpp's defaults of the soft-cap keys */
#define ARCH_GEMMA2_FINAL_SOFTCAP 30.0f
#define ARCH_GEMMA3_SWA_PERIOD 6
#define ARCH_GEMMA3_27B_LAYERS 62

static const st_arch arch_table[] = {
    {.name = "llama",
     .rope = ST_ROPE_NORM,
     .need = {ARCH_BASE_NEEDS, [ST_AT_ATTN_Q_BIAS] = ST_AN_OPTIONAL,
              [ST_AT_ATTN_K_BIAS] = ST_AN_OPTIONAL, [ST_AT_ATTN_V_BIAS] = ST_AN_OPTIONAL,
              [ST_AT_ROPE_FREQS] = ST_AN_OPTIONAL},
     .moe = ST_MOE_MAY,
     .moe_norm_w = true,
     .moe_ff_key = ST_AK_FEED_FORWARD_LENGTH},
    {.name = "qwen2",
     .rope = ST_ROPE_NEOX,
     .chat_format = "chatml",
     .need = {ARCH_BASE_NEEDS, [ST_AT_ATTN_Q_BIAS] = ST_AN_REQUIRED,
              [ST_AT_ATTN_K_BIAS] = ST_AN_REQUIRED, [ST_AT_ATTN_V_BIAS] = ST_AN_REQUIRED}},
    {.name = "qwen3",
     .rope = ST_ROPE_NEOX,
     .chat_format = "chatml",
     .need = {ARCH_BASE_NEEDS, [ST_AT_ATTN_Q_NORM] = ST_AN_REQUIRED,
              [ST_AT_ATTN_K_NORM] = ST_AN_REQUIRED}},
    {.name = "qwen3moe",
     .rope = ST_ROPE_NEOX,
     .chat_format = "chatml",
     .need = {ARCH_BASE_NEEDS, [ST_AT_ATTN_Q_NORM] = ST_AN_REQUIRED,
              [ST_AT_ATTN_K_NORM] = ST_AN_REQUIRED},
     .moe = ST_MOE_ALWAYS,
     .moe_norm_w = true,
     .moe_ff_key = ST_AK_EXPERT_FF_LENGTH},
    {.name = "olmoe",
     .rope = ST_ROPE_NEOX,
     .need = {ARCH_CORE_NEEDS, [ST_AT_OUTPUT] = ST_AN_REQUIRED, [ST_AT_ATTN_Q_NORM] = ST_AN_REQUIRED,
              [ST_AT_ATTN_K_NORM] = ST_AN_REQUIRED},
     .qk_norm_full = true,
     .moe = ST_MOE_ALWAYS,
     .moe_norm_w = false,
     .moe_ff_key = ST_AK_FEED_FORWARD_LENGTH},
    {.name = "gemma2",
     .rope = ST_ROPE_NEOX,
     .chat_format = "gemma",
     /* no output.weight: llama.cpp's gemma2 always uses the embedding as the head */
     .need = {ARCH_GEMMA_NEEDS},
     .ffn_act = ST_FFN_GELU_TANH,
     .embd_scale = true,
     .attn_softcap = ARCH_GEMMA2_ATTN_SOFTCAP,
     .final_softcap_key = true,
     .final_softcap = ARCH_GEMMA2_FINAL_SOFTCAP,
     .swa_period = ARCH_GEMMA2_SWA_PERIOD,
     .swa_window = ARCH_GEMMA2_SWA_WINDOW,
     .wide_scale_layers = ARCH_GEMMA2_27B_LAYERS},
    {.name = "gemma3",
     .rope = ST_ROPE_NEOX,
     .chat_format = "gemma",
     .need = {ARCH_GEMMA_NEEDS, [ST_AT_OUTPUT] = ST_AN_OPTIONAL,
              [ST_AT_ATTN_Q_NORM] = ST_AN_REQUIRED, [ST_AT_ATTN_K_NORM] = ST_AN_REQUIRED},
     .ffn_act = ST_FFN_GELU_TANH,
     .embd_scale = true,
     .swa_period = ARCH_GEMMA3_SWA_PERIOD,
     .final_softcap_key = true,
     .swa_own_rope = true,
     .wide_scale_layers = ARCH_GEMMA3_27B_LAYERS},
    {.name = "phi3",
     .rope = ST_ROPE_NEOX,
     .chat_format = "phi3",
     .need = {ARCH_CORE_NEEDS, [ST_AT_OUTPUT] = ST_AN_OPTIONAL, [ST_AT_ROPE_LONG] = ST_AN_OPTIONAL,
              [ST_AT_ROPE_SHORT] = ST_AN_OPTIONAL},
     .fused_up = true},
};
#define ARCH_N (sizeof arch_table / sizeof arch_table[0])

const st_arch *st_arch_by_name(const char *name)
{
    for (size_t i = 0; i < ARCH_N; i++)
        if (strcmp(name, arch_table[i].name) == 0)
            return &arch_table[i];
    return NULL;
}

const char *st_arch_key_name(const st_arch *a, st_arch_key k, char buf[ST_ARCH_NAME_MAX])
{
    snprintf(buf, ST_ARCH_NAME_MAX, "%s.%s", a->name, arch_key_suffix[k]);
    return buf;
}

const char *st_arch_gkey_name(st_arch_gkey k) { return arch_gkey_names[k]; }

const char *st_arch_tensor_name(st_arch_tensor t, int64_t layer, char buf[ST_ARCH_NAME_MAX])
{
    if (t >= ST_AT_FIRST_LAYER)
        snprintf(buf, ST_ARCH_NAME_MAX, ARCH_LAYER_PREFIX "%lld.%s.%s", (long long)layer,
                 arch_tensor_names[t].base, arch_tensor_names[t].kind);
    else
        snprintf(buf, ST_ARCH_NAME_MAX, "%s.%s", arch_tensor_names[t].base,
                 arch_tensor_names[t].kind);
    return buf;
}

const st_gguf_tensor *st_arch_find(const st_gguf *g, st_arch_tensor t, int64_t layer)
{
    char n[ST_ARCH_NAME_MAX];
    return st_gguf_find_tensor(g, st_arch_tensor_name(t, layer, n));
}

bool st_arch_head_tied(const st_gguf *g) { return st_arch_find(g, ST_AT_OUTPUT, 0) == NULL; }

st_arch_need st_arch_tensor_need(const st_arch *a, bool moe, st_arch_tensor t)
{
    switch (t) {
    case ST_AT_FFN_GATE:
    case ST_AT_FFN_UP:
    case ST_AT_FFN_DOWN:
        return moe ? ST_AN_ABSENT : a->need[t];
    case ST_AT_FFN_GATE_INP:
    case ST_AT_FFN_GATE_EXPS:
    case ST_AT_FFN_UP_EXPS:
    case ST_AT_FFN_DOWN_EXPS:
        return moe ? ST_AN_REQUIRED : ST_AN_ABSENT;
    default:
        return a->need[t];
    }
}

/* arch_check_absent - refuses any tensor of g that a marks absent (with
 * experts when moe). */
static st_err arch_check_absent(const st_gguf *g, const st_arch *a, bool moe)
{
    for (uint64_t i = 0; i < st_gguf_n_tensors(g); i++) {
        const st_gguf_tensor *t = st_gguf_tensor_at(g, i);
        int64_t l;
        st_arch_part p = st_arch_part_of(t->name, &l);
        for (int k = 0; k < ST_AT_COUNT; k++) {
            if (st_arch_tensor_need(a, moe, (st_arch_tensor)k) != ST_AN_ABSENT ||
                (k >= ST_AT_FIRST_LAYER) != (p == ST_AP_LAYER))
                continue;
            char n[ST_ARCH_NAME_MAX];
            if (!st_gguf_str_eq(t->name, st_arch_tensor_name((st_arch_tensor)k, l, n)))
                continue;
            return st_errorf(ST_EINVAL,
                             "tensor '%s' is not used by architecture '%s' and is "
                             "not supported",
                             n, a->name);
        }
    }
    return ST_OK;
}

/* The rope scaling types of llama.cpp that Strata computes (kernels/rope.h);
 * llama.cpp's default when the key is absent is "linear" (with no factor:
 * no scaling). */
static const char *const arch_rope_scaling_types[] = {"none", "linear", "yarn", "longrope"};
#define ARCH_N_ROPE_SCALING (sizeof arch_rope_scaling_types / sizeof arch_rope_scaling_types[0])

/* arch_check_rope_scaling - refuses a rope scaling type Strata does not compute. */
static st_err arch_check_rope_scaling(const st_gguf *g, const st_arch *a)
{
    char key[ST_ARCH_NAME_MAX];
    st_gguf_str type;
    st_err e = st_gguf_get_str(g, st_arch_key_name(a, ST_AK_ROPE_SCALING_TYPE, key), &type);
    if (e == ST_EMISSING) {
        st_errclear();
        return ST_OK;
    }
    if (e != ST_OK)
        return e;
    for (size_t i = 0; i < ARCH_N_ROPE_SCALING; i++)
        if (st_gguf_str_eq(type, arch_rope_scaling_types[i]))
            return ST_OK;
    return st_errorf(ST_ETYPE,
                     "%s is '%.*s'; supported: 'none', 'linear', 'yarn', 'longrope'", key,
                     (int)(type.len > 64 ? 64 : type.len), type.data);
}

/* arch_check_experts - *moe: whether g's layers are mixtures of experts
 * (<arch>.expert_count above 0); refused where the row has no experts, or
 * has only experts and the count is absent or 0. */
static st_err arch_check_experts(const st_gguf *g, const st_arch *a, bool *moe)
{
    char key[ST_ARCH_NAME_MAX];
    uint32_t n = 0;
    st_err e = st_gguf_get_u32(g, st_arch_key_name(a, ST_AK_EXPERT_COUNT, key), &n);
    if (e == ST_EMISSING)
        st_errclear();
    else if (e != ST_OK)
        return e;
    *moe = n > 0;
    if (*moe && a->moe == ST_MOE_NEVER)
        return st_errorf(ST_ETYPE, "%s is %u: architecture '%s' has no mixture-of-experts form",
                         key, n, a->name);
    if (!*moe && a->moe == ST_MOE_ALWAYS)
        return st_errorf(ST_EMISSING, "%s is %s: architecture '%s' needs experts", key,
                         e == ST_EMISSING ? "missing" : "0", a->name);
    return ST_OK;
}

st_err st_arch_from_gguf(const st_gguf *g, const st_arch **out)
{
    *out = NULL;
    st_gguf_str name;
    st_err e = st_gguf_get_str(g, st_arch_gkey_name(ST_AG_ARCHITECTURE), &name);
    if (e != ST_OK)
        return e;
    const st_arch *a = NULL;
    for (size_t i = 0; i < ARCH_N && a == NULL; i++)
        if (st_gguf_str_eq(name, arch_table[i].name))
            a = &arch_table[i];
    if (a == NULL) /* the list below: the names of arch_table */
        return st_errorf(ST_ETYPE,
                         "%s is '%.*s'; supported: 'llama', 'qwen2', 'qwen3', 'qwen3moe', "
                         "'olmoe', 'gemma2', 'gemma3', 'phi3'",
                         st_arch_gkey_name(ST_AG_ARCHITECTURE),
                         (int)(name.len > 64 ? 64 : name.len), name.data);
    bool moe = false;
    if ((e = arch_check_rope_scaling(g, a)) || (e = arch_check_experts(g, a, &moe)) ||
        (e = arch_check_absent(g, a, moe)))
        return e;
    *out = a;
    return ST_OK;
}

st_arch_part st_arch_part_of(st_gguf_str name, int64_t *layer)
{
    *layer = -1;
    const size_t pl = sizeof ARCH_LAYER_PREFIX - 1;
    if (name.len > pl && memcmp(name.data, ARCH_LAYER_PREFIX, pl) == 0) {
        int64_t v = 0;
        uint64_t i = pl;
        for (; i < name.len && name.data[i] >= '0' && name.data[i] <= '9'; i++) {
            v = v * 10 + (name.data[i] - '0');
            if (v > ARCH_LAYER_MAX)
                return ST_AP_OTHER;
        }
        if (i == pl || i >= name.len || name.data[i] != '.')
            return ST_AP_OTHER;
        *layer = v;
        return ST_AP_LAYER;
    }
    char n[ST_ARCH_NAME_MAX];
    if (st_gguf_str_eq(name, st_arch_tensor_name(ST_AT_TOKEN_EMBD, 0, n)))
        return ST_AP_EMBD;
    if (st_gguf_str_eq(name, st_arch_tensor_name(ST_AT_ROPE_FREQS, 0, n)) ||
        st_gguf_str_eq(name, st_arch_tensor_name(ST_AT_ROPE_LONG, 0, n)) ||
        st_gguf_str_eq(name, st_arch_tensor_name(ST_AT_ROPE_SHORT, 0, n)))
        return ST_AP_ROPE;
    if (st_gguf_str_eq(name, st_arch_tensor_name(ST_AT_OUTPUT_NORM, 0, n)) ||
        st_gguf_str_eq(name, st_arch_tensor_name(ST_AT_OUTPUT, 0, n)))
        return ST_AP_HEAD;
    return ST_AP_OTHER;
}
