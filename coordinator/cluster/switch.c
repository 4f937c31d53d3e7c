/* switch.c - the two-phase switch from the serving plan to the plan of
 * a round (coordinator/cluster/switch.h): Prepare to every live worker (a worker
 * takes no Commit without its Prepare; those the new plan leaves out
 * answer at once and become spares, and their answers hold nothing up;
 * a streaming stage worker's also names the members serving its chunks,
 * chunk_src.h),
 * Commit to every live worker once every stage worker is ready and no
 * batch is in flight, their replies, and what a switch leaves behind (the serving plan,
 * the PUSH sockets to stage 0, the sessions that keep their KV, the
 * workers whose drain it completed). Which plan to switch to, and when, is
 * replan.c's.
 *
 * Rounds never overlap: a replan asked for while a round is in progress
 * is remembered (replan.c) and made when the round ends (committed or
 * abandoned). A Refuse, an error reply or a timeout excludes that worker
 * for a while (membership.h) and plans again with epoch + 1. A half-done
 * commit or a lost stage worker marks the serving plan broken: batches
 * pause until the next commit, and the batches in flight fail as the
 * cluster's failures (ST_SCHED_REQUEUE), so their requests continue from
 * their token history on the next plan.
 *
 * The commit waits for the pipeline to empty, so once a committed plan
 * does not use a draining worker no step in flight does: it is drained
 * here, and the next HeartbeatReply tells it to leave (api.c).
 *
 * KV across a switch: a session keeps its KV when its old route runs
 * every layer on the same workers as a route of the new plan (a stage
 * that kept its workers, a replica that left or joined elsewhere); every
 * other session re-prefills from its history, possibly on another route. */
#include "coordinator/coord_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/log.h"
#include "common/wire/msg.h"
#include "coordinator/stream/chunk_src.h"

#define CO "coordinator"

/* ---- the plan state (switch.h) ---- */

uint64_t coord_plans_epoch(const coord_plans *p)
{
    return p->has_committed ? p->committed.epoch : 0;
}

int coord_plans_stage_of(const coord_plans *p, uint64_t id)
{
    return p->has_committed ? st_plan_stage_of(&p->committed, id) : -1;
}

bool coord_plans_in_round(const coord_plans *p, uint64_t id)
{
    return p->round.phase != ST_ROUND_IDLE && st_plan_stage_of(&p->round.plan, id) >= 0;
}

/* ---- sending to workers ---- */

/* coord_rpc - sends m to worker id's control socket as an op tagged tag. */
st_err coord_rpc(st_coord *c, uint64_t id, const Strata__Msg *m, int timeout_ms,
                 const st_op_tag *tag)
{
    st_member *w = st_members_find(&c->ms, id);
    if (w == NULL || w->rpc == NULL || w->life != ST_MEMBER_ALIVE)
        return st_errorf(ST_ENOENT, "worker %llu is gone", (unsigned long long)id);
    nng_msg *msg;
    c->seal.rpc.to = w->join->join->cap->ctl_sender; /* bound to that worker (envelope.h) */
    st_err e = st_msg_pack(&c->seal.rpc, ST_ENV_CONTROL, m, &msg);
    if (e != ST_OK)
        return e;
    st_op_tag t = *tag;
    t.req_seq = c->seal.rpc.asked; /* the reply must answer this request */
    if ((e = st_peer_start(w->rpc, &c->q, msg, timeout_ms, &t)) == ST_OK)
        c->peers.ops_out++;
    return e;
}

/* coord_exclude - takes worker id out of placement for a while (it refused
 * or failed a plan; membership.h), ends the round and replans. */
static void coord_exclude(st_coord *c, uint64_t id, const char *why)
{
    st_member *w = st_members_find(&c->ms, id);
    uint64_t now = coord_now();
    if (w)
        st_member_exclude(w, why, now);
    st_log(ST_LOG_WARN, CO, "worker %llu excluded from plans for %llu s: %s",
           (unsigned long long)id,
           w ? (unsigned long long)((w->excluded_until - now) / 1000000000u) : 0ull, why);
    if (c->plans.round.phase == ST_ROUND_COMMITTING)
        c->plans.broken = true; /* some workers may have switched already */
    st_round_abort(&c->plans.round);
    coord_replan(c, true, "a worker was excluded");
}

/* coord_prepare_timeout - how long worker id may take to answer a Prepare:
 * --fetch-timeout-ms for a worker that streams its weights (it fetches its
 * stage first and bounds each chunk's wait itself, answering Refuse when a
 * fetch cannot go on; docs/streaming.md), else --prepare-timeout-ms. */
