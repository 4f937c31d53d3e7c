/* planner_search.c - the planner's searches: the best coverage plan over a
 * set of candidate workers, and replicas of the bottleneck.
 *
 * Exact search (up to ST_PLACE_EXACT_MAX candidates). Dynamic programming
 * over states (set of workers used so far, the last of them, layers
 * covered [0, l)). A transition appends a worker k not yet used with the
 * range [l, l2). Every stage's cost is known at its transition: its
 * compute, plus, for the throughput objective, the transfer of its
 * incoming packet (from the previous worker), or, for the latency
 * objective, the previous boundary's full cost. Both objectives combine
 * stage costs monotonically (max, sum), so the best value of a state does
 * not depend on how it was reached and the table is exact: it covers every
 * subset in every order with every split, i.e. every possible plan. The
 * table has 2^n x n x (L + 1) entries; memory and compute costs are
 * monotone in l2, so the inner loop stops at the first range that does not
 * fit or exceeds a cap.
 *
 * Throughput takes two passes: the min-max pass finds the best bottleneck
 * B; a min-sum pass then minimises latency among plans whose every stage
 * stays within B (a lexicographic tie-break that a single pass cannot do,
 * because max does not preserve the order of (max, sum) pairs).
 *
 * Heuristic (more candidates). The same recurrence restricted to one
 * order of the workers (each used or skipped): O(n^2 L^2) per order. Seed
 * orders: input order, fastest first, largest budget first; then pairwise
 * swaps of the best order are tried, keeping improvements, until none
 * helps or an evaluation budget (about 4e8 table steps) is spent.
 *
 * Replicas. Coverage first: the coverage plan is fixed, then idle workers
 * are given to stages to lower the bottleneck (round-robin batches: a
 * stage's time is its slowest replica's over the number of replicas).
 * Every assignment is tried when there are at most 200000 of them (always
 * the case up to ST_PLACE_EXACT_MAX workers); above, the bottleneck stage
 * repeatedly gets the idle worker that lowers it most, until none does. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/planner/planner_impl.h"

#define PS_NONE 0xFFu
#define PS_EXACT_STATES ((size_t)8 << 20)
#define PS_EVAL_STEPS 1e8
#define PS_REPLICA_LEAVES 200000.0

typedef enum ps_mode { PS_MAX = 0, PS_SUM = 1 } ps_mode;

static size_t ps_idx(size_t nc, size_t w, size_t mask, size_t j, uint32_t l)
{
    return (mask * nc + j) * w + l;
}

/* ps_sol_eval - fills s's bottleneck and latency from its stages. */
static void ps_sol_eval(const pl_ctx *x, pl_sol *s)
{
    double b = 0, lat = 0;
    for (size_t i = 0; i < s->n_stages; i++) {
        double c = pl_compute(x, s->worker[i], s->cut[i], s->cut[i + 1]);
        double t = c;
        if (i > 0) {
            t += pl_xfer(x, s->worker[i - 1], s->worker[i]);
            lat += pl_link(x, s->worker[i - 1], s->worker[i]);
        }
        lat += c;
        if (t > b)
            b = t;
    }
    s->bottleneck = b;
    s->latency = lat;
}

/* ps_better - a strictly better than b: the objective first, then latency. */
static bool ps_better(const pl_ctx *x, const pl_sol *a, const pl_sol *b)
{
    if (!a->found)
        return false;
    if (!b->found)
        return true;
    double va = pl_value(x, a), vb = pl_value(x, b);
    double eps = 1e-12 * fmax(fabs(va), fabs(vb));
    if (va < vb - eps)
        return true;
    if (va > vb + eps)
        return false;
    return a->latency < b->latency - 1e-12 * fmax(a->latency, b->latency);
}

/* ps_subset - the exact table for one mode; stage costs above cap are
 * not allowed (cap = INFINITY: none), and partial plans whose value
 * exceeds bound are dropped (a known plan's value: both objectives only
 * grow as stages are appended, so no better plan passes through them). */
