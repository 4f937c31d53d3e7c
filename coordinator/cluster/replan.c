/* replan.c - the replan decision: when to replan and which plan
 * (coord_replan, with the heterogeneous planner of placement.h), the
 * planner's inputs built from the live members (coord_pl_view_build,
 * coord_links), the imbalance checks after heartbeats, and what losing a
 * worker does to the serving plan. Switching to the chosen plan (Prepare,
 * Commit, their replies, exclusions) is switch.c's (switch.h).
 *
 * Triggers: a worker's first heartbeat (a join), a lost, left, replaced
 * or excluded worker, an exclusion ending, a drain, a StaleReport from a
 * worker on another epoch, an admin `strata replan`, and a sustained
 * imbalance: after heartbeats (at most once per heartbeat interval) the
 * serving plan is evaluated against the best plan under the current
 * estimates; when the best one is better by the margin in every check for
 * --imbalance-ms (and at least three checks), a replan follows.
 *
 * Hysteresis: a plan that still serves (all its workers placeable) is kept
 * unless the planner's best is better by the margin (default 10% of the
 * step time); forced replans (an admin --force, an exclusion, a worker on
 * another epoch, a drain) skip that test. A plan identical to the serving
 * one is never switched to unless forced.
 *
 * Estimates (docs/placement.md): a worker's time per byte of weights is
 * its measured per-layer latency over its stage's bytes once every layer
 * has --min-samples samples in the serving epoch; the last measurement is
 * remembered for 5 minutes after it loses its stage (so a slow worker
 * taken out is not put back on its announced speed at the next check);
 * else its announced speed, scaled by the median measured / announced
 * ratio. Links (links.h, coord_links): a hop a -> b costs the latency and
 * act_bytes / the bandwidth that worker a measured to b and reported in
 * its heartbeats (probes of b's control socket, worker/daemon/probe.h); a pair
 * not measured yet (or whose report is older than 10 minutes) is assumed:
 * (rtt_a + rtt_b) / 4, rtt being the coordinator's Commit round trip to
 * each worker (0.2 ms before one is timed), and 1 GB/s. Status and dry
 * runs show which pairs are measured and which assumed.
 *
 * Boundary dtypes (--wire auto, docs/wire-format.md 6.1): each link is
 * priced in the planner with the bytes per token of the dtype it would
 * get (coord_wire_matrix), and each boundary of the chosen plan gets the
 * most precise dtype its receivers accept whose transfer stays within 10%
 * of the receiving stage's compute time (coord_wire_stages,
 * st_wire_choose), and zstd when the senders' measured ratio saves more
 * transfer than its measured codec time (wire_live.h's inputs), with the
 * reason in the plan. When a measurement moves a boundary's choice, the
 * serving layout is planned again with the new dtypes and zstd,
 * hysteresis or not (coord_wire_moved, coord_wire_check); every check
 * keeps its reasons as the live ones that status shows (wire_live.h).
 * i8 is a candidate only once the i8 accuracy gate passed (--allow-i8,
 * i8gate.h), which then evaluates the plan again; each plan reason ends
 * with the gate's state.
 *
 * Drain: a drain request (admin_plan.c) marks the worker draining and
 * replans without it (forced); once a committed plan does not use it, the
 * switch marks it drained (switch.c) and the next HeartbeatReply tells it
 * to leave (api.c), which it does unless started with --stay-after-drain.
 * `strata drain W --undo` makes a drained worker that stayed placeable
 * again.
 *
 * Rounds never overlap: a replan asked for while a round is in progress
 * is remembered (plans.wanted, plans.force) and made when the round
 * ends (committed or abandoned, switch.c). A lost stage worker marks the
 * serving plan broken: batches pause until the next commit, and the
 * batches in flight on its routes fail as the cluster's failures
 * (ST_SCHED_REQUEUE), so their requests continue from their token history
 * on the next plan.
 *
 * Replicas (--replicas, throughput objective): the planner may give idle
 * workers to the bottleneck stages, and such a plan is committed like any
 * other. Every replica holds the stage's layers and its own sessions' KV;
 * it is prepared, committed and measured as a stage worker, and losing
 * one breaks the plan as losing any stage worker does (the next plan is
 * made from the workers left). The data plane routes: the scheduler pins
 * each session to a route (a replica per stage, st_plan_routes) for the
 * epoch and forms batches of one route; the coordinator sends a batch to
 * its route's stage-0 worker (one PUSH per stage-0 worker) and every
 * worker forwards it to the route's next worker (StepMeta.route). After a
 * commit a session keeps its KV only if its route kept its workers
 * (switch.c); the others re-prefill from their history, possibly on
 * another route. Without --replicas the planner never makes replicas here
 * (dry runs may still show them). */
