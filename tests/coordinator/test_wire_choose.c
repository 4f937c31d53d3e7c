/* test_wire_choose.c - `--wire auto`'s choice rule (common/wire/wire.h
 * st_wire_choose: link bandwidth and latency, the receiving stage's
 * compute time and the receiver's accepted dtypes -> dtype and why), the
 * accepted-dtype masks of a Capability and of --wire-accept, and the
 * planner's per-link bytes per token (st_place_opts.act_ab). */
#include <check.h>
#include <math.h>
#include <string.h>

#include "common/wire/wire.h"
#include "coordinator/planner/placement.h"

#define HIDDEN 2048u    /* TinyLlama's: f32 8 KiB, f16/bf16 4 KiB, i8 2052 B per token */
#define COMPUTE_S 0.010 /* a stage's compute per token: the budget is 1 ms at 10% */

static st_wire_link_in link_in(double bw, uint32_t mask)
{
    return (st_wire_link_in){.hidden = HIDDEN,
                             .bw = bw,
                             .latency_s = 0.001,
                             .measured = true,
                             .compute_s = COMPUTE_S,
                             .accept_mask = mask};
}

static st_wire_dtype choose(st_wire_link_in in, char *why)
{
    st_wire_choice ch;
    ck_assert_int_eq(st_wire_choose(&in, &ch), ST_OK);
    if (why)
        strcpy(why, ch.why);
    return ch.dtype;
}

START_TEST(test_fast_link_f32)
{
    char why[ST_WIRE_WHY_MAX];
    /* 8 KiB at 1 GB/s = 8 us, far within 1 ms */
    ck_assert_int_eq(choose(link_in(1e9, ST_WIRE_MASK_ALL), why), ST_WIRE_F32);
    ck_assert_ptr_nonnull(strstr(why, "f32: the most precise within budget"));
    ck_assert_ptr_nonnull(strstr(why, "(measured)"));
    ck_assert_ptr_nonnull(strstr(why, "10% of 10 ms compute"));
    ck_assert_ptr_null(strstr(why, "receiver accepts")); /* said only when restricted */
}
END_TEST

START_TEST(test_middle_link_f16)
{
    /* 6 MB/s: f32 8192 B = 1.37 ms > 1 ms, f16 4096 B = 0.68 ms fits */
    ck_assert_int_eq(choose(link_in(6e6, ST_WIRE_MASK_ALL), NULL), ST_WIRE_F16);
    /* the boundary is exact: f32 at exactly the budget fits */
    ck_assert_int_eq(choose(link_in(8192 / (0.1 * COMPUTE_S), ST_WIRE_MASK_ALL), NULL),
                     ST_WIRE_F32);
    /* a receiver without f16 gets bf16 (same bytes, less precise) */
    uint32_t no_f16 = ST_WIRE_MASK_ALL & ~(1u << ST_WIRE_F16);
    ck_assert_int_eq(choose(link_in(6e6, no_f16), NULL), ST_WIRE_BF16);
}
END_TEST

START_TEST(test_slow_link_fewest_bytes)
{
    char why[ST_WIRE_WHY_MAX];
    /* 1 MB/s: nothing fits; without i8 the fewest bytes are f16's (tied with bf16) */
    ck_assert_int_eq(choose(link_in(1e6, ST_WIRE_MASK_ALL), why), ST_WIRE_F16);
    ck_assert_ptr_nonnull(strstr(why, "none fits, fewest bytes"));
    /* i8 only when allowed: then the fewest bytes are i8's */
    st_wire_link_in in = link_in(1e6, ST_WIRE_MASK_ALL);
    in.allow_i8 = true;
    ck_assert_int_eq(choose(in, NULL), ST_WIRE_I8);
    /* i8 allowed but a fast link: still f32 */
    in.bw = 1e9;
    ck_assert_int_eq(choose(in, NULL), ST_WIRE_F32);
    /* 3 MB/s with i8: f32 and f16 too slow, i8 2052 B = 0.68 ms fits */
    in.bw = 3e6;
    ck_assert_int_eq(choose(in, why), ST_WIRE_I8);
    ck_assert_ptr_nonnull(strstr(why, "within budget"));
}
END_TEST

