/* daemon.c - the worker daemon: assembly, the control thread, the
 * requests it makes to the coordinator and membership (see daemon.h,
 * docs/worker.md; the state of each part and the file that changes it:
 * dm_internal.h).
 *
 * Design. Two long-lived threads split the worker by what they wait for.
 * The data thread (dataplane.c) waits for STEP frames and computes. The
 * control thread waits for everything else: replies to its requests to the
 * coordinator (Join, Heartbeat, StaleReport, Leave on one REQ socket),
 * requests from the coordinator on its REP socket (dm_rep.c; Prepare and
 * Commit: dm_plan.c), the end of a stage being loaded, stale reports
 * queued by the data thread, the next heartbeat or join attempt, and the
 * stop request. The thread owns its state and the others only post to it,
 * by the rule of common/base/cq.h in its "flags" form: the REQ and REP sockets
 * are driven with NNG aios whose callbacks, like the loader and the data
 * thread, only set a flag of st_worker_shared and signal its condition variable (these events carry
 * nothing of their own, so a flag cannot be lost and repeats coalesce,
 * where the coordinator's events carry messages and queue). So the thread
 * is never blocked inside a round trip (a heartbeat to a slow coordinator
 * does not delay a Commit reply, and a Prepare's loading does not delay
 * heartbeats). It sleeps on the condition variable until the earliest
 * deadline; it never spins.
 *
 * Membership: join with back-off (0.25 s doubling to 5 s) until a
 * JoinReply; heartbeat every heartbeat_ms (the JoinReply's value wins);
 * an ST_ENOENT answer to a heartbeat (the coordinator restarted and does
 * not know us) or DM_HB_FAILS_REJOIN failed heartbeats in a row send the
 * worker back to joining. The stage being served is kept meanwhile: the
 * rejoined coordinator's next plan replaces it (keeping its weights when
 * the layer range is the same: dm_plan.c).
 *
 * Envelope identities: every st_env belongs to one thread; this process
 * picks a random sender id at start-up and uses id, id + 1, id + 2, id + 3
 * for its requests, its data frames, its replies and its link probes
 * (probe.h), so each stream of sequence numbers is monotonic on its own
 * whatever replay table receives it.
 *
 * What a heartbeat carries is dm_heartbeat.c's (dm_send_heartbeat). Heartbeat
 * replies carry the other workers' control addresses (handed to the
 * prober thread, whose results ride in the next heartbeats) and, once a
 * drain is complete, `leave`: see dm_on_heartbeat_reply (dm_heartbeat.c). */
#include <ctype.h>
#include <inttypes.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/net/netaddr.h"
#include "common/base/clock.h"
#include "common/base/cq.h"
#include "common/base/log.h"
#include "common/wire/msg.h"
#include "common/base/version.h"
#include "worker/daemon/dm_internal.h"

void dm_signal(st_daemon *d, bool *flag)
{
    pthread_mutex_lock(&d->sh.mu);
    *flag = true;
    pthread_cond_broadcast(&d->sh.cv);
    pthread_mutex_unlock(&d->sh.mu);
}

static void dm_req_cb(void *arg)
{
    st_daemon *d = arg;
    dm_signal(d, &d->sh.ev_req);
}

/* ---- requests to the coordinator ---- */

void dm_request(st_daemon *d, dm_req_kind kind, const Strata__Msg *m, int timeout_ms)
{
    nng_msg *out;
    st_err e = st_msg_pack(&d->cli.env, ST_ENV_CONTROL, m, &out);
    if (e != ST_OK) {
        st_log(ST_LOG_ERROR, "control", "cannot pack %s: %s", st_msg_case_name(m), st_errmsg(e));
        if (kind == DM_REQ_LEAVE)
            d->mb.leave_done = true;
        return;
    }
    d->cli.kind = kind;
    d->cli.receiving = false;
    d->cli.cancelled = false;
    d->cli.timeout_ms = timeout_ms;
    nng_aio_set_msg(d->cli.aio, out);
    nng_aio_set_timeout(d->cli.aio, timeout_ms);
    nng_send_aio(d->cli.sock, d->cli.aio);
}

