/* test_fetch_stop.c - worker/fetch/fetch.h: st_fetch_stop ends a request in
 * flight by cancelling it, at a known step: the only source receives the
 * request and never answers, and a request's wait is FS_CALL_MS (ten
 * minutes), so only the cancel can end the fetch before the test's
 * timeout. The socket is not closed under the call: NNG 1.5.2's close can
 * wait forever when a reply arrives on a pipe as it closes (fetch_src.c,
 * common/base/exit_guard.h). After the stop, no further request reaches the
 * source. */
#include <check.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/base/clock.h"
#include "worker/fetch/fetch.h"

#define FS_CALL_MS (10 * 60 * 1000) /* far beyond the test's timeout */
#define FS_WAIT_S 20.0              /* for the request to arrive (no speed asserted) */

typedef struct fs_silent {
    nng_socket rep;
    char addr[64];
    pthread_t th;
    atomic_int requests;
} fs_silent;

static void *fs_silent_main(void *arg)
{
    fs_silent *s = arg;
    for (;;) {
        nng_msg *m;
        if (nng_recvmsg(s->rep, &m, 0) != 0)
            return NULL; /* closed */
        nng_msg_free(m);
        atomic_fetch_add(&s->requests, 1); /* and never a reply */
    }
}

typedef struct fs_run {
    st_fetch *f;
    st_err e;
    atomic_int done;
} fs_run;

static void *fs_header_main(void *arg)
{
    fs_run *r = arg;
    const char *path = NULL;
    r->e = st_fetch_header(r->f, &path);
    atomic_store(&r->done, 1);
    return NULL;
}

START_TEST(test_stop_cancels_the_call)
{
    fs_silent s;
    memset(&s, 0, sizeof s);
    ck_assert_int_eq(nng_rep0_open(&s.rep), 0);
    nng_listener l;
    ck_assert_int_eq(nng_listener_create(&l, s.rep, "tcp://127.0.0.1:0"), 0);
    ck_assert_int_eq(nng_listener_start(l, 0), 0);
    int port;
    ck_assert_int_eq(nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port), 0);
    snprintf(s.addr, sizeof s.addr, "tcp://127.0.0.1:%d", port);
    ck_assert_int_eq(pthread_create(&s.th, NULL, fs_silent_main, &s), 0);

    char dir[] = "/tmp/strata-fetch-stop-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    st_fetch_cfg cfg = {.sources = s.addr, .cache_dir = dir, .sender = 77, .pause_after = -1,
                        .call_ms = FS_CALL_MS};
    fs_run r = {0};
    ck_assert_int_eq(st_fetch_open(&cfg, &r.f), ST_OK);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, fs_header_main, &r), 0);
    double end = st_now_s() + FS_WAIT_S;
    while (atomic_load(&s.requests) < 1 && st_now_s() < end)
        st_sleep_ms(10);
    ck_assert_int_eq(atomic_load(&s.requests), 1); /* the known step: the request is out */
    ck_assert_int_eq(atomic_load(&r.done), 0);     /* and waits for its reply */
    st_fetch_stop(r.f);
    pthread_join(th, NULL); /* without the cancel: FS_CALL_MS, past the test's timeout */
    ck_assert_int_eq(r.e, ST_ECANCELED);
    ck_assert_int_eq(atomic_load(&s.requests), 1); /* nothing after the stop */
    st_fetch_close(r.f);
    nng_close(s.rep);
    pthread_join(s.th, NULL);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    nng_fini();
}
END_TEST

int main(void)
{
    Suite *su = suite_create("fetch_stop");
    TCase *t = tcase_create("fetch_stop");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, test_stop_cancels_the_call);
    suite_add_tcase(su, t);
    SRunner *r = srunner_create(su);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