static int coord_prepare_timeout(st_coord *c, uint64_t id)
{
    const st_member *w = st_members_find(&c->ms, id);
    bool streams = w != NULL && w->join->join->cap->streams;
    uint32_t ms = c->cfg.prepare_timeout_ms;
    if (streams && c->cfg.fetch_timeout_ms > ms)
        ms = c->cfg.fetch_timeout_ms;
    return ms > INT32_MAX ? INT32_MAX : (int)ms;
}

void coord_prepare_all(st_coord *c)
{
    Strata__Plan *pb;
    st_err e = st_plan_to_pb(&c->plans.round.plan, false, &pb);
    if (e != ST_OK) {
        st_log(ST_LOG_ERROR, CO, "plan: %s", st_errmsg(e));
        st_round_abort(&c->plans.round);
        return;
    }
    Strata__Prepare pr = STRATA__PREPARE__INIT;
    pr.plan = pb;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_PREPARE;
    m.prepare = &pr;
    uint64_t epoch = c->plans.round.plan.epoch;
    uint64_t failed = 0;
    char why[200] = "";
    const char *srcs[ST_CHUNK_SOURCES_MAX];
    /* every peer: a worker takes no Commit without its Prepare, and one
     * the plan leaves out becomes a spare by it (worker/daemon/dm_plan.c) */
    for (size_t i = 0; i < c->plans.round.n_peers && failed == 0; i++) {
        st_op_tag tag = {.what = ST_OP_PREPARE,
                         .worker_id = c->plans.round.peers[i].worker_id,
                         .epoch = epoch};
        /* a streaming stage worker's own: the members serving its chunks */
        pr.n_chunk_sources = st_chunk_sources(&c->ms, tag.worker_id,
                                              c->plans.has_committed ? &c->plans.committed : NULL,
                                              &c->plans.round.plan, srcs, ST_CHUNK_SOURCES_MAX);
        pr.chunk_sources = pr.n_chunk_sources > 0 ? (char **)srcs : NULL;
        if (pr.n_chunk_sources > 0)
            st_log(ST_LOG_INFO, CO,
                   "Prepare of epoch %llu to worker %llu names %zu chunk source(s)",
                   (unsigned long long)epoch, (unsigned long long)tag.worker_id,
                   pr.n_chunk_sources);
        if ((e = coord_rpc(c, tag.worker_id, &m, coord_prepare_timeout(c, tag.worker_id), &tag))) {
            snprintf(why, sizeof why, "Prepare of epoch %llu not sent: %s",
                     (unsigned long long)epoch, st_errmsg(e));
            if (c->plans.round.peers[i].in_plan)
                failed = tag.worker_id;
            else
                st_log(ST_LOG_WARN, CO, "spare worker %llu: %s", (unsigned long long)tag.worker_id,
                       why);
        }
    }
    st_plan_pb_free(pb);
    if (failed)
        coord_exclude(c, failed, why);
}

void coord_commit_all(st_coord *c)
{
    st_round_start_commit(&c->plans.round);
    Strata__Commit cm = STRATA__COMMIT__INIT;
    cm.epoch = c->plans.round.plan.epoch;
    cm.plan_hash.data = c->plans.round.plan.hash;
    cm.plan_hash.len = ST_PLAN_HASH_BYTES;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_COMMIT;
    m.commit = &cm;
    st_log(ST_LOG_INFO, CO, "committing epoch %llu", (unsigned long long)cm.epoch);
    for (size_t i = 0; i < c->plans.round.n_peers; i++) {
        st_op_tag tag = {.what = ST_OP_COMMIT,
                         .worker_id = c->plans.round.peers[i].worker_id,
                         .epoch = cm.epoch};
        st_member *w = st_members_find(&c->ms, tag.worker_id);
        if (w)
            w->rpc_sent_ns = coord_now(); /* its round trip measures the link */
        if (coord_rpc(c, tag.worker_id, &m, 10000, &tag) != ST_OK) {
            bool in_plan = c->plans.round.peers[i].in_plan;
            st_round_on_ack(&c->plans.round, tag.worker_id, false);
            if (in_plan) {
                coord_exclude(c, tag.worker_id, "Commit could not be sent");
                return;
            }
        }
    }
}

/* coord_keep_kv - tells the scheduler which sessions keep their KV across
 * the switch from old (n_old routes; NULL: none) to the serving plan: those
 * whose old route runs every layer on the same workers as a new route (a
 * replica that left or joined elsewhere, a stage that kept its workers);
 * the others re-prefill from their history. */
