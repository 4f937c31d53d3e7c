/* probe.c - the link prober (see probe.h, docs/cluster.md "Links").
 *
 * Design. One thread, one condition variable. The control thread replaces
 * the peer table (st_probe_set_peers) and copies results out
 * (st_probe_links); the prober thread sleeps until the earliest peer is
 * due, measures that peer with the mutex released, and stores the result.
 * Blocking calls are fine here (the thread does nothing else). Stopping
 * (st_probe_stop) ends a round at its next call: the call in flight ends
 * with its reply or its timeout (ST_PROBE_TIMEOUT_MS), and the thread
 * closes its socket itself, with no reply on the way. The socket is never
 * closed from another thread while a request is out: NNG 1.5.2's close
 * waits forever when a reply arrives on a pipe as it closes (reproduced:
 * a worker's shutdown hung in st_probe_close's close, which cut a round
 * short; common/base/exit_guard.h). Only a dial in progress, which has no pipe
 * yet, is ended by closing the socket from st_probe_stop: a peer that
 * never answers the SYN would hold a blocking dial for minutes.
 *
 * Measurement. A fresh REQ socket per round (a round every minute does
 * not warrant a pool of connections): one uncounted small probe sets the
 * TCP connection up, then half of the ST_PROBE_SMALL small probes, the
 * ST_PROBE_LARGE large ones back to back, and the other small ones, each
 * timed from just before the send to just after the reply
 * arrived (packing, and the MAC of a keyed cluster, are outside the
 * timing; the peer's unpacking is inside, as it is for real traffic). The
 * estimate itself is pure (st_probe_estimate) and unit-tested.
 *
 * Cost: a round moves ST_PROBE_LARGE x 1 MiB; at the 60 s default that is
 * about 90 kB/s per peer, 0.07% of a 1 Gbit/s link. On a slow link the
 * next round is pushed out so that rounds stay under ST_PROBE_BUDGET of
 * the bandwidth just measured. */
#include "worker/daemon/probe.h"

#include <math.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/base/clock.h"
#include "common/wire/envelope.h"
#include "common/base/log.h"
#include "common/wire/msg.h"
#include "common/net/netaddr.h"

#define PR "probe"
#define PR_TRANSPORT ST_TCP_SCHEME /* the one transport a prober dials */

typedef struct pr_peer {
    st_probe_peer peer;
    double due_s; /* next round */
    bool have;    /* link holds a result */
    st_probe_link link;
} pr_peer;

struct st_prober {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool mu_ok, started, stop;
    pthread_t th;
    double interval_s;
    uint64_t self_id;
    pr_peer *peers; /* [ST_PROBE_MAX_PEERS] */
    size_t n;
    nng_socket cur;   /* the socket of the round in progress (under mu) */
    bool cur_dialing; /* cur is dialing: st_probe_stop may close it (under mu) */
    /* owned by the thread */
    st_env env;
    bool env_ok;
    uint8_t *payload;       /* ST_PROBE_PAYLOAD zero bytes */
    uint64_t refused_addrs; /* peers not dialed for their transport (under mu) */
};

double st_probe_median(double *v, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 1; i < n; i++) { /* insertion sort: n is a handful */
        double x = v[i];
        size_t j = i;
        for (; j > 0 && v[j - 1] > x; j--)
            v[j] = v[j - 1];
        v[j] = x;
    }
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

st_err st_probe_estimate(double *small_s, size_t ns, double *large_s, size_t nl, size_t payload,
                         double *latency_s, double *bw)
{
    if (ns == 0 || nl == 0)
        return st_errorf(ST_EINVAL,
                         "link estimate: %zu small and %zu large round trips (at "
                         "least one of each is needed)",
                         ns, nl);
    for (size_t i = 0; i < ns + nl; i++) {
        double t = i < ns ? small_s[i] : large_s[i - ns];
        if (!isfinite(t) || t <= 0)
            return st_errorf(ST_EINVAL, "link estimate: %s round trip %zu is %g s",
                             i < ns ? "small" : "large", i < ns ? i : i - ns, t);
    }
    double s = st_probe_median(small_s, ns), l = st_probe_median(large_s, nl);
    if (!(l > s))
        return st_errorf(ST_ERANGE,
                         "link estimate: the large probes' median %.3f ms is not above "
                         "the small ones' %.3f ms",
                         l * 1e3, s * 1e3);
    *latency_s = s / 2;
    double b = (double)payload / (l - s);
    *bw = b < ST_PROBE_BW_MIN ? ST_PROBE_BW_MIN : b > ST_PROBE_BW_MAX ? ST_PROBE_BW_MAX : b;
    return ST_OK;
}

