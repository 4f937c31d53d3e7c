/* test_ctl_check.c - the worker's checks of who steers it and of the plan
 * messages it takes (worker/daemon/ctl_check.h, issue 12 finding 1): control
 * only from the joined coordinator, a Commit only for the prepared epoch
 * and hash, no stale epochs, a Prepare's hash and incarnation enforced,
 * STEP frames only from the listed senders. */
#include <check.h>
#include <sodium.h>
#include <stdint.h>
#include <string.h>

#include "worker/daemon/ctl_check.h"

#define COORD 0x1234500000002ull /* the joined coordinator's control sender */
#define INCARNATION 1796147316384ull
#define EPOCH ((INCARNATION << 16) | 1u)

static char why[512];

static st_ctl_state joined(void)
{
    st_ctl_state s;
    memset(&s, 0, sizeof s);
    s.coord_ctl = COORD;
    s.incarnation = INCARNATION;
    return s;
}

/* a plan of epoch e with its hash sealed as the coordinator does */
typedef struct plan_fx {
    Strata__Plan p;
    uint8_t hash[ST_CTL_HASH_BYTES];
    uint8_t model[32];
} plan_fx;

static void mkplan(plan_fx *f, uint64_t e)
{
    strata__plan__init(&f->p);
    memset(f->model, 7, sizeof f->model);
    f->p.epoch = e;
    f->p.incarnation = INCARNATION;
    f->p.model_id.data = f->model;
    f->p.model_id.len = sizeof f->model;
    f->p.n_layer = 6;
    f->p.result_addr = "tcp://127.0.0.1:1";
    uint8_t buf[256];
    size_t n = strata__plan__get_packed_size(&f->p);
    ck_assert_uint_le(n, sizeof buf);
    strata__plan__pack(&f->p, buf);
    ck_assert_int_eq(crypto_generichash(f->hash, sizeof f->hash, buf, n, NULL, 0), 0);
    f->p.plan_hash.data = f->hash;
    f->p.plan_hash.len = sizeof f->hash;
}

START_TEST(sender_only_the_joined_coordinator)
{
    st_ctl_state s = joined();
    ck_assert_int_eq(st_ctl_sender_check(&s, "commit", COORD, why, sizeof why), ST_OK);
    ck_assert_int_eq(st_ctl_sender_check(&s, "commit", COORD + 1, why, sizeof why), ST_EAUTH);
    ck_assert_ptr_nonnull(strstr(why, "only the coordinator this worker joined"));
    ck_assert_int_eq(st_ctl_sender_check(&s, "prepare", 0, why, sizeof why), ST_EAUTH);
    s.coord_ctl = 0; /* not joined: nobody */
    ck_assert_int_eq(st_ctl_sender_check(&s, "commit", 0, why, sizeof why), ST_EAUTH);
    ck_assert_ptr_nonnull(strstr(why, "joined no coordinator"));
}
END_TEST

START_TEST(commit_needs_its_prepare)
{
    st_ctl_state s = joined();
    uint8_t h[ST_CTL_HASH_BYTES], other[ST_CTL_HASH_BYTES];
    memset(h, 0xab, sizeof h);
    memset(other, 0xcd, sizeof other);
    /* nothing prepared: the stranger's Commit{2^64-1} of the issue */
    ck_assert_int_eq(st_ctl_commit_check(&s, UINT64_MAX, h, sizeof h, why, sizeof why), ST_EPROTO);
    ck_assert_ptr_nonnull(strstr(why, "without a matching Prepare"));
    s.have_pending = true;
    s.pending_epoch = EPOCH + 1;
    memcpy(s.pending_hash, h, sizeof h);
    ck_assert_int_eq(st_ctl_commit_check(&s, UINT64_MAX, h, sizeof h, why, sizeof why),
                     ST_EPROTO); /* another epoch than the prepared one */
    ck_assert_int_eq(st_ctl_commit_check(&s, EPOCH + 1, other, sizeof other, why, sizeof why),
                     ST_EEPOCH); /* the prepared epoch, another hash */
    ck_assert_ptr_nonnull(strstr(why, "the prepared plan's is"));
    ck_assert_int_eq(st_ctl_commit_check(&s, EPOCH + 1, h, 31, why, sizeof why), ST_EINVAL);
    ck_assert_int_eq(st_ctl_commit_check(&s, EPOCH + 1, h, sizeof h, why, sizeof why), ST_OK);
}
END_TEST