#include "coordinator/coord_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/log.h"
#include "common/net/netaddr.h"
#include "coordinator/cluster/wire_live.h"

#define CO "coordinator"

static st_err coord_wire_matrix(const st_coord *c, coord_pl_view *v);

/* ---- the planner's inputs ---- */

void coord_pl_setup(st_coord *c)
{
    coord_pl *p = &c->pl;
    if (p->init)
        return;
    p->init = true;
    p->objective = ST_PLACE_THROUGHPUT;
    if (c->cfg.objective && st_place_objective_from_name(c->cfg.objective, &p->objective))
        st_log(ST_LOG_WARN, CO, "objective '%s' unknown: throughput", c->cfg.objective);
    p->margin = c->cfg.replan_margin_set ? c->cfg.replan_margin : ST_PLACE_MARGIN_DEFAULT;
    uint32_t ims = c->cfg.imbalance_ms ? c->cfg.imbalance_ms : COORD_PL_DEFAULT_IMBALANCE_MS;
    p->imbalance_ns = c->cfg.no_imbalance ? 0 : (uint64_t)ims * 1000000u;
    p->min_samples = c->cfg.min_samples ? c->cfg.min_samples : COORD_PL_DEFAULT_MIN_SAMPLES;
    p->calibration = 1;
}

st_err coord_links(const st_coord *c, const uint64_t *ids, size_t n, st_link *out,
                   size_t *n_measured)
{
    double *rtt = malloc((n ? n : 1) * sizeof *rtt);
    size_t cap = 0, k = 0;
    for (size_t i = 0; i < c->ms.n; i++) {
        const st_member *m = &c->ms.v[i];
        if (m->life == ST_MEMBER_ALIVE && m->hb != NULL)
            cap += m->hb->heartbeat->n_links;
    }
    st_link_obs *obs = malloc((cap ? cap : 1) * sizeof *obs);
    if (rtt == NULL || obs == NULL) {
        free(rtt);
        free(obs);
        return st_errorf(ST_ENOMEM, "link matrix");
    }
    uint64_t now = coord_now();
    for (size_t a = 0; a < n; a++) {
        const st_member *m = st_members_find((st_members *)&c->ms, ids[a]);
        rtt[a] = m && m->rtt_ms > 0 ? m->rtt_ms : COORD_PL_DEFAULT_RTT_MS;
    }
    for (size_t i = 0; i < c->ms.n; i++) {
        const st_member *m = &c->ms.v[i];
        if (m->life != ST_MEMBER_ALIVE || m->hb == NULL)
            continue;
        const Strata__Heartbeat *hb = m->hb->heartbeat;
        double since = (double)(now - m->last_hb_ns) * 1e-9; /* the report aged since */
        for (size_t j = 0; j < hb->n_links && k < cap; j++) {
            const Strata__LinkMeasure *l = hb->links[j];
            obs[k++] = (st_link_obs){.from = m->id,
                                     .to = l->peer_id,
                                     .latency_s = l->latency_ms * 1e-3,
                                     .bw = l->bandwidth_bytes_per_s,
                                     .samples = l->samples,
                                     .age_s = l->age_s + since};
        }
    }
    size_t nm = st_links_fill(ids, n, rtt, COORD_PL_BANDWIDTH, obs, k, ST_LINK_MAX_AGE_S, out);
    if (n_measured)
        *n_measured = nm;
    free(rtt);
    free(obs);
    return ST_OK;
}

void coord_pl_view_free(coord_pl_view *v)
{
    if (v == NULL)
        return;
    free(v->lat);
    free(v->bw);
    free(v->links);
    free(v->act_ab);
    free(v);
}

