/* dm_rep.c - the worker's control server: the REP socket the coordinator
 * sends Prepare, Commit and EndSessions to and other workers send link
 * probes to, and the replies it answers with.
 *
 * Design. One request at a time, as REP serialises them: dm_on_rep
 * unpacks a received message (a message that fails authentication is
 * dropped unanswered and counted, INV-5; any other bad message gets an
 * Error reply naming the fault), dispatches it, and arms the next
 * receive, except while a Prepare's stage is loading (dm_plan.c): its
 * reply, and so the next receive, waits for the loader. A probe is
 * answered at once with a tiny ProbeReply; a payload over
 * ST_PROBE_MAX_PAYLOAD is refused (probe.h).
 *
 * Who may steer the worker. Prepare, Commit and EndSessions change what
 * the worker serves, so they are taken only from the coordinator it
 * joined: the JoinReply names the sender id of the coordinator's control
 * requests (and its incarnation, which a Prepare's plan must carry too,
 * dm_plan.c). A request from any other sender, or before any join, is
 * refused with an ST_EAUTH Error naming both ids and counted
 * (Counters.refused_control, with the Prepare and Commit refusals of
 * dm_plan.c). Without a cluster key a sender id is not authenticated (a
 * stranger who learns it can copy it); the checks of dm_plan.c (a Commit
 * needs its Prepare, hashes must match, epochs only grow) hold anyway.
 * With a key they must also be bound to this worker (envelope.h: the
 * coordinator binds its requests to the id the worker's Join announced,
 * Capability.ctl_sender), so a Prepare, Commit or EndSessions captured on
 * its way to another worker sharing the key fails the MAC here, and an
 * unbound one is refused like a stranger's. Every reply is bound to the
 * request it answers (st_env_reply_to).
 * Probes come from the other workers and change nothing: anyone may send
 * them. */
#include <stdio.h>
#include <string.h>

#include "common/base/log.h"
#include "common/wire/msg.h"
#include "worker/daemon/dm_internal.h"

/* dm_reply - answers the pending request with m; a reply that cannot be
 * packed (or would exceed what a control socket accepts) is answered with
 * an Error instead. A failure is logged and counted; the REP socket
 * receives again either way (dm_on_rep, dm_on_loader), which abandons an
 * unanswered request, so the control server is never left waiting. */
void dm_reply(st_daemon *d, const Strata__Msg *m)
{
    nng_msg *out;
    st_err e = st_msg_pack_max(&d->env_rep, ST_ENV_CONTROL, m, ST_MSG_CONTROL_MAX_FRAME, &out);
    int rv = 0;
    if (e == ST_OK && (rv = nng_sendmsg(d->rep, out, 0)) != 0) {
        nng_msg_free(out);
        e = st_err_nng(rv, "send");
    }
    if (e == ST_OK)
        return;
    d->reply_failed++;
    st_log(ST_LOG_WARN, "control", "reply (%s) not sent (%llu so far): %s", st_msg_case_name(m),
           (unsigned long long)d->reply_failed, st_errmsg(e));
    if (rv == 0 && m->body_case != STRATA__MSG__BODY_ERROR) {
        char why[400];
        snprintf(why, sizeof why, "reply not packed: %s", st_errmsg(e));
        dm_reply_error(d, e, why);
    }
}

void dm_reply_error(st_daemon *d, st_err code, const char *msg)
{
    Strata__Msg m;
    Strata__Error er;
    st_msg_error(&m, &er, code, msg);
    dm_reply(d, &m);
}

void dm_reply_ack(st_daemon *d)
{
    Strata__Ack a = STRATA__ACK__INIT;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_ACK;
    m.ack = &a;
    dm_reply(d, &m);
}

void dm_refuse(st_daemon *d, uint64_t epoch, const char *reason)
{
    st_log(ST_LOG_WARN, "control", "refusing plan of epoch %llu: %s", (unsigned long long)epoch,
           reason);
    Strata__Refuse r = STRATA__REFUSE__INIT;
    r.worker_id = d->worker_id;
    r.epoch = epoch;
    r.reason = (char *)reason;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_REFUSE;
    m.refuse = &r;
    dm_reply(d, &m);
}

