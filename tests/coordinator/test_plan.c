/* test_plan.c - plans (coordinator/cluster/plan.c) and join validation
 * (coordinator/cluster/membership.c): epochs that never go backwards, the plan
 * hash (deterministic, covering every field but itself, recomputable by a
 * worker from the packed Plan it received), the two-phase round, which
 * routes of two plans run on the same workers, the Join checks of
 * docs/cluster.md, and the chunk sources a streaming worker's Prepare names
 * (coordinator/stream/chunk_src.c). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/host.h"
#include "coordinator/stream/chunk_src.h"
#include "coordinator/cluster/membership.h"
#include "coordinator/cluster/plan.h"

static void mkplan(st_plan *p, uint64_t epoch)
{
    memset(p, 0, sizeof *p);
    p->epoch = epoch;
    p->n_stages = 2;
    p->stages = calloc(2, sizeof *p->stages);
    p->stages[0] = (st_plan_stage){.first = 0, .last = 3, .n_workers = 1, .worker_ids = {11}};
    strcpy(p->stages[0].data_addrs[0], "tcp://127.0.0.1:4001");
    p->stages[1] = (st_plan_stage){.first = 3, .last = 6, .n_workers = 1, .worker_ids = {12}};
    strcpy(p->stages[1].data_addrs[0], "tcp://127.0.0.1:4002");
    memset(p->model_id, 0xab, 32);
    strcpy(p->wire, "f32");
    strcpy(p->result_addr, "tcp://127.0.0.1:5000");
    p->n_layer = 6;
    p->max_tokens = 256;
    p->n_ctx = 512;
    p->max_sessions = 8;
    p->incarnation = 1700000000000ull;
}

START_TEST(epochs_grow_across_restarts)
{
    uint64_t t = 1700000000000ull;
    uint64_t e1 = st_epoch_first(t);
    ck_assert_uint_eq(e1, (t << 16) | 1);
    /* a restart one millisecond later starts above 65535 plans of the first */
    ck_assert_uint_gt(st_epoch_first(t + 1), e1 + 65534);
    ck_assert_uint_gt(st_epoch_first(t + 1000), st_epoch_first(t + 999));
}
END_TEST

START_TEST(hash_is_deterministic_and_covers_fields)
{
    st_plan a, b;
    mkplan(&a, 42);
    mkplan(&b, 42);
    ck_assert_int_eq(st_plan_seal(&a), ST_OK);
    ck_assert_int_eq(st_plan_seal(&b), ST_OK);
    ck_assert_int_eq(memcmp(a.hash, b.hash, 32), 0);
    uint8_t ref[32];
    memcpy(ref, a.hash, 32);
    /* every field changes the hash */
    for (int f = 0; f < 9; f++) {
        st_plan c;
        mkplan(&c, 42);
        switch (f) {
        case 0:
            c.epoch = 43;
            break;
        case 1:
            c.stages[1].first = 4;
            c.stages[0].last = 4;
            break;
        case 2:
            c.stages[1].worker_ids[0] = 13;
            break;
        case 3:
            strcpy(c.stages[0].data_addrs[0], "tcp://127.0.0.1:4003");
            break;
        case 4:
            c.model_id[5] ^= 1;
            break;
        case 5:
            strcpy(c.wire, "f16");
            break;
        case 6:
            c.zstd = true;
            break;
        case 7:
            strcpy(c.result_addr, "tcp://127.0.0.1:5001");
            break;
        case 8:
            c.max_sessions = 9;
            break;
        }
        ck_assert_int_eq(st_plan_seal(&c), ST_OK);
        ck_assert_msg(memcmp(c.hash, ref, 32) != 0, "field %d does not change the hash", f);
        st_plan_free(&c);
    }
    st_plan_free(&a);
    st_plan_free(&b);
}
END_TEST