st_err coord_pl_view_build(st_coord *c, st_place_objective objective, bool replicas,
                           coord_pl_view **out)
{
    coord_pl_setup(c);
    *out = NULL;
    coord_pl_view *v = calloc(1, sizeof *v);
    st_place_speed *sp = calloc(ST_MEMBERS_MAX, sizeof *sp);
    double *spb = calloc(ST_MEMBERS_MAX, sizeof *spb);
    if (!v || !sp || !spb) {
        free(v);
        free(sp);
        free(spb);
        return st_errorf(ST_ENOMEM, "planner inputs");
    }
    uint64_t now = coord_now();
    bool serving = c->plans.has_committed && !c->plans.broken;
    for (size_t i = 0; i < c->ms.n; i++) {
        st_member *m = &c->ms.v[i];
        if (!st_member_placeable(m, now))
            continue;
        size_t k = v->n++;
        const Strata__Capability *cap = m->join->join->cap;
        st_place_worker *w = &v->w[k];
        *w = (st_place_worker){.id = m->id, .mem_budget = cap->memory_budget, .spare = cap->spare};
        int st = serving ? st_plan_stage_of(&c->plans.committed, m->id) : -1;
        if (st >= 0) {
            w->has_stage = true;
            w->cur_first = c->plans.committed.stages[st].first;
            w->cur_last = c->plans.committed.stages[st].last;
        }
        sp[k].cap_spb = 1.0 / st_member_speed(m, c->model.mi.dtype);
        double meas;
        v->source[k] = "announced";
        if (st >= 0 && st_member_measured(m, c->plans.committed.epoch, w->cur_first, w->cur_last,
                                          c->model.active_bytes, c->model.mi.n_layer,
                                          c->model.mi.head_bytes, c->pl.min_samples, true, &meas)) {
            m->one_spb = meas;
            m->one_ns = now;
        }
        v->wire_spb[k] = m->one_spb > 0 && now - m->one_ns < COORD_PL_REMEMBER_NS ? m->one_spb : 0;
        if (st >= 0 &&
            st_member_measured(m, c->plans.committed.epoch, w->cur_first, w->cur_last,
                               c->model.active_bytes, c->model.mi.n_layer, c->model.mi.head_bytes,
                               c->pl.min_samples, false, &meas)) {
            m->meas_spb = meas;
            m->meas_ns = now;
            v->source[k] = "measured";
        } else if (m->meas_spb > 0 && now - m->meas_ns < COORD_PL_REMEMBER_NS) {
            v->source[k] = "remembered";
        }
        if (m->meas_spb > 0 && now - m->meas_ns < COORD_PL_REMEMBER_NS)
            sp[k].meas_spb = m->meas_spb;
    }
    size_t n = v->n;
    st_place_calibrate(sp, n, spb, &v->calibration);
    c->pl.calibration = v->calibration;
    for (size_t k = 0; k < n; k++) {
        v->w[k].spb = spb[k];
        if (!(v->wire_spb[k] > 0))
            v->wire_spb[k] = spb[k];
    }
    v->lat = malloc((n ? n * n : 1) * sizeof *v->lat);
    v->bw = malloc((n ? n * n : 1) * sizeof *v->bw);
    free(sp);
    free(spb);
    if (!v->lat || !v->bw) {
        coord_pl_view_free(v);
        return st_errorf(ST_ENOMEM, "planner links");
    }
    uint64_t ids[ST_MEMBERS_MAX];
    for (size_t k = 0; k < n; k++)
        ids[k] = v->w[k].id;
    v->links = malloc((n ? n * n : 1) * sizeof *v->links);
    if (v->links == NULL || coord_links(c, ids, n, v->links, &v->n_measured) != ST_OK) {
        coord_pl_view_free(v);
        return st_errorf(ST_ENOMEM, "planner links");
    }
    for (size_t a = 0; a < n * n; a++) {
        v->lat[a] = v->links[a].latency_s;
        v->bw[a] = v->links[a].bw;
    }
    v->m = (st_place_model){.n_layer = c->model.mi.n_layer,
                            .layer_bytes = c->model.mi.layer_bytes,
                            .active_bytes = c->model.active_bytes,
                            .embd_bytes = c->model.mi.embd_bytes,
                            .head_bytes = c->model.mi.head_bytes,
                            .stage_bytes = c->model.mi.rope_bytes,
                            .kv_bytes_per_token_layer = c->model.mi.kv_bytes_per_token_layer};
    v->o = st_place_opts_default();
    v->o.objective = objective;
    v->o.kv_tokens = (uint64_t)c->model.n_ctx * c->cfg.max_sessions;
    v->o.act_bytes = (double)st_wire_token_bytes(c->cfg.wire, c->model.mi.n_embd);
    if (c->cfg.wire == ST_WIRE_AUTO && coord_wire_matrix(c, v) != ST_OK) {
        coord_pl_view_free(v);
        return st_errorf(ST_ENOMEM, "planner links");
    }
    v->o.lat_s = v->lat;
    v->o.bw = v->bw;
    v->o.replicas = replicas;
    v->o.margin = c->pl.margin;
    v->o.split = c->cfg.split;
    v->o.n_split = c->cfg.n_split;
    *out = v;
    return ST_OK;
}

