/* test_model.c - model-level validation of GGUF files: each missing key or
 * tensor, each shape that contradicts the hyperparameters, an unsupported
 * architecture, a wrongly typed norm and any request for rope scaling gets
 * its specific error naming the culprit; qwen2 binds its biases and NEOX
 * rope. Crafted files are stories260K.gguf (or another shared model)
 * rewritten in memory with one change. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/model/gguf.h"
#include "common/model/gguf_write.h"
#include "tests/engine/golden.h"
#include "worker/engine/model.h"

typedef struct edit {
    const char *drop_key; /* omit this pair */
    const char *set_key;  /* replace this u32 pair's value */
    uint32_t set_val;
    const char *arch;        /* replace general.architecture */
    const char *drop_tensor; /* omit this tensor */
    const char *f16_tensor;  /* store this f32 tensor as f16 */
    const char *q8k_tensor;  /* store this tensor as (zero) Q8_K blocks */
    const char *str_key;     /* add this string pair */
    const char *str_val;
    const char *f32_key; /* add this f32 pair */
    float f32_val;
    const char *add_tensor; /* add this f32 vector of add_n ones */
    int64_t add_n;
} edit;

static st_gguf *g_src;

static void copy_kv(st_gguf_writer *w, const st_gguf_kv *kv, const edit *ed)
{
    char key[256];
    snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.data);
    if (ed->drop_key && strcmp(key, ed->drop_key) == 0)
        return;
    if (strcmp(key, "general.alignment") == 0)
        return; /* the writer's default alignment is the same */
    st_err e = ST_OK;
    switch (kv->type) {
    case ST_GGUF_UINT32:
        e = st_gguf_writer_add_u32(w, key,
                                   ed->set_key && strcmp(key, ed->set_key) == 0
                                       ? ed->set_val
                                       : (uint32_t)kv->v.u64);
        break;
    case ST_GGUF_INT32:
        e = st_gguf_writer_add_i32(w, key, (int32_t)kv->v.i64);
        break;
    case ST_GGUF_FLOAT32:
        e = st_gguf_writer_add_f32(w, key, (float)kv->v.f64);
        break;
    case ST_GGUF_BOOL:
        e = st_gguf_writer_add_bool(w, key, kv->v.u64 != 0);
        break;
    case ST_GGUF_STRING:
        if (ed->arch && strcmp(key, "general.architecture") == 0)
            e = st_gguf_writer_add_str(w, key, ed->arch);
        else
            e = st_gguf_writer_add_strn(w, key, kv->v.str.data, kv->v.str.len);
        break;
    case ST_GGUF_ARRAY:
        if (kv->arr_type == ST_GGUF_STRING) {
            const char **s = malloc(kv->arr_n * sizeof *s);
            size_t *l = malloc(kv->arr_n * sizeof *l);
            for (uint64_t i = 0; i < kv->arr_n; i++) {
                s[i] = kv->arr_strs[i].data;
                l[i] = kv->arr_strs[i].len;
            }
            e = st_gguf_writer_add_arr_str(w, key, s, l, kv->arr_n);
            free(s);
            free(l);
        } else {
            e = st_gguf_writer_add_arr(w, key, kv->arr_type, kv->arr_data, kv->arr_n);
        }
        break;
    default:
        ck_abort_msg("unexpected kv type %d for %s", kv->type, key);
    }
    ck_assert_int_eq(e, ST_OK);
}

