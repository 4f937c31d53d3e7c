/* test_placement.c - the heterogeneous planner's rules (placement.h) on
 * hand-made instances, and the model facts it is fed (minfo.c).
 *
 * Each rule of docs/placement.md has a case: slow workers get fewer
 * layers; memory moves layers; the embedding and head sit where they fit;
 * the latency objective avoids hops, the throughput objective balances;
 * spares join only for a gap or a bottleneck; replicas only after
 * coverage and only where they help; hysteresis keeps a plan that is not
 * beaten by the margin; a split fixes the counts; every infeasible or
 * invalid input gets its typed error naming the constraint and numbers.
 * The measurement helpers (calibration, per-layer latency, sustained
 * imbalance) are tested here too. Optimality itself is proven against a
 * brute force in test_planner_bf.c. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/model/gguf.h"
#include "common/model/llama.h"
#include "coordinator/planner/placement.h"

#define BIG (1ull << 40)

static uint64_t layers6[6] = {100, 100, 100, 100, 100, 100};
static uint64_t layers12[12] = {100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100};

static st_place_model model6(void)
{
    return (st_place_model){.n_layer = 6, .layer_bytes = layers6};
}

static st_place_result *res(void)
{
    st_place_result *r = malloc(sizeof *r);
    ck_assert_ptr_nonnull(r);
    return r;
}

/* count - layers of input worker w in r (0 if none). */
static uint32_t count(const st_place_result *r, size_t w)
{
    for (size_t s = 0; s < r->n_stages; s++)
        for (uint32_t k = 0; k < r->stages[s].n_rep; k++)
            if (r->stages[s].rep[k] == w)
                return r->stages[s].last - r->stages[s].first;
    return 0;
}

START_TEST(slow_worker_gets_fewer_layers)
{
    st_place_model m = {.n_layer = 12, .layer_bytes = layers12};
    st_place_worker w[3] = {{.id = 1, .mem_budget = BIG, .spb = 1},
                            {.id = 2, .mem_budget = BIG, .spb = 1},
                            {.id = 3, .mem_budget = BIG, .spb = 2}};
    st_place_result *r = res();
    ck_assert_int_eq(st_place(&m, w, 3, NULL, r), ST_OK);
    ck_assert_int_eq(r->objective, ST_PLACE_THROUGHPUT);
    ck_assert(r->exact);
    ck_assert_uint_eq(r->n_stages, 3);
    ck_assert_uint_eq(count(r, 0), 5);
    ck_assert_uint_eq(count(r, 1), 5);
    ck_assert_uint_eq(count(r, 2), 2);
    ck_assert_double_eq_tol(r->bottleneck_s, 500, 1e-9);
    ck_assert_double_eq_tol(r->step_s, 500, 1e-9);
    /* equal speeds: equal shares */
    w[2].spb = 1;
    ck_assert_int_eq(st_place(&m, w, 3, NULL, r), ST_OK);
    for (size_t i = 0; i < 3; i++)
        ck_assert_uint_eq(count(r, i), 4);
    free(r);
}
END_TEST

START_TEST(latency_objective_avoids_hops)
{
    st_place_model m = model6();
    st_place_worker w[3] = {{.id = 1, .mem_budget = BIG, .spb = 2},
                            {.id = 2, .mem_budget = BIG, .spb = 1},
                            {.id = 3, .mem_budget = BIG, .spb = 3}};
    st_place_opts o = st_place_opts_default();
    o.objective = ST_PLACE_LATENCY;
    st_place_result *r = res();
    ck_assert_int_eq(st_place(&m, w, 3, &o, r), ST_OK);
    ck_assert_uint_eq(r->n_stages, 1); /* all on the fastest */
    ck_assert_uint_eq(r->stages[0].rep[0], 1);
    ck_assert_double_eq_tol(r->latency_s, 600, 1e-9);
    ck_assert_int_eq(r->why[0], ST_PLACE_WHY_UNNEEDED);
    char buf[160];
    ck_assert_ptr_nonnull(strstr(st_place_why_text(r, 0, buf, sizeof buf), "latency"));
    /* the fastest holds only 4 layers: it takes 4, the next fastest 2 */
    w[1].mem_budget = 400;
    ck_assert_int_eq(st_place(&m, w, 3, &o, r), ST_OK);
    ck_assert_uint_eq(count(r, 1), 4);
    ck_assert_uint_eq(count(r, 0), 2);
    ck_assert_uint_eq(r->n_stages, 2);
    free(r);
}
END_TEST

