/* cmd_convert.c - `strata convert`: makes GGUF files.
 *
 *   strata convert synth OUT.gguf --dim D --layers L --heads H --kv-heads K
 *                  --ffn F --vocab V --type f32|f16|bf16|q8_0|q4_0
 *                  [--seed S] [--ctx C] [--arch llama|qwen2]
 *   strata convert llama2c IN.bin OUT.gguf [--tokenizer tokenizer.bin]
 *
 * Design. Both produce a llama GGUF (synth also qwen2: q/k/v biases,
 * N(0, 0.2), after each layer's v projection) with the key and tensor
 * names of common/arch.h and the key set and order of the project's shared
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
 * near unit scale whatever the width; norm weights are 1 + N(0, 0.2).
 *
 * llama2c maps the checkpoint read-only and hands the writer pointers into
 * it: llama2.c's [out][in] row-major matrices are ggml's [ne0 = in, ne1 =
 * out] layout byte for byte, and its RoPE pairs adjacent dimensions like
 * llama.cpp's normal mode, so nothing is permuted or copied. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "common/arch.h"
#include "common/gguf_write.h"
#include "kernels/kernels.h"

#define CV_N_SPECIAL 3
#define CV_N_BYTE 256
#define CV_MIN_VOCAB (CV_N_SPECIAL + CV_N_BYTE)
#define CV_TYPE_NORMAL 1
#define CV_TYPE_UNKNOWN 2
#define CV_TYPE_CONTROL 3
#define CV_TYPE_BYTE 6
#define CV_RMS_EPS 1e-5f      /* the shared files' epsilon and rope base */
#define CV_ROPE_BASE 10000.0f
#define CV_NORM_STD 0.2       /* synth: norm weights 1 + N(0, 0.2) */
#define CV_BIAS_STD 0.2       /* synth: biases N(0, 0.2) */
#define CV_MAT_SCALE 0.5      /* synth: matrices N(0, 0.5 / sqrt(ne0)) */

/* ---- vocabulary ------------------------------------------------------- */

typedef struct cv_vocab {
    int64_t n;
    char **toks;
    size_t *lens;
    float *scores;
    int32_t *types;
} cv_vocab;

static void cv_vocab_free(cv_vocab *v)
{
    if (v->toks != NULL)
        for (int64_t i = 0; i < v->n; i++)
            free(v->toks[i]);
    free(v->toks);
    free(v->lens);
    free(v->scores);
    free(v->types);
    memset(v, 0, sizeof *v);
}

static st_err cv_vocab_alloc(cv_vocab *v, int64_t n)
{
    memset(v, 0, sizeof *v);
    v->n = n;
    v->toks = calloc((size_t)n, sizeof *v->toks);
    v->lens = calloc((size_t)n, sizeof *v->lens);
    v->scores = calloc((size_t)n, sizeof *v->scores);
    v->types = calloc((size_t)n, sizeof *v->types);
    if (!v->toks || !v->lens || !v->scores || !v->types) {
        cv_vocab_free(v);
        return st_errorf(ST_ENOMEM, "convert: vocabulary of %lld tokens", (long long)n);
    }
    return ST_OK;
}

static st_err cv_vocab_set(cv_vocab *v, int64_t i, const char *s, size_t len, float score,
                           int32_t type)
{
    v->toks[i] = malloc(len + 1);
    if (v->toks[i] == NULL)
        return st_errorf(ST_ENOMEM, "convert: token %lld", (long long)i);
    memcpy(v->toks[i], s, len);
    v->toks[i][len] = '\0';
    v->lens[i] = len;
    v->scores[i] = score;
    v->types[i] = type;
    return ST_OK;
}

/* The special and byte tokens shared by both vocabularies: ids 0..258. */
static st_err cv_vocab_fixed(cv_vocab *v)
{
    static const char *const special[CV_N_SPECIAL] = {"<unk>", "<s>", "</s>"};
    static const int32_t special_type[CV_N_SPECIAL] = {CV_TYPE_UNKNOWN, CV_TYPE_CONTROL,
                                                       CV_TYPE_CONTROL};
    st_err e = ST_OK;
    for (int i = 0; i < CV_N_SPECIAL && !e; i++)
        e = cv_vocab_set(v, i, special[i], strlen(special[i]), 0.0f, special_type[i]);
    for (int b = 0; b < CV_N_BYTE && !e; b++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        e = cv_vocab_set(v, CV_N_SPECIAL + b, s, 6, 0.0f, CV_TYPE_BYTE);
    }
    return e;
}

