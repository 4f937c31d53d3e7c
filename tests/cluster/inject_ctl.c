/* inject_ctl.c - `inject sec`: hostile worker control and forged data
 * frames (issue 12, findings 1 and 2; the commands are listed in
 * inject.c's header, and tests/cluster/sec_control.py drives them). Each
 * frame goes out under a stranger's envelope sender id, or one given
 * with --sender (a copied id: without a key sender ids are not
 * authenticated, and the other checks must hold alone). */
#include <nng/nng.h>
#include <nng/supplemental/util/platform.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire/envelope.h"
#include "common/wire/msg.h"
#include "common/text/sampling.h"
#include "common/wire/step.h"
#include "tests/cluster/inject.h"

#define INJ_CTL_TIMEOUT_MS 30000 /* a Prepare's reply waits for the stage to load */
#define INJ_CTL_TOKEN 3          /* a valid id of every test model, not BOS/EOS */
#define INJ_CTL_MAX_ROWS 16      /* sessions of a forged result */
#define INJ_CTL_DROP_MS 3000     /* end-sessions-bound: B drops the frame; stop waiting */

static bool inj_ctl_unbound;                      /* --unbound: control requests name no receiver */
static int inj_ctl_reply_ms = INJ_CTL_TIMEOUT_MS; /* --reply-ms: a reply's wait */

/* inj_ctl_learn - the control id of the worker at addr (the envelope
 * sender of its reply to a Probe, which anyone may send): what a
 * coordinator binds its requests to (envelope.h). */
static st_err inj_ctl_learn(const char *addr, st_env *env, uint64_t *id)
{
    nng_socket s;
    if (inj_dial(addr, true, &s) != 0)
        return st_errorf(ST_ENNG, "dial %s", addr);
    nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, INJ_CTL_TIMEOUT_MS);
    Strata__Probe pb = STRATA__PROBE__INIT;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_PROBE;
    m.probe = &pb;
    Strata__Msg *r = NULL;
    st_err e = st_msg_send(s, env, ST_ENV_CONTROL, &m);
    if (e == ST_OK)
        e = st_msg_recv(s, env, ST_ENV_CONTROL, &r, id);
    st_msg_free(r);
    nng_close(s);
    return e;
}

/* inj_ctl_rpc - sends m to the REP at addr and prints the reply; with a
 * key the request is bound to the worker there, as the coordinator's are
 * (so the checks after the binding are what refuses it). */
static int inj_ctl_rpc(const char *addr, st_env *env, const Strata__Msg *m)
{
    uint64_t to = 0;
    st_err e = env->keyed && !inj_ctl_unbound ? inj_ctl_learn(addr, env, &to) : ST_OK;
    if (e != ST_OK) {
        fprintf(stderr, "inject: probe of %s: %s\n", addr, st_errmsg(e));
        return 1;
    }
    nng_socket s;
    if (inj_dial(addr, true, &s) != 0)
        return 1;
    nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, inj_ctl_reply_ms);
    env->to = to;
    e = st_msg_send(s, env, ST_ENV_CONTROL, m);
    int rc = e == ST_OK ? inj_print_reply(s, env) : 1;
    if (e != ST_OK)
        fprintf(stderr, "inject: %s\n", st_errmsg(e));
    nng_close(s);
    return rc;
}

/* inj_ctl_commit - Commit{epoch, hash} to the worker at addr. */
static int inj_ctl_commit(const char *addr, st_env *env, uint64_t epoch, const uint8_t hash[32])
{
    Strata__Commit c = STRATA__COMMIT__INIT;
    c.epoch = epoch;
    c.plan_hash.data = (uint8_t *)hash;
    c.plan_hash.len = 32;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_COMMIT;
    m.commit = &c;
    return inj_ctl_rpc(addr, env, &m);
}

/* inj_ctl_plan - the serving plan, asked of the coordinator at addr (a
 * PlanRequest, as `strata plan` does); free the reply with st_msg_free. */