START_TEST(links_count)
{
    st_place_model m = model6();
    st_place_worker w[2] = {{.id = 1, .mem_budget = BIG, .spb = 1},
                            {.id = 2, .mem_budget = BIG, .spb = 1}};
    double lat[4] = {0, 50, 50, 0}, bw[4] = {0, 1, 1, 0};
    st_place_opts o = st_place_opts_default();
    o.lat_s = lat;
    o.bw = bw;
    o.act_bytes = 150; /* 150 s of transfer at 1 B/s */
    st_place_result *r = res();
    ck_assert_int_eq(st_place(&m, w, 2, &o, r), ST_OK);
    /* throughput: 3 + 3 layers costs 150 + 300 in stage 1; 6 on one costs
     * 600; 4 + 2 costs max(400, 350): the split 4/2 wins */
    ck_assert_uint_eq(r->n_stages, 2);
    ck_assert_uint_eq(r->stages[0].last, 4);
    ck_assert_double_eq_tol(r->bottleneck_s, 400, 1e-9);
    ck_assert_double_eq_tol(r->stages[1].link_s, 200, 1e-9);
    ck_assert_double_eq_tol(r->stages[1].time_s, 350, 1e-9);
    ck_assert_double_eq_tol(r->latency_s, 600 + 200, 1e-9);
    /* latency: a hop only adds */
    o.objective = ST_PLACE_LATENCY;
    ck_assert_int_eq(st_place(&m, w, 2, &o, r), ST_OK);
    ck_assert_uint_eq(r->n_stages, 1);
    free(r);
}
END_TEST

START_TEST(memory_moves_layers_and_ends)
{
    /* worker 0 is fastest but holds only 2 layers (each 100 + 10 KV) */
    st_place_model m = model6();
    m.kv_bytes_per_token_layer = 1;
    st_place_opts o = st_place_opts_default();
    o.kv_tokens = 10;
    st_place_worker w[2] = {{.id = 1, .mem_budget = 230, .spb = 0.1},
                            {.id = 2, .mem_budget = BIG, .spb = 1}};
    st_place_result *r = res();
    ck_assert_int_eq(st_place(&m, w, 2, &o, r), ST_OK);
    ck_assert_uint_eq(count(r, 0), 2);
    ck_assert_uint_eq(count(r, 1), 4);
    for (size_t s = 0; s < r->n_stages; s++)
        ck_assert_uint_le(r->stages[s].bytes, w[r->stages[s].rep[0]].mem_budget);
    /* the embedding (250) does not fit worker 0 with any layer: it is not
     * first; the head (50) does fit after 1 layer */
    m.kv_bytes_per_token_layer = 0;
    m.embd_bytes = 250;
    m.head_bytes = 50;
    w[0].mem_budget = 300;
    ck_assert_int_eq(st_place(&m, w, 2, &o, r), ST_OK);
    ck_assert_uint_ne(r->stages[0].rep[0], 0);
    ck_assert_uint_eq(r->stages[r->n_stages - 1].rep[0], 0);
    ck_assert_uint_eq(count(r, 0), 2);
    ck_assert_uint_eq(st_place_stage_bytes(&m, 0, 0, 6), 250 + 600 + 50);
    ck_assert_uint_eq(st_place_stage_bytes(&m, 0, 2, 4), 200);
    ck_assert_uint_eq(st_place_stage_bytes(&m, 3, 2, 4), 200);
    m.kv_bytes_per_token_layer = 2;
    ck_assert_uint_eq(st_place_stage_bytes(&m, 3, 2, 4), 212);
    free(r);
}
END_TEST

