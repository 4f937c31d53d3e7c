/* dm_heartbeat.c - the control thread's own counters a heartbeat carries;
 * what a HeartbeatReply from the coordinator asks of the
 * worker: the peers whose links to probe (handed to the prober, only
 * well-formed ones, INV-3), and leaving when a drain is complete (or
 * staying as a drained spare with --stay-after-drain; daemon.h); and the
 * --throttle-file each heartbeat re-reads; the heartbeat's zstd figures. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/base/log.h"
#include "worker/daemon/dm_internal.h"

void dm_counters_control(st_daemon *d, Strata__Counters *c)
{
    c->auth_failed += d->env_req.auth_failed + d->env_rep.auth_failed;
    c->bad_packets += d->ctl_bad;
    c->refused_control = d->ctl_refused;
    c->reply_failures = d->reply_failed;
    c->probe_refused = d->probe != NULL ? st_probe_refused(d->probe) : 0;
    st_pipe_gate_counts g = {0}; /* its listening sockets' (common/net/pipe_gate.h) */
    st_pipe_gate_add_counts(d->rep_gate, &g);
    st_dp_gate_counts(d->dp, &g);
    st_chunk_serve_gate_counts(d->cserve, &g);
    c->conn_refused = g.refused;
    c->conn_evicted = g.evicted;
    c->conn_expired = g.expired;
}

void dm_on_heartbeat_reply(st_daemon *d, const Strata__HeartbeatReply *r)
{
    if (d->probe != NULL) {
        st_probe_peer *pp = calloc(ST_PROBE_MAX_PEERS, sizeof *pp);
        size_t n = 0;
        for (size_t i = 0; pp != NULL && i < r->n_peers && n < ST_PROBE_MAX_PEERS; i++) {
            const Strata__Peer *q = r->peers[i];
            if (q->worker_id == 0 || q->worker_id == d->worker_id || !dm_addr_ok(q->ctl_addr) ||
                strlen(q->ctl_addr) >= ST_PROBE_ADDR_MAX)
                continue; /* INV-3: only well-formed peers are dialled */
            pp[n].id = q->worker_id;
            snprintf(pp[n].addr, sizeof pp[n].addr, "%s", q->ctl_addr);
            n++;
        }
        if (pp != NULL)
            st_probe_set_peers(d->probe, d->worker_id, pp, n);
        free(pp);
    }
    if (!r->leave || d->stopping)
        return;
    const char *why = r->reason && r->reason[0] ? r->reason : "drained";
    if (d->cfg.stay_after_drain) {
        if (!d->told_stay)
            st_log(ST_LOG_INFO, "control",
                   "drained at epoch %llu (%s); staying as a spare "
                   "(--stay-after-drain): `strata drain %llu --undo` makes it placeable again",
                   (unsigned long long)r->drain_epoch, why, (unsigned long long)d->worker_id);
        d->told_stay = true;
        return;
    }
    pthread_mutex_lock(&d->leave_mu);
    bool first = !d->self_leave;
    d->self_leave = true;
    snprintf(d->leave_why, sizeof d->leave_why, "drained at epoch %llu: %s",
             (unsigned long long)r->drain_epoch, why);
    pthread_mutex_unlock(&d->leave_mu);
    if (!first)
        return;
    d->leave_reason = "drained";
    st_log(ST_LOG_INFO, "control", "drained at epoch %llu (%s): leaving the cluster",
           (unsigned long long)r->drain_epoch, why);
    if (d->cfg.leave_signal > 0)
        kill(getpid(), d->cfg.leave_signal); /* main() shuts down and exits 0 */
}

size_t dm_zstd_pb(const st_wire_zmeas zm[ST_WIRE_DT_COUNT],
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

void dm_read_throttle(st_daemon *d)
{
    if (d->cfg.throttle_file == NULL)
        return;
    FILE *f = fopen(d->cfg.throttle_file, "r");
    if (f == NULL)
        return; /* absent: keep the current value */
    double v = 0;
    int n = fscanf(f, "%lf", &v);
    fclose(f);
    if (n != 1 || !(v >= 1.0 && v <= 1000.0)) {
        st_log(ST_LOG_WARN, "control", "%s: not a throttle factor in [1, 1000]; keeping %g",
               d->cfg.throttle_file, d->throttle);
        return;
    }
    if (v != d->throttle) {
        st_log(ST_LOG_INFO, "control", "throttle %g -> %g", d->throttle, v);
        d->throttle = v;
        pthread_mutex_lock(&d->sh.mu);
        d->sh.throttle = v;
        pthread_mutex_unlock(&d->sh.mu);
    }
}
