/* test_pbuf_budget.c - decoding received protobuf within a budget
 * (common/wire/pbuf_budget.h) and the checks built on it: the list limits of a
 * Msg (common/wire/msg.c), the row limit and size of a StepMeta and the receive
 * limit of a data socket (common/wire/step.c), replies refused before packing
 * (st_msg_pack_max).
 *
 * The budget: its formula at the edges, the allocator refusing the
 * allocation that would pass it (and every later one), a bomb of one
 * scalar repeated (well-formed: protobuf-c alone decodes it) refused with
 * ST_ERANGE naming the budget, while legitimate large messages (8 MiB of
 * logits, a full batch of 4096 sampling rows, or of 4096 minimal rows)
 * decode. The counter: nested
 * paths, merged occurrences, malformed bytes, bad depths. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire/msg.h"
#include "common/wire/pbuf_budget.h"
#include "common/wire/step.h"
#include "common/wire/wire.h"

#define TB_SENDER 0x7b
#define TB_MIB ((size_t)1 << 20)
#define TB_SMALL_LIMIT 1000
#define TB_BOMB_N 1000000    /* occurrences of StepMeta.batch_id in the scalar bomb */
#define TB_LOGITS (2u << 20) /* floats of the large PollReply: 8 MiB */
#define TB_HISTORY 64        /* ids of repetition history per row */
#define TB_RNG_WORDS 4
#define TB_HIDDEN 256
#define TB_MAX_TOKENS 16384
#define TB_F_BATCH 3 /* StepMeta.batch_id */
#define TB_WT_VARINT 0
#define TB_TIMEOUT_S 60

/* tb_pack_msg - m packed (malloc); *len its size. */
static uint8_t *tb_pack_msg(const Strata__Msg *m, size_t *len)
{
    *len = strata__msg__get_packed_size(m);
    uint8_t *buf = malloc(*len ? *len : 1);
    ck_assert_ptr_nonnull(buf);
    strata__msg__pack(m, buf);
    return buf;
}

/* tb_pack_join - a Msg{join{cap{kernels[0..n)}}} packed (malloc). */
static uint8_t *tb_pack_join(char **kernels, size_t n, size_t *len)
{
    Strata__Capability cap = STRATA__CAPABILITY__INIT;
    cap.n_kernels = n;
    cap.kernels = kernels;
    Strata__Join j = STRATA__JOIN__INIT;
    j.cap = &cap;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_JOIN;
    m.join = &j;
    return tb_pack_msg(&m, len);
}

START_TEST(test_limit)
{
    ck_assert_uint_eq(st_pb_budget_limit(0), ST_PB_BUDGET_SLACK);
    ck_assert_uint_eq(st_pb_budget_limit(1000),
                      1000 + ST_PB_BUDGET_FACTOR * 1000 + ST_PB_BUDGET_SLACK);
    ck_assert_uint_eq(st_pb_budget_limit(TB_MIB), TB_MIB + ST_PB_BUDGET_EXTRA_MAX);
    ck_assert_uint_eq(st_pb_budget_limit(64 * TB_MIB), 64 * TB_MIB + ST_PB_BUDGET_EXTRA_MAX);
    ck_assert_uint_eq(st_pb_budget_limit(SIZE_MAX - 1), SIZE_MAX);
}
END_TEST

START_TEST(test_allocator)
{
    st_pb_budget b;
    st_pb_budget_init(&b, TB_SMALL_LIMIT);
    void *p = b.pa.alloc(b.pa.allocator_data, TB_SMALL_LIMIT / 2);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_eq(b.used, TB_SMALL_LIMIT / 2 + ST_PB_ALLOC_OVERHEAD);
    ck_assert(!st_pb_budget_exceeded(&b));
    ck_assert_ptr_null(b.pa.alloc(b.pa.allocator_data, TB_SMALL_LIMIT / 2));
    ck_assert(st_pb_budget_exceeded(&b));
    ck_assert_uint_eq(b.refused, TB_SMALL_LIMIT / 2 + ST_PB_ALLOC_OVERHEAD);
    ck_assert_ptr_null(b.pa.alloc(b.pa.allocator_data, 1)); /* refused ever after */
    ck_assert_ptr_null(b.pa.alloc(b.pa.allocator_data, SIZE_MAX));
    b.pa.free(b.pa.allocator_data, p);
}
END_TEST