/* craft - a copy of the source with one edit; returns the open file. */
static st_gguf *craft(const edit *ed, uint8_t **buf)
{
    st_gguf_writer *w;
    ck_assert_int_eq(st_gguf_writer_new(&w), ST_OK);
    for (uint64_t i = 0; i < st_gguf_n_kv(g_src); i++)
        copy_kv(w, st_gguf_kv_at(g_src, i), ed);
    if (ed->str_key)
        ck_assert_int_eq(st_gguf_writer_add_str(w, ed->str_key, ed->str_val), ST_OK);
    if (ed->f32_key)
        ck_assert_int_eq(st_gguf_writer_add_f32(w, ed->f32_key, ed->f32_val), ST_OK);
    float *extra = NULL;
    if (ed->add_tensor) {
        extra = malloc((size_t)ed->add_n * sizeof *extra);
        for (int64_t i = 0; i < ed->add_n; i++)
            extra[i] = 1.0f;
        const int64_t ne[4] = {ed->add_n, 1, 1, 1};
        ck_assert_int_eq(st_gguf_writer_add_tensor(w, ed->add_tensor, ST_DT_F32, 1, ne, extra,
                                                   (size_t)ed->add_n * sizeof *extra),
                         ST_OK);
    }
    uint16_t *half = NULL;
    void *q8k = NULL;
    for (uint64_t i = 0; i < st_gguf_n_tensors(g_src); i++) {
        const st_gguf_tensor *t = st_gguf_tensor_at(g_src, i);
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.data);
        if (ed->drop_tensor && strcmp(name, ed->drop_tensor) == 0)
            continue;
        if (ed->f16_tensor && strcmp(name, ed->f16_tensor) == 0) {
            size_t n = t->nbytes / 4;
            half = malloc(n * 2);
            st_kernels_ref()->from_float[ST_DT_F16](t->data, half, (int64_t)n);
            ck_assert_int_eq(st_gguf_writer_add_tensor(w, name, ST_DT_F16, t->n_dims, t->ne, half,
                                                       n * 2),
                             ST_OK);
            continue;
        }
        if (ed->q8k_tensor && strcmp(name, ed->q8k_tensor) == 0) {
            size_t row;
            ck_assert_int_eq(st_row_size(ST_DT_Q8_K, t->ne[0], &row), ST_K_OK);
            const size_t n = row * (size_t)t->ne[1];
            q8k = calloc(1, n);
            ck_assert_int_eq(st_gguf_writer_add_tensor(w, name, ST_DT_Q8_K, t->n_dims, t->ne, q8k,
                                                       n),
                             ST_OK);
            continue;
        }
        ck_assert_int_eq(st_gguf_writer_add_tensor(w, name, t->dtype, t->n_dims, t->ne, t->data,
                                                   t->nbytes),
                         ST_OK);
    }
    size_t len;
    ck_assert_int_eq(st_gguf_writer_to_mem(w, buf, &len), ST_OK);
    st_gguf_writer_free(w);
    free(half);
    free(q8k);
    free(extra);
    st_gguf *g;
    ck_assert_int_eq(st_gguf_open_mem(*buf, len, &g), ST_OK);
    return g;
}

static void expect(const edit *ed, st_err code, const char *needle)
{
    uint8_t *buf;
    st_gguf *g = craft(ed, &buf);
    st_model *m = NULL;
    st_err e = st_model_open_gguf(g, 0, -1, &m);
    ck_assert_msg(e == code, "expected %s, got %s", st_strerror(code), st_errmsg(e));
    ck_assert_msg(strstr(st_errdetail(), needle) != NULL, "detail '%s' does not name '%s'",
                  st_errdetail(), needle);
    ck_assert_ptr_null(m);
    st_gguf_close(g);
    free(buf);
}

static void setup(void)
{
    char p[512];
    ck_assert_int_eq(st_gguf_open(golden_path(p, sizeof p, "models", "stories260K.gguf"), &g_src),
                     ST_OK);
}

static void teardown(void) { st_gguf_close(g_src); }

START_TEST(test_unchanged_copy_loads)
{
    edit ed = {0};
    uint8_t *buf;
    st_gguf *g = craft(&ed, &buf);
    st_model *m;
    ck_assert_int_eq(st_model_open_gguf(g, 0, -1, &m), ST_OK);
    ck_assert_int_eq(st_model_hparams(m)->n_layer, 5);
    ck_assert_int_eq(st_model_hparams(m)->n_head_kv, 4);
    ck_assert(st_model_has_head(m) && st_model_has_embd(m));
    st_model_close(m);
    st_gguf_close(g);
    free(buf);
}
END_TEST

START_TEST(test_missing_keys)
{
    edit a = {.drop_key = "llama.block_count"};
    expect(&a, ST_EMISSING, "llama.block_count");
    edit b = {.drop_key = "llama.embedding_length"};
    expect(&b, ST_EMISSING, "llama.embedding_length");
    edit c = {.drop_key = "llama.attention.layer_norm_rms_epsilon"};
    expect(&c, ST_EMISSING, "layer_norm_rms_epsilon");
    edit d = {.drop_key = "general.architecture"};
    expect(&d, ST_EMISSING, "general.architecture");
}
END_TEST

START_TEST(test_missing_tensors)
{
    edit a = {.drop_tensor = "blk.2.ffn_up.weight"};
    expect(&a, ST_EMISSING, "blk.2.ffn_up.weight");
    edit b = {.drop_tensor = "output_norm.weight"};
    expect(&b, ST_EMISSING, "output_norm.weight");
    edit c = {.drop_tensor = "token_embd.weight"};
    expect(&c, ST_EMISSING, "token_embd.weight");
}
END_TEST

