/* http_metrics.c - the Prometheus exposition of the gateway (see
 * http_metrics.h). */
#include "coordinator/http_metrics.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MET_NS_PER_S 1e9
#define MET_MS_PER_S 1e3
#define MET_FIRST_CAP 4096

static const double met_ttft_le[ST_HTTP_TTFT_BUCKETS] = {
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
static const double met_itl_le[ST_HTTP_ITL_BUCKETS] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10};
static const char *const met_ep_name[ST_HTTP_EP_COUNT] = {
    "/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics", "other"};

void st_http_metrics_init(st_http_metrics *m)
{
    memset(m, 0, sizeof *m); /* all-zero bits are a valid zero atomic on every target we build */
}

void st_http_metrics_request(st_http_metrics *m, st_http_ep ep, int status)
{
    if ((unsigned)ep >= ST_HTTP_EP_COUNT)
        ep = ST_HTTP_EP_OTHER;
    if (status < ST_HTTP_STATUS_MIN || status > ST_HTTP_STATUS_MAX)
        status = ST_HTTP_STATUS_MAX;
    atomic_fetch_add(&m->requests[ep][status - ST_HTTP_STATUS_MIN], 1);
}

static void met_observe(st_http_hist *h, const double *le, size_t n, uint64_t ns)
{
    double s = (double)ns / MET_NS_PER_S;
    for (size_t i = 0; i < n; i++)
        if (s <= le[i])
            atomic_fetch_add(&h->le[i], 1); /* cumulative: every bucket at or above */
    atomic_fetch_add(&h->count, 1);
    atomic_fetch_add(&h->sum_ns, ns);
}

void st_http_metrics_ttft(st_http_metrics *m, uint64_t ns)
{
    met_observe(&m->ttft, met_ttft_le, ST_HTTP_TTFT_BUCKETS, ns);
}

void st_http_metrics_itl(st_http_metrics *m, uint64_t ns)
{
    met_observe(&m->itl, met_itl_le, ST_HTTP_ITL_BUCKETS, ns);
}

/* A growing text buffer; a failed append sets oom and stops appending. */
typedef struct met_buf {
    char *p;
    size_t len, cap;
    bool oom;
} met_buf;

static void met_printf(met_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void met_printf(met_buf *b, const char *fmt, ...)
{
    for (int tries = 0; tries < 2 && !b->oom; tries++) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t c = b->cap * 2 > b->len + (size_t)n + 1 ? b->cap * 2 : b->len + (size_t)n + 1;
        char *q = realloc(b->p, c);
        if (q == NULL) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = c;
    }
}

/* met_label - s with \, " and newline escaped, into out (cut to cap - 1
 * bytes at a whole escape). */
static const char *met_label(const char *s, char *out, size_t cap)
{
    size_t o = 0;
    for (; s && *s; s++) {
        const char *rep = *s == '\\' ? "\\\\" : *s == '"' ? "\\\"" : *s == '\n' ? "\\n" : NULL;
        size_t n = rep ? 2 : 1;
        if (o + n >= cap)
            break;
        if (rep)
            memcpy(out + o, rep, 2);
        else
            out[o] = *s;
        o += n;
    }
    out[o] = '\0';
    return out;
}

static void met_head(met_buf *b, const char *name, const char *type, const char *help)
{
    met_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void met_hist(met_buf *b, const char *name, const char *help, st_http_hist *h,
                     const double *le, size_t n)
{
    met_head(b, name, "histogram", help);
    for (size_t i = 0; i < n; i++)
        met_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, le[i],
                   (unsigned long long)atomic_load(&h->le[i]));
    unsigned long long count = atomic_load(&h->count);
    met_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, count);
    met_printf(b, "%s_sum %.9f\n", name, (double)atomic_load(&h->sum_ns) / MET_NS_PER_S);
    met_printf(b, "%s_count %llu\n", name, count);
}

static void met_counter(met_buf *b, const char *name, const char *help, uint64_t v)
{
    met_head(b, name, "counter", help);
    met_printf(b, "%s %llu\n", name, (unsigned long long)v);
}

/* met_gauge - an integer gauge, printed exactly (epochs exceed 2^53). */
static void met_gauge(met_buf *b, const char *name, const char *help, uint64_t v)
{
    met_head(b, name, "gauge", help);
    met_printf(b, "%s %llu\n", name, (unsigned long long)v);
}

static void met_gateway(met_buf *b, st_http_metrics *m)
{
    met_head(b, "strata_http_requests_total", "counter", "HTTP requests answered, by endpoint "
             "and status.");
    for (int ep = 0; ep < ST_HTTP_EP_COUNT; ep++)
        for (int s = 0; s < ST_HTTP_N_STATUS; s++) {
            unsigned long long v = atomic_load(&m->requests[ep][s]);
            if (v)
                met_printf(b, "strata_http_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n",
                           met_ep_name[ep], s + ST_HTTP_STATUS_MIN, v);
        }
    met_counter(b, "strata_prompt_tokens_total", "Prompt tokens of accepted generation requests.",
                atomic_load(&m->prompt_tokens));
    met_counter(b, "strata_generated_tokens_total", "Tokens generated for HTTP clients.",
                atomic_load(&m->generated_tokens));
    met_counter(b, "strata_http_auth_failures_total", "Requests refused for a missing or wrong "
                "API key.", atomic_load(&m->auth_failures));
    met_counter(b, "strata_http_rate_limited_total", "Requests refused by a rate limit (429).",
                atomic_load(&m->rate_limited));
    met_counter(b, "strata_http_disconnects_total", "Clients that went away before their "
                "request ended (the request was cancelled).", atomic_load(&m->disconnects));
    met_counter(b, "strata_replans_total", "Plan switches (epoch changes) the gateway observed.",
                atomic_load(&m->replans));
    int64_t streams = atomic_load(&m->streams);
    met_gauge(b, "strata_http_streams", "Generation requests in progress over HTTP.",
              streams > 0 ? (uint64_t)streams : 0);
    met_hist(b, "strata_time_to_first_token_seconds", "Time from an accepted request to its "
             "first token.", &m->ttft, met_ttft_le, ST_HTTP_TTFT_BUCKETS);
    met_hist(b, "strata_inter_token_latency_seconds", "Time between consecutive tokens of a "
             "request.", &m->itl, met_itl_le, ST_HTTP_ITL_BUCKETS);
}

