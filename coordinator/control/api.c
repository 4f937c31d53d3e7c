/* api.c - the requests that arrive on the coordinator's control (REP)
 * socket: from workers (Join, Heartbeat, Leave, StaleReport) and from
 * clients and admins (Generate, Poll, Cancel, Status, Plan).
 *
 * Every request gets exactly one reply, because a REP context stays busy
 * until it answers: an Error for a frame that fails authentication (which
 * changes nothing and is counted, INV-5), for malformed protobuf, for an
 * unexpected message, and for each validation failure (INV-3). Replies go
 * out through the REP slot the request came in on.
 *
 * Long polls: a Poll that finds no new token parks its slot (up to
 * wait_ms, at most 10 s) instead of answering; after every turn of the
 * event loop the parked polls whose request moved on, ended or timed out
 * are answered. At most three quarters of the slots may be parked, so
 * heartbeats and other requests always find a free slot; beyond that a
 * Poll is answered at once, possibly empty.
 *
 * A Heartbeat is answered with a HeartbeatReply: the other live workers'
 * control addresses (the peers it measures its links to, probe.h on the
 * worker) and, once it is drained, `leave`. Status (built by
 * api_status.c, which the HTTP gateway's status shares) carries the link
 * matrix (coord_links: measured where the workers reported, else assumed). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/log.h"
#include "common/wire/msg.h"
#include "common/base/version.h"
#include "coordinator/cluster/experts.h"
#include "coordinator/coord_impl.h"
#include "coordinator/planner/planner_pb.h"
#include "coordinator/cluster/wire_live.h"

#define API "api"

/* coord_api_send - packs r, sealed with the credential that verified slot's
 * request (api_auth.c), and answers slot: an Error reply if r cannot be
 * packed or would exceed the frame a client accepts (a large Status is
 * refused before it is packed); when not even that can be packed, the
 * request is dropped (counted by st_net_drop) so the slot serves again. */
void coord_api_send(st_coord *c, uint32_t slot, const Strata__Msg *r)
{
    nng_msg *out;
    const coord_who *w = c->auth.slot_who ? &c->auth.slot_who[slot] : NULL;
    st_env_seal_with(&c->seal.rep, w ? w->cred : 0);
    st_env_reply_to(&c->seal.rep, w ? w->sender : 0, w ? w->seq : 0); /* bound to its request */
    st_err e = st_msg_pack_max(&c->seal.rep, ST_ENV_CONTROL, r, COORD_MAX_FRAME, &out);
    if (e != ST_OK) {
        Strata__Msg em;
        Strata__Error er;
        char text[256];
        snprintf(text, sizeof text, "reply not packed: %s", st_errmsg(e));
        st_log(ST_LOG_WARN, API, "control slot %u: %s", slot, text);
        st_msg_error(&em, &er, e, text);
        st_env_reply_to(&c->seal.rep, w ? w->sender : 0, w ? w->seq : 0);
        if ((e = st_msg_pack(&c->seal.rep, ST_ENV_CONTROL, &em, &out)) != ST_OK) {
            st_log(ST_LOG_ERROR, API, "control slot %u: request dropped, no reply packed: %s", slot,
                   st_errmsg(e));
            st_env_seal_with(&c->seal.rep, 0);
            if (c->auth.slot_who)
                memset(&c->auth.slot_who[slot], 0, sizeof c->auth.slot_who[slot]);
            st_net_drop(c->net, slot);
            return;
        }
    }
    st_env_seal_with(&c->seal.rep, 0);
    if (c->auth.slot_who)
        memset(&c->auth.slot_who[slot], 0, sizeof c->auth.slot_who[slot]);
    st_net_reply(c->net, slot, out);
}

void coord_api_reply_error(st_coord *c, uint32_t slot, st_err code, const char *message)
{
    Strata__Msg m;
    Strata__Error er;
    st_msg_error(&m, &er, code, message);
    coord_api_send(c, slot, &m);
}

