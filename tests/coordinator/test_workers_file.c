/* test_workers_file.c - the workers file of `strata plan --dry-run
 * --workers` (coordinator/planner/workers_file.c) and planner results as
 * PlanProposal messages (coordinator/planner/planner_pb.c).
 *
 * The documented example parses to the documented values; the planner
 * inputs derived from it (time per byte, link matrices, activation bytes)
 * follow the documented rules; every malformed field is refused with an
 * error naming it; a proposal carries the planner's stages, times in ms
 * and the reasons of the workers left out. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/units.h"
#include "coordinator/planner/planner_pb.h"
#include "coordinator/planner/workers_file.h"

static const char *EXAMPLE =
    "{\n"
    "  \"model_facts\": {\"n_layer\": 4, \"layer_bytes\": \"1M\", \"embd_bytes\": 1000,\n"
    "                  \"head_bytes\": 2000, \"kv_bytes_per_token_layer\": 16, \"hidden\": 128,\n"
    "                  \"dtype\": \"q8_0\"},\n"
    "  \"objective\": \"latency\", \"ctx\": 256, \"sessions\": 4, \"wire\": \"f32\",\n"
    "  \"margin\": 0.2, \"link\": {\"latency_ms\": 0.5, \"bandwidth\": 1e8},\n"
    "  \"workers\": [\n"
    "    {\"name\": \"desk\", \"id\": 7, \"memory\": \"4G\", \"speeds\": {\"q8_0\": 2e10, "
    "\"f32\": 1e10}, \"stage\": [0, 2]},\n"
    "    {\"name\": \"old\", \"memory\": 3145728, \"bytes_per_s\": 5e9, \"throttle\": 2,\n"
    "     \"link\": {\"latency_ms\": 2, \"bandwidth\": 1e7}, \"stage\": [2, 4]},\n"
    "    {\"name\": \"spare\", \"memory\": \"1.5G\", \"bytes_per_s\": 4e9, \"spare\": true}\n"
    "  ],\n"
    "  \"links\": [{\"from\": \"desk\", \"to\": \"spare\", \"latency_ms\": 0.05}]\n"
    "}\n";

START_TEST(example_parses)
{
    st_wfile f;
    ck_assert_int_eq(st_wfile_parse(EXAMPLE, strlen(EXAMPLE), &f), ST_OK);
    ck_assert(f.has_facts);
    ck_assert_uint_eq(f.n_layer, 4);
    for (uint32_t l = 0; l < 4; l++)
        ck_assert_uint_eq(f.layer_bytes[l], 1u << 20);
    ck_assert_uint_eq(f.head_bytes, 2000);
    ck_assert_uint_eq(f.hidden, 128);
    ck_assert_str_eq(f.dtype, "q8_0");
    ck_assert(f.objective_set);
    ck_assert_int_eq(f.objective, ST_PLACE_LATENCY);
    ck_assert_uint_eq(f.ctx, 256);
    ck_assert_uint_eq(f.sessions, 4);
    ck_assert_double_eq(f.margin, 0.2);
    ck_assert_uint_eq(f.n, 3);
    ck_assert_str_eq(f.w[0].name, "desk");
    ck_assert_uint_eq(f.w[0].id, 7);
    ck_assert_uint_eq(f.w[0].memory, 4ull << 30);
    ck_assert_uint_eq(f.w[1].id, 2); /* index + 1 when absent */
    ck_assert_uint_eq(f.w[2].memory, 3ull << 29);
    ck_assert(f.w[2].spare);
    ck_assert(f.w[1].has_stage);

    st_place_worker w[3];
    double lat[9], bw[9], act;
    ck_assert_int_eq(st_wfile_inputs(&f, 4, "q8_0", 128, w, lat, bw, &act), ST_OK);
    ck_assert_double_eq_tol(act, 512, 1e-12); /* f32 wire */
    ck_assert_double_eq_tol(w[0].spb, 1 / 2e10, 1e-20);
    ck_assert_double_eq_tol(w[1].spb, 2 / 5e9, 1e-20);       /* throttle over bytes_per_s */
    ck_assert_double_eq_tol(lat[0 * 3 + 1], 2.5e-3, 1e-12);  /* 0.5 + 2 ms */
    ck_assert_double_eq_tol(bw[0 * 3 + 1], 1e7, 1e-3);       /* the smaller */
    ck_assert_double_eq_tol(lat[0 * 3 + 2], 0.05e-3, 1e-12); /* an explicit link, both ways */
    ck_assert_double_eq_tol(lat[2 * 3 + 0], 0.05e-3, 1e-12);
    ck_assert_double_eq(bw[2 * 3 + 0], 0); /* unlimited */
    ck_assert_double_eq_tol(lat[1 * 3 + 2], 2.5e-3, 1e-12);
    ck_assert(w[0].has_stage && w[0].cur_first == 0 && w[0].cur_last == 2);
    ck_assert_int_eq(st_wfile_inputs(&f, 3, "q8_0", 128, w, lat, bw, &act), ST_EINVAL);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "workers[1].stage [2, 4)"));
    st_wfile_free(&f);
}
END_TEST

