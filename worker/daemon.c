/* daemon.c - the worker daemon: assembly, the control thread, and the
 * requests it makes to the coordinator (see daemon.h, docs/worker.md).
 *
 * Design. Two long-lived threads split the worker by what they wait for.
 * The data thread (dataplane.c) waits for STEP frames and computes. The
 * control thread waits for everything else: replies to its requests to the
 * coordinator (Join, Heartbeat, StaleReport, Leave on one REQ socket),
 * requests from the coordinator on its REP socket (dm_plan.c), the end of a
 * stage being loaded, stale reports queued by the data thread, the next
 * heartbeat or join attempt, and the stop request. The thread owns its
 * state and the others only post to it, by the rule of common/cq.h in its
 * "flags" form: the REQ and REP sockets are driven with NNG aios whose
 * callbacks, like the loader and the data thread, only set a flag of
 * st_worker_shared and signal its condition variable (these events carry
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
 * Heartbeat replies carry the other workers' control addresses (handed to
 * the prober thread, whose results ride in the next heartbeats) and, once
 * a drain is complete, `leave`: see dm_on_heartbeat_reply (dm_plan.c). */
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

#include "common/clock.h"
#include "common/cq.h"
#include "common/log.h"
#include "common/msg.h"
#include "common/version.h"
#include "worker/dm_internal.h"

static void dm_signal(st_daemon *d, bool *flag)
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

static void dm_rep_cb(void *arg)
{
    st_daemon *d = arg;
    dm_signal(d, &d->sh.ev_rep);
}

/* ---- requests to the coordinator ---- */

static void dm_request(st_daemon *d, dm_req_kind kind, const Strata__Msg *m, int timeout_ms)
{
    nng_msg *out;
    st_err e = st_msg_pack(&d->env_req, ST_ENV_CONTROL, m, &out);
    if (e != ST_OK) {
        st_log(ST_LOG_ERROR, "control", "cannot pack %s: %s", st_msg_case_name(m), st_errmsg(e));
        if (kind == DM_REQ_LEAVE)
            d->leave_done = true;
        return;
    }
    d->req_kind = kind;
    d->req_receiving = false;
    d->req_cancelled = false;
    d->req_timeout_ms = timeout_ms;
    nng_aio_set_msg(d->req_aio, out);
    nng_aio_set_timeout(d->req_aio, timeout_ms);
    nng_send_aio(d->req, d->req_aio);
}

static void dm_send_join(st_daemon *d)
{
    char *kernels[ST_KVAR_COUNT], *dtypes[ST_DT_COUNT];
    Strata__DtypeSpeed sp[ST_DT_COUNT], *spp[ST_DT_COUNT];
    size_t nk = 0, nd = 0;
    for (int v = ST_KVAR_COUNT - 1; v >= 0; v--) {
        const st_kernel_ops *k = st_kernels_get((st_kvariant)v);
        if (k != NULL && (!d->cfg.force_ref || v == ST_KVAR_REF))
            kernels[nk++] = (char *)k->name;
    }
    for (int t = 0; t < ST_DT_COUNT; t++) {
        if (d->ops->mul_mat[t] == NULL || !(d->meas.bytes_per_s[t] > 0))
            continue;
        strata__dtype_speed__init(&sp[nd]);
        sp[nd].dtype = (char *)st_dtype_info_of((st_dtype)t)->name;
        sp[nd].bytes_per_s = d->meas.bytes_per_s[t];
        dtypes[nd] = sp[nd].dtype;
        spp[nd] = &sp[nd];
        nd++;
    }
    Strata__Capability cap = STRATA__CAPABILITY__INIT;
    cap.name = d->name;
    cap.cores = d->topo.cores;
    cap.threads = (uint32_t)st_pool_size(d->pool);
    if (d->topo.has_host_id) {
        cap.host_id.data = d->topo.host_id;
        cap.host_id.len = sizeof d->topo.host_id;
    }
    cap.cpus = d->topo.cpus;
    cap.l3_bytes = d->topo.l3_bytes;
    cap.memory_budget = d->memory;
    cap.n_kernels = nk;
    cap.kernels = kernels;
    cap.n_dtypes = nd;
    cap.dtypes = dtypes;
    cap.n_speeds = nd;
    cap.speeds = spp;
    cap.data_addr = d->data_addr;
    cap.ctl_addr = d->ctl_addr;
    cap.model_id.data = d->model_id;
    cap.model_id.len = 32;
    char *wire_names[ST_WIRE_DT_COUNT];
    size_t nw = 0;
    for (size_t k = 0; k < ST_WIRE_DT_COUNT; k++) {
        st_wire_dtype wd = st_wire_dtype_by_precision(k);
        if (d->cfg.wire_accept == 0 || (d->cfg.wire_accept & (1u << wd)))
            wire_names[nw++] = (char *)st_wire_dtype_name(wd);
    }
    cap.n_wire_dtypes = nw;
    cap.wire_dtypes = wire_names;
    cap.wire_zstd = true; /* st_wire_decode takes zstd frames (a boundary's Stage.in_zstd) */
    cap.throttle = d->throttle;
    cap.spare = d->cfg.spare;
    cap.data_sender = d->sender + 1;    /* the data plane's (st_daemon_open) */
    cap.ctl_sender = d->env_rep.sender; /* control requests are bound to it (envelope.h) */
    cap.streams = d->fetch != NULL;
    cap.chunk_addr = d->chunk_addr; /* "" without --serve-chunks */
    Strata__Join j = STRATA__JOIN__INIT;
    j.protocol = ST_PROTO_VERSION; /* common/version.h */
    j.protocol_oldest = ST_PROTO_OLDEST;
    cap.version = (char *)st_version_line();
    j.cap = &cap;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_JOIN;
    m.join = &j;
    st_log(ST_LOG_DEBUG, "control", "joining %s", d->cfg.coordinator);
    dm_request(d, DM_REQ_JOIN, &m, DM_JOIN_TIMEOUT_MS);
}

