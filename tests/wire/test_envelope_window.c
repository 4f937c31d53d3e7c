/* test_envelope_window.c - the envelope's anti-replay window
 * (ST_ENV_REPLAY_WINDOW, common/wire/envelope.h): frames opened out of order
 * within it are taken once each; a duplicate, a frame older than the
 * window (also after a jump far ahead) and an evicted sender's old frame
 * are refused; the bitmap's words and ring end; a frame failing its MAC
 * records nothing. Sequence numbers are set exactly (te_seal_at). */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "common/wire/envelope.h"
#include "tests/wire/test_envelope.h"

#define TE_W ((uint64_t)ST_ENV_REPLAY_WINDOW)
#define TE_AHEAD_US (30ull * 1000000u)   /* te_anchor's lead on the clock (< ST_ENV_WINDOW_US) */
#define TE_CHURN (ST_ENV_MAX_PEERS + 16) /* senders evicting each other */
#define TE_CHURN_ROUNDS 2
#define TE_CHURN_FRAMES 2          /* per sender and round */
#define TE_CHURN_ROUND_US 1000000u /* a round's numbers lie this far above the last one's */

/* te_anchor - a sequence number TE_AHEAD_US ahead of the clock, a multiple
 * of the window (so offsets name bitmap words): te_seal_at gives a frame
 * exactly the number asked for as long as the clock has not caught up
 * (asserted), and the receiver's clock check takes it. */
static uint64_t te_anchor(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    uint64_t now = (uint64_t)tv.tv_sec * 1000000u + (uint64_t)tv.tv_usec + TE_AHEAD_US;
    return (now / TE_W + 1) * TE_W;
}

/* te_seal_at - a frame of tx with sequence number seq. */
static void te_seal_at(st_env *tx, te_frame *f, uint64_t seq)
{
    tx->seq = seq - 1;
    te_seal(tx, f, TE_BODY);
    ck_assert_uint_eq(tx->seq, seq);
}

/* te_open - opens a copy of f (a sealed frame is decrypted in place), so
 * that f can be sent again. */
static st_err te_open(st_env *rx, const te_frame *f)
{
    te_frame c = *f;
    st_env_frame fr;
    return st_env_open(rx, c.buf, c.len, &fr);
}

/* te_refused - f is refused as a replay, for the reason why. */
static void te_refused(st_env *rx, const te_frame *f, const char *why)
{
    ck_assert_int_eq(te_open(rx, f), ST_EAUTH);
    ck_assert_msg(strstr(st_errdetail(), why) != NULL, "'%s' does not say '%s'", st_errdetail(),
                  why);
}

/* frames opened out of order within the window are each taken once */
START_TEST(test_window_out_of_order)
{
    static const uint64_t at[] = {0, 1, 2, 3, 64, 65, 1000, TE_W - 1};
    static const size_t order[] = {7, 3, 0, 5, 2, 6, 1, 4}; /* the highest first */
    enum { N = sizeof at / sizeof at[0] };
    uint8_t key[ST_KEY_BYTES];
    te_key(key, 0x42);
    for (int enc = 0; enc < 2; enc++) {
        st_env tx, rx;
        ck_assert_int_eq(st_env_init_mode(&tx, key, enc, TE_SENDER), ST_OK);
        ck_assert_int_eq(st_env_init_mode(&rx, key, enc, TE_RECEIVER), ST_OK);
        uint64_t a = te_anchor();
        te_frame f[N];
        for (size_t i = 0; i < N; i++)
            te_seal_at(&tx, &f[i], a + at[i]);
        for (size_t i = 0; i < N; i++)
            ck_assert_msg(te_open(&rx, &f[order[i]]) == ST_OK, "a + %llu: %s",
                          (unsigned long long)at[order[i]], st_errdetail());
        for (size_t i = 0; i < N; i++)
            te_refused(&rx, &f[i], "already accepted");
        ck_assert_uint_eq(rx.auth_failed, N);
        st_env_fini(&tx);
        st_env_fini(&rx);
    }
}
END_TEST

/* the window's lower edge, and a jump far ahead: what it left behind is
 * refused, seen or not, and the numbers it entered are unseen */
