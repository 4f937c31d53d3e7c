/* test_pipe_gate.c - common/net/pipe_gate.h on a real REP socket over loopback
 * TCP: raw peers speak NNG's SP handshake and frames, so the test controls
 * exactly which connection has sent what. Rules: the caps refuse, the
 * unauthenticated beyond max_new are evicted oldest first (at once), those
 * beyond max_unproven only once past the grace, proven and PENDING ones
 * never, FAILED ones like NEW; the deadline closes unproven ones and spares
 * proven ones; in-process connections are not gated. Each wait is for an
 * event (a closed connection, a count), bounded by WAIT_MS; the one sleep
 * passes ST_PIPE_GATE_GRACE_MS, a clock condition, not a speed. */
#include <arpa/inet.h>
#include <check.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/util/platform.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/net/pipe_gate.h"

#define WAIT_MS 5000
#define SP_REQ 0x30 /* our side of the handshake: a REQ peer */

typedef struct server {
    nng_socket s;
    st_pipe_gate *g;
    int port;
} server;

static void server_open(server *sv, st_pipe_gate_cfg cfg, bool inproc)
{
    ck_assert_int_eq(nng_rep0_open(&sv->s), 0);
    nng_socket_set_size(sv->s, NNG_OPT_RECVMAXSZ, cfg.max_frame);
    ck_assert_int_eq(st_pipe_gate_open(sv->s, &cfg, &sv->g), ST_OK);
    nng_listener l;
    ck_assert_int_eq(nng_listener_create(&l, sv->s, "tcp://127.0.0.1:0"), 0);
    ck_assert_int_eq(nng_listener_start(l, 0), 0);
    ck_assert_int_eq(nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &sv->port), 0);
    if (inproc)
        ck_assert_int_eq(nng_listen(sv->s, "inproc://pipe-gate-test", NULL, 0), 0);
}

static void server_close(server *sv)
{
    nng_close(sv->s);
    st_pipe_gate_close(sv->g);
}

static st_pipe_gate_cfg cfg_of(uint32_t max_unproven, uint32_t max_new, uint32_t unproven_ms)
{
    st_pipe_gate_cfg c = {.name = "test",
                          .max_frame = 4096,
                          .max_pipes = 8,
                          .max_per_addr = 6,
                          .max_unproven = max_unproven,
                          .max_new = max_new,
                          .unproven_ms = unproven_ms};
    return c;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_ms(unsigned ms) { nng_msleep(ms); }

static st_pipe_gate_counts counts(server *sv)
{
    st_pipe_gate_counts c = {0};
    st_pipe_gate_add_counts(sv->g, &c);
    return c;
}

/* wait_evicted - until the gate evicted n connections. */
static void wait_evicted(server *sv, uint64_t n)
{
    uint64_t end = now_ms() + WAIT_MS;
    while (counts(sv).evicted != n && now_ms() < end)
        sleep_ms(5);
    ck_assert_uint_eq(counts(sv).evicted, n);
}

/* wait_pipes - until the gate holds n connections (each admitted by its
 * ADD_PRE callback, which runs after our side's handshake completed). */
static void wait_pipes(server *sv, uint32_t n)
{
    uint64_t end = now_ms() + WAIT_MS;
    while (counts(sv).pipes != n && now_ms() < end)
        sleep_ms(5);
    ck_assert_uint_eq(counts(sv).pipes, n);
}

/* raw_connect - a TCP connection that completed the SP handshake. */
static int raw_connect(const server *sv)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)sv->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    uint8_t hs[8] = {0, 'S', 'P', 0, 0, SP_REQ, 0, 0}, back[8];
    ck_assert_int_eq(send(fd, hs, sizeof hs, 0), (ssize_t)sizeof hs);
    ck_assert_int_eq(recv(fd, back, sizeof back, MSG_WAITALL), (ssize_t)sizeof back);
    return fd;
}