static void dm_send_join(st_daemon *d)
{
    char *kernels[ST_KVAR_COUNT], *dtypes[ST_DT_COUNT];
    Strata__DtypeSpeed sp[ST_DT_COUNT], *spp[ST_DT_COUNT];
    size_t nk = 0, nd = 0;
    for (int v = ST_KVAR_COUNT - 1; v >= 0; v--) {
        const st_kernel_ops *k = st_kernels_get((st_kvariant)v);
        if (k != NULL && (!d->self.cfg.force_ref || v == ST_KVAR_REF))
            kernels[nk++] = (char *)k->name;
    }
    for (int t = 0; t < ST_DT_COUNT; t++) {
        if (d->self.ops->mul_mat[t] == NULL || !(d->self.meas.bytes_per_s[t] > 0))
            continue;
        strata__dtype_speed__init(&sp[nd]);
        sp[nd].dtype = (char *)st_dtype_info_of((st_dtype)t)->name;
        sp[nd].bytes_per_s = d->self.meas.bytes_per_s[t];
        dtypes[nd] = sp[nd].dtype;
        spp[nd] = &sp[nd];
        nd++;
    }
    Strata__Capability cap = STRATA__CAPABILITY__INIT;
    cap.name = d->self.name;
    cap.cores = d->self.topo.cores;
    cap.threads = (uint32_t)st_pool_size(d->self.pool);
    if (d->self.topo.has_host_id) {
        cap.host_id.data = d->self.topo.host_id;
        cap.host_id.len = sizeof d->self.topo.host_id;
    }
    cap.cpus = d->self.topo.cpus;
    cap.l3_bytes = d->self.topo.l3_bytes;
    cap.memory_budget = d->self.memory;
    cap.n_kernels = nk;
    cap.kernels = kernels;
    cap.n_dtypes = nd;
    cap.dtypes = dtypes;
    cap.n_speeds = nd;
    cap.speeds = spp;
    cap.data_addr = d->self.data_addr;
    cap.ctl_addr = d->self.ctl_addr;
    cap.model_id.data = d->self.model_id;
    cap.model_id.len = 32;
    char *wire_names[ST_WIRE_DT_COUNT];
    size_t nw = 0;
    for (size_t k = 0; k < ST_WIRE_DT_COUNT; k++) {
        st_wire_dtype wd = st_wire_dtype_by_precision(k);
        if (d->self.cfg.wire_accept == 0 || (d->self.cfg.wire_accept & (1u << wd)))
            wire_names[nw++] = (char *)st_wire_dtype_name(wd);
    }
    cap.n_wire_dtypes = nw;
    cap.wire_dtypes = wire_names;
    cap.wire_zstd = true; /* st_wire_decode takes zstd frames (a boundary's Stage.in_zstd) */
    cap.throttle = dm_throttle(d);
    cap.spare = d->self.cfg.spare;
    cap.data_sender = d->self.sender + 1; /* the data plane's (st_daemon_open) */
    cap.ctl_sender = dm_rep_sender(d);    /* control requests are bound to it (envelope.h) */
    cap.streams = dm_fetch_streams(d);
    cap.chunk_addr = (char *)dm_fetch_chunk_addr(d); /* "" without --serve-chunks */
    Strata__Join j = STRATA__JOIN__INIT;
    j.protocol = ST_PROTO_VERSION; /* common/base/version.h */
    j.protocol_oldest = ST_PROTO_OLDEST;
    cap.version = (char *)st_version_line();
    j.cap = &cap;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_JOIN;
    m.join = &j;
    st_log(ST_LOG_DEBUG, "control", "joining %s", d->self.cfg.coordinator);
    dm_request(d, DM_REQ_JOIN, &m, DM_JOIN_TIMEOUT_MS);
}

/* dm_send_stale - sends the oldest queued stale report; false if none. */
static bool dm_send_stale(st_daemon *d)
{
    st_dp_stale x;
    pthread_mutex_lock(&d->sh.mu);
    bool have = d->sh.stale_n > 0;
    if (have) {
        x = d->sh.stale[d->sh.stale_head];
        d->sh.stale_head = (d->sh.stale_head + 1) % ST_DP_STALE_CAP;
        d->sh.stale_n--;
    }
    pthread_mutex_unlock(&d->sh.mu);
    if (!have)
        return false;
    Strata__StaleReport r = STRATA__STALE_REPORT__INIT;
    r.worker_id = d->mb.worker_id;
    r.batch_id = x.batch_id;
    r.packet_epoch = x.packet_epoch;
    r.current_epoch = x.current_epoch;
    r.detail = x.detail;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_STALE;
    m.stale = &r;
    dm_request(d, DM_REQ_STALE, &m, DM_CALL_TIMEOUT_MS);
    return true;
}

