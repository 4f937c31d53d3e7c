/* test_scheduler.c - the step scheduler (coordinator/sched/scheduler.c), as pure
 * logic against a fake pipeline.
 *
 * The fake keeps, per session id, the ids at each KV position, refuses a
 * row that would leave a gap (as the stage engine does), and "samples" the
 * next id as a hash of the whole context, so the id depends on every
 * position being right. Generation through the scheduler is compared with
 * generation under faults (a plan switch forgetting the KV, a failed batch
 * retried): the ids must be identical, nothing lost or repeated (INV-4 at
 * the scheduler's level). Also: batch formation (decode rows first,
 * prefill chunks, the token budget), validation errors, EOS / length /
 * stop string / context rules, UTF-8-safe streamed text, RNG state and
 * penalty history in rows, deadlines, queueing and expiry. The fake
 * pipeline is in sched_fake.c; continuous batching (pipelining, sessions,
 * clients going away) is tested in test_sched_batching.c. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/text/tokenizer.h"
#include "coordinator/sched/scheduler.h"
#include "tests/coordinator/sched_fake.h"

/* ---- tests ---- */

START_TEST(validation)
{
    st_sched_cfg c = cfg_default();
    st_sched *s;
    ck_assert_int_eq(st_sched_new(&c, &s), ST_OK);
    int32_t p[3] = {1, 5, 9};
    uint64_t id;
    st_gen_req g = req_of(p, 0, 10);
    ck_assert_int_eq(st_sched_submit(s, &g, 0, &id), ST_EINVAL);
    ck_assert_str_eq(st_errdetail(), "the prompt is empty");
    int32_t bad[2] = {1, V};
    g = req_of(bad, 2, 10);
    ck_assert_int_eq(st_sched_submit(s, &g, 0, &id), ST_ERANGE);
    ck_assert_msg(strstr(st_errdetail(), "prompt_ids[1] = 64 is outside the vocabulary of 64"),
                  "%s", st_errdetail());
    g = req_of(p, 3, 0);
    ck_assert_int_eq(st_sched_submit(s, &g, 0, &id), ST_EINVAL);
    ck_assert_msg(strstr(st_errdetail(), "max_tokens is 0"), "%s", st_errdetail());
    g = req_of(p, 3, 257);
    ck_assert_int_eq(st_sched_submit(s, &g, 0, &id), ST_EINVAL);
    ck_assert_msg(strstr(st_errdetail(), "exceeds the context of 256"), "%s", st_errdetail());
    int32_t *longp = calloc(256, sizeof *longp);
    g = req_of(longp, 256, 10);
    ck_assert_int_eq(st_sched_submit(s, &g, 0, &id), ST_EINVAL);
    ck_assert_msg(strstr(st_errdetail(), "does not fit the context"), "%s", st_errdetail());
    free(longp);
    g = req_of(p, 3, 10);
    g.sp.temp = NAN;
    ck_assert_int_eq(st_sched_submit(s, &g, 0, &id), ST_EINVAL);
    ck_assert_msg(strstr(st_errdetail(), "temp"), "%s", st_errdetail());
    g.sp.temp = -1;
    ck_assert_int_eq(st_sched_submit(s, &g, 0, &id), ST_EINVAL);
    g = req_of(p, 3, 10);
    const char *stops[1] = {""};
    g.stop = stops;
    g.n_stop = 1;
    ck_assert_int_eq(st_sched_submit(s, &g, 0, &id), ST_EINVAL);
    ck_assert_msg(strstr(st_errdetail(), "stop[0]"), "%s", st_errdetail());
    /* the request table bound */
    g = req_of(p, 3, 10);
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(st_sched_submit(s, &g, 0, &id), ST_OK);
    ck_assert_int_eq(st_sched_submit(s, &g, 0, &id), ST_EBUSY);
    ck_assert_uint_eq(st_sched_n_requests(s), 8);
    st_sched_free(s);
}
END_TEST

