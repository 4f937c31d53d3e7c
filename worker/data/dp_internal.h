/* dp_internal.h - internals shared by dataplane.c (stages, sockets, the
 * hand-off and the thread) and dp_step.c (one batch). Not for use outside
 * the data plane. */
#ifndef ST_WORKER_DP_INTERNAL_H
#define ST_WORKER_DP_INTERNAL_H

#include "common/net/pipe_gate.h"
#include "common/wire/wire_sample.h"
#include "worker/data/dataplane.h"
#include "worker/data/push_link.h"
#include "worker/data/sessions.h"

struct st_dataplane {
    st_worker_shared *sh;
    char name[64];
    bool open; /* sockets opened */
    nng_socket pull;
    st_pipe_gate *gate; /* the PULL's connections (pipe_gate.h); freed after it */
    st_push_link res;                  /* to the plan's result address */
    st_push_link next[ST_DP_MAX_NEXT]; /* one per worker of the next stage */
    st_env rx; /* opens frames from the PULL */
    st_env tx; /* seals frames for both PUSHes */
    st_wire_ctx *wire;
    st_wire_zsampler *zs; /* zstd on sampled outbound packets */
    bool zs_new;          /* a sample not published yet */
    st_dp_counters z;     /* this batch's zstd counts (zstd_* only), published with it */
    st_dp_stage *cur;     /* the stage served; NULL before the first commit */
    st_sessions ses;
    uint64_t *end_ids;   /* [ST_DP_END_CAP] copy of the shared list */
    uint64_t tick;       /* batch counter, the sessions' pin */
    uint64_t worker_id;  /* copied from the shared state per batch */
    double throttle;     /* copied from the shared state per batch */
    uint64_t lap_ns;     /* layer hook: end of the previous layer */
    double debt_ns;      /* throttle: sleep overshoot still to take back */
    double warn_at;      /* rate limit of warnings about bad input */
    uint64_t warn_quiet; /* warnings suppressed since */
    pthread_t th;
    bool started;
};

/* dp_frame - checks and runs one received frame (dp_step.c). */
void dp_frame(st_dataplane *dp, nng_msg *msg);

/* dp_hook - the stage's layer hook: per-layer time and throttle. */
void dp_hook(void *arg, int64_t layer, float *hidden, int64_t n_tok, int64_t n_embd);

/* dp_swap - makes n the served stage (sessions, dialers, latency). */
void dp_swap(st_dataplane *dp, st_dp_stage *n);

/* dp_publish_sessions - publishes the session count and KV bytes. */
void dp_publish_sessions(st_dataplane *dp);

#endif
