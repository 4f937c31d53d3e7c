/* placement.c - the heterogeneous planner's entry points: input checks,
 * the cost model, spares, replicas, the current plan and hysteresis, the
 * reasons of workers left out, and the typed errors.
 *
 * The search itself (planner_search.c) finds the best coverage plan over a
 * set of candidates. This file decides which candidates: the non-spare
 * workers first; all of them when those cannot hold the model (a gap) or
 * when the plan with the spares is better by the margin (a bottleneck).
 * Coverage comes first: replicas (throughput objective, when allowed) are
 * added afterwards from the workers the coverage plan left idle.
 *
 * Hysteresis: the workers' current stages, when they still form a
 * complete plan, are evaluated under the same estimates; the caller is
 * told to keep them unless the new plan's step time is lower by the margin
 * (default 10%). A current plan that lost a worker, or whose worker no
 * longer fits, is not a plan: the new one is taken.
 *
 * Infeasibility is diagnosed from the outside in, so the error names the
 * constraint that failed: the total memory against the total need; a
 * single layer (with the embedding or head when it sits at an end) against
 * the largest budget; finally the ranges that cannot be packed. Every
 * byte count in a message comes with its exact value. */
#include "coordinator/planner/placement.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/units.h"
#include "coordinator/planner/planner_impl.h"

static uint64_t pl_add(uint64_t a, uint64_t b) { return pl_sat_add(a, b); }

static uint64_t pl_mul(uint64_t a, uint64_t b) { return pl_sat_mul(a, b); }

/* ---- the cost model ---- */

double pl_value(const pl_ctx *x, const pl_sol *s)
{
    return x->o->objective == ST_PLACE_LATENCY ? s->latency : s->bottleneck;
}

void pl_times(const pl_ctx *x, st_place_result *r)
{
    double lat = 0, b = -1;
    r->replicated = false;
    for (size_t s = 0; s < r->n_stages; s++) {
        st_place_stage *st = &r->stages[s];
        st->bytes = pl_mem(x, st->first, st->last);
        st->compute_s = pl_compute(x, st->rep[0], st->first, st->last);
        st->link_s = s > 0 ? pl_link(x, r->stages[s - 1].rep[0], st->rep[0]) : 0;
        double worst = 0;
        for (uint32_t k = 0; k < st->n_rep; k++) {
            double t = pl_compute(x, st->rep[k], st->first, st->last);
            if (s > 0)
                t += pl_xfer(x, r->stages[s - 1].rep[0], st->rep[k]);
            if (t > worst)
                worst = t;
        }
        st->time_s = worst / (double)st->n_rep;
        lat += st->compute_s + st->link_s;
        if (st->time_s > b) {
            b = st->time_s;
            r->bottleneck = s;
        }
        if (st->n_rep > 1)
            r->replicated = true;
    }
    r->latency_s = lat;
    r->bottleneck_s = b < 0 ? 0 : b;
    r->step_s = r->objective == ST_PLACE_LATENCY ? r->latency_s : r->bottleneck_s;
}

/* ---- checks ---- */

st_err pl_prefixes(pl_ctx *x)
{
    const st_place_model *m = x->m;
    size_t n1 = (size_t)m->n_layer + 1;
    if ((x->prefix = malloc(2 * n1 * sizeof *x->prefix)) == NULL)
        return st_errorf(ST_ENOMEM, "planner: prefix of %u layers", m->n_layer);
    x->cprefix = x->prefix + n1;
    x->prefix[0] = x->cprefix[0] = 0;
    for (uint32_t l = 0; l < m->n_layer; l++) {
        uint64_t a = m->active_bytes ? m->active_bytes[l] : m->layer_bytes[l];
        x->prefix[l + 1] = pl_add(x->prefix[l], m->layer_bytes[l]);
        x->cprefix[l + 1] = pl_add(x->cprefix[l], a);
    }
    return ST_OK;
}

