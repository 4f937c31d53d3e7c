/* net.c - the coordinator's sockets and asynchronous operations (see
 * net.h for the design). Callbacks here only post events or re-arm their
 * own aio; they never read coordinator state. */
#include "coordinator/control/net.h"

#include <nng/protocol/pipeline0/pull.h>
#include <nng/protocol/pipeline0/push.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/clock.h"
#include "common/base/log.h"
#include "common/wire/msg.h"
#include "common/net/netaddr.h"
#include "common/net/pipe_gate.h"

#define NET_REPLY_TIMEOUT_MS 5000

enum { NET_RECV = 0, NET_SEND = 1 };
enum { NET_IDLE = 0, NET_HELD = 1, NET_SENDING = 2 }; /* net_slot.held */

typedef struct net_slot {
    st_net *net;
    uint32_t idx;
    nng_ctx ctx;
    nng_aio *aio;
    int phase; /* written by the main thread before a send, by the callback after */
    /* read by the main thread for any slot (st_net_slots_idle, st_net_pipe_held): */
    atomic_uint held;             /* NET_IDLE, NET_HELD (a request, unanswered), NET_SENDING */
    atomic_uint pipe_id;          /* the connection that request came on */
    atomic_uint_fast64_t send_ns; /* when its answer's send began (NET_SENDING) */
} net_slot;

struct st_net {
    st_cq *q;
    nng_socket ctl;
    nng_socket res;
    bool ctl_open, res_open;
    st_pipe_gate *ctl_gate, *res_gate; /* freed after their sockets (pipe_gate.h) */
    net_slot *slots;
    uint32_t n_slots;
    nng_aio *res_aio;
    char ctl_addr[ST_NET_ADDR_MAX];
    char res_addr[ST_NET_ADDR_MAX];
    atomic_uint_fast64_t reply_failures; /* replies not sent (callbacks count too) */
};

struct st_peer {
    nng_socket s;
    bool req;
    st_net_op *ops; /* started, not finished: a list linked by next/prev */
    nng_aio *hello_aio; /* a PUSH peer's hello (st_peer_open_push), or NULL */
    char url[ST_NET_ADDR_MAX];
};

struct st_net_op {
    st_cq *q;
    nng_aio *aio;
    nng_ctx ctx;
    bool has_ctx;
    bool ctx_closed; /* by st_peer_cancel */
    int phase;
    uint64_t deadline_ns;
    st_op_tag tag;
    st_peer *peer;            /* the peer it was started on; NULL once that closed */
    st_net_op *next, *prev;   /* in peer->ops */
};

/* net_listen - starts a listener on url (TCP_NODELAY on TCP; frames of at
 * most max_frame bytes, 0: the socket's limit) and writes the address it
 * bound to bound: for TCP the host of url and the real port. */
static st_err net_listen(nng_socket s, const char *url, size_t max_frame, char *bound, size_t cap)
{
    nng_listener l;
    int rv = nng_listener_create(&l, s, url);
    if (rv != 0)
        return st_err_nng(rv, url);
    if (st_is_tcp(url) && (rv = nng_listener_set_bool(l, NNG_OPT_TCP_NODELAY, true)) != 0)
        return st_err_nng(rv, "TCP_NODELAY");
    if (max_frame != 0 && (rv = nng_listener_set_size(l, NNG_OPT_RECVMAXSZ, max_frame)) != 0)
        return st_err_nng(rv, "RECVMAXSZ");
    if ((rv = nng_listener_start(l, 0)) != 0)
        return st_err_nng(rv, url);
    if (!st_is_tcp(url)) {
        if ((size_t)snprintf(bound, cap, "%s", url) >= cap)
            return st_errorf(ST_ERANGE, "address '%s' is too long", url);
        return ST_OK;
    }
    int port = 0;
    if ((rv = nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port)) != 0)
        return st_err_nng(rv, "bound port");
    if (!st_tcp_format(url + ST_TCP_SCHEME_LEN, st_tcp_host_len(url), port, bound, cap))
        return st_errorf(ST_ERANGE, "address '%s' is too long", url);
    return ST_OK;
}

static void net_post(st_cq *q, st_net_event kind, int rv, uint32_t slot, nng_msg *msg, void *op)
{
    st_cq_event ev = {.kind = (uint32_t)kind, .rv = rv, .slot = slot, .msg = msg, .op = op};
    st_cq_push(q, &ev);
}

