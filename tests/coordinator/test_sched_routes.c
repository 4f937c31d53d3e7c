/* test_sched_routes.c - routes through replicated plans in the step
 * scheduler (coordinator/sched/scheduler.c): every session pinned to one route,
 * batches that never mix routes, new sessions on the least-loaded route,
 * both routes in flight at once, re-pinning on a new plan (a moved session
 * re-prefills; one whose route kept its workers keeps its KV), and ended
 * sessions reaching their own route in band.
 *
 * Each route has its own fake pipeline (sched_fake.h), as each replica
 * keeps the KV of its own sessions: a row that reaches another route than
 * the one holding its session's KV leaves a gap there and fails. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/coordinator/sched_fake.h"

#define NR 3 /* fakes: at most 3 routes in these tests */

/* check_batch - every row's session is pinned to the batch's route */
static void check_batch(const st_sched *s, const st_sched_batch *b)
{
    for (uint32_t i = 0; i < b->n_rows; i++)
        ck_assert_int_eq(st_sched_route_of(s, b->rows[i].session_id), (int)b->route);
}

/* run_all - forms every batch allowed, completes the oldest on its
 * route's fake, until nothing is left; returns the most routes that had a
 * batch in flight at the same time. */
static uint32_t run_all(st_sched *s, fake *f, uint64_t *now, uint32_t per_route)
{
    const st_sched_batch *q[16];
    size_t nq = 0;
    uint32_t most = 0;
    for (int guard = 0; guard < 10000; guard++) {
        const st_sched_batch *b;
        while (st_sched_form(s, 7, *now, &b) == ST_OK && b != NULL) {
            check_batch(s, b);
            ck_assert_uint_lt(b->route, NR);
            q[nq++] = b;
        }
        if (nq == 0)
            return most;
        uint32_t per[NR] = {0}, routes = 0;
        for (size_t k = 0; k < nq; k++)
            per[q[k]->route]++;
        for (int r = 0; r < NR; r++) {
            ck_assert_uint_le(per[r], per_route);
            routes += per[r] > 0;
        }
        if (routes > most)
            most = routes;
        *now += MS;
        fake_complete(s, &f[q[0]->route], q[0], *now);
        memmove(q, q + 1, --nq * sizeof *q);
    }
    ck_abort_msg("the scheduler did not finish");
    return most;
}

static st_sched *new_sched(uint32_t depth, uint32_t routes)
{
    st_sched_cfg c = cfg_default();
    c.max_sessions = 8;
    c.max_requests = 16;
    c.max_in_flight = 8;
    c.max_batch_tokens = 64;
    st_sched *s;
    ck_assert_int_eq(st_sched_new(&c, &s), ST_OK);
    ck_assert_int_eq(st_sched_set_limits(s, 8, 64, depth), ST_OK);
    ck_assert_int_eq(st_sched_set_routes(s, routes), ST_OK);
    return s;
}

static void prompt(int k, int32_t *p, uint32_t *n)
{
    *n = 2 + (uint32_t)k % 5;
    for (uint32_t j = 0; j < *n; j++)
        p[j] = 3 + (k * 13 + (int)j * 7) % 60;
}

static void check_outputs(st_sched *s, const uint64_t *id, int n, uint32_t max)
{
    for (int k = 0; k < n; k++) {
        int32_t p[8], ref[64];
        uint32_t np, nref;
        prompt(k, p, &np);
        reference(p, np, max, ref, &nref);
        st_req_view v = view(s, id[k]);
        ck_assert(v.done);
        ck_assert_str_eq(v.finish, "length");
        ck_assert_uint_eq(v.n_ids, nref);
        ck_assert_int_eq(memcmp(v.ids, ref, nref * sizeof *ref), 0);
    }
}

/* submit_prompts - submits greedy requests for prompt(0..n) of max new
 * ids each at time now; their ids go to id[0..n). */