START_TEST(commit_stale)
{
    st_ctl_state s = joined();
    uint8_t h[ST_CTL_HASH_BYTES];
    memset(h, 1, sizeof h);
    s.have_cur = true;
    s.cur_epoch = EPOCH + 5;
    s.have_pending = true; /* even a prepared plan of that epoch (it cannot be) is stale */
    s.pending_epoch = EPOCH + 5;
    memcpy(s.pending_hash, h, sizeof h);
    for (uint64_t e = EPOCH + 4; e <= EPOCH + 5; e++) {
        ck_assert_int_eq(st_ctl_commit_check(&s, e, h, sizeof h, why, sizeof why), ST_EEPOCH);
        ck_assert_ptr_nonnull(strstr(why, "stale"));
    }
}
END_TEST

START_TEST(prepare_checks)
{
    st_ctl_state s = joined();
    plan_fx f;
    mkplan(&f, EPOCH + 2);
    ck_assert_int_eq(st_ctl_prepare_check(&s, &f.p, why, sizeof why), ST_OK);
    ck_assert_int_eq(st_ctl_prepare_check(&s, NULL, why, sizeof why), ST_EINVAL);
    s.have_cur = true;
    s.cur_epoch = EPOCH + 2;
    ck_assert_int_eq(st_ctl_prepare_check(&s, &f.p, why, sizeof why), ST_EEPOCH); /* stale */
    s.cur_epoch = EPOCH + 1;
    ck_assert_int_eq(st_ctl_prepare_check(&s, &f.p, why, sizeof why), ST_OK);
    s.incarnation = INCARNATION + 1; /* the coordinator restarted; this plan is the old one's */
    ck_assert_int_eq(st_ctl_prepare_check(&s, &f.p, why, sizeof why), ST_EAUTH);
    s.incarnation = INCARNATION;
    f.hash[0] ^= 1; /* a hash that is not the plan's: refused, not only logged */
    ck_assert_int_eq(st_ctl_prepare_check(&s, &f.p, why, sizeof why), ST_EEPOCH);
    ck_assert_ptr_nonnull(strstr(why, "is not BLAKE2b-256 of the plan"));
    f.hash[0] ^= 1;
    f.p.result_addr = "tcp://10.0.0.66:9"; /* a rerouted plan under the old hash */
    ck_assert_int_eq(st_ctl_plan_hash(&f.p, why, sizeof why), ST_EEPOCH);
    f.p.plan_hash.len = 16;
    ck_assert_int_eq(st_ctl_plan_hash(&f.p, why, sizeof why), ST_EEPOCH);
}
END_TEST

START_TEST(step_senders)
{
    const uint64_t prev[2] = {11, 12};
    ck_assert(st_ctl_step_sender_ok(prev, 2, 11));
    ck_assert(st_ctl_step_sender_ok(prev, 2, 12));
    ck_assert(!st_ctl_step_sender_ok(prev, 2, 13));
    ck_assert(!st_ctl_step_sender_ok(prev, 1, 12)); /* only the first n count */
    ck_assert(!st_ctl_step_sender_ok(prev, 0, 11)); /* a spare takes STEP from nobody */
    const uint64_t unset[1] = {0};
    ck_assert(!st_ctl_step_sender_ok(unset, 1, 0));
}
END_TEST

/* A batch's route names the previous stage's replica: only that worker
 * may send it, not the stage's other replica (issue 12, finding 2). */
START_TEST(step_route_senders)
{
    const uint64_t prev[2] = {11, 12};
    ck_assert(st_ctl_step_route_sender_ok(prev, 2, 0, 11));
    ck_assert(st_ctl_step_route_sender_ok(prev, 2, 1, 12));
    ck_assert(!st_ctl_step_route_sender_ok(prev, 2, 0, 12)); /* the other replica */
    ck_assert(!st_ctl_step_route_sender_ok(prev, 2, 1, 11));
    ck_assert(!st_ctl_step_route_sender_ok(prev, 2, 2, 11)); /* no such replica */
    ck_assert(!st_ctl_step_route_sender_ok(prev, 2, 0, 13));
    const uint64_t unset[1] = {0};
    ck_assert(!st_ctl_step_route_sender_ok(unset, 1, 0, 0));
}
END_TEST

int main(void)
{
    if (sodium_init() < 0)
        return 1;
    Suite *s = suite_create("ctl_check");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, sender_only_the_joined_coordinator);
    tcase_add_test(tc, commit_needs_its_prepare);
    tcase_add_test(tc, commit_stale);
    tcase_add_test(tc, prepare_checks);
    tcase_add_test(tc, step_senders);
    tcase_add_test(tc, step_route_senders);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
