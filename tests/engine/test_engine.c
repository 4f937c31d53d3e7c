/* test_engine.c - properties of the stage engine that the cluster rests on:
 *  - split equivalence: a stage [a, b) loaded alone and fed the hidden
 *    states the full model has before layer a gives, bit for bit, the
 *    hidden states (or logits) the full model has after layer b - 1;
 *  - batch invariance (INV-7): a prompt's logits are bit-identical alone or
 *    inside a batch with other prompts, at any place in it, with any
 *    prefill chunking and with 1, 2 or 3 threads (3: more than the cores,
 *    so the matmul chunks go to threads in a different order every run);
 *  - the R8 layout (st_model_place, SIMD kernels) changes no bit: the
 *    batched runs and half the split stages use repacked weights, the
 *    runs they are compared with plain ones;
 *  - resident bytes follow the stage's share of the model;
 *  - the same two properties for mixtures of experts (Mixtral, Qwen3-MoE,
 *    OLMoE), with every kernel variant the CPU has, where the tokens of a
 *    batch are routed to different experts (checked per step), and the
 *    routing rule itself: ties, renormalization per architecture, the
 *    floor of the weights' sum;
 *  - bad batches get errors, not crashes. */
#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/repack.h"
#include "tests/engine/golden.h"
#include "tests/engine/runner.h"
#include "worker/engine/stage_impl.h"

/* qw2-synth: the qwen2 architecture (q/k/v biases, NEOX rope, tied head
 * of a 151,669-token vocabulary); synth-s-q4_k_m: Q4_K (R8 with AVX-512)
 * and Q6_K matrices */
static const char *const eng_models[] = {"synth-s-f32.gguf",   "synth-s-f16.gguf",
                                         "synth-s-q8_0.gguf",  "synth-s-q4_0.gguf",
                                         "stories260K.gguf",   "qw2-synth-q8_0.gguf",
                                         "synth-s-q4_k_m.gguf"};
#define ENG_N_MODELS 7

static const int32_t eng_prompt[] = {1, 325, 422, 307, 404, 289, 386, 271, 368, 465, 350, 447};
#define ENG_N_PROMPT 12

/* hook state: the hidden states after every layer, [n_layer][n_tok][n_embd] */
typedef struct eng_capture {
    float *h;
    int64_t n_tok, n_embd;
} eng_capture;

static void eng_hook(void *arg, int64_t layer, float *hidden, int64_t n_tok, int64_t n_embd)
{
    eng_capture *c = arg;
    memcpy(c->h + (size_t)layer * (size_t)(n_tok * n_embd), hidden,
           (size_t)(n_tok * n_embd) * sizeof(float));
}

/* The kernel tables the loops run: the reference, then the one
 * st_kernels_select picks when it is not the reference (with
 * STRATA_KERNELS=ref it is, and a second loop would repeat the first). */
static const st_kernel_ops *eng_ops_run[2];
static int eng_n_ops;

static const st_kernel_ops *eng_ops(int variant)
{
    return eng_ops_run[variant];
}

