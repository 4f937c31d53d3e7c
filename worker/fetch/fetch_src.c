/* fetch_src.c - a fetch's source table (fetch_impl.h, docs/streaming.md):
 * the weights servers of --weights-from and the chunk servers a Prepare
 * names, their requests, which one a chunk is asked from, and the rules
 * that stop asking one.
 *
 * Each chunk is asked for first from the live source after the one that
 * sent the last chunk, so the requests go round the sources (members that
 * hold the stage share the serving, and a source that sent bad data once
 * is asked again soon enough to be found out). A chunk that fails
 * verification gets its source a strike (ft_strike); a source with
 * ST_FETCH_STRIKES strikes is no longer used. The named sources
 * (st_fetch_extra) follow the configured ones in the round, under the
 * same rules.
 *
 * A source that lets a request time out (silent, or unreachable) is set
 * aside (FETCH_ASIDE_*, ft_next): skipped while another source can be asked,
 * until enough requests and time have passed, both doubling per timeout in
 * a row; any answer brings it back. One silent source costs a fetch of R
 * requests about log2(R / FETCH_ASIDE_TURNS) + 1 timeouts, not one per
 * chunk (docs/streaming.md, "Sources that do not answer"). A named source's
 * figures and set-aside state carry over to a later Prepare naming it. */
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <stdio.h>
#include <string.h>

#include "common/base/clock.h"
#include "common/base/log.h"
#include "common/net/netaddr.h"
#include "worker/fetch/fetch_impl.h"

#define FETCH_ASIDE_TURNS 16    /* a timed-out source is set aside for this many requests */
#define FETCH_ASIDE_CALLS 4     /* and call timeouts of time; both doubled per timeout */
#define FETCH_ASIDE_DOUBLINGS 6 /* in a row, at most this many times */

static st_err ft_dial(st_fetch *f, ft_source *s)
{
    int rv;
    if ((rv = nng_req0_open(&s->s)) != 0)
        return st_err_nng(rv, "weights socket");
    s->open = true;
    nng_socket_set_ms(s->s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE); /* no replays */
    nng_socket_set_size(s->s, NNG_OPT_RECVMAXSZ, ST_MANIFEST_MAX_FRAME);
    nng_dialer d;
    if ((rv = nng_dialer_create(&d, s->s, s->addr)) != 0)
        return st_errorf(ST_ENNG, "weights source %s: %s", s->addr, nng_strerror(rv));
    nng_dialer_set_bool(d, NNG_OPT_TCP_NODELAY, true);
    if ((rv = nng_dialer_start(d, NNG_FLAG_NONBLOCK)) != 0)
        return st_errorf(ST_ENNG, "weights source %s: %s", s->addr, nng_strerror(rv));
    (void)f;
    return ST_OK;
}

st_err ft_sources_parse(st_fetch *f, const char *list)
{
    st_err e = ST_OK;
    for (const char *p = list; p != NULL && *p != '\0' && e == ST_OK;) {
        const char *c = strchr(p, ',');
        size_t n = c != NULL ? (size_t)(c - p) : strlen(p);
        if (f->n_src == ST_FETCH_MAX_SOURCES || n == 0 || n >= FETCH_ADDR_MAX || !st_is_tcp(p)) {
            e = st_errorf(ST_EINVAL,
                          "--weights-from '%s': at most %d tcp:// addresses separated "
                          "by commas",
                          list, ST_FETCH_MAX_SOURCES);
            break;
        }
        memcpy(f->src[f->n_src].addr, p, n);
        e = ft_dial(f, &f->src[f->n_src++]);
        p = c != NULL ? c + 1 : NULL;
    }
    return e;
}

uint32_t ft_alive(const st_fetch *f)
{
    uint32_t n = 0;
    for (int i = 0; i < f->n_src; i++)
        n += !f->src[i].dead;
    return n;
}

/* ft_aside - whether s is set aside now (after a timeout: see above). */
static bool ft_aside(const st_fetch *f, const ft_source *s, double now)
{
    return s->streak > 0 && (f->turns < s->aside_turn || now < s->aside_until);
}

/* ft_timed_out - s let a request time out: counted, and set aside for a
 * span that doubles with each timeout in a row. */
