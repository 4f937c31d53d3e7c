/* dataplane.h - the worker's data thread: STEP frames in, forward pass,
 * STEP frames to the next stage or RESULT frames to the coordinator out;
 * and the state it shares with the control thread (worker/daemon/daemon.h).
 *
 * Ownership. The data thread owns the PULL socket (listening on the
 * worker's data address), the PUSH sockets (one per worker of the next
 * stage, replicas included, and one to the plan's result address), their envelopes, the wire codec
 * context, the stage being served and the sessions' KV. The control thread prepares a stage
 * (st_dp_stage_load on a loader thread), and on Commit publishes it in st_worker_shared.next; the
 * data thread swaps it in between two batches. Everything in st_worker_shared is read and written
 * under its mutex only, by short critical sections that never call out. */
#ifndef ST_WORKER_DATAPLANE_H
#define ST_WORKER_DATAPLANE_H

#include <nng/nng.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/wire/envelope.h"
#include "common/base/err.h"
#include "common/net/pipe_gate.h"
#include "common/base/pool.h"
#include "common/text/sampling.h"
#include "common/wire/wire.h"
#include "strata.pb-c.h"
#include "worker/daemon/latency.h"
#include "worker/engine/stage.h"

#define ST_DP_ADDR_MAX 256     /* URL bytes, terminator included */
#define ST_DP_STALE_CAP 64     /* stale reports waiting for the control thread */
#define ST_DP_END_CAP 16384    /* EndSessions ids waiting for the data thread */
#define ST_DP_MAX_TOKENS 16384 /* Plan.max_tokens accepted */
#define ST_DP_SEND_MS 5000     /* send timeout of the PUSH sockets */
#define ST_DP_POLL_MS 200      /* the data thread's receive timeout */
#define ST_DP_MAX_NEXT 8       /* workers of the next stage (replicas) a worker forwards to */

/* What the data thread needs of a committed plan. */
typedef struct st_dp_plan {
    uint64_t epoch;
    uint8_t plan_hash[ST_WIRE_PLAN_HASH_SIZE];
    int32_t index;       /* this worker's stage; -1: spare */
    uint32_t replica;    /* its index among the stage's workers */
    uint32_t n_replicas; /* workers of its stage */
    uint32_t n_stages;
    int64_t first, last; /* layers [first, last) */
    uint32_t n_next;     /* workers of the next stage; 0 on the last and spares */
    char next_addrs[ST_DP_MAX_NEXT][ST_DP_ADDR_MAX]; /* their data addresses, plan order */
    char result_addr[ST_DP_ADDR_MAX];                /* where results and error results go */
    st_wire_dtype in_dtype;                          /* boundary into this stage (not stage 0) */
    st_wire_dtype out_dtype;                         /* boundary out of it (not the last) */
    bool out_zstd; /* the boundary out of it is compressed (the next Stage.in_zstd) */
    bool zstd;     /* Plan.zstd: every boundary is (--zstd) */
    uint32_t max_tokens, n_ctx, max_sessions;
    st_dtype kv_dtype; /* Plan.cache_type (empty: f32): every session's KV cache */
    /* who may send this stage STEP frames (envelope sender ids): the
     * coordinator for stage 0 (Plan.step_sender), else the workers of the
     * previous stage (Stage.data_senders); none for a spare */
    uint32_t n_prev;
    uint64_t prev_senders[ST_DP_MAX_NEXT];
} st_dp_plan;

/* A stage ready to serve: the plan's facts, the engine objects and every
 * per-batch buffer, allocated once by the loader. */