static void dm_send_leave(st_daemon *d)
{
    Strata__Leave l = STRATA__LEAVE__INIT;
    l.worker_id = d->mb.worker_id;
    l.reason = (char *)dm_leave_reason(d);
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_LEAVE;
    m.leave = &l;
    dm_request(d, DM_REQ_LEAVE, &m, DM_LEAVE_TIMEOUT_MS);
}

static void dm_rejoin(st_daemon *d, double when)
{
    d->mb.joined = false;
    d->mb.next_join = when;
    d->mb.backoff = DM_BACKOFF_MIN_S;
}

static void dm_req_failed(st_daemon *d, dm_req_kind kind, st_err e)
{
    double now = st_now_s();
    const char *msg = st_errmsg(e);
    if (kind == DM_REQ_JOIN) {
        st_log(ST_LOG_WARN, "control", "join via %s failed: %s; retrying in %.2f s",
               d->self.cfg.coordinator, msg, d->mb.backoff);
        d->mb.next_join = now + d->mb.backoff;
        d->mb.backoff = d->mb.backoff * 2 > DM_BACKOFF_MAX_S ? DM_BACKOFF_MAX_S : d->mb.backoff * 2;
    } else if (kind == DM_REQ_HEARTBEAT) {
        d->mb.hb_fails++;
        st_log(ST_LOG_WARN, "control", "heartbeat failed (%d in a row): %s", d->mb.hb_fails, msg);
        if (d->mb.hb_fails >= DM_HB_FAILS_REJOIN && !d->stopping) {
            st_log(ST_LOG_WARN, "control", "coordinator unreachable; joining again");
            dm_rejoin(d, now);
        }
    } else if (kind == DM_REQ_STALE) {
        st_log(ST_LOG_WARN, "control", "stale report not delivered: %s", msg);
    } else if (kind == DM_REQ_LEAVE) {
        st_log(ST_LOG_INFO, "control", "leave not acknowledged: %s", msg);
        d->mb.leave_done = true;
    } else if (kind == DM_REQ_HELLO) {
        dm_req_kind next = d->cli.hello_for;
        if (next == DM_REQ_HEARTBEAT) /* as a heartbeat that failed: the next in a period */
            d->mb.next_hb = now + d->mb.hb_ms / 1000.0;
        dm_req_failed(d, next, e);
    }
}

/* dm_hello_first - when the next request would go unbound (the first, or
 * the first after one went unanswered: st_env_unbound), sends a Hello
 * instead, to precede a request of kind `next`, and returns true: a keyed
 * coordinator takes nothing else unbound (docs/security.md, "Replay"). The
 * request follows once the Ack arrived and bound env_req to the
 * coordinator that answered. */
static bool dm_hello_first(st_daemon *d, dm_req_kind next)
{
    if (!st_env_unbound(&d->cli.env))
        return false;
    Strata__Msg m;
    Strata__Hello h;
    st_msg_hello_msg(&m, &h);
    d->cli.hello_for = next;
    dm_request(d, DM_REQ_HELLO, &m,
               next == DM_REQ_LEAVE ? DM_LEAVE_TIMEOUT_MS : DM_CALL_TIMEOUT_MS);
    if (d->cli.kind != DM_REQ_HELLO) /* not packed (logged): a Hello that failed */
        dm_req_failed(d, DM_REQ_HELLO, ST_ENOMEM);
    return true;
}

/* dm_on_join_reply - records the coordinator this worker joined: its id
 * for us, its incarnation, its heartbeat interval and the sender id its
 * control requests come from. */
