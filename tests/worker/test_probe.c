/* test_probe.c - link measurement (worker/daemon/probe.h): the median and the
 * latency / bandwidth estimate, and the prober thread against an
 * in-process peer that answers probes like a worker's control socket
 * (with and without a cluster key; a peer with another key is never
 * measured). */
#include <check.h>
#include <math.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/clock.h"
#include "common/wire/envelope.h"
#include "common/wire/msg.h"
#include "worker/daemon/probe.h"

START_TEST(test_median)
{
    double a[] = {5, 1, 3};
    ck_assert_double_eq(st_probe_median(a, 3), 3);
    ck_assert(a[0] == 1 && a[1] == 3 && a[2] == 5); /* sorted in place */
    double b[] = {4, 1, 3, 2};
    ck_assert_double_eq(st_probe_median(b, 4), 2.5);
    double c[] = {7};
    ck_assert_double_eq(st_probe_median(c, 1), 7);
    ck_assert_double_eq(st_probe_median(NULL, 0), 0);
}
END_TEST

START_TEST(test_estimate)
{
    /* small RTTs around 0.2 ms (one outlier), large ones around 8.59 ms:
     * 1 MiB over 8.39 ms is 125 MB/s (1 Gbit/s) */
    double s[] = {0.0002, 0.0002, 0.009, 0.0002, 0.0002};
    double l[] = {0.00859, 0.05, 0.00859};
    double lat, bw;
    ck_assert_int_eq(st_probe_estimate(s, 5, l, 3, 1u << 20, &lat, &bw), ST_OK);
    ck_assert_double_eq_tol(lat, 0.0001, 1e-12);
    ck_assert_double_eq_tol(bw, (double)(1u << 20) / 0.00839, 1e-3);
    /* a large median not above the small one: no information, measure again */
    double s2[] = {0.001, 0.001}, l2[] = {0.0009};
    ck_assert_int_eq(st_probe_estimate(s2, 2, l2, 1, 1u << 20, &lat, &bw), ST_ERANGE);
    /* a very fast link is clamped to the upper bound */
    double s6[] = {0.001}, l6[] = {0.001 + 1e-9};
    ck_assert_int_eq(st_probe_estimate(s6, 1, l6, 1, 1u << 20, &lat, &bw), ST_OK);
    ck_assert_double_eq(bw, ST_PROBE_BW_MAX);
    /* a very slow link is clamped to the lower bound */
    double s3[] = {0.001}, l3[] = {1000.0};
    ck_assert_int_eq(st_probe_estimate(s3, 1, l3, 1, 1u << 20, &lat, &bw), ST_OK);
    ck_assert_double_eq(bw, ST_PROBE_BW_MIN);
    /* bad inputs */
    double s4[] = {0.001, NAN}, l4[] = {0.002};
    ck_assert_int_eq(st_probe_estimate(s4, 2, l4, 1, 1u << 20, &lat, &bw), ST_EINVAL);
    double s5[] = {0.001}, l5[] = {-1};
    ck_assert_int_eq(st_probe_estimate(s5, 1, l5, 1, 1u << 20, &lat, &bw), ST_EINVAL);
    ck_assert_int_eq(st_probe_estimate(s5, 0, l4, 1, 1u << 20, &lat, &bw), ST_EINVAL);
    ck_assert_int_eq(st_probe_estimate(s5, 1, l4, 0, 1u << 20, &lat, &bw), ST_EINVAL);
}
END_TEST

/* ---- a fake peer: a REP answering Probe with ProbeReply ---- */

typedef struct fake_peer {
    nng_socket rep;
    char addr[64];
    st_env env;
    pthread_t th;
    atomic_int probes, large, bad;
    /* a hold point: the reply to probe number hold_at (1-based; 0: none)
     * waits until released */
    int hold_at;
    atomic_int held;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool released; /* under mu */
} fake_peer;

