/* test_sched_batching.c - continuous batching in the step scheduler
 * (coordinator/sched/scheduler.c) against the fake pipeline (sched_fake.h):
 * prefix reuse across the turns of a client session, several disjoint and
 * balanced batches in flight (pipelining) with outputs equal to
 * single-session runs, the rotation of decode rows under a tight budget
 * (missed steps), ended sessions riding on the next batch, clients that
 * stop polling, the per-request maximum queue wait, the plan's limits and
 * the LRU eviction of idle client sessions. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/coordinator/sched_fake.h"

/* a follow-up turn sends the whole conversation: only what the KV does
 * not hold is fed (the longest common prefix is reused) */
START_TEST(client_session_reuses_kv)
{
    st_sched_cfg c = cfg_default();
    st_sched *s;
    ck_assert_int_eq(st_sched_new(&c, &s), ST_OK);
    int32_t p[5] = {1, 3, 4, 5, 6};
    st_gen_req g = req_of(p, 5, 3);
    g.client_session = 77;
    uint64_t a, b2, x;
    uint64_t now = 0;
    ck_assert_int_eq(st_sched_submit(s, &g, now, &a), ST_OK);
    ck_assert_int_eq(st_sched_submit(s, &g, now, &x), ST_EBUSY); /* session busy */
    fake f = {.forced = -1};
    drive(s, &f, &now, 100, NULL, NULL);
    st_req_view v = view(s, a);
    ck_assert(v.done);
    ck_assert_uint_eq(v.reused, 0);
    uint64_t ended[4];
    ck_assert_uint_eq(st_sched_take_ended(s, ended, 4), 0); /* kept for the next turn */
    /* turn 2: history (5 prompt + 3 generated) + 2 new ids */
    int32_t q[10];
    memcpy(q, p, sizeof p);
    memcpy(q + 5, v.ids, 3 * sizeof *q);
    q[8] = 7;
    q[9] = 8;
    g = req_of(q, 10, 3);
    g.client_session = 77;
    ck_assert_int_eq(st_sched_submit(s, &g, now, &b2), ST_OK);
    const st_sched_batch *b;
    ck_assert_int_eq(st_sched_form(s, 7, now, &b), ST_OK);
    /* 7 cached (the last sample was never fed): feed q[7..10) */
    ck_assert_uint_eq(b->rows[0].pos, 7);
    ck_assert_uint_eq(b->rows[0].n_tok, 3);
    ck_assert_int_eq(b->rows[0].tokens[1], 7);
    ck_assert_int_eq(b->rows[0].tokens[2], 8);
    st_sched_result_row res[4];
    uint64_t rng[4][ST_RNG_WORDS];
    size_t n = fake_run(&f, b, res, rng);
    ck_assert_int_eq(st_sched_complete(s, b->id, 7, res, n, now), ST_OK);
    drive(s, &f, &now, 100, NULL, NULL);
    v = view(s, b2);
    ck_assert(v.done);
    ck_assert_uint_eq(v.reused, 7);
    /* the same ids as a fresh session fed the whole conversation */
    int32_t ref[8];
    uint32_t nref;
    reference(q, 10, 3, ref, &nref);
    ck_assert_uint_eq(v.n_ids, nref);
    ck_assert_int_eq(memcmp(v.ids, ref, nref * sizeof *ref), 0);
    /* turn 3 diverges after 3 ids: the KV from position 3 is rewritten */
    int32_t d[6] = {1, 3, 4, 60, 61, 62};
    g = req_of(d, 6, 2);
    g.client_session = 77;
    ck_assert_int_eq(st_sched_submit(s, &g, now, &x), ST_OK);
    ck_assert_int_eq(st_sched_form(s, 7, now, &b), ST_OK);
    ck_assert_uint_eq(b->rows[0].pos, 3);
    ck_assert_uint_eq(b->rows[0].n_tok, 3);
    n = fake_run(&f, b, res, rng);
    ck_assert_int_eq(st_sched_complete(s, b->id, 7, res, n, now), ST_OK);
    drive(s, &f, &now, 100, NULL, NULL);
    reference(d, 6, 2, ref, &nref);
    v = view(s, x);
    ck_assert_uint_eq(v.reused, 3);
    ck_assert_int_eq(memcmp(v.ids, ref, nref * sizeof *ref), 0);
    /* turn 4: a prompt that is a prefix of the history still feeds its
     * last id (the first sample needs its logits) */
    g = req_of(d, 4, 1);
    g.client_session = 77;
    ck_assert_int_eq(st_sched_submit(s, &g, now, &x), ST_OK);
    ck_assert_int_eq(st_sched_form(s, 7, now, &b), ST_OK);
    ck_assert_uint_eq(b->rows[0].pos, 3);
    ck_assert_uint_eq(b->rows[0].n_tok, 1);
    ck_assert(b->rows[0].sample);
    st_sched_stats st;
    st_sched_get_stats(s, &st);
    ck_assert_uint_eq(st.reused_tokens, 7 + 3 + 3);
    st_sched_free(s);
}
END_TEST