START_TEST(worker_can_recompute_hash)
{
    st_plan p;
    mkplan(&p, 7);
    ck_assert_int_eq(st_plan_seal(&p), ST_OK);
    Strata__Plan *pb;
    ck_assert_int_eq(st_plan_to_pb(&p, false, &pb), ST_OK);
    ck_assert_uint_eq(pb->plan_hash.len, 32);
    size_t len = strata__plan__get_packed_size(pb);
    uint8_t *buf = malloc(len);
    strata__plan__pack(pb, buf);
    Strata__Plan *rx = strata__plan__unpack(NULL, len, buf);
    ck_assert_ptr_nonnull(rx);
    uint8_t h[32];
    ck_assert_int_eq(st_plan_hash_pb(rx, h), ST_OK); /* ignores the hash field it carries */
    ck_assert_int_eq(memcmp(h, p.hash, 32), 0);
    ck_assert_int_eq(memcmp(rx->plan_hash.data, p.hash, 32), 0);
    ck_assert_uint_eq(rx->n_stages, 2);
    ck_assert_uint_eq(rx->stages[1]->first, 3);
    ck_assert_uint_eq(rx->stages[1]->worker_ids[0], 12);
    ck_assert_str_eq(rx->stages[1]->data_addrs[0], "tcp://127.0.0.1:4002");
    ck_assert_str_eq(rx->stages[1]->in_dtype, "f32");
    ck_assert_uint_eq(rx->incarnation, p.incarnation);
    strata__plan__free_unpacked(rx, NULL);
    free(buf);
    st_plan_pb_free(pb);
    st_plan_free(&p);
}
END_TEST

START_TEST(layout_and_copy)
{
    st_plan a, b, c;
    mkplan(&a, 1);
    mkplan(&b, 2);
    ck_assert(st_plan_same_layout(&a, &b)); /* epochs aside */
    ck_assert_int_eq(st_plan_copy(&c, &a), ST_OK);
    ck_assert(c.stages != a.stages);
    ck_assert(st_plan_same_layout(&a, &c));
    c.stages[0].worker_ids[0] = 99;
    ck_assert(!st_plan_same_layout(&a, &c));
    ck_assert_int_eq(st_plan_stage_of(&a, 12), 1);
    ck_assert_int_eq(st_plan_stage_of(&a, 99), -1);
    st_plan_free(&a);
    st_plan_free(&b);
    st_plan_free(&c);
    ck_assert_ptr_null(c.stages);
}
END_TEST

START_TEST(two_phase_round)
{
    st_plan p;
    mkplan(&p, 100);
    st_round r;
    memset(&r, 0, sizeof r);
    uint64_t spare = 13;
    ck_assert_int_eq(st_round_begin(&r, &p, &spare, 1, 5), ST_OK);
    ck_assert_ptr_null(p.stages); /* moved */
    ck_assert_int_eq(r.phase, ST_ROUND_PREPARING);
    ck_assert_int_eq(st_round_on_ready(&r, 11, 99, 0), ST_EEPOCH);
    ck_assert_int_eq(st_round_on_ready(&r, 13, 100, 0), ST_ENOENT); /* the spare has no stage */
    ck_assert_int_eq(st_round_on_ready(&r, 11, 100, 1000), ST_OK);
    ck_assert_int_eq(r.phase, ST_ROUND_PREPARING);
    ck_assert_int_eq(st_round_on_ready(&r, 12, 100, 2000), ST_OK);
    ck_assert_int_eq(r.phase, ST_ROUND_READY);
    st_round_start_commit(&r);
    ck_assert_int_eq(r.phase, ST_ROUND_COMMITTING);
    ck_assert(!st_round_on_ack(&r, 11, true));
    ck_assert(!st_round_on_ack(&r, 13, false)); /* a failing spare does not block... */
    ck_assert(st_round_on_ack(&r, 12, true));   /* ...the stage workers decide */
    st_plan got;
    st_round_take(&r, &got);
    ck_assert_int_eq(r.phase, ST_ROUND_IDLE);
    ck_assert_uint_eq(got.epoch, 100);
    st_plan_free(&got);

    /* a stage worker failing the commit never completes the round */
    mkplan(&p, 101);
    ck_assert_int_eq(st_round_begin(&r, &p, NULL, 0, 5), ST_OK);
    st_round_on_ready(&r, 11, 101, 0);
    st_round_on_ready(&r, 12, 101, 0);
    st_round_start_commit(&r);
    ck_assert(!st_round_on_ack(&r, 11, false));
    ck_assert(!st_round_on_ack(&r, 12, true));
    st_round_abort(&r);
    ck_assert_int_eq(r.phase, ST_ROUND_IDLE);
}
END_TEST

/* replicas: several workers per stage in the message, the hash, the
 * layout, the lookups, the routes and the round */
