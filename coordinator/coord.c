/* coord.c - the coordinator's main thread: start-up, the event loop,
 * steps and their results, shutdown.
 *
 * One owner. Everything the coordinator knows (members, the committed
 * plan, the round in progress, the scheduler's requests and sessions) is
 * read and written by the thread that runs st_coord_run and by nobody
 * else. NNG's threads only complete aios whose callbacks push events into
 * the st_cq (net.c); the in-process HTTP gateway hands its requests to
 * the attachment (gateway.c), which this loop takes before the pump and
 * whose progress it pushes after it. This loop pops the events, acts, and
 * then runs its timers (heartbeat expiry, step deadlines, queue timeouts,
 * parked polls) and the pump (commit when ready and idle, form and send
 * the next batch, end finished sessions on the workers). With replicas a batch carries its
 * route (a replica index per stage) and goes to its route's stage-0
 * worker; each worker forwards it to the route's next worker. Nothing
 * blocks here: every outgoing
 * message is an asynchronous operation with a timeout.
 *
 * Plans live in replan.c (which) and switch.c (the switch); the requests of the
 * control socket in api.c; this file has start-up and shutdown, the loop,
 * the step pump (form a batch, send it to stage 0) and step results. A
 * result applies to the batch it names only if that batch is still in
 * flight; anything else (a batch that already failed, a forged or late
 * frame) is counted and dropped. And only if it comes from the batch's
 * route (coord_result_from_route): sampled rows from the data sender of
 * the route's last-stage worker, an error from any worker of the route
 * (the stage that failed it); a result of a batch in flight from any
 * other sender is counted (forged_results) and dropped. Batch and session
 * ids are random (scheduler.h), so a stranger cannot name a batch in
 * flight or a session to begin with. */
#include "coordinator/planner/concurrency.h"
#include "coordinator/coord_impl.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/net/netaddr.h"
#include "common/model/arch.h"
#include "common/base/clock.h"
#include "common/net/exposure.h"
#include "common/base/log.h"
#include "common/wire/msg.h"
#include "common/wire/step.h"
#include "coordinator/cluster/wire_live.h"

#define CO "coordinator"
/* envelope sender ids: start_ms << 8 | side (below 2^52), and random bits
 * above, so two coordinators started in the same ms under one key never
 * share a sender id, and so never an encryption nonce (envelope.h) */
#define COORD_SENDER_RAND_BITS 12
#define COORD_SENDER_RAND_SHIFT 52

uint64_t coord_now(void) { return st_now_ns(); }

st_coord_cfg st_coord_cfg_default(void)
{
    st_coord_cfg c;
    memset(&c, 0, sizeof c);
    c.listen = ST_TCP_LOOPBACK_ANY;
    c.min_workers = 1;
    c.wire = ST_WIRE_AUTO; /* each boundary its own dtype (docs/wire-format.md 6.1) */
    c.heartbeat_ms = 1000;
    c.heartbeat_timeout_ms = 3000;
    c.step_timeout_ms = 30000;
    c.prepare_timeout_ms = 60000;
    c.fetch_timeout_ms = 3600000; /* an hour: the worker bounds each chunk itself */
    c.queue_timeout_ms = 60000;
    c.chunk = 128;
    c.max_tokens = 256;
    c.max_sessions = 8;
    c.max_requests = 256;
    c.client_timeout_ms = 30000;
    c.session_ttl_ms = 600000;
    c.pipeline_depth = 0;
    c.slots = 64;
    return c;
}

bool coord_serving(const st_coord *c)
{
    return c->plans.has_committed && !c->plans.broken && c->plans.round.phase != ST_ROUND_READY &&
           c->plans.round.phase != ST_ROUND_COMMITTING;
}

/* ---- start-up and shutdown ---- */

