/* scheduler.c - sessions, admission, batches, results and deadlines (see
 * scheduler.h; the requests themselves are in sched_req.c, the routing of
 * sessions in sched_routes.c).
 *
 * State lives in three tables with fixed bounds (INV-6): session slots
 * (max_sessions, the KV slots every worker keeps), requests (at most
 * max_requests queued or running, plus as many finished ones kept for a
 * short TTL so that a client's last Poll can read them), and batches in
 * flight (max_in_flight). Lookups are linear scans: the tables are small,
 * and a scan has no hidden state to get wrong.
 *
 * Continuous batching. A batch is formed whenever fewer than `depth`
 * batches are in flight (depth = the pipeline's stage count): each stage
 * then has a batch to work on while the others work on theirs. Groups
 * stay disjoint (a session is in one batch at a time) and balanced: a
 * batch takes at most ceil(running sessions / depth) rows, so the
 * sessions of a batch that comes back form the next one and two batches
 * of 4 circulate rather than one of 7 and one of 1. Within a batch, the
 * ready decode sessions go first, longest-waiting first (so a budget or
 * row cap that leaves some out rotates who waits), then prefill chunks of
 * the oldest requests. A ready decode session left out of a batch counts
 * a missed step for its request: the starvation evidence Poll returns.
 *
 * Routes. With replicas, a stage's workers each hold the KV of their own
 * sessions, so a session is pinned to one route (a worker per stage) and a
 * batch is formed for one route only. A new session takes the route with
 * the fewest running sessions; a new plan re-pins every session evenly
 * (st_sched_set_routes; they re-prefill anyway). Each route may have
 * ceil(depth / routes) batches in flight and the next batch goes to the
 * route with the fewest, so the replicas of the bottleneck compute at the
 * same time. The row cap is per route: ceil(its running sessions / its
 * share of depth). With one route all of this is the plain pipeline.
 *
 * Admission is the KV budget: at most cap_sessions sessions (the plan's
 * max_sessions; every worker holds a KV slot per session for its layers,
 * reserved in its memory budget at Prepare), so the workers never need to
 * evict. Requests that find no slot wait in arrival order, bounded by
 * max_requests and each by its maximum queue wait. Ended sessions are
 * freed on the workers in band, by the end_ids of the next batch (which
 * every stage applies before binding that batch's rows, so a slot reused
 * at once is always free on every stage), and by EndSessions when no
 * batch follows.
 *
 * A session and its running request point at each other. A session in a
 * batch in flight is never freed or reused; a request that ends while its
 * session is in flight (a cancel) detaches when the batch comes back. A
 * fresh session (client session id 0) is ended with its request, a client
 * session stays idle for the next turn until its TTL or until its slot is
 * needed (least recently used first). Ended session ids are collected for
 * the coordinator to send EndSessions.
 *
 * Text (sched_req.c): each request has its own streaming detokenizer,
 * started at the start of the text and fed the prompt (whose text is
 * dropped), so the generated text continues exactly as `strata run`
 * prints it. text_off[i] is where token i's text starts; the flush of a
 * pending partial character at the end belongs to no token and is
 * delivered with `done`. */
#include "coordinator/sched/sched_impl.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

