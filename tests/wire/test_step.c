/* test_step.c - the STEP frame (common/wire/step.h) and the sampling parameters
 * in protobuf (common/wire/msg.h).
 *
 * Frames: a meta-only frame (coordinator to stage 0) and a forwarded one
 * (the meta bytes as received, then a packet) round trip through the
 * envelope, open and unpack, in the open, MAC and sealed modes; the unused
 * room of a packet is dropped. Bad input is refused with its code
 * and a detail, never read past its end (each case is opened from an
 * exact-size heap copy, so ASan builds see any over-read): a body shorter
 * than the meta length field, a meta length past the end, a malformed
 * StepMeta, another envelope kind, a packet larger than its room.
 * Sampling: to_pb / from_pb round trip, NULL gives the defaults, and
 * out-of-range remote values (NaN temperature, top_p 0, ...) are refused
 * naming the field. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire/msg.h"
#include "common/wire/step.h"
#include "common/wire/wire.h"

#define TS_SENDER 0x51e9
#define TS_RECEIVER 0x9e51
#define TS_KEY_BYTE 0x37
#define TS_BATCH 4242
#define TS_EPOCH 17
#define TS_PKT 1000
#define TS_PKT_USED 333
#define TS_MODES 3 /* open, MAC, sealed */

/* ts_envs - a sender and a receiver of mode (0 open, 1 MAC, 2 sealed). */
static void ts_envs(int mode, st_env *tx, st_env *rx)
{
    uint8_t key[ST_KEY_BYTES];
    memset(key, TS_KEY_BYTE, sizeof key);
    const uint8_t *k = mode > 0 ? key : NULL;
    ck_assert_int_eq(st_env_init_mode(tx, k, mode == 2, TS_SENDER), ST_OK);
    ck_assert_int_eq(st_env_init_mode(rx, k, mode == 2, TS_RECEIVER), ST_OK);
}

/* ts_meta - a StepMeta of two rows (the second samples) over the given
 * storage; hash holds ST_WIRE_PLAN_HASH_SIZE bytes. */
typedef struct ts_meta {
    Strata__StepMeta m;
    Strata__StepRow r[2];
    Strata__StepRow *rp[2];
    Strata__Sampling sp;
    uint8_t hash[ST_WIRE_PLAN_HASH_SIZE];
    int32_t tok[3];
    uint64_t rng[ST_RNG_WORDS];
} ts_meta;

static void ts_meta_init(ts_meta *t)
{
    strata__step_meta__init(&t->m);
    for (int i = 0; i < 2; i++) {
        strata__step_row__init(&t->r[i]);
        t->rp[i] = &t->r[i];
    }
    for (size_t i = 0; i < sizeof t->hash; i++)
        t->hash[i] = (uint8_t)(i * 5 + 1);
    for (int i = 0; i < 3; i++)
        t->tok[i] = 10 + i;
    for (int i = 0; i < ST_RNG_WORDS; i++)
        t->rng[i] = 0x1111111111111111ull * (uint64_t)(i + 1);
    st_sampler_params p = st_sampler_params_default();
    p.seed = 99;
    st_sampling_to_pb(&p, &t->sp);
    t->m.epoch = TS_EPOCH;
    t->m.batch_id = TS_BATCH;
    t->m.plan_hash.data = t->hash;
    t->m.plan_hash.len = sizeof t->hash;
    t->m.n_rows = 2;
    t->m.rows = t->rp;
    t->r[0].session_id = 5;
    t->r[0].n_tokens = 2;
    t->r[0].tokens = t->tok;
    t->r[1].session_id = 6;
    t->r[1].pos = 8;
    t->r[1].n_tokens = 1;
    t->r[1].tokens = t->tok + 2;
    t->r[1].sample = true;
    t->r[1].sampling = &t->sp;
    t->r[1].n_rng = ST_RNG_WORDS;
    t->r[1].rng = t->rng;
}

static void ts_check_meta(const Strata__StepMeta *m, const ts_meta *want)
{
    ck_assert_uint_eq(m->epoch, TS_EPOCH);
    ck_assert_uint_eq(m->batch_id, TS_BATCH);
    ck_assert_uint_eq(m->plan_hash.len, sizeof want->hash);
    ck_assert_mem_eq(m->plan_hash.data, want->hash, sizeof want->hash);
    ck_assert_uint_eq(m->n_rows, 2);
    ck_assert_uint_eq(m->rows[0]->n_tokens, 2);
    ck_assert_int_eq(m->rows[0]->tokens[1], 11);
    ck_assert_uint_eq(m->rows[1]->pos, 8);
    ck_assert(m->rows[1]->sample);
    ck_assert_uint_eq(m->rows[1]->n_rng, ST_RNG_WORDS);
    ck_assert_mem_eq(m->rows[1]->rng, want->rng, sizeof want->rng);
    st_sampler_params p;
    ck_assert_int_eq(st_sampling_from_pb(m->rows[1]->sampling, &p), ST_OK);
    ck_assert_uint_eq(p.seed, 99);
}