START_TEST(replicated_plan)
{
    st_plan p, q;
    mkplan(&p, 200);
    p.stages[1].n_workers = 2;
    p.stages[1].worker_ids[1] = 14;
    strcpy(p.stages[1].data_addrs[1], "tcp://127.0.0.1:4004");
    ck_assert_uint_eq(st_plan_n_workers(&p), 3);
    ck_assert_int_eq(st_plan_stage_of(&p, 14), 1);
    ck_assert_int_eq(st_plan_replica_of(&p, 14), 1);
    ck_assert_int_eq(st_plan_replica_of(&p, 12), 0);
    ck_assert_int_eq(st_plan_replica_of(&p, 99), -1);
    ck_assert_uint_eq(st_plan_routes(&p, 64), 2);
    ck_assert_uint_eq(st_plan_route_worker(&p, 1, 0), 0); /* stage 0 has one worker */
    ck_assert_uint_eq(st_plan_route_worker(&p, 1, 1), 1);
    ck_assert_uint_eq(st_plan_route_worker(&p, 2, 1), 0);
    /* the message carries both workers and addresses, in order */
    ck_assert_int_eq(st_plan_seal(&p), ST_OK);
    Strata__Plan *pb;
    ck_assert_int_eq(st_plan_to_pb(&p, false, &pb), ST_OK);
    ck_assert_uint_eq(pb->stages[1]->n_worker_ids, 2);
    ck_assert_uint_eq(pb->stages[1]->worker_ids[1], 14);
    ck_assert_str_eq(pb->stages[1]->data_addrs[1], "tcp://127.0.0.1:4004");
    ck_assert_uint_eq(pb->stages[0]->n_worker_ids, 1);
    st_plan_pb_free(pb);
    /* the replica changes the hash and the layout */
    mkplan(&q, 200);
    ck_assert_int_eq(st_plan_seal(&q), ST_OK);
    ck_assert(memcmp(p.hash, q.hash, 32) != 0);
    ck_assert(!st_plan_same_layout(&p, &q));
    /* routes: lcm of the worker counts, or the largest count above the cap */
    q.stages[0].n_workers = 3;
    q.stages[1].n_workers = 2;
    ck_assert_uint_eq(st_plan_routes(&q, 64), 6);
    ck_assert_uint_eq(st_plan_routes(&q, 5), 3);
    st_plan_free(&q);
    /* too many workers on a stage is refused, not truncated */
    mkplan(&q, 201);
    q.stages[0].n_workers = ST_PLAN_MAX_REPLICAS + 1;
    ck_assert_int_eq(st_plan_to_pb(&q, false, &pb), ST_EINVAL);
    st_plan_free(&q);
    /* every replica must answer Ready and acknowledge the Commit */
    st_round r;
    memset(&r, 0, sizeof r);
    ck_assert_int_eq(st_round_begin(&r, &p, NULL, 0, 5), ST_OK);
    ck_assert_uint_eq(r.n_peers, 3);
    ck_assert_int_eq(st_round_on_ready(&r, 11, 200, 0), ST_OK);
    ck_assert_int_eq(st_round_on_ready(&r, 12, 200, 0), ST_OK);
    ck_assert_int_eq(r.phase, ST_ROUND_PREPARING);
    ck_assert_int_eq(st_round_on_ready(&r, 14, 200, 0), ST_OK);
    ck_assert_int_eq(r.phase, ST_ROUND_READY);
    st_round_start_commit(&r);
    ck_assert(!st_round_on_ack(&r, 11, true));
    ck_assert(!st_round_on_ack(&r, 12, true));
    ck_assert(st_round_on_ack(&r, 14, true));
    st_round_abort(&r);
}
END_TEST

/* data senders (issue 12, finding 2): the plan names who sends STEP
 * frames to each stage and results to the coordinator; the message and
 * the hash carry them, and st_plan_route_sender answers who may send a
 * route's results */
