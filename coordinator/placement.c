/* placement.c - the first placement: layers in proportion to measured
 * speed, within each worker's memory budget.
 *
 * A stage's time for one token is about its weight bytes over its
 * streaming speed, so giving worker i a share of layers proportional to
 * speed_i equalises stage times; integer counts come from the largest
 * remainder method (ties to the earlier worker, so the result is
 * deterministic). Memory caps each share: a worker holds at most
 * floor(available / (largest layer + KV reserve per layer)) layers, where
 * available is its budget minus the embedding if it is the first stage
 * and minus the head if it is the last. Capped workers are fixed at their
 * cap and the remaining layers are shared again among the others, in
 * proportion to speed (water filling), which ends after at most one round
 * per worker. Which worker is first or last depends on who got layers, so
 * the caps are recomputed until the roles stop changing; a final exact
 * check of every stage's bytes catches what the per-layer bound could
 * miss. Spares are asked only when the rest cannot hold the model.
 *
 * The optimal planner (issue 6) replaces st_place's body; its callers see
 * the same inputs, outputs and typed errors. */
#include "coordinator/placement.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t pl_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

static uint64_t pl_mul(uint64_t a, uint64_t b)
{
    return (b != 0 && a > UINT64_MAX / b) ? UINT64_MAX : a * b;
}

/* pl_fmt - a byte count for messages: "1.50 GiB (1610612736 B)". */
static const char *pl_fmt(uint64_t b, char *buf, size_t cap)
{
    if (b >= (1ull << 30))
        snprintf(buf, cap, "%.2f GiB (%llu B)", (double)b / (1ull << 30), (unsigned long long)b);
    else if (b >= (1ull << 20))
        snprintf(buf, cap, "%.2f MiB (%llu B)", (double)b / (1ull << 20), (unsigned long long)b);
    else
        snprintf(buf, cap, "%llu B", (unsigned long long)b);
    return buf;
}

uint64_t st_place_stage_bytes(const st_place_model *m, uint32_t first, uint32_t last)
{
    uint64_t kv = pl_mul(m->kv_bytes_per_token_layer, m->kv_tokens);
    uint64_t s = 0;
    for (uint32_t l = first; l < last; l++)
        s = pl_add(s, pl_add(m->layer_bytes[l], kv));
    if (first == 0)
        s = pl_add(s, m->embd_bytes);
    if (last == m->n_layer)
        s = pl_add(s, m->head_bytes);
    return s;
}

/* pl_share - splits r units over the n entries with weights wt (> 0) by
 * the largest remainder method into out. */
static void pl_share(uint32_t r, const double *wt, size_t n, uint32_t *out, double *frac)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += wt[i];
    uint32_t given = 0;
    for (size_t i = 0; i < n; i++) {
        double q = (double)r * wt[i] / s;
        double f = floor(q);
        if (f > r)
            f = r;
        out[i] = (uint32_t)f;
        frac[i] = q - f;
        given += out[i];
    }
    while (given < r) {
        size_t best = n;
        for (size_t i = 0; i < n; i++)
            if (frac[i] >= 0 && (best == n || frac[i] > frac[best]))
                best = i;
        if (best == n) { /* every remainder used: round-robin (only with r >> n) */
            for (size_t i = 0; i < n && given < r; i++, given++)
                out[i]++;
            break;
        }
        out[best]++;
        frac[best] = -1;
        given++;
    }
}

/* pl_fill - water filling of n_layer layers over n workers with speeds sp
 * and caps cap into cnt; false if the caps cannot hold every layer. */