/* raw_request - one complete REQ frame (request id, then body) on fd. */
static void raw_request(int fd, uint32_t id, const char *body)
{
    uint8_t buf[64];
    size_t n = strlen(body), len = 4 + n;
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)((uint64_t)len >> (8 * (7 - i)));
    uint32_t rid = id | 0x80000000u;
    for (int i = 0; i < 4; i++)
        buf[8 + i] = (uint8_t)(rid >> (8 * (3 - i)));
    memcpy(buf + 12, body, n);
    ck_assert_int_eq(send(fd, buf, 12 + n, 0), (ssize_t)(12 + n));
}

/* closed_within - whether the server closed fd within ms (EOF or reset). */
static bool closed_within(int fd, unsigned ms)
{
    uint64_t end = now_ms() + ms;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int left = (int)(end > now_ms() ? end - now_ms() : 0);
        if (poll(&p, 1, left) <= 0)
            return false;
        uint8_t b[256];
        ssize_t r = recv(fd, b, sizeof b, MSG_DONTWAIT);
        if (r <= 0)
            return true;
        /* a reply: read on */
    }
}

/* ctx_recv - a request on a context of its own (so each can be answered). */
static nng_msg *ctx_recv(server *sv, nng_ctx *ctx)
{
    ck_assert_int_eq(nng_ctx_open(ctx, sv->s), 0);
    nng_aio *aio;
    ck_assert_int_eq(nng_aio_alloc(&aio, NULL, NULL), 0);
    nng_aio_set_timeout(aio, WAIT_MS);
    nng_ctx_recv(*ctx, aio);
    nng_aio_wait(aio);
    ck_assert_int_eq(nng_aio_result(aio), 0);
    nng_msg *m = nng_aio_get_msg(aio);
    nng_aio_free(aio);
    return m;
}

/* ctx_reply - sends m (taken) as the answer of ctx's request. */
static void ctx_reply(nng_ctx ctx, nng_msg *m)
{
    nng_aio *aio;
    ck_assert_int_eq(nng_aio_alloc(&aio, NULL, NULL), 0);
    nng_aio_set_msg(aio, m);
    nng_aio_set_timeout(aio, WAIT_MS);
    nng_ctx_send(ctx, aio);
    nng_aio_wait(aio);
    ck_assert_int_eq(nng_aio_result(aio), 0);
    nng_aio_free(aio);
    nng_ctx_close(ctx);
}

static nng_msg *server_recv(server *sv)
{
    nng_ctx ctx;
    nng_msg *m = ctx_recv(sv, &ctx);
    nng_ctx_close(ctx);
    return m;
}

/* proven_peer - a raw peer whose request id was received on *ctx (its
 * message in *m) and vouched for: its connection is proven. */
static int proven_peer(server *sv, uint32_t id, nng_ctx *ctx, nng_msg **m)
{
    int p = raw_connect(sv);
    raw_request(p, id, "hello");
    *m = ctx_recv(sv, ctx);
    st_pipe_gate_vouch(sv->g, *m);
    return p;
}

/* check_reply - answers ctx's request with m; peer p reads its reply. */
static void check_reply(int p, nng_ctx ctx, nng_msg *m, uint32_t id)
{
    ctx_reply(ctx, m);
    uint8_t buf[12]; /* the length, then the request id */
    ck_assert_int_eq(recv(p, buf, sizeof buf, MSG_WAITALL), (ssize_t)sizeof buf);
    ck_assert_uint_eq(buf[11], id);
}

START_TEST(evicts_oldest_beyond_max_new)
{
    server sv;
    server_open(&sv, cfg_of(2, 2, 0), false);
    int a = raw_connect(&sv);
    wait_pipes(&sv, 1); /* admitted before b: the older (ADD_PRE runs after our handshake) */
    int b = raw_connect(&sv);
    wait_pipes(&sv, 2);
    int c = raw_connect(&sv); /* a third within the grace: the oldest goes at once */
    ck_assert(closed_within(a, WAIT_MS));
    wait_pipes(&sv, 2);
    ck_assert(!closed_within(b, 100));
    ck_assert(!closed_within(c, 100));
    st_pipe_gate_counts n = counts(&sv);
    ck_assert_uint_eq(n.evicted, 1);
    ck_assert_uint_eq(n.refused, 0);
    ck_assert_uint_eq(n.unproven, 2);
    close(a), close(b), close(c);
    server_close(&sv);
}
END_TEST

