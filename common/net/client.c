/* client.c - a coordinator client (see client.h). */
#include "common/net/client.h"

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/clock.h"
#include "common/wire/msg.h"
#include "common/net/netaddr.h"

enum { CLIENT_IDLE = 0, CLIENT_SEND = 1, CLIENT_RECV = 2 };

#define CLIENT_NS_PER_MS 1000000u

struct st_client {
    nng_socket s;
    bool open;
    st_env env;
    bool env_open;
    nng_ctx ctx;
    bool ctx_open;
    nng_aio *aio;
    int phase; /* written by the starter, then by the callback */
    uint64_t deadline_ns;
    st_client_done done;
    void *arg;
    uint8_t *held; /* m packed (protobuf), sent once a Hello exchange bound it */
    size_t held_len;
};

/* client_reply - unpacks a reply frame; an Error reply becomes its code. */
static st_err client_reply(st_client *c, nng_msg *msg, Strata__Msg **out)
{
    *out = NULL;
    Strata__Msg *r;
    st_err e = st_msg_unpack(&c->env, ST_ENV_CONTROL, msg, &r, NULL);
    nng_msg_free(msg);
    return e != ST_OK ? e : st_msg_reply(r, out);
}

/* client_left_ms - what is left of the exchange's time (at least 1 ms). */
static nng_duration client_left_ms(const st_client *c)
{
    uint64_t now = st_now_ns();
    uint64_t left = c->deadline_ns > now ? (c->deadline_ns - now) / CLIENT_NS_PER_MS : 0;
    return left > 0 ? (nng_duration)left : 1;
}

/* client_send_held - the Hello was answered: the held request is sealed
 * now (bound to the coordinator that answered) and sent. */
static st_err client_send_held(st_client *c)
{
    Strata__Msg *m = strata__msg__unpack(NULL, c->held_len, c->held);
    free(c->held);
    c->held = NULL;
    if (m == NULL)
        return st_errorf(ST_ENOMEM, "request held for a Hello");
    nng_msg *msg;
    st_err e = st_msg_pack(&c->env, ST_ENV_CONTROL, m, &msg);
    strata__msg__free_unpacked(m, NULL);
    if (e != ST_OK)
        return e;
    c->phase = CLIENT_SEND;
    nng_aio_set_msg(c->aio, msg);
    nng_aio_set_timeout(c->aio, client_left_ms(c));
    nng_ctx_send(c->ctx, c->aio);
    return ST_OK;
}

static void client_cb(void *arg)
{
    st_client *c = arg;
    int rv = nng_aio_result(c->aio);
    if (rv == 0 && c->phase == CLIENT_SEND) {
        c->phase = CLIENT_RECV;
        nng_aio_set_timeout(c->aio, client_left_ms(c));
        nng_ctx_recv(c->ctx, c->aio);
        return;
    }
    st_err e;
    Strata__Msg *r = NULL;
    if (rv != 0) {
        if (c->phase == CLIENT_SEND) {
            nng_msg_free(nng_aio_get_msg(c->aio));
            nng_aio_set_msg(c->aio, NULL);
        }
        e = st_err_nng(rv, "coordinator exchange");
    } else {
        e = client_reply(c, nng_aio_get_msg(c->aio), &r);
    }
    if (e == ST_OK && c->held != NULL) { /* the Ack of a Hello (client_reply checked it) */
        bool ack = r->body_case == STRATA__MSG__BODY_ACK;
        st_msg_free(r);
        r = NULL;
        e = ack ? client_send_held(c)
                : st_errorf(ST_EPROTO, "the coordinator did not answer a Hello with an Ack");
        if (e == ST_OK)
            return;
    }
    free(c->held);
    c->held = NULL;
    st_client_done done = c->done;
    void *darg = c->arg;
    c->phase = CLIENT_IDLE;
    done(darg, e, r);
}