static int inj_ctl_plan(const char *addr, st_env *env, Strata__Msg **reply)
{
    nng_socket s;
    if (inj_dial(addr, true, &s) != 0)
        return 1;
    Strata__PlanRequest pq = STRATA__PLAN_REQUEST__INIT;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_PLAN_REQ;
    m.plan_req = &pq;
    bool learn = env->learn_peer;
    env->learn_peer = true; /* a Hello first when keyed (msg.h): the coordinator binds */
    st_err e = st_msg_call(s, env, &m, INJ_CTL_TIMEOUT_MS, reply);
    env->learn_peer = learn;
    nng_close(s);
    if (e == ST_OK && (*reply)->body_case != STRATA__MSG__BODY_PLAN) {
        st_msg_free(*reply);
        e = st_errorf(ST_EPROTO, "no plan in the reply");
    }
    if (e != ST_OK) {
        fprintf(stderr, "inject: plan from %s: %s\n", addr, st_errmsg(e));
        return 1;
    }
    return 0;
}

/* inj_ctl_prepare - sends the plan p as epoch + 1 (data and result
 * addresses target when not NULL; hashed correctly unless bad_hash, which
 * keeps the serving plan's hash) to the worker at wctl, then Commit of
 * that epoch and hash. */
static int inj_ctl_prepare(const char *coord, const char *wctl, const char *target, bool bad_hash,
                           st_env *env)
{
    Strata__Msg *pm;
    if (inj_ctl_plan(coord, env, &pm) != 0)
        return 1;
    Strata__Plan *p = pm->plan;
    if (p->plan_hash.len != 32) {
        fprintf(stderr, "inject: the coordinator serves no plan\n");
        st_msg_free(pm);
        return 1;
    }
    uint8_t hash[32];
    memcpy(hash, p->plan_hash.data, 32);
    p->epoch++;
    for (size_t i = 0; target != NULL && i <= p->n_stages; i++) { /* st_msg_free frees them */
        size_t nk = i < p->n_stages ? p->stages[i]->n_data_addrs : 1;
        for (size_t k = 0; k < nk; k++) {
            char **a = i < p->n_stages ? &p->stages[i]->data_addrs[k] : &p->result_addr;
            free(*a);
            *a = strdup(target);
        }
    }
    if (!bad_hash) { /* BLAKE2b-256 of the plan packed with an empty hash (coordinator/cluster/plan.c) */
        p->plan_hash.len = 0;
        size_t n = strata__plan__get_packed_size(p);
        uint8_t *buf = malloc(n ? n : 1);
        if (buf == NULL || sodium_init() < 0) {
            free(buf);
            st_msg_free(pm);
            return 1;
        }
        strata__plan__pack(p, buf);
        crypto_generichash(hash, sizeof hash, buf, n, NULL, 0);
        free(buf);
        p->plan_hash.len = 32;
    }
    memcpy(p->plan_hash.data, hash, 32); /* the reply's own buffer, 32 bytes */
    Strata__Prepare pr = STRATA__PREPARE__INIT;
    pr.plan = p;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_PREPARE;
    m.prepare = &pr;
    uint64_t epoch = p->epoch;
    int rc = inj_ctl_rpc(wctl, env, &m);
    st_msg_free(pm);
    return rc != 0 ? rc : inj_ctl_commit(wctl, env, epoch, hash);
}

/* inj_ctl_push - pushes msg (packed with e; freed here) to the PULL at addr. */
static int inj_ctl_push(const char *addr, st_err e, nng_msg *msg)
{
    nng_socket s;
    if (e != ST_OK) {
        fprintf(stderr, "inject: %s\n", st_errmsg(e));
        return 1;
    }
    int rc = 1;
    if (inj_dial(addr, false, &s) == 0) {
        rc = inj_send_raw(s, nng_msg_body(msg), nng_msg_len(msg));
        nng_msleep(200); /* let the message leave before the socket closes */
        nng_close(s);
    }
    nng_msg_free(msg);
    return rc;
}

/* inj_ctl_step - a stage-0 STEP of the current epoch and plan hash whose
 * one row rewrites positions [pos, pos + ntok) of session sid with token. */
