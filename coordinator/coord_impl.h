/* coord_impl.h - the coordinator's state, shared by the files of the
 * strata-coordinator executable: coord.c (start-up, the loop, steps and
 * results, shutdown), api.c (the control socket's requests), replan.c (the
 * replan decision), switch.c (the two-phase switch), admin_plan.c (dry
 * runs, replans and drains asked by admins) and hold.c (the test-only step
 * gate). Only the main thread touches any of it. */
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

/* Who sent a control request: its envelope sender and the credential
 * that verified it (api_auth.c, docs/security.md). */
typedef struct coord_who {
    uint64_t sender;
    uint64_t seq;  /* its sequence number: the reply is bound to (sender, seq) */
    uint32_t cred; /* st_env_frame.cred of env_rep */
    st_env_role role;
    bool bound; /* keyed, and bound to this coordinator (st_env_frame.bound) */
} coord_who;

/* A control slot's request held to the slot rules (not the cluster key's,
 * in a keyed cluster: api_auth.c), by sender who on connection pipe. */
typedef struct coord_guard {
    bool on;
    uint32_t pipe;
    coord_who who;
} coord_guard;

/* A request and the client that created it (api_auth.c). */
typedef struct coord_owner {
    uint64_t req_id; /* the scheduler's id; 0: free */
    uint64_t ext_id; /* the id clients see: random 64 bits (guessing: docs/security.md) */
    coord_who who;
    uint64_t logits_bytes; /* the most logits it may hold */
} coord_owner;

/* Requests refused for who sent them (SecurityCounters). */
typedef struct coord_sec {
    uint64_t role_refused, member_spoofed, joins_refused, stale_refused, foreign_refused,
        quota_refused, pipes_closed, slots_refused, unbound_refused;
} coord_sec;

/* A long poll waiting for tokens; it holds its REP slot until answered. */
typedef struct coord_park {
    uint32_t slot;
    uint64_t req_id;
    uint32_t after;
    uint64_t deadline_ns;
    coord_who who;
} coord_park;