START_TEST(route_senders)
{
    st_plan p, q;
    mkplan(&p, 300);
    p.step_sender = 0x77;
    p.stages[0].data_senders[0] = 0x1001;
    p.stages[1].n_workers = 2;
    p.stages[1].worker_ids[1] = 14;
    strcpy(p.stages[1].data_addrs[1], "tcp://127.0.0.1:4004");
    p.stages[1].data_senders[0] = 0x1002;
    p.stages[1].data_senders[1] = 0x1004;
    ck_assert_int_eq(st_plan_seal(&p), ST_OK);
    Strata__Plan *pb;
    ck_assert_int_eq(st_plan_to_pb(&p, false, &pb), ST_OK);
    ck_assert_uint_eq(pb->step_sender, 0x77);
    ck_assert_uint_eq(pb->stages[1]->n_data_senders, 2);
    ck_assert_uint_eq(pb->stages[1]->data_senders[1], 0x1004);
    ck_assert_uint_eq(pb->stages[0]->data_senders[0], 0x1001);
    st_plan_pb_free(pb);
    /* route 1 goes through replica 1 of stage 1: its results come from 0x1004 only */
    ck_assert(st_plan_route_sender(&p, 1, 0x1004, true));
    ck_assert(!st_plan_route_sender(&p, 1, 0x1002, true));
    ck_assert(!st_plan_route_sender(&p, 1, 0x1001, true)); /* stage 0: not the last */
    ck_assert(st_plan_route_sender(&p, 1, 0x1001, false)); /* but it may report an error */
    ck_assert(st_plan_route_sender(&p, 0, 0x1002, true));
    ck_assert(!st_plan_route_sender(&p, 0, 0x1004, false)); /* not on route 0 */
    ck_assert(!st_plan_route_sender(&p, 0, 0x77, false));   /* the coordinator's */
    ck_assert(!st_plan_route_sender(&p, 0, 0, false));
    /* another sender is another plan: its hash and its layout differ */
    ck_assert_int_eq(st_plan_copy(&q, &p), ST_OK);
    q.stages[1].data_senders[1] = 0x1005;
    ck_assert_int_eq(st_plan_seal(&q), ST_OK);
    ck_assert(memcmp(p.hash, q.hash, 32) != 0);
    ck_assert(!st_plan_same_layout(&p, &q));
    q.stages[1].data_senders[1] = 0x1004;
    q.step_sender = 0x78;
    ck_assert_int_eq(st_plan_seal(&q), ST_OK);
    ck_assert(memcmp(p.hash, q.hash, 32) != 0);
    ck_assert(!st_plan_same_layout(&p, &q));
    /* a boundary's zstd (--wire auto's per-boundary choice) is the plan's too */
    q.step_sender = p.step_sender;
    ck_assert_int_eq(st_plan_seal(&q), ST_OK);
    ck_assert(memcmp(p.hash, q.hash, 32) == 0);
    q.stages[1].in_zstd = true;
    ck_assert_int_eq(st_plan_seal(&q), ST_OK);
    ck_assert(memcmp(p.hash, q.hash, 32) != 0);
    ck_assert(!st_plan_same_layout(&p, &q));
    st_plan_free(&q);
    st_plan_free(&p);
}
END_TEST

/* ---- join validation ---- */

typedef struct join_fx {
    Strata__Join j;
    Strata__Capability c;
    Strata__DtypeSpeed s;
    Strata__DtypeSpeed *sp[1];
    uint8_t id[32];
    char *wd[2];
} join_fx;

static void mkjoin(join_fx *f)
{
    strata__join__init(&f->j);
    strata__capability__init(&f->c);
    strata__dtype_speed__init(&f->s);
    f->j.protocol = 1;
    f->j.cap = &f->c;
    f->c.name = "w";
    f->c.cores = 2;
    f->c.threads = 2;
    f->c.memory_budget = 1ull << 30;
    f->c.data_addr = "tcp://127.0.0.1:4001";
    f->c.ctl_addr = "tcp://127.0.0.1:4002";
    memset(f->id, 7, 32);
    f->c.model_id.data = f->id;
    f->c.model_id.len = 32;
    f->s.dtype = "f32";
    f->s.bytes_per_s = 1e10;
    f->sp[0] = &f->s;
    f->c.speeds = f->sp;
    f->c.n_speeds = 1;
    f->wd[0] = "f16";
    f->wd[1] = "f32";
    f->c.wire_dtypes = f->wd;
    f->c.n_wire_dtypes = 2;
}

/* st_plan_same_route: a route keeps its KV only if every layer stays on
 * the same worker with the same context and slots */