static void eng_split(const char *model, const st_kernel_ops *ops)
{
    char path[512];
    golden_path(path, sizeof path, "models", model);
    test_runner full;
    ck_assert_int_eq(runner_open(&full, path, 0, -1, 2, ops, 64, 64, ST_DT_F32), 0);
    const st_hparams *hp = st_model_hparams(full.m);
    int64_t L = hp->n_layer, E = hp->n_embd, T = ENG_N_PROMPT;
    eng_capture cap = {malloc((size_t)(L * T * E) * sizeof(float)), T, E};
    st_stage_set_hook(full.ctx, eng_hook, &cap);
    st_batch_row row = {.kv = full.kv,
                        .pos = 0,
                        .n_tok = T,
                        .tokens = eng_prompt,
                        .all_logits = true};
    float *full_logits = malloc((size_t)(T * hp->n_vocab) * sizeof(float));
    ck_assert_int_eq(st_stage_forward(full.ctx, &row, 1, NULL, ST_OUT_LOGITS, full_logits,
                                      (size_t)(T * hp->n_vocab)),
                     ST_OK);
    /* every split point pair a < b */
    int checked = 0;
    for (int64_t a = 0; a < L; a++) {
        for (int64_t b = a + 1; b <= L; b++) {
            test_runner st;
            ck_assert_int_eq(runner_open(&st, path, a, b, 1, ops, 64, 64, ST_DT_F32), 0);
            if ((a + b) % 2 == 1) /* half the stages multiply R8 weights (SIMD kernels) */
                ck_assert_int_eq(st_model_place(st.m, ops, NULL), ST_OK);
            ck_assert(st_model_has_embd(st.m) == (a == 0));
            ck_assert(st_model_has_head(st.m) == (b == L));
            const float *in = a == 0 ? NULL : cap.h + (size_t)((a - 1) * T * E);
            st_batch_row r = {.kv = st.kv,
                              .pos = 0,
                              .n_tok = T,
                              .tokens = eng_prompt,
                              .all_logits = true};
            if (b < L) {
                float *out = malloc((size_t)(T * E) * sizeof(float));
                ck_assert_int_eq(st_stage_forward(st.ctx, &r, 1, in, ST_OUT_HIDDEN, out,
                                                  (size_t)(T * E)),
                                 ST_OK);
                ck_assert_msg(memcmp(out, cap.h + (size_t)((b - 1) * T * E),
                                     (size_t)(T * E) * sizeof(float)) == 0,
                              "%s: stage [%lld, %lld) hidden differs", model, (long long)a,
                              (long long)b);
                free(out);
            } else {
                float *out = malloc((size_t)(T * hp->n_vocab) * sizeof(float));
                ck_assert_int_eq(st_stage_forward(st.ctx, &r, 1, in, ST_OUT_LOGITS, out,
                                                  (size_t)(T * hp->n_vocab)),
                                 ST_OK);
                ck_assert_msg(memcmp(out, full_logits, (size_t)(T * hp->n_vocab) * sizeof(float)) ==
                                  0,
                              "%s: stage [%lld, L) logits differ", model, (long long)a);
                free(out);
            }
            /* a stage touches only its share of the weights */
            ck_assert(st_model_resident(st.m) <= st_model_resident(full.m));
            if (a > 0 && b < L)
                ck_assert(st_model_weight_bytes(st.m) < st_model_weight_bytes(full.m));
            runner_close(&st);
            checked++;
        }
    }
    ck_assert_int_eq(checked, L * (L + 1) / 2);
    free(full_logits);
    free(cap.h);
    runner_close(&full);
}

START_TEST(test_split_equivalence)
{
    eng_split(eng_models[_i % ENG_N_MODELS], eng_ops(_i / ENG_N_MODELS));
}
END_TEST

/* eng_alone - all logits of prompt p (n tokens) run alone: 1 thread, one chunk. */
static float *eng_alone(const char *path, const st_kernel_ops *ops, const int32_t *p, int64_t n)
{
    test_runner r;
    ck_assert_int_eq(runner_open(&r, path, 0, -1, 1, ops, 64, 64, ST_DT_F32), 0);
    size_t V = (size_t)r.n_vocab;
    float *out = malloc((size_t)n * V * sizeof(float));
    st_batch_row row = {.kv = r.kv, .pos = 0, .n_tok = n, .tokens = p, .all_logits = true};
    ck_assert_int_eq(st_stage_forward(r.ctx, &row, 1, NULL, ST_OUT_LOGITS, out, (size_t)n * V),
                     ST_OK);
    runner_close(&r);
    return out;
}

