/* inject.c - a test tool that sends hand-made messages to a running
 * coordinator or worker, to check that bad or hostile input gets an error
 * reply (or is dropped and counted) and changes nothing.
 *
 *   Every command takes --key FILE (frames MACed with that cluster key)
 *   or --no-key (keyless); with neither, a keyless local coordinator's
 *   generated key when an argument is its address (common/net/exposure.h).
 *   inject req ADDR CASE [--key FILE]   control request to a REP socket;
 *       prints "reply: error CODE NAME: MESSAGE" or "reply: CASE_NAME".
 *       CASE: garbage | empty-body | join-version | join-absurd |
 *             join-bad-model | gen-nan | gen-zero | gen-huge | gen-bad-id |
 *             heartbeat-unknown | status | probe-ok | probe-huge
 *   inject step ADDR EPOCH [--key FILE] [--encrypt] [--bad-mac] [--hash HEX] [--route R,R,...]
 *       pushes one STEP frame with the given epoch to a worker's data
 *       socket (nothing is expected back on this socket); --hash sets the
 *       plan hash (64 hex digits; default zeros), --route the replica index
 *       of each stage (StepMeta.route; default none).
 *   inject role ADDR CASE [--client-key FILE | ...]
 *       control requests under a credential, refused by role, owner or
 *       quota (issue 12, findings 4-7): see inject_role.c.
 *   inject replay record|make|send ...
 *       a frame's exact bytes recorded through a proxy, an unbound frame
 *       made, and frames sent again (inject_replay.c).
 *   inject experts ADDR MODEL N_LAYER N_EXPERT: see inject_experts.c.
 *   inject silent LISTEN
 *       a REP socket on LISTEN that prints "silent on ADDR", then "request N
 *       (B bytes)" per request, and never answers (inject_silent.c).
 *   inject sec CASE ARGS... [--sender N] [--unbound] [--reply-ms N]
 *       hostile control and data frames (issue 12, findings 1 and 2), from
 *       a stranger's envelope sender id, or N (a copied id: without a key
 *       sender ids are not authenticated, and the other checks must hold):
 *       commit-unprepared WORKER_CTL EPOCH      Commit of an unprepared epoch
 *       prepare-commit-reroute COORD WORKER_CTL TARGET
 *           the serving plan (asked of COORD) as epoch + 1 with every data
 *           and result address TARGET, correctly hashed: Prepare, Commit
 *       commit-bad-hash COORD WORKER_CTL        the plan as epoch + 1 with
 *           the old plan's hash: Prepare, then Commit of that hash
 *       step-forged-session WORKER_DATA EPOCH HASH SESSION POS NTOK [TOKEN]
 *           a stage-0 STEP rewriting positions [POS, POS + NTOK) of SESSION
 *       result-forged RESULTS EPOCH BATCH SESSION[,SESSION...] [TOKEN]
 *           a StepResult of BATCH (of EPOCH) giving each session TOKEN
 *       end-sessions-bound WORKER_CTL_A WORKER_CTL_B
 *           an EndSessions sealed for worker A (its control id read from
 *           the reply to a Probe) sent to worker B, then to A (finding 8)
 *       Replies are printed as for req ("reply: refuse: REASON" too).
 *       Under a key, worker control is bound to the worker it goes to (its
 *       id read from the reply to a Probe), unless --unbound. --reply-ms:
 *       how long a reply is waited for (default 30000: a Prepare's waits for
 *       the stage to load); a test that expects none says how long. */
#include <math.h>
#include <nng/nng.h>
#include <nng/protocol/pipeline0/push.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/util/platform.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/wire/envelope.h"
#include "common/net/exposure.h"
#include "common/model/gguf.h"
#include "common/wire/msg.h"
#include "common/wire/pbuf_budget.h"
#include "common/wire/step.h"
#include "common/base/version.h"
#include "tests/cluster/inject.h"