static st_err ps_subset(const pl_ctx *x, const size_t *cand, size_t nc, ps_mode mode, double cap,
                        double bound, pl_sol *out)
{
    uint32_t L = x->m->n_layer;
    size_t S = (size_t)1 << nc, W = (size_t)L + 1, ns = S * nc * W;
    double *V = malloc(ns * sizeof *V);
    uint8_t *pj = malloc(ns);
    uint16_t *pl = malloc(ns * sizeof *pl);
    out->found = false;
    if (!V || !pj || !pl) {
        free(V);
        free(pj);
        free(pl);
        return st_errorf(ST_ENOMEM, "planner table of %zu states", ns);
    }
    for (size_t i = 0; i < ns; i++)
        V[i] = INFINITY;
    for (size_t j = 0; j < nc; j++)
        for (uint32_t l = 1; l <= L; l++) {
            if (!pl_fits(x, cand[j], 0, l))
                break;
            double c = pl_compute(x, cand[j], 0, l);
            if (c > cap || c > bound)
                break;
            size_t t = ps_idx(nc, W, (size_t)1 << j, j, l);
            V[t] = c;
            pj[t] = PS_NONE;
            pl[t] = 0;
        }
    for (size_t mask = 1; mask < S; mask++)
        for (size_t j = 0; j < nc; j++) {
            if (!(mask & ((size_t)1 << j)))
                continue;
            for (uint32_t l = 1; l < L; l++) {
                double v = V[ps_idx(nc, W, mask, j, l)];
                if (isinf(v) || v > bound)
                    continue;
                for (size_t k = 0; k < nc; k++) {
                    if (mask & ((size_t)1 << k))
                        continue;
                    double xf = pl_xfer(x, cand[j], cand[k]);
                    double lk = pl_link(x, cand[j], cand[k]);
                    size_t nm = mask | ((size_t)1 << k);
                    for (uint32_t l2 = l + 1; l2 <= L; l2++) {
                        if (!pl_fits(x, cand[k], l, l2))
                            break;
                        double c = pl_compute(x, cand[k], l, l2);
                        if (xf + c > cap)
                            break;
                        double nv = mode == PS_MAX ? fmax(v, xf + c) : v + lk + c;
                        if (nv > bound)
                            break; /* nv grows with l2 */
                        size_t t = ps_idx(nc, W, nm, k, l2);
                        if (nv < V[t]) {
                            V[t] = nv;
                            pj[t] = (uint8_t)j;
                            pl[t] = (uint16_t)l;
                        }
                    }
                }
            }
        }
    double best = INFINITY;
    size_t bm = 0, bj = 0;
    for (size_t mask = 1; mask < S; mask++)
        for (size_t j = 0; j < nc; j++) {
            double v = V[ps_idx(nc, W, mask, j, L)];
            if (v < best) {
                best = v;
                bm = mask;
                bj = j;
            }
        }
    if (!isinf(best)) {
        size_t k = 0;
        uint16_t wrev[ST_PLACE_EXACT_MAX];
        uint32_t crev[ST_PLACE_EXACT_MAX];
        size_t mask = bm, j = bj;
        uint32_t l = L;
        for (;;) {
            size_t t = ps_idx(nc, W, mask, j, l);
            wrev[k] = (uint16_t)cand[j];
            uint32_t pl_ = pj[t] == PS_NONE ? 0 : pl[t];
            crev[k++] = pl_;
            if (pj[t] == PS_NONE)
                break;
            size_t pj_ = pj[t];
            mask ^= (size_t)1 << j;
            j = pj_;
            l = pl_;
        }
        out->n_stages = k;
        for (size_t i = 0; i < k; i++) {
            out->worker[i] = wrev[k - 1 - i];
            out->cut[i] = crev[k - 1 - i];
        }
        out->cut[k] = L;
        out->found = true;
        ps_sol_eval(x, out);
    }
    free(V);
    free(pj);
    free(pl);
    return ST_OK;
}