/* ---- --wire auto: each boundary's dtype (docs/wire-format.md 6.1) ---- */

/* coord_wire_accept - the boundary dtypes worker id accepts (its
 * Capability.wire_dtypes; none listed: f32 only). */
static uint32_t coord_wire_accept(const st_coord *c, uint64_t id)
{
    const st_member *m = st_members_find((st_members *)&c->ms, id);
    if (m == NULL)
        return 0;
    const Strata__Capability *cap = m->join->join->cap;
    return st_wire_accept_mask(cap->wire_dtypes, cap->n_wire_dtypes, NULL);
}

/* coord_wire_matrix - v->act_ab: the bytes per token each link a -> b
 * would carry, its dtype chosen as for a boundary into b with b's compute
 * time for an even share of the model (the stages are not known yet);
 * coord_wire_stages decides the plan's with the stages' own. */
static st_err coord_wire_matrix(const st_coord *c, coord_pl_view *v)
{
    size_t n = v->n;
    v->act_ab = malloc((n ? n * n : 1) * sizeof *v->act_ab);
    if (v->act_ab == NULL)
        return st_errorf(ST_ENOMEM, "planner link bytes");
    double total = (double)c->model.mi.head_bytes;
    for (uint32_t l = 0; l < c->model.mi.n_layer; l++)
        total += (double)c->model.active_bytes[l]; /* compute: the bytes a token reads */
    size_t active = 0;
    for (size_t k = 0; k < n; k++)
        active += !v->w[k].spare;
    double share = total / (double)(active ? active : 1);
    for (size_t b = 0; b < n; b++) {
        uint32_t mask = coord_wire_accept(c, v->w[b].id);
        for (size_t a = 0; a < n; a++) {
            const st_link *l = &v->links[a * n + b];
            st_wire_link_in in = {.hidden = c->model.mi.n_embd,
                                  .bw = l->bw,
                                  .latency_s = l->latency_s,
                                  .measured = l->measured,
                                  .compute_s = v->wire_spb[b] * share,
                                  .accept_mask = mask,
                                  .allow_i8 = coord_i8gate_allows(c)};
            st_wire_choice ch;
            /* a receiver accepting nothing usable gets f32's bytes here; the
             * plan's boundaries refuse it by name (coord_wire_stages) */
            st_wire_dtype d = st_wire_choose(&in, &ch) == ST_OK ? ch.dtype : ST_WIRE_F32;
            v->act_ab[a * n + b] = (double)st_wire_token_bytes(d, c->model.mi.n_embd);
        }
    }
    v->o.act_ab = v->act_ab;
    return ST_OK;
}

/* coord_wire_same - whether serving stage ps holds exactly the workers of
 * placed stage s (indices into v). */
static bool coord_wire_same(const coord_pl_view *v, const st_plan_stage *ps,
                            const st_place_stage *s)
{
    if (ps->n_workers != s->n_rep || ps->first != s->first)
        return false;
    for (uint32_t k = 0; k < s->n_rep; k++)
        if (ps->worker_ids[k] != v->w[s->rep[k]].id)
            return false;
    return true;
}

/* coord_wire_held - the serving plan's dtype on the boundary from -> to
 * when it has that boundary (the same first layer, the same workers on
 * both sides), for st_wire_choose's hysteresis. */
static void coord_wire_held(const st_coord *c, const coord_pl_view *v, const st_place_stage *from,
                            const st_place_stage *to, st_wire_link_in *in)
{
    if (!c->plans.has_committed || c->plans.broken)
        return;
    for (uint32_t j = 1; j < c->plans.committed.n_stages; j++)
        if (coord_wire_same(v, &c->plans.committed.stages[j], to) &&
            coord_wire_same(v, &c->plans.committed.stages[j - 1], from)) {
            in->has_held = st_wire_dtype_from_name(c->plans.committed.stages[j].in_dtype,
                                                   &in->held) == ST_OK;
            in->held_zstd = c->plans.committed.stages[j].in_zstd;
        }
}

