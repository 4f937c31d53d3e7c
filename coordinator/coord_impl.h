/* coord_impl.h - the coordinator's state, shared by the files of the
 * strata-coordinator executable: coord.c (start-up, the loop, steps and
 * results, shutdown), api.c (the control socket's requests), replan.c (the
 * replan decision), switch.c (the two-phase switch), admin_plan.c (dry
 * runs, replans and drains asked by admins) and hold.c (the test-only step
 * gate). Only the main thread touches any of it. */
#ifndef ST_COORD_IMPL_H
#define ST_COORD_IMPL_H

#include "common/cq.h"
#include "common/envelope.h"
#include "common/gguf.h"
#include "common/llama.h"
#include "common/tokenizer.h"
#include "coordinator/coord.h"
#include "coordinator/membership.h"
#include "coordinator/net.h"
#include "coordinator/placement.h"
#include "coordinator/plan.h"
#include "coordinator/replan.h"
#include "coordinator/scheduler.h"
#include "coordinator/switch.h"

#define COORD_MAX_FRAME ((size_t)64 << 20)
#define COORD_MAX_WAIT_MS 10000u
#define COORD_LOGITS_PER_REPLY ((size_t)8 << 20)
#define COORD_KEEP_GONE_NS (60ull * 1000000000ull)
#define COORD_MAX_DEPTH 16u         /* batches in flight at most (pipeline depth) */
#define COORD_FINISHED_TTL_NS (60ull * 1000000000ull)  /* a finished request stays readable */
#define COORD_DELIVERED_TTL_NS (5ull * 1000000000ull)  /* ... once its end was polled */

/* A long poll waiting for tokens; it holds its REP slot until answered. */
typedef struct coord_park {
    uint32_t slot;
    uint64_t req_id;
    uint32_t after;
    uint64_t deadline_ns;
} coord_park;

struct st_coord {
    st_coord_cfg cfg;
    uint32_t *split;            /* owned copy of cfg.split */
    uint64_t start_ms;          /* wall clock at start: incarnation */
    st_gguf *gguf;
    st_minfo mi;
    st_tokenizer *tok;          /* NULL when the model has no usable tokenizer */
    size_t max_piece;           /* longest piece: bounds a prompt text's bytes */
    int32_t eos;
    uint32_t n_ctx;
    bool keyed;
    uint8_t key[ST_KEY_BYTES];
    /* one envelope state per socket kind, so reordering between sockets
     * never looks like a replay to a peer's (or our) replay window */
    st_env env_rep, env_rpc, env_step, env_res;
    bool env_ready;
    st_cq q;
    bool q_ready;
    st_net *net;
    st_members ms;
    st_sched *sched;
    st_plan plan;               /* the committed plan */
    bool has_plan;
    bool plan_broken;           /* a stage worker was lost or a commit half-failed */
    st_round round;
    uint64_t next_epoch;
    bool replan_wanted, replan_force;
    char plan_error[320];
    st_peer *push[ST_PLAN_MAX_REPLICAS]; /* to each worker of stage 0 of the committed plan */
    uint32_t n_routes;          /* routes through the committed plan's replicas */
    uint64_t limits_epoch;      /* epoch whose limits the scheduler has */
    coord_park *parks;
    size_t n_parks, max_parks;
    /* the coordinator's own counters */
    uint64_t bad_msgs;
    uint64_t stale_results;     /* results or reports for batches not in flight */
    uint64_t refused_epoch;     /* results of another epoch */
    uint64_t forged_results;    /* results of a batch in flight not from a worker of its route */
    uint64_t steps;
    uint64_t ops_out;           /* outgoing operations not yet ended */
    bool stopping;
    coord_pl pl;                /* placement: objective, hysteresis, imbalance (replan.h) */
};

/* coord.c */
/* coord_serving - a committed, unbroken plan and no switch waiting to
 * commit: batches may be sent. */
bool coord_serving(const st_coord *c);
/* coord_now - the monotonic clock in ns. */
uint64_t coord_now(void);
/* coord_close_pushes - closes the PUSH sockets to stage 0. */
void coord_close_pushes(st_coord *c);

/* api.c */
/* st_api_handle - handles one request (msg, freed here) of control slot
 * `slot` and answers it, now or (a parked Poll) later. */
void st_api_handle(st_coord *c, uint32_t slot, nng_msg *msg);
/* st_api_parks - answers the parked polls whose request moved on, ended or
 * whose wait is over (all: every one, at shutdown). */
void st_api_parks(st_coord *c, uint64_t now_ns, bool all);
/* st_api_reply_error - answers slot with Error{code, message}. */
void st_api_reply_error(st_coord *c, uint32_t slot, st_err code, const char *message);

/* hold.c - the test-only step gate's admin side (hold.h) */
/* coord_api_hold - sets or releases the gate and answers slot with the
 * HoldState; refused (ST_EINVAL) unless the coordinator has --test-hooks. */
void coord_api_hold(st_coord *c, uint32_t slot, const Strata__HoldRequest *q);
/* coord_hold_pb - the gate and the requests it parks as a HoldState
 * (freed with coord_hold_pb_free); NULL without --test-hooks. */
st_err coord_hold_pb(const st_coord *c, Strata__HoldState **out);
void coord_hold_pb_free(Strata__HoldState *h);

#endif
