/* expert_print.c - a mixture of experts' load in `strata status`
 * (expert_print.h). */
#include "cli/admin/expert_print.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>

#include "cli/conn.h"

cJSON *cli_expert_list_json(Strata__ExpertLoad *const *v, size_t n)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "layer", v[i]->layer);
        cJSON *t = cJSON_AddArrayToObject(o, "tokens");
        uint64_t total = 0;
        for (size_t k = 0; k < v[i]->n_tokens; k++) {
            char b[24];
            snprintf(b, sizeof b, "%" PRIu64, v[i]->tokens[k]);
            cJSON_AddItemToArray(t, cJSON_CreateRaw(b));
            total += v[i]->tokens[k];
        }
        cli_json_u64(o, "total", total);
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

cJSON *cli_experts_json(const Strata__StatusReply *s)
{
    if (s->n_expert == 0)
        return NULL;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "n_expert", s->n_expert);
    cJSON_AddNumberToObject(o, "n_expert_used", s->n_expert_used);
    cJSON_AddItemToObject(o, "load", cli_expert_list_json(s->expert_load, s->n_expert_load));
    return o;
}

void cli_stage_experts_print(const Strata__StatusReply *s)
{
    if (s->n_expert > 0)
        printf("; experts %u (%u used per token)", s->n_expert, s->n_expert_used);
}

void cli_experts_print(const Strata__StatusReply *s, const Strata__Stage *st)
{
    if (s->n_expert == 0)
        return;
    bool any = false;
    for (size_t i = 0; i < s->n_expert_load; i++) {
        const Strata__ExpertLoad *x = s->expert_load[i];
        if (x->layer < st->first || x->layer >= st->last)
            continue;
        uint64_t total = 0;
        for (size_t k = 0; k < x->n_tokens; k++)
            total += x->tokens[k];
        if (total == 0)
            continue;
        if (!any)
            printf("    expert load (hottest per layer):");
        printf("%s L%u", any ? ";" : "", x->layer);
        /* the CLI_EXPERT_TOP largest counts, lowest index first among equals */
        size_t top[CLI_EXPERT_TOP];
        size_t nt = 0;
        for (size_t k = 0; k < x->n_tokens; k++) {
            size_t at = nt;
            while (at > 0 && x->tokens[top[at - 1]] < x->tokens[k])
                at--;
            if (at >= CLI_EXPERT_TOP)
                continue;
            if (nt < CLI_EXPERT_TOP)
                nt++;
            for (size_t j = nt - 1; j > at; j--)
                top[j] = top[j - 1];
            top[at] = k;
        }
        for (size_t j = 0; j < nt; j++)
            printf(" e%zu %" PRIu64 " (%.0f%%)", top[j], x->tokens[top[j]],
                   100.0 * (double)x->tokens[top[j]] / (double)total);
        printf(" of %" PRIu64, total);
        any = true;
    }
    if (any)
        printf("\n");
}