st_err st_client_open(const char *addr, const uint8_t *key, bool encrypt, st_client **out)
{
    *out = NULL;
    if (encrypt && key == NULL)
        return st_errorf(ST_EINVAL, "--encrypt needs --cluster-key FILE");
    if (sodium_init() < 0)
        return st_err_sodium("sodium_init");
    st_client *c = calloc(1, sizeof *c);
    if (c == NULL)
        return st_errorf(ST_ENOMEM, "client");
    uint64_t sender;
    randombytes_buf(&sender, sizeof sender);
    st_err e = st_env_init_mode(&c->env, key, encrypt, sender);
    if (e != ST_OK) {
        free(c);
        return e;
    }
    c->env.learn_peer = true; /* bind requests to the coordinator that answered (envelope.h) */
    c->env_open = true;
    int rv;
    nng_dialer d;
    if ((rv = nng_req0_open(&c->s)) != 0) {
        e = st_err_nng(rv, "req socket");
        goto fail;
    }
    c->open = true;
    if ((rv = nng_socket_set_ms(c->s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE)) ||
        (rv = nng_socket_set_size(c->s, NNG_OPT_RECVMAXSZ, ST_CLIENT_MAX_FRAME)) ||
        (rv = nng_ctx_open(&c->ctx, c->s))) {
        e = st_err_nng(rv, "req options");
        goto fail;
    }
    c->ctx_open = true;
    if ((rv = nng_aio_alloc(&c->aio, client_cb, c)) != 0) {
        e = st_err_nng(rv, "client aio");
        goto fail;
    }
    if ((rv = nng_dialer_create(&d, c->s, addr)) != 0) {
        e = st_err_nng(rv, addr);
        goto fail;
    }
    if (st_is_tcp(addr) && (rv = nng_dialer_set_bool(d, NNG_OPT_TCP_NODELAY, true))) {
        e = st_err_nng(rv, "TCP_NODELAY");
        goto fail;
    }
    if ((rv = nng_dialer_start(d, NNG_FLAG_NONBLOCK)) != 0) {
        e = st_err_nng(rv, addr);
        goto fail;
    }
    *out = c;
    return ST_OK;
fail:
    st_client_close(c);
    return e;
}

void st_client_close(st_client *c)
{
    if (c == NULL)
        return;
    if (c->open)
        nng_close(c->s); /* an exchange in flight ends with NNG_ECLOSED */
    if (c->aio)
        nng_aio_free(c->aio); /* waits for its callback */
    if (c->env_open)
        st_env_fini(&c->env);
    free(c->held);
    free(c);
}

st_err st_client_call(st_client *c, const Strata__Msg *m, int timeout_ms, Strata__Msg **reply)
{
    return st_msg_call(c->s, &c->env, m, timeout_ms, reply);
}

st_err st_client_start(st_client *c, const Strata__Msg *m, int timeout_ms, st_client_done done,
                       void *arg)
{
    if (c->phase != CLIENT_IDLE)
        return st_errorf(ST_EBUSY, "an exchange of this client is in flight");
    nng_msg *msg;
    st_err e;
    if (st_env_unbound(&c->env)) { /* a Hello first; m waits, packed but not sealed */
        size_t n = strata__msg__get_packed_size(m);
        if ((c->held = malloc(n > 0 ? n : 1)) == NULL)
            return st_errorf(ST_ENOMEM, "request held for a Hello (%zu bytes)", n);
        c->held_len = strata__msg__pack(m, c->held);
        Strata__Msg hm;
        Strata__Hello h;
        st_msg_hello_msg(&hm, &h);
        e = st_msg_pack(&c->env, ST_ENV_CONTROL, &hm, &msg);
    } else {
        e = st_msg_pack(&c->env, ST_ENV_CONTROL, m, &msg);
    }
    if (e != ST_OK) {
        free(c->held);
        c->held = NULL;
        return e;
    }
    int ms = timeout_ms > 0 ? timeout_ms : 1;
    c->done = done;
    c->arg = arg;
    c->deadline_ns = st_now_ns() + (uint64_t)ms * CLIENT_NS_PER_MS;
    c->phase = CLIENT_SEND;
    nng_aio_set_msg(c->aio, msg);
    nng_aio_set_timeout(c->aio, ms);
    nng_ctx_send(c->ctx, c->aio);
    return ST_OK;
}

bool st_client_serving(const Strata__StatusReply *s)
{
    if (s->plan == NULL || s->plan->n_stages == 0)
        return false;
    for (size_t i = 0; i < s->plan->n_stages; i++) {
        const Strata__Stage *st = s->plan->stages[i];
        if (st->n_worker_ids == 0)
            return false;
        for (size_t k = 0; k < st->n_worker_ids; k++) {
            bool ok = false;
            for (size_t w = 0; w < s->n_workers && !ok; w++)
                ok = s->workers[w]->id == st->worker_ids[k] && s->workers[w]->state &&
                     strcmp(s->workers[w]->state, "serving") == 0;
            if (!ok)
                return false;
        }
    }
    return true;
}