/* cv_vocab_placeholder - the placeholder SPM vocabulary of n >= 259 tokens. */
static st_err cv_vocab_placeholder(cv_vocab *v, int64_t n)
{
    st_err e = cv_vocab_alloc(v, n);
    if (e)
        return e;
    e = cv_vocab_fixed(v);
    /* letters: the k-th string of the sequence a..z, aa..zz, aaa.. */
    char word[16];
    int64_t piece = 0, k = 0;
    for (int64_t id = CV_MIN_VOCAB; id < n && !e; k++) {
        int len = 1;
        int64_t rem = k, span = 26;
        while (rem >= span) {
            rem -= span;
            span *= 26;
            len++;
        }
        for (int c = len - 1; c >= 0; c--) {
            word[c] = (char)('a' + rem % 26);
            rem /= 26;
        }
        char marked[24];
        memcpy(marked, "\xE2\x96\x81", 3); /* U+2581, SentencePiece's word start */
        memcpy(marked + 3, word, (size_t)len);
        e = cv_vocab_set(v, id++, marked, (size_t)len + 3, -(float)piece, CV_TYPE_NORMAL);
        piece++;
        if (!e && id < n) {
            e = cv_vocab_set(v, id++, word, (size_t)len, -(float)piece, CV_TYPE_NORMAL);
            piece++;
        }
    }
    if (e)
        cv_vocab_free(v);
    return e;
}

/* cv_vocab_llama2c - reads llama2.c's tokenizer.bin (int32 max length,
 * then per token: f32 score, int32 length, bytes), which must hold exactly
 * n tokens. Spaces become U+2581 again (llama2.c's export replaced them)
 * and "\n<s>\n" / "\n</s>\n" become "<s>" / "</s>". */
static st_err cv_vocab_llama2c(cv_vocab *v, const char *path, int64_t n)
{
    FILE *fp = fopen(path, "rb");
    if (fp == NULL)
        return st_errorf(errno == ENOENT ? ST_ENOENT : ST_EIO, "convert: open '%s': %s", path,
                         strerror(errno));
    st_err e = cv_vocab_alloc(v, n);
    if (e) {
        fclose(fp);
        return e;
    }
    int32_t max_len;
    char *buf = NULL, *out = NULL;
    if (fread(&max_len, 4, 1, fp) != 1 || max_len < 1 || max_len > (1 << 20)) {
        e = st_errorf(ST_EFORMAT, "convert: '%s': bad max token length", path);
        goto done;
    }
    buf = malloc((size_t)max_len);
    out = malloc((size_t)max_len * 3 + 1);
    if (buf == NULL || out == NULL) {
        e = st_errorf(ST_ENOMEM, "convert: token buffer");
        goto done;
    }
    int64_t count = 0;
    for (;;) {
        float score;
        int32_t len;
        size_t got = fread(&score, 1, 4, fp);
        if (got == 0 && feof(fp))
            break;
        if (got != 4 || fread(&len, 4, 1, fp) != 1) {
            e = st_errorf(ST_ETRUNC, "convert: '%s': token %lld is truncated", path,
                          (long long)count);
            goto done;
        }
        if (len < 0 || len > max_len) {
            e = st_errorf(ST_EFORMAT, "convert: '%s': token %lld has length %d (max %d)", path,
                          (long long)count, len, max_len);
            goto done;
        }
        if (len > 0 && fread(buf, 1, (size_t)len, fp) != (size_t)len) {
            e = st_errorf(ST_ETRUNC, "convert: '%s': token %lld is truncated", path,
                          (long long)count);
            goto done;
        }
        if (count >= n) {
            count++;
            continue; /* keep counting for the error message */
        }
        size_t m = 0;
        for (int32_t i = 0; i < len; i++) {
            if (buf[i] == ' ') {
                memcpy(out + m, "\xE2\x96\x81", 3);
                m += 3;
            } else {
                out[m++] = buf[i];
            }
        }
        int32_t type = CV_TYPE_NORMAL;
        if (count == 0) {
            type = CV_TYPE_UNKNOWN;
        } else if (count == 1 || count == 2) {
            const char *name = count == 1 ? "<s>" : "</s>";
            char wrapped[8];
            snprintf(wrapped, sizeof wrapped, "\n%s\n", name);
            if (m == strlen(wrapped) && memcmp(out, wrapped, m) == 0) {
                m = strlen(name);
                memcpy(out, name, m);
            }
            type = CV_TYPE_CONTROL;
        } else if (m == 6 && memcmp(out, "<0x", 3) == 0 && out[5] == '>') {
            type = CV_TYPE_BYTE;
        }
        e = cv_vocab_set(v, count, out, m, score, type);
        if (e)
            goto done;
        count++;
    }
    if (count != n)
        e = st_errorf(ST_ESHAPE, "convert: tokenizer '%s' has %lld tokens, the model's vocab_size is %lld",
                      path, (long long)count, (long long)n);
done:
    free(buf);
    free(out);
    fclose(fp);
    if (e)
        cv_vocab_free(v);
    return e;
}

