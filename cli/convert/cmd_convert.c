/* cmd_convert.c - `strata convert`: makes GGUF files.
 *
 *   strata convert synth OUT.gguf --dim D --layers L --heads H --kv-heads K
 *                  --ffn F --vocab V --type f32|f16|bf16|q8_0|q4_0
 *                  [--seed S] [--ctx C]
 *                  [--arch llama|qwen2|qwen3|gemma2|gemma3|phi3|mixtral|qwen3moe|olmoe]
 *                  [--experts N] [--experts-used K] [--expert-ffn F]
 *                  [--head-dim N] [--sliding-window N]
 *                  [--rope-scaling linear|yarn --rope-factor F [--rope-orig-ctx N]]
 *   strata convert llama2c IN.bin OUT.gguf [--tokenizer tokenizer.bin]
 *
 * Design. Both produce a llama GGUF (synth also the other architectures of
 * common/model/arch.c's table, with the tensors each requires: qwen2's
 * q/k/v biases N(0, 0.2) after each layer's v projection; qwen3's and
 * gemma3's q/k norms, Gemma's post-attention and post-FFN norms, phi3's
 * fused attn_qkv and ffn_up; the mixtures of experts' F32 router and
 * stacked experts, with olmoe's q/k norms over the whole projection; and
 * their keys, convert_synth.c; "mixtral" is a llama file with experts) with the tensor
 * names of common/model/arch.h and the key set and order of the project's shared
 * test files (general.*, <arch>.*, then tokenizer.ggml.*), so a converted
 * stories260K.bin is byte-identical to the shared stories260K.gguf. Without
 * a real tokenizer both write the same placeholder SPM vocabulary those
 * files carry: <unk>, <s>, </s>, the 256 byte tokens <0x00>..<0xFF>, then
 * the pieces "▁a", "a", "▁b", "b", ... "▁z", "z", "▁aa", "aa", ... (letter
 * strings in length-then-alphabetical order, each once with and once
 * without the word-start mark), scores 0 for special and byte tokens and
 * -j for the j-th piece.
 *
 * synth streams: the tensor table is written first (sizes follow from the
 * shapes), then each tensor is generated one row at a time from its own
 * PRNG stream (splitmix64 seeded by the seed and the tensor's name, normal
 * values by Box-Muller), converted with the reference kernels' from_float
 * and appended, so a 1.1B-parameter model needs a few rows of memory, and
 * the values of a tensor do not depend on the other tensors or the dtype.
 * Matrices are N(0, 0.5 / sqrt(ne0)), which keeps every product's output
 * near unit scale whatever the width; norm weights are 1 + N(0, 0.2). The
 * embedding of an architecture that scales it by sqrt(n_embd) (Gemma) is
 * N(0, 0.5 / n_embd), so that the scaled rows have the matrices' scale:
 * with the larger one the input token's own row dominated the tied head,
 * and greedy decoding repeated one token.
 *
 * llama2c maps the checkpoint read-only and hands the writer pointers into
 * it: llama2.c's [out][in] row-major matrices are ggml's [ne0 = in, ne1 =
 * out] layout byte for byte, and its RoPE pairs adjacent dimensions like
 * llama.cpp's normal mode, so nothing is permuted or copied.
 *
 * Files: this one holds the command and the metadata both write (keys of
 * common/model/arch.h's tables, hyperparameters as common/model/llama.h's st_hparams);
 * convert_vocab.c the vocabularies, convert_synth.c and convert_llama2c.c
 * the two converters (convert_impl.h). */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/convert/convert_impl.h"

#define CV_RMS_EPS 1e-5f /* the shared files' epsilon (their rope base is the default) */
#define CV_ALIGNMENT 32  /* the shared files' general.alignment */

