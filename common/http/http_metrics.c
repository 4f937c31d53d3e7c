/* http_metrics.c - the shared parts of the HTTP services' Prometheus
 * exposition (see http_metrics.h). */
#include "common/http/http_metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MET_NS_PER_S 1e9
#define MET_FIRST_CAP 4096

void st_http_reqs_count(st_http_reqs *r, unsigned ep, unsigned n_eps, int status)
{
    if (n_eps == 0 || n_eps > ST_HTTP_EPS_MAX)
        n_eps = ST_HTTP_EPS_MAX;
    if (ep >= n_eps)
        ep = n_eps - 1;
    if (status < ST_HTTP_STATUS_MIN || status > ST_HTTP_STATUS_MAX)
        status = ST_HTTP_STATUS_MAX;
    atomic_fetch_add(&r->n[ep][status - ST_HTTP_STATUS_MIN], 1);
}

void st_http_hist_observe(st_http_hist *h, const double *le, size_t n, uint64_t ns)
{
    double s = (double)ns / MET_NS_PER_S;
    for (size_t i = 0; i < n && i < ST_HTTP_HIST_MAX; i++)
        if (s <= le[i])
            atomic_fetch_add(&h->le[i], 1); /* cumulative: every bucket at or above */
    atomic_fetch_add(&h->count, 1);
    atomic_fetch_add(&h->sum_ns, ns);
}

st_err st_mtext_init(st_mtext *b)
{
    *b = (st_mtext){.p = malloc(MET_FIRST_CAP), .cap = MET_FIRST_CAP};
    if (b->p == NULL)
        return st_errorf(ST_ENOMEM, "metrics text");
    b->p[0] = '\0';
    return ST_OK;
}

void st_mtext_printf(st_mtext *b, const char *fmt, ...)
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

const char *st_mtext_label(const char *s, char *out, size_t cap)
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

void st_mtext_head(st_mtext *b, const char *name, const char *type, const char *help)
{
    st_mtext_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void st_mtext_hist(st_mtext *b, const char *name, const char *help, st_http_hist *h,
                   const double *le, size_t n)
{
    st_mtext_head(b, name, "histogram", help);
    for (size_t i = 0; i < n && i < ST_HTTP_HIST_MAX; i++)
        st_mtext_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, le[i],
                        (unsigned long long)atomic_load(&h->le[i]));
    unsigned long long count = atomic_load(&h->count);
    st_mtext_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, count);
    st_mtext_printf(b, "%s_sum %.9f\n", name, (double)atomic_load(&h->sum_ns) / MET_NS_PER_S);
    st_mtext_printf(b, "%s_count %llu\n", name, count);
}

static void met_value(st_mtext *b, const char *name, const char *type, const char *help, uint64_t v)
{
    st_mtext_head(b, name, type, help);
    st_mtext_printf(b, "%s %llu\n", name, (unsigned long long)v);
}

void st_mtext_counter(st_mtext *b, const char *name, const char *help, uint64_t v)
{
    met_value(b, name, "counter", help, v);
}

void st_mtext_gauge(st_mtext *b, const char *name, const char *help, uint64_t v)
{
    met_value(b, name, "gauge", help, v);
}

void st_mtext_reqs(st_mtext *b, st_http_reqs *r, const char *const *names, unsigned n_eps)
{
    st_mtext_head(b, "strata_http_requests_total", "counter",
                  "HTTP requests answered, by "
                  "endpoint and status.");
    for (unsigned ep = 0; ep < n_eps && ep < ST_HTTP_EPS_MAX; ep++)
        for (int s = 0; s < ST_HTTP_N_STATUS; s++) {
            unsigned long long v = atomic_load(&r->n[ep][s]);
            if (v)
                st_mtext_printf(b,
                                "strata_http_requests_total{endpoint=\"%s\",status=\"%d\"} "
                                "%llu\n",
                                names[ep], s + ST_HTTP_STATUS_MIN, v);
        }
}

void st_mtext_access(st_mtext *b, uint64_t auth_failures, uint64_t rate_limited)
{
    st_mtext_counter(b, "strata_http_auth_failures_total",
                     "Requests refused for a missing or "
                     "wrong API key.",
                     auth_failures);
    st_mtext_counter(b, "strata_http_rate_limited_total",
                     "Requests refused by a rate limit "
                     "(429).",
                     rate_limited);
}

st_err st_mtext_finish(st_mtext *b, char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    bool oom = b->oom;
    if (oom)
        free(b->p);
    else {
        *out = b->p;
        *len = b->len;
    }
    *b = (st_mtext){0};
    return oom ? st_errorf(ST_ENOMEM, "metrics text") : ST_OK;
}