START_TEST(spares_gap_and_bottleneck)
{
    st_place_model m = model6();
    st_place_worker w[3] = {{.id = 1, .mem_budget = BIG, .spb = 1},
                            {.id = 2, .mem_budget = BIG, .spb = 1},
                            {.id = 3, .mem_budget = BIG, .spb = 1, .spare = true}};
    st_place_result *r = res();
    /* a third equal worker would improve throughput 3 -> 2 (33%): the
     * spare relieves the bottleneck */
    ck_assert_int_eq(st_place(&m, w, 3, NULL, r), ST_OK);
    ck_assert(r->with_spares);
    ck_assert_uint_eq(r->n_stages, 3);
    /* a slow spare would not be better by the margin: left out */
    w[2].spb = 10;
    ck_assert_int_eq(st_place(&m, w, 3, NULL, r), ST_OK);
    ck_assert(!r->with_spares);
    ck_assert_uint_eq(r->n_stages, 2);
    ck_assert_int_eq(r->why[2], ST_PLACE_WHY_SPARE);
    char buf[200];
    ck_assert_ptr_nonnull(strstr(st_place_why_text(r, 2, buf, sizeof buf), "spare"));
    /* a gap: the others cannot hold the model, the slow spare must join */
    w[0].mem_budget = 200;
    w[1].mem_budget = 200;
    ck_assert_int_eq(st_place(&m, w, 3, NULL, r), ST_OK);
    ck_assert(r->with_spares);
    ck_assert_uint_eq(count(r, 2), 2);
    /* only spares: they are used */
    st_place_worker s1 = {.id = 9, .mem_budget = BIG, .spb = 1, .spare = true};
    ck_assert_int_eq(st_place(&m, &s1, 1, NULL, r), ST_OK);
    ck_assert_uint_eq(r->n_stages, 1);
    free(r);
}
END_TEST

START_TEST(replicas_after_coverage)
{
    uint64_t lb[2] = {100, 100};
    st_place_model m = {.n_layer = 2, .layer_bytes = lb};
    st_place_worker w[5] = {{.id = 1, .mem_budget = BIG, .spb = 1},
                            {.id = 2, .mem_budget = BIG, .spb = 1},
                            {.id = 3, .mem_budget = BIG, .spb = 1},
                            {.id = 4, .mem_budget = BIG, .spb = 1},
                            {.id = 5, .mem_budget = 50, .spb = 1}};
    st_place_opts o = st_place_opts_default();
    st_place_result *r = res();
    ck_assert_int_eq(st_place(&m, w, 5, &o, r), ST_OK);
    ck_assert(!r->replicated); /* not allowed: two stages, two idle workers */
    ck_assert_uint_eq(r->n_stages, 2);
    ck_assert_int_eq(r->why[4], ST_PLACE_WHY_MEMORY);
    ck_assert_uint_eq(r->why_bytes[4], 100);
    o.replicas = true;
    ck_assert_int_eq(st_place(&m, w, 5, &o, r), ST_OK);
    ck_assert(r->replicated);
    ck_assert_uint_eq(r->stages[0].n_rep, 2);
    ck_assert_uint_eq(r->stages[1].n_rep, 2);
    ck_assert_double_eq_tol(r->bottleneck_s, 50, 1e-9);
    ck_assert_double_eq_tol(r->latency_s, 200, 1e-9); /* one token: one lane */
    /* latency objective: replicas do not help, none are made */
    o.objective = ST_PLACE_LATENCY;
    ck_assert_int_eq(st_place(&m, w, 5, &o, r), ST_OK);
    ck_assert(!r->replicated);
    /* a slow idle worker is no use as a replica */
    o.objective = ST_PLACE_THROUGHPUT;
    st_place_worker w2[3] = {{.id = 1, .mem_budget = BIG, .spb = 1},
                             {.id = 2, .mem_budget = BIG, .spb = 1},
                             {.id = 3, .mem_budget = BIG, .spb = 5}};
    ck_assert_int_eq(st_place(&m, w2, 3, &o, r), ST_OK);
    ck_assert(!r->replicated);
    ck_assert_int_eq(r->why[2], ST_PLACE_WHY_UNNEEDED);
    free(r);
}
END_TEST