static void met_workers(met_buf *b, const Strata__StatusReply *s)
{
    char name[128];
    met_head(b, "strata_worker_layer_latency_ema_seconds", "gauge", "A worker's per-layer "
             "compute time, exponential moving average (its last heartbeat).");
    for (size_t i = 0; i < s->n_workers; i++) {
        const Strata__WorkerStatus *w = s->workers[i];
        for (size_t k = 0; w->last && k < w->last->n_layers; k++)
            met_printf(b, "strata_worker_layer_latency_ema_seconds{worker=\"%s\",id=\"%llu\","
                       "layer=\"%u\"} %.9f\n", met_label(w->name, name, sizeof name),
                       (unsigned long long)w->id, w->last->layers[k]->layer,
                       w->last->layers[k]->ema_ms / MET_MS_PER_S);
    }
    met_head(b, "strata_worker_steps_total", "counter", "Batches a worker computed.");
    for (size_t i = 0; i < s->n_workers; i++) {
        const Strata__WorkerStatus *w = s->workers[i];
        if (w->last && w->last->counters)
            met_printf(b, "strata_worker_steps_total{worker=\"%s\",id=\"%llu\"} %llu\n",
                       met_label(w->name, name, sizeof name), (unsigned long long)w->id,
                       (unsigned long long)w->last->counters->steps);
    }
    met_head(b, "strata_worker_up", "gauge", "1 for a worker serving the plan, else 0.");
    for (size_t i = 0; i < s->n_workers; i++) {
        const Strata__WorkerStatus *w = s->workers[i];
        met_printf(b, "strata_worker_up{worker=\"%s\",id=\"%llu\"} %d\n",
                   met_label(w->name, name, sizeof name), (unsigned long long)w->id,
                   w->state && strcmp(w->state, "serving") == 0);
    }
}

static void met_cluster(met_buf *b, const Strata__StatusReply *s, const char *model)
{
    char lm[256];
    met_head(b, "strata_info", "gauge", "The model served (label), always 1.");
    met_printf(b, "strata_info{model=\"%s\"} 1\n", met_label(model, lm, sizeof lm));
    met_gauge(b, "strata_epoch", "The epoch of the serving plan (0: none).", s->epoch);
    const Strata__SchedStatus *q = s->sched;
    if (q) {
        met_gauge(b, "strata_queue_depth", "Requests waiting for a session.", q->queued);
        met_gauge(b, "strata_requests_running", "Requests holding a session.", q->running);
        met_gauge(b, "strata_sessions_active", "Sessions holding KV (running and idle).",
                  q->sessions);
        met_gauge(b, "strata_sessions_max", "KV slots per worker in the serving plan.",
                  q->max_sessions);
        met_gauge(b, "strata_kv_bytes", "KV bytes allocated on the workers.", q->kv_bytes);
        met_counter(b, "strata_batches_total", "Batches formed.", q->batches);
        met_counter(b, "strata_scheduled_tokens_total", "Tokens in formed batches.", q->tokens);
        met_counter(b, "strata_busy_refused_total", "Requests refused at submit: too many in "
                    "progress.", q->busy_refused);
        met_counter(b, "strata_client_gone_total", "Requests cancelled because their client "
                    "stopped polling.", q->client_gone);
        met_counter(b, "strata_reused_prompt_tokens_total", "Prompt tokens served from a "
                    "session's KV.", q->reused_tokens);
    }
    const Strata__Counters *c = s->counters;
    if (c) {
        met_counter(b, "strata_bad_packets_total", "Malformed packets or messages (coordinator "
                    "and workers).", c->bad_packets);
        met_counter(b, "strata_refused_epoch_total", "Packets refused for a stale or foreign "
                    "epoch.", c->refused_epoch);
        met_counter(b, "strata_cluster_auth_failures_total", "Cluster frames dropped for a bad "
                    "MAC or a replay.", c->auth_failed);
    }
    met_workers(b, s);
}

st_err st_http_metrics_render(st_http_metrics *m, const Strata__StatusReply *status,
                              const char *model, char **out, size_t *len)
{
    *out = NULL;
    met_buf b = {.p = malloc(MET_FIRST_CAP), .cap = MET_FIRST_CAP};
    if (b.p == NULL)
        return st_errorf(ST_ENOMEM, "metrics text");
    b.p[0] = '\0';
    met_gateway(&b, m);
    if (status)
        met_cluster(&b, status, model);
    if (b.oom) {
        free(b.p);
        return st_errorf(ST_ENOMEM, "metrics text");
    }
    *out = b.p;
    *len = b.len;
    return ST_OK;
}
