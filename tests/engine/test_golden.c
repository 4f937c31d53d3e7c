/* test_golden.c - every case of golden/generation.json,
 * golden/wave2/generation.json (K-quant and BF16 files, the Llama 3
 * vocabulary llama and the qwen2 model, run from token ids) and
 * golden/wave3/generation.json (rope scaling, qwen3, gemma2, gemma3, phi3,
 * the legacy and IQ4 quants), teacher-forced, with the reference kernels
 * and with every SIMD variant the CPU has, over an f32 KV cache (the
 * goldens are llama.cpp's with an f32 KV cache), within the tolerances of
 * golden/README.md, golden/wave2/README.md and golden/wave3/README.md.
 * STRATA_GOLDEN_KV=f16|q8_0 adds a pass of the chosen kernels over that
 * cache type under the same tolerances: a measurement, not run by default,
 * because the f16 cache falls outside the f32-KV goldens' tolerances on
 * the random-weight models (smallest cosine 0.99539 on synth-s-q6_k against
 * 0.998; greedy ids leave the golden ids on 18 of 29 cases of waves 1-2)
 * and an f16-KV golden set does not exist yet. llama.cpp itself falls
 * outside them with an f16 cache (its flash attention off, teacher-forced:
 * 0.99447 on synth-s-q6_k p1, 0.99573 on synth-s-q4_k_m p0, 0.99768 on
 * synth-s-q8_0 p0, where this engine's f16 cache gives 0.99539, 0.99598,
 * 0.99816). Prints, per case and kernel variant, the smallest per-step
 * cosine and the largest |logit diff|. The cases of models Strata cannot
 * run yet are
 * listed as SKIPPED, never run and never counted as passed. */
#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/model/gguf.h"
#include "common/model/llama.h"
#include "tests/engine/golden.h"
#include "tests/engine/runner.h"

static golden_case *g_wave1, *g_wave2, *g_wave3;
static size_t g_n1, g_n2, g_n3;
static const golden_case **g_cases; /* the cases that run */
static size_t g_n;

/* Models this test does not run, and why (the list ends with NULL). */
static const struct {
    const char *model;
    const char *why;
} golden_skip[] = {
    {NULL, NULL},
};

static const char *golden_skip_reason(const golden_case *gc)
{
    for (size_t k = 0; golden_skip[k].model != NULL; k++)
        if (strcmp(gc->model, golden_skip[k].model) == 0)
            return golden_skip[k].why;
    return NULL;
}

typedef struct golden_metrics {
    double min_cos, max_abs;
    int argmax_fail; /* steps failing the argmax rule */
    int steps;
} golden_metrics;

static st_dtype golden_model_dtype(const char *path)
{
    st_gguf *g;
    ck_assert_int_eq(st_gguf_open(path, &g), ST_OK);
    /* attn_output: every architecture has it, unfused and dense */
    const st_gguf_tensor *t = st_gguf_find_tensor(g, "blk.0.attn_output.weight");
    ck_assert_ptr_nonnull(t);
    st_dtype d = t->dtype;
    st_gguf_close(g);
    return d;
}

