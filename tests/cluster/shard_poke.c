/* shard_poke.c - a test tool sending one bad request to a standalone shard
 * server (worker/shard/standalone.h) and printing what came back:
 *
 *   shard_poke ADDR CASE   CASE: garbage | dtype | oversized | unknown |
 *                          wrong-model | huge | ok
 *
 * garbage: bytes that are no frame; dtype: a step packet in bf16; oversized:
 * a packet of one token more than the server's max_tokens; unknown: a step
 * of an unknown session at position 5; wrong-model: a packet naming another
 * model id; huge: a frame beyond the server's receive limit (NNG drops it
 * and the connection: no reply is expected); ok: a valid step.
 * Prints "reply: error CODE NAME: MESSAGE", "reply: ok" or "reply: none
 * (CODE NAME)"; exits 0 when it printed one of them, 1 on a local failure. */
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/net/shard.h"

#define POKE_TIMEOUT_MS 20000
#define POKE_GARBAGE_BYTES 100
#define POKE_UNKNOWN_POS 5
#define POKE_SESSION 0x5eed5eedull

/* poke_step_of - a step frame of n_tok tokens of zeros (dtype d) of
 * session at pos. */
static st_err poke_step_of(st_env *env, const st_shard_info *in, st_wire_dtype d, int64_t n_tok,
                           uint32_t pos, const uint8_t *model_id, uint64_t session, nng_msg **out)
{
    Strata__ShardStep st = STRATA__SHARD_STEP__INIT;
    Strata__ShardRequest rq = STRATA__SHARD_REQUEST__INIT;
    rq.req_case = STRATA__SHARD_REQUEST__REQ_STEP;
    rq.step = &st;
    st_wire_hdr h;
    memset(&h, 0, sizeof h);
    memcpy(h.plan_hash, model_id, ST_WIRE_PLAN_HASH_SIZE);
    h.stage = (uint16_t)in->first;
    h.n_rows = 1;
    h.hidden = in->hidden;
    st_wire_row row = {.session_id = session, .pos0 = pos, .n_tokens = (uint32_t)n_tok};
    float *x = calloc((size_t)n_tok * in->hidden, sizeof *x);
    if (x == NULL)
        return ST_ENOMEM;
    st_wire_ctx *w = NULL;
    st_err e = st_wire_ctx_new(0, &w);
    st_wire_opts o = {.dtype = d};
    if (e == ST_OK)
        e = st_shard_frame(env, &rq.base, &h, &row, x, &o, w, out);
    st_wire_ctx_free(w);
    free(x);
    return e;
}

/* poke_step - a step frame of n_tok tokens of zeros (dtype d) at pos. */
static st_err poke_step(st_env *env, const st_shard_info *in, st_wire_dtype d, int64_t n_tok,
                        uint32_t pos, const uint8_t *model_id, nng_msg **out)
{
    return poke_step_of(env, in, d, n_tok, pos, model_id, POKE_SESSION, out);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: shard_poke ADDR CASE\n");
        return 1;
    }
    const char *addr = argv[1], *cs = argv[2];
    st_shard *conn; /* the hello: the server's sizes */
    st_err e = st_shard_connect(addr, NULL, false, ST_WIRE_F32, POKE_TIMEOUT_MS, &conn);
    if (e != ST_OK) {
        fprintf(stderr, "shard_poke: %s\n", st_errmsg(e));
        return 1;
    }
    st_shard_info in = *st_shard_info_of(conn);
    st_shard_close(conn);
    st_env env;
    nng_socket s;
    nng_msg *m = NULL;
    uint8_t other[ST_WIRE_PLAN_HASH_SIZE];
    memset(other, 0xab, sizeof other);
    if (st_env_init(&env, NULL, 42) != ST_OK || nng_req0_open(&s) != 0 ||
        nng_dial(s, addr, NULL, 0) != 0) {
        fprintf(stderr, "shard_poke: cannot reach %s\n", addr);
        return 1;
    }
    nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, POKE_TIMEOUT_MS);
    nng_socket_set_ms(s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    if (strcmp(cs, "garbage") == 0) {
        if (nng_msg_alloc(&m, POKE_GARBAGE_BYTES) == 0)
            memset(nng_msg_body(m), 0x5a, POKE_GARBAGE_BYTES);
    } else if (strcmp(cs, "dtype") == 0) {
        e = poke_step(&env, &in, ST_WIRE_BF16, 1, 0, in.model_id, &m);
    } else if (strcmp(cs, "oversized") == 0) {
        e = poke_step(&env, &in, ST_WIRE_F32, in.max_tokens + 1, 0, in.model_id, &m);
    } else if (strcmp(cs, "unknown") == 0) {
        e = poke_step_of(&env, &in, ST_WIRE_F32, 1, POKE_UNKNOWN_POS, in.model_id, POKE_SESSION + 1,
                         &m);
    } else if (strcmp(cs, "wrong-model") == 0) {
        e = poke_step(&env, &in, ST_WIRE_F32, 1, 0, other, &m);
    } else if (strcmp(cs, "huge") == 0) {
        size_t lim;
        e = st_step_max_frame(in.hidden, in.max_tokens, &lim);
        if (e == ST_OK && nng_msg_alloc(&m, lim + 1) == 0)
            memset(nng_msg_body(m), 0, lim + 1);
    } else if (strcmp(cs, "ok") == 0) {
        e = poke_step(&env, &in, ST_WIRE_F32, 1, 0, in.model_id, &m);
    } else {
        fprintf(stderr, "shard_poke: unknown case '%s'\n", cs);
        return 1;
    }
    if (e != ST_OK || m == NULL) {
        fprintf(stderr, "shard_poke: building the request: %s\n", st_errmsg(e));
        return 1;
    }
    int rv = nng_sendmsg(s, m, 0);
    nng_msg *r = NULL;
    if (rv == 0)
        rv = nng_recvmsg(s, &r, 0);
    if (rv != 0) {
        printf("reply: none (%d %s)\n", rv, nng_strerror(rv));
        return 0;
    }
    st_step_parts parts;
    uint64_t sender;
    ProtobufCMessage *pm;
    e = st_shard_parse(&env, nng_msg_body(r), nng_msg_len(r), &strata__shard_reply__descriptor, &pm,
                       &parts, &sender);
    if (e != ST_OK) {
        fprintf(stderr, "shard_poke: a malformed reply: %s\n", st_errmsg(e));
        return 1;
    }
    const Strata__ShardReply *rep = (const Strata__ShardReply *)pm;
    if (rep->error != NULL)
        printf("reply: error %u %s: %s\n", rep->error->code,
               st_strerror((st_err)(rep->error->code < ST_ERR_COUNT ? rep->error->code : 0)),
               rep->error->message);
    else
        printf("reply: ok\n");
    protobuf_c_message_free_unpacked(pm, NULL);
    nng_msg_free(r);
    nng_close(s);
    st_env_fini(&env);
    return 0;
}