START_TEST(test_hysteresis)
{
    char why[ST_WIRE_WHY_MAX];
    /* f32 is 8192 B against a 1 ms budget: it fits from 8.192 MB/s */
    st_wire_link_in in = link_in(9e6, ST_WIRE_MASK_ALL); /* f32 0.91 ms: fits */
    ck_assert_int_eq(choose(in, NULL), ST_WIRE_F32);
    in.has_held = true;
    in.held = ST_WIRE_F16; /* up from f16 only within 80% of the budget */
    ck_assert_int_eq(choose(in, why), ST_WIRE_F16);
    ck_assert_ptr_nonnull(strstr(why, "f16: kept within the hysteresis band"));
    in.bw = 10.5e6; /* f32 0.78 ms */
    ck_assert_int_eq(choose(in, NULL), ST_WIRE_F32);
    /* down from f32 only beyond 120% of the budget */
    in.held = ST_WIRE_F32;
    in.bw = 7.5e6; /* f32 1.09 ms: over, but within the band */
    ck_assert_int_eq(choose(in, why), ST_WIRE_F32);
    ck_assert_ptr_nonnull(strstr(why, "kept within the hysteresis band"));
    ck_assert_ptr_nonnull(strstr(why, "> 10%"));
    in.bw = 6.5e6; /* f32 1.26 ms */
    ck_assert_int_eq(choose(in, NULL), ST_WIRE_F16);
    /* a held dtype the receiver no longer accepts is not kept */
    in.bw = 7.5e6;
    in.accept_mask = ST_WIRE_MASK_ALL & ~(1u << ST_WIRE_F32);
    ck_assert_int_eq(choose(in, NULL), ST_WIRE_F16);
    /* without a held dtype the rule alone decides */
    in.accept_mask = ST_WIRE_MASK_ALL;
    in.has_held = false;
    ck_assert_int_eq(choose(in, NULL), ST_WIRE_F16);
}
END_TEST

START_TEST(test_receiver_restricts)
{
    char why[ST_WIRE_WHY_MAX];
    /* a receiver that takes bf16 only gets bf16 on any link */
    ck_assert_int_eq(choose(link_in(1e9, 1u << ST_WIRE_BF16), why), ST_WIRE_BF16);
    ck_assert_ptr_nonnull(strstr(why, "the receiver accepts bf16"));
    ck_assert_int_eq(choose(link_in(1e5, 1u << ST_WIRE_BF16), NULL), ST_WIRE_BF16);
    /* f32 only (an old worker): f32 even on a slow link */
    ck_assert_int_eq(choose(link_in(1e5, 1u << ST_WIRE_F32), NULL), ST_WIRE_F32);
    /* i8 only, not allowed: no dtype, named */
    st_wire_link_in in = link_in(1e9, 1u << ST_WIRE_I8);
    st_wire_choice ch;
    ck_assert_int_eq(st_wire_choose(&in, &ch), ST_ETYPE);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "accepts [i8]"));
    in.accept_mask = 0;
    ck_assert_int_eq(st_wire_choose(&in, &ch), ST_ETYPE);
}
END_TEST

START_TEST(test_unknown_inputs)
{
    char why[ST_WIRE_WHY_MAX];
    /* unknown bandwidth or compute: the most precise accepted */
    ck_assert_int_eq(choose(link_in(0, ST_WIRE_MASK_ALL), why), ST_WIRE_F32);
    ck_assert_ptr_nonnull(strstr(why, "link bandwidth unknown"));
    ck_assert_int_eq(choose(link_in(INFINITY, ST_WIRE_MASK_ALL), NULL), ST_WIRE_F32);
    st_wire_link_in in = link_in(1e6, (1u << ST_WIRE_F16) | (1u << ST_WIRE_BF16));
    in.compute_s = 0;
    ck_assert_int_eq(choose(in, why), ST_WIRE_F16);
    ck_assert_ptr_nonnull(strstr(why, "compute time unknown"));
    /* latency does not change the choice */
    in = link_in(6e6, ST_WIRE_MASK_ALL);
    in.latency_s = 5.0;
    ck_assert_int_eq(choose(in, NULL), ST_WIRE_F16);
    /* a share: 50% lets f32 through at 6 MB/s */
    in.share = 0.5;
    ck_assert_int_eq(choose(in, NULL), ST_WIRE_F32);
    st_wire_choice ch;
    in.share = 1.5;
    ck_assert_int_eq(st_wire_choose(&in, &ch), ST_EINVAL);
    in = link_in(1e9, ST_WIRE_MASK_ALL);
    in.hidden = 0;
    ck_assert_int_eq(st_wire_choose(&in, &ch), ST_EINVAL);
    ck_assert_int_eq(st_wire_choose(NULL, &ch), ST_EINVAL);
}
END_TEST

