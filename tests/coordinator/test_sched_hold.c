/* test_sched_hold.c - the test-only step gate in the step scheduler
 * (coordinator/cluster/hold.h, st_sched_set_hold / st_sched_held): a request is
 * parked with exactly K generated ids and nothing in flight, without
 * missed steps; a named gate parks only its request; moving the gate lets
 * a request go on to the new K; a release continues every parked request
 * to the ids it would have had without the gate; a parked session whose KV
 * is forgotten (a plan switch) re-prefills and still gives those ids; a
 * cancelled parked request frees its slot; K = 0 parks before the first
 * step. Runs on the fake pipeline of sched_fake.h. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "tests/coordinator/sched_fake.h"

#define MAX_STEPS 10000

static const int32_t P0[] = {1, 7, 9, 11, 4};
static const int32_t P1[] = {1,  3,  5,  8,  13, 21, 34, 55, 6, 12,
                             18, 24, 30, 36, 42, 48, 54, 60, 5, 10};
static const int32_t P2[] = {1, 40, 41};

static const int32_t *const PROMPTS[] = {P0, P1, P2};
static const size_t LENS[] = {sizeof P0 / sizeof *P0, sizeof P1 / sizeof *P1,
                              sizeof P2 / sizeof *P2};

static void submit3(st_sched *s, uint32_t max, uint64_t *id)
{
    for (int k = 0; k < 3; k++) {
        st_gen_req g = req_of(PROMPTS[k], LENS[k], max);
        ck_assert_int_eq(st_sched_submit(s, &g, 0, &id[k]), ST_OK);
    }
}

static void set_hold(st_sched *s, bool on, uint32_t k, uint64_t req)
{
    st_hold h = {.on = on, .after_tokens = k, .request_id = req};
    st_sched_set_hold(s, &h);
}

/* check_ref - request id is done with the ids of prompt k run alone */
static void check_ref(st_sched *s, uint64_t id, int k, uint32_t max)
{
    int32_t want[256];
    uint32_t n_want;
    reference(PROMPTS[k], LENS[k], max, want, &n_want);
    st_req_view v = view(s, id);
    ck_assert(v.done);
    ck_assert_uint_eq(v.n_ids, n_want);
    ck_assert_mem_eq(v.ids, want, n_want * sizeof *want);
}

START_TEST(gate_parks_at_k_then_release)
{
    st_sched_cfg c = cfg_default();
    st_sched *s;
    ck_assert_int_eq(st_sched_new(&c, &s), ST_OK);
    uint64_t id[3], now = 0;
    submit3(s, 30, id);
    set_hold(s, true, 4, 0);
    fake f = {.forced = -1};
    drive(s, &f, &now, MAX_STEPS, NULL, NULL);
    ck_assert_uint_eq(st_sched_in_flight(s), 0);
    st_held h[4];
    ck_assert_uint_eq(st_sched_held(s, h, 4), 3);
    for (int k = 0; k < 3; k++) {
        st_req_view v = view(s, id[k]);
        ck_assert(!v.done);
        ck_assert_uint_eq(v.n_ids, 4);
        ck_assert_uint_eq(v.missed, 0); /* parked is not ready: no missed step */
        ck_assert_uint_eq(h[k].request_id, id[k]);
        ck_assert_uint_eq(h[k].tokens, 4);
    }
    const st_sched_batch *b;
    ck_assert_int_eq(st_sched_form(s, 7, now, &b), ST_OK);
    ck_assert_ptr_null(b);
    set_hold(s, false, 0, 0);
    ck_assert_uint_eq(st_sched_held(s, NULL, 0), 0);
    drive(s, &f, &now, MAX_STEPS, NULL, NULL);
    for (int k = 0; k < 3; k++)
        check_ref(s, id[k], k, 30);
    st_sched_free(s);
}
END_TEST

START_TEST(named_gate_and_moving_it)
{
    st_sched_cfg c = cfg_default();
    st_sched *s;
    ck_assert_int_eq(st_sched_new(&c, &s), ST_OK);
    uint64_t id[3], now = 0;
    submit3(s, 12, id);
    set_hold(s, true, 2, id[1]);
    fake f = {.forced = -1};
    drive(s, &f, &now, MAX_STEPS, NULL, NULL);
    check_ref(s, id[0], 0, 12);
    check_ref(s, id[2], 2, 12);
    st_held h[4];
    ck_assert_uint_eq(st_sched_held(s, h, 4), 1);
    ck_assert_uint_eq(h[0].request_id, id[1]);
    ck_assert_uint_eq(view(s, id[1]).n_ids, 2);
    set_hold(s, true, 5, 0); /* moved: it goes on to 5 */
    drive(s, &f, &now, MAX_STEPS, NULL, NULL);
    ck_assert_uint_eq(st_sched_held(s, h, 4), 1);
    ck_assert_uint_eq(h[0].tokens, 5);
    set_hold(s, false, 0, 0);
    drive(s, &f, &now, MAX_STEPS, NULL, NULL);
    check_ref(s, id[1], 1, 12);
    st_sched_free(s);
}
END_TEST