static void dm_on_join_reply(st_daemon *d, const Strata__JoinReply *jr, double now)
{
    if (d->mb.incarnation != 0 && jr->incarnation != d->mb.incarnation)
        st_log(ST_LOG_INFO, "control", "coordinator incarnation %llu -> %llu (restarted)",
               (unsigned long long)d->mb.incarnation, (unsigned long long)jr->incarnation);
    d->mb.worker_id = jr->worker_id;
    d->mb.incarnation = jr->incarnation;
    d->mb.coord_ctl = jr->control_sender;
    if (jr->heartbeat_ms >= 10 && jr->heartbeat_ms <= 600000)
        d->mb.hb_ms = jr->heartbeat_ms;
    d->mb.joined = true;
    d->mb.hb_fails = 0;
    d->mb.backoff = DM_BACKOFF_MIN_S;
    d->mb.next_hb = now;
    pthread_mutex_lock(&d->sh.mu);
    d->sh.worker_id = d->mb.worker_id;
    pthread_mutex_unlock(&d->sh.mu);
    if (d->mb.coord_ctl == 0)
        st_log(ST_LOG_WARN, "control",
               "the JoinReply names no control sender: every Prepare, "
               "Commit and EndSessions will be refused");
    st_log(ST_LOG_INFO, "control",
           "joined %s as worker %llu (incarnation %llu, heartbeat %u ms, "
           "control sender %llu; protocol %u, coordinator strata %s)",
           d->self.cfg.coordinator, (unsigned long long)d->mb.worker_id,
           (unsigned long long)d->mb.incarnation, d->mb.hb_ms, (unsigned long long)d->mb.coord_ctl,
           jr->protocol ? jr->protocol : (uint32_t)STRATA__VERSION__PROTOCOL, /* 0: older builds */
           jr->version && jr->version[0] ? jr->version : "(not sent)");
}

static void dm_on_reply(st_daemon *d, dm_req_kind kind, const Strata__Msg *r)
{
    double now = st_now_s();
    if (kind == DM_REQ_HELLO) { /* the request it preceded goes next (dm_act) */
        bool err = r->body_case == STRATA__MSG__BODY_ERROR && r->error->message;
        if (r->body_case != STRATA__MSG__BODY_ACK)
            dm_req_failed(d, kind,
                          st_errorf(ST_EPROTO, "a Hello was answered by %s %s", st_msg_case_name(r),
                                    err ? r->error->message : ""));
        return;
    }
    if (r->body_case == STRATA__MSG__BODY_ERROR) {
        const Strata__Error *er = r->error;
        st_err code = er->code > 0 && er->code < ST_ERR_COUNT ? (st_err)er->code : ST_EPROTO;
        const char *text = er->message ? er->message : "";
        if (kind == DM_REQ_JOIN) {
            st_log(ST_LOG_ERROR, "control", "join refused by %s: %s: %s; retrying in %.0f s",
                   d->self.cfg.coordinator, st_strerror(code), text, DM_BACKOFF_MAX_S);
            d->mb.next_join = now + DM_BACKOFF_MAX_S;
        } else if (kind == DM_REQ_HEARTBEAT && code == ST_ENOENT) {
            st_log(ST_LOG_INFO, "control",
                   "the coordinator does not know worker %llu; joining "
                   "again",
                   (unsigned long long)d->mb.worker_id);
            if (!d->stopping)
                dm_rejoin(d, now);
        } else {
            st_log(ST_LOG_WARN, "control", "%s answered with %s: %s",
                   kind == DM_REQ_HEARTBEAT ? "heartbeat"
                   : kind == DM_REQ_STALE   ? "stale report"
                                            : "leave",
                   st_strerror(code), text);
        }
        if (kind == DM_REQ_LEAVE)
            d->mb.leave_done = true;
        return;
    }
    if (kind == DM_REQ_JOIN) {
        if (r->body_case != STRATA__MSG__BODY_JOIN_REPLY || r->join_reply->worker_id == 0) {
            st_errorf(ST_EPROTO, "join answered with %s", st_msg_case_name(r));
            dm_req_failed(d, kind, ST_EPROTO);
            return;
        }
        dm_on_join_reply(d, r->join_reply, now);
    } else if (kind == DM_REQ_HEARTBEAT) {
        d->mb.hb_fails = 0;
        if (r->body_case == STRATA__MSG__BODY_HEARTBEAT_REPLY)
            dm_on_heartbeat_reply(d, r->heartbeat_reply); /* links, drain (dm_heartbeat.c) */
    } else if (kind == DM_REQ_LEAVE) {
        d->mb.leave_done = true;
    }
}