static void net_slot_cb(void *arg)
{
    net_slot *s = arg;
    int rv = nng_aio_result(s->aio);
    if (s->phase == NET_SEND) {
        if (rv != 0) {
            nng_msg_free(nng_aio_get_msg(s->aio));
            nng_aio_set_msg(s->aio, NULL);
            atomic_fetch_add(&s->net->reply_failures, 1);
        }
        s->phase = NET_RECV;
        atomic_store(&s->held, NET_IDLE);
        nng_ctx_recv(s->ctx, s->aio);
        return;
    }
    if (rv == 0) {
        atomic_store(&s->pipe_id, nng_pipe_id(nng_msg_get_pipe(nng_aio_get_msg(s->aio))));
        atomic_store(&s->held, NET_HELD);
        st_pipe_gate_seen(s->net->ctl_gate, nng_aio_get_msg(s->aio)); /* judged on the loop */
        net_post(s->net->q, ST_CQ_CTL, 0, s->idx, nng_aio_get_msg(s->aio), NULL);
        return;
    }
    if (rv == NNG_ECLOSED || rv == NNG_ECANCELED)
        return;
    nng_ctx_recv(s->ctx, s->aio); /* a transient receive error: keep serving */
}

static void net_res_cb(void *arg)
{
    st_net *n = arg;
    int rv = nng_aio_result(n->res_aio);
    if (rv == 0) {
        st_pipe_gate_seen(n->res_gate, nng_aio_get_msg(n->res_aio)); /* judged on the loop */
        net_post(n->q, ST_CQ_RESULT, 0, 0, nng_aio_get_msg(n->res_aio), NULL);
        return;
    }
    if (rv == NNG_ECLOSED || rv == NNG_ECANCELED)
        return;
    nng_recv_aio(n->res, n->res_aio);
}

static st_err net_results_url(const char *listen_url, char *out, size_t cap)
{
    if (st_is_tcp(listen_url)) {
        if (!st_tcp_format(listen_url + ST_TCP_SCHEME_LEN, st_tcp_host_len(listen_url), 0, out,
                           cap))
            return st_errorf(ST_ERANGE, "address '%s' is too long", listen_url);
    } else if ((size_t)snprintf(out, cap, "%s.results", listen_url) >= cap) {
        return st_errorf(ST_ERANGE, "address '%s' is too long", listen_url);
    }
    return ST_OK;
}

st_err st_net_open(st_cq *q, const char *listen_url, const char *results_url, uint32_t n_slots,
                   size_t max_frame, st_net **out)
{
    *out = NULL;
    if (n_slots < 1 || n_slots > ST_NET_MAX_SLOTS)
        return st_errorf(ST_EINVAL, "control contexts %u not in 1..%u", n_slots, ST_NET_MAX_SLOTS);
    st_net *n = calloc(1, sizeof *n);
    if (n == NULL || (n->slots = calloc(n_slots, sizeof *n->slots)) == NULL) {
        free(n);
        return st_errorf(ST_ENOMEM, "network state");
    }
    n->q = q;
    st_err e = ST_OK;
    int rv;
    char rurl[ST_NET_ADDR_MAX];
    if ((rv = nng_rep0_open(&n->ctl)) != 0) {
        e = st_err_nng(rv, "rep socket");
        goto fail;
    }
    n->ctl_open = true;
    nng_socket_set_size(n->ctl, NNG_OPT_RECVMAXSZ, ST_MSG_CONTROL_MAX_FRAME);
    st_pipe_gate_cfg gc = st_pipe_gate_cfg_for("control", ST_NET_CTL_TCP_MAX_FRAME, true);
    gc.max_new = gc.max_per_addr; /* clients connect in bursts: never evicted young */
    if ((e = st_pipe_gate_open(n->ctl, &gc, &n->ctl_gate)))
        goto fail;
    if ((e = net_listen(n->ctl, listen_url, st_is_tcp(listen_url) ? ST_NET_CTL_TCP_MAX_FRAME : 0,
                        n->ctl_addr, sizeof n->ctl_addr)))
        goto fail;
    if ((rv = nng_pull0_open(&n->res)) != 0) {
        e = st_err_nng(rv, "pull socket");
        goto fail;
    }
    n->res_open = true;
    nng_socket_set_size(n->res, NNG_OPT_RECVMAXSZ, max_frame);
    gc = st_pipe_gate_cfg_for("results", max_frame, false); /* PUSH peers may stay silent */
    if ((e = st_pipe_gate_open(n->res, &gc, &n->res_gate)))
        goto fail;
    if (results_url == NULL) {
        if ((e = net_results_url(n->ctl_addr, rurl, sizeof rurl)))
            goto fail;
        results_url = rurl;
    }
    if ((e = net_listen(n->res, results_url, 0, n->res_addr, sizeof n->res_addr)))
        goto fail;
    for (uint32_t i = 0; i < n_slots; i++) {
        net_slot *s = &n->slots[i];
        s->net = n;
        s->idx = i;
        if ((rv = nng_ctx_open(&s->ctx, n->ctl)) != 0 ||
            (rv = nng_aio_alloc(&s->aio, net_slot_cb, s)) != 0) {
            e = st_err_nng(rv, "control context");
            goto fail;
        }
        n->n_slots = i + 1;
    }
    if ((rv = nng_aio_alloc(&n->res_aio, net_res_cb, n)) != 0) {
        e = st_err_nng(rv, "results aio");
        goto fail;
    }
    for (uint32_t i = 0; i < n->n_slots; i++)
        nng_ctx_recv(n->slots[i].ctx, n->slots[i].aio);
    nng_recv_aio(n->res, n->res_aio);
    *out = n;
    return ST_OK;
fail:
    st_net_close(n);
    return e;
}