/* ---- metadata --------------------------------------------------------- */

typedef struct cv_hparams {
    const st_arch *arch; /* key prefix and tensor set (common/arch.h) */
    int64_t dim, hidden, layers, heads, kv_heads, vocab, ctx;
} cv_hparams;

static uint32_t cv_file_type(st_dtype t)
{
    switch (t) {
    case ST_DT_F16: return 1;
    case ST_DT_Q4_0: return 2;
    case ST_DT_Q8_0: return 7;
    case ST_DT_BF16: return 32;
    default: return 0;
    }
}

/* Adds the general, llama and tokenizer keys in the shared files' order. */
static st_err cv_add_meta(st_gguf_writer *w, const char *name, st_dtype type, const cv_hparams *hp,
                          const cv_vocab *v)
{
    st_err e = ST_OK;
    uint32_t head_dim = (uint32_t)(hp->dim / hp->heads);
    char k[ST_AK_COUNT][ST_ARCH_NAME_MAX];
    for (int i = 0; i < ST_AK_COUNT; i++)
        st_arch_key_name(hp->arch, (st_arch_key)i, k[i]);
    if (!e) e = st_gguf_writer_add_str(w, "general.architecture", hp->arch->name);
    if (!e) e = st_gguf_writer_add_str(w, "general.name", name);
    if (!e) e = st_gguf_writer_add_u32(w, "general.file_type", cv_file_type(type));
    if (!e) e = st_gguf_writer_add_u32(w, "general.alignment", 32);
    if (!e) e = st_gguf_writer_add_u32(w, k[ST_AK_CONTEXT_LENGTH], (uint32_t)hp->ctx);
    if (!e) e = st_gguf_writer_add_u32(w, k[ST_AK_EMBEDDING_LENGTH], (uint32_t)hp->dim);
    if (!e) e = st_gguf_writer_add_u32(w, k[ST_AK_BLOCK_COUNT], (uint32_t)hp->layers);
    if (!e) e = st_gguf_writer_add_u32(w, k[ST_AK_FEED_FORWARD_LENGTH], (uint32_t)hp->hidden);
    if (!e) e = st_gguf_writer_add_u32(w, k[ST_AK_ROPE_DIMENSION_COUNT], head_dim);
    if (!e) e = st_gguf_writer_add_u32(w, k[ST_AK_HEAD_COUNT], (uint32_t)hp->heads);
    if (!e) e = st_gguf_writer_add_u32(w, k[ST_AK_HEAD_COUNT_KV], (uint32_t)hp->kv_heads);
    if (!e) e = st_gguf_writer_add_f32(w, k[ST_AK_RMS_EPS], CV_RMS_EPS);
    if (!e) e = st_gguf_writer_add_f32(w, k[ST_AK_ROPE_FREQ_BASE], CV_ROPE_BASE);
    if (!e) e = st_gguf_writer_add_u32(w, k[ST_AK_VOCAB_SIZE], (uint32_t)hp->vocab);
    if (!e) e = st_gguf_writer_add_str(w, "tokenizer.ggml.model", "llama");
    if (!e)
        e = st_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->toks,
                                       v->lens, (uint64_t)v->n);
    if (!e)
        e = st_gguf_writer_add_arr(w, "tokenizer.ggml.scores", ST_GGUF_FLOAT32, v->scores,
                                   (uint64_t)v->n);
    if (!e)
        e = st_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", ST_GGUF_INT32, v->types,
                                   (uint64_t)v->n);
    if (!e) e = st_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 1);
    if (!e) e = st_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 2);
    if (!e) e = st_gguf_writer_add_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    return e;
}

/* ---- tensor list ------------------------------------------------------ */

typedef enum cv_kind { CV_MAT = 0, CV_NORM, CV_BIAS } cv_kind; /* norms, biases: F32 */

typedef struct cv_tensor {
    char name[ST_ARCH_NAME_MAX];
    int64_t ne0, ne1; /* ne1 == 0: a 1-d tensor */
    cv_kind kind;
} cv_tensor;

/* cv_tensor_list - the architecture's tensors in the shared files' order
 * (a layer's biases after its v projection); *n receives their count;
 * output.weight only if with_output. */