static void eng_batch_invariance(const char *model, const st_kernel_ops *ops, int threads,
                                 int64_t chunk)
{
    char path[512];
    golden_path(path, sizeof path, "models", model);
    /* three sessions with different prompts and lengths */
    static const int32_t p0[] = {1, 325, 422, 307, 404, 289, 386, 271, 368, 465, 350};
    static const int32_t p1[] = {1, 99, 17, 300, 5};
    static const int32_t p2[] = {1,   450, 451, 452, 453, 454, 455, 456, 457,
                                 458, 459, 460, 461, 462, 463, 464, 465, 466};
    const int32_t *ps[3] = {p0, p1, p2};
    int64_t ns[3] = {11, 5, 18};
    float *alone[3];
    for (int s = 0; s < 3; s++)
        alone[s] = eng_alone(path, ops, ps[s], ns[s]);

    st_model *m;
    st_pool *pool;
    st_stage_ctx *ctx;
    ck_assert_int_eq(st_model_open(path, 0, -1, &m), ST_OK);
    ck_assert_int_eq(st_pool_open(threads, 0, &pool), ST_OK);
    ck_assert_int_eq(st_model_place(m, ops, pool), ST_OK); /* R8 weights vs the plain ones alone */
    /* layer 0's up (expert 0's in a mixture: the first of the stacked tensor) */
    const st_hparams *hp = st_model_hparams(m);
    const bool moe = hp->n_expert > 0;
    const st_weight *w0 = moe ? &st_model_layer(m, 0)->experts[0].up : &st_model_layer(m, 0)->w_up;
    ck_assert(w0->r8 == st_model_serves_r8(ops, w0->dtype));
    /* placed: out of the file's mapping, and a plain copy is the file's bytes */
    const st_gguf_tensor *t0 = st_gguf_find_tensor(
        st_model_gguf(m), moe ? "blk.0.ffn_up_exps.weight" : "blk.0.ffn_up.weight");
    ck_assert_ptr_nonnull(t0);
    ck_assert_ptr_ne(w0->data, t0->data);
    if (!w0->r8)
        ck_assert_int_eq(memcmp(w0->data, t0->data, (size_t)w0->n_out * w0->row_bytes), 0);
    ck_assert_int_eq(st_stage_ctx_open(m, 64, pool, ops, &ctx), ST_OK);
    size_t V = (size_t)st_model_hparams(m)->n_vocab;
    st_kv *kv[3];
    for (int s = 0; s < 3; s++)
        ck_assert_int_eq(st_stage_kv_alloc(ctx, 64, ST_DT_F32, &kv[s]), ST_OK);
    float *out = malloc(64 * V * sizeof(float));
    int64_t done[3] = {0, 0, 0};
    /* a mixture: layer 0's per-expert token counts before a step, and the
     * most experts one step's tokens were routed to */
    uint64_t before[ST_MOE_MAX_EXPERT] = {0};
    int64_t most_experts = 0;
    /* each step: rows in rotating order, each row a chunk of its prompt */
    for (int step = 0; done[0] < ns[0] || done[1] < ns[1] || done[2] < ns[2]; step++) {
        st_batch_row rows[3];
        int who[3], nr = 0;
        for (int k = 0; k < 3; k++) {
            int s = (k + step) % 3;
            if (done[s] >= ns[s])
                continue;
            int64_t c = chunk + (s == 1 ? 0 : step % 2); /* uneven chunks per session */
            if (c > ns[s] - done[s])
                c = ns[s] - done[s];
            rows[nr] = (st_batch_row){.kv = kv[s],
                                      .pos = done[s],
                                      .n_tok = c,
                                      .tokens = ps[s] + done[s],
                                      .all_logits = true};
            who[nr++] = s;
        }
        const uint64_t *count = NULL;
        if (moe) {
            ck_assert_int_eq(st_stage_expert_counts(ctx, 0, &count), ST_OK);
            memcpy(before, count, (size_t)hp->n_expert * sizeof *count);
        }
        ck_assert_int_eq(st_stage_forward(ctx, rows, (size_t)nr, NULL, ST_OUT_LOGITS, out, 64 * V),
                         ST_OK);
        int64_t n_experts = 0;
        for (int64_t e = 0; moe && e < hp->n_expert; e++)
            n_experts += count[e] != before[e];
        most_experts = n_experts > most_experts ? n_experts : most_experts;
        size_t off = 0;
        for (int k = 0; k < nr; k++) {
            int s = who[k];
            for (int64_t j = 0; j < rows[k].n_tok; j++, off++)
                ck_assert_msg(memcmp(out + off * V, alone[s] + (size_t)(done[s] + j) * V,
                                     V * sizeof(float)) == 0,
                              "%s: session %d token %lld differs in a batch (threads %d, "
                              "chunk %lld)",
                              model, s, (long long)(done[s] + j), threads, (long long)chunk);
            done[s] += rows[k].n_tok;
        }
    }
    /* the property is tested where it can fail: some batch's tokens were
     * routed to more experts than one token uses */
    if (moe)
        ck_assert_msg(most_experts > hp->n_expert_used,
                      "%s: no batch mixed experts (at most %lld in a step)", model,
                      (long long)most_experts);
    free(out);
    for (int s = 0; s < 3; s++) {
        st_kv_free(kv[s]);
        free(alone[s]);
    }
    st_stage_ctx_close(ctx);
    st_pool_close(pool);
    st_model_close(m);
}

