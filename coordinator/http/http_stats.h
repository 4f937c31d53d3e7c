/* http_stats.h - the coordinator gateway's GET /metrics: its own counters
 * and histograms, updated by any thread without locks (C11 atomics), and
 * the coordinator's state from its latest StatusReply (the figures
 * `strata status --json` shows), rendered with the text builder and the
 * request counts the HTTP services share (common/http/http_metrics.h).
 * docs/http-api.md lists every metric. Rendering is a pure function of a
 * snapshot, so the unit tests check the exact text. */
#ifndef ST_COORD_HTTP_STATS_H
#define ST_COORD_HTTP_STATS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/http/http_metrics.h"
#include "strata.pb-c.h"

typedef enum st_http_ep {
    ST_HTTP_EP_CHAT = 0,
    ST_HTTP_EP_COMPLETIONS,
    ST_HTTP_EP_MODELS,
    ST_HTTP_EP_HEALTH,
    ST_HTTP_EP_METRICS,
    ST_HTTP_EP_OTHER, /* last: st_http_reqs_count's "other" */
    ST_HTTP_EP_COUNT
} st_http_ep;

/* Histogram bucket upper bounds, seconds (+Inf is implicit). */
#define ST_HTTP_TTFT_BUCKETS 13
#define ST_HTTP_ITL_BUCKETS 12

/* The connection guard's refusals and closures (http_guard.h). */
typedef struct st_http_guard_counts {
    atomic_uint_fast64_t per_ip_refused;         /* over --http-per-ip */
    atomic_uint_fast64_t header_deadline_closed; /* headers not complete by --http-header-s */
    atomic_uint_fast64_t body_deadline_closed;   /* body not complete by --http-body-s */
} st_http_guard_counts;

typedef struct st_http_metrics {
    st_http_reqs requests;
    atomic_uint_fast64_t prompt_tokens;
    atomic_uint_fast64_t generated_tokens;
    atomic_uint_fast64_t auth_failures;
    atomic_uint_fast64_t rate_limited;
    atomic_uint_fast64_t disconnects; /* clients gone before their request ended */
    atomic_uint_fast64_t replans;     /* epoch changes the gateway observed */
    atomic_int_fast64_t streams;      /* generation requests in progress */
    st_http_guard_counts guard;
    st_http_hist ttft;
    st_http_hist itl;
} st_http_metrics;

/* st_http_metrics_init - all zero. */
void st_http_metrics_init(st_http_metrics *m);

/* st_http_metrics_request - one answered request of ep with status. */
void st_http_metrics_request(st_http_metrics *m, st_http_ep ep, int status);

/* st_http_metrics_ttft / _itl - one time-to-first-token or inter-token
 * latency observation, in ns. */
void st_http_metrics_ttft(st_http_metrics *m, uint64_t ns);
void st_http_metrics_itl(st_http_metrics *m, uint64_t ns);

/* st_http_metrics_render - the exposition text of m and (when not NULL)
 * status, with model as the `model` label; *out malloc'ed and
 * NUL-terminated, *len without the NUL. ST_ENOMEM. */
st_err st_http_metrics_render(st_http_metrics *m, const Strata__StatusReply *status,
                              const char *model, char **out, size_t *len);

#endif
