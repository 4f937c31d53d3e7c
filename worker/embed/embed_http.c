/* embed_http.c - the embedding and head service's HTTP side (see
 * embed_http.h): the server, API keys, rate limits, metrics and answers;
 * the endpoints are in embed_routes.c.
 *
 * Design. The service is a thin shell around st_ends. HTTP is parsed by
 * libmicrohttpd: a few threads (--http-threads) each poll many connections
 * (epoll), so idle or slow clients hold a connection slot, never a thread;
 * connections are bounded (--http-max-conns, --http-per-ip) as is
 * inactivity (--http-timeout-s, which also ends a trickled request). Every
 * request is read whole, bounded by max_body (past it the rest is consumed
 * and dropped and the answer is 413), then the key is checked
 * (common/http/http_keys.h: constant time, only hashes kept) and a request
 * token taken from the caller's bucket (common/http/http_rate.h, per key or
 * client address, a bounded table); the rows an answer computed are spent
 * from the tokens-per-minute bucket afterwards. The same checks and
 * defaults as the coordinator's --http (docs/http-api.md).
 *
 * The endpoints compute under the lock the ends share with the service's
 * NNG side (--listen, worker/shard/standalone.h); the wire context is used
 * under it too. Keys, limits and metrics need no lock: the key table is
 * read-only, the rate table has its own, the counters are atomics.
 *
 * Rows are immutable facts of the model file, so GET /v1/embeddings/N is
 * made for caches: its ETag names the model hash and the id, it is valid
 * forever, and a client or proxy presenting the ETag gets 304 with no
 * body. HEAD answers the same status and headers without the body. A row
 * has one URL (worker/embed/embed_row.h): the URI callback reads the target as
 * sent, since MHD hands the access handler a percent-decoded path without
 * its query; every other spelling is a 404, so a cache holds one entry
 * per row. */
#include "worker/embed/embed_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "common/base/clock.h"
#include "common/base/hex.h"
#include "worker/embed/embed_http_impl.h"

#define EH_CACHE_CONTROL "public, max-age=31536000, immutable"
#define EH_JSON "application/json"
#define EH_METRICS_TYPE "text/plain; version=0.0.4; charset=utf-8"
#define EH_BEARER "Bearer "
#define EH_ADDR_TEXT 64
#define EH_RETRY_TEXT 16
#define EH_FD_RESERVE 64 /* descriptors beyond the connections: the model, NNG, logs */

static const char *const eh_ep_name[EH_EP_COUNT] = {"/v1/embed",      "/v1/logits",
                                                    "/v1/embeddings", "/v1/tokenize",
                                                    "/v1/detokenize", EH_METRICS_PATH,
                                                    "other"};

_Static_assert(EH_EP_COUNT <= ST_HTTP_EPS_MAX, "the service's endpoints fit the table");

st_embed_cfg st_embed_cfg_default(void)
{
    return (st_embed_cfg){.max_body = ST_EMBED_MAX_BODY_DEFAULT,
                          .max_conns = ST_EMBED_DEFAULT_MAX_CONNS,
                          .timeout_s = ST_EMBED_DEFAULT_TIMEOUT_S,
                          .threads = ST_EMBED_DEFAULT_THREADS,
                          .rate_table = ST_EMBED_DEFAULT_RATE_TABLE};
}

/* ---- answers ---- */

/* eh_queue - queues r with status, counting it and its len body bytes (none
 * for HEAD: MHD sends the headers, Content-Length included, without the
 * body); r is destroyed. */
static enum MHD_Result eh_queue(eh_req *q, unsigned status, struct MHD_Response *r, size_t len)
{
    enum MHD_Result ok = MHD_queue_response(q->c, status, r);
    MHD_destroy_response(r);
    st_http_reqs_count(&q->s->reqs, q->ep, EH_EP_COUNT, (int)status);
    atomic_fetch_add(&q->s->bytes_out, q->head ? 0 : len);
    return ok;
}

enum MHD_Result eh_send(eh_req *q, unsigned status, char *body, size_t len, const char *type,
                        const char *etag)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(body ? len : 0,
                                                             body ? body : (void *)"",
                                                             body ? MHD_RESPMEM_MUST_FREE
                                                                  : MHD_RESPMEM_PERSISTENT);
    if (r == NULL) {
        free(body);
        return MHD_NO;
    }
    if (body != NULL && type != NULL)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (etag != NULL) {
        MHD_add_response_header(r, MHD_HTTP_HEADER_ETAG, etag);
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, EH_CACHE_CONTROL);
    }
    return eh_queue(q, status, r, body ? len : 0);
}

