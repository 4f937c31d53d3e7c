/* latency.h - per-layer compute latency of a worker's stage.
 *
 * For every layer of the stage the tracker keeps an exponential moving
 * average (alpha ST_LAT_ALPHA = 0.1; the first sample initialises it) and
 * the last ST_LAT_WINDOW = 100 samples in a ring, from which the p99 is
 * computed on demand by the nearest-rank rule: the value of rank
 * ceil(0.99 * n) (1-based) among the n <= 100 samples sorted ascending
 * (with 100 samples: the second largest; with fewer than 100: the largest).
 *
 * Plain data with no lock: the worker's data thread adds samples and the
 * control thread reads them, both under the daemon's mutex. Memory is
 * fixed at init (bounded, INV-6). */
#ifndef ST_WORKER_LATENCY_H
#define ST_WORKER_LATENCY_H

#include <stdint.h>

#include "common/base/err.h"

#define ST_LAT_WINDOW 100
#define ST_LAT_ALPHA 0.1

typedef struct st_lat_layer {
    double ema_ms;     /* every step (any rows and tokens) */
    double one_ema_ms; /* steps of one token only (st_latency_add_one) */
    uint64_t one_samples;
    double win[ST_LAT_WINDOW]; /* ring of the last samples */
    uint32_t head;             /* next slot of the ring */
    uint64_t samples;          /* samples ever added */
} st_lat_layer;

typedef struct st_latency {
    int64_t first;    /* absolute index of the first tracked layer */
    int64_t n_layers; /* layers [first, first + n_layers) */
    st_lat_layer *layers;
} st_latency;

/* One layer's figures, as a heartbeat reports them. */
typedef struct st_lat_stat {
    int64_t layer;
    double ema_ms;
    double p99_ms;
    uint64_t samples;
    double one_ema_ms; /* the one-token steps' EMA (0 before the first) */
    uint64_t one_samples;
} st_lat_stat;

/* st_latency_init - a tracker for layers [first, first + n_layers) with no
 * samples. n_layers may be 0 (a spare); ST_EINVAL for negative values,
 * ST_ENOMEM. */
st_err st_latency_init(st_latency *l, int64_t first, int64_t n_layers);

/* st_latency_fini - frees; a zeroed or finished tracker is a no-op. */
void st_latency_fini(st_latency *l);

/* st_latency_reset - forgets every sample, keeping the layer range. */
void st_latency_reset(st_latency *l);

/* st_latency_add - records one sample of ms milliseconds for absolute
 * layer `layer`. ST_ERANGE if the layer is not tracked, ST_EINVAL if ms is
 * negative or not finite (nothing is recorded then). */
st_err st_latency_add(st_latency *l, int64_t layer, double ms);

/* st_latency_add_one - records a sample of a step of exactly one token
 * (single-stream decode) in the layer's one-token EMA (alpha
 * ST_LAT_ALPHA), besides st_latency_add's, which takes every step. A
 * step's time grows with its rows and tokens (a prefill chunk takes many
 * times a decode step), so the all-steps EMA follows the load mix; the
 * one-token EMA is the time per token of a lone decode, which the
 * coordinator's --wire auto rule compares a token's transfer with. Errors
 * as st_latency_add's. */
st_err st_latency_add_one(st_latency *l, int64_t layer, double ms);

/* st_latency_stat - the EMA, p99 and sample count of absolute layer
 * `layer` (all zero before its first sample). ST_ERANGE if not tracked. */
st_err st_latency_stat(const st_latency *l, int64_t layer, st_lat_stat *out);

/* st_latency_p99 - the nearest-rank p99 of v[0..n) (0 when n is 0); v is
 * not modified; n is at most ST_LAT_WINDOW. */
double st_latency_p99(const double *v, uint32_t n);

#endif