static void dm_send_heartbeat(st_daemon *d)
{
    dm_read_throttle(d);
    Strata__Heartbeat hb = STRATA__HEARTBEAT__INIT;
    Strata__Counters c = STRATA__COUNTERS__INIT;
    Strata__LayerLatency *ll = NULL, **llp = NULL;
    uint64_t busy;
    pthread_mutex_lock(&d->sh.mu);
    st_worker_shared *sh = &d->sh;
    size_t nl = (size_t)sh->lat.n_layers;
    if (nl > 0) {
        ll = calloc(nl, sizeof *ll);
        llp = calloc(nl, sizeof *llp);
    }
    for (size_t i = 0; ll != NULL && llp != NULL && i < nl; i++) {
        st_lat_stat s;
        st_latency_stat(&sh->lat, sh->lat.first + (int64_t)i, &s);
        strata__layer_latency__init(&ll[i]);
        ll[i].layer = (uint32_t)s.layer;
        ll[i].ema_ms = s.ema_ms;
        ll[i].p99_ms = s.p99_ms;
        ll[i].samples = s.samples > UINT32_MAX ? UINT32_MAX : (uint32_t)s.samples;
        ll[i].one_token_ema_ms = s.one_ema_ms;
        ll[i].one_token_samples = s.one_samples > UINT32_MAX ? UINT32_MAX : (uint32_t)s.one_samples;
        llp[i] = &ll[i];
        hb.n_layers = i + 1;
    }
    c.refused_epoch = sh->c.refused_epoch;
    c.auth_failed = sh->c.auth_failed;
    c.f16_clamps = sh->c.f16_clamps;
    c.bad_packets = sh->c.bad_packets;
    c.steps = sh->c.steps;
    c.refused_step = sh->c.refused_step;
    c.zstd_packets_sent = sh->c.zstd_sent;
    c.zstd_raw_bytes_sent = sh->c.zstd_raw;
    c.zstd_wire_bytes_sent = sh->c.zstd_wire;
    c.zstd_packets_received = sh->c.zstd_recv;
    st_wire_zmeas zm[ST_WIRE_DT_COUNT];
    memcpy(zm, sh->zstd, sizeof zm);
    busy = sh->busy_ns;
    hb.epoch = sh->serving_epoch;
    hb.in_flight = sh->in_flight;
    hb.sessions = sh->sessions;
    hb.kv_bytes = sh->kv_bytes;
    hb.weight_bytes = sh->weight_bytes;
    pthread_mutex_unlock(&d->sh.mu);
    dm_counters_control(d, &c);
    double now = st_now_s();
    double dt = now - d->last_hb_s;
    double load = dt > 0 ? (double)(busy - d->last_busy_ns) / 1e9 / dt : 0.0;
    d->last_hb_s = now;
    d->last_busy_ns = busy;
    hb.worker_id = d->worker_id;
    hb.load = load < 0 ? 0 : load > 1 ? 1 : load;
    hb.rss_bytes = st_rss_bytes();
    hb.layers = llp;
    hb.counters = &c;
    Strata__ZstdMeasure zs[ST_WIRE_DT_COUNT], *zsp[ST_WIRE_DT_COUNT];
    hb.n_zstd = dm_zstd_pb(zm, zs, zsp);
    hb.zstd = zsp;
    Strata__FetchProgress fp;
    hb.fetch = dm_fetch_pb(d, &fp);
    st_probe_link *pl = NULL;
    Strata__LinkMeasure *lm = NULL, **lmp = NULL;
    if (d->probe != NULL && (pl = calloc(ST_PROBE_MAX_PEERS, sizeof *pl)) != NULL) {
        size_t nk = st_probe_links(d->probe, pl, ST_PROBE_MAX_PEERS);
        lm = calloc(nk ? nk : 1, sizeof *lm);
        lmp = calloc(nk ? nk : 1, sizeof *lmp);
        for (size_t i = 0; lm != NULL && lmp != NULL && i < nk; i++) {
            strata__link_measure__init(&lm[i]);
            lm[i].peer_id = pl[i].peer_id;
            lm[i].latency_ms = pl[i].latency_s * 1e3;
            lm[i].bandwidth_bytes_per_s = pl[i].bw;
            lm[i].samples = pl[i].samples;
            lm[i].age_s = now - pl[i].when_s;
            lmp[i] = &lm[i];
            hb.n_links = i + 1;
        }
        hb.links = lmp;
    }
    st_log(ST_LOG_DEBUG, "control",
           "heartbeat: epoch %llu load %.2f rss %llu kv %llu sessions %u "
           "steps %llu refused %llu auth %llu bad %llu",
           (unsigned long long)hb.epoch, hb.load, (unsigned long long)hb.rss_bytes,
           (unsigned long long)hb.kv_bytes, hb.sessions, (unsigned long long)c.steps,
           (unsigned long long)c.refused_epoch, (unsigned long long)c.auth_failed,
           (unsigned long long)c.bad_packets);
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_HEARTBEAT;
    m.heartbeat = &hb;
    int to = (int)(2 * d->hb_ms);
    dm_request(d, DM_REQ_HEARTBEAT, &m, to < 500 ? 500 : to > 5000 ? 5000 : to);
    free(ll);
    free(llp);
    free(pl);
    free(lm);
    free(lmp);
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
    r.worker_id = d->worker_id;
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
    l.worker_id = d->worker_id;
    l.reason = (char *)(d->leave_reason ? d->leave_reason : "shutdown");
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_LEAVE;
    m.leave = &l;
    dm_request(d, DM_REQ_LEAVE, &m, DM_LEAVE_TIMEOUT_MS);
}

