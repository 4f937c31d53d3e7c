/* api_status.c - the coordinator's Status, built on its thread for the
 * two that read it: a Status request of the control socket (api.c, under
 * the requester's role) and the HTTP gateway's snapshot (gateway.c, under
 * the gateway's role, MEMBER: the coordinator-wide security scope).
 *
 * The reply is detailed (workers, links, the plan) for every role but a
 * client's; its security counters are the caller's credential's for a
 * client and the coordinator's for any other role (api_auth.c). Links are
 * every ordered pair of live workers that have heartbeated (coord_links:
 * measured where the workers reported, else assumed). The reply borrows
 * from the coordinator's state (joins, heartbeats, the model's name) and
 * from its coord_status, so it is read before the loop turns again and
 * before coord_status_free: the control API packs it at once, the gateway
 * makes an owned copy of it at once (gateway.c). */
#include <stdlib.h>
#include <string.h>

#include "common/base/version.h"
#include "common/wire/msg.h"
#include "coordinator/cluster/experts.h"
#include "coordinator/cluster/wire_live.h"
#include "coordinator/coord_impl.h"
#include "coordinator/planner/planner_pb.h"

/* status_state - the state of member m, as `strata status` shows it. */
static const char *status_state(const st_coord *c, const st_member *m)
{
    if (m->life == ST_MEMBER_LOST)
        return "lost";
    if (m->life == ST_MEMBER_LEFT)
        return "left";
    if (m->excluded_until > coord_now())
        return "excluded";
    if (m->drained)
        return "drained";
    bool in_plan = coord_plans_stage_of(&c->plans, m->id) >= 0;
    if (in_plan && !c->plans.broken)
        return "serving"; /* also while draining: its stage serves until the switch */
    if (m->draining)
        return "draining";
    if (coord_plans_in_round(&c->plans, m->id))
        return "preparing";
    return c->plans.has_committed && !c->plans.broken && !in_plan ? "spare" : "joined";
}

/* status_links - sr->links: every ordered pair of live workers that
 * have heartbeated, measured or assumed (coord_links). */
static st_err status_links(st_coord *c, Strata__StatusReply *sr)
{
    uint64_t ids[ST_MEMBERS_MAX];
    size_t n = 0;
    for (size_t i = 0; i < c->ms.n; i++)
        if (c->ms.v[i].life == ST_MEMBER_ALIVE && c->ms.v[i].heard)
            ids[n++] = c->ms.v[i].id;
    if (n < 2)
        return ST_OK;
    st_link *l = malloc(n * n * sizeof *l);
    st_err e = l == NULL ? st_errorf(ST_ENOMEM, "status links") : coord_links(c, ids, n, l, NULL);
    if (e == ST_OK)
        e = st_links_to_pb(l, ids, n, &sr->links, &sr->n_links);
    free(l);
    return e;
}

/* status_experts - sr's expert shape and load: per layer, the counts of
 * the live members' last heartbeats summed (experts.h). */
static st_err status_experts(st_coord *c, Strata__StatusReply *sr)
{
    sr->n_expert = c->model.mi.n_expert;
    sr->n_expert_used = c->model.mi.n_expert_used;
    if (c->model.mi.n_expert == 0 || c->ms.n == 0)
        return ST_OK;
    const Strata__Heartbeat **hb = calloc(c->ms.n, sizeof *hb);
    if (hb == NULL)
        return st_errorf(ST_ENOMEM, "status expert load");
    for (size_t i = 0; i < c->ms.n; i++)
        if (c->ms.v[i].life == ST_MEMBER_ALIVE && c->ms.v[i].hb != NULL)
            hb[i] = c->ms.v[i].hb->heartbeat;
    st_err e = st_experts_sum(hb, c->ms.n, c->model.mi.n_layer, c->model.mi.n_expert,
                              &sr->expert_load, &sr->n_expert_load);
    free(hb);
    return e;
}

static void status_links_free(Strata__StatusReply *sr)
{
    st_links_pb_free(sr->links, sr->n_links);
    sr->links = NULL;
    sr->n_links = 0;
}

/* status_conn_counters - the connections the control, results and weights
 * sockets closed unauthenticated (common/net/pipe_gate.h), added to the coordinator's
 * own counters. */
static void status_conn_counters(st_coord *c, Strata__Counters *cn)
{
    st_pipe_gate_counts g = {0};
    if (c->net != NULL)
        st_net_gate_counts(c->net, &g);
    st_weights_gate_counts(c->weights, &g);
    cn->conn_refused += g.refused;
    cn->conn_evicted += g.evicted;
    cn->conn_expired += g.expired;
}

