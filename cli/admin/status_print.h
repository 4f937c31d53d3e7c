/* status_print.h - how `strata status` shows a coordinator's status
 * (Strata__StatusReply): as JSON (`--json`: the model, epoch, security,
 * versions, counters, scheduler, workers with their heartbeats and
 * fetches, links and plan; ids as exact integers) and as text (a summary
 * line per topic, a row per worker, the link matrix). Both read only the
 * reply: a field an older coordinator did not send prints as its default. */
#ifndef ST_CLI_STATUS_PRINT_H
#define ST_CLI_STATUS_PRINT_H

#include <cjson/cJSON.h>

#include "strata.pb-c.h"

/* cli_status_json - s as a JSON object; the caller owns the result. */
cJSON *cli_status_json(const Strata__StatusReply *s);

/* cli_status_print - s as text on stdout. */
void cli_status_print(const Strata__StatusReply *s);

#endif
