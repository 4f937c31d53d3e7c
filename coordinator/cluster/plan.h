/* plan.h - plans, epochs, plan hashes, and the bookkeeping of the
 * two-phase switch (prepare -> every worker ready -> commit). Pure: the
 * messages themselves are sent by the coordinator (coord.c). */
#ifndef ST_COORD_PLAN_H
#define ST_COORD_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/wire/wire.h"
#include "strata.pb-c.h"

#define ST_PLAN_ADDR_MAX 256
#define ST_PLAN_HASH_BYTES 32
#define ST_PLAN_MAX_REPLICAS 8 /* workers per stage (= ST_PLACE_MAX_REPLICAS) */

/* A stage and its workers: one, or several replicas that each hold the
 * stage's layers and the KV of the sessions routed through them. */
typedef struct st_plan_stage {
    uint32_t first; /* layers [first, last) */
    uint32_t last;
    uint32_t n_workers; /* 1..ST_PLAN_MAX_REPLICAS */
    uint64_t worker_ids[ST_PLAN_MAX_REPLICAS];
    char data_addrs[ST_PLAN_MAX_REPLICAS][ST_PLAN_ADDR_MAX];
    /* each worker's envelope sender id of data frames (Capability.data_sender):
     * the next stage takes STEP frames, the coordinator results, from these only */
    uint64_t data_senders[ST_PLAN_MAX_REPLICAS];
    /* the dtype of the boundary into this stage and why (--wire auto); an
     * empty in_dtype means the plan's wire */
    char in_dtype[8];
    char in_why[ST_WIRE_WHY_MAX];
    bool in_zstd; /* the boundary into this stage is zstd-compressed */
} st_plan_stage;

typedef struct st_plan {
    uint64_t epoch;
    uint8_t hash[ST_PLAN_HASH_BYTES];
    uint8_t model_id[32];
    uint32_t n_stages;
    st_plan_stage *stages; /* malloc'ed [n_stages] */
    bool zstd;
    char wire[8]; /* boundary dtype name: "f32", "bf16", "f16", "i8"; a stage's
                   * own in_dtype, when set, wins (--wire auto) */
    char result_addr[ST_PLAN_ADDR_MAX];
    uint32_t n_layer;
    uint32_t max_tokens;   /* tokens per batch */
    uint32_t n_ctx;        /* KV positions per session */
    uint32_t max_sessions; /* KV slots per worker */
    uint64_t incarnation;
    uint64_t step_sender; /* the coordinator's envelope sender id of STEP frames */
    char cache_type[8];   /* KV cache dtype name of every stage ("f32", "f16", "q8_0") */
} st_plan;

/* st_epoch_first - the first epoch of a coordinator started at start_ms
 * (wall clock, ms): (start_ms << 16) | 1. Later plans add 1, so epochs
 * only grow, also across a restart (a later start has a larger base as
 * long as fewer than 65536 plans were made per millisecond of uptime). */
uint64_t st_epoch_first(uint64_t start_ms);

/* st_plan_to_pb - a protobuf view of p (with its hash unless
 * without_hash). Strings point into p: the view must not outlive p. Free
 * with st_plan_pb_free. */
st_err st_plan_to_pb(const st_plan *p, bool without_hash, Strata__Plan **out);

/* st_plan_pb_free - frees a view made by st_plan_to_pb; NULL is a no-op. */
void st_plan_pb_free(Strata__Plan *pb);

/* st_plan_hash_pb - BLAKE2b-256 of pb packed with plan_hash empty (pb is
 * not modified); works on a received plan too, to verify it. */
st_err st_plan_hash_pb(const Strata__Plan *pb, uint8_t out[ST_PLAN_HASH_BYTES]);

/* st_plan_seal - computes p->hash. */
st_err st_plan_seal(st_plan *p);

/* st_plan_same_layout - whether a and b have the same stages (ranges,
 * boundary dtypes and zstd,
 * workers, addresses) and settings, epochs and hashes aside. */
bool st_plan_same_layout(const st_plan *a, const st_plan *b);

/* st_plan_stage_of - the stage index of worker_id in p, or -1. */
int st_plan_stage_of(const st_plan *p, uint64_t worker_id);

/* st_plan_replica_of - worker_id's index among its stage's workers in p,
 * or -1 when it has no stage. */
int st_plan_replica_of(const st_plan *p, uint64_t worker_id);