static void dm_on_req(st_daemon *d)
{
    dm_req_kind kind = d->cli.kind;
    if (kind == DM_REQ_NONE)
        return;
    int rv = nng_aio_result(d->cli.aio);
    if (!d->cli.receiving) {
        if (rv != 0) {
            nng_msg_free(nng_aio_get_msg(d->cli.aio));
            nng_aio_set_msg(d->cli.aio, NULL);
            d->cli.kind = DM_REQ_NONE;
            dm_req_failed(d, kind, st_err_nng(rv, "send"));
            return;
        }
        nng_aio_set_msg(d->cli.aio, NULL); /* the socket owns the request now */
        d->cli.receiving = true;
        nng_aio_set_timeout(d->cli.aio, d->cli.timeout_ms);
        nng_recv_aio(d->cli.sock, d->cli.aio);
        return;
    }
    d->cli.kind = DM_REQ_NONE;
    if (rv != 0) {
        dm_req_failed(d, kind, st_err_nng(rv, "reply"));
        return;
    }
    nng_msg *msg = nng_aio_get_msg(d->cli.aio);
    nng_aio_set_msg(d->cli.aio, NULL);
    Strata__Msg *r = NULL;
    st_err e = st_msg_unpack(&d->cli.env, ST_ENV_CONTROL, msg, &r, NULL);
    nng_msg_free(msg);
    if (e != ST_OK) {
        dm_req_failed(d, kind, e);
        return;
    }
    dm_on_reply(d, kind, r);
    st_msg_free(r);
}

/* dm_wake_at - when the loop must act without an event (under sh.mu). */
static double dm_wake_at(const st_daemon *d, double now)
{
    if (d->cli.kind != DM_REQ_NONE)
        return now + 3600; /* the aio's completion wakes us */
    if (d->stopping)       /* send Leave, or wait for the loader's event */
        return (d->mb.joined && !d->mb.leave_done) || !dm_plans_loading(d) ? now : now + 3600;
    if (!d->mb.joined)
        return d->mb.next_join;
    if (d->sh.stale_n > 0)
        return now;
    return d->mb.next_hb;
}

/* dm_act - starts the next request if none is in flight; true when the
 * thread may end (stopping, Leave done or not joined, nothing pending). */
static bool dm_act(st_daemon *d)
{
    if (d->cli.kind != DM_REQ_NONE)
        return false;
    double now = st_now_s();
    if (d->stopping) {
        if (d->mb.joined && !d->mb.leave_done) {
            if (!dm_hello_first(d, DM_REQ_LEAVE))
                dm_send_leave(d);
            return false;
        }
        return !dm_plans_loading(d);
    }
    if (!d->mb.joined) {
        if (now >= d->mb.next_join && !dm_hello_first(d, DM_REQ_JOIN))
            dm_send_join(d);
        return false;
    }
    if (now >= d->mb.next_hb) { /* before stale reports: a burst of them never delays it */
        if (dm_hello_first(d, DM_REQ_HEARTBEAT))
            return false;
        d->mb.next_hb = now + d->mb.hb_ms / 1000.0;
        dm_send_heartbeat(d);
        return false;
    }
    pthread_mutex_lock(&d->sh.mu);
    bool stale = d->sh.stale_n > 0;
    pthread_mutex_unlock(&d->sh.mu);
    if (stale && !dm_hello_first(d, DM_REQ_STALE))
        dm_send_stale(d);
    return false;
}