/* api_error - answers with code and the current error detail. */
static void api_error(st_coord *c, uint32_t slot, st_err code)
{
    char text[512];
    snprintf(text, sizeof text, "%s", st_errdetail()[0] ? st_errdetail() : st_strerror(code));
    coord_api_reply_error(c, slot, code, text);
}

static void api_ack(st_coord *c, uint32_t slot)
{
    Strata__Ack ack = STRATA__ACK__INIT;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_ACK;
    m.ack = &ack;
    coord_api_send(c, slot, &m);
}

/* ---- workers ---- */

/* api_heartbeat_reply - answers worker id's heartbeat: the other live
 * workers' control addresses (its peers to probe) and, once it is
 * drained, leave with the epoch that drained it. */
static void api_heartbeat_reply(st_coord *c, uint32_t slot, uint64_t id)
{
    const st_member *w = st_members_find(&c->ms, id);
    Strata__Peer *pv = calloc(c->ms.n ? c->ms.n : 1, sizeof *pv);
    Strata__Peer **pp = calloc(c->ms.n ? c->ms.n : 1, sizeof *pp);
    if (w == NULL || pv == NULL || pp == NULL) {
        free(pv);
        free(pp);
        api_ack(c, slot); /* no peers this time: the next heartbeat gets them */
        return;
    }
    Strata__HeartbeatReply hr = STRATA__HEARTBEAT_REPLY__INIT;
    for (size_t i = 0; i < c->ms.n; i++) {
        const st_member *m = &c->ms.v[i];
        if (m->id == id || m->life != ST_MEMBER_ALIVE || !m->heard)
            continue;
        strata__peer__init(&pv[hr.n_peers]);
        pv[hr.n_peers].worker_id = m->id;
        pv[hr.n_peers].ctl_addr = m->join->join->cap->ctl_addr;
        pp[hr.n_peers] = &pv[hr.n_peers];
        hr.n_peers++;
    }
    hr.peers = pp;
    char why[200];
    if (w->drained) {
        hr.leave = true;
        hr.drain_epoch = w->drain_epoch;
        snprintf(why, sizeof why,
                 "epoch %llu does not use worker %llu and no step in flight "
                 "does",
                 (unsigned long long)w->drain_epoch, (unsigned long long)id);
        hr.reason = why;
    }
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_HEARTBEAT_REPLY;
    m.heartbeat_reply = &hr;
    coord_api_send(c, slot, &m);
    free(pv);
    free(pp);
}

/* api_join - takes m on success (the member keeps it), bound to who. */
static bool api_join(st_coord *c, uint32_t slot, Strata__Msg *m, const coord_who *who)
{
    st_err e = st_join_validate(m->join, c->model.mi.model_id, c->cfg.wire);
    if (e == ST_OK) {
        uint64_t quiet = (uint64_t)c->cfg.heartbeat_timeout_ms * 1000000u; /* not yet lost */
        e = st_members_admit(&c->ms, m->join, who->sender, coord_now(), quiet);
        c->auth.sec.member_spoofed += e == ST_EAUTH;
        c->auth.sec.joins_refused += e == ST_EBUSY;
    }
    if (e != ST_OK) {
        st_log(ST_LOG_WARN, API, "join refused: %s", st_errmsg(e));
        c->counters.bad_msgs++; /* counted: status bad_packets */
        api_error(c, slot, e);
        return false;
    }
    const Strata__Capability *cap = m->join->cap;
    st_peer *rpc;
    if ((e = st_peer_open_req(cap->ctl_addr, ST_MSG_CONTROL_MAX_FRAME, &rpc)) != ST_OK) {
        api_error(c, slot, e);
        return false;
    }
    st_member *w;
    uint64_t replaced;
    if ((e = st_members_add(&c->ms, m, coord_now(), &w, &replaced)) != ST_OK) {
        st_peer_close(rpc);
        api_error(c, slot, e);
        return false;
    }
    w->rpc = rpc;
    w->sender = who->sender;
    w->cred = who->cred;
    uint64_t id = w->id;
    st_log(ST_LOG_INFO, API,
           "worker %llu '%s' joined (sender %llu): data %s, control %s, budget %llu MiB, %u "
           "threads%s; strata %s",
           (unsigned long long)id, cap->name ? cap->name : "", (unsigned long long)who->sender,
           cap->data_addr, cap->ctl_addr, (unsigned long long)(cap->memory_budget >> 20),
           cap->threads, cap->spare ? ", spare" : "",
           cap->version && cap->version[0] ? cap->version : "(version not sent)");
    Strata__JoinReply jr = STRATA__JOIN_REPLY__INIT;
    jr.worker_id = id;
    jr.incarnation = c->start_ms;
    jr.heartbeat_ms = c->cfg.heartbeat_ms;
    jr.control_sender = c->seal.rpc.sender;  /* the worker takes Prepare/Commit from it only */
    st_join_protocol(m->join, &jr.protocol); /* validated above: it agrees */
    jr.version = (char *)st_version_line();
    Strata__Msg r = STRATA__MSG__INIT;
    r.body_case = STRATA__MSG__BODY_JOIN_REPLY;
    r.join_reply = &jr;
    coord_api_send(c, slot, &r);
    if (replaced)
        coord_member_gone(c, replaced, ST_MEMBER_LEFT, "replaced by a new join from its address");
    return true; /* it is placed after its first heartbeat */
}

