/* coord.c - the coordinator's main thread: start-up, the event loop,
 * plans and their two-phase switch, steps and their results.
 *
 * One owner. Everything the coordinator knows (members, the committed
 * plan, the round in progress, the scheduler's requests and sessions) is
 * read and written by the thread that runs st_coord_run and by nobody
 * else. NNG's threads only complete aios whose callbacks push events into
 * the st_cq (net.c); this loop pops them, acts, and then runs its timers
 * (heartbeat expiry, step deadlines, queue timeouts, parked polls) and the
 * pump (commit when ready and idle, form and send the next batch, end
 * finished sessions on the workers). Nothing blocks here: every outgoing
 * message is an asynchronous operation with a timeout.
 *
 * Plans. A membership change asks for a new plan (coord_replan). While a
 * round is in progress the request is remembered and served when the
 * round ends, so rounds never overlap. A round sends Prepare to every
 * stage worker; all Ready -> wait until no batch is in flight (new batches
 * pause) -> Commit to every live worker -> all stage workers acknowledged
 * -> the plan is committed, every session's KV is forgotten (re-prefill
 * from history, nothing lost) and serving resumes. A Refuse, an error or a
 * timeout excludes that worker and plans again with epoch + 1. Losing a
 * stage worker fails the batches in flight with one retry each: the
 * requests continue on the next plan from their history. */
#include "coordinator/coord_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/msg.h"

#define CO "coordinator"

uint64_t coord_now(void) { return st_now_ns(); }

st_coord_cfg st_coord_cfg_default(void)
{
    st_coord_cfg c;
    memset(&c, 0, sizeof c);
    c.listen = "tcp://127.0.0.1:0";
    c.min_workers = 1;
    c.wire = ST_WIRE_F16;
    c.heartbeat_ms = 1000;
    c.heartbeat_timeout_ms = 3000;
    c.step_timeout_ms = 30000;
    c.prepare_timeout_ms = 60000;
    c.queue_timeout_ms = 60000;
    c.chunk = 128;
    c.max_tokens = 256;
    c.max_sessions = 8;
    c.max_requests = 256;
    c.slots = 64;
    return c;
}

bool coord_serving(const st_coord *c)
{
    return c->has_plan && !c->plan_broken && c->round.phase != ST_ROUND_READY &&
           c->round.phase != ST_ROUND_COMMITTING;
}

/* ---- start-up and shutdown ---- */