START_TEST(test_shapes_contradict_hparams)
{
    edit a = {.set_key = "llama.attention.head_count_kv", .set_val = 8};
    expect(&a, ST_ESHAPE, "blk.0.attn_k.weight");
    edit b = {.set_key = "llama.feed_forward_length", .set_val = 170};
    expect(&b, ST_ESHAPE, "blk.0.ffn_gate.weight");
    edit c = {.set_key = "llama.attention.head_count", .set_val = 7};
    expect(&c, ST_ESHAPE, "head_count");
    edit d = {.set_key = "llama.rope.dimension_count", .set_val = 9};
    expect(&d, ST_ESHAPE, "dimension_count");
    edit e = {.set_key = "llama.vocab_size", .set_val = 600};
    expect(&e, ST_ESHAPE, "token_embd.weight");
    edit f = {.set_key = "llama.block_count", .set_val = 6};
    expect(&f, ST_EMISSING, "blk.5.");
}
END_TEST

START_TEST(test_architecture_and_types)
{
    edit a = {.arch = "gpt2"};
    expect(&a, ST_ETYPE, "gpt2");
    edit b = {.f16_tensor = "blk.1.attn_norm.weight"};
    expect(&b, ST_ETYPE, "blk.1.attn_norm.weight");
}
END_TEST

/* craft_open - the model of edit ed, which must load; the caller closes
 * m, then *g, then frees *buf. */
static st_model *craft_open(const edit *ed, st_gguf **g, uint8_t **buf)
{
    *g = craft(ed, buf);
    st_model *m = NULL;
    st_err e = st_model_open_gguf(*g, 0, -1, &m);
    ck_assert_msg(e == ST_OK, "expected success, got %s", st_errmsg(e));
    return m;
}

static void craft_close(st_model *m, st_gguf *g, uint8_t *buf)
{
    st_model_close(m);
    st_gguf_close(g);
    free(buf);
}

/* Rope scaling: the types llama.cpp computes are read with their factor
 * (stories260K: head dim 8, all rotated, context 512); any other type is
 * refused by name; rope_freqs.weight is bound for llama, of n_rot / 2
 * floats. */
START_TEST(test_rope_scaling)
{
    uint8_t *buf;
    st_gguf *g;
    edit lin = {.str_key = "llama.rope.scaling.type", .str_val = "linear",
                .f32_key = "llama.rope.scaling.factor", .f32_val = 4.0f};
    st_model *m = craft_open(&lin, &g, &buf);
    const st_hparams *hp = st_model_hparams(m);
    ck_assert_int_eq(hp->rope_scaling, ST_ROPE_SCALING_LINEAR);
    ck_assert(hp->rope_freq_scale == 0.25f && hp->rope_ext_factor == 0.0f &&
              hp->rope_attn_factor == 1.0f);
    craft_close(m, g, buf);
    edit old = {.f32_key = "llama.rope.scale_linear", .f32_val = 2.0f};
    m = craft_open(&old, &g, &buf);
    ck_assert(st_model_hparams(m)->rope_freq_scale == 0.5f);
    craft_close(m, g, buf);
    edit yarn = {.str_key = "llama.rope.scaling.type", .str_val = "yarn",
                 .f32_key = "llama.rope.scaling.factor", .f32_val = 4.0f};
    m = craft_open(&yarn, &g, &buf);
    hp = st_model_hparams(m);
    ck_assert_int_eq(hp->rope_scaling, ST_ROPE_SCALING_YARN);
    ck_assert(hp->rope_freq_scale == 0.25f && hp->rope_ext_factor == 1.0f);
    ck_assert_int_eq(hp->n_ctx_orig, 512); /* no original_context_length: the context */
    /* llama.cpp's attention factor cancels the 1 + 0.1 ln 4 the kernel applies */
    ck_assert_msg(fabsf(hp->rope_attn_factor - 1.0f) < 1e-6f, "%g", (double)hp->rope_attn_factor);
    craft_close(m, g, buf);
    edit none = {.str_key = "llama.rope.scaling.type", .str_val = "none",
                 .f32_key = "llama.rope.scaling.factor", .f32_val = 4.0f};
    m = craft_open(&none, &g, &buf);
    ck_assert(st_model_hparams(m)->rope_freq_scale == 1.0f);
    craft_close(m, g, buf);
    edit freqs = {.add_tensor = "rope_freqs.weight", .add_n = 4};
    m = craft_open(&freqs, &g, &buf);
    ck_assert_ptr_nonnull(st_model_rope_factors(m, 512));
    craft_close(m, g, buf);
    edit a = {.str_key = "llama.rope.scaling.type", .str_val = "su"};
    expect(&a, ST_ETYPE, "llama.rope.scaling.type is 'su'");
    edit b = {.f32_key = "llama.rope.scaling.factor", .f32_val = -2.0f};
    expect(&b, ST_ERANGE, "rope scaling factor -2");
    edit c = {.add_tensor = "rope_freqs.weight", .add_n = 8};
    expect(&c, ST_ESHAPE, "rope_freqs.weight");
}
END_TEST

