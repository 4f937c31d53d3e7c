/* coord_impl.h - the coordinator's state, shared by the files of the
 * strata-coordinator executable: coord.c (start-up, the loop, steps and
 * results, shutdown), api.c (the control socket's requests), api_auth.c
 * (credentials, owners, caps), replan.c (the replan decision), switch.c
 * (the two-phase switch), admin_plan.c (dry runs, replans and drains
 * asked by admins), wire_live.c, i8gate.c and hold.c (the test-only step
 * gate). Only the main thread touches any of it.
 *
 * st_coord is a set of subsystem structs, each declared, with what it
 * holds and its invariants, in the header of the file that changes it:
 * the workers (st_members, membership.h), the committed plan and its
 * rounds (coord_plans, switch.h), placement (coord_pl, replan.h), the
 * control API's parked polls (coord_parks, coord_api.h), credentials and
 * owners (coord_auth, coord_auth.h), the i8 gate (coord_i8gate,
 * i8gate.h); coord.c's own are below: the model's facts, the key and
 * envelopes, retired peers and the counters. Each struct's comment names
 * the files that change it; the others only read it. */
#ifndef ST_COORD_IMPL_H
#define ST_COORD_IMPL_H

#include "common/base/cq.h"
#include "common/wire/envelope.h"
#include "common/net/exposure.h"
#include "common/model/gguf.h"
#include "common/model/llama.h"
#include "common/text/tokenizer.h"
#include "coordinator/coord.h"
#include "coordinator/http/gateway.h"
#include "coordinator/control/coord_api.h"
#include "coordinator/control/coord_auth.h"
#include "coordinator/cluster/i8gate.h"
#include "coordinator/cluster/membership.h"
#include "coordinator/control/net.h"
#include "coordinator/planner/placement.h"
#include "coordinator/cluster/plan.h"
#include "coordinator/cluster/replan.h"
#include "coordinator/sched/scheduler.h"
#include "coordinator/cluster/switch.h"
#include "coordinator/stream/weights.h"

#define COORD_MAX_FRAME ((size_t)64 << 20)
/* The results socket's frame limit (coord_results_max): a StepResult has
 * at most one row per KV slot (--max-sessions), each with n_vocab logits
 * when asked; a row's other fields and framing (session id, token, 4 rng
 * words, tags, lengths) take under 80 bytes, the result's own fields, an
 * error's text (ERR_DETAIL_BYTES, common/base/err.c) and the envelope under 2
 * KiB. The slack doubles both. */
#define COORD_RESULT_ROW_BYTES 160u
#define COORD_RESULT_SLACK ((size_t)4 << 10)
#define COORD_MAX_WAIT_MS 10000u
#define COORD_LOGITS_PER_REPLY ((size_t)8 << 20)
#define COORD_KEEP_GONE_NS (60ull * 1000000000ull)
/* a gone worker's control socket stays open this long before it closes
 * (coordinator/control/net.h: a reply still arriving lands first and is dropped) */
#define COORD_PEER_LINGER_NS (10ull * 1000000000ull)
#define COORD_LOOP_WAIT_NS (20ull * 1000000ull) /* the longest wait for an event */
#define COORD_STALL_NS (250ull * 1000000ull)    /* a loop turn this late: the coordinator stalled */
#define COORD_MAX_DEPTH 16u                     /* batches in flight at most (pipeline depth) */
#define COORD_FINISHED_TTL_NS (60ull * 1000000000ull) /* a finished request stays readable */
#define COORD_DELIVERED_TTL_NS (5ull * 1000000000ull) /* ... once its end was polled */

/* The model's facts, read by coord_load_model (coord.c) at start and
 * never changed after. */
typedef struct coord_model {
    st_gguf *gguf;
    st_minfo mi;
    uint64_t *active_bytes; /* [mi.n_layer]: st_minfo_layer_active_bytes, the planner's
                             * per-token compute (all of layer_bytes in a dense model) */
    st_tokenizer *tok;      /* NULL when the model has no usable tokenizer */
    size_t max_piece;       /* longest piece: bounds a prompt text's bytes */
    int32_t eos;
    uint32_t n_ctx;
    st_dtype kv_dtype; /* --cache-type; mi.kv_bytes_per_token_layer is counted in it */
} coord_model;

/* The cluster key and the envelope states that seal and open every frame
 * (common/wire/envelope.h), set up at start by st_coord_open (api_auth.c adds
 * the client and admin keys to rep); afterwards each file that sends or
 * opens a frame uses the state of its socket kind (sealing advances the
 * state's sequence): rep api.c, rpc switch.c (and coord.c, which binds
 * each reply to its request), step coord.c and switch.c (the PUSH
 * hello), res coord.c. */
