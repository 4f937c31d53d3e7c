/* test_moe.c - a mixture of experts in the coordinator's pure modules
 * (issue 36): the planner prices a token by the bytes it reads (the
 * n_expert_used of n_expert experts: st_minfo_layer_active_bytes) and a
 * stage's memory by every expert (layer_bytes); a dense model is priced
 * as before. And the per-expert load of heartbeats (experts.h): what fits
 * the model's shape is taken, anything beyond it refused by field, and
 * the status sums the workers' counts per layer. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/model/gguf.h"
#include "common/model/llama.h"
#include "coordinator/cluster/experts.h"
#include "coordinator/planner/placement.h"

#define BIG (1ull << 40)

/* A layer of 8 experts, top-2: 100 bytes of attention and router, 8 x 100
 * of experts; a token reads 100 + 2 x 100. */
#define MOE_LAYER 900u
#define MOE_ACTIVE 300u
#define MOE_HEAD 50u

static uint64_t moe_total[4] = {MOE_LAYER, MOE_LAYER, MOE_LAYER, MOE_LAYER};
static uint64_t moe_active[4] = {MOE_ACTIVE, MOE_ACTIVE, MOE_ACTIVE, MOE_ACTIVE};

START_TEST(moe_token_priced_by_active_bytes)
{
    st_place_model moe = {.n_layer = 4,
                          .layer_bytes = moe_total,
                          .active_bytes = moe_active,
                          .head_bytes = MOE_HEAD};
    st_place_model dense = moe;
    dense.active_bytes = NULL;
    st_place_worker w[1] = {{.id = 1, .mem_budget = BIG, .spb = 1e-9}};
    st_place_result *r = malloc(sizeof *r);
    ck_assert_ptr_nonnull(r);
    /* the MoE: one token costs the active bytes of 4 layers + the head */
    ck_assert_int_eq(st_place(&moe, w, 1, NULL, r), ST_OK);
    ck_assert_uint_eq(r->n_stages, 1);
    ck_assert_double_eq_tol(r->stages[0].compute_s, (4 * MOE_ACTIVE + MOE_HEAD) * 1e-9, 1e-18);
    ck_assert_double_eq_tol(r->step_s, (4 * MOE_ACTIVE + MOE_HEAD) * 1e-9, 1e-18);
    /* ... and holds every expert */
    ck_assert_uint_eq(r->stages[0].bytes, 4 * MOE_LAYER + MOE_HEAD);
    /* the same bytes without active_bytes (a dense model): every byte read */
    ck_assert_int_eq(st_place(&dense, w, 1, NULL, r), ST_OK);
    ck_assert_double_eq_tol(r->stages[0].compute_s, (4 * MOE_LAYER + MOE_HEAD) * 1e-9, 1e-18);
    ck_assert_uint_eq(r->stages[0].bytes, 4 * MOE_LAYER + MOE_HEAD);
    /* memory is every expert's: a budget of the active bytes holds nothing */
    w[0].mem_budget = 4 * MOE_ACTIVE + MOE_HEAD;
    ck_assert_int_eq(st_place(&moe, w, 1, NULL, r), ST_ENOMEM);
    free(r);
}
END_TEST

/* A worker's measured time per byte is per byte a token reads: with the
 * active bytes, 1 ms per layer of 300 active bytes is 1e-3 / 300 s/B. */
START_TEST(moe_measure_per_active_byte)
{
    st_place_model moe = {.n_layer = 4,
                          .layer_bytes = moe_total,
                          .active_bytes = moe_active,
                          .head_bytes = MOE_HEAD};
    uint32_t layer[2] = {0, 1};
    double ema[2] = {1.0, 1.0};
    uint32_t samples[2] = {10, 10};
    double spb = 0;
    ck_assert(st_place_measure(&moe, 0, 2, layer, ema, samples, 2, 5, &spb));
    ck_assert_double_eq_tol(spb, 1e-3 / MOE_ACTIVE, 1e-15);
    moe.active_bytes = NULL;
    ck_assert(st_place_measure(&moe, 0, 2, layer, ema, samples, 2, 5, &spb));
    ck_assert_double_eq_tol(spb, 1e-3 / MOE_LAYER, 1e-15);
}
END_TEST

/* Two equal workers: the dense pricing would balance by total bytes, the
 * MoE pricing balances by active bytes. Layers 0-1 are MoE (900 total, 300
 * active), 2-5 dense (300): by active bytes every layer weighs the same,
 * so the split is 3 + 3; by total bytes the MoE layers weigh 3x, so the
 * first stage takes only the two MoE layers (1800 against 1200). */
