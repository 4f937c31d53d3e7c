/* scheduler.h - the step scheduler: requests, sessions with their token
 * history, batch formation, results, deadlines. Pure logic: no sockets,
 * no threads, time passed in by the caller, so every rule is unit-tested.
 *
 * A request (a prompt, a token limit, sampling parameters, stop strings)
 * runs in a session: the session's history is prompt + generated ids, and
 * n_cached counts the leading positions the workers' KV holds. A step
 * feeds each chosen session history[n_cached, n_cached + n) and, when that
 * reaches the end of the history, asks the last stage to sample the next
 * id. Forgetting the KV (after a plan switch, or to retry a failed batch)
 * is n_cached = 0: the next steps re-feed the history from position 0, so
 * no token is lost or repeated.
 *
 * Batches (continuous batching, docs/batching.md): decode rows (sessions
 * with exactly one unfed id, the longest-waiting first) come before
 * prefill chunks of at most `chunk` ids (oldest request first), up to
 * max_batch_tokens ids. A session is in at most one batch in flight; up
 * to `depth` batches (the pipeline's stage count) are in flight at once,
 * each holding about 1/depth of the running sessions, so every stage has
 * a batch to work on. Requests join at the next batch formed and leave
 * when they end; sessions that ended ride on the next batch (end_ids) so
 * every stage frees their KV before it binds the batch's rows.
 *
 * Routes (replicated plans, docs/placement.md): with replicas a stage has
 * several workers, each keeping the KV of its own sessions, so every
 * session is pinned to one route (one worker per stage) until the next
 * plan, and a batch only holds sessions of one route. New sessions go to
 * the least-loaded route; each route gets its share of the batches in
 * flight, so the replicas of a stage work at the same time.
 *
 * Ids: the session ids the workers key their KV by and the batch ids
 * results name are random 64-bit numbers (never 0, unique among the live
 * ones), so nobody can guess another user's session or a batch in flight
 * from ids seen before; a test may give the scheduler another generator
 * (st_sched_cfg.new_id). Request ids count up from id_base.
 *
 * Sessions: a request with a client session id continues that session:
 * its prompt is the whole conversation, and the longest prefix it shares
 * with the session's history that the workers' KV still holds is not fed
 * again (prefix reuse). Idle client sessions end after their TTL, or,
 * least recently used first, when a new session needs their slot. */
#ifndef ST_COORD_SCHEDULER_H
#define ST_COORD_SCHEDULER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/text/sampling.h"
#include "common/text/tokenizer.h"
#include "coordinator/cluster/hold.h"

#define ST_SCHED_MAX_STOP 16                            /* stop strings per request */
#define ST_SCHED_MAX_STOP_LEN 256                       /* bytes per stop string */
#define ST_SCHED_MAX_LOGITS_BYTES ((uint64_t)256 << 20) /* per request */
#define ST_SCHED_MAX_ROUTES 64                          /* routes through the replicas of a plan */
#define ST_SCHED_MAX_REQUEUES 32 /* cluster failures of a request without a good step */

/* What an id names (st_sched_id_fn). */
typedef enum st_sched_id_kind {
    ST_SCHED_ID_SESSION = 0,
    ST_SCHED_ID_BATCH,
} st_sched_id_kind;

/* st_sched_id_fn - a new session or batch id (the scheduler draws again
 * when it is 0 or already in use). */
typedef uint64_t (*st_sched_id_fn)(void *arg, st_sched_id_kind kind);

/* What a failed batch does to its requests (st_sched_fail). */
typedef enum st_sched_retry {
    ST_SCHED_NO_RETRY = 0, /* they end with the error */
    ST_SCHED_RETRY_ONCE,   /* re-fed from their history once since their last good
                              step, then they end: a failure that may be theirs */
    ST_SCHED_REQUEUE,      /* re-fed from their history: the cluster failed them (a
                              worker lost, a plan switch, a stale epoch, a send that
                              failed), not the request; at most ST_SCHED_MAX_REQUEUES
                              times since their last good step */
} st_sched_retry;

