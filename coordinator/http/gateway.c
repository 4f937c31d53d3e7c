/* gateway.c - the HTTP gateway attached to the coordinator's event loop.
 *
 * The contract.
 *
 * Who owns a request. A generation the gateway accepts becomes a ticket
 * (st_gw_submit, on an HTTP thread): a copy of what it asks plus the sink
 * that hears about it (the gateway's job, http_gen.c). From that call the
 * attachment owns the ticket: first in the inbox (under the attachment's
 * lock), then, once the coordinator's thread took it (coord_gw_take), in
 * the attached list, which only that thread reads or writes. The request
 * itself lives in the scheduler like every other client's, bound to the
 * gateway as its owner (api_auth.c: role MEMBER, sender 0, as trusted as
 * the cluster key the gateway's lanes used to hold), so the coordinator's
 * validation, request limits, sessions and prefix reuse apply unchanged.
 * The ticket is freed by the coordinator's thread right after it calls
 * the sink's release, the sink's last call; the job holds one reference
 * for the attachment until then (http_gen.c).
 *
 * Which thread touches what. HTTP threads call st_gw_submit and
 * st_gw_cancel: they touch the inbox and the `closed` and `wake_pending`
 * flags under the attachment's lock, and a ticket's atomic `gone` flag;
 * they push an event (ST_CQ_GATEWAY, no payload) onto the coordinator's
 * queue to wake its thread, at most one outstanding (wake_pending, which
 * the thread clears each turn, so a dropped event costs one turn of the
 * loop, COORD_LOOP_WAIT_NS, not a request). The coordinator's thread
 * does everything else: it submits, cancels, reads the scheduler and
 * calls the sinks, holding no lock of its own while it does (the sink
 * takes the job's lock; the order job lock, then attachment lock, then
 * queue lock is never reversed).
 *
 * How a token reaches the HTTP thread. Each turn of the loop, after the
 * pump and the parked polls (coord_gw_push), every attached request with
 * new ids, or that ended, gets one deliver call: the ids' text (complete
 * UTF-8 characters; the flush at the end), their times, and at the end
 * the finish reason or error. The sink appends them to its job under the
 * job's lock and resumes the suspended HTTP connection; libmicrohttpd's
 * thread then writes them out. No Poll, envelope or protobuf is
 * involved; the attached request counts as polled (st_sched_touch) each
 * turn, so the client timeout never cancels it. A sink asks to be called
 * again by an instant even if nothing happens (deliver's return): the
 * SSE keep-alive comment is written then.
 *
 * Client disconnect. The HTTP thread calls st_gw_cancel (under the job's
 * lock, so the ticket cannot be released meanwhile): it sets the ticket's
 * `gone` and wakes the coordinator, which at its next turn cancels the
 * request in the scheduler (its session slot is freed at the next step)
 * and releases the ticket without another deliver. A ticket gone while
 * still in the inbox is released without ever being submitted.
 *
 * The coordinator's status. The gateway attaches one status sink
 * (st_gw_status_attach, on the coordinator's thread before its loop, so
 * the sink's fields are the coordinator's thread's alone). At the end of
 * the loop's first turn, and then of the first turn ST_GW_STATUS_MS or
 * more after the previous publish (coord_gw_status), the coordinator's
 * thread builds the StatusReply a control client of role MEMBER gets
 * (coord_status_build, api_status.c: detailed, the coordinator-wide
 * security scope), copies it (packed, then unpacked, so nothing in it is
 * borrowed from the coordinator's state) and hands the copy to the sink's
 * publish, which owns it; NULL when it could not (out of memory). The
 * sink keeps the copy under a lock of its own (http.c's st_mu), which the
 * coordinator's thread takes only inside publish, holding none of its
 * own; there is no request to queue and no reply to wait for.
 *
 * Coordinator shutdown. When st_coord_run returns (and again at
 * st_coord_close, harmlessly), coord_gw_stop closes the inbox (st_gw_submit
 * answers ST_ECLOSED from then on, without calling the sink) and gives
 * every queued and attached ticket a last update, done with ST_ECLOSED
 * "the coordinator is shutting down", then releases it; the status sink
 * hears a last publish, NULL, and is detached. So st_http_close,
 * which main.c calls after the loop and before st_coord_close, finds every
 * job ended; the attachment is freed by st_coord_close, after which the
 * gateway must not call st_gw_*. */
#include "coordinator/http/gateway.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/cq.h"
#include "common/base/log.h"
#include "coordinator/coord_impl.h"

#define GW "gateway"
#define GW_SHUTDOWN "the coordinator is shutting down"
#define GW_ERR_TEXT 512
#define GW_NS_PER_MS 1000000ull

