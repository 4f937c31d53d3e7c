/* dm_internal.h - the worker daemon's state, split by subsystem, and what
 * daemon.c offers the daemon's other files. Not for use outside the
 * daemon (daemon.h is its interface).
 *
 * The files and the state each one changes:
 *   daemon.c       assembly (dm_self, below), the control thread's loop,
 *                  requests to the coordinator (dm_client) and membership
 *                  (dm_member)
 *   dm_addr.c      the flags' addresses and what is announced (dm_self's
 *                  addresses, while st_daemon_open runs)
 *   dm_rep.c       the control server (dm_server, dm_rep.h)
 *   dm_plan.c      Prepare, the loader thread, Commit (dm_plans, dm_plan.h)
 *   dm_heartbeat.c heartbeats, their replies, draining (dm_heartbeat,
 *                  dm_drain, dm_heartbeat.h)
 *   fetch_dm.c     weight streaming and the chunk server (dm_fetching,
 *                  fetch_dm.h)
 * The data thread's state is dataplane.h's (d->dp), the hand-off between
 * it and the control thread st_worker_shared (d->sh, under its mutex:
 * dataplane.h), the prober's probe.h's (d->probe).
 *
 * Threads. The main thread runs st_daemon_open, _start, _shutdown and
 * _close; the control thread (dm_main) owns everything of the control
 * side between _start and the end of _shutdown; the loader thread
 * (dm_plan.c) owns its part of dm_plans while it runs. A subsystem's
 * fields are changed only by its file; another file of the control thread
 * may read them where its header says so, and otherwise calls its
 * functions. */
#ifndef ST_WORKER_DM_INTERNAL_H
#define ST_WORKER_DM_INTERNAL_H

#include <nng/nng.h>
#include <pthread.h>
#include <sched.h>

#include "common/wire/envelope.h"
#include "common/model/gguf.h"
#include "worker/daemon/daemon.h"
#include "worker/data/dataplane.h"
#include "worker/daemon/dm_heartbeat.h"
#include "worker/daemon/dm_plan.h"
#include "worker/daemon/dm_rep.h"
#include "worker/fetch/fetch_dm.h"
#include "worker/daemon/measure.h"
#include "worker/daemon/probe.h"

#define DM_JOIN_TIMEOUT_MS 3000
#define DM_CALL_TIMEOUT_MS 2000
#define DM_LEAVE_TIMEOUT_MS 1000
#define DM_BACKOFF_MIN_S 0.25
#define DM_BACKOFF_MAX_S 5.0
#define DM_HB_FAILS_REJOIN 3

/* What this worker is: its configuration, its model's facts, its machine
 * and its addresses. Written only while st_daemon_open runs (daemon.c;
 * dm_addr.c the addresses; fetch_dm.c the model path when streaming),
 * read-only afterwards, by every thread, without a lock. */
typedef struct dm_self {
    st_worker_cfg cfg; /* strings point to the copies below */
    char *s_coord, *s_model, *s_listen, *s_adv, *s_adv_ctl, *s_tfile;
    char name[128];
    uint8_t key[ST_KEY_BYTES];
    bool keyed;
    st_gguf *g; /* the model file's metadata (no weights touched) */
    st_hparams hp;
    uint8_t model_id[32];
    st_pool *pool;
    const st_kernel_ops *ops;
    cpu_set_t pool0_cpus; /* where the pool pinned its thread 0 */
    bool pool0_pinned;
    st_measure meas;
    st_topology topo;
    uint64_t memory;                                          /* the budget in bytes */
    char data_addr[ST_DP_ADDR_MAX], ctl_addr[ST_DP_ADDR_MAX]; /* advertised */
    /* envelope sender ids: +0 requests, +1 data, +2 replies, +3 probes
     * (daemon.c's file comment) */
    uint64_t sender;
} dm_self;

typedef enum dm_req_kind {
    DM_REQ_NONE = 0,
    DM_REQ_JOIN,
    DM_REQ_HEARTBEAT,
    DM_REQ_STALE,
    DM_REQ_LEAVE,
    DM_REQ_HELLO, /* binds the next request to the coordinator (docs/security.md) */
} dm_req_kind;