/* pr_cond_init - a condition variable whose timed waits use CLOCK_MONOTONIC,
 * the clock pr_main computes its deadlines on (with the default realtime
 * clock a monotonic deadline lies in the past and the wait never sleeps). */
static int pr_cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0)
        return -1;
    int rv = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (rv == 0)
        rv = pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
    return rv;
}

st_err st_probe_open(const uint8_t *key, bool encrypt, uint64_t sender, double interval_s,
                     st_prober **out)
{
    *out = NULL;
    st_prober *p = calloc(1, sizeof *p);
    if (p == NULL)
        return st_errorf(ST_ENOMEM, "prober");
    p->interval_s = interval_s;
    p->peers = calloc(ST_PROBE_MAX_PEERS, sizeof *p->peers);
    p->payload = calloc(1, ST_PROBE_PAYLOAD);
    st_err e = ST_OK;
    if (p->peers == NULL || p->payload == NULL)
        e = st_errorf(ST_ENOMEM, "prober buffers");
    else if (pthread_mutex_init(&p->mu, NULL) != 0)
        e = st_errorf(ST_EINTERNAL, "prober mutex");
    else if (pr_cond_init(&p->cv) != 0)
        e = st_errorf(ST_EINTERNAL, "prober condition variable");
    else
        p->mu_ok = true;
    if (p->mu_ok && (e = st_env_init_mode(&p->env, key, encrypt, sender)) == ST_OK)
        p->env_ok = true;
    if (e != ST_OK) {
        if (p->mu_ok) {
            pthread_cond_destroy(&p->cv);
            pthread_mutex_destroy(&p->mu);
            p->mu_ok = false;
        }
        st_probe_close(p);
        return e;
    }
    *out = p;
    return ST_OK;
}

/* pr_call - one timed round trip of a probe with n payload bytes on s;
 * *rtt_s gets the time from send to reply. */
static st_err pr_call(st_prober *p, nng_socket s, const char *addr, uint32_t seq, size_t n,
                      double *rtt_s)
{
    Strata__Probe pb = STRATA__PROBE__INIT;
    pb.worker_id = p->self_id;
    pb.seq = seq;
    pb.payload.data = p->payload;
    pb.payload.len = n;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_PROBE;
    m.probe = &pb;
    nng_msg *out, *in;
    st_err e = st_msg_pack(&p->env, ST_ENV_CONTROL, &m, &out);
    if (e != ST_OK)
        return e;
    double t0 = st_now_s();
    int rv = nng_sendmsg(s, out, 0);
    if (rv != 0) {
        nng_msg_free(out);
        return st_errorf(ST_ENNG, "probe to %s: send: %s", addr, nng_strerror(rv));
    }
    if ((rv = nng_recvmsg(s, &in, 0)) != 0)
        return st_errorf(rv == NNG_ETIMEDOUT ? ST_ETIMEOUT : ST_ENNG, "probe to %s: reply: %s",
                         addr, nng_strerror(rv));
    *rtt_s = st_now_s() - t0;
    Strata__Msg *r = NULL;
    e = st_msg_unpack(&p->env, ST_ENV_CONTROL, in, &r, NULL);
    nng_msg_free(in);
    if (e != ST_OK)
        return e;
    if (r->body_case == STRATA__MSG__BODY_ERROR)
        e = st_errorf(ST_EPROTO, "probe to %s: error %u: %s", addr, r->error->code,
                      r->error->message ? r->error->message : "");
    else if (r->body_case != STRATA__MSG__BODY_PROBE_REPLY || r->probe_reply->seq != seq)
        e = st_errorf(ST_EPROTO, "probe to %s: answered with %s (seq %u expected)", addr,
                      st_msg_case_name(r), seq);
    st_msg_free(r);
    return e;
}

/* pr_call_unless_stopped - pr_call, or ST_ECLOSED once st_probe_stop was
 * called: a round ends between calls, never during one (the file comment
 * says why). */
static st_err pr_call_unless_stopped(st_prober *p, nng_socket s, const char *addr, uint32_t seq,
                                     size_t n, double *rtt_s)
{
    pthread_mutex_lock(&p->mu);
    bool stop = p->stop;
    pthread_mutex_unlock(&p->mu);
    if (stop)
        return st_errorf(ST_ECLOSED, "probe to %s: the prober is stopping", addr);
    return pr_call(p, s, addr, seq, n, rtt_s);
}