START_TEST(test_window_edges)
{
    uint8_t key[ST_KEY_BYTES];
    te_key(key, 0x42);
    st_env tx, rx;
    ck_assert_int_eq(st_env_init_mode(&tx, key, false, TE_SENDER), ST_OK);
    ck_assert_int_eq(st_env_init_mode(&rx, key, false, TE_RECEIVER), ST_OK);
    uint64_t h = te_anchor() + 2 * TE_W;
    te_frame hi, out, in, far, gap, below, reused;
    te_seal_at(&tx, &out, h - TE_W);
    te_seal_at(&tx, &in, h - TE_W + 1);
    te_seal_at(&tx, &hi, h);
    te_seal_at(&tx, &gap, h + 1);
    te_seal_at(&tx, &reused, h + 9 * TE_W + 1); /* the bit `in` had */
    te_seal_at(&tx, &below, h + 10 * TE_W - 1);
    te_seal_at(&tx, &far, h + 10 * TE_W);
    ck_assert_int_eq(te_open(&rx, &hi), ST_OK);
    te_refused(&rx, &out, "older than its sender's replay window");
    ck_assert_int_eq(te_open(&rx, &in), ST_OK);
    te_refused(&rx, &in, "already accepted");
    ck_assert_int_eq(te_open(&rx, &far), ST_OK);
    te_refused(&rx, &gap, "older than"); /* never seen, but left behind */
    te_refused(&rx, &hi, "older than");
    ck_assert_int_eq(te_open(&rx, &below), ST_OK);
    ck_assert_int_eq(te_open(&rx, &reused), ST_OK); /* the jump cleared the bitmap */
    ck_assert_uint_eq(rx.auth_failed, 4);
    st_env_fini(&tx);
    st_env_fini(&rx);
}
END_TEST

/* numbers on both sides of a bitmap word's edge, and a slide by less than
 * the window across the ring's end: the numbers entering it are unseen,
 * those still in it keep their marks */
START_TEST(test_window_words)
{
    static const uint64_t taken[] = {63, 64, 127, 128};
    uint8_t key[ST_KEY_BYTES];
    te_key(key, 0x42);
    st_env tx, rx;
    ck_assert_int_eq(st_env_init_mode(&tx, key, false, TE_SENDER), ST_OK);
    ck_assert_int_eq(st_env_init_mode(&rx, key, false, TE_RECEIVER), ST_OK);
    uint64_t a = te_anchor();
    te_frame f;
    te_seal_at(&tx, &f, a + 130);
    ck_assert_int_eq(te_open(&rx, &f), ST_OK);
    for (size_t i = 0; i < sizeof taken / sizeof taken[0]; i++) {
        te_seal_at(&tx, &f, a + taken[i]);
        ck_assert_int_eq(te_open(&rx, &f), ST_OK);
        te_refused(&rx, &f, "already accepted");
    }
    te_seal_at(&tx, &f, a + TE_W + 100); /* slides by TE_W - 30 */
    ck_assert_int_eq(te_open(&rx, &f), ST_OK);
    static const uint64_t seen[] = {127, 128, 130};
    for (size_t i = 0; i < sizeof seen / sizeof seen[0]; i++) {
        te_seal_at(&tx, &f, a + seen[i]);
        te_refused(&rx, &f, "already accepted");
    }
    te_seal_at(&tx, &f, a + 100);
    te_refused(&rx, &f, "older than");
    /* unseen: the lowest number in the window, and those whose bits the
     * slide took over from a + 63 and a + 64 */
    static const uint64_t fresh[] = {101, TE_W + 63, TE_W + 64};
    for (size_t i = 0; i < sizeof fresh / sizeof fresh[0]; i++) {
        te_seal_at(&tx, &f, a + fresh[i]);
        ck_assert_msg(te_open(&rx, &f) == ST_OK, "a + %llu: %s", (unsigned long long)fresh[i],
                      st_errdetail());
    }
    ck_assert_uint_eq(rx.auth_failed, 4 + 4);
    st_env_fini(&tx);
    st_env_fini(&rx);
}
END_TEST

/* a sender taken back into the table after its eviction: its window
 * starts at the floor, so its old frames stay refused though they lie
 * within the window of its new ones; and the sender that took its slot
 * starts with a clean bitmap */
START_TEST(test_window_floor)
{
    uint8_t key[ST_KEY_BYTES];
    te_key(key, 0x42);
    st_env tx, ty, rx;
    ck_assert_int_eq(st_env_init_mode(&tx, key, false, TE_SENDER), ST_OK);
    ck_assert_int_eq(st_env_init_mode(&ty, key, false, TE_SENDER + ST_ENV_MAX_PEERS), ST_OK);
    ck_assert_int_eq(st_env_init_mode(&rx, key, false, TE_RECEIVER), ST_OK);
    uint64_t a = te_anchor();
    te_frame f5, f10, f15, f20, g;
    te_seal_at(&tx, &f5, a + 5);
    te_seal_at(&tx, &f10, a + 10);
    te_seal_at(&tx, &f15, a + 15);
    te_seal_at(&tx, &f20, a + 20);
    ck_assert_int_eq(te_open(&rx, &f10), ST_OK);
    ck_assert_int_eq(te_open(&rx, &f5), ST_OK);
    for (uint64_t i = 1; i < ST_ENV_MAX_PEERS; i++) { /* the table full */
        st_env o;
        ck_assert_int_eq(st_env_init_mode(&o, key, false, TE_SENDER + i), ST_OK);
        te_seal(&o, &g, TE_BODY);
        ck_assert_int_eq(te_open(&rx, &g), ST_OK);
        st_env_fini(&o);
    }
    /* ty takes tx's slot; its numbers on the bits of a + 5 and a + 10 */
    static const uint64_t ty_at[] = {TE_W + 20, TE_W + 10, TE_W + 5};
    for (size_t i = 0; i < sizeof ty_at / sizeof ty_at[0]; i++) {
        te_seal_at(&ty, &g, a + ty_at[i]);
        ck_assert_msg(te_open(&rx, &g) == ST_OK, "a + %llu: %s", (unsigned long long)ty_at[i],
                      st_errdetail());
    }
    te_refused(&rx, &f5, "floor");
    ck_assert_int_eq(te_open(&rx, &f20), ST_OK); /* back, evicting another */
    te_refused(&rx, &f10, "floor");
    te_refused(&rx, &f5, "floor");
    ck_assert_int_eq(te_open(&rx, &f15), ST_OK); /* above the floor, never taken */
    ck_assert_uint_eq(rx.auth_failed, 3);
    st_env_fini(&tx);
    st_env_fini(&ty);
    st_env_fini(&rx);
}
END_TEST