static void submit_prompts(st_sched *s, int n, uint32_t max, uint64_t now, uint64_t *id)
{
    for (int k = 0; k < n; k++) {
        int32_t p[8];
        uint32_t np;
        prompt(k, p, &np);
        st_gen_req g = req_of(p, np, max);
        ck_assert_int_eq(st_sched_submit(s, &g, now, &id[k]), ST_OK);
    }
}

/* fakes_init - NR empty fake pipelines that sample greedily. */
static void fakes_init(fake *f)
{
    memset(f, 0, NR * sizeof *f);
    for (int r = 0; r < NR; r++)
        f[r].forced = -1;
}

/* 8 sessions on 2 routes, depth 4: 4 sessions per route, batches of one
 * route only, both routes in flight at once, at most 2 batches per route,
 * outputs equal single-session runs */
START_TEST(routes_pin_and_overlap)
{
    st_sched *s = new_sched(4, 2);
    uint64_t id[8], now = 0;
    submit_prompts(s, 8, 10, now, id);
    const st_sched_batch *b;
    ck_assert_int_eq(st_sched_form(s, 7, now, &b), ST_OK); /* admits all 8 */
    ck_assert_ptr_nonnull(b);
    st_sched_stats st;
    st_sched_get_stats(s, &st);
    ck_assert_uint_eq(st.routes, 2);
    ck_assert_uint_eq(st.route_sessions[0], 4);
    ck_assert_uint_eq(st.route_sessions[1], 4);
    ck_assert_uint_le(b->n_rows, 2); /* ceil(4 sessions / 2 batches of its route) */
    fake f[NR];
    fakes_init(f);
    ck_assert_int_eq(st_sched_fail(s, b->id, ST_ENNG, "not sent", ST_SCHED_REQUEUE, now), ST_OK);
    uint32_t most = run_all(s, f, &now, 2);
    ck_assert_uint_eq(most, 2);
    st_sched_get_stats(s, &st);
    ck_assert_uint_gt(st.route_batches[0], 0);
    ck_assert_uint_gt(st.route_batches[1], 0);
    ck_assert_uint_eq(st.peak_in_flight, 4);
    check_outputs(s, id, 8, 10);
    st_sched_free(s);
}
END_TEST

/* a new session takes the route with the fewest running sessions */
START_TEST(least_loaded_route)
{
    st_sched *s = new_sched(2, 2);
    uint64_t id[4], now = 0;
    int32_t p[3] = {1, 5, 6};
    st_gen_req g = req_of(p, 3, 50);
    for (int k = 0; k < 3; k++)
        ck_assert_int_eq(st_sched_submit(s, &g, now, &id[k]), ST_OK);
    const st_sched_batch *b;
    ck_assert_int_eq(st_sched_form(s, 7, now, &b), ST_OK);
    int count[2] = {0, 0};
    for (uint64_t x = 1; x < 100; x++) /* sessions count up from id_base */
        if (st_sched_route_of(s, 1000 + x) >= 0)
            count[st_sched_route_of(s, 1000 + x)]++;
    ck_assert_int_eq(count[0] + count[1], 3);
    ck_assert(count[0] == 2 || count[1] == 2);
    int light = count[0] < count[1] ? 0 : 1;
    g.max_tokens = 2;
    ck_assert_int_eq(st_sched_submit(s, &g, now, &id[3]), ST_OK);
    const st_sched_batch *b2;
    ck_assert_int_eq(st_sched_form(s, 7, now, &b2), ST_OK); /* admits the fourth */
    int c2[2] = {0, 0};
    for (uint64_t x = 1; x < 100; x++)
        if (st_sched_route_of(s, 1000 + x) >= 0)
            c2[st_sched_route_of(s, 1000 + x)]++;
    ck_assert_int_eq(c2[light], 2);
    ck_assert_int_eq(c2[1 - light], 2);
    st_sched_free(s);
}
END_TEST

/* a new plan with 3 routes: sessions are spread evenly and the ones that
 * moved re-prefill from position 0 on their new route (else the new
 * route's fake would see a gap); outputs still equal single runs */