START_TEST(test_scalar_bomb)
{
    /* StepMeta.batch_id = 1, TB_BOMB_N times: 2 bytes each, one 32-byte
     * scratch record each inside protobuf-c */
    size_t len = 2 * (size_t)TB_BOMB_N;
    uint8_t *buf = malloc(len);
    ck_assert_ptr_nonnull(buf);
    for (size_t i = 0; i < TB_BOMB_N; i++) {
        buf[2 * i] = (uint8_t)(TB_F_BATCH << 3 | TB_WT_VARINT);
        buf[2 * i + 1] = 1;
    }
    Strata__StepMeta *plain = strata__step_meta__unpack(NULL, len, buf);
    ck_assert_ptr_nonnull(plain); /* well-formed: only the budget refuses it */
    ck_assert_uint_eq(plain->batch_id, 1);
    strata__step_meta__free_unpacked(plain, NULL);
    ProtobufCMessage *m = (ProtobufCMessage *)buf;
    ck_assert_int_eq(st_pb_unpack(&strata__step_meta__descriptor, buf, len, "StepMeta", TB_SENDER,
                                  &m),
                     ST_ERANGE);
    ck_assert_ptr_null(m);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "StepMeta of 2000000 bytes from sender 123 "
                                                 "would decode to more than its budget"));
    st_step_parts p = {.meta = buf, .meta_len = len};
    Strata__StepMeta *sm = (Strata__StepMeta *)buf;
    ck_assert_int_eq(st_step_meta_unpack(&p, TB_SENDER, &sm), ST_ERANGE);
    ck_assert_ptr_null(sm);
    free(buf);
}
END_TEST

START_TEST(test_legit_large)
{
    /* 8 MiB of logits in a PollReply: decodes to about its own size */
    float *logits = calloc(TB_LOGITS, sizeof *logits);
    ck_assert_ptr_nonnull(logits);
    Strata__PollReply pr = STRATA__POLL_REPLY__INIT;
    pr.n_logits = TB_LOGITS;
    pr.logits = logits;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_POLL_REPLY;
    m.poll_reply = &pr;
    size_t len;
    uint8_t *buf = tb_pack_msg(&m, &len);
    Strata__Msg *out;
    ck_assert_int_eq(st_msg_decode(buf, len, TB_SENDER, &out), ST_OK);
    ck_assert_uint_eq(out->poll_reply->n_logits, TB_LOGITS);
    st_msg_free(out);
    free(buf);
    free(logits);
    /* a full batch: ST_WIRE_MAX_ROWS sampling rows with rng and history */
    Strata__StepRow *rows = calloc(ST_WIRE_MAX_ROWS, sizeof *rows);
    Strata__StepRow **rp = calloc(ST_WIRE_MAX_ROWS, sizeof *rp);
    Strata__Sampling smp = STRATA__SAMPLING__INIT;
    uint64_t rng[TB_RNG_WORDS] = {~0ull, ~0ull, ~0ull, ~0ull};
    int32_t hist[TB_HISTORY], tok = 100000;
    for (int i = 0; i < TB_HISTORY; i++)
        hist[i] = 100000 + i;
    ck_assert(rows != NULL && rp != NULL);
    for (size_t i = 0; i < ST_WIRE_MAX_ROWS; i++) {
        strata__step_row__init(&rows[i]);
        rows[i].session_id = ~0ull - i;
        rows[i].n_tokens = 1;
        rows[i].tokens = &tok;
        rows[i].sample = true;
        rows[i].sampling = &smp;
        rows[i].n_rng = TB_RNG_WORDS;
        rows[i].rng = rng;
        rows[i].n_history = TB_HISTORY;
        rows[i].history = hist;
        rp[i] = &rows[i];
    }
    Strata__StepMeta meta = STRATA__STEP_META__INIT;
    meta.n_rows = ST_WIRE_MAX_ROWS;
    meta.rows = rp;
    len = strata__step_meta__get_packed_size(&meta);
    buf = malloc(len);
    ck_assert_ptr_nonnull(buf);
    strata__step_meta__pack(&meta, buf);
    st_step_parts p = {.meta = buf, .meta_len = len};
    Strata__StepMeta *sm;
    ck_assert_int_eq(st_step_meta_unpack(&p, TB_SENDER, &sm), ST_OK);
    ck_assert_uint_eq(sm->n_rows, ST_WIRE_MAX_ROWS);
    st_step_meta_free(sm);
    free(buf);
    /* the same batch of minimal rows: one token, no sampling */
    for (size_t i = 0; i < ST_WIRE_MAX_ROWS; i++) {
        strata__step_row__init(&rows[i]);
        rows[i].session_id = i + 1;
        rows[i].n_tokens = 1;
        rows[i].tokens = &tok;
    }
    len = strata__step_meta__get_packed_size(&meta);
    buf = malloc(len);
    ck_assert_ptr_nonnull(buf);
    strata__step_meta__pack(&meta, buf);
    p.meta = buf;
    p.meta_len = len;
    ck_assert_int_eq(st_step_meta_unpack(&p, TB_SENDER, &sm), ST_OK);
    ck_assert_uint_eq(sm->n_rows, ST_WIRE_MAX_ROWS);
    st_step_meta_free(sm);
    free(buf);
    free(rows);
    free(rp);
}
END_TEST