/* more senders than the table holds, each opening its frames out of
 * order, round after round: afterwards not one captured frame replays */
START_TEST(test_window_churn)
{
    enum { N = TE_CHURN * TE_CHURN_ROUNDS * TE_CHURN_FRAMES };
    uint8_t key[ST_KEY_BYTES];
    te_key(key, 0x42);
    st_env rx;
    ck_assert_int_eq(st_env_init_mode(&rx, key, false, TE_RECEIVER), ST_OK);
    te_frame *cap = malloc(N * sizeof *cap);
    ck_assert_ptr_nonnull(cap);
    uint64_t a = te_anchor();
    size_t n = 0;
    for (uint64_t r = 0; r < TE_CHURN_ROUNDS; r++) {
        for (uint64_t i = 0; i < TE_CHURN; i++) {
            st_env tx;
            ck_assert_int_eq(st_env_init_mode(&tx, key, false, TE_SENDER + i), ST_OK);
            uint64_t base = a + r * TE_CHURN_ROUND_US + i * (TE_CHURN_FRAMES + 1);
            for (uint64_t k = 0; k < TE_CHURN_FRAMES; k++)
                te_seal_at(&tx, &cap[n + k], base + k);
            for (uint64_t k = TE_CHURN_FRAMES; k-- > 0;) /* the highest first */
                ck_assert_msg(te_open(&rx, &cap[n + k]) == ST_OK, "round %llu sender %llu: %s",
                              (unsigned long long)r, (unsigned long long)i, st_errdetail());
            n += TE_CHURN_FRAMES;
            st_env_fini(&tx);
        }
    }
    ck_assert_uint_eq(n, N);
    ck_assert_uint_eq(rx.auth_failed, 0);
    for (size_t i = 0; i < N; i++)
        ck_assert_msg(te_open(&rx, &cap[i]) == ST_EAUTH, "frame %zu replayed", i);
    ck_assert_uint_eq(rx.auth_failed, N);
    free(cap);
    st_env_fini(&rx);
}
END_TEST

/* a frame failing its MAC or tag is not recorded: its number stays free,
 * and a forged number far ahead does not move the window */
START_TEST(test_window_forged)
{
    uint8_t key[ST_KEY_BYTES];
    te_key(key, 0x42);
    for (int enc = 0; enc < 2; enc++) {
        st_env tx, rx;
        ck_assert_int_eq(st_env_init_mode(&tx, key, enc, TE_SENDER), ST_OK);
        ck_assert_int_eq(st_env_init_mode(&rx, key, enc, TE_RECEIVER), ST_OK);
        uint64_t a = te_anchor();
        te_frame hi, mid, low, next, bad;
        te_seal_at(&tx, &low, a + 6);
        te_seal_at(&tx, &mid, a + 5);
        te_seal_at(&tx, &hi, a + 10);
        te_seal_at(&tx, &next, a + 11);
        ck_assert_int_eq(te_open(&rx, &hi), ST_OK);
        bad = mid;
        bad.buf[ST_ENV_HDR] ^= 0x01; /* a body byte */
        te_refused(&rx, &bad, "fails authentication");
        ck_assert_int_eq(te_open(&rx, &mid), ST_OK);
        bad = next; /* its number moved far ahead (still within the clock window) */
        for (int i = 0; i < 8; i++)
            bad.buf[20 + i] = (uint8_t)((a + 10 + 5 * TE_W) >> (8 * i));
        te_refused(&rx, &bad, "fails authentication");
        ck_assert_int_eq(te_open(&rx, &low), ST_OK);
        ck_assert_int_eq(te_open(&rx, &next), ST_OK);
        ck_assert_uint_eq(rx.auth_failed, 2);
        st_env_fini(&tx);
        st_env_fini(&rx);
    }
}
END_TEST

TCase *te_window_tcase(void)
{
    TCase *tc = tcase_create("window");
    tcase_add_test(tc, test_window_out_of_order);
    tcase_add_test(tc, test_window_edges);
    tcase_add_test(tc, test_window_words);
    tcase_add_test(tc, test_window_floor);
    tcase_add_test(tc, test_window_churn);
    tcase_add_test(tc, test_window_forged);
    return tc;
}