static void ft_timed_out(st_fetch *f, ft_source *s)
{
    uint32_t shift = s->streak < FETCH_ASIDE_DOUBLINGS ? s->streak : FETCH_ASIDE_DOUBLINGS;
    double now = st_now_s();
    pthread_mutex_lock(&f->mu);
    s->timeouts++;
    s->streak++;
    s->aside_turn = f->turns + ((uint64_t)FETCH_ASIDE_TURNS << shift);
    s->aside_until = now + (double)FETCH_ASIDE_CALLS * f->call_ms / 1e3 * (double)(1u << shift);
    f->st.timeouts++;
    pthread_mutex_unlock(&f->mu);
    st_log(ST_LOG_WARN, FT,
           "source %s did not answer in %d ms (timeout %llu of this source, %u in a row): set "
           "aside for %llu requests and %.0f s",
           s->addr, f->call_ms, (unsigned long long)s->timeouts, s->streak,
           (unsigned long long)(s->aside_turn - f->turns), s->aside_until - now);
}

/* ft_start - starts the send (or receive) of f->call on s, unless the
 * fetch is stopped: under mu, so st_fetch_stop's cancel finds every call
 * started before it and none starts after it. */
static bool ft_start(st_fetch *f, nng_socket s, bool send)
{
    pthread_mutex_lock(&f->mu);
    bool go = !f->stop;
    if (go && send)
        nng_send_aio(s, f->call);
    else if (go)
        nng_recv_aio(s, f->call);
    pthread_mutex_unlock(&f->mu);
    return go;
}

/* ft_exchange - a request and its reply on s (st_msg_call's), through
 * f->call with f->call_ms for each half. st_fetch_stop ends a call in
 * flight by cancelling it, not by closing its socket: NNG 1.5.2's close
 * can wait forever when a reply arrives on a pipe as it closes
 * (common/base/exit_guard.h). A cancelled request's late reply is dropped by
 * the REQ socket, which st_fetch_close closes later. */
static st_err ft_exchange(st_fetch *f, nng_socket s, const Strata__Msg *m, Strata__Msg **r)
{
    *r = NULL;
    nng_msg *out;
    st_err e = st_msg_pack(&f->env, ST_ENV_CONTROL, m, &out);
    if (e != ST_OK)
        return e;
    nng_aio_set_msg(f->call, out);
    nng_aio_set_timeout(f->call, f->call_ms);
    if (!ft_start(f, s, true)) {
        nng_msg_free(out);
        return st_errorf(ST_ECANCELED, "the fetch was stopped");
    }
    nng_aio_wait(f->call);
    int rv = nng_aio_result(f->call);
    if (rv != 0) { /* a message not sent stays the caller's */
        nng_msg_free(nng_aio_get_msg(f->call));
        nng_aio_set_msg(f->call, NULL);
        return st_err_nng(rv, "send");
    }
    nng_aio_set_msg(f->call, NULL);
    nng_aio_set_timeout(f->call, f->call_ms);
    if (!ft_start(f, s, false))
        return st_errorf(ST_ECANCELED, "the fetch was stopped");
    nng_aio_wait(f->call);
    if ((rv = nng_aio_result(f->call)) != 0)
        return st_err_nng(rv, "recv");
    nng_msg *in = nng_aio_get_msg(f->call);
    nng_aio_set_msg(f->call, NULL);
    Strata__Msg *reply;
    e = st_msg_unpack(&f->env, ST_ENV_CONTROL, in, &reply, NULL);
    nng_msg_free(in);
    return e != ST_OK ? e : st_msg_reply(reply, r);
}

st_err ft_call(st_fetch *f, ft_source *s, const Strata__Msg *m, Strata__Msg **r)
{
    if (ft_stopped(f))
        return st_errorf(ST_ECANCELED, "the fetch was stopped");
    pthread_mutex_lock(&f->mu);
    f->turns++;
    s->asked++;
    pthread_mutex_unlock(&f->mu);
    st_err e = ft_exchange(f, s->s, m, r);
    if (e != ST_OK && ft_stopped(f))
        return st_errorf(ST_ECANCELED, "the fetch was stopped");
    if (e == ST_ETIMEOUT) {
        ft_timed_out(f, s);
    } else if (e == ST_OK && s->streak > 0) {
        st_log(ST_LOG_INFO, FT, "source %s answers again after %u timeout(s) in a row", s->addr,
               s->streak);
        pthread_mutex_lock(&f->mu);
        s->streak = 0;
        pthread_mutex_unlock(&f->mu);
    }
    return e;
}

