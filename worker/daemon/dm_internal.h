/* dm_internal.h - internals shared by daemon.c (assembly, the control
 * thread's loop, requests to the coordinator), dm_addr.c (addresses),
 * dm_rep.c (the control
 * server: its REP socket and replies, EndSessions, probes), dm_plan.c
 * (Prepare and Commit) and dm_heartbeat.c (what a HeartbeatReply asks).
 * Not for use outside the daemon. */
#ifndef ST_WORKER_DM_INTERNAL_H
#define ST_WORKER_DM_INTERNAL_H

#include <nng/nng.h>
#include <pthread.h>
#include <sched.h>

#include "common/wire/envelope.h"
#include "common/model/gguf.h"
#include "worker/fetch/chunk_serve.h"
#include "worker/daemon/ctl_check.h"
#include "worker/daemon/daemon.h"
#include "worker/data/dataplane.h"
#include "worker/fetch/fetch.h"
#include "worker/daemon/measure.h"
#include "worker/daemon/probe.h"

#define DM_JOIN_TIMEOUT_MS 3000
#define DM_CALL_TIMEOUT_MS 2000
#define DM_LEAVE_TIMEOUT_MS 1000
#define DM_REPLY_TIMEOUT_MS 1000
#define DM_BACKOFF_MIN_S 0.25
#define DM_BACKOFF_MAX_S 5.0
#define DM_HB_FAILS_REJOIN 3

typedef enum dm_req_kind {
    DM_REQ_NONE = 0,
    DM_REQ_JOIN,
    DM_REQ_HEARTBEAT,
    DM_REQ_STALE,
    DM_REQ_LEAVE,
    DM_REQ_HELLO, /* binds the next request to the coordinator (docs/security.md) */
} dm_req_kind;

struct st_daemon {
    st_worker_cfg cfg; /* strings point to the copies below */
    char *s_coord, *s_model, *s_listen, *s_adv, *s_adv_ctl, *s_tfile;
    char name[128];
    uint8_t key[ST_KEY_BYTES];
    bool keyed;
    st_gguf *g;                      /* the model file's metadata (no weights touched) */
    st_fetch *fetch;                 /* weight streaming (fetch_dm.c); NULL with --model */
    st_chunk_serve *cserve;          /* --serve-chunks (fetch_dm.c); NULL without */
    char chunk_addr[ST_DP_ADDR_MAX]; /* its address for other members (Join); "" without */
    st_hparams hp;
    uint8_t model_id[32];
    st_pool *pool;
    const st_kernel_ops *ops;
    cpu_set_t pool0_cpus; /* where the pool pinned its thread 0 */
    bool pool0_pinned;
    st_measure meas;
    st_topology topo;
    uint64_t memory;
    char data_addr[ST_DP_ADDR_MAX], ctl_addr[ST_DP_ADDR_MAX]; /* advertised */
    uint64_t sender; /* envelope sender ids: +0 requests, +1 data, +2 replies */
    nng_socket req, rep;
    bool req_open, rep_open;
    st_pipe_gate *rep_gate; /* the control REP's connections; freed after it */
    nng_aio *req_aio, *rep_aio;
    st_env env_req, env_rep;
    st_worker_shared sh;
    bool sh_ok;
    st_dataplane *dp;
    pthread_t ctl;
    bool ctl_started;
    bool shut;
    st_prober *probe; /* link measurement (probe.h); NULL with --no-probe */
    /* set by the control thread before it raises cfg.leave_signal */
    pthread_mutex_t leave_mu;
    bool leave_mu_ok;
    bool self_leave;
    char leave_why[256];

