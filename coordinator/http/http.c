/* http.c - the coordinator's OpenAI-compatible HTTP API: the server,
 * routing, API keys, rate limits, health and metrics.
 *
 * Design. The coordinator's state belongs to its main thread, which only
 * reads the events of its queue (coord.c, common/base/cq.h). The gateway
 * therefore never calls into it: a generation request is a ticket handed
 * to the coordinator's attachment (gateway.h, whose comment is the
 * contract), which the coordinator's thread submits to its scheduler,
 * with the same validation, limits, prefix reuse of sessions and
 * cancellation as every other client's, and whose ids and text it pushes
 * back to the job each turn of its loop. The prompt is tokenized here with
 * the coordinator's own tokenizer (immutable, shared by threads). Status
 * comes through the attachment too: the coordinator's thread builds it
 * (coordinator/control/api_status.c, as a control client of role MEMBER
 * gets it) and publishes a copy to the status sink attached here
 * (http_status_publish); no socket or envelope is involved.
 *
 * HTTP is parsed by libmicrohttpd, never by hand: a few threads each poll
 * many connections (epoll), so idle or slow clients hold a connection
 * slot and a little memory, never a thread. Connections are bounded
 * (--http-max-conns; per address by http_guard.c, --http-per-ip), as is
 * inactivity (--http-timeout-s) and, since a trickle of bytes is never
 * idle, the time a request's headers and body may take (http_guard.c:
 * --http-header-s, --http-body-s), and a body (--max-body: a declared
 * length over it is refused before it is read, 413). Bodies are JSON read
 * by cJSON in http_req.c (pure functions, fuzzed).
 *
 * A generation request takes one of --http-streams slots and holds it
 * until the coordinator released its ticket (http_gen.c). While it waits
 * its connection is suspended; the coordinator's updates resume it.
 * The coordinator publishes its StatusReply every ST_GW_STATUS_MS
 * (gateway.h), on its thread, into h->status under st_mu: /health, the
 * 503 before a plan serves, the default max_tokens (the plan's context)
 * and /metrics read that copy. A publish without a status (out of memory,
 * or the loop ended) means not serving; /metrics keeps the latest copy.
 *
 * Keys (--api-key-file, http_keys.h) are compared in constant time; rate
 * limits (http_rate.h) are token buckets per key, or per client address
 * without keys, in a bounded table. */
#include "coordinator/http/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "common/base/clock.h"
#include "common/net/client.h"
#include "common/net/exposure.h"
#include "common/base/log.h"
#include "common/net/netaddr.h"
#include "coordinator/http/http_impl.h"

#define HTTP "http"
#define HTTP_CLOSE_WAIT_NS (5ull * 1000000000ull) /* jobs to end at close */
#define HTTP_CLOSE_POLL_MS 100
#define HTTP_NS_PER_S 1000000000u
#define HTTP_BODY_FIRST_CAP 4096
#define HTTP_FD_RESERVE 256 /* descriptors beyond the connections: sockets, files */
#define HTTP_NS_PER_MS 1000000u
#define HTTP_BEARER "Bearer "
#define HTTP_JSON "application/json"
#define HTTP_METRICS_TYPE "text/plain; version=0.0.4; charset=utf-8"
#define HTTP_ADDR_TEXT 64
#define HTTP_GGUF_SUFFIX ".gguf"

st_http_cfg st_http_cfg_default(void)
{
    st_http_cfg c;
    memset(&c, 0, sizeof c);
    c.max_body = ST_HTTP_DEFAULT_MAX_BODY;
    c.max_conns = ST_HTTP_DEFAULT_MAX_CONNS;
    c.timeout_s = ST_HTTP_DEFAULT_TIMEOUT_S;
    c.per_ip_conns = ST_HTTP_DEFAULT_PER_IP;
    c.header_s = ST_HTTP_DEFAULT_HEADER_S;
    c.body_s = ST_HTTP_DEFAULT_BODY_S;
    c.streams = ST_HTTP_DEFAULT_STREAMS;
    c.threads = ST_HTTP_DEFAULT_THREADS;
    c.rate_table = ST_HTTP_DEFAULT_RATE_TABLE;
    c.ping_s = ST_HTTP_DEFAULT_PING_S;
    return c;
}