st_err st_sched_new(const st_sched_cfg *cfg, st_sched **out)
{
    *out = NULL;
    if (cfg->new_id == NULL && sodium_init() < 0) /* random ids (sched_new_id) */
        return st_err_sodium("sodium_init");
    if (cfg->n_ctx < 2 || cfg->chunk == 0 || cfg->max_batch_tokens == 0 || cfg->max_sessions == 0 ||
        cfg->max_requests == 0 || cfg->max_in_flight == 0 || cfg->n_vocab == 0)
        return st_errorf(ST_EINVAL,
                         "scheduler: n_ctx %u, chunk %u, max_batch_tokens %u, "
                         "max_sessions %u, max_requests %u, max_in_flight %u, n_vocab %u: each "
                         "must be positive (n_ctx >= 2)",
                         cfg->n_ctx, cfg->chunk, cfg->max_batch_tokens, cfg->max_sessions,
                         cfg->max_requests, cfg->max_in_flight, cfg->n_vocab);
    st_sched *s = calloc(1, sizeof *s);
    if (s == NULL)
        return st_errorf(ST_ENOMEM, "scheduler");
    s->cfg = *cfg;
    s->cap_req = 2 * (size_t)cfg->max_requests;
    s->cap_ended = 4 * (size_t)cfg->max_sessions;
    s->sess = calloc(cfg->max_sessions, sizeof *s->sess);
    s->req = calloc(s->cap_req, sizeof *s->req);
    s->batches = calloc(cfg->max_in_flight, sizeof *s->batches);
    s->ended = calloc(s->cap_ended, sizeof *s->ended);
    s->pend = calloc(s->cap_ended, sizeof *s->pend);
    s->pend_route = calloc(s->cap_ended, sizeof *s->pend_route);
    if (!s->sess || !s->req || !s->batches || !s->ended || !s->pend || !s->pend_route) {
        st_sched_free(s);
        return st_errorf(ST_ENOMEM, "scheduler tables");
    }
    for (uint32_t i = 0; i < cfg->max_in_flight; i++) {
        s->batches[i].b.rows = calloc(cfg->max_sessions, sizeof *s->batches[i].b.rows);
        s->batches[i].end = calloc(s->cap_ended, sizeof *s->batches[i].end);
        s->batches[i].b.end_ids = s->batches[i].end;
        if (s->batches[i].b.rows == NULL || s->batches[i].end == NULL) {
            st_sched_free(s);
            return st_errorf(ST_ENOMEM, "scheduler batches");
        }
    }
    s->next_req = cfg->id_base;
    s->cap_sessions = cfg->max_sessions;
    s->batch_tokens = cfg->max_batch_tokens;
    s->depth = cfg->max_in_flight;
    s->n_routes = 1;
    *out = s;
    return ST_OK;
}

st_err st_sched_set_limits(st_sched *s, uint32_t max_sessions, uint32_t max_batch_tokens,
                           uint32_t depth)
{
    if (max_sessions == 0 || max_batch_tokens == 0 || depth == 0)
        return st_errorf(ST_EINVAL,
                         "scheduler limits: max_sessions %u, max_batch_tokens %u, "
                         "depth %u: each must be positive",
                         max_sessions, max_batch_tokens, depth);
    const st_sched_cfg *c = &s->cfg;
    s->cap_sessions = max_sessions < c->max_sessions ? max_sessions : c->max_sessions;
    s->batch_tokens = max_batch_tokens < c->max_batch_tokens ? max_batch_tokens
                                                             : c->max_batch_tokens;
    s->depth = depth < c->max_in_flight ? depth : c->max_in_flight;
    return ST_OK;
}

void st_sched_free(st_sched *s)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < s->n_req; i++)
        sched_req_free(s->req[i]);
    if (s->sess)
        for (uint32_t i = 0; i < s->cfg.max_sessions; i++)
            free(s->sess[i].hist);
    if (s->batches)
        for (uint32_t i = 0; i < s->cfg.max_in_flight; i++) {
            free(s->batches[i].b.rows);
            free(s->batches[i].end);
        }
    free(s->sess);
    free(s->req);
    free(s->batches);
    free(s->ended);
    free(s->pend);
    free(s->pend_route);
    free(s);
}

/* ---- sessions ---- */

static sched_sess *sched_sess_by_id(st_sched *s, uint64_t id)
{
    for (uint32_t i = 0; i < s->cfg.max_sessions; i++)
        if (s->sess[i].used && s->sess[i].id == id)
            return &s->sess[i];
    return NULL;
}

/* sched_ring_put - appends id to a bounded list, forgetting the oldest
 * when full (a worker that misses an end evicts least recently used). */
static void sched_ring_put(uint64_t *v, size_t *n, size_t cap, uint64_t id)
{
    if (*n == cap) {
        memmove(v, v + 1, (cap - 1) * sizeof *v);
        (*n)--;
    }
    v[(*n)++] = id;
}

void sched_end_session(st_sched *s, sched_sess *ss)
{
    sched_ring_put(s->ended, &s->n_ended, s->cap_ended, ss->id);
    if (s->n_pend == s->cap_ended) { /* forget the oldest: the workers' LRU bounds them */
        memmove(s->pend, s->pend + 1, (s->cap_ended - 1) * sizeof *s->pend);
        memmove(s->pend_route, s->pend_route + 1, (s->cap_ended - 1) * sizeof *s->pend_route);
        s->n_pend--;
    }
    s->pend[s->n_pend] = ss->id;
    s->pend_route[s->n_pend++] = ss->route;
    ss->used = false;
    ss->req = NULL;
    ss->n_hist = ss->n_cached = 0;
    ss->client_id = 0;
}