START_TEST(hysteresis)
{
    st_place_model m = {.n_layer = 12, .layer_bytes = layers12};
    st_place_worker w[3] = {
        {.id = 1, .mem_budget = BIG, .spb = 1, .has_stage = true, .cur_first = 0, .cur_last = 5},
        {.id = 2, .mem_budget = BIG, .spb = 1, .has_stage = true, .cur_first = 5, .cur_last = 10},
        {.id = 3, .mem_budget = BIG, .spb = 2, .has_stage = true, .cur_first = 10, .cur_last = 12}};
    st_place_result *r = res();
    /* the current plan is the optimum: kept */
    ck_assert_int_eq(st_place(&m, w, 3, NULL, r), ST_OK);
    ck_assert(r->has_current);
    ck_assert(r->keep_current);
    ck_assert_double_eq_tol(r->current_s, 500, 1e-9);
    /* worker 3 got faster: 4/4/4 (400) beats 500 by 20%: switch */
    w[2].spb = 1;
    ck_assert_int_eq(st_place(&m, w, 3, NULL, r), ST_OK);
    ck_assert(r->has_current);
    ck_assert(!r->keep_current);
    ck_assert_double_eq_tol(r->step_s, 400, 1e-9);
    /* a margin above 20%: keep */
    st_place_opts o = st_place_opts_default();
    o.margin = 0.25;
    ck_assert_int_eq(st_place(&m, w, 3, &o, r), ST_OK);
    ck_assert(r->keep_current);
    /* a little faster (1.8): 5/5/2 stays the best plan */
    w[2].spb = 1.8;
    ck_assert_int_eq(st_place(&m, w, 3, NULL, r), ST_OK);
    ck_assert(r->keep_current);
    ck_assert_double_eq_tol(r->step_s, 500, 1e-9);
    /* 1.15: 4/4/4 takes 460, better than 500 by 8% only: kept */
    w[2].spb = 1.15;
    ck_assert_int_eq(st_place(&m, w, 3, NULL, r), ST_OK);
    ck_assert_double_eq_tol(r->step_s, 460, 1e-9);
    ck_assert(r->keep_current);
    /* 1.1: 440, better by 12%: switch */
    w[2].spb = 1.1;
    ck_assert_int_eq(st_place(&m, w, 3, NULL, r), ST_OK);
    ck_assert(!r->keep_current);
    /* the current stages leave a gap (a worker is gone): no current plan */
    w[2].has_stage = false;
    ck_assert_int_eq(st_place(&m, w, 3, NULL, r), ST_OK);
    ck_assert(!r->has_current);
    ck_assert(!r->keep_current);
    /* overlapping current stages are not a plan either */
    w[2].has_stage = true;
    w[2].cur_first = 9;
    ck_assert_int_eq(st_place(&m, w, 3, NULL, r), ST_OK);
    ck_assert(!r->has_current);
    free(r);
}
END_TEST

START_TEST(split_override)
{
    st_place_model m = model6();
    st_place_worker w[3] = {{.id = 1, .mem_budget = BIG, .spb = 1},
                            {.id = 2, .mem_budget = BIG, .spb = 1},
                            {.id = 3, .mem_budget = BIG, .spb = 1}};
    st_place_result *r = res();
    uint32_t sp[2] = {1, 5};
    st_place_opts o = st_place_opts_default();
    o.split = sp;
    o.n_split = 2;
    ck_assert_int_eq(st_place(&m, w, 3, &o, r), ST_OK);
    ck_assert_uint_eq(r->n_stages, 2);
    ck_assert_uint_eq(count(r, 0), 1);
    ck_assert_uint_eq(count(r, 1), 5);
    ck_assert_int_eq(r->why[2], ST_PLACE_WHY_SPLIT);
    uint32_t sz[3] = {3, 0, 3};
    o.split = sz;
    o.n_split = 3;
    ck_assert_int_eq(st_place(&m, w, 3, &o, r), ST_OK);
    ck_assert_uint_eq(r->stages[1].rep[0], 2);
    uint32_t bad[2] = {3, 2};
    o.split = bad;
    o.n_split = 2;
    ck_assert_int_eq(st_place(&m, w, 3, &o, r), ST_EINVAL);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "sums to 5"));
    uint32_t four[4] = {1, 1, 1, 3};
    o.split = four;
    o.n_split = 4;
    ck_assert_int_eq(st_place(&m, w, 3, &o, r), ST_EBUSY);
    w[0].mem_budget = 150;
    uint32_t sb[2] = {2, 4};
    o.split = sb;
    o.n_split = 2;
    ck_assert_int_eq(st_place(&m, w, 3, &o, r), ST_ENOMEM);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "layers [0, 2)"));
    free(r);
}
END_TEST