static void dm_rejoin(st_daemon *d, double when)
{
    d->joined = false;
    d->next_join = when;
    d->backoff = DM_BACKOFF_MIN_S;
}

static void dm_req_failed(st_daemon *d, dm_req_kind kind, st_err e)
{
    double now = st_now_s();
    const char *msg = st_errmsg(e);
    if (kind == DM_REQ_JOIN) {
        st_log(ST_LOG_WARN, "control", "join via %s failed: %s; retrying in %.2f s",
               d->cfg.coordinator, msg, d->backoff);
        d->next_join = now + d->backoff;
        d->backoff = d->backoff * 2 > DM_BACKOFF_MAX_S ? DM_BACKOFF_MAX_S : d->backoff * 2;
    } else if (kind == DM_REQ_HEARTBEAT) {
        d->hb_fails++;
        st_log(ST_LOG_WARN, "control", "heartbeat failed (%d in a row): %s", d->hb_fails, msg);
        if (d->hb_fails >= DM_HB_FAILS_REJOIN && !d->stopping) {
            st_log(ST_LOG_WARN, "control", "coordinator unreachable; joining again");
            dm_rejoin(d, now);
        }
    } else if (kind == DM_REQ_STALE) {
        st_log(ST_LOG_WARN, "control", "stale report not delivered: %s", msg);
    } else if (kind == DM_REQ_LEAVE) {
        st_log(ST_LOG_INFO, "control", "leave not acknowledged: %s", msg);
        d->leave_done = true;
    } else if (kind == DM_REQ_HELLO) {
        dm_req_kind next = d->hello_for;
        if (next == DM_REQ_HEARTBEAT) /* as a heartbeat that failed: the next in a period */
            d->next_hb = now + d->hb_ms / 1000.0;
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
    if (!st_env_unbound(&d->env_req))
        return false;
    Strata__Msg m;
    Strata__Hello h;
    st_msg_hello_msg(&m, &h);
    d->hello_for = next;
    dm_request(d, DM_REQ_HELLO, &m, next == DM_REQ_LEAVE ? DM_LEAVE_TIMEOUT_MS : DM_CALL_TIMEOUT_MS);
    if (d->req_kind != DM_REQ_HELLO) /* not packed (logged): a Hello that failed */
        dm_req_failed(d, DM_REQ_HELLO, ST_ENOMEM);
    return true;
}

static void dm_on_reply(st_daemon *d, dm_req_kind kind, const Strata__Msg *r)
{
    double now = st_now_s();
    if (kind == DM_REQ_HELLO) { /* the request it preceded goes next (dm_act) */
        bool err = r->body_case == STRATA__MSG__BODY_ERROR && r->error->message;
        if (r->body_case != STRATA__MSG__BODY_ACK)
            dm_req_failed(d, kind, st_errorf(ST_EPROTO, "a Hello was answered by %s %s",
                                             st_msg_case_name(r), err ? r->error->message : ""));
        return;
    }
    if (r->body_case == STRATA__MSG__BODY_ERROR) {
        const Strata__Error *er = r->error;
        st_err code = er->code > 0 && er->code < ST_ERR_COUNT ? (st_err)er->code : ST_EPROTO;
        const char *text = er->message ? er->message : "";
        if (kind == DM_REQ_JOIN) {
            st_log(ST_LOG_ERROR, "control", "join refused by %s: %s: %s; retrying in %.0f s",
                   d->cfg.coordinator, st_strerror(code), text, DM_BACKOFF_MAX_S);
            d->next_join = now + DM_BACKOFF_MAX_S;
        } else if (kind == DM_REQ_HEARTBEAT && code == ST_ENOENT) {
            st_log(ST_LOG_INFO, "control",
                   "the coordinator does not know worker %llu; joining "
                   "again",
                   (unsigned long long)d->worker_id);
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
            d->leave_done = true;
        return;
    }
    if (kind == DM_REQ_JOIN) {
        if (r->body_case != STRATA__MSG__BODY_JOIN_REPLY || r->join_reply->worker_id == 0) {
            st_errorf(ST_EPROTO, "join answered with %s", st_msg_case_name(r));
            dm_req_failed(d, kind, ST_EPROTO);
            return;
        }
        dm_on_join_reply(d, r->join_reply, now); /* dm_rep.c */
    } else if (kind == DM_REQ_HEARTBEAT) {
        d->hb_fails = 0;
        if (r->body_case == STRATA__MSG__BODY_HEARTBEAT_REPLY)
            dm_on_heartbeat_reply(d, r->heartbeat_reply); /* links, drain (dm_plan.c) */
    } else if (kind == DM_REQ_LEAVE) {
        d->leave_done = true;
    }
}

static void dm_on_req(st_daemon *d)
{
    dm_req_kind kind = d->req_kind;
    if (kind == DM_REQ_NONE)
        return;
    int rv = nng_aio_result(d->req_aio);
    if (!d->req_receiving) {
        if (rv != 0) {
            nng_msg_free(nng_aio_get_msg(d->req_aio));
            nng_aio_set_msg(d->req_aio, NULL);
            d->req_kind = DM_REQ_NONE;
            dm_req_failed(d, kind, st_err_nng(rv, "send"));
            return;
        }
        nng_aio_set_msg(d->req_aio, NULL); /* the socket owns the request now */
        d->req_receiving = true;
        nng_aio_set_timeout(d->req_aio, d->req_timeout_ms);
        nng_recv_aio(d->req, d->req_aio);
        return;
    }
    d->req_kind = DM_REQ_NONE;
    if (rv != 0) {
        dm_req_failed(d, kind, st_err_nng(rv, "reply"));
        return;
    }
    nng_msg *msg = nng_aio_get_msg(d->req_aio);
    nng_aio_set_msg(d->req_aio, NULL);
    Strata__Msg *r = NULL;
    st_err e = st_msg_unpack(&d->env_req, ST_ENV_CONTROL, msg, &r, NULL);
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
    if (d->req_kind != DM_REQ_NONE)
        return now + 3600; /* the aio's completion wakes us */
    if (d->stopping)       /* send Leave, or wait for the loader's event */
        return (d->joined && !d->leave_done) || !d->loading ? now : now + 3600;
    if (!d->joined)
        return d->next_join;
    if (d->sh.stale_n > 0)
        return now;
    return d->next_hb;
}

/* dm_act - starts the next request if none is in flight; true when the
 * thread may end (stopping, Leave done or not joined, nothing pending). */
static bool dm_act(st_daemon *d)
{
    if (d->req_kind != DM_REQ_NONE)
        return false;
    double now = st_now_s();
    if (d->stopping) {
        if (d->joined && !d->leave_done) {
            if (!dm_hello_first(d, DM_REQ_LEAVE))
                dm_send_leave(d);
            return false;
        }
        return !d->loading;
    }
    if (!d->joined) {
        if (now >= d->next_join && !dm_hello_first(d, DM_REQ_JOIN))
            dm_send_join(d);
        return false;
    }
    if (now >= d->next_hb) { /* before stale reports: a burst of them never delays it */
        if (dm_hello_first(d, DM_REQ_HEARTBEAT))
            return false;
        d->next_hb = now + d->hb_ms / 1000.0;
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
    nng_recv_aio(d->rep, d->rep_aio);
    d->next_join = st_now_s();
    d->last_hb_s = st_now_s();
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
        bool leaving = d->req_kind == DM_REQ_LEAVE ||
                       (d->req_kind == DM_REQ_HELLO && d->hello_for == DM_REQ_LEAVE);
        if (d->stopping && d->req_kind != DM_REQ_NONE && !leaving && !d->req_cancelled) {
            d->req_cancelled = true;
            nng_aio_cancel(d->req_aio); /* completes with NNG_ECANCELED: an event */
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
    if ((rv = nng_req0_open(&d->req)) != 0)
        return st_err_nng(rv, "coordinator socket");
    d->req_open = true;
    nng_socket_set_ms(d->req, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    nng_socket_set_size(d->req, NNG_OPT_RECVMAXSZ, ST_MSG_CONTROL_MAX_FRAME);
    nng_dialer dl;
    if ((rv = nng_dialer_create(&dl, d->req, d->cfg.coordinator)) != 0)
        return st_errorf(ST_ENNG, "--coordinator %s: %s", d->cfg.coordinator, nng_strerror(rv));
    nng_dialer_set_bool(dl, NNG_OPT_TCP_NODELAY, true); /* fails harmlessly off TCP */
    nng_dialer_set_ms(dl, NNG_OPT_RECONNMINT, 100);
    nng_dialer_set_ms(dl, NNG_OPT_RECONNMAXT, 2000);
    if ((rv = nng_dialer_start(dl, NNG_FLAG_NONBLOCK)) != 0)
        return st_errorf(ST_ENNG, "--coordinator %s: %s", d->cfg.coordinator, nng_strerror(rv));
    if ((rv = nng_aio_alloc(&d->req_aio, dm_req_cb, d)) != 0 ||
        (rv = nng_aio_alloc(&d->rep_aio, dm_rep_cb, d)) != 0)
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
    st_err e = st_pool_open(d->cfg.threads, 1, &d->pool);
    if (e != ST_OK)
        return e;
    if (have && pthread_getaffinity_np(pthread_self(), sizeof d->pool0_cpus, &d->pool0_cpus) == 0)
        d->pool0_pinned = !CPU_EQUAL(&orig, &d->pool0_cpus);
    e = st_measure_speeds(d->pool, d->ops, ST_MEASURE_BUF_DEFAULT, 0.6, &d->meas);
    if (have)
        pthread_setaffinity_np(pthread_self(), sizeof orig, &orig);
    if (e != ST_OK)
        return e;
    st_measure_topology(&d->topo);
    if (d->cfg.test_speed > 0) {
        for (int t = 0; t < ST_DT_COUNT; t++)
            if (d->meas.reps[t] > 0)
                d->meas.bytes_per_s[t] = d->cfg.test_speed;
        st_log(ST_LOG_INFO, "measure", "--test-speed: announcing %.2f GB/s for every dtype",
               d->cfg.test_speed / 1e9);
    }
    for (int t = 0; t < ST_DT_COUNT; t++)
        if (d->meas.reps[t] > 0) /* a weight dtype with a product kernel (not q8_k) */
            st_log(ST_LOG_INFO, "measure", "%-5s %8.2f GB/s (%d runs)",
                   st_dtype_info_of((st_dtype)t)->name, d->meas.bytes_per_s[t] / 1e9,
                   d->meas.reps[t]);
    st_log(ST_LOG_INFO, "measure", "%.2f s; %u cores, L3 %llu bytes, kernels %s, %d threads",
           d->meas.seconds, d->topo.cores, (unsigned long long)d->topo.l3_bytes, d->ops->name,
           st_pool_size(d->pool));
    return ST_OK;
}

st_err st_daemon_open(const st_worker_cfg *cfg, st_daemon **out)
{
    *out = NULL;
    st_daemon *d = calloc(1, sizeof *d);
    if (d == NULL)
        return st_errorf(ST_ENOMEM, "daemon");
    d->cfg = *cfg;
    d->cfg.coordinator = d->s_coord = dm_strdup(cfg->coordinator);
    d->cfg.model = d->s_model = dm_strdup(cfg->model);
    d->cfg.listen = d->s_listen = dm_strdup(cfg->listen ? cfg->listen : "tcp://127.0.0.1:0");
    d->cfg.advertise = d->s_adv = dm_strdup(cfg->advertise);
    d->cfg.advertise_control = d->s_adv_ctl = dm_strdup(cfg->advertise_control);
    d->cfg.throttle_file = d->s_tfile = dm_strdup(cfg->throttle_file);
    d->cfg.name = NULL;
    d->throttle = cfg->throttle;
    d->hb_ms = cfg->heartbeat_ms;
    d->backoff = DM_BACKOFF_MIN_S;
    st_err e;
    char host[DM_HOST_MAX], ahost[DM_HOST_MAX]; /* the --listen host, the one announced */
    if ((e = dm_addrs_check(d, host, ahost)))
        goto fail;
    if (cfg->name != NULL) {
        snprintf(d->name, sizeof d->name, "%s", cfg->name);
    } else {
        char hn[64] = "worker";
        gethostname(hn, sizeof hn - 1);
        snprintf(d->name, sizeof d->name, "%s-%ld", hn, (long)getpid());
    }
    if (cfg->key_file != NULL) {
        if ((e = st_key_load(cfg->key_file, d->key)))
            goto fail;
        d->keyed = true;
    }
    if ((e = st_worker_shared_init(&d->sh)))
        goto fail;
    d->sh_ok = true;
    if (pthread_mutex_init(&d->leave_mu, NULL) != 0) {
        e = st_errorf(ST_EINTERNAL, "leave mutex");
        goto fail;
    }
    d->leave_mu_ok = true;
    d->sh.throttle = d->throttle;
    if ((e = dm_fetch_open(d, cfg)) || (e = st_gguf_open(d->cfg.model, &d->g)) ||
        (e = st_hparams_from_gguf(d->g, &d->hp)) || (e = st_gguf_model_id(d->g, d->model_id)))
        goto fail;
    d->memory = cfg->memory;
    if (d->memory == 0 && (e = st_mem_available(&d->memory)))
        goto fail;
    d->ops = st_kernels_select(cfg->force_ref);
    if (sodium_init() < 0) {
        e = st_err_sodium("sodium_init");
        goto fail;
    }
    randombytes_buf(&d->sender, sizeof d->sender);
    d->sender = (d->sender & ~(uint64_t)3) | 4; /* + 0, 1, 2 stay distinct and nonzero */
    const uint8_t *key = d->keyed ? d->key : NULL;
    if ((e = st_env_init_mode(&d->env_req, key, cfg->encrypt, d->sender)) ||
        (e = st_env_init_mode(&d->env_rep, key, cfg->encrypt, d->sender + 2)))
        goto fail;
    d->env_req.learn_peer = true; /* bind requests to the coordinator that answered */
    /* listeners first, so NNG's threads are not confined by the pool's pinning */
    int dport = 0, cport = 0;
    st_dp_cfg dc = {.listen = d->cfg.listen,
                    .key = key,
                    .encrypt = cfg->encrypt,
                    .sender = d->sender + 1,
                    .force_ref = cfg->force_ref,
                    .name = d->name,
                    .hidden = (uint32_t)d->hp.n_embd};
    if ((e = st_dp_open(&dc, &d->sh, &d->dp, &dport)) ||
        (e = dm_listen_rep(d, host, d->cfg.control_port, &cport)))
        goto fail;
    dm_addrs_announce(d, host, ahost, dport, cport);
    if ((e = dm_pool(d)) || (e = dm_dial_req(d)))
        goto fail;
    if (!cfg->no_probe &&
        (e = st_probe_open(key, cfg->encrypt, d->sender + 3, cfg->probe_s, &d->probe)))
        goto fail; /* sender + 3: its own sequence stream (see the file comment) */
    st_log(ST_LOG_INFO, "worker",
           "%s: data %s, control %s, budget %llu bytes, model %s "
           "(%lld layers)",
           d->name, d->data_addr, d->ctl_addr, (unsigned long long)d->memory, d->cfg.model,
           (long long)d->hp.n_layer);
    *out = d;
    return ST_OK;
fail:
    st_daemon_close(d);
    return e;
}

st_err st_daemon_start(st_daemon *d)
{
    st_err e = st_dp_start(d->dp, d->pool0_pinned ? &d->pool0_cpus : NULL);
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

bool st_daemon_leaving(st_daemon *d, const char **why)
{
    pthread_mutex_lock(&d->leave_mu);
    bool r = d->self_leave;
    if (why != NULL)
        *why = d->leave_why;
    pthread_mutex_unlock(&d->leave_mu);
    return r;
}

void st_daemon_shutdown(st_daemon *d)
{
    if (d == NULL || d->shut)
        return;
    d->shut = true;
    st_probe_stop(d->probe); /* its round ends after the call in flight, meanwhile */
    st_fetch_stop(d->fetch); /* a fetch in Prepare ends; its Refuse is not awaited */
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

static void dm_aio_free(nng_aio *a)
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
    if (d->loading) { /* only when the control thread never ran to its end */
        pthread_join(d->ld_th, NULL);
        st_dp_stage_free(d->ld_out);
    }
    /* the chunk server before the control sockets: its close logs what it
     * served, which the last close to run may never reach when NNG 1.5.2's
     * close hangs (common/exit_guard.h) */
    st_chunk_serve_close(d->cserve);
    d->cserve = NULL;
    st_probe_close(d->probe); /* after the control thread (shutdown): it reads the results */
    d->probe = NULL;
    if (d->req_open)
        nng_close(d->req);
    if (d->rep_open)
        nng_close(d->rep);
    st_pipe_gate_close(d->rep_gate);
    dm_aio_free(d->req_aio);
    dm_aio_free(d->rep_aio);
    st_dp_close(d->dp);
    st_dp_stage_free(d->pending);
    st_model_close(d->kept);
    st_env_fini(&d->env_req);
    st_env_fini(&d->env_rep);
    if (d->sh_ok)
        st_worker_shared_fini(&d->sh);
    if (d->leave_mu_ok)
        pthread_mutex_destroy(&d->leave_mu);
    st_pool_close(d->pool);
    st_gguf_close(d->g);
    dm_fetch_close(d);
    sodium_memzero(d->key, sizeof d->key);
    free(d->s_coord);
    free(d->s_model);
    free(d->s_listen);
    free(d->s_adv);
    free(d->s_adv_ctl);
    free(d->s_tfile);
    free(d);
}
