/* inject.c - a test tool that sends hand-made messages to a running
 * coordinator or worker, to check that bad or hostile input gets an error
 * reply (or is dropped and counted) and changes nothing.
 *
 *   inject req ADDR CASE [--key FILE]   control request to a REP socket;
 *       prints "reply: error CODE NAME: MESSAGE" or "reply: CASE_NAME".
 *       CASE: garbage | empty-body | join-version | join-absurd |
 *             join-bad-model | gen-nan | gen-zero | gen-huge | gen-bad-id |
 *             heartbeat-unknown | status | probe-ok | probe-huge
 *   inject step ADDR EPOCH [--key FILE] [--encrypt] [--bad-mac] [--hash HEX] [--route R,R,...]
 *       pushes one STEP frame with the given epoch to a worker's data
 *       socket (nothing is expected back on this socket); --hash sets the
 *       plan hash (64 hex digits; default zeros), --route the replica index
 *       of each stage (StepMeta.route; default none). */
#include <nng/nng.h>
#include <nng/protocol/pipeline0/push.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/util/platform.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/envelope.h"
#include "common/msg.h"
#include "common/step.h"

static int inj_usage(void)
{
    fprintf(stderr, "usage: inject req ADDR CASE [--key FILE] | inject step ADDR EPOCH "
                    "[--key FILE] [--encrypt] [--bad-mac] [--hash HEX] [--route R,R,...]\n");
    return 2;
}

static int inj_send_raw(nng_socket s, const uint8_t *buf, size_t len)
{
    int rv = nng_send(s, (void *)buf, len, 0);
    if (rv != 0) {
        fprintf(stderr, "inject: send: %s\n", nng_strerror(rv));
        return 1;
    }
    return 0;
}

static int inj_print_reply(nng_socket s, st_env *env)
{
    Strata__Msg *r = NULL;
    st_err e = st_msg_recv(s, env, ST_ENV_CONTROL, &r, NULL);
    if (e != ST_OK) {
        printf("reply: none (%s)\n", st_errmsg(e));
        return 1;
    }
    if (r->body_case == STRATA__MSG__BODY_ERROR)
        printf("reply: error %u %s: %s\n", r->error->code, st_strerror((st_err)r->error->code),
               r->error->message);
    else
        printf("reply: %s\n", st_msg_case_name(r));
    st_msg_free(r);
    return 0;
}

