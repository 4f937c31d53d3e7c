/* test_push_link.c - worker/data/push_link.h: links re-pointed between two PULL
 * listeners thousands of times while sending, from four threads at once,
 * and the process survives with messages arriving at both (with libnng
 * 1.5.2 the old way, closing the dialer of a socket that goes on sending,
 * killed this process within seconds: push_link.h); a link without an
 * address is not ready and refuses sends; a bad address is an error and the
 * link then points elsewhere. The churn is a fixed number of re-points, not
 * a duration. */
#include <check.h>
#include <nng/nng.h>
#include <nng/protocol/pipeline0/pull.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/data/push_link.h"

#define PL_THREADS 4
#define PL_POINTS 2500    /* re-points per thread */
#define PL_SENDS_MAX 4    /* messages sent between re-points: 0..3 */
#define PL_MSG_BYTES 512
#define PL_SEND_MS 20     /* a send without a pipe yet gives up after this */
#define PL_RECV_MS 50
#define PL_RECONNECT_MIN_MS 1
#define PL_RECONNECT_MAX_MS 10

/* LeakSanitizer's suppressions for this binary (it reads them from this
 * function when present; without ASan nothing calls it). libnng 1.5.2 never
 * frees a dialer, its TCP dialer and its connection when their socket is
 * closed while that dialer is connecting: about 180 of the churn's 10,000
 * re-points, ~4 KB each, all allocated inside libnng (docs/worker.md, "The
 * PUSH links and libnng 1.5.2"). Scope: every leak allocated through
 * libnng in this test, its messages included; the test's code allocates
 * nothing else. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libnng.so.1\n"; }

typedef struct pl_sink {
    nng_socket s;
    char addr[64];
    atomic_long got;
    pthread_t th;
} pl_sink;

static atomic_int pl_stop;

static void *pl_drain(void *arg)
{
    pl_sink *k = arg;
    while (!atomic_load(&pl_stop)) {
        nng_msg *m;
        if (nng_recvmsg(k->s, &m, 0) == 0) {
            atomic_fetch_add(&k->got, 1);
            nng_msg_free(m);
        }
    }
    return NULL;
}

static void pl_sink_open(pl_sink *k)
{
    nng_listener l;
    int port = 0;
    ck_assert_int_eq(nng_pull0_open(&k->s), 0);
    ck_assert_int_eq(nng_socket_set_ms(k->s, NNG_OPT_RECVTIMEO, PL_RECV_MS), 0);
    ck_assert_int_eq(nng_listener_create(&l, k->s, "tcp://127.0.0.1:0"), 0);
    ck_assert_int_eq(nng_listener_start(l, 0), 0);
    ck_assert_int_eq(nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port), 0);
    snprintf(k->addr, sizeof k->addr, "tcp://127.0.0.1:%d", port);
    atomic_store(&k->got, 0);
    ck_assert_int_eq(pthread_create(&k->th, NULL, pl_drain, k), 0);
}

typedef struct pl_churn {
    const pl_sink *a, *b;
    unsigned seed;
    long sent, points;
} pl_churn;

static void *pl_churner(void *arg)
{
    pl_churn *c = arg;
    st_push_link l; /* no send buffer: a send waits for a connected pipe */
    if (st_push_link_open(&l, PL_SEND_MS, 0) != ST_OK)
        return NULL;
    for (int i = 0; i < PL_POINTS; i++) {
        const char *to = i % 2 ? c->a->addr : c->b->addr;
        if (st_push_link_point(&l, to, PL_RECONNECT_MIN_MS, PL_RECONNECT_MAX_MS, NULL) != ST_OK)
            break;
        c->points++;
        int n = (int)(rand_r(&c->seed) % PL_SENDS_MAX);
        for (int j = 0; j < n; j++) {
            nng_msg *m;
            if (nng_msg_alloc(&m, PL_MSG_BYTES) != 0)
                continue;
            if (st_push_link_send(&l, m) == 0)
                c->sent++;
            else
                nng_msg_free(m);
        }
    }
    st_push_link_close(&l);
    return NULL;
}