typedef struct st_dp_stage {
    st_dp_plan plan;
    bool is_last;
    st_model *model; /* NULL for a spare */
    st_stage_ctx *ctx;
    int64_t n_embd, n_vocab;
    float *hin; /* [max_tokens][n_embd] decoded input */
    size_t hin_cap;
    float *hout; /* hidden [max_tokens][n_embd] or logits [rows][n_vocab] */
    size_t hout_cap;
    float *lrow; /* [n_vocab] logits copy that sampling may modify */
    st_sample_scratch scratch;
    size_t kv_session_bytes;
    /* per-batch arrays of max_tokens rows */
    st_batch_row *brow;
    st_wire_row *wrow; /* rows of the outgoing packet */
    st_wire_row *prow; /* rows of the incoming packet */
    uint64_t *ids;     /* sorted session ids (duplicate check) */
    Strata__RowResult *rr;
    Strata__RowResult **rrp;
    uint64_t *rng;      /* [max_tokens][ST_RNG_WORDS] RNG states of results */
    uint64_t *layer_ns; /* [last - first] this batch's layer times */
    /* a mixture of experts (n_expert > 0): what this context routed per
     * (layer of the stage, expert), as already added to the shared totals */
    uint32_t n_expert;
    uint32_t n_layer_model; /* the model's layers (sizes the shared totals) */
    uint64_t *exp_base;     /* [last - first][n_expert] */
    uint64_t *exp_delta;    /* [last - first][n_expert] scratch: counted since */
} st_dp_stage;

/* st_dp_stage_load - opens layers [plan->first, plan->last) of the model
 * at path (only those tensors), a stage context of plan->max_tokens tokens
 * on pool with ops, and every buffer. ST_EINVAL for a spare plan. When
 * kept (may be NULL: none) is a placed model of exactly that layer range,
 * the stage takes a reference to it instead of opening and placing the
 * file again (st_dp_stage_keeps says whether it can); the caller keeps its
 * own reference. */
st_err st_dp_stage_load(const char *path, const st_dp_plan *plan, st_pool *pool,
                        const st_kernel_ops *ops, st_model *kept, st_dp_stage **out);

/* st_dp_stage_keeps - whether st_dp_stage_load of plan would reuse kept. */
bool st_dp_stage_keeps(const st_model *kept, const st_dp_plan *plan);

/* st_dp_stage_spare - a stage object for a plan in which this worker has
 * no stage (plan->index must be -1). */
st_err st_dp_stage_spare(const st_dp_plan *plan, st_dp_stage **out);

/* st_dp_stage_resident - weight bytes the stage touched at load. */
size_t st_dp_stage_resident(const st_dp_stage *s);

/* st_dp_stage_free - frees everything; NULL is a no-op. */
void st_dp_stage_free(st_dp_stage *s);

/* A refused packet, for the control thread to report (StaleReport). */
typedef struct st_dp_stale {
    uint64_t batch_id;
    uint64_t packet_epoch;
    uint64_t current_epoch;
    char detail[192];
} st_dp_stale;

typedef struct st_dp_counters {
    uint64_t refused_epoch; /* STEP frames of another epoch or plan hash */
    uint64_t bad_packets;   /* malformed or invalid frames */
    uint64_t steps;         /* batches computed */
    uint64_t f16_clamps;    /* values clamped by the f16 wire encoder */
    uint64_t auth_failed;   /* frames the data envelope refused (MAC, replay) */
    uint64_t refused_step;  /* STEP frames not from the previous stage (dp_check_sender) */
    uint64_t zstd_sent;     /* activation packets sent as zstd frames */
    uint64_t zstd_raw;      /* their payload bytes before zstd */
    uint64_t zstd_wire;     /* ... and as sent */
    uint64_t zstd_recv;     /* zstd activation packets decoded */
} st_dp_counters;

/* The state shared by the control thread, the data thread, the loader
 * and NNG callbacks; every field under mu. */
