/* llama.c - the llama-family model schema computed from arch.c's tables
 * (see llama.h).
 *
 * Design. A model's facts are read once, here, for everyone: the stage's
 * model binding (worker/engine/model.c) checks its tensors against st_hparams;
 * the worker daemon checks a Prepare's stage against its memory budget
 * with st_minfo_stage_bytes and st_kv_bytes; the coordinator places
 * stages with st_minfo's per-layer bytes and kv_bytes_per_token_layer
 * (st_kv_bytes of one token and layer); `strata plan --dry-run` plans with
 * the same facts. Before this module the worker and the coordinator each
 * had a reader with its own defaults and its own loop attributing tensors
 * to layers, and nothing but care kept them equal.
 *
 * Hyperparameters are validated completely before anyone uses them (the
 * engine divides by head counts and indexes by dimensions). Counts are
 * 1..2^31; a missing optional key takes llama.cpp's default. Byte sums
 * follow the tensor table's names (st_arch_part_of), not the
 * hyperparameters: a tensor the binding does not use still costs memory
 * when it belongs to a layer, and a layer the file lacks is an error here
 * rather than a zero-byte stage. */
#include "common/model/llama.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

/* llama_count - the count at key, or dflt when the key is absent and not
 * required; ST_ERANGE outside 1..ST_LLAMA_MAX_COUNT. */
static st_err llama_count(const st_gguf *g, const char *key, bool required, int64_t dflt,
                          int64_t *out)
{
    uint64_t v;
    st_err e = st_gguf_get_u64(g, key, &v);
    if (e == ST_EMISSING && !required) {
        *out = dflt;
        st_errclear();
        return ST_OK;
    }
    if (e != ST_OK)
        return e;
    if (v == 0 || v > ST_LLAMA_MAX_COUNT)
        return st_errorf(ST_ERANGE, "key '%s' = %llu is out of range 1..2^31", key,
                         (unsigned long long)v);
    *out = (int64_t)v;
    return ST_OK;
}

/* llama_float - the f32 at key, dflt when absent (required: ST_EMISSING). */
static st_err llama_float(const st_gguf *g, const char *key, bool required, float dflt, float *out)
{
    *out = dflt;
    st_err e = st_gguf_get_f32(g, key, out);
    if (e == ST_EMISSING && !required) {
        *out = dflt;
        st_errclear();
        return ST_OK;
    }
    return e;
}

/* llama_positive - a finite positive f32 at key (dflt when absent and not
 * required); ST_ERANGE otherwise. */
static st_err llama_positive(const st_gguf *g, const char *key, float dflt, float *out)
{
    st_err e = llama_float(g, key, false, dflt, out);
    if (e != ST_OK)
        return e;
    if (!(*out > 0.0f && isfinite(*out)))
        return st_errorf(ST_ERANGE, "key '%s' = %g is not positive and finite", key, (double)*out);
    return ST_OK;
}

/* llama_head_dim - head_dim from attention.key_length (value_length, when
 * present, must be equal: Strata's attention has one head size), else
 * n_embd / n_head, which must then divide evenly. */
static st_err llama_head_dim(const st_gguf *g, char k[][ST_ARCH_NAME_MAX], st_hparams *hp)
{
    int64_t key_len = 0, value_len = 0;
    st_err e;
    if ((e = llama_count(g, k[ST_AK_KEY_LENGTH], false, 0, &key_len)) ||
        (e = llama_count(g, k[ST_AK_VALUE_LENGTH], false, key_len, &value_len)))
        return e;
    if (key_len == 0) {
        if (hp->n_embd % hp->n_head != 0)
            return st_errorf(ST_ESHAPE,
                             "embedding_length %lld is not a multiple of head_count %lld",
                             (long long)hp->n_embd, (long long)hp->n_head);
        hp->head_dim = hp->n_embd / hp->n_head;
        return ST_OK;
    }
    if (value_len != key_len)
        return st_errorf(ST_EINVAL,
                         "%s %lld differs from %s %lld: separate key and value head sizes are "
                         "not supported",
                         k[ST_AK_VALUE_LENGTH], (long long)value_len, k[ST_AK_KEY_LENGTH],
                         (long long)key_len);
    hp->head_dim = key_len;
    return ST_OK;
}

/* YaRN's magnitude correction 1 + 0.1 ln(factor) * mscale (1 when the
 * factor does not stretch), as llama.cpp's context computes it. */