/* ps_order - the table restricted to the order ord[0..nc) (input
 * indices), each worker used or skipped. V, pp and pl have nc x (L+1)
 * entries each. */
static void ps_order(const pl_ctx *x, const size_t *ord, size_t nc, ps_mode mode, double cap,
                     double bound, double *V, uint16_t *pp, uint16_t *pl, pl_sol *out)
{
    uint32_t L = x->m->n_layer;
    size_t W = (size_t)L + 1;
    out->found = false;
    for (size_t i = 0; i < nc * W; i++)
        V[i] = INFINITY;
    for (size_t p = 0; p < nc; p++)
        for (uint32_t l = 1; l <= L; l++) {
            if (!pl_fits(x, ord[p], 0, l))
                break;
            double c = pl_compute(x, ord[p], 0, l);
            if (c > cap || c > bound)
                break;
            V[p * W + l] = c;
            pp[p * W + l] = 0;
            pl[p * W + l] = 0;
        }
    for (size_t p = 0; p < nc; p++)
        for (uint32_t l = 1; l < L; l++) {
            double v = V[p * W + l];
            if (isinf(v) || v > bound)
                continue;
            for (size_t q = p + 1; q < nc; q++) {
                double xf = pl_xfer(x, ord[p], ord[q]);
                double lk = pl_link(x, ord[p], ord[q]);
                for (uint32_t l2 = l + 1; l2 <= L; l2++) {
                    if (!pl_fits(x, ord[q], l, l2))
                        break;
                    double c = pl_compute(x, ord[q], l, l2);
                    if (xf + c > cap)
                        break;
                    double nv = mode == PS_MAX ? fmax(v, xf + c) : v + lk + c;
                    if (nv > bound)
                        break;
                    size_t t = q * W + l2;
                    if (nv < V[t]) {
                        V[t] = nv;
                        pp[t] = (uint16_t)(p + 1);
                        pl[t] = (uint16_t)l;
                    }
                }
            }
        }
    double best = INFINITY;
    size_t bp = 0;
    for (size_t p = 0; p < nc; p++)
        if (V[p * W + L] < best) {
            best = V[p * W + L];
            bp = p;
        }
    if (isinf(best))
        return;
    size_t k = 0, p = bp;
    uint32_t l = L;
    uint16_t wrev[ST_PLACE_MAX_WORKERS];
    uint32_t crev[ST_PLACE_MAX_WORKERS];
    for (;;) {
        size_t t = p * W + l;
        wrev[k] = (uint16_t)ord[p];
        crev[k++] = pl[t];
        if (pp[t] == 0)
            break;
        l = pl[t];
        p = pp[t] - 1u;
    }
    out->n_stages = k;
    for (size_t i = 0; i < k; i++) {
        out->worker[i] = wrev[k - 1 - i];
        out->cut[i] = crev[k - 1 - i];
    }
    out->cut[k] = L;
    out->found = true;
    ps_sol_eval(x, out);
}

/* ps_solve_subset / ps_solve_order - the objective's passes. The exact
 * table is bounded by the plan the order recurrence finds over the
 * fastest-first order (cheap: O(n^2 L^2)), which prunes most of it. */
static void ps_solve_order(const pl_ctx *x, const size_t *ord, size_t nc, double bound, double *V,
                           uint16_t *pp, uint16_t *pl, pl_sol *out);
static void ps_sort(size_t *ord, size_t n, const double *key);