static st_err pl_check(const st_place_model *m, const st_place_worker *w, size_t n,
                       const st_place_opts *o)
{
    if (n == 0)
        return st_errorf(ST_EINVAL, "no plan: no workers");
    if (n > ST_PLACE_MAX_WORKERS)
        return st_errorf(ST_EINVAL, "no plan: %zu workers; the planner takes at most %d", n,
                         ST_PLACE_MAX_WORKERS);
    if (m->n_layer == 0 || m->layer_bytes == NULL)
        return st_errorf(ST_EINVAL, "no plan: the model has no layers");
    if (m->n_layer > ST_PLACE_MAX_LAYERS)
        return st_errorf(ST_EINVAL, "no plan: the model has %u layers; at most %d", m->n_layer,
                         ST_PLACE_MAX_LAYERS);
    for (uint32_t l = 0; m->active_bytes != NULL && l < m->n_layer; l++)
        if (m->active_bytes[l] > m->layer_bytes[l])
            return st_errorf(ST_EINVAL,
                             "no plan: layer %u reads %llu bytes per token, more than its "
                             "%llu bytes",
                             l, (unsigned long long)m->active_bytes[l],
                             (unsigned long long)m->layer_bytes[l]);
    if (o->objective != ST_PLACE_THROUGHPUT && o->objective != ST_PLACE_LATENCY)
        return st_errorf(ST_EINVAL, "objective %d is neither latency nor throughput",
                         (int)o->objective);
    if (!(o->margin >= 0 && o->margin < 1))
        return st_errorf(ST_EINVAL, "hysteresis margin %g is not in [0, 1)", o->margin);
    if (!(o->act_bytes >= 0) || !isfinite(o->act_bytes))
        return st_errorf(ST_EINVAL, "activation bytes per token %g is not finite and >= 0",
                         o->act_bytes);
    for (size_t i = 0; i < n; i++) {
        if (!(w[i].spb > 0) || !isfinite(w[i].spb))
            return st_errorf(ST_EINVAL,
                             "worker %llu has time per byte %g s; the planner needs a "
                             "positive finite value",
                             (unsigned long long)w[i].id, w[i].spb);
        for (size_t j = 0; j < i; j++)
            if (w[j].id == w[i].id)
                return st_errorf(ST_EINVAL, "worker id %llu appears twice",
                                 (unsigned long long)w[i].id);
        for (size_t j = 0; j < n; j++) {
            double lat = o->lat_s ? o->lat_s[i * n + j] : 0;
            double bw = o->bw ? o->bw[i * n + j] : 0;
            if (!(lat >= 0) || !isfinite(lat) || !(bw >= 0) || isnan(bw))
                return st_errorf(ST_EINVAL,
                                 "link %llu -> %llu: latency %g s, bandwidth %g B/s; "
                                 "both must be >= 0 and the latency finite",
                                 (unsigned long long)w[i].id, (unsigned long long)w[j].id, lat, bw);
            double act = o->act_ab ? o->act_ab[i * n + j] : 0;
            if (!(act >= 0) || !isfinite(act))
                return st_errorf(ST_EINVAL,
                                 "link %llu -> %llu: %g activation bytes per token is "
                                 "not finite and >= 0",
                                 (unsigned long long)w[i].id, (unsigned long long)w[j].id, act);
        }
    }
    return ST_OK;
}

/* pl_diagnose - the ST_ENOMEM error for candidates cand[0..nc) that hold no
 * plan, naming the first constraint that fails. */
static st_err pl_diagnose(const pl_ctx *x, const size_t *cand, size_t nc, const char *who)
{
    char b1[48], b2[48], b3[48], b4[48];
    const st_place_model *m = x->m;
    uint32_t L = m->n_layer;
    uint64_t budget = 0, largest = 0;
    size_t li = cand[0];
    for (size_t i = 0; i < nc; i++) {
        budget = pl_add(budget, x->w[cand[i]].mem_budget);
        if (x->w[cand[i]].mem_budget > largest) {
            largest = x->w[cand[i]].mem_budget;
            li = cand[i];
        }
    }
    uint64_t weights = x->prefix[L], kv = pl_mul(x->kv_layer, L);
    uint64_t need = pl_mem(x, 0, L);
    if (budget < need)
        return st_errorf(ST_ENOMEM,
                         "no plan: total memory %s of %zu %s < weights %s + KV reserve "
                         "%s (%llu tokens x %u layers) + embedding and head %s",
                         st_fmt_bytes_exact(budget, b1, sizeof b1), nc, who,
                         st_fmt_bytes_exact(weights, b2, sizeof b2),
                         st_fmt_bytes_exact(kv, b3, sizeof b3), (unsigned long long)x->o->kv_tokens,
                         L,
                         st_fmt_bytes_exact(pl_add(m->embd_bytes, m->head_bytes), b4, sizeof b4));
    for (uint32_t l = 0; l < L; l++) {
        uint64_t one = pl_mem(x, l, l + 1);
        if (one > largest)
            return st_errorf(ST_ENOMEM,
                             "no plan: layer %u alone needs %s (weights %s + KV reserve "
                             "%s%s%s) > the largest budget %s (worker %llu)",
                             l, st_fmt_bytes_exact(one, b1, sizeof b1),
                             st_fmt_bytes_exact(m->layer_bytes[l], b2, sizeof b2),
                             st_fmt_bytes_exact(x->kv_layer, b3, sizeof b3),
                             l == 0 ? " + embedding" : "", l + 1 == L ? " + head" : "",
                             st_fmt_bytes_exact(largest, b4, sizeof b4),
                             (unsigned long long)x->w[li].id);
    }
    return st_errorf(ST_ENOMEM,
                     "no plan: total memory %s of %zu %s covers the need %s, but no "
                     "assignment of contiguous layer ranges fits the budgets (largest %s)",
                     st_fmt_bytes_exact(budget, b1, sizeof b1), nc, who,
                     st_fmt_bytes_exact(need, b2, sizeof b2),
                     st_fmt_bytes_exact(largest, b3, sizeof b3));
}