/* sched_settle - after a session left a batch or its request ended:
 * detaches a finished request, ends a fresh session, idles a client one. */
void sched_settle(st_sched *s, sched_sess *ss, uint64_t now)
{
    if (!ss->used || ss->in_flight)
        return;
    if (ss->req && ss->req->state == RQ_DONE) {
        ss->req->sess = NULL;
        ss->req = NULL;
    }
    if (ss->req == NULL) {
        if (ss->client_id == 0)
            sched_end_session(s, ss);
        else
            ss->last_used_ns = now;
    }
}

/* sched_start - binds queued request r to session ss. The prompt becomes
 * the history; of what the session held, the longest common prefix that
 * the workers' KV still holds is kept (prefix reuse), always leaving at
 * least the last prompt id to feed (its logits give the first sample).
 * The RNG is seeded (the request's generation, sched_req.c, detokenized
 * the prompt when it was submitted). */
static void sched_start(st_sched *s, sched_req *r, sched_sess *ss, uint64_t now)
{
    uint32_t keep = 0;
    while (keep < ss->n_cached && keep < ss->n_hist && keep + 1 < r->n_prompt &&
           ss->hist[keep] == r->prompt[keep])
        keep++;
    memcpy(ss->hist, r->prompt, r->n_prompt * sizeof *r->prompt);
    ss->n_hist = r->n_prompt;
    ss->n_cached = keep;
    r->reused = keep;
    s->st.reused_tokens += keep;
    st_rng rng;
    st_rng_seed(&rng, r->sp.seed);
    memcpy(ss->rng, rng.s, sizeof ss->rng);
    ss->req = r;
    ss->last_batch = 0;
    r->sess = ss;
    r->state = RQ_RUNNING;
    r->progress_ns = now;
    r->start_ns = now;
}

/* sched_wanted - whether a queued request continues client session id. */
static bool sched_wanted(const st_sched *s, uint64_t client_id)
{
    if (client_id == 0)
        return false;
    for (size_t i = 0; i < s->n_req; i++)
        if (s->req[i]->state == RQ_QUEUED && s->req[i]->client_session == client_id)
            return true;
    return false;
}

/* sched_admit - gives queued requests (in arrival order) a session: their
 * client session when it is idle, else a new one while fewer than
 * cap_sessions exist (ending the least recently used idle client session
 * that no queued request continues, when none is free). A request that
 * finds no room waits, and so do the later ones that need a new session
 * (FIFO). */
static void sched_admit(st_sched *s, uint64_t now)
{
    uint32_t used = 0;
    for (uint32_t k = 0; k < s->cfg.max_sessions; k++)
        used += s->sess[k].used;
    bool full = false;
    for (size_t i = 0; i < s->n_req; i++) {
        sched_req *r = s->req[i];
        if (r->state != RQ_QUEUED)
            continue;
        sched_sess *ss = NULL;
        for (uint32_t k = 0; k < s->cfg.max_sessions && ss == NULL; k++) {
            sched_sess *c = &s->sess[k];
            if (c->used && r->client_session != 0 && c->client_id == r->client_session)
                ss = c;
        }
        if (ss != NULL) {
            if (ss->in_flight || ss->req) /* the previous turn is still out */
                continue;
            sched_start(s, r, ss, now);
            continue;
        }
        if (full)
            continue;
        if (used >= s->cap_sessions) {
            sched_sess *lru = NULL;
            for (uint32_t k = 0; k < s->cfg.max_sessions; k++) {
                sched_sess *c = &s->sess[k];
                if (c->used && c->req == NULL && !c->in_flight &&
                    (lru == NULL || c->last_used_ns < lru->last_used_ns) &&
                    !sched_wanted(s, c->client_id))
                    lru = c;
            }
            if (lru == NULL) {
                full = true; /* every session is busy: later new sessions wait too */
                continue;
            }
            sched_end_session(s, lru);
            s->st.sessions_evicted++;
            used--;
        }
        for (uint32_t k = 0; k < s->cfg.max_sessions && ss == NULL; k++)
            if (!s->sess[k].used)
                ss = &s->sess[k];
        if (ss == NULL) { /* cannot happen: used < cap_sessions <= max_sessions */
            full = true;
            continue;
        }
        if (ss->hist == NULL && (ss->hist = malloc(s->cfg.n_ctx * sizeof *ss->hist)) == NULL) {
            sched_finish(s, r, "error", ST_ENOMEM, "out of memory for a session", now);
            continue;
        }
        uint64_t sid = sched_new_id(s, ST_SCHED_ID_SESSION);
        if (sid == 0) {
            sched_finish(s, r, "error", ST_EINTERNAL,
                         "no new session id: the id generator "
                         "gave only ids in use",
                         now);
            continue;
        }
        ss->route = sched_least_loaded(s); /* before it counts itself */
        ss->used = true;
        ss->id = sid;
        ss->client_id = r->client_session;
        ss->n_hist = ss->n_cached = 0;
        ss->in_flight = 0;
        ss->route_kept = false;
        used++;
        sched_start(s, r, ss, now);
    }
}

