/* test_wire_gate.c - the wire accuracy gate (worker/engine/wire_gate.h) on real
 * shared models: its verdicts are those `strata bench wire --gate` prints
 * (synth-s-f32: f32 exact, i8 lossy and passing: 63/64 top-1 = 98.4% with
 * the avx2 and avx512 kernels, 62/64 = 96.9% with the reference ones, whose
 * sums run in another order; l3-synth-q8_0: i8 56/64 = 87.5% with each,
 * failing). The figures depend on the kernel variant, so the checks are
 * on the verdicts and on figures that hold for every variant; the coordinator's calibration
 * run (st_wgate_i8) gives the same i8 figures, a test threshold above the
 * figure fails it, a cancel flag stops a run, and a path longer than the
 * context is refused. */
#include <check.h>
#include <stdatomic.h>
#include <stdio.h>

#include "tests/engine/golden.h"
#include "worker/engine/wire_gate.h"

#define TG_THREADS 1

static const char *tg_model(char *buf, size_t cap, const char *name)
{
    return golden_path(buf, cap, "models", name);
}

/* tg_run - the calibration run of dtype d on model name, by the open /
 * reference / run steps `strata bench wire` takes. */
static void tg_run(const char *name, st_wire_dtype d, st_wgate_figs *f)
{
    char path[512];
    st_wgate *g;
    ck_assert_int_eq(st_wgate_open(tg_model(path, sizeof path, name), TG_THREADS, 0, &g), ST_OK);
    const int32_t prompt[] = {ST_WGATE_CALIB_ID};
    ck_assert_int_eq(st_wgate_reference(g, prompt, 1, ST_WGATE_CALIB_STEPS), ST_OK);
    ck_assert_int_eq(st_wgate_run(g, d, f), ST_OK);
    st_wgate_close(g);
}

START_TEST(test_i8_passes_on_synth_s)
{
    st_wgate_figs f32, i8, calib;
    tg_run("synth-s-f32.gguf", ST_WIRE_F32, &f32);
    ck_assert_int_eq(f32.steps, ST_WGATE_CALIB_STEPS);
    ck_assert(f32.max_err == 0);
    ck_assert(st_wgate_pass(ST_WIRE_F32, &f32, ST_WGATE_I8_TOP1_MIN, NULL));
    tg_run("synth-s-f32.gguf", ST_WIRE_I8, &i8);
    ck_assert_int_eq(i8.steps, ST_WGATE_CALIB_STEPS);
    /* lossy (not every step agrees, the logits differ) and within the gate */
    ck_assert_int_lt(i8.top1_agree, ST_WGATE_CALIB_STEPS);
    ck_assert_int_ge(100 * i8.top1_agree, (int)ST_WGATE_I8_TOP1_MIN * ST_WGATE_CALIB_STEPS);
    ck_assert(i8.max_err > 0);
    const char *rule;
    ck_assert(st_wgate_pass(ST_WIRE_I8, &i8, ST_WGATE_I8_TOP1_MIN, &rule));
    ck_assert_str_eq(rule, "pass (top1 >= 90%)");
    /* the coordinator's calibration run: the same figures */
    char path[512];
    ck_assert_int_eq(st_wgate_i8(tg_model(path, sizeof path, "synth-s-f32.gguf"), TG_THREADS, NULL,
                                 &calib),
                     ST_OK);
    ck_assert_int_eq(calib.steps, i8.steps);
    ck_assert_int_eq(calib.top1_agree, i8.top1_agree);
    ck_assert(calib.top5_sum == i8.top5_sum && calib.max_err == i8.max_err);
    /* a threshold above the figure fails it */
    double pct = 100.0 * (double)i8.top1_agree / (double)i8.steps;
    ck_assert(!st_wgate_pass(ST_WIRE_I8, &i8, pct + 0.5, NULL));
    ck_assert(st_wgate_pass(ST_WIRE_I8, &i8, pct - 0.5, NULL));
}
END_TEST

START_TEST(test_i8_fails_on_l3_synth)
{
    st_wgate_figs i8;
    tg_run("l3-synth-q8_0.gguf", ST_WIRE_I8, &i8);
    ck_assert_int_eq(i8.steps, ST_WGATE_CALIB_STEPS);
    /* 56/64 = 87.5% with every kernel variant of this tree */
    ck_assert_int_lt(100 * i8.top1_agree, (int)ST_WGATE_I8_TOP1_MIN * ST_WGATE_CALIB_STEPS);
    const char *rule;
    ck_assert(!st_wgate_pass(ST_WIRE_I8, &i8, ST_WGATE_I8_TOP1_MIN, &rule));
    ck_assert_str_eq(rule, "FAIL (top1 < 90%)");
}
END_TEST

START_TEST(test_cancel_and_context)
{
    char path[512];
    atomic_int stop = 1;
    st_wgate_figs f;
    ck_assert_int_eq(st_wgate_i8(tg_model(path, sizeof path, "stories260K.gguf"), TG_THREADS, &stop,
                                 &f),
                     ST_ECANCELED);
    st_wgate *g;
    ck_assert_int_eq(st_wgate_open(path, TG_THREADS, 0, &g), ST_OK);
    const int32_t prompt[] = {ST_WGATE_CALIB_ID};
    ck_assert_int_eq(st_wgate_run(g, ST_WIRE_I8, &f), ST_EINVAL); /* no reference yet */
    ck_assert_int_eq(st_wgate_reference(g, prompt, 1, st_wgate_n_ctx(g)), ST_ERANGE);
    st_wgate_close(g);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("wire_gate");
    TCase *tc = tcase_create("wire_gate");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_i8_passes_on_synth_s);
    tcase_add_test(tc, test_i8_fails_on_l3_synth);
    tcase_add_test(tc, test_cancel_and_context);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf == 0 ? 0 : 1;
}
