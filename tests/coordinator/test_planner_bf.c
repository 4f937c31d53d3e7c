/* test_planner_bf.c - the planner (coordinator/planner/placement.h) against a
 * brute-force reference written independently here.
 *
 * The reference enumerates every plan: every ordered subset of workers and
 * every split of the layers into that many non-empty contiguous ranges,
 * checks each stage's bytes against its worker's budget with its own byte
 * arithmetic, and evaluates the cost model of docs/placement.md directly:
 * throughput = the slowest stage (compute + incoming transfer), ties broken
 * by the lowest latency; latency = compute + link costs of one token.
 * Hundreds of random instances (up to 6 workers, up to 16 layers, random
 * budgets, speeds, links, KV reserve, embedding and head) are planned by
 * both, for both objectives: the planner must find a plan exactly when one
 * exists and its objective value must equal the reference's optimum. The
 * stage times the planner reports are recomputed here too. Replicas are
 * checked the same way: given the planner's coverage plan, every
 * assignment of the idle workers to stages is tried. The heuristic used
 * above 8 workers is compared with the reference on 9-worker instances. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/planner/placement.h"

#define BF_MAXW 10
#define BF_MAXL 16

typedef struct bf_inst {
    uint32_t L;
    uint64_t lb[BF_MAXL];
    uint64_t embd, head, kvpt, kv_tokens;
    size_t n;
    st_place_worker w[BF_MAXW];
    double lat[BF_MAXW * BF_MAXW], bw[BF_MAXW * BF_MAXW];
    double act;
    st_place_objective obj;
} bf_inst;

static uint64_t bf_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static double bf_unit(uint64_t *s) { return (double)(bf_rand(s) % 1000000) / 1e6; }

/* bf_bytes - the reference's own stage bytes. */
static uint64_t bf_bytes(const bf_inst *p, uint32_t f, uint32_t l)
{
    uint64_t b = 0;
    for (uint32_t i = f; i < l; i++)
        b += p->lb[i] + p->kvpt * p->kv_tokens;
    if (f == 0)
        b += p->embd;
    if (l == p->L)
        b += p->head;
    return b;
}

static double bf_compute(const bf_inst *p, size_t w, uint32_t f, uint32_t l)
{
    double b = 0;
    for (uint32_t i = f; i < l; i++)
        b += (double)p->lb[i];
    if (l == p->L)
        b += (double)p->head;
    return p->w[w].spb * b;
}

static double bf_xfer(const bf_inst *p, size_t a, size_t b)
{
    double bw = p->bw[a * p->n + b];
    return bw > 0 && isfinite(bw) ? p->act / bw : 0;
}

typedef struct bf_best {
    bool found;
    double b, lat; /* best bottleneck; best latency (under the cap in pass 2) */
    double cap;    /* pass 2: stages must stay within this */
    int pass;      /* 1: min bottleneck (throughput) or min latency; 2: min latency under cap */
} bf_best;

static void bf_rec(const bf_inst *p, bf_best *r, unsigned used, size_t prev, uint32_t at, double mx,
                   double sum)
{
    if (at == p->L) {
        r->found = true;
        if (p->obj == ST_PLACE_THROUGHPUT && r->pass == 1) {
            if (mx < r->b)
                r->b = mx;
        } else if (sum < r->lat) {
            r->lat = sum;
        }
        return;
    }
    for (size_t k = 0; k < p->n; k++) {
        if (used & (1u << k))
            continue;
        for (uint32_t l = at + 1; l <= p->L; l++) {
            if (bf_bytes(p, at, l) > p->w[k].mem_budget)
                continue;
            double c = bf_compute(p, k, at, l);
            double t = c, lk = 0;
            if (at > 0) {
                t += bf_xfer(p, prev, k);
                lk = p->lat[prev * p->n + k] + bf_xfer(p, prev, k);
            }
            if (r->pass == 2 && t > r->cap)
                continue;
            bf_rec(p, r, used | (1u << k), k, l, fmax(mx, t), sum + c + lk);
        }
    }
}