static st_err ps_solve_subset(const pl_ctx *x, const size_t *cand, size_t nc, pl_sol *out)
{
    size_t W = (size_t)x->m->n_layer + 1;
    double *V = malloc(nc * W * sizeof *V), *key = malloc(x->n * sizeof *key);
    uint16_t *pp = malloc(nc * W * sizeof *pp), *pl = malloc(nc * W * sizeof *pl);
    size_t ord[ST_PLACE_EXACT_MAX];
    pl_sol ub;
    ub.found = false;
    if (V && key && pp && pl) {
        memcpy(ord, cand, nc * sizeof *ord);
        for (size_t i = 0; i < nc; i++)
            key[cand[i]] = x->w[cand[i]].spb;
        ps_sort(ord, nc, key);
        ps_solve_order(x, ord, nc, INFINITY, V, pp, pl, &ub);
    } /* without memory for the bound the table runs unbounded */
    free(V);
    free(key);
    free(pp);
    free(pl);
    double slack = 1 + 1e-9;
    st_err e;
    if (x->o->objective == ST_PLACE_LATENCY)
        return ps_subset(x, cand, nc, PS_SUM, INFINITY, ub.found ? ub.latency * slack : INFINITY,
                         out);
    if ((e = ps_subset(x, cand, nc, PS_MAX, INFINITY, ub.found ? ub.bottleneck * slack : INFINITY,
                       out)) != ST_OK ||
        !out->found)
        return e;
    pl_sol second;
    double cap = out->bottleneck * slack + 1e-300;
    if ((e = ps_subset(x, cand, nc, PS_SUM, cap, out->latency * slack, &second)) != ST_OK)
        return e;
    if (second.found && ps_better(x, &second, out))
        *out = second;
    return ST_OK;
}

static void ps_solve_order(const pl_ctx *x, const size_t *ord, size_t nc, double bound, double *V,
                           uint16_t *pp, uint16_t *pl, pl_sol *out)
{
    if (x->o->objective == ST_PLACE_LATENCY) {
        ps_order(x, ord, nc, PS_SUM, INFINITY, bound, V, pp, pl, out);
        return;
    }
    ps_order(x, ord, nc, PS_MAX, INFINITY, bound, V, pp, pl, out);
    if (!out->found)
        return;
    pl_sol second;
    ps_order(x, ord, nc, PS_SUM, out->bottleneck * (1 + 1e-9) + 1e-300, out->latency * (1 + 1e-9),
             V, pp, pl, &second);
    if (second.found && ps_better(x, &second, out))
        *out = second;
}

/* ps_bound - a search bound from the best plan so far (INFINITY: none). */
static double ps_bound(const pl_ctx *x, const pl_sol *best)
{
    return best->found ? pl_value(x, best) * (1 + 1e-9) : INFINITY;
}

/* ps_sort - sorts ord[0..n) by key ascending (stable insertion sort). */
static void ps_sort(size_t *ord, size_t n, const double *key)
{
    for (size_t i = 1; i < n; i++) {
        size_t v = ord[i], j = i;
        while (j > 0 && key[ord[j - 1]] > key[v]) {
            ord[j] = ord[j - 1];
            j--;
        }
        ord[j] = v;
    }
}