START_TEST(set_routes_repins)
{
    st_sched *s = new_sched(2, 1);
    uint64_t id[6], now = 0;
    submit_prompts(s, 6, 12, now, id);
    fake f[NR];
    fakes_init(f);
    /* a few steps on one route */
    for (int step = 0; step < 6; step++) {
        const st_sched_batch *b;
        ck_assert_int_eq(st_sched_form(s, 7, now, &b), ST_OK);
        ck_assert_ptr_nonnull(b);
        ck_assert_uint_eq(b->route, 0);
        now += MS;
        fake_complete(s, &f[0], b, now);
    }
    ck_assert_int_eq(st_sched_set_routes(s, 0), ST_EINVAL);
    ck_assert_int_eq(st_sched_set_routes(s, ST_SCHED_MAX_ROUTES + 1), ST_EINVAL);
    ck_assert_int_eq(st_sched_set_limits(s, 8, 64, 6), ST_OK);
    ck_assert_int_eq(st_sched_set_routes(s, 3), ST_OK); /* KV kept: only movers forget */
    st_sched_stats st;
    st_sched_get_stats(s, &st);
    ck_assert_uint_eq(st.route_sessions[0], 2);
    ck_assert_uint_eq(st.route_sessions[1], 2);
    ck_assert_uint_eq(st.route_sessions[2], 2);
    ck_assert_uint_eq(st.route_batches[0], 0); /* counted per plan */
    uint32_t most = run_all(s, f, &now, 2);
    ck_assert_uint_eq(most, 3);
    check_outputs(s, id, 6, 12);
    st_sched_free(s);
}
END_TEST

/* a new plan that keeps one route's workers (the other route's replica
 * left): st_sched_keep_kv keeps that route's sessions and their KV (their
 * next rows continue where they were, on the same fake), the other
 * route's sessions re-prefill from position 0; outputs equal single runs */
START_TEST(keep_kv_on_same_workers)
{
    st_sched *s = new_sched(2, 2);
    uint64_t id[4], now = 0;
    submit_prompts(s, 4, 12, now, id);
    fake f[NR];
    fakes_init(f);
    for (int step = 0; step < 6; step++) { /* both routes, one batch each at a time */
        const st_sched_batch *b;
        ck_assert_int_eq(st_sched_form(s, 7, now, &b), ST_OK);
        ck_assert_ptr_nonnull(b);
        now += MS;
        fake_complete(s, &f[b->route], b, now);
    }
    int was[4], on1 = 0;
    for (int k = 0; k < 4; k++) {
        was[k] = st_sched_route_of(s, 1001 + (uint64_t)k);
        on1 += was[k] == 1;
    }
    ck_assert_int_eq(on1, 2);
    /* the new plan: one route, through old route 1's workers */
    const int32_t map[2] = {-1, 0};
    st_sched_keep_kv(s, map, 2);
    st_sched_stats st;
    st_sched_get_stats(s, &st);
    ck_assert_uint_eq(st.kv_kept, 2);
    ck_assert_uint_eq(st.kv_reprefilled, 2);
    ck_assert_int_eq(st_sched_set_limits(s, 8, 64, 1), ST_OK);
    ck_assert_int_eq(st_sched_set_routes(s, 1), ST_OK);
    fake g[NR];
    memset(g, 0, sizeof g);
    g[0] = f[1]; /* its workers, its KV */
    const st_sched_batch *b;
    ck_assert_int_eq(st_sched_form(s, 7, now, &b), ST_OK);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(b->route, 0);
    ck_assert_uint_eq(b->n_rows, 4);
    for (uint32_t i = 0; i < b->n_rows; i++) {
        int k = (int)(b->rows[i].session_id - 1001);
        if (was[k] == 1)
            ck_assert_uint_gt(b->rows[i].pos, 0); /* continues: no re-prefill */
        else
            ck_assert_uint_eq(b->rows[i].pos, 0); /* its KV left with the replica */
    }
    now += MS;
    fake_complete(s, &g[0], b, now);
    run_all(s, g, &now, 1);
    check_outputs(s, id, 4, 12);
    st_sched_free(s);
}
END_TEST