/* api_on_route - whether worker id is the worker of route `route` at some
 * stage of the serving plan (the only workers a batch of that route
 * visits). */
static bool api_on_route(const st_coord *c, uint32_t route, uint64_t id)
{
    for (uint32_t i = 0; c->plans.has_committed && i < c->plans.committed.n_stages; i++) {
        uint32_t k = st_plan_route_worker(&c->plans.committed, route, i);
        if (k < c->plans.committed.stages[i].n_workers &&
            c->plans.committed.stages[i].worker_ids[k] == id)
            return true;
    }
    return false;
}

/* api_stale - a worker refused a batch: only a live member (speaking for
 * itself: coord_api_handle checked the sender) may fail a batch, only one in
 * flight on a route through that worker, and only such a report replans. A
 * report naming a batch of another route is refused (EAUTH) and counted
 * (stale_refused): a member can fail only what it was sent. */
static void api_stale(st_coord *c, uint32_t slot, const Strata__StaleReport *s)
{
    const st_member *w = st_members_find(&c->ms, s->worker_id);
    if (w == NULL || w->life != ST_MEMBER_ALIVE) {
        c->auth.sec.stale_refused++;
        char why[160];
        snprintf(why, sizeof why,
                 "worker %llu is not a live member: its stale report is "
                 "refused",
                 (unsigned long long)s->worker_id);
        coord_api_reply_error(c, slot, ST_EAUTH, why);
        return;
    }
    const st_sched_batch *b = st_sched_batch_find(c->sched, s->batch_id);
    if (b != NULL && !api_on_route(c, b->route, s->worker_id)) {
        c->auth.sec.stale_refused++;
        char why[200];
        snprintf(why, sizeof why,
                 "batch %llu is in flight on route %u, which does not pass through "
                 "worker %llu: its stale report is refused",
                 (unsigned long long)s->batch_id, b->route, (unsigned long long)s->worker_id);
        st_log(ST_LOG_WARN, API, "%s", why);
        coord_api_reply_error(c, slot, ST_EAUTH, why);
        return;
    }
    char text[300];
    snprintf(text, sizeof text,
             "worker %llu refused batch %llu: packet epoch %llu, its epoch "
             "%llu%s%s",
             (unsigned long long)s->worker_id, (unsigned long long)s->batch_id,
             (unsigned long long)s->packet_epoch, (unsigned long long)s->current_epoch,
             s->detail && s->detail[0] ? ": " : "", s->detail ? s->detail : "");
    api_ack(c, slot);
    bool late = st_sched_fail(c->sched, s->batch_id, ST_EEPOCH, text, ST_SCHED_REQUEUE,
                              coord_now()) != ST_OK;
    c->counters.stale_results += late;
    c->auth.sec.stale_refused += late;
    st_log(ST_LOG_WARN, API, "%s%s", text, late ? " (not in flight: dropped)" : "");
    if (c->plans.has_committed && s->current_epoch != c->plans.committed.epoch)
        coord_replan(c, true, "a worker serves another epoch");
}

