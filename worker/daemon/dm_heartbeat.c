/* dm_heartbeat.c - the worker daemon's heartbeats (dm_heartbeat.h):
 * what a heartbeat carries (the data plane's figures from
 * st_worker_shared, the control thread's own counters, the fetch's
 * progress, the prober's links, the zstd measurements), the
 * --throttle-file each heartbeat re-reads, and what a HeartbeatReply from
 * the coordinator asks of the worker: the peers whose links to probe
 * (handed to the prober, only well-formed ones, INV-3), and leaving when a
 * drain is complete (or staying as a drained spare with
 * --stay-after-drain; daemon.h). When heartbeats are sent is daemon.c's
 * (membership). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/base/clock.h"
#include "common/base/log.h"
#include "worker/daemon/dm_internal.h"

/* dm_counters_control - adds to *c what the control side counts itself:
 * its envelopes' failed authentications, bad and refused control
 * messages, reply failures, the prober's refusals, and the connections its
 * listening sockets closed unauthenticated. */
static void dm_counters_control(st_daemon *d, Strata__Counters *c)
{
    st_pipe_gate_counts g = {0}; /* its listening sockets' (common/net/pipe_gate.h) */
    c->auth_failed += d->cli.env.auth_failed;
    dm_rep_counters(d, c, &g);
    c->probe_refused = d->probe != NULL ? st_probe_refused(d->probe) : 0;
    st_dp_gate_counts(d->dp, &g);
    dm_serve_gate_counts(d, &g);
    c->conn_refused = g.refused;
    c->conn_evicted = g.evicted;
    c->conn_expired = g.expired;
}

/* dm_zstd_pb - the heartbeat's ZstdMeasure entries (in zs, pointed to by
 * zsp) of the dtypes zm has samples of; returns how many. */
static size_t dm_zstd_pb(const st_wire_zmeas zm[ST_WIRE_DT_COUNT],
                         Strata__ZstdMeasure zs[ST_WIRE_DT_COUNT],
                         Strata__ZstdMeasure *zsp[ST_WIRE_DT_COUNT])
{
    size_t n = 0;
    for (unsigned t = 0; t < ST_WIRE_DT_COUNT; t++) {
        if (zm[t].samples == 0)
            continue;
        Strata__ZstdMeasure *z = &zs[n];
        strata__zstd_measure__init(z);
        z->dtype = (char *)st_wire_dtype_name((st_wire_dtype)t);
        z->ratio = zm[t].ratio;
        z->compress_ns_per_byte = zm[t].compress_ns;
        z->decompress_ns_per_byte = zm[t].decompress_ns;
        z->samples = zm[t].samples;
        zsp[n++] = z;
    }
    return n;
}

/* dm_experts_pb - a mixture of experts (under sh->mu): hb's experts, one
 * ExpertLoad per layer of the served stage with the process's totals of
 * that layer (dataplane.h), in *xl, *xlp and *xt for the caller to free;
 * none for a dense model, a spare, or when memory runs out (the heartbeat
 * goes without them). Bounded: the stage's layers x n_expert counts. */
static void dm_experts_pb(const st_worker_shared *sh, Strata__Heartbeat *hb,
                          Strata__ExpertLoad **xl, Strata__ExpertLoad ***xlp, uint64_t **xt)
{
    if (sh->exp_tot == NULL || sh->exp_n <= 0 || sh->n_expert == 0)
        return;
    size_t nl = (size_t)sh->exp_n, ne = sh->n_expert;
    *xl = calloc(nl, sizeof **xl);
    *xlp = calloc(nl, sizeof **xlp);
    *xt = malloc(nl * ne * sizeof **xt);
    if (*xl == NULL || *xlp == NULL || *xt == NULL)
        return;
    memcpy(*xt, sh->exp_tot + (size_t)sh->exp_first * ne, nl * ne * sizeof **xt);
    for (size_t i = 0; i < nl; i++) {
        Strata__ExpertLoad *x = &(*xl)[i];
        strata__expert_load__init(x);
        x->layer = (uint32_t)(sh->exp_first + (int64_t)i);
        x->tokens = *xt + i * ne;
        x->n_tokens = ne;
        (*xlp)[i] = x;
    }
    hb->experts = *xlp;
    hb->n_experts = nl;
}

/* dm_read_throttle - re-reads --throttle-file (a number in [1, 1000]; an
 * absent file keeps the current value, a bad one is logged and ignored)
 * into d->hb.throttle and the data plane's copy. */
