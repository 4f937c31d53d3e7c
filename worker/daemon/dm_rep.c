/* dm_rep.c - the worker's control server (dm_rep.h): the REP socket the
 * coordinator sends Prepare, Commit and EndSessions to and other workers
 * send link probes to (its listener on the --listen host, behind a pipe
 * gate, common/net/pipe_gate.h), and the replies it answers with.
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
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <stdio.h>
#include <string.h>

#include "common/base/log.h"
#include "common/net/netaddr.h"
#include "common/wire/msg.h"
#include "worker/daemon/dm_internal.h"

static void dm_rep_cb(void *arg)
{
    st_daemon *d = arg;
    dm_signal(d, &d->sh.ev_rep);
}

st_err dm_rep_open(st_daemon *d, const char *host, int want_port, int *port)
{
    int rv;
    const uint8_t *key = d->self.keyed ? d->self.key : NULL;
    st_err e = st_env_init_mode(&d->srv.env, key, d->self.cfg.encrypt, d->self.sender + 2);
    if (e != ST_OK)
        return e;
    if ((rv = nng_aio_alloc(&d->srv.aio, dm_rep_cb, d)) != 0)
        return st_err_nng(rv, "aio");
    if ((rv = nng_rep0_open(&d->srv.sock)) != 0)
        return st_err_nng(rv, "control socket");
    d->srv.open = true;
    nng_socket_set_ms(d->srv.sock, NNG_OPT_SENDTIMEO, DM_REPLY_TIMEOUT_MS);
    nng_socket_set_size(d->srv.sock, NNG_OPT_RECVMAXSZ, ST_MSG_CONTROL_MAX_FRAME);
    st_pipe_gate_cfg gc = st_pipe_gate_cfg_for("control", ST_MSG_CONTROL_MAX_FRAME, true);
    e = st_pipe_gate_open(d->srv.sock, &gc, &d->srv.gate);
    if (e != ST_OK)
        return e;
    char url[ST_DP_ADDR_MAX];
    if (!st_tcp_format(host, strlen(host), want_port, url, sizeof url))
        return st_errorf(ST_EINVAL, "control listener on host '%s', port %d: not an address",
                         host, want_port);
    nng_listener l;
    if ((rv = nng_listener_create(&l, d->srv.sock, url)) != 0 ||
        (rv = nng_listener_set_bool(l, NNG_OPT_TCP_NODELAY, true)) != 0 ||
        (rv = nng_listener_start(l, 0)) != 0 ||
        (rv = nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, port)) != 0)
        return st_errorf(ST_ENNG, "control listener on %s: %s", url, nng_strerror(rv));
    return ST_OK;
}

void dm_rep_start(st_daemon *d) { nng_recv_aio(d->srv.sock, d->srv.aio); }

void dm_rep_close(st_daemon *d)
{
    if (d->srv.open)
        nng_close(d->srv.sock);
    d->srv.open = false;
    st_pipe_gate_close(d->srv.gate);
    d->srv.gate = NULL;
    dm_aio_free(d->srv.aio);
    d->srv.aio = NULL;
    st_env_fini(&d->srv.env);
}

void dm_rep_hold(st_daemon *d) { d->srv.waiting = true; }

void dm_rep_resume(st_daemon *d)
{
    d->srv.waiting = false;
    nng_recv_aio(d->srv.sock, d->srv.aio);
}

uint64_t dm_rep_sender(const st_daemon *d) { return d->srv.env.sender; }

void dm_rep_counters(const st_daemon *d, Strata__Counters *c, st_pipe_gate_counts *g)
{
    c->auth_failed += d->srv.env.auth_failed;
    c->bad_packets += d->srv.bad;
    c->refused_control += d->srv.refused;
    c->reply_failures += d->srv.reply_failed;
    st_pipe_gate_add_counts(d->srv.gate, g);
}

void dm_count_refused(st_daemon *d) { d->srv.refused++; }

/* dm_reply - answers the pending request with m; a reply that cannot be
 * packed (or would exceed what a control socket accepts) is answered with
 * an Error instead. A failure is logged and counted; the REP socket
 * receives again either way (dm_on_rep, dm_on_loader), which abandons an
 * unanswered request, so the control server is never left waiting. */