/* ---- clients ---- */

static void api_generate(st_coord *c, uint32_t slot, const Strata__GenerateRequest *g,
                         const coord_who *who)
{
    st_gen_req q;
    memset(&q, 0, sizeof q);
    q.sp = st_sampler_params_default();
    st_err e = ST_OK;
    if (g->has_sampling) {
        if (g->sampling == NULL) {
            coord_api_reply_error(c, slot, ST_EINVAL, "has_sampling is set but sampling is absent");
            return;
        }
        if ((e = st_sampling_from_pb(g->sampling, &q.sp)) != ST_OK) {
            api_error(c, slot, e);
            return;
        }
    }
    int32_t *ids = NULL;
    size_t n = 0;
    if (g->n_prompt_ids > 0) {
        q.prompt = g->prompt_ids;
        q.n_prompt = g->n_prompt_ids;
    } else if (c->model.tok == NULL) {
        coord_api_reply_error(c, slot, ST_EINVAL, "the model has no tokenizer: send prompt_ids");
        return;
    } else {
        size_t len = g->prompt ? strlen(g->prompt) : 0;
        if (len > (size_t)c->model.n_ctx * (c->model.max_piece ? c->model.max_piece : 1)) {
            char text[160];
            snprintf(text, sizeof text,
                     "the prompt text of %zu bytes cannot fit the context of "
                     "%u tokens",
                     len, c->model.n_ctx);
            coord_api_reply_error(c, slot, ST_EINVAL, text);
            return;
        }
        if ((e = st_tok_encode(c->model.tok, g->prompt ? g->prompt : "", len,
                               st_tok_add_bos(c->model.tok), &ids, &n)) != ST_OK) {
            api_error(c, slot, e);
            return;
        }
        q.prompt = ids;
        q.n_prompt = n;
    }
    q.max_tokens = g->max_tokens;
    q.stop = (const char *const *)g->stop;
    q.n_stop = g->n_stop;
    q.want_logits = g->want_logits;
    q.client_session = coord_auth_session(c, who, g->session_id);
    q.max_queue_ns = (uint64_t)g->max_queue_ms * 1000000u;
    uint64_t logits = g->want_logits ? (uint64_t)g->max_tokens * c->model.mi.n_vocab * sizeof(float)
                                     : 0;
    if (!coord_auth_admit(c, slot, who, g->max_tokens, logits)) {
        free(ids);
        return;
    }
    uint64_t id, ext = 0;
    e = st_sched_submit(c->sched, &q, coord_now(), &id);
    size_t n_prompt = q.n_prompt;
    free(ids);
    if (e == ST_OK && (e = coord_auth_bind(c, id, who, logits, &ext)) != ST_OK)
        st_sched_cancel(c->sched, id, coord_now());
    if (e != ST_OK) {
        api_error(c, slot, e);
        return;
    }
    Strata__GenerateReply gr = STRATA__GENERATE_REPLY__INIT;
    gr.request_id = ext; /* the scheduler's id stays inside (api_auth.c) */
    gr.n_prompt = (uint32_t)n_prompt;
    Strata__Msg r = STRATA__MSG__INIT;
    r.body_case = STRATA__MSG__BODY_GENERATE_REPLY;
    r.generate_reply = &gr;
    coord_api_send(c, slot, &r);
}

/* api_poll_reply - answers a Poll of request req_id for the ids after
 * `after`. */
