/* admin_plan.c - the admin requests about plans on the coordinator's
 * control socket: PlanDryRun (what the planner would do now, without
 * applying it), ReplanRequest (plan now; --force skips the hysteresis; an
 * objective given changes the coordinator's from then on) and
 * DrainRequest (a plan without that worker; it is drained once a
 * committed plan does not use it, which also means no step in flight
 * does, since a commit waits for the pipeline to empty; the drained worker
 * is then told to leave in its HeartbeatReply, and a drain request about
 * it still answers "drained" for the minute it is kept as LEFT; `undo`
 * makes a drained worker that stayed, --stay-after-drain, placeable again).
 *
 * A dry run shows every live member: the planner's candidates with their
 * estimate and its source, and the others with the reason they were not
 * candidates (draining, drained, excluded, not heard from yet). Replicas
 * may be asked for in a dry run; the coordinator never commits them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/log.h"
#include "common/wire/msg.h"
#include "coordinator/coord_impl.h"
#include "coordinator/planner/planner_pb.h"

#define AP "api"

/* ap_reason - why live member m is not a planner candidate now. */
static const char *ap_reason(const st_member *m, uint64_t now, char *buf, size_t cap)
{
    if (m->drained)
        snprintf(buf, cap, "drained at epoch %llu: it may stop",
                 (unsigned long long)m->drain_epoch);
    else if (m->draining)
        snprintf(buf, cap, "draining");
    else if (!m->heard)
        snprintf(buf, cap, "joined: no heartbeat yet");
    else if (now < m->excluded_until)
        snprintf(buf, cap, "excluded for %llu s more: %.150s",
                 (unsigned long long)((m->excluded_until - now) / 1000000000u), m->why);
    else
        snprintf(buf, cap, "not placeable");
    return buf;
}

void coord_api_dry_run(st_coord *c, uint32_t slot, const Strata__PlanDryRun *q)
{
    coord_pl_setup(c);
    st_place_objective obj = c->pl.objective;
    st_err e;
    if (q->objective && q->objective[0] && (e = st_place_objective_from_name(q->objective, &obj))) {
        coord_api_reply_error(c, slot, e, st_errdetail());
        return;
    }
    coord_pl_view *v = NULL;
    st_place_result *r = malloc(sizeof *r);
    st_pp_worker *pw = calloc(ST_MEMBERS_MAX, sizeof *pw);
    char(*why)[200] = calloc(ST_MEMBERS_MAX, sizeof *why);
    Strata__PlanProposal *pp = NULL;
    Strata__LinkStatus **lp = NULL;
    size_t nl = 0;
    if (!r || !pw || !why)
        e = st_errorf(ST_ENOMEM, "dry run");
    else
        e = coord_pl_view_build(c, obj, q->replicas || c->cfg.replicas, &v);
    if (e == ST_OK)
        e = st_place(&v->m, v->w, v->n, &v->o, r);
    if (e != ST_OK) {
        coord_api_reply_error(c, slot, e, st_errdetail());
        goto out;
    }
    size_t n = 0, k = 0;
    uint64_t now = coord_now();
    for (size_t i = 0; i < c->ms.n; i++) {
        const st_member *m = &c->ms.v[i];
        if (m->life != ST_MEMBER_ALIVE)
            continue;
        const Strata__Capability *cap = m->join->join->cap;
        pw[n] = (st_pp_worker){.id = m->id,
                               .name = cap->name ? cap->name : "",
                               .input = -1,
                               .mem_budget = cap->memory_budget,
                               .spare = cap->spare};
        if (k < v->n && v->w[k].id == m->id) { /* the view keeps the member order */
            pw[n].input = (int)k;
            pw[n].source = v->source[k];
            k++;
        } else {
            pw[n].reason = ap_reason(m, now, why[n], sizeof why[n]);
        }
        n++;
    }
    const char *note = r->replicated && !c->cfg.replicas
                           ? "a proposal only: the coordinator runs without --replicas, so its "
                             "own plans have one worker per stage"
                           : "";
    e = st_place_proposal(r, v->w, v->n, pw, n, coord_plans_epoch(&c->plans), c->model.mi.n_layer,
                          v->calibration, note, &pp);
    if (e != ST_OK) {
        coord_api_reply_error(c, slot, e, st_errdetail());
        goto out;
    }
    pp->replicas_served = c->cfg.replicas;
    pp->n_expert = c->model.mi.n_expert; /* 0: dense */
    pp->n_expert_used = c->model.mi.n_expert_used;
    uint64_t *ids = malloc((v->n ? v->n : 1) * sizeof *ids); /* the link figures planned with */
    for (size_t a = 0; ids != NULL && a < v->n; a++)
        ids[a] = v->w[a].id;
    e = ids == NULL ? st_errorf(ST_ENOMEM, "dry run links")
                    : st_links_to_pb(v->links, ids, v->n, &lp, &nl);
    free(ids);
    if (e != ST_OK) {
        coord_api_reply_error(c, slot, e, st_errdetail());
        goto out;
    }
    pp->n_links = nl;
    pp->links = lp;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_PLAN_PROPOSAL;
    m.plan_proposal = pp;
    coord_api_send(c, slot, &m);
    pp->n_links = 0; /* ours, not the proposal's */
    pp->links = NULL;
out:
    st_links_pb_free(lp, nl);
    st_place_proposal_free(pp);
    coord_pl_view_free(v);
    free(r);
    free(pw);
    free(why);
}