START_TEST(prefill_chunks_then_decode)
{
    st_sched_cfg c = cfg_default();
    st_sched *s;
    ck_assert_int_eq(st_sched_new(&c, &s), ST_OK);
    int32_t p[37];
    for (int i = 0; i < 37; i++)
        p[i] = 3 + i;
    st_gen_req g = req_of(p, 37, 5);
    uint64_t id;
    ck_assert_int_eq(st_sched_submit(s, &g, 0, &id), ST_OK);
    fake f = {.forced = -1};
    st_sched_result_row res[8];
    uint64_t rng[8][4];
    uint32_t want_pos[] = {0, 16, 32, 37, 38, 39, 40};
    uint32_t want_n[] = {16, 16, 5, 1, 1, 1, 1};
    for (int step = 0; step < 7; step++) {
        const st_sched_batch *b;
        ck_assert_int_eq(st_sched_form(s, 7, 0, &b), ST_OK);
        ck_assert_ptr_nonnull(b);
        ck_assert_uint_eq(b->n_rows, 1);
        ck_assert_uint_eq(b->rows[0].pos, want_pos[step]);
        ck_assert_uint_eq(b->rows[0].n_tok, want_n[step]);
        ck_assert(b->rows[0].sample == (step >= 2));
        /* one batch in flight: nothing more to form */
        const st_sched_batch *b2;
        ck_assert_int_eq(st_sched_form(s, 7, 0, &b2), ST_OK);
        ck_assert_ptr_null(b2);
        size_t n = fake_run(&f, b, res, rng);
        ck_assert_int_eq(st_sched_complete(s, b->id, 7, res, n, 0), ST_OK);
    }
    st_req_view v = view(s, id);
    ck_assert(v.done);
    ck_assert_str_eq(v.finish, "length");
    ck_assert_uint_eq(v.n_ids, 5);
    /* the ended session is reported for EndSessions */
    uint64_t ended[4];
    ck_assert_uint_eq(st_sched_take_ended(s, ended, 4), 1);
    ck_assert_uint_eq(st_sched_n_sessions(s), 0);
    st_sched_free(s);
}
END_TEST

START_TEST(decode_rows_first_and_budget)
{
    st_sched_cfg c = cfg_default();
    st_sched *s;
    ck_assert_int_eq(st_sched_new(&c, &s), ST_OK);
    int32_t a[2] = {1, 3};
    int32_t big[100];
    for (int i = 0; i < 100; i++)
        big[i] = 3 + i % 50;
    uint64_t ida, idb, idc;
    st_gen_req g = req_of(a, 2, 50);
    ck_assert_int_eq(st_sched_submit(s, &g, 0, &ida), ST_OK);
    fake f = {.forced = -1};
    st_sched_result_row res[8];
    uint64_t rng[8][4];
    const st_sched_batch *b;
    ck_assert_int_eq(st_sched_form(s, 7, 0, &b), ST_OK); /* A's prompt */
    size_t n = fake_run(&f, b, res, rng);
    ck_assert_int_eq(st_sched_complete(s, b->id, 7, res, n, 0), ST_OK);
    g = req_of(big, 100, 5);
    ck_assert_int_eq(st_sched_submit(s, &g, 0, &idb), ST_OK);
    g = req_of(big, 30, 5);
    ck_assert_int_eq(st_sched_submit(s, &g, 0, &idc), ST_OK);
    /* A decodes every step while B's long prompt and C's are prefilled */
    int a_rows = 0;
    for (int step = 0; step < 6; step++) {
        ck_assert_int_eq(st_sched_form(s, 7, 0, &b), ST_OK);
        ck_assert_ptr_nonnull(b);
        ck_assert_uint_le(b->n_tokens, 40);
        ck_assert_uint_eq(b->rows[0].n_tok, 1); /* the decode row comes first */
        a_rows++;
        for (uint32_t i = 1; i < b->n_rows; i++)
            ck_assert_uint_le(b->rows[i].n_tok, 16);
        if (step == 0) {
            ck_assert_uint_eq(b->n_rows, 3); /* A, then B's chunk, then C's chunk */
            ck_assert_uint_eq(b->rows[1].n_tok, 16);
            ck_assert_uint_eq(b->rows[2].n_tok, 16);
            ck_assert_uint_eq(b->n_tokens, 33);
        }
        n = fake_run(&f, b, res, rng);
        ck_assert_int_eq(st_sched_complete(s, b->id, 7, res, n, 0), ST_OK);
    }
    ck_assert_int_eq(a_rows, 6);
    ck_assert_uint_eq(view(s, ida).n_ids, 7);
    ck_assert_uint_eq(view(s, ida).missed, 0); /* never left out while B, C prefill */
    ck_assert_uint_eq(view(s, ida).steps, 7);
    st_sched_free(s);
}
END_TEST