static int inj_req(const char *addr, const char *what, st_env *env)
{
    nng_socket s;
    int rv = nng_req0_open(&s);
    if (rv == 0)
        rv = nng_dial(s, addr, NULL, 0);
    if (rv != 0) {
        fprintf(stderr, "inject: %s: %s\n", addr, nng_strerror(rv));
        return 1;
    }
    nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 10000);
    nng_socket_set_ms(s, NNG_OPT_SENDTIMEO, 10000);
    Strata__Msg m = STRATA__MSG__INIT;
    Strata__Join join = STRATA__JOIN__INIT;
    Strata__Capability cap = STRATA__CAPABILITY__INIT;
    Strata__GenerateRequest gen = STRATA__GENERATE_REQUEST__INIT;
    Strata__Sampling smp = STRATA__SAMPLING__INIT;
    Strata__Heartbeat hb = STRATA__HEARTBEAT__INIT;
    Strata__StatusRequest sr = STRATA__STATUS_REQUEST__INIT;
    Strata__Probe pb = STRATA__PROBE__INIT;
    uint8_t *probe_buf = NULL;
    int32_t ids[2] = {1, 5};
    uint8_t model_id[32] = {0};
    int rc = 0;
    if (strcmp(what, "garbage") == 0 || strcmp(what, "empty-body") == 0) {
        /* a valid envelope around bytes that are not a protobuf Msg */
        uint8_t body[64];
        size_t blen = strcmp(what, "garbage") == 0 ? sizeof body : 0;
        for (size_t i = 0; i < blen; i++)
            body[i] = (uint8_t)(0xff - i * 7);
        size_t n = st_env_size(env, blen);
        uint8_t *buf = malloc(n);
        memcpy(buf + ST_ENV_HDR, body, blen);
        st_env_seal(env, ST_ENV_CONTROL, buf, blen);
        rc = inj_send_raw(s, buf, n);
        free(buf);
        if (rc == 0)
            rc = inj_print_reply(s, env);
        nng_close(s);
        return rc;
    }
    cap.name = "inject";
    cap.cores = 2;
    cap.threads = 2;
    cap.memory_budget = 1ull << 30;
    cap.data_addr = "tcp://127.0.0.1:1";
    cap.ctl_addr = "tcp://127.0.0.1:2";
    cap.model_id.data = model_id;
    cap.model_id.len = 32;
    join.protocol = STRATA__VERSION__PROTOCOL;
    join.cap = &cap;
    gen.prompt_ids = ids;
    gen.n_prompt_ids = 2;
    gen.max_tokens = 4;
    gen.sampling = &smp;
    gen.has_sampling = 1;
    smp.top_p = 1.0f;
    smp.repeat_penalty = 1.0f;
    if (strcmp(what, "join-version") == 0) {
        join.protocol = 99;
        m.body_case = STRATA__MSG__BODY_JOIN;
        m.join = &join;
    } else if (strcmp(what, "join-absurd") == 0) {
        cap.cores = 1000000;
        cap.memory_budget = ~0ull;
        m.body_case = STRATA__MSG__BODY_JOIN;
        m.join = &join;
    } else if (strcmp(what, "join-bad-model") == 0) {
        m.body_case = STRATA__MSG__BODY_JOIN;
        m.join = &join;
    } else if (strncmp(what, "gen-", 4) == 0) {
        m.body_case = STRATA__MSG__BODY_GENERATE;
        m.generate = &gen;
        if (strcmp(what, "gen-nan") == 0)
            smp.temp = NAN;
        else if (strcmp(what, "gen-zero") == 0)
            gen.max_tokens = 0;
        else if (strcmp(what, "gen-huge") == 0)
            gen.max_tokens = 4000000000u;
        else if (strcmp(what, "gen-bad-id") == 0)
            ids[1] = 1 << 30;
        else if (strcmp(what, "gen-ok") != 0)
            rc = 2;
    } else if (strcmp(what, "heartbeat-unknown") == 0) {
        hb.worker_id = 987654321;
        m.body_case = STRATA__MSG__BODY_HEARTBEAT;
        m.heartbeat = &hb;
    } else if (strcmp(what, "status") == 0) {
        m.body_case = STRATA__MSG__BODY_STATUS_REQ;
        m.status_req = &sr;
    } else if (strcmp(what, "probe-ok") == 0 || strcmp(what, "probe-huge") == 0) {
        /* a link probe of 1 MiB (the largest allowed) or one byte more */
        probe_buf = calloc(1, ((size_t)1 << 20) + 1);
        pb.seq = 7;
        pb.payload.data = probe_buf;
        pb.payload.len = ((size_t)1 << 20) + (strcmp(what, "probe-huge") == 0);
        m.body_case = STRATA__MSG__BODY_PROBE;
        m.probe = &pb;
        rc = probe_buf == NULL;
    } else {
        rc = 2;
    }
    if (rc != 0) {
        fprintf(stderr, "inject: unknown case '%s'\n", what);
        nng_close(s);
        return rc;
    }
    st_err e = st_msg_send(s, env, ST_ENV_CONTROL, &m);
    free(probe_buf);
    if (e != ST_OK) {
        fprintf(stderr, "inject: %s\n", st_errmsg(e));
        nng_close(s);
        return 1;
    }
    rc = inj_print_reply(s, env);
    nng_close(s);
    return rc;
}

/* inj_step_opts - what a hand-made STEP says beyond its epoch. */
typedef struct inj_step_opts {
    uint8_t hash[32];
    uint32_t route[16];
    size_t n_route;
    int bad_mac;
} inj_step_opts;

/* inj_parse_hash - 64 hex digits into out; -1 if malformed. */
static int inj_parse_hash(const char *hex, uint8_t out[32])
{
    if (strlen(hex) != 64)
        return -1;
    for (int i = 0; i < 32; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            return -1;
        out[i] = (uint8_t)v;
    }
    return 0;
}