void ft_strike(st_fetch *f, int s, const char *why)
{
    ft_source *src = &f->src[s];
    pthread_mutex_lock(&f->mu);
    f->st.bad_chunks++;
    pthread_mutex_unlock(&f->mu);
    src->strikes++;
    st_log(ST_LOG_WARN, FT, "source %s sent a bad chunk (dropped, fetched again): %s", src->addr,
           why);
    if (src->strikes >= ST_FETCH_STRIKES) {
        src->dead = true;
        st_log(ST_LOG_WARN, FT, "source %s sent bad data %d times: no longer used", src->addr,
               src->strikes);
    }
    pthread_mutex_lock(&f->mu);
    f->st.sources = ft_alive(f);
    pthread_mutex_unlock(&f->mu);
}

/* ft_next - by class: not aside and not tried, aside and not tried, not
 * aside, aside; within a class the first in the round after s (s itself
 * last), or of the aside the one whose span ends first. */
int ft_next(const st_fetch *f, int s, uint32_t tried)
{
    double now = st_now_s();
    int pick[4] = {-1, -1, -1, -1}; /* free, aside, free tried, aside tried */
    for (int k = 1; k <= f->n_src; k++) {
        int i = (s + k) % f->n_src;
        if (f->src[i].dead)
            continue;
        bool aside = ft_aside(f, &f->src[i], now);
        int c = (aside ? 1 : 0) + ((tried >> i) & 1u ? 2 : 0);
        if (pick[c] < 0 || (aside && f->src[i].aside_turn < f->src[pick[c]].aside_turn))
            pick[c] = i;
    }
    for (int c = 0; c < 4; c++)
        if (pick[c] >= 0)
            return pick[c];
    return -1;
}

/* ft_known - whether addr is already one of the first n sources. */
static bool ft_known(const st_fetch *f, int n, const char *addr)
{
    for (int i = 0; i < n; i++)
        if (strcmp(f->src[i].addr, addr) == 0)
            return true;
    return false;
}

/* ft_carry - the request figures and set-aside state of the named source
 * at addr among old[0, n) into s (a later Prepare naming it again). */
static void ft_carry(ft_source *s, const ft_source *old, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(old[i].addr, s->addr) == 0) {
            s->asked = old[i].asked;
            s->timeouts = old[i].timeouts;
            s->streak = old[i].streak;
            s->aside_turn = old[i].aside_turn;
            s->aside_until = old[i].aside_until;
            return;
        }
}

size_t st_fetch_extra(st_fetch *f, const char *const *addrs, size_t n)
{
    ft_source old[ST_FETCH_MAX_SOURCES];
    pthread_mutex_lock(&f->mu); /* st_fetch_stop closes what is open */
    int n_old = f->n_src - f->n_cfg;
    for (int i = f->n_cfg; i < f->n_src; i++)
        if (f->src[i].open)
            nng_close(f->src[i].s);
    memcpy(old, &f->src[f->n_cfg], (size_t)n_old * sizeof old[0]);
    memset(&f->src[f->n_cfg], 0, (size_t)n_old * sizeof f->src[0]);
    f->n_src = f->n_cfg;
    size_t added = 0;
    for (size_t k = 0; k < n && added < ST_FETCH_MAX_SOURCES && !f->stop; k++) {
        const char *a = addrs[k];
        if (a == NULL || strlen(a) >= FETCH_ADDR_MAX || !st_is_tcp(a) || ft_known(f, f->n_src, a))
            continue;
        ft_source *s = &f->src[f->n_src];
        snprintf(s->addr, sizeof s->addr, "%s", a);
        st_err e = ft_dial(f, s);
        if (e != ST_OK) {
            st_log(ST_LOG_WARN, FT, "source %s not used: %s", a, st_errmsg(e));
            if (s->open)
                nng_close(s->s);
            memset(s, 0, sizeof *s);
            continue;
        }
        ft_carry(s, old, n_old);
        f->n_src++;
        added++;
    }
    pthread_mutex_unlock(&f->mu);
    return added;
}

size_t st_fetch_sources(st_fetch *f, st_fetch_source_stats *out, size_t max)
{
    size_t n = 0;
    double now = st_now_s();
    pthread_mutex_lock(&f->mu);
    for (int i = 0; i < f->n_src && n < max; i++, n++) {
        const ft_source *s = &f->src[i];
        snprintf(out[n].addr, sizeof out[n].addr, "%s", s->addr);
        out[n].requests = s->asked;
        out[n].timeouts = s->timeouts;
        out[n].aside = !s->dead && ft_aside(f, s, now);
        out[n].dropped = s->dead;
    }
    pthread_mutex_unlock(&f->mu);
    return n;
}
