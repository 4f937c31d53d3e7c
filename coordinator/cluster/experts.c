/* experts.c - per-expert load of a mixture-of-experts model (experts.h). */
#include "coordinator/cluster/experts.h"

#include <stdlib.h>
#include <string.h>

st_err st_experts_check(const Strata__Heartbeat *h, uint32_t n_layer, uint32_t n_expert)
{
    if (h->n_experts == 0)
        return ST_OK;
    if (n_expert == 0)
        return st_errorf(ST_EINVAL, "Heartbeat.experts: %zu entries for a dense model",
                         h->n_experts);
    if (h->n_experts > n_layer)
        return st_errorf(ST_EINVAL, "Heartbeat.experts: %zu entries; the model has %u layers",
                         h->n_experts, n_layer);
    uint8_t *seen = calloc(n_layer, 1);
    if (seen == NULL)
        return st_errorf(ST_ENOMEM, "Heartbeat.experts check");
    st_err e = ST_OK;
    for (size_t i = 0; i < h->n_experts && e == ST_OK; i++) {
        const Strata__ExpertLoad *x = h->experts[i];
        if (x->layer >= n_layer)
            e = st_errorf(ST_EINVAL, "Heartbeat.experts[%zu].layer %u: the model has %u layers", i,
                          x->layer, n_layer);
        else if (seen[x->layer])
            e = st_errorf(ST_EINVAL, "Heartbeat.experts[%zu].layer %u: reported twice", i,
                          x->layer);
        else if (x->n_tokens != n_expert)
            e = st_errorf(ST_EINVAL,
                          "Heartbeat.experts[%zu].tokens: %zu counts; the model has %u experts", i,
                          x->n_tokens, n_expert);
        else
            seen[x->layer] = 1;
    }
    free(seen);
    return e;
}

void st_experts_drop(Strata__Heartbeat *h)
{
    for (size_t i = 0; i < h->n_experts; i++)
        strata__expert_load__free_unpacked(h->experts[i], NULL);
    free(h->experts);
    h->experts = NULL;
    h->n_experts = 0;
}

void st_experts_sum_free(Strata__ExpertLoad **v, size_t n)
{
    if (v == NULL)
        return;
    for (size_t i = 0; i < n; i++) {
        if (v[i] != NULL)
            free(v[i]->tokens);
        free(v[i]);
    }
    free(v);
}

st_err st_experts_sum(const Strata__Heartbeat *const *hb, size_t n, uint32_t n_layer,
                      uint32_t n_expert, Strata__ExpertLoad ***out, size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    if (n_expert == 0 || n_layer == 0)
        return ST_OK;
    uint64_t *sum = calloc((size_t)n_layer * n_expert, sizeof *sum);
    uint8_t *has = calloc(n_layer, 1);
    if (sum == NULL || has == NULL) {
        free(sum);
        free(has);
        return st_errorf(ST_ENOMEM, "expert load of %u layers", n_layer);
    }
    for (size_t w = 0; w < n; w++) {
        if (hb[w] == NULL)
            continue;
        for (size_t i = 0; i < hb[w]->n_experts; i++) {
            const Strata__ExpertLoad *x = hb[w]->experts[i];
            if (x->layer >= n_layer || x->n_tokens != n_expert)
                continue; /* checked at the heartbeat: not reached */
            uint64_t *row = &sum[(size_t)x->layer * n_expert];
            for (uint32_t k = 0; k < n_expert; k++)
                row[k] = row[k] > UINT64_MAX - x->tokens[k] ? UINT64_MAX : row[k] + x->tokens[k];
            has[x->layer] = 1;
        }
    }
    size_t nl = 0;
    for (uint32_t l = 0; l < n_layer; l++)
        nl += has[l];
    st_err e = ST_OK;
    Strata__ExpertLoad **v = nl ? calloc(nl, sizeof *v) : NULL;
    if (nl > 0 && v == NULL)
        e = st_errorf(ST_ENOMEM, "expert load of %zu layers", nl);
    size_t k = 0;
    for (uint32_t l = 0; l < n_layer && e == ST_OK; l++) {
        if (!has[l])
            continue;
        Strata__ExpertLoad *x = malloc(sizeof *x);
        uint64_t *t = malloc((size_t)n_expert * sizeof *t);
        if (x == NULL || t == NULL) {
            free(x);
            free(t);
            e = st_errorf(ST_ENOMEM, "expert load of layer %u", l);
            break;
        }
        strata__expert_load__init(x);
        x->layer = l;
        memcpy(t, &sum[(size_t)l * n_expert], (size_t)n_expert * sizeof *t);
        x->tokens = t;
        x->n_tokens = n_expert;
        v[k++] = x;
    }
    free(sum);
    free(has);
    if (e != ST_OK) {
        st_experts_sum_free(v, k);
        return e;
    }
    *out = v;
    *n_out = k;
    return ST_OK;
}
