/* test_net_peer.c - the coordinator's peers (coordinator/control/net.h) against a
 * real REP or nothing, over loopback TCP: st_peer_cancel ends the
 * operations out at once without closing the socket (a reply arriving
 * afterwards is dropped, and the next operation on the same connection
 * gets its own reply); st_peer_close with an operation out ends it, and
 * the op outlives its peer until st_net_op_finish; a PUSH send that cannot
 * leave is canceled too. The reason for cancel-then-linger: net.h. */
#include <check.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <stdio.h>
#include <string.h>

#include "common/base/cq.h"
#include "coordinator/control/net.h"

#define WAIT_NS (20ull * 1000000000ull) /* an event that must come: generous */
#define OP_TIMEOUT_MS 600000            /* operations that must not end by timing out */

/* rep_open - a REP socket on 127.0.0.1, port 0; its address into url. */
static nng_socket rep_open(char *url, size_t cap)
{
    nng_socket s;
    ck_assert_int_eq(nng_rep0_open(&s), 0);
    nng_listener l;
    ck_assert_int_eq(nng_listen(s, "tcp://127.0.0.1:0", &l, 0), 0);
    int port = 0;
    ck_assert_int_eq(nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port), 0);
    snprintf(url, cap, "tcp://127.0.0.1:%d", port);
    ck_assert_int_eq(nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 20000), 0);
    return s;
}

/* start - an op on p carrying text, tagged with batch id. */
static void start(st_peer *p, st_cq *q, const char *text, uint64_t id)
{
    nng_msg *m;
    ck_assert_int_eq(nng_msg_alloc(&m, 0), 0);
    ck_assert_int_eq(nng_msg_append(m, text, strlen(text) + 1), 0);
    st_op_tag tag = {.what = ST_OP_END_SESSIONS, .batch_id = id};
    ck_assert_int_eq(st_peer_start(p, q, m, OP_TIMEOUT_MS, &tag), ST_OK);
}

/* rep_take - the REP side receives one request; returns its text's copy. */
static void rep_take(nng_socket s, char *out, size_t cap)
{
    nng_msg *m;
    ck_assert_int_eq(nng_recvmsg(s, &m, 0), 0);
    snprintf(out, cap, "%s", (const char *)nng_msg_body(m));
    nng_msg_free(m);
}

/* rep_answer - the REP side answers its last request with text. */
static void rep_answer(nng_socket s, const char *text)
{
    ck_assert_int_eq(nng_send(s, (void *)text, strlen(text) + 1, 0), 0);
}

/* done - the next ST_CQ_OP_DONE: its tag and result; the reply freed
 * after its text is copied into body (cap > 0). */
static int done(st_cq *q, st_op_tag *tag, char *body, size_t cap)
{
    st_cq_event ev;
    ck_assert_msg(st_cq_pop(q, &ev, WAIT_NS), "no operation ended");
    ck_assert_uint_eq(ev.kind, ST_CQ_OP_DONE);
    if (cap > 0)
        snprintf(body, cap, "%s", ev.msg ? (const char *)nng_msg_body(ev.msg) : "");
    if (ev.msg)
        nng_msg_free(ev.msg);
    st_net_op_finish(ev.op, tag);
    return ev.rv;
}

/* req_pair - a queue, a REP socket and a REQ peer dialing it. */
static st_peer *req_pair(st_cq *q, nng_socket *rep)
{
    ck_assert_int_eq(st_cq_init(q), ST_OK);
    char url[64];
    *rep = rep_open(url, sizeof url);
    st_peer *p;
    ck_assert_int_eq(st_peer_open_req(url, 1 << 20, &p), ST_OK);
    return p;
}

START_TEST(test_cancel_keeps_connection)
{
    st_cq q;
    nng_socket rep;
    st_peer *p = req_pair(&q, &rep);
    char got[64];

    start(p, &q, "first", 1);
    ck_assert_uint_eq(st_peer_ops(p), 1);
    rep_take(rep, got, sizeof got); /* the request is out, its reply held */
    ck_assert_str_eq(got, "first");
    st_peer_cancel(p);
    st_op_tag tag;
    int rv = done(&q, &tag, got, sizeof got);
    ck_assert_msg(rv != 0, "the canceled op ended with a reply (rv 0)");
    ck_assert_uint_eq(tag.batch_id, 1);
    ck_assert_uint_eq(st_peer_ops(p), 0);

    rep_answer(rep, "late"); /* the held reply arrives now: nobody waits for it */
    start(p, &q, "second", 2);
    rep_take(rep, got, sizeof got);
    ck_assert_str_eq(got, "second"); /* the same socket and connection still carry requests */
    rep_answer(rep, "for second");
    rv = done(&q, &tag, got, sizeof got);
    ck_assert_int_eq(rv, 0);
    ck_assert_uint_eq(tag.batch_id, 2);
    ck_assert_str_eq(got, "for second"); /* not the late reply to the first */

    st_peer_close(p);
    nng_close(rep);
    st_cq_fini(&q);
}
END_TEST

START_TEST(test_close_with_op_out)
{
    st_cq q;
    nng_socket rep;
    st_peer *p = req_pair(&q, &rep);
    char got[64];
    start(p, &q, "one", 7);
    start(p, &q, "two", 8);
    ck_assert_uint_eq(st_peer_ops(p), 2);
    rep_take(rep, got, sizeof got);
    st_peer_close(p); /* both ops are out: they end, and stay valid until finished */
    st_op_tag tag;
    uint64_t ids = 0;
    for (int i = 0; i < 2; i++) {
        ck_assert_msg(done(&q, &tag, NULL, 0) != 0, "an op of a closed peer succeeded");
        ids += tag.batch_id;
    }
    ck_assert_uint_eq(ids, 15);
    nng_close(rep);
    st_cq_fini(&q);
}
END_TEST

START_TEST(test_cancel_push_send)
{
    st_cq q;
    ck_assert_int_eq(st_cq_init(&q), ST_OK);
    /* an address nobody listens on: the PUSH send waits for a connection */
    char url[64];
    nng_socket rep = rep_open(url, sizeof url);
    nng_close(rep);
    st_peer *p;
    ck_assert_int_eq(st_peer_open_push(url, NULL, &p), ST_OK);
    start(p, &q, "step", 3);
    ck_assert_uint_eq(st_peer_ops(p), 1);
    st_peer_cancel(p);
    st_op_tag tag;
    ck_assert_int_eq(done(&q, &tag, NULL, 0), NNG_ECANCELED);
    ck_assert_uint_eq(tag.batch_id, 3);
    ck_assert_uint_eq(st_peer_ops(p), 0);
    st_peer_close(p);
    st_cq_fini(&q);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("net_peer");
    TCase *tc = tcase_create("peer");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_cancel_keeps_connection);
    tcase_add_test(tc, test_close_with_op_out);
    tcase_add_test(tc, test_cancel_push_send);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *r = srunner_create(suite());
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed == 0 ? 0 : 1;
}