#define LLAMA_YARN_MSCALE_COEF 0.1f
static float llama_yarn_mscale(float factor, float mscale)
{
    return factor <= 1.0f ? 1.0f : LLAMA_YARN_MSCALE_COEF * mscale * logf(factor) + 1.0f;
}

/* llama_rope_scaling - the scaling type, factor, original context and
 * attention factor, as llama.cpp's model loader and context derive them:
 * the factor is rope.scaling.factor, else rope.scale_linear (absent or 0:
 * 1); type "none" ignores it; YaRN mixes with ext_factor 1 and corrects
 * magnitudes (rope.scaling.yarn_log_multiplier, when present and nonzero,
 * changes that correction as for DeepSeek files); rope.scaling.attn_factor
 * multiplies in last. The YaRN beta keys are not read (llama.cpp does not
 * read them for these architectures): betas 32 and 1. */
static st_err llama_rope_scaling(const st_gguf *g, char k[][ST_ARCH_NAME_MAX], st_hparams *hp)
{
    st_gguf_str type = {0};
    st_err e = st_gguf_get_str(g, k[ST_AK_ROPE_SCALING_TYPE], &type);
    if (e == ST_EMISSING) {
        st_errclear();
        hp->rope_scaling = ST_ROPE_SCALING_LINEAR; /* llama.cpp's default */
    } else if (e != ST_OK) {
        return e;
    } else if (st_gguf_str_eq(type, "none")) {
        hp->rope_scaling = ST_ROPE_SCALING_NONE;
    } else if (st_gguf_str_eq(type, "linear")) {
        hp->rope_scaling = ST_ROPE_SCALING_LINEAR;
    } else if (st_gguf_str_eq(type, "yarn")) {
        hp->rope_scaling = ST_ROPE_SCALING_YARN;
    } else { /* st_arch_from_gguf admitted no other name */
        hp->rope_scaling = ST_ROPE_SCALING_LONGROPE;
    }
    float factor = 0.0f;
    if ((e = llama_float(g, k[ST_AK_ROPE_SCALING_FACTOR], false, 0.0f, &factor)))
        return e;
    if (factor == 0.0f && (e = llama_float(g, k[ST_AK_ROPE_SCALE_LINEAR], false, 0.0f, &factor)))
        return e;
    if (!(factor >= 0.0f && isfinite(factor)))
        return st_errorf(ST_ERANGE, "rope scaling factor %g is not finite and >= 0",
                         (double)factor);
    hp->rope_freq_scale = factor == 0.0f ? 1.0f : 1.0f / factor;
    if (hp->rope_scaling == ST_ROPE_SCALING_NONE)
        hp->rope_freq_scale = 1.0f;
    else if (hp->rope_scaling == ST_ROPE_SCALING_LINEAR && hp->rope_freq_scale == 1.0f)
        hp->rope_scaling = ST_ROPE_SCALING_NONE;
    if ((e = llama_count(g, k[ST_AK_ROPE_SCALING_ORIG_CTX], false, hp->n_ctx_train,
                         &hp->n_ctx_orig)))
        return e;
    float attn = 1.0f, log_mul = 0.0f;
    if ((e = llama_positive(g, k[ST_AK_ROPE_SCALING_ATTN], 1.0f, &attn)) ||
        (e = llama_float(g, k[ST_AK_ROPE_YARN_LOG_MUL], false, 0.0f, &log_mul)))
        return e;
    hp->rope_ext_factor = hp->rope_scaling == ST_ROPE_SCALING_YARN ? 1.0f : 0.0f;
    hp->rope_attn_factor = 1.0f;
    if (hp->rope_ext_factor != 0.0f) {
        const float f = 1.0f / hp->rope_freq_scale;
        hp->rope_attn_factor = log_mul != 0.0f
                                   ? llama_yarn_mscale(f, 1.0f) / llama_yarn_mscale(f, log_mul)
                                   : llama_yarn_mscale(f, 1.0f);
        /* the kernel multiplies by 1 + 0.1 ln(f) itself (kernels/rope.h) */
        hp->rope_attn_factor *= 1.0f / (1.0f + LLAMA_YARN_MSCALE_COEF * logf(f));
    }
    hp->rope_attn_factor *= attn;
    return ST_OK;
}

/* llama_attention - the score scale, soft-caps, sliding window and the
 * sliding-window layers' rope, from the architecture's row and its keys. */