static st_err coord_load_model(st_coord *c)
{
    st_err e = st_gguf_open(c->cfg.model_path, &c->gguf);
    if (e != ST_OK)
        return e;
    if ((e = st_minfo_from_gguf(c->gguf, &c->mi)))
        return e;
    if (st_tok_from_gguf(c->gguf, &c->tok) == ST_OK) {
        c->eos = st_tok_eos(c->tok);
        for (int32_t i = 0; i < (int32_t)st_tok_n_vocab(c->tok); i++) {
            const char *p;
            size_t n;
            if (st_tok_piece(c->tok, i, &p, &n) == ST_OK && n > c->max_piece)
                c->max_piece = n;
        }
        if (st_tok_n_vocab(c->tok) != c->mi.n_vocab)
            st_log(ST_LOG_WARN, CO, "tokenizer has %zu ids, the model %u",
                   st_tok_n_vocab(c->tok), c->mi.n_vocab);
    } else {
        st_log(ST_LOG_WARN, CO, "no usable tokenizer (%s): only prompt ids are accepted",
               st_errmsg(ST_EFORMAT));
        uint32_t eos = 2;
        st_gguf_get_u32(c->gguf, "tokenizer.ggml.eos_token_id", &eos);
        c->eos = (int32_t)eos;
    }
    c->n_ctx = c->cfg.n_ctx ? c->cfg.n_ctx : c->mi.n_ctx_train;
    if (c->n_ctx < 2)
        return st_errorf(ST_EINVAL, "a context of %u tokens is too small", c->n_ctx);
    if (c->cfg.n_split) {
        uint64_t sum = 0;
        for (size_t i = 0; i < c->cfg.n_split; i++)
            sum += c->cfg.split[i];
        if (sum != c->mi.n_layer)
            return st_errorf(ST_EINVAL, "--split sums to %llu layers; the model has %u",
                             (unsigned long long)sum, c->mi.n_layer);
    }
    return ST_OK;
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
    if ((e = coord_load_model(c)))
        goto fail;
    if (cfg->key_path) {
        if ((e = st_key_load(cfg->key_path, c->key)))
            goto fail;
        c->keyed = true;
    }
    const uint8_t *key = c->keyed ? c->key : NULL;
    uint64_t sb = c->start_ms << 8;
    if ((e = st_env_init(&c->env_rep, key, sb | 1)) || (e = st_env_init(&c->env_rpc, key, sb | 2)) ||
        (e = st_env_init(&c->env_step, key, sb | 3)) || (e = st_env_init(&c->env_res, key, sb | 4)))
        goto fail;
    c->env_ready = true;
    if ((e = st_cq_init(&c->q)))
        goto fail;
    c->q_ready = true;
    if ((e = st_members_init(&c->ms, c->start_ms << 16)))
        goto fail;
    st_sched_cfg sc = {
        .n_ctx = c->n_ctx,
        .chunk = cfg->chunk,
        .max_batch_tokens = cfg->max_tokens,
        .max_sessions = cfg->max_sessions,
        .max_requests = cfg->max_requests,
        .max_in_flight = 1,
        .n_vocab = c->mi.n_vocab,
        .eos_id = c->eos,
        .step_timeout_ns = (uint64_t)cfg->step_timeout_ms * 1000000u,
        .queue_timeout_ns = (uint64_t)cfg->queue_timeout_ms * 1000000u,
        .finished_ttl_ns = 60ull * 1000000000u,
        .idle_session_ttl_ns = 600ull * 1000000000u,
        .id_base = c->start_ms << 20,
        .tok = c->tok,
    };
    if ((e = st_sched_new(&sc, &c->sched)))
        goto fail;
    c->max_parks = cfg->slots - cfg->slots / 4;
    if ((c->parks = calloc(c->max_parks ? c->max_parks : 1, sizeof *c->parks)) == NULL) {
        e = st_errorf(ST_ENOMEM, "parked polls");
        goto fail;
    }
    c->next_epoch = st_epoch_first(c->start_ms);
    snprintf(c->plan_error, sizeof c->plan_error, "waiting for %u worker(s) to join",
             cfg->min_workers);
    if ((e = st_net_open(&c->q, cfg->listen, cfg->results, cfg->slots, COORD_MAX_FRAME, &c->net)))
        goto fail;
    printf("listening on %s\nresults on %s\n", st_net_ctl_addr(c->net),
           st_net_results_addr(c->net));
    fflush(stdout);
    st_log(ST_LOG_INFO, CO, "model %s: %u layers, %u ids, context %u, %s weights; wire %s%s%s",
           cfg->model_path, c->mi.n_layer, c->mi.n_vocab, c->n_ctx, c->mi.dtype,
           st_wire_dtype_name(cfg->wire), cfg->zstd ? "+zstd" : "",
           c->keyed ? ", cluster key set" : "");
    *out = c;
    return ST_OK;
fail:;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", st_errdetail());
    st_coord_close(c);
    return st_errorf(e, "%s", msg);
}

static void coord_close_peers(st_coord *c)
{
    for (size_t i = 0; i < c->ms.n; i++) {
        st_peer_close(c->ms.v[i].rpc);
        c->ms.v[i].rpc = NULL;
    }
    st_peer_close(c->push);
    c->push = NULL;
}

/* coord_drain_event - what shutdown does with an event: newcomers on the
 * control socket get an error, ended ops are freed, the rest dropped. */
static void coord_drain_event(st_coord *c, st_cq_event *ev)
{
    if (ev->kind == ST_CQ_CTL) {
        nng_msg_free(ev->msg);
        if (c->net)
            st_api_reply_error(c, ev->slot, ST_ECLOSED, "the coordinator is shutting down");
        return;
    }
    if (ev->kind == ST_CQ_OP_DONE) {
        st_op_tag tag;
        st_net_op_finish(ev->op, &tag);
        c->ops_out--;
    }
    if (ev->msg)
        nng_msg_free(ev->msg);
}