static cv_tensor *cv_tensor_list(const cv_hparams *hp, bool with_output, size_t *n)
{
    enum { PER_LAYER = ST_AT_COUNT - ST_AT_FIRST_LAYER };
    size_t cap = 3 + PER_LAYER * (size_t)hp->layers;
    cv_tensor *t = calloc(cap, sizeof *t);
    if (t == NULL)
        return NULL;
    int64_t kv_dim = hp->dim / hp->heads * hp->kv_heads;
    size_t k = 0;
    st_arch_tensor_name(ST_AT_TOKEN_EMBD, 0, t[k].name);
    t[k].ne0 = hp->dim, t[k].ne1 = hp->vocab, k++;
    for (int64_t l = 0; l < hp->layers; l++) {
        const struct {
            st_arch_tensor id;
            int64_t ne0, ne1;
            cv_kind kind;
        } b[PER_LAYER] = {
            {ST_AT_ATTN_NORM, hp->dim, 0, CV_NORM},
            {ST_AT_ATTN_Q, hp->dim, hp->dim, CV_MAT},
            {ST_AT_ATTN_K, hp->dim, kv_dim, CV_MAT},
            {ST_AT_ATTN_V, hp->dim, kv_dim, CV_MAT},
            {ST_AT_ATTN_Q_BIAS, hp->dim, 0, CV_BIAS},
            {ST_AT_ATTN_K_BIAS, kv_dim, 0, CV_BIAS},
            {ST_AT_ATTN_V_BIAS, kv_dim, 0, CV_BIAS},
            {ST_AT_ATTN_OUT, hp->dim, hp->dim, CV_MAT},
            {ST_AT_FFN_NORM, hp->dim, 0, CV_NORM},
            {ST_AT_FFN_GATE, hp->dim, hp->hidden, CV_MAT},
            {ST_AT_FFN_DOWN, hp->hidden, hp->dim, CV_MAT},
            {ST_AT_FFN_UP, hp->dim, hp->hidden, CV_MAT},
        };
        for (int j = 0; j < PER_LAYER; j++) {
            if (hp->arch->need[b[j].id] != ST_AN_REQUIRED)
                continue; /* optional tensors are not written */
            st_arch_tensor_name(b[j].id, l, t[k].name);
            t[k].ne0 = b[j].ne0;
            t[k].ne1 = b[j].ne1;
            t[k].kind = b[j].kind;
            k++;
        }
    }
    st_arch_tensor_name(ST_AT_OUTPUT_NORM, 0, t[k].name);
    t[k].ne0 = hp->dim, t[k].kind = CV_NORM, k++;
    if (with_output) {
        st_arch_tensor_name(ST_AT_OUTPUT, 0, t[k].name);
        t[k].ne0 = hp->dim, t[k].ne1 = hp->vocab, k++;
    }
    *n = k;
    return t;
}

static int cv_fail(st_err e)
{
    fprintf(stderr, "strata: %s\n", st_errmsg(e));
    return 1;
}

/* ---- synth ------------------------------------------------------------ */

typedef struct cv_rng {
    uint64_t s;
    bool have_spare;
    double spare;
} cv_rng;

static uint64_t cv_splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A standard normal value (Box-Muller, both outputs used). */
static double cv_normal(cv_rng *r)
{
    if (r->have_spare) {
        r->have_spare = false;
        return r->spare;
    }
    /* u1 in (0, 1], u2 in [0, 1), 53 bits each */
    double u1 = ((double)(cv_splitmix64(&r->s) >> 11) + 1.0) * 0x1.0p-53;
    double u2 = (double)(cv_splitmix64(&r->s) >> 11) * 0x1.0p-53;
    double rad = sqrt(-2.0 * log(u1));
    r->spare = rad * sin(2.0 * M_PI * u2);
    r->have_spare = true;
    return rad * cos(2.0 * M_PI * u2);
}

/* The stream of one tensor: seed mixed with the FNV-1a hash of its name. */
static cv_rng cv_rng_for(uint64_t seed, const char *name)
{
    uint64_t h = 0xCBF29CE484222325ull;
    for (const char *p = name; *p; p++)
        h = (h ^ (uint8_t)*p) * 0x100000001B3ull;
    cv_rng r = {seed ^ h, false, 0.0};
    (void)cv_splitmix64(&r.s);
    return r;
}

typedef struct cv_synth_opts {
    const char *out;
    cv_hparams hp;
    st_dtype type;
    uint64_t seed;
} cv_synth_opts;