struct st_coord {
    st_coord_cfg cfg;
    uint32_t *split;   /* owned copy of cfg.split */
    uint64_t start_ms; /* wall clock at start: incarnation */
    st_gguf *gguf;
    st_minfo mi;
    st_tokenizer *tok; /* NULL when the model has no usable tokenizer */
    size_t max_piece;  /* longest piece: bounds a prompt text's bytes */
    int32_t eos;
    uint32_t n_ctx;
    bool keyed;
    uint8_t key[ST_KEY_BYTES];
    char local_key_path[ST_LOCAL_KEY_PATH_MAX]; /* cfg.local_key's file (kept) */
    st_weights *weights; /* main.c's weights server (its connection counts), or NULL */
    /* one envelope state per socket kind, so reordering between sockets
     * never looks like a replay to a peer's (or our) replay window */
    st_env env_rep, env_rpc, env_step, env_res;
    bool env_ready;
    st_cq q;
    bool q_ready;
    st_net *net;
    st_members ms;
    st_sched *sched;
    st_plan plan; /* the committed plan */
    bool has_plan;
    bool plan_broken; /* a stage worker was lost or a commit half-failed */
    st_round round;
    uint64_t next_epoch;
    bool replan_wanted, replan_force;
    char plan_error[320];
    st_peer *push[ST_PLAN_MAX_REPLICAS]; /* to each worker of stage 0 of the committed plan */
    /* gone workers' control sockets, their operations canceled, each closed
     * at its until (coord_retire_peer) */
    struct {
        st_peer *peer;
        uint64_t until; /* coordinator clock, ns */
    } retired[ST_MEMBERS_MAX];
    size_t n_retired;
    uint32_t n_routes;                   /* routes through the committed plan's replicas */
    uint64_t limits_epoch;               /* epoch whose limits the scheduler has */
    char depth_why[512];                 /* how its pipeline depth was chosen */
    coord_park *parks;
    size_t n_parks, max_parks;
    /* the coordinator's own counters */
    uint64_t bad_msgs;
    uint64_t stale_results;  /* results or reports for batches not in flight */
    uint64_t refused_epoch;  /* results of another epoch */
    uint64_t forged_results; /* results of a batch in flight not from a worker of its route */
    uint64_t steps;
    uint64_t ops_out;   /* outgoing operations not yet ended */
    uint64_t timers_ns; /* the last turn of the loop's timers (coord_timers) */
    bool stopping;
    coord_pl pl;     /* placement: objective, hysteresis, imbalance (replan.h) */
    coord_i8gate i8; /* the i8 accuracy gate (--allow-i8, i8gate.h) */
    /* credentials, owners and per-client caps (api_auth.c) */
    coord_who *slot_who;     /* [slots]: who sent the request a slot answers */
    coord_guard *slot_guard; /* [slots]: whether its request was held to the slot rules */
    uint32_t closed_pipe;    /* the connection closed last for its stuck answers */
    coord_owner *owners;     /* [n_owners] */
    size_t n_owners;
    uint32_t max_req_client, max_parks_client;
    uint64_t max_logits_client;
    uint8_t sess_key[16]; /* keys the per-credential session namespaces */
    coord_sec sec;
    coord_sec *sec_cred; /* [n_sec_cred]: each client key's own (what its Status shows) */
    size_t n_sec_cred;
    st_gw *gw; /* the in-process HTTP gateway's attachment (gateway.h) */
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

/* api.c */
/* coord_api_handle - handles one request (msg, freed here) of control slot
 * `slot` and answers it, now or (a parked Poll) later. */
void coord_api_handle(st_coord *c, uint32_t slot, nng_msg *msg);
/* coord_api_parks - answers the parked polls whose request moved on, ended or
 * whose wait is over (all: every one, at shutdown). */
void coord_api_parks(st_coord *c, uint64_t now_ns, bool all);
/* coord_api_send - answers slot with r, sealed with the credential that
 * verified its request (an Error reply if r cannot be packed). Every
 * answer on the control socket goes out through it. */
void coord_api_send(st_coord *c, uint32_t slot, const Strata__Msg *r);
/* coord_api_reply_error - answers slot with Error{code, message}. */
void coord_api_reply_error(st_coord *c, uint32_t slot, st_err code, const char *message);

/* api_auth.c - credentials, roles, owners and per-client caps */
/* coord_auth_open - loads --client-keys and --admin-key into env_rep and
 * sizes the owner table (after env_rep and the scheduler exist). */
st_err coord_auth_open(st_coord *c);
void coord_auth_close(st_coord *c);
/* coord_auth_allowed - whether who's role may send a request of body case
 * bc; if not, answers slot with ST_EAUTH naming both, counts it, false. */
bool coord_auth_allowed(st_coord *c, uint32_t slot, const coord_who *who, int bc);
/* coord_auth_request - the scheduler's id of the request clients know as
 * ext_id, if who may Poll or Cancel it (its creator, or an admin); else
 * answers slot with ST_ENOENT as for an unknown id (so ids are never
 * confirmed), counts a foreign one, false. */
bool coord_auth_request(st_coord *c, uint32_t slot, const coord_who *who, uint64_t ext_id,
                        uint64_t *req_id);
/* coord_auth_ext - the id clients know for the scheduler's req_id (0 if
 * none); coord_auth_int - the reverse (0 if none). */
uint64_t coord_auth_ext(const st_coord *c, uint64_t req_id);
uint64_t coord_auth_int(const st_coord *c, uint64_t ext_id);
/* coord_auth_admit - whether who may submit one more request of
 * max_tokens ids that may hold logits_bytes of logits; if not, answers
 * slot (ST_ERANGE over --max-new-tokens, else ST_EBUSY), counts. */
bool coord_auth_admit(st_coord *c, uint32_t slot, const coord_who *who, uint32_t max_tokens,
                      uint64_t logits_bytes);
/* coord_auth_quota - coord_auth_admit without a slot: ST_OK, or the
 * refusal's code with its message in text[cap] (counted and logged). */
st_err coord_auth_quota(st_coord *c, const coord_who *who, uint32_t max_tokens,
                        uint64_t logits_bytes, char *text, size_t cap);
/* coord_auth_bind - records who as req_id's creator (after a submit) and
 * gives the request a random id for clients in *ext_id. */
st_err coord_auth_bind(st_coord *c, uint64_t req_id, const coord_who *who, uint64_t logits_bytes,
                       uint64_t *ext_id);
/* coord_auth_park_ok - whether who may park one more poll; counts if not. */
bool coord_auth_park_ok(st_coord *c, const coord_who *who);
/* coord_auth_session - the scheduler's session id for a client's
 * session_id: unchanged for the cluster key; keyed by the credential for
 * a client or admin key, and by the envelope sender in an open cluster
 * (0 stays 0: no session). */
uint64_t coord_auth_session(const st_coord *c, const coord_who *who, uint64_t session_id);
/* coord_auth_member - whether who may speak for member id (it joined it);
 * if not, answers slot with ST_EAUTH, counts, false. An unknown id passes
 * (the caller answers it as today). */
bool coord_auth_member(st_coord *c, uint32_t slot, const coord_who *who, uint64_t id);
/* coord_auth_slot_ok - whether slot's request (from who; trusted: the
 * cluster key, or any sender of an open cluster) may hold its slot: a
 * connection with 4 answers it does not read is closed, and an
 * untrusted request is dropped unanswered while fewer slots than the
 * members' reserve are idle (an answer to a client that does not read
 * would hold the slot). Counts; false after dropping the request. */
bool coord_auth_slot_ok(st_coord *c, uint32_t slot, const coord_who *who, bool trusted);
/* coord_auth_sweep - closes every connection of untrusted requests holding
 * AUTH_PIPE_MAX_STUCK stuck answers (called each loop, so the rule holds
 * when that connection sends nothing more). */
void coord_auth_sweep(st_coord *c);
/* coord_auth_bound - whether who's request may be taken as to its binding:
 * in a keyed cluster every request but a Hello must be bound to this
 * coordinator (a frame from before its start is not: docs/security.md,
 * "Replay"); if not, answers slot with ST_EAUTH, counts, false. */
bool coord_auth_bound(st_coord *c, uint32_t slot, const coord_who *who, int bc);
/* coord_auth_pb - the SecurityCounters of Status for who: a client key
 * sees only its own credential's counts (scope "credential"), every other
 * role the coordinator's (scope "coordinator"). */
void coord_auth_pb(const st_coord *c, const coord_who *who, Strata__SecurityCounters *out);

/* hold.c - the test-only step gate's admin side (hold.h) */
/* coord_api_hold - sets or releases the gate and answers slot with the
 * HoldState; refused (ST_EINVAL) unless the coordinator has --test-hooks. */
void coord_api_hold(st_coord *c, uint32_t slot, const Strata__HoldRequest *q);
/* coord_hold_pb - the gate and the requests it parks as a HoldState
 * (freed with coord_hold_pb_free); NULL without --test-hooks. */
st_err coord_hold_pb(const st_coord *c, Strata__HoldState **out);
void coord_hold_pb_free(Strata__HoldState *h);

#endif