typedef struct st_sched_cfg {
    uint32_t n_ctx;            /* KV positions per session */
    uint32_t chunk;            /* prefill ids per row */
    uint32_t max_batch_tokens; /* ids per batch */
    uint32_t max_sessions;     /* session table size; the plan may allow fewer (set_limits) */
    uint32_t max_requests;     /* queued + running requests */
    uint32_t max_in_flight;    /* batch table size: the largest pipeline depth */
    uint32_t n_vocab;
    int32_t eos_id;
    uint64_t step_timeout_ns;     /* a batch without result this long fails */
    uint64_t queue_timeout_ns;    /* a stalled request (no slot, no plan) fails after this */
    uint64_t finished_ttl_ns;     /* finished requests stay readable this long */
    uint64_t delivered_ttl_ns;    /* ... or this long once their end was delivered
                                     (st_sched_delivered); 0: finished_ttl_ns */
    uint64_t idle_session_ttl_ns; /* idle client sessions are ended after this */
    uint64_t client_timeout_ns;   /* a live request not polled this long is cancelled (0: never) */
    uint64_t id_base;             /* request ids count up from here */
    const st_tokenizer *tok;      /* text and stop strings; NULL: ids only */
    st_sched_id_fn new_id;        /* session and batch ids; NULL: random (libsodium) */
    void *id_arg;                 /* passed to new_id */
} st_sched_cfg;

/* A generation request as submitted. Everything is copied. */
typedef struct st_gen_req {
    const int32_t *prompt;
    size_t n_prompt;
    uint32_t max_tokens;
    st_sampler_params sp;
    const char *const *stop;
    size_t n_stop;
    bool want_logits;
    uint64_t client_session; /* 0: a fresh session ended with the request */
    uint64_t max_queue_ns;   /* refused if not started within this; 0 or above
                                queue_timeout_ns: queue_timeout_ns */
} st_gen_req;

/* One row of a batch. Pointers stay valid while the batch is in flight. */
typedef struct st_sched_row {
    uint64_t session_id;
    uint32_t pos; /* position of tokens[0] */
    uint32_t n_tok;
    const int32_t *tokens;
    bool sample; /* the row reaches the end of the history */
    bool want_logits;
    st_sampler_params sp;
    uint64_t rng[ST_RNG_WORDS];
    const int32_t *hist; /* last repeat_last_n ids (penalty on and sample only) */
    uint32_t n_hist;
} st_sched_row;

typedef struct st_sched_batch {
    uint64_t id;
    uint64_t epoch;
    uint32_t route; /* every row's session is pinned to this route */
    uint64_t sent_ns;
    uint64_t deadline_ns;
    uint32_t n_rows;
    uint32_t n_tokens;
    st_sched_row *rows;
    uint32_t n_end; /* sessions ended since the previous batch was formed */
    const uint64_t *end_ids;
} st_sched_batch;

/* One sampled row of a step result. */
typedef struct st_sched_result_row {
    uint64_t session_id;
    int32_t token;
    const uint64_t *rng;
    size_t n_rng;
    const float *logits;
    size_t n_logits;
} st_sched_result_row;

/* What Poll reads of a request. Pointers are valid until the next call
 * that changes the scheduler. */
typedef struct st_req_view {
    uint64_t id;
    bool done;
    const char *finish; /* "length", "eos", "stop", "error", "cancelled"; "" while running */
    st_err err;
    const char *err_msg;
    uint32_t n_prompt;
    uint32_t n_ids;
    const int32_t *ids;
    const char *text;         /* generated text, complete UTF-8 characters only */
    const uint32_t *text_off; /* [n_ids + 1]: text of ids[i] is [text_off[i], text_off[i+1]) */
    size_t text_len;          /* >= text_off[n_ids]; the rest is the flush at the end */
    const float *logits;      /* [n_ids][n_vocab] when want_logits */
    bool want_logits;
    uint32_t n_vocab;
    const uint64_t *times; /* [n_ids] when each id was appended (the caller's clock) */
    uint32_t steps;        /* batches that carried a row of this request */
    uint32_t missed;       /* batches formed while it was ready to decode, without it */
    uint32_t reused;       /* prompt ids the session's KV already held */
    uint64_t submit_ns;    /* accepted */
    uint64_t start_ns;     /* got a session; 0 while queued */
} st_req_view;

/* The scheduler's state and totals (strata status). */
typedef struct st_sched_stats {
    uint32_t running, queued; /* live requests with / without a session */
    uint32_t sessions, idle_sessions;
    uint32_t cap_sessions, depth, max_batch_tokens, chunk;
    uint32_t in_flight, peak_in_flight;
    uint64_t batches, rows, tokens;
    uint64_t busy_refused;     /* submits refused: max_requests in progress */
    uint64_t queue_expired;    /* requests refused after their maximum queue wait */
    uint64_t client_gone;      /* requests cancelled: their client stopped polling */
    uint64_t reused_tokens;    /* prompt ids served from a session's KV */
    uint64_t sessions_evicted; /* idle client sessions ended to make room */
    uint64_t sessions_expired; /* idle client sessions ended by their TTL */
    uint64_t kv_kept;          /* sessions that kept their KV across a plan switch */
    uint64_t kv_reprefilled;   /* sessions re-fed from their history: a failed batch, or a
                                  plan switch that left their KV behind */
    uint32_t routes;           /* routes through the replicas (1: none) */
    uint32_t route_sessions[ST_SCHED_MAX_ROUTES]; /* sessions pinned to each route */
    uint64_t route_batches[ST_SCHED_MAX_ROUTES];  /* batches formed per route since set_routes */
} st_sched_stats;