START_TEST(proposal_of_a_plan)
{
    st_wfile f;
    ck_assert_int_eq(st_wfile_parse(EXAMPLE, strlen(EXAMPLE), &f), ST_OK);
    st_place_worker w[3];
    double lat[9], bw[9];
    st_place_opts o = st_place_opts_default();
    ck_assert_int_eq(st_wfile_inputs(&f, 4, "q8_0", 128, w, lat, bw, &o.act_bytes), ST_OK);
    o.objective = ST_PLACE_THROUGHPUT;
    o.kv_tokens = (uint64_t)f.ctx * f.sessions;
    o.lat_s = lat;
    o.bw = bw;
    o.margin = f.margin;
    st_place_model m = {.n_layer = f.n_layer,
                        .layer_bytes = f.layer_bytes,
                        .embd_bytes = f.embd_bytes,
                        .head_bytes = f.head_bytes,
                        .kv_bytes_per_token_layer = f.kv_bytes_per_token_layer};
    st_place_result *r = malloc(sizeof *r);
    ck_assert_int_eq(st_place(&m, w, 3, &o, r), ST_OK);
    /* "old" holds 2 layers at most (3 MiB) and is 8x slower; the spare is
     * 5x slower: the desk takes everything */
    ck_assert_uint_eq(r->n_stages, 1);
    ck_assert_uint_eq(r->stages[0].rep[0], 0);
    ck_assert(r->has_current);
    st_pp_worker pw[4];
    for (size_t i = 0; i < 3; i++)
        pw[i] = (st_pp_worker){.id = f.w[i].id,
                               .name = f.w[i].name,
                               .input = (int)i,
                               .source = "file",
                               .mem_budget = f.w[i].memory,
                               .spare = f.w[i].spare};
    pw[3] = (st_pp_worker){.id = 99, .name = "gone", .input = -1, .reason = "draining"};
    Strata__PlanProposal *p;
    ck_assert_int_eq(st_place_proposal(r, w, 3, pw, 4, 5, 4, 1.5, "hello", &p), ST_OK);
    ck_assert_str_eq(p->objective, "throughput");
    ck_assert_uint_eq(p->n_stages, 1);
    ck_assert_uint_eq(p->stages[0]->n_worker_ids, 1);
    ck_assert_uint_eq(p->stages[0]->worker_ids[0], 7);
    ck_assert_double_eq_tol(p->step_ms, r->step_s * 1e3, 1e-12);
    ck_assert_double_eq_tol(p->stages[0]->compute_ms, (4.0 * (1 << 20) + 2000) / 2e10 * 1e3, 1e-12);
    ck_assert_uint_eq(p->n_workers, 4);
    ck_assert_str_eq(p->workers[0]->left_out, "");
    ck_assert_ptr_nonnull(strstr(p->workers[1]->left_out, "not needed"));
    ck_assert_ptr_nonnull(strstr(p->workers[2]->left_out, "spare"));
    ck_assert_str_eq(p->workers[3]->left_out, "draining");
    ck_assert_str_eq(p->workers[3]->source, "");
    ck_assert_str_eq(p->note, "hello");
    ck_assert_uint_eq(p->epoch, 5);
    ck_assert_double_eq(p->calibration, 1.5);
    /* it packs (every string set) */
    Strata__Msg msg = STRATA__MSG__INIT;
    msg.body_case = STRATA__MSG__BODY_PLAN_PROPOSAL;
    msg.plan_proposal = p;
    ck_assert_uint_gt(strata__msg__get_packed_size(&msg), 0);
    st_place_proposal_free(p);
    free(r);
    st_wfile_free(&f);
}
END_TEST