static st_err ps_heuristic(const pl_ctx *x, const size_t *cand, size_t nc, pl_sol *out)
{
    size_t W = (size_t)x->m->n_layer + 1;
    double *V = malloc(nc * W * sizeof *V);
    uint16_t *pp = malloc(nc * W * sizeof *pp);
    uint16_t *pl = malloc(nc * W * sizeof *pl);
    double *key = malloc(x->n * sizeof *key);
    size_t *ord = malloc(nc * sizeof *ord), *best_ord = malloc(nc * sizeof *best_ord);
    st_err e = ST_OK;
    if (!V || !pp || !pl || !key || !ord || !best_ord) {
        e = st_errorf(ST_ENOMEM, "planner tables for %zu workers", nc);
        goto out;
    }
    out->found = false;
    pl_sol s;
    for (int seed = 0; seed < 5; seed++) {
        memcpy(ord, cand, nc * sizeof *ord);
        for (size_t i = 0; i < nc; i++)
            key[cand[i]] = seed % 2 ? x->w[cand[i]].spb : -(double)x->w[cand[i]].mem_budget;
        if (seed > 0)
            ps_sort(ord, nc, key);
        if (seed >= 3 &&
            (nc <= ST_PLACE_EXACT_MAX ||
             ((size_t)1 << ST_PLACE_EXACT_MAX) * ST_PLACE_EXACT_MAX * W > PS_EXACT_STATES))
            continue;
        if (seed >= 3) { /* exact over the 8 fastest (3) or largest (4) workers */
            if ((e = ps_solve_subset(x, ord, ST_PLACE_EXACT_MAX, &s)) != ST_OK)
                goto out;
            if (s.found) { /* as an order: its workers in plan order, then the others */
                size_t k = 0;
                for (size_t i = 0; i < s.n_stages; i++)
                    ord[k++] = s.worker[i];
                for (size_t i = 0; i < nc; i++) {
                    bool used = false;
                    for (size_t j = 0; j < s.n_stages && !used; j++)
                        used = s.worker[j] == cand[i];
                    if (!used)
                        ord[k++] = cand[i];
                }
            }
        } else {
            ps_solve_order(x, ord, nc, ps_bound(x, out), V, pp, pl, &s);
        }
        if (ps_better(x, &s, out)) {
            *out = s;
            memcpy(best_ord, ord, nc * sizeof *ord);
        }
    }
    double per = (double)nc * (double)nc * (double)W * (double)W;
    long budget = (long)(PS_EVAL_STEPS / (per > 1 ? per : 1));
    bool improved = out->found;
    while (improved && budget > 0) {
        improved = false;
        /* neighbours: swap positions i and j (op 0), or move i to j (op 1) */
        for (int op = 0; op < 2 && !improved; op++)
            for (size_t i = 0; i < nc && budget > 0 && !improved; i++)
                for (size_t j = 0; j < nc && budget > 0 && !improved; j++) {
                    if (i == j || (op == 0 && j < i))
                        continue;
                    memcpy(ord, best_ord, nc * sizeof *ord);
                    size_t t = ord[i];
                    if (op == 0) {
                        ord[i] = ord[j];
                        ord[j] = t;
                    } else if (i < j) {
                        memmove(ord + i, ord + i + 1, (j - i) * sizeof *ord);
                        ord[j] = t;
                    } else {
                        memmove(ord + j + 1, ord + j, (i - j) * sizeof *ord);
                        ord[j] = t;
                    }
                    ps_solve_order(x, ord, nc, ps_bound(x, out), V, pp, pl, &s);
                    budget--;
                    if (ps_better(x, &s, out)) {
                        *out = s;
                        memcpy(best_ord, ord, nc * sizeof *ord);
                        improved = true;
                    }
                }
    }
    out->exact = false;
out:
    free(V);
    free(pp);
    free(pl);
    free(key);
    free(ord);
    free(best_ord);
    return e;
}

st_err pl_search(const pl_ctx *x, const size_t *cand, size_t nc, pl_sol *out)
{
    memset(out, 0, sizeof *out);
    if (nc == 0)
        return ST_OK;
    size_t W = (size_t)x->m->n_layer + 1;
    if (nc <= ST_PLACE_EXACT_MAX && ((size_t)1 << nc) * nc * W <= PS_EXACT_STATES) {
        st_err e = ps_solve_subset(x, cand, nc, out);
        out->exact = true;
        return e;
    }
    return ps_heuristic(x, cand, nc, out);
}

/* ---- replicas ---- */

/* ps_stage_time - time of stage s of r served by its n_rep workers: the
 * slowest one's (incoming transfer from the previous primary + compute)
 * over the number of workers. */
static double ps_stage_time(const pl_ctx *x, const st_place_result *r, size_t s)
{
    const st_place_stage *st = &r->stages[s];
    double worst = 0;
    for (uint32_t k = 0; k < st->n_rep; k++) {
        double t = pl_compute(x, st->rep[k], st->first, st->last);
        if (s > 0)
            t += pl_xfer(x, r->stages[s - 1].rep[0], st->rep[k]);
        if (t > worst)
            worst = t;
    }
    return worst / (double)st->n_rep;
}