static st_err llama_attention(const st_gguf *g, char k[][ST_ARCH_NAME_MAX], st_hparams *hp)
{
    const st_arch *a = hp->arch;
    st_err e;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    if (a->wide_scale_layers != 0 && hp->n_layer == (int64_t)a->wide_scale_layers)
        hp->attn_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
    hp->embd_scale = a->embd_scale ? sqrtf((float)hp->n_embd) : 1.0f;
    if (a->attn_softcap != 0.0f &&
        (e = llama_positive(g, k[ST_AK_ATTN_SOFTCAP], a->attn_softcap, &hp->attn_softcap)))
        return e;
    if (a->final_softcap_key) {
        if ((e = llama_float(g, k[ST_AK_FINAL_SOFTCAP], false, a->final_softcap,
                             &hp->final_softcap)))
            return e;
        if (!(hp->final_softcap >= 0.0f && isfinite(hp->final_softcap)))
            return st_errorf(ST_ERANGE, "%s %g is not finite and >= 0", k[ST_AK_FINAL_SOFTCAP],
                             (double)hp->final_softcap);
    }
    hp->rope_base_swa = hp->rope_base;
    hp->rope_scale_swa = hp->rope_freq_scale;
    if (a->swa_period == 0)
        return ST_OK; /* as llama.cpp: these architectures ignore a window key */
    uint64_t window = a->swa_window, period = a->swa_period;
    if ((e = st_gguf_get_u64(g, k[ST_AK_SLIDING_WINDOW], &window)) && e != ST_EMISSING)
        return e;
    if ((e = st_gguf_get_u64(g, k[ST_AK_SLIDING_WINDOW_PATTERN], &period)) && e != ST_EMISSING)
        return e;
    st_errclear();
    if (window > ST_LLAMA_MAX_COUNT || period > ST_LLAMA_MAX_COUNT)
        return st_errorf(ST_ERANGE, "%s %llu or %s %llu is above 2^31", k[ST_AK_SLIDING_WINDOW],
                         (unsigned long long)window, k[ST_AK_SLIDING_WINDOW_PATTERN],
                         (unsigned long long)period);
    hp->swa_window = (int64_t)window;
    hp->swa_period = (int64_t)period;
    if (a->swa_own_rope) {
        hp->rope_scale_swa = 1.0f;
        hp->rope_base_swa = ST_LLAMA_DEFAULT_ROPE_BASE;
    }
    return llama_positive(g, k[ST_AK_ROPE_FREQ_BASE_SWA], hp->rope_base_swa, &hp->rope_base_swa);
}

/* llama_experts - the experts' counts and width of a mixture of experts
 * (st_arch_from_gguf has checked that expert_count fits the row); a dense
 * file leaves them 0. hp->n_ff becomes the experts' width when they are
 * given by another key than feed_forward_length, which is then optional
 * (qwen3moe's is unused, as in llama.cpp). */
static st_err llama_experts(const st_gguf *g, const char k[][ST_ARCH_NAME_MAX], st_hparams *hp)
{
    const st_arch *a = hp->arch;
    if (a->moe == ST_MOE_NEVER)
        return ST_OK;
    st_err e = llama_count(g, k[ST_AK_EXPERT_COUNT], false, 0, &hp->n_expert);
    if (e != ST_OK || hp->n_expert == 0)
        return e;
    if ((e = llama_count(g, k[ST_AK_EXPERT_USED_COUNT], true, 0, &hp->n_expert_used)) ||
        (e = llama_count(g, k[a->moe_ff_key], true, 0, &hp->n_ff_exp)))
        return e;
    if (hp->n_expert > ST_MOE_MAX_EXPERT || hp->n_expert_used > hp->n_expert ||
        hp->n_expert_used > ST_MOE_MAX_USED)
        return st_errorf(ST_ERANGE, "%s %lld and %s %lld: at most %d experts, of which at most %d "
                         "(and no more than all) used",
                         k[ST_AK_EXPERT_COUNT], (long long)hp->n_expert,
                         k[ST_AK_EXPERT_USED_COUNT], (long long)hp->n_expert_used,
                         ST_MOE_MAX_EXPERT, ST_MOE_MAX_USED);
    if (a->moe_ff_key != ST_AK_FEED_FORWARD_LENGTH)
        hp->n_ff = hp->n_ff_exp;
    return ST_OK;
}