/* depth 2: two disjoint, balanced batches in flight; outputs equal the
 * single-session references */
START_TEST(pipelined_groups)
{
    st_sched_cfg c = cfg_default();
    c.max_sessions = 8;
    c.max_requests = 16;
    c.max_in_flight = 4;
    c.max_batch_tokens = 64;
    st_sched *s;
    ck_assert_int_eq(st_sched_new(&c, &s), ST_OK);
    ck_assert_int_eq(st_sched_set_limits(s, 8, 64, 2), ST_OK);
    int32_t p[8][12];
    uint32_t np[8], nmax[8];
    uint64_t id[8], now = 0;
    for (int k = 0; k < 8; k++) {
        np[k] = 2 + (uint32_t)k;
        nmax[k] = 6 + (uint32_t)(k % 3) * 4;
        for (uint32_t j = 0; j < np[k]; j++)
            p[k][j] = 3 + (k * 11 + (int)j * 5) % 60;
        st_gen_req g = req_of(p[k], np[k], nmax[k]);
        ck_assert_int_eq(st_sched_submit(s, &g, now, &id[k]), ST_OK);
    }
    fake f = {.forced = -1};
    const st_sched_batch *q[4];
    size_t nq = 0;
    int rounds = 0;
    for (;;) {
        const st_sched_batch *b;
        while (st_sched_form(s, 7, now, &b) == ST_OK && b != NULL) {
            ck_assert_uint_lt(nq, 2);        /* never more than depth in flight */
            ck_assert_uint_le(b->n_rows, 4); /* ceil(8 / 2) */
            for (size_t k = 0; k < nq; k++)  /* disjoint groups */
                for (uint32_t i = 0; i < b->n_rows; i++)
                    for (uint32_t j = 0; j < q[k]->n_rows; j++)
                        ck_assert_uint_ne(b->rows[i].session_id, q[k]->rows[j].session_id);
            q[nq++] = b;
        }
        if (nq == 0)
            break;
        if (rounds++ < 4)
            ck_assert_uint_eq(nq, 2);
        now += MS;
        fake_complete(s, &f, q[0], now);
        memmove(q, q + 1, --nq * sizeof *q);
    }
    st_sched_stats st;
    st_sched_get_stats(s, &st);
    ck_assert_uint_eq(st.peak_in_flight, 2);
    ck_assert_uint_eq(st.depth, 2);
    for (int k = 0; k < 8; k++) {
        int32_t ref[64];
        uint32_t nref;
        reference(p[k], np[k], nmax[k], ref, &nref);
        st_req_view v = view(s, id[k]);
        ck_assert(v.done);
        ck_assert_uint_eq(v.n_ids, nref);
        ck_assert_int_eq(memcmp(v.ids, ref, nref * sizeof *ref), 0);
        ck_assert_uint_eq(v.missed, 0);
        for (uint32_t i = 1; i < v.n_ids; i++)
            ck_assert_uint_ge(v.times[i], v.times[i - 1]);
    }
    st_sched_free(s);
}
END_TEST