/* ---- results ---- */

static void pl_from_sol(st_place_result *r, const pl_sol *s)
{
    r->n_stages = s->n_stages;
    for (size_t i = 0; i < s->n_stages; i++) {
        st_place_stage *st = &r->stages[i];
        memset(st, 0, sizeof *st);
        st->first = s->cut[i];
        st->last = s->cut[i + 1];
        st->n_rep = 1;
        st->rep[0] = s->worker[i];
    }
    r->exact = s->exact;
}

static bool pl_used(const st_place_result *r, size_t w)
{
    for (size_t s = 0; s < r->n_stages; s++)
        for (uint32_t k = 0; k < r->stages[s].n_rep; k++)
            if (r->stages[s].rep[k] == w)
                return true;
    return false;
}

static void pl_reasons(const pl_ctx *x, st_place_result *r, bool split)
{
    for (size_t i = 0; i < x->n; i++) {
        r->why[i] = ST_PLACE_USED;
        r->why_bytes[i] = 0;
        if (pl_used(r, i))
            continue;
        uint64_t least = UINT64_MAX;
        for (uint32_t l = 0; l < x->m->n_layer; l++) {
            uint64_t b = pl_mem(x, l, l + 1);
            if (b < least)
                least = b;
        }
        if (split) {
            r->why[i] = ST_PLACE_WHY_SPLIT;
        } else if (least > x->w[i].mem_budget) {
            r->why[i] = ST_PLACE_WHY_MEMORY;
            r->why_bytes[i] = least;
        } else {
            r->why[i] = x->w[i].spare ? ST_PLACE_WHY_SPARE : ST_PLACE_WHY_UNNEEDED;
        }
    }
}

/* pl_current - the plan the workers' current stages form, evaluated; false
 * when they do not form one (a gap, an overlap, a budget exceeded). */
static bool pl_current(const pl_ctx *x, st_place_result *cur)
{
    memset(cur, 0, sizeof *cur);
    cur->objective = x->o->objective;
    uint32_t at = 0;
    while (at < x->m->n_layer) {
        st_place_stage *st = &cur->stages[cur->n_stages];
        memset(st, 0, sizeof *st);
        for (size_t i = 0; i < x->n; i++) {
            const st_place_worker *w = &x->w[i];
            if (!w->has_stage || w->cur_first != at)
                continue;
            if (st->n_rep > 0 && w->cur_last != st->last)
                return false; /* overlapping ranges */
            if (w->cur_last <= at || w->cur_last > x->m->n_layer ||
                !pl_fits(x, i, at, w->cur_last) || st->n_rep == ST_PLACE_MAX_REPLICAS)
                return false;
            st->first = at;
            st->last = w->cur_last;
            st->rep[st->n_rep++] = (uint16_t)i;
        }
        if (st->n_rep == 0)
            return false;
        at = st->last;
        cur->n_stages++;
    }
    for (size_t i = 0; i < x->n; i++) /* a stage starting inside another one */
        if (x->w[i].has_stage && !pl_used(cur, i))
            return false;
    pl_times(x, cur);
    return true;
}