START_TEST(infeasible_total_memory)
{
    st_place_model m = model6();
    m.embd_bytes = 30;
    m.head_bytes = 20;
    m.kv_bytes_per_token_layer = 1;
    st_place_opts o = st_place_opts_default();
    o.kv_tokens = 10; /* 60 bytes of KV */
    st_place_worker w[2] = {{.id = 1, .mem_budget = 200, .spb = 1},
                            {.id = 2, .mem_budget = 300, .spb = 1}};
    st_place_result *r = res();
    ck_assert_int_eq(st_place(&m, w, 2, &o, r), ST_ENOMEM);
    const char *d = st_errdetail();
    ck_assert_ptr_nonnull(strstr(d, "no plan: total memory 500 B of 2 workers < weights 600 B"));
    ck_assert_ptr_nonnull(strstr(d, "KV reserve 60 B (10 tokens x 6 layers)"));
    ck_assert_ptr_nonnull(strstr(d, "embedding and head 50 B"));
    /* with a spare the message says so */
    st_place_worker w3[3] = {w[0], w[1], {.id = 3, .mem_budget = 100, .spb = 1, .spare = true}};
    ck_assert_int_eq(st_place(&m, w3, 3, &o, r), ST_ENOMEM);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "600 B of 3 workers (spares included)"));
    /* GiB formatting as in the example */
    uint64_t big[2] = {(uint64_t)22 << 27, (uint64_t)22 << 27};
    st_place_model mb = {.n_layer = 2, .layer_bytes = big};
    st_place_worker wb = {.id = 1, .mem_budget = (uint64_t)31 << 26, .spb = 1};
    ck_assert_int_eq(st_place(&mb, &wb, 1, NULL, r), ST_ENOMEM);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "total memory 1.94 GiB"));
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "weights 5.50 GiB"));
    free(r);
}
END_TEST

START_TEST(infeasible_layer_and_packing)
{
    /* the total fits but layer 1 (300) fits no single worker */
    uint64_t lb[3] = {100, 300, 100};
    st_place_model m = {.n_layer = 3, .layer_bytes = lb};
    st_place_worker w[3] = {{.id = 1, .mem_budget = 250, .spb = 1},
                            {.id = 2, .mem_budget = 250, .spb = 1},
                            {.id = 7, .mem_budget = 260, .spb = 1}};
    st_place_result *r = res();
    ck_assert_int_eq(st_place(&m, w, 3, NULL, r), ST_ENOMEM);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "layer 1 alone needs 300 B"));
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "largest budget 260 B (worker 7)"));
    /* the embedding on layer 0 is what does not fit */
    uint64_t lb2[2] = {100, 100};
    st_place_model m2 = {.n_layer = 2, .layer_bytes = lb2, .embd_bytes = 200};
    st_place_worker w2[2] = {{.id = 1, .mem_budget = 250, .spb = 1},
                             {.id = 2, .mem_budget = 250, .spb = 1}};
    ck_assert_int_eq(st_place(&m2, w2, 2, NULL, r), ST_ENOMEM);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "layer 0 alone needs 300 B"));
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "+ embedding"));
    /* granularity: 3 layers of 100, two budgets of 150: total 300 fits,
     * each holds one layer, the third has nowhere to go */
    uint64_t lb3[3] = {100, 100, 100};
    st_place_model m3 = {.n_layer = 3, .layer_bytes = lb3};
    st_place_worker w3[2] = {{.id = 1, .mem_budget = 150, .spb = 1},
                             {.id = 2, .mem_budget = 160, .spb = 1}};
    ck_assert_int_eq(st_place(&m3, w3, 2, NULL, r), ST_ENOMEM);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "total memory 310 B"));
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "no assignment of contiguous layer ranges"));
    w3[1].mem_budget = 200; /* now [0, 1) + [1, 3) fits */
    ck_assert_int_eq(st_place(&m3, w3, 2, NULL, r), ST_OK);
    free(r);
}
END_TEST