void st_net_close(st_net *n)
{
    if (n == NULL)
        return;
    if (n->ctl_open)
        nng_close(n->ctl);
    if (n->res_open)
        nng_close(n->res);
    for (uint32_t i = 0; i < n->n_slots; i++)
        if (n->slots[i].aio)
            nng_aio_free(n->slots[i].aio);
    if (n->res_aio)
        nng_aio_free(n->res_aio);
    st_pipe_gate_close(n->ctl_gate);
    st_pipe_gate_close(n->res_gate);
    free(n->slots);
    free(n);
}

const char *st_net_ctl_addr(const st_net *n) { return n->ctl_addr; }
const char *st_net_results_addr(const st_net *n) { return n->res_addr; }
uint32_t st_net_n_slots(const st_net *n) { return n->n_slots; }

void st_net_judged(st_net *n, st_net_event which, const nng_msg *msg, bool authentic)
{
    st_pipe_gate *g = which == ST_CQ_CTL ? n->ctl_gate : n->res_gate;
    if (authentic)
        st_pipe_gate_vouch(g, msg);
    else
        st_pipe_gate_failed(g, msg);
}

void st_net_gate_counts(st_net *n, st_pipe_gate_counts *sum)
{
    st_pipe_gate_add_counts(n->ctl_gate, sum);
    st_pipe_gate_add_counts(n->res_gate, sum);
}

void st_net_reply(st_net *n, uint32_t slot, nng_msg *msg)
{
    net_slot *s = &n->slots[slot];
    s->phase = NET_SEND;
    atomic_store(&s->send_ns, st_now_ns());
    atomic_store(&s->held, NET_SENDING);
    nng_aio_set_msg(s->aio, msg);
    nng_aio_set_timeout(s->aio, NET_REPLY_TIMEOUT_MS);
    nng_ctx_send(s->ctx, s->aio);
}

void st_net_drop(st_net *n, uint32_t slot)
{
    net_slot *s = &n->slots[slot];
    atomic_fetch_add(&n->reply_failures, 1);
    s->phase = NET_RECV; /* a REP context that receives again abandons its request */
    atomic_store(&s->held, NET_IDLE);
    nng_ctx_recv(s->ctx, s->aio);
}

uint32_t st_net_slots_idle(const st_net *n)
{
    uint32_t idle = 0;
    for (uint32_t i = 0; i < n->n_slots; i++)
        idle += atomic_load(&n->slots[i].held) == NET_IDLE;
    return idle;
}