typedef struct st_worker_shared {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC; only the control thread waits on it */

    /* control -> data */
    bool data_stop;
    bool have_next; /* a committed stage waits in next */
    st_dp_stage *next;
    uint64_t *end_ids; /* [ST_DP_END_CAP] sessions to free */
    uint32_t n_end;
    uint64_t end_dropped;
    double throttle;    /* >= 1 */
    uint64_t worker_id; /* 0 before the first join */

    /* data -> control */
    st_dp_stale stale[ST_DP_STALE_CAP]; /* ring */
    uint32_t stale_head, stale_n;
    uint64_t stale_dropped;
    st_latency lat; /* layers of the served stage */
    st_dp_counters c;
    /* zstd on sampled outbound activations, per dtype (common/wire/wire_sample.h) */
    st_wire_zmeas zstd[ST_WIRE_DT_COUNT];
    uint64_t busy_ns;   /* time spent on batches, ever */
    uint32_t in_flight; /* batches being computed (0 or 1) */
    uint32_t sessions;
    uint64_t kv_bytes;      /* bytes of the allocated KV caches */
    uint64_t weight_bytes;  /* weights of the served stage */
    uint64_t serving_epoch; /* epoch of the stage the data thread runs */
    /* a mixture of experts: tokens this process routed to each (layer,
     * expert) since it started, over every stage it served (each context's
     * counts added as they grow; a plan change keeps them) */
    uint64_t *exp_tot;   /* [exp_layers][n_expert], NULL before an MoE stage */
    uint32_t exp_layers; /* the model's layers */
    uint32_t n_expert;   /* 0: dense, or no MoE stage yet */
    int64_t exp_first;   /* the served stage's layers [exp_first, exp_first + exp_n) */
    int64_t exp_n;       /* 0: none (a spare, a dense model) */

    /* wake-up reasons of the control thread: the "flags" form of the
     * owner-thread rule of common/base/cq.h; set under mu, then cv signalled */
    bool ev_rep, ev_req, ev_loader, ev_stale, ev_stop;
} st_worker_shared;

/* st_worker_shared_init - a zeroed state with mu, cv (st_cq_cond_init:
 * monotonic clock), the EndSessions buffer and throttle 1. */
st_err st_worker_shared_init(st_worker_shared *sh);

/* st_worker_shared_fini - frees (also a stage left in next). */
void st_worker_shared_fini(st_worker_shared *sh);

typedef struct st_dataplane st_dataplane;

typedef struct st_dp_cfg {
    const char *listen; /* tcp://HOST:PORT the PULL listens on */
    const uint8_t *key; /* cluster key (ST_KEY_BYTES) or NULL */
    bool encrypt;       /* seal data frames (needs key) */
    uint64_t sender;    /* our envelope sender id on data frames */
    int force_ref;      /* scalar wire conversions */
    const char *name;   /* worker name, for error messages */
    uint32_t hidden;    /* the model's hidden size: sizes the receive limit */
} st_dp_cfg;

/* st_dp_open - creates the sockets and binds the PULL (TCP_NODELAY,
 * receive limit of the largest frame of ST_DP_MAX_TOKENS tokens of
 * cfg->hidden floats, st_step_max_frame); *bound_port is the port bound.
 * sh is borrowed and must outlive the data plane. */
st_err st_dp_open(const st_dp_cfg *cfg, st_worker_shared *sh, st_dataplane **out, int *bound_port);

/* st_dp_start - starts the data thread, bound to cpus when not NULL (the
 * core the pool reserved for its calling thread). */
st_err st_dp_start(st_dataplane *dp, const cpu_set_t *cpus);

/* st_dp_stop - asks the data thread to stop after the batch it computes
 * and waits for it. */
void st_dp_stop(st_dataplane *dp);

/* st_dp_gate_counts - adds the data socket's connection counts
 * (common/net/pipe_gate.h) to *sum. NULL dp: nothing. */
void st_dp_gate_counts(st_dataplane *dp, st_pipe_gate_counts *sum);

/* st_dp_close - closes the sockets and frees (stops the thread first if
 * it runs); NULL is a no-op. */
void st_dp_close(st_dataplane *dp);

#endif