/* pr_measure - one round to peer q (mutex not held); fills *out. */
static st_err pr_measure(st_prober *p, const st_probe_peer *q, st_probe_link *out)
{
    nng_socket s;
    int rv = nng_req0_open(&s);
    if (rv != 0)
        return st_err_nng(rv, "probe socket");
    nng_socket_set_ms(s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    nng_socket_set_ms(s, NNG_OPT_SENDTIMEO, ST_PROBE_TIMEOUT_MS);
    nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, ST_PROBE_TIMEOUT_MS);
    nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, 1u << 16);
    pthread_mutex_lock(&p->mu);
    bool stop = p->stop;
    if (!stop) {
        p->cur = s;
        p->cur_dialing = true;
    }
    pthread_mutex_unlock(&p->mu);
    if (stop) {
        nng_close(s);
        return st_errorf(ST_ECLOSED, "prober stopping");
    }
    st_err e = ST_OK;
    nng_dialer dl;
    if ((rv = nng_dialer_create(&dl, s, q->addr)) != 0) {
        e = st_errorf(ST_ENNG, "probe to %s: %s", q->addr, nng_strerror(rv));
    } else {
        nng_dialer_set_bool(dl, NNG_OPT_TCP_NODELAY, true); /* fails harmlessly off TCP */
        if ((rv = nng_dialer_start(dl, 0)) != 0)
            e = st_errorf(ST_ENNG, "probe to %s: dial: %s", q->addr, nng_strerror(rv));
    }
    pthread_mutex_lock(&p->mu);
    bool closed = !p->cur_dialing; /* st_probe_stop closed it during the dial */
    p->cur_dialing = false;
    pthread_mutex_unlock(&p->mu);
    double small[ST_PROBE_SMALL], large[ST_PROBE_LARGE], warm;
    uint32_t seq = 1;
    if (e == ST_OK)
        e = pr_call_unless_stopped(p, s, q->addr, seq++, 16, &warm);
    /* half of the small probes, the large ones back to back (a token bucket
     * on the path drains after the first, so the median sees its rate, not
     * its burst), then the other small ones: a disturbance shorter than the
     * round hits both kinds alike */
    size_t half = ST_PROBE_SMALL / 2;
    for (size_t i = 0; e == ST_OK && i < half; i++)
        e = pr_call_unless_stopped(p, s, q->addr, seq++, 16, &small[i]);
    for (size_t i = 0; e == ST_OK && i < ST_PROBE_LARGE; i++)
        e = pr_call_unless_stopped(p, s, q->addr, seq++, ST_PROBE_PAYLOAD, &large[i]);
    for (size_t i = half; e == ST_OK && i < ST_PROBE_SMALL; i++)
        e = pr_call_unless_stopped(p, s, q->addr, seq++, 16, &small[i]);
    if (!closed)
        nng_close(s); /* by this thread, between calls: no reply is on the way */
    if (e != ST_OK)
        return e;
    out->peer_id = q->id;
    out->samples = ST_PROBE_SMALL + ST_PROBE_LARGE;
    out->when_s = st_now_s();
    return st_probe_estimate(small, ST_PROBE_SMALL, large, ST_PROBE_LARGE, ST_PROBE_PAYLOAD,
                             &out->latency_s, &out->bw);
}

/* pr_next - index of the earliest due peer (under mu); -1 when none. */
static long pr_next(const st_prober *p, double *due)
{
    long best = -1;
    for (size_t i = 0; i < p->n; i++)
        if (p->peers[i].due_s > 0 && (best < 0 || p->peers[i].due_s < *due)) {
            best = (long)i;
            *due = p->peers[i].due_s;
        }
    return best;
}