START_TEST(churn_survives)
{
    pl_sink a, b;
    atomic_store(&pl_stop, 0);
    pl_sink_open(&a);
    pl_sink_open(&b);
    pthread_t th[PL_THREADS];
    pl_churn c[PL_THREADS];
    for (int i = 0; i < PL_THREADS; i++) {
        c[i] = (pl_churn){.a = &a, .b = &b, .seed = 1234u + (unsigned)i};
        ck_assert_int_eq(pthread_create(&th[i], NULL, pl_churner, &c[i]), 0);
    }
    long sent = 0, points = 0;
    for (int i = 0; i < PL_THREADS; i++) {
        pthread_join(th[i], NULL);
        sent += c[i].sent;
        points += c[i].points;
    }
    /* sends of a closed socket may be lost (its queue goes with it): wait
     * for what was taken to drain, at most what arrived at both */
    atomic_store(&pl_stop, 1);
    pthread_join(a.th, NULL);
    pthread_join(b.th, NULL);
    long got = atomic_load(&a.got) + atomic_load(&b.got);
    printf("push_link churn: %ld re-points, %ld messages taken, %ld arrived (%ld at a, %ld at b)\n",
           points, sent, got, (long)atomic_load(&a.got), (long)atomic_load(&b.got));
    ck_assert_int_eq(points, (long)PL_THREADS * PL_POINTS);
    ck_assert_int_gt(atomic_load(&a.got), 0);
    ck_assert_int_gt(atomic_load(&b.got), 0);
    ck_assert_int_le(got, sent);
    /* the sinks are left to the process's end (check forks each test):
     * libnng 1.5.2's nng_close of a PULL that 10000 connections came and
     * went on hung once in 18 runs here (docs/worker.md, "The PUSH links
     * and libnng 1.5.2"); the links themselves closed theirs without one */
}
END_TEST

START_TEST(no_address_and_bad_address)
{
    st_push_link l;
    ck_assert_int_eq(st_push_link_open(&l, PL_SEND_MS, PL_SENDS_MAX), ST_OK);
    ck_assert(!st_push_link_ready(&l));
    ck_assert_int_eq(st_push_link_point(&l, "", PL_RECONNECT_MIN_MS, PL_RECONNECT_MAX_MS, NULL), ST_OK);
    ck_assert(!st_push_link_ready(&l));
    ck_assert_int_eq(st_push_link_point(&l, "nosuch://x", PL_RECONNECT_MIN_MS, PL_RECONNECT_MAX_MS, NULL),
                     ST_ENNG);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "cannot dial nosuch://x"));
    ck_assert(!st_push_link_ready(&l));
    char longer[ST_PUSH_LINK_ADDR_MAX + 8];
    memset(longer, 'a', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    ck_assert_int_eq(st_push_link_point(&l, longer, PL_RECONNECT_MIN_MS, PL_RECONNECT_MAX_MS, NULL),
                     ST_ERANGE);
    pl_sink a;
    atomic_store(&pl_stop, 0);
    pl_sink_open(&a);
    ck_assert_int_eq(st_push_link_point(&l, a.addr, PL_RECONNECT_MIN_MS, PL_RECONNECT_MAX_MS, NULL), ST_OK);
    ck_assert(st_push_link_ready(&l));
    ck_assert_str_eq(l.addr, a.addr);
    st_push_link_close(&l);
    ck_assert(!st_push_link_ready(&l));
    nng_msg *m;
    ck_assert_int_eq(nng_msg_alloc(&m, 1), 0);
    ck_assert_int_eq(st_push_link_send(&l, m), NNG_ECLOSED);
    nng_msg_free(m);
    atomic_store(&pl_stop, 1);
    pthread_join(a.th, NULL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("push_link");
    TCase *tc = tcase_create("all");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, churn_survives);
    tcase_add_test(tc, no_address_and_bad_address);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