static st_err pl_split(const pl_ctx *x, st_place_result *r)
{
    const st_place_opts *o = x->o;
    char b1[48], b2[48];
    if (o->n_split > x->n)
        return st_errorf(ST_EBUSY, "--split names %zu workers; %zu joined", o->n_split, x->n);
    uint64_t sum = 0;
    for (size_t i = 0; i < o->n_split; i++)
        sum += o->split[i];
    if (sum != x->m->n_layer)
        return st_errorf(ST_EINVAL, "--split sums to %llu layers; the model has %u",
                         (unsigned long long)sum, x->m->n_layer);
    uint32_t at = 0;
    for (size_t i = 0; i < o->n_split; i++) {
        if (o->split[i] == 0)
            continue;
        uint64_t need = pl_mem(x, at, at + o->split[i]);
        if (need > x->w[i].mem_budget)
            return st_errorf(ST_ENOMEM,
                             "no plan: --split gives worker %llu layers [%u, %u) "
                             "needing %s > its budget %s",
                             (unsigned long long)x->w[i].id, at, at + o->split[i],
                             st_fmt_bytes_exact(need, b1, sizeof b1),
                             st_fmt_bytes_exact(x->w[i].mem_budget, b2, sizeof b2));
        st_place_stage *st = &r->stages[r->n_stages++];
        memset(st, 0, sizeof *st);
        st->first = at;
        st->last = at + o->split[i];
        st->n_rep = 1;
        st->rep[0] = (uint16_t)i;
        at = st->last;
    }
    r->exact = true;
    return ST_OK;
}

/* pl_cover - the coverage plan: non-spares first; spares for a gap or a
 * bottleneck. */
static st_err pl_cover(const pl_ctx *x, st_place_result *r)
{
    size_t n = x->n;
    size_t *cand = malloc(n * sizeof *cand), *all = malloc(n * sizeof *all);
    pl_sol *s1 = malloc(sizeof *s1), *s2 = malloc(sizeof *s2);
    st_err e = ST_OK;
    if (!cand || !all || !s1 || !s2) {
        e = st_errorf(ST_ENOMEM, "planner of %zu workers", n);
        goto out;
    }
    size_t nc = 0, ns = 0;
    for (size_t i = 0; i < n; i++) {
        all[i] = i;
        if (!x->w[i].spare)
            cand[nc++] = i;
        else
            ns++;
    }
    memset(s1, 0, sizeof *s1);
    if (nc > 0 && (e = pl_search(x, cand, nc, s1)) != ST_OK)
        goto out;
    if (ns > 0) {
        if ((e = pl_search(x, all, n, s2)) != ST_OK)
            goto out;
        bool gap = !s1->found && s2->found;
        bool faster = s1->found && s2->found &&
                      pl_value(x, s2) < pl_value(x, s1) * (1 - x->o->margin);
        if (gap || faster) {
            *s1 = *s2;
            r->with_spares = true;
        }
    }
    if (!s1->found) {
        e = ns > 0 ? pl_diagnose(x, all, n, "workers (spares included)")
                   : pl_diagnose(x, cand, nc, "workers");
        goto out;
    }
    pl_from_sol(r, s1);
out:
    free(cand);
    free(all);
    free(s1);
    free(s2);
    return e;
}

st_err st_place(const st_place_model *m, const st_place_worker *w, size_t n, const st_place_opts *o,
                st_place_result *out)
{
    st_place_opts dflt = st_place_opts_default();
    if (o == NULL)
        o = &dflt;
    memset(out, 0, sizeof *out);
    out->objective = o->objective;
    out->margin = o->margin;
    st_err e = pl_check(m, w, n, o);
    if (e != ST_OK)
        return e;
    pl_ctx x = {.m = m,
                .w = w,
                .n = n,
                .o = o,
                .kv_layer = pl_mul(m->kv_bytes_per_token_layer, o->kv_tokens)};
    if ((e = pl_prefixes(&x)) != ST_OK)
        return e;
    st_place_result *cur = NULL;
    size_t *pool = NULL;
    bool split = o->split != NULL;
    e = split ? pl_split(&x, out) : pl_cover(&x, out);
    if (e != ST_OK)
        goto out;
    pl_times(&x, out);
    if (!split && o->replicas && o->objective == ST_PLACE_THROUGHPUT) {
        if ((pool = malloc(n * sizeof *pool)) == NULL) {
            e = st_errorf(ST_ENOMEM, "planner: replica pool");
            goto out;
        }
        size_t np = 0;
        for (size_t i = 0; i < n; i++)
            if (!pl_used(out, i))
                pool[np++] = i;
        pl_replicas(&x, out, pool, np);
        for (size_t i = 0; i < n; i++)
            if (w[i].spare && pl_used(out, i))
                out->with_spares = true;
    }
    pl_reasons(&x, out, split);
    if ((cur = malloc(sizeof *cur)) == NULL) {
        e = st_errorf(ST_ENOMEM, "planner: current plan");
        goto out;
    }
    out->has_current = pl_current(&x, cur);
    if (out->has_current) {
        out->current_s = cur->step_s;
        out->keep_current = st_place_same_layout(out, cur) ||
                            !(out->step_s < cur->step_s * (1 - o->margin));
    }
out:
    free(cur);
    free(pool);
    free(x.prefix);
    return e;
}