START_TEST(eos_included_and_rng_history)
{
    st_sched_cfg c = cfg_default();
    st_sched *s;
    ck_assert_int_eq(st_sched_new(&c, &s), ST_OK);
    int32_t p[4] = {1, 7, 8, 9};
    st_gen_req g = req_of(p, 4, 100);
    g.sp.seed = 1234;
    g.sp.repeat_penalty = 1.1f;
    g.sp.repeat_last_n = 3;
    uint64_t id;
    ck_assert_int_eq(st_sched_submit(s, &g, 0, &id), ST_OK);
    fake f = {.forced = -1, .eos_after = 8};
    st_sched_result_row res[4];
    uint64_t rng[4][4], prev[4];
    st_rng r0;
    st_rng_seed(&r0, 1234);
    memcpy(prev, r0.s, sizeof prev);
    int32_t hist[16];
    memcpy(hist, p, sizeof p);
    uint32_t nh = 4;
    for (int step = 0;; step++) {
        const st_sched_batch *b;
        ck_assert_int_eq(st_sched_form(s, 7, 0, &b), ST_OK);
        if (b == NULL)
            break;
        ck_assert_int_eq(memcmp(b->rows[0].rng, prev, sizeof prev), 0); /* RNG state travels */
        ck_assert_uint_eq(b->rows[0].n_hist, 3);
        ck_assert_int_eq(memcmp(b->rows[0].hist, hist + nh - 3, 3 * sizeof(int32_t)), 0);
        size_t n = fake_run(&f, b, res, rng);
        memcpy(prev, rng[0], sizeof prev);
        hist[nh++] = res[0].token;
        ck_assert_int_eq(st_sched_complete(s, b->id, 7, res, n, 0), ST_OK);
        ck_assert_int_lt(step, 20);
    }
    st_req_view v = view(s, id);
    ck_assert(v.done);
    ck_assert_str_eq(v.finish, "eos");
    ck_assert_uint_eq(v.n_ids, 5); /* contexts of 4..8: the 5th sample is EOS */
    ck_assert_int_eq(v.ids[4], 2); /* EOS is part of the ids, as in strata run */
    st_sched_free(s);
}
END_TEST

/* tok_small - a tokenizer of V pieces "t0".."t<V-1>", ids 0..2 and eot
 * control pieces, eot its end-of-turn id (-1: none). */
static st_tokenizer *tok_small(int32_t eot)
{
    char names[V][8];
    const char *pieces[V];
    int32_t types[V];
    for (int i = 0; i < V; i++) {
        snprintf(names[i], sizeof names[i], "t%d", i);
        pieces[i] = names[i];
        types[i] = i <= 2 || i == eot ? ST_TOK_CONTROL : ST_TOK_NORMAL;
    }
    st_tok_config tc = st_tok_config_default();
    if (eot >= 0)
        tc.eot_id = eot;
    st_tokenizer *tok = NULL;
    ck_assert_int_eq(st_tok_from_pieces(pieces, NULL, NULL, types, V, &tc, &tok), ST_OK);
    return tok;
}

/* A request that ends before it ever ran (its maximum queue wait passed
 * while every session was busy) has no text to flush: with a tokenizer,
 * finishing it read the detokenizer it never had (a SEGV in the
 * coordinator's loop, seen when load generators' requests expired). */
START_TEST(queue_expiry_with_tokenizer)
{
    st_tokenizer *tok = tok_small(-1);
    st_sched_cfg c = cfg_default();
    c.tok = tok;
    c.max_sessions = 1;
    st_sched *s;
    ck_assert_int_eq(st_sched_new(&c, &s), ST_OK);
    int32_t p[3] = {1, 7, 8};
    st_gen_req g = req_of(p, 3, 50);
    uint64_t first, waiting;
    ck_assert_int_eq(st_sched_submit(s, &g, 0, &first), ST_OK);
    const st_sched_batch *b;
    ck_assert_int_eq(st_sched_form(s, 7, 0, &b), ST_OK); /* first takes the one session */
    ck_assert_ptr_nonnull(b);
    g.max_queue_ns = 100 * MS;
    ck_assert_int_eq(st_sched_submit(s, &g, 0, &waiting), ST_OK);
    st_sched_tick(s, 100 * MS, NULL);
    st_req_view v = view(s, waiting);
    ck_assert(v.done);
    ck_assert_int_eq(v.err, ST_EBUSY);
    ck_assert_msg(strstr(v.err_msg, "maximum queue wait"), "%s", v.err_msg);
    ck_assert_uint_eq(v.text_len, 0);
    ck_assert(!view(s, first).done);
    st_sched_free(s);
    st_tok_free(tok);
}
END_TEST

/* With a tokenizer whose vocabulary has an end-of-turn id, sampling it
 * ends the request like EOS (chat models; strata chat relies on it). */
START_TEST(eot_ends_request)
{
    enum { EOT = 5 };
    st_tokenizer *tok = tok_small(EOT);
    st_sched_cfg c = cfg_default();
    c.tok = tok;
    st_sched *s;
    ck_assert_int_eq(st_sched_new(&c, &s), ST_OK);
    int32_t p[3] = {1, 7, 8};
    st_gen_req g = req_of(p, 3, 50);
    uint64_t id, now = 0;
    ck_assert_int_eq(st_sched_submit(s, &g, 0, &id), ST_OK);
    fake f = {.forced = EOT};
    drive(s, &f, &now, 100, NULL, NULL);
    st_req_view v = view(s, id);
    ck_assert(v.done);
    ck_assert_str_eq(v.finish, "eos");
    ck_assert_uint_eq(v.n_ids, 1);
    ck_assert_int_eq(v.ids[0], EOT);
    st_sched_free(s);
    st_tok_free(tok);
}
END_TEST

