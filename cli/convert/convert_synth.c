/* convert_synth.c - `strata convert synth`: a model of the given shape
 * and dtype with deterministic random weights (the method in cmd_convert.c's
 * file comment), written as it is generated. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/convert/convert_impl.h"

#define CV_NORM_STD 0.2                       /* norm weights 1 + N(0, 0.2) */
#define CV_BIAS_STD 0.2                       /* biases N(0, 0.2) */
#define CV_MAT_SCALE 0.5                      /* matrices N(0, 0.5 / sqrt(ne0)) */
#define CV_SYNTH_SEED_KEY "strata.synth.seed" /* Strata's own key: the seed used */
#define CV_GEMMA3_SWA_WINDOW 512              /* Gemma 3 1B's attention.sliding_window */
#define CV_GEMMA3_ROPE_BASE 1e6f              /* Gemma 3's global layers' rope.freq_base */
#define CV_DEFAULT_EXPERTS 8                  /* --experts' default */
#define CV_DEFAULT_EXPERTS_USED 2             /* --experts-used's default */

/* CV_MAT is in --type; the others are F32: norms, biases, and the routers
 * of a mixture of experts (drawn as matrices) */
typedef enum cv_kind { CV_MAT = 0, CV_NORM, CV_BIAS, CV_ROUTER } cv_kind;

typedef struct cv_tensor {
    char name[ST_ARCH_NAME_MAX];
    int64_t ne0, ne1, ne2; /* ne1 == 0: a 1-d tensor; ne2 == 0: at most 2-d */
    cv_kind kind;
    bool embd_scaled; /* an embedding the model multiplies by sqrt(ne0): its
                       * std is divided by sqrt(ne0) too */
} cv_tensor;

/* cv_tensor_list - the architecture's tensors in the shared files' order
 * (a layer's biases after its v projection, then its q/k norms); *n
 * receives their count; output.weight only if with_output and the
 * architecture does not forbid it (gemma2). Each tensor the architecture
 * requires (common/model/arch.c's need table) is written, and no optional
 * one, except that an architecture with a fused ffn_up (phi3) gets a fused
 * attn_qkv [n_embd, q_dim + 2 kv_dim] instead of attn_q, attn_k and attn_v,
 * as llama.cpp's converter writes Phi-3's qkv_proj and gate_up_proj. With
 * hp->n_expert > 0 the table's choice for a mixture of experts
 * (st_arch_tensor_need): each layer's FFN is the F32 router ffn_gate_inp
 * [n_embd, n_expert] and the stacked experts ffn_gate_exps, ffn_up_exps
 * [n_embd, n_ff_exp, n_expert] and ffn_down_exps [n_ff_exp, n_embd,
 * n_expert] (expert outermost, as llama.cpp lays them out); q/k norms of an
 * architecture that normalizes the whole projection (olmoe) are [q_dim]
 * and [kv_dim]. */
