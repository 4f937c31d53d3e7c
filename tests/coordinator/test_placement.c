/* test_placement.c - the first placement (coordinator/placement.c) and the
 * model facts it is fed (coordinator/minfo.c).
 *
 * Proportional split by speed with the largest remainder rule, memory caps
 * with water filling, the embedding and head counted on the first and last
 * stage, spares used only when needed, --split overrides, and every
 * infeasible case answered with a typed error whose detail carries the
 * numbers. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gguf.h"
#include "coordinator/minfo.h"
#include "coordinator/placement.h"

#define BIG (1ull << 40)

static uint64_t layers6[6] = {100, 100, 100, 100, 100, 100};

static st_place_model model6(void)
{
    return (st_place_model){.n_layer = 6, .layer_bytes = layers6};
}

/* counts - the layer count per input worker (0 if it has no stage). */
static void counts(const st_place_stage *st, size_t ns, size_t nw, uint32_t *out)
{
    memset(out, 0, nw * sizeof *out);
    uint32_t at = 0;
    for (size_t i = 0; i < ns; i++) {
        ck_assert_uint_eq(st[i].first, at); /* contiguous, in order */
        ck_assert_uint_gt(st[i].last, st[i].first);
        out[st[i].worker] = st[i].last - st[i].first;
        at = st[i].last;
        if (i > 0)
            ck_assert_uint_gt(st[i].worker, st[i - 1].worker); /* input order kept */
    }
}

START_TEST(proportional_to_speed)
{
    st_place_model m = model6();
    st_place_worker w[2] = {{.id = 1, .mem_budget = BIG, .speed = 1e9},
                            {.id = 2, .mem_budget = BIG, .speed = 2e9}};
    st_place_stage st[2];
    size_t ns;
    ck_assert_int_eq(st_place(&m, w, 2, NULL, st, &ns), ST_OK);
    ck_assert_uint_eq(ns, 2);
    uint32_t c[2];
    counts(st, ns, 2, c);
    ck_assert_uint_eq(c[0], 2);
    ck_assert_uint_eq(c[1], 4);
    ck_assert_uint_eq(st[1].last, 6);
}
END_TEST

START_TEST(largest_remainder_ties_to_earlier)
{
    uint64_t lb[7] = {10, 10, 10, 10, 10, 10, 10};
    st_place_model m = {.n_layer = 7, .layer_bytes = lb};
    st_place_worker w[3] = {{.id = 1, .mem_budget = BIG, .speed = 1},
                            {.id = 2, .mem_budget = BIG, .speed = 1},
                            {.id = 3, .mem_budget = BIG, .speed = 1}};
    st_place_stage st[3];
    size_t ns;
    ck_assert_int_eq(st_place(&m, w, 3, NULL, st, &ns), ST_OK);
    uint32_t c[3];
    counts(st, ns, 3, c);
    ck_assert_uint_eq(c[0], 3);
    ck_assert_uint_eq(c[1], 2);
    ck_assert_uint_eq(c[2], 2);
}
END_TEST

START_TEST(slow_worker_may_get_nothing)
{
    st_place_model m = model6();
    st_place_worker w[2] = {{.id = 1, .mem_budget = BIG, .speed = 1000},
                            {.id = 2, .mem_budget = BIG, .speed = 1}};
    st_place_stage st[2];
    size_t ns;
    ck_assert_int_eq(st_place(&m, w, 2, NULL, st, &ns), ST_OK);
    ck_assert_uint_eq(ns, 1);
    ck_assert_uint_eq(st[0].worker, 0);
    ck_assert_uint_eq(st[0].first, 0);
    ck_assert_uint_eq(st[0].last, 6);
}
END_TEST

START_TEST(memory_cap_moves_layers)
{
    /* worker 0 is fastest but holds only 2 layers (each 100 + 10 KV) */
    st_place_model m = model6();
    m.kv_bytes_per_token_layer = 1;
    m.kv_tokens = 10;
    st_place_worker w[2] = {{.id = 1, .mem_budget = 230, .speed = 10},
                            {.id = 2, .mem_budget = BIG, .speed = 1}};
    st_place_stage st[2];
    size_t ns;
    ck_assert_int_eq(st_place(&m, w, 2, NULL, st, &ns), ST_OK);
    uint32_t c[2];
    counts(st, ns, 2, c);
    ck_assert_uint_eq(c[0], 2);
    ck_assert_uint_eq(c[1], 4);
    ck_assert_uint_eq(st[0].bytes, 220);
    ck_assert_uint_le(st[0].bytes, w[0].mem_budget);
}
END_TEST