void dm_ready(st_daemon *d, uint64_t epoch, uint64_t resident)
{
    Strata__Ready r = STRATA__READY__INIT;
    r.worker_id = d->worker_id;
    r.epoch = epoch;
    r.resident_bytes = resident;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_READY;
    m.ready = &r;
    dm_reply(d, &m);
}

void dm_refused(st_daemon *d, st_err code, const char *msg)
{
    d->ctl_refused++;
    st_log(ST_LOG_WARN, "control", "refused: %s", msg);
    dm_reply_error(d, code, msg);
}

void dm_on_join_reply(st_daemon *d, const Strata__JoinReply *jr, double now)
{
    if (d->incarnation != 0 && jr->incarnation != d->incarnation)
        st_log(ST_LOG_INFO, "control", "coordinator incarnation %llu -> %llu (restarted)",
               (unsigned long long)d->incarnation, (unsigned long long)jr->incarnation);
    d->worker_id = jr->worker_id;
    d->incarnation = jr->incarnation;
    d->coord_ctl = jr->control_sender;
    if (jr->heartbeat_ms >= 10 && jr->heartbeat_ms <= 600000)
        d->hb_ms = jr->heartbeat_ms;
    d->joined = true;
    d->hb_fails = 0;
    d->backoff = DM_BACKOFF_MIN_S;
    d->next_hb = now;
    pthread_mutex_lock(&d->sh.mu);
    d->sh.worker_id = d->worker_id;
    pthread_mutex_unlock(&d->sh.mu);
    if (d->coord_ctl == 0)
        st_log(ST_LOG_WARN, "control",
               "the JoinReply names no control sender: every Prepare, "
               "Commit and EndSessions will be refused");
    st_log(ST_LOG_INFO, "control",
           "joined %s as worker %llu (incarnation %llu, heartbeat %u ms, "
           "control sender %llu; protocol %u, coordinator strata %s)",
           d->cfg.coordinator, (unsigned long long)d->worker_id, (unsigned long long)d->incarnation,
           d->hb_ms, (unsigned long long)d->coord_ctl,
           jr->protocol ? jr->protocol : (uint32_t)STRATA__VERSION__PROTOCOL, /* 0: older builds */
           jr->version && jr->version[0] ? jr->version : "(not sent)");
}

/* dm_ctl_allowed - whether a Prepare, Commit or EndSessions from sender
 * may be handled: it comes from the joined coordinator (see the file
 * comment); else it is refused and counted. */
static bool dm_ctl_allowed(st_daemon *d, const Strata__Msg *m, uint64_t sender)
{
    char why[240];
    st_ctl_state cs = dm_ctl_state(d);
    st_err e = st_ctl_sender_check(&cs, st_msg_case_name(m), sender, why, sizeof why);
    if (e == ST_OK && d->env_rep.keyed && !d->env_rep.last_bound) {
        e = ST_EAUTH;
        snprintf(why, sizeof why,
                 "%s from sender %llu is not bound to this worker (control id %llu): only "
                 "requests sealed for this worker are taken",
                 st_msg_case_name(m), (unsigned long long)sender,
                 (unsigned long long)d->env_rep.sender);
    }
    if (e == ST_OK)
        return true;
    dm_refused(d, e, why);
    return false;
}

static void dm_end_sessions(st_daemon *d, const Strata__EndSessions *es)
{
    pthread_mutex_lock(&d->sh.mu);
    for (size_t i = 0; i < es->n_session_ids; i++) {
        if (d->sh.n_end < ST_DP_END_CAP)
            d->sh.end_ids[d->sh.n_end++] = es->session_ids[i];
        else
            d->sh.end_dropped++; /* LRU eviction still bounds the caches */
    }
    pthread_mutex_unlock(&d->sh.mu);
    dm_reply_ack(d);
}