static cv_tensor *cv_tensor_list(const st_hparams *hp, bool with_output, size_t *n)
{
    enum { PER_LAYER = ST_AT_COUNT - ST_AT_FIRST_LAYER };
    size_t cap = 3 + PER_LAYER * (size_t)hp->n_layer;
    cv_tensor *t = calloc(cap, sizeof *t);
    if (t == NULL)
        return NULL;
    const st_arch *a = hp->arch;
    const bool fused_qkv = a->fused_up;
    const int64_t kv_dim = hp->kv_dim, q_dim = hp->q_dim;
    const int64_t up_rows = a->fused_up ? 2 * hp->n_ff : hp->n_ff; /* gate rows first */
    const bool moe = hp->n_expert > 0;
    const int64_t q_norm = a->qk_norm_full ? q_dim : hp->head_dim;
    const int64_t k_norm = a->qk_norm_full ? kv_dim : hp->head_dim;
    const int64_t n_exp = hp->n_expert, ff_exp = hp->n_ff_exp;
    size_t k = 0;
    st_arch_tensor_name(ST_AT_TOKEN_EMBD, 0, t[k].name);
    t[k].ne0 = hp->n_embd, t[k].ne1 = hp->n_vocab, t[k].embd_scaled = a->embd_scale, k++;
    for (int64_t l = 0; l < hp->n_layer; l++) {
        const struct {
            st_arch_tensor id;
            int64_t ne0, ne1, ne2;
            cv_kind kind;
        } b[] = {
            {ST_AT_ATTN_NORM, hp->n_embd, 0, 0, CV_NORM},
            {ST_AT_ATTN_Q, hp->n_embd, q_dim, 0, CV_MAT},
            {ST_AT_ATTN_K, hp->n_embd, kv_dim, 0, CV_MAT},
            {ST_AT_ATTN_V, hp->n_embd, kv_dim, 0, CV_MAT},
            {ST_AT_ATTN_QKV, hp->n_embd, q_dim + 2 * kv_dim, 0, CV_MAT},
            {ST_AT_ATTN_Q_BIAS, q_dim, 0, 0, CV_BIAS},
            {ST_AT_ATTN_K_BIAS, kv_dim, 0, 0, CV_BIAS},
            {ST_AT_ATTN_V_BIAS, kv_dim, 0, 0, CV_BIAS},
            {ST_AT_ATTN_Q_NORM, q_norm, 0, 0, CV_NORM},
            {ST_AT_ATTN_K_NORM, k_norm, 0, 0, CV_NORM},
            {ST_AT_ATTN_OUT, q_dim, hp->n_embd, 0, CV_MAT},
            {ST_AT_ATTN_POST_NORM, hp->n_embd, 0, 0, CV_NORM},
            {ST_AT_FFN_NORM, hp->n_embd, 0, 0, CV_NORM},
            {ST_AT_FFN_GATE, hp->n_embd, hp->n_ff, 0, CV_MAT},
            {ST_AT_FFN_DOWN, hp->n_ff, hp->n_embd, 0, CV_MAT},
            {ST_AT_FFN_UP, hp->n_embd, up_rows, 0, CV_MAT},
            {ST_AT_FFN_GATE_INP, hp->n_embd, n_exp, 0, CV_ROUTER},
            {ST_AT_FFN_GATE_EXPS, hp->n_embd, ff_exp, n_exp, CV_MAT},
            {ST_AT_FFN_DOWN_EXPS, ff_exp, hp->n_embd, n_exp, CV_MAT},
            {ST_AT_FFN_UP_EXPS, hp->n_embd, ff_exp, n_exp, CV_MAT},
            {ST_AT_FFN_POST_NORM, hp->n_embd, 0, 0, CV_NORM},
        };
        for (size_t j = 0; j < sizeof b / sizeof b[0]; j++) {
            const st_arch_tensor id = b[j].id;
            const bool qkv_part = id == ST_AT_ATTN_Q || id == ST_AT_ATTN_K || id == ST_AT_ATTN_V;
            /* optional tensors are not written */
            bool write = st_arch_tensor_need(a, moe, id) == ST_AN_REQUIRED;
            if (fused_qkv)
                write = id == ST_AT_ATTN_QKV || (write && !qkv_part);
            if (!write)
                continue;
            st_arch_tensor_name(id, l, t[k].name);
            t[k].ne0 = b[j].ne0;
            t[k].ne1 = b[j].ne1;
            t[k].ne2 = b[j].ne2;
            t[k].kind = b[j].kind;
            k++;
        }
    }
    st_arch_tensor_name(ST_AT_OUTPUT_NORM, 0, t[k].name);
    t[k].ne0 = hp->n_embd, t[k].kind = CV_NORM, k++;
    if (with_output && a->need[ST_AT_OUTPUT] != ST_AN_ABSENT) {
        st_arch_tensor_name(ST_AT_OUTPUT, 0, t[k].name);
        t[k].ne0 = hp->n_embd, t[k].ne1 = hp->n_vocab, k++;
    }
    *n = k;
    return t;
}

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
    st_hparams hp;
    st_dtype type;
    uint64_t seed;
    int64_t swa_window;       /* --sliding-window (0: the architecture's default) */
    const char *rope_scaling; /* --rope-scaling (NULL: none written) */
    float rope_factor;        /* --rope-factor */
    int64_t rope_orig_ctx;    /* --rope-orig-ctx (0: not written) */
    bool mixtral;             /* --arch mixtral: llama's row with experts */
    int64_t experts;          /* --experts, --experts-used, --expert-ffn (0: not given) */
    int64_t experts_used;
    int64_t expert_ffn;
} cv_synth_opts;