st_err coord_wire_stages(const st_coord *c, const coord_pl_view *v, const st_place_result *r,
                         st_plan *p)
{
    if (c->cfg.wire != ST_WIRE_AUTO)
        return ST_OK;
    size_t n = v->n;
    for (size_t i = 1; i < r->n_stages && i < p->n_stages; i++) {
        const st_place_stage *from = &r->stages[i - 1], *to = &r->stages[i];
        /* the placement's compute time, on the one-token measurement (wire_spb) */
        double scale = v->wire_spb[to->rep[0]] / v->w[to->rep[0]].spb;
        st_wire_link_in in = {.hidden = c->model.mi.n_embd,
                              .bw = INFINITY,
                              .measured = true,
                              .compute_s = to->compute_s * scale,
                              .accept_mask = ST_WIRE_MASK_ALL,
                              .allow_i8 = coord_i8gate_allows(c)};
        for (uint32_t y = 0; y < to->n_rep; y++) {
            in.accept_mask &= coord_wire_accept(c, v->w[to->rep[y]].id);
            for (uint32_t x = 0; x < from->n_rep; x++) {
                const st_link *l = &v->links[(size_t)from->rep[x] * n + to->rep[y]];
                in.bw = l->bw < in.bw ? l->bw : in.bw;
                in.latency_s = l->latency_s > in.latency_s ? l->latency_s : in.latency_s;
                in.measured = in.measured && l->measured;
            }
        }
        coord_wire_held(c, v, from, to, &in);
        coord_wire_zin(c, v, from, to, &in);
        st_wire_choice ch;
        st_err e = st_wire_choose(&in, &ch);
        if (e != ST_OK)
            return st_errwrap(e, "the boundary into stage %zu (layers [%u, %u))", i, to->first,
                              to->last);
        snprintf(p->stages[i].in_dtype, sizeof p->stages[i].in_dtype, "%s",
                 st_wire_dtype_name(ch.dtype));
        memcpy(p->stages[i].in_why, ch.why, sizeof ch.why);
        coord_i8gate_note(c, p->stages[i].in_why, sizeof p->stages[i].in_why);
        p->stages[i].in_zstd = ch.zstd;
    }
    return ST_OK;
}

/* coord_wire_current - r as the serving plan's layout under v's estimates
 * (st_place_eval); false when one of its workers is not in v. */
static bool coord_wire_current(const st_coord *c, const coord_pl_view *v, st_place_result *r)
{
    memset(r, 0, sizeof *r);
    if (c->plans.committed.n_stages > ST_PLACE_MAX_WORKERS)
        return false;
    r->n_stages = c->plans.committed.n_stages;
    for (uint32_t i = 0; i < c->plans.committed.n_stages; i++) {
        const st_plan_stage *ps = &c->plans.committed.stages[i];
        st_place_stage *s = &r->stages[i];
        s->first = ps->first;
        s->last = ps->last;
        s->n_rep = ps->n_workers;
        for (uint32_t k = 0; k < ps->n_workers && k < ST_PLACE_MAX_REPLICAS; k++) {
            size_t j = 0;
            while (j < v->n && v->w[j].id != ps->worker_ids[k])
                j++;
            if (j == v->n)
                return false;
            s->rep[k] = (uint16_t)j;
        }
    }
    return st_place_eval(&v->m, v->w, v->n, &v->o, r) == ST_OK;
}

/* coord_wire_moved - under --wire auto, whether the serving plan's
 * boundary dtypes or zstd differ from what the current links and
 * measurements choose for its layout; the first difference into why. The
 * choice is recorded as the serving plan's live one (wire_live.h). r is
 * scratch; on true it holds the serving layout under v. */
static bool coord_wire_moved(st_coord *c, const coord_pl_view *v, st_place_result *r, char *why,
                             size_t cap)
{
    if (c->cfg.wire != ST_WIRE_AUTO || !c->plans.has_committed || c->plans.broken ||
        !coord_wire_current(c, v, r))
        return false;
    st_plan_stage *st = calloc(c->plans.committed.n_stages ? c->plans.committed.n_stages : 1,
                               sizeof *st);
    if (st == NULL)
        return false;
    st_plan q = c->plans.committed;
    memcpy(st, c->plans.committed.stages, c->plans.committed.n_stages * sizeof *st);
    q.stages = st;
    bool moved = false;
    if (coord_wire_stages(c, v, r, &q) == ST_OK) {
        coord_wire_live_set(c, &q, coord_now());
        for (uint32_t i = 1; i < q.n_stages && !moved; i++)
            if (strcmp(q.stages[i].in_dtype, c->plans.committed.stages[i].in_dtype) != 0 ||
                q.stages[i].in_zstd != c->plans.committed.stages[i].in_zstd) {
                moved = true;
                snprintf(why, cap, "the boundary into stage %u now chooses %s", i,
                         q.stages[i].in_why);
            }
    }
    free(st);
    return moved;
}

