/* http_stats.c - the coordinator gateway's Prometheus exposition (see
 * http_stats.h). */
#include "coordinator/http/http_stats.h"

#include <string.h>

#define MET_MS_PER_S 1e3
#define MET_LABEL_MAX 128
#define MET_MODEL_LABEL_MAX 256

_Static_assert(ST_HTTP_EP_COUNT <= ST_HTTP_EPS_MAX, "the gateway's endpoints fit the table");
_Static_assert(ST_HTTP_TTFT_BUCKETS <= ST_HTTP_HIST_MAX && ST_HTTP_ITL_BUCKETS <= ST_HTTP_HIST_MAX,
               "the gateway's histograms fit");

static const double met_ttft_le[ST_HTTP_TTFT_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                         1,     2.5,  5,     10,   30,  60};
static const double met_itl_le[ST_HTTP_ITL_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                       0.1,   0.25,   0.5,   1,    2.5,   10};
static const char *const met_ep_name[ST_HTTP_EP_COUNT] =
    {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics", "other"};

void st_http_metrics_init(st_http_metrics *m)
{
    memset(m, 0, sizeof *m); /* all-zero bits are a valid zero atomic on every target we build */
}

void st_http_metrics_request(st_http_metrics *m, st_http_ep ep, int status)
{
    st_http_reqs_count(&m->requests, (unsigned)ep, ST_HTTP_EP_COUNT, status);
}

void st_http_metrics_ttft(st_http_metrics *m, uint64_t ns)
{
    st_http_hist_observe(&m->ttft, met_ttft_le, ST_HTTP_TTFT_BUCKETS, ns);
}

void st_http_metrics_itl(st_http_metrics *m, uint64_t ns)
{
    st_http_hist_observe(&m->itl, met_itl_le, ST_HTTP_ITL_BUCKETS, ns);
}

static void met_gateway(st_mtext *b, st_http_metrics *m)
{
    st_mtext_reqs(b, &m->requests, met_ep_name, ST_HTTP_EP_COUNT);
    st_mtext_counter(b, "strata_prompt_tokens_total",
                     "Prompt tokens of accepted generation "
                     "requests.",
                     atomic_load(&m->prompt_tokens));
    st_mtext_counter(b, "strata_generated_tokens_total", "Tokens generated for HTTP clients.",
                     atomic_load(&m->generated_tokens));
    st_mtext_access(b, atomic_load(&m->auth_failures), atomic_load(&m->rate_limited));
    st_mtext_counter(b, "strata_http_per_ip_refused_total",
                     "Connections refused because their client address held "
                     "--http-per-ip connections already.",
                     atomic_load(&m->guard.per_ip_refused));
    st_mtext_counter(b, "strata_http_header_deadline_closed_total",
                     "Connections closed because a request's headers were not "
                     "complete within --http-header-s.",
                     atomic_load(&m->guard.header_deadline_closed));
    st_mtext_counter(b, "strata_http_body_deadline_closed_total",
                     "Connections closed because a request's body was not "
                     "complete within --http-body-s of its headers.",
                     atomic_load(&m->guard.body_deadline_closed));
    st_mtext_counter(b, "strata_http_disconnects_total",
                     "Clients that went away before their "
                     "request ended (the request was cancelled).",
                     atomic_load(&m->disconnects));
    st_mtext_counter(b, "strata_replans_total",
                     "Plan switches (epoch changes) the gateway "
                     "observed.",
                     atomic_load(&m->replans));
    int64_t streams = atomic_load(&m->streams);
    st_mtext_gauge(b, "strata_http_streams", "Generation requests in progress over HTTP.",
                   streams > 0 ? (uint64_t)streams : 0);
    st_mtext_hist(b, "strata_time_to_first_token_seconds",
                  "Time from an accepted request to "
                  "its first token.",
                  &m->ttft, met_ttft_le, ST_HTTP_TTFT_BUCKETS);
    st_mtext_hist(b, "strata_inter_token_latency_seconds",
                  "Time between consecutive tokens of "
                  "a request.",
                  &m->itl, met_itl_le, ST_HTTP_ITL_BUCKETS);
}

static void met_workers(st_mtext *b, const Strata__StatusReply *s)
{
    char name[MET_LABEL_MAX];
    st_mtext_head(b, "strata_worker_layer_latency_ema_seconds", "gauge",
                  "A worker's per-layer "
                  "compute time, exponential moving average (its last heartbeat).");
    for (size_t i = 0; i < s->n_workers; i++) {
        const Strata__WorkerStatus *w = s->workers[i];
        for (size_t k = 0; w->last && k < w->last->n_layers; k++)
            st_mtext_printf(b,
                            "strata_worker_layer_latency_ema_seconds{worker=\"%s\",id=\"%llu\","
                            "layer=\"%u\"} %.9f\n",
                            st_mtext_label(w->name, name, sizeof name), (unsigned long long)w->id,
                            w->last->layers[k]->layer, w->last->layers[k]->ema_ms / MET_MS_PER_S);
    }
    st_mtext_head(b, "strata_worker_steps_total", "counter", "Batches a worker computed.");
    for (size_t i = 0; i < s->n_workers; i++) {
        const Strata__WorkerStatus *w = s->workers[i];
        if (w->last && w->last->counters)
            st_mtext_printf(b, "strata_worker_steps_total{worker=\"%s\",id=\"%llu\"} %llu\n",
                            st_mtext_label(w->name, name, sizeof name), (unsigned long long)w->id,
                            (unsigned long long)w->last->counters->steps);
    }
    st_mtext_head(b, "strata_worker_up", "gauge", "1 for a worker serving the plan, else 0.");
    for (size_t i = 0; i < s->n_workers; i++) {
        const Strata__WorkerStatus *w = s->workers[i];
        st_mtext_printf(b, "strata_worker_up{worker=\"%s\",id=\"%llu\"} %d\n",
                        st_mtext_label(w->name, name, sizeof name), (unsigned long long)w->id,
                        w->state && strcmp(w->state, "serving") == 0);
    }
}

static void met_cluster(st_mtext *b, const Strata__StatusReply *s, const char *model)
{
    char lm[MET_MODEL_LABEL_MAX];
    st_mtext_head(b, "strata_info", "gauge", "The model served (label), always 1.");
    st_mtext_printf(b, "strata_info{model=\"%s\"} 1\n", st_mtext_label(model, lm, sizeof lm));
    st_mtext_gauge(b, "strata_epoch", "The epoch of the serving plan (0: none).", s->epoch);
    const Strata__SchedStatus *q = s->sched;
    if (q) {
        st_mtext_gauge(b, "strata_queue_depth", "Requests waiting for a session.", q->queued);
        st_mtext_gauge(b, "strata_requests_running", "Requests holding a session.", q->running);
        st_mtext_gauge(b, "strata_sessions_active", "Sessions holding KV (running and idle).",
                       q->sessions);
        st_mtext_gauge(b, "strata_sessions_max", "KV slots per worker in the serving plan.",
                       q->max_sessions);
        st_mtext_gauge(b, "strata_kv_bytes", "KV bytes allocated on the workers.", q->kv_bytes);
        st_mtext_counter(b, "strata_batches_total", "Batches formed.", q->batches);
        st_mtext_counter(b, "strata_scheduled_tokens_total", "Tokens in formed batches.",
                         q->tokens);
        st_mtext_counter(b, "strata_busy_refused_total",
                         "Requests refused at submit: too many in "
                         "progress.",
                         q->busy_refused);
        st_mtext_counter(b, "strata_client_gone_total",
                         "Requests cancelled because their client "
                         "stopped polling.",
                         q->client_gone);
        st_mtext_counter(b, "strata_reused_prompt_tokens_total",
                         "Prompt tokens served from a "
                         "session's KV.",
                         q->reused_tokens);
    }
    const Strata__Counters *c = s->counters;
    if (c) {
        st_mtext_counter(b, "strata_bad_packets_total",
                         "Malformed packets or messages (coordinator "
                         "and workers).",
                         c->bad_packets);
        st_mtext_counter(b, "strata_refused_epoch_total",
                         "Packets refused for a stale or foreign "
                         "epoch.",
                         c->refused_epoch);
        st_mtext_counter(b, "strata_cluster_auth_failures_total",
                         "Cluster frames dropped for a bad "
                         "MAC or a replay.",
                         c->auth_failed);
    }
    met_workers(b, s);
}

st_err st_http_metrics_render(st_http_metrics *m, const Strata__StatusReply *status,
                              const char *model, char **out, size_t *len)
{
    *out = NULL;
    st_mtext b;
    st_err e = st_mtext_init(&b);
    if (e != ST_OK)
        return e;
    met_gateway(&b, m);
    if (status)
        met_cluster(&b, status, model);
    return st_mtext_finish(&b, out, len);
}