/* dm_probe - answers a link probe at once with a tiny ProbeReply; a
 * payload over ST_PROBE_MAX_PAYLOAD is refused (probe.h). */
static void dm_probe(st_daemon *d, const Strata__Probe *pb)
{
    if (pb->payload.len > ST_PROBE_MAX_PAYLOAD) {
        char why[160];
        snprintf(why, sizeof why, "probe from worker %llu: payload of %zu bytes exceeds %zu",
                 (unsigned long long)pb->worker_id, pb->payload.len, ST_PROBE_MAX_PAYLOAD);
        d->ctl_bad++;
        dm_reply_error(d, ST_ERANGE, why);
        return;
    }
    Strata__ProbeReply pr = STRATA__PROBE_REPLY__INIT;
    pr.seq = pb->seq;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_PROBE_REPLY;
    m.probe_reply = &pr;
    dm_reply(d, &m);
}

void dm_on_rep(st_daemon *d)
{
    int rv = nng_aio_result(d->rep_aio);
    if (rv == NNG_ECLOSED || rv == NNG_ECANCELED)
        return; /* shutting down */
    if (rv != 0) {
        st_log(ST_LOG_WARN, "control", "control receive: %s", nng_strerror(rv));
        nng_recv_aio(d->rep, d->rep_aio);
        return;
    }
    nng_msg *msg = nng_aio_get_msg(d->rep_aio);
    nng_aio_set_msg(d->rep_aio, NULL);
    Strata__Msg *m = NULL;
    uint64_t sender = 0;
    d->env_rep.last_bound = false;
    d->env_rep.last_seq = 0;
    st_err e = st_msg_unpack(&d->env_rep, ST_ENV_CONTROL, msg, &m, &sender);
    if (e == ST_OK) /* its connection (pipe_gate.h) */
        st_pipe_gate_vouch(d->rep_gate, msg);
    else
        st_pipe_gate_failed(d->rep_gate, msg);
    nng_msg_free(msg);
    /* the reply (now, or after the loader for a Prepare) answers this request */
    st_env_reply_to(&d->env_rep, e == ST_OK ? sender : 0, e == ST_OK ? d->env_rep.last_seq : 0);
    if (e == ST_EAUTH) { /* dropped unanswered and counted (INV-5) */
        st_log(ST_LOG_WARN, "control", "control message dropped: %s", st_errmsg(e));
    } else if (e != ST_OK) {
        char why[400];
        snprintf(why, sizeof why, "%s", st_errmsg(e));
        d->ctl_bad++;
        st_log(ST_LOG_WARN, "control", "bad control message: %s", why);
        dm_reply_error(d, e, why);
    } else if (d->stopping) {
        dm_reply_error(d, ST_ECLOSED, "the worker is shutting down");
    } else if ((m->body_case == STRATA__MSG__BODY_PREPARE ||
                m->body_case == STRATA__MSG__BODY_COMMIT ||
                m->body_case == STRATA__MSG__BODY_END_SESSIONS) &&
               !dm_ctl_allowed(d, m, sender)) {
        /* refused and counted */
    } else if (m->body_case == STRATA__MSG__BODY_PREPARE) {
        dm_prepare(d, m->prepare);
    } else if (m->body_case == STRATA__MSG__BODY_COMMIT) {
        dm_commit(d, m->commit);
    } else if (m->body_case == STRATA__MSG__BODY_END_SESSIONS) {
        dm_end_sessions(d, m->end_sessions);
    } else if (m->body_case == STRATA__MSG__BODY_PROBE) {
        dm_probe(d, m->probe);
    } else {
        char why[160];
        snprintf(why, sizeof why, "unexpected %s on a worker's control socket",
                 st_msg_case_name(m));
        d->ctl_bad++;
        dm_reply_error(d, ST_EPROTO, why);
    }
    st_msg_free(m);
    if (!d->rep_waiting)
        nng_recv_aio(d->rep, d->rep_aio);
}