/* a budget too small for every decode row: the ones left out count a
 * missed step and go first next time, so nobody waits two steps in a row */
START_TEST(missed_steps_rotate)
{
    st_sched_cfg c = cfg_default();
    c.max_sessions = 5;
    c.max_batch_tokens = 3;
    c.chunk = 3;
    st_sched *s;
    ck_assert_int_eq(st_sched_new(&c, &s), ST_OK);
    int32_t p[1] = {9};
    uint64_t id[5], now = 0;
    for (int k = 0; k < 5; k++) {
        st_gen_req g = req_of(p, 1, 20);
        ck_assert_int_eq(st_sched_submit(s, &g, now, &id[k]), ST_OK);
    }
    fake f = {.forced = -1};
    uint64_t last_in[5] = {0};
    for (int step = 0; step < 30; step++) {
        const st_sched_batch *b;
        ck_assert_int_eq(st_sched_form(s, 7, now, &b), ST_OK);
        ck_assert_ptr_nonnull(b);
        ck_assert_uint_le(b->n_tokens, 3);
        now += MS;
        fake_complete(s, &f, b, now);
        for (int k = 0; k < 5; k++) {
            st_req_view v = view(s, id[k]);
            if (v.n_ids > 0 && v.times[v.n_ids - 1] == now)
                last_in[k] = (uint64_t)step;
            if (step >= 5 && !v.done) /* in at least every second step */
                ck_assert_uint_le((uint64_t)step - last_in[k], 1);
        }
    }
    uint32_t missed = 0;
    for (int k = 0; k < 5; k++)
        missed += view(s, id[k]).missed;
    ck_assert_uint_gt(missed, 10);
    st_sched_free(s);
}
END_TEST

/* an ended session rides on the next batch (and is listed for EndSessions) */
START_TEST(end_ids_in_next_batch)
{
    st_sched_cfg c = cfg_default();
    c.max_sessions = 1;
    st_sched *s;
    ck_assert_int_eq(st_sched_new(&c, &s), ST_OK);
    int32_t p[2] = {1, 3};
    st_gen_req g = req_of(p, 2, 10);
    uint64_t a, b2, now = 0;
    ck_assert_int_eq(st_sched_submit(s, &g, now, &a), ST_OK);
    ck_assert_int_eq(st_sched_submit(s, &g, now, &b2), ST_OK);
    const st_sched_batch *b;
    ck_assert_int_eq(st_sched_form(s, 7, now, &b), ST_OK);
    ck_assert_uint_eq(b->n_end, 0);
    uint64_t sa = b->rows[0].session_id;
    fake f = {.forced = -1};
    fake_complete(s, &f, b, now);
    ck_assert_int_eq(st_sched_cancel(s, a, now), ST_OK);
    ck_assert_int_eq(st_sched_form(s, 7, now, &b), ST_OK); /* B takes A's slot at once */
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_ne(b->rows[0].session_id, sa);
    ck_assert_uint_eq(b->rows[0].pos, 0);
    ck_assert_uint_eq(b->n_end, 1);
    ck_assert_uint_eq(b->end_ids[0], sa);
    uint64_t ended[4];
    ck_assert_uint_eq(st_sched_take_ended(s, ended, 4), 1);
    ck_assert_uint_eq(ended[0], sa);
    fake_complete(s, &f, b, now);
    ck_assert_int_eq(st_sched_form(s, 7, now, &b), ST_OK);
    ck_assert_uint_eq(b->n_end, 0); /* each end rides once */
    st_sched_free(s);
}
END_TEST