static void fault_fail(st_sched *s, int step, const st_sched_batch *b, void *arg)
{
    int *count = arg;
    if (step == 4 || step == 11) {
        ck_assert_int_eq(st_sched_fail(s, b->id, ST_EEPOCH, "stale", ST_SCHED_REQUEUE, 0), ST_OK);
        (*count)++;
    }
}

/* forgetting the KV (a plan switch) re-feeds the history from position 0:
 * the ids equal the uninterrupted run's */
START_TEST(replan_loses_nothing)
{
    int32_t p[21];
    for (int i = 0; i < 21; i++)
        p[i] = 3 + (i * 7) % 60;
    int32_t ref[64];
    uint32_t nref;
    reference(p, 21, 30, ref, &nref);
    ck_assert_uint_eq(nref, 30);

    st_sched_cfg c = cfg_default();
    st_sched *s;
    ck_assert_int_eq(st_sched_new(&c, &s), ST_OK);
    st_gen_req g = req_of(p, 21, 30);
    uint64_t id, now = 0;
    ck_assert_int_eq(st_sched_submit(s, &g, now, &id), ST_OK);
    fake f = {.forced = -1};
    /* forget between steps: run 5 steps, forget, run the rest */
    st_sched_result_row res[8];
    uint64_t rng[8][4];
    bool saw_refeed = false;
    for (int step = 0; step < 200; step++) {
        if (step == 5 || step == 12)
            st_sched_forget_kv(s);
        const st_sched_batch *b;
        ck_assert_int_eq(st_sched_form(s, 7, now, &b), ST_OK);
        if (b == NULL)
            break;
        if (step == 5 || step == 12) {
            ck_assert_uint_eq(b->rows[0].pos, 0);
            saw_refeed = true;
        }
        size_t n = fake_run(&f, b, res, rng);
        ck_assert_int_eq(st_sched_complete(s, b->id, 7, res, n, now), ST_OK);
    }
    ck_assert(saw_refeed);
    st_req_view v = view(s, id);
    ck_assert(v.done);
    ck_assert_uint_eq(v.n_ids, nref);
    ck_assert_int_eq(memcmp(v.ids, ref, nref * sizeof *ref), 0);
    st_sched_free(s);
}
END_TEST

/* a failed batch is retried once (from position 0) and the output is the
 * same; a second failure in a row ends the request with the error */
START_TEST(failed_batch_retried_once)
{
    int32_t p[9] = {1, 4, 5, 6, 7, 8, 9, 10, 11};
    int32_t ref[64];
    uint32_t nref;
    reference(p, 9, 20, ref, &nref);

    st_sched_cfg c = cfg_default();
    st_sched *s;
    ck_assert_int_eq(st_sched_new(&c, &s), ST_OK);
    st_gen_req g = req_of(p, 9, 20);
    uint64_t id, now = 0;
    ck_assert_int_eq(st_sched_submit(s, &g, now, &id), ST_OK);
    fake f = {.forced = -1};
    int fails = 0;
    drive(s, &f, &now, 1000, fault_fail, &fails);
    ck_assert_int_eq(fails, 2);
    st_req_view v = view(s, id);
    ck_assert(v.done);
    ck_assert_str_eq(v.finish, "length");
    ck_assert_uint_eq(v.n_ids, nref);
    ck_assert_int_eq(memcmp(v.ids, ref, nref * sizeof *ref), 0);

    /* two failures in a row: the error reaches the client */
    ck_assert_int_eq(st_sched_submit(s, &g, now, &id), ST_OK);
    const st_sched_batch *b;
    ck_assert_int_eq(st_sched_form(s, 7, now, &b), ST_OK);
    ck_assert_int_eq(st_sched_fail(s, b->id, ST_EPROTO, "bad packet", ST_SCHED_RETRY_ONCE, now),
                     ST_OK);
    ck_assert_int_eq(st_sched_form(s, 7, now, &b), ST_OK);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(st_sched_fail(s, b->id, ST_EPROTO, "bad packet again", ST_SCHED_RETRY_ONCE,
                                   now),
                     ST_OK);
    v = view(s, id);
    ck_assert(v.done);
    ck_assert_str_eq(v.finish, "error");
    ck_assert_int_eq(v.err, ST_EPROTO);
    ck_assert_str_eq(v.err_msg, "bad packet again");
    ck_assert_int_eq(st_sched_fail(s, b->id, ST_EPROTO, "x", ST_SCHED_RETRY_ONCE, now), ST_ENOENT);
    st_sched_free(s);
}
END_TEST

