/* placement.h - the heterogeneous planner: which workers serve which layers,
 * in which order. A pure library (no I/O, no globals, no clock): the
 * coordinator feeds it live estimates, `strata plan --dry-run --workers`
 * feeds it a workers file, the tests feed it random instances.
 *
 * Inputs: workers {id, memory budget, compute time per byte of weights,
 * spare flag, current stage}, links between them {latency, bandwidth}, the
 * model {weight bytes per layer, embedding and head bytes, KV bytes per
 * token per layer} and settings {objective, KV reserve in tokens, bytes of
 * one token's activation on the wire, replicas allowed, hysteresis margin,
 * or a fixed split}.
 *
 * Output: an ordered list of stages (contiguous layer ranges covering
 * [0, n_layer), each with one worker, or more when replicas are allowed),
 * the expected step time and its bottleneck, the evaluation of the current
 * plan and whether to keep it (hysteresis), and for every worker left out
 * the reason; or a typed error naming the constraint that failed.
 *
 * Cost model (docs/placement.md): a worker w running layers [f, l) takes
 * spb_w x (bytes one token reads in those layers, + the head's if
 * l = n_layer) seconds per token: a layer's active bytes (a mixture of
 * experts reads n_expert_used of its n_expert experts), while memory counts
 * every byte (a stage holds every expert: layer_bytes). The embedding
 * lookup is free; its bytes count for memory only. A boundary a -> b costs
 * lat(a, b) + act_bytes(a, b) / bw(a, b) per token, act_bytes(a, b) being
 * the bytes of one token in the dtype that boundary would use (one figure
 * for all under a fixed --wire).
 * - latency objective: the sum of every stage's compute and every
 *   boundary's cost (one token through the pipeline);
 * - throughput objective: the slowest stage, a stage's time being its
 *   compute plus the transfer of its incoming packet (act_bytes / bw; the
 *   latency part overlaps with other batches when pipelined). Among plans
 *   with the same bottleneck the one with the lowest latency wins. A stage
 *   with r replicas (round-robin batches) takes max over its replicas of
 *   their time, divided by r. */
#ifndef ST_COORD_PLACEMENT_H
#define ST_COORD_PLACEMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"

#define ST_PLACE_MAX_WORKERS 256
#define ST_PLACE_MAX_LAYERS 65535
#define ST_PLACE_EXACT_MAX 8    /* exact search over orders up to this many workers */
#define ST_PLACE_MAX_REPLICAS 8 /* workers per stage */
#define ST_PLACE_MARGIN_DEFAULT 0.10

typedef enum st_place_objective {
    ST_PLACE_THROUGHPUT = 0,
    ST_PLACE_LATENCY = 1,
} st_place_objective;

typedef struct st_place_worker {
    uint64_t id;
    uint64_t mem_budget; /* bytes for weights + KV */
    double spb;          /* compute seconds per byte of weights (> 0, finite) */
    bool spare;          /* used only for a gap (the others cannot hold the model) or a
                          * bottleneck (the plan with it is better by the margin) */
    bool has_stage;      /* serves [cur_first, cur_last) in the current plan */
    uint32_t cur_first;
    uint32_t cur_last;
} st_place_worker;

typedef struct st_place_model {
    uint32_t n_layer;
    const uint64_t *layer_bytes;  /* [n_layer]: held (memory) */
    const uint64_t *active_bytes; /* [n_layer]: read by one token (compute), at most
                                   * layer_bytes (st_minfo_layer_active_bytes);
                                   * NULL: layer_bytes (a dense model) */
    uint64_t embd_bytes;          /* held by the first stage */
    uint64_t head_bytes;          /* held and computed by the last stage */
    uint64_t stage_bytes;         /* held by every stage (rope factors: st_minfo.rope_bytes) */
    uint64_t kv_bytes_per_token_layer;
} st_place_model;

typedef struct st_place_opts {
    st_place_objective objective;
    uint64_t kv_tokens;    /* KV reserve per layer in tokens: max context x max sessions */
    double act_bytes;      /* bytes of one token's hidden state on the wire (>= 0) */
    const double *act_ab;  /* [n x n], [from * n + to]: bytes of one token on that link in
                            * its own dtype (>= 0); NULL: act_bytes on every link */
    const double *lat_s;   /* [n x n], [from * n + to]: link latency in s; NULL: 0 */
    const double *bw;      /* [n x n]: bytes/s; NULL, 0 or infinite: no transfer time */
    bool replicas;         /* throughput: give idle workers to the bottleneck stages */
    double margin;         /* keep the current plan unless the new one is better by this
                            * fraction of its step time, in [0, 1) */
    const uint32_t *split; /* fixed layer counts per worker in input order, or NULL */
    size_t n_split;
} st_place_opts;

/* st_place_opts_default - throughput, no KV reserve, no links, no
 * replicas, margin ST_PLACE_MARGIN_DEFAULT, no split. */
st_place_opts st_place_opts_default(void);

typedef struct st_place_stage {
    uint32_t first; /* layers [first, last) */
    uint32_t last;
    uint32_t n_rep;                      /* workers serving it: 1 + replicas */
    uint16_t rep[ST_PLACE_MAX_REPLICAS]; /* input indices; rep[0] is the primary */
    uint64_t bytes;   /* weights + KV reserve (+ embedding, + head) each of them holds */
    double compute_s; /* the primary's compute time for one token */
    double link_s;    /* the boundary into this stage (0 for stage 0), one token */
    double time_s;    /* pipeline time: incoming transfer + compute, over the replicas */
} st_place_stage;