START_TEST(bad_inputs)
{
    st_place_model m = model6();
    st_place_result *r = res();
    ck_assert_int_eq(st_place(&m, NULL, 0, NULL, r), ST_EINVAL);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "no workers"));
    st_place_worker w = {.id = 1, .mem_budget = BIG, .spb = 0};
    ck_assert_int_eq(st_place(&m, &w, 1, NULL, r), ST_EINVAL);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "worker 1 has time per byte 0"));
    w.spb = NAN;
    ck_assert_int_eq(st_place(&m, &w, 1, NULL, r), ST_EINVAL);
    w.spb = INFINITY;
    ck_assert_int_eq(st_place(&m, &w, 1, NULL, r), ST_EINVAL);
    w.spb = 1;
    st_place_worker two[2] = {w, w};
    ck_assert_int_eq(st_place(&m, two, 2, NULL, r), ST_EINVAL);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "appears twice"));
    st_place_model none = {.n_layer = 0, .layer_bytes = layers6};
    ck_assert_int_eq(st_place(&none, &w, 1, NULL, r), ST_EINVAL);
    st_place_opts o = st_place_opts_default();
    o.margin = 1.0;
    ck_assert_int_eq(st_place(&m, &w, 1, &o, r), ST_EINVAL);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "margin"));
    o = st_place_opts_default();
    double lat = -1, bw = 0;
    o.lat_s = &lat;
    o.bw = &bw;
    ck_assert_int_eq(st_place(&m, &w, 1, &o, r), ST_EINVAL);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "link 1 -> 1"));
    o = st_place_opts_default();
    o.act_bytes = NAN;
    ck_assert_int_eq(st_place(&m, &w, 1, &o, r), ST_EINVAL);
    o = st_place_opts_default();
    o.objective = (st_place_objective)7;
    ck_assert_int_eq(st_place(&m, &w, 1, &o, r), ST_EINVAL);
    st_place_worker many[ST_PLACE_MAX_WORKERS + 1];
    for (size_t i = 0; i <= ST_PLACE_MAX_WORKERS; i++)
        many[i] = (st_place_worker){.id = i + 1, .mem_budget = BIG, .spb = 1};
    ck_assert_int_eq(st_place(&m, many, ST_PLACE_MAX_WORKERS + 1, NULL, r), ST_EINVAL);
    st_place_objective ob;
    ck_assert_int_eq(st_place_objective_from_name("latency", &ob), ST_OK);
    ck_assert_int_eq(ob, ST_PLACE_LATENCY);
    ck_assert_int_eq(st_place_objective_from_name("fast", &ob), ST_EINVAL);
    free(r);
}
END_TEST

START_TEST(eval_checks_and_times)
{
    st_place_model m = model6();
    st_place_worker w[2] = {{.id = 1, .mem_budget = BIG, .spb = 1},
                            {.id = 2, .mem_budget = 250, .spb = 2}};
    st_place_result *r = res();
    memset(r, 0, sizeof *r);
    r->n_stages = 2;
    r->stages[0] = (st_place_stage){.first = 0, .last = 4, .n_rep = 1, .rep = {0}};
    r->stages[1] = (st_place_stage){.first = 4, .last = 6, .n_rep = 1, .rep = {1}};
    ck_assert_int_eq(st_place_eval(&m, w, 2, NULL, r), ST_OK);
    ck_assert_double_eq_tol(r->bottleneck_s, 400, 1e-9);
    ck_assert_uint_eq(r->bottleneck, 0);
    ck_assert_double_eq_tol(r->latency_s, 800, 1e-9);
    r->stages[1].first = 3;
    ck_assert_int_eq(st_place_eval(&m, w, 2, NULL, r), ST_EINVAL);
    r->stages[1] = (st_place_stage){.first = 4, .last = 6, .n_rep = 1, .rep = {0}};
    ck_assert_int_eq(st_place_eval(&m, w, 2, NULL, r), ST_EINVAL);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "twice"));
    r->stages[0] = (st_place_stage){.first = 0, .last = 3, .n_rep = 1, .rep = {1}};
    r->stages[1] = (st_place_stage){.first = 3, .last = 6, .n_rep = 1, .rep = {0}};
    ck_assert_int_eq(st_place_eval(&m, w, 2, NULL, r), ST_ENOMEM);
    r->stages[0].rep[0] = 0;
    r->n_stages = 1;
    ck_assert_int_eq(st_place_eval(&m, w, 2, NULL, r), ST_EINVAL);
    free(r);
}
END_TEST