static void *dm_main(void *arg)
{
    st_daemon *d = arg;
    dm_rep_start(d);
    d->mb.next_join = st_now_s();
    dm_heartbeat_start(d, st_now_s());
    for (;;) {
        pthread_mutex_lock(&d->sh.mu);
        st_worker_shared *sh = &d->sh;
        for (;;) {
            if (sh->ev_rep || sh->ev_req || sh->ev_loader || sh->ev_stop || sh->ev_stale)
                break;
            double now = st_now_s(), wake = dm_wake_at(d, now);
            if (wake <= now)
                break;
            struct timespec ts = st_cq_deadline((uint64_t)((wake - now) * 1e9));
            pthread_cond_timedwait(&sh->cv, &sh->mu, &ts);
        }
        bool rep = sh->ev_rep, req = sh->ev_req, ld = sh->ev_loader;
        if (sh->ev_stop)
            d->stopping = true;
        sh->ev_rep = sh->ev_req = sh->ev_loader = sh->ev_stale = sh->ev_stop = false;
        pthread_mutex_unlock(&d->sh.mu);
        if (rep)
            dm_on_rep(d);
        if (req)
            dm_on_req(d);
        if (ld)
            dm_on_loader(d);
        bool leaving = d->cli.kind == DM_REQ_LEAVE ||
                       (d->cli.kind == DM_REQ_HELLO && d->cli.hello_for == DM_REQ_LEAVE);
        if (d->stopping && d->cli.kind != DM_REQ_NONE && !leaving && !d->cli.cancelled) {
            d->cli.cancelled = true;
            nng_aio_cancel(d->cli.aio); /* completes with NNG_ECANCELED: an event */
        }
        if (dm_act(d))
            break;
    }
    return NULL;
}

/* ---- assembly ---- */

static char *dm_strdup(const char *s) { return s != NULL ? strdup(s) : NULL; }

/* dm_dial_req - the REQ to the coordinator: no resend (a resent frame
 * would be a replay under a key), TCP_NODELAY, non-blocking dial so a
 * coordinator that is not up yet is retried by NNG. */