uint32_t st_net_pipe_stuck(const st_net *n, uint32_t slot, uint64_t age_ns)
{
    unsigned pipe = atomic_load(&n->slots[slot].pipe_id);
    uint64_t now = st_now_ns();
    uint32_t stuck = 0;
    for (uint32_t i = 0; i < n->n_slots; i++) {
        const net_slot *s = &n->slots[i];
        stuck += atomic_load(&s->held) == NET_SENDING && atomic_load(&s->pipe_id) == pipe &&
                 now - atomic_load(&s->send_ns) > age_ns;
    }
    return stuck;
}

void st_net_close_pipe(st_net *n, uint32_t slot)
{
    nng_pipe p;
    p.id = atomic_load(&n->slots[slot].pipe_id);
    nng_pipe_close(p); /* its pending answers fail at once: their slots receive again */
}

uint32_t st_net_slot_pipe(const st_net *n, uint32_t slot)
{
    return atomic_load(&n->slots[slot].pipe_id);
}

uint64_t st_net_slot_sending_ns(const st_net *n, uint32_t slot)
{
    const net_slot *s = &n->slots[slot];
    return atomic_load(&s->held) == NET_SENDING ? atomic_load(&s->send_ns) : 0;
}

uint64_t st_net_reply_failures(st_net *n) { return atomic_load(&n->reply_failures); }

void st_net_results_rearm(st_net *n) { nng_recv_aio(n->res, n->res_aio); }

static st_err net_peer_open(bool req, const char *url, size_t max_frame, st_peer **out)
{
    *out = NULL;
    st_peer *p = calloc(1, sizeof *p);
    if (p == NULL)
        return st_errorf(ST_ENOMEM, "peer");
    if ((size_t)snprintf(p->url, sizeof p->url, "%s", url) >= sizeof p->url) {
        free(p);
        return st_errorf(ST_ERANGE, "peer address '%.40s...' is too long", url);
    }
    p->req = req;
    int rv = req ? nng_req0_open(&p->s) : nng_push0_open(&p->s);
    if (rv != 0) {
        free(p);
        return st_err_nng(rv, req ? "req socket" : "push socket");
    }
    st_err e = ST_OK;
    nng_dialer d;
    if (req && ((rv = nng_socket_set_ms(p->s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE)) ||
                (rv = nng_socket_set_size(p->s, NNG_OPT_RECVMAXSZ, max_frame)))) {
        e = st_err_nng(rv, "req options");
    } else if ((rv = nng_dialer_create(&d, p->s, url)) != 0) {
        e = st_err_nng(rv, url);
    } else if (st_is_tcp(url) && (rv = nng_dialer_set_bool(d, NNG_OPT_TCP_NODELAY, true))) {
        e = st_err_nng(rv, "TCP_NODELAY");
    } else if ((rv = nng_dialer_start(d, NNG_FLAG_NONBLOCK)) != 0) {
        e = st_err_nng(rv, url);
    }
    if (e != ST_OK) {
        nng_close(p->s);
        free(p);
        return e;
    }
    *out = p;
    return ST_OK;
}

st_err st_peer_open_req(const char *url, size_t max_frame, st_peer **out)
{
    return net_peer_open(true, url, max_frame, out);
}

/* net_hello_cb - the hello's send ended: a message not sent is ours. */
static void net_hello_cb(void *arg)
{
    st_peer *p = arg;
    if (nng_aio_result(p->hello_aio) != 0) {
        nng_msg_free(nng_aio_get_msg(p->hello_aio));
        nng_aio_set_msg(p->hello_aio, NULL);
    }
}

st_err st_peer_open_push(const char *url, nng_msg *hello, st_peer **out)
{
    st_err e = net_peer_open(false, url, 0, out);
    if (e != ST_OK || hello == NULL) {
        if (hello != NULL)
            nng_msg_free(hello);
        return e;
    }
    st_peer *p = *out;
    int rv = nng_aio_alloc(&p->hello_aio, net_hello_cb, p);
    if (rv != 0) { /* the link works without it: its first batch proves it */
        nng_msg_free(hello);
        st_log(ST_LOG_WARN, "net", "%s: no hello: %s", url, nng_strerror(rv));
        return ST_OK;
    }
    nng_aio_set_msg(p->hello_aio, hello); /* sent first: it waits for the dialer like a batch */
    nng_send_aio(p->s, p->hello_aio);
    return ST_OK;
}

