/* sched_impl.h - the scheduler's internal state, shared by scheduler.c
 * (sessions, admission, batches, results, deadlines), sched_req.c
 * (requests: validation, text and stop strings, views, cancel) and
 * sched_routes.c (routes: which a new session takes, re-pinning, KV kept
 * across a switch). Nothing outside those three files includes it. */
#ifndef ST_COORD_SCHED_IMPL_H
#define ST_COORD_SCHED_IMPL_H

#include "common/text/gen.h"
#include "coordinator/cluster/hold.h"
#include "coordinator/sched/scheduler.h"

#define ST_SCHED_ID_TRIES 64 /* draws of sched_new_id before it gives up */

typedef enum rq_state { RQ_QUEUED = 0, RQ_RUNNING, RQ_DONE } rq_state;

typedef struct sched_sess sched_sess;

typedef struct sched_req {
    uint64_t id;
    rq_state state;
    sched_sess *sess;
    int32_t *prompt;
    uint32_t n_prompt;
    uint64_t client_session;
    uint32_t max_tokens;
    st_sampler_params sp;
    st_gen *gen; /* the text and the stop rules (common/text/gen.h) */
    bool want_logits;
    int32_t *ids; /* [max_tokens] */
    uint32_t n_ids;
    uint32_t *text_off; /* [max_tokens + 1] */
    char *text;
    size_t text_len, text_cap;
    float *logits; /* [n_ids][n_vocab] */
    const char *finish;
    st_err err;
    char err_msg[256];
    uint64_t created_ns, progress_ns, done_ns;
    uint64_t delivered_ns; /* its end reached the client (0: not yet) */
    uint64_t start_ns;     /* got a session */
    uint64_t polled_ns;    /* the client's last poll */
    uint64_t max_queue_ns;
    uint64_t *times; /* [max_tokens] when each id was appended */
    uint32_t steps, missed, reused;
    uint32_t retries;  /* failures since the last good step (ST_SCHED_RETRY_ONCE) */
    uint32_t requeues; /* cluster failures since the last good step (ST_SCHED_REQUEUE) */
} sched_req;

struct sched_sess {
    bool used;
    uint64_t id;        /* the session id the workers see */
    uint64_t client_id; /* 0: fresh */
    int32_t *hist;      /* [n_ctx] */
    uint32_t n_hist;
    uint32_t n_cached;
    uint64_t rng[ST_RNG_WORDS];
    sched_req *req;
    uint64_t in_flight;  /* batch id, 0 if none */
    uint64_t last_batch; /* formation number of the last batch it was in (decode order:
                            oldest first); batch ids are random, so not those */
    uint64_t last_used_ns;
    uint32_t route;  /* the route its KV lives on (st_sched_set_routes) */
    bool route_kept; /* st_sched_keep_kv: the next set_routes leaves it there */
};

typedef struct sched_batch {
    bool used;
    st_sched_batch b;
    uint64_t *end; /* [cap_ended] storage of b.end_ids */
} sched_batch;

struct st_sched {
    st_sched_cfg cfg;
    sched_sess *sess; /* [max_sessions] */
    sched_req **req;  /* requests in arrival order */
    size_t n_req, cap_req;
    sched_batch *batches;                       /* [max_in_flight] */
    uint32_t cap_sessions, batch_tokens, depth; /* the serving plan's limits */
    uint32_t n_routes;                          /* routes through the serving plan's replicas */
    uint64_t route_batches[ST_SCHED_MAX_ROUTES];
    uint64_t next_req; /* the last request id given */
    uint64_t formed;   /* batches formed: the formation number of the last one */
    uint64_t *ended;   /* ended session ids for EndSessions (st_sched_take_ended) */
    size_t n_ended, cap_ended;
    uint64_t *pend;       /* ended session ids for the next batches' end_ids, until a */
    uint32_t *pend_route; /* batch of the session's route carried it (its workers saw it) */
    size_t n_pend;
    st_sched_stats st; /* totals (the gauges are computed on demand) */
    st_hold hold;      /* the test-only step gate (hold.h); off unless a test sets it */
};

/* sched_req.c */
/* sched_new_id - a new session or batch id from cfg.new_id (random when
 * NULL): never 0, never a live session's or a batch in flight's; 0 when
 * the generator gives nothing else after ST_SCHED_ID_TRIES draws. */
uint64_t sched_new_id(st_sched *s, st_sched_id_kind kind);
/* sched_req_free - frees a request and everything it owns; NULL: no-op. */
void sched_req_free(sched_req *r);
/* sched_find - the request with id, or NULL. */
sched_req *sched_find(const st_sched *s, uint64_t id);
/* sched_live - queued + running requests. */
size_t sched_live(const st_sched *s);
/* sched_drop - frees request i of the table (detaching its session). */
void sched_drop(st_sched *s, size_t i);
/* sched_finish - ends r once with reason (and err, msg); flushes its text. */
void sched_finish(st_sched *s, sched_req *r, const char *reason, st_err err, const char *msg,
                  uint64_t now);
/* sched_append - appends a sampled id to r and its session; ends r on EOS,
 * a stop string, its limit or a full context. */
void sched_append(st_sched *s, sched_req *r, sched_sess *ss, const st_sched_result_row *rr,
                  uint64_t now);

/* sched_parked - whether the test-only gate (hold.h) parks ss's running
 * request: st_sched_form gives it no row. Off, one test of a flag. */
static inline bool sched_parked(const st_sched *s, const sched_sess *ss)
{
    return s->hold.on && st_hold_parks(&s->hold, ss->req->id, ss->req->n_ids);
}

/* sched_routes.c */
/* sched_least_loaded - the route a new session takes: the fewest running
 * sessions, then the fewest sessions. */
uint32_t sched_least_loaded(const st_sched *s);

/* scheduler.c */
/* sched_settle - after ss left a batch or its request ended: detaches a
 * finished request, ends a fresh session, idles a client one. */
void sched_settle(st_sched *s, sched_sess *ss, uint64_t now);
/* sched_end_session - frees ss's slot and records its id for EndSessions
 * and for the next batch's end_ids. */
void sched_end_session(st_sched *s, sched_sess *ss);

#endif