bool st_hparams_layer_swa(const st_hparams *hp, int64_t il)
{
    if (hp->swa_window == 0)
        return false;
    return hp->swa_period == 0 || il % hp->swa_period < hp->swa_period - 1;
}

int64_t st_hparams_window_start(const st_hparams *hp, int64_t il, int64_t pos)
{
    if (!st_hparams_layer_swa(hp, il) || pos < hp->swa_window)
        return 0;
    return pos - hp->swa_window + 1;
}

void st_hparams_rope(const st_hparams *hp, int64_t il, const float *factors, st_rope_params *out)
{
    const bool swa = st_hparams_layer_swa(hp, il);
    *out = (st_rope_params){.n_rot = hp->n_rot,
                            .base = swa ? hp->rope_base_swa : hp->rope_base,
                            .freq_scale = swa ? hp->rope_scale_swa : hp->rope_freq_scale,
                            .freq_factors = factors,
                            .ext_factor = hp->rope_ext_factor,
                            .attn_factor = hp->rope_attn_factor};
    if (out->ext_factor != 0.0f)
        st_rope_yarn_corr_dims(hp->n_rot, hp->n_ctx_orig, out->base, ST_ROPE_YARN_BETA_FAST,
                               ST_ROPE_YARN_BETA_SLOW, out->corr_dims);
}

st_err st_hparams_from_gguf(const st_gguf *g, st_hparams *hp)
{
    memset(hp, 0, sizeof *hp);
    const st_arch *a;
    st_err e = st_arch_from_gguf(g, &a);
    if (e != ST_OK)
        return e;
    hp->arch = a;
    hp->rope = a->rope;
    char k[ST_AK_COUNT][ST_ARCH_NAME_MAX];
    for (int i = 0; i < ST_AK_COUNT; i++)
        st_arch_key_name(a, (st_arch_key)i, k[i]);
    if ((e = llama_count(g, k[ST_AK_EMBEDDING_LENGTH], true, 0, &hp->n_embd)) ||
        (e = llama_count(g, k[ST_AK_BLOCK_COUNT], true, 0, &hp->n_layer)) ||
        (e = llama_count(g, k[ST_AK_HEAD_COUNT], true, 0, &hp->n_head)) ||
        (e = llama_experts(g, k, hp)) ||
        (e = llama_count(g, k[ST_AK_FEED_FORWARD_LENGTH], hp->n_ff == 0, hp->n_ff, &hp->n_ff)) ||
        (e = llama_count(g, k[ST_AK_HEAD_COUNT_KV], false, hp->n_head, &hp->n_head_kv)) ||
        (e = llama_count(g, k[ST_AK_CONTEXT_LENGTH], false, ST_LLAMA_DEFAULT_CTX,
                         &hp->n_ctx_train)))
        return e;
    if (hp->n_head % hp->n_head_kv != 0)
        return st_errorf(ST_ESHAPE, "head_count %lld is not a multiple of head_count_kv %lld",
                         (long long)hp->n_head, (long long)hp->n_head_kv);
    if ((e = llama_head_dim(g, k, hp)))
        return e;
    hp->q_dim = hp->n_head * hp->head_dim;
    hp->kv_dim = hp->n_head_kv * hp->head_dim;
    if ((e = llama_count(g, k[ST_AK_ROPE_DIMENSION_COUNT], false, hp->head_dim, &hp->n_rot)))
        return e;
    if (hp->n_rot > hp->head_dim || hp->n_rot % 2 != 0)
        return st_errorf(ST_ESHAPE, "rope.dimension_count %lld must be even and <= head dim %lld",
                         (long long)hp->n_rot, (long long)hp->head_dim);
    if ((e = llama_float(g, k[ST_AK_ROPE_FREQ_BASE], false, ST_LLAMA_DEFAULT_ROPE_BASE,
                         &hp->rope_base)) ||
        (e = llama_float(g, k[ST_AK_RMS_EPS], true, 0.0f, &hp->rms_eps)))
        return e;
    if (!(hp->rms_eps > 0.0f && hp->rms_eps < 1.0f))
        return st_errorf(ST_ERANGE, "layer_norm_rms_epsilon %g is not in (0, 1)",
                         (double)hp->rms_eps);
    if (!(hp->rope_base > 0.0f && isfinite(hp->rope_base)))
        return st_errorf(ST_ERANGE, "rope.freq_base %g is not positive and finite",
                         (double)hp->rope_base);
    if ((e = llama_rope_scaling(g, k, hp)) || (e = llama_attention(g, k, hp)))
        return e;
    /* vocab: from the key if present, else from the embedding's rows */
    char embd[ST_ARCH_NAME_MAX];
    st_arch_tensor_name(ST_AT_TOKEN_EMBD, 0, embd);
    const st_gguf_tensor *te = st_gguf_find_tensor(g, embd);
    if (te == NULL)
        return st_errorf(ST_EMISSING, "tensor '%s' is missing", embd);
    if (te->ne[1] < 1 || (uint64_t)te->ne[1] > ST_LLAMA_MAX_COUNT)
        return st_errorf(ST_ESHAPE, "tensor '%s' has %lld rows", embd, (long long)te->ne[1]);
    return llama_count(g, k[ST_AK_VOCAB_SIZE], false, te->ne[1], &hp->n_vocab);
}