struct st_gw_ticket {
    struct st_gw_ticket *next; /* the inbox, or the attached list */
    st_gw_sink sink;
    atomic_bool gone;
    /* the request (owned) */
    int32_t *prompt;
    size_t n_prompt;
    uint32_t max_tokens;
    st_sampler_params sp;
    char **stop;
    size_t n_stop;
    uint64_t session_id;
    /* the coordinator's thread only */
    uint64_t req_id;
    uint32_t sent;   /* ids delivered */
    uint64_t due_ns; /* the sink wants a call by then (0: none) */
};

struct st_gw {
    pthread_mutex_t mu; /* inbox, closed, wake_pending */
    st_cq *q;
    st_gw_ticket *inbox, *inbox_tail;
    bool wake_pending;
    bool closed;
    const st_tokenizer *tok;
    st_gguf *gguf;
    st_gw_ticket *attached; /* the coordinator's thread only */
    /* the coordinator's thread only (attached before its loop) */
    st_gw_status_sink status;
    bool status_on;     /* a status sink is attached */
    bool status_sent;   /* it heard once */
    uint64_t status_ns; /* when it heard last */
};

/* ---- tickets ---- */

static void gw_ticket_free(st_gw_ticket *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; i < t->n_stop; i++)
        free(t->stop[i]);
    free(t->stop);
    free(t->prompt);
    free(t);
}

static st_gw_ticket *gw_ticket_new(const st_gw_req *q, st_gw_sink sink)
{
    st_gw_ticket *t = calloc(1, sizeof *t);
    if (t == NULL)
        return NULL;
    t->sink = sink;
    atomic_init(&t->gone, false);
    t->max_tokens = q->max_tokens;
    t->sp = q->sp;
    t->session_id = q->session_id;
    t->n_prompt = q->n_prompt;
    t->prompt = malloc((q->n_prompt ? q->n_prompt : 1) * sizeof *t->prompt);
    t->stop = calloc(q->n_stop ? q->n_stop : 1, sizeof *t->stop);
    if (t->prompt == NULL || t->stop == NULL) {
        gw_ticket_free(t);
        return NULL;
    }
    if (q->n_prompt)
        memcpy(t->prompt, q->prompt, q->n_prompt * sizeof *t->prompt);
    for (; t->n_stop < q->n_stop; t->n_stop++)
        if ((t->stop[t->n_stop] = strdup(q->stop[t->n_stop])) == NULL) {
            gw_ticket_free(t);
            return NULL;
        }
    return t;
}

/* gw_wake - wakes the coordinator's thread unless a wake is pending (g locked). */
static void gw_wake(st_gw *g)
{
    if (g->wake_pending)
        return;
    g->wake_pending = true;
    st_cq_event ev = {.kind = ST_CQ_GATEWAY};
    st_cq_push(g->q, &ev);
}

/* ---- the HTTP side ---- */

st_err st_gw_submit(st_gw *g, const st_gw_req *q, st_gw_sink sink, st_gw_ticket **out)
{
    *out = NULL;
    st_gw_ticket *t = gw_ticket_new(q, sink);
    if (t == NULL)
        return st_errorf(ST_ENOMEM, "a generation request of %zu ids", q->n_prompt);
    pthread_mutex_lock(&g->mu);
    if (g->closed) {
        pthread_mutex_unlock(&g->mu);
        gw_ticket_free(t);
        return st_errorf(ST_ECLOSED, GW_SHUTDOWN);
    }
    if (g->inbox_tail)
        g->inbox_tail->next = t;
    else
        g->inbox = t;
    g->inbox_tail = t;
    *out = t;
    gw_wake(g);
    pthread_mutex_unlock(&g->mu);
    return ST_OK;
}

void st_gw_cancel(st_gw *g, st_gw_ticket *t)
{
    atomic_store(&t->gone, true);
    pthread_mutex_lock(&g->mu);
    gw_wake(g);
    pthread_mutex_unlock(&g->mu);
}

const st_tokenizer *st_gw_tokenizer(const st_gw *g) { return g->tok; }

st_gguf *st_gw_gguf(const st_gw *g) { return g->gguf; }

void st_gw_status_attach(st_gw *g, st_gw_status_sink sink)
{
    g->status = sink;
    g->status_on = true;
}

/* ---- the coordinator's side ---- */