/* st_plan_route_sender - whether sender is the data sender of a worker of
 * route `route` of p: at its last stage when last_only, else at any stage
 * (who may send a step result, or an error result, of a batch on it). */
bool st_plan_route_sender(const st_plan *p, uint32_t route, uint64_t sender, bool last_only);

/* st_plan_n_workers - the workers of every stage of p, replicas included. */
uint32_t st_plan_n_workers(const st_plan *p);

/* st_plan_routes - the number of routes through p's replicas: the least
 * common multiple of the stages' worker counts when it is at most
 * max_routes, else the largest worker count. Route k goes through worker
 * k mod n_workers of every stage (st_plan_route_worker), so with the lcm
 * every replica of a stage carries the same number of routes. 1 when no
 * stage is replicated. */
uint32_t st_plan_routes(const st_plan *p, uint32_t max_routes);

/* st_plan_route_worker - the replica index route k uses at stage i. */
uint32_t st_plan_route_worker(const st_plan *p, uint32_t route, uint32_t stage);

/* st_plan_same_route - whether route ra of a and route rb of b run every
 * layer on the same worker with the same KV shape (n_ctx, max_sessions),
 * so that each of those workers keeps the KV it holds across a switch
 * from a to b (a worker keeps its sessions when its layers and context
 * stay; see worker/data/dataplane.c). */
bool st_plan_same_route(const st_plan *a, uint32_t ra, const st_plan *b, uint32_t rb);

/* st_plan_copy - a deep copy into dst (dst's old contents are not freed). */
st_err st_plan_copy(st_plan *dst, const st_plan *src);

/* st_plan_free - frees the stages; the struct is zeroed. */
void st_plan_free(st_plan *p);

/* ---- the two-phase switch ---- */

typedef enum st_round_phase {
    ST_ROUND_IDLE = 0,
    ST_ROUND_PREPARING,  /* Prepare sent; waiting for every Ready */
    ST_ROUND_READY,      /* every stage worker ready; waiting for no batch in flight */
    ST_ROUND_COMMITTING, /* Commit sent; waiting for the acknowledgements */
} st_round_phase;

typedef enum st_round_peer_state {
    ST_RP_WAIT = 0, /* Prepare (or Commit) outstanding */
    ST_RP_READY,    /* answered Ready (or needs no Prepare) */
    ST_RP_ACKED,    /* acknowledged the Commit */
    ST_RP_FAILED,   /* refused, timed out or failed */
} st_round_peer_state;

typedef struct st_round_peer {
    uint64_t worker_id;
    bool in_plan; /* has a stage (else it is prepared and committed as a spare) */
    st_round_peer_state state;
    uint64_t resident_bytes; /* from Ready */
} st_round_peer;

typedef struct st_round {
    st_round_phase phase;
    st_plan plan;
    st_round_peer *peers;
    size_t n_peers;
    uint64_t started_ns;
} st_round;

/* st_round_begin - starts a round for plan (moved into the round: the
 * caller's struct is zeroed); its stage workers must answer Ready, the
 * others[0..n_others) are prepared as spares (a worker takes no Commit
 * without its Prepare) but their answers do not hold up the round. */
st_err st_round_begin(st_round *r, st_plan *plan, const uint64_t *others, size_t n_others,
                      uint64_t now_ns);

/* st_round_find - the peer of worker_id, or NULL. */
st_round_peer *st_round_find(st_round *r, uint64_t worker_id);

/* st_round_on_ready - records a Ready of epoch; ST_EEPOCH if it is not the
 * round's, ST_ENOENT if the worker is not a stage of the round. When every
 * stage worker is ready the phase becomes ST_ROUND_READY. */
st_err st_round_on_ready(st_round *r, uint64_t worker_id, uint64_t epoch, uint64_t resident);

/* st_round_start_commit - the phase becomes ST_ROUND_COMMITTING and every
 * peer waits for its acknowledgement. */
void st_round_start_commit(st_round *r);

/* st_round_on_ack - records a Commit acknowledgement (ok) or failure;
 * returns true when every stage worker acknowledged and every other peer
 * answered either way. */
bool st_round_on_ack(st_round *r, uint64_t worker_id, bool ok);

/* st_round_take - ends the round, moving its plan into *out. */
void st_round_take(st_round *r, st_plan *out);

/* st_round_abort - ends the round and frees its plan. */
void st_round_abort(st_round *r);

#endif