static int inj_ctl_step(const char *addr, st_env *env, uint64_t epoch, const uint8_t hash[32],
                        uint64_t sid, uint32_t pos, uint32_t ntok, int32_t token)
{
    int32_t *toks = calloc(ntok ? ntok : 1, sizeof *toks);
    if (toks == NULL)
        return 1;
    for (uint32_t i = 0; i < ntok; i++)
        toks[i] = token;
    Strata__StepRow row = STRATA__STEP_ROW__INIT;
    Strata__StepRow *rows[1] = {&row};
    row.session_id = sid;
    row.pos = pos;
    row.n_tokens = ntok;
    row.tokens = toks;
    Strata__StepMeta meta = STRATA__STEP_META__INIT;
    meta.epoch = epoch;
    meta.plan_hash.data = (uint8_t *)hash;
    meta.plan_hash.len = 32;
    randombytes_buf(&meta.batch_id, sizeof meta.batch_id);
    meta.n_rows = 1;
    meta.rows = rows;
    nng_msg *msg = NULL;
    st_err e = st_step_pack(env, &meta, &msg);
    free(toks);
    int rc = inj_ctl_push(addr, e, msg);
    if (rc == 0)
        printf("sent: step session %llu positions [%u, %u)\n", (unsigned long long)sid, pos,
               pos + ntok);
    return rc;
}

/* inj_ctl_result - a StepResult of batch of epoch giving each of
 * sids[0..n) token. */
static int inj_ctl_result(const char *addr, st_env *env, uint64_t epoch, uint64_t batch,
                          const uint64_t *sids, size_t n, int32_t token)
{
    Strata__RowResult rr[INJ_CTL_MAX_ROWS], *rp[INJ_CTL_MAX_ROWS];
    uint64_t rng[ST_RNG_WORDS] = {1, 2, 3, 4}; /* any state: the coordinator keeps it */
    if (n > INJ_CTL_MAX_ROWS)
        return 1;
    for (size_t i = 0; i < n; i++) {
        strata__row_result__init(&rr[i]);
        rr[i].session_id = sids[i];
        rr[i].token = token;
        rr[i].n_rng = ST_RNG_WORDS;
        rr[i].rng = rng;
        rp[i] = &rr[i];
    }
    Strata__StepResult r = STRATA__STEP_RESULT__INIT;
    r.epoch = epoch;
    r.batch_id = batch;
    r.n_rows = n;
    r.rows = rp;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_RESULT;
    m.result = &r;
    nng_msg *msg = NULL;
    st_err e = st_msg_pack(env, ST_ENV_RESULT, &m, &msg);
    int rc = inj_ctl_push(addr, e, msg);
    if (rc == 0)
        printf("sent: result of batch %llu for %zu session(s)\n", (unsigned long long)batch, n);
    return rc;
}

/* inj_ctl_ids - "A,B,..." into ids (at most cap); -1 if malformed. */
static int inj_ctl_ids(const char *txt, uint64_t *ids, size_t cap, size_t *n)
{
    *n = 0;
    for (const char *q = txt; *q != '\0';) {
        char *end;
        unsigned long long v = strtoull(q, &end, 10);
        if (end == q || *n == cap || (*end != ',' && *end != '\0'))
            return -1;
        ids[(*n)++] = v;
        q = *end == ',' ? end + 1 : end;
    }
    return *n > 0 ? 0 : -1;
}

/* inj_ctl_send_frame - sends the packed frame msg (taken) on a REQ to
 * addr and prints its reply, waiting at most ms. */
static int inj_ctl_send_frame(const char *addr, st_env *env, nng_msg *msg, int ms)
{
    nng_socket s;
    if (inj_dial(addr, true, &s) != 0) {
        nng_msg_free(msg);
        return 1;
    }
    nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, ms);
    int rv = nng_sendmsg(s, msg, 0);
    if (rv != 0) {
        nng_msg_free(msg);
        printf("reply: none (send: %s)\n", nng_strerror(rv));
    } else {
        inj_print_reply(s, env);
    }
    nng_close(s);
    return 0;
}

/* inj_ctl_bound - finding 8: an EndSessions (of a random session) sealed
 * for worker A's control socket is sent to worker B, which must drop it
 * (the MAC binds A's id), then the same bytes to A, which takes it when
 * env speaks as the joined coordinator. Prints "B: reply: ..." and
 * "A: reply: ...". */