void cv_hparams_derive(st_hparams *hp)
{
    hp->rope = hp->arch->rope;
    if (hp->head_dim == 0)
        hp->head_dim = hp->n_embd / hp->n_head;
    hp->q_dim = hp->n_head * hp->head_dim;
    hp->kv_dim = hp->n_head_kv * hp->head_dim;
    hp->n_rot = hp->head_dim;
    hp->rms_eps = CV_RMS_EPS;
    hp->rope_base = ST_LLAMA_DEFAULT_ROPE_BASE;
}

static uint32_t cv_file_type(st_dtype t)
{
    switch (t) {
    case ST_DT_F16:
        return 1;
    case ST_DT_Q4_0:
        return 2;
    case ST_DT_Q8_0:
        return 7;
    case ST_DT_BF16:
        return 32;
    default:
        return 0;
    }
}

st_err cv_add_meta(st_gguf_writer *w, const char *name, st_dtype type, const st_hparams *hp,
                   const cv_vocab *v)
{
    st_err e = ST_OK;
    char k[ST_AK_COUNT][ST_ARCH_NAME_MAX];
    for (int i = 0; i < ST_AK_COUNT; i++)
        st_arch_key_name(hp->arch, (st_arch_key)i, k[i]);
    const char *g[ST_AG_COUNT];
    for (int i = 0; i < ST_AG_COUNT; i++)
        g[i] = st_arch_gkey_name((st_arch_gkey)i);
    if (!e)
        e = st_gguf_writer_add_str(w, g[ST_AG_ARCHITECTURE], hp->arch->name);
    if (!e)
        e = st_gguf_writer_add_str(w, g[ST_AG_NAME], name);
    if (!e)
        e = st_gguf_writer_add_u32(w, g[ST_AG_FILE_TYPE], cv_file_type(type));
    if (!e)
        e = st_gguf_writer_add_u32(w, g[ST_AG_ALIGNMENT], CV_ALIGNMENT);
    if (!e)
        e = st_gguf_writer_add_u32(w, k[ST_AK_CONTEXT_LENGTH], (uint32_t)hp->n_ctx_train);
    if (!e)
        e = st_gguf_writer_add_u32(w, k[ST_AK_EMBEDDING_LENGTH], (uint32_t)hp->n_embd);
    if (!e)
        e = st_gguf_writer_add_u32(w, k[ST_AK_BLOCK_COUNT], (uint32_t)hp->n_layer);
    if (!e)
        e = st_gguf_writer_add_u32(w, k[ST_AK_FEED_FORWARD_LENGTH], (uint32_t)hp->n_ff);
    const bool moe = hp->n_expert > 0;
    if (!e && moe && hp->arch->moe_ff_key != ST_AK_FEED_FORWARD_LENGTH)
        e = st_gguf_writer_add_u32(w, k[hp->arch->moe_ff_key], (uint32_t)hp->n_ff_exp);
    if (!e && moe)
        e = st_gguf_writer_add_u32(w, k[ST_AK_EXPERT_COUNT], (uint32_t)hp->n_expert);
    if (!e && moe)
        e = st_gguf_writer_add_u32(w, k[ST_AK_EXPERT_USED_COUNT], (uint32_t)hp->n_expert_used);
    if (!e)
        e = st_gguf_writer_add_u32(w, k[ST_AK_ROPE_DIMENSION_COUNT], (uint32_t)hp->n_rot);
    if (!e)
        e = st_gguf_writer_add_u32(w, k[ST_AK_HEAD_COUNT], (uint32_t)hp->n_head);
    if (!e)
        e = st_gguf_writer_add_u32(w, k[ST_AK_HEAD_COUNT_KV], (uint32_t)hp->n_head_kv);
    if (!e)
        e = st_gguf_writer_add_f32(w, k[ST_AK_RMS_EPS], hp->rms_eps);
    if (!e)
        e = st_gguf_writer_add_f32(w, k[ST_AK_ROPE_FREQ_BASE], hp->rope_base);
    if (!e)
        e = st_gguf_writer_add_u32(w, k[ST_AK_VOCAB_SIZE], (uint32_t)hp->n_vocab);
    if (!e && hp->head_dim != hp->n_embd / hp->n_head)
        e = st_gguf_writer_add_u32(w, k[ST_AK_KEY_LENGTH], (uint32_t)hp->head_dim);
    if (!e && hp->head_dim != hp->n_embd / hp->n_head)
        e = st_gguf_writer_add_u32(w, k[ST_AK_VALUE_LENGTH], (uint32_t)hp->head_dim);
    if (!e && hp->swa_window > 0)
        e = st_gguf_writer_add_u32(w, k[ST_AK_SLIDING_WINDOW], (uint32_t)hp->swa_window);
    if (!e && hp->arch->swa_own_rope)
        e = st_gguf_writer_add_f32(w, k[ST_AK_ROPE_FREQ_BASE_SWA], hp->rope_base_swa);
    if (!e && hp->attn_softcap > 0.0f)
        e = st_gguf_writer_add_f32(w, k[ST_AK_ATTN_SOFTCAP], hp->attn_softcap);
    if (!e && hp->final_softcap > 0.0f)
        e = st_gguf_writer_add_f32(w, k[ST_AK_FINAL_SOFTCAP], hp->final_softcap);
    if (!e && hp->rope_scaling != ST_ROPE_SCALING_NONE)
        e = st_gguf_writer_add_str(w, k[ST_AK_ROPE_SCALING_TYPE],
                                   hp->rope_scaling == ST_ROPE_SCALING_YARN ? "yarn" : "linear");
    if (!e && hp->rope_scaling != ST_ROPE_SCALING_NONE)
        e = st_gguf_writer_add_f32(w, k[ST_AK_ROPE_SCALING_FACTOR], 1.0f / hp->rope_freq_scale);
    if (!e && hp->rope_scaling != ST_ROPE_SCALING_NONE && hp->n_ctx_orig > 0)
        e = st_gguf_writer_add_u32(w, k[ST_AK_ROPE_SCALING_ORIG_CTX], (uint32_t)hp->n_ctx_orig);
    if (!e)
        e = st_gguf_writer_add_str(w, g[ST_AG_TOK_MODEL], "llama");
    if (!e)
        e = st_gguf_writer_add_arr_str(w, g[ST_AG_TOK_TOKENS], (const char *const *)v->toks,
                                       v->lens, (uint64_t)v->n);
    if (!e)
        e = st_gguf_writer_add_arr(w, g[ST_AG_TOK_SCORES], ST_GGUF_FLOAT32, v->scores,
                                   (uint64_t)v->n);
    if (!e)
        e = st_gguf_writer_add_arr(w, g[ST_AG_TOK_TYPES], ST_GGUF_INT32, v->types, (uint64_t)v->n);
    if (!e)
        e = st_gguf_writer_add_u32(w, g[ST_AG_TOK_BOS], CV_ID_BOS);
    if (!e)
        e = st_gguf_writer_add_u32(w, g[ST_AG_TOK_EOS], CV_ID_EOS);
    if (!e)
        e = st_gguf_writer_add_u32(w, g[ST_AG_TOK_UNK], CV_ID_UNK);
    return e;
}

int cv_fail(st_err e)
{
    fprintf(stderr, "strata: %s\n", st_errmsg(e));
    return 1;
}

int st_cmd_convert(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "synth") == 0)
        return cv_synth(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "llama2c") == 0)
        return cv_llama2c(argc, argv);
    const bool help = argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0);
    fprintf(help ? stdout : stderr,
            "%susage: strata convert llama2c IN.bin OUT.gguf [--tokenizer tokenizer.bin]\n"
            "       strata convert synth OUT.gguf --dim D --layers L --heads H --kv-heads K --ffn "
            "F\n"
            "                      --vocab V --type f32|f16|bf16|q8_0|q4_0 [--seed S] [--ctx C]\n"
            "                      [--arch llama|qwen2|qwen3|gemma2|gemma3|phi3|mixtral|qwen3moe|"
            "olmoe]\n",
            help ? "" : "strata: convert: ");
    return help ? 0 : 2;
}
