/* http_metrics.h - what the HTTP services' GET /metrics answers share, in
 * Prometheus' text format (version 0.0.4): requests counted by endpoint
 * and status, histograms of durations (both updated by any thread without
 * locks, C11 atomics), and a text builder. The coordinator's gateway
 * (coordinator/http/http_stats.h) and the embedding service
 * (worker/embed/embed_http.c) each add their own figures with the builder;
 * docs/http-api.md lists every metric. Rendering is a pure function of a
 * snapshot, so the unit tests check the exact text. */
#ifndef ST_HTTP_METRICS_H
#define ST_HTTP_METRICS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"

/* HTTP statuses counted (100..599); others count as 599. */
#define ST_HTTP_STATUS_MIN 100
#define ST_HTTP_STATUS_MAX 599
#define ST_HTTP_N_STATUS (ST_HTTP_STATUS_MAX - ST_HTTP_STATUS_MIN + 1)

#define ST_HTTP_EPS_MAX 8   /* endpoints one service counts */
#define ST_HTTP_HIST_MAX 16 /* bucket bounds of one histogram (+Inf is implicit) */

/* Requests answered, by endpoint (a service's own numbering, 0..n-1, the
 * last one being "other") and status. All zero bits: empty. */
typedef struct st_http_reqs {
    atomic_uint_fast64_t n[ST_HTTP_EPS_MAX][ST_HTTP_N_STATUS];
} st_http_reqs;

/* A histogram of durations over caller-given bounds (seconds, ascending). */
typedef struct st_http_hist {
    atomic_uint_fast64_t le[ST_HTTP_HIST_MAX];
    atomic_uint_fast64_t count;
    atomic_uint_fast64_t sum_ns;
} st_http_hist;

/* st_http_reqs_count - one answer of endpoint ep (of n_eps; one beyond
 * counts as the last, "other") with status (outside 100..599: 599). */
void st_http_reqs_count(st_http_reqs *r, unsigned ep, unsigned n_eps, int status);

/* st_http_hist_observe - one observation of ns nanoseconds into h with
 * bounds le[0..n) (n <= ST_HTTP_HIST_MAX). */
void st_http_hist_observe(st_http_hist *h, const double *le, size_t n, uint64_t ns);

/* A growing exposition text; after a failed allocation it stops growing
 * and st_mtext_finish reports it. One thread. */
typedef struct st_mtext {
    char *p;
    size_t len, cap;
    bool oom;
} st_mtext;

/* st_mtext_init - an empty text; ST_ENOMEM. */
st_err st_mtext_init(st_mtext *b);

/* st_mtext_printf - appends formatted text. */
void st_mtext_printf(st_mtext *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* st_mtext_head - the # HELP and # TYPE lines of metric name. */
void st_mtext_head(st_mtext *b, const char *name, const char *type, const char *help);

/* st_mtext_counter / st_mtext_gauge - a metric without labels, its value
 * printed exactly (epochs exceed 2^53). */
void st_mtext_counter(st_mtext *b, const char *name, const char *help, uint64_t v);
void st_mtext_gauge(st_mtext *b, const char *name, const char *help, uint64_t v);

/* st_mtext_label - s with \, " and newline escaped for a label value, into
 * out (cut to cap - 1 bytes at a whole escape); returns out. */
const char *st_mtext_label(const char *s, char *out, size_t cap);

/* st_mtext_hist - histogram name of h with bounds le[0..n). */
void st_mtext_hist(st_mtext *b, const char *name, const char *help, st_http_hist *h,
                   const double *le, size_t n);

/* st_mtext_reqs - strata_http_requests_total{endpoint, status} of r, the
 * endpoints named by names[0..n_eps); zero counts are left out. */
void st_mtext_reqs(st_mtext *b, st_http_reqs *r, const char *const *names, unsigned n_eps);

/* st_mtext_access - strata_http_auth_failures_total (a missing or wrong
 * API key, 401) and strata_http_rate_limited_total (429). */
void st_mtext_access(st_mtext *b, uint64_t auth_failures, uint64_t rate_limited);

/* st_mtext_finish - hands over the text: *out malloc'ed and NUL-terminated,
 * *len without the NUL; ST_ENOMEM (nothing handed over) when an append
 * failed. b is empty afterwards either way. */
st_err st_mtext_finish(st_mtext *b, char **out, size_t *len);

#endif