/* --rope-scaling's values: the types st_hparams reads that need no tensor */
static const char *const cv_rope_scalings[] = {"linear", "yarn", NULL};

#define CV_SYNTH_DIMS 7 /* the integer dimensions: --dim .. --ctx */

/* cv_type_opt - --type: a weight dtype Strata writes (K-quants are read
 * only, Q8_K is an activation format) into the st_dtype dest. */
static st_err cv_type_opt(const char *v, void *dest)
{
    st_dtype *t = dest;
    if (st_dtype_from_name(v, t) != ST_K_OK || st_kernels_ref()->from_float[*t] == NULL ||
        st_kernels_ref()->mul_mat[*t] == NULL)
        return st_errorf(ST_EINVAL, "'%s' is not one of f32, f16, bf16, q8_0, q4_0", v);
    return ST_OK;
}

/* every row of arch.c's table, and mixtral: llama's row with experts */
#define CV_ARCHS "llama|qwen2|qwen3|gemma2|gemma3|phi3|mixtral|qwen3moe|olmoe"
#define CV_MIXTRAL "mixtral"

/* cv_arch_opt - --arch (CV_ARCHS) into the cv_synth_opts dest: its
 * hp.arch, and mixtral for "mixtral" (whose file is a "llama" one). */
static st_err cv_arch_opt(const char *v, void *dest)
{
    cv_synth_opts *o = dest;
    const bool mixtral = strcmp(v, CV_MIXTRAL) == 0;
    const st_arch *a = st_arch_by_name(mixtral ? "llama" : v);
    if (a == NULL)
        return st_errorf(ST_EINVAL, "'%s' is not one of " CV_ARCHS, v);
    o->hp.arch = a;
    o->mixtral = mixtral;
    return ST_OK;
}

/* cv_experts - the expert counts and width of o (a mixture of experts
 * when --arch is mixtral or an architecture that always has experts):
 * --experts (default CV_DEFAULT_EXPERTS), --experts-used (default
 * CV_DEFAULT_EXPERTS_USED), --expert-ffn (default --ffn), which is also
 * feed_forward_length where the architecture reads the experts' width
 * from it (llama, olmoe: --ffn may then be left out, and when given must
 * equal it). Runs before the check of the required dimensions. The flags
 * on a dense architecture are refused. 0, or 2 after printing an error. */
static int cv_experts(cv_synth_opts *o)
{
    st_hparams *hp = &o->hp;
    const st_arch *a = hp->arch;
    const bool moe = o->mixtral || a->moe == ST_MOE_ALWAYS;
    if (!moe) {
        const char *given = o->experts        ? "--experts"
                            : o->experts_used ? "--experts-used"
                            : o->expert_ffn   ? "--expert-ffn"
                                              : NULL;
        if (given != NULL) {
            fprintf(stderr,
                    "strata: convert synth: %s: --arch %s has no experts (mixtures of experts: "
                    "mixtral, qwen3moe, olmoe)\n",
                    given, a->name);
            return 2;
        }
        return 0;
    }
    hp->n_expert = o->experts ? o->experts : CV_DEFAULT_EXPERTS;
    hp->n_expert_used = o->experts_used ? o->experts_used : CV_DEFAULT_EXPERTS_USED;
    if (hp->n_expert_used > hp->n_expert) {
        fprintf(stderr, "strata: convert synth: --experts-used %lld is above --experts %lld\n",
                (long long)hp->n_expert_used, (long long)hp->n_expert);
        return 2;
    }
    hp->n_ff_exp = o->expert_ffn ? o->expert_ffn : hp->n_ff;
    if (a->moe_ff_key == ST_AK_FEED_FORWARD_LENGTH) {
        if (o->expert_ffn && hp->n_ff != 0 && hp->n_ff != o->expert_ffn) {
            fprintf(stderr,
                    "strata: convert synth: --expert-ffn %lld and --ffn %lld: %s writes one width "
                    "(feed_forward_length)\n",
                    (long long)hp->n_ff_exp, (long long)hp->n_ff,
                    o->mixtral ? CV_MIXTRAL : a->name);
            return 2;
        }
        hp->n_ff = hp->n_ff_exp;
    }
    return 0;
}