st_err coord_gw_open(st_cq *q, const st_tokenizer *tok, st_gguf *gguf, st_gw **out)
{
    *out = NULL;
    st_gw *g = calloc(1, sizeof *g);
    if (g == NULL)
        return st_errorf(ST_ENOMEM, "the gateway's attachment");
    if (pthread_mutex_init(&g->mu, NULL) != 0) {
        free(g);
        return st_errorf(ST_ENOMEM, "the gateway's attachment lock");
    }
    g->q = q;
    g->tok = tok;
    g->gguf = gguf;
    *out = g;
    return ST_OK;
}

void coord_gw_close(st_gw *g)
{
    if (g == NULL)
        return;
    pthread_mutex_destroy(&g->mu);
    free(g);
}

/* gw_end - the last update of t (done with code and msg) unless its
 * client is gone, then its release; t is freed. */
static void gw_end(st_gw_ticket *t, st_err code, const char *msg)
{
    if (!atomic_load(&t->gone)) {
        st_gw_update u = {.done = true, .finish = NULL, .err = code, .err_msg = msg};
        (void)t->sink.deliver(t->sink.arg, &u);
    }
    t->sink.release(t->sink.arg);
    gw_ticket_free(t);
}

/* gw_release - t's release without an update; t is freed. */
static void gw_release(st_gw_ticket *t)
{
    t->sink.release(t->sink.arg);
    gw_ticket_free(t);
}

/* gw_refuse - t is refused with code and the error detail of this thread
 * (as api.c answers a Generate it refuses). */
static void gw_refuse(st_gw_ticket *t, st_err code)
{
    char text[GW_ERR_TEXT];
    snprintf(text, sizeof text, "%s", st_errdetail()[0] ? st_errdetail() : st_strerror(code));
    gw_end(t, code, text);
}

/* gw_who - the owner the gateway's requests are bound to (the file comment). */
static coord_who gw_who(void)
{
    return (coord_who){.sender = 0, .seq = 0, .cred = 0, .role = ST_ROLE_MEMBER, .bound = true};
}

/* gw_admit - submits t to the scheduler (api.c's Generate for prompt
 * ids); on success t is attached and told so, else refused. */
static void gw_admit(st_coord *c, st_gw_ticket *t, uint64_t now)
{
    st_gw *g = c->gw;
    if (c->stopping) {
        gw_end(t, ST_ECLOSED, GW_SHUTDOWN);
        return;
    }
    st_err e = st_sampler_params_validate(&t->sp);
    if (e != ST_OK) {
        gw_refuse(t, e);
        return;
    }
    coord_who who = gw_who();
    char text[GW_ERR_TEXT];
    if ((e = coord_auth_quota(c, &who, t->max_tokens, 0, text, sizeof text)) != ST_OK) {
        gw_end(t, e, text);
        return;
    }
    st_gen_req q;
    memset(&q, 0, sizeof q);
    q.prompt = t->prompt;
    q.n_prompt = t->n_prompt;
    q.max_tokens = t->max_tokens;
    q.sp = t->sp;
    q.stop = (const char *const *)t->stop;
    q.n_stop = t->n_stop;
    q.client_session = coord_auth_session(c, &who, t->session_id);
    uint64_t id, ext = 0;
    e = st_sched_submit(c->sched, &q, now, &id);
    if (e == ST_OK && (e = coord_auth_bind(c, id, &who, 0, &ext)) != ST_OK)
        st_sched_cancel(c->sched, id, now);
    if (e != ST_OK) {
        gw_refuse(t, e);
        return;
    }
    st_req_view v;
    uint64_t submit_ns = st_sched_view(c->sched, id, &v) == ST_OK ? v.submit_ns : now;
    t->req_id = id;
    t->next = g->attached;
    g->attached = t;
    st_gw_update u = {.accepted = true, .n_prompt = (uint32_t)t->n_prompt, .submit_ns = submit_ns};
    t->due_ns = t->sink.deliver(t->sink.arg, &u);
}

void coord_gw_take(st_coord *c, uint64_t now_ns)
{
    st_gw *g = c->gw;
    if (g == NULL)
        return;
    pthread_mutex_lock(&g->mu);
    st_gw_ticket *t = g->inbox;
    g->inbox = g->inbox_tail = NULL;
    g->wake_pending = false;
    pthread_mutex_unlock(&g->mu);
    while (t) {
        st_gw_ticket *next = t->next;
        t->next = NULL;
        if (atomic_load(&t->gone))
            gw_release(t); /* its client left before it was submitted */
        else
            gw_admit(c, t, now_ns);
        t = next;
    }
    for (st_gw_ticket **pp = &g->attached; *pp;) { /* clients gone since the last turn */
        st_gw_ticket *a = *pp;
        if (!atomic_load(&a->gone)) {
            pp = &a->next;
            continue;
        }
        *pp = a->next;
        st_sched_cancel(c->sched, a->req_id, now_ns); /* a request that ended is left as it is */
        gw_release(a);
    }
}