enum MHD_Result eh_json(eh_req *q, unsigned status, cJSON *o, const char *etag)
{
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (s == NULL)
        return eh_send(q, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, 0, NULL, NULL);
    return eh_send(q, status, s, strlen(s), EH_JSON, etag);
}

/* eh_error_hdr - the error answer with one extra header (name NULL: none). */
static enum MHD_Result eh_error_hdr(eh_req *q, unsigned status, const char *msg, const char *name,
                                    const char *value)
{
    cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddNumberToObject(e, "code", status);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    size_t len = s ? strlen(s) : 0;
    struct MHD_Response *r = s ? MHD_create_response_from_buffer(len, s, MHD_RESPMEM_MUST_FREE)
                               : NULL;
    if (r == NULL) {
        free(s);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, EH_JSON);
    if (name != NULL)
        MHD_add_response_header(r, name, value);
    return eh_queue(q, status, r, len);
}

enum MHD_Result eh_error(eh_req *q, unsigned status, const char *msg)
{
    return eh_error_hdr(q, status, msg, NULL, NULL);
}

enum MHD_Result eh_not_allowed(eh_req *q, const char *allow)
{
    char msg[EH_MSG_MAX];
    snprintf(msg, sizeof msg, "this path takes %s only", allow);
    return eh_error_hdr(q, MHD_HTTP_METHOD_NOT_ALLOWED, msg, MHD_HTTP_HEADER_ALLOW, allow);
}

/* ---- keys, limits, metrics ---- */

/* eh_ident - the caller's identity for the rate limits ("k:INDEX" of its
 * key, or "a:ADDRESS" without keys) and its limits; false when the key is
 * missing or wrong (answered 401). */