/* ts_open - opens frame msg (on an exact-size copy) with rx; on success
 * unpacks the meta into *m (the caller frees it) and copies the packet to
 * pkt (up to TS_PKT bytes), its length to *pkt_len. */
static st_err ts_open(st_env *rx, nng_msg *msg, Strata__StepMeta **m, uint8_t *pkt, size_t *pkt_len)
{
    size_t n = nng_msg_len(msg);
    uint8_t *copy = malloc(n);
    ck_assert_ptr_nonnull(copy);
    memcpy(copy, nng_msg_body(msg), n);
    st_step_parts in;
    uint64_t sender;
    *m = NULL;
    st_err e = st_step_open(rx, copy, n, &in, &sender);
    if (e == ST_OK) {
        ck_assert_uint_eq(sender, TS_SENDER);
        ck_assert(in.meta >= copy && in.pkt + in.pkt_len <= copy + n);
        ck_assert_uint_le(in.pkt_len, TS_PKT);
        memcpy(pkt, in.pkt, in.pkt_len);
        *pkt_len = in.pkt_len;
        e = st_step_meta_unpack(&in, sender, m);
    }
    free(copy);
    return e;
}

/* ts_make - a frame of t's meta in *msg: packed by st_step_pack (forward
 * false), or, as a worker forwards, the meta bytes as received and then a
 * packet of TS_PKT_USED patterned bytes written in room for TS_PKT (the
 * room left over is dropped). Returns the packet's length. */
static size_t ts_make(st_env *tx, ts_meta *t, bool forward, nng_msg **msg)
{
    if (!forward) {
        ck_assert_int_eq(st_step_pack(tx, &t->m, msg), ST_OK);
        return 0;
    }
    size_t ml = strata__step_meta__get_packed_size(&t->m);
    uint8_t *meta = malloc(ml);
    ck_assert_ptr_nonnull(meta);
    strata__step_meta__pack(&t->m, meta);
    st_step_out so;
    ck_assert_int_eq(st_step_begin(tx, meta, ml, TS_PKT, &so), ST_OK);
    free(meta);
    ck_assert_uint_eq(so.pkt_cap, TS_PKT);
    for (size_t i = 0; i < TS_PKT_USED; i++)
        so.pkt[i] = (uint8_t)(i * 3);
    ck_assert_int_eq(st_step_finish(tx, &so, TS_PKT_USED, msg), ST_OK);
    ck_assert_ptr_null(so.msg);
    return TS_PKT_USED;
}

START_TEST(test_roundtrip)
{
    for (int mode = 0; mode < TS_MODES; mode++)
        for (int forward = 0; forward < 2; forward++) {
            st_env tx, rx;
            ts_envs(mode, &tx, &rx);
            ts_meta t;
            ts_meta_init(&t);
            nng_msg *msg;
            size_t want = ts_make(&tx, &t, forward, &msg);
            size_t ml = strata__step_meta__get_packed_size(&t.m);
            ck_assert_uint_eq(nng_msg_len(msg), st_env_size(&tx, ST_STEP_LEN_BYTES + ml + want));
            Strata__StepMeta *m;
            uint8_t pkt[TS_PKT];
            size_t pl = TS_PKT;
            ck_assert_int_eq(ts_open(&rx, msg, &m, pkt, &pl), ST_OK);
            ck_assert_uint_eq(pl, want);
            for (size_t i = 0; i < pl; i++)
                ck_assert_uint_eq(pkt[i], (uint8_t)(i * 3));
            ts_check_meta(m, &t);
            st_step_meta_free(m);
            nng_msg_free(msg);
            st_env_fini(&tx);
            st_env_fini(&rx);
        }
}
END_TEST

/* ts_split - st_step_split of body[0..n) from an exact-size heap copy,
 * freed on return: p's pointers are for comparison only afterwards. */
static st_err ts_split(const uint8_t *body, size_t n, st_step_parts *p)
{
    uint8_t *copy = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(copy);
    memcpy(copy, body, n);
    st_err e = st_step_split(copy, n, p);
    if (e == ST_OK)
        ck_assert(p->meta == copy + ST_STEP_LEN_BYTES && p->pkt + p->pkt_len == copy + n);
    free(copy);
    return e;
}