/* ---- batches ---- */

static sched_batch *sched_batch_by_id(const st_sched *s, uint64_t id)
{
    for (uint32_t i = 0; i < s->cfg.max_in_flight; i++)
        if (s->batches[i].used && s->batches[i].b.id == id)
            return &s->batches[i];
    return NULL;
}

static void sched_add_row(st_sched_batch *b, uint64_t seq, sched_sess *ss, uint32_t n)
{
    st_sched_row *row = &b->rows[b->n_rows++];
    sched_req *r = ss->req;
    row->session_id = ss->id;
    row->pos = ss->n_cached;
    row->n_tok = n;
    row->tokens = ss->hist + ss->n_cached;
    row->sample = ss->n_cached + n == ss->n_hist;
    row->want_logits = row->sample && r->want_logits;
    row->sp = r->sp;
    memcpy(row->rng, ss->rng, sizeof row->rng);
    row->hist = NULL;
    row->n_hist = 0;
    if (row->sample && r->sp.repeat_penalty != 1.0f && r->sp.repeat_last_n > 0) {
        uint32_t k = (uint32_t)r->sp.repeat_last_n < ss->n_hist ? (uint32_t)r->sp.repeat_last_n
                                                                : ss->n_hist;
        row->hist = ss->hist + ss->n_hist - k;
        row->n_hist = k;
    }
    b->n_tokens += n;
    ss->in_flight = b->id;
    ss->last_batch = seq;
    r->steps++;
}

/* decode order: the session that has waited longest (oldest last batch)
 * first, then the older request */
static int sched_cmp_wait(const void *a, const void *b)
{
    const sched_sess *x = *(sched_sess *const *)a, *y = *(sched_sess *const *)b;
    if (x->last_batch != y->last_batch)
        return x->last_batch < y->last_batch ? -1 : 1;
    return x->req->id < y->req->id ? -1 : x->req->id > y->req->id;
}

static int sched_cmp_req(const void *a, const void *b)
{
    const sched_sess *x = *(sched_sess *const *)a, *y = *(sched_sess *const *)b;
    return x->req->id < y->req->id ? -1 : x->req->id > y->req->id;
}

/* sched_pick_route - the route of the next batch (see st_sched_form);
 * false when no route has a ready session and room in flight. */
static bool sched_pick_route(const st_sched *s, uint32_t *out)
{
    uint32_t inflight[ST_SCHED_MAX_ROUTES] = {0};
    uint64_t oldest[ST_SCHED_MAX_ROUTES] = {0};
    bool ready[ST_SCHED_MAX_ROUTES] = {false};
    for (uint32_t i = 0; i < s->cfg.max_in_flight; i++)
        if (s->batches[i].used && s->batches[i].b.route < s->n_routes)
            inflight[s->batches[i].b.route]++;
    for (uint32_t i = 0; i < s->cfg.max_sessions; i++) {
        const sched_sess *ss = &s->sess[i];
        if (!ss->used || ss->req == NULL || ss->req->state != RQ_RUNNING || ss->in_flight ||
            ss->route >= s->n_routes || sched_parked(s, ss))
            continue;
        if (!ready[ss->route] || ss->last_batch < oldest[ss->route])
            oldest[ss->route] = ss->last_batch;
        ready[ss->route] = true;
    }
    uint32_t share = (s->depth + s->n_routes - 1) / s->n_routes;
    bool found = false;
    for (uint32_t r = 0; r < s->n_routes; r++) {
        if (!ready[r] || inflight[r] >= share)
            continue;
        if (!found || inflight[r] < inflight[*out] ||
            (inflight[r] == inflight[*out] && oldest[r] < oldest[*out]))
            *out = r;
        found = true;
    }
    return found;
}