/* ---- answers ---- */

enum MHD_Result http_queue_json(st_http *h, struct MHD_Connection *conn, st_http_ep ep, int status,
                                char *body)
{
    static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
                              "\"server_error\",\"code\":null}}";
    struct MHD_Response *r;
    if (body == NULL) {
        status = MHD_HTTP_INTERNAL_SERVER_ERROR;
        r = MHD_create_response_from_buffer(strlen(oom), (void *)oom, MHD_RESPMEM_PERSISTENT);
    } else {
        r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    }
    if (r == NULL) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, HTTP_JSON);
    enum MHD_Result ok = MHD_queue_response(conn, (unsigned)status, r);
    MHD_destroy_response(r);
    st_http_metrics_request(&h->met, ep, status);
    return ok;
}

enum MHD_Result http_queue_error(st_http *h, struct MHD_Connection *conn, st_http_ep ep,
                                 const st_http_error *e, uint32_t retry_s)
{
    char *body = st_http_error_json(e);
    struct MHD_Response *r = body ? MHD_create_response_from_buffer(strlen(body), body,
                                                                    MHD_RESPMEM_MUST_FREE)
                                  : NULL;
    if (r == NULL) {
        free(body);
        return http_queue_json(h, conn, ep, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL);
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, HTTP_JSON);
    if (retry_s > 0) {
        char v[16];
        snprintf(v, sizeof v, "%u", retry_s);
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, v);
    }
    if (e->status == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    enum MHD_Result ok = MHD_queue_response(conn, (unsigned)e->status, r);
    MHD_destroy_response(r);
    st_http_metrics_request(&h->met, ep, e->status);
    return ok;
}

static enum MHD_Result http_fail(st_http *h, struct MHD_Connection *conn, st_http_ep ep, int status,
                                 const char *type, const char *code, const char *msg,
                                 uint32_t retry_s)
{
    st_http_error e;
    st_http_error_set(&e, status, type, code, "%s", msg);
    return http_queue_error(h, conn, ep, &e, retry_s);
}

/* ---- the coordinator's status ---- */

/* http_status_publish - the status sink (gateway.h): on the coordinator's
 * thread, every ST_GW_STATUS_MS; r NULL: no status (not serving; the
 * latest one stays for /metrics). */
static void http_status_publish(void *arg, Strata__StatusReply *r)
{
    st_http *h = arg;
    pthread_mutex_lock(&h->st_mu);
    if (r) {
        if (h->epoch && r->epoch != h->epoch)
            atomic_fetch_add(&h->met.replans, 1);
        h->epoch = r->epoch;
        h->serving = st_client_serving(r);
        h->n_ctx = r->plan ? r->plan->n_ctx : 0;
        if (h->status)
            strata__status_reply__free_unpacked(h->status, NULL);
        h->status = r;
    } else {
        h->serving = false; /* the coordinator gave none, or its loop ended */
    }
    pthread_mutex_unlock(&h->st_mu);
}

bool http_serving(st_http *h, uint32_t *n_ctx)
{
    pthread_mutex_lock(&h->st_mu);
    bool s = h->serving && h->n_ctx > 0 && !h->status_stop;
    *n_ctx = h->n_ctx;
    pthread_mutex_unlock(&h->st_mu);
    return s;
}

/* ---- routes ---- */

static st_http_ep http_route(const char *url)
{
    static const struct {
        const char *url;
        st_http_ep ep;
    } routes[] = {
        {"/v1/chat/completions", ST_HTTP_EP_CHAT}, {"/v1/completions", ST_HTTP_EP_COMPLETIONS},
        {"/v1/models", ST_HTTP_EP_MODELS},         {"/health", ST_HTTP_EP_HEALTH},
        {"/metrics", ST_HTTP_EP_METRICS},
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (strcmp(url, routes[i].url) == 0)
            return routes[i].ep;
    return ST_HTTP_EP_OTHER;
}

/* http_client_addr - the numeric address of conn's peer into out. */
static void http_client_addr(struct MHD_Connection *conn, char *out, size_t cap)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    snprintf(out, cap, "?");
    if (ci == NULL || ci->client_addr == NULL)
        return;
    socklen_t len = ci->client_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                           : sizeof(struct sockaddr_in);
    if (getnameinfo(ci->client_addr, len, out, (socklen_t)cap, NULL, 0, NI_NUMERICHOST) != 0)
        snprintf(out, cap, "?");
}