START_TEST(test_batch_invariance)
{
    const char *model = eng_models[_i % ENG_N_MODELS];
    const st_kernel_ops *ops = eng_ops(_i / ENG_N_MODELS);
    eng_batch_invariance(model, ops, 1, 1);
    eng_batch_invariance(model, ops, 2, 3);
    eng_batch_invariance(model, ops, 2, 7);
    /* more threads than cores: which thread claims which chunk of a
     * matmul varies from run to run, the bits must not */
    eng_batch_invariance(model, ops, 3, 5);
}
END_TEST

/* ---- mixtures of experts */

/* the MoE models (tiny: dim 128, 2 layers, 8 experts, 2 used), with the
 * architecture's renormalization of the chosen weights */
static const char *const eng_moe_models[] = {"w3-mixtral-q8_0.gguf", "w3-qwen3moe-q8_0.gguf",
                                             "w3-olmoe-f16.gguf"};
static const bool eng_moe_norm[] = {true, true, false};
#define ENG_N_MOE 3

/* every kernel variant this CPU and build support: ref, avx2, avx512 */
static const st_kernel_ops *eng_moe_ops[ST_KVAR_COUNT];
static int eng_n_moe_ops;

START_TEST(test_moe_batch_invariance)
{
    const char *model = eng_moe_models[_i % ENG_N_MOE];
    const st_kernel_ops *ops = eng_moe_ops[_i / ENG_N_MOE];
    eng_batch_invariance(model, ops, 1, 1);
    eng_batch_invariance(model, ops, 2, 3);
    eng_batch_invariance(model, ops, 2, 7);
}
END_TEST

START_TEST(test_moe_split_equivalence)
{
    eng_split(eng_moe_models[_i % ENG_N_MOE], eng_moe_ops[_i / ENG_N_MOE]);
}
END_TEST

/* the architecture table's renormalization rule, as the models load it */
START_TEST(test_moe_arch_norm)
{
    for (int i = 0; i < ENG_N_MOE; i++) {
        char path[512];
        golden_path(path, sizeof path, "models", eng_moe_models[i]);
        st_model *m;
        ck_assert_int_eq(st_model_open(path, 0, -1, &m), ST_OK);
        const st_hparams *hp = st_model_hparams(m);
        ck_assert_int_eq(hp->n_expert, 8);
        ck_assert_int_eq(hp->n_expert_used, 2);
        ck_assert_msg(hp->arch->moe_norm_w == eng_moe_norm[i], "%s: moe_norm_w %d",
                      eng_moe_models[i], (int)hp->arch->moe_norm_w);
        st_model_close(m);
    }
}
END_TEST

