/* http_gen.c - generation requests of the HTTP gateway: from a validated
 * body to prompt ids, the request's ticket with the coordinator
 * (gateway.h), and the answer (one JSON document, or Server-Sent Events).
 *
 * A job is one generation request. Three parties hold it, each with a
 * reference: the connection (until MHD reports the request completed),
 * the coordinator's attachment (from st_gw_submit until its ticket's
 * release) and, for a stream, MHD's response (until MHD frees it). Its
 * mutex guards everything below; the order is job lock, then the
 * gateway's lock or the attachment's (never the reverse).
 *
 * The connection is suspended while the job has nothing to send, so no
 * thread waits on a job: the coordinator's thread delivers each update
 * (the accept, new ids and text, the end) to the job's sink (job_deliver)
 * under the job's lock and resumes it. A stream is answered (status 200,
 * headers) once the coordinator accepted the request, so an error before
 * that is an HTTP status and one after it is an SSE error event followed
 * by [DONE]. A client that goes away cancels its ticket (st_gw_cancel):
 * the coordinator cancels the request at its next turn, so its session
 * slot is freed at the next step. While a stream is silent the sink asks
 * to be called again when its keep-alive comment is due. */
#include <inttypes.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/base/clock.h"
#include "common/base/log.h"
#include "common/text/sampling.h"
#include "coordinator/http/http_impl.h"

#define GEN "http"
#define GEN_NS_PER_S 1000000000ull
#define GEN_BLOCK 16384 /* bytes MHD asks the stream reader for at most */
#define GEN_ID_BYTES 12
#define GEN_PING ": ping\n\n"
#define GEN_DONE_EVENT "data: [DONE]\n\n"
#define GEN_RETRY_S 1

typedef struct http_job {
    st_http *h;
    struct http_job *prev, *next; /* h->jobs */
    pthread_mutex_t mu;
    int refs;
    struct MHD_Connection *conn; /* NULL once MHD completed the request */
    st_gw_ticket *ticket;        /* NULL before the submit and once released */
    bool suspended;
    /* the request */
    st_http_kind kind;
    bool stream, include_usage;
    char **stop;
    size_t n_stop;
    char rate_id[HTTP_IDENT_MAX];
    st_http_limits lim;
    char id[HTTP_JOB_ID_MAX];
    char model[HTTP_MODEL_MAX];
    int64_t created;
    /* progress */
    uint32_t n_prompt, n_got;
    uint64_t last_tok_ns, last_byte_ns;
    char *text;
    size_t text_len, text_cap, shown;
    bool accepted, done, failed, stopped, answered;
    const char *finish; /* OpenAI's, when done and not failed */
    st_http_error err;
    uint32_t retry_s;
    /* the stream's unsent bytes */
    char *out;
    size_t out_len, out_off, out_cap;
} http_job;

/* ---- references and generation slots ---- */

static void job_free(http_job *j)
{
    st_http *h = j->h;
    pthread_mutex_lock(&h->mu);
    if (j->prev)
        j->prev->next = j->next;
    else
        h->jobs = j->next;
    if (j->next)
        j->next->prev = j->prev;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    atomic_fetch_sub(&h->met.streams, 1);
    for (size_t i = 0; i < j->n_stop; i++)
        free(j->stop[i]);
    free(j->stop);
    free(j->text);
    free(j->out);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

static void job_unref(http_job *j)
{
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left == 0)
        job_free(j);
}

/* slot_take - one of the cfg.streams generation slots, unless the
 * gateway is stopping or all are in use. */
static bool slot_take(st_http *h)
{
    pthread_mutex_lock(&h->mu);
    bool ok = !h->stopping && h->n_gen < h->cfg.streams;
    h->n_gen += ok;
    pthread_mutex_unlock(&h->mu);
    return ok;
}

static void slot_give(st_http *h)
{
    pthread_mutex_lock(&h->mu);
    h->n_gen--;
    pthread_mutex_unlock(&h->mu);
}