/* Parses and checks synth's arguments; returns 0, or 2 after printing. */
static int cv_synth_args(int argc, char **argv, cv_synth_opts *o)
{
    memset(o, 0, sizeof *o);
    o->hp.ctx = 2048;
    o->hp.arch = st_arch_by_name("llama");
    o->seed = 42;
    o->type = ST_DT_COUNT;
    int64_t *dst[] = {&o->hp.dim, &o->hp.layers, &o->hp.heads, &o->hp.kv_heads, &o->hp.hidden,
                      &o->hp.vocab, &o->hp.ctx};
    const char *flags[] = {"--dim", "--layers", "--heads", "--kv-heads", "--ffn", "--vocab", "--ctx"};
    const int64_t hi[] = {1 << 16, 1 << 10, 1 << 10, 1 << 10, 1 << 20, 1 << 24, 1 << 24};
    for (int i = 2; i < argc; i++) {
        const char *f = argv[i], *v;
        bool done = false;
        for (int k = 0; k < 7 && !done; k++) {
            if (strcmp(f, flags[k]) != 0)
                continue;
            if (!(v = cli_need_value(argc, argv, &i)) || cli_parse_i64(f, v, 1, hi[k], dst[k]))
                return 2;
            done = true;
        }
        if (done)
            continue;
        if (strcmp(f, "--type") == 0) {
            if (!(v = cli_need_value(argc, argv, &i)))
                return 2;
            /* a weight dtype Strata writes: K-quants are read only, Q8_K
             * is an activation format */
            if (st_dtype_from_name(v, &o->type) != ST_K_OK ||
                st_kernels_ref()->from_float[o->type] == NULL ||
                st_kernels_ref()->mul_mat[o->type] == NULL) {
                fprintf(stderr, "strata: --type: '%s' is not one of f32, f16, bf16, q8_0, q4_0\n", v);
                return 2;
            }
        } else if (strcmp(f, "--arch") == 0) {
            if (!(v = cli_need_value(argc, argv, &i)))
                return 2;
            if ((o->hp.arch = st_arch_by_name(v)) == NULL) {
                fprintf(stderr, "strata: --arch: '%s' is not one of llama, qwen2\n", v);
                return 2;
            }
        } else if (strcmp(f, "--seed") == 0) {
            if (!(v = cli_need_value(argc, argv, &i)) || cli_parse_u64(f, v, &o->seed))
                return 2;
        } else if (f[0] == '-' && f[1] != '\0') {
            fprintf(stderr, "strata: convert synth: unknown option '%s'\n", f);
            return 2;
        } else if (o->out == NULL) {
            o->out = f;
        } else {
            fprintf(stderr, "strata: convert synth: unexpected argument '%s'\n", f);
            return 2;
        }
    }
    if (o->out == NULL) {
        fprintf(stderr, "strata: convert synth: missing OUT.gguf\n");
        return 2;
    }
    for (int k = 0; k < 6; k++) {
        if (*dst[k] == 0) {
            fprintf(stderr, "strata: convert synth: %s is required\n", flags[k]);
            return 2;
        }
    }
    if (o->type == ST_DT_COUNT) {
        fprintf(stderr, "strata: convert synth: --type is required\n");
        return 2;
    }
    const cv_hparams *hp = &o->hp;
    if (hp->dim % hp->heads != 0) {
        fprintf(stderr, "strata: convert synth: --heads %lld does not divide --dim %lld\n",
                (long long)hp->heads, (long long)hp->dim);
        return 2;
    }
    if (hp->heads % hp->kv_heads != 0) {
        fprintf(stderr, "strata: convert synth: --kv-heads %lld does not divide --heads %lld\n",
                (long long)hp->kv_heads, (long long)hp->heads);
        return 2;
    }
    if ((hp->dim / hp->heads) % 2 != 0) {
        fprintf(stderr, "strata: convert synth: head dim %lld (--dim / --heads) must be even for RoPE\n",
                (long long)(hp->dim / hp->heads));
        return 2;
    }
    if (hp->vocab < CV_MIN_VOCAB) {
        fprintf(stderr, "strata: convert synth: --vocab %lld is below %d (3 special + 256 byte tokens)\n",
                (long long)hp->vocab, CV_MIN_VOCAB);
        return 2;
    }
    int64_t blck = st_dtype_info_of(o->type)->blck;
    if (hp->dim % blck != 0 || hp->hidden % blck != 0) {
        fprintf(stderr, "strata: convert synth: --type %s needs --dim and --ffn multiples of %lld (got %lld, %lld)\n",
                st_dtype_info_of(o->type)->name, (long long)blck, (long long)hp->dim,
                (long long)hp->hidden);
        return 2;
    }
    return 0;
}