START_TEST(test_moe_routing)
{
    int32_t sel[4];
    float w[4];
    /* all equal: the lowest indices, in order; weights 1/k renormalized,
     * 1/n not */
    float p[8] = {0};
    stage_moe_route_token(p, 8, 2, true, sel, w);
    ck_assert_int_eq(sel[0], 0);
    ck_assert_int_eq(sel[1], 1);
    ck_assert_float_eq(w[0], 0.5f);
    ck_assert_float_eq(w[1], 0.5f);
    memset(p, 0, sizeof p);
    stage_moe_route_token(p, 8, 2, false, sel, w);
    ck_assert_int_eq(sel[0], 0);
    ck_assert_int_eq(sel[1], 1);
    ck_assert_float_eq(w[0], 0.125f);
    ck_assert_float_eq(w[1], 0.125f);
    /* a tie among the largest: index order; then the next largest */
    float q[6] = {1.0f, 3.0f, 0.0f, 3.0f, 2.0f, 3.0f};
    stage_moe_route_token(q, 6, 4, false, sel, w);
    ck_assert_int_eq(sel[0], 1);
    ck_assert_int_eq(sel[1], 3);
    ck_assert_int_eq(sel[2], 5);
    ck_assert_int_eq(sel[3], 4);
    ck_assert_float_eq(w[0], w[1]);
    ck_assert_float_eq(w[1], w[2]);
    ck_assert(w[2] > w[3]);
    /* most probable first whatever the index; the softmax of the logits */
    float r[4] = {0.0f, 2.0f, 1.0f, 3.0f};
    stage_moe_route_token(r, 4, 2, false, sel, w);
    ck_assert_int_eq(sel[0], 3);
    ck_assert_int_eq(sel[1], 1);
    double z = 1.0 + exp(1.0) + exp(2.0) + exp(3.0);
    ck_assert_double_eq_tol(w[0], exp(3.0) / z, 1e-6);
    ck_assert_double_eq_tol(w[1], exp(2.0) / z, 1e-6);
    ck_assert_float_eq(r[3], w[0]); /* p is left the probabilities */
    /* renormalized: the chosen weights sum to 1 (to rounding), in ratio */
    float r2[4] = {0.0f, 2.0f, 1.0f, 3.0f};
    float wn[2];
    stage_moe_route_token(r2, 4, 2, true, sel, wn);
    ck_assert_double_eq_tol((double)wn[0] + wn[1], 1.0, 1e-6);
    ck_assert_double_eq_tol(wn[0] / wn[1], exp(1.0), 1e-5);
    /* the floor: a sum below 2^-14 divides by 2^-14, not by the sum */
    const float tiny[3] = {1e-6f, 3e-6f, 2e-6f};
    const int32_t pick[2] = {1, 2};
    stage_moe_weights(tiny, pick, 2, true, w);
    ck_assert_float_eq(w[0], 3e-6f / STAGE_MOE_WEIGHT_SUM_MIN);
    ck_assert_float_eq(w[1], 2e-6f / STAGE_MOE_WEIGHT_SUM_MIN);
    const float big[3] = {0.25f, 0.5f, 0.125f};
    stage_moe_weights(big, pick, 2, true, w); /* above the floor: the sum */
    ck_assert_float_eq(w[0], 0.5f / 0.625f);
    ck_assert_float_eq(w[1], 0.125f / 0.625f);
    stage_moe_weights(tiny, pick, 2, false, w); /* no renormalization: p itself */
    ck_assert_float_eq(w[0], 3e-6f);
    ck_assert_float_eq(w[1], 2e-6f);
}
END_TEST