START_TEST(same_route)
{
    st_plan p, q;
    mkplan(&p, 300); /* [0,3) on 11, [3,6) on 12 + 14: routes 11-12, 11-14 */
    p.stages[1].n_workers = 2;
    p.stages[1].worker_ids[1] = 14;
    mkplan(&q, 301); /* 14 left: [0,3) on 11, [3,6) on 12 */
    ck_assert(st_plan_same_route(&p, 0, &q, 0));
    ck_assert(!st_plan_same_route(&p, 1, &q, 0));
    ck_assert(st_plan_same_route(&q, 0, &p, 2)); /* route 2 of p = 11-12 again */
    q.stages[1].worker_ids[0] = 14;              /* 12 left instead */
    ck_assert(!st_plan_same_route(&p, 0, &q, 0));
    ck_assert(st_plan_same_route(&p, 1, &q, 0));
    q.n_ctx = 256; /* the workers reallocate their KV */
    ck_assert(!st_plan_same_route(&p, 1, &q, 0));
    q.n_ctx = p.n_ctx;
    q.max_sessions = 4;
    ck_assert(!st_plan_same_route(&p, 1, &q, 0));
    q.max_sessions = p.max_sessions;
    q.stages[0].last = 2; /* a layer moved */
    q.stages[1].first = 2;
    ck_assert(!st_plan_same_route(&p, 1, &q, 0));
    st_plan_free(&p);
    st_plan_free(&q);
}
END_TEST

START_TEST(join_checks)
{
    uint8_t mid[32];
    memset(mid, 7, 32);
    join_fx f;
    mkjoin(&f);
    ck_assert_int_eq(st_join_validate(&f.j, mid, ST_WIRE_F32), ST_OK);
    /* a host id of 16 bytes and a CPU list are taken (common/base/host.h) */
    mkjoin(&f);
    uint8_t hid[ST_HOST_ID_BYTES] = {7};
    f.c.host_id.data = hid;
    f.c.host_id.len = sizeof hid;
    f.c.cpus = "0-3,8";
    ck_assert_int_eq(st_join_validate(&f.j, mid, ST_WIRE_F32), ST_OK);
    mkjoin(&f);
    f.j.protocol = 2;
    ck_assert_int_eq(st_join_validate(&f.j, mid, ST_WIRE_F32), ST_EVERSION);
    ck_assert_str_eq(st_errdetail(), "protocol 2; coordinator speaks 1");
    struct {
        int field;
        const char *needle;
    } cases[] = {{0, "cores"},       {1, "threads"},    {2, "memory_budget"}, {3, "memory_budget"},
                 {4, "data_addr"},   {5, "ctl_addr"},   {6, "speeds[0]"},     {7, "speeds[0]"},
                 {8, "model_id"},    {9, "model id"},   {10, "wire dtype"},   {11, "throttle"},
                 {12, "capability"}, {13, "chunk_addr"}, {14, "host_id"},   {15, "cpus"}};
    static char long_cpus[ST_HOST_CPUS_MAX + 1];
    memset(long_cpus, '1', ST_HOST_CPUS_MAX);
    uint8_t host[ST_HOST_ID_BYTES + 1] = {0};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        mkjoin(&f);
        uint8_t other[32];
        memset(other, 8, 32);
        switch (cases[k].field) {
        case 0:
            f.c.cores = 0;
            break;
        case 1:
            f.c.threads = 100000;
            break;
        case 2:
            f.c.memory_budget = 1000;
            break;
        case 3:
            f.c.memory_budget = UINT64_MAX;
            break;
        case 4:
            f.c.data_addr = "http://x";
            break;
        case 5:
            f.c.ctl_addr = "";
            break;
        case 6:
            f.s.bytes_per_s = NAN;
            break;
        case 7:
            f.s.bytes_per_s = -5;
            break;
        case 8:
            f.c.model_id.len = 31;
            break;
        case 9:
            f.c.model_id.data = other;
            break;
        case 10:
            f.c.n_wire_dtypes = 1;
            break; /* f16 only; the cluster uses f32 */
        case 11:
            f.c.throttle = INFINITY;
            break;
        case 12:
            f.j.cap = NULL;
            break;
        case 13:
            f.c.chunk_addr = "ipc:///tmp/chunks"; /* no other transport is dialed */
            break;
        case 14:
            f.c.host_id.data = host; /* 17 bytes: not a host id */
            f.c.host_id.len = sizeof host;
            break;
        case 15:
            f.c.cpus = long_cpus; /* ST_HOST_CPUS_MAX characters: one too many */
            break;
        }
        st_err e = st_join_validate(&f.j, mid, ST_WIRE_F32);
        ck_assert_msg(e == ST_EINVAL || e == ST_EPROTO, "case %d: %d", cases[k].field, e);
        ck_assert_msg(strstr(st_errdetail(), cases[k].needle) != NULL, "case %d: %s",
                      cases[k].field, st_errdetail());
    }
}
END_TEST