START_TEST(calibrate_and_measure)
{
    /* two measured workers (ratios 2 and 4: median 3), one unmeasured */
    st_place_speed s[3] = {{.cap_spb = 1, .meas_spb = 2},
                           {.cap_spb = 1, .meas_spb = 4},
                           {.cap_spb = 0.5}};
    double spb[3], k;
    st_place_calibrate(s, 3, spb, &k);
    ck_assert_double_eq_tol(k, 3, 1e-12);
    ck_assert_double_eq_tol(spb[0], 2, 1e-12);
    ck_assert_double_eq_tol(spb[1], 4, 1e-12);
    ck_assert_double_eq_tol(spb[2], 1.5, 1e-12);
    st_place_speed u[1] = {{.cap_spb = 0.25}};
    st_place_calibrate(u, 1, spb, &k);
    ck_assert_double_eq_tol(k, 1, 1e-12);
    ck_assert_double_eq_tol(spb[0], 0.25, 1e-12);

    st_place_model m = model6();
    m.head_bytes = 200;
    uint32_t layer[3] = {4, 5, 3};
    double ema[3] = {1.0, 2.0, 5.0};
    uint32_t samples[3] = {30, 30, 30};
    double v;
    /* layer 4: 1 ms / 100 B; layer 5 (the last: + head): 2 ms / 300 B */
    ck_assert(st_place_measure(&m, 4, 6, layer, ema, samples, 3, 20, &v));
    ck_assert_double_eq_tol(v, 0.5 * (1e-3 / 100 + 2e-3 / 300), 1e-15);
    /* the median of three ignores the outlier (layer 3: 5 ms) */
    ck_assert(st_place_measure(&m, 3, 6, layer, ema, samples, 3, 20, &v));
    ck_assert_double_eq_tol(v, 1e-3 / 100, 1e-15);
    ck_assert(!st_place_measure(&m, 2, 5, layer, ema, samples, 3, 20, &v)); /* layer 2 missing */
    samples[0] = 19;
    ck_assert(!st_place_measure(&m, 4, 6, layer, ema, samples, 3, 20, &v));
    samples[0] = 30;
    ema[1] = NAN;
    ck_assert(!st_place_measure(&m, 4, 6, layer, ema, samples, 3, 20, &v));
}
END_TEST

START_TEST(sustained_imbalance)
{
    st_imbalance t = {0};
    uint64_t ms = 1000000;
    ck_assert(!st_imbalance_update(&t, true, 0, 1000 * ms, 3));
    ck_assert(!st_imbalance_update(&t, true, 500 * ms, 1000 * ms, 3));
    ck_assert(!st_imbalance_update(&t, true, 900 * ms, 1000 * ms, 3)); /* not long enough */
    ck_assert(st_imbalance_update(&t, true, 1000 * ms, 1000 * ms, 3));
    /* it starts over after firing, and a balanced check breaks a run */
    ck_assert(!st_imbalance_update(&t, true, 1100 * ms, 1000 * ms, 3));
    ck_assert(!st_imbalance_update(&t, true, 1600 * ms, 1000 * ms, 3));
    ck_assert(!st_imbalance_update(&t, false, 2000 * ms, 1000 * ms, 3));
    ck_assert(!st_imbalance_update(&t, true, 2200 * ms, 1000 * ms, 3));
    ck_assert(!st_imbalance_update(&t, true, 2700 * ms, 1000 * ms, 3));
    ck_assert(st_imbalance_update(&t, true, 3200 * ms, 1000 * ms, 3));
    /* enough time but too few checks */
    ck_assert(!st_imbalance_update(&t, true, 10000 * ms, 1000 * ms, 3));
    ck_assert(!st_imbalance_update(&t, true, 20000 * ms, 1000 * ms, 3));
    ck_assert(st_imbalance_update(&t, true, 20001 * ms, 1000 * ms, 3));
}
END_TEST

/* minfo on the shared synthetic model: 6 layers of equal bytes, dim 256,
 * 2 KV heads of 32 -> 512 bytes of f32 KV per token per layer. */