START_TEST(test_bad_batches)
{
    char path[512];
    golden_path(path, sizeof path, "models", "synth-s-q8_0.gguf");
    test_runner r;
    ck_assert_int_eq(runner_open(&r, path, 0, -1, 1, st_kernels_ref(), 8, 16, ST_DT_F32), 0);
    size_t V = (size_t)r.n_vocab;
    float *out = malloc(16 * V * sizeof(float));
    int32_t ids[20] = {1, 2, 3};
    st_batch_row row = {.kv = r.kv, .pos = 0, .n_tok = 3, .tokens = ids};
    ck_assert_int_eq(st_stage_forward(r.ctx, &row, 0, NULL, ST_OUT_LOGITS, out, V), ST_EINVAL);
    row.n_tok = 9; /* over max_tokens */
    ck_assert_int_eq(st_stage_forward(r.ctx, &row, 1, NULL, ST_OUT_LOGITS, out, 16 * V), ST_ERANGE);
    row.n_tok = 3;
    ids[1] = 512; /* outside the vocabulary */
    ck_assert_int_eq(st_stage_forward(r.ctx, &row, 1, NULL, ST_OUT_LOGITS, out, V), ST_ERANGE);
    ids[1] = -1;
    ck_assert_int_eq(st_stage_forward(r.ctx, &row, 1, NULL, ST_OUT_LOGITS, out, V), ST_ERANGE);
    ids[1] = 2;
    row.pos = 2; /* a gap: nothing is filled yet */
    ck_assert_int_eq(st_stage_forward(r.ctx, &row, 1, NULL, ST_OUT_LOGITS, out, V), ST_ERANGE);
    row.pos = 0;
    ck_assert_int_eq(st_stage_forward(r.ctx, &row, 1, NULL, ST_OUT_LOGITS, out, V - 1), ST_ERANGE);
    st_batch_row two[2] = {row, row}; /* one session twice */
    ck_assert_int_eq(st_stage_forward(r.ctx, two, 2, NULL, ST_OUT_LOGITS, out, 2 * V), ST_EINVAL);
    ck_assert_int_eq(st_stage_forward(r.ctx, &row, 1, NULL, ST_OUT_LOGITS, out, V), ST_OK);
    ck_assert_int_eq(r.kv->n_filled, 3);
    row.pos = 15; /* past the cache's end */
    row.n_tok = 2;
    ck_assert_int_eq(st_stage_forward(r.ctx, &row, 1, NULL, ST_OUT_LOGITS, out, V), ST_ERANGE);
    free(out);
    runner_close(&r);
}
END_TEST

/* Usage: test_engine [split|batch|moe]: the split-equivalence loops, or the
 * batch-invariance loops and the bad batches, or both for the mixtures of
 * experts and their routing; with no argument, all. meson runs the parts as
 * tests of their own so they can run side by side. */
int main(int argc, char **argv)
{
    const char *part = argc > 1 ? argv[1] : "all";
    bool split = !strcmp(part, "split") || !strcmp(part, "all");
    bool batch = !strcmp(part, "batch") || !strcmp(part, "all");
    bool moe = !strcmp(part, "moe") || !strcmp(part, "all");
    if (argc > 2 || (!split && !batch && !moe)) {
        fprintf(stderr, "usage: test_engine [split|batch|moe]\n");
        return 2;
    }
    eng_ops_run[0] = st_kernels_ref();
    eng_n_ops = 1;
    if (st_kernels_select(0) != st_kernels_ref())
        eng_ops_run[eng_n_ops++] = st_kernels_select(0);
    if ((split || batch) && eng_n_ops == 2)
        printf("engine %s: kernels run: %s and %s (the one st_kernels_select picks)\n", part,
               eng_ops_run[0]->name, eng_ops_run[1]->name);
    else if (split || batch)
        printf("engine %s: kernels run: %s (st_kernels_select picks it too)\n", part,
               eng_ops_run[0]->name);
    for (int v = 0; v < ST_KVAR_COUNT; v++)
        if (st_kernels_get((st_kvariant)v) != NULL)
            eng_moe_ops[eng_n_moe_ops++] = st_kernels_get((st_kvariant)v);
    if (moe) {
        printf("engine moe: kernels run:");
        for (int v = 0; v < eng_n_moe_ops; v++)
            printf(" %s", eng_moe_ops[v]->name);
        printf(" (every variant this CPU supports)\n");
    }
    fflush(stdout);
    Suite *s = suite_create("engine");
    TCase *tc = tcase_create("engine");
    tcase_set_timeout(tc, 600);
    if (split)
        tcase_add_loop_test(tc, test_split_equivalence, 0, eng_n_ops * ENG_N_MODELS);
    if (batch) {
        tcase_add_loop_test(tc, test_batch_invariance, 0, eng_n_ops * ENG_N_MODELS);
        tcase_add_test(tc, test_bad_batches);
    }
    if (moe) {
        tcase_add_test(tc, test_moe_routing);
        tcase_add_test(tc, test_moe_arch_norm);
        tcase_add_loop_test(tc, test_moe_batch_invariance, 0, eng_n_moe_ops * ENG_N_MOE);
        tcase_add_loop_test(tc, test_moe_split_equivalence, 0, eng_n_moe_ops * ENG_N_MOE);
    }
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf == 0 ? 0 : 1;
}