    /* ---- owned by the control thread ---- */
    bool joined;
    uint64_t worker_id, incarnation;
    uint64_t coord_ctl; /* the joined coordinator's control sender (JoinReply); 0: none */
    uint32_t hb_ms;
    double next_join, backoff, next_hb, last_hb_s;
    uint64_t last_busy_ns;
    int hb_fails;
    dm_req_kind req_kind; /* the request in flight on req_aio */
    dm_req_kind hello_for; /* DM_REQ_HELLO in flight: the request it precedes */
    bool req_receiving;   /* its send is done, the reply is awaited */
    int req_timeout_ms;
    bool req_cancelled;
    bool stopping, leave_done;
    uint64_t ctl_bad;     /* malformed control messages */
    uint64_t ctl_refused; /* control requests refused (dm_ctl_allowed, Prepare, Commit) */
    double throttle;
    /* plans */
    bool have_cur;
    uint64_t cur_epoch;
    uint8_t cur_hash[32];
    st_dp_stage *pending; /* prepared, not committed */
    /* a reference to the weights of the committed stage (NULL: a spare or
     * none yet), which a Prepare that keeps its layer range reuses
     * (st_dp_stage_load); the loader holds its own (ld_kept) */
    st_model *kept;
    /* the loader of a Prepare; its reply waits until it is done */
    bool loading;
    pthread_t ld_th;
    st_dp_plan ld_plan;
    st_model *ld_kept; /* the loader's reference to weights it may reuse, or NULL */
    char ld_src[ST_FETCH_MAX_SOURCES][ST_DP_ADDR_MAX]; /* the Prepare's chunk sources */
    size_t ld_n_src;
    /* the heartbeat's fetch sources (dm_fetch_pb; the heartbeat's thread) */
    st_fetch_source_stats hb_src[2 * ST_FETCH_MAX_SOURCES];
    Strata__FetchSource hb_fs[2 * ST_FETCH_MAX_SOURCES];
    Strata__FetchSource *hb_fsp[2 * ST_FETCH_MAX_SOURCES];
    st_dp_stage *ld_out;
    st_err ld_err;
    char ld_msg[512];
    bool rep_waiting;
    uint64_t reply_failed; /* control replies not packed or not sent (dm_rep.c) */
    /* drain (HeartbeatReply.leave) */
    bool told_stay;           /* logged once: drained, staying (--stay-after-drain) */
    const char *leave_reason; /* the Leave's reason ("shutdown" when NULL) */
};

/* dm_on_rep - handles a completed receive on the control REP (dm_rep.c). */
void dm_on_rep(st_daemon *d);

/* dm_on_join_reply - records the coordinator this worker joined: its id
 * for us, its incarnation, its heartbeat interval and the sender id its
 * control requests come from (dm_rep.c). */
void dm_on_join_reply(st_daemon *d, const Strata__JoinReply *jr, double now);

/* dm_refused - counts a refused control request and answers it with an
 * Error of code and msg, also logged (dm_rep.c). */
void dm_refused(st_daemon *d, st_err code, const char *msg);

/* Replies on the control REP (dm_rep.c); a failed send is logged. dm_reply
 * sends m; dm_reply_error an Error of code and msg; dm_reply_ack an Ack;
 * dm_refuse a Refuse of the plan of epoch for reason (logged too);
 * dm_ready a Ready of epoch with the resident bytes. */
void dm_reply(st_daemon *d, const Strata__Msg *m);
void dm_reply_error(st_daemon *d, st_err code, const char *msg);
void dm_reply_ack(st_daemon *d);
void dm_refuse(st_daemon *d, uint64_t epoch, const char *reason);
void dm_ready(st_daemon *d, uint64_t epoch, uint64_t resident);

/* dm_ctl_state - what the checks of ctl_check.h read of d (dm_plan.c). */
st_ctl_state dm_ctl_state(const st_daemon *d);

/* dm_prepare - checks a Prepare and starts loading its stage, or refuses
 * it; the reply waits for the loader (dm_plan.c). */
void dm_prepare(st_daemon *d, const Strata__Prepare *pr);

/* dm_on_loader - replies to the Prepare whose loading ended (dm_plan.c). */
void dm_on_loader(st_daemon *d);

/* dm_commit - publishes the prepared stage of a Commit, or becomes a spare
 * for an epoch without this worker; replies Ack or Error (dm_plan.c). */