static void *fp_main(void *arg)
{
    fake_peer *f = arg;
    for (;;) {
        nng_msg *in;
        if (nng_recvmsg(f->rep, &in, 0) != 0)
            return NULL; /* closed */
        Strata__Msg *m = NULL;
        st_err e = st_msg_unpack(&f->env, ST_ENV_CONTROL, in, &m, NULL);
        nng_msg_free(in);
        if (e != ST_OK || m->body_case != STRATA__MSG__BODY_PROBE) {
            atomic_fetch_add(&f->bad, 1);
            st_msg_free(m);
            continue; /* unanswered: the prober times out */
        }
        int nth = atomic_fetch_add(&f->probes, 1) + 1;
        if (nth == f->hold_at) {
            atomic_store(&f->held, 1);
            pthread_mutex_lock(&f->mu);
            while (!f->released)
                pthread_cond_wait(&f->cv, &f->mu);
            pthread_mutex_unlock(&f->mu);
        }
        if (m->probe->payload.len >= ST_PROBE_PAYLOAD)
            atomic_fetch_add(&f->large, 1);
        Strata__ProbeReply pr = STRATA__PROBE_REPLY__INIT;
        pr.seq = m->probe->seq;
        Strata__Msg r = STRATA__MSG__INIT;
        r.body_case = STRATA__MSG__BODY_PROBE_REPLY;
        r.probe_reply = &pr;
        st_msg_free(m);
        st_msg_send(f->rep, &f->env, ST_ENV_CONTROL, &r);
    }
}

static void fp_open(fake_peer *f, const uint8_t *key)
{
    memset(f, 0, sizeof *f);
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    ck_assert_int_eq(nng_rep0_open(&f->rep), 0);
    nng_socket_set_size(f->rep, NNG_OPT_RECVMAXSZ, 4u << 20);
    nng_listener l;
    ck_assert_int_eq(nng_listener_create(&l, f->rep, "tcp://127.0.0.1:0"), 0);
    ck_assert_int_eq(nng_listener_start(l, 0), 0);
    int port;
    ck_assert_int_eq(nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port), 0);
    snprintf(f->addr, sizeof f->addr, "tcp://127.0.0.1:%d", port);
    ck_assert_int_eq(st_env_init(&f->env, key, 900), ST_OK);
    ck_assert_int_eq(pthread_create(&f->th, NULL, fp_main, f), 0);
}

static void fp_close(fake_peer *f)
{
    nng_close(f->rep);
    pthread_join(f->th, NULL);
    st_env_fini(&f->env);
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
}