static bool pl_fill(uint32_t n_layer, const double *sp, const uint32_t *cap, size_t n,
                    uint32_t *cnt, double *wt, uint32_t *tmp, double *frac, size_t *map)
{
    bool fixed[n];
    for (size_t i = 0; i < n; i++) {
        fixed[i] = cap[i] == 0;
        cnt[i] = 0;
    }
    for (;;) {
        uint32_t used = 0;
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            if (fixed[i]) {
                used += cnt[i];
            } else {
                wt[k] = sp[i];
                map[k++] = i;
            }
        }
        uint32_t r = n_layer - used;
        if (k == 0)
            return r == 0;
        pl_share(r, wt, k, tmp, frac);
        bool over = false;
        for (size_t j = 0; j < k; j++)
            if (tmp[j] > cap[map[j]]) {
                cnt[map[j]] = cap[map[j]];
                fixed[map[j]] = true;
                over = true;
            }
        if (!over) {
            for (size_t j = 0; j < k; j++)
                cnt[map[j]] = tmp[j];
            return true;
        }
    }
}

/* pl_emit - turns per-candidate layer counts into stages and checks each
 * stage's exact bytes against its worker's budget. */
static st_err pl_emit(const st_place_model *m, const st_place_worker *w, const size_t *cand,
                      const uint32_t *cnt, size_t nc, const char *what, st_place_stage *out,
                      size_t *n_out)
{
    char b1[64], b2[64];
    uint32_t at = 0;
    size_t ns = 0;
    for (size_t i = 0; i < nc; i++) {
        if (cnt[i] == 0)
            continue;
        const st_place_worker *wk = &w[cand[i]];
        uint64_t need = st_place_stage_bytes(m, at, at + cnt[i]);
        if (need > wk->mem_budget)
            return st_errorf(ST_ENOMEM, "no plan: %s gives worker %llu layers [%u, %u) needing %s "
                             "> its budget %s", what, (unsigned long long)wk->id, at,
                             at + cnt[i], pl_fmt(need, b1, sizeof b1),
                             pl_fmt(wk->mem_budget, b2, sizeof b2));
        out[ns].worker = cand[i];
        out[ns].first = at;
        out[ns].last = at + cnt[i];
        out[ns].bytes = need;
        ns++;
        at += cnt[i];
    }
    if (at != m->n_layer)
        return st_errorf(ST_EINTERNAL, "placement covered %u of %u layers", at, m->n_layer);
    *n_out = ns;
    return ST_OK;
}

static st_err pl_split(const st_place_model *m, const st_place_worker *w, size_t n,
                       const st_place_opts *o, st_place_stage *out, size_t *n_out)
{
    if (o->n_split > n)
        return st_errorf(ST_EBUSY, "--split names %zu workers; %zu joined", o->n_split, n);
    uint64_t sum = 0;
    for (size_t i = 0; i < o->n_split; i++)
        sum += o->split[i];
    if (sum != m->n_layer)
        return st_errorf(ST_EINVAL, "--split sums to %llu layers; the model has %u",
                         (unsigned long long)sum, m->n_layer);
    size_t cand[o->n_split];
    for (size_t i = 0; i < o->n_split; i++)
        cand[i] = i;
    return pl_emit(m, w, cand, o->split, o->n_split, "--split", out, n_out);
}