/* bf_solve - the reference optimum: *val the objective, *lat the latency
 * (throughput: the lowest latency among the best-bottleneck plans). */
static bool bf_solve(const bf_inst *p, double *val, double *lat)
{
    bf_best r = {.b = INFINITY, .lat = INFINITY, .pass = 1};
    bf_rec(p, &r, 0, 0, 0, 0, 0);
    if (!r.found)
        return false;
    if (p->obj == ST_PLACE_LATENCY) {
        *val = *lat = r.lat;
        return true;
    }
    *val = r.b;
    bf_best r2 = {.b = INFINITY, .lat = INFINITY, .pass = 2, .cap = r.b * (1 + 1e-9)};
    bf_rec(p, &r2, 0, 0, 0, 0, 0);
    *lat = r2.lat;
    return true;
}

static void bf_random(bf_inst *p, uint64_t *s, size_t max_n, uint32_t max_l)
{
    memset(p, 0, sizeof *p);
    p->L = 1 + (uint32_t)(bf_rand(s) % max_l);
    p->n = 1 + (size_t)(bf_rand(s) % max_n);
    uint64_t total = 0;
    for (uint32_t l = 0; l < p->L; l++) {
        p->lb[l] = 50 + bf_rand(s) % 150;
        total += p->lb[l];
    }
    p->embd = bf_rand(s) % 120;
    p->head = bf_rand(s) % 120;
    p->kvpt = bf_rand(s) % 3;
    p->kv_tokens = bf_rand(s) % 16;
    uint64_t need = total + p->kvpt * p->kv_tokens * p->L + p->embd + p->head;
    bool tight = bf_rand(s) % 2;
    for (size_t i = 0; i < p->n; i++) {
        uint64_t budget = tight ? 150 + bf_rand(s) % (need / p->n + 300) : need + bf_rand(s) % 100;
        p->w[i] = (st_place_worker){.id = 100 + i,
                                    .mem_budget = budget,
                                    .spb = 0.2 + 3 * bf_unit(s)};
    }
    bool links = bf_rand(s) % 3 != 0;
    p->act = links ? 20 + 200 * bf_unit(s) : 0;
    for (size_t a = 0; a < p->n; a++)
        for (size_t b = 0; b < p->n; b++) {
            p->lat[a * p->n + b] = links ? 40 * bf_unit(s) : 0;
            p->bw[a * p->n + b] = links && bf_rand(s) % 4 ? 1 + 10 * bf_unit(s) : 0;
        }
    p->obj = bf_rand(s) % 2 ? ST_PLACE_LATENCY : ST_PLACE_THROUGHPUT;
}

static void bf_setup(const bf_inst *p, st_place_model *m, st_place_opts *o, bool replicas)
{
    *m = (st_place_model){.n_layer = p->L,
                          .layer_bytes = p->lb,
                          .embd_bytes = p->embd,
                          .head_bytes = p->head,
                          .kv_bytes_per_token_layer = p->kvpt};
    *o = st_place_opts_default();
    o->objective = p->obj;
    o->kv_tokens = p->kv_tokens;
    o->act_bytes = p->act;
    o->lat_s = p->lat;
    o->bw = p->bw;
    o->replicas = replicas;
}