static int cv_synth(int argc, char **argv)
{
    cv_synth_opts o;
    int rc = cv_synth_args(argc, argv, &o);
    if (rc)
        return rc;
    const st_kernel_ops *ops = st_kernels_ref();
    cv_vocab v;
    st_err e = cv_vocab_placeholder(&v, o.hp.vocab);
    if (e)
        return cv_fail(e);
    size_t nt;
    cv_tensor *ts = cv_tensor_list(&o.hp, true, &nt);
    float *row = malloc((size_t)(o.hp.dim > o.hp.hidden ? o.hp.dim : o.hp.hidden) * sizeof *row);
    void *qrow = malloc((size_t)(o.hp.dim > o.hp.hidden ? o.hp.dim : o.hp.hidden) * sizeof(float));
    st_gguf_writer *w = NULL;
    if (ts == NULL || row == NULL || qrow == NULL) {
        e = st_errorf(ST_ENOMEM, "convert: synth buffers");
        goto done;
    }
    e = st_gguf_writer_open(o.out, &w);
    if (!e)
        e = cv_add_meta(w, "strata-synth", o.type, &o.hp, &v);
    if (!e)
        e = st_gguf_writer_add_u64(w, "strata.synth.seed", o.seed);
    for (size_t i = 0; i < nt && !e; i++) {
        int64_t ne[2] = {ts[i].ne0, ts[i].ne1};
        e = st_gguf_writer_add_tensor_info(w, ts[i].name, ts[i].kind ? ST_DT_F32 : o.type,
                                           ts[i].ne1 ? 2 : 1, ne, NULL);
    }
    if (!e)
        e = st_gguf_writer_begin_data(w);
    for (size_t i = 0; i < nt && !e; i++) {
        const cv_tensor *t = &ts[i];
        st_dtype dt = t->kind ? ST_DT_F32 : o.type;
        cv_rng r = cv_rng_for(o.seed, t->name);
        double std = t->kind == CV_NORM   ? CV_NORM_STD
                     : t->kind == CV_BIAS ? CV_BIAS_STD
                                          : CV_MAT_SCALE / sqrt((double)t->ne0);
        size_t rbytes;
        if (st_row_size(dt, t->ne0, &rbytes) != ST_K_OK) {
            e = st_errorf(ST_EINTERNAL, "convert: row of '%s'", t->name);
            break;
        }
        int64_t rows = t->ne1 ? t->ne1 : 1;
        for (int64_t j = 0; j < rows && !e; j++) {
            for (int64_t c = 0; c < t->ne0; c++)
                row[c] = (float)((t->kind == CV_NORM ? 1.0 : 0.0) + std * cv_normal(&r));
            ops->from_float[dt](row, qrow, t->ne0);
            e = st_gguf_writer_write(w, qrow, rbytes);
        }
    }
    if (!e)
        e = st_gguf_writer_finish(w);
done:
    st_gguf_writer_free(w);
    free(row);
    free(qrow);
    free(ts);
    cv_vocab_free(&v);
    return e ? cv_fail(e) : 0;
}

/* ---- llama2c ---------------------------------------------------------- */

#define CV_L2C_HEADER 28

/* Adds n f32 values of the checkpoint at *at as tensor name and advances. */
static st_err cv_l2c_tensor(st_gguf_writer *w, const char *name, const uint8_t *base, uint64_t *at,
                            int64_t ne0, int64_t ne1)
{
    int64_t ne[2] = {ne0, ne1};
    size_t nbytes = (size_t)ne0 * (size_t)(ne1 ? ne1 : 1) * 4;
    st_err e = st_gguf_writer_add_tensor(w, name, ST_DT_F32, ne1 ? 2 : 1, ne, base + *at, nbytes);
    *at += nbytes;
    return e;
}