static st_err coord_load_model(st_coord *c)
{
    st_err e = st_gguf_open(c->cfg.model_path, &c->model.gguf);
    if (e != ST_OK)
        return e;
    if ((e = st_minfo_from_gguf(c->model.gguf, &c->model.mi)) != ST_OK)
        return e;
    c->model.active_bytes = malloc((size_t)c->model.mi.n_layer * sizeof *c->model.active_bytes);
    if (c->model.active_bytes == NULL)
        return st_errorf(ST_ENOMEM, "active bytes of %u layers", c->model.mi.n_layer);
    for (uint32_t l = 0; l < c->model.mi.n_layer; l++)
        c->model.active_bytes[l] = st_minfo_layer_active_bytes(&c->model.mi, l);
    st_err te = st_tok_from_gguf(c->model.gguf, &c->model.tok);
    if (te == ST_OK) {
        c->model.eos = st_tok_eos(c->model.tok);
        for (int32_t i = 0; i < (int32_t)st_tok_n_vocab(c->model.tok); i++) {
            const char *p;
            size_t n;
            if (st_tok_piece(c->model.tok, i, &p, &n) == ST_OK && n > c->model.max_piece)
                c->model.max_piece = n;
        }
        if (st_tok_n_vocab(c->model.tok) != c->model.mi.n_vocab)
            st_log(ST_LOG_WARN, CO, "tokenizer has %zu ids, the model %u",
                   st_tok_n_vocab(c->model.tok), c->model.mi.n_vocab);
    } else {
        st_log(ST_LOG_WARN, CO, "no usable tokenizer (%s): only prompt ids are accepted",
               st_errmsg(te));
        uint32_t eos = 2;
        st_gguf_get_u32(c->model.gguf, st_arch_gkey_name(ST_AG_TOK_EOS), &eos);
        c->model.eos = (int32_t)eos;
    }
    /* the KV reserve of placement and status in the cache type the plan names */
    if ((e = st_kv_dtype_from_name(c->cfg.cache_type, &c->model.kv_dtype)) ||
        (e = st_kv_dtype_check(c->model.kv_dtype, c->model.mi.head_dim)))
        return e;
    c->model.mi.kv_bytes_per_token_layer =
        st_kv_bytes(1, 1, c->model.mi.kv_dim, c->model.kv_dtype);
    c->model.n_ctx = c->cfg.n_ctx ? c->cfg.n_ctx : c->model.mi.n_ctx_train;
    if (c->model.n_ctx < 2)
        return st_errorf(ST_EINVAL, "a context of %u tokens is too small", c->model.n_ctx);
    if (c->cfg.n_split) {
        uint64_t sum = 0;
        for (size_t i = 0; i < c->cfg.n_split; i++)
            sum += c->cfg.split[i];
        if (sum != c->model.mi.n_layer)
            return st_errorf(ST_EINVAL, "--split sums to %llu layers; the model has %u",
                             (unsigned long long)sum, c->model.mi.n_layer);
    }
    return ST_OK;
}

/* coord_results_max - the results socket's frame limit: the largest step
 * result a worker sends (COORD_RESULT_ROW_BYTES), at most COORD_MAX_FRAME.
 * NNG closes a connection that declares a longer frame before allocating
 * it, and a stranger's partial frames are bounded by this times the
 * socket's unauthenticated connections (common/net/pipe_gate.h). */
static size_t coord_results_max(uint32_t max_sessions, uint32_t n_vocab)
{
    size_t m = COORD_RESULT_SLACK +
               (size_t)max_sessions * (COORD_RESULT_ROW_BYTES + (size_t)n_vocab * sizeof(float));
    return m < COORD_MAX_FRAME ? m : COORD_MAX_FRAME;
}