/* bf_check_times - the planner's reported figures recomputed here. */
static void bf_check_times(const bf_inst *p, const st_place_result *r)
{
    double lat = 0, b = 0;
    uint32_t at = 0;
    for (size_t s = 0; s < r->n_stages; s++) {
        const st_place_stage *st = &r->stages[s];
        ck_assert_uint_eq(st->first, at);
        ck_assert_uint_gt(st->last, st->first);
        at = st->last;
        double worst = 0;
        for (uint32_t k = 0; k < st->n_rep; k++) {
            size_t w = st->rep[k];
            ck_assert_uint_lt(w, p->n);
            ck_assert_uint_le(bf_bytes(p, st->first, st->last), p->w[w].mem_budget);
            double t = bf_compute(p, w, st->first, st->last);
            if (s > 0)
                t += bf_xfer(p, r->stages[s - 1].rep[0], w);
            worst = fmax(worst, t);
        }
        double t = worst / st->n_rep;
        ck_assert_double_eq_tol(st->time_s, t, 1e-9 * fmax(1, t));
        ck_assert_uint_eq(st->bytes, bf_bytes(p, st->first, st->last));
        lat += bf_compute(p, st->rep[0], st->first, st->last);
        if (s > 0)
            lat += p->lat[r->stages[s - 1].rep[0] * p->n + st->rep[0]] +
                   bf_xfer(p, r->stages[s - 1].rep[0], st->rep[0]);
        b = fmax(b, t);
    }
    ck_assert_uint_eq(at, p->L);
    ck_assert_double_eq_tol(r->latency_s, lat, 1e-9 * fmax(1, lat));
    ck_assert_double_eq_tol(r->bottleneck_s, b, 1e-9 * fmax(1, b));
}

START_TEST(optimal_on_random_instances)
{
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    int counts[2][2] = {{0, 0}, {0, 0}}; /* [objective][feasible] */
    for (int it = 0; it < 600; it++) {
        bf_inst p;
        bf_random(&p, &seed, 6, 16);
        st_place_model m;
        st_place_opts o;
        bf_setup(&p, &m, &o, false);
        st_place_result *r = malloc(sizeof *r);
        ck_assert_ptr_nonnull(r);
        double val = 0, lat = 0;
        bool feasible = bf_solve(&p, &val, &lat);
        st_err e = st_place(&m, p.w, p.n, &o, r);
        counts[p.obj][feasible]++;
        if (!feasible) {
            ck_assert_msg(e == ST_ENOMEM, "instance %d: reference finds no plan, planner says %d",
                          it, (int)e);
            ck_assert_ptr_nonnull(strstr(st_errdetail(), "no plan"));
            free(r);
            continue;
        }
        ck_assert_msg(e == ST_OK, "instance %d: %s", it, st_errdetail());
        ck_assert(r->exact);
        bf_check_times(&p, r);
        ck_assert_msg(fabs(r->step_s - val) <= 1e-9 * fmax(1, val),
                      "instance %d (%s, %zu workers, %u layers): planner %.12g, optimum %.12g", it,
                      st_place_objective_name(p.obj), p.n, p.L, r->step_s, val);
        ck_assert_msg(fabs(r->latency_s - lat) <= 1e-9 * fmax(1, lat),
                      "instance %d: latency %.12g, reference tie-break %.12g", it, r->latency_s,
                      lat);
        free(r);
    }
    /* the generator must exercise both objectives, feasible and not */
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            ck_assert_int_ge(counts[a][b], 20);
    printf("brute force: throughput %d feasible + %d infeasible, latency %d + %d instances\n",
           counts[0][1], counts[0][0], counts[1][1], counts[1][0]);
}
END_TEST

/* Replicas: given the coverage plan, the best assignment of idle workers. */
static void bf_rep_rec(const bf_inst *p, st_place_result *r, const size_t *pool, size_t np,
                       size_t i, double *best)
{
    if (i == np) {
        double b = 0;
        for (size_t s = 0; s < r->n_stages; s++) {
            const st_place_stage *st = &r->stages[s];
            double worst = 0;
            for (uint32_t k = 0; k < st->n_rep; k++) {
                double t = bf_compute(p, st->rep[k], st->first, st->last);
                if (s > 0)
                    t += bf_xfer(p, r->stages[s - 1].rep[0], st->rep[k]);
                worst = fmax(worst, t);
            }
            b = fmax(b, worst / st->n_rep);
        }
        *best = fmin(*best, b);
        return;
    }
    bf_rep_rec(p, r, pool, np, i + 1, best);
    for (size_t s = 0; s < r->n_stages; s++) {
        st_place_stage *st = &r->stages[s];
        if (bf_bytes(p, st->first, st->last) > p->w[pool[i]].mem_budget ||
            st->n_rep == ST_PLACE_MAX_REPLICAS)
            continue;
        st->rep[st->n_rep++] = (uint16_t)pool[i];
        bf_rep_rec(p, r, pool, np, i + 1, best);
        st->n_rep--;
    }
}