static void dm_read_throttle(st_daemon *d)
{
    if (d->self.cfg.throttle_file == NULL)
        return;
    FILE *f = fopen(d->self.cfg.throttle_file, "r");
    if (f == NULL)
        return; /* absent: keep the current value */
    double v = 0;
    int n = fscanf(f, "%lf", &v);
    fclose(f);
    if (n != 1 || !(v >= 1.0 && v <= 1000.0)) {
        st_log(ST_LOG_WARN, "control", "%s: not a throttle factor in [1, 1000]; keeping %g",
               d->self.cfg.throttle_file, d->hb.throttle);
        return;
    }
    if (v != d->hb.throttle) {
        st_log(ST_LOG_INFO, "control", "throttle %g -> %g", d->hb.throttle, v);
        d->hb.throttle = v;
        pthread_mutex_lock(&d->sh.mu);
        d->sh.throttle = v;
        pthread_mutex_unlock(&d->sh.mu);
    }
}

st_err dm_heartbeat_init(st_daemon *d)
{
    if (pthread_mutex_init(&d->drain.mu, NULL) != 0)
        return st_errorf(ST_EINTERNAL, "leave mutex");
    d->drain.mu_ok = true;
    d->hb.throttle = d->self.cfg.throttle;
    d->sh.throttle = d->hb.throttle;
    return ST_OK;
}

void dm_heartbeat_fini(st_daemon *d)
{
    if (d->drain.mu_ok)
        pthread_mutex_destroy(&d->drain.mu);
    d->drain.mu_ok = false;
}

void dm_heartbeat_start(st_daemon *d, double now) { d->hb.last_s = now; }

double dm_throttle(const st_daemon *d) { return d->hb.throttle; }

const char *dm_leave_reason(const st_daemon *d)
{
    return d->drain.reason ? d->drain.reason : "shutdown";
}

void dm_send_heartbeat(st_daemon *d)
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
    Strata__ExpertLoad *xl = NULL, **xlp = NULL;
    uint64_t *xt = NULL;
    dm_experts_pb(sh, &hb, &xl, &xlp, &xt);
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
    double dt = now - d->hb.last_s;
    double load = dt > 0 ? (double)(busy - d->hb.last_busy_ns) / 1e9 / dt : 0.0;
    d->hb.last_s = now;
    d->hb.last_busy_ns = busy;
    hb.worker_id = d->mb.worker_id;
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
    int to = (int)(2 * d->mb.hb_ms);
    dm_request(d, DM_REQ_HEARTBEAT, &m, to < 500 ? 500 : to > 5000 ? 5000 : to);
    free(ll);
    free(llp);
    free(xl);
    free(xlp);
    free(xt);
    free(pl);
    free(lm);
    free(lmp);
}

void dm_on_heartbeat_reply(st_daemon *d, const Strata__HeartbeatReply *r)
{
    if (d->probe != NULL) {
        st_probe_peer *pp = calloc(ST_PROBE_MAX_PEERS, sizeof *pp);
        size_t n = 0;
        for (size_t i = 0; pp != NULL && i < r->n_peers && n < ST_PROBE_MAX_PEERS; i++) {
            const Strata__Peer *q = r->peers[i];
            if (q->worker_id == 0 || q->worker_id == d->mb.worker_id || !dm_addr_ok(q->ctl_addr) ||
                strlen(q->ctl_addr) >= ST_PROBE_ADDR_MAX)
                continue; /* INV-3: only well-formed peers are dialled */
            pp[n].id = q->worker_id;
            snprintf(pp[n].addr, sizeof pp[n].addr, "%s", q->ctl_addr);
            n++;
        }
        if (pp != NULL)
            st_probe_set_peers(d->probe, d->mb.worker_id, pp, n);
        free(pp);
    }
    if (!r->leave || d->stopping)
        return;
    const char *why = r->reason && r->reason[0] ? r->reason : "drained";
    if (d->self.cfg.stay_after_drain) {
        if (!d->drain.told_stay)
            st_log(ST_LOG_INFO, "control",
                   "drained at epoch %llu (%s); staying as a spare "
                   "(--stay-after-drain): `strata drain %llu --undo` makes it placeable again",
                   (unsigned long long)r->drain_epoch, why, (unsigned long long)d->mb.worker_id);
        d->drain.told_stay = true;
        return;
    }
    pthread_mutex_lock(&d->drain.mu);
    bool first = !d->drain.self_leave;
    d->drain.self_leave = true;
    snprintf(d->drain.why, sizeof d->drain.why, "drained at epoch %llu: %s",
             (unsigned long long)r->drain_epoch, why);
    pthread_mutex_unlock(&d->drain.mu);
    if (!first)
        return;
    d->drain.reason = "drained";
    st_log(ST_LOG_INFO, "control", "drained at epoch %llu (%s): leaving the cluster",
           (unsigned long long)r->drain_epoch, why);
    if (d->self.cfg.leave_signal > 0)
        kill(getpid(), d->self.cfg.leave_signal); /* main() shuts down and exits 0 */
}

bool st_daemon_leaving(st_daemon *d, const char **why)
{
    pthread_mutex_lock(&d->drain.mu);
    bool r = d->drain.self_leave;
    if (why != NULL)
        *why = d->drain.why;
    pthread_mutex_unlock(&d->drain.mu);
    return r;
}