void coord_api_replan(st_coord *c, uint32_t slot, const Strata__ReplanRequest *q)
{
    coord_pl_setup(c);
    if (q->objective && q->objective[0]) {
        st_place_objective obj;
        st_err e = st_place_objective_from_name(q->objective, &obj);
        if (e != ST_OK) {
            coord_api_reply_error(c, slot, e, st_errdetail());
            return;
        }
        if (obj != c->pl.objective)
            st_log(ST_LOG_INFO, AP, "objective %s -> %s", st_place_objective_name(c->pl.objective),
                   st_place_objective_name(obj));
        c->pl.objective = obj;
    }
    coord_replan(c, q->force, q->force ? "an admin asked (forced)" : "an admin asked");
    if (c->pl.last_err != ST_OK) {
        coord_api_reply_error(c, slot, c->pl.last_err, c->pl.decision);
        return;
    }
    Strata__ReplanReply rr = STRATA__REPLAN_REPLY__INIT;
    rr.started = c->pl.started;
    rr.epoch = c->pl.started ? c->plans.round.plan.epoch : coord_plans_epoch(&c->plans);
    rr.message = c->pl.decision[0] ? c->pl.decision : (char *)"the serving plan is the best plan";
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_REPLAN_REPLY;
    m.replan_reply = &rr;
    coord_api_send(c, slot, &m);
}

static void ap_drain_reply(st_coord *c, uint32_t slot, const st_member *w, const char *msg)
{
    Strata__DrainReply dr = STRATA__DRAIN_REPLY__INIT;
    dr.worker_id = w->id;
    dr.drained = w->drained;
    dr.epoch = w->drained ? w->drain_epoch : 0;
    dr.message = (char *)msg;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_DRAIN_REPLY;
    m.drain_reply = &dr;
    coord_api_send(c, slot, &m);
}

void coord_api_drain(st_coord *c, uint32_t slot, const Strata__DrainRequest *q)
{
    st_member *w = NULL, *gone = NULL;
    for (size_t i = 0; i < c->ms.n && w == NULL; i++) {
        st_member *m = &c->ms.v[i];
        const char *name = m->join->join->cap->name;
        bool match = (q->worker_id && m->id == q->worker_id) ||
                     (!q->worker_id && q->name && q->name[0] && name && strcmp(name, q->name) == 0);
        if (match && m->life == ST_MEMBER_ALIVE)
            w = m;
        else if (match && m->drained && m->life == ST_MEMBER_LEFT)
            gone = m; /* it left by itself after its drain (kept a minute for status) */
    }
    char text[400];
    if (w == NULL && gone != NULL && !q->undo) {
        snprintf(text, sizeof text, "drained at epoch %llu and left the cluster",
                 (unsigned long long)gone->drain_epoch);
        ap_drain_reply(c, slot, gone, text);
        return;
    }
    if (w == NULL) {
        if (q->worker_id)
            snprintf(text, sizeof text, "no live worker with id %llu",
                     (unsigned long long)q->worker_id);
        else
            snprintf(text, sizeof text, "no live worker named '%.64s'", q->name ? q->name : "");
        coord_api_reply_error(c, slot, ST_ENOENT, text);
        return;
    }
    if (q->undo) {
        if (!w->drained && !w->draining) {
            ap_drain_reply(c, slot, w, "not draining: nothing to undo");
            return;
        }
        bool was = w->drained;
        w->draining = w->drained = false;
        w->drain_epoch = 0;
        st_log(ST_LOG_INFO, AP, "worker %llu undrained", (unsigned long long)w->id);
        char why[64];
        snprintf(why, sizeof why, "worker %llu was undrained", (unsigned long long)w->id);
        coord_replan(c, false, why);
        snprintf(text, sizeof text, "%s; placeable again: %.300s",
                 was ? "undrained" : "drain cancelled", c->pl.decision);
        ap_drain_reply(c, slot, w, text);
        return;
    }
    if (w->drained || w->draining) {
        if (w->drained)
            snprintf(text, sizeof text,
                     "drained at epoch %llu: it leaves (or stays as a "
                     "spare with --stay-after-drain)",
                     (unsigned long long)w->drain_epoch);
        else
            snprintf(text, sizeof text, "draining: %.380s", c->pl.decision);
        ap_drain_reply(c, slot, w, text);
        return;
    }
    bool in_serving = coord_plans_stage_of(&c->plans, w->id) >= 0;
    bool in_round = coord_plans_in_round(&c->plans, w->id);
    w->draining = true;
    st_log(ST_LOG_INFO, AP, "drain of worker %llu asked", (unsigned long long)w->id);
    if (!in_serving && !in_round) {
        w->drained = true;
        w->drain_epoch = coord_plans_epoch(&c->plans);
        ap_drain_reply(c, slot, w, "it has no stage: drained");
        return;
    }
    char why[64];
    snprintf(why, sizeof why, "worker %llu is draining", (unsigned long long)w->id);
    coord_replan(c, true, why);
    if (c->pl.last_err != ST_OK) {
        w->draining = false; /* no plan without it: it keeps serving */
        snprintf(text, sizeof text, "cannot drain worker %llu: %.340s", (unsigned long long)w->id,
                 c->pl.decision);
        coord_api_reply_error(c, slot, c->pl.last_err, text);
        return;
    }
    ap_drain_reply(c, slot, w, c->pl.decision);
}