st_err st_sched_form(st_sched *s, uint64_t epoch, uint64_t now_ns, const st_sched_batch **out)
{
    *out = NULL;
    sched_admit(s, now_ns);
    sched_batch *slot = NULL;
    uint32_t busy = 0;
    for (uint32_t i = 0; i < s->cfg.max_in_flight; i++) {
        if (s->batches[i].used)
            busy++;
        else if (slot == NULL)
            slot = &s->batches[i];
    }
    uint32_t route = 0;
    if (slot == NULL || busy >= s->depth || !sched_pick_route(s, &route))
        return ST_OK;
    st_sched_batch *b = &slot->b;
    b->n_rows = 0;
    b->n_tokens = 0;
    b->n_end = 0;
    if ((b->id = sched_new_id(s, ST_SCHED_ID_BATCH)) == 0)
        return st_errorf(ST_EINTERNAL, "no new batch id: the id generator gave only ids in use");
    uint64_t seq = s->formed + 1;
    b->route = route;
    uint32_t budget = s->batch_tokens;
    sched_sess *dec[s->cfg.max_sessions], *pre[s->cfg.max_sessions];
    size_t n_dec = 0, n_pre = 0;
    uint32_t running = 0;
    for (uint32_t i = 0; i < s->cfg.max_sessions; i++) {
        sched_sess *ss = &s->sess[i];
        if (!ss->used || ss->req == NULL || ss->req->state != RQ_RUNNING || ss->route != route)
            continue;
        running++;
        if (ss->in_flight || sched_parked(s, ss))
            continue;
        if (ss->n_hist - ss->n_cached == 1)
            dec[n_dec++] = ss;
        else
            pre[n_pre++] = ss;
    }
    /* a balanced share of the route's running sessions: the route's other
     * batches in flight (or to be formed when they come back) hold the rest */
    uint32_t share = (s->depth + s->n_routes - 1) / s->n_routes;
    uint32_t cap_rows = (running + share - 1) / share;
    qsort(dec, n_dec, sizeof *dec, sched_cmp_wait);
    qsort(pre, n_pre, sizeof *pre, sched_cmp_req);
    size_t i = 0;
    for (; i < n_dec && b->n_rows < cap_rows && budget > 0; i++) { /* decode rows first */
        sched_add_row(b, seq, dec[i], 1);
        budget--;
    }
    for (; i < n_dec; i++) /* ready, left out: a missed step */
        dec[i]->req->missed++;
    for (size_t k = 0; k < n_pre && b->n_rows < cap_rows && budget > 0; k++) {
        uint32_t left = pre[k]->n_hist - pre[k]->n_cached; /* then prefill chunks, oldest first */
        uint32_t n = left < s->cfg.chunk ? left : s->cfg.chunk;
        if (n > budget)
            n = budget;
        sched_add_row(b, seq, pre[k], n);
        budget -= n;
    }
    if (b->n_rows == 0)
        return ST_OK;
    /* every pending end rides along (a repeated end is a no-op: ids are
     * never reused); it is done once a batch of its own route took it */
    memcpy(slot->end, s->pend, s->n_pend * sizeof *s->pend);
    b->n_end = (uint32_t)s->n_pend;
    size_t kept = 0;
    for (size_t k = 0; k < s->n_pend; k++)
        if (s->pend_route[k] != route && s->pend_route[k] < s->n_routes) {
            s->pend[kept] = s->pend[k];
            s->pend_route[kept++] = s->pend_route[k];
        }
    s->n_pend = kept;
    s->formed = seq;
    b->epoch = epoch;
    b->sent_ns = now_ns;
    b->deadline_ns = now_ns + s->cfg.step_timeout_ns;
    slot->used = true;
    s->st.batches++;
    s->route_batches[route]++;
    s->st.rows += b->n_rows;
    s->st.tokens += b->n_tokens;
    if (busy + 1 > s->st.peak_in_flight)
        s->st.peak_in_flight = busy + 1;
    *out = b;
    return ST_OK;
}