static void api_poll_reply(st_coord *c, uint32_t slot, uint64_t req_id, uint32_t after)
{
    st_req_view v;
    st_err e = st_sched_view(c->sched, req_id, &v);
    if (e != ST_OK) {
        api_error(c, slot, e);
        return;
    }
    if (after > v.n_ids) {
        char text[128];
        snprintf(text, sizeof text, "after = %u is beyond the %u ids of request %llu", after,
                 v.n_ids, (unsigned long long)coord_auth_ext(c, req_id));
        coord_api_reply_error(c, slot, ST_EINVAL, text);
        return;
    }
    uint32_t n = v.n_ids - after;
    if (v.want_logits && n > 0) {
        size_t per = (size_t)v.n_vocab * sizeof(float);
        size_t most = COORD_LOGITS_PER_REPLY / per;
        if (most < 1)
            most = 1;
        if (n > most)
            n = (uint32_t)most;
    }
    bool partial = after + n < v.n_ids;
    bool done = v.done && !partial;
    size_t t0 = v.text_off[after];
    size_t t1 = partial ? v.text_off[after + n] : (v.done ? v.text_len : v.text_off[v.n_ids]);
    Strata__PollReply pr = STRATA__POLL_REPLY__INIT;
    Strata__Error er = STRATA__ERROR__INIT;
    pr.n_ids = n;
    pr.ids = (int32_t *)(v.ids + after);
    pr.text.data = (uint8_t *)(v.text + t0);
    pr.text.len = t1 - t0;
    pr.done = done;
    pr.finish_reason = (char *)(done ? v.finish : "");
    if (done && v.err != ST_OK) {
        er.code = (uint32_t)v.err;
        er.message = (char *)v.err_msg;
        pr.error = &er;
    }
    if (v.want_logits && n > 0) {
        pr.n_logits = (size_t)n * v.n_vocab;
        pr.logits = (float *)(v.logits + (size_t)after * v.n_vocab);
    }
    pr.n_vocab = v.n_vocab;
    pr.n_times_ns = n;
    pr.times_ns = (uint64_t *)(v.times + after);
    pr.steps = v.steps;
    pr.missed_steps = v.missed;
    pr.reused = v.reused;
    pr.submit_ns = v.submit_ns;
    pr.start_ns = v.start_ns;
    Strata__Msg r = STRATA__MSG__INIT;
    r.body_case = STRATA__MSG__BODY_POLL_REPLY;
    r.poll_reply = &pr;
    coord_api_send(c, slot, &r);
    if (done) /* the client has everything: it need not stay 60 s */
        st_sched_delivered(c->sched, req_id, coord_now());
}

static void api_poll(st_coord *c, uint32_t slot, const Strata__PollRequest *p, const coord_who *who)
{
    uint64_t id;
    if (!coord_auth_request(c, slot, who, p->request_id, &id))
        return;
    st_req_view v;
    st_err e = st_sched_view(c->sched, id, &v);
    if (e != ST_OK) {
        api_error(c, slot, e);
        return;
    }
    st_sched_touch(c->sched, id, coord_now()); /* the client is there */
    uint32_t wait = p->wait_ms < COORD_MAX_WAIT_MS ? p->wait_ms : COORD_MAX_WAIT_MS;
    if (v.done || v.n_ids > p->after || p->after > v.n_ids || wait == 0 ||
        c->parks.n >= c->parks.max || c->stopping || !coord_auth_park_ok(c, who)) {
        api_poll_reply(c, slot, id, p->after);
        return;
    }
    c->parks.list[c->parks.n++] = (coord_park){.slot = slot,
                                               .req_id = id,
                                               .after = p->after,
                                               .deadline_ns = coord_now() +
                                                              (uint64_t)wait * 1000000u,
                                               .who = *who};
}

st_err coord_parks_open(coord_parks *p, uint32_t slots)
{
    p->n = 0;
    p->max = slots - slots / 4;
    if ((p->list = calloc(p->max ? p->max : 1, sizeof *p->list)) == NULL)
        return st_errorf(ST_ENOMEM, "parked polls");
    return ST_OK;
}

void coord_parks_close(coord_parks *p)
{
    free(p->list);
    p->list = NULL;
    p->n = p->max = 0;
}