/* llama loads q/k/v biases when a file has them (as llama.cpp does). */
START_TEST(test_llama_optional_bias)
{
    edit a = {.add_tensor = "blk.2.attn_k.bias", .add_n = 32}; /* kv_dim of stories260K */
    uint8_t *buf;
    st_gguf *g = craft(&a, &buf);
    st_model *m;
    ck_assert_int_eq(st_model_open_gguf(g, 0, -1, &m), ST_OK);
    ck_assert_int_eq(st_model_hparams(m)->rope, ST_ROPE_NORM);
    ck_assert_ptr_nonnull(st_model_layer(m, 2)->bk);
    ck_assert_ptr_null(st_model_layer(m, 2)->bq);
    ck_assert_ptr_null(st_model_layer(m, 1)->bk);
    st_model_close(m);
    st_gguf_close(g);
    free(buf);
    edit b = {.add_tensor = "blk.2.attn_k.bias", .add_n = 31};
    expect(&b, ST_ESHAPE, "blk.2.attn_k.bias");
}
END_TEST

/* qwen2: its keys, required biases (bound only for the stage's layers,
 * f32, of the projection's width), NEOX rope, tied head. */
START_TEST(test_qwen2)
{
    st_gguf_close(g_src);
    char p[512];
    ck_assert_int_eq(st_gguf_open(golden_path(p, sizeof p, "models", "qw2-synth-q8_0.gguf"),
                                  &g_src),
                     ST_OK);
    st_model *m;
    ck_assert_int_eq(st_model_open_gguf(g_src, 0, -1, &m), ST_OK);
    const st_hparams *hp = st_model_hparams(m);
    ck_assert_str_eq(hp->arch->name, "qwen2");
    ck_assert_int_eq(hp->rope, ST_ROPE_NEOX);
    ck_assert_int_eq(hp->n_layer, 4);
    ck_assert_int_eq(hp->kv_dim, 64);
    ck_assert(hp->rope_base == 1000000.0f);
    for (int64_t l = 0; l < 4; l++) {
        const st_layer *L = st_model_layer(m, l);
        ck_assert(L->bq != NULL && L->bk != NULL && L->bv != NULL);
    }
    ck_assert_ptr_eq(st_model_output(m)->data, st_model_tok_embd(m)->data); /* tied */
    st_model_close(m);
    /* stage [1, 3): exactly the bytes of blk.1.* and blk.2.*, biases included */
    ck_assert_int_eq(st_model_open_gguf(g_src, 1, 3, &m), ST_OK);
    size_t want = 0;
    int biases = 0;
    for (uint64_t i = 0; i < st_gguf_n_tensors(g_src); i++) {
        const st_gguf_tensor *t = st_gguf_tensor_at(g_src, i);
        int64_t l;
        if (st_arch_part_of(t->name, &l) == ST_AP_LAYER && l >= 1 && l < 3) {
            want += t->nbytes;
            biases += t->name.len > 5 && memcmp(t->name.data + t->name.len - 5, ".bias", 5) == 0;
        }
    }
    ck_assert_int_eq(biases, 6);
    ck_assert_uint_eq(st_model_weight_bytes(m), want);
    st_model_close(m);
    edit a = {.drop_tensor = "blk.1.attn_k.bias"};
    expect(&a, ST_EMISSING, "blk.1.attn_k.bias");
    edit b = {.f16_tensor = "blk.3.attn_v.bias"};
    expect(&b, ST_ETYPE, "blk.3.attn_v.bias");
    edit c = {.drop_key = "qwen2.attention.head_count"};
    expect(&c, ST_EMISSING, "qwen2.attention.head_count");
    edit d = {.str_key = "qwen2.rope.scaling.type", .str_val = "dynamic"};
    expect(&d, ST_ETYPE, "qwen2.rope.scaling.type is 'dynamic'");
    edit e = {.add_tensor = "rope_freqs.weight", .add_n = 32};
    expect(&e, ST_EINVAL, "rope_freqs.weight");
}
END_TEST