static void fp_release(fake_peer *f)
{
    pthread_mutex_lock(&f->mu);
    f->released = true;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

/* wait_links - polls the prober until it reports n links (or 10 s pass). */
static size_t wait_links(st_prober *p, size_t n, st_probe_link *out, double secs)
{
    double end = st_now_s() + secs;
    size_t k = 0;
    while ((k = st_probe_links(p, out, 8)) < n && st_now_s() < end)
        st_sleep_ms(20);
    return k;
}

/* start_prober - a running prober (id 7) whose one peer (id 42, in *peer)
 * is f. */
static st_prober *start_prober(const uint8_t *our_key, const fake_peer *f, st_probe_peer *peer)
{
    st_prober *p;
    ck_assert_int_eq(st_probe_open(our_key, false, 1000, 60, &p), ST_OK);
    ck_assert_int_eq(st_probe_start(p), ST_OK);
    *peer = (st_probe_peer){.id = 42};
    snprintf(peer->addr, sizeof peer->addr, "%s", f->addr);
    st_probe_set_peers(p, 7, peer, 1);
    return p;
}

static void run_prober(const uint8_t *peer_key, const uint8_t *our_key, bool expect)
{
    fake_peer f;
    fp_open(&f, peer_key);
    st_probe_peer peer;
    st_prober *p = start_prober(our_key, &f, &peer);
    st_probe_link l[8];
    size_t k = wait_links(p, 1, l, expect ? 10 : 1.5);
    if (expect) {
        ck_assert_uint_eq(k, 1);
        ck_assert_uint_eq(l[0].peer_id, 42);
        ck_assert(l[0].latency_s > 0 && l[0].latency_s < 1);
        ck_assert(l[0].bw >= ST_PROBE_BW_MIN && l[0].bw <= ST_PROBE_BW_MAX);
        ck_assert_uint_eq(l[0].samples, ST_PROBE_SMALL + ST_PROBE_LARGE);
        /* whole rounds (a noisy one is repeated): a warm-up, the small and
         * the large probes each */
        int round = 1 + ST_PROBE_SMALL + ST_PROBE_LARGE, got = atomic_load(&f.probes);
        ck_assert_int_gt(got, 0);
        ck_assert_int_eq(got % round, 0);
        ck_assert_int_eq(atomic_load(&f.large), got / round * ST_PROBE_LARGE);
        /* the same peers again: nothing is re-measured before the interval */
        st_probe_set_peers(p, 7, &peer, 1);
        st_sleep_ms(1500);
        ck_assert_int_eq(atomic_load(&f.probes), got);
        /* a peer dropped from the list is forgotten */
        st_probe_set_peers(p, 7, NULL, 0);
        ck_assert_uint_eq(st_probe_links(p, l, 8), 0);
    } else {
        ck_assert_uint_eq(k, 0);
        ck_assert_int_eq(atomic_load(&f.probes), 0);
        ck_assert_int_ge(atomic_load(&f.bad), 1); /* refused by its MAC */
    }
    /* with the wrong key a call waits for its reply until its timeout
     * (ST_PROBE_TIMEOUT_MS): close ends the round there (test_prober_stop) */
    st_probe_close(p);
    fp_close(&f);
    nng_fini();
}

typedef struct closer {
    st_prober *p;
    atomic_int done;
} closer;

static void *closer_main(void *arg)
{
    closer *c = arg;
    st_probe_close(c->p);
    atomic_store(&c->done, 1);
    return NULL;
}

/* Stopping in the middle of a round, at a known step: the fake peer holds
 * its reply to the round's third call. st_probe_stop returns at once; the
 * call in flight is not cut short (NNG 1.5.2's close can hang forever when
 * a reply arrives on a closing pipe: probe.c), so st_probe_close waits for
 * the reply, and the round ends there: no further call reaches the peer. */
START_TEST(test_prober_stop)
{
    fake_peer f;
    fp_open(&f, NULL);
    f.hold_at = 3; /* the warm-up, one small probe, then this one */
    st_probe_peer peer;
    st_prober *p = start_prober(NULL, &f, &peer);
    double end = st_now_s() + 20;
    while (!atomic_load(&f.held) && st_now_s() < end)
        st_sleep_ms(10);
    ck_assert_msg(atomic_load(&f.held), "the round never reached its third call");
    st_probe_stop(p); /* does not wait */
    closer c = {.p = p};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, closer_main, &c), 0);
    st_sleep_ms(200); /* a close that cut the call short would have ended by now */
    ck_assert_msg(!atomic_load(&c.done), "st_probe_close returned while its reply was held");
    fp_release(&f);
    pthread_join(th, NULL);
    ck_assert_int_eq(atomic_load(&c.done), 1);
    ck_assert_int_eq(atomic_load(&f.probes), 3); /* nothing after the held call */
    fp_close(&f);
    nng_fini();
}
END_TEST

START_TEST(test_prober_open) { run_prober(NULL, NULL, true); }
END_TEST

START_TEST(test_prober_keyed)
{
    uint8_t key[ST_KEY_BYTES];
    memset(key, 0x5c, sizeof key);
    run_prober(key, key, true);
}
END_TEST

START_TEST(test_prober_wrong_key)
{
    uint8_t a[ST_KEY_BYTES], b[ST_KEY_BYTES];
    memset(a, 1, sizeof a);
    memset(b, 2, sizeof b);
    run_prober(a, b, false);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("probe");
    TCase *t = tcase_create("probe");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, test_median);
    tcase_add_test(t, test_estimate);
    tcase_add_test(t, test_prober_open);
    tcase_add_test(t, test_prober_keyed);
    tcase_add_test(t, test_prober_wrong_key);
    tcase_add_test(t, test_prober_stop);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