START_TEST(young_kept_until_the_grace)
{
    server sv;
    server_open(&sv, cfg_of(1, 3, 0), false);
    int a = raw_connect(&sv);
    wait_pipes(&sv, 1); /* admitted before b */
    int b = raw_connect(&sv);
    wait_pipes(&sv, 2); /* over max_unproven, within max_new: none is old enough */
    ck_assert_uint_eq(counts(&sv).evicted, 0);
    ck_assert(!closed_within(a, 100));
    sleep_ms(ST_PIPE_GATE_GRACE_MS + 100); /* a and b are past the grace now */
    int c = raw_connect(&sv);
    ck_assert(closed_within(a, WAIT_MS)); /* the oldest of those past it */
    wait_pipes(&sv, 2);
    ck_assert(!closed_within(b, 100));
    ck_assert_uint_eq(counts(&sv).evicted, 1);
    close(a), close(b), close(c);
    server_close(&sv);
}
END_TEST

START_TEST(proven_and_pending_never_evicted)
{
    server sv;
    server_open(&sv, cfg_of(1, 1, 0), false);
    nng_ctx pctx;
    nng_msg *m;
    int p = proven_peer(&sv, 1, &pctx, &m);
    int q = raw_connect(&sv);
    raw_request(q, 2, "judge me");
    nng_msg *mq = server_recv(&sv);
    st_pipe_gate_seen(sv.g, mq); /* arrived, waits to be judged: PENDING */
    int fds[4];
    fds[0] = raw_connect(&sv);
    wait_pipes(&sv, 3);
    for (int i = 1; i < 4; i++) { /* each evicts the previous NEW one */
        fds[i] = raw_connect(&sv);
        wait_evicted(&sv, (uint64_t)i);
    }
    for (int i = 0; i < 3; i++)
        ck_assert(closed_within(fds[i], WAIT_MS));
    wait_pipes(&sv, 3);
    ck_assert(!closed_within(p, 100));
    ck_assert(!closed_within(q, 100));
    ck_assert_uint_eq(counts(&sv).evicted, 3);
    check_reply(p, pctx, m, 1); /* the proven one still gets its reply */
    nng_msg_free(mq);
    close(p), close(q);
    for (int i = 0; i < 4; i++)
        close(fds[i]);
    server_close(&sv);
}
END_TEST

START_TEST(failed_evicted_like_new)
{
    server sv;
    server_open(&sv, cfg_of(2, 2, 0), false);
    int f = raw_connect(&sv);
    raw_request(f, 1, "forged");
    nng_msg *m = server_recv(&sv);
    st_pipe_gate_seen(sv.g, m);
    st_pipe_gate_failed(sv.g, m); /* judged: failed authentication */
    nng_msg_free(m);
    int a = raw_connect(&sv);
    wait_pipes(&sv, 2); /* f was admitted before its frame came: it is the older */
    int b = raw_connect(&sv); /* the failed one is the oldest unauthenticated */
    ck_assert(closed_within(f, WAIT_MS));
    ck_assert(!closed_within(a, 100));
    ck_assert(!closed_within(b, 100));
    close(f), close(a), close(b);
    server_close(&sv);
}
END_TEST