/* cv_arch_hparams - the hyperparameters beyond the dimensions that the
 * architecture's keys carry (cv_add_meta writes them): llama.cpp's
 * defaults of Gemma 2's soft-caps (attention 50, final 30) and window
 * (4096); Gemma 3's window (CV_GEMMA3_SWA_WINDOW) and bases (global
 * CV_GEMMA3_ROPE_BASE, sliding-window layers ST_LLAMA_DEFAULT_ROPE_BASE);
 * swa_window, when not 0, replaces the window. */
static void cv_arch_hparams(st_hparams *hp, int64_t swa_window)
{
    const st_arch *a = hp->arch;
    hp->attn_softcap = a->attn_softcap;
    hp->final_softcap = a->final_softcap_key ? a->final_softcap : 0.0f;
    if (a->swa_period != 0)
        hp->swa_window = swa_window   ? swa_window
                         : a->swa_window ? a->swa_window
                                         : CV_GEMMA3_SWA_WINDOW;
    if (a->swa_own_rope) {
        hp->rope_base_swa = ST_LLAMA_DEFAULT_ROPE_BASE;
        hp->rope_base = CV_GEMMA3_ROPE_BASE;
    }
}

/* Parses and checks synth's arguments: CLI_OPTS_GO, or the exit status
 * (0 after --help, 2 after printing an error). */