/* job_end_attach - the attachment's part of j is over: gives its slot
 * back and drops the attachment's reference. Called without j's lock. */
static void job_end_attach(http_job *j)
{
    slot_give(j->h);
    job_unref(j);
}

/* job_wake - resumes j's connection if it waits (j locked). */
static void job_wake(http_job *j)
{
    if (j->suspended && j->conn) {
        j->suspended = false;
        MHD_resume_connection(j->conn);
    }
}

/* ---- output ---- */

static void job_out(http_job *j, const char *s, size_t n)
{
    if (j->out_off == j->out_len)
        j->out_off = j->out_len = 0;
    if (j->out_len + n > j->out_cap) {
        size_t c = j->out_cap ? j->out_cap : GEN_BLOCK;
        while (c < j->out_len + n)
            c *= 2;
        char *p = realloc(j->out, c);
        if (p == NULL) { /* the stream cannot go on: end it */
            j->failed = j->done = true;
            return;
        }
        j->out = p;
        j->out_cap = c;
    }
    memcpy(j->out + j->out_len, s, n);
    j->out_len += n;
    j->last_byte_ns = st_now_ns();
}

/* job_event - "data: doc\n\n" (doc taken; NULL: the stream fails). */
static void job_event(http_job *j, char *doc)
{
    if (doc == NULL) {
        j->failed = j->done = true;
        return;
    }
    job_out(j, "data: ", 6);
    job_out(j, doc, strlen(doc));
    job_out(j, "\n\n", 2);
    free(doc);
}

static st_http_ident job_ident(const http_job *j)
{
    return (st_http_ident){.kind = j->kind, .id = j->id, .created = j->created, .model = j->model};
}

/* job_emit - appends the stream's new events (j locked, headers sent). */
static void job_emit(http_job *j)
{
    st_http_ident r = job_ident(j);
    size_t vis = st_http_stop_cut(j->text, j->text_len, j->stop, j->n_stop, j->done, j->stopped);
    if (!j->failed && vis > j->shown) {
        job_event(j, st_http_resp_chunk(&r, j->text + j->shown, vis - j->shown, false, NULL));
        j->shown = vis;
    }
    if (!j->done)
        return;
    if (j->failed) {
        char *e = st_http_error_json(&j->err);
        if (e)
            job_event(j, e);
    } else {
        job_event(j, st_http_resp_chunk(&r, "", 0, false, j->finish));
        if (j->include_usage)
            job_event(j, st_http_resp_usage(&r, j->n_prompt, j->n_got));
    }
    job_out(j, GEN_DONE_EVENT, strlen(GEN_DONE_EVENT));
}

/* job_fail - ends j with an error (j locked). */
static void job_fail(http_job *j, int status, const char *type, const char *code, const char *msg,
                     uint32_t retry_s)
{
    st_http_error_set(&j->err, status, type, code, "%s", msg);
    j->retry_s = retry_s;
    j->failed = j->done = true;
}

/* job_fail_code - ends j with the coordinator's error e, message msg. */
static void job_fail_code(http_job *j, st_err e, const char *msg)
{
    if (e == ST_EBUSY || e == ST_ECLOSED || e == ST_ENNG || e == ST_ETIMEOUT)
        job_fail(j, MHD_HTTP_SERVICE_UNAVAILABLE, "server_error", "unavailable", msg, GEN_RETRY_S);
    else if (e == ST_EINVAL || e == ST_ERANGE)
        job_fail(j, MHD_HTTP_BAD_REQUEST, "invalid_request_error", "invalid_value", msg, 0);
    else
        job_fail(j, MHD_HTTP_INTERNAL_SERVER_ERROR, "server_error", NULL, msg, 0);
}