typedef struct st_sched st_sched;

/* st_sched_new - a scheduler for cfg (ST_EINVAL names a zero or
 * inconsistent setting). */
st_err st_sched_new(const st_sched_cfg *cfg, st_sched **out);

/* st_sched_free - frees everything; NULL is a no-op. */
void st_sched_free(st_sched *s);

/* st_sched_submit - validates and queues a request: ST_ERANGE for a
 * prompt id outside the vocabulary (naming its index and value); ST_EINVAL
 * (naming the field) for an empty prompt, max_tokens 0 or beyond the
 * context, a prompt that does not fit the context, invalid
 * sampling parameters, too many or bad stop strings, logits too large;
 * ST_EBUSY when max_requests are in progress or the client session is
 * busy. */
st_err st_sched_submit(st_sched *s, const st_gen_req *g, uint64_t now_ns, uint64_t *req_id);

/* st_sched_set_limits - the serving plan's limits: at most max_sessions
 * sessions hold KV (clamped to cfg.max_sessions; sessions above a lowered
 * limit stay until they end), max_batch_tokens ids per batch (clamped to
 * cfg.max_batch_tokens) and depth batches in flight (clamped to
 * cfg.max_in_flight). ST_EINVAL for a zero value. */
st_err st_sched_set_limits(st_sched *s, uint32_t max_sessions, uint32_t max_batch_tokens,
                           uint32_t depth);

/* st_sched_set_routes - the serving plan has n_routes routes (1..
 * ST_SCHED_MAX_ROUTES; ST_EINVAL otherwise). Sessions that st_sched_keep_kv
 * kept on their routes stay there; every other session not in flight is
 * re-pinned so the routes hold shares as equal as they can (the
 * least-loaded route first, in slot order); one that moves forgets its KV
 * (n_cached = 0), as its KV is on another worker. Call it once per
 * plan, after st_sched_keep_kv or st_sched_forget_kv. The per-route batch
 * counts start over. */
st_err st_sched_set_routes(st_sched *s, uint32_t n_routes);

/* st_sched_route_of - the route session_id is pinned to, or -1 if it is
 * not a live session. */
int st_sched_route_of(const st_sched *s, uint64_t session_id);

/* st_sched_form - admits queued requests into free session slots and forms
 * the next batch for epoch; *out is NULL when there is nothing to run or
 * `depth` batches are in flight. A new session is pinned to the route
 * with the fewest running sessions. The batch is for one route: of the
 * routes with ready sessions and fewer than ceil(depth / routes) batches
 * in flight, the one with the fewest in flight (then the one whose ready
 * session waited longest). It holds at most ceil(running sessions of the
 * route / its share of depth) rows: decode rows first (longest-waiting
 * first; every ready decode session of the route left out counts a
 * missed step), then prefill chunks. It carries the sessions ended since the previous batch. The
 * batch stays owned by the scheduler until st_sched_complete or
 * st_sched_fail. */
st_err st_sched_form(st_sched *s, uint64_t epoch, uint64_t now_ns, const st_sched_batch **out);

/* st_sched_complete - applies a batch's result: advances every row's
 * cached length, appends sampled ids (text, logits), updates RNG states,
 * ends requests on EOS, length, context or stop string. ST_ENOENT for an
 * unknown batch (already failed or never sent: drop it); ST_EEPOCH for
 * another epoch and ST_EPROTO for rows that do not match the batch (a
 * missing sample row, an id outside the vocabulary, an RNG state that is
 * not 4 words, logits of the wrong size): the batch is then failed with
 * one retry, as st_sched_fail. */
st_err st_sched_complete(st_sched *s, uint64_t batch_id, uint64_t epoch,
                         const st_sched_result_row *rows, size_t n_rows, uint64_t now_ns);

/* st_sched_fail - a batch failed with code and msg. As retry says
 * (st_sched_retry), each of its requests is kept and its session re-fed
 * from position 0, or the request ends with the error. ST_ENOENT for an
 * unknown batch. */
st_err st_sched_fail(st_sched *s, uint64_t batch_id, st_err code, const char *msg,
                     st_sched_retry retry, uint64_t now_ns);