/* ---- replanning ---- */

/* coord_pl_note - records what a replan decided; logs it when it changed. */
static void coord_pl_note(st_coord *c, st_log_level lvl, const char *text)
{
    if (strcmp(c->pl.decision, text) != 0)
        st_log(lvl, CO, "%s", text);
    snprintf(c->pl.decision, sizeof c->pl.decision, "%s", text);
}

void coord_replan(st_coord *c, bool force, const char *why)
{
    coord_pl_setup(c);
    c->pl.started = false;
    c->pl.last_err = ST_OK;
    if (c->stopping)
        return;
    if (c->plans.round.phase != ST_ROUND_IDLE) {
        c->plans.wanted = true;
        c->plans.force = c->plans.force || force;
        snprintf(c->pl.decision, sizeof c->pl.decision,
                 "deferred until epoch %llu is switched "
                 "to (%s)",
                 (unsigned long long)c->plans.round.plan.epoch, why);
        return;
    }
    force = force || c->plans.force;
    c->plans.wanted = c->plans.force = false;
    char text[400];
    coord_pl_view *v = NULL;
    st_place_result *r = malloc(sizeof *r);
    st_err e = r ? coord_pl_view_build(c, c->pl.objective, c->cfg.replicas, &v)
                 : st_errorf(ST_ENOMEM, "planner result");
    if (e == ST_OK && !c->plans.has_committed && v->n < c->cfg.min_workers) {
        snprintf(c->plans.error, sizeof c->plans.error, "waiting for workers: %zu of %u joined",
                 v->n, c->cfg.min_workers);
        snprintf(c->pl.decision, sizeof c->pl.decision, "%s", c->plans.error);
        goto out;
    }
    if (e == ST_OK)
        e = st_place(&v->m, v->w, v->n, &v->o, r);
    if (e != ST_OK) {
        c->pl.last_err = e;
        if (strcmp(c->plans.error, st_errdetail()) != 0)
            st_log(ST_LOG_WARN, CO, "%s", st_errmsg(e));
        snprintf(c->plans.error, sizeof c->plans.error, "%s", st_errdetail());
        snprintf(c->pl.decision, sizeof c->pl.decision, "%s", c->plans.error);
        goto out;
    }
    bool serving = c->plans.has_committed && !c->plans.broken;
    const char *obj = st_place_objective_name(r->objective);
    char moved[ST_WIRE_WHY_MAX + 64];
    if (!force && serving && r->keep_current) {
        if (!coord_wire_moved(c, v, r, moved, sizeof moved)) {
            snprintf(text, sizeof text,
                     "keeping epoch %llu: its %s step %.3f ms; the best plan's "
                     "%.3f ms is not %.0f%% better (%s)",
                     (unsigned long long)c->plans.committed.epoch, obj, r->current_s * 1e3,
                     r->step_s * 1e3, 100 * c->pl.margin, why);
            coord_pl_note(c, ST_LOG_INFO, text);
            goto out;
        }
        /* r is now the serving layout: the same stages with new dtypes */
        st_log(ST_LOG_INFO, CO, "%s", moved);
        why = "a boundary's dtype choice changed";
    }
    st_plan p;
    memset(&p, 0, sizeof p);
    if ((p.stages = calloc(r->n_stages, sizeof *p.stages)) == NULL) {
        snprintf(c->plans.error, sizeof c->plans.error, "out of memory for a plan");
        goto out;
    }
    p.n_stages = (uint32_t)r->n_stages;
    for (size_t i = 0; i < r->n_stages; i++) {
        p.stages[i].first = r->stages[i].first;
        p.stages[i].last = r->stages[i].last;
        p.stages[i].n_workers = r->stages[i].n_rep;
        for (uint32_t k = 0; k < r->stages[i].n_rep && k < ST_PLAN_MAX_REPLICAS; k++) {
            const st_member *m = st_members_find(&c->ms, v->w[r->stages[i].rep[k]].id);
            p.stages[i].worker_ids[k] = m->id;
            p.stages[i].data_senders[k] = m->join->join->cap->data_sender;
            snprintf(p.stages[i].data_addrs[k], sizeof p.stages[i].data_addrs[k], "%s",
                     m->join->join->cap->data_addr);
        }
    }
    if ((e = coord_wire_stages(c, v, r, &p)) != ST_OK) {
        c->pl.last_err = e;
        snprintf(c->plans.error, sizeof c->plans.error, "%s", st_errdetail());
        coord_pl_note(c, ST_LOG_WARN, c->plans.error);
        st_plan_free(&p);
        goto out;
    }
    memcpy(p.model_id, c->model.mi.model_id, sizeof p.model_id);
    p.zstd = c->cfg.zstd;
    for (uint32_t i = 1; i < p.n_stages; i++) /* --zstd: every boundary, whatever the wire */
        p.stages[i].in_zstd = p.stages[i].in_zstd || c->cfg.zstd;
    snprintf(p.wire, sizeof p.wire, "%s",
             st_wire_dtype_name(c->cfg.wire == ST_WIRE_AUTO ? ST_WIRE_F32 : c->cfg.wire));
    snprintf(p.result_addr, sizeof p.result_addr, "%s", st_net_results_addr(c->net));
    if (c->cfg.advertise) {
        st_hostport hp; /* its port: after a tcp:// scheme's length, at the last ':' */
        bool has_port = st_hostport_split(p.result_addr + ST_TCP_SCHEME_LEN, &hp);
        char port[16];
        snprintf(port, sizeof port, "%s%s", has_port ? ":" : "", has_port ? hp.port : "");
        snprintf(p.result_addr, sizeof p.result_addr, ST_TCP_SCHEME "%s%s", c->cfg.advertise, port);
    }
    p.n_layer = c->model.mi.n_layer;
    p.max_tokens = c->cfg.max_tokens;
    p.n_ctx = c->model.n_ctx;
    p.max_sessions = c->cfg.max_sessions;
    p.incarnation = c->start_ms;
    p.step_sender = c->seal.step.sender;
    snprintf(p.cache_type, sizeof p.cache_type, "%s", st_dtype_info_of(c->model.kv_dtype)->name);
    if (!force && serving && st_plan_same_layout(&p, &c->plans.committed)) {
        st_plan_free(&p);
        goto out;
    }
    p.epoch = c->plans.next_epoch++;
    if ((e = st_plan_seal(&p))) {
        st_log(ST_LOG_ERROR, CO, "plan hash: %s", st_errmsg(e));
        st_plan_free(&p);
        goto out;
    }
    uint64_t others[ST_MEMBERS_MAX];
    size_t no = 0;
    for (size_t i = 0; i < c->ms.n; i++)
        if (c->ms.v[i].life == ST_MEMBER_ALIVE && st_plan_stage_of(&p, c->ms.v[i].id) < 0)
            others[no++] = c->ms.v[i].id;
    char cur[64] = "";
    if (r->has_current)
        snprintf(cur, sizeof cur, ", the serving plan's %.3f ms", r->current_s * 1e3);
    snprintf(text, sizeof text,
             "preparing epoch %llu (%u stages, %u workers, %s step %.3f ms%s) "
             "because %s",
             (unsigned long long)p.epoch, p.n_stages, st_plan_n_workers(&p), obj, r->step_s * 1e3,
             cur, why);
    coord_pl_note(c, ST_LOG_INFO, text);
    if ((e = st_round_begin(&c->plans.round, &p, others, no, coord_now()))) {
        st_plan_free(&p);
        goto out;
    }
    c->pl.started = true;
    memset(&c->pl.imb, 0, sizeof c->pl.imb);
    coord_prepare_all(c);
out:
    coord_pl_view_free(v);
    free(r);
}