/* job_fail_err - ends j with error e (detail on this thread). */
static void job_fail_err(http_job *j, st_err e)
{
    char msg[ST_HTTP_ERR_MSG];
    snprintf(msg, sizeof msg, "%s", st_errdetail()[0] ? st_errdetail() : st_strerror(e));
    job_fail_code(j, e, msg);
}

/* ---- the sink: updates from the coordinator's thread ---- */

/* job_ping_ns - the silence after which a stream gets an SSE comment. */
static uint64_t job_ping_ns(const http_job *j) { return (uint64_t)j->h->cfg.ping_s * GEN_NS_PER_S; }

/* job_take - adds an update's ids and text to j, and its end (j locked). */
static void job_take(http_job *j, const st_gw_update *u)
{
    st_http *h = j->h;
    if (u->text_len > 0) {
        if (j->text_len + u->text_len + 1 > j->text_cap) {
            size_t c = j->text_cap ? j->text_cap : GEN_BLOCK;
            while (c < j->text_len + u->text_len + 1)
                c *= 2;
            char *t = realloc(j->text, c);
            if (t == NULL) {
                job_fail(j, MHD_HTTP_INTERNAL_SERVER_ERROR, "server_error", NULL,
                         "out of memory for the reply text", 0);
                return;
            }
            j->text = t;
            j->text_cap = c;
        }
        memcpy(j->text + j->text_len, u->text, u->text_len);
        j->text_len += u->text_len;
    }
    for (size_t i = 0; i < u->n_ids; i++) {
        uint64_t t = u->times_ns[i];
        if (j->n_got + i == 0 && t >= u->submit_ns && u->submit_ns)
            st_http_metrics_ttft(&h->met, t - u->submit_ns);
        else if (j->last_tok_ns && t >= j->last_tok_ns)
            st_http_metrics_itl(&h->met, t - j->last_tok_ns);
        j->last_tok_ns = t;
    }
    j->n_got += u->n_ids;
    atomic_fetch_add(&h->met.generated_tokens, u->n_ids);
    st_http_rate_spend(h->rate, j->rate_id, j->lim, u->n_ids, st_now_ns());
    if (!u->done)
        return;
    if (u->finish == NULL) { /* cut off by the attachment (shutdown) or not found */
        job_fail_code(j, u->err, u->err_msg ? u->err_msg : st_strerror(u->err));
        return;
    }
    const char *why = u->finish;
    j->finish = st_http_finish_reason(why);
    j->stopped = strcmp(why, "stop") == 0;
    if (j->finish) {
        j->done = true;
        return;
    }
    char msg[ST_HTTP_ERR_MSG];
    snprintf(msg, sizeof msg, "the request ended (%s): %s", why,
             u->err_msg ? u->err_msg : "no detail");
    job_fail(j, MHD_HTTP_INTERNAL_SERVER_ERROR, "server_error", why[0] ? why : NULL, msg, 0);
}

/* job_deliver - the sink's deliver (gateway.h): the accept, a refusal,
 * new ids and text, the end, or a keep-alive call. */
static uint64_t job_deliver(void *arg, const st_gw_update *u)
{
    http_job *j = arg;
    pthread_mutex_lock(&j->mu);
    bool was_done = j->done;
    if (u->accepted) {
        j->n_prompt = u->n_prompt;
        j->accepted = true;
        j->last_byte_ns = st_now_ns(); /* its headers go out now: the first ping is due from here */
        atomic_fetch_add(&j->h->met.prompt_tokens, j->n_prompt);
    } else if (u->done && !j->accepted) {
        job_fail_code(j, u->err, u->err_msg ? u->err_msg : st_strerror(u->err)); /* refused */
    } else if (!j->done) {
        job_take(j, u);
    }
    if (j->stream && j->answered && !was_done) {
        job_emit(j);
        if (!j->done && st_now_ns() >= j->last_byte_ns + job_ping_ns(j))
            job_out(j, GEN_PING, strlen(GEN_PING)); /* silence while it waits */
    }
    if (j->done || (j->stream && (u->accepted || j->out_off < j->out_len)))
        job_wake(j); /* a stream's headers go out once it is accepted */
    uint64_t due = j->stream && !j->done ? j->last_byte_ns + job_ping_ns(j) : 0;
    pthread_mutex_unlock(&j->mu);
    return due;
}