static bool eh_ident(eh_req *q, char ident[EH_IDENT_MAX], st_http_limits *lim, enum MHD_Result *ans)
{
    st_embed_srv *s = q->s;
    *lim = s->cfg.limits;
    if (s->keys == NULL) {
        char addr[EH_ADDR_TEXT] = "?";
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(q->c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (ci != NULL && ci->client_addr != NULL &&
            getnameinfo(ci->client_addr, sizeof(struct sockaddr_in), addr, sizeof addr, NULL, 0,
                        NI_NUMERICHOST) != 0)
            snprintf(addr, sizeof addr, "?");
        snprintf(ident, EH_IDENT_MAX, "a:%s", addr);
        return true;
    }
    const char *v = MHD_lookup_connection_value(q->c, MHD_HEADER_KIND,
                                                MHD_HTTP_HEADER_AUTHORIZATION);
    size_t bl = strlen(EH_BEARER);
    long idx = v && strncmp(v, EH_BEARER, bl) == 0
                   ? st_http_keys_find(s->keys, v + bl, strlen(v + bl))
                   : -1;
    if (idx < 0) {
        atomic_fetch_add(&s->auth_failures, 1);
        *ans = eh_error_hdr(q, MHD_HTTP_UNAUTHORIZED,
                            v ? "incorrect API key"
                              : "missing API key: send 'Authorization: "
                                "Bearer KEY'",
                            MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
        return false;
    }
    *lim = st_http_keys_limits_over(s->keys, idx, *lim);
    snprintf(ident, EH_IDENT_MAX, "k:%ld", idx);
    return true;
}

static enum MHD_Result eh_metrics(eh_req *q)
{
    st_embed_srv *s = q->s;
    st_mtext b;
    if (st_mtext_init(&b) != ST_OK)
        return eh_error(q, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
    st_mtext_reqs(&b, &s->reqs, eh_ep_name, EH_EP_COUNT);
    st_mtext_access(&b, atomic_load(&s->auth_failures), atomic_load(&s->rate_limited));
    st_mtext_counter(&b, "strata_embed_rows_total",
                     "Embedding rows served (/v1/embed ids and "
                     "/v1/embeddings/N answers).",
                     atomic_load(&s->rows_embedded));
    st_mtext_counter(&b, "strata_embed_head_rows_total",
                     "Hidden states put through the output "
                     "norm and head (/v1/logits).",
                     atomic_load(&s->rows_head));
    st_mtext_counter(&b, "strata_http_received_bytes_total", "Request body bytes received.",
                     atomic_load(&s->bytes_in));
    st_mtext_counter(&b, "strata_http_sent_bytes_total", "Answer body bytes sent.",
                     atomic_load(&s->bytes_out));
    char *text = NULL;
    size_t len = 0;
    if (st_mtext_finish(&b, &text, &len) != ST_OK)
        return eh_error(q, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
    return eh_send(q, MHD_HTTP_OK, text, len, EH_METRICS_TYPE, NULL);
}

/* eh_answer - a complete request: the key, the limits, then the endpoint. */
static enum MHD_Result eh_answer(eh_req *q, const char *method)
{
    st_embed_srv *s = q->s;
    if (q->ep == EH_EP_OTHER)
        return eh_error(q, MHD_HTTP_NOT_FOUND, "no such path");
    char ident[EH_IDENT_MAX];
    st_http_limits lim;
    enum MHD_Result ans = MHD_NO;
    if (!eh_ident(q, ident, &lim, &ans))
        return ans;
    if (q->ep == EH_EP_METRICS) {
        if (strcmp(method, MHD_HTTP_METHOD_GET) != 0)
            return eh_not_allowed(q, MHD_HTTP_METHOD_GET);
        return eh_metrics(q);
    }
    uint32_t wait = st_http_rate_admit(s->rate, ident, lim, st_now_ns());
    if (wait > 0) {
        atomic_fetch_add(&s->rate_limited, 1);
        char msg[EH_MSG_MAX], retry[EH_RETRY_TEXT];
        snprintf(msg, sizeof msg,
                 "rate limit reached (%u requests or %u rows per minute); "
                 "retry after %u s",
                 lim.rpm, lim.tpm, wait);
        snprintf(retry, sizeof retry, "%u", wait);
        return eh_error_hdr(q, MHD_HTTP_TOO_MANY_REQUESTS, msg, MHD_HTTP_HEADER_RETRY_AFTER, retry);
    }
    pthread_mutex_lock(s->lock);
    enum MHD_Result r = eh_route(q, method);
    pthread_mutex_unlock(s->lock);
    if (q->rows > 0)
        st_http_rate_spend(s->rate, ident, lim, q->rows, st_now_ns());
    return r;
}

/* ---- the server ---- */

/* eh_body - appends an uploaded piece (beyond max_body it is dropped and
 * the request is answered 413 at its end). */
static bool eh_body(eh_req *q, const char *data, size_t n)
{
    atomic_fetch_add(&q->s->bytes_in, n);
    if (q->too_big || q->len + n > q->s->cfg.max_body) {
        q->too_big = true;
        return true;
    }
    if (q->len + n > q->cap) {
        size_t cap = q->cap ? q->cap : n;
        while (cap < q->len + n)
            cap *= 2;
        char *b = realloc(q->body, cap);
        if (b == NULL)
            return false;
        q->body = b;
        q->cap = cap;
    }
    memcpy(q->body + q->len, data, n);
    q->len += n;
    return true;
}

/* eh_uri - MHD's URI callback, called once per request with the target as
 * the client sent it (before MHD splits off the query and percent-decodes
 * the path in place): makes the request, reading which row the target
 * names (worker/embed/embed_row.h). The request is freed by eh_completed (MHD
 * calls it for every request this callback saw); NULL when out of memory
 * (eh_access then closes the connection). */
static void *eh_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    eh_req *q = calloc(1, sizeof *q);
    if (q != NULL) {
        *q = (eh_req){.s = cls, .c = c};
        q->row_err = st_embed_row_target(uri, &q->row_id);
    }
    return q;
}

static enum MHD_Result eh_access(void *cls, struct MHD_Connection *c, const char *url,
                                 const char *method, const char *version, const char *upload,
                                 size_t *upload_size, void **req_cls)
{
    (void)cls;
    (void)c;
    (void)version;
    eh_req *q = *req_cls;
    if (q == NULL)
        return MHD_NO; /* eh_uri had no memory */
    if (!q->started) {
        q->started = true;
        q->ep = eh_classify(url);
        q->head = strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
        return MHD_YES;
    }
    if (*upload_size > 0) {
        size_t n = *upload_size;
        *upload_size = 0;
        return eh_body(q, upload, n) ? MHD_YES : MHD_NO;
    }
    return eh_answer(q, method);
}

static void eh_completed(void *cls, struct MHD_Connection *c, void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    (void)toe;
    eh_req *q = *req_cls;
    if (q != NULL) {
        free(q->body);
        free(q);
    }
    *req_cls = NULL;
}

/* eh_fds - raises the descriptor limit to what --http-max-conns needs (up
 * to the hard limit); ST_ERANGE naming both when it cannot. */
static st_err eh_fds(uint32_t max_conns)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return st_err_errno(errno, "getrlimit");
    rlim_t need = (rlim_t)max_conns + EH_FD_RESERVE;
    if (rl.rlim_cur >= need)
        return ST_OK;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need)
        return st_errorf(ST_ERANGE,
                         "--http-max-conns %u needs %llu file descriptors; the hard "
                         "limit is %llu",
                         max_conns, (unsigned long long)need, (unsigned long long)rl.rlim_max);
    rl.rlim_cur = need;
    return setrlimit(RLIMIT_NOFILE, &rl) != 0 ? st_err_errno(errno, "setrlimit RLIMIT_NOFILE")
                                              : ST_OK;
}

static st_err eh_start(st_embed_srv *s, int *bound)
{
    const st_embed_cfg *cfg = &s->cfg;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)cfg->port);
    if (inet_pton(AF_INET, cfg->host, &sa.sin_addr) != 1)
        return st_errorf(ST_EINVAL, "--http host '%s' is not an IPv4 address", cfg->host);
    st_err e = eh_fds(cfg->max_conns);
    if (e != ST_OK)
        return e;
    s->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, 0, NULL, NULL,
                            eh_access, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_THREAD_POOL_SIZE, (unsigned)cfg->threads,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_conns,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)cfg->per_ip_conns,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->timeout_s,
                            MHD_OPTION_URI_LOG_CALLBACK, eh_uri, s, MHD_OPTION_NOTIFY_COMPLETED,
                            eh_completed, s, MHD_OPTION_END);
    if (s->d == NULL)
        return st_errorf(ST_EIO, "cannot listen on %s:%d", cfg->host, cfg->port);
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    *bound = di ? di->port : cfg->port;
    return ST_OK;
}