static int64_t golden_argmax(const float *x, int64_t n)
{
    int64_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

static void golden_compare(const float *ref, const float *got, int64_t n, double margin_frac,
                           golden_metrics *gm)
{
    double dot = 0, na = 0, nb = 0, mx = 0, scale = 0;
    for (int64_t i = 0; i < n; i++) {
        dot += (double)ref[i] * got[i];
        na += (double)ref[i] * ref[i];
        nb += (double)got[i] * got[i];
        double d = fabs((double)ref[i] - got[i]);
        if (d > mx)
            mx = d;
        if (fabs(ref[i]) > scale)
            scale = fabs(ref[i]);
    }
    double cosv = dot / (sqrt(na) * sqrt(nb));
    if (cosv < gm->min_cos)
        gm->min_cos = cosv;
    if (mx > gm->max_abs)
        gm->max_abs = mx;
    int64_t a = golden_argmax(ref, n);
    double second = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (i != a && ref[i] > second)
            second = ref[i];
    double margin = ref[a] - second;
    if (margin > margin_frac * scale && golden_argmax(got, n) != a)
        gm->argmax_fail++;
    gm->steps++;
}

static void golden_run_case(const golden_case *gc, const st_kernel_ops *ops, int threads,
                            int64_t chunk, st_dtype kv_dtype)
{
    char path[512];
    golden_path(path, sizeof path, "models", gc->model);
    st_dtype dt = golden_model_dtype(path);
    float *ref = golden_read_logits(gc);
    ck_assert_msg(ref != NULL, "cannot read %s", gc->logits_file);
    test_runner r;
    ck_assert_int_eq(runner_open(&r, path, 0, -1, threads, ops, 64,
                                 (int64_t)(gc->n_prompt + gc->n), kv_dtype),
                     0);
    /* the SIMD kernels serve R8 weights (as strata run and workers do) */
    ck_assert_int_eq(st_model_place(r.m, ops, r.pool), ST_OK);
    ck_assert_int_eq(r.n_vocab, gc->n_vocab);
    golden_metrics gm = {.min_cos = 1.0};
    /* F32: every argmax (margin 0) and max |diff| <= 1e-3; F16 and BF16: cos >=
     * 0.9999, argmax where the margin > 1% of scale; Q8_0/Q4_0 and the
     * K-quants: 0.998 and 2%. */
    const bool f16ish = dt == ST_DT_F16 || dt == ST_DT_BF16;
    double margin_frac = dt == ST_DT_F32 ? 0.0 : f16ish ? 0.01 : 0.02;
    double min_cos = dt == ST_DT_F32 ? 0.0 : f16ish ? 0.9999 : 0.998;
    ck_assert_int_eq(runner_eval(&r, gc->prompt, (int64_t)gc->n_prompt, 0, chunk), 0);
    for (size_t i = 0; i < gc->n; i++) {
        golden_compare(ref + i * (size_t)gc->n_vocab, r.logits, gc->n_vocab, margin_frac, &gm);
        if (i + 1 < gc->n)
            ck_assert_int_eq(runner_eval(&r, &gc->expected[i], 1, (int64_t)(gc->n_prompt + i), 1),
                             0);
    }
    printf("golden: %-22s %-28s kernels=%-5s threads=%d chunk=%lld kv=%s: min_cos=%.7f "
           "max_abs=%.3g argmax_fail=%d/%d\n",
           gc->model, gc->logits_file, ops->name, threads, (long long)chunk,
           st_dtype_info_of(kv_dtype)->name, gm.min_cos, gm.max_abs, gm.argmax_fail, gm.steps);
    fflush(stdout);
    ck_assert_msg(gm.argmax_fail == 0, "%s: %d steps with a different argmax", gc->logits_file,
                  gm.argmax_fail);
    if (dt == ST_DT_F32)
        ck_assert_msg(gm.max_abs <= 1e-3, "%s: max |diff| %g > 1e-3", gc->logits_file, gm.max_abs);
    else
        ck_assert_msg(gm.min_cos >= min_cos, "%s: min cosine %.6f < %.6f", gc->logits_file,
                      gm.min_cos, min_cos);
    runner_close(&r);
    free(ref);
}

START_TEST(test_golden_ref) { golden_run_case(g_cases[_i], st_kernels_ref(), 1, 64, ST_DT_F32); }
END_TEST

/* The SIMD variants this CPU runs (every one, not only the one picked at
 * start-up: an AVX-512 machine checks its AVX2 table too). */
static const st_kernel_ops *g_simd[ST_KVAR_COUNT];
static int g_n_simd;

START_TEST(test_golden_simd)
{
    /* each SIMD variant, 2 threads, prompt in chunks of 5 */
    golden_run_case(g_cases[_i % (int)g_n], g_simd[_i / (int)g_n], 2, 5, ST_DT_F32);
}
END_TEST

static st_dtype g_kv_dtype; /* STRATA_GOLDEN_KV */

START_TEST(test_golden_kv)
{
    /* the chosen kernels over the cache type of STRATA_GOLDEN_KV */
    golden_run_case(g_cases[_i], st_kernels_select(0), 2, 5, g_kv_dtype);
}
END_TEST

int main(void)
{
    g_n1 = golden_load(&g_wave1);
    g_n2 = golden_load_dir("golden/wave2", &g_wave2);
    g_n3 = golden_load_dir("golden/wave3", &g_wave3);
    if (g_n1 == 0 || g_n2 == 0 || g_n3 == 0) {
        fprintf(stderr, "test_golden: cannot read golden/generation.json, "
                        "golden/wave2/ or golden/wave3/generation.json (STRATA_SHARED)\n");
        return 1;
    }
    const size_t n_all = g_n1 + g_n2 + g_n3;
    g_cases = calloc(n_all, sizeof *g_cases);
    if (g_cases == NULL)
        return 1;
    size_t skipped = 0;
    /* STRATA_GOLDEN_MAX_PROMPT=N: only the cases whose prompt has at most N
     * ids (deploy/test.sh's sanitizer pass: the 11 cases of wave 3 with
     * 640-id prompts take 72% of this test's time, 39.6 s against 11.3 s
     * in a release build on a Zen 3, and run in its two other passes) */
    const char *mp = getenv("STRATA_GOLDEN_MAX_PROMPT");
    long max_prompt = 0;
    if (mp != NULL) {
        char *end;
        max_prompt = strtol(mp, &end, 10);
        if (*mp == '\0' || *end != '\0' || max_prompt < 1) {
            fprintf(stderr, "test_golden: STRATA_GOLDEN_MAX_PROMPT '%s' is not a positive count\n",
                    mp);
            return 1;
        }
    }
    for (size_t i = 0; i < n_all; i++) {
        const golden_case *gc = i < g_n1          ? &g_wave1[i]
                                : i < g_n1 + g_n2 ? &g_wave2[i - g_n1]
                                                  : &g_wave3[i - g_n1 - g_n2];
        const char *why = golden_skip_reason(gc);
        if (why != NULL) {
            printf("golden: SKIPPED %-22s %-28s (not run, not passed): %s\n", gc->model,
                   gc->logits_file, why);
            skipped++;
            continue;
        }
        if (max_prompt > 0 && gc->n_prompt > (size_t)max_prompt) {
            printf("golden: NOT IN THIS PASS %-22s %-28s (not run, not passed): a prompt of %zu "
                   "ids, above STRATA_GOLDEN_MAX_PROMPT %ld\n",
                   gc->model, gc->logits_file, gc->n_prompt, max_prompt);
            skipped++;
            continue;
        }
        g_cases[g_n++] = gc;
    }
    /* with STRATA_KERNELS=ref (the suite's reference pass) st_kernels_select
     * gives the reference: the SIMD loop would only repeat the first */
    if (st_kernels_select(0)->variant != ST_KVAR_REF)
        for (int v = ST_KVAR_REF + 1; v < ST_KVAR_COUNT; v++)
            if (st_kernels_get((st_kvariant)v) != NULL)
                g_simd[g_n_simd++] = st_kernels_get((st_kvariant)v);
    const char *kv = getenv("STRATA_GOLDEN_KV");
    if (kv != NULL && st_kv_dtype_from_name(kv, &g_kv_dtype) != ST_OK) {
        fprintf(stderr, "test_golden: STRATA_GOLDEN_KV: %s\n", st_errdetail());
        return 1;
    }
    printf("golden: %zu cases run with the reference and %d SIMD variant(s)%s, %zu skipped\n",
           g_n, g_n_simd,
           kv ? ", then the chosen kernels over the STRATA_GOLDEN_KV cache"
              : "; STRATA_GOLDEN_KV unset",
           skipped);
    fflush(stdout);
    Suite *s = suite_create("golden");
    TCase *tc = tcase_create("golden");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_golden_ref, 0, (int)g_n);
    tcase_add_loop_test(tc, test_golden_simd, 0, (int)g_n * g_n_simd);
    if (kv != NULL)
        tcase_add_loop_test(tc, test_golden_kv, 0, (int)g_n);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    free(g_cases);
    golden_free(g_wave1, g_n1);
    golden_free(g_wave2, g_n2);
    golden_free(g_wave3, g_n3);
    return nf == 0 ? 0 : 1;
}