static double ps_bottleneck(const pl_ctx *x, const st_place_result *r, size_t *n_extra)
{
    double b = 0;
    size_t extra = 0;
    for (size_t s = 0; s < r->n_stages; s++) {
        double t = ps_stage_time(x, r, s);
        if (t > b)
            b = t;
        extra += r->stages[s].n_rep - 1;
    }
    *n_extra = extra;
    return b;
}

typedef struct ps_rep_search {
    const pl_ctx *x;
    st_place_result *r;
    const size_t *pool;
    size_t np;
    double best_b;
    size_t best_extra;
    int *cur;  /* [np]: stage or -1 */
    int *best; /* [np] */
} ps_rep_search;

static void ps_rep_rec(ps_rep_search *q, size_t i)
{
    if (i == q->np) {
        size_t extra;
        double b = ps_bottleneck(q->x, q->r, &extra);
        double eps = 1e-12 * fmax(b, q->best_b);
        if (b < q->best_b - eps || (b <= q->best_b + eps && extra < q->best_extra)) {
            q->best_b = b;
            q->best_extra = extra;
            memcpy(q->best, q->cur, q->np * sizeof *q->cur);
        }
        return;
    }
    q->cur[i] = -1;
    ps_rep_rec(q, i + 1);
    for (size_t s = 0; s < q->r->n_stages; s++) {
        st_place_stage *st = &q->r->stages[s];
        if (st->n_rep >= ST_PLACE_MAX_REPLICAS || !pl_fits(q->x, q->pool[i], st->first, st->last))
            continue;
        st->rep[st->n_rep++] = (uint16_t)q->pool[i];
        q->cur[i] = (int)s;
        ps_rep_rec(q, i + 1);
        st->n_rep--;
        q->cur[i] = -1;
    }
}

static void ps_rep_greedy(const pl_ctx *x, st_place_result *r, const size_t *pool, size_t np)
{
    bool *used = calloc(np ? np : 1, sizeof *used);
    if (used == NULL)
        return; /* replicas are an improvement; without memory the coverage plan stands */
    for (;;) {
        size_t b = 0;
        double bt = -1;
        for (size_t s = 0; s < r->n_stages; s++) {
            double t = ps_stage_time(x, r, s);
            if (t > bt) {
                bt = t;
                b = s;
            }
        }
        st_place_stage *st = &r->stages[b];
        if (st->n_rep >= ST_PLACE_MAX_REPLICAS)
            break;
        size_t pick = np;
        double pick_t = bt;
        for (size_t i = 0; i < np; i++) {
            if (used[i] || !pl_fits(x, pool[i], st->first, st->last))
                continue;
            st->rep[st->n_rep++] = (uint16_t)pool[i];
            double t = ps_stage_time(x, r, b);
            st->n_rep--;
            if (t < pick_t - 1e-12 * pick_t) {
                pick_t = t;
                pick = i;
            }
        }
        if (pick == np)
            break;
        st->rep[st->n_rep++] = (uint16_t)pool[pick];
        used[pick] = true;
    }
    free(used);
}

void pl_replicas(const pl_ctx *x, st_place_result *r, const size_t *pool, size_t np)
{
    if (np == 0 || r->n_stages == 0)
        return;
    double leaves = pow((double)r->n_stages + 1, (double)np);
    if (leaves > PS_REPLICA_LEAVES) {
        ps_rep_greedy(x, r, pool, np);
    } else {
        int *cur = malloc(np * sizeof *cur), *best = malloc(np * sizeof *best);
        if (cur && best) {
            ps_rep_search q = {.x = x, .r = r, .pool = pool, .np = np, .cur = cur, .best = best};
            for (size_t i = 0; i < np; i++)
                best[i] = -1;
            q.best_b = ps_bottleneck(x, r, &q.best_extra);
            ps_rep_rec(&q, 0);
            for (size_t i = 0; i < np; i++)
                if (best[i] >= 0) {
                    st_place_stage *st = &r->stages[best[i]];
                    st->rep[st->n_rep++] = (uint16_t)pool[i];
                }
        }
        free(cur);
        free(best);
    }
    pl_times(x, r);
}