/* coord_wire_check - under --wire auto, at most once per interval:
 * replans when a boundary of the serving plan would now get another
 * dtype; true if it did. */
static bool coord_wire_check(st_coord *c, uint64_t now, uint64_t every)
{
    if (c->cfg.wire != ST_WIRE_AUTO || c->stopping || !coord_serving(c) ||
        c->plans.round.phase != ST_ROUND_IDLE || now - c->pl.wire_check_ns < every)
        return false;
    c->pl.wire_check_ns = now;
    coord_pl_view *v = NULL;
    st_place_result *r = malloc(sizeof *r);
    char why[ST_WIRE_WHY_MAX + 64];
    bool moved = r != NULL &&
                 coord_pl_view_build(c, c->pl.objective, c->cfg.replicas, &v) == ST_OK &&
                 coord_wire_moved(c, v, r, why, sizeof why);
    coord_pl_view_free(v);
    free(r);
    if (moved)
        coord_replan(c, false, "a link's measurement moved a boundary's dtype");
    return moved;
}

void coord_on_heartbeat(st_coord *c)
{
    coord_pl_setup(c);
    uint64_t now = coord_now();
    uint64_t every = (uint64_t)(c->cfg.heartbeat_ms > 100 ? c->cfg.heartbeat_ms : 100) * 1000000u;
    if (coord_wire_check(c, now, every))
        return;
    if (c->pl.imbalance_ns == 0 || c->stopping || c->cfg.split || !coord_serving(c) ||
        c->plans.round.phase != ST_ROUND_IDLE) {
        c->pl.imb.count = 0;
        return;
    }
    if (now - c->pl.last_check_ns < every)
        return;
    /* only fresh measurements count: an idle cluster's EMAs do not move */
    uint64_t samples = 0;
    for (uint32_t i = 0; i < c->plans.committed.n_stages; i++)
        for (uint32_t k = 0; k < c->plans.committed.stages[i].n_workers; k++) {
            const st_member *m = st_members_find(&c->ms,
                                                 c->plans.committed.stages[i].worker_ids[k]);
            if (m && m->hb && m->hb->heartbeat->n_layers > 0)
                samples += m->hb->heartbeat->layers[0]->samples;
        }
    if (samples == c->pl.last_samples)
        return;
    c->pl.last_samples = samples;
    c->pl.last_check_ns = now;
    coord_pl_view *v = NULL;
    st_place_result *r = malloc(sizeof *r);
    if (r == NULL || coord_pl_view_build(c, c->pl.objective, c->cfg.replicas, &v) != ST_OK ||
        st_place(&v->m, v->w, v->n, &v->o, r) != ST_OK) {
        coord_pl_view_free(v);
        free(r);
        return; /* a failing planner is reported by the next replan */
    }
    bool imbalanced = r->has_current && !r->keep_current;
    if (st_imbalance_update(&c->pl.imb, imbalanced, now, c->pl.imbalance_ns, 3)) {
        char why[200];
        snprintf(why, sizeof why,
                 "of a sustained imbalance: the serving plan's step %.3f ms, "
                 "the best plan's %.3f ms",
                 r->current_s * 1e3, r->step_s * 1e3);
        coord_replan(c, false, why);
    }
    coord_pl_view_free(v);
    free(r);
}