typedef struct coord_seal {
    bool keyed;
    uint8_t key[ST_KEY_BYTES];
    char local_key_path[ST_LOCAL_KEY_PATH_MAX]; /* cfg.local_key's file (kept) */
    /* one envelope state per socket kind, so reordering between sockets
     * never looks like a replay to a peer's (or our) replay window */
    st_env rep, rpc, step, res;
    bool ready; /* the four states are initialized (freed at close) */
} coord_seal;

/* Gone workers' control sockets, their operations canceled, each closed
 * at its until (coord.c: coord_retire_peer, coord_reap_peers), and the
 * count of outgoing operations not yet ended (counted out by coord.c's
 * sends and switch.c's coord_rpc, back by coord.c's loop as each ends).
 * n_retired <= ST_MEMBERS_MAX (when full, the oldest closes at once). */
typedef struct coord_peers {
    struct {
        st_peer *peer;
        uint64_t until; /* coordinator clock, ns */
    } retired[ST_MEMBERS_MAX];
    size_t n_retired;
    uint64_t ops_out; /* outgoing operations not yet ended */
} coord_peers;

/* The coordinator's own counters (Status: CoordinatorCounters), only ever
 * incremented, by the main thread (coord.c for results, api.c for
 * requests). */
typedef struct coord_counters {
    uint64_t bad_msgs;
    uint64_t stale_results;  /* results or reports for batches not in flight */
    uint64_t refused_epoch;  /* results of another epoch */
    uint64_t forged_results; /* results of a batch in flight not from a worker of its route */
    uint64_t steps;
    uint64_t bad_experts; /* heartbeats whose expert lists did not fit the model (experts.h) */
} coord_counters;

/* The coordinator: each subsystem's state in its own struct, declared in
 * the header of the file that changes it (the main thread owns them all). */
struct st_coord {
    st_coord_cfg cfg;
    uint32_t *split;   /* owned copy of cfg.split */
    uint64_t start_ms; /* wall clock at start: incarnation */
    coord_model model;
    coord_seal seal;
    st_weights *weights; /* main.c's weights server (its connection counts), or NULL */
    st_cq q;
    bool q_ready;
    st_net *net;
    st_members ms; /* the workers (membership.h) */
    st_sched *sched;
    coord_plans plans; /* the committed plan and rounds (switch.h) */
    coord_peers peers;
    uint64_t limits_epoch; /* epoch whose limits the scheduler has */
    char depth_why[512];   /* how its pipeline depth was chosen */
    coord_parks parks;     /* parked long polls (coord_api.h) */
    coord_counters counters;
    uint64_t timers_ns; /* the last turn of the loop's timers (coord_timers) */
    bool stopping;
    coord_pl pl;     /* placement: objective, hysteresis, imbalance (replan.h) */
    coord_i8gate i8; /* the i8 accuracy gate (--allow-i8, i8gate.h) */
    coord_auth auth; /* credentials, owners and per-client caps (coord_auth.h) */
    st_gw *gw;       /* the in-process HTTP gateway's attachment (gateway.h) */
};

/* coord.c */
/* coord_serving - a committed, unbroken plan and no switch waiting to
 * commit: batches may be sent. */
bool coord_serving(const st_coord *c);
/* coord_now - the monotonic clock in ns. */
uint64_t coord_now(void);
/* coord_close_pushes - closes the PUSH sockets to stage 0. */
void coord_close_pushes(st_coord *c);
/* coord_retire_peer - a gone worker's control socket (taken): its
 * operations end now (st_peer_cancel), the socket closes
 * COORD_PEER_LINGER_NS after now (coord_reap_peers), or at shutdown. */
void coord_retire_peer(st_coord *c, st_peer *p, uint64_t now);
/* coord_reap_peers - closes the retired sockets due by now. */
void coord_reap_peers(st_coord *c, uint64_t now);

/* hold.c - the test-only step gate's admin side (hold.h) */
/* coord_api_hold - sets or releases the gate and answers slot with the
 * HoldState; refused (ST_EINVAL) unless the coordinator has --test-hooks. */
void coord_api_hold(st_coord *c, uint32_t slot, const Strata__HoldRequest *q);
/* coord_hold_pb - the gate and the requests it parks as a HoldState
 * (freed with coord_hold_pb_free); NULL without --test-hooks. */
st_err coord_hold_pb(const st_coord *c, Strata__HoldState **out);
void coord_hold_pb_free(Strata__HoldState *h);

#endif