/* sched_release - takes every session of b out of flight and frees b. */
static void sched_release(st_sched *s, sched_batch *sb, uint64_t now)
{
    for (uint32_t i = 0; i < sb->b.n_rows; i++) {
        sched_sess *ss = sched_sess_by_id(s, sb->b.rows[i].session_id);
        if (ss && ss->in_flight == sb->b.id) {
            ss->in_flight = 0;
            sched_settle(s, ss, now);
        }
    }
    sb->used = false;
}

/* sched_keep - whether a request of a batch failed as retry says goes on
 * (and counts it). */
static bool sched_keep(sched_req *r, st_sched_retry retry)
{
    if (retry == ST_SCHED_REQUEUE && r->requeues < ST_SCHED_MAX_REQUEUES) {
        r->requeues++;
        return true;
    }
    if (retry == ST_SCHED_RETRY_ONCE && r->retries < 1) {
        r->retries++;
        return true;
    }
    return false;
}

st_err st_sched_fail(st_sched *s, uint64_t batch_id, st_err code, const char *msg,
                     st_sched_retry retry, uint64_t now_ns)
{
    sched_batch *sb = sched_batch_by_id(s, batch_id);
    if (sb == NULL)
        return st_errorf(ST_ENOENT, "batch %llu is not in flight", (unsigned long long)batch_id);
    for (uint32_t i = 0; i < sb->b.n_rows; i++) {
        sched_sess *ss = sched_sess_by_id(s, sb->b.rows[i].session_id);
        if (ss == NULL || ss->req == NULL || ss->req->state != RQ_RUNNING)
            continue;
        if (sched_keep(ss->req, retry)) {
            s->st.kv_reprefilled += ss->n_cached > 0;
            ss->n_cached = 0;
        } else {
            sched_finish(s, ss->req, "error", code, msg, now_ns);
        }
    }
    sched_release(s, sb, now_ns);
    return ST_OK;
}

void st_sched_fail_in_flight(st_sched *s, const bool *lost, uint32_t n_routes, st_err code,
                             const char *msg, st_sched_retry retry, uint64_t now_ns)
{
    for (uint32_t i = 0; i < s->cfg.max_in_flight; i++) {
        const sched_batch *sb = &s->batches[i];
        if (sb->used && (lost == NULL || sb->b.route >= n_routes || lost[sb->b.route]))
            st_sched_fail(s, sb->b.id, code, msg, retry, now_ns);
    }
}

/* sched_check - whether results match batch b's sample rows; sets the
 * detail on mismatch. */
static st_err sched_check(const st_sched *s, const st_sched_batch *b,
                          const st_sched_result_row *rows, size_t n_rows)
{
    for (uint32_t i = 0; i < b->n_rows; i++) {
        const st_sched_row *row = &b->rows[i];
        if (!row->sample)
            continue;
        const st_sched_result_row *rr = NULL;
        for (size_t k = 0; k < n_rows && rr == NULL; k++)
            if (rows[k].session_id == row->session_id)
                rr = &rows[k];
        if (rr == NULL)
            return st_errorf(ST_EPROTO, "result of batch %llu lacks session %llu",
                             (unsigned long long)b->id, (unsigned long long)row->session_id);
        if (rr->token < 0 || (uint32_t)rr->token >= s->cfg.n_vocab)
            return st_errorf(ST_EPROTO,
                             "result of batch %llu: token %d of session %llu is "
                             "outside the vocabulary of %u",
                             (unsigned long long)b->id, rr->token,
                             (unsigned long long)row->session_id, s->cfg.n_vocab);
        if (rr->n_rng != ST_RNG_WORDS)
            return st_errorf(ST_EPROTO,
                             "result of batch %llu: session %llu's RNG state has %zu "
                             "words, not %d",
                             (unsigned long long)b->id, (unsigned long long)row->session_id,
                             rr->n_rng, ST_RNG_WORDS);
        if (row->want_logits && rr->n_logits != s->cfg.n_vocab)
            return st_errorf(ST_EPROTO,
                             "result of batch %llu: session %llu has %zu logits, not "
                             "%u",
                             (unsigned long long)b->id, (unsigned long long)row->session_id,
                             rr->n_logits, s->cfg.n_vocab);
    }
    return ST_OK;
}

