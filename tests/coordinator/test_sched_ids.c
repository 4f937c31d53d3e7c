/* test_sched_ids.c - the scheduler's session and batch ids (issue 12,
 * finding 2; coordinator/sched/scheduler.h "Ids"): random 64-bit ids by
 * default, which change no output; an id that is 0 or in use is drawn
 * again; a generator that gives nothing else is an error, never a shared
 * id. The other scheduler tests use sequential ids (sched_fake.c). */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "coordinator/sched/scheduler.h"
#include "tests/coordinator/sched_fake.h"

/* id_list - a generator that plays back ids[] (then 0s). */
typedef struct id_list {
    const uint64_t *ids;
    size_t n, next;
} id_list;

static uint64_t id_play(void *arg, st_sched_id_kind kind)
{
    (void)kind;
    id_list *l = arg;
    return l->next < l->n ? l->ids[l->next++] : 0;
}

START_TEST(random_ids)
{
    st_sched_cfg c = cfg_default();
    c.new_id = NULL; /* the coordinator's: random 64-bit ids */
    st_sched *s;
    ck_assert_int_eq(st_sched_new(&c, &s), ST_OK);
    int32_t p[3] = {1, 5, 6};
    st_gen_req g = req_of(p, 3, 6);
    uint64_t id[3], now = 0;
    for (int k = 0; k < 3; k++)
        ck_assert_int_eq(st_sched_submit(s, &g, now, &id[k]), ST_OK);
    const st_sched_batch *b;
    ck_assert_int_eq(st_sched_form(s, 7, now, &b), ST_OK);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(b->n_rows, 3);
    uint64_t sid[3];
    for (int k = 0; k < 3; k++) {
        sid[k] = b->rows[k].session_id;
        ck_assert_uint_ne(sid[k], 0);
        ck_assert_uint_ne(sid[k], b->id);
        for (int j = 0; j < k; j++)
            ck_assert_uint_ne(sid[k], sid[j]);
    }
    ck_assert_uint_ne(b->id, 0);
    /* not a count from id_base, nor from each other (a 2^-64 chance each) */
    ck_assert(!(sid[1] == sid[0] + 1 && sid[2] == sid[1] + 1));
    ck_assert_uint_ne(b->id, c.id_base + 1);
    ck_assert_ptr_eq(st_sched_batch_find(s, b->id), b);
    ck_assert_ptr_null(st_sched_batch_find(s, b->id + 1));
    const st_sched_batch *all[2];
    ck_assert_uint_eq(st_sched_batches(s, all, 2), 1);
    ck_assert_ptr_eq(all[0], b);
    /* the ids change no output */
    fake f = {.forced = -1};
    fake_complete(s, &f, b, now);
    drive(s, &f, &now, 1000, NULL, NULL);
    int32_t ref[16];
    uint32_t n_ref;
    reference(p, 3, 6, ref, &n_ref);
    for (int k = 0; k < 3; k++) {
        st_req_view v = view(s, id[k]);
        ck_assert(v.done);
        ck_assert_uint_eq(v.n_ids, n_ref);
        ck_assert_mem_eq(v.ids, ref, n_ref * sizeof *ref);
    }
    st_sched_free(s);
}
END_TEST

/* two_played - a scheduler whose ids l plays back, with two requests
 * submitted (their ids in req[2]). */
static st_sched *two_played(id_list *l, uint64_t req[2])
{
    st_sched_cfg c = cfg_default();
    c.new_id = id_play;
    c.id_arg = l;
    st_sched *s;
    ck_assert_int_eq(st_sched_new(&c, &s), ST_OK);
    int32_t p[2] = {1, 5};
    st_gen_req g = req_of(p, 2, 4);
    for (int k = 0; k < 2; k++)
        ck_assert_int_eq(st_sched_submit(s, &g, 0, &req[k]), ST_OK);
    return s;
}

START_TEST(ids_in_use_drawn_again)
{
    const uint64_t seq[] = {0, 7, 7, 8, 8, 7, 9};
    id_list l = {.ids = seq, .n = sizeof seq / sizeof *seq};
    uint64_t req[2];
    st_sched *s = two_played(&l, req);
    const st_sched_batch *b;
    ck_assert_int_eq(st_sched_form(s, 7, 0, &b), ST_OK);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(b->rows[0].session_id, 7); /* 0 drawn again */
    ck_assert_uint_eq(b->rows[1].session_id, 8); /* 7 is in use */
    ck_assert_uint_eq(b->id, 9);                 /* 8 and 7 are in use */
    st_sched_free(s);
}
END_TEST

START_TEST(ids_exhausted_is_an_error)
{
    const uint64_t seq[] = {5};
    id_list l = {.ids = seq, .n = 1}; /* then 0 forever */
    uint64_t req[2];
    st_sched *s = two_played(&l, req);
    const st_sched_batch *b = NULL;
    ck_assert_int_eq(st_sched_form(s, 7, 0, &b), ST_EINTERNAL); /* no batch id */
    ck_assert_ptr_null(b);
    st_req_view v = view(s, req[1]); /* no session id: it ends with the error, never shares one */
    ck_assert(v.done);
    ck_assert_int_eq(v.err, ST_EINTERNAL);
    ck_assert(!view(s, req[0]).done);
    st_sched_free(s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sched_ids");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, random_ids);
    tcase_add_test(tc, ids_in_use_drawn_again);
    tcase_add_test(tc, ids_exhausted_is_an_error);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