/* job_release - the sink's release: the coordinator forgot j's ticket. */
static void job_release(void *arg)
{
    http_job *j = arg;
    pthread_mutex_lock(&j->mu);
    j->ticket = NULL;
    pthread_mutex_unlock(&j->mu);
    job_end_attach(j);
}

/* ---- the start ---- */

/* gen_prompt - the prompt ids of g into *ids (malloc'ed). */
static st_err gen_prompt(st_http *h, const st_http_gen *g, int32_t **ids, size_t *n,
                         st_http_error *err)
{
    st_err e;
    if (g->kind == ST_HTTP_CHAT) {
        if (!h->has_tmpl) {
            st_http_error_set(err, MHD_HTTP_BAD_REQUEST, "invalid_request_error",
                              "no_chat_template", "%s", h->tmpl_err);
            return ST_EINVAL;
        }
        char *text = NULL;
        size_t len = 0;
        if ((e = st_chat_render(h->tmpl, g->msgs, g->n_msgs, true, &text, &len)) == ST_OK)
            e = st_chat_encode(h->tok, text, len, true, ids, n);
        free(text);
    } else if (!g->has_ids) {
        e = st_chat_encode(h->tok, g->prompt, strlen(g->prompt), true, ids, n);
    } else {
        size_t nv = st_tok_n_vocab(h->tok);
        for (size_t i = 0; i < g->n_prompt_ids; i++)
            if ((size_t)g->prompt_ids[i] >= nv) {
                st_http_error_set(err, MHD_HTTP_BAD_REQUEST, "invalid_request_error",
                                  "invalid_value",
                                  "prompt[%zu]: token id %d is not below the "
                                  "vocabulary size %zu",
                                  i, g->prompt_ids[i], nv);
                return ST_EINVAL;
            }
        *ids = malloc(g->n_prompt_ids * sizeof **ids);
        if (*ids == NULL)
            return st_errorf(ST_ENOMEM, "prompt ids");
        memcpy(*ids, g->prompt_ids, g->n_prompt_ids * sizeof **ids);
        *n = g->n_prompt_ids;
        return ST_OK;
    }
    if (e != ST_OK)
        st_http_error_set(err,
                          e == ST_ENOMEM ? MHD_HTTP_INTERNAL_SERVER_ERROR : MHD_HTTP_BAD_REQUEST,
                          e == ST_ENOMEM ? "server_error" : "invalid_request_error", NULL,
                          "the prompt: %s", st_errmsg(e));
    return e;
}

/* gen_sampling - the request's sampling over llama-server's defaults
 * (common/text/sampling.h); a request without a seed gets a random one. */
static st_err gen_sampling(const st_http_gen *g, st_sampler_params *p, st_http_error *err)
{
    *p = st_sampler_params_default();
    if (g->has_temperature)
        p->temp = (float)g->temperature;
    if (g->has_top_p)
        p->top_p = (float)g->top_p;
    if (g->has_seed)
        p->seed = g->seed;
    else
        randombytes_buf(&p->seed, sizeof p->seed);
    st_err e = st_sampler_params_validate(p);
    if (e != ST_OK)
        st_http_error_set(err, MHD_HTTP_BAD_REQUEST, "invalid_request_error", "invalid_value", "%s",
                          st_errmsg(e));
    return e;
}