int inj_usage(void)
{
    fprintf(stderr, "usage: inject req ADDR CASE [--key FILE] | inject step ADDR EPOCH "
                    "[--key FILE] [--encrypt] [--bad-mac] [--hash HEX] [--route R,R,...] | "
                    "inject sec CASE ARGS... [--sender N] | inject role ADDR CASE ... | "
                    "inject replay record LISTEN TARGET DIR | inject replay make FILE CASE "
                    "[--admin-key F | --client-key F] | inject replay send ADDR FILE...\n");
    return 2;
}

int inj_send_raw(nng_socket s, const uint8_t *buf, size_t len)
{
    int rv = nng_send(s, (void *)buf, len, 0);
    if (rv != 0) {
        fprintf(stderr, "inject: send: %s\n", nng_strerror(rv));
        return 1;
    }
    return 0;
}

int inj_print_reply(nng_socket s, st_env *env)
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
    else if (r->body_case == STRATA__MSG__BODY_REFUSE)
        printf("reply: refuse: %s\n", r->refuse->reason ? r->refuse->reason : "");
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
    if (strncmp(what, "probe-", 6) != 0 && inj_bind_coord(addr, env) != 0) { /* a worker's */
        nng_close(s);
        return 1;
    }
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
int inj_parse_hash(const char *hex, uint8_t out[32])
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