/* each bad file with the text its error must contain */
static const char *const BAD[][2] = {
    {"[1, 2", "not valid JSON"},
    {"[]", "not a JSON object"},
    {"{\"workers\": []}", "an array of 1..256 workers"},
    {"{\"worker\": []}", "unknown key 'worker'"},
    {"{\"workers\": [{\"name\": \"a\"}]}", "workers[0].memory is required"},
    {"{\"workers\": [{\"memory\": \"12Q\"}]}", "workers[0].memory: '12Q'"},
    {"{\"workers\": [{\"memory\": -1}]}", "workers[0].memory = -1"},
    {"{\"workers\": [{\"memory\": 1, \"spead\": 1}]}", "workers[0]: unknown key 'spead'"},
    {"{\"workers\": [{\"memory\": 1, \"speeds\": {\"f32\": \"fast\"}}]}", "workers[0].speeds.f32"},
    {"{\"workers\": [{\"memory\": 1, \"throttle\": 0.5}]}", "workers[0].throttle = 0.5"},
    {"{\"workers\": [{\"memory\": 1, \"stage\": [3, 2]}]}", "workers[0].stage"},
    {"{\"workers\": [{\"memory\": 1, \"spare\": 1}]}", "workers[0].spare: not true or false"},
    {"{\"workers\": [{\"memory\": 1, \"link\": {\"latency\": 1}}]}",
     "workers[0].link: unknown key 'latency'"},
    {"{\"workers\": [{\"memory\": 1, \"name\": \"a\"}, {\"memory\": 1, \"name\": \"a\"}]}",
     "repeats workers[0]'s"},
    {"{\"workers\": [{\"memory\": 1, \"name\": \"a\"}], \"links\": [{\"from\": \"a\", \"to\": "
     "\"b\", \"latency_ms\": 1}]}",
     "links[0]: from 'a' to 'b' must name two workers"},
    {"{\"workers\": [{\"memory\": 1}], \"margin\": 1}", "margin = 1"},
    {"{\"workers\": [{\"memory\": 1}], \"objective\": \"speed\"}", "objective: 'speed'"},
    {"{\"workers\": [{\"memory\": 1}], \"model_facts\": {\"n_layer\": 2}}",
     "model_facts.hidden is required"},
    {"{\"workers\": [{\"memory\": 1}], \"model_facts\": {\"n_layer\": 2, \"hidden\": 8, "
     "\"layer_bytes\": [1, 2, 3]}}",
     "layer_bytes has 3 entries; n_layer is 2"},
    {"{\"workers\": [{\"memory\": 1}], \"ctx\": 1.5}", "ctx = 1.5"},
};

START_TEST(bad_files_name_the_field)
{
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        st_wfile f;
        st_err e = st_wfile_parse(BAD[i][0], strlen(BAD[i][0]), &f);
        ck_assert_msg(e != ST_OK, "case %zu parsed", i);
        ck_assert_msg(strstr(st_errdetail(), BAD[i][1]) != NULL, "case %zu: '%s' lacks '%s'", i,
                      st_errdetail(), BAD[i][1]);
        st_wfile_free(&f);
    }
    /* a worker without a speed for the model's dtype */
    const char *t =
        "{\"workers\": [{\"memory\": 1, \"speeds\": {\"f32\": 1e9}}], \"wire\": \"f16\"}";
    st_wfile f;
    ck_assert_int_eq(st_wfile_parse(t, strlen(t), &f), ST_OK);
    st_place_worker w[1];
    double lat[1], bw[1], act;
    ck_assert_int_eq(st_wfile_inputs(&f, 2, "q4_0", 64, w, lat, bw, &act), ST_EINVAL);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "no speed for the model's dtype q4_0"));
    ck_assert_int_eq(st_wfile_inputs(&f, 2, "f32", 64, w, lat, bw, &act), ST_OK);
    ck_assert_double_eq(act, 128); /* f16 */
    st_wfile_free(&f);
}
END_TEST

START_TEST(byte_counts)
{
    uint64_t v;
    ck_assert_int_eq(st_parse_bytes("123", &v), ST_OK);
    ck_assert_uint_eq(v, 123);
    ck_assert_int_eq(st_parse_bytes("16G", &v), ST_OK);
    ck_assert_uint_eq(v, 16ull << 30);
    ck_assert_int_eq(st_parse_bytes("1.5T", &v), ST_OK);
    ck_assert_uint_eq(v, 3ull << 39);
    ck_assert_int_eq(st_parse_bytes("4k", &v), ST_OK);
    ck_assert_uint_eq(v, 4096);
    ck_assert_int_eq(st_parse_bytes("", &v), ST_EINVAL);
    ck_assert_int_eq(st_parse_bytes("-1", &v), ST_EINVAL);
    ck_assert_int_eq(st_parse_bytes("5GB", &v), ST_EINVAL);
    ck_assert_int_eq(st_parse_bytes("1e30", &v), ST_EINVAL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("workers_file");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, example_parses);
    tcase_add_test(tc, proposal_of_a_plan);
    tcase_add_test(tc, bad_files_name_the_field);
    tcase_add_test(tc, byte_counts);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