void st_coord_close(st_coord *c)
{
    if (c == NULL)
        return;
    st_cq_event ev;
    if (c->sched && c->net) {
        uint64_t now = coord_now();
        c->stopping = true;
        st_sched_shutdown(c->sched, "the coordinator is shutting down", now);
        st_api_parks(c, now, true);
        /* give the last replies a moment to leave */
        uint64_t until = now + 300ull * 1000000u;
        while (coord_now() < until)
            if (st_cq_pop(&c->q, &ev, 20ull * 1000000u))
                coord_drain_event(c, &ev);
    }
    st_log(ST_LOG_DEBUG, CO, "closing peers (%llu operations out)", (unsigned long long)c->ops_out);
    coord_close_peers(c);
    st_log(ST_LOG_DEBUG, CO, "closing sockets");
    st_net_close(c->net);
    c->net = NULL;
    st_log(ST_LOG_DEBUG, CO, "sockets closed (%llu operations out)", (unsigned long long)c->ops_out);
    bool queue_safe = true;
    if (c->q_ready) {
        /* every op ended by the closes above posts exactly one event */
        uint64_t until = coord_now() + 2000ull * 1000000u;
        while (c->ops_out > 0 && coord_now() < until)
            if (st_cq_pop(&c->q, &ev, 20ull * 1000000u))
                coord_drain_event(c, &ev);
        while (st_cq_pop(&c->q, &ev, 0))
            coord_drain_event(c, &ev);
        queue_safe = c->ops_out == 0;
        if (queue_safe)
            st_cq_fini(&c->q);
        else
            st_log(ST_LOG_WARN, CO, "%llu operations did not end; their queue is left behind",
                   (unsigned long long)c->ops_out);
    }
    st_sched_free(c->sched);
    st_members_fini(&c->ms);
    st_plan_free(&c->plan);
    st_round_abort(&c->round);
    if (c->env_ready) {
        st_env_fini(&c->env_rep);
        st_env_fini(&c->env_rpc);
        st_env_fini(&c->env_step);
        st_env_fini(&c->env_res);
    }
    st_tok_free(c->tok);
    st_minfo_free(&c->mi);
    st_gguf_close(c->gguf);
    free(c->parks);
    free(c->split);
    memset(c->key, 0, sizeof c->key);
    if (queue_safe)
        free(c);
}

/* ---- sending to workers ---- */

/* coord_rpc - sends m to worker id's control socket as an op tagged tag. */
static st_err coord_rpc(st_coord *c, uint64_t id, const Strata__Msg *m, int timeout_ms,
                        const st_op_tag *tag)
{
    st_member *w = st_members_find(&c->ms, id);
    if (w == NULL || w->rpc == NULL || w->life != ST_MEMBER_ALIVE)
        return st_errorf(ST_ENOENT, "worker %llu is gone", (unsigned long long)id);
    nng_msg *msg;
    st_err e = st_msg_pack(&c->env_rpc, ST_ENV_CONTROL, m, &msg);
    if (e != ST_OK)
        return e;
    if ((e = st_peer_start(w->rpc, &c->q, msg, timeout_ms, tag)) == ST_OK)
        c->ops_out++;
    return e;
}

/* coord_exclude - takes worker id out of placement for good (it refused
 * or failed a plan) and ends the round. */
static void coord_exclude(st_coord *c, uint64_t id, const char *why)
{
    st_member *w = st_members_find(&c->ms, id);
    uint64_t now = coord_now();
    if (w)
        st_member_exclude(w, why, now);
    st_log(ST_LOG_WARN, CO, "worker %llu excluded from plans for %llu s: %s",
           (unsigned long long)id,
           w ? (unsigned long long)((w->excluded_until - now) / 1000000000u) : 0ull, why);
    if (c->round.phase == ST_ROUND_COMMITTING)
        c->plan_broken = true; /* some workers may have switched already */
    st_round_abort(&c->round);
    coord_replan(c, true, "a worker was excluded");
}

static void coord_prepare_all(st_coord *c)
{
    Strata__Plan *pb;
    st_err e = st_plan_to_pb(&c->round.plan, false, &pb);
    if (e != ST_OK) {
        st_log(ST_LOG_ERROR, CO, "plan: %s", st_errmsg(e));
        st_round_abort(&c->round);
        return;
    }
    Strata__Prepare pr = STRATA__PREPARE__INIT;
    pr.plan = pb;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_PREPARE;
    m.prepare = &pr;
    uint64_t epoch = c->round.plan.epoch;
    uint64_t failed = 0;
    char why[200] = "";
    for (uint32_t i = 0; i < c->round.plan.n_stages && failed == 0; i++) {
        st_op_tag tag = {.what = ST_OP_PREPARE, .worker_id = c->round.plan.stages[i].worker_id,
                         .epoch = epoch};
        if ((e = coord_rpc(c, tag.worker_id, &m, (int)c->cfg.prepare_timeout_ms, &tag))) {
            failed = tag.worker_id;
            snprintf(why, sizeof why, "Prepare of epoch %llu not sent: %s",
                     (unsigned long long)epoch, st_errmsg(e));
        }
    }
    st_plan_pb_free(pb);
    if (failed)
        coord_exclude(c, failed, why);
}