START_TEST(embedding_and_head_count)
{
    /* the first stage holds the embedding (250): worker 0 cannot hold it with
     * any layer, so worker 1 becomes the first stage */
    st_place_model m = model6();
    m.embd_bytes = 250;
    m.head_bytes = 50;
    st_place_worker w[3] = {{.id = 1, .mem_budget = 300, .speed = 1},
                            {.id = 2, .mem_budget = BIG, .speed = 1},
                            {.id = 3, .mem_budget = BIG, .speed = 1}};
    st_place_stage st[3];
    size_t ns;
    ck_assert_int_eq(st_place(&m, w, 3, NULL, st, &ns), ST_OK);
    for (size_t i = 0; i < ns; i++)
        ck_assert_uint_le(st[i].bytes, w[st[i].worker].mem_budget);
    ck_assert_uint_eq(st[0].bytes, 250 + 100u * (st[0].last - st[0].first) +
                                       (st[0].last == 6 ? 50 : 0));
    ck_assert_uint_eq(st_place_stage_bytes(&m, 0, 6), 250 + 600 + 50);
    ck_assert_uint_eq(st_place_stage_bytes(&m, 2, 4), 200);
}
END_TEST

START_TEST(infeasible_total_names_numbers)
{
    st_place_model m = model6();
    m.kv_bytes_per_token_layer = 2;
    m.kv_tokens = 5; /* 10 bytes of KV per layer */
    st_place_worker w[2] = {{.id = 1, .mem_budget = 200, .speed = 1},
                            {.id = 2, .mem_budget = 300, .speed = 1}};
    st_place_stage st[2];
    size_t ns = 99;
    ck_assert_int_eq(st_place(&m, w, 2, NULL, st, &ns), ST_ENOMEM);
    ck_assert_uint_eq(ns, 0);
    const char *d = st_errdetail();
    ck_assert_msg(strstr(d, "no plan: total memory 500 B of 2 workers") != NULL, "%s", d);
    ck_assert_msg(strstr(d, "weights 600 B") != NULL, "%s", d);
    ck_assert_msg(strstr(d, "KV reserve 60 B (5 tokens)") != NULL, "%s", d);
}
END_TEST

START_TEST(infeasible_granularity)
{
    /* enough bytes in total, but no budget holds two layers */
    uint64_t lb[3] = {100, 100, 100};
    st_place_model m = {.n_layer = 3, .layer_bytes = lb};
    st_place_worker w[2] = {{.id = 1, .mem_budget = 150, .speed = 1},
                            {.id = 2, .mem_budget = 150, .speed = 1}};
    st_place_stage st[2];
    size_t ns;
    ck_assert_int_eq(st_place(&m, w, 2, NULL, st, &ns), ST_ENOMEM);
    ck_assert_msg(strstr(st_errdetail(), "hold 2 of 3 layers") != NULL, "%s", st_errdetail());
}
END_TEST

START_TEST(spares_only_when_needed)
{
    st_place_model m = model6();
    st_place_worker w[3] = {{.id = 1, .mem_budget = BIG, .speed = 1},
                            {.id = 2, .mem_budget = BIG, .speed = 100, .spare = true},
                            {.id = 3, .mem_budget = BIG, .speed = 1}};
    st_place_stage st[3];
    size_t ns;
    ck_assert_int_eq(st_place(&m, w, 3, NULL, st, &ns), ST_OK);
    for (size_t i = 0; i < ns; i++)
        ck_assert_uint_ne(st[i].worker, 1);
    /* now the non-spares cannot hold the model: the spare is used */
    w[0].mem_budget = 200;
    w[2].mem_budget = 200;
    ck_assert_int_eq(st_place(&m, w, 3, NULL, st, &ns), ST_OK);
    uint32_t c[3];
    counts(st, ns, 3, c);
    ck_assert_uint_gt(c[1], 0);
    ck_assert_uint_eq(c[0] + c[1] + c[2], 6);
    /* only spares: they are used */
    st_place_worker s1 = {.id = 9, .mem_budget = BIG, .speed = 1, .spare = true};
    ck_assert_int_eq(st_place(&m, &s1, 1, NULL, st, &ns), ST_OK);
    ck_assert_uint_eq(ns, 1);
}
END_TEST