START_TEST(bad_results_fail_the_batch)
{
    st_sched_cfg c = cfg_default();
    st_sched *s;
    ck_assert_int_eq(st_sched_new(&c, &s), ST_OK);
    int32_t p[2] = {1, 3};
    st_gen_req g = req_of(p, 2, 4);
    uint64_t id;
    ck_assert_int_eq(st_sched_submit(s, &g, 0, &id), ST_OK);
    const st_sched_batch *b;
    ck_assert_int_eq(st_sched_form(s, 7, 0, &b), ST_OK);
    uint64_t rng[4] = {1, 2, 3, 4};
    st_sched_result_row r = {.session_id = b->rows[0].session_id,
                             .token = V,
                             .rng = rng,
                             .n_rng = 4};
    ck_assert_int_eq(st_sched_complete(s, b->id + 1, 7, &r, 1, 0), ST_ENOENT);
    ck_assert_int_eq(st_sched_complete(s, b->id, 7, &r, 1, 0), ST_EPROTO); /* id out of range */
    ck_assert_msg(strstr(st_errdetail(), "outside the vocabulary"), "%s", st_errdetail());
    ck_assert_uint_eq(st_sched_in_flight(s), 0);
    ck_assert_int_eq(st_sched_form(s, 7, 0, &b), ST_OK); /* the retry */
    r.session_id = b->rows[0].session_id;
    r.token = 5;
    ck_assert_int_eq(st_sched_complete(s, b->id, 8, &r, 1, 0), ST_EEPOCH);
    st_req_view v = view(s, id);
    ck_assert(v.done); /* second failure in a row */
    ck_assert_int_eq(v.err, ST_EEPOCH);
    st_sched_free(s);
}
END_TEST

START_TEST(step_deadline)
{
    st_sched_cfg c = cfg_default();
    st_sched *s;
    ck_assert_int_eq(st_sched_new(&c, &s), ST_OK);
    int32_t p[2] = {1, 3};
    st_gen_req g = req_of(p, 2, 4);
    uint64_t id;
    ck_assert_int_eq(st_sched_submit(s, &g, 0, &id), ST_OK);
    const st_sched_batch *b;
    ck_assert_int_eq(st_sched_form(s, 7, 0, &b), ST_OK);
    st_sched_tick(s, 999 * MS, NULL);
    ck_assert(!view(s, id).done);
    /* the first miss re-feeds the request (a paused worker is the likely
     * cause), the second one ends it */
    st_sched_tick(s, 1000 * MS, NULL);
    ck_assert(!view(s, id).done);
    ck_assert_uint_eq(st_sched_in_flight(s), 0);
    ck_assert_int_eq(st_sched_form(s, 7, 1000 * MS, &b), ST_OK);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(b->rows[0].pos, 0);
    st_sched_tick(s, 2000 * MS, NULL);
    st_req_view v = view(s, id);
    ck_assert(v.done);
    ck_assert_str_eq(v.finish, "error");
    ck_assert_int_eq(v.err, ST_ETIMEOUT);
    ck_assert_msg(strstr(v.err_msg, "step deadline missed"), "%s", v.err_msg);
    ck_assert_uint_eq(st_sched_in_flight(s), 0);
    /* finished requests expire after their TTL */
    st_sched_tick(s, 2000 * MS + 10000 * MS, NULL);
    ck_assert_int_eq(st_sched_view(s, id, &v), ST_ENOENT);
    st_sched_free(s);
}
END_TEST

/* a finished request whose end was delivered goes after delivered_ttl */
START_TEST(delivered_requests_go_sooner)
{
    st_sched_cfg c = cfg_default();
    c.delivered_ttl_ns = 1000 * MS;
    st_sched *s;
    ck_assert_int_eq(st_sched_new(&c, &s), ST_OK);
    int32_t p[2] = {1, 3};
    st_gen_req g = req_of(p, 2, 4);
    uint64_t a, b;
    ck_assert_int_eq(st_sched_submit(s, &g, 0, &a), ST_OK);
    ck_assert_int_eq(st_sched_submit(s, &g, 0, &b), ST_OK);
    ck_assert_int_eq(st_sched_delivered(s, a, 0), ST_OK); /* running: no-op */
    ck_assert_int_eq(st_sched_cancel(s, a, 0), ST_OK);
    ck_assert_int_eq(st_sched_cancel(s, b, 0), ST_OK);
    ck_assert_int_eq(st_sched_delivered(s, a, 100 * MS), ST_OK);
    st_sched_tick(s, 1099 * MS, NULL);
    st_req_view v;
    ck_assert_int_eq(st_sched_view(s, a, &v), ST_OK);
    st_sched_tick(s, 1100 * MS, NULL);
    ck_assert_int_eq(st_sched_view(s, a, &v), ST_ENOENT);
    ck_assert_int_eq(st_sched_view(s, b, &v), ST_OK); /* not delivered: the full TTL */
    st_sched_tick(s, 10000 * MS, NULL);
    ck_assert_int_eq(st_sched_view(s, b, &v), ST_ENOENT);
    st_sched_free(s);
}
END_TEST