void coord_member_gone(st_coord *c, uint64_t id, st_member_life life, const char *why)
{
    st_member *m = st_members_find(&c->ms, id);
    if (m == NULL)
        return;
    if (m->life == ST_MEMBER_ALIVE)
        st_members_mark(m, life, why, coord_now());
    coord_retire_peer(c, m->rpc, coord_now()); /* not closed now: coordinator/control/net.h */
    m->rpc = NULL;
    st_log(ST_LOG_WARN, CO, "worker %llu %s: %s", (unsigned long long)id,
           life == ST_MEMBER_LOST ? "lost" : "left", why);
    if (c->plans.has_committed && st_plan_stage_of(&c->plans.committed, id) >= 0 &&
        !c->plans.broken) {
        char msg[256];
        snprintf(msg, sizeof msg, "worker %llu of stage %d is gone (%s)", (unsigned long long)id,
                 st_plan_stage_of(&c->plans.committed, id), why);
        c->plans.broken = true;
        /* the batches of routes through it are lost; the others still
         * come back (and their sessions can keep their KV at the switch) */
        bool lost[ST_SCHED_MAX_ROUTES] = {false};
        for (uint32_t r = 0; r < c->plans.n_routes && r < ST_SCHED_MAX_ROUTES; r++)
            for (uint32_t i = 0; i < c->plans.committed.n_stages; i++)
                lost[r] |= c->plans.committed.stages[i]
                               .worker_ids[st_plan_route_worker(&c->plans.committed, r, i)] == id;
        st_sched_fail_in_flight(c->sched, lost, c->plans.n_routes, ST_ECLOSED, msg,
                                ST_SCHED_REQUEUE, coord_now());
    }
    coord_switch_on_gone(c, id);
    coord_replan(c, false, "a worker left");
}