START_TEST(split_override)
{
    st_place_model m = model6();
    st_place_worker w[3] = {{.id = 1, .mem_budget = BIG, .speed = 1},
                            {.id = 2, .mem_budget = BIG, .speed = 1000},
                            {.id = 3, .mem_budget = BIG, .speed = 1}};
    st_place_stage st[3];
    size_t ns;
    uint32_t sp[2] = {5, 1};
    st_place_opts o = {.split = sp, .n_split = 2};
    ck_assert_int_eq(st_place(&m, w, 3, &o, st, &ns), ST_OK);
    ck_assert_uint_eq(ns, 2);
    ck_assert_uint_eq(st[0].worker, 0);
    ck_assert_uint_eq(st[0].last, 5);
    ck_assert_uint_eq(st[1].worker, 1);
    ck_assert_uint_eq(st[1].first, 5);
    ck_assert_uint_eq(st[1].last, 6);
    /* a zero entry leaves that worker out */
    uint32_t sz[3] = {3, 0, 3};
    o = (st_place_opts){.split = sz, .n_split = 3};
    ck_assert_int_eq(st_place(&m, w, 3, &o, st, &ns), ST_OK);
    ck_assert_uint_eq(ns, 2);
    ck_assert_uint_eq(st[1].worker, 2);
    /* wrong sum */
    uint32_t bad[2] = {3, 2};
    o = (st_place_opts){.split = bad, .n_split = 2};
    ck_assert_int_eq(st_place(&m, w, 3, &o, st, &ns), ST_EINVAL);
    ck_assert_msg(strstr(st_errdetail(), "sums to 5 layers; the model has 6"), "%s", st_errdetail());
    /* more entries than workers: wait for them */
    uint32_t four[4] = {3, 1, 1, 1};
    o = (st_place_opts){.split = four, .n_split = 4};
    ck_assert_int_eq(st_place(&m, w, 3, &o, st, &ns), ST_EBUSY);
    /* a split that breaks a budget */
    w[0].mem_budget = 250;
    uint32_t sb[2] = {3, 3};
    o = (st_place_opts){.split = sb, .n_split = 2};
    ck_assert_int_eq(st_place(&m, w, 3, &o, st, &ns), ST_ENOMEM);
    ck_assert_msg(strstr(st_errdetail(), "worker 1 layers [0, 3) needing 300 B > its budget 250 B"),
                  "%s", st_errdetail());
}
END_TEST

START_TEST(bad_inputs)
{
    st_place_model m = model6();
    st_place_stage st[1];
    size_t ns;
    ck_assert_int_eq(st_place(&m, NULL, 0, NULL, st, &ns), ST_EINVAL);
    st_place_worker w = {.id = 1, .mem_budget = BIG, .speed = 0};
    ck_assert_int_eq(st_place(&m, &w, 1, NULL, st, &ns), ST_EINVAL);
    w.speed = 1.0 / 0.0;
    ck_assert_int_eq(st_place(&m, &w, 1, NULL, st, &ns), ST_EINVAL);
}
END_TEST

/* Many random instances: whatever is returned covers every layer once,
 * respects every budget, and an error is only ever ENOMEM. */
START_TEST(random_instances_are_consistent)
{
    srand(12345);
    for (int it = 0; it < 2000; it++) {
        uint32_t L = 1 + (uint32_t)(rand() % 16);
        uint64_t lb[16];
        for (uint32_t l = 0; l < L; l++)
            lb[l] = 50 + (uint64_t)(rand() % 100);
        st_place_model m = {.n_layer = L, .layer_bytes = lb, .embd_bytes = (uint64_t)(rand() % 200),
                            .head_bytes = (uint64_t)(rand() % 200),
                            .kv_bytes_per_token_layer = (uint64_t)(rand() % 3),
                            .kv_tokens = (uint64_t)(rand() % 10)};
        size_t n = 1 + (size_t)(rand() % 6);
        st_place_worker w[6];
        for (size_t i = 0; i < n; i++)
            w[i] = (st_place_worker){.id = i + 1, .mem_budget = 100 + (uint64_t)(rand() % 1500),
                                     .speed = 1 + rand() % 10, .spare = rand() % 5 == 0};
        st_place_stage st[6];
        size_t ns;
        st_err e = st_place(&m, w, n, NULL, st, &ns);
        if (e != ST_OK) {
            ck_assert_int_eq(e, ST_ENOMEM);
            continue;
        }
        uint32_t at = 0;
        for (size_t i = 0; i < ns; i++) {
            ck_assert_uint_eq(st[i].first, at);
            at = st[i].last;
            ck_assert_uint_le(st_place_stage_bytes(&m, st[i].first, st[i].last),
                              w[st[i].worker].mem_budget);
        }
        ck_assert_uint_eq(at, L);
    }
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
    ck_assert_uint_eq(mi.kv_bytes_per_token_layer, 512);
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

int main(void)
{
    Suite *s = suite_create("placement");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, proportional_to_speed);
    tcase_add_test(tc, largest_remainder_ties_to_earlier);
    tcase_add_test(tc, slow_worker_may_get_nothing);
    tcase_add_test(tc, memory_cap_moves_layers);
    tcase_add_test(tc, embedding_and_head_count);
    tcase_add_test(tc, infeasible_total_names_numbers);
    tcase_add_test(tc, infeasible_granularity);
    tcase_add_test(tc, spares_only_when_needed);
    tcase_add_test(tc, split_override);
    tcase_add_test(tc, bad_inputs);
    tcase_add_test(tc, random_instances_are_consistent);
    tcase_add_test(tc, minfo_synth);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
