/* test_replay.c - the anti-replay table (common/wire/replay.c) against an
 * oracle: every verdict of st_replay_check on random traffic of a few
 * senders (in order, held back, duplicated, older than the window, bursts
 * that make a window dense, jumps that make it sparse again) equals the
 * rule's, computed by the test from every number each sender ever had
 * accepted. And what the table holds: a sender whose frames come one at a
 * time keeps a few entries, not a bitmap (a coordinator serving one-shot
 * clients grew by 2 KiB per client with the earlier form). */
#include <check.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire/replay.h"

#define TR_W ((uint64_t)ST_ENV_REPLAY_WINDOW)
#define TR_SENDERS 3
#define TR_RANGE (1ull << 26) /* numbers each sender uses: [TR_BASE, TR_BASE + TR_RANGE) */
#define TR_BASE 1000000ull
#define TR_OPS 400000
#define TR_BURST 600 /* frames of a burst within one window: more than a sparse array holds */
#define TR_CLIENTS 1000
#define TR_CLIENT_FRAMES 20
#define TR_CLIENT_GAP_US 1000u /* a client's frames: one a millisecond */
/* what a one-at-a-time sender may hold: its frames of one window (17 at
 * one a millisecond) rounded up to 32 entries, an eighth of a bitmap */
#define TR_CLIENT_MAX_BYTES 256

/* The oracle of one sender: every number accepted, and the highest. */
typedef struct tr_ref {
    uint8_t *taken; /* [TR_RANGE / 8]: bit n - TR_BASE */
    uint64_t high;  /* 0: none yet */
} tr_ref;

static bool tr_taken(const tr_ref *ref, uint64_t seq)
{
    return (ref->taken[(seq - TR_BASE) / 8] >> ((seq - TR_BASE) % 8)) & 1u;
}

/* tr_rule - whether the rule accepts seq from ref's sender (no eviction
 * here: the table holds every sender, the floor stays 0). */
static bool tr_rule(const tr_ref *ref, uint64_t seq)
{
    if (ref->high == 0 || seq > ref->high)
        return true;
    if (ref->high - seq >= TR_W)
        return false;
    return !tr_taken(ref, seq);
}

/* tr_next - a random number for ref's sender: mostly a little above its
 * highest, else held back (within or beyond the window), a duplicate, or a
 * jump past a whole window. */
static uint64_t tr_next(const tr_ref *ref, unsigned *rs)
{
    uint64_t h = ref->high ? ref->high : TR_BASE;
    unsigned k = (unsigned)rand_r(rs) % 100;
    uint64_t seq;
    if (k < 60)
        seq = h + 1 + (uint64_t)rand_r(rs) % 200;
    else if (k < 85)
        seq = h - (uint64_t)rand_r(rs) % (TR_W + 64);
    else if (k < 99)
        seq = h; /* a duplicate of the highest */
    else
        seq = h + TR_W + (uint64_t)rand_r(rs) % TR_W;
    if (seq < TR_BASE)
        seq = TR_BASE;
    return seq;
}

/* random traffic, and bursts of TR_BURST frames opened in random order:
 * each verdict equals the oracle's; both forms were used, and a dense
 * window became sparse again */
START_TEST(test_replay_oracle)
{
    st_replay *r;
    ck_assert_int_eq(st_replay_open(&r), ST_OK);
    tr_ref ref[TR_SENDERS];
    for (int s = 0; s < TR_SENDERS; s++) {
        ref[s].taken = calloc(TR_RANGE / 8, 1);
        ck_assert_ptr_nonnull(ref[s].taken);
        ref[s].high = 0;
    }
    unsigned rs = 7;
    size_t ops = 0, accepted = 0, max_dense = 0, densified = 0, sparsened = 0;
    st_replay_stats st, prev = {0};
    while (ops < TR_OPS) {
        int s = rand_r(&rs) % TR_SENDERS;
        tr_ref *f = &ref[s];
        uint64_t burst[TR_BURST];
        size_t n = 1;
        if (f->high + 2 * TR_W >= TR_BASE + TR_RANGE) /* this sender's numbers used up */
            break;
        if (rand_r(&rs) % 200 == 0) {
            /* a burst: TR_BURST numbers within one window, shuffled, some twice */
            uint64_t b = (f->high ? f->high : TR_BASE) + 1;
            for (size_t i = 0; i < TR_BURST; i++)
                burst[i] = b + (uint64_t)rand_r(&rs) % (TR_W / 2);
            n = TR_BURST;
        } else {
            burst[0] = tr_next(f, &rs);
        }
        for (size_t i = 0; i < n; i++, ops++) {
            uint64_t seq = burst[i];
            bool want = tr_rule(f, seq);
            st_err e = st_replay_check(r, 100 + (uint64_t)s, 0, seq);
            ck_assert_msg(e == ST_OK || e == ST_EAUTH, "op %zu: %s", ops, st_errdetail());
            ck_assert_msg((e == ST_OK) == want,
                          "op %zu sender %d seq high%+lld: table %s, rule %s (%s)", ops, s,
                          (long long)(seq - f->high), e == ST_OK ? "accepts" : "refuses",
                          want ? "accepts" : "refuses", e == ST_OK ? "" : st_errdetail());
            if (want) {
                f->taken[(seq - TR_BASE) / 8] |= (uint8_t)(1u << ((seq - TR_BASE) % 8));
                if (seq > f->high)
                    f->high = seq;
                accepted++;
            }
            st_replay_stats_get(r, &st);
            densified += st.dense > prev.dense;
            sparsened += st.dense < prev.dense;
            if (st.dense > max_dense)
                max_dense = st.dense;
            prev = st;
        }
    }
    ck_assert_uint_ge(ops, TR_OPS / 2);
    ck_assert_uint_gt(accepted, ops / 2);
    ck_assert_uint_lt(accepted, ops);
    ck_assert_uint_gt(densified, 0);
    ck_assert_uint_gt(sparsened, 0);
    ck_assert_uint_eq(st.senders, TR_SENDERS);
    ck_assert_uint_le(st.bytes, TR_SENDERS * (TR_W / 8)); /* at most a bitmap each */
    for (int s = 0; s < TR_SENDERS; s++)
        free(ref[s].taken);
    st_replay_close(r);
}
END_TEST