/* http_rate_refuse - the 429 of a request over lim, wait s to retry. */
static enum MHD_Result http_rate_refuse(st_http *h, struct MHD_Connection *conn, http_conn *hc,
                                        st_http_limits lim, uint32_t wait)
{
    atomic_fetch_add(&h->met.rate_limited, 1);
    char msg[160];
    snprintf(msg, sizeof msg,
             "Rate limit reached (%u requests or %u generated tokens per "
             "minute); retry after %u s.",
             lim.rpm, lim.tpm, wait);
    return http_fail(h, conn, hc->ep, MHD_HTTP_TOO_MANY_REQUESTS, "rate_limit_error",
                     "rate_limit_exceeded", msg, wait);
}

/* http_auth - the caller's identity (rate limits), limits and tenant
 * (session ids); false when the key is missing or wrong (answered). */
static bool http_auth(st_http *h, struct MHD_Connection *conn, http_conn *hc, char *ident,
                      size_t cap, st_http_limits *lim, enum MHD_Result *ans)
{
    *lim = h->cfg.limits;
    char addr[HTTP_ADDR_TEXT], aid[HTTP_IDENT_MAX];
    http_client_addr(conn, addr, sizeof addr);
    snprintf(aid, sizeof aid, "a:%s", addr);
    if (h->keys == NULL) {
        snprintf(ident, cap, "%s", aid);
        return true;
    }
    /* wrong keys spend the address's bucket; while it is empty no key of
     * that address is checked (so guessing cannot go faster than it) */
    uint64_t now = st_now_ns();
    uint32_t wait = st_http_rate_wait(h->rate, aid, h->cfg.limits, now);
    if (wait > 0) {
        *ans = http_rate_refuse(h, conn, hc, h->cfg.limits, wait);
        return false;
    }
    const char *v = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                MHD_HTTP_HEADER_AUTHORIZATION);
    long idx = -1;
    size_t bl = strlen(HTTP_BEARER);
    if (v && strncmp(v, HTTP_BEARER, bl) == 0)
        idx = st_http_keys_find(h->keys, v + bl, strlen(v + bl));
    if (idx < 0) {
        atomic_fetch_add(&h->met.auth_failures, 1);
        (void)st_http_rate_admit(h->rate, aid, h->cfg.limits, now); /* the attempt's token */
        *ans = http_fail(h, conn, hc->ep, MHD_HTTP_UNAUTHORIZED, "invalid_request_error",
                         "invalid_api_key",
                         v ? "Incorrect API key provided."
                           : "Missing API key: send 'Authorization: Bearer "
                             "KEY'.",
                         0);
        return false;
    }
    *lim = st_http_keys_limits_over(h->keys, idx, *lim);
    snprintf(ident, cap, "k:%ld", idx);
    return true;
}

static enum MHD_Result http_models(st_http *h, struct MHD_Connection *conn, http_conn *hc)
{
    return http_queue_json(h, conn, hc->ep, MHD_HTTP_OK,
                           st_http_resp_models(h->model_id, h->cfg.alias, h->started));
}

static enum MHD_Result http_health(st_http *h, struct MHD_Connection *conn, http_conn *hc)
{
    uint32_t n_ctx;
    if (!http_serving(h, &n_ctx))
        return http_fail(h, conn, hc->ep, MHD_HTTP_SERVICE_UNAVAILABLE, "server_error", "no_plan",
                         "no plan serves yet", 1);
    char *ok = strdup("{\"status\":\"ok\"}");
    return http_queue_json(h, conn, hc->ep, MHD_HTTP_OK, ok);
}

static enum MHD_Result http_metrics(st_http *h, struct MHD_Connection *conn, http_conn *hc)
{
    char *text = NULL;
    size_t len = 0;
    pthread_mutex_lock(&h->st_mu);
    st_err e = st_http_metrics_render(&h->met, h->status, h->model_id, &text, &len);
    pthread_mutex_unlock(&h->st_mu);
    if (e != ST_OK)
        return http_queue_json(h, conn, hc->ep, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL);
    struct MHD_Response *r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (r == NULL) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, HTTP_METRICS_TYPE);
    enum MHD_Result ok = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    st_http_metrics_request(&h->met, hc->ep, MHD_HTTP_OK);
    return ok;
}