/* The REQ socket to the coordinator and the one request in flight on it
 * (daemon.c). Owned by the control thread; the aio's callback only raises
 * st_worker_shared.ev_req; dm_heartbeat.c reads env.auth_failed (the
 * heartbeat's counters). Invariant: kind is DM_REQ_NONE exactly when no
 * request is in flight; requests go out one at a time (dm_request). */
typedef struct dm_client {
    nng_socket sock;
    bool open;
    nng_aio *aio;
    st_env env;            /* sender id: self.sender + 0; learns the coordinator's */
    dm_req_kind kind;      /* the request in flight on aio */
    dm_req_kind hello_for; /* DM_REQ_HELLO in flight: the request it precedes */
    bool receiving;        /* its send is done, the reply is awaited */
    int timeout_ms;
    bool cancelled; /* cancelled for the shutdown (dm_main) */
} dm_client;

/* Membership of the cluster (daemon.c): whether and as what this worker
 * joined, and when it next joins or heart-beats. Owned and changed by the
 * control thread's daemon.c only; the control thread's other files read
 * worker_id, incarnation, coord_ctl and hb_ms. Invariant: joined implies
 * worker_id != 0; worker_id stays after a rejoin starts (until the next
 * JoinReply). */
typedef struct dm_member {
    bool joined;
    uint64_t worker_id, incarnation;
    uint64_t coord_ctl; /* the joined coordinator's control sender (JoinReply); 0: none */
    uint32_t hb_ms;     /* the heartbeat interval (the JoinReply's, else the flag's) */
    double next_join, backoff, next_hb;
    int hb_fails;    /* failed heartbeats in a row */
    bool leave_done; /* stopping: the Leave was answered, or failed */
} dm_member;

struct st_daemon {
    dm_self self;
    st_worker_shared sh; /* the control <-> data hand-off (dataplane.h) */
    bool sh_ok;
    st_dataplane *dp; /* the data thread (dataplane.h) */
    st_prober *probe; /* link measurement (probe.h); NULL with --no-probe */
    dm_fetching fe;   /* fetch_dm.h */
    dm_client cli;    /* above */
    dm_member mb;     /* above */
    dm_server srv;    /* dm_rep.h */
    dm_plans pl;      /* dm_plan.h */
    dm_heartbeat hb;  /* dm_heartbeat.h */
    dm_drain drain;   /* dm_heartbeat.h */
    /* the main thread's: the control thread, whether it runs, whether
     * st_daemon_shutdown ran */
    pthread_t ctl;
    bool ctl_started;
    bool shut;
    bool stopping; /* the control thread's: told to stop (ev_stop) */
};

/* ---- daemon.c: what the control thread's other files use ---- */

/* dm_signal - sets *flag (a field of d->sh) under d->sh.mu and wakes the
 * control thread; any thread, or an NNG callback. */
void dm_signal(st_daemon *d, bool *flag);

/* dm_request - sends m as the request of kind, awaiting its reply for at
 * most timeout_ms; none may be in flight. A message that cannot be packed
 * is logged and not sent. */
void dm_request(st_daemon *d, dm_req_kind kind, const Strata__Msg *m, int timeout_ms);

/* dm_aio_free - stops a, frees a message it still holds, frees it; NULL:
 * nothing. */
void dm_aio_free(nng_aio *a);

/* ---- dm_addr.c: the flags' addresses and what is announced ---- */
#define DM_HOST_MAX 200 /* a --listen or --advertise host; tcp://HOST:PORT fits a URL buffer */

/* dm_addrs_check - checks --coordinator, --advertise, --advertise-control
 * and --control-port; host gets the --listen host, ahost the host
 * announced (--advertise's, else host, loopback for a wildcard). ST_EINVAL
 * naming the flag. */
st_err dm_addrs_check(st_daemon *d, char host[DM_HOST_MAX], char ahost[DM_HOST_MAX]);

/* dm_addrs_announce - prints the `listening on` and `control on` lines
 * (the bound ports dport, cport on host) and sets d->self.data_addr,
 * d->self.ctl_addr and the chunk server's announced address from ahost
 * (dm_addrs_check's) and the --advertise flags. */
void dm_addrs_announce(st_daemon *d, const char *host, const char *ahost, int dport, int cport);

#endif