/* st_sched_fail_in_flight - st_sched_fail for every batch in flight on a
 * route r with lost[r] (r < n_routes), or on every route when lost is
 * NULL. The batches of the other routes come back as usual. */
void st_sched_fail_in_flight(st_sched *s, const bool *lost, uint32_t n_routes, st_err code,
                             const char *msg, st_sched_retry retry, uint64_t now_ns);

/* st_sched_forget_kv - every session's cached length becomes 0 (after a
 * plan switch: the workers' KV is not trusted any more). */
void st_sched_forget_kv(st_sched *s);

/* st_sched_keep_kv - after a plan switch from a plan of n_old routes: a
 * session on old route r with map[r] >= 0 (the new plan's route that runs
 * every layer on the same workers, st_plan_same_route) moves to route
 * map[r] and keeps its cached length; every other session forgets its KV
 * (re-prefills from its history). Entries of map past n_old are not read. */
void st_sched_keep_kv(st_sched *s, const int32_t *map, uint32_t n_old);

/* st_sched_tick - deadlines: batches past their step deadline fail with
 * ST_ETIMEOUT ("step deadline missed", retried once: a paused or lost
 * worker, not the request, is the likely cause); queued requests waiting
 * longer than their maximum queue wait fail with ST_EBUSY; live requests
 * whose client did not poll for client_timeout end as "cancelled"
 * (ST_ECANCELED); when stall is not NULL
 * (nothing can be served: no plan), running requests without progress for
 * queue_timeout fail with ST_EBUSY naming stall; finished requests older
 * than their TTL and idle client sessions past theirs are freed. A time
 * stamp later than now_ns (the caller read its clock before an event it
 * handled since) counts as now_ns: nothing expires early. */
void st_sched_tick(st_sched *s, uint64_t now_ns, const char *stall);

/* st_sched_cancel - ends a request as "cancelled" (ST_ENOENT if unknown;
 * a finished request is left as it is). */
st_err st_sched_cancel(st_sched *s, uint64_t req_id, uint64_t now_ns);

/* st_sched_delivered - the client of req_id got its end (a Poll reply with
 * done): the request is dropped delivered_ttl_ns later rather than after
 * finished_ttl_ns, so finished requests do not pile up (and the heap with
 * them) under a steady load. ST_ENOENT if unknown; no-op while running. */
st_err st_sched_delivered(st_sched *s, uint64_t req_id, uint64_t now_ns);

/* st_sched_touch - the client of req_id polled at now_ns (a live request
 * whose client stays silent for client_timeout is cancelled by tick).
 * ST_ENOENT if unknown. */
st_err st_sched_touch(st_sched *s, uint64_t req_id, uint64_t now_ns);

/* st_sched_set_hold - sets the test-only step gate (hold.h; h->on false:
 * released). The next st_sched_form applies it. */
void st_sched_set_hold(st_sched *s, const st_hold *h);

/* st_sched_get_hold - the gate as set. */
void st_sched_get_hold(const st_sched *s, st_hold *h);

/* st_sched_held - the requests the gate parks now (running, at the gate,
 * no batch in flight), in session slot order: up to cap into out; returns
 * how many there are in all. */
size_t st_sched_held(const st_sched *s, st_held *out, size_t cap);

/* st_sched_get_stats - fills *st. */
void st_sched_get_stats(const st_sched *s, st_sched_stats *st);

/* st_sched_shutdown - ends every queued or running request with
 * ST_ECANCELED and msg, and every batch in flight. */
void st_sched_shutdown(st_sched *s, const char *msg, uint64_t now_ns);

/* st_sched_view - the state of a request (ST_ENOENT if unknown or
 * expired). */
st_err st_sched_view(const st_sched *s, uint64_t req_id, st_req_view *v);

/* st_sched_take_ended - moves up to cap ids of sessions that ended (their
 * KV can be freed on the workers) into ids; returns how many. */
size_t st_sched_take_ended(st_sched *s, uint64_t *ids, size_t cap);

/* st_sched_in_flight - batches in flight. */
size_t st_sched_in_flight(const st_sched *s);

/* st_sched_batch_find - the batch in flight with id, or NULL. */
const st_sched_batch *st_sched_batch_find(const st_sched *s, uint64_t id);

/* st_sched_batches - up to cap of the batches in flight into out (slot
 * order); returns how many are in flight. */
size_t st_sched_batches(const st_sched *s, const st_sched_batch **out, size_t cap);

/* st_sched_n_requests - live (queued + running) requests. */
size_t st_sched_n_requests(const st_sched *s);

/* st_sched_n_sessions - sessions holding a KV slot. */
size_t st_sched_n_sessions(const st_sched *s);

#endif
