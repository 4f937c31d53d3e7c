/* dm_heartbeat.h - the worker daemon's heartbeats (dm_heartbeat.c; its
 * design is the file comment there): what a heartbeat carries, the
 * --throttle-file it re-reads, and what a HeartbeatReply asks (the peers
 * to probe; leaving once drained). Part of the daemon (dm_internal.h).
 *
 * State. dm_heartbeat is the control thread's, changed only by
 * dm_heartbeat.c; no lock. dm_drain is changed only by dm_heartbeat.c too:
 * self_leave and why under mu, since the main thread reads them
 * (st_daemon_leaving); reason and told_stay on the control thread only.
 * Invariants: throttle is the flag's value until a read of
 * --throttle-file finds a factor in [1, 1000], and d->sh.throttle equals
 * it; self_leave, once set, stays set, and why is then its reason. */
#ifndef ST_WORKER_DM_HEARTBEAT_H
#define ST_WORKER_DM_HEARTBEAT_H

#include <pthread.h>

#include "strata.pb-c.h"
#include "worker/daemon/daemon.h"

typedef struct dm_heartbeat {
    double last_s;         /* when the previous heartbeat was built (its load's period) */
    uint64_t last_busy_ns; /* the data thread's busy_ns then */
    double throttle;       /* >= 1; announced in the Join, copied to the data plane */
} dm_heartbeat;

typedef struct dm_drain {
    pthread_mutex_t mu;
    bool mu_ok;
    bool self_leave;    /* decided to leave by itself (drained; daemon.h) */
    char why[256];      /* its reason */
    const char *reason; /* the Leave's reason ("shutdown" when NULL) */
    bool told_stay;     /* logged once: drained, staying (--stay-after-drain) */
} dm_drain;

/* dm_heartbeat_init - the throttle (the flag's, also into d->sh) and the
 * drain's mutex, while st_daemon_open runs, after d->sh is initialised. */
st_err dm_heartbeat_init(st_daemon *d);

/* dm_heartbeat_fini - the drain's mutex (st_daemon_close). */
void dm_heartbeat_fini(st_daemon *d);

/* dm_heartbeat_start - the load's first period begins at now (the control
 * thread's start). */
void dm_heartbeat_start(st_daemon *d, double now);

/* dm_send_heartbeat - re-reads --throttle-file, then sends a Heartbeat
 * with the data plane's figures, the control side's counters, the
 * fetch's progress and the prober's links. */
void dm_send_heartbeat(st_daemon *d);

/* dm_on_heartbeat_reply - a HeartbeatReply: hands its peers to the prober
 * and, when it says leave, leaves (or stays, --stay-after-drain). */
void dm_on_heartbeat_reply(st_daemon *d, const Strata__HeartbeatReply *r);

/* dm_throttle - the current throttle factor. */
double dm_throttle(const st_daemon *d);

/* dm_leave_reason - the reason the Leave gives: "drained" once drained,
 * else "shutdown". */
const char *dm_leave_reason(const st_daemon *d);

#endif