/* failures of the cluster (a lost worker, a stale epoch) re-feed a request
 * as often as they come, up to ST_SCHED_MAX_REQUEUES without a good step in
 * between; its ids equal the uninterrupted run's */
START_TEST(cluster_failures_requeue)
{
    int32_t p[9] = {1, 4, 5, 6, 7, 8, 9, 10, 11};
    int32_t ref[64];
    uint32_t nref;
    reference(p, 9, 20, ref, &nref);
    st_sched_cfg c = cfg_default();
    st_sched *s;
    ck_assert_int_eq(st_sched_new(&c, &s), ST_OK);
    st_gen_req g = req_of(p, 9, 20);
    uint64_t id, now = 0;
    ck_assert_int_eq(st_sched_submit(s, &g, now, &id), ST_OK);
    const st_sched_batch *b;
    for (int i = 0; i < ST_SCHED_MAX_REQUEUES; i++) { /* a retry fails, and its retry... */
        ck_assert_int_eq(st_sched_form(s, 7, now, &b), ST_OK);
        ck_assert_ptr_nonnull(b);
        ck_assert_int_eq(st_sched_fail(s, b->id, ST_ECLOSED, "worker lost", ST_SCHED_REQUEUE, now),
                         ST_OK);
        ck_assert(!view(s, id).done);
    }
    fake f = {.forced = -1};
    drive(s, &f, &now, 1000, NULL, NULL);
    st_req_view v = view(s, id);
    ck_assert_str_eq(v.finish, "length");
    ck_assert_uint_eq(v.n_ids, nref);
    ck_assert_int_eq(memcmp(v.ids, ref, nref * sizeof *ref), 0);
    /* without a good step in between, the bound ends it */
    ck_assert_int_eq(st_sched_submit(s, &g, now, &id), ST_OK);
    for (int i = 0; i <= ST_SCHED_MAX_REQUEUES; i++) {
        ck_assert_int_eq(st_sched_form(s, 7, now, &b), ST_OK);
        ck_assert_int_eq(st_sched_fail(s, b->id, ST_ECLOSED, "worker lost", ST_SCHED_REQUEUE, now),
                         ST_OK);
    }
    v = view(s, id);
    ck_assert(v.done);
    ck_assert_int_eq(v.err, ST_ECLOSED);
    st_sched_free(s);
}
END_TEST

/* a time stamp taken after the tick's clock (a request failed while the
 * caller handled a worker's loss) is not older than any TTL: the request
 * stays readable, a running one does not stall, an idle session stays */
START_TEST(stamps_after_now_do_not_expire)
{
    st_sched_cfg c = cfg_default();
    st_sched *s;
    ck_assert_int_eq(st_sched_new(&c, &s), ST_OK);
    int32_t p[2] = {1, 3};
    st_gen_req g = req_of(p, 2, 4);
    uint64_t a, b2, t = 100000 * MS;
    ck_assert_int_eq(st_sched_submit(s, &g, t, &a), ST_OK);
    ck_assert_int_eq(st_sched_submit(s, &g, t, &b2), ST_OK);
    const st_sched_batch *b;
    ck_assert_int_eq(st_sched_form(s, 7, t, &b), ST_OK);
    ck_assert_int_eq(st_sched_cancel(s, a, t + 5 * MS), ST_OK);
    ck_assert_int_eq(st_sched_fail(s, b->id, ST_ECLOSED, "lost", ST_SCHED_REQUEUE, t + 5 * MS),
                     ST_OK);
    st_sched_tick(s, t + 1 * MS, "a committed plan (the current plan lost a worker)");
    st_req_view v;
    /* an id of an earlier coordinator (ids count up from the id base) */
    ck_assert_int_eq(st_sched_view(s, c.id_base - 5, &v), ST_ENOENT);
    ck_assert_msg(strstr(st_errdetail(), "before this coordinator started"), "%s", st_errdetail());
    ck_assert_int_eq(st_sched_view(s, a + 1000, &v), ST_ENOENT);
    ck_assert_msg(strstr(st_errdetail(), "unknown or expired"), "%s", st_errdetail());
    ck_assert_int_eq(st_sched_view(s, a, &v), ST_OK);
    ck_assert_str_eq(v.finish, "cancelled");
    ck_assert_int_eq(st_sched_view(s, b2, &v), ST_OK);
    ck_assert(!v.done);
    st_sched_free(s);
}
END_TEST