st_err st_embed_srv_open(st_ends *ends, pthread_mutex_t *lock, const st_embed_cfg *cfg,
                         st_embed_srv **out, int *bound)
{
    *out = NULL;
    if (cfg->threads < 1 || cfg->max_conns < 1 || cfg->timeout_s < 1 || cfg->max_body < 1)
        return st_errorf(ST_EINVAL,
                         "embed: threads %u, connections %u, timeout %u s and "
                         "max_body %zu must be positive",
                         cfg->threads, cfg->max_conns, cfg->timeout_s, cfg->max_body);
    st_embed_srv *s = calloc(1, sizeof *s);
    if (s == NULL)
        return st_errorf(ST_ENOMEM, "embedding service");
    s->ends = ends;
    s->lock = lock;
    s->cfg = *cfg;
    st_hex(st_ends_model_id(ends), EH_ETAG_HASH_BYTES, s->hash, sizeof s->hash);
    st_hex(st_ends_model_id(ends), ST_ENDS_ID_BYTES, s->model_hex, sizeof s->model_hex);
    st_err e = st_wire_ctx_new(0, &s->wctx);
    if (e == ST_OK && cfg->api_key_file != NULL)
        e = st_http_keys_load(cfg->api_key_file, &s->keys);
    if (e == ST_OK)
        e = st_http_rate_open(cfg->rate_table, &s->rate);
    if (e == ST_OK)
        e = eh_start(s, bound);
    if (e != ST_OK) {
        st_embed_srv_close(s);
        return e;
    }
    *out = s;
    return ST_OK;
}

void st_embed_srv_close(st_embed_srv *s)
{
    if (s == NULL)
        return;
    if (s->d != NULL)
        MHD_stop_daemon(s->d);
    st_http_rate_close(s->rate);
    st_http_keys_free(s->keys);
    st_wire_ctx_free(s->wctx);
    free(s);
}
