/* chunk_src.h - which members' chunk servers the coordinator names in a
 * streaming worker's Prepare (Prepare.chunk_sources, docs/streaming.md,
 * "Sources the coordinator names"). Pure: reads the member table and the
 * plans, sends nothing.
 *
 * A worker that streams its weights (Capability.streams) and has a stage in
 * the new plan is told the chunk servers (Capability.chunk_addr) of the
 * other live members whose model id is its own, at most
 * ST_CHUNK_SOURCES_MAX, best first: those that hold its new stage's chunks
 * now (a member with the model file holds every chunk; a member whose
 * stage in the serving plan overlaps the new stage's layers holds those),
 * then those whose stage in the new plan overlaps it (they fetch or hold
 * the same chunks), then the others, each group in join order. Every
 * address is a tcp:// URL (st_member_url_ok) and named once; the
 * recipient's own is never named. The worker verifies every chunk against
 * its manifest, so a member named here adds a source, never trust. */
#ifndef ST_COORD_CHUNK_SRC_H
#define ST_COORD_CHUNK_SRC_H

#include <stddef.h>
#include <stdint.h>

#include "coordinator/cluster/membership.h"
#include "coordinator/cluster/plan.h"

#define ST_CHUNK_SOURCES_MAX 8 /* addresses in one Prepare */

/* st_chunk_sources - the chunk servers to name in the Prepare of plan next
 * to worker `to` (cur: the serving plan, or NULL) into out[0..cap) (cap at
 * most ST_CHUNK_SOURCES_MAX is used; the strings are the members' Joins',
 * valid while they stay in the table); returns how many. 0 when `to` is
 * not a live member, does not stream, or has no stage in next. */
size_t st_chunk_sources(const st_members *ms, uint64_t to, const st_plan *cur, const st_plan *next,
                        const char **out, size_t cap);

#endif