st_err coord_status_build(st_coord *c, const coord_who *who, coord_status *s)
{
    memset(s, 0, sizeof *s);
    strata__status_reply__init(&s->sr);
    Strata__StatusReply *sr = &s->sr;
    coord_auth_pb(c, who, &s->sec);
    sr->security = &s->sec;
    bool detailed = who->role != ST_ROLE_CLIENT;
    size_t n = detailed ? c->ms.n : 0;
    s->ws = calloc(n ? n : 1, sizeof *s->ws);
    s->wp = calloc(n ? n : 1, sizeof *s->wp);
    if (!s->ws || !s->wp ||
        (detailed && c->plans.has_committed &&
         st_plan_to_pb(&c->plans.committed, false, &s->pb) != ST_OK)) {
        coord_status_free(s);
        return st_errorf(ST_ENOMEM, "status");
    }
    uint64_t now = coord_now();
    if (s->pb != NULL)
        coord_wire_live_pb(c, s->pb, now);
    for (size_t i = 0; i < n; i++) {
        const st_member *m = &c->ms.v[i];
        Strata__WorkerStatus *w = &s->ws[i];
        strata__worker_status__init(w);
        w->id = m->id;
        w->name = m->join->join->cap->name ? m->join->join->cap->name : (char *)"";
        w->cap = m->join->join->cap;
        w->last = m->hb ? m->hb->heartbeat : NULL;
        w->state = (char *)status_state(c, m);
        int st = coord_plans_stage_of(&c->plans, m->id);
        w->stage = st;
        w->replica = c->plans.has_committed ? st_plan_replica_of(&c->plans.committed, m->id) : -1;
        if (st >= 0) {
            w->first = c->plans.committed.stages[st].first;
            w->last_layer = c->plans.committed.stages[st].last;
        }
        w->since_heartbeat_s = (double)(now - m->last_hb_ns) * 1e-9;
        st_join_protocol(m->join->join, &w->protocol); /* validated at its join */
        s->wp[i] = w;
    }
    Strata__Counters *cn = &s->cn;
    strata__counters__init(cn);
    sr->keyed = c->seal.keyed;
    sr->encrypted = c->cfg.encrypt;
    sr->i8_gate = (char *)coord_i8gate_text(c, s->i8, sizeof s->i8);
    sr->version = (char *)st_version_line();
    sr->protocol = ST_PROTO_VERSION;
    sr->protocol_oldest = ST_PROTO_OLDEST;
    cn->refused_epoch = c->counters.refused_epoch;
    cn->auth_failed = c->seal.rep.auth_failed + c->seal.rpc.auth_failed + c->seal.res.auth_failed;
    cn->bad_packets = c->counters.bad_msgs;
    cn->steps = c->counters.steps;
    cn->forged_results = c->counters.forged_results;
    cn->bad_experts = c->counters.bad_experts;
    cn->reply_failures = c->net != NULL ? st_net_reply_failures(c->net) : 0;
    status_conn_counters(c, cn);
    st_members_counters(&c->ms, cn);
    st_sched_stats ss;
    st_sched_get_stats(c->sched, &ss);
    Strata__SchedStatus *sch = &s->sch;
    strata__sched_status__init(sch);
    sch->running = ss.running;
    sch->queued = ss.queued;
    sch->sessions = ss.sessions;
    sch->idle_sessions = ss.idle_sessions;
    sch->max_sessions = ss.cap_sessions;
    sch->in_flight = ss.in_flight;
    sch->depth = ss.depth;
    sch->depth_why = c->depth_why;
    sch->peak_in_flight = ss.peak_in_flight;
    sch->batches = ss.batches;
    sch->rows = ss.rows;
    sch->tokens = ss.tokens;
    sch->busy_refused = ss.busy_refused;
    sch->queue_expired = ss.queue_expired;
    sch->client_gone = ss.client_gone;
    sch->reused_tokens = ss.reused_tokens;
    sch->sessions_evicted = ss.sessions_evicted;
    sch->sessions_expired = ss.sessions_expired;
    sch->kv_kept = ss.kv_kept;
    sch->kv_reprefilled = ss.kv_reprefilled;
    sch->kv_session_bytes = c->model.mi.kv_bytes_per_token_layer * c->model.mi.n_layer *
                            c->model.n_ctx;
    sch->kv_cache_type = (char *)st_dtype_info_of(c->model.kv_dtype)->name;
    for (size_t i = 0; i < c->ms.n; i++)
        if (c->ms.v[i].hb && c->ms.v[i].life == ST_MEMBER_ALIVE)
            sch->kv_bytes += c->ms.v[i].hb->heartbeat->kv_bytes;
    sch->chunk = ss.chunk;
    sch->max_batch_tokens = ss.max_batch_tokens;
    uint32_t nr = ss.routes < ST_SCHED_MAX_ROUTES ? ss.routes : ST_SCHED_MAX_ROUTES;
    memcpy(s->route_sessions, ss.route_sessions, nr * sizeof s->route_sessions[0]);
    memcpy(s->route_batches, ss.route_batches, nr * sizeof s->route_batches[0]);
    sch->routes = ss.routes;
    sch->n_route_sessions = nr;
    sch->route_sessions = s->route_sessions;
    sch->n_route_batches = nr;
    sch->route_batches = s->route_batches;
    if ((detailed && status_links(c, sr) != ST_OK) || coord_hold_pb(c, &s->hold) != ST_OK ||
        (detailed && status_experts(c, sr) != ST_OK)) {
        coord_status_free(s);
        return st_errorf(ST_ENOMEM, "status links or hold state");
    }
    sch->hold = s->hold;
    sr->sched = sch;
    sr->epoch = coord_plans_epoch(&c->plans);
    sr->plan = s->pb;
    sr->n_workers = n;
    sr->workers = s->wp;
    sr->counters = cn;
    sr->sessions = (uint32_t)st_sched_n_sessions(c->sched);
    sr->requests = (uint32_t)st_sched_n_requests(c->sched);
    sr->model = c->model.mi.name[0] ? c->model.mi.name : (char *)c->cfg.model_path;
    sr->incarnation = c->start_ms;
    return ST_OK;
}

void coord_status_free(coord_status *s)
{
    st_plan_pb_free(s->pb);
    free(s->ws);
    free(s->wp);
    status_links_free(&s->sr);
    st_experts_sum_free(s->sr.expert_load, s->sr.n_expert_load);
    coord_hold_pb_free(s->hold);
    memset(s, 0, sizeof *s);
}