size_t st_kv_bytes(int64_t n_layers, int64_t n_ctx, int64_t kv_dim, st_dtype t)
{
    size_t row;
    if (n_layers <= 0 || n_ctx <= 0 || kv_dim <= 0 || st_kv_dtype_check(t, 0) != ST_OK ||
        st_row_size(t, kv_dim, &row) != ST_K_OK)
        return 0;
    const unsigned kv_tensors = 2; /* K and V */
    unsigned __int128 b = (unsigned __int128)n_layers * (uint64_t)n_ctx * row * kv_tensors;
    if (b > (unsigned __int128)SIZE_MAX / kv_tensors)
        return 0;
    return (size_t)b;
}

st_err st_kv_dtype_from_name(const char *name, st_dtype *out)
{
    if (name == NULL) {
        *out = ST_KV_DEFAULT_DTYPE;
        return ST_OK;
    }
    st_dtype t;
    if (st_dtype_from_name(name, &t) != ST_K_OK || st_kv_dtype_check(t, 0) != ST_OK)
        return st_errorf(ST_EINVAL, "cache type '%s' is not one of f32, f16, q8_0", name);
    *out = t;
    return ST_OK;
}

st_err st_kv_dtype_check(st_dtype t, int64_t head_dim)
{
    if (t != ST_DT_F32 && t != ST_DT_F16 && t != ST_DT_Q8_0) {
        const st_dtype_info *i = st_dtype_info_of(t);
        return st_errorf(ST_EINVAL, "cache type %s is not one of f32, f16, q8_0",
                         i != NULL ? i->name : "(out of range)");
    }
    if (t == ST_DT_Q8_0 && head_dim % ST_QK != 0)
        return st_errorf(ST_EINVAL,
                         "cache type q8_0 needs a head dimension that is a multiple of %d, "
                         "this model's is %lld",
                         ST_QK, (long long)head_dim);
    return ST_OK;
}

/* minfo_is_expert - whether name is one of layer l's stacked expert tensors. */
static bool minfo_is_expert(st_gguf_str name, int64_t l)
{
    static const st_arch_tensor exps[] = {ST_AT_FFN_GATE_EXPS, ST_AT_FFN_UP_EXPS,
                                          ST_AT_FFN_DOWN_EXPS};
    char n[ST_ARCH_NAME_MAX];
    for (size_t i = 0; i < sizeof exps / sizeof exps[0]; i++)
        if (st_gguf_str_eq(name, st_arch_tensor_name(exps[i], l, n)))
            return true;
    return false;
}

/* minfo_sums - the bytes of g's tensors by part into m (n_layer set,
 * layer_bytes zeroed), and per dtype of the layers' tensors into dt. */