START_TEST(members_lifecycle)
{
    st_members ms;
    ck_assert_int_eq(st_members_init(&ms, 1000), ST_OK);
    join_fx f;
    mkjoin(&f);
    /* a Msg that owns its Join: pack and unpack the fixture */
    Strata__Msg tmp = STRATA__MSG__INIT;
    tmp.body_case = STRATA__MSG__BODY_JOIN;
    tmp.join = &f.j;
    size_t len = strata__msg__get_packed_size(&tmp);
    uint8_t *buf = malloc(len);
    strata__msg__pack(&tmp, buf);
    Strata__Msg *m = strata__msg__unpack(NULL, len, buf);
    Strata__Msg *m2 = strata__msg__unpack(NULL, len, buf);
    free(buf);
    st_member *w;
    uint64_t rep;
    ck_assert_int_eq(st_members_add(&ms, m, 0, &w, &rep), ST_OK);
    ck_assert_uint_eq(w->id, 1001);
    ck_assert_uint_eq(rep, 0);
    ck_assert(st_member_speed(w, "f32") == 1e10);
    ck_assert(st_member_speed(w, "q8_0") == 1e10); /* the mean of what it announced */
    /* a second join from the same control address replaces the first */
    ck_assert_int_eq(st_members_add(&ms, m2, 10, &w, &rep), ST_OK);
    ck_assert_uint_eq(rep, 1001);
    ck_assert_uint_eq(w->id, 1002);
    ck_assert_int_eq(st_members_find(&ms, 1001)->life, ST_MEMBER_LEFT);
    /* heartbeats: known ids are recorded, unknown ones must rejoin */
    Strata__Heartbeat hb = STRATA__HEARTBEAT__INIT;
    hb.worker_id = 1002;
    hb.rss_bytes = 77;
    tmp.body_case = STRATA__MSG__BODY_HEARTBEAT;
    tmp.heartbeat = &hb;
    len = strata__msg__get_packed_size(&tmp);
    buf = malloc(len);
    strata__msg__pack(&tmp, buf);
    Strata__Msg *h = strata__msg__unpack(NULL, len, buf);
    bool first = false;
    ck_assert(!st_member_placeable(st_members_find(&ms, 1002), 10)); /* not heard yet */
    ck_assert_int_eq(st_members_heartbeat(&ms, h, 10, &first), ST_OK);
    ck_assert(first);
    ck_assert(st_member_placeable(st_members_find(&ms, 1002), 10));
    ck_assert_uint_eq(st_members_find(&ms, 1002)->hb->heartbeat->rss_bytes, 77);
    st_member_exclude(st_members_find(&ms, 1002), "refused", 10);
    ck_assert(!st_member_placeable(st_members_find(&ms, 1002), 10 + 14999999999ull));
    ck_assert(st_member_placeable(st_members_find(&ms, 1002), 10 + 15000000000ull));
    st_member_exclude(st_members_find(&ms, 1002), "refused again", 10);
    ck_assert(!st_member_placeable(st_members_find(&ms, 1002), 10 + 15000000000ull)); /* 30 s */
    hb.worker_id = 1001; /* replaced: no longer a member */
    strata__msg__pack(&tmp, buf);
    h = strata__msg__unpack(NULL, len, buf);
    ck_assert_int_eq(st_members_heartbeat(&ms, h, 10, &first), ST_ENOENT);
    strata__msg__free_unpacked(h, NULL);
    free(buf);
    /* more link reports than there can be peers: refused, the last heartbeat kept */
    Strata__LinkMeasure lm = STRATA__LINK_MEASURE__INIT, *lmp[ST_MEMBERS_MAX + 1];
    for (size_t i = 0; i <= ST_MEMBERS_MAX; i++)
        lmp[i] = &lm;
    hb.worker_id = 1002;
    hb.rss_bytes = 78;
    hb.n_links = ST_MEMBERS_MAX + 1;
    hb.links = lmp;
    len = strata__msg__get_packed_size(&tmp);
    buf = malloc(len);
    strata__msg__pack(&tmp, buf);
    h = strata__msg__unpack(NULL, len, buf);
    ck_assert_int_eq(st_members_heartbeat(&ms, h, 10, &first), ST_EINVAL);
    ck_assert_str_eq(st_errdetail(), "heartbeat of worker 1002: 257 links (at most 256)");
    ck_assert_uint_eq(st_members_find(&ms, 1002)->hb->heartbeat->rss_bytes, 77);
    hb.n_links = ST_MEMBERS_MAX;
    strata__msg__free_unpacked(h, NULL);
    free(buf);
    len = strata__msg__get_packed_size(&tmp);
    buf = malloc(len);
    strata__msg__pack(&tmp, buf);
    h = strata__msg__unpack(NULL, len, buf);
    ck_assert_int_eq(st_members_heartbeat(&ms, h, 10, &first), ST_OK); /* taken */
    ck_assert(!first);
    free(buf);
    uint64_t lost[4];
    ck_assert_uint_eq(st_members_expire(&ms, 1000, 5000, lost, 4), 0);
    /* a 3000 ns stall of the coordinator is not silence: heard at 10, it
     * expires 5000 ns of listening later (8011), not at 5011 */
    st_members_pause(&ms, 3000, 4000);
    ck_assert_uint_eq(st_members_find(&ms, 1002)->last_hb_ns, 3010);
    ck_assert_uint_eq(st_members_expire(&ms, 10 + 5001, 5000, lost, 4), 0);
    st_members_pause(&ms, 9000, 6000); /* never later than now */
    ck_assert_uint_eq(st_members_find(&ms, 1002)->last_hb_ns, 6000);
    st_members_find(&ms, 1002)->last_hb_ns = 10;
    ck_assert_uint_eq(st_members_expire(&ms, 10 + 5001, 5000, lost, 4), 1);
    ck_assert_uint_eq(lost[0], 1002);
    ck_assert_int_eq(st_members_find(&ms, 1002)->life, ST_MEMBER_LOST);
    st_members_gc(&ms, 10 + 5001 + 100, 50);
    ck_assert_uint_eq(ms.n, 0);
    st_members_fini(&ms);
}
END_TEST