int inj_model_id(const char *path, uint8_t out[32])
{
    st_gguf *g = NULL;
    st_err e = st_gguf_open(path, &g);
    if (e == ST_OK)
        e = st_gguf_model_id(g, out);
    st_gguf_close(g);
    if (e != ST_OK) {
        fprintf(stderr, "inject: %s\n", st_errmsg(e));
        return 1;
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

/* ---- decoder bombs and transports (issue 12, findings 3 and 9) ----
 *   inject step-rows-bomb ADDR SIZE_MIB   a STEP frame of about SIZE_MIB MiB
 *       whose StepMeta is millions of empty rows, to a worker's data socket
 *   inject step-scalar-bomb ADDR SIZE_MIB   the same with millions of
 *       occurrences of StepMeta.batch_id = 1 (no list to count: protobuf-c's
 *       scratch record per occurrence is what the budget must stop)
 *   inject req-bomb ADDR join|heartbeat SIZE_MIB|SIZE_KIBk   a control request of
 *       about SIZE_MIB MiB: a Join listing millions of empty kernel names,
 *       or a Heartbeat of millions of empty layers; prints the reply or
 *       "reply: none (...)" when the receiver dropped it (both exit 0)
 *   inject req ADDR join-ipc | join-inproc   a Join announcing
 *       ipc:///tmp/x as its control address (inproc://x as its data one)
 * Keyless only: the bombs test what an unauthenticated stranger can do. */

#define INJ_MIB ((size_t)1 << 20)
#define INJ_BOMB_MAX_MIB 256 /* ST_ENV_MAX_BODY */
#define INJ_BOMB_SLACK 64    /* bytes left for tags and lengths around the elements */
#define INJ_BOMB_TIMEOUT_MS 5000
#define INJ_LINGER_MS 1000 /* lets a large frame leave before the socket closes */
#define INJ_WT_VARINT 0
#define INJ_WT_LEN 2

/* inj_bomb_bytes - n occurrences of field `leaf` (empty length-delimited,
 * or the varint 1 when leaf_wt is INJ_WT_VARINT) nested inside the
 * length-delimited fields path[0..depth) (outermost first), after a
 * varint field `first` = 1 in the innermost message (0: none). Returns
 * the bytes (malloc) and their length. */
static uint8_t *inj_bomb_bytes(const uint32_t *path, size_t depth, uint32_t first, uint32_t leaf,
                               unsigned leaf_wt, size_t n, size_t *len)
{
    uint8_t el[2 * ST_PB_VARINT_MAX], pre[2 * ST_PB_VARINT_MAX];
    size_t el_n = st_pb_put_tag(el, leaf, leaf_wt);
    el[el_n++] = leaf_wt == INJ_WT_VARINT ? 1 : 0;
    size_t pre_n = first ? st_pb_put_tag(pre, first, INJ_WT_VARINT) : 0;
    if (first)
        pre[pre_n++] = 1;
    size_t inner = pre_n + n * el_n, hdr = depth * 2 * ST_PB_VARINT_MAX;
    uint8_t *buf = malloc(inner + hdr);
    if (buf == NULL)
        return NULL;
    /* the innermost message at the end of buf, wrapped outwards */
    size_t start = hdr;
    memcpy(buf + start, pre, pre_n);
    for (size_t i = 0; i < n; i++)
        memcpy(buf + start + pre_n + i * el_n, el, el_n);
    size_t cur = inner;
    for (size_t d = depth; d-- > 0;) {
        uint8_t h[2 * ST_PB_VARINT_MAX];
        size_t hn = st_pb_put_tag(h, path[d], INJ_WT_LEN);
        hn += st_pb_put_varint(h + hn, cur);
        start -= hn;
        memcpy(buf + start, h, hn);
        cur += hn;
    }
    memmove(buf, buf + start, cur);
    *len = cur;
    return buf;
}

/* The bomb commands' watchdog. Each step of a bomb (dial, send, wait for a
 * reply, close) is bounded by NNG's timeouts, yet a long suite on a loaded
 * machine once saw one of them outlive the test's 120 s. The watchdog makes
 * such a stall a result instead of a hang: after INJ_WATCHDOG_S it reports
 * the step it was in and exits. A stall before a reply is reported as
 * "reply: none" (none came: what the over-limit cases expect and the
 * under-limit ones fail on); a stall in the final close, after the result
 * was printed, exits 0. The receiver's health is checked by the test itself
 * (peak RSS, counters, and serving with golden ids afterwards). */
#define INJ_WATCHDOG_S 30

typedef enum inj_stage {
    INJ_STAGE_DIAL = 0,
    INJ_STAGE_SEND,
    INJ_STAGE_REPLY,
    INJ_STAGE_CLOSE,
    INJ_STAGE_COUNT
} inj_stage;

static volatile sig_atomic_t inj_stage_now = INJ_STAGE_DIAL;

static void inj_watchdog(int sig)
{
    static const char *const msg[INJ_STAGE_COUNT] = {
        [INJ_STAGE_DIAL] = "reply: none (inject watchdog: stalled while dialing)\n",
        [INJ_STAGE_SEND] = "reply: none (inject watchdog: stalled while sending)\n",
        [INJ_STAGE_REPLY] = "reply: none (inject watchdog: stalled waiting for a reply)\n",
        [INJ_STAGE_CLOSE] = "inject watchdog: stalled while closing, after the result\n",
    };
    (void)sig;
    const char *m = msg[inj_stage_now];
    ssize_t w = write(STDOUT_FILENO, m, strlen(m));
    (void)w;
    _exit(inj_stage_now == INJ_STAGE_CLOSE ? 0 : 1);
}

/* inj_watch - arms the watchdog (once per process) and records the step. */
static void inj_watch(inj_stage st)
{
    if (st == INJ_STAGE_DIAL) {
        signal(SIGALRM, inj_watchdog);
        alarm(INJ_WATCHDOG_S);
    }
    inj_stage_now = st;
}

/* inj_dial - a PUSH (req false) or REQ socket dialing addr, with both
 * timeouts INJ_BOMB_TIMEOUT_MS and no REQ resend; 1 (reported) if not. */
int inj_dial(const char *addr, bool req, nng_socket *s)
{
    int rv = req ? nng_req0_open(s) : nng_push0_open(s);
    if (rv == 0 && (rv = nng_dial(*s, addr, NULL, 0)) != 0)
        nng_close(*s);
    if (rv != 0) {
        fprintf(stderr, "inject: %s: %s\n", addr, nng_strerror(rv));
        return 1;
    }
    nng_socket_set_ms(*s, NNG_OPT_SENDTIMEO, INJ_BOMB_TIMEOUT_MS);
    nng_socket_set_ms(*s, NNG_OPT_RECVTIMEO, INJ_BOMB_TIMEOUT_MS);
    if (req)
        nng_socket_set_ms(*s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    return 0;
}

int inj_bind_coord(const char *addr, st_env *env)
{
    static uint64_t id;
    static const char *id_addr;
    if (!env->keyed)
        return 0;
    if (id == 0 || strcmp(id_addr, addr) != 0) {
        nng_socket s;
        if (inj_dial(addr, true, &s) != 0)
            return 1;
        Strata__Msg m, *r = NULL;
        Strata__Hello h;
        st_msg_hello_msg(&m, &h);
        uint64_t from = 0;
        st_err e = st_msg_send(s, env, ST_ENV_CONTROL, &m);
        if (e == ST_OK)
            e = st_msg_recv(s, env, ST_ENV_CONTROL, &r, &from);
        if (e == ST_OK && r->body_case != STRATA__MSG__BODY_ACK)
            e = st_errorf(ST_EPROTO, "a %s answered the Hello", st_msg_case_name(r));
        st_msg_free(r);
        nng_close(s);
        if (e != ST_OK) {
            fprintf(stderr, "inject: hello to %s: %s\n", addr, st_errmsg(e));
            return 1;
        }
        id = from;
        id_addr = addr;
    }
    env->to = id;
    return 0;
}

/* inj_bomb_size - SIZE_MIB parsed (1..INJ_BOMB_MAX_MIB) in bytes, or
 * SIZE_KIB followed by 'k' (1..1023 KiB: under the coordinator's 1 MiB TCP
 * control limit); 0 if bad. */
static size_t inj_bomb_size(const char *txt)
{
    char *end;
    unsigned long v = strtoul(txt, &end, 10);
    if (end != txt && end[0] == 'k' && end[1] == '\0' && v >= 1 && v < INJ_MIB / 1024)
        return (size_t)v * 1024;
    if (end == txt || *end != '\0' || v < 1 || v > INJ_BOMB_MAX_MIB)
        return 0;
    return (size_t)v * INJ_MIB;
}

/* inj_seal - body[0..n) in a keyless envelope of kind (malloc). */
static uint8_t *inj_seal(st_env *env, st_env_kind kind, const uint8_t *body, size_t n, size_t *len)
{
    *len = st_env_size(env, n);
    uint8_t *buf = malloc(*len);
    if (buf == NULL)
        return NULL;
    memcpy(buf + ST_ENV_HDR, body, n);
    if (st_env_seal(env, kind, buf, n) != ST_OK) {
        free(buf);
        return NULL;
    }
    return buf;
}

static int inj_step_bomb(const char *addr, bool rows, const char *size_txt, st_env *env)
{
    static const uint32_t meta_rows = 4, meta_epoch = 1, meta_batch = 3; /* StepMeta fields */
    size_t size = inj_bomb_size(size_txt);
    if (size == 0)
        return inj_usage();
    size_t body_max = size - st_env_size(env, 0) - ST_STEP_LEN_BYTES - INJ_BOMB_SLACK;
    size_t meta_len;
    uint8_t *meta = inj_bomb_bytes(NULL, 0, meta_epoch, rows ? meta_rows : meta_batch,
                                   rows ? INJ_WT_LEN : INJ_WT_VARINT, body_max / 2, &meta_len);
    uint8_t *body = meta ? malloc(ST_STEP_LEN_BYTES + meta_len) : NULL;
    if (body == NULL) {
        free(meta);
        fprintf(stderr, "inject: out of memory\n");
        return 1;
    }
    for (int i = 0; i < ST_STEP_LEN_BYTES; i++)
        body[i] = (uint8_t)(meta_len >> (8 * i));
    memcpy(body + ST_STEP_LEN_BYTES, meta, meta_len);
    free(meta);
    size_t len;
    uint8_t *frame = inj_seal(env, ST_ENV_STEP, body, ST_STEP_LEN_BYTES + meta_len, &len);
    free(body);
    nng_socket s;
    inj_watch(INJ_STAGE_DIAL);
    if (frame == NULL || inj_dial(addr, false, &s) != 0) {
        free(frame);
        return 1;
    }
    inj_watch(INJ_STAGE_SEND);
    int rc = inj_send_raw(s, frame, len);
    free(frame);
    nng_msleep(INJ_LINGER_MS);
    if (rc == 0)
        printf("sent: step %s bomb of %zu bytes (StepMeta of %zu bytes)\n",
               rows ? "rows" : "scalar", len, meta_len);
    fflush(stdout);
    inj_watch(INJ_STAGE_CLOSE);
    nng_close(s);
    return rc;
}

static int inj_req_bomb(const char *addr, const char *kind, const char *size_txt, st_env *env)
{
    static const uint32_t join_path[] = {1, 2}, hb_path[] = {3}; /* Msg.join.cap, Msg.heartbeat */
    static const uint32_t cap_kernels = 6, hb_worker_id = 1, hb_layers = 7;
    size_t size = inj_bomb_size(size_txt), n = 0, len = 0;
    if (size == 0 || (strcmp(kind, "join") != 0 && strcmp(kind, "heartbeat") != 0))
        return inj_usage();
    n = (size - st_env_size(env, 0) - INJ_BOMB_SLACK) / 2;
    bool join = strcmp(kind, "join") == 0;
    uint8_t *body = join ? inj_bomb_bytes(join_path, 2, 0, cap_kernels, INJ_WT_LEN, n, &len)
                         : inj_bomb_bytes(hb_path, 1, hb_worker_id, hb_layers, INJ_WT_LEN, n, &len);
    uint8_t *frame = body ? inj_seal(env, ST_ENV_CONTROL, body, len, &len) : NULL;
    free(body);
    nng_socket s;
    inj_watch(INJ_STAGE_DIAL);
    if (frame == NULL || inj_dial(addr, true, &s) != 0) {
        free(frame);
        return 1;
    }
    inj_watch(INJ_STAGE_SEND);
    int rc = inj_send_raw(s, frame, len);
    free(frame);
    printf("sent: %s bomb of %zu bytes\n", kind, len);
    fflush(stdout);
    inj_watch(INJ_STAGE_REPLY);
    if (rc == 0)
        inj_print_reply(s, env); /* "reply: none" when the receiver dropped it */
    fflush(stdout);
    inj_watch(INJ_STAGE_CLOSE);
    nng_close(s);
    return rc;
}

/* inj_join_addr - a Join announcing ctl (and data) addresses; prints the reply. */
static int inj_join_addr(const char *addr, const char *what, st_env *env)
{
    bool ipc = strcmp(what, "join-ipc") == 0;
    nng_socket s;
    if (inj_dial(addr, true, &s) != 0)
        return 1;
    uint8_t model_id[32] = {0};
    char *kernels[1] = {"ref"};
    Strata__Capability cap = STRATA__CAPABILITY__INIT;
    cap.name = "inject";
    cap.cores = 1;
    cap.threads = 1;
    cap.memory_budget = (uint64_t)1 << 30;
    cap.data_addr = ipc ? "tcp://127.0.0.1:1" : "inproc://x";
    cap.ctl_addr = ipc ? "ipc:///tmp/x" : "tcp://127.0.0.1:2";
    cap.model_id.data = model_id;
    cap.model_id.len = sizeof model_id;
    cap.n_kernels = 1;
    cap.kernels = kernels;
    Strata__Join join = STRATA__JOIN__INIT;
    join.protocol = STRATA__VERSION__PROTOCOL;
    join.cap = &cap;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_JOIN;
    m.join = &join;
    if (inj_bind_coord(addr, env) != 0) {
        nng_close(s);
        return 1;
    }
    st_err e = st_msg_send(s, env, ST_ENV_CONTROL, &m);
    int rc = e == ST_OK ? inj_print_reply(s, env) : 1;
    if (e != ST_OK)
        fprintf(stderr, "inject: %s\n", st_errmsg(e));
    nng_close(s);
    return rc;
}

/* inj_sec_main - the commands above; -1 when argv is none of them. */
static int inj_sec_main(int argc, char **argv, st_env *env)
{
    if ((strcmp(argv[1], "step-rows-bomb") == 0 || strcmp(argv[1], "step-scalar-bomb") == 0) &&
        argc == 4)
        return inj_step_bomb(argv[2], strcmp(argv[1], "step-rows-bomb") == 0, argv[3], env);
    if (strcmp(argv[1], "req-bomb") == 0 && argc == 5)
        return inj_req_bomb(argv[2], argv[3], argv[4], env);
    if (strcmp(argv[1], "req") == 0 && argc == 4 &&
        (strcmp(argv[3], "join-ipc") == 0 || strcmp(argv[3], "join-inproc") == 0))
        return inj_join_addr(argv[2], argv[3], env);
    return -1;
}
/* ---- end of the decoder bombs and transports ---- */

/* ---- versions (issue 19, common/base/version.h) ----
 *   inject req ADDR join-future   a Join from a build of the future: protocol
 *       ST_PROTO_VERSION + 1 whose oldest is the same (it cannot speak
 *       ours), naming its build INJ_FUTURE_LINE; prints the reply
 *   inject req ADDR join-newer MODEL   a Join of protocol ST_PROTO_VERSION
 *       + 1 that still speaks ours (oldest ST_PROTO_VERSION), with the id
 *       of the GGUF file MODEL; prints "reply: join_reply protocol N
 *       version LINE" when accepted
 * Keyless only, with addresses nobody listens on (an accepted one is a
 * member that never heartbeats, then lost). */

#define INJ_FUTURE_LINE "99.0.0 (commit inject, release)"

/* inj_version_main - the cases above; -1 when argv is none of them. */
static int inj_version_main(int argc, char **argv, const uint8_t *key)
{
    bool future = argc == 4 && strcmp(argv[3], "join-future") == 0;
    if (strcmp(argv[1], "req") != 0 ||
        !(future || (argc == 5 && strcmp(argv[3], "join-newer") == 0)))
        return -1;
    uint8_t model_id[32] = {0};
    if (!future && inj_model_id(argv[4], model_id) != 0)
        return 1;
    st_env env;
    if (st_env_init_mode(&env, key, false, 0xdead0000u + (uint64_t)rand()) != ST_OK)
        return 1;
    nng_socket s;
    if (inj_dial(argv[2], true, &s) != 0) {
        st_env_fini(&env);
        return 1;
    }
    Strata__Capability cap = STRATA__CAPABILITY__INIT;
    cap.name = future ? "inject-future" : "inject-newer";
    cap.cores = 1;
    cap.threads = 1;
    cap.memory_budget = (uint64_t)1 << 30;
    cap.data_addr = "tcp://127.0.0.1:1";
    cap.ctl_addr = "tcp://127.0.0.1:2";
    cap.model_id.data = model_id;
    cap.model_id.len = sizeof model_id;
    cap.version = INJ_FUTURE_LINE;
    Strata__Join join = STRATA__JOIN__INIT;
    join.protocol = ST_PROTO_VERSION + 1;
    join.protocol_oldest = future ? ST_PROTO_VERSION + 1 : ST_PROTO_VERSION;
    join.cap = &cap;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_JOIN;
    m.join = &join;
    Strata__Msg *r = NULL;
    st_err e =
        inj_bind_coord(argv[2], &env) != 0 ? ST_EAUTH : st_msg_send(s, &env, ST_ENV_CONTROL, &m);
    if (e == ST_OK)
        e = st_msg_recv(s, &env, ST_ENV_CONTROL, &r, NULL);
    int rc = 0;
    if (e != ST_OK) {
        printf("reply: none (%s)\n", st_errmsg(e));
        rc = 1;
    } else if (r->body_case == STRATA__MSG__BODY_JOIN_REPLY) {
        printf("reply: join_reply protocol %u version %s\n", r->join_reply->protocol,
               r->join_reply->version ? r->join_reply->version : "");
    } else if (r->body_case == STRATA__MSG__BODY_ERROR) {
        printf("reply: error %u %s: %s\n", r->error->code, st_strerror((st_err)r->error->code),
               r->error->message);
    } else {
        printf("reply: %s\n", st_msg_case_name(r));
    }
    st_msg_free(r);
    nng_close(s);
    st_env_fini(&env);
    return rc;
}
/* ---- end of the versions ---- */

int inj_key_take(int *argc, char **argv, uint8_t key[ST_KEY_BYTES], bool *keyed)
{
    const char *file = NULL;
    bool none = false;
    int n = 0;
    for (int i = 0; i < *argc; i++) {
        if (strcmp(argv[i], "--key") == 0 && i + 1 < *argc)
            file = argv[++i];
        else if (strcmp(argv[i], "--no-key") == 0)
            none = true;
        else
            argv[n++] = argv[i];
    }
    *argc = n;
    argv[n] = NULL;
    char local[ST_LOCAL_KEY_PATH_MAX];
    for (int i = 1; file == NULL && !none && i < n; i++)
        if (st_local_key_find(argv[i], local, sizeof local))
            file = local;
    *keyed = file != NULL && !none;
    if (!*keyed)
        return 0;
    st_err e = st_key_load(file, key);
    if (e != ST_OK) {
        fprintf(stderr, "inject: %s\n", st_errmsg(e));
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    uint8_t key[ST_KEY_BYTES];
    bool keyed;
    if (inj_key_take(&argc, argv, key, &keyed) != 0)
        return 1;
    const uint8_t *k = keyed ? key : NULL;
    if (argc >= 2 && strcmp(argv[1], "sec") == 0) /* hostile control and data frames */
        return inj_ctl_main(argc - 2, argv + 2, k);
    if (argc >= 4 && strcmp(argv[1], "role") == 0) /* credentials, roles, owners: inject_role.c */
        return inj_role_main(argc, argv, k);
    if (argc >= 2 && strcmp(argv[1], "replay") == 0) /* frames recorded and replayed */
        return inj_replay_main(argc - 2, argv + 2, k);
    if (argc >= 2 && strcmp(argv[1], "experts") == 0) /* MoE load in heartbeats */
        return inj_experts_main(argc, argv, k);
    if (argc >= 2 && strcmp(argv[1], "silent") == 0) /* a source that never answers */
        return inj_silent_main(argc, argv);
    if (argc < 4)
        return inj_usage();
    st_env sec_env; /* the decoder bombs and transports: own arguments */
    if (st_env_init_mode(&sec_env, k, false, 0xdead0000u + (uint64_t)rand()) != ST_OK)
        return 1;
    int sec_rc = inj_sec_main(argc, argv, &sec_env);
    st_env_fini(&sec_env);
    if (sec_rc >= 0)
        return sec_rc;
    int ver_rc = inj_version_main(argc, argv, k); /* the versions: own cases */
    if (ver_rc >= 0)
        return ver_rc;
    bool encrypt = false;
    uint64_t epoch = 0;
    inj_step_opts so;
    memset(&so, 0, sizeof so);
    for (int i = 4; i < argc; i++) {
        if (strcmp(argv[i], "--encrypt") == 0)
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
    st_env env;
    if (st_env_init_mode(&env, k, encrypt, 0xdead0000u + (uint64_t)rand()) != ST_OK)
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