st_err st_sched_complete(st_sched *s, uint64_t batch_id, uint64_t epoch,
                         const st_sched_result_row *rows, size_t n_rows, uint64_t now_ns)
{
    sched_batch *sb = sched_batch_by_id(s, batch_id);
    if (sb == NULL)
        return st_errorf(ST_ENOENT, "result of batch %llu, which is not in flight",
                         (unsigned long long)batch_id);
    st_err e = ST_OK;
    if (epoch != sb->b.epoch)
        e = st_errorf(ST_EEPOCH, "result of batch %llu has epoch %llu; it was sent in epoch %llu",
                      (unsigned long long)batch_id, (unsigned long long)epoch,
                      (unsigned long long)sb->b.epoch);
    else
        e = sched_check(s, &sb->b, rows, n_rows);
    if (e != ST_OK) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s", st_errdetail());
        st_sched_fail(s, batch_id, e, msg, ST_SCHED_RETRY_ONCE, now_ns);
        return st_errorf(e, "%s", msg);
    }
    for (uint32_t i = 0; i < sb->b.n_rows; i++) {
        const st_sched_row *row = &sb->b.rows[i];
        sched_sess *ss = sched_sess_by_id(s, row->session_id);
        if (ss == NULL)
            continue;
        ss->n_cached = row->pos + row->n_tok;
        if (!row->sample || ss->req == NULL || ss->req->state != RQ_RUNNING)
            continue;
        for (size_t k = 0; k < n_rows; k++)
            if (rows[k].session_id == row->session_id) {
                sched_append(s, ss->req, ss, &rows[k], now_ns);
                break;
            }
    }
    sched_release(s, sb, now_ns);
    return ST_OK;
}

/* sched_since - ns from then to now; 0 when then is later (a time stamp
 * taken after the caller read now: while handling an event, a member's
 * loss, a result). Without it the difference wraps around and a request
 * or session just touched would look older than any TTL. */
static uint64_t sched_since(uint64_t now, uint64_t then) { return now > then ? now - then : 0; }

void st_sched_tick(st_sched *s, uint64_t now_ns, const char *stall)
{
    char msg[256];
    const st_sched_cfg *c = &s->cfg;
    for (uint32_t i = 0; i < c->max_in_flight; i++) {
        st_sched_batch *b = &s->batches[i].b;
        if (s->batches[i].used && now_ns >= b->deadline_ns) {
            snprintf(msg, sizeof msg,
                     "step deadline missed: batch %llu (epoch %llu) got no "
                     "result within %llu ms",
                     (unsigned long long)b->id, (unsigned long long)b->epoch,
                     (unsigned long long)(c->step_timeout_ns / 1000000));
            st_sched_fail(s, b->id, ST_ETIMEOUT, msg, ST_SCHED_RETRY_ONCE, now_ns);
        }
    }
    for (size_t i = 0; i < s->n_req; i++) {
        sched_req *r = s->req[i];
        bool stalled = sched_since(now_ns, r->progress_ns) >= c->queue_timeout_ns;
        bool gone = c->client_timeout_ns &&
                    sched_since(now_ns, r->polled_ns) >= c->client_timeout_ns;
        if (r->state != RQ_DONE && gone) {
            snprintf(msg, sizeof msg, "the client stopped polling for %llu ms",
                     (unsigned long long)(sched_since(now_ns, r->polled_ns) / 1000000));
            sched_finish(s, r, "cancelled", ST_ECANCELED, msg, now_ns);
            s->st.client_gone++;
            if (r->sess)
                sched_settle(s, r->sess, now_ns);
        } else if (r->state == RQ_QUEUED && sched_since(now_ns, r->created_ns) >= r->max_queue_ns) {
            snprintf(msg, sizeof msg, "waited %llu ms (the maximum queue wait) for %s",
                     (unsigned long long)(r->max_queue_ns / 1000000),
                     stall ? stall : "a free session slot");
            sched_finish(s, r, "error", ST_EBUSY, msg, now_ns);
            s->st.queue_expired++;
        } else if (r->state == RQ_RUNNING && stalled && stall && !r->sess->in_flight) {
            snprintf(msg, sizeof msg, "no progress for %llu ms: %s",
                     (unsigned long long)(c->queue_timeout_ns / 1000000), stall);
            sched_finish(s, r, "error", ST_EBUSY, msg, now_ns);
            sched_settle(s, r->sess, now_ns);
        }
    }
    for (size_t i = 0; i < s->n_req;) {
        sched_req *r = s->req[i];
        uint64_t dttl = c->delivered_ttl_ns ? c->delivered_ttl_ns : c->finished_ttl_ns;
        bool expired = sched_since(now_ns, r->done_ns) >= c->finished_ttl_ns ||
                       (r->delivered_ns && sched_since(now_ns, r->delivered_ns) >= dttl);
        if (r->state == RQ_DONE && expired && (r->sess == NULL || !r->sess->in_flight))
            sched_drop(s, i);
        else
            i++;
    }
    for (uint32_t i = 0; i < c->max_sessions; i++) {
        sched_sess *ss = &s->sess[i];
        if (ss->used && ss->req == NULL && !ss->in_flight &&
            sched_since(now_ns, ss->last_used_ns) >= c->idle_session_ttl_ns) {
            sched_end_session(s, ss);
            s->st.sessions_expired++;
        }
    }
}