static int inj_ctl_bound(const char *a, const char *b, st_env *env)
{
    uint64_t a_id = 0;
    st_err e = inj_ctl_learn(a, env, &a_id);
    if (e != ST_OK) {
        fprintf(stderr, "inject: probe of %s: %s\n", a, st_errmsg(e));
        return 1;
    }
    uint64_t sid;
    randombytes_buf(&sid, sizeof sid);
    Strata__EndSessions es = STRATA__END_SESSIONS__INIT;
    es.n_session_ids = 1;
    es.session_ids = &sid;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_END_SESSIONS;
    m.end_sessions = &es;
    nng_msg *out, *copy;
    env->to = a_id;
    if ((e = st_msg_pack(env, ST_ENV_CONTROL, &m, &out)) != ST_OK) {
        fprintf(stderr, "inject: %s\n", st_errmsg(e));
        return 1;
    }
    if (nng_msg_dup(&copy, out) != 0) {
        nng_msg_free(out);
        return 1;
    }
    printf("A: control id %llu\nB: ", (unsigned long long)a_id);
    fflush(stdout);
    inj_ctl_send_frame(b, env, copy, INJ_CTL_DROP_MS);
    printf("A: ");
    fflush(stdout);
    return inj_ctl_send_frame(a, env, out, INJ_CTL_TIMEOUT_MS);
}

int inj_ctl_main(int argc, char **argv, const uint8_t *key)
{
    uint64_t sender;
    randombytes_buf(&sender, sizeof sender); /* a stranger */
    int n = 0;                               /* positional arguments: CASE ARGS... */
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--sender") == 0 && i + 1 < argc)
            sender = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--unbound") == 0)
            inj_ctl_unbound = true;
        else if (strcmp(argv[i], "--reply-ms") == 0 && i + 1 < argc)
            inj_ctl_reply_ms = atoi(argv[++i]);
        else
            argv[n++] = argv[i];
    }
    st_env env;
    if (n < 2 || st_env_init(&env, key, sender) != ST_OK)
        return inj_usage();
    const char *what = argv[0];
    uint8_t hash[32];
    uint64_t ids[INJ_CTL_MAX_ROWS];
    size_t nid;
    int rc = 2;
    if (strcmp(what, "commit-unprepared") == 0 && n == 3) {
        randombytes_buf(hash, sizeof hash);
        rc = inj_ctl_commit(argv[1], &env, strtoull(argv[2], NULL, 10), hash);
    } else if (strcmp(what, "prepare-commit-reroute") == 0 && n == 4) {
        rc = inj_ctl_prepare(argv[1], argv[2], argv[3], false, &env);
    } else if (strcmp(what, "commit-bad-hash") == 0 && n == 3) {
        rc = inj_ctl_prepare(argv[1], argv[2], NULL, true, &env);
    } else if (strcmp(what, "step-forged-session") == 0 && (n == 7 || n == 8) &&
               inj_parse_hash(argv[3], hash) == 0) {
        rc = inj_ctl_step(argv[1], &env, strtoull(argv[2], NULL, 10), hash,
                          strtoull(argv[4], NULL, 10), (uint32_t)strtoul(argv[5], NULL, 10),
                          (uint32_t)strtoul(argv[6], NULL, 10),
                          n == 8 ? (int32_t)strtol(argv[7], NULL, 10) : INJ_CTL_TOKEN);
    } else if (strcmp(what, "end-sessions-bound") == 0 && n == 3) {
        rc = inj_ctl_bound(argv[1], argv[2], &env);
    } else if (strcmp(what, "result-forged") == 0 && (n == 5 || n == 6) &&
               inj_ctl_ids(argv[4], ids, INJ_CTL_MAX_ROWS, &nid) == 0) {
        rc = inj_ctl_result(argv[1], &env, strtoull(argv[2], NULL, 10), strtoull(argv[3], NULL, 10),
                            ids, nid, n == 6 ? (int32_t)strtol(argv[5], NULL, 10) : INJ_CTL_TOKEN);
    }
    st_env_fini(&env);
    if (rc == 2)
        fprintf(stderr, "inject: sec: unknown case or arguments '%s'\n", what);
    return rc;
}