void dm_commit(st_daemon *d, const Strata__Commit *c);

/* dm_counters_control - adds to *c what the control thread counts itself:
 * its envelopes' failed authentications, bad and refused control
 * messages, reply failures, the prober's refusals, and the connections its
 * listening sockets closed unauthenticated (dm_heartbeat.c). */
void dm_counters_control(st_daemon *d, Strata__Counters *c);

/* dm_on_heartbeat_reply - a HeartbeatReply: hands its peers to the prober
 * and, when it says leave, leaves (or stays, --stay-after-drain)
 * (dm_heartbeat.c). */
void dm_on_heartbeat_reply(st_daemon *d, const Strata__HeartbeatReply *r);

/* dm_addr_ok - a tcp://, ipc:// or inproc:// URL of 1..255 printable
 * bytes (dm_plan.c). */
bool dm_addr_ok(const char *s);

/* ---- dm_addr.c: the flags' addresses, the control listener, what is
 * announced ---- */
#define DM_HOST_MAX 200 /* a --listen or --advertise host; tcp://HOST:PORT fits a URL buffer */

/* dm_addrs_check - checks --coordinator, --advertise, --advertise-control
 * and --control-port; host gets the --listen host, ahost the host
 * announced (--advertise's, else host, loopback for a wildcard). ST_EINVAL
 * naming the flag. */
st_err dm_addrs_check(st_daemon *d, char host[DM_HOST_MAX], char ahost[DM_HOST_MAX]);

/* dm_listen_rep - the control REP on tcp://host:want_port (0: any); *port
 * gets the bound port. */
st_err dm_listen_rep(st_daemon *d, const char *host, int want_port, int *port);

/* dm_addrs_announce - prints the `listening on` and `control on` lines
 * (the bound ports dport, cport on host) and sets d->data_addr,
 * d->ctl_addr and the chunk server's announced address from ahost
 * (dm_addrs_check's) and the --advertise flags. */
void dm_addrs_announce(st_daemon *d, const char *host, const char *ahost, int dport, int cport);

/* fetch_dm.c: without --model, the header at start-up (the model path
 * becomes the sparse cache file), a Prepared stage's chunks on the loader
 * thread, and the progress a heartbeat carries (NULL when not streaming). */
st_err dm_fetch_open(st_daemon *d, const st_worker_cfg *cfg);
/* dm_fetch_close - the chunk server, then the fetch (at the daemon's close). */
void dm_fetch_close(st_daemon *d);
st_err dm_fetch_stage(st_daemon *d, const st_dp_plan *p);
/* dm_fetch_sources - keeps the well-formed chunk sources a Prepare names
 * for the stage fetch of its loader (logged once; none when not streaming). */
void dm_fetch_sources(st_daemon *d, const Strata__Prepare *pr);
/* dm_chunk_advertise - the chunk server's address for the Join: its bound
 * address, with host (the one the worker advertises) for a wildcard one. */
void dm_chunk_advertise(st_daemon *d, const char *host);
/* dm_fetch_pb - the fetch's figures for a heartbeat into out (its sources
 * in d->hb_*: valid until the next call); NULL when not streaming. */
Strata__FetchProgress *dm_fetch_pb(st_daemon *d, Strata__FetchProgress *out);

/* dm_zstd_pb - the heartbeat's ZstdMeasure entries (in zs, pointed to by
 * zsp) of the dtypes zm has samples of; returns how many (dm_heartbeat.c). */
size_t dm_zstd_pb(const st_wire_zmeas zm[ST_WIRE_DT_COUNT],
                  Strata__ZstdMeasure zs[ST_WIRE_DT_COUNT],
                  Strata__ZstdMeasure *zsp[ST_WIRE_DT_COUNT]);

/* dm_read_throttle - re-reads --throttle-file (a number in [1, 1000]; an
 * absent file keeps the current value, a bad one is logged and ignored)
 * into d->throttle and the data plane's copy (dm_heartbeat.c). */
void dm_read_throttle(st_daemon *d);

#endif