/* http_generate - a complete POST body of a generation endpoint. */
static enum MHD_Result http_generate(st_http *h, struct MHD_Connection *conn, http_conn *hc)
{
    char ident[HTTP_IDENT_MAX];
    st_http_limits lim;
    enum MHD_Result ans = MHD_NO;
    if (!http_auth(h, conn, hc, ident, sizeof ident, &lim, &ans))
        return ans;
    uint32_t wait = st_http_rate_admit(h->rate, ident, lim, st_now_ns());
    if (wait > 0)
        return http_rate_refuse(h, conn, hc, lim, wait);
    st_http_gen g;
    st_http_error err;
    st_http_kind kind = hc->ep == ST_HTTP_EP_CHAT ? ST_HTTP_CHAT : ST_HTTP_COMPLETION;
    if (st_http_parse(kind, hc->body ? hc->body : "", hc->len, &g, &err) != ST_OK) {
        st_http_gen_free(&g);
        return http_queue_error(h, conn, hc->ep, &err, 0);
    }
    if (g.model && strcmp(g.model, h->model_id) != 0 &&
        (h->cfg.alias == NULL || strcmp(g.model, h->cfg.alias) != 0)) {
        st_http_error_set(&err, MHD_HTTP_NOT_FOUND, "invalid_request_error", "model_not_found",
                          "The model '%s' does not exist: this server serves '%s'%s%s%s.", g.model,
                          h->model_id, h->cfg.alias ? " (alias '" : "",
                          h->cfg.alias ? h->cfg.alias : "", h->cfg.alias ? "')" : "");
        st_http_gen_free(&g);
        return http_queue_error(h, conn, hc->ep, &err, 0);
    }
    const char *tenant = h->keys ? ident : "";
    if (http_gen_start(h, conn, hc, &g, ident, lim, tenant, &err) != ST_OK)
        return http_queue_error(h, conn, hc->ep, &err,
                                err.status == MHD_HTTP_SERVICE_UNAVAILABLE ? 1 : 0);
    return MHD_YES;
}

/* http_first - the first call of a request: routes it and refuses a body
 * declared too large before reading it. */
static enum MHD_Result http_first(st_http *h, struct MHD_Connection *conn, const char *url,
                                  const char *method, void **req_cls)
{
    http_conn *hc = calloc(1, sizeof *hc);
    if (hc == NULL)
        return MHD_NO;
    hc->ep = http_route(url);
    *req_cls = hc;
    const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strcmp(method, MHD_HTTP_METHOD_POST) == 0) {
        char *end;
        unsigned long long n = strtoull(cl, &end, 10);
        if (*end == '\0' && n > h->cfg.max_body) {
            char msg[128];
            snprintf(msg, sizeof msg, "the body of %llu bytes is over the limit of %zu bytes", n,
                     h->cfg.max_body);
            return http_fail(h, conn, hc->ep, MHD_HTTP_CONTENT_TOO_LARGE, "invalid_request_error",
                             "body_too_large", msg, 0);
        }
    }
    return MHD_YES;
}

/* http_body - appends an uploaded piece (beyond max_body it is dropped
 * and the request is answered 413 at its end). */
static void http_body(st_http *h, http_conn *hc, const char *data, size_t n)
{
    if (hc->too_big || hc->len + n > h->cfg.max_body) {
        hc->too_big = true;
        return;
    }
    if (hc->len + n + 1 > hc->cap) {
        size_t c = hc->cap ? hc->cap : HTTP_BODY_FIRST_CAP;
        while (c < hc->len + n + 1)
            c *= 2;
        char *p = realloc(hc->body, c);
        if (p == NULL) {
            hc->too_big = true;
            return;
        }
        hc->body = p;
        hc->cap = c;
    }
    memcpy(hc->body + hc->len, data, n);
    hc->len += n;
    hc->body[hc->len] = '\0';
}

