/* plan_print.c - the CLI's printers of a committed plan (see plan_print.h). */
#include "cli/admin/plan_print.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/conn.h"
#include "common/base/hex.h"

/* Plan hashes and model ids are 32 bytes: 64 hex digits and the NUL. */
#define PP_ID_BYTES 32
#define PP_ID_HEX_CAP (2 * PP_ID_BYTES + 1)

/* pp_id_hex - an id or hash of the plan as hex; one of another length
 * than PP_ID_BYTES' (a coordinator's bug) says its length instead. */
static void pp_id_hex(ProtobufCBinaryData b, char out[PP_ID_HEX_CAP])
{
    if (b.len != PP_ID_BYTES || st_hex(b.data, b.len, out, PP_ID_HEX_CAP) != ST_OK)
        snprintf(out, PP_ID_HEX_CAP, "(%zu bytes, not %d)", b.len, PP_ID_BYTES);
}

int cli_print_json(cJSON *o)
{
    char *txt = cJSON_Print(o);
    cJSON_Delete(o);
    if (txt == NULL) {
        fprintf(stderr, "strata: out of memory printing JSON\n");
        return 1;
    }
    printf("%s\n", txt);
    free(txt);
    return 0;
}

cJSON *cli_plan_json(const Strata__Plan *p)
{
    cJSON *o = cJSON_CreateObject();
    char hex[PP_ID_HEX_CAP];
    cli_json_u64(o, "epoch", p->epoch);
    pp_id_hex(p->plan_hash, hex);
    cJSON_AddStringToObject(o, "plan_hash", hex);
    pp_id_hex(p->model_id, hex);
    cJSON_AddStringToObject(o, "model_id", hex);
    cJSON_AddBoolToObject(o, "zstd", p->zstd);
    cJSON_AddStringToObject(o, "result_addr", p->result_addr ? p->result_addr : "");
    cJSON_AddNumberToObject(o, "n_layer", p->n_layer);
    cJSON_AddNumberToObject(o, "max_tokens", p->max_tokens);
    cJSON_AddNumberToObject(o, "n_ctx", p->n_ctx);
    cJSON_AddNumberToObject(o, "max_sessions", p->max_sessions);
    cli_json_u64(o, "incarnation", p->incarnation);
    cJSON *st = cJSON_AddArrayToObject(o, "stages");
    for (size_t i = 0; i < p->n_stages; i++) {
        const Strata__Stage *s = p->stages[i];
        cJSON *so = cJSON_CreateObject();
        cJSON_AddNumberToObject(so, "index", s->index);
        cJSON_AddNumberToObject(so, "first", s->first);
        cJSON_AddNumberToObject(so, "last", s->last);
        cJSON *ids = cJSON_AddArrayToObject(so, "worker_ids");
        for (size_t k = 0; k < s->n_worker_ids; k++) {
            char b[24];
            snprintf(b, sizeof b, "%" PRIu64, s->worker_ids[k]);
            cJSON_AddItemToArray(ids, cJSON_CreateRaw(b));
        }
        cJSON *ad = cJSON_AddArrayToObject(so, "data_addrs");
        for (size_t k = 0; k < s->n_data_addrs; k++)
            cJSON_AddItemToArray(ad, cJSON_CreateString(s->data_addrs[k]));
        cJSON_AddStringToObject(so, "in_dtype", s->in_dtype ? s->in_dtype : "");
        cJSON_AddStringToObject(so, "in_why", s->in_why ? s->in_why : "");
        cJSON_AddBoolToObject(so, "in_zstd", s->in_zstd);
        if (s->live_why && s->live_why[0]) { /* --wire auto's latest check (status, plan) */
            cJSON_AddStringToObject(so, "live_dtype", s->live_dtype ? s->live_dtype : "");
            cJSON_AddBoolToObject(so, "live_zstd", s->live_zstd);
            cJSON_AddStringToObject(so, "live_why", s->live_why);
            cJSON_AddNumberToObject(so, "live_age_s", s->live_age_s);
        }
        cJSON_AddItemToArray(st, so);
    }
    return o;
}

void cli_boundary_print(const Strata__Stage *s)
{
    const char *dt = s->in_dtype ? s->in_dtype : "?";
    printf(" in %s%s", dt, s->in_zstd ? "+zstd" : "");
    if (s->live_why && s->live_why[0]) {
        const char *ld = s->live_dtype ? s->live_dtype : "?";
        printf(" (%s; evaluated %.1f s ago", s->live_why, s->live_age_s);
        if (strcmp(ld, dt) != 0 || s->live_zstd != s->in_zstd)
            printf("; a replan to %s%s follows", ld, s->live_zstd ? "+zstd" : "");
        printf(")");
    } else if (s->in_why && s->in_why[0]) {
        printf(" (%s)", s->in_why);
    }
}

void cli_plan_print(const Strata__Plan *p)
{
    char hash[PP_ID_HEX_CAP], mid[PP_ID_HEX_CAP];
    pp_id_hex(p->plan_hash, hash);
    pp_id_hex(p->model_id, mid);
    /* stage 0 has no incoming boundary; the others say theirs */
    bool per_boundary = false;
    for (size_t i = 1; i < p->n_stages; i++)
        per_boundary = per_boundary || (p->stages[i]->in_why && p->stages[i]->in_why[0]);
    const char *wire = per_boundary                                ? "per boundary"
                       : p->n_stages > 1 && p->stages[1]->in_dtype ? p->stages[1]->in_dtype
                       : p->n_stages > 0 && p->stages[0]->in_dtype ? p->stages[0]->in_dtype
                                                                   : "?";
    printf("epoch %" PRIu64 "  hash %.16s...  model %.16s...\n", p->epoch, hash, mid);
    printf("wire %s%s, %u layers, %u tokens per batch, context %u, %u sessions, results at %s\n",
           wire, p->zstd ? "+zstd" : "", p->n_layer, p->max_tokens, p->n_ctx, p->max_sessions,
           p->result_addr ? p->result_addr : "");
    for (size_t i = 0; i < p->n_stages; i++) {
        const Strata__Stage *s = p->stages[i];
        printf("stage %u: layers [%u, %u)", s->index, s->first, s->last);
        if (i > 0 && per_boundary) {
            printf(" ");
            cli_boundary_print(s);
        }
        if (s->n_worker_ids > 1)
            printf("  %zu replicas (each holds these layers and its own sessions' KV)",
                   s->n_worker_ids);
        printf("\n");
        for (size_t k = 0; k < s->n_worker_ids; k++)
            printf("    %s %" PRIu64 "  %s\n", s->n_worker_ids > 1 ? "replica" : "worker",
                   s->worker_ids[k], k < s->n_data_addrs ? s->data_addrs[k] : "");
    }
}

cJSON *cli_link_json(const Strata__LinkStatus *l)
{
    cJSON *o = cJSON_CreateObject();
    cli_json_u64(o, "from", l->from_id);
    cli_json_u64(o, "to", l->to_id);
    cJSON_AddNumberToObject(o, "latency_ms", l->latency_ms);
    cJSON_AddNumberToObject(o, "bandwidth_bytes_per_s", l->bandwidth_bytes_per_s);
    cJSON_AddBoolToObject(o, "measured", l->measured);
    cJSON_AddNumberToObject(o, "samples", l->samples);
    cJSON_AddNumberToObject(o, "age_s", l->age_s);
    return o;
}