st_err st_place_eval(const st_place_model *m, const st_place_worker *w, size_t n,
                     const st_place_opts *o, st_place_result *out)
{
    st_place_opts dflt = st_place_opts_default();
    if (o == NULL)
        o = &dflt;
    st_err e = pl_check(m, w, n, o);
    if (e != ST_OK)
        return e;
    out->objective = o->objective;
    if (out->n_stages == 0 || out->n_stages > ST_PLACE_MAX_WORKERS)
        return st_errorf(ST_EINVAL, "a plan of %zu stages", out->n_stages);
    bool *seen = calloc(n, sizeof *seen);
    pl_ctx x = {.m = m,
                .w = w,
                .n = n,
                .o = o,
                .kv_layer = pl_mul(m->kv_bytes_per_token_layer, o->kv_tokens)};
    if (seen == NULL || pl_prefixes(&x) != ST_OK) {
        free(seen);
        free(x.prefix);
        return st_errorf(ST_ENOMEM, "planner: evaluation");
    }
    uint32_t at = 0;
    char b1[48], b2[48];
    for (size_t s = 0; s < out->n_stages && e == ST_OK; s++) {
        const st_place_stage *st = &out->stages[s];
        if (st->first != at || st->last <= st->first || st->last > m->n_layer || st->n_rep < 1 ||
            st->n_rep > ST_PLACE_MAX_REPLICAS) {
            e = st_errorf(ST_EINVAL,
                          "stage %zu [%u, %u) with %u workers does not continue the "
                          "layers at %u",
                          s, st->first, st->last, st->n_rep, at);
            break;
        }
        for (uint32_t k = 0; k < st->n_rep && e == ST_OK; k++) {
            size_t i = st->rep[k];
            if (i >= n || seen[i]) {
                e = st_errorf(ST_EINVAL, "stage %zu names worker index %zu %s", s, i,
                              i >= n ? "beyond the workers" : "twice");
                break;
            }
            seen[i] = true;
            uint64_t need = pl_mem(&x, st->first, st->last);
            if (need > w[i].mem_budget)
                e = st_errorf(ST_ENOMEM,
                              "stage %zu [%u, %u) needs %s > the budget %s of worker "
                              "%llu",
                              s, st->first, st->last, st_fmt_bytes_exact(need, b1, 48),
                              st_fmt_bytes_exact(w[i].mem_budget, b2, 48),
                              (unsigned long long)w[i].id);
        }
        at = st->last;
    }
    if (e == ST_OK && at != m->n_layer)
        e = st_errorf(ST_EINVAL, "the stages cover [0, %u) of %u layers", at, m->n_layer);
    if (e == ST_OK)
        pl_times(&x, out);
    free(seen);
    free(x.prefix);
    return e;
}

uint64_t st_place_stage_bytes(const st_place_model *m, uint64_t kv_tokens, uint32_t first,
                              uint32_t last)
{
    uint64_t kv = pl_mul(m->kv_bytes_per_token_layer, kv_tokens);
    uint64_t s = last > first ? m->stage_bytes : 0;
    for (uint32_t l = first; l < last; l++)
        s = pl_add(s, pl_add(m->layer_bytes[l], kv));
    if (first == 0)
        s = pl_add(s, m->embd_bytes);
    if (last == m->n_layer)
        s = pl_add(s, m->head_bytes);
    return s;
}