/* inj_parse_route - "0,1,..." into o->route; -1 if malformed. */
static int inj_parse_route(const char *txt, inj_step_opts *o)
{
    o->n_route = 0;
    for (const char *p = txt; *p != '\0';) {
        char *end;
        unsigned long v = strtoul(p, &end, 10);
        if (end == p || o->n_route == 16 || v > 0xffffffffu)
            return -1;
        o->route[o->n_route++] = (uint32_t)v;
        p = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end != '\0')
            return -1;
    }
    return 0;
}

static int inj_step(const char *addr, uint64_t epoch, st_env *env, const inj_step_opts *o)
{
    nng_socket s;
    int rv = nng_push0_open(&s);
    if (rv == 0)
        rv = nng_dial(s, addr, NULL, 0);
    if (rv != 0) {
        fprintf(stderr, "inject: %s: %s\n", addr, nng_strerror(rv));
        return 1;
    }
    nng_socket_set_ms(s, NNG_OPT_SENDTIMEO, 5000);
    Strata__StepMeta meta = STRATA__STEP_META__INIT;
    Strata__StepRow row = STRATA__STEP_ROW__INIT;
    Strata__StepRow *rows[1] = {&row};
    int32_t tok = 1;
    uint8_t hash[32];
    memcpy(hash, o->hash, sizeof hash);
    uint32_t route[16];
    memcpy(route, o->route, sizeof route);
    meta.epoch = epoch;
    meta.plan_hash.data = hash;
    meta.plan_hash.len = 32;
    meta.n_route = o->n_route;
    meta.route = o->n_route > 0 ? route : NULL;
    meta.batch_id = 424242;
    meta.n_rows = 1;
    meta.rows = rows;
    row.session_id = 77;
    row.n_tok = 1;
    row.tokens = &tok;
    row.n_tokens = 1;
    nng_msg *msg;
    st_err e = st_step_pack(env, &meta, &msg);
    if (e != ST_OK) {
        fprintf(stderr, "inject: %s\n", st_errmsg(e));
        nng_close(s);
        return 1;
    }
    if (o->bad_mac)
        ((uint8_t *)nng_msg_body(msg))[nng_msg_len(msg) - 1] ^= 0x5a;
    int rc = inj_send_raw(s, nng_msg_body(msg), nng_msg_len(msg));
    nng_msg_free(msg);
    nng_msleep(200); /* let the message leave before the socket closes */
    nng_close(s);
    if (rc == 0)
        printf("sent: step epoch %llu\n", (unsigned long long)epoch);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 4)
        return inj_usage();
    const char *keyfile = NULL;
    bool encrypt = false;
    uint64_t epoch = 0;
    inj_step_opts so;
    memset(&so, 0, sizeof so);
    for (int i = 4; i < argc; i++) {
        if (strcmp(argv[i], "--key") == 0 && i + 1 < argc)
            keyfile = argv[++i];
        else if (strcmp(argv[i], "--encrypt") == 0)
            encrypt = true;
        else if (strcmp(argv[i], "--bad-mac") == 0)
            so.bad_mac = 1;
        else if (strcmp(argv[i], "--hash") == 0 && i + 1 < argc) {
            if (inj_parse_hash(argv[++i], so.hash) != 0)
                return inj_usage();
        } else if (strcmp(argv[i], "--route") == 0 && i + 1 < argc) {
            if (inj_parse_route(argv[++i], &so) != 0)
                return inj_usage();
        } else
            return inj_usage();
    }
    uint8_t key[ST_KEY_BYTES];
    if (keyfile) {
        st_err e = st_key_load(keyfile, key);
        if (e != ST_OK) {
            fprintf(stderr, "inject: %s\n", st_errmsg(e));
            return 1;
        }
    }
    st_env env;
    if (st_env_init_mode(&env, keyfile ? key : NULL, encrypt, 0xdead0000u + (uint64_t)rand()) !=
        ST_OK)
        return 1;
    int rc;
    if (strcmp(argv[1], "req") == 0) {
        rc = inj_req(argv[2], argv[3], &env);
    } else if (strcmp(argv[1], "step") == 0) {
        epoch = strtoull(argv[3], NULL, 10);
        rc = inj_step(argv[2], epoch, &env, &so);
    } else {
        rc = inj_usage();
    }
    st_env_fini(&env);
    return rc;
}