START_TEST(test_count)
{
    /* Msg{join{cap{kernels x3}}} twice: protobuf merges the two joins */
    char *k[3] = {"a", "b", "c"};
    size_t len;
    uint8_t *one = tb_pack_join(k, 3, &len);
    uint8_t *two = malloc(2 * len);
    ck_assert_ptr_nonnull(two);
    memcpy(two, one, len);
    memcpy(two + len, one, len);
    const uint32_t path[] = {1, 2, 6}, top[] = {1}, other[] = {3, 7};
    size_t n = 99;
    ck_assert_int_eq(st_pb_count(one, len, path, 3, &n), ST_OK);
    ck_assert_uint_eq(n, 3);
    ck_assert_int_eq(st_pb_count(two, 2 * len, path, 3, &n), ST_OK);
    ck_assert_uint_eq(n, 6);
    ck_assert_int_eq(st_pb_count(two, 2 * len, top, 1, &n), ST_OK);
    ck_assert_uint_eq(n, 2);
    ck_assert_int_eq(st_pb_count(two, 2 * len, other, 2, &n), ST_OK);
    ck_assert_uint_eq(n, 0);
    ck_assert_int_eq(st_pb_count(one, len - 1, path, 3, &n), ST_EFORMAT); /* cut short */
    ck_assert_int_eq(st_pb_count(one, len, path, 0, &n), ST_EINVAL);
    ck_assert_int_eq(st_pb_count(one, len, path, ST_PB_MAX_DEPTH + 1, &n), ST_EINVAL);
    const uint8_t group[] = {0x0b}; /* field 1, wire type 3 (a group) */
    ck_assert_int_eq(st_pb_count(group, sizeof group, top, 1, &n), ST_EFORMAT);
    const uint8_t long_varint[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff,
                                   0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    ck_assert_int_eq(st_pb_count(long_varint, sizeof long_varint, top, 1, &n), ST_EFORMAT);
    free(one);
    free(two);
}
END_TEST

START_TEST(test_msg_lists)
{
    char *k[ST_MSG_MAX_NAMES + 1];
    for (size_t i = 0; i <= ST_MSG_MAX_NAMES; i++)
        k[i] = "ref";
    for (size_t n = ST_MSG_MAX_NAMES; n <= ST_MSG_MAX_NAMES + 1; n++) {
        size_t len;
        uint8_t *buf = tb_pack_join(k, n, &len);
        Strata__Msg *out = (Strata__Msg *)buf;
        st_err e = st_msg_decode(buf, len, TB_SENDER, &out);
        if (n == ST_MSG_MAX_NAMES) {
            ck_assert_int_eq(e, ST_OK);
            st_msg_free(out);
        } else {
            ck_assert_int_eq(e, ST_ERANGE);
            ck_assert_ptr_null(out);
            ck_assert_ptr_nonnull(strstr(st_errdetail(), "Join capability kernels: 65"));
        }
        free(buf);
    }
    const uint8_t empty[] = {0};
    Strata__Msg *out;
    ck_assert_int_eq(st_msg_decode(empty, 0, TB_SENDER, &out), ST_EFORMAT); /* no body */
    ck_assert_int_eq(st_msg_decode(empty, 1, TB_SENDER, &out), ST_EFORMAT); /* field 0 */
}
END_TEST

START_TEST(test_step_limits)
{
    /* ST_WIRE_MAX_ROWS + 1 empty rows: refused by the count */
    size_t n = ST_WIRE_MAX_ROWS + 1, len = 2 * n;
    uint8_t *buf = malloc(ST_STEP_META_MAX + 1);
    ck_assert_ptr_nonnull(buf);
    for (size_t i = 0; i < n; i++) {
        buf[2 * i] = 0x22; /* field 4 (rows), length-delimited */
        buf[2 * i + 1] = 0;
    }
    st_step_parts p = {.meta = buf, .meta_len = len};
    Strata__StepMeta *sm;
    ck_assert_int_eq(st_step_meta_unpack(&p, TB_SENDER, &sm), ST_ERANGE);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "has 4097 rows; at most 4096"));
    p.meta_len = len - 2;
    ck_assert_int_eq(st_step_meta_unpack(&p, TB_SENDER, &sm), ST_OK);
    ck_assert_uint_eq(sm->n_rows, ST_WIRE_MAX_ROWS);
    st_step_meta_free(sm);
    memset(buf, 0, ST_STEP_META_MAX + 1);
    p.meta_len = ST_STEP_META_MAX + 1;
    ck_assert_int_eq(st_step_meta_unpack(&p, TB_SENDER, &sm), ST_ERANGE);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "StepMeta of 8388609 bytes"));
    free(buf);
}
END_TEST

