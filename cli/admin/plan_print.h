/* plan_print.h - how the CLI shows a committed plan (Strata__Plan): as
 * JSON (`strata status --json`'s "plan", `strata plan --json`) and as text
 * (`strata plan`). One definition, so both commands print the same fields
 * the same way. */
#ifndef ST_CLI_PLAN_PRINT_H
#define ST_CLI_PLAN_PRINT_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "strata.pb-c.h"

/* cli_print_json - prints o (pretty) on stdout and frees it; returns 0, or
 * 1 with a message when it cannot be rendered. */
int cli_print_json(cJSON *o);

/* cli_plan_json - p as a JSON object (ids as exact integers); the caller
 * owns the result. */
cJSON *cli_plan_json(const Strata__Plan *p);

/* cli_link_json - one measured or assumed link as a JSON object (ids as
 * exact integers, latency in ms, bandwidth in bytes/s, measured, samples,
 * age); the caller owns the result. */
cJSON *cli_link_json(const Strata__LinkStatus *l);

/* cli_boundary_print - the boundary into stage s as text: " in DTYPE[+zstd]
 * (REASON)"; the reason is the live one (--wire auto's latest check, with
 * its age) when the coordinator sent one, else the plan's, and a live
 * choice that differs from the committed one is named (a replan follows). */
void cli_boundary_print(const Strata__Stage *s);

/* cli_plan_print - p as text: epoch, hashes, wire, sizes, then each stage
 * with its worker or replicas and their data addresses. */
void cli_plan_print(const Strata__Plan *p);

#endif