/* a client that stops polling loses its request (and its slot) */
START_TEST(client_timeout)
{
    st_sched_cfg c = cfg_default();
    c.client_timeout_ns = 2000 * MS;
    c.max_sessions = 1;
    st_sched *s;
    ck_assert_int_eq(st_sched_new(&c, &s), ST_OK);
    int32_t p[2] = {1, 3};
    st_gen_req g = req_of(p, 2, 100);
    uint64_t a, b2, now = 0;
    ck_assert_int_eq(st_sched_submit(s, &g, now, &a), ST_OK);
    ck_assert_int_eq(st_sched_submit(s, &g, now, &b2), ST_OK);
    fake f = {.forced = -1};
    for (int step = 0; step < 40; step++) { /* B's client polls, A's stops at 1.5 s */
        const st_sched_batch *b;
        ck_assert_int_eq(st_sched_form(s, 7, now, &b), ST_OK);
        now += 100 * MS;
        if (now <= 1500 * MS)
            ck_assert_int_eq(st_sched_touch(s, a, now), ST_OK);
        ck_assert_int_eq(st_sched_touch(s, b2, now), ST_OK);
        if (b)
            fake_complete(s, &f, b, now);
        st_sched_tick(s, now, NULL);
        if (now < 3500 * MS)
            ck_assert(!view(s, a).done);
    }
    st_req_view v = view(s, a);
    ck_assert(v.done);
    ck_assert_str_eq(v.finish, "cancelled");
    ck_assert_msg(strstr(v.err_msg, "stopped polling"), "%s", v.err_msg);
    v = view(s, b2);
    ck_assert(!v.done);
    ck_assert_uint_gt(v.n_ids, 0); /* B got A's slot */
    st_sched_stats st;
    st_sched_get_stats(s, &st);
    ck_assert_uint_eq(st.client_gone, 1);
    ck_assert_int_eq(st_sched_touch(s, 4242, now), ST_ENOENT);
    st_sched_free(s);
}
END_TEST

/* per-request maximum queue wait, plan limits, LRU eviction of idle client
 * sessions */
START_TEST(limits_queue_wait_and_lru)
{
    st_sched_cfg c = cfg_default();
    st_sched *s;
    ck_assert_int_eq(st_sched_new(&c, &s), ST_OK);
    ck_assert_int_eq(st_sched_set_limits(s, 0, 10, 1), ST_EINVAL);
    ck_assert_int_eq(st_sched_set_limits(s, 2, 1000, 9), ST_OK);
    st_sched_stats st;
    st_sched_get_stats(s, &st);
    ck_assert_uint_eq(st.cap_sessions, 2);
    ck_assert_uint_eq(st.max_batch_tokens, 40); /* clamped to the configuration */
    ck_assert_uint_eq(st.depth, 1);
    int32_t p[2] = {1, 3};
    uint64_t id[5], now = 0;
    fake f = {.forced = -1};
    for (int k = 0; k < 2; k++) { /* two idle client sessions, 77 used last */
        st_gen_req g = req_of(p, 2, 2);
        g.client_session = 88 - 11 * (uint64_t)k;
        ck_assert_int_eq(st_sched_submit(s, &g, now, &id[k]), ST_OK);
        now += MS;
        drive(s, &f, &now, 100, NULL, NULL);
    }
    st_sched_get_stats(s, &st);
    ck_assert_uint_eq(st.sessions, 2);
    ck_assert_uint_eq(st.idle_sessions, 2);
    /* a running fresh request takes the LRU idle slot (session 88) */
    st_gen_req g = req_of(p, 2, 50);
    ck_assert_int_eq(st_sched_submit(s, &g, now, &id[2]), ST_OK);
    const st_sched_batch *b;
    ck_assert_int_eq(st_sched_form(s, 7, now, &b), ST_OK);
    st_sched_get_stats(s, &st);
    ck_assert_uint_eq(st.sessions_evicted, 1);
    ck_assert_uint_eq(st.sessions, 2);
    fake_complete(s, &f, b, now);
    /* 77 is still there: its next turn reuses its KV */
    int32_t q[4] = {1, 3, 0, 0};
    st_req_view v1 = view(s, id[1]);
    q[2] = v1.ids[0];
    q[3] = 9;
    g = req_of(q, 4, 2);
    g.client_session = 77;
    ck_assert_int_eq(st_sched_submit(s, &g, now, &id[3]), ST_OK);
    ck_assert_int_eq(st_sched_form(s, 7, now, &b), ST_OK);
    ck_assert_uint_eq(view(s, id[3]).reused, 3);
    fake_complete(s, &f, b, now);
    /* both slots busy now: a fresh request waits, refused after its own
     * maximum queue wait (100 ms, below the 5 s default) */
    g = req_of(p, 2, 5);
    g.max_queue_ns = 100 * MS;
    ck_assert_int_eq(st_sched_submit(s, &g, now, &id[4]), ST_OK);
    ck_assert_int_eq(st_sched_form(s, 7, now, &b), ST_OK);
    ck_assert_uint_eq(view(s, id[4]).start_ns, 0);
    st_sched_tick(s, now + 99 * MS, NULL);
    ck_assert(!view(s, id[4]).done);
    st_sched_tick(s, now + 100 * MS, NULL);
    st_req_view v = view(s, id[4]);
    ck_assert(v.done);
    ck_assert_int_eq(v.err, ST_EBUSY);
    ck_assert_msg(strstr(v.err_msg, "maximum queue wait"), "%s", v.err_msg);
    st_sched_get_stats(s, &st);
    ck_assert_uint_eq(st.queue_expired, 1);
    st_sched_free(s);
}
END_TEST