/* use_model - makes the shared file name the source of the crafted edits */
static void use_model(const char *name)
{
    st_gguf_close(g_src);
    char p[512];
    ck_assert_int_eq(st_gguf_open(golden_path(p, sizeof p, "models", name), &g_src), ST_OK);
}

/* qwen3: head_dim from attention.key_length (128, twice n_embd / n_head),
 * so q has 512 rows and attn_output 512 inputs; q/k norms required. */
START_TEST(test_qwen3)
{
    use_model("w3-qwen3-q8_0.gguf");
    st_model *m;
    ck_assert_int_eq(st_model_open_gguf(g_src, 0, -1, &m), ST_OK);
    const st_hparams *hp = st_model_hparams(m);
    ck_assert_str_eq(hp->arch->name, "qwen3");
    ck_assert_int_eq(hp->head_dim, 128);
    ck_assert_int_eq(hp->q_dim, 512);
    ck_assert_int_eq(hp->kv_dim, 256);
    ck_assert(hp->attn_scale == 1.0f / sqrtf(128.0f));
    const st_layer *L = st_model_layer(m, 1);
    ck_assert(L->q_norm != NULL && L->k_norm != NULL && L->bq == NULL);
    ck_assert_int_eq(L->wq.n_out, 512);
    ck_assert_int_eq(L->wo.n_in, 512);
    st_model_close(m);
    edit a = {.drop_tensor = "blk.1.attn_k_norm.weight"};
    expect(&a, ST_EMISSING, "blk.1.attn_k_norm.weight");
    edit b = {.set_key = "qwen3.attention.value_length", .set_val = 64};
    expect(&b, ST_EINVAL, "qwen3.attention.value_length");
}
END_TEST

/* gemma2: soft-caps and window from the file, sliding window on even
 * layers, the embedding scaled by sqrt(128) and always the head (an
 * output.weight is refused, as llama.cpp would ignore it). */
START_TEST(test_gemma2)
{
    use_model("w3-gemma2-f16.gguf");
    st_model *m;
    ck_assert_int_eq(st_model_open_gguf(g_src, 0, -1, &m), ST_OK);
    const st_hparams *hp = st_model_hparams(m);
    ck_assert(hp->attn_softcap == 10.0f && hp->final_softcap == 0.5f);
    ck_assert_int_eq(hp->swa_window, 16);
    ck_assert(st_hparams_layer_swa(hp, 0) && !st_hparams_layer_swa(hp, 1) &&
              st_hparams_layer_swa(hp, 2) && !st_hparams_layer_swa(hp, 3));
    ck_assert(hp->embd_scale == sqrtf(128.0f));
    ck_assert(hp->rope_base == 10000.0f && hp->rope_base_swa == 10000.0f);
    ck_assert_int_eq(hp->arch->ffn_act, ST_FFN_GELU_TANH);
    ck_assert(st_model_layer(m, 3)->attn_post_norm != NULL &&
              st_model_layer(m, 3)->ffn_post_norm != NULL);
    st_model_close(m);
    edit a = {.add_tensor = "output.weight", .add_n = 128};
    expect(&a, ST_EINVAL, "output.weight");
    edit b = {.drop_tensor = "blk.2.post_ffw_norm.weight"};
    expect(&b, ST_EMISSING, "blk.2.post_ffw_norm.weight");
}
END_TEST

/* gemma3: layers 0-4 local (window 16, base 10000, unscaled), layer 5
 * global (base 1e6, linear factor 8); no soft-caps. */
START_TEST(test_gemma3)
{
    use_model("w3-gemma3-q8_0.gguf");
    st_model *m;
    ck_assert_int_eq(st_model_open_gguf(g_src, 0, -1, &m), ST_OK);
    const st_hparams *hp = st_model_hparams(m);
    ck_assert(hp->attn_softcap == 0.0f && hp->final_softcap == 0.0f);
    for (int64_t l = 0; l < 6; l++)
        ck_assert(st_hparams_layer_swa(hp, l) == (l < 5));
    st_rope_params local, global;
    st_hparams_rope(hp, 0, NULL, &local);
    st_hparams_rope(hp, 5, NULL, &global);
    ck_assert(local.base == 10000.0f && local.freq_scale == 1.0f);
    ck_assert(global.base == 1000000.0f && global.freq_scale == 0.125f);
    st_model_close(m);
}
END_TEST