static http_job *gen_job_new(st_http *h, struct MHD_Connection *conn, st_http_gen *g,
                             const char *ident, st_http_limits lim)
{
    http_job *j = calloc(1, sizeof *j);
    if (j == NULL || pthread_mutex_init(&j->mu, NULL) != 0) {
        free(j);
        return NULL;
    }
    j->h = h;
    j->conn = conn;
    j->kind = g->kind;
    j->stream = g->stream;
    j->include_usage = g->include_usage;
    j->stop = g->stop;
    j->n_stop = g->n_stop;
    g->stop = NULL;
    g->n_stop = 0;
    snprintf(j->rate_id, sizeof j->rate_id, "%s", ident);
    j->lim = lim;
    snprintf(j->model, sizeof j->model, "%s", g->model ? g->model : h->model_id);
    uint8_t rnd[GEN_ID_BYTES];
    char hex[2 * GEN_ID_BYTES + 1];
    randombytes_buf(rnd, sizeof rnd);
    sodium_bin2hex(hex, sizeof hex, rnd, sizeof rnd);
    snprintf(j->id, sizeof j->id, "%s-%s", g->kind == ST_HTTP_CHAT ? "chatcmpl" : "cmpl", hex);
    j->created = (int64_t)time(NULL);
    j->refs = 2; /* the connection and the attachment */
    atomic_fetch_add(&h->met.streams, 1);
    pthread_mutex_lock(&h->mu);
    j->next = h->jobs;
    if (h->jobs)
        h->jobs->prev = j;
    h->jobs = j;
    pthread_mutex_unlock(&h->mu);
    return j;
}

st_err http_gen_start(st_http *h, struct MHD_Connection *conn, http_conn *hc, st_http_gen *g,
                      const char *ident, st_http_limits lim, const char *tenant, st_http_error *err)
{
    uint32_t n_ctx = 0;
    int32_t *ids = NULL;
    size_t n = 0;
    st_sampler_params sp;
    st_err e;
    if (!http_serving(h, &n_ctx)) {
        st_http_error_set(err, MHD_HTTP_SERVICE_UNAVAILABLE, "server_error", "no_plan",
                          "no plan serves yet: workers are joining or a plan is being "
                          "prepared; retry shortly");
        e = ST_EBUSY;
        goto out;
    }
    if ((e = gen_sampling(g, &sp, err)) || (e = gen_prompt(h, g, &ids, &n, err)))
        goto out;
    if (n >= n_ctx) {
        st_http_error_set(err, MHD_HTTP_BAD_REQUEST, "invalid_request_error",
                          "context_length_exceeded",
                          "the prompt of %zu tokens does not fit "
                          "the context of %u tokens (at least one is generated)",
                          n, n_ctx);
        e = ST_EINVAL;
        goto out;
    }
    uint32_t room = n_ctx - (uint32_t)n;
    if (!slot_take(h)) {
        st_http_error_set(err, MHD_HTTP_SERVICE_UNAVAILABLE, "server_error", "busy",
                          "all %u generation slots of the HTTP gateway are in use; retry "
                          "shortly",
                          h->cfg.streams);
        e = ST_EBUSY;
        goto out;
    }
    http_job *j = gen_job_new(h, conn, g, ident, lim);
    if (j == NULL) {
        slot_give(h);
        st_http_error_set(err, MHD_HTTP_INTERNAL_SERVER_ERROR, "server_error", NULL,
                          "out of memory for a request");
        e = ST_ENOMEM;
        goto out;
    }
    hc->job = j;
    st_gw_req q = {.prompt = ids,
                   .n_prompt = n,
                   .max_tokens = g->max_tokens && g->max_tokens < room ? g->max_tokens : room,
                   .sp = sp,
                   .stop = j->stop,
                   .n_stop = j->n_stop,
                   .session_id = st_http_session_hash(h->session_key, tenant, g->session_id)};
    st_gw_sink sink = {.deliver = job_deliver, .release = job_release, .arg = j};
    pthread_mutex_lock(&j->mu);
    j->suspended = true;
    MHD_suspend_connection(conn);
    if ((e = st_gw_submit(h->cfg.gw, &q, sink, &j->ticket)) != ST_OK) {
        job_fail_err(j, e);
        job_wake(j);
    }
    pthread_mutex_unlock(&j->mu);
    if (e != ST_OK)
        job_end_attach(j); /* the attachment never took it */
    e = ST_OK;             /* from here on the job answers */
out:
    free(ids);
    st_http_gen_free(g);
    return e;
}