/* the LRU idle session is spared when a queued request continues it */
START_TEST(eviction_spares_wanted_session)
{
    st_sched_cfg c = cfg_default();
    c.max_sessions = 2;
    st_sched *s;
    ck_assert_int_eq(st_sched_new(&c, &s), ST_OK);
    int32_t p[3] = {1, 3, 4};
    uint64_t id[4], now = 0;
    fake f = {.forced = -1};
    for (int k = 0; k < 2; k++) { /* 88 idle since longest, then 77 */
        st_gen_req g = req_of(p, 3, 2);
        g.client_session = 88 - 11 * (uint64_t)k;
        ck_assert_int_eq(st_sched_submit(s, &g, now, &id[k]), ST_OK);
        now += MS;
        drive(s, &f, &now, 100, NULL, NULL);
    }
    st_gen_req g = req_of(p, 3, 2); /* a fresh request first ... */
    ck_assert_int_eq(st_sched_submit(s, &g, now, &id[2]), ST_OK);
    int32_t q[5] = {1, 3, 4, 0, 7}; /* ... then 88's next turn */
    q[3] = view(s, id[0]).ids[0];
    g = req_of(q, 5, 2);
    g.client_session = 88;
    ck_assert_int_eq(st_sched_submit(s, &g, now, &id[3]), ST_OK);
    const st_sched_batch *b;
    ck_assert_int_eq(st_sched_form(s, 7, now, &b), ST_OK);
    ck_assert_uint_eq(b->n_rows, 2);             /* both run: 77 made room, not 88 */
    ck_assert_uint_eq(view(s, id[3]).reused, 4); /* its KV kept all it fed */
    st_sched_free(s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sched_batching");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, client_session_reuses_kv);
    tcase_add_test(tc, pipelined_groups);
    tcase_add_test(tc, missed_steps_rotate);
    tcase_add_test(tc, end_ids_in_next_batch);
    tcase_add_test(tc, client_timeout);
    tcase_add_test(tc, limits_queue_wait_and_lru);
    tcase_add_test(tc, eviction_spares_wanted_session);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