static st_err dm_dial_req(st_daemon *d)
{
    int rv;
    if ((rv = nng_req0_open(&d->cli.sock)) != 0)
        return st_err_nng(rv, "coordinator socket");
    d->cli.open = true;
    nng_socket_set_ms(d->cli.sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    nng_socket_set_size(d->cli.sock, NNG_OPT_RECVMAXSZ, ST_MSG_CONTROL_MAX_FRAME);
    nng_dialer dl;
    if ((rv = nng_dialer_create(&dl, d->cli.sock, d->self.cfg.coordinator)) != 0)
        return st_errorf(ST_ENNG, "--coordinator %s: %s", d->self.cfg.coordinator,
                         nng_strerror(rv));
    nng_dialer_set_bool(dl, NNG_OPT_TCP_NODELAY, true); /* fails harmlessly off TCP */
    nng_dialer_set_ms(dl, NNG_OPT_RECONNMINT, 100);
    nng_dialer_set_ms(dl, NNG_OPT_RECONNMAXT, 2000);
    if ((rv = nng_dialer_start(dl, NNG_FLAG_NONBLOCK)) != 0)
        return st_errorf(ST_ENNG, "--coordinator %s: %s", d->self.cfg.coordinator,
                         nng_strerror(rv));
    if ((rv = nng_aio_alloc(&d->cli.aio, dm_req_cb, d)) != 0)
        return st_err_nng(rv, "aio");
    return ST_OK;
}

/* dm_pool - opens the pool and measures; the pool pins its calling thread
 * (this one) to a core: that binding is remembered for the data thread,
 * which drives the pool, and this thread's own binding is restored so the
 * control thread it starts is not confined to that core. */
static st_err dm_pool(st_daemon *d)
{
    cpu_set_t orig;
    bool have = pthread_getaffinity_np(pthread_self(), sizeof orig, &orig) == 0;
    st_err e = st_pool_open(d->self.cfg.threads, 1, &d->self.pool);
    if (e != ST_OK)
        return e;
    if (have &&
        pthread_getaffinity_np(pthread_self(), sizeof d->self.pool0_cpus, &d->self.pool0_cpus) == 0)
        d->self.pool0_pinned = !CPU_EQUAL(&orig, &d->self.pool0_cpus);
    e = st_measure_speeds(d->self.pool, d->self.ops, ST_MEASURE_BUF_DEFAULT, 0.6, &d->self.meas);
    if (have)
        pthread_setaffinity_np(pthread_self(), sizeof orig, &orig);
    if (e != ST_OK)
        return e;
    st_measure_topology(&d->self.topo);
    if (d->self.cfg.test_speed > 0) {
        for (int t = 0; t < ST_DT_COUNT; t++)
            if (d->self.meas.reps[t] > 0)
                d->self.meas.bytes_per_s[t] = d->self.cfg.test_speed;
        st_log(ST_LOG_INFO, "measure", "--test-speed: announcing %.2f GB/s for every dtype",
               d->self.cfg.test_speed / 1e9);
    }
    for (int t = 0; t < ST_DT_COUNT; t++)
        if (d->self.meas.reps[t] > 0) /* a weight dtype with a product kernel (not q8_k) */
            st_log(ST_LOG_INFO, "measure", "%-5s %8.2f GB/s (%d runs)",
                   st_dtype_info_of((st_dtype)t)->name, d->self.meas.bytes_per_s[t] / 1e9,
                   d->self.meas.reps[t]);
    st_log(ST_LOG_INFO, "measure", "%.2f s; %u cores, L3 %llu bytes, kernels %s, %d threads",
           d->self.meas.seconds, d->self.topo.cores, (unsigned long long)d->self.topo.l3_bytes,
           d->self.ops->name, st_pool_size(d->self.pool));
    return ST_OK;
}

st_err st_daemon_open(const st_worker_cfg *cfg, st_daemon **out)
{
    *out = NULL;
    st_daemon *d = calloc(1, sizeof *d);
    if (d == NULL)
        return st_errorf(ST_ENOMEM, "daemon");
    d->self.cfg = *cfg;
    d->self.cfg.coordinator = d->self.s_coord = dm_strdup(cfg->coordinator);
    d->self.cfg.model = d->self.s_model = dm_strdup(cfg->model);
    d->self.cfg.listen = d->self.s_listen = dm_strdup(cfg->listen ? cfg->listen
                                                                  : ST_TCP_LOOPBACK_ANY);
    d->self.cfg.advertise = d->self.s_adv = dm_strdup(cfg->advertise);
    d->self.cfg.advertise_control = d->self.s_adv_ctl = dm_strdup(cfg->advertise_control);
    d->self.cfg.throttle_file = d->self.s_tfile = dm_strdup(cfg->throttle_file);
    d->self.cfg.name = NULL;
    d->mb.hb_ms = cfg->heartbeat_ms;
    d->mb.backoff = DM_BACKOFF_MIN_S;
    st_err e;
    char host[DM_HOST_MAX], ahost[DM_HOST_MAX]; /* the --listen host, the one announced */
    if ((e = dm_addrs_check(d, host, ahost)))
        goto fail;
    if (cfg->name != NULL) {
        snprintf(d->self.name, sizeof d->self.name, "%s", cfg->name);
    } else {
        char hn[64] = "worker";
        gethostname(hn, sizeof hn - 1);
        snprintf(d->self.name, sizeof d->self.name, "%s-%ld", hn, (long)getpid());
    }
    if (cfg->key_file != NULL) {
        if ((e = st_key_load(cfg->key_file, d->self.key)))
            goto fail;
        d->self.keyed = true;
    }
    if ((e = st_worker_shared_init(&d->sh)))
        goto fail;
    d->sh_ok = true;
    if ((e = dm_heartbeat_init(d)) || (e = dm_fetch_open(d, cfg)) ||
        (e = st_gguf_open(d->self.cfg.model, &d->self.g)) ||
        (e = st_hparams_from_gguf(d->self.g, &d->self.hp)) ||
        (e = st_gguf_model_id(d->self.g, d->self.model_id)))
        goto fail;
    d->self.memory = cfg->memory;
    if (d->self.memory == 0 && (e = st_mem_available(&d->self.memory)))
        goto fail;
    d->self.ops = st_kernels_select(cfg->force_ref);
    if (sodium_init() < 0) {
        e = st_err_sodium("sodium_init");
        goto fail;
    }
    randombytes_buf(&d->self.sender, sizeof d->self.sender);
    d->self.sender = (d->self.sender & ~(uint64_t)3) | 4; /* + 0 .. + 3 stay distinct and nonzero */
    const uint8_t *key = d->self.keyed ? d->self.key : NULL;
    if ((e = st_env_init_mode(&d->cli.env, key, cfg->encrypt, d->self.sender)))
        goto fail;
    d->cli.env.learn_peer = true; /* bind requests to the coordinator that answered */
    /* listeners first, so NNG's threads are not confined by the pool's pinning */
    int dport = 0, cport = 0;
    st_dp_cfg dc = {.listen = d->self.cfg.listen,
                    .key = key,
                    .encrypt = cfg->encrypt,
                    .sender = d->self.sender + 1,
                    .force_ref = cfg->force_ref,
                    .name = d->self.name,
                    .hidden = (uint32_t)d->self.hp.n_embd};
    if ((e = st_dp_open(&dc, &d->sh, &d->dp, &dport)) ||
        (e = dm_rep_open(d, host, d->self.cfg.control_port, &cport)))
        goto fail;
    dm_addrs_announce(d, host, ahost, dport, cport);
    if ((e = dm_pool(d)) || (e = dm_dial_req(d)))
        goto fail;
    if (!cfg->no_probe &&
        (e = st_probe_open(key, cfg->encrypt, d->self.sender + 3, cfg->probe_s, &d->probe)))
        goto fail; /* sender + 3: its own sequence stream (see the file comment) */
    st_log(ST_LOG_INFO, "worker",
           "%s: data %s, control %s, budget %llu bytes, model %s "
           "(%lld layers)",
           d->self.name, d->self.data_addr, d->self.ctl_addr, (unsigned long long)d->self.memory,
           d->self.cfg.model, (long long)d->self.hp.n_layer);
    *out = d;
    return ST_OK;
fail:
    st_daemon_close(d);
    return e;
}

st_err st_daemon_start(st_daemon *d)
{
    st_err e = st_dp_start(d->dp, d->self.pool0_pinned ? &d->self.pool0_cpus : NULL);
    if (e != ST_OK)
        return e;
    if (pthread_create(&d->ctl, NULL, dm_main, d) != 0) {
        st_dp_stop(d->dp);
        return st_errorf(ST_EINTERNAL, "cannot start the control thread");
    }
    d->ctl_started = true;
    if (d->probe != NULL && (e = st_probe_start(d->probe)) != ST_OK)
        return e; /* st_daemon_close stops the other threads */
    return ST_OK;
}

void st_daemon_shutdown(st_daemon *d)
{
    if (d == NULL || d->shut)
        return;
    d->shut = true;
    st_probe_stop(d->probe); /* its round ends after the call in flight, meanwhile */
    dm_fetch_stop(d);        /* a fetch in Prepare ends; its Refuse is not awaited */
    st_dp_stop(d->dp);       /* the batch being computed is finished first */
    if (d->ctl_started) {
        dm_signal(d, &d->sh.ev_stop);
        pthread_join(d->ctl, NULL);
        d->ctl_started = false;
    }
    /* the probe thread is joined in st_daemon_close, under the exit guard:
     * a round that ended on a timed-out call closed its socket while the
     * late reply could still come, and that close can hang (exit_guard.h) */
}

void dm_aio_free(nng_aio *a)
{
    if (a == NULL)
        return;
    nng_aio_stop(a);
    nng_msg *m = nng_aio_get_msg(a); /* a completion nobody consumed */
    if (m != NULL)
        nng_msg_free(m);
    nng_aio_free(a);
}

void st_daemon_close(st_daemon *d)
{
    if (d == NULL)
        return;
    st_daemon_shutdown(d);
    /* a loader still runs only when the control thread never ran to its end */
    dm_plans_close(d);
    /* the chunk server before the control sockets: its close logs what it
     * served, which the last close to run may never reach when NNG 1.5.2's
     * close hangs (common/base/exit_guard.h) */
    dm_serve_close(d);
    st_probe_close(d->probe); /* after the control thread (shutdown): it reads the results */
    d->probe = NULL;
    if (d->cli.open)
        nng_close(d->cli.sock);
    dm_rep_close(d);
    dm_aio_free(d->cli.aio);
    st_dp_close(d->dp);
    st_env_fini(&d->cli.env);
    if (d->sh_ok)
        st_worker_shared_fini(&d->sh);
    dm_heartbeat_fini(d);
    st_pool_close(d->self.pool);
    st_gguf_close(d->self.g);
    dm_fetch_close(d);
    sodium_memzero(d->self.key, sizeof d->self.key);
    free(d->self.s_coord);
    free(d->self.s_model);
    free(d->self.s_listen);
    free(d->self.s_adv);
    free(d->self.s_adv_ctl);
    free(d->self.s_tfile);
    free(d);
}