static void coord_commit_all(st_coord *c)
{
    st_round_start_commit(&c->round);
    Strata__Commit cm = STRATA__COMMIT__INIT;
    cm.epoch = c->round.plan.epoch;
    cm.plan_hash.data = c->round.plan.hash;
    cm.plan_hash.len = ST_PLAN_HASH_BYTES;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_COMMIT;
    m.commit = &cm;
    st_log(ST_LOG_INFO, CO, "committing epoch %llu", (unsigned long long)cm.epoch);
    for (size_t i = 0; i < c->round.n_peers; i++) {
        st_op_tag tag = {.what = ST_OP_COMMIT, .worker_id = c->round.peers[i].worker_id,
                         .epoch = cm.epoch};
        if (coord_rpc(c, tag.worker_id, &m, 10000, &tag) != ST_OK) {
            bool in_plan = c->round.peers[i].in_plan;
            st_round_on_ack(&c->round, tag.worker_id, false);
            if (in_plan) {
                coord_exclude(c, tag.worker_id, "Commit could not be sent");
                return;
            }
        }
    }
}

/* coord_committed - the round's plan becomes the serving plan. */
static void coord_committed(st_coord *c)
{
    st_plan_free(&c->plan);
    st_round_take(&c->round, &c->plan);
    c->has_plan = true;
    c->plan_broken = false;
    c->plan_error[0] = '\0';
    st_sched_forget_kv(c->sched);
    const char *addr0 = c->plan.stages[0].data_addr;
    if (c->push == NULL || strcmp(st_peer_url(c->push), addr0) != 0) {
        st_peer_close(c->push);
        c->push = NULL;
        st_err e = st_peer_open_push(addr0, &c->push);
        if (e != ST_OK) {
            st_log(ST_LOG_ERROR, CO, "stage 0 at %s: %s", addr0, st_errmsg(e));
            c->plan_broken = true;
        }
    }
    char desc[512];
    size_t off = 0;
    for (uint32_t i = 0; i < c->plan.n_stages && off < sizeof desc; i++)
        off += (size_t)snprintf(desc + off, sizeof desc - off, "%s[%u,%u)@%llu", i ? " " : "",
                                c->plan.stages[i].first, c->plan.stages[i].last,
                                (unsigned long long)c->plan.stages[i].worker_id);
    st_log(ST_LOG_INFO, CO, "epoch %llu committed: %s", (unsigned long long)c->plan.epoch, desc);
    if (c->replan_wanted)
        coord_replan(c, c->replan_force, "deferred");
}