/* Why a worker has no stage. */
typedef enum st_place_why {
    ST_PLACE_USED = 0,
    ST_PLACE_WHY_SPARE,    /* a spare, and neither a gap nor a bottleneck needs it */
    ST_PLACE_WHY_MEMORY,   /* its budget holds no stage (why_bytes: the smallest need) */
    ST_PLACE_WHY_UNNEEDED, /* the best plan is no better with it */
    ST_PLACE_WHY_SPLIT,    /* --split gives it no layers */
} st_place_why;

typedef struct st_place_result {
    size_t n_stages;
    st_place_stage stages[ST_PLACE_MAX_WORKERS];
    st_place_objective objective;
    double margin;       /* the hysteresis margin used */
    double step_s;       /* the objective's value: latency_s or bottleneck_s */
    double latency_s;    /* one token through the primaries: compute + links */
    double bottleneck_s; /* the slowest stage's time_s */
    size_t bottleneck;   /* its index */
    bool exact;          /* the search over orders was exhaustive */
    bool with_spares;    /* spares take part (a gap or a bottleneck) */
    bool replicated;     /* some stage has more than one worker */
    bool has_current;    /* the workers' current stages form a complete plan */
    double current_s;    /* its objective value under the same estimates */
    bool keep_current;   /* has_current and the new plan is not better by the margin */
    st_place_why why[ST_PLACE_MAX_WORKERS]; /* per input worker */
    uint64_t why_bytes[ST_PLACE_MAX_WORKERS];
} st_place_result;

/* st_place - plans the model on the n workers (at most
 * ST_PLACE_MAX_WORKERS, ids distinct). Exhaustive over orders and subsets
 * (dynamic programming over contiguous layer ranges and sets of used
 * workers) up to ST_PLACE_EXACT_MAX candidates, a stated heuristic above
 * (docs/placement.md). Non-spares are planned first; spares join when the
 * others cannot hold the model, or when the plan with them is better by
 * the margin. With replicas (throughput only) the workers left idle by
 * the coverage plan become replicas of the bottleneck stages. A split
 * gives worker i split[i] layers in input order instead.
 * Errors: ST_EINVAL no workers, too many, a bad model, speed, link,
 * margin or split; ST_EBUSY a split naming more workers than given;
 * ST_ENOMEM "no plan: ..." naming the memory constraint and its numbers. */
st_err st_place(const st_place_model *m, const st_place_worker *w, size_t n, const st_place_opts *o,
                st_place_result *out);

/* st_place_eval - fills out's times for the given stages (out->stages and
 * out->n_stages set by the caller; rep[] index w) under m, w and o;
 * ST_EINVAL if they do not cover [0, n_layer) contiguously or name a
 * worker twice, ST_ENOMEM if a stage does not fit its worker's budget. */
st_err st_place_eval(const st_place_model *m, const st_place_worker *w, size_t n,
                     const st_place_opts *o, st_place_result *out);

/* st_place_stage_bytes - bytes a stage of layers [first, last) holds:
 * weights, KV reserve of kv_tokens per layer, the embedding if first == 0,
 * the head if last == n_layer; UINT64_MAX on overflow. */
uint64_t st_place_stage_bytes(const st_place_model *m, uint64_t kv_tokens, uint32_t first,
                              uint32_t last);

/* st_place_same_layout - whether a and b have the same stages, workers and
 * replicas (by input index). */
bool st_place_same_layout(const st_place_result *a, const st_place_result *b);

/* st_place_why_text - a one-line reason for worker i of r, into buf. */
const char *st_place_why_text(const st_place_result *r, size_t i, char *buf, size_t cap);

/* st_place_objective_name / st_place_objective_from_name - "latency" and
 * "throughput"; ST_EINVAL for another name. */
const char *st_place_objective_name(st_place_objective o);
st_err st_place_objective_from_name(const char *s, st_place_objective *out);

/* ---- inputs from measurements ---- */

/* What is known of one worker's speed. */
typedef struct st_place_speed {
    double cap_spb;  /* from its capability: 1 / (weight streaming bytes/s) x throttle */
    double meas_spb; /* from its per-layer latency (s per byte of its stage), 0: none */
} st_place_speed;

/* st_place_calibrate - one time per byte per worker into spb: the measured
 * figure where there is one, else cap_spb x k, k being the median over the
 * measured workers of meas_spb / cap_spb (1 when none is measured), so
 * measured and announced speeds share one scale. *k_out gets k (may be
 * NULL). Entries with cap_spb <= 0 and no measurement get cap_spb
 * unchanged (the planner then rejects them). */
void st_place_calibrate(const st_place_speed *s, size_t n, double *spb, double *k_out);

/* st_place_measure - a worker's measured time per byte from its per-layer
 * latency: the median over layers [first, last) of ema_ms / the bytes a
 * token reads in the layer (active_bytes, else layer_bytes; the model's
 * last layer counts the head's bytes too), in s/B: the scale st_place
 * prices compute in.
 * layer[i], ema_ms[i] and samples[i] describe the n reported layers. False
 * (nothing written) unless every layer of the range is reported with at
 * least min_samples samples and a finite positive EMA. */
bool st_place_measure(const st_place_model *m, uint32_t first, uint32_t last, const uint32_t *layer,
                      const double *ema_ms, const uint32_t *samples, size_t n, uint32_t min_samples,
                      double *spb);

/* Sustained imbalance: the current plan is worse than the best one by the
 * margin in consecutive checks. */
typedef struct st_imbalance {
    uint64_t since_ns; /* first check of the current run */
    uint32_t count;    /* checks in the current run */
} st_imbalance;

/* st_imbalance_update - records one check at now_ns; returns true (and
 * starts over) once imbalanced checks have come without a balanced one in
 * between for at least sustain_ns and at least min_count checks. */
bool st_imbalance_update(st_imbalance *t, bool imbalanced, uint64_t now_ns, uint64_t sustain_ns,
                         uint32_t min_count);

#endif