START_TEST(deadline_closes_unproven_only)
{
    server sv;
    server_open(&sv, cfg_of(4, 4, 300), false);
    nng_ctx pctx;
    nng_msg *m;
    int p = proven_peer(&sv, 7, &pctx, &m);
    int a = raw_connect(&sv);
    uint8_t partial[8 + 100] = {0, 0, 0, 0, 0, 0, 0x0f, 0xff}; /* declares 4095 bytes */
    ck_assert_int_eq(send(a, partial, sizeof partial, 0), (ssize_t)sizeof partial);
    ck_assert(closed_within(a, WAIT_MS)); /* never finished: closed at the deadline */
    ck_assert_uint_eq(counts(&sv).expired, 1);
    ck_assert(!closed_within(p, 600)); /* twice the deadline: the proven one stays */
    check_reply(p, pctx, m, 7);
    close(p), close(a);
    server_close(&sv);
}
END_TEST

START_TEST(caps_refuse)
{
    server sv;
    server_open(&sv, cfg_of(8, 8, 0), false);
    int fds[7];
    for (int i = 0; i < 6; i++)
        fds[i] = raw_connect(&sv);
    wait_pipes(&sv, 6);
    fds[6] = raw_connect(&sv); /* a 7th from one address: over max_per_addr */
    ck_assert(closed_within(fds[6], WAIT_MS));
    st_pipe_gate_counts n = counts(&sv);
    ck_assert_uint_eq(n.refused, 1);
    ck_assert_uint_eq(n.evicted, 0);
    ck_assert_uint_eq(n.pipes, 6);
    for (int i = 0; i < 6; i++)
        ck_assert(!closed_within(fds[i], 20));
    for (int i = 0; i < 7; i++)
        close(fds[i]);
    server_close(&sv);
}
END_TEST

START_TEST(inproc_not_gated)
{
    server sv;
    server_open(&sv, cfg_of(1, 1, 200), true);
    nng_socket c[3];
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(nng_req0_open(&c[i]), 0);
        ck_assert_int_eq(nng_dial(c[i], "inproc://pipe-gate-test", NULL, 0), 0);
    }
    sleep_ms(600); /* three deadlines */
    st_pipe_gate_counts n = counts(&sv);
    ck_assert_uint_eq(n.pipes, 0);
    ck_assert_uint_eq(n.evicted + n.expired + n.refused, 0);
    ck_assert_int_eq(nng_send(c[2], "x", 1, 0), 0); /* still connected */
    nng_msg *m = server_recv(&sv);
    nng_msg_free(m);
    for (int i = 0; i < 3; i++)
        nng_close(c[i]);
    server_close(&sv);
}
END_TEST

START_TEST(cfg_checked)
{
    nng_socket s;
    ck_assert_int_eq(nng_rep0_open(&s), 0);
    st_pipe_gate *g;
    st_pipe_gate_cfg c = cfg_of(3, 2, 0); /* max_new below max_unproven */
    ck_assert_int_eq(st_pipe_gate_open(s, &c, &g), ST_EINVAL);
    c = cfg_of(0, 2, 0);
    ck_assert_int_eq(st_pipe_gate_open(s, &c, &g), ST_EINVAL);
    c = cfg_of(2, 9, 0); /* over max_pipes */
    ck_assert_int_eq(st_pipe_gate_open(s, &c, &g), ST_EINVAL);
    ck_assert_uint_eq(st_pipe_gate_unproven_for((size_t)4 << 20), 3);
    ck_assert_uint_eq(st_pipe_gate_unproven_for((size_t)24 << 20), ST_PIPE_GATE_UNPROVEN_MIN);
    ck_assert_uint_eq(st_pipe_gate_unproven_for(4096), ST_PIPE_GATE_UNPROVEN_MAX);
    nng_close(s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("pipe_gate");
    TCase *tc = tcase_create("gate");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, evicts_oldest_beyond_max_new);
    tcase_add_test(tc, young_kept_until_the_grace);
    tcase_add_test(tc, proven_and_pending_never_evicted);
    tcase_add_test(tc, failed_evicted_like_new);
    tcase_add_test(tc, deadline_closes_unproven_only);
    tcase_add_test(tc, caps_refuse);
    tcase_add_test(tc, inproc_not_gated);
    tcase_add_test(tc, cfg_checked);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