START_TEST(minfo_synth)
{
    const char *sh = getenv("STRATA_SHARED");
    char path[512];
    snprintf(path, sizeof path, "%s/models/synth-s-f32.gguf", sh ? sh : "../shared");
    st_gguf *g;
    ck_assert_int_eq(st_gguf_open(path, &g), ST_OK);
    st_minfo mi;
    ck_assert_int_eq(st_minfo_from_gguf(g, &mi), ST_OK);
    ck_assert_uint_eq(mi.n_layer, 6);
    ck_assert_uint_eq(mi.n_embd, 256);
    ck_assert_uint_eq(mi.n_vocab, 512);
    ck_assert_uint_eq(mi.n_ctx_train, 512);
    /* K and V of kv_dim 64 in the default cache type, f16: 2 x 64 x 2 bytes */
    ck_assert_uint_eq(mi.kv_bytes_per_token_layer, 2 * 64 * 2);
    ck_assert_str_eq(mi.dtype, "f32");
    uint64_t sum = mi.embd_bytes + mi.head_bytes;
    for (uint32_t l = 0; l < 6; l++) {
        ck_assert_uint_eq(mi.layer_bytes[l], mi.layer_bytes[0]);
        sum += mi.layer_bytes[l];
    }
    /* token_embd 512x256 f32 = 512 KiB; head = output 512x256 + norm 256 */
    ck_assert_uint_eq(mi.embd_bytes, 512u * 256 * 4);
    ck_assert_uint_eq(mi.head_bytes, 512u * 256 * 4 + 256 * 4);
    ck_assert_uint_eq(sum, mi.total_bytes);
    uint8_t id[32];
    ck_assert_int_eq(st_gguf_model_id(g, id), ST_OK);
    ck_assert_int_eq(memcmp(id, mi.model_id, 32), 0);
    st_minfo_free(&mi);
    st_gguf_close(g);
}
END_TEST

/* minfo on the shared qwen2 model: the architecture is accepted, its q/k/v
 * biases count in their layer's bytes, and the tied head holds the
 * embedding. dim 128, kv_dim 64, FFN 384, Q8_0 (34 bytes per 32 values):
 * q, o 128 rows of 136 bytes; k, v 64 rows; gate, up 384 rows; down 128
 * rows of 408; two f32 norms of 128 and f32 biases of 128 + 64 + 64. */
START_TEST(minfo_qwen2)
{
    const char *sh = getenv("STRATA_SHARED");
    char path[512];
    snprintf(path, sizeof path, "%s/models/qw2-synth-q8_0.gguf", sh ? sh : "../shared");
    st_gguf *g;
    ck_assert_int_eq(st_gguf_open(path, &g), ST_OK);
    st_minfo mi;
    ck_assert_int_eq(st_minfo_from_gguf(g, &mi), ST_OK);
    ck_assert_uint_eq(mi.n_layer, 4);
    ck_assert_uint_eq(mi.n_embd, 128);
    ck_assert_uint_eq(mi.n_head_kv, 2);
    ck_assert_uint_eq(mi.n_vocab, 151669);
    ck_assert_uint_eq(mi.kv_bytes_per_token_layer, 2 * 64 * 2); /* f16 K and V */
    ck_assert_str_eq(mi.dtype, "q8_0");
    const uint64_t mats = 2 * 128 * 136 + 2 * 64 * 136 + 2 * 384 * 136 + 128 * 408;
    const uint64_t norms = 2 * 128 * 4, biases = (128 + 64 + 64) * 4;
    for (uint32_t l = 0; l < 4; l++)
        ck_assert_uint_eq(mi.layer_bytes[l], mats + norms + biases);
    ck_assert_uint_eq(mi.embd_bytes, 151669ull * 136);
    ck_assert_uint_eq(mi.head_bytes, mi.embd_bytes + 128 * 4); /* tied + output_norm */
    ck_assert_uint_eq(mi.total_bytes, 4 * (mats + norms + biases) + mi.head_bytes);
    st_minfo_free(&mi);
    st_gguf_close(g);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("placement");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, slow_worker_gets_fewer_layers);
    tcase_add_test(tc, latency_objective_avoids_hops);
    tcase_add_test(tc, links_count);
    tcase_add_test(tc, memory_moves_layers_and_ends);
    tcase_add_test(tc, spares_gap_and_bottleneck);
    tcase_add_test(tc, replicas_after_coverage);
    tcase_add_test(tc, hysteresis);
    tcase_add_test(tc, split_override);
    tcase_add_test(tc, infeasible_total_memory);
    tcase_add_test(tc, infeasible_layer_and_packing);
    tcase_add_test(tc, bad_inputs);
    tcase_add_test(tc, eval_checks_and_times);
    tcase_add_test(tc, calibrate_and_measure);
    tcase_add_test(tc, sustained_imbalance);
    tcase_add_test(tc, minfo_synth);
    tcase_add_test(tc, minfo_qwen2);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