START_TEST(queue_and_stall)
{
    st_sched_cfg c = cfg_default();
    c.max_sessions = 1;
    st_sched *s;
    ck_assert_int_eq(st_sched_new(&c, &s), ST_OK);
    int32_t p[2] = {1, 3};
    st_gen_req g = req_of(p, 2, 3);
    uint64_t a, b2, c3;
    ck_assert_int_eq(st_sched_submit(s, &g, 0, &a), ST_OK);
    ck_assert_int_eq(st_sched_submit(s, &g, 0, &b2), ST_OK);
    fake f = {.forced = -1};
    uint64_t now = 0;
    /* only one slot: B starts after A */
    const st_sched_batch *b;
    ck_assert_int_eq(st_sched_form(s, 7, now, &b), ST_OK);
    ck_assert_uint_eq(b->n_rows, 1);
    st_sched_result_row res[4];
    uint64_t rng[4][4];
    size_t n = fake_run(&f, b, res, rng);
    ck_assert_int_eq(st_sched_complete(s, b->id, 7, res, n, now), ST_OK);
    drive(s, &f, &now, 100, NULL, NULL);
    ck_assert(view(s, a).done);
    ck_assert(view(s, b2).done);
    ck_assert_str_eq(view(s, b2).finish, "length");
    /* no plan (stall): a waiting request fails after the queue timeout */
    ck_assert_int_eq(st_sched_submit(s, &g, now, &c3), ST_OK);
    st_sched_tick(s, now + 4999 * MS, "a committed plan (waiting for workers)");
    ck_assert(!view(s, c3).done);
    st_sched_tick(s, now + 5000 * MS, "a committed plan (waiting for workers)");
    st_req_view v = view(s, c3);
    ck_assert(v.done);
    ck_assert_int_eq(v.err, ST_EBUSY);
    ck_assert_msg(strstr(v.err_msg, "waiting for workers"), "%s", v.err_msg);
    st_sched_free(s);
}
END_TEST

START_TEST(cancel_in_flight)
{
    st_sched_cfg c = cfg_default();
    st_sched *s;
    ck_assert_int_eq(st_sched_new(&c, &s), ST_OK);
    int32_t p[2] = {1, 3};
    st_gen_req g = req_of(p, 2, 10);
    uint64_t id;
    ck_assert_int_eq(st_sched_submit(s, &g, 0, &id), ST_OK);
    fake f = {.forced = -1};
    st_sched_result_row res[4];
    uint64_t rng[4][4];
    const st_sched_batch *b;
    ck_assert_int_eq(st_sched_form(s, 7, 0, &b), ST_OK);
    ck_assert_int_eq(st_sched_cancel(s, id, 0), ST_OK);
    uint64_t ended[4];
    ck_assert_uint_eq(st_sched_take_ended(s, ended, 4), 0); /* still in flight */
    size_t n = fake_run(&f, b, res, rng);
    ck_assert_int_eq(st_sched_complete(s, b->id, 7, res, n, 0), ST_OK);
    st_req_view v = view(s, id);
    ck_assert_str_eq(v.finish, "cancelled");
    ck_assert_uint_eq(v.n_ids, 0); /* the late token is not delivered */
    ck_assert_uint_eq(st_sched_take_ended(s, ended, 4), 1);
    ck_assert_int_eq(st_sched_form(s, 7, 0, &b), ST_OK);
    ck_assert_ptr_null(b);
    ck_assert_int_eq(st_sched_cancel(s, 424242, 0), ST_ENOENT);
    st_sched_free(s);
}
END_TEST

/* text: a tokenizer with byte tokens; a 3-byte character split over three
 * ids appears only when complete; stop strings end generation */
