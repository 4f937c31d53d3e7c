/* placement.h - which worker serves which layers: a pure function (no I/O,
 * no globals) behind one interface, so the heterogeneous planner of a later
 * issue can replace the body without touching its callers.
 *
 * Input: the workers in join order (id, memory budget, measured speed,
 * spare flag) and the model (bytes per layer, embedding and head bytes, KV
 * bytes per token per layer and the KV reserve in tokens = context × KV
 * slots). Output: an ordered list of stages, each a worker and a
 * contiguous half-open layer range, covering [0, n_layer) exactly once; or
 * a typed error whose detail names the constraint that failed and its
 * numbers. Workers that get no layers are not listed (they are spares). */
#ifndef ST_COORD_PLACEMENT_H
#define ST_COORD_PLACEMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

typedef struct st_place_worker {
    uint64_t id;
    uint64_t mem_budget; /* bytes for weights + KV */
    double speed;        /* bytes/s of weight streaming in the model's dtype (> 0) */
    bool spare;          /* used only when the others cannot hold the model */
} st_place_worker;

typedef struct st_place_model {
    uint32_t n_layer;
    const uint64_t *layer_bytes;       /* [n_layer] */
    uint64_t embd_bytes;               /* held by the first stage */
    uint64_t head_bytes;               /* held by the last stage */
    uint64_t kv_bytes_per_token_layer;
    uint64_t kv_tokens;                /* KV reserve per layer, in tokens */
} st_place_model;

typedef struct st_place_opts {
    const uint32_t *split; /* fixed layer counts per worker in input order, or NULL */
    size_t n_split;
} st_place_opts;

typedef struct st_place_stage {
    size_t worker;  /* index into the input workers */
    uint32_t first; /* layers [first, last) */
    uint32_t last;
    uint64_t bytes; /* weights + KV reserve (+ embedding / head) it must hold */
} st_place_stage;

/* st_place - places the model on the workers. out has room for n_workers
 * stages; *n_out receives the count.
 * Default (no split): the non-spare workers take layer counts in
 * proportion to their speed (largest remainder), each capped by what its
 * budget holds, the excess flowing to the others in proportion to speed;
 * spares join only when the others cannot hold the model. Stages follow
 * the input order.
 * Split: worker i takes split[i] layers in input order (0 = none); workers
 * beyond the split get none.
 * Errors: ST_EINVAL no workers, a bad model, or a split whose sum is not
 * n_layer; ST_EBUSY a split naming more workers than there are (wait for
 * them); ST_ENOMEM "no plan: ..." with the memory numbers that do not fit. */
st_err st_place(const st_place_model *m, const st_place_worker *w, size_t n_workers,
                const st_place_opts *o, st_place_stage *out, size_t *n_out);

/* st_place_stage_bytes - bytes a stage of layers [first, last) must hold
 * (weights, KV reserve, embedding if first == 0, head if last == n_layer);
 * UINT64_MAX on overflow. */
uint64_t st_place_stage_bytes(const st_place_model *m, uint32_t first, uint32_t last);

#endif
