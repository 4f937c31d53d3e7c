/* planner_impl.h - what placement.c (validation, spares, hysteresis,
 * reasons, errors) and planner_search.c (the searches) share. Internal to
 * the planner; callers use placement.h. */
#ifndef ST_COORD_PLANNER_IMPL_H
#define ST_COORD_PLANNER_IMPL_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "coordinator/planner/placement.h"

/* One planning problem: the inputs and the layer prefix sums. */
typedef struct pl_ctx {
    const st_place_model *m;
    const st_place_worker *w;
    size_t n;
    const st_place_opts *o;
    uint64_t *prefix;  /* [n_layer + 1]: bytes of layers [0, l), saturating; its block
                        * holds cprefix too (one free) */
    uint64_t *cprefix; /* [n_layer + 1]: bytes one token reads in layers [0, l) */
    uint64_t kv_layer; /* KV reserve bytes per layer, saturating */
} pl_ctx;

/* A coverage plan: stage i is worker[i] on [cut[i], cut[i + 1]). */
typedef struct pl_sol {
    bool found;
    bool exact;
    size_t n_stages;
    uint16_t worker[ST_PLACE_MAX_WORKERS]; /* input indices */
    uint32_t cut[ST_PLACE_MAX_WORKERS + 1];
    double bottleneck; /* slowest stage time */
    double latency;    /* compute + links of one token */
} pl_sol;

/* The cost model, inline: the searches call these in their inner loops. */

static inline uint64_t pl_sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static inline uint64_t pl_sat_mul(uint64_t a, uint64_t b)
{
    return (b != 0 && a > UINT64_MAX / b) ? UINT64_MAX : a * b;
}

/* pl_mem - bytes of a stage [f, l) (saturating). */
static inline uint64_t pl_mem(const pl_ctx *x, uint32_t f, uint32_t l)
{
    uint64_t s = x->prefix[l] == UINT64_MAX
                     ? UINT64_MAX
                     : pl_sat_add(x->prefix[l] - x->prefix[f], pl_sat_mul(x->kv_layer, l - f));
    if (l > f)
        s = pl_sat_add(s, x->m->stage_bytes);
    if (f == 0)
        s = pl_sat_add(s, x->m->embd_bytes);
    if (l == x->m->n_layer)
        s = pl_sat_add(s, x->m->head_bytes);
    return s;
}

/* pl_fits - whether input worker w can hold the stage [f, l). */
static inline bool pl_fits(const pl_ctx *x, size_t w, uint32_t f, uint32_t l)
{
    return pl_mem(x, f, l) <= x->w[w].mem_budget;
}

/* pl_compute - seconds input worker w needs for one token on [f, l). */
static inline double pl_compute(const pl_ctx *x, size_t w, uint32_t f, uint32_t l)
{
    double b = (double)(x->cprefix[l] - x->cprefix[f]);
    if (l == x->m->n_layer)
        b += (double)x->m->head_bytes;
    return x->w[w].spb * b;
}

/* pl_xfer - transfer time of one token's packet from a to b: its bytes
 * (act_ab's entry, else act_bytes) / bw. */
static inline double pl_xfer(const pl_ctx *x, size_t a, size_t b)
{
    double act = x->o->act_ab ? x->o->act_ab[a * x->n + b] : x->o->act_bytes;
    if (x->o->bw == NULL || act <= 0)
        return 0;
    double bw = x->o->bw[a * x->n + b];
    return (bw > 0 && bw < INFINITY) ? act / bw : 0;
}

/* pl_link - latency + transfer of one token's packet from a to b. */
static inline double pl_link(const pl_ctx *x, size_t a, size_t b)
{
    return (x->o->lat_s ? x->o->lat_s[a * x->n + b] : 0) + pl_xfer(x, a, b);
}

/* pl_prefixes - allocates and fills x->prefix and x->cprefix from x->m
 * (one block: free x->prefix). ST_ENOMEM names the planner. */
st_err pl_prefixes(pl_ctx *x);

/* pl_value - the objective's value of a solution. */
double pl_value(const pl_ctx *x, const pl_sol *s);

/* pl_search - the best coverage plan over the candidates cand[0..nc)
 * (input indices): exact when nc <= ST_PLACE_EXACT_MAX (and the table fits
 * in memory), else the order heuristic. out->found is false when no
 * assignment of contiguous ranges fits the budgets. ST_ENOMEM only when
 * the search's tables cannot be allocated. */
st_err pl_search(const pl_ctx *x, const size_t *cand, size_t nc, pl_sol *out);

/* pl_replicas - adds the workers pool[0..np) (input indices idle in r) as
 * replicas where they lower the bottleneck (exhaustive for small pools,
 * greedy above), then refreshes r's times. */
void pl_replicas(const pl_ctx *x, st_place_result *r, const size_t *pool, size_t np);

/* pl_times - fills every stage's compute_s, link_s, time_s and r's
 * latency, bottleneck and step from its stages. */
void pl_times(const pl_ctx *x, st_place_result *r);

#endif
