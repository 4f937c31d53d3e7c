/* push_link.c - PUSH links re-pointed by socket (push_link.h says why). */
#include "worker/data/push_link.h"

#include <nng/protocol/pipeline0/push.h>
#include <stdio.h>
#include <string.h>

static st_err pl_socket(st_push_link *l)
{
    int rv = nng_push0_open(&l->s);
    if (rv == 0)
        rv = nng_socket_set_ms(l->s, NNG_OPT_SENDTIMEO, l->send_ms);
    if (rv == 0)
        rv = nng_socket_set_int(l->s, NNG_OPT_SENDBUF, l->send_buf);
    if (rv != 0) {
        if (l->s.id != 0)
            nng_close(l->s);
        l->open = false;
        return st_err_nng(rv, "push socket");
    }
    l->open = true;
    return ST_OK;
}

st_err st_push_link_open(st_push_link *l, int32_t send_ms, int32_t send_buf)
{
    memset(l, 0, sizeof *l);
    l->send_ms = send_ms;
    l->send_buf = send_buf;
    return pl_socket(l);
}

/* pl_point - st_push_link_point without the hello. */
static st_err pl_point(st_push_link *l, const char *addr, int32_t reconnect_min_ms,
                       int32_t reconnect_max_ms)
{
    if (strlen(addr) >= sizeof l->addr)
        return st_errorf(ST_ERANGE, "address '%.40s...' is too long", addr);
    if (l->open && l->dialing) { /* a new socket, not a closed dialer (push_link.h) */
        nng_close(l->s);
        l->open = false;
    }
    l->dialing = false;
    l->addr[0] = '\0';
    st_err e;
    if (!l->open && (e = pl_socket(l)) != ST_OK)
        return e;
    if (addr[0] == '\0')
        return ST_OK;
    nng_dialer d;
    int rv = nng_dialer_create(&d, l->s, addr);
    if (rv == 0) {
        nng_dialer_set_bool(d, NNG_OPT_TCP_NODELAY, true); /* not TCP: a harmless error */
        nng_dialer_set_ms(d, NNG_OPT_RECONNMINT, reconnect_min_ms);
        nng_dialer_set_ms(d, NNG_OPT_RECONNMAXT, reconnect_max_ms);
        rv = nng_dialer_start(d, NNG_FLAG_NONBLOCK);
    }
    if (rv != 0)
        return st_errorf(ST_ENNG, "cannot dial %s: %s", addr, nng_strerror(rv));
    l->dialing = true;
    snprintf(l->addr, sizeof l->addr, "%s", addr);
    return ST_OK;
}

st_err st_push_link_point(st_push_link *l, const char *addr, int32_t reconnect_min_ms,
                          int32_t reconnect_max_ms, nng_msg *hello)
{
    if (l->open && l->dialing && strcmp(l->addr, addr) == 0) {
        if (hello != NULL)
            nng_msg_free(hello);
        return ST_OK;
    }
    st_err e = pl_point(l, addr, reconnect_min_ms, reconnect_max_ms);
    if (hello == NULL)
        return e;
    /* queued (NNG_OPT_SENDBUF) until the dialer connects; a full queue
     * cannot be: the socket is new */
    if (e != ST_OK || !l->dialing || nng_sendmsg(l->s, hello, NNG_FLAG_NONBLOCK) != 0)
        nng_msg_free(hello);
    return e;
}

bool st_push_link_ready(const st_push_link *l) { return l->open && l->dialing; }

int st_push_link_send(st_push_link *l, nng_msg *msg)
{
    return l->open ? nng_sendmsg(l->s, msg, 0) : NNG_ECLOSED;
}

void st_push_link_close(st_push_link *l)
{
    if (l->open)
        nng_close(l->s);
    l->open = false;
    l->dialing = false;
    l->addr[0] = '\0';
}
