/* cmd_hold.c - `strata hold`: the test-only step gate of a coordinator
 * started with --test-hooks (coordinator/cluster/hold.h, docs/cluster.md "Hold
 * (test hooks)"), and the JSON form of its state that `strata status
 * --json` shows as sched.hold.
 *
 *   strata hold --after-tokens K [--request ID] [--json]   park requests at K ids
 *   strata hold --release [--json]                          let them go on
 *
 * Prints the gate as set and the requests it parks now. A coordinator
 * without --test-hooks refuses (exit 1, its message on stderr). */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/conn.h"
#include "cli/admin/plan_print.h"

#define HOLD_DEFAULT_TIMEOUT_MS 10000

static const char hold_synopsis[] =
    "strata hold (--after-tokens K [--request ID] | --release) [--json]\n"
    "       [--coordinator ADDR] [--cluster-key FILE | --admin-key FILE] [--timeout-ms N]";

cJSON *cli_hold_json(const Strata__HoldState *h)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddBoolToObject(o, "on", h->on);
    cJSON_AddNumberToObject(o, "after_tokens", h->after_tokens);
    cli_json_u64(o, "request_id", h->request_id);
    cJSON *a = cJSON_AddArrayToObject(o, "held");
    for (size_t i = 0; i < h->n_held; i++) {
        const Strata__HeldRequest *r = h->held[i];
        cJSON *x = cJSON_CreateObject();
        cli_json_u64(x, "request_id", r->request_id);
        cli_json_u64(x, "session_id", r->session_id);
        cJSON_AddNumberToObject(x, "tokens", r->tokens);
        cJSON_AddNumberToObject(x, "route", r->route);
        cJSON_AddItemToArray(a, x);
    }
    cJSON *f = cJSON_AddArrayToObject(o, "in_flight"); /* batches in flight now */
    for (size_t i = 0; i < h->n_in_flight; i++) {
        const Strata__InFlightBatch *b = h->in_flight[i];
        cJSON *x = cJSON_CreateObject();
        cli_json_u64(x, "batch_id", b->batch_id);
        cJSON_AddNumberToObject(x, "route", b->route);
        cJSON *ss = cJSON_AddArrayToObject(x, "session_ids");
        for (size_t k = 0; k < b->n_session_ids; k++) {
            char v[24];
            snprintf(v, sizeof v, "%" PRIu64, b->session_ids[k]); /* exact, as cli_json_u64 */
            cJSON_AddItemToArray(ss, cJSON_CreateRaw(v));
        }
        cJSON_AddItemToArray(f, x);
    }
    return o;
}

void cli_hold_print(const Strata__HoldState *h)
{
    if (!h->on) {
        printf("hold: released\n");
        return;
    }
    if (h->request_id)
        printf("hold: request %" PRIu64 " parks once it has %u ids", h->request_id,
               h->after_tokens);
    else
        printf("hold: every request parks once it has %u ids", h->after_tokens);
    printf("; %zu parked", h->n_held);
    for (size_t i = 0; i < h->n_held; i++)
        printf("%s request %" PRIu64 " at %u ids", i ? "," : ":", h->held[i]->request_id,
               h->held[i]->tokens);
    printf("\n");
}

int st_cmd_hold(int argc, char **argv)
{
    cli_conn_opts o = {0};
    Strata__HoldRequest q = STRATA__HOLD_REQUEST__INIT;
    int64_t after = -1; /* -1: no --after-tokens */
    bool release = false;   /* q.release is a protobuf_c_boolean, not a bool */
    st_opt rows[3 + CLI_CONN_ROWS] = {
        {.name = "--after-tokens", .type = ST_OPT_I64, .dest = &after, .min = 0,
         .max = UINT32_MAX, .value = "K", .help = "hold the steps after K generated tokens"},
        {.name = "--request", .type = ST_OPT_U64, .dest = &q.request_id, .umin = 0,
         .umax = UINT64_MAX, .value = "ID", .help = "only the request ID's"},
        {.name = "--release", .type = ST_OPT_FLAG, .dest = &release,
         .help = "release the held steps"},
    };
    const size_t n = 3 + cli_conn_rows(&o, true, rows + 3);
    int st = cli_opts("hold", hold_synopsis, rows, n, NULL, 0, NULL, argc, argv);
    if (st != CLI_OPTS_GO)
        return st;
    q.release = release;
    const bool set = after >= 0;
    if (set)
        q.after_tokens = (uint32_t)after;
    if (set == q.release || (q.release && q.request_id)) {
        fprintf(stderr,
                "strata: hold: give either --after-tokens (with --request) or "
                "--release\nusage: %s\n",
                hold_synopsis);
        return 2;
    }
    Strata__Msg m = STRATA__MSG__INIT, *r = NULL;
    m.body_case = STRATA__MSG__BODY_HOLD;
    m.hold = &q;
    int rc = cli_conn_once(&o, &m, HOLD_DEFAULT_TIMEOUT_MS, STRATA__MSG__BODY_HOLD_STATE, &r,
                           "hold");
    if (rc != 0)
        return rc;
    if (o.json)
        rc = cli_print_json(cli_hold_json(r->hold_state));
    else
        cli_hold_print(r->hold_state);
    st_msg_free(r);
    return rc;
}
