/* planner_pb.h - a planner result as a PlanProposal message, the form both
 * the coordinator (for `strata plan --dry-run` on a live cluster) and the
 * CLI (for a workers file) print, so both paths show the same thing. */
#ifndef ST_COORD_PLANNER_PB_H
#define ST_COORD_PLANNER_PB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "coordinator/planner/links.h"
#include "coordinator/planner/placement.h"
#include "strata.pb-c.h"

/* One worker shown in a proposal: a planner input (input >= 0, its index
 * in the planner's workers) or a worker left out before planning (input
 * -1, with reason). */
typedef struct st_pp_worker {
    uint64_t id;
    const char *name;
    int input;
    const char *source; /* of its estimate: "measured", "remembered", "announced", "file" */
    const char *reason; /* input == -1: why it was not a candidate */
    uint64_t mem_budget;
    bool spare;
} st_pp_worker;

/* st_place_proposal - builds a PlanProposal of r (planned from the inputs
 * w_in[0..n_in)) showing the workers pw[0..n): stages with worker ids,
 * times in ms, reasons of those left out, estimates. epoch is the serving
 * epoch (0: none), calibration the k of st_place_calibrate, note an extra
 * line (may be NULL). Free with st_place_proposal_free. */
st_err st_place_proposal(const st_place_result *r, const st_place_worker *w_in, size_t n_in,
                         const st_pp_worker *pw, size_t n, uint64_t epoch, uint32_t n_layer,
                         double calibration, const char *note, Strata__PlanProposal **out);

/* st_place_proposal_free - frees a proposal made by st_place_proposal;
 * NULL is a no-op. */
void st_place_proposal_free(Strata__PlanProposal *p);

/* st_links_to_pb - the ordered pairs (a, b), a != b, of the n x n link
 * matrix l (row a: from ids[a], column b: to ids[b]) as LinkStatus
 * entries, row by row: *out gets n (n - 1) pointers (NULL when n < 2),
 * *n_out their count. Free with st_links_pb_free. */
st_err st_links_to_pb(const st_link *l, const uint64_t *ids, size_t n, Strata__LinkStatus ***out,
                      size_t *n_out);

/* st_links_pb_free - frees what st_links_to_pb made; NULL is a no-op. */
void st_links_pb_free(Strata__LinkStatus **lp, size_t n);

#endif