START_TEST(text_and_stop)
{
    const char *pieces[V];
    char buf[V][16];
    int32_t types[V];
    for (int i = 0; i < V; i++) {
        types[i] = 1;
        pieces[i] = buf[i];
        snprintf(buf[i], sizeof buf[i], "w%d", i);
    }
    pieces[0] = "<unk>", types[0] = 2;
    pieces[1] = "<s>", types[1] = 3;
    pieces[2] = "</s>", types[2] = 3;
    pieces[3] = "\xe2\x96\x81hello";
    pieces[4] = "<0xE2>", types[4] = 6;
    pieces[5] = "<0x82>", types[5] = 6;
    pieces[6] = "<0xAC>", types[6] = 6;
    pieces[7] = "\xe2\x96\x81world";
    pieces[8] = "!";
    st_tok_config tc = st_tok_config_default();
    st_tokenizer *tok;
    ck_assert_int_eq(st_tok_from_pieces(pieces, NULL, NULL, types, V, &tc, &tok), ST_OK);
    st_sched_cfg c = cfg_default();
    c.tok = tok;
    st_sched *s;
    ck_assert_int_eq(st_sched_new(&c, &s), ST_OK);
    int32_t p[2] = {1, 3};
    st_gen_req g = req_of(p, 2, 10);
    const char *stops[1] = {"d!"};
    g.stop = stops;
    g.n_stop = 1;
    uint64_t id;
    ck_assert_int_eq(st_sched_submit(s, &g, 0, &id), ST_OK);
    int32_t script[] = {4, 5, 6, 7, 8, 3, 3};
    fake f = {.forced = -1};
    st_sched_result_row res[4];
    uint64_t rng[4][4];
    for (int step = 0; step < 7; step++) {
        const st_sched_batch *b;
        ck_assert_int_eq(st_sched_form(s, 7, 0, &b), ST_OK);
        if (b == NULL)
            break;
        f.forced = script[step];
        size_t n = fake_run(&f, b, res, rng);
        ck_assert_int_eq(st_sched_complete(s, b->id, 7, res, n, 0), ST_OK);
        st_req_view v = view(s, id);
        if (step < 2) /* the euro sign is not complete yet */
            ck_assert_uint_eq(v.text_len, 0);
    }
    st_req_view v = view(s, id);
    ck_assert(v.done);
    ck_assert_str_eq(v.finish, "stop");
    ck_assert_uint_eq(v.n_ids, 5); /* the id completing the stop string is the last */
    ck_assert_uint_eq(v.text_len, strlen("\xe2\x82\xac world!"));
    ck_assert_int_eq(memcmp(v.text, "\xe2\x82\xac world!", v.text_len), 0);
    ck_assert_uint_eq(v.text_off[0], 0);
    ck_assert_uint_eq(v.text_off[2], 0);
    ck_assert_uint_eq(v.text_off[3], 3);
    ck_assert_uint_eq(v.text_off[4], 9);
    ck_assert_uint_eq(v.text_off[5], 10);
    st_sched_free(s);
    st_tok_free(tok);
}
END_TEST

START_TEST(context_full_ends_with_length)
{
    st_sched_cfg c = cfg_default();
    c.n_ctx = 12;
    st_sched *s;
    ck_assert_int_eq(st_sched_new(&c, &s), ST_OK);
    int32_t p[8] = {1, 3, 4, 5, 6, 7, 8, 9};
    st_gen_req g = req_of(p, 8, 12);
    uint64_t id, now = 0;
    ck_assert_int_eq(st_sched_submit(s, &g, 0, &id), ST_OK);
    fake f = {.forced = -1};
    drive(s, &f, &now, 100, NULL, NULL);
    st_req_view v = view(s, id);
    ck_assert_str_eq(v.finish, "length");
    ck_assert_uint_eq(v.n_ids, 4); /* as strata run: stops when the history fills the context */
    st_sched_free(s);
}
END_TEST

START_TEST(shutdown_ends_everything)
{
    st_sched_cfg c = cfg_default();
    st_sched *s;
    ck_assert_int_eq(st_sched_new(&c, &s), ST_OK);
    int32_t p[2] = {1, 3};
    st_gen_req g = req_of(p, 2, 10);
    uint64_t a, b2;
    ck_assert_int_eq(st_sched_submit(s, &g, 0, &a), ST_OK);
    ck_assert_int_eq(st_sched_submit(s, &g, 0, &b2), ST_OK);
    const st_sched_batch *b;
    ck_assert_int_eq(st_sched_form(s, 7, 0, &b), ST_OK);
    st_sched_shutdown(s, "the coordinator is shutting down", 0);
    ck_assert_uint_eq(st_sched_in_flight(s), 0);
    ck_assert_uint_eq(st_sched_n_requests(s), 0);
    st_req_view v = view(s, b2);
    ck_assert(v.done);
    ck_assert_int_eq(v.err, ST_ECANCELED);
    ck_assert_str_eq(v.err_msg, "the coordinator is shutting down");
    st_sched_free(s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("scheduler");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, validation);
    tcase_add_test(tc, prefill_chunks_then_decode);
    tcase_add_test(tc, decode_rows_first_and_budget);
    tcase_add_test(tc, eos_included_and_rng_history);
    tcase_add_test(tc, eot_ends_request);
    tcase_add_test(tc, queue_expiry_with_tokenizer);
    tcase_add_test(tc, replan_loses_nothing);
    tcase_add_test(tc, failed_batch_retried_once);
    tcase_add_test(tc, bad_results_fail_the_batch);
    tcase_add_test(tc, step_deadline);
    tcase_add_test(tc, delivered_requests_go_sooner);
    tcase_add_test(tc, cluster_failures_requeue);
    tcase_add_test(tc, stamps_after_now_do_not_expire);
    tcase_add_test(tc, queue_and_stall);
    tcase_add_test(tc, cancel_in_flight);
    tcase_add_test(tc, text_and_stop);
    tcase_add_test(tc, context_full_ends_with_length);
    tcase_add_test(tc, shutdown_ends_everything);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