static enum MHD_Result http_access(void *cls, struct MHD_Connection *conn, const char *url,
                                   const char *method, const char *version, const char *upload,
                                   size_t *upload_size, void **req_cls)
{
    (void)version;
    st_http *h = cls;
    http_conn *hc = *req_cls;
    if (hc == NULL) {
        http_guard_phase(h->guard, conn, HTTP_GUARD_BODY); /* the headers are complete */
        return http_first(h, conn, url, method, req_cls);
    }
    if (hc->job)
        return http_gen_resume(h, conn, hc);
    if (*upload_size > 0) {
        http_body(h, hc, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    http_guard_phase(h->guard, conn, HTTP_GUARD_ANSWER); /* the body is complete */
    bool post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
    bool get = strcmp(method, MHD_HTTP_METHOD_GET) == 0;
    char msg[160];
    switch (hc->ep) {
    case ST_HTTP_EP_CHAT:
    case ST_HTTP_EP_COMPLETIONS:
        if (!post)
            break;
        if (hc->too_big) {
            snprintf(msg, sizeof msg, "the body is over the limit of %zu bytes", h->cfg.max_body);
            return http_fail(h, conn, hc->ep, MHD_HTTP_CONTENT_TOO_LARGE, "invalid_request_error",
                             "body_too_large", msg, 0);
        }
        return http_generate(h, conn, hc);
    case ST_HTTP_EP_HEALTH:
        if (get)
            return http_health(h, conn, hc);
        break;
    case ST_HTTP_EP_MODELS:
    case ST_HTTP_EP_METRICS: {
        if (!get)
            break;
        char ident[HTTP_IDENT_MAX];
        st_http_limits lim;
        enum MHD_Result ans = MHD_NO;
        if (!http_auth(h, conn, hc, ident, sizeof ident, &lim, &ans))
            return ans;
        if (hc->ep == ST_HTTP_EP_METRICS) /* a scraper's: not a client's allowance */
            return http_metrics(h, conn, hc);
        uint32_t wait = st_http_rate_admit(h->rate, ident, lim, st_now_ns());
        if (wait > 0)
            return http_rate_refuse(h, conn, hc, lim, wait);
        return http_models(h, conn, hc);
    }
    default:
        snprintf(msg, sizeof msg, "no route for %.16s %.100s", method, url);
        return http_fail(h, conn, hc->ep, MHD_HTTP_NOT_FOUND, "invalid_request_error", "not_found",
                         msg, 0);
    }
    snprintf(msg, sizeof msg, "%.16s is not allowed on %.100s", method, url);
    return http_fail(h, conn, hc->ep, MHD_HTTP_METHOD_NOT_ALLOWED, "invalid_request_error",
                     "method_not_allowed", msg, 0);
}

static void http_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                           enum MHD_RequestTerminationCode toe)
{
    st_http *h = cls;
    http_conn *hc = *req_cls;
    /* a kept-alive connection waits for its next request's headers */
    http_guard_phase(h->guard, conn, HTTP_GUARD_HEADERS);
    if (hc == NULL)
        return;
    http_gen_completed(h, hc, toe);
    free(hc->body);
    free(hc);
    *req_cls = NULL;
}

/* ---- start and stop ---- */

/* http_model_id - the GGUF file name without its directory and .gguf. */
static void http_model_id(const char *path, char *out, size_t cap)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    size_t n = strlen(b), sl = strlen(HTTP_GGUF_SUFFIX);
    if (n > sl && strcmp(b + n - sl, HTTP_GGUF_SUFFIX) == 0)
        n -= sl;
    snprintf(out, cap, "%.*s", (int)n, b);
}

/* http_bind - the socket address of HOST:PORT ([v6]:PORT too). */
static st_err http_bind(const char *hp, struct sockaddr_storage *sa, socklen_t *len)
{
    st_hostport x;
    if (!st_hostport_split(hp, &x) || x.host_len == 0 || x.port[0] == '\0')
        return st_errorf(ST_EINVAL, "--http '%s' is not HOST:PORT", hp);
    char host[HTTP_MODEL_MAX];
    if (!st_host_unbracket(x.host, x.host_len, host, sizeof host))
        return st_errorf(ST_EINVAL, "--http '%s': the host is too long", hp);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV | AI_PASSIVE};
    struct addrinfo *ai = NULL;
    int rv = getaddrinfo(host, x.port, &hints, &ai);
    if (rv != 0)
        return st_errorf(ST_EINVAL, "--http '%s': %s", hp, gai_strerror(rv));
    memcpy(sa, ai->ai_addr, ai->ai_addrlen);
    *len = ai->ai_addrlen;
    freeaddrinfo(ai);
    return ST_OK;
}