void st_sched_shutdown(st_sched *s, const char *msg, uint64_t now_ns)
{
    for (size_t i = 0; i < s->n_req; i++)
        sched_finish(s, s->req[i], "error", ST_ECANCELED, msg, now_ns);
    for (uint32_t i = 0; i < s->cfg.max_in_flight; i++)
        if (s->batches[i].used)
            sched_release(s, &s->batches[i], now_ns);
}

size_t st_sched_take_ended(st_sched *s, uint64_t *ids, size_t cap)
{
    size_t n = s->n_ended < cap ? s->n_ended : cap;
    memcpy(ids, s->ended, n * sizeof *ids);
    memmove(s->ended, s->ended + n, (s->n_ended - n) * sizeof *s->ended);
    s->n_ended -= n;
    return n;
}

size_t st_sched_in_flight(const st_sched *s)
{
    size_t n = 0;
    for (uint32_t i = 0; i < s->cfg.max_in_flight; i++)
        n += s->batches[i].used;
    return n;
}

const st_sched_batch *st_sched_batch_find(const st_sched *s, uint64_t id)
{
    const sched_batch *sb = sched_batch_by_id(s, id);
    return sb != NULL ? &sb->b : NULL;
}

size_t st_sched_batches(const st_sched *s, const st_sched_batch **out, size_t cap)
{
    size_t n = 0;
    for (uint32_t i = 0; i < s->cfg.max_in_flight; i++)
        if (s->batches[i].used) {
            if (n < cap)
                out[n] = &s->batches[i].b;
            n++;
        }
    return n;
}

size_t st_sched_n_sessions(const st_sched *s)
{
    size_t n = 0;
    for (uint32_t i = 0; i < s->cfg.max_sessions; i++)
        n += s->sess[i].used;
    return n;
}

void st_sched_get_stats(const st_sched *s, st_sched_stats *st)
{
    *st = s->st;
    st->running = st->queued = st->sessions = st->idle_sessions = 0;
    for (size_t i = 0; i < s->n_req; i++) {
        st->running += s->req[i]->state == RQ_RUNNING;
        st->queued += s->req[i]->state == RQ_QUEUED;
    }
    for (uint32_t i = 0; i < s->cfg.max_sessions; i++) {
        st->sessions += s->sess[i].used;
        st->idle_sessions += s->sess[i].used && s->sess[i].req == NULL && !s->sess[i].in_flight;
    }
    st->cap_sessions = s->cap_sessions;
    st->depth = s->depth;
    st->max_batch_tokens = s->batch_tokens;
    st->chunk = s->cfg.chunk;
    st->in_flight = (uint32_t)st_sched_in_flight(s);
    st->routes = s->n_routes;
    memset(st->route_sessions, 0, sizeof st->route_sessions);
    for (uint32_t i = 0; i < s->cfg.max_sessions; i++)
        if (s->sess[i].used && s->sess[i].route < ST_SCHED_MAX_ROUTES)
            st->route_sessions[s->sess[i].route]++;
    memcpy(st->route_batches, s->route_batches, sizeof st->route_batches);
}