/* Checks the header and that the file holds exactly the weights it implies. */
static st_err cv_l2c_check(const char *path, const int32_t h[7], uint64_t size, cv_hparams *hp,
                           bool *shared)
{
    if (h[0] == 0x616b3432)
        return st_errorf(ST_EVERSION, "convert: '%s' is llama2.c's versioned export format (magic ak42); only the legacy format is read",
                         path);
    const char *names[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size",
                            "seq_len"};
    for (int i = 0; i < 7; i++)
        if (h[i] <= 0 && i != 5)
            return st_errorf(ST_EFORMAT, "convert: '%s': header field %s is %d", path, names[i], h[i]);
    if (h[5] == 0 || h[5] == INT32_MIN)
        return st_errorf(ST_EFORMAT, "convert: '%s': header field vocab_size is %d", path, h[5]);
    *hp = (cv_hparams){hp->arch, h[0], h[1], h[2], h[3], h[4],
                       h[5] < 0 ? -(int64_t)h[5] : h[5], h[6]};
    *shared = h[5] > 0;
    if (hp->dim % hp->heads != 0 || hp->heads % hp->kv_heads != 0 || (hp->dim / hp->heads) % 2)
        return st_errorf(ST_ESHAPE, "convert: '%s': dim %lld, n_heads %lld, n_kv_heads %lld do not form whole, even heads",
                         path, (long long)hp->dim, (long long)hp->heads, (long long)hp->kv_heads);
    uint64_t d = (uint64_t)hp->dim, L = (uint64_t)hp->layers, f = (uint64_t)hp->hidden;
    uint64_t kv = d / (uint64_t)hp->heads * (uint64_t)hp->kv_heads;
    uint64_t V = (uint64_t)hp->vocab, hs = d / (uint64_t)hp->heads, T = (uint64_t)hp->ctx;
    /* a hostile header can make these products wrap: sum with overflow checks */
    struct {
        uint64_t a, b, c;
    } parts[] = {
        {V, d, 1},      {L, d, 1},     {L, d, d},          {L, kv, d}, {L, kv, d},
        {L, d, d},      {L, d, 1},     {L, f, d},          {L, d, f},  {L, f, d},
        {d, 1, 1},      {T, hs / 2, 2}, {*shared ? 0 : V, d, 1},
    };
    uint64_t n = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        uint64_t p;
        if (__builtin_mul_overflow(parts[i].a, parts[i].b, &p) ||
            __builtin_mul_overflow(p, parts[i].c, &p) || __builtin_add_overflow(n, p, &n))
            return st_errorf(ST_EOVERFLOW, "convert: '%s': the header's sizes overflow 64 bits", path);
    }
    uint64_t want; /* bytes: the header and n floats */
    if (__builtin_mul_overflow(n, (uint64_t)4, &n) ||
        __builtin_add_overflow(n, (uint64_t)CV_L2C_HEADER, &want))
        return st_errorf(ST_EOVERFLOW, "convert: '%s': the header's sizes overflow 64 bits", path);
    if (size < want)
        return st_errorf(ST_ETRUNC, "convert: '%s' has %llu bytes, its header implies %llu", path,
                         (unsigned long long)size, (unsigned long long)want);
    if (size > want)
        return st_errorf(ST_EFORMAT, "convert: '%s' has %llu bytes, %llu more than its header implies",
                         path, (unsigned long long)size, (unsigned long long)(size - want));
    return ST_OK;
}