START_TEST(test_truncated)
{
    const uint8_t body[] = {2, 0, 0, 0, 8, 1, 0xaa};
    st_step_parts p;
    for (size_t n = 0; n < ST_STEP_LEN_BYTES; n++) {
        ck_assert_int_eq(ts_split(body, n, &p), ST_ETRUNC);
        ck_assert_ptr_nonnull(strstr(st_errdetail(), "no meta length"));
    }
    /* the meta length field alone: an empty meta, no packet */
    const uint8_t zero[ST_STEP_LEN_BYTES] = {0};
    ck_assert_int_eq(ts_split(zero, sizeof zero, &p), ST_OK);
    ck_assert_uint_eq(p.meta_len, 0);
    ck_assert_uint_eq(p.pkt_len, 0);
    /* a meta of 2 bytes and a packet of 1 */
    ck_assert_int_eq(ts_split(body, sizeof body, &p), ST_OK);
    ck_assert_uint_eq(p.meta_len, 2);
    ck_assert_uint_eq(p.pkt_len, 1);
    ck_assert_int_eq(ts_split(body, 5, &p), ST_ETRUNC); /* 1 of its 2 meta bytes */
}
END_TEST

START_TEST(test_meta_length_past_end)
{
    const uint32_t lens[] = {5, 6, 0x100, 0x7fffffffu, 0xfffffffcu, 0xffffffffu};
    uint8_t body[8] = {0};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        for (int b = 0; b < ST_STEP_LEN_BYTES; b++)
            body[b] = (uint8_t)(lens[i] >> (8 * b));
        st_step_parts p;
        ck_assert_int_eq(ts_split(body, sizeof body, &p), ST_ETRUNC);
        ck_assert_ptr_nonnull(strstr(st_errdetail(), "in a body of 8"));
        ck_assert_ptr_null(p.meta);
    }
}
END_TEST

START_TEST(test_malformed_meta)
{
    /* field 4 (rows), length-delimited, claiming 100 bytes of 2; then a
     * field with the invalid wire type 7 */
    const uint8_t bad[][4] = {{0x22, 100, 1, 2}, {0x0f, 1, 2, 3}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        /* an exact-size heap body that outlives the unpack (p points into it) */
        uint8_t *body = malloc(ST_STEP_LEN_BYTES + 4);
        ck_assert_ptr_nonnull(body);
        const uint8_t len[ST_STEP_LEN_BYTES] = {4, 0, 0, 0};
        memcpy(body, len, sizeof len);
        memcpy(body + ST_STEP_LEN_BYTES, bad[i], 4);
        st_step_parts p;
        ck_assert_int_eq(st_step_split(body, ST_STEP_LEN_BYTES + 4, &p), ST_OK);
        Strata__StepMeta *m = (Strata__StepMeta *)&p; /* must be cleared */
        ck_assert_int_eq(st_step_meta_unpack(&p, TS_SENDER, &m), ST_EFORMAT);
        ck_assert_ptr_null(m);
        ck_assert_ptr_nonnull(strstr(st_errdetail(), "malformed StepMeta (4 bytes)"));
        free(body);
    }
    st_step_meta_free(NULL);
}
END_TEST

/* st_step_open: a control frame is not a STEP frame; a keyed receiver
 * refuses a frame with a byte changed (ST_EAUTH, as st_env_open). */
START_TEST(test_open_refusals)
{
    st_env tx, rx;
    ts_envs(1, &tx, &rx);
    uint8_t buf[ST_ENV_HDR + ST_STEP_LEN_BYTES + ST_ENV_MAC] = {0};
    ck_assert_int_eq(st_env_seal(&tx, ST_ENV_CONTROL, buf, ST_STEP_LEN_BYTES), ST_OK);
    st_step_parts p;
    uint64_t sender = 1;
    ck_assert_int_eq(st_step_open(&rx, buf, sizeof buf, &p, &sender), ST_EPROTO);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "frame of kind 1"));
    ts_meta t;
    ts_meta_init(&t);
    nng_msg *msg;
    ck_assert_int_eq(st_step_pack(&tx, &t.m, &msg), ST_OK);
    ((uint8_t *)nng_msg_body(msg))[ST_ENV_HDR + ST_STEP_LEN_BYTES] ^= 1u;
    Strata__StepMeta *m;
    uint8_t pkt[TS_PKT];
    size_t pl;
    ck_assert_int_eq(ts_open(&rx, msg, &m, pkt, &pl), ST_EAUTH);
    ck_assert_ptr_null(m);
    nng_msg_free(msg);
    st_env_fini(&tx);
    st_env_fini(&rx);
}
END_TEST