/* http_load_model - the coordinator's tokenizer, the chat template of
 * its model file and the model's id. On the thread that runs the
 * coordinator, before its loop (st_http_open's contract). */
static st_err http_load_model(st_http *h)
{
    h->tok = st_gw_tokenizer(h->cfg.gw);
    if (h->tok == NULL)
        return st_errorf(ST_EFORMAT, "--http needs the model's tokenizer: %s has none usable",
                         h->cfg.model_path);
    st_err te = st_chat_from_gguf(st_gw_gguf(h->cfg.gw), h->cfg.chat_template, &h->tmpl);
    h->has_tmpl = te == ST_OK;
    if (!h->has_tmpl && h->cfg.chat_template) /* asked for: a start-up error, not a 400 later */
        return st_errwrap(te, "--chat-template");
    if (!h->has_tmpl)
        snprintf(h->tmpl_err, sizeof h->tmpl_err,
                 "the model has no usable chat template "
                 "(%s): use /v1/completions",
                 st_errmsg(te));
    http_model_id(h->cfg.model_path, h->model_id, sizeof h->model_id);
    return ST_OK;
}

/* http_fds - raises the descriptor limit to what --http-max-conns needs
 * (up to the hard limit); ST_ERANGE naming both when it cannot. */
static st_err http_fds(const st_http_cfg *cfg)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return st_err_errno(errno, "getrlimit");
    rlim_t need = (rlim_t)cfg->max_conns + HTTP_FD_RESERVE;
    if (rl.rlim_cur >= need)
        return ST_OK;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need)
        return st_errorf(ST_ERANGE,
                         "--http-max-conns %u needs %llu file descriptors; the hard "
                         "limit is %llu (lower --http-max-conns or raise ulimit -Hn)",
                         cfg->max_conns, (unsigned long long)need, (unsigned long long)rl.rlim_max);
    rl.rlim_cur = need;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        return st_err_errno(errno, "setrlimit RLIMIT_NOFILE");
    return ST_OK;
}

static st_err http_start_daemon(st_http *h)
{
    struct sockaddr_storage sa;
    socklen_t salen;
    st_err e = http_bind(h->cfg.listen, &sa, &salen);
    if (e == ST_OK)
        e = http_fds(&h->cfg);
    if (e != ST_OK)
        return e;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME;
    if (sa.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    /* the accept policy is the guard's per-address cap */
    h->d = MHD_start_daemon(flags, 0, http_guard_accept, h->guard, http_access, h,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_THREAD_POOL_SIZE, (unsigned)h->cfg.threads,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)h->cfg.max_conns,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)h->cfg.timeout_s,
                            MHD_OPTION_NOTIFY_COMPLETED, http_completed, h,
                            MHD_OPTION_NOTIFY_CONNECTION, http_guard_notify, h->guard,
                            MHD_OPTION_END);
    if (h->d == NULL)
        return st_errorf(ST_EIO, "--http %s: cannot listen (address in use, or not local)",
                         h->cfg.listen);
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    st_hostport x = {.host = h->cfg.listen, .host_len = 0};
    st_hostport_split(h->cfg.listen, &x); /* HOST:PORT: http_bind took it */
    printf("http on http://%.*s:%u\n", (int)x.host_len, x.host, di ? (unsigned)di->port : 0u);
    fflush(stdout);
    return ST_OK;
}

st_err st_http_listen_check(const char *url, bool has_keys, bool insecure)
{
    if (has_keys || st_addr_is_local(url))
        return ST_OK;
    if (!insecure)
        return st_errorf(ST_EINVAL,
                         "--http %s reaches beyond loopback and there are no API keys, so "
                         "anyone on the network could generate with it: give --api-key-file "
                         "FILE (docs/http-api.md), or --insecure to serve it without keys anyway",
                         url);
    st_log(ST_LOG_WARN, HTTP,
           "--insecure: --http %s reaches beyond loopback without API keys: anyone who can "
           "reach it can generate",
           url);
    return ST_OK;
}