/* ---- answering ---- */

static ssize_t job_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    http_job *j = cls;
    pthread_mutex_lock(&j->mu);
    ssize_t r;
    if (j->out_off < j->out_len) {
        size_t n = j->out_len - j->out_off < max ? j->out_len - j->out_off : max;
        memcpy(buf, j->out + j->out_off, n);
        j->out_off += n;
        r = (ssize_t)n;
    } else if (j->done) {
        r = MHD_CONTENT_READER_END_OF_STREAM;
    } else {
        j->suspended = true; /* job_deliver resumes it under this lock */
        MHD_suspend_connection(j->conn);
        r = 0;
    }
    pthread_mutex_unlock(&j->mu);
    return r;
}

static void job_read_free(void *cls) { job_unref(cls); }

/* gen_stream - answers a stream's headers; its events follow (j locked). */
static enum MHD_Result gen_stream(st_http *h, struct MHD_Connection *conn, http_conn *hc,
                                  http_job *j)
{
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, GEN_BLOCK,
                                                               job_read, j, job_read_free);
    if (r == NULL)
        return MHD_NO;
    j->refs++; /* the response's */
    j->answered = true;
    if (j->kind == ST_HTTP_CHAT) {
        st_http_ident id = job_ident(j);
        job_event(j, st_http_resp_chunk(&id, "", 0, true, NULL));
    }
    job_emit(j);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result ok = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    st_http_metrics_request(&h->met, hc->ep, MHD_HTTP_OK);
    return ok;
}

enum MHD_Result http_gen_resume(st_http *h, struct MHD_Connection *conn, http_conn *hc)
{
    http_job *j = hc->job;
    pthread_mutex_lock(&j->mu);
    enum MHD_Result ok;
    if (j->answered) {
        ok = MHD_YES; /* already queued: nothing more here */
    } else if (j->failed) {
        j->answered = true;
        st_http_error err = j->err;
        uint32_t retry = j->retry_s;
        pthread_mutex_unlock(&j->mu);
        return http_queue_error(h, conn, hc->ep, &err, retry);
    } else if (j->stream && j->accepted) {
        ok = gen_stream(h, conn, hc, j);
    } else if (j->done) {
        j->answered = true;
        st_http_ident id = job_ident(j);
        size_t vis = st_http_stop_cut(j->text, j->text_len, j->stop, j->n_stop, true, j->stopped);
        char *doc = st_http_resp_full(&id, j->text ? j->text : "", vis, j->finish, j->n_prompt,
                                      j->n_got);
        pthread_mutex_unlock(&j->mu);
        return http_queue_json(h, conn, hc->ep, MHD_HTTP_OK, doc);
    } else {
        j->suspended = true; /* woken early: wait on */
        MHD_suspend_connection(conn);
        ok = MHD_YES;
    }
    pthread_mutex_unlock(&j->mu);
    return ok;
}

void http_gen_completed(st_http *h, http_conn *hc, enum MHD_RequestTerminationCode toe)
{
    http_job *j = hc->job;
    if (j == NULL)
        return;
    hc->job = NULL;
    pthread_mutex_lock(&j->mu);
    j->conn = NULL;
    j->suspended = false;
    if (!j->done || toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) {
        if (!j->done)
            atomic_fetch_add(&h->met.disconnects, 1);
        if (j->ticket) /* the coordinator cancels it at its next turn */
            st_gw_cancel(h->cfg.gw, j->ticket);
    }
    pthread_mutex_unlock(&j->mu);
    job_unref(j);
}
