/* expert_print.h - how `strata status` shows a mixture of experts' load
 * (StatusReply.n_expert, n_expert_used, expert_load; Heartbeat.experts):
 * as JSON and as one compact text line per stage. A dense model (n_expert
 * 0) prints nothing. */
#ifndef ST_CLI_EXPERT_PRINT_H
#define ST_CLI_EXPERT_PRINT_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "strata.pb-c.h"

/* The experts the text line names per layer, hottest first. */
#define CLI_EXPERT_TOP 3

/* cli_experts_json - {"n_expert", "n_expert_used", "load": [{"layer",
 * "tokens": [per expert], "total"}]} of s, or NULL for a dense model; the
 * caller owns the result. Counts are exact integers. */
cJSON *cli_experts_json(const Strata__StatusReply *s);

/* cli_expert_list_json - v[0..n) as [{"layer", "tokens": [...]}]. */
cJSON *cli_expert_list_json(Strata__ExpertLoad *const *v, size_t n);

/* cli_stage_experts_print - the end of a stage's line for a mixture of
 * experts (every stage holds all the experts of its layers): "; experts N
 * (K used per token)"; nothing for a dense model. */
void cli_stage_experts_print(const Strata__StatusReply *s);

/* cli_experts_print - one line per stage of s's plan with expert load:
 * "    expert load of stage I: LAYER: eX n (p%), ... of T routed" over the
 * stage's layers, the CLI_EXPERT_TOP hottest of each layer; nothing for a
 * dense model or before any load was reported. */
void cli_experts_print(const Strata__StatusReply *s, const Strata__Stage *st);

#endif