void coord_api_parks(st_coord *c, uint64_t now_ns, bool all)
{
    for (size_t i = 0; i < c->parks.n;) {
        coord_park *p = &c->parks.list[i];
        st_req_view v;
        bool ready = all || now_ns >= p->deadline_ns ||
                     st_sched_view(c->sched, p->req_id, &v) != ST_OK || v.done ||
                     v.n_ids > p->after;
        if (!ready) {
            st_sched_touch(c->sched, p->req_id, now_ns); /* a parked poll is a live client */
            i++;
            continue;
        }
        coord_park q = *p;
        c->parks.list[i] = c->parks.list[--c->parks.n];
        api_poll_reply(c, q.slot, q.req_id, q.after);
    }
}

/* ---- admin ---- */

/* api_status - a Status request: the reply coord_status_build gives the
 * caller's role (api_status.c). */
static void api_status(st_coord *c, uint32_t slot, const coord_who *who)
{
    coord_status st;
    st_err e = coord_status_build(c, who, &st);
    if (e != ST_OK) {
        coord_api_reply_error(c, slot, e, st_errdetail());
        return;
    }
    Strata__Msg r = STRATA__MSG__INIT;
    r.body_case = STRATA__MSG__BODY_STATUS;
    r.status = &st.sr;
    coord_api_send(c, slot, &r);
    coord_status_free(&st);
}

static void api_plan(st_coord *c, uint32_t slot)
{
    if (!c->plans.has_committed) {
        char text[400];
        snprintf(text, sizeof text, "no plan committed yet: %s",
                 c->plans.error[0] ? c->plans.error : "a plan is being prepared");
        coord_api_reply_error(c, slot, ST_ENOENT, text);
        return;
    }
    Strata__Plan *pb;
    if (st_plan_to_pb(&c->plans.committed, false, &pb) != ST_OK) {
        coord_api_reply_error(c, slot, ST_ENOMEM, "plan");
        return;
    }
    coord_wire_live_pb(c, pb, coord_now());
    Strata__Msg r = STRATA__MSG__INIT;
    r.body_case = STRATA__MSG__BODY_PLAN;
    r.plan = pb;
    coord_api_send(c, slot, &r);
    st_plan_pb_free(pb);
}

