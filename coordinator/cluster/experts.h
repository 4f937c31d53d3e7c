/* experts.h - per-expert load of a mixture-of-experts model (issue 36):
 * what the coordinator accepts of a worker's Heartbeat.experts, and the
 * sum over the workers that `strata status` shows.
 *
 * A heartbeat's expert lists are remote input: they are taken only when
 * they fit the model's shape (at most n_layer entries, each for a distinct
 * layer below n_layer, each of exactly n_expert counts; none at all for a
 * dense model), so what the coordinator keeps per worker is bounded by
 * n_layer x n_expert counts. Pure functions: no sockets, no state. */
#ifndef ST_COORD_EXPERTS_H
#define ST_COORD_EXPERTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "strata.pb-c.h"

/* st_experts_check - whether h's expert lists fit a model of n_layer
 * layers of n_expert experts (0: dense, which takes none). ST_OK, or
 * ST_EINVAL naming the first field that does not fit. */
st_err st_experts_check(const Strata__Heartbeat *h, uint32_t n_layer, uint32_t n_expert);

/* st_experts_drop - frees h's expert lists (h was unpacked by protobuf-c
 * with the default allocator) and leaves none. */
void st_experts_drop(Strata__Heartbeat *h);

/* st_experts_sum - *out: one ExpertLoad per layer of [0, n_layer) that at
 * least one of the n heartbeats (NULL entries skipped; each already
 * checked against this shape) reports, in layer order, its counts the
 * sums over those heartbeats (saturating). *n_out entries; *out NULL when
 * none (n_expert 0, or no reports). Free with st_experts_sum_free.
 * ST_ENOMEM. */
st_err st_experts_sum(const Strata__Heartbeat *const *hb, size_t n, uint32_t n_layer,
                      uint32_t n_expert, Strata__ExpertLoad ***out, size_t *n_out);

/* st_experts_sum_free - frees what st_experts_sum made; NULL is a no-op. */
void st_experts_sum_free(Strata__ExpertLoad **v, size_t n);

#endif