void coord_replan(st_coord *c, bool force, const char *why)
{
    if (c->stopping)
        return;
    if (c->round.phase != ST_ROUND_IDLE) {
        c->replan_wanted = true;
        c->replan_force = c->replan_force || force;
        return;
    }
    force = force || c->replan_force;
    c->replan_wanted = c->replan_force = false;
    size_t n = 0;
    st_place_worker pw[ST_MEMBERS_MAX];
    uint64_t ids[ST_MEMBERS_MAX];
    uint64_t now = coord_now();
    for (size_t i = 0; i < c->ms.n; i++) {
        st_member *m = &c->ms.v[i];
        if (!st_member_placeable(m, now))
            continue;
        const Strata__Capability *cap = m->join->join->cap;
        pw[n] = (st_place_worker){.id = m->id, .mem_budget = cap->memory_budget,
                                  .speed = st_member_speed(m, c->mi.dtype), .spare = cap->spare};
        ids[n++] = m->id;
    }
    if (!c->has_plan && n < c->cfg.min_workers) {
        snprintf(c->plan_error, sizeof c->plan_error, "waiting for workers: %zu of %u joined", n,
                 c->cfg.min_workers);
        return;
    }
    st_place_model pm = {.n_layer = c->mi.n_layer, .layer_bytes = c->mi.layer_bytes,
                         .embd_bytes = c->mi.embd_bytes, .head_bytes = c->mi.head_bytes,
                         .kv_bytes_per_token_layer = c->mi.kv_bytes_per_token_layer,
                         .kv_tokens = (uint64_t)c->n_ctx * c->cfg.max_sessions};
    st_place_opts po = {.split = c->cfg.split, .n_split = c->cfg.n_split};
    st_place_stage st[ST_MEMBERS_MAX];
    size_t ns = 0;
    st_err e = st_place(&pm, pw, n, &po, st, &ns);
    if (e != ST_OK) {
        if (strcmp(c->plan_error, st_errdetail()) != 0)
            st_log(ST_LOG_WARN, CO, "%s", st_errmsg(e));
        snprintf(c->plan_error, sizeof c->plan_error, "%s", st_errdetail());
        return;
    }
    st_plan p;
    memset(&p, 0, sizeof p);
    if ((p.stages = calloc(ns, sizeof *p.stages)) == NULL) {
        snprintf(c->plan_error, sizeof c->plan_error, "out of memory for a plan");
        return;
    }
    p.n_stages = (uint32_t)ns;
    for (size_t i = 0; i < ns; i++) {
        const st_member *m = st_members_find(&c->ms, ids[st[i].worker]);
        p.stages[i].first = st[i].first;
        p.stages[i].last = st[i].last;
        p.stages[i].worker_id = m->id;
        snprintf(p.stages[i].data_addr, sizeof p.stages[i].data_addr, "%s",
                 m->join->join->cap->data_addr);
    }
    memcpy(p.model_id, c->mi.model_id, sizeof p.model_id);
    p.zstd = c->cfg.zstd;
    snprintf(p.wire, sizeof p.wire, "%s", st_wire_dtype_name(c->cfg.wire));
    snprintf(p.result_addr, sizeof p.result_addr, "%s", st_net_results_addr(c->net));
    if (c->cfg.advertise) {
        const char *colon = strrchr(p.result_addr + 6, ':');
        char port[16];
        snprintf(port, sizeof port, "%s", colon ? colon : "");
        snprintf(p.result_addr, sizeof p.result_addr, "tcp://%s%s", c->cfg.advertise, port);
    }
    p.n_layer = c->mi.n_layer;
    p.max_tokens = c->cfg.max_tokens;
    p.n_ctx = c->n_ctx;
    p.max_sessions = c->cfg.max_sessions;
    p.incarnation = c->start_ms;
    if (!force && c->has_plan && !c->plan_broken && st_plan_same_layout(&p, &c->plan)) {
        st_plan_free(&p);
        return;
    }
    p.epoch = c->next_epoch++;
    if ((e = st_plan_seal(&p))) {
        st_log(ST_LOG_ERROR, CO, "plan hash: %s", st_errmsg(e));
        st_plan_free(&p);
        return;
    }
    uint64_t others[ST_MEMBERS_MAX];
    size_t no = 0;
    for (size_t i = 0; i < c->ms.n; i++)
        if (c->ms.v[i].life == ST_MEMBER_ALIVE && st_plan_stage_of(&p, c->ms.v[i].id) < 0)
            others[no++] = c->ms.v[i].id;
    st_log(ST_LOG_INFO, CO, "preparing epoch %llu (%u stages) because %s",
           (unsigned long long)p.epoch, p.n_stages, why);
    if ((e = st_round_begin(&c->round, &p, others, no, coord_now()))) {
        st_plan_free(&p);
        return;
    }
    coord_prepare_all(c);
}