static void coord_keep_kv(st_coord *c, const st_plan *old, uint32_t n_old)
{
    int32_t map[ST_SCHED_MAX_ROUTES];
    uint32_t kept = 0;
    if (old == NULL || n_old > ST_SCHED_MAX_ROUTES) {
        st_sched_forget_kv(c->sched);
        return;
    }
    for (uint32_t r = 0; r < n_old; r++) {
        map[r] = -1;
        for (uint32_t k = 0; k < c->plans.n_routes && map[r] < 0; k++)
            if (st_plan_same_route(old, r, &c->plans.committed, k))
                map[r] = (int32_t)k;
        kept += map[r] >= 0;
    }
    st_sched_keep_kv(c->sched, map, n_old);
    if (kept > 0)
        st_log(ST_LOG_INFO, CO,
               "epoch %llu: %u of %u route(s) kept their workers; their "
               "sessions keep their KV",
               (unsigned long long)c->plans.committed.epoch, kept, n_old);
}

/* coord_committed - the round's plan becomes the serving plan. */
static void coord_committed(st_coord *c)
{
    st_plan old = c->plans.committed;
    bool had = c->plans.has_committed;
    uint32_t n_old = c->plans.n_routes;
    st_round_take(&c->plans.round, &c->plans.committed);
    c->plans.has_committed = true;
    c->plans.broken = false;
    c->plans.error[0] = '\0';
    c->plans.n_routes = st_plan_routes(&c->plans.committed, ST_SCHED_MAX_ROUTES);
    coord_keep_kv(c, had ? &old : NULL, n_old);
    st_plan_free(&old);
    const st_plan_stage *s0 = &c->plans.committed.stages[0];
    for (uint32_t k = 0; k < ST_PLAN_MAX_REPLICAS; k++) { /* a PUSH per stage-0 worker */
        const char *addr = k < s0->n_workers ? s0->data_addrs[k] : NULL;
        if (c->plans.push[k] != NULL && addr != NULL &&
            strcmp(st_peer_url(c->plans.push[k]), addr) == 0)
            continue;
        st_peer_close(c->plans.push[k]);
        c->plans.push[k] = NULL;
        if (addr == NULL)
            continue;
        nng_msg *hello = NULL; /* msg.h st_msg_link_hello: the worker's gate proves the link */
        st_err e = st_msg_link_hello(&c->seal.step, ST_ENV_STEP, &hello);
        if (e == ST_OK)
            e = st_peer_open_push(addr, hello, &c->plans.push[k]);
        if (e != ST_OK) {
            st_log(ST_LOG_ERROR, CO, "stage 0 replica %u at %s: %s", k, addr, st_errmsg(e));
            c->plans.broken = true;
        }
    }
    char desc[512];
    size_t off = 0;
    for (uint32_t i = 0; i < c->plans.committed.n_stages && off < sizeof desc; i++)
        for (uint32_t k = 0; k < c->plans.committed.stages[i].n_workers && off < sizeof desc; k++)
            off += (size_t)snprintf(desc + off, sizeof desc - off, "%s%s[%u,%u)@%llu",
                                    i || k ? " " : "", k ? "+" : "",
                                    c->plans.committed.stages[i].first,
                                    c->plans.committed.stages[i].last,
                                    (unsigned long long)c->plans.committed.stages[i].worker_ids[k]);
    st_log(ST_LOG_INFO, CO, "epoch %llu committed: %s",
           (unsigned long long)c->plans.committed.epoch, desc);
    for (size_t i = 0; i < c->ms.n; i++) {
        st_member *m = &c->ms.v[i];
        if (m->draining && !m->drained && st_plan_stage_of(&c->plans.committed, m->id) < 0) {
            m->drained = true; /* the commit waited for every batch in flight to end */
            m->drain_epoch = c->plans.committed.epoch;
            st_log(ST_LOG_INFO, CO,
                   "worker %llu drained: epoch %llu does not use it and no step "
                   "in flight does; it may stop",
                   (unsigned long long)m->id, (unsigned long long)c->plans.committed.epoch);
        }
    }
    memset(&c->pl.imb, 0, sizeof c->pl.imb);
    if (c->plans.wanted)
        coord_replan(c, c->plans.force, "deferred");
}

/* ---- a worker gone during a round ---- */

void coord_switch_on_gone(st_coord *c, uint64_t id)
{
    if (c->plans.round.phase == ST_ROUND_IDLE || st_round_find(&c->plans.round, id) == NULL)
        return;
    st_round_peer *p = st_round_find(&c->plans.round, id);
    if (p->in_plan) {
        if (c->plans.round.phase == ST_ROUND_COMMITTING)
            c->plans.broken = true;
        st_log(ST_LOG_WARN, CO, "epoch %llu abandoned: worker %llu is gone",
               (unsigned long long)c->plans.round.plan.epoch, (unsigned long long)id);
        st_round_abort(&c->plans.round);
    } else if (st_round_on_ack(&c->plans.round, id, false)) {
        coord_committed(c);
    }
}

/* ---- replies ---- */