static int cv_synth_args(int argc, char **argv, cv_synth_opts *o)
{
    memset(o, 0, sizeof *o);
    o->hp.n_ctx_train = ST_LLAMA_DEFAULT_CTX;
    o->hp.arch = st_arch_by_name("llama");
    o->seed = 42;
    o->type = ST_DT_COUNT;
    int64_t *dst[] = {&o->hp.n_embd, &o->hp.n_layer, &o->hp.n_head,     &o->hp.n_head_kv,
                      &o->hp.n_ff,   &o->hp.n_vocab, &o->hp.n_ctx_train};
    const char *flags[] = {"--dim", "--layers", "--heads", "--kv-heads",
                           "--ffn", "--vocab",  "--ctx"};
    const int64_t hi[] = {1 << 16, 1 << 10, 1 << 10, 1 << 10, 1 << 20, 1 << 24, 1 << 24};
    const char *const help[] = {"hidden size",       "layers",           "attention heads",
                                "key/value heads",   "feed-forward size", "vocabulary size",
                                "training context"};
    enum { N_OTHER = 11 }; /* the rows before the dimensions */
    st_opt rows[N_OTHER + CV_SYNTH_DIMS] = {
        {.name = "--type", .type = ST_OPT_FN, .dest = &o->type, .fn = cv_type_opt,
         .value = "f32|f16|bf16|q8_0|q4_0", .help = "the weights' dtype"},
        {.name = "--arch", .type = ST_OPT_FN, .dest = o, .fn = cv_arch_opt,
         .value = CV_ARCHS, .help = "the architecture (default llama)"},
        {.name = "--experts", .type = ST_OPT_I64, .dest = &o->experts, .min = 1,
         .max = ST_MOE_MAX_EXPERT, .value = "N",
         .help = "mixtral, qwen3moe, olmoe: experts per layer (default 8)"},
        {.name = "--experts-used", .type = ST_OPT_I64, .dest = &o->experts_used, .min = 1,
         .max = ST_MOE_MAX_USED, .value = "K", .help = "experts per token (default 2)"},
        {.name = "--expert-ffn", .type = ST_OPT_I64, .dest = &o->expert_ffn, .min = 1,
         .max = 1 << 20, .value = "F", .help = "an expert's feed-forward size (default --ffn)"},
        {.name = "--seed", .type = ST_OPT_U64, .dest = &o->seed, .umin = 0, .umax = UINT64_MAX,
         .value = "S", .help = "the weights' seed (default 42)"},
        {.name = "--head-dim", .type = ST_OPT_I64, .dest = &o->hp.head_dim, .min = 2,
         .max = 1 << 12, .value = "N",
         .help = "values per head (default --dim / --heads; else attention.key_length)"},
        {.name = "--sliding-window", .type = ST_OPT_I64, .dest = &o->swa_window, .min = 1,
         .max = 1 << 24, .value = "N",
         .help = "gemma2 and gemma3: attention.sliding_window (default 4096 and 512)"},
        {.name = "--rope-scaling", .type = ST_OPT_CHOICE, .dest = &o->rope_scaling,
         .choices = cv_rope_scalings, .value = "linear|yarn",
         .help = "rope.scaling.type (with --rope-factor; default: no scaling keys)"},
        {.name = "--rope-factor", .type = ST_OPT_FLOAT, .dest = &o->rope_factor, .dmin = 1.0,
         .dmax = 1024.0, .value = "F", .help = "rope.scaling.factor"},
        {.name = "--rope-orig-ctx", .type = ST_OPT_I64, .dest = &o->rope_orig_ctx, .min = 1,
         .max = 1 << 24, .value = "N", .help = "rope.scaling.original_context_length"},
    };
    for (int k = 0; k < CV_SYNTH_DIMS; k++)
        rows[N_OTHER + k] = (st_opt){.name = flags[k],
                               .type = ST_OPT_I64,
                               .dest = dst[k],
                               .min = 1,
                               .max = hi[k],
                               .value = "N",
                               .help = help[k]};
    /* argv[0] is "convert", argv[1] "synth" */
    size_t n_ops = 0;
    int st = cli_opts("convert synth",
                      "strata convert synth OUT.gguf --dim D --layers L --heads H --kv-heads K "
                      "--ffn F\n"
                      "                      --vocab V --type f32|f16|bf16|q8_0|q4_0 [--seed S] "
                      "[--ctx C]\n"
                      "                      [--arch " CV_ARCHS "]\n"
                      "                      [--experts N] [--experts-used K] [--expert-ffn F]\n"
                      "                      [--head-dim N] [--sliding-window N]\n"
                      "                      [--rope-scaling linear|yarn --rope-factor F "
                      "[--rope-orig-ctx N]]",
                      rows, sizeof rows / sizeof rows[0], &o->out, 1, &n_ops, argc - 1, argv + 1);
    if (st != CLI_OPTS_GO)
        return st;
    if (o->out == NULL) {
        fprintf(stderr, "strata: convert synth: missing OUT.gguf\n");
        return 2;
    }
    if ((st = cv_experts(o)) != 0)
        return st;
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
    st_hparams *hp = &o->hp;
    if (hp->n_embd % hp->n_head != 0) {
        fprintf(stderr, "strata: convert synth: --heads %lld does not divide --dim %lld\n",
                (long long)hp->n_head, (long long)hp->n_embd);
        return 2;
    }
    if (hp->n_head % hp->n_head_kv != 0) {
        fprintf(stderr, "strata: convert synth: --kv-heads %lld does not divide --heads %lld\n",
                (long long)hp->n_head_kv, (long long)hp->n_head);
        return 2;
    }
    if ((hp->head_dim ? hp->head_dim : hp->n_embd / hp->n_head) % 2 != 0) {
        fprintf(stderr,
                "strata: convert synth: head dim %lld (--head-dim, else --dim / --heads) must be "
                "even for RoPE\n",
                (long long)(hp->head_dim ? hp->head_dim : hp->n_embd / hp->n_head));
        return 2;
    }
    if (hp->arch->qk_norm_full && hp->n_head_kv != hp->n_head) {
        fprintf(stderr,
                "strata: convert synth: --kv-heads %lld: %s normalizes k over the whole projection "
                "and needs --kv-heads equal to --heads (%lld)\n",
                (long long)hp->n_head_kv, hp->arch->name, (long long)hp->n_head);
        return 2;
    }
    if (o->swa_window != 0 && hp->arch->swa_period == 0) {
        fprintf(stderr, "strata: convert synth: --sliding-window: %s has no sliding-window layers\n",
                hp->arch->name);
        return 2;
    }
    if ((o->rope_scaling != NULL) != (o->rope_factor != 0.0f) ||
        (o->rope_orig_ctx != 0 && o->rope_scaling == NULL)) {
        fprintf(stderr, "strata: convert synth: --rope-scaling and --rope-factor go together "
                        "(--rope-orig-ctx with them)\n");
        return 2;
    }
    if (hp->n_vocab < CV_MIN_VOCAB) {
        fprintf(stderr,
                "strata: convert synth: --vocab %lld is below %d (3 special + 256 byte tokens)\n",
                (long long)hp->n_vocab, CV_MIN_VOCAB);
        return 2;
    }
    cv_hparams_derive(hp);
    int64_t blck = st_dtype_info_of(o->type)->blck;
    if (hp->n_embd % blck != 0 || hp->n_ff % blck != 0 || hp->q_dim % blck != 0 ||
        hp->n_ff_exp % blck != 0) {
        fprintf(stderr,
                "strata: convert synth: --type %s needs --dim, --ffn, --expert-ffn and --heads x "
                "head dim multiples of %lld (got %lld, %lld, %lld, %lld)\n",
                st_dtype_info_of(o->type)->name, (long long)blck, (long long)hp->n_embd,
                (long long)hp->n_ff, (long long)hp->n_ff_exp, (long long)hp->q_dim);
        return 2;
    }
    cv_arch_hparams(hp, o->swa_window);
    if (o->rope_scaling != NULL) { /* cv_add_meta writes the keys of these */
        hp->rope_scaling =
            strcmp(o->rope_scaling, "yarn") == 0 ? ST_ROPE_SCALING_YARN : ST_ROPE_SCALING_LINEAR;
        hp->rope_freq_scale = 1.0f / o->rope_factor;
        hp->n_ctx_orig = o->rope_orig_ctx;
    }
    return CLI_OPTS_GO;
}