void coord_member_gone(st_coord *c, uint64_t id, st_member_life life, const char *why)
{
    st_member *m = st_members_find(&c->ms, id);
    if (m == NULL)
        return;
    if (m->life == ST_MEMBER_ALIVE)
        st_members_mark(m, life, why, coord_now());
    st_peer_close(m->rpc);
    m->rpc = NULL;
    st_log(ST_LOG_WARN, CO, "worker %llu %s: %s", (unsigned long long)id,
           life == ST_MEMBER_LOST ? "lost" : "left", why);
    if (c->has_plan && st_plan_stage_of(&c->plan, id) >= 0 && !c->plan_broken) {
        char msg[256];
        snprintf(msg, sizeof msg, "worker %llu of stage %d is gone (%s)", (unsigned long long)id,
                 st_plan_stage_of(&c->plan, id), why);
        c->plan_broken = true;
        st_sched_fail_all_in_flight(c->sched, ST_ECLOSED, msg, true, coord_now());
    }
    if (c->round.phase != ST_ROUND_IDLE && st_round_find(&c->round, id)) {
        st_round_peer *p = st_round_find(&c->round, id);
        if (p->in_plan) {
            if (c->round.phase == ST_ROUND_COMMITTING)
                c->plan_broken = true;
            st_log(ST_LOG_WARN, CO, "epoch %llu abandoned: worker %llu is gone",
                   (unsigned long long)c->round.plan.epoch, (unsigned long long)id);
            st_round_abort(&c->round);
        } else if (st_round_on_ack(&c->round, id, false)) {
            coord_committed(c);
        }
    }
    coord_replan(c, false, "a worker left");
}

/* ---- events ---- */

static void coord_on_prepare_reply(st_coord *c, const st_op_tag *t, int rv, nng_msg *reply)
{
    if (c->round.phase != ST_ROUND_PREPARING || t->epoch != c->round.plan.epoch)
        return; /* an abandoned round */
    char why[240];
    if (rv != 0) {
        snprintf(why, sizeof why, "Prepare of epoch %llu: %s", (unsigned long long)t->epoch,
                 nng_strerror(rv));
        coord_exclude(c, t->worker_id, why);
        return;
    }
    Strata__Msg *m;
    st_err e = st_msg_unpack(&c->env_rpc, ST_ENV_CONTROL, reply, &m, NULL);
    if (e != ST_OK) {
        snprintf(why, sizeof why, "bad reply to Prepare: %s", st_errmsg(e));
    } else if (m->body_case == STRATA__MSG__BODY_READY) {
        e = st_round_on_ready(&c->round, t->worker_id, m->ready->epoch, m->ready->resident_bytes);
        snprintf(why, sizeof why, "Ready: %s", st_errmsg(e));
    } else if (m->body_case == STRATA__MSG__BODY_REFUSE) {
        e = ST_EPROTO;
        snprintf(why, sizeof why, "refused epoch %llu: %s", (unsigned long long)t->epoch,
                 m->refuse->reason ? m->refuse->reason : "");
    } else if (m->body_case == STRATA__MSG__BODY_ERROR) {
        e = ST_EPROTO;
        snprintf(why, sizeof why, "Prepare of epoch %llu: error %u: %s",
                 (unsigned long long)t->epoch, m->error->code,
                 m->error->message ? m->error->message : "");
    } else {
        e = ST_EPROTO;
        snprintf(why, sizeof why, "unexpected %s in reply to Prepare", st_msg_case_name(m));
    }
    st_msg_free(m);
    if (e != ST_OK)
        coord_exclude(c, t->worker_id, why);
    else
        st_log(ST_LOG_INFO, CO, "worker %llu ready for epoch %llu", (unsigned long long)t->worker_id,
               (unsigned long long)t->epoch);
}

static void coord_on_commit_reply(st_coord *c, const st_op_tag *t, int rv, nng_msg *reply)
{
    if (c->round.phase != ST_ROUND_COMMITTING || t->epoch != c->round.plan.epoch)
        return;
    bool ok = false;
    char why[240];
    snprintf(why, sizeof why, "Commit of epoch %llu: %s", (unsigned long long)t->epoch,
             rv ? nng_strerror(rv) : "bad reply");
    if (rv == 0) {
        Strata__Msg *m;
        st_err e = st_msg_unpack(&c->env_rpc, ST_ENV_CONTROL, reply, &m, NULL);
        if (e == ST_OK) {
            ok = m->body_case != STRATA__MSG__BODY_ERROR && m->body_case != STRATA__MSG__BODY_REFUSE;
            if (m->body_case == STRATA__MSG__BODY_ERROR)
                snprintf(why, sizeof why, "Commit of epoch %llu: error %u: %s",
                         (unsigned long long)t->epoch, m->error->code,
                         m->error->message ? m->error->message : "");
            st_msg_free(m);
        }
    }
    st_round_peer *p = st_round_find(&c->round, t->worker_id);
    bool in_plan = p && p->in_plan;
    bool done = st_round_on_ack(&c->round, t->worker_id, ok);
    if (!ok && in_plan) {
        coord_exclude(c, t->worker_id, why);
        return;
    }
    if (!ok)
        st_log(ST_LOG_WARN, CO, "spare worker %llu: %s", (unsigned long long)t->worker_id, why);
    if (done)
        coord_committed(c);
}