START_TEST(parked_across_a_switch)
{
    st_sched_cfg c = cfg_default();
    st_sched *s;
    ck_assert_int_eq(st_sched_new(&c, &s), ST_OK);
    uint64_t id[3], now = 0;
    submit3(s, 20, id);
    set_hold(s, true, 6, 0);
    fake f = {.forced = -1};
    drive(s, &f, &now, MAX_STEPS, NULL, NULL);
    ck_assert_uint_eq(st_sched_held(s, NULL, 0), 3);
    /* a new plan on other workers: nothing in flight blocks it, the KV is gone */
    st_sched_forget_kv(s);
    ck_assert_int_eq(st_sched_set_routes(s, 1), ST_OK);
    st_sched_stats st;
    st_sched_get_stats(s, &st);
    ck_assert_uint_eq(st.kv_reprefilled, 3);
    set_hold(s, false, 0, 0);
    fake g = {.forced = -1};
    const st_sched_batch *b;
    ck_assert_int_eq(st_sched_form(s, 7, now, &b), ST_OK);
    ck_assert_ptr_nonnull(b);
    for (uint32_t i = 0; i < b->n_rows; i++)
        ck_assert_uint_eq(b->rows[i].pos, 0); /* re-fed from the history */
    now += MS;
    fake_complete(s, &g, b, now);
    drive(s, &g, &now, MAX_STEPS, NULL, NULL);
    for (int k = 0; k < 3; k++)
        check_ref(s, id[k], k, 20);
    st_sched_free(s);
}
END_TEST

START_TEST(cancel_parked_frees_its_slot)
{
    st_sched_cfg c = cfg_default();
    st_sched *s;
    ck_assert_int_eq(st_sched_new(&c, &s), ST_OK);
    ck_assert_int_eq(st_sched_set_limits(s, 1, 40, 1), ST_OK);
    uint64_t a, b_id, now = 0;
    st_gen_req ga = req_of(P0, LENS[0], 100), gb = req_of(P2, LENS[2], 6);
    ck_assert_int_eq(st_sched_submit(s, &ga, now, &a), ST_OK);
    ck_assert_int_eq(st_sched_submit(s, &gb, now, &b_id), ST_OK);
    set_hold(s, true, 3, a);
    fake f = {.forced = -1};
    drive(s, &f, &now, MAX_STEPS, NULL, NULL);
    st_sched_stats st;
    st_sched_get_stats(s, &st);
    ck_assert_uint_eq(st.queued, 1); /* B waits for A's only slot */
    ck_assert_uint_eq(view(s, a).n_ids, 3);
    ck_assert_int_eq(st_sched_cancel(s, a, now), ST_OK);
    drive(s, &f, &now, MAX_STEPS, NULL, NULL);
    st_req_view v = view(s, a);
    ck_assert(v.done);
    ck_assert_str_eq(v.finish, "cancelled");
    ck_assert_uint_eq(v.n_ids, 3);
    check_ref(s, b_id, 2, 6);
    st_sched_free(s);
}
END_TEST

START_TEST(zero_parks_before_the_first_step)
{
    st_sched_cfg c = cfg_default();
    st_sched *s;
    ck_assert_int_eq(st_sched_new(&c, &s), ST_OK);
    uint64_t id[3], now = 0;
    set_hold(s, true, 0, 0);
    submit3(s, 8, id);
    const st_sched_batch *b;
    ck_assert_int_eq(st_sched_form(s, 7, now, &b), ST_OK);
    ck_assert_ptr_null(b);
    st_held h[4];
    ck_assert_uint_eq(st_sched_held(s, h, 2), 3); /* the count, beyond cap too */
    ck_assert_uint_eq(h[0].tokens, 0);
    st_hold got;
    st_sched_get_hold(s, &got);
    ck_assert(got.on && got.after_tokens == 0 && got.request_id == 0);
    set_hold(s, false, 0, 0);
    fake f = {.forced = -1};
    drive(s, &f, &now, MAX_STEPS, NULL, NULL);
    for (int k = 0; k < 3; k++)
        check_ref(s, id[k], k, 8);
    st_sched_free(s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sched_hold");
    TCase *tc = tcase_create("hold");
    tcase_add_test(tc, gate_parks_at_k_then_release);
    tcase_add_test(tc, named_gate_and_moving_it);
    tcase_add_test(tc, parked_across_a_switch);
    tcase_add_test(tc, cancel_parked_frees_its_slot);
    tcase_add_test(tc, zero_parks_before_the_first_step);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