/* gw_push_one - delivers what is new of t, if anything or if due; false
 * when t ended (then it was released). */
static bool gw_push_one(st_coord *c, st_gw_ticket *t, uint64_t now)
{
    st_req_view v;
    st_err e = st_sched_view(c->sched, t->req_id, &v);
    if (e != ST_OK) {
        gw_refuse(t, e);
        return false;
    }
    st_sched_touch(c->sched, t->req_id, now); /* an attached request has its client */
    bool due = t->due_ns != 0 && now >= t->due_ns;
    if (!v.done && v.n_ids <= t->sent && !due)
        return true;
    uint32_t after = t->sent < v.n_ids ? t->sent : v.n_ids;
    size_t t0 = v.text_off[after];
    size_t t1 = v.done ? v.text_len : v.text_off[v.n_ids];
    st_gw_update u = {.submit_ns = v.submit_ns,
                      .text = v.text + t0,
                      .text_len = t1 - t0,
                      .n_ids = v.n_ids - after,
                      .times_ns = v.times + after,
                      .done = v.done,
                      .finish = v.done ? v.finish : "",
                      .err = v.done ? v.err : ST_OK,
                      .err_msg = v.done && v.err != ST_OK ? v.err_msg : NULL};
    t->sent = v.n_ids;
    t->due_ns = t->sink.deliver(t->sink.arg, &u);
    if (!v.done)
        return true;
    st_sched_delivered(c->sched, t->req_id, now); /* the client has everything */
    gw_release(t);
    return false;
}

void coord_gw_push(st_coord *c, uint64_t now_ns)
{
    st_gw *g = c->gw;
    if (g == NULL)
        return;
    for (st_gw_ticket **pp = &g->attached; *pp;) {
        st_gw_ticket *t = *pp;
        st_gw_ticket *next = t->next;
        if (atomic_load(&t->gone)) { /* cancelled at the next take */
            pp = &t->next;
            continue;
        }
        if (gw_push_one(c, t, now_ns))
            pp = &t->next;
        else
            *pp = next;
    }
}

/* gw_status_copy - the Status of the gateway's role (gw_who) as an owned
 * copy (packed, then unpacked: nothing borrowed from c); NULL when out of
 * memory. */
static Strata__StatusReply *gw_status_copy(st_coord *c)
{
    coord_who who = gw_who();
    coord_status st;
    st_err e = coord_status_build(c, &who, &st);
    if (e != ST_OK) {
        st_log(ST_LOG_DEBUG, GW, "status: %s", st_errmsg(e));
        return NULL;
    }
    size_t n = strata__status_reply__get_packed_size(&st.sr);
    uint8_t *buf = malloc(n ? n : 1);
    Strata__StatusReply *out = NULL;
    if (buf != NULL) {
        strata__status_reply__pack(&st.sr, buf);
        out = strata__status_reply__unpack(NULL, n, buf);
    }
    if (out == NULL)
        st_log(ST_LOG_DEBUG, GW, "status: out of memory copying %zu bytes", n);
    free(buf);
    coord_status_free(&st);
    return out;
}

void coord_gw_status(st_coord *c, uint64_t now_ns)
{
    st_gw *g = c->gw;
    if (g == NULL || !g->status_on)
        return;
    if (g->status_sent && now_ns - g->status_ns < (uint64_t)ST_GW_STATUS_MS * GW_NS_PER_MS)
        return;
    g->status_sent = true;
    g->status_ns = now_ns;
    g->status.publish(g->status.arg, gw_status_copy(c));
}

void coord_gw_stop(st_coord *c)
{
    st_gw *g = c->gw;
    if (g == NULL)
        return;
    if (g->status_on) { /* the last publish: the loop ended */
        g->status_on = false;
        g->status.publish(g->status.arg, NULL);
    }
    pthread_mutex_lock(&g->mu);
    g->closed = true;
    st_gw_ticket *t = g->inbox;
    g->inbox = g->inbox_tail = NULL;
    pthread_mutex_unlock(&g->mu);
    size_t n = 0;
    while (t) {
        st_gw_ticket *next = t->next;
        gw_end(t, ST_ECLOSED, GW_SHUTDOWN);
        t = next;
        n++;
    }
    for (t = g->attached; t;) {
        st_gw_ticket *next = t->next;
        gw_end(t, ST_ECLOSED, GW_SHUTDOWN);
        t = next;
        n++;
    }
    g->attached = NULL;
    if (n)
        st_log(ST_LOG_INFO, GW, "%zu HTTP request(s) ended: %s", n, GW_SHUTDOWN);
}