static void coord_on_op(st_coord *c, const st_op_tag *t, int rv, nng_msg *reply)
{
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
            st_sched_fail(c->sched, t->batch_id, ST_ENNG, msg, true, coord_now());
        }
        break;
    case ST_OP_END_SESSIONS:
        if (rv != 0)
            st_log(ST_LOG_DEBUG, CO, "EndSessions to worker %llu: %s",
                   (unsigned long long)t->worker_id, nng_strerror(rv));
        break;
    }
}

static void coord_on_result(st_coord *c, nng_msg *msg)
{
    Strata__Msg *m;
    uint64_t now = coord_now();
    st_err e = st_msg_unpack(&c->env_res, ST_ENV_RESULT, msg, &m, NULL);
    if (e != ST_OK) {
        if (e != ST_EAUTH)
            c->bad_msgs++;
        st_log(ST_LOG_WARN, CO, "result dropped: %s", st_errmsg(e));
        return;
    }
    if (m->body_case != STRATA__MSG__BODY_RESULT) {
        c->bad_msgs++;
        st_log(ST_LOG_WARN, CO, "unexpected %s on the results socket", st_msg_case_name(m));
        st_msg_free(m);
        return;
    }
    const Strata__StepResult *r = m->result;
    if (r->error) {
        char text[300];
        snprintf(text, sizeof text, "worker %llu failed batch %llu: %s",
                 (unsigned long long)r->worker_id, (unsigned long long)r->batch_id,
                 r->error->message ? r->error->message : "");
        st_err code = (r->error->code > 0 && r->error->code < ST_ERR_COUNT) ? (st_err)r->error->code
                                                                            : ST_EPROTO;
        st_log(ST_LOG_WARN, CO, "%s", text);
        if (st_sched_fail(c->sched, r->batch_id, code, text, true, now) != ST_OK)
            c->stale_results++;
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
        c->steps++;
    else if (e == ST_ENOENT)
        c->stale_results++;
    else if (e == ST_EEPOCH)
        c->refused_epoch++;
    if (e != ST_OK && e != ST_ENOENT)
        st_log(ST_LOG_WARN, CO, "result: %s", st_errmsg(e));
    free(rows);
    st_msg_free(m);
}

static void coord_handle(st_coord *c, st_cq_event *ev)
{
    switch (ev->kind) {
    case ST_CQ_CTL:
        st_api_handle(c, ev->slot, ev->msg);
        break;
    case ST_CQ_RESULT:
        coord_on_result(c, ev->msg);
        nng_msg_free(ev->msg);
        st_net_results_rearm(c->net);
        break;
    case ST_CQ_OP_DONE: {
        st_op_tag tag;
        st_net_op_finish(ev->op, &tag);
        c->ops_out--;
        coord_on_op(c, &tag, ev->rv, ev->msg);
        if (ev->msg)
            nng_msg_free(ev->msg);
        break;
    }
    }
}

/* ---- the pump: steps and session ends ---- */

static st_err coord_send_batch(st_coord *c, const st_sched_batch *b)
{
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
        strata__sampling__init(&sp[i]);
        sp[i].temp = r->sp.temp;
        sp[i].top_k = r->sp.top_k;
        sp[i].top_p = r->sp.top_p;
        sp[i].min_p = r->sp.min_p;
        sp[i].repeat_penalty = r->sp.repeat_penalty;
        sp[i].repeat_last_n = r->sp.repeat_last_n;
        sp[i].seed = r->sp.seed;
        rows[i].session_id = r->session_id;
        rows[i].pos = r->pos;
        rows[i].n_tok = r->n_tok;
        rows[i].n_tokens = r->n_tok;
        rows[i].tokens = (int32_t *)r->tokens;
        rows[i].sample = r->sample;
        rows[i].sampling = &sp[i];
        rows[i].n_rng = 4;
        rows[i].rng = (uint64_t *)r->rng;
        rows[i].n_history = r->n_hist;
        rows[i].history = (int32_t *)r->hist;
        rows[i].want_logits = r->want_logits;
        rp[i] = &rows[i];
    }
    Strata__StepMeta meta = STRATA__STEP_META__INIT;
    meta.epoch = b->epoch;
    meta.plan_hash.data = c->plan.hash;
    meta.plan_hash.len = ST_PLAN_HASH_BYTES;
    meta.batch_id = b->id;
    meta.n_rows = b->n_rows;
    meta.rows = rp;
    meta.sent_ns = b->sent_ns;
    size_t len = strata__step_meta__get_packed_size(&meta);
    size_t body = 4 + len;
    int rv = nng_msg_alloc(&msg, st_env_size(&c->env_step, body));
    if (rv != 0) {
        msg = NULL;
        e = st_err_nng(rv, "step message");
        goto out;
    }
    uint8_t *buf = nng_msg_body(msg);
    for (int i = 0; i < 4; i++)
        buf[ST_ENV_HDR + i] = (uint8_t)(len >> (8 * i));
    strata__step_meta__pack(&meta, buf + ST_ENV_HDR + 4);
    if ((e = st_env_seal(&c->env_step, ST_ENV_STEP, buf, body)))
        goto out;
    st_op_tag tag = {.what = ST_OP_STEP, .batch_id = b->id, .epoch = b->epoch};
    e = st_peer_start(c->push, &c->q, msg, (int)c->cfg.step_timeout_ms, &tag);
    msg = NULL;
    if (e == ST_OK)
        c->ops_out++;
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
    if (n == 0 || !c->has_plan)
        return;
    Strata__EndSessions es = STRATA__END_SESSIONS__INIT;
    es.n_session_ids = n;
    es.session_ids = ids;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_END_SESSIONS;
    m.end_sessions = &es;
    for (uint32_t i = 0; i < c->plan.n_stages; i++) {
        st_op_tag tag = {.what = ST_OP_END_SESSIONS, .worker_id = c->plan.stages[i].worker_id};
        coord_rpc(c, tag.worker_id, &m, 5000, &tag);
    }
}