static int cv_llama2c(int argc, char **argv)
{
    const char *in = NULL, *out = NULL, *tok = NULL;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--tokenizer") == 0) {
            if (!(tok = cli_need_value(argc, argv, &i)))
                return 2;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fprintf(stderr, "strata: convert llama2c: unknown option '%s'\n", argv[i]);
            return 2;
        } else if (in == NULL) {
            in = argv[i];
        } else if (out == NULL) {
            out = argv[i];
        } else {
            fprintf(stderr, "strata: convert llama2c: unexpected argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (in == NULL || out == NULL) {
        fprintf(stderr, "strata: convert llama2c: usage: strata convert llama2c IN.bin OUT.gguf [--tokenizer tokenizer.bin]\n");
        return 2;
    }
    int fd = open(in, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return cv_fail(st_errorf(errno == ENOENT ? ST_ENOENT : ST_EIO, "convert: open '%s': %s",
                                 in, strerror(errno)));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return cv_fail(st_errorf(ST_EINVAL, "convert: '%s' is not a readable regular file", in));
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (size < CV_L2C_HEADER) {
        close(fd);
        return cv_fail(st_errorf(ST_ETRUNC, "convert: '%s' has %llu bytes, less than the 28-byte header",
                                 in, (unsigned long long)size));
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    int en = errno;
    close(fd);
    if (map == MAP_FAILED)
        return cv_fail(st_errorf(ST_EIO, "convert: mmap '%s': %s", in, strerror(en)));
    const uint8_t *base = map;
    int32_t h[7];
    memcpy(h, base, sizeof h);
    cv_hparams hp = {.arch = st_arch_by_name("llama")};
    bool shared = true;
    cv_vocab v = {0};
    st_gguf_writer *w = NULL;
    st_err e = cv_l2c_check(in, h, size, &hp, &shared);
    if (!e && !tok && hp.vocab < CV_MIN_VOCAB)
        e = st_errorf(ST_ESHAPE, "convert: vocab_size %lld is below %d: give --tokenizer", (long long)hp.vocab,
                      CV_MIN_VOCAB);
    if (!e)
        e = tok ? cv_vocab_llama2c(&v, tok, hp.vocab) : cv_vocab_placeholder(&v, hp.vocab);
    char name[512];
    const char *slash = strrchr(in, '/');
    snprintf(name, sizeof name, "llama2c:%s", slash ? slash + 1 : in);
    if (!e)
        e = st_gguf_writer_open(out, &w);
    if (!e)
        e = cv_add_meta(w, name, ST_DT_F32, &hp, &v);

    /* section offsets of the checkpoint */
    uint64_t d = (uint64_t)hp.dim, L = (uint64_t)hp.layers, f = (uint64_t)hp.hidden;
    uint64_t kv = e ? 0 : d / (uint64_t)hp.heads * (uint64_t)hp.kv_heads;
    uint64_t V = (uint64_t)hp.vocab, hs = e ? 0 : d / (uint64_t)hp.heads;
    uint64_t o_emb = CV_L2C_HEADER, o_att = o_emb + 4 * V * d, o_wq = o_att + 4 * L * d;
    uint64_t o_wk = o_wq + 4 * L * d * d, o_wv = o_wk + 4 * L * kv * d;
    uint64_t o_wo = o_wv + 4 * L * kv * d, o_ffn = o_wo + 4 * L * d * d;
    uint64_t o_w1 = o_ffn + 4 * L * d, o_w2 = o_w1 + 4 * L * f * d, o_w3 = o_w2 + 4 * L * d * f;
    uint64_t o_fin = o_w3 + 4 * L * f * d;
    uint64_t o_cls = o_fin + 4 * d + 4 * (uint64_t)hp.ctx * (hs / 2) * 2;
    if (!e) {
        uint64_t at = o_emb;
        char nm[ST_ARCH_NAME_MAX];
        e = cv_l2c_tensor(w, st_arch_tensor_name(ST_AT_TOKEN_EMBD, 0, nm), base, &at, hp.dim,
                          hp.vocab);
    }
    for (uint64_t l = 0; l < L && !e; l++) {
        struct {
            st_arch_tensor id;
            uint64_t off;
            int64_t ne0, ne1;
        } parts[9] = {
            {ST_AT_ATTN_NORM, o_att + 4 * l * d, hp.dim, 0},
            {ST_AT_ATTN_Q, o_wq + 4 * l * d * d, hp.dim, hp.dim},
            {ST_AT_ATTN_K, o_wk + 4 * l * kv * d, hp.dim, (int64_t)kv},
            {ST_AT_ATTN_V, o_wv + 4 * l * kv * d, hp.dim, (int64_t)kv},
            {ST_AT_ATTN_OUT, o_wo + 4 * l * d * d, hp.dim, hp.dim},
            {ST_AT_FFN_NORM, o_ffn + 4 * l * d, hp.dim, 0},
            {ST_AT_FFN_GATE, o_w1 + 4 * l * f * d, hp.dim, hp.hidden},
            {ST_AT_FFN_DOWN, o_w2 + 4 * l * d * f, hp.hidden, hp.dim},
            {ST_AT_FFN_UP, o_w3 + 4 * l * f * d, hp.dim, hp.hidden},
        };
        for (int k = 0; k < 9 && !e; k++) {
            char nm[ST_ARCH_NAME_MAX];
            uint64_t at = parts[k].off;
            e = cv_l2c_tensor(w, st_arch_tensor_name(parts[k].id, (int64_t)l, nm), base, &at,
                              parts[k].ne0, parts[k].ne1);
        }
    }
    if (!e) {
        uint64_t at = o_fin;
        char nm[ST_ARCH_NAME_MAX];
        e = cv_l2c_tensor(w, st_arch_tensor_name(ST_AT_OUTPUT_NORM, 0, nm), base, &at, hp.dim, 0);
    }
    if (!e && !shared) {
        uint64_t at = o_cls;
        char nm[ST_ARCH_NAME_MAX];
        e = cv_l2c_tensor(w, st_arch_tensor_name(ST_AT_OUTPUT, 0, nm), base, &at, hp.dim,
                          hp.vocab);
    }
    if (!e)
        e = st_gguf_writer_finish(w);
    st_gguf_writer_free(w);
    cv_vocab_free(&v);
    munmap(map, (size_t)size);
    return e ? cv_fail(e) : 0;
}

int st_cmd_convert(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "synth") == 0)
        return cv_synth(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "llama2c") == 0)
        return cv_llama2c(argc, argv);
    fprintf(stderr,
            "strata: convert: usage: strata convert llama2c IN.bin OUT.gguf [--tokenizer tokenizer.bin]\n"
            "       strata convert synth OUT.gguf --dim D --layers L --heads H --kv-heads K --ffn F\n"
            "                      --vocab V --type f32|f16|bf16|q8_0|q4_0 [--seed S] [--ctx C]\n"
            "                      [--arch llama|qwen2]\n");
    return 2;
}