/* ---- the chunk sources a Prepare names (chunk_src.h) ---- */

/* add_member - a member joined with f's capability, as st_members_add takes it. */
static st_member *add_member(st_members *ms, join_fx *f)
{
    Strata__Msg tmp = STRATA__MSG__INIT;
    tmp.body_case = STRATA__MSG__BODY_JOIN;
    tmp.join = &f->j;
    size_t len = strata__msg__get_packed_size(&tmp);
    uint8_t *buf = malloc(len);
    strata__msg__pack(&tmp, buf);
    Strata__Msg *m = strata__msg__unpack(NULL, len, buf);
    free(buf);
    st_member *w;
    uint64_t rep;
    ck_assert_int_eq(st_members_add(ms, m, 0, &w, &rep), ST_OK);
    return w;
}

START_TEST(chunk_sources)
{
    /* 1001 streams: stage [0,3) of the new plan beside 1002; 1003 streams,
     * [3,6) in both plans; 1004 streams, [0,3) in the serving plan, a spare
     * in the new one; 1005 has the model file; then members never named: no
     * server (1006), another model (1007), 1005's address again (1008), an
     * ipc:// address (1009), lost (1010) */
    static const struct {
        bool streams;
        const char *chunks;
        bool other_model;
    } spec[] = {{true, "", false},
                {true, "tcp://127.0.0.1:7002", false},
                {true, "tcp://127.0.0.1:7003", false},
                {true, "tcp://127.0.0.1:7004", false},
                {false, "tcp://127.0.0.1:7005", false},
                {false, "", false},
                {false, "tcp://127.0.0.1:7007", true},
                {false, "tcp://127.0.0.1:7005", false},
                {false, "ipc:///tmp/chunks", false},
                {false, "tcp://127.0.0.1:7010", false}};
    st_members ms;
    ck_assert_int_eq(st_members_init(&ms, 1000), ST_OK);
    char ctl[10][32];
    for (size_t i = 0; i < 10; i++) {
        join_fx f;
        mkjoin(&f);
        snprintf(ctl[i], sizeof ctl[i], "tcp://127.0.0.1:%zu", 4100 + i);
        f.c.ctl_addr = ctl[i];
        f.c.streams = spec[i].streams;
        f.c.chunk_addr = (char *)spec[i].chunks;
        if (spec[i].other_model)
            memset(f.id, 8, 32);
        ck_assert_uint_eq(add_member(&ms, &f)->id, 1001 + i);
    }
    st_members_mark(st_members_find(&ms, 1010), ST_MEMBER_LOST, "test", 1);
    st_plan cur, next;
    mkplan(&cur, 300);
    cur.stages[0].worker_ids[0] = 1004;
    cur.stages[1].worker_ids[0] = 1003;
    mkplan(&next, 301);
    next.stages[0].n_workers = 2;
    next.stages[0].worker_ids[0] = 1001;
    next.stages[0].worker_ids[1] = 1002;
    next.stages[1].worker_ids[0] = 1003;
    const char *out[ST_CHUNK_SOURCES_MAX];
    /* holding the chunks now (the serving overlap, the model file), then
     * the new plan's overlap, then the others */
    ck_assert_uint_eq(st_chunk_sources(&ms, 1001, &cur, &next, out, ST_CHUNK_SOURCES_MAX), 4);
    ck_assert_str_eq(out[0], "tcp://127.0.0.1:7004");
    ck_assert_str_eq(out[1], "tcp://127.0.0.1:7005");
    ck_assert_str_eq(out[2], "tcp://127.0.0.1:7002");
    ck_assert_str_eq(out[3], "tcp://127.0.0.1:7003");
    ck_assert_uint_eq(st_chunk_sources(&ms, 1001, &cur, &next, out, 2), 2); /* the bound */
    ck_assert_str_eq(out[1], "tcp://127.0.0.1:7005");
    /* without a serving plan: 1004 holds nothing known */
    ck_assert_uint_eq(st_chunk_sources(&ms, 1001, NULL, &next, out, ST_CHUNK_SOURCES_MAX), 4);
    ck_assert_str_eq(out[0], "tcp://127.0.0.1:7005");
    ck_assert_str_eq(out[3], "tcp://127.0.0.1:7004");
    /* 1003: itself never named */
    ck_assert_uint_eq(st_chunk_sources(&ms, 1003, &cur, &next, out, ST_CHUNK_SOURCES_MAX), 3);
    ck_assert_str_eq(out[0], "tcp://127.0.0.1:7005");
    ck_assert_str_eq(out[1], "tcp://127.0.0.1:7002");
    ck_assert_str_eq(out[2], "tcp://127.0.0.1:7004");
    /* nothing to a worker with its model file, a spare of the new plan, a stranger */
    ck_assert_uint_eq(st_chunk_sources(&ms, 1005, &cur, &next, out, ST_CHUNK_SOURCES_MAX), 0);
    next.stages[1].worker_ids[0] = 1005;
    ck_assert_uint_eq(st_chunk_sources(&ms, 1005, &cur, &next, out, ST_CHUNK_SOURCES_MAX), 0);
    ck_assert_uint_eq(st_chunk_sources(&ms, 1004, &cur, &next, out, ST_CHUNK_SOURCES_MAX), 0);
    ck_assert_uint_eq(st_chunk_sources(&ms, 999, &cur, &next, out, ST_CHUNK_SOURCES_MAX), 0);
    st_plan_free(&cur);
    st_plan_free(&next);
    st_members_fini(&ms);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("plan");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, epochs_grow_across_restarts);
    tcase_add_test(tc, hash_is_deterministic_and_covers_fields);
    tcase_add_test(tc, worker_can_recompute_hash);
    tcase_add_test(tc, layout_and_copy);
    tcase_add_test(tc, two_phase_round);
    tcase_add_test(tc, replicated_plan);
    tcase_add_test(tc, same_route);
    tcase_add_test(tc, route_senders);
    tcase_add_test(tc, join_checks);
    tcase_add_test(tc, members_lifecycle);
    tcase_add_test(tc, chunk_sources);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