START_TEST(replicas_optimal_given_coverage)
{
    uint64_t seed = 42;
    int with = 0;
    for (int it = 0; it < 300; it++) {
        bf_inst p;
        bf_random(&p, &seed, 6, 4); /* few layers: idle workers are common */
        p.obj = ST_PLACE_THROUGHPUT;
        st_place_model m;
        st_place_opts o;
        bf_setup(&p, &m, &o, false);
        st_place_result *base = malloc(sizeof *base), *r = malloc(sizeof *r);
        if (st_place(&m, p.w, p.n, &o, base) != ST_OK) {
            free(base);
            free(r);
            continue;
        }
        o.replicas = true;
        ck_assert_int_eq(st_place(&m, p.w, p.n, &o, r), ST_OK);
        bf_check_times(&p, r);
        /* coverage first: the primaries are the coverage plan */
        ck_assert_uint_eq(r->n_stages, base->n_stages);
        for (size_t s = 0; s < r->n_stages; s++) {
            ck_assert_uint_eq(r->stages[s].first, base->stages[s].first);
            ck_assert_uint_eq(r->stages[s].rep[0], base->stages[s].rep[0]);
        }
        size_t pool[BF_MAXW], np = 0;
        for (size_t i = 0; i < p.n; i++) {
            bool used = false;
            for (size_t s = 0; s < base->n_stages; s++)
                used |= base->stages[s].rep[0] == i;
            if (!used)
                pool[np++] = i;
        }
        double best = INFINITY;
        bf_rep_rec(&p, base, pool, np, 0, &best);
        ck_assert_msg(fabs(r->bottleneck_s - best) <= 1e-9 * fmax(1, best),
                      "instance %d: replicated bottleneck %.12g, best %.12g", it, r->bottleneck_s,
                      best);
        with += r->replicated;
        free(base);
        free(r);
    }
    ck_assert_int_ge(with, 20);
}
END_TEST

/* Above ST_PLACE_EXACT_MAX workers the heuristic runs: its plans are valid
 * and, on these instances, at most 10% off the optimum. */
START_TEST(heuristic_close_to_optimum)
{
    uint64_t seed = 7;
    double worst = 1;
    int optimal = 0, total = 0;
    for (int it = 0; it < 40; it++) {
        bf_inst p;
        bf_random(&p, &seed, 1, 6);
        p.n = 9 + (size_t)(bf_rand(&seed) % 2);
        for (size_t i = 0; i < p.n; i++)
            p.w[i] = (st_place_worker){.id = 100 + i,
                                       .mem_budget = 1 << 20,
                                       .spb = 0.2 + 3 * bf_unit(&seed)};
        for (size_t i = 0; i < p.n * p.n; i++) {
            p.lat[i] = 10 * bf_unit(&seed);
            p.bw[i] = 0;
        }
        st_place_model m;
        st_place_opts o;
        bf_setup(&p, &m, &o, false);
        st_place_result *r = malloc(sizeof *r);
        double val, lat;
        ck_assert(bf_solve(&p, &val, &lat));
        ck_assert_int_eq(st_place(&m, p.w, p.n, &o, r), ST_OK);
        ck_assert(!r->exact);
        bf_check_times(&p, r);
        double ratio = r->step_s / val;
        ck_assert_double_ge(ratio, 1 - 1e-9);
        worst = fmax(worst, ratio);
        optimal += ratio <= 1 + 1e-9;
        total++;
        free(r);
    }
    printf("heuristic (9-10 workers): %d of %d optimal, worst ratio %.4f\n", optimal, total, worst);
    ck_assert_double_le(worst, 1.10);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("planner_bf");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, optimal_on_random_instances);
    tcase_add_test(tc, replicas_optimal_given_coverage);
    tcase_add_test(tc, heuristic_close_to_optimum);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
