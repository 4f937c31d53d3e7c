/* latency.c - per-layer latency: EMA and windowed p99 (see latency.h).
 *
 * Design. A worker reports how long each of its layers takes so the
 * placement can weigh stages by what they really cost, not only by what
 * the start-up measurement predicted. Two figures per layer: the EMA
 * (alpha 0.1) follows the typical step and forgets old behaviour within a
 * few dozen steps; the p99 over the last 100 steps shows the tail that a
 * pipeline's slowest stage inflicts on everyone. The ring holds exactly the
 * window, so memory is fixed; the p99 sorts a 100-element copy, which the
 * control thread does once per heartbeat per layer — cheap, and it keeps
 * the data thread's per-step cost at a few stores. */
#include "worker/daemon/latency.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

st_err st_latency_init(st_latency *l, int64_t first, int64_t n_layers)
{
    memset(l, 0, sizeof *l);
    if (first < 0 || n_layers < 0 || n_layers > (1 << 20))
        return st_errorf(ST_EINVAL, "latency tracker for layers [%lld, +%lld) is invalid",
                         (long long)first, (long long)n_layers);
    l->first = first;
    l->n_layers = n_layers;
    if (n_layers == 0)
        return ST_OK;
    l->layers = calloc((size_t)n_layers, sizeof *l->layers);
    if (l->layers == NULL)
        return st_errorf(ST_ENOMEM, "latency tracker of %lld layers", (long long)n_layers);
    return ST_OK;
}

void st_latency_fini(st_latency *l)
{
    free(l->layers);
    memset(l, 0, sizeof *l);
}

void st_latency_reset(st_latency *l)
{
    if (l->layers != NULL)
        memset(l->layers, 0, (size_t)l->n_layers * sizeof *l->layers);
}

/* lat_check - ST_ERANGE if layer is not tracked, ST_EINVAL if ms is not a
 * sample (negative or not finite). */
static st_err lat_check(const st_latency *l, int64_t layer, double ms)
{
    if (layer < l->first || layer >= l->first + l->n_layers)
        return st_errorf(ST_ERANGE, "layer %lld is not tracked (layers [%lld, %lld))",
                         (long long)layer, (long long)l->first,
                         (long long)(l->first + l->n_layers));
    if (!isfinite(ms) || ms < 0.0)
        return st_errorf(ST_EINVAL, "latency sample %g ms of layer %lld is invalid", ms,
                         (long long)layer);
    return ST_OK;
}

/* lat_ema - an EMA (alpha ST_LAT_ALPHA) of n samples so far with ms added:
 * the first sample initialises it. */
static double lat_ema(double ema, uint64_t n, double ms)
{
    return n == 0 ? ms : ST_LAT_ALPHA * ms + (1.0 - ST_LAT_ALPHA) * ema;
}

st_err st_latency_add(st_latency *l, int64_t layer, double ms)
{
    st_err e = lat_check(l, layer, ms);
    if (e != ST_OK)
        return e;
    st_lat_layer *s = &l->layers[layer - l->first];
    s->ema_ms = lat_ema(s->ema_ms, s->samples, ms);
    s->win[s->head] = ms;
    s->head = (s->head + 1) % ST_LAT_WINDOW;
    s->samples++;
    return ST_OK;
}

st_err st_latency_add_one(st_latency *l, int64_t layer, double ms)
{
    st_err e = lat_check(l, layer, ms);
    if (e != ST_OK)
        return e;
    st_lat_layer *s = &l->layers[layer - l->first];
    s->one_ema_ms = lat_ema(s->one_ema_ms, s->one_samples, ms);
    s->one_samples++;
    return ST_OK;
}

static int lat_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double st_latency_p99(const double *v, uint32_t n)
{
    if (n == 0)
        return 0.0;
    if (n > ST_LAT_WINDOW)
        n = ST_LAT_WINDOW;
    double tmp[ST_LAT_WINDOW];
    memcpy(tmp, v, n * sizeof *tmp);
    qsort(tmp, n, sizeof *tmp, lat_cmp);
    /* nearest rank: ceil(0.99 n), computed in integers to avoid rounding */
    uint32_t rank = (99u * n + 99u) / 100u;
    if (rank < 1)
        rank = 1;
    return tmp[rank - 1];
}

st_err st_latency_stat(const st_latency *l, int64_t layer, st_lat_stat *out)
{
    memset(out, 0, sizeof *out);
    if (layer < l->first || layer >= l->first + l->n_layers)
        return st_errorf(ST_ERANGE, "layer %lld is not tracked (layers [%lld, %lld))",
                         (long long)layer, (long long)l->first,
                         (long long)(l->first + l->n_layers));
    const st_lat_layer *s = &l->layers[layer - l->first];
    out->layer = layer;
    out->samples = s->samples;
    out->ema_ms = s->ema_ms;
    out->one_ema_ms = s->one_ema_ms;
    out->one_samples = s->one_samples;
    uint32_t n = s->samples < ST_LAT_WINDOW ? (uint32_t)s->samples : ST_LAT_WINDOW;
    out->p99_ms = st_latency_p99(s->win, n);
    return ST_OK;
}