START_TEST(test_max_frame)
{
    size_t f = 0;
    ck_assert_int_eq(st_step_max_frame(TB_HIDDEN, TB_MAX_TOKENS, &f), ST_OK);
    size_t payload = (size_t)TB_HIDDEN * TB_MAX_TOKENS * sizeof(float);
    ck_assert_uint_ge(f, payload + ST_STEP_META_MAX);
    ck_assert_uint_le(f, payload + ST_STEP_META_MAX + TB_MIB); /* headers, rows, zstd bound */
    ck_assert_int_eq(st_step_max_frame(0, TB_MAX_TOKENS, &f), ST_ERANGE);
    ck_assert_uint_eq(f, 0);
    ck_assert_int_eq(st_step_max_frame(TB_HIDDEN, 0, &f), ST_ERANGE);
    ck_assert_int_eq(st_step_max_frame(ST_WIRE_MAX_HIDDEN, TB_MAX_TOKENS, &f), ST_ERANGE);
}
END_TEST

START_TEST(test_pack_max)
{
    st_env env;
    ck_assert_int_eq(st_env_init(&env, NULL, TB_SENDER), ST_OK);
    Strata__Error er = STRATA__ERROR__INIT;
    char text[64];
    memset(text, 'x', sizeof text - 1);
    text[sizeof text - 1] = '\0';
    er.message = text;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_ERROR;
    m.error = &er;
    size_t body = strata__msg__get_packed_size(&m);
    nng_msg *out = (nng_msg *)&env;
    ck_assert_int_eq(st_msg_pack_max(&env, ST_ENV_CONTROL, &m, st_env_size(&env, body) - 1, &out),
                     ST_ERANGE);
    ck_assert_ptr_null(out);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "error of"));
    ck_assert_int_eq(st_msg_pack_max(&env, ST_ENV_CONTROL, &m, st_env_size(&env, body), &out),
                     ST_OK);
    nng_msg_free(out);
    st_env_fini(&env);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("pbuf_budget");
    TCase *tc = tcase_create("budget");
    tcase_add_test(tc, test_limit);
    tcase_add_test(tc, test_allocator);
    tcase_add_test(tc, test_scalar_bomb);
    tcase_add_test(tc, test_legit_large);
    tcase_add_test(tc, test_count);
    tcase_add_test(tc, test_msg_lists);
    tcase_add_test(tc, test_step_limits);
    tcase_add_test(tc, test_max_frame);
    tcase_add_test(tc, test_pack_max);
    tcase_set_timeout(tc, TB_TIMEOUT_S);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