static void coord_pump(st_coord *c, uint64_t now)
{
    if (c->round.phase == ST_ROUND_READY && st_sched_in_flight(c->sched) == 0)
        coord_commit_all(c);
    if (coord_serving(c) && c->push) {
        for (;;) {
            const st_sched_batch *b;
            st_err e = st_sched_form(c->sched, c->plan.epoch, now, &b);
            if (e != ST_OK || b == NULL)
                break;
            if ((e = coord_send_batch(c, b))) {
                char msg[256];
                snprintf(msg, sizeof msg, "batch %llu not sent: %s", (unsigned long long)b->id,
                         st_errmsg(e));
                st_sched_fail(c->sched, b->id, e, msg, true, now);
                break;
            }
        }
    }
    coord_end_sessions(c);
}

static void coord_timers(st_coord *c, uint64_t now)
{
    uint64_t lost[ST_MEMBERS_MAX];
    size_t n = st_members_expire(&c->ms, now, (uint64_t)c->cfg.heartbeat_timeout_ms * 1000000u,
                                 lost, ST_MEMBERS_MAX);
    for (size_t i = 0; i < n; i++) {
        st_member *m = st_members_find(&c->ms, lost[i]);
        coord_member_gone(c, lost[i], ST_MEMBER_LOST, m ? m->why : "heartbeat timeout");
    }
    st_members_gc(&c->ms, now, COORD_KEEP_GONE_NS);
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
    if (!coord_serving(c) && c->round.phase == ST_ROUND_IDLE) {
        snprintf(buf, sizeof buf, "a committed plan (%s)",
                 c->plan_error[0] ? c->plan_error : "the current plan lost a worker");
        stall = buf;
    }
    st_sched_tick(c->sched, now, stall);
}

void st_coord_run(st_coord *c, volatile sig_atomic_t *stop)
{
    while (!*stop) {
        st_cq_event ev;
        if (st_cq_pop(&c->q, &ev, 20ull * 1000000u)) {
            coord_handle(c, &ev);
            while (st_cq_pop(&c->q, &ev, 0))
                coord_handle(c, &ev);
        }
        uint64_t now = coord_now();
        coord_timers(c, now);
        coord_pump(c, now);
        st_api_parks(c, now, false);
    }
}