int cv_synth(int argc, char **argv)
{
    cv_synth_opts o;
    int rc = cv_synth_args(argc, argv, &o);
    if (rc != CLI_OPTS_GO)
        return rc;
    const st_kernel_ops *ops = st_kernels_ref();
    cv_vocab v;
    st_err e = cv_vocab_placeholder(&v, o.hp.n_vocab);
    if (e)
        return cv_fail(e);
    size_t nt;
    cv_tensor *ts = cv_tensor_list(&o.hp, true, &nt);
    int64_t widest = 0; /* the longest row */
    for (size_t i = 0; ts != NULL && i < nt; i++)
        widest = ts[i].ne0 > widest ? ts[i].ne0 : widest;
    float *row = malloc((size_t)widest * sizeof *row);
    void *qrow = malloc((size_t)widest * sizeof(float));
    st_gguf_writer *w = NULL;
    if (ts == NULL || row == NULL || qrow == NULL) {
        e = st_errorf(ST_ENOMEM, "convert: synth buffers");
        goto done;
    }
    e = st_gguf_writer_open(o.out, &w);
    if (!e)
        e = cv_add_meta(w, "strata-synth", o.type, &o.hp, &v);
    if (!e)
        e = st_gguf_writer_add_u64(w, CV_SYNTH_SEED_KEY, o.seed);
    for (size_t i = 0; i < nt && !e; i++) {
        int64_t ne[3] = {ts[i].ne0, ts[i].ne1, ts[i].ne2};
        e = st_gguf_writer_add_tensor_info(w, ts[i].name, ts[i].kind ? ST_DT_F32 : o.type,
                                           ts[i].ne2 ? 3 : ts[i].ne1 ? 2 : 1, ne, NULL);
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
        if (t->embd_scaled)
            std /= sqrt((double)t->ne0);
        size_t rbytes;
        if (st_row_size(dt, t->ne0, &rbytes) != ST_K_OK) {
            e = st_errorf(ST_EINTERNAL, "convert: row of '%s'", t->name);
            break;
        }
        int64_t rows = (t->ne1 ? t->ne1 : 1) * (t->ne2 ? t->ne2 : 1);
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