void dm_reply(st_daemon *d, const Strata__Msg *m)
{
    nng_msg *out;
    st_err e = st_msg_pack_max(&d->srv.env, ST_ENV_CONTROL, m, ST_MSG_CONTROL_MAX_FRAME, &out);
    int rv = 0;
    if (e == ST_OK && (rv = nng_sendmsg(d->srv.sock, out, 0)) != 0) {
        nng_msg_free(out);
        e = st_err_nng(rv, "send");
    }
    if (e == ST_OK)
        return;
    d->srv.reply_failed++;
    st_log(ST_LOG_WARN, "control", "reply (%s) not sent (%llu so far): %s", st_msg_case_name(m),
           (unsigned long long)d->srv.reply_failed, st_errmsg(e));
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
    r.worker_id = d->mb.worker_id;
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
    r.worker_id = d->mb.worker_id;
    r.epoch = epoch;
    r.resident_bytes = resident;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_READY;
    m.ready = &r;
    dm_reply(d, &m);
}

void dm_refused(st_daemon *d, st_err code, const char *msg)
{
    d->srv.refused++;
    st_log(ST_LOG_WARN, "control", "refused: %s", msg);
    dm_reply_error(d, code, msg);
}

/* dm_ctl_allowed - whether a Prepare, Commit or EndSessions from sender
 * may be handled: it comes from the joined coordinator (see the file
 * comment); else it is refused and counted. */
static bool dm_ctl_allowed(st_daemon *d, const Strata__Msg *m, uint64_t sender)
{
    char why[240];
    st_ctl_state cs = dm_ctl_state(d);
    st_err e = st_ctl_sender_check(&cs, st_msg_case_name(m), sender, why, sizeof why);
    if (e == ST_OK && d->srv.env.keyed && !d->srv.env.last_bound) {
        e = ST_EAUTH;
        snprintf(why, sizeof why,
                 "%s from sender %llu is not bound to this worker (control id %llu): only "
                 "requests sealed for this worker are taken",
                 st_msg_case_name(m), (unsigned long long)sender,
                 (unsigned long long)d->srv.env.sender);
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
        d->srv.bad++;
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
    int rv = nng_aio_result(d->srv.aio);
    if (rv == NNG_ECLOSED || rv == NNG_ECANCELED)
        return; /* shutting down */
    if (rv != 0) {
        st_log(ST_LOG_WARN, "control", "control receive: %s", nng_strerror(rv));
        nng_recv_aio(d->srv.sock, d->srv.aio);
        return;
    }
    nng_msg *msg = nng_aio_get_msg(d->srv.aio);
    nng_aio_set_msg(d->srv.aio, NULL);
    Strata__Msg *m = NULL;
    uint64_t sender = 0;
    d->srv.env.last_bound = false;
    d->srv.env.last_seq = 0;
    st_err e = st_msg_unpack(&d->srv.env, ST_ENV_CONTROL, msg, &m, &sender);
    if (e == ST_OK) /* its connection (pipe_gate.h) */
        st_pipe_gate_vouch(d->srv.gate, msg);
    else
        st_pipe_gate_failed(d->srv.gate, msg);
    nng_msg_free(msg);
    /* the reply (now, or after the loader for a Prepare) answers this request */
    st_env_reply_to(&d->srv.env, e == ST_OK ? sender : 0, e == ST_OK ? d->srv.env.last_seq : 0);
    if (e == ST_EAUTH) { /* dropped unanswered and counted (INV-5) */
        st_log(ST_LOG_WARN, "control", "control message dropped: %s", st_errmsg(e));
    } else if (e != ST_OK) {
        char why[400];
        snprintf(why, sizeof why, "%s", st_errmsg(e));
        d->srv.bad++;
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
        d->srv.bad++;
        dm_reply_error(d, ST_EPROTO, why);
    }
    st_msg_free(m);
    if (!d->srv.waiting)
        nng_recv_aio(d->srv.sock, d->srv.aio);
}