START_TEST(moe_changes_the_balance)
{
    uint64_t total[6] = {900, 900, 300, 300, 300, 300};
    uint64_t active[6] = {300, 300, 300, 300, 300, 300};
    st_place_model m = {.n_layer = 6, .layer_bytes = total, .active_bytes = active};
    st_place_worker w[2] = {{.id = 1, .mem_budget = BIG, .spb = 1},
                            {.id = 2, .mem_budget = BIG, .spb = 1}};
    st_place_result *r = malloc(sizeof *r);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(st_place(&m, w, 2, NULL, r), ST_OK);
    ck_assert_uint_eq(r->n_stages, 2);
    ck_assert_uint_eq(r->stages[0].last, 3);
    ck_assert_double_eq_tol(r->bottleneck_s, 900, 1e-9);
    m.active_bytes = NULL;
    ck_assert_int_eq(st_place(&m, w, 2, NULL, r), ST_OK);
    ck_assert_uint_eq(r->n_stages, 2);
    ck_assert_uint_eq(r->stages[0].last, 2);
    ck_assert_double_eq_tol(r->bottleneck_s, 1800, 1e-9);
    /* active bytes above a layer's bytes: refused by layer */
    active[3] = 301;
    m.active_bytes = active;
    ck_assert_int_eq(st_place(&m, w, 2, NULL, r), ST_EINVAL);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "layer 3"));
    free(r);
}
END_TEST

static void minfo_of(const char *name, st_minfo *mi)
{
    const char *sh = getenv("STRATA_SHARED");
    char path[512];
    snprintf(path, sizeof path, "%s/models/%s", sh ? sh : "../shared", name);
    st_gguf *g;
    ck_assert_int_eq(st_gguf_open(path, &g), ST_OK);
    ck_assert_int_eq(st_minfo_from_gguf(g, mi), ST_OK);
    st_gguf_close(g);
}

/* The real qwen3moe test model (8 experts, top-2): each layer's token cost
 * is its non-expert bytes + 2/8 of its expert bytes, far below its bytes;
 * the planner's compute for one worker is exactly their sum + the head's.
 * A dense model's active bytes are its layer bytes. */
START_TEST(moe_real_model)
{
    st_minfo mi;
    minfo_of("w3-qwen3moe-q8_0.gguf", &mi);
    ck_assert_uint_eq(mi.n_expert, 8);
    ck_assert_uint_eq(mi.n_expert_used, 2);
    uint64_t *act = calloc(mi.n_layer, sizeof *act);
    ck_assert_ptr_nonnull(act);
    double sum_act = (double)mi.head_bytes;
    for (uint32_t l = 0; l < mi.n_layer; l++) {
        act[l] = st_minfo_layer_active_bytes(&mi, l);
        ck_assert_uint_gt(mi.layer_expert_bytes[l], 0);
        ck_assert_uint_eq(act[l], mi.layer_bytes[l] - mi.layer_expert_bytes[l] +
                                      mi.layer_expert_bytes[l] / 4);
        ck_assert_uint_lt(act[l], mi.layer_bytes[l]);
        sum_act += (double)act[l];
    }
    st_place_model m = {.n_layer = mi.n_layer,
                        .layer_bytes = mi.layer_bytes,
                        .active_bytes = act,
                        .embd_bytes = mi.embd_bytes,
                        .head_bytes = mi.head_bytes,
                        .stage_bytes = mi.rope_bytes};
    st_place_worker w[1] = {{.id = 1, .mem_budget = BIG, .spb = 1e-9}};
    st_place_result *r = malloc(sizeof *r);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(st_place(&m, w, 1, NULL, r), ST_OK);
    ck_assert_double_eq_tol(r->stages[0].compute_s, sum_act * 1e-9, 1e-15);
    ck_assert_uint_eq(r->stages[0].bytes, st_place_stage_bytes(&m, 0, 0, mi.n_layer));
    free(r);
    free(act);
    st_minfo_free(&mi);
    minfo_of("w3-qwen3-q8_0.gguf", &mi);
    ck_assert_uint_eq(mi.n_expert, 0);
    for (uint32_t l = 0; l < mi.n_layer; l++)
        ck_assert_uint_eq(st_minfo_layer_active_bytes(&mi, l), mi.layer_bytes[l]);
    st_minfo_free(&mi);
}
END_TEST

/* ---- heartbeats' expert lists ---- */

/* hb_make - a heartbeat unpacked from the wire (as the coordinator gets
 * it) with n lists: layer[i], counts[i] of ne[i] entries (value i + k). */