/* phi3: attn_qkv and the fused ffn_up bound as row views; Phi-3's long
 * rope factors for a session longer than the original context, the short
 * ones otherwise. */
START_TEST(test_phi3)
{
    use_model("w3-phi3-q8_0.gguf");
    st_model *m;
    ck_assert_int_eq(st_model_open_gguf(g_src, 0, -1, &m), ST_OK);
    const st_layer *L = st_model_layer(m, 0);
    ck_assert_int_eq(L->wq.n_out, 128);
    ck_assert_int_eq(L->wk.n_out, 64);
    ck_assert_ptr_eq(L->wk.data, (const uint8_t *)L->wq.data + 128 * L->wq.row_bytes);
    ck_assert_ptr_eq(L->wv.data, (const uint8_t *)L->wk.data + 64 * L->wk.row_bytes);
    ck_assert_int_eq(L->w_gate.n_out, 384);
    ck_assert_ptr_eq(L->w_up.data, (const uint8_t *)L->w_gate.data + 384 * L->w_gate.row_bytes);
    ck_assert_ptr_null(st_model_rope_factors(m, 4096));
    st_model_close(m);
    uint8_t *buf;
    st_gguf *g;
    edit lng = {.add_tensor = "rope_factors_long.weight", .add_n = 16,
                .str_key = "phi3.rope.scaling.type", .str_val = "longrope"};
    m = craft_open(&lng, &g, &buf);
    ck_assert_ptr_nonnull(st_model_rope_factors(m, 4097));
    ck_assert_ptr_null(st_model_rope_factors(m, 4096)); /* no short factors in this file */
    craft_close(m, g, buf);
    edit b = {.add_tensor = "blk.0.attn_q.weight", .add_n = 128};
    expect(&b, ST_EINVAL, "blk.0.attn_q.weight");
}
END_TEST

/* A weight of a dtype that has no matrix kernel (Q8_K is an activation
 * format only) is refused with an error naming the tensor and the dtype.
 * stories260K has no row of 256 values: this test crafts from synth-s. */
START_TEST(test_dtype_without_kernel)
{
    st_gguf_close(g_src);
    char p[512];
    ck_assert_int_eq(st_gguf_open(golden_path(p, sizeof p, "models", "synth-s-q8_0.gguf"), &g_src),
                     ST_OK);
    edit a = {.q8k_tensor = "blk.3.attn_v.weight"};
    expect(&a, ST_ETYPE, "blk.3.attn_v.weight");
    ck_assert_msg(strstr(st_errdetail(), "q8_k") != NULL, "detail '%s'", st_errdetail());
    edit b = {.q8k_tensor = "token_embd.weight"};
    expect(&b, ST_ETYPE, "token_embd.weight");
}
END_TEST

START_TEST(test_layer_range)
{
    st_model *m = NULL;
    ck_assert_int_eq(st_model_open_gguf(g_src, 3, 2, &m), ST_ERANGE);
    ck_assert_int_eq(st_model_open_gguf(g_src, 0, 6, &m), ST_ERANGE);
    ck_assert_int_eq(st_model_open_gguf(g_src, -1, 2, &m), ST_ERANGE);
    ck_assert_int_eq(st_model_open_gguf(g_src, 1, 3, &m), ST_OK);
    ck_assert(!st_model_has_embd(m) && !st_model_has_head(m));
    st_model_close(m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("model");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_unchanged_copy_loads);
    tcase_add_test(tc, test_missing_keys);
    tcase_add_test(tc, test_missing_tensors);
    tcase_add_test(tc, test_shapes_contradict_hparams);
    tcase_add_test(tc, test_architecture_and_types);
    tcase_add_test(tc, test_layer_range);
    tcase_add_test(tc, test_dtype_without_kernel);
    tcase_add_test(tc, test_rope_scaling);
    tcase_add_test(tc, test_llama_optional_bias);
    tcase_add_test(tc, test_qwen2);
    tcase_add_test(tc, test_qwen3);
    tcase_add_test(tc, test_gemma2);
    tcase_add_test(tc, test_gemma3);
    tcase_add_test(tc, test_phi3);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf == 0 ? 0 : 1;
}
