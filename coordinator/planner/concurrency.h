/* concurrency.h - how many batches the coordinator keeps in flight: as
 * many as the plan's workers can compute at the same time.
 *
 * A pipeline keeps every stage busy with one batch in flight per stage,
 * when every stage has cores of its own. Workers that share a host's cores
 * (several workers on one machine: a test bed of network namespaces,
 * containers, a sidecar next to a worker) cannot all compute at once:
 * with more batches in flight than they have cores for, they time-slice
 * the cores, each batch holds fewer sessions, and every weight byte is
 * read once per batch instead of once per step of all of them. On a
 * 2-core host running 3 stages of 1 thread each, 8 sessions: 61.9-76.0
 * tok/s at 3 batches in flight, 79.6-95.3 at 2 (docs/batching.md).
 *
 * The rule. Workers are grouped: two workers are in one group when they
 * announced the same host id (common/base/host.h: the same kernel) and their
 * CPU lists intersect (an empty list, unknown, intersects every list of
 * its host); the relation is closed transitively. A group of n workers
 * computes at most min(n, max(1, cores / threads)) batches at once, with
 * cores and threads the largest its members announced. A worker without a
 * host id is a group of its own. The depth is the sum over the plan's
 * workers' groups, at most stages x routes (one batch per stage and route)
 * and at least 1. Pure: unit-tested in tests/coordinator. */
#ifndef ST_COORD_CONCURRENCY_H
#define ST_COORD_CONCURRENCY_H

#include <stddef.h>
#include <stdint.h>

#include "common/base/host.h"

/* What the rule reads of a worker (its Capability). */
typedef struct st_conc_worker {
    const char *name;
    const uint8_t *host_id; /* ST_HOST_ID_BYTES, or NULL: unknown */
    const char *cpus;       /* its CPU list; NULL or "": unknown */
    uint32_t cores, threads;
} st_conc_worker;

/* st_conc_depth - the batches in flight for the plan's n workers (see the
 * rule), at most cap (stages x routes, >= 1). why (may be NULL) gets one
 * line: the groups that share cores and what they allow, or that none do.
 * A CPU list that does not parse counts as unknown (the whole host) and
 * is named in why. Out of memory: cap, said in why. */
uint32_t st_conc_depth(const st_conc_worker *w, size_t n, uint32_t cap, char *why, size_t why_cap);

#endif