static Strata__Heartbeat *hb_make(size_t n, const uint32_t *layer, const size_t *ne)
{
    Strata__Heartbeat h = STRATA__HEARTBEAT__INIT;
    Strata__ExpertLoad x[8], *xp[8];
    uint64_t t[8][16];
    ck_assert_uint_le(n, 8);
    for (size_t i = 0; i < n; i++) {
        strata__expert_load__init(&x[i]);
        x[i].layer = layer[i];
        ck_assert_uint_le(ne[i], 16);
        for (size_t k = 0; k < ne[i]; k++)
            t[i][k] = i + k;
        x[i].tokens = t[i];
        x[i].n_tokens = ne[i];
        xp[i] = &x[i];
    }
    h.experts = xp;
    h.n_experts = n;
    h.worker_id = 7;
    size_t len = strata__heartbeat__get_packed_size(&h);
    uint8_t *buf = malloc(len ? len : 1);
    ck_assert_ptr_nonnull(buf);
    strata__heartbeat__pack(&h, buf);
    Strata__Heartbeat *u = strata__heartbeat__unpack(NULL, len, buf);
    free(buf);
    ck_assert_ptr_nonnull(u);
    return u;
}

START_TEST(experts_check_shape)
{
    uint32_t layers[3] = {2, 3, 2};
    size_t ne8[3] = {8, 8, 8};
    Strata__Heartbeat *h = hb_make(2, layers, ne8);
    ck_assert_int_eq(st_experts_check(h, 4, 8), ST_OK);
    /* a dense model takes none */
    ck_assert_int_eq(st_experts_check(h, 4, 0), ST_EINVAL);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "dense"));
    /* a layer beyond the model */
    ck_assert_int_eq(st_experts_check(h, 3, 8), ST_EINVAL);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "experts[1].layer 3"));
    /* more entries than layers */
    ck_assert_int_eq(st_experts_check(h, 1, 8), ST_EINVAL);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "2 entries"));
    /* another count of experts */
    ck_assert_int_eq(st_experts_check(h, 4, 16), ST_EINVAL);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "experts[0].tokens: 8 counts"));
    /* dropped: none left, the rest of the heartbeat kept */
    st_experts_drop(h);
    ck_assert_uint_eq(h->n_experts, 0);
    ck_assert_int_eq(st_experts_check(h, 4, 0), ST_OK);
    ck_assert_uint_eq(h->worker_id, 7);
    strata__heartbeat__free_unpacked(h, NULL);
    /* a layer twice */
    h = hb_make(3, layers, ne8);
    ck_assert_int_eq(st_experts_check(h, 4, 8), ST_EINVAL);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "experts[2].layer 2: reported twice"));
    strata__heartbeat__free_unpacked(h, NULL);
}
END_TEST

START_TEST(experts_sum_over_workers)
{
    uint32_t la[2] = {0, 1}, lb[2] = {1, 2};
    size_t ne[2] = {4, 4};
    Strata__Heartbeat *a = hb_make(2, la, ne), *b = hb_make(2, lb, ne);
    const Strata__Heartbeat *hb[3] = {a, NULL, b};
    Strata__ExpertLoad **v;
    size_t n;
    ck_assert_int_eq(st_experts_sum(hb, 3, 4, 4, &v, &n), ST_OK);
    ck_assert_uint_eq(n, 3); /* layers 0, 1, 2: layer 3 has no report */
    ck_assert_uint_eq(v[0]->layer, 0);
    ck_assert_uint_eq(v[1]->layer, 1);
    ck_assert_uint_eq(v[2]->layer, 2);
    for (uint32_t k = 0; k < 4; k++) {
        ck_assert_uint_eq(v[0]->tokens[k], k);           /* a's list 0 */
        ck_assert_uint_eq(v[1]->tokens[k], (1 + k) + k); /* a's list 1 + b's list 0 */
        ck_assert_uint_eq(v[2]->tokens[k], 1 + k);       /* b's list 1 */
    }
    st_experts_sum_free(v, n);
    /* a dense model: nothing */
    ck_assert_int_eq(st_experts_sum(hb, 3, 4, 0, &v, &n), ST_OK);
    ck_assert_uint_eq(n, 0);
    ck_assert_ptr_null(v);
    strata__heartbeat__free_unpacked(a, NULL);
    strata__heartbeat__free_unpacked(b, NULL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("moe");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, moe_token_priced_by_active_bytes);
    tcase_add_test(tc, moe_measure_per_active_byte);
    tcase_add_test(tc, moe_changes_the_balance);
    tcase_add_test(tc, moe_real_model);
    tcase_add_test(tc, experts_check_shape);
    tcase_add_test(tc, experts_sum_over_workers);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