st_err st_http_open(const st_http_cfg *cfg, st_http **out)
{
    *out = NULL;
    if (cfg->gw == NULL)
        return st_errorf(ST_EINVAL, "http: no coordinator to attach to");
    if (cfg->streams < 1 || cfg->streams > ST_HTTP_MAX_STREAMS || cfg->threads < 1 ||
        cfg->ping_s < 1)
        return st_errorf(ST_EINVAL, "http: streams %u (1..%u), threads %u, ping %u s", cfg->streams,
                         ST_HTTP_MAX_STREAMS, cfg->threads, cfg->ping_s);
    st_http *h = calloc(1, sizeof *h);
    if (h == NULL)
        return st_errorf(ST_ENOMEM, "http gateway");
    h->cfg = *cfg;
    h->started = (int64_t)time(NULL);
    st_http_metrics_init(&h->met);
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    pthread_mutex_init(&h->st_mu, NULL);
    st_err e = http_load_model(h);
    if (e == ST_OK && cfg->api_key_file)
        e = st_http_keys_load(cfg->api_key_file, &h->keys);
    if (e == ST_OK)
        e = st_http_rate_open(cfg->rate_table, &h->rate);
    if (e == ST_OK) {
        http_guard_cfg gc = {.per_ip = cfg->per_ip_conns,
                             .header_s = cfg->header_s,
                             .body_s = cfg->body_s,
                             .max_conns = cfg->max_conns};
        e = http_guard_open(&gc, &h->met.guard, &h->guard);
    }
    if (e == ST_OK && sodium_init() < 0)
        e = st_err_sodium("sodium_init");
    if (e == ST_OK)
        randombytes_buf(h->session_key, sizeof h->session_key);
    if (e == ST_OK)
        e = http_start_daemon(h);
    if (e != ST_OK) {
        st_http_close(h);
        return e;
    }
    /* last: from here the coordinator's thread calls into h (until its loop ends) */
    st_gw_status_attach(cfg->gw, (st_gw_status_sink){.publish = http_status_publish, .arg = h});
    st_log(ST_LOG_INFO, HTTP, "serving model '%s'%s%s on %s: %u streams, %s", h->model_id,
           cfg->alias ? " alias " : "", cfg->alias ? cfg->alias : "", cfg->listen, cfg->streams,
           h->keys ? "API keys required" : "no API keys");
    *out = h;
    return ST_OK;
}

void st_http_close(st_http *h)
{
    if (h == NULL)
        return;
    pthread_mutex_lock(&h->mu);
    h->stopping = true; /* no generation starts from now on (http_gen.c) */
    pthread_mutex_unlock(&h->mu);
    pthread_mutex_lock(&h->st_mu);
    h->status_stop = true;
    pthread_mutex_unlock(&h->st_mu);
    if (h->d)
        MHD_quiesce_daemon(h->d);
    /* the coordinator's loop has ended, so has every job's ticket (gateway.h) */
    /* let MHD send the jobs' last bytes before it closes their connections */
    uint64_t deadline = st_now_ns() + HTTP_CLOSE_WAIT_NS;
    pthread_mutex_lock(&h->mu);
    while (h->jobs && st_now_ns() < deadline && h->d) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)HTTP_CLOSE_POLL_MS * HTTP_NS_PER_MS;
        ts.tv_sec += (time_t)(ns / HTTP_NS_PER_S);
        ts.tv_nsec = (long)(ns % HTTP_NS_PER_S);
        pthread_cond_timedwait(&h->cv, &h->mu, &ts);
    }
    pthread_mutex_unlock(&h->mu);
    if (h->d)
        MHD_stop_daemon(h->d);
    http_guard_close(h->guard); /* after the daemon: every connection's close was notified */
    if (h->status)
        strata__status_reply__free_unpacked(h->status, NULL);
    st_http_rate_close(h->rate);
    st_http_keys_free(h->keys);
    pthread_mutex_destroy(&h->st_mu);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    free(h);
}