/* net_op_unlink - takes op out of its peer's list. */
static void net_op_unlink(st_net_op *op)
{
    st_peer *p = op->peer;
    if (p == NULL)
        return;
    if (op->prev)
        op->prev->next = op->next;
    else
        p->ops = op->next;
    if (op->next)
        op->next->prev = op->prev;
    op->next = op->prev = NULL;
    op->peer = NULL;
}

void st_peer_cancel(st_peer *p)
{
    if (p == NULL)
        return;
    for (st_net_op *op = p->ops; op != NULL; op = op->next) {
        if (op->has_ctx && !op->ctx_closed) {
            /* a closed context ends its send or receive with NNG_ECLOSED,
             * and a receive its callback starts after this fails at once */
            nng_ctx_close(op->ctx);
            op->ctx_closed = true;
        } else if (!op->has_ctx) {
            nng_aio_cancel(op->aio);
        }
    }
}

void st_peer_close(st_peer *p)
{
    if (p == NULL)
        return;
    while (p->ops != NULL)
        net_op_unlink(p->ops);
    nng_close(p->s);
    if (p->hello_aio != NULL)
        nng_aio_free(p->hello_aio); /* ended by the close; waits for its callback */
    free(p);
}

size_t st_peer_ops(const st_peer *p)
{
    size_t n = 0;
    for (const st_net_op *op = p ? p->ops : NULL; op != NULL; op = op->next)
        n++;
    return n;
}

const char *st_peer_url(const st_peer *p) { return p->url; }

static void net_op_cb(void *arg)
{
    st_net_op *op = arg;
    int rv = nng_aio_result(op->aio);
    if (op->phase == NET_SEND) {
        if (rv != 0) {
            nng_msg_free(nng_aio_get_msg(op->aio));
            nng_aio_set_msg(op->aio, NULL);
            net_post(op->q, ST_CQ_OP_DONE, rv, 0, NULL, op);
            return;
        }
        if (!op->has_ctx) {
            net_post(op->q, ST_CQ_OP_DONE, 0, 0, NULL, op);
            return;
        }
        op->phase = NET_RECV;
        uint64_t now = st_now_ns();
        int64_t left = op->deadline_ns > now ? (int64_t)((op->deadline_ns - now) / 1000000) : 0;
        nng_aio_set_timeout(op->aio, left > 0 ? (nng_duration)left : 1);
        nng_ctx_recv(op->ctx, op->aio);
        return;
    }
    net_post(op->q, ST_CQ_OP_DONE, rv, 0, rv == 0 ? nng_aio_get_msg(op->aio) : NULL, op);
}

st_err st_peer_start(st_peer *p, st_cq *q, nng_msg *msg, int timeout_ms, const st_op_tag *tag)
{
    st_net_op *op = calloc(1, sizeof *op);
    if (op == NULL) {
        nng_msg_free(msg);
        return st_errorf(ST_ENOMEM, "operation");
    }
    op->q = q;
    op->tag = *tag;
    op->phase = NET_SEND;
    op->deadline_ns = st_now_ns() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 1) * 1000000u;
    int rv = nng_aio_alloc(&op->aio, net_op_cb, op);
    if (rv == 0 && p->req) {
        rv = nng_ctx_open(&op->ctx, p->s);
        op->has_ctx = rv == 0;
    }
    if (rv != 0) {
        if (op->aio)
            nng_aio_free(op->aio);
        free(op);
        nng_msg_free(msg);
        return st_err_nng(rv, "operation");
    }
    op->peer = p;
    op->next = p->ops;
    if (p->ops)
        p->ops->prev = op;
    p->ops = op;
    nng_aio_set_msg(op->aio, msg);
    nng_aio_set_timeout(op->aio, timeout_ms > 0 ? timeout_ms : 1);
    if (op->has_ctx)
        nng_ctx_send(op->ctx, op->aio);
    else
        nng_send_aio(p->s, op->aio);
    return ST_OK;
}

void st_net_op_finish(st_net_op *op, st_op_tag *tag)
{
    *tag = op->tag;
    net_op_unlink(op);
    nng_aio_free(op->aio);
    if (op->has_ctx && !op->ctx_closed)
        nng_ctx_close(op->ctx);
    free(op);
}