/* pl_prop - proportional placement over the candidates cand[0..nc). */
static st_err pl_prop(const st_place_model *m, const st_place_worker *w, const size_t *cand,
                      size_t nc, st_place_stage *out, size_t *n_out)
{
    char b1[64], b2[64], b3[64], b4[64];
    uint64_t kv_layer = pl_mul(m->kv_bytes_per_token_layer, m->kv_tokens);
    uint64_t weights = 0, max_layer = 0, budget = 0;
    for (uint32_t l = 0; l < m->n_layer; l++) {
        weights = pl_add(weights, m->layer_bytes[l]);
        if (m->layer_bytes[l] > max_layer)
            max_layer = m->layer_bytes[l];
    }
    for (size_t i = 0; i < nc; i++)
        budget = pl_add(budget, w[cand[i]].mem_budget);
    uint64_t kv_all = pl_mul(kv_layer, m->n_layer);
    uint64_t need = st_place_stage_bytes(m, 0, m->n_layer);
    if (budget < need)
        return st_errorf(ST_ENOMEM, "no plan: total memory %s of %zu workers < weights %s + KV "
                         "reserve %s (%llu tokens) + embedding and head %s", pl_fmt(budget, b1, 64),
                         nc, pl_fmt(weights, b2, 64), pl_fmt(kv_all, b3, 64),
                         (unsigned long long)m->kv_tokens,
                         pl_fmt(pl_add(m->embd_bytes, m->head_bytes), b4, 64));
    uint64_t per_layer = pl_add(max_layer, kv_layer);
    double sp[nc], wt[nc], frac[nc];
    uint32_t cap[nc], cnt[nc], tmp[nc];
    size_t map[nc];
    for (size_t i = 0; i < nc; i++)
        sp[i] = w[cand[i]].speed;
    size_t first = 0, last = nc - 1;
    for (size_t iter = 0; iter < nc + 2; iter++) {
        uint64_t total_cap = 0;
        for (size_t i = 0; i < nc; i++) {
            uint64_t avail = w[cand[i]].mem_budget;
            uint64_t extra = pl_add(i == first ? m->embd_bytes : 0, i == last ? m->head_bytes : 0);
            avail = avail > extra ? avail - extra : 0;
            uint64_t c = per_layer ? avail / per_layer : m->n_layer;
            cap[i] = c > m->n_layer ? m->n_layer : (uint32_t)c;
            total_cap += cap[i];
        }
        if (!pl_fill(m->n_layer, sp, cap, nc, cnt, wt, tmp, frac, map))
            return st_errorf(ST_ENOMEM, "no plan: the budgets of %zu workers hold %llu of %u "
                             "layers (a layer needs %s of weights + %s of KV reserve for %llu "
                             "tokens; the first stage also %s, the last %s)", nc,
                             (unsigned long long)total_cap, m->n_layer, pl_fmt(max_layer, b1, 64),
                             pl_fmt(kv_layer, b2, 64), (unsigned long long)m->kv_tokens,
                             pl_fmt(m->embd_bytes, b3, 64), pl_fmt(m->head_bytes, b4, 64));
        size_t nf = nc, nl = 0;
        for (size_t i = 0; i < nc; i++)
            if (cnt[i] > 0) {
                if (nf == nc)
                    nf = i;
                nl = i;
            }
        if (nf == first && nl == last)
            break;
        first = nf;
        last = nl;
    }
    return pl_emit(m, w, cand, cnt, nc, "placement", out, n_out);
}

st_err st_place(const st_place_model *m, const st_place_worker *w, size_t n_workers,
                const st_place_opts *o, st_place_stage *out, size_t *n_out)
{
    *n_out = 0;
    if (n_workers == 0)
        return st_errorf(ST_EINVAL, "no plan: no workers");
    if (m->n_layer == 0 || m->layer_bytes == NULL)
        return st_errorf(ST_EINVAL, "no plan: the model has no layers");
    for (size_t i = 0; i < n_workers; i++)
        if (!(w[i].speed > 0) || !isfinite(w[i].speed))
            return st_errorf(ST_EINVAL, "worker %llu has speed %g; placement needs a positive "
                             "finite speed", (unsigned long long)w[i].id, w[i].speed);
    if (o && o->split)
        return pl_split(m, w, n_workers, o, out, n_out);
    size_t cand[n_workers], nc = 0;
    for (size_t i = 0; i < n_workers; i++)
        if (!w[i].spare)
            cand[nc++] = i;
    if (nc > 0) {
        st_err e = pl_prop(m, w, cand, nc, out, n_out);
        if (e == ST_OK || nc == n_workers)
            return e;
    }
    for (size_t i = 0; i < n_workers; i++)
        cand[i] = i;
    return pl_prop(m, w, cand, n_workers, out, n_out);
}