void coord_api_handle(st_coord *c, uint32_t slot, nng_msg *msg)
{
    Strata__Msg *m;
    coord_who who = {0};
    c->seal.rep.last_role = ST_ROLE_OPEN;
    c->seal.rep.last_cred = 0;
    c->seal.rep.last_seq = 0;
    c->seal.rep.last_bound = false;
    st_err e = st_msg_unpack(&c->seal.rep, ST_ENV_CONTROL, msg, &m, &who.sender);
    st_net_judged(c->net, ST_CQ_CTL, msg, e == ST_OK); /* its connection (pipe_gate.h) */
    nng_msg_free(msg);
    who.seq = e == ST_OK ? c->seal.rep.last_seq : 0;
    who.bound = e == ST_OK && c->seal.rep.last_bound;
    who.role = c->seal.rep.last_role; /* answers go back under the credential that verified */
    who.cred = c->seal.rep.last_cred;
    c->auth.slot_who[slot] = who;
    if (!coord_auth_slot_ok(c, slot, &who, !c->seal.keyed || who.role == ST_ROLE_MEMBER)) {
        if (e == ST_OK) /* dropped unanswered: the members' slots (api_auth.c) */
            st_msg_free(m);
        return;
    }
    if (e != ST_OK) {
        if (e != ST_EAUTH)
            c->counters.bad_msgs++;
        st_log(ST_LOG_WARN, API, "control message dropped: %s", st_errmsg(e));
        api_error(c, slot, e);
        return;
    }
    if (!coord_auth_bound(c, slot, &who, (int)m->body_case) ||
        !coord_auth_allowed(c, slot, &who, (int)m->body_case)) {
        st_msg_free(m);
        return;
    }
    switch (m->body_case) {
    case STRATA__MSG__BODY_HELLO: /* the Ack's sender id binds what follows */
        api_ack(c, slot);
        break;
    case STRATA__MSG__BODY_JOIN:
        if (api_join(c, slot, m, &who))
            return; /* the member owns m now */
        break;
    case STRATA__MSG__BODY_HEARTBEAT: {
        bool first = false;
        uint64_t hb_id = m->heartbeat->worker_id;
        if (!coord_auth_member(c, slot, &who, hb_id))
            break;
        st_err xe = st_experts_check(m->heartbeat, c->model.mi.n_layer, c->model.mi.n_expert);
        if (xe != ST_OK) { /* remote input beyond the model's shape: not kept */
            uint64_t nb = ++c->counters.bad_experts;
            if ((nb & (nb - 1)) == 0) /* logged at the 1st, 2nd, 4th, ... of them */
                st_log(ST_LOG_WARN, API, "worker %llu: expert load ignored (%llu so far): %s",
                       (unsigned long long)hb_id, (unsigned long long)nb, st_errmsg(xe));
            st_experts_drop(m->heartbeat);
        }
        if ((e = st_members_heartbeat(&c->ms, m, coord_now(), &first)) == ST_OK) {
            api_heartbeat_reply(c, slot, hb_id);
            if (first) /* it knows its id now: it can be placed */
                coord_replan(c, false, "a worker joined");
            else
                coord_on_heartbeat(c); /* a sustained imbalance replans (replan.c) */
            return;                    /* the member owns m now */
        }
        api_error(c, slot, e);
        break;
    }
    case STRATA__MSG__BODY_LEAVE: {
        if (!coord_auth_member(c, slot, &who, m->leave->worker_id))
            break;
        st_member *w = st_members_find(&c->ms, m->leave->worker_id);
        char why[200];
        snprintf(why, sizeof why, "left: %s", m->leave->reason ? m->leave->reason : "");
        api_ack(c, slot);
        if (w && w->life == ST_MEMBER_ALIVE)
            coord_member_gone(c, w->id, ST_MEMBER_LEFT, why);
        break;
    }
    case STRATA__MSG__BODY_STALE:
        if (coord_auth_member(c, slot, &who, m->stale->worker_id))
            api_stale(c, slot, m->stale);
        break;
    case STRATA__MSG__BODY_GENERATE:
        if (c->stopping)
            coord_api_reply_error(c, slot, ST_ECLOSED, "the coordinator is shutting down");
        else
            api_generate(c, slot, m->generate, &who);
        break;
    case STRATA__MSG__BODY_POLL:
        api_poll(c, slot, m->poll, &who);
        break;
    case STRATA__MSG__BODY_CANCEL: {
        uint64_t id;
        if (!coord_auth_request(c, slot, &who, m->cancel->request_id, &id))
            break;
        if ((e = st_sched_cancel(c->sched, id, coord_now())) == ST_OK)
            api_ack(c, slot);
        else
            api_error(c, slot, e);
        break;
    }
    case STRATA__MSG__BODY_STATUS_REQ:
        api_status(c, slot, &who);
        break;
    case STRATA__MSG__BODY_PLAN_REQ:
        api_plan(c, slot);
        break;
    case STRATA__MSG__BODY_PLAN_DRY_RUN: /* placement: admin_plan.c */
        coord_api_dry_run(c, slot, m->plan_dry_run);
        break;
    case STRATA__MSG__BODY_REPLAN:
        coord_api_replan(c, slot, m->replan);
        break;
    case STRATA__MSG__BODY_DRAIN:
        coord_api_drain(c, slot, m->drain);
        break;
    case STRATA__MSG__BODY_HOLD: /* test hooks only: hold.c */
        coord_api_hold(c, slot, m->hold);
        break;
    default: {
        char text[128];
        snprintf(text, sizeof text, "unexpected %s on the coordinator's control socket",
                 st_msg_case_name(m));
        c->counters.bad_msgs++;
        coord_api_reply_error(c, slot, ST_EPROTO, text);
        break;
    }
    }
    st_msg_free(m);
}