/* an ended session rides on every next batch until one of its own route
 * took it (that route's replicas hold its KV) */
START_TEST(ends_reach_their_route)
{
    st_sched *s = new_sched(2, 2);
    uint64_t a, b_id, c_id, now = 0;
    int32_t p[3] = {1, 5, 6};
    st_gen_req g = req_of(p, 3, 1);
    ck_assert_int_eq(st_sched_submit(s, &g, now, &a), ST_OK); /* one id, then it ends */
    g.max_tokens = 20;
    ck_assert_int_eq(st_sched_submit(s, &g, now, &b_id), ST_OK);
    fake f[NR];
    fakes_init(f);
    const st_sched_batch *x, *y;
    ck_assert_int_eq(st_sched_form(s, 7, now, &x), ST_OK);
    ck_assert_int_eq(st_sched_form(s, 7, now, &y), ST_OK);
    ck_assert_ptr_nonnull(x);
    ck_assert_ptr_nonnull(y);
    /* sessions count up from id_base 1000 in arrival order: a is 1001 on
     * route 0, b is 1002 on route 1 (the least loaded then) */
    ck_assert_int_eq(st_sched_route_of(s, 1001), 0);
    ck_assert_int_eq(st_sched_route_of(s, 1002), 1);
    ck_assert_uint_eq(x->route, 0);
    ck_assert_uint_eq(y->route, 1);
    check_batch(s, x);
    check_batch(s, y);
    now += MS;
    fake_complete(s, &f[0], x, now); /* a ends */
    ck_assert(view(s, a).done);
    ck_assert_int_eq(st_sched_route_of(s, 1001), -1);
    now += MS;
    fake_complete(s, &f[1], y, now);
    const st_sched_batch *n1;
    ck_assert_int_eq(st_sched_form(s, 7, now, &n1), ST_OK); /* b's route carries a's end */
    ck_assert_ptr_nonnull(n1);
    ck_assert_uint_eq(n1->route, 1);
    ck_assert_uint_eq(n1->n_end, 1);
    ck_assert_uint_eq(n1->end_ids[0], 1001);
    g.max_tokens = 2;
    ck_assert_int_eq(st_sched_submit(s, &g, now, &c_id), ST_OK);
    const st_sched_batch *n2;
    ck_assert_int_eq(st_sched_form(s, 7, now, &n2), ST_OK);
    ck_assert_int_eq(st_sched_route_of(s, 1003), 0); /* the emptier route: a's */
    ck_assert_ptr_nonnull(n2);
    ck_assert_uint_eq(n2->route, 0);
    ck_assert_uint_eq(n2->n_end, 1); /* again, now on its own route */
    ck_assert_uint_eq(n2->end_ids[0], 1001);
    now += MS;
    fake_complete(s, &f[1], n1, now);
    now += MS;
    fake_complete(s, &f[0], n2, now);
    const st_sched_batch *n3;
    ck_assert_int_eq(st_sched_form(s, 7, now, &n3), ST_OK);
    ck_assert_ptr_nonnull(n3);
    ck_assert_uint_eq(n3->n_end, 0); /* done: its route took it */
    now += MS;
    fake_complete(s, &f[n3->route], n3, now);
    run_all(s, f, &now, 1);
    ck_assert(view(s, b_id).done);
    ck_assert(view(s, c_id).done);
    st_sched_free(s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sched_routes");
    TCase *tc = tcase_create("routes");
    tcase_add_test(tc, routes_pin_and_overlap);
    tcase_add_test(tc, least_loaded_route);
    tcase_add_test(tc, set_routes_repins);
    tcase_add_test(tc, keep_kv_on_same_workers);
    tcase_add_test(tc, ends_reach_their_route);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