static void *pr_main(void *arg)
{
    st_prober *p = arg;
    pthread_mutex_lock(&p->mu);
    while (!p->stop) {
        double due = 0, now = st_now_s();
        long k = pr_next(p, &due);
        if (k < 0 || due > now) {
            double dt = k < 0 ? 3600 : due - now;
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            ts.tv_sec += (time_t)dt;
            ts.tv_nsec += (long)((dt - (double)(time_t)dt) * 1e9);
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&p->cv, &p->mu, &ts);
            continue;
        }
        st_probe_peer q = p->peers[k].peer;
        p->peers[k].due_s = now + ST_PROBE_RETRY_S; /* until the round says otherwise */
        pthread_mutex_unlock(&p->mu);
        st_probe_link l;
        st_err e = pr_measure(p, &q, &l);
        char why[300] = "";
        if (e != ST_OK)
            snprintf(why, sizeof why, "%s", st_errmsg(e));
        pthread_mutex_lock(&p->mu);
        if (p->stop)
            break;
        pr_peer *x = NULL; /* the table may have changed meanwhile */
        for (size_t i = 0; i < p->n && x == NULL; i++)
            if (p->peers[i].peer.id == q.id && strcmp(p->peers[i].peer.addr, q.addr) == 0)
                x = &p->peers[i];
        if (x == NULL)
            continue;
        if (e != ST_OK) {
            st_log(ST_LOG_WARN, PR, "worker %llu at %s: %s; again in %.0f s",
                   (unsigned long long)q.id, q.addr, why, ST_PROBE_RETRY_S);
            continue;
        }
        bool first = !x->have;
        x->have = true;
        x->link = l;
        double every = p->interval_s;
        double floor = (double)ST_PROBE_LARGE * ST_PROBE_PAYLOAD / (ST_PROBE_BUDGET * l.bw);
        x->due_s = every <= 0 ? 0 : l.when_s + (every > floor ? every : floor);
        st_log(first ? ST_LOG_INFO : ST_LOG_DEBUG, PR,
               "link to worker %llu (%s): latency %.3f "
               "ms, %.1f MB/s",
               (unsigned long long)q.id, q.addr, l.latency_s * 1e3, l.bw / 1e6);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

st_err st_probe_start(st_prober *p)
{
    if (pthread_create(&p->th, NULL, pr_main, p) != 0)
        return st_errorf(ST_EINTERNAL, "cannot start the probe thread");
    p->started = true;
    return ST_OK;
}

void st_probe_set_peers(st_prober *p, uint64_t self_id, const st_probe_peer *peers, size_t n)
{
    if (n > ST_PROBE_MAX_PEERS) {
        st_log(ST_LOG_WARN, PR, "%zu peers: measuring the first %d", n, ST_PROBE_MAX_PEERS);
        n = ST_PROBE_MAX_PEERS;
    }
    pr_peer *next = calloc(ST_PROBE_MAX_PEERS, sizeof *next);
    if (next == NULL)
        return; /* keep the current table; the next heartbeat reply tries again */
    double now = st_now_s();
    pthread_mutex_lock(&p->mu);
    size_t k = 0; /* peers kept */
    bool changed = self_id != p->self_id;
    p->self_id = self_id;
    for (size_t i = 0; i < n; i++) {
        if (strncmp(peers[i].addr, PR_TRANSPORT, strlen(PR_TRANSPORT)) != 0) {
            p->refused_addrs++; /* never dialed: ipc:// or inproc:// would reach local sockets */
            st_log(ST_LOG_WARN, PR,
                   "peer %llu at '%.64s' not probed: only %s addresses are "
                   "dialed (%llu refused so far)",
                   (unsigned long long)peers[i].id, peers[i].addr, PR_TRANSPORT,
                   (unsigned long long)p->refused_addrs);
            continue;
        }
        bool known = false;
        for (size_t j = 0; j < p->n && !known; j++)
            if (p->peers[j].peer.id == peers[i].id &&
                strcmp(p->peers[j].peer.addr, peers[i].addr) == 0) {
                next[k] = p->peers[j]; /* known: keep its result and schedule */
                known = true;
            }
        if (!known) {
            next[k].peer = peers[i];
            next[k].due_s = now + ST_PROBE_FIRST_S;
        }
        changed = changed || !known;
        k++;
    }
    if (changed || k != p->n) {
        memcpy(p->peers, next, ST_PROBE_MAX_PEERS * sizeof *next);
        p->n = k;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    free(next);
}

uint64_t st_probe_refused(st_prober *p)
{
    pthread_mutex_lock(&p->mu);
    uint64_t n = p->refused_addrs;
    pthread_mutex_unlock(&p->mu);
    return n;
}

size_t st_probe_links(st_prober *p, st_probe_link *out, size_t cap)
{
    size_t k = 0;
    pthread_mutex_lock(&p->mu);
    for (size_t i = 0; i < p->n && k < cap; i++)
        if (p->peers[i].have)
            out[k++] = p->peers[i].link;
    pthread_mutex_unlock(&p->mu);
    return k;
}

void st_probe_stop(st_prober *p)
{
    if (p == NULL || !p->mu_ok)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    bool dialing = p->cur_dialing;
    nng_socket s = p->cur;
    p->cur_dialing = false; /* the thread sees that its socket was closed */
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    if (dialing)
        nng_close(s); /* ends the dial; there is no pipe yet, so no reply either */
}

void st_probe_close(st_prober *p)
{
    if (p == NULL)
        return;
    st_probe_stop(p);
    if (p->started)
        pthread_join(p->th, NULL);
    if (p->mu_ok) {
        pthread_cond_destroy(&p->cv);
        pthread_mutex_destroy(&p->mu);
    }
    if (p->env_ok)
        st_env_fini(&p->env);
    free(p->peers);
    free(p->payload);
    free(p);
}