/* coord_on_spare_prepare - the answer of a worker the round's plan leaves
 * out: logged only, it does not hold up the round (a spare that failed
 * its Prepare refuses the Commit, which coord_on_commit_reply logs). */
static void coord_on_spare_prepare(st_coord *c, const st_op_tag *t, int rv, nng_msg *reply)
{
    Strata__Msg *m = NULL;
    char why[240] = "";
    st_err e = ST_OK;
    if (rv != 0)
        snprintf(why, sizeof why, "%s", nng_strerror(rv));
    else if ((e = st_msg_unpack(&c->seal.rpc, ST_ENV_CONTROL, reply, &m, NULL)) != ST_OK)
        snprintf(why, sizeof why, "bad reply: %s", st_errmsg(e));
    else if (m->body_case == STRATA__MSG__BODY_REFUSE)
        snprintf(why, sizeof why, "refused: %s", m->refuse->reason ? m->refuse->reason : "");
    else if (m->body_case != STRATA__MSG__BODY_READY)
        snprintf(why, sizeof why, "answered %s", st_msg_case_name(m));
    bool ok = m != NULL && m->body_case == STRATA__MSG__BODY_READY;
    st_log(ok ? ST_LOG_DEBUG : ST_LOG_WARN, CO, "spare worker %llu, Prepare of epoch %llu: %s",
           (unsigned long long)t->worker_id, (unsigned long long)t->epoch, ok ? "ready" : why);
    st_msg_free(m);
}

void coord_on_prepare_reply(st_coord *c, const st_op_tag *t, int rv, nng_msg *reply)
{
    if (c->plans.round.phase != ST_ROUND_PREPARING || t->epoch != c->plans.round.plan.epoch)
        return; /* an abandoned round (or a spare's answer after every stage was ready) */
    char why[240];
    const st_round_peer *peer = st_round_find(&c->plans.round, t->worker_id);
    if (peer != NULL && !peer->in_plan) {
        coord_on_spare_prepare(c, t, rv, reply);
        return;
    }
    if (rv != 0) {
        snprintf(why, sizeof why, "Prepare of epoch %llu: %s", (unsigned long long)t->epoch,
                 nng_strerror(rv));
        coord_exclude(c, t->worker_id, why);
        return;
    }
    Strata__Msg *m;
    st_err e = st_msg_unpack(&c->seal.rpc, ST_ENV_CONTROL, reply, &m, NULL);
    if (e != ST_OK) {
        snprintf(why, sizeof why, "bad reply to Prepare: %s", st_errmsg(e));
    } else if (m->body_case == STRATA__MSG__BODY_READY) {
        e = st_round_on_ready(&c->plans.round, t->worker_id, m->ready->epoch,
                              m->ready->resident_bytes);
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
        st_log(ST_LOG_INFO, CO, "worker %llu ready for epoch %llu",
               (unsigned long long)t->worker_id, (unsigned long long)t->epoch);
}

void coord_on_commit_reply(st_coord *c, const st_op_tag *t, int rv, nng_msg *reply)
{
    if (c->plans.round.phase != ST_ROUND_COMMITTING || t->epoch != c->plans.round.plan.epoch)
        return;
    bool ok = false;
    char why[240];
    snprintf(why, sizeof why, "Commit of epoch %llu: %s", (unsigned long long)t->epoch,
             rv ? nng_strerror(rv) : "bad reply");
    if (rv == 0) {
        Strata__Msg *m;
        st_err e = st_msg_unpack(&c->seal.rpc, ST_ENV_CONTROL, reply, &m, NULL);
        if (e == ST_OK) {
            ok = m->body_case != STRATA__MSG__BODY_ERROR &&
                 m->body_case != STRATA__MSG__BODY_REFUSE;
            if (m->body_case == STRATA__MSG__BODY_ERROR)
                snprintf(why, sizeof why, "Commit of epoch %llu: error %u: %s",
                         (unsigned long long)t->epoch, m->error->code,
                         m->error->message ? m->error->message : "");
            st_msg_free(m);
        }
    }
    st_member *w = st_members_find(&c->ms, t->worker_id);
    if (w && ok && w->rpc_sent_ns) {
        st_member_rtt_sample(w, (double)(coord_now() - w->rpc_sent_ns) * 1e-6);
        w->rpc_sent_ns = 0;
    }
    st_round_peer *p = st_round_find(&c->plans.round, t->worker_id);
    bool in_plan = p && p->in_plan;
    bool done = st_round_on_ack(&c->plans.round, t->worker_id, ok);
    if (!ok && in_plan) {
        coord_exclude(c, t->worker_id, why);
        return;
    }
    if (!ok)
        st_log(ST_LOG_WARN, CO, "spare worker %llu: %s", (unsigned long long)t->worker_id, why);
    if (done)
        coord_committed(c);
}