START_TEST(test_masks)
{
    char *none[1] = {NULL};
    size_t unk = 9;
    /* a worker that lists nothing (older than per-boundary dtypes): f32 */
    ck_assert_uint_eq(st_wire_accept_mask(none, 0, &unk), 1u << ST_WIRE_F32);
    ck_assert_uint_eq(unk, 0);
    char *some[] = {"f16", "q4_wire", "bf16", NULL};
    ck_assert_uint_eq(st_wire_accept_mask(some, 4, &unk),
                      (1u << ST_WIRE_F16) | (1u << ST_WIRE_BF16));
    ck_assert_uint_eq(unk, 2);
    char *unknown_only[] = {"f8"};
    ck_assert_uint_eq(st_wire_accept_mask(unknown_only, 1, NULL), 0);
    uint32_t m = 0;
    ck_assert_int_eq(st_wire_mask_parse("f16,bf16", &m), ST_OK);
    ck_assert_uint_eq(m, (1u << ST_WIRE_F16) | (1u << ST_WIRE_BF16));
    ck_assert_int_eq(st_wire_mask_parse("i8", &m), ST_OK);
    ck_assert_uint_eq(m, 1u << ST_WIRE_I8);
    ck_assert_int_eq(st_wire_mask_parse("f16,", &m), ST_ETYPE);
    ck_assert_int_eq(st_wire_mask_parse("f16,f8", &m), ST_ETYPE);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "'f8'"));
    ck_assert_int_eq(st_wire_mask_parse("", &m), ST_ETYPE);
    char buf[64];
    ck_assert_str_eq(st_wire_mask_text(ST_WIRE_MASK_ALL, buf, sizeof buf), "f32,f16,bf16,i8");
    ck_assert_str_eq(st_wire_mask_text(0, buf, sizeof buf), "none");
    ck_assert_str_eq(st_wire_dtype_name(ST_WIRE_AUTO), "auto");
    st_wire_dtype d;
    ck_assert_int_eq(st_wire_dtype_from_name("auto", &d), ST_ETYPE); /* not a wire code */
}
END_TEST

/* The planner prices each link with its own bytes per token. */
START_TEST(test_planner_per_link_bytes)
{
    uint64_t lb[4] = {1000, 1000, 1000, 1000};
    st_place_model m = {.n_layer = 4, .layer_bytes = lb};
    st_place_worker w[2] = {{.id = 1, .mem_budget = 1u << 20, .spb = 1e-6},
                            {.id = 2, .mem_budget = 1u << 20, .spb = 1e-6}};
    double lat[4] = {0, 0.001, 0.002, 0};
    double bw[4] = {1e9, 1e6, 1e6, 1e9};
    double act[4] = {0, 4096, 8192, 0}; /* 1 -> 2 in f16, 2 -> 1 in f32 */
    st_place_opts o = st_place_opts_default();
    o.objective = ST_PLACE_LATENCY;
    o.act_bytes = 8192;
    o.lat_s = lat;
    o.bw = bw;
    o.act_ab = act;
    st_place_result r;
    memset(&r, 0, sizeof r);
    r.n_stages = 2;
    r.stages[0] = (st_place_stage){.first = 0, .last = 2, .n_rep = 1, .rep = {0}};
    r.stages[1] = (st_place_stage){.first = 2, .last = 4, .n_rep = 1, .rep = {1}};
    ck_assert_int_eq(st_place_eval(&m, w, 2, &o, &r), ST_OK);
    ck_assert_double_eq_tol(r.stages[1].link_s, 0.001 + 4096 / 1e6, 1e-12);
    r.stages[0].rep[0] = 1;
    r.stages[1].rep[0] = 0;
    ck_assert_int_eq(st_place_eval(&m, w, 2, &o, &r), ST_OK);
    ck_assert_double_eq_tol(r.stages[1].link_s, 0.002 + 8192 / 1e6, 1e-12);
    /* the planner puts the cheaper direction first */
    ck_assert_int_eq(st_place(&m, w, 2, &o, &r), ST_OK);
    if (r.n_stages == 2)
        ck_assert_uint_eq(w[r.stages[0].rep[0]].id, 1);
    /* a bad entry is refused by name */
    act[1] = NAN;
    ck_assert_int_eq(st_place(&m, w, 2, &o, &r), ST_EINVAL);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "activation bytes"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("wire_choose");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_fast_link_f32);
    tcase_add_test(tc, test_middle_link_f16);
    tcase_add_test(tc, test_slow_link_fewest_bytes);
    tcase_add_test(tc, test_hysteresis);
    tcase_add_test(tc, test_receiver_restricts);
    tcase_add_test(tc, test_unknown_inputs);
    tcase_add_test(tc, test_masks);
    tcase_add_test(tc, test_planner_per_link_bytes);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
