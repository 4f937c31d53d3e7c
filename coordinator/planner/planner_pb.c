/* planner_pb.c - planner results as PlanProposal messages (planner_pb.h).
 *
 * Every string and array of the message is allocated here with malloc and
 * freed by st_place_proposal_free, field by field, so the message never
 * points into the planner's result or the caller's inputs. */
#include "coordinator/planner/planner_pb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *pp_dup(const char *s)
{
    size_t n = strlen(s ? s : "");
    char *d = malloc(n + 1);
    if (d)
        memcpy(d, s ? s : "", n + 1);
    return d;
}

void st_place_proposal_free(Strata__PlanProposal *p)
{
    if (p == NULL)
        return;
    for (size_t i = 0; p->stages && i < p->n_stages; i++) {
        if (p->stages[i])
            free(p->stages[i]->worker_ids);
        free(p->stages[i]);
    }
    free(p->stages);
    for (size_t i = 0; p->workers && i < p->n_workers; i++) {
        if (p->workers[i]) {
            free(p->workers[i]->name);
            free(p->workers[i]->source);
            free(p->workers[i]->left_out);
        }
        free(p->workers[i]);
    }
    free(p->workers);
    free(p->objective);
    free(p->note);
    free(p);
}

st_err st_place_proposal(const st_place_result *r, const st_place_worker *w_in, size_t n_in,
                         const st_pp_worker *pw, size_t n, uint64_t epoch, uint32_t n_layer,
                         double calibration, const char *note, Strata__PlanProposal **out)
{
    *out = NULL;
    Strata__PlanProposal *p = calloc(1, sizeof *p);
    if (p == NULL)
        return st_errorf(ST_ENOMEM, "plan proposal");
    strata__plan_proposal__init(p);
    p->objective = pp_dup(st_place_objective_name(r->objective));
    p->note = pp_dup(note);
    p->stages = calloc(r->n_stages ? r->n_stages : 1, sizeof *p->stages);
    p->workers = calloc(n ? n : 1, sizeof *p->workers);
    if (!p->objective || !p->note || !p->stages || !p->workers)
        goto oom;
    for (size_t s = 0; s < r->n_stages; s++) {
        const st_place_stage *st = &r->stages[s];
        Strata__ProposedStage *ps = calloc(1, sizeof *ps);
        p->stages[p->n_stages++] = ps;
        if (ps == NULL)
            goto oom;
        strata__proposed_stage__init(ps);
        ps->first = st->first;
        ps->last = st->last;
        if ((ps->worker_ids = calloc(st->n_rep, sizeof *ps->worker_ids)) == NULL)
            goto oom;
        ps->n_worker_ids = st->n_rep;
        for (uint32_t k = 0; k < st->n_rep; k++)
            ps->worker_ids[k] = st->rep[k] < n_in ? w_in[st->rep[k]].id : 0;
        ps->bytes = st->bytes;
        ps->compute_ms = st->compute_s * 1e3;
        ps->link_ms = st->link_s * 1e3;
        ps->time_ms = st->time_s * 1e3;
    }
    for (size_t i = 0; i < n; i++) {
        Strata__PlannerWorker *wk = calloc(1, sizeof *wk);
        p->workers[p->n_workers++] = wk;
        if (wk == NULL)
            goto oom;
        strata__planner_worker__init(wk);
        wk->name = wk->source = wk->left_out = NULL; /* init points them at a static "" */
        wk->id = pw[i].id;
        wk->mem_budget = pw[i].mem_budget;
        wk->spare = pw[i].spare;
        char why[240] = "";
        int in = pw[i].input;
        if (in >= 0 && (size_t)in < n_in) {
            const st_place_worker *w = &w_in[in];
            wk->sec_per_byte = w->spb;
            wk->has_stage = w->has_stage;
            wk->cur_first = w->cur_first;
            wk->cur_last = w->cur_last;
            if (r->why[in] != ST_PLACE_USED)
                st_place_why_text(r, (size_t)in, why, sizeof why);
        } else {
            snprintf(why, sizeof why, "%s", pw[i].reason ? pw[i].reason : "not a candidate");
        }
        wk->name = pp_dup(pw[i].name);
        wk->source = pp_dup(in >= 0 ? pw[i].source : "");
        wk->left_out = pp_dup(why);
        if (!wk->name || !wk->source || !wk->left_out)
            goto oom;
    }
    p->step_ms = r->step_s * 1e3;
    p->latency_ms = r->latency_s * 1e3;
    p->bottleneck_ms = r->bottleneck_s * 1e3;
    p->bottleneck = (uint32_t)r->bottleneck;
    p->exact = r->exact;
    p->with_spares = r->with_spares;
    p->replicated = r->replicated;
    p->has_current = r->has_current;
    p->current_ms = r->current_s * 1e3;
    p->keep_current = r->keep_current;
    p->margin = r->margin;
    p->epoch = epoch;
    p->n_layer = n_layer;
    p->calibration = calibration;
    *out = p;
    return ST_OK;
oom:
    st_place_proposal_free(p);
    return st_errorf(ST_ENOMEM, "plan proposal");
}

st_err st_links_to_pb(const st_link *l, const uint64_t *ids, size_t n, Strata__LinkStatus ***out,
                      size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    if (n < 2)
        return ST_OK;
    Strata__LinkStatus *ls = calloc(n * (n - 1), sizeof *ls);
    Strata__LinkStatus **lp = calloc(n * (n - 1), sizeof *lp);
    if (ls == NULL || lp == NULL) {
        free(ls);
        free(lp);
        return st_errorf(ST_ENOMEM, "%zu x %zu links", n, n);
    }
    size_t k = 0;
    for (size_t a = 0; a < n; a++)
        for (size_t b = 0; b < n; b++) {
            if (a == b)
                continue;
            const st_link *x = &l[a * n + b];
            strata__link_status__init(&ls[k]);
            ls[k].from_id = ids[a];
            ls[k].to_id = ids[b];
            ls[k].latency_ms = x->latency_s * 1e3;
            ls[k].bandwidth_bytes_per_s = x->bw;
            ls[k].measured = x->measured;
            ls[k].samples = x->samples;
            ls[k].age_s = x->age_s;
            lp[k] = &ls[k];
            k++;
        }
    *out = lp;
    *n_out = k;
    return ST_OK;
}

void st_links_pb_free(Strata__LinkStatus **lp, size_t n)
{
    if (lp == NULL)
        return;
    if (n > 0)
        free(lp[0]); /* the block of entries */
    free(lp);
}