static st_err minfo_sums(const st_gguf *g, st_minfo *m, uint64_t dt[ST_DT_COUNT])
{
    m->head_tied = st_arch_head_tied(g);
    for (uint64_t i = 0; i < st_gguf_n_tensors(g); i++) {
        const st_gguf_tensor *t = st_gguf_tensor_at(g, i);
        m->total_bytes += t->nbytes;
        int64_t l;
        switch (st_arch_part_of(t->name, &l)) {
        case ST_AP_LAYER: /* every tensor of the layer: weights, norms, biases */
            if (l >= m->n_layer)
                return st_errorf(ST_ESHAPE, "tensor '%.*s' names layer %lld of a %u-layer model",
                                 (int)t->name.len, t->name.data, (long long)l, m->n_layer);
            m->layer_bytes[l] += t->nbytes;
            if (minfo_is_expert(t->name, l))
                m->layer_expert_bytes[l] += t->nbytes;
            if ((unsigned)t->dtype < ST_DT_COUNT)
                dt[t->dtype] += t->nbytes;
            break;
        case ST_AP_EMBD:
            m->embd_bytes += t->nbytes;
            if (m->head_tied)
                m->head_bytes += t->nbytes;
            break;
        case ST_AP_HEAD:
            m->head_bytes += t->nbytes;
            break;
        case ST_AP_ROPE: /* a few floats every stage with layers reads */
            m->rope_bytes += t->nbytes;
            break;
        case ST_AP_OTHER:
            break;
        }
    }
    for (uint32_t l = 0; l < m->n_layer; l++)
        if (m->layer_bytes[l] == 0)
            return st_errorf(ST_EMISSING, "layer %u has no tensors (blk.%u.*)", l, l);
    return ST_OK;
}

st_err st_minfo_from_gguf(const st_gguf *g, st_minfo *m)
{
    memset(m, 0, sizeof *m);
    st_hparams hp;
    st_err e = st_hparams_from_gguf(g, &hp);
    if (e != ST_OK)
        return e;
    /* every count is within 1..2^31 (st_hparams_from_gguf) */
    m->n_layer = (uint32_t)hp.n_layer;
    m->n_embd = (uint32_t)hp.n_embd;
    m->n_head = (uint32_t)hp.n_head;
    m->n_head_kv = (uint32_t)hp.n_head_kv;
    m->n_vocab = (uint32_t)hp.n_vocab;
    m->n_ctx_train = (uint32_t)hp.n_ctx_train;
    m->head_dim = (uint32_t)hp.head_dim;
    m->kv_dim = (uint32_t)hp.kv_dim;
    m->kv_bytes_per_token_layer = st_kv_bytes(1, 1, hp.kv_dim, ST_KV_DEFAULT_DTYPE);
    m->n_expert = (uint32_t)hp.n_expert;
    m->n_expert_used = (uint32_t)hp.n_expert_used;
    m->layer_bytes = calloc(m->n_layer, sizeof *m->layer_bytes);
    m->layer_expert_bytes = calloc(m->n_layer, sizeof *m->layer_expert_bytes);
    if (m->layer_bytes == NULL || m->layer_expert_bytes == NULL) {
        st_minfo_free(m);
        return st_errorf(ST_ENOMEM, "layer table of %u layers", m->n_layer);
    }
    uint64_t dt_bytes[ST_DT_COUNT] = {0};
    if ((e = minfo_sums(g, m, dt_bytes)) || (e = st_gguf_model_id(g, m->model_id))) {
        st_minfo_free(m);
        return e;
    }
    int best = 0;
    for (int d = 1; d < ST_DT_COUNT; d++)
        if (dt_bytes[d] > dt_bytes[best])
            best = d;
    snprintf(m->dtype, sizeof m->dtype, "%s", st_dtype_info_of((st_dtype)best)->name);
    st_gguf_str name;
    if (st_gguf_get_str(g, st_arch_gkey_name(ST_AG_NAME), &name) == ST_OK)
        snprintf(m->name, sizeof m->name, "%.*s",
                 (int)(name.len < sizeof m->name ? name.len : sizeof m->name - 1), name.data);
    st_errclear();
    return ST_OK;
}

uint64_t st_minfo_layer_active_bytes(const st_minfo *m, uint32_t l)
{
    if (m->n_expert == 0)
        return m->layer_bytes[l];
    const uint64_t exps = m->layer_expert_bytes[l];
    return m->layer_bytes[l] - exps +
           (uint64_t)((unsigned __int128)exps * m->n_expert_used / m->n_expert);
}

void st_minfo_free(st_minfo *m)
{
    free(m->layer_bytes);
    free(m->layer_expert_bytes);
    m->layer_bytes = NULL;
    m->layer_expert_bytes = NULL;
}

uint64_t st_minfo_stage_bytes(const st_minfo *m, uint32_t first, uint32_t last)
{
    uint64_t sum = first < last ? m->rope_bytes : 0;
    for (uint32_t l = first; l < last; l++)
        sum += m->layer_bytes[l];
    const bool head = last == m->n_layer;
    if (first == 0 && !(head && m->head_tied))
        sum += m->embd_bytes; /* a tied head holds it: counted with the head */
    if (head)
        sum += m->head_bytes;
    return sum;
}
