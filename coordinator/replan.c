/* replan.c - plans and membership changes: choosing a plan
 * (coord_replan), the two-phase switch (Prepare to every stage worker,
 * Commit to every live worker once all are ready and no batch is in
 * flight), the replies, exclusions, and what losing a worker does.
 *
 * Rounds never overlap: a replan asked for while a round is in progress
 * is remembered and made when the round ends (committed or abandoned).
 * A plan identical to the serving one (same stages, workers, addresses
 * and settings) is not switched to, unless forced (a worker reported
 * another epoch): joining a spare costs nothing. A Refuse, an error reply
 * or a timeout excludes that worker for a while (membership.h) and plans
 * again with epoch + 1. A half-done commit or a lost stage worker marks
 * the serving plan broken: batches pause until the next commit, and the
 * batches in flight fail with one retry each, so their requests continue
 * from their token history on the next plan. */
#include "coordinator/coord_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/msg.h"

#define CO "coordinator"

/* ---- sending to workers ---- */

/* coord_rpc - sends m to worker id's control socket as an op tagged tag. */
st_err coord_rpc(st_coord *c, uint64_t id, const Strata__Msg *m, int timeout_ms,
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

void coord_commit_all(st_coord *c)
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

/* ---- replies ---- */

void coord_on_prepare_reply(st_coord *c, const st_op_tag *t, int rv, nng_msg *reply)
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

void coord_on_commit_reply(st_coord *c, const st_op_tag *t, int rv, nng_msg *reply)
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