/* TR_CLIENTS senders of TR_CLIENT_FRAMES frames each, one at a time: a
 * few entries each, no bitmap; each frame replayed is refused */
START_TEST(test_replay_clients_small)
{
    st_replay *r;
    ck_assert_int_eq(st_replay_open(&r), ST_OK);
    for (uint64_t c = 0; c < TR_CLIENTS; c++)
        for (uint64_t k = 0; k < TR_CLIENT_FRAMES; k++)
            ck_assert_int_eq(st_replay_check(r, 1 + c, 0, TR_BASE + c + k * TR_CLIENT_GAP_US),
                             ST_OK);
    st_replay_stats st;
    st_replay_stats_get(r, &st);
    ck_assert_uint_eq(st.senders, TR_CLIENTS);
    ck_assert_uint_eq(st.dense, 0);
    ck_assert_msg(st.bytes <= (size_t)TR_CLIENTS * TR_CLIENT_MAX_BYTES, "%zu bytes for %d senders",
                  st.bytes, TR_CLIENTS);
    for (uint64_t c = 0; c < TR_CLIENTS; c++)
        for (uint64_t k = 0; k < TR_CLIENT_FRAMES; k++)
            ck_assert_int_eq(st_replay_check(r, 1 + c, 0, TR_BASE + c + k * TR_CLIENT_GAP_US),
                             ST_EAUTH);
    st_replay_close(r);
}
END_TEST

/* a window made dense keeps every mark across the change; a slide by a
 * whole window makes it sparse, and what it left is refused */
START_TEST(test_replay_dense_and_back)
{
    st_replay *r;
    ck_assert_int_eq(st_replay_open(&r), ST_OK);
    const uint64_t a = TR_BASE + TR_W;
    for (uint64_t i = 0; i < TR_BURST; i++) /* every other number, the highest first */
        ck_assert_int_eq(st_replay_check(r, 9, 0, a + 2 * (TR_BURST - i)), ST_OK);
    st_replay_stats st;
    st_replay_stats_get(r, &st);
    ck_assert_uint_eq(st.dense, 1);
    ck_assert_uint_eq(st.bytes, TR_W / 8);
    for (uint64_t i = 1; i <= TR_BURST; i++) {
        ck_assert_int_eq(st_replay_check(r, 9, 0, a + 2 * i), ST_EAUTH);  /* marked */
        ck_assert_int_eq(st_replay_check(r, 9, 0, a + 2 * i - 1), ST_OK); /* free between */
    }
    const uint64_t far = a + 2 * TR_BURST + TR_W;
    ck_assert_int_eq(st_replay_check(r, 9, 0, far), ST_OK);
    st_replay_stats_get(r, &st);
    ck_assert_uint_eq(st.dense, 0);
    ck_assert_uint_lt(st.bytes, TR_W / 8);
    ck_assert_int_eq(st_replay_check(r, 9, 0, a + 2 * TR_BURST), ST_EAUTH); /* left behind */
    ck_assert_int_eq(st_replay_check(r, 9, 0, far), ST_EAUTH);
    ck_assert_int_eq(st_replay_check(r, 9, 0, far - 1), ST_OK);
    st_replay_close(r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("replay");
    TCase *tc = tcase_create("table");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_replay_oracle);
    tcase_add_test(tc, test_replay_clients_small);
    tcase_add_test(tc, test_replay_dense_and_back);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