/* A packet larger than its room, and a frame larger than an envelope. */
START_TEST(test_pack_limits)
{
    st_env tx, rx;
    ts_envs(0, &tx, &rx);
    const uint8_t meta[2] = {0x08, 1};
    st_step_out so;
    ck_assert_int_eq(st_step_begin(&tx, meta, sizeof meta, TS_PKT, &so), ST_OK);
    nng_msg *msg = (nng_msg *)&so; /* must be cleared */
    ck_assert_int_eq(st_step_finish(&tx, &so, TS_PKT + 1, &msg), ST_EINVAL);
    ck_assert_ptr_null(msg);
    ck_assert_ptr_null(so.msg); /* freed */
    st_step_abort(&so);         /* a no-op now */
    ck_assert_int_eq(st_step_begin(&tx, meta, sizeof meta, ST_ENV_MAX_BODY, &so), ST_ERANGE);
    ck_assert_ptr_null(so.msg);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "would exceed"));
    ck_assert_int_eq(st_step_begin(&tx, meta, sizeof meta,
                                   ST_ENV_MAX_BODY - ST_STEP_LEN_BYTES - sizeof meta + 1, &so),
                     ST_ERANGE);
    ck_assert_int_eq(st_step_begin(&tx, meta, SIZE_MAX, 0, &so), ST_ERANGE);
    st_env_fini(&tx);
    st_env_fini(&rx);
}
END_TEST

static void ts_params_eq(const st_sampler_params *a, const st_sampler_params *b)
{
    ck_assert_float_eq(a->temp, b->temp);
    ck_assert_int_eq(a->top_k, b->top_k);
    ck_assert_float_eq(a->top_p, b->top_p);
    ck_assert_float_eq(a->min_p, b->min_p);
    ck_assert_float_eq(a->repeat_penalty, b->repeat_penalty);
    ck_assert_int_eq(a->repeat_last_n, b->repeat_last_n);
    ck_assert_uint_eq(a->seed, b->seed);
}

START_TEST(test_sampling_pb)
{
    st_sampler_params p = {.temp = 0.5f,
                           .top_k = 7,
                           .top_p = 0.9f,
                           .min_p = 0.1f,
                           .repeat_penalty = 1.1f,
                           .repeat_last_n = 32,
                           .seed = 1234567};
    Strata__Sampling pb;
    st_sampling_to_pb(&p, &pb);
    st_sampler_params q;
    ck_assert_int_eq(st_sampling_from_pb(&pb, &q), ST_OK);
    ts_params_eq(&q, &p);
    /* through the bytes a peer would send */
    size_t n = strata__sampling__get_packed_size(&pb);
    uint8_t buf[64];
    ck_assert_uint_le(n, sizeof buf);
    strata__sampling__pack(&pb, buf);
    Strata__Sampling *u = strata__sampling__unpack(NULL, n, buf);
    ck_assert_ptr_nonnull(u);
    ck_assert_int_eq(st_sampling_from_pb(u, &q), ST_OK);
    strata__sampling__free_unpacked(u, NULL);
    ts_params_eq(&q, &p);
    /* absent: the defaults */
    st_sampler_params d = st_sampler_params_default();
    ck_assert_int_eq(st_sampling_from_pb(NULL, &q), ST_OK);
    ts_params_eq(&q, &d);
}
END_TEST

START_TEST(test_sampling_pb_ranges)
{
    st_sampler_params ok = st_sampler_params_default();
    struct {
        const char *field;
        Strata__Sampling pb;
    } bad[8];
    for (size_t i = 0; i < 8; i++)
        st_sampling_to_pb(&ok, &bad[i].pb);
    bad[0].field = "temp", bad[0].pb.temp = NAN;
    bad[1].field = "temp", bad[1].pb.temp = -1.0f;
    bad[2].field = "temp", bad[2].pb.temp = INFINITY;
    bad[3].field = "top_k", bad[3].pb.top_k = -1;
    bad[4].field = "top_p", bad[4].pb.top_p = 0.0f; /* an unset field of a peer */
    bad[5].field = "min_p", bad[5].pb.min_p = NAN;
    bad[6].field = "repeat_penalty", bad[6].pb.repeat_penalty = 0.0f;
    bad[7].field = "repeat_last_n", bad[7].pb.repeat_last_n = -5;
    for (size_t i = 0; i < 8; i++) {
        st_sampler_params q;
        ck_assert_int_eq(st_sampling_from_pb(&bad[i].pb, &q), ST_EINVAL);
        ck_assert_msg(strstr(st_errdetail(), bad[i].field) != NULL, "case %zu: '%s'", i,
                      st_errdetail());
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("step");
    TCase *tc = tcase_create("frame");
    tcase_add_test(tc, test_roundtrip);
    tcase_add_test(tc, test_truncated);
    tcase_add_test(tc, test_meta_length_past_end);
    tcase_add_test(tc, test_malformed_meta);
    tcase_add_test(tc, test_open_refusals);
    tcase_add_test(tc, test_pack_limits);
    suite_add_tcase(s, tc);
    TCase *ts = tcase_create("sampling");
    tcase_add_test(ts, test_sampling_pb);
    tcase_add_test(ts, test_sampling_pb_ranges);
    suite_add_tcase(s, ts);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