st_err st_coord_open(const st_coord_cfg *cfg, st_coord **out)
{
    *out = NULL;
    st_coord *c = calloc(1, sizeof *c);
    if (c == NULL)
        return st_errorf(ST_ENOMEM, "coordinator");
    c->cfg = *cfg;
    st_err e = ST_OK;
    if (cfg->n_split) {
        if ((c->split = malloc(cfg->n_split * sizeof *c->split)) == NULL) {
            free(c);
            return st_errorf(ST_ENOMEM, "split");
        }
        memcpy(c->split, cfg->split, cfg->n_split * sizeof *c->split);
        c->cfg.split = c->split;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    c->start_ms = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
    if ((e = coord_load_model(c)) != ST_OK)
        goto fail;
    if (cfg->key_path) {
        if ((e = st_key_load(cfg->key_path, c->seal.key)) != ST_OK)
            goto fail;
        c->seal.keyed = true;
    }
    const uint8_t *key = c->seal.keyed ? c->seal.key : NULL;
    if (sodium_init() < 0) {
        e = st_err_sodium("sodium_init");
        goto fail;
    }
    if (!c->seal.keyed && cfg->local_key) { /* keyless still authenticated (exposure.h) */
        memcpy(c->seal.key, cfg->local_key, sizeof c->seal.key);
        c->seal.keyed = true;
        key = c->seal.key;
    }
    uint64_t sb = c->start_ms << 8 | (uint64_t)randombytes_uniform(1u << COORD_SENDER_RAND_BITS)
                                         << COORD_SENDER_RAND_SHIFT;
    bool enc = cfg->encrypt;
    if ((e = st_env_init_mode(&c->seal.rep, key, enc, sb | 1)) != ST_OK ||
        (e = st_env_init_mode(&c->seal.rpc, key, enc, sb | 2)) != ST_OK ||
        (e = st_env_init_mode(&c->seal.step, key, enc, sb | 3)) != ST_OK ||
        (e = st_env_init_mode(&c->seal.res, key, enc, sb | 4)) != ST_OK)
        goto fail;
    c->seal.ready = true;
    if ((e = st_cq_init(&c->q)) != ST_OK)
        goto fail;
    c->q_ready = true;
    if ((e = coord_gw_open(&c->q, c->model.tok, c->model.gguf, &c->gw)) != ST_OK)
        goto fail;
    if ((e = st_members_init(&c->ms, c->start_ms << 16)) != ST_OK)
        goto fail;
    st_sched_cfg sc = {
        .n_ctx = c->model.n_ctx,
        .chunk = cfg->chunk,
        .max_batch_tokens = cfg->max_tokens,
        .max_sessions = cfg->max_sessions,
        .max_requests = cfg->max_requests,
        .max_in_flight = COORD_MAX_DEPTH,
        .n_vocab = c->model.mi.n_vocab,
        .eos_id = c->model.eos,
        .step_timeout_ns = (uint64_t)cfg->step_timeout_ms * 1000000u,
        .queue_timeout_ns = (uint64_t)cfg->queue_timeout_ms * 1000000u,
        .finished_ttl_ns = COORD_FINISHED_TTL_NS,
        .delivered_ttl_ns = COORD_DELIVERED_TTL_NS,
        .idle_session_ttl_ns = (uint64_t)cfg->session_ttl_ms * 1000000u,
        .client_timeout_ns = (uint64_t)cfg->client_timeout_ms * 1000000u,
        .id_base = c->start_ms << 20,
        .tok = c->model.tok,
    };
    if ((e = st_sched_new(&sc, &c->sched)) != ST_OK)
        goto fail;
    if ((e = coord_parks_open(&c->parks, cfg->slots)) != ST_OK)
        goto fail;
    if ((e = coord_auth_open(c)) != ST_OK) /* credentials and owners (api_auth.c) */
        goto fail;
    c->plans.next_epoch = st_epoch_first(c->start_ms);
    snprintf(c->plans.error, sizeof c->plans.error, "waiting for %u worker(s) to join",
             cfg->min_workers);
    if ((e = st_net_open(&c->q, cfg->listen, cfg->results, cfg->slots,
                         coord_results_max(cfg->max_sessions, c->model.mi.n_vocab), &c->net)) !=
        ST_OK)
        goto fail;
    if (cfg->local_key && !cfg->key_path) { /* before the address is printed: no one waits */
        if ((e = st_local_key_path(st_net_ctl_addr(c->net), true, c->seal.local_key_path,
                                   sizeof c->seal.local_key_path)) != ST_OK ||
            (e = st_key_write(c->seal.local_key_path, c->seal.key)) != ST_OK) {
            c->seal.local_key_path[0] = '\0';
            goto fail;
        }
        st_log(ST_LOG_INFO, CO,
               "no --cluster-key: a generated key in %s authenticates every "
               "frame (local workers and the CLI read it)",
               c->seal.local_key_path);
    }
    if ((e = coord_i8gate_start(c)) != ST_OK) /* after the queue: its thread posts there */
        goto fail;
    printf("listening on %s\nresults on %s\n", st_net_ctl_addr(c->net),
           st_net_results_addr(c->net));
    fflush(stdout);
    st_log(ST_LOG_INFO, CO,
           "model %s: %u layers, %u ids, context %u, %s weights, %s KV cache; wire %s%s%s",
           cfg->model_path, c->model.mi.n_layer, c->model.mi.n_vocab, c->model.n_ctx,
           c->model.mi.dtype, st_dtype_info_of(c->model.kv_dtype)->name,
           st_wire_dtype_name(cfg->wire), cfg->zstd ? "+zstd" : "",
           !c->seal.keyed ? ""
           : cfg->encrypt ? ", cluster key set, frames encrypted"
                          : ", cluster key set");
    *out = c;
    return ST_OK;
fail:;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", st_errdetail());
    st_coord_close(c);
    return st_errorf(e, "%s", msg);
}

void coord_close_pushes(st_coord *c)
{
    for (uint32_t k = 0; k < ST_PLAN_MAX_REPLICAS; k++) {
        st_peer_close(c->plans.push[k]);
        c->plans.push[k] = NULL;
    }
}

void coord_retire_peer(st_coord *c, st_peer *p, uint64_t now)
{
    if (p == NULL)
        return;
    st_peer_cancel(p);
    if (c->peers.n_retired == ST_MEMBERS_MAX) { /* full: the oldest goes now */
        st_peer_close(c->peers.retired[0].peer);
        memmove(c->peers.retired, c->peers.retired + 1,
                (c->peers.n_retired - 1) * sizeof *c->peers.retired);
        c->peers.n_retired--;
    }
    c->peers.retired[c->peers.n_retired].peer = p;
    c->peers.retired[c->peers.n_retired].until = now + COORD_PEER_LINGER_NS;
    c->peers.n_retired++;
}

void coord_reap_peers(st_coord *c, uint64_t now)
{
    size_t k = 0;
    for (size_t i = 0; i < c->peers.n_retired; i++) {
        if (now >= c->peers.retired[i].until)
            st_peer_close(c->peers.retired[i].peer);
        else
            c->peers.retired[k++] = c->peers.retired[i];
    }
    c->peers.n_retired = k;
}

static void coord_close_peers(st_coord *c)
{
    for (size_t i = 0; i < c->ms.n; i++) {
        st_peer_close(c->ms.v[i].rpc);
        c->ms.v[i].rpc = NULL;
    }
    coord_reap_peers(c, UINT64_MAX);
    coord_close_pushes(c);
}

/* coord_drain_event - what shutdown does with an event: newcomers on the
 * control socket get an error, ended ops are freed, the rest dropped. */
static void coord_drain_event(st_coord *c, st_cq_event *ev)
{
    if (ev->kind == ST_CQ_CTL) {
        nng_msg_free(ev->msg);
        if (c->net)
            coord_api_reply_error(c, ev->slot, ST_ECLOSED, "the coordinator is shutting down");
        return;
    }
    if (ev->kind == ST_CQ_OP_DONE) {
        st_op_tag tag;
        st_net_op_finish(ev->op, &tag);
        c->peers.ops_out--;
    }
    if (ev->msg)
        nng_msg_free(ev->msg);
}

const char *st_coord_key_file(const st_coord *c)
{
    return c->seal.local_key_path[0] ? c->seal.local_key_path : NULL;
}

void st_coord_close(st_coord *c)
{
    if (c == NULL)
        return;
    st_cq_event ev;
    coord_i8gate_stop(c); /* before the queue goes: its thread posts there */
    coord_gw_stop(c);     /* the HTTP gateway's requests end (gateway.h) */
    if (c->sched && c->net) {
        uint64_t now = coord_now();
        c->stopping = true;
        st_sched_shutdown(c->sched, "the coordinator is shutting down", now);
        coord_api_parks(c, now, true);
        /* give the last replies a moment to leave */
        uint64_t until = now + 300ull * 1000000u;
        while (coord_now() < until)
            if (st_cq_pop(&c->q, &ev, COORD_LOOP_WAIT_NS))
                coord_drain_event(c, &ev);
    }
    st_log(ST_LOG_DEBUG, CO, "closing peers (%llu operations out)",
           (unsigned long long)c->peers.ops_out);
    coord_close_peers(c);
    st_log(ST_LOG_DEBUG, CO, "closing sockets");
    st_net_close(c->net);
    c->net = NULL;
    st_log(ST_LOG_DEBUG, CO, "sockets closed (%llu operations out)",
           (unsigned long long)c->peers.ops_out);
    bool queue_safe = true;
    if (c->q_ready) {
        /* every op ended by the closes above posts exactly one event */
        uint64_t until = coord_now() + 2000ull * 1000000u;
        while (c->peers.ops_out > 0 && coord_now() < until)
            if (st_cq_pop(&c->q, &ev, COORD_LOOP_WAIT_NS))
                coord_drain_event(c, &ev);
        while (st_cq_pop(&c->q, &ev, 0))
            coord_drain_event(c, &ev);
        queue_safe = c->peers.ops_out == 0;
        if (queue_safe)
            st_cq_fini(&c->q);
        else
            st_log(ST_LOG_WARN, CO, "%llu operations did not end; their queue is left behind",
                   (unsigned long long)c->peers.ops_out);
    }
    st_sched_free(c->sched);
    st_members_fini(&c->ms);
    st_plan_free(&c->plans.committed);
    coord_wire_live_free(c);
    st_round_abort(&c->plans.round);
    if (c->seal.ready) {
        st_env_fini(&c->seal.rep);
        st_env_fini(&c->seal.rpc);
        st_env_fini(&c->seal.step);
        st_env_fini(&c->seal.res);
    }
    st_tok_free(c->model.tok);
    st_minfo_free(&c->model.mi);
    free(c->model.active_bytes);
    st_gguf_close(c->model.gguf);
    coord_auth_close(c);
    coord_gw_close(c->gw);
    coord_parks_close(&c->parks);
    free(c->split);
    memset(c->seal.key, 0, sizeof c->seal.key);
    if (queue_safe)
        free(c);
}

/* ---- events ---- */

static void coord_on_op(st_coord *c, const st_op_tag *t, int rv, nng_msg *reply)
{
    c->seal.rpc.expect = t->req_seq; /* replies to workers' control are bound to requests */
    switch (t->what) {
    case ST_OP_PREPARE:
        coord_on_prepare_reply(c, t, rv, reply);
        break;
    case ST_OP_COMMIT:
        coord_on_commit_reply(c, t, rv, reply);
        break;
    case ST_OP_STEP:
        if (rv != 0) {
            char msg[200];
            snprintf(msg, sizeof msg, "batch %llu could not be sent to stage 0: %s",
                     (unsigned long long)t->batch_id, nng_strerror(rv));
            /* a cluster failure (ST_SCHED_REQUEUE): said here, or a stage 0
             * that takes nothing stalls its requests without a word (a
             * batch failed already, its plan broken, is not news) */
            st_err e = st_sched_fail(c->sched, t->batch_id, ST_ENNG, msg, ST_SCHED_REQUEUE,
                                     coord_now());
            if (e == ST_OK)
                st_log(ST_LOG_WARN, CO,
                       "%s (its requests re-fed: at most %d cluster failures in a row each)", msg,
                       ST_SCHED_MAX_REQUEUES);
        }
        break;
    case ST_OP_END_SESSIONS:
        if (rv != 0)
            st_log(ST_LOG_DEBUG, CO, "EndSessions to worker %llu: %s",
                   (unsigned long long)t->worker_id, nng_strerror(rv));
        break;
    }
}

/* coord_retry_of - how a batch that a worker failed with code goes on: a
 * stale epoch (a plan switch), a lost connection or a timeout (a lost or
 * paused peer), a session whose KV the worker does not hold (it restarted,
 * or a switch moved the session) are the cluster's failures, and its
 * requests are re-fed; anything else may be the request's, retried once. */
static st_sched_retry coord_retry_of(st_err code)
{
    switch (code) {
    case ST_EEPOCH:
    case ST_ECLOSED:
    case ST_ENNG:
    case ST_ETIMEOUT:
    case ST_ENOENT:
        return ST_SCHED_REQUEUE;
    default:
        return ST_SCHED_RETRY_ONCE;
    }
}

/* coord_result_from_route - whether result r from sender may apply (see
 * the file comment); a batch not in flight passes here and is counted
 * stale by the scheduler. A refused one is counted and logged. */
static bool coord_result_from_route(st_coord *c, const Strata__StepResult *r, uint64_t sender)
{
    const st_sched_batch *b = st_sched_batch_find(c->sched, r->batch_id);
    if (b == NULL)
        return true;
    bool rows = r->error == NULL;
    if (c->plans.has_committed && st_plan_route_sender(&c->plans.committed, b->route, sender, rows))
        return true;
    c->counters.forged_results++;
    st_log(ST_LOG_WARN, CO,
           "%s of batch %llu dropped: sender %llu (claiming worker %llu) is not "
           "%s of route %u",
           rows ? "result" : "error result", (unsigned long long)r->batch_id,
           (unsigned long long)sender, (unsigned long long)r->worker_id,
           rows ? "the last-stage worker" : "a worker", b->route);
    return false;
}

static void coord_on_result(st_coord *c, nng_msg *msg)
{
    Strata__Msg *m;
    uint64_t now = coord_now();
    uint64_t sender = 0;
    bool hello;
    st_err e = st_msg_unpack_link(&c->seal.res, ST_ENV_RESULT, msg, &m, &sender, &hello);
    st_net_judged(c->net, ST_CQ_RESULT, msg, e == ST_OK); /* its connection (pipe_gate.h) */
    if (e != ST_OK) {
        if (e != ST_EAUTH)
            c->counters.bad_msgs++;
        st_log(ST_LOG_WARN, CO, "result dropped: %s", st_errmsg(e));
        return;
    }
    if (hello) /* a worker's hello (msg.h st_msg_link_hello): its connection is proven */
        return;
    if (m->body_case != STRATA__MSG__BODY_RESULT) {
        c->counters.bad_msgs++;
        st_log(ST_LOG_WARN, CO, "unexpected %s on the results socket", st_msg_case_name(m));
        st_msg_free(m);
        return;
    }
    const Strata__StepResult *r = m->result;
    if (!coord_result_from_route(c, r, sender)) {
        st_msg_free(m);
        return;
    }
    if (r->error) {
        char text[300];
        snprintf(text, sizeof text, "worker %llu failed batch %llu: %s",
                 (unsigned long long)r->worker_id, (unsigned long long)r->batch_id,
                 r->error->message ? r->error->message : "");
        st_err code = (r->error->code > 0 && r->error->code < ST_ERR_COUNT) ? (st_err)r->error->code
                                                                            : ST_EPROTO;
        /* a batch failed already (its worker was lost, a switch refused its
         * packets still queued on the way) is only counted: not a new failure */
        bool late = st_sched_fail(c->sched, r->batch_id, code, text, coord_retry_of(code), now);
        c->counters.stale_results += late;
        st_log(ST_LOG_WARN, CO, "%s%s", text, late ? " (not in flight: dropped)" : "");
        st_msg_free(m);
        return;
    }
    size_t n = r->n_rows;
    st_sched_result_row *rows = calloc(n ? n : 1, sizeof *rows);
    if (rows == NULL) {
        st_msg_free(m);
        return;
    }
    for (size_t i = 0; i < n; i++)
        rows[i] = (st_sched_result_row){.session_id = r->rows[i]->session_id,
                                        .token = r->rows[i]->token,
                                        .rng = r->rows[i]->rng,
                                        .n_rng = r->rows[i]->n_rng,
                                        .logits = r->rows[i]->logits,
                                        .n_logits = r->rows[i]->n_logits};
    e = st_sched_complete(c->sched, r->batch_id, r->epoch, rows, n, now);
    if (e == ST_OK)
        c->counters.steps++;
    else if (e == ST_ENOENT)
        c->counters.stale_results++;
    else if (e == ST_EEPOCH)
        c->counters.refused_epoch++;
    if (e != ST_OK && e != ST_ENOENT)
        st_log(ST_LOG_WARN, CO, "result: %s", st_errmsg(e));
    free(rows);
    st_msg_free(m);
}

static void coord_handle(st_coord *c, st_cq_event *ev)
{
    switch (ev->kind) {
    case ST_CQ_CTL:
        coord_api_handle(c, ev->slot, ev->msg);
        break;
    case ST_CQ_RESULT:
        coord_on_result(c, ev->msg);
        nng_msg_free(ev->msg);
        st_net_results_rearm(c->net);
        break;
    case ST_CQ_OP_DONE: {
        st_op_tag tag;
        st_net_op_finish(ev->op, &tag);
        c->peers.ops_out--;
        coord_on_op(c, &tag, ev->rv, ev->msg);
        if (ev->msg)
            nng_msg_free(ev->msg);
        break;
    }
    case ST_CQ_I8GATE:
        coord_i8gate_done(c, ev->op);
        break;
    case ST_CQ_GATEWAY: /* a wake-up: coord_gw_take reads what came each turn */
        break;
    }
}

/* ---- the pump: steps and session ends ---- */

static st_err coord_send_batch(st_coord *c, const st_sched_batch *b)
{
    uint32_t route[c->plans.committed.n_stages ? c->plans.committed.n_stages : 1];
    for (uint32_t i = 0; i < c->plans.committed.n_stages; i++)
        route[i] = st_plan_route_worker(&c->plans.committed, b->route, i);
    st_peer *push = c->plans.push[route[0]];
    if (push == NULL)
        return st_errorf(ST_ECLOSED, "no connection to replica %u of stage 0 for batch %llu",
                         route[0], (unsigned long long)b->id);
    Strata__StepRow *rows = calloc(b->n_rows, sizeof *rows);
    Strata__StepRow **rp = calloc(b->n_rows, sizeof *rp);
    Strata__Sampling *sp = calloc(b->n_rows, sizeof *sp);
    nng_msg *msg = NULL;
    st_err e = ST_OK;
    if (!rows || !rp || !sp) {
        e = st_errorf(ST_ENOMEM, "step of %u rows", b->n_rows);
        goto out;
    }
    for (uint32_t i = 0; i < b->n_rows; i++) {
        const st_sched_row *r = &b->rows[i];
        strata__step_row__init(&rows[i]);
        st_sampling_to_pb(&r->sp, &sp[i]);
        rows[i].session_id = r->session_id;
        rows[i].pos = r->pos;
        rows[i].n_tokens = r->n_tok;
        rows[i].tokens = (int32_t *)r->tokens;
        rows[i].sample = r->sample;
        rows[i].sampling = &sp[i];
        rows[i].n_rng = ST_RNG_WORDS;
        rows[i].rng = (uint64_t *)r->rng;
        rows[i].n_history = r->n_hist;
        rows[i].history = (int32_t *)r->hist;
        rows[i].want_logits = r->want_logits;
        rp[i] = &rows[i];
    }
    Strata__StepMeta meta = STRATA__STEP_META__INIT;
    meta.epoch = b->epoch;
    meta.plan_hash.data = c->plans.committed.hash;
    meta.plan_hash.len = ST_PLAN_HASH_BYTES;
    meta.batch_id = b->id;
    meta.n_rows = b->n_rows;
    meta.rows = rp;
    meta.sent_ns = b->sent_ns;
    meta.n_end_sessions = b->n_end;
    meta.end_sessions = (uint64_t *)b->end_ids;
    if (c->plans.n_routes > 1) { /* without replicas the route stays empty (all zeros) */
        meta.n_route = c->plans.committed.n_stages;
        meta.route = route;
    }
    if ((e = st_step_pack(&c->seal.step, &meta, &msg)) != ST_OK)
        goto out;
    st_op_tag tag = {.what = ST_OP_STEP, .batch_id = b->id, .epoch = b->epoch};
    e = st_peer_start(push, &c->q, msg, (int)c->cfg.step_timeout_ms, &tag);
    msg = NULL;
    if (e == ST_OK)
        c->peers.ops_out++;
out:
    if (msg)
        nng_msg_free(msg);
    free(rows);
    free(rp);
    free(sp);
    return e;
}

static void coord_end_sessions(st_coord *c)
{
    uint64_t ids[512];
    size_t n = st_sched_take_ended(c->sched, ids, 512);
    if (n == 0 || !c->plans.has_committed)
        return;
    Strata__EndSessions es = STRATA__END_SESSIONS__INIT;
    es.n_session_ids = n;
    es.session_ids = ids;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_END_SESSIONS;
    m.end_sessions = &es;
    for (uint32_t i = 0; i < c->plans.committed.n_stages; i++)
        for (uint32_t k = 0; k < c->plans.committed.stages[i].n_workers; k++) {
            st_op_tag tag = {.what = ST_OP_END_SESSIONS,
                             .worker_id = c->plans.committed.stages[i].worker_ids[k]};
            coord_rpc(c, tag.worker_id, &m, 5000, &tag);
        }
}

/* coord_depth - the plan's pipeline depth by concurrency.h's rule from
 * the workers' capabilities (at most one batch per stage and route, so
 * the replicas of a stage work at the same time); why says how. */
static uint32_t coord_depth(st_coord *c, char *why, size_t cap)
{
    uint32_t cap_depth = c->plans.committed.n_stages * c->plans.n_routes;
    st_conc_worker *w = malloc((st_plan_n_workers(&c->plans.committed) + 1) * sizeof *w);
    if (w == NULL) {
        snprintf(why, cap, "out of memory: one batch per stage and route");
        return cap_depth;
    }
    size_t n = 0;
    for (uint32_t i = 0; i < c->plans.committed.n_stages; i++)
        for (uint32_t k = 0; k < c->plans.committed.stages[i].n_workers; k++) {
            const st_member *m = st_members_find(&c->ms,
                                                 c->plans.committed.stages[i].worker_ids[k]);
            if (m == NULL || m->join == NULL || m->join->join == NULL ||
                m->join->join->cap == NULL)
                continue; /* gone since: counts for nothing until the next plan */
            const Strata__Capability *cp = m->join->join->cap;
            w[n++] = (st_conc_worker){
                .name = cp->name,
                .host_id = cp->host_id.len == ST_HOST_ID_BYTES ? cp->host_id.data : NULL,
                .cpus = cp->cpus,
                .cores = cp->cores,
                .threads = cp->threads,
            };
        }
    uint32_t depth = st_conc_depth(w, n, cap_depth, why, cap);
    free(w);
    return depth;
}

/* coord_limits - gives the scheduler the serving plan's limits once per
 * epoch: its KV slots (max_sessions), tokens per batch, its routes, and
 * the pipeline depth (--pipeline-depth, else coord_depth). */
static void coord_limits(st_coord *c)
{
    if (c->limits_epoch == c->plans.committed.epoch)
        return;
    char *why = c->depth_why;
    snprintf(why, sizeof c->depth_why, "--pipeline-depth");
    uint32_t depth =
        c->cfg.pipeline_depth ? c->cfg.pipeline_depth : coord_depth(c, why, sizeof c->depth_why);
    if (depth > COORD_MAX_DEPTH)
        depth = COORD_MAX_DEPTH;
    st_err e = st_sched_set_routes(c->sched, c->plans.n_routes);
    if (e == ST_OK)
        e = st_sched_set_limits(c->sched, c->plans.committed.max_sessions,
                                c->plans.committed.max_tokens, depth ? depth : 1);
    if (e != ST_OK)
        st_log(ST_LOG_ERROR, CO, "epoch %llu: %s", (unsigned long long)c->plans.committed.epoch,
               st_errmsg(e));
    else
        st_log(ST_LOG_INFO, CO,
               "epoch %llu: %u sessions, %u tokens per batch, %u batches in "
               "flight (%s), %u route(s)",
               (unsigned long long)c->plans.committed.epoch, c->plans.committed.max_sessions,
               c->plans.committed.max_tokens, depth, why, c->plans.n_routes);
    c->limits_epoch = c->plans.committed.epoch;
}

static void coord_pump(st_coord *c, uint64_t now)
{
    if (c->plans.round.phase == ST_ROUND_READY && st_sched_in_flight(c->sched) == 0)
        coord_commit_all(c);
    if (coord_serving(c) && c->plans.push[0]) {
        coord_limits(c);
        for (;;) {
            const st_sched_batch *b;
            st_err e = st_sched_form(c->sched, c->plans.committed.epoch, now, &b);
            if (e != ST_OK || b == NULL)
                break;
            if ((e = coord_send_batch(c, b)) != ST_OK) {
                char msg[256];
                snprintf(msg, sizeof msg, "batch %llu not sent: %s", (unsigned long long)b->id,
                         st_errmsg(e));
                st_log(ST_LOG_WARN, CO,
                       "%s (its requests re-fed: at most %d cluster failures in a row each)", msg,
                       ST_SCHED_MAX_REQUEUES);
                st_sched_fail(c->sched, b->id, e, msg, ST_SCHED_REQUEUE, now);
                break;
            }
        }
    }
    coord_end_sessions(c);
}

/* coord_timers - the loop's deadlines. A heartbeat deadline counts time
 * the coordinator listened: when a turn comes COORD_STALL_NS late (the
 * process was descheduled, stopped or swapping, or one event took that
 * long), heartbeats sent meanwhile may not have reached its queue yet, so
 * every member's silence is shortened by the stall instead of the members
 * being declared lost for the coordinator's own pause. */
static void coord_timers(st_coord *c, uint64_t now)
{
    uint64_t lost[ST_MEMBERS_MAX];
    uint64_t gap = c->timers_ns != 0 && now > c->timers_ns ? now - c->timers_ns : 0;
    c->timers_ns = now;
    if (gap > COORD_STALL_NS) {
        st_log(ST_LOG_WARN, CO,
               "the coordinator's loop stalled for %llu ms: heartbeat deadlines "
               "moved by as much",
               (unsigned long long)(gap / 1000000u));
        st_members_pause(&c->ms, gap, now);
    }
    size_t n = st_members_expire(&c->ms, now, (uint64_t)c->cfg.heartbeat_timeout_ms * 1000000u,
                                 lost, ST_MEMBERS_MAX);
    for (size_t i = 0; i < n; i++) {
        st_member *m = st_members_find(&c->ms, lost[i]);
        coord_member_gone(c, lost[i], ST_MEMBER_LOST, m ? m->why : "heartbeat timeout");
    }
    st_members_gc(&c->ms, now, COORD_KEEP_GONE_NS);
    coord_reap_peers(c, now);
    for (size_t i = 0; i < c->ms.n; i++) {
        st_member *m = &c->ms.v[i];
        if (m->excluded_until != 0 && now >= m->excluded_until) {
            m->excluded_until = 0; /* its exclusion ended: try it again */
            if (m->life == ST_MEMBER_ALIVE)
                coord_replan(c, false, "an exclusion ended");
        }
    }
    const char *stall = NULL;
    char buf[400];
    if (!coord_serving(c) && c->plans.round.phase == ST_ROUND_IDLE) {
        snprintf(buf, sizeof buf, "a committed plan (%s)",
                 c->plans.error[0] ? c->plans.error : "the current plan lost a worker");
        stall = buf;
    }
    st_sched_tick(c->sched, now, stall);
}

void st_coord_set_weights(st_coord *c, st_weights *w) { c->weights = w; }

st_gw *st_coord_gateway(st_coord *c) { return c->gw; }

void st_coord_run(st_coord *c, volatile sig_atomic_t *stop)
{
    while (!*stop) {
        st_cq_event ev;
        if (st_cq_pop(&c->q, &ev, COORD_LOOP_WAIT_NS)) {
            coord_handle(c, &ev);
            while (st_cq_pop(&c->q, &ev, 0))
                coord_handle(c, &ev);
        }
        uint64_t now = coord_now();
        coord_timers(c, now);
        coord_auth_sweep(c);
        coord_gw_take(c, now);
        coord_pump(c, now);
        coord_api_parks(c, now, false);
        coord_gw_push(c, now);
        coord_gw_status(c, now);
    }
    coord_gw_stop(c); /* the HTTP gateway's requests end here (gateway.h) */
}
