/* msg.c - protobuf control messages in envelopes over NNG (see msg.h).
 *
 * Decoding a received Msg is bounded before protobuf-c allocates
 * (pbuf_budget.h): first the repeated fields of the messages that carry
 * lists (a Join's kernels and dtypes, a Heartbeat's layers and links, a
 * StepResult's rows, ...) are counted on the wire bytes and refused over
 * their limits (msg_lists), then the whole message is decoded within the
 * budget of its size. The pre-scan refuses the cheap bombs (millions of
 * empty elements) without allocating a byte; the budget bounds whatever
 * the pre-scan does not name. */
#include "common/wire/msg.h"

#include <stdlib.h>
#include <string.h>

#include "common/wire/pbuf_budget.h"
#include "common/wire/wire.h"

/* Msg body field numbers (strata.proto) and the fields of their lists. */
enum {
    MSG_F_JOIN = 1,
    MSG_F_HEARTBEAT = 3,
    MSG_F_PREPARE = 4,
    MSG_F_GENERATE = 16,
    MSG_F_RESULT = 22,
    MSG_F_HEARTBEAT_REPLY = 46,
    JOIN_F_CAP = 2,
    CAP_F_KERNELS = 6,
    CAP_F_DTYPES = 7,
    CAP_F_SPEEDS = 8,
    CAP_F_WIRE = 12,
    HB_F_LAYERS = 7,
    HB_F_LINKS = 11,
    HB_F_ZSTD = 12,
    HB_F_EXPERTS = 13,
    HBR_F_PEERS = 1,
    PREPARE_F_PLAN = 1,
    PLAN_F_STAGES = 4,
    GEN_F_STOP = 5,
    RESULT_F_ROWS = 3,
};

/* One bounded list: the field path from the top of a Msg and its limit. */
typedef struct msg_list {
    const char *name;
    uint32_t path[3];
    size_t depth;
    size_t max;
} msg_list;

static const msg_list msg_lists[] = {
    {"Join capability kernels", {MSG_F_JOIN, JOIN_F_CAP, CAP_F_KERNELS}, 3, ST_MSG_MAX_NAMES},
    {"Join capability dtypes", {MSG_F_JOIN, JOIN_F_CAP, CAP_F_DTYPES}, 3, ST_MSG_MAX_NAMES},
    {"Join capability speeds", {MSG_F_JOIN, JOIN_F_CAP, CAP_F_SPEEDS}, 3, ST_MSG_MAX_NAMES},
    {"Join capability wire_dtypes", {MSG_F_JOIN, JOIN_F_CAP, CAP_F_WIRE}, 3, ST_MSG_MAX_NAMES},
    {"Heartbeat layers", {MSG_F_HEARTBEAT, HB_F_LAYERS}, 2, ST_MSG_MAX_LAYERS},
    {"Heartbeat links", {MSG_F_HEARTBEAT, HB_F_LINKS}, 2, ST_MSG_MAX_PEERS},
    {"Heartbeat zstd", {MSG_F_HEARTBEAT, HB_F_ZSTD}, 2, ST_MSG_MAX_NAMES},
    {"Heartbeat experts", {MSG_F_HEARTBEAT, HB_F_EXPERTS}, 2, ST_MSG_MAX_LAYERS},
    {"HeartbeatReply peers", {MSG_F_HEARTBEAT_REPLY, HBR_F_PEERS}, 2, ST_MSG_MAX_PEERS},
    {"Prepare plan stages", {MSG_F_PREPARE, PREPARE_F_PLAN, PLAN_F_STAGES}, 3, ST_MSG_MAX_LAYERS},
    {"GenerateRequest stop strings", {MSG_F_GENERATE, GEN_F_STOP}, 2, ST_MSG_MAX_STOP},
    {"StepResult rows", {MSG_F_RESULT, RESULT_F_ROWS}, 2, ST_WIRE_MAX_ROWS},
};

/* msg_check_lists - refuses body[0..len) when one of msg_lists is too long. */
static st_err msg_check_lists(const uint8_t *body, size_t len, uint64_t sender)
{
    for (size_t i = 0; i < sizeof msg_lists / sizeof msg_lists[0]; i++) {
        const msg_list *l = &msg_lists[i];
        size_t n;
        st_err e = st_pb_count(body, len, l->path, l->depth, &n);
        if (e != ST_OK)
            return st_errwrap(e, "malformed Msg (%zu bytes) from sender %llu", len,
                              (unsigned long long)sender);
        if (n > l->max)
            return st_errorf(ST_ERANGE,
                             "%s: %zu in a message of %zu bytes from sender %llu; "
                             "at most %zu",
                             l->name, n, len, (unsigned long long)sender, l->max);
    }
    return ST_OK;
}

st_err st_msg_decode(const uint8_t *body, size_t len, uint64_t sender, Strata__Msg **out)
{
    *out = NULL;
    st_err e = msg_check_lists(body, len, sender);
    ProtobufCMessage *pm = NULL;
    if (e == ST_OK)
        e = st_pb_unpack(&strata__msg__descriptor, body, len, "Msg", sender, &pm);
    if (e != ST_OK)
        return e;
    Strata__Msg *m = (Strata__Msg *)pm;
    if (m->body_case == STRATA__MSG__BODY__NOT_SET) {
        strata__msg__free_unpacked(m, NULL);
        return st_errorf(ST_EFORMAT, "message from sender %llu has no body",
                         (unsigned long long)sender);
    }
    *out = m;
    return ST_OK;
}

st_err st_msg_pack_max(st_env *env, st_env_kind kind, const Strata__Msg *m, size_t max_frame,
                       nng_msg **out)
{
    *out = NULL;
    size_t body = strata__msg__get_packed_size(m);
    if (body > ST_ENV_MAX_BODY || st_env_size(env, body) > max_frame)
        return st_errorf(ST_ERANGE,
                         "%s of %zu bytes exceeds the frame limit (%zu bytes, body "
                         "at most %u)",
                         st_msg_case_name(m), body, max_frame, ST_ENV_MAX_BODY);
    nng_msg *msg;
    int rv = nng_msg_alloc(&msg, st_env_size(env, body));
    if (rv != 0)
        return st_err_nng(rv, "nng_msg_alloc");
    uint8_t *buf = nng_msg_body(msg);
    strata__msg__pack(m, buf + ST_ENV_HDR);
    st_err e = st_env_seal(env, kind, buf, body);
    if (e != ST_OK) {
        nng_msg_free(msg);
        return e;
    }
    *out = msg;
    return ST_OK;
}

st_err st_msg_unpack(st_env *env, st_env_kind kind, nng_msg *msg, Strata__Msg **out,
                     uint64_t *sender)
{
    bool hello;
    uint64_t from = 0;
    st_err e = st_msg_unpack_link(env, kind, msg, out, &from, &hello);
    if (e == ST_OK && hello) /* *sender is set on success only, as before */
        return st_errorf(ST_EFORMAT, "message from sender %llu has no body",
                         (unsigned long long)from);
    if (e == ST_OK && sender)
        *sender = from;
    return e;
}

st_err st_msg_unpack_link(st_env *env, st_env_kind kind, nng_msg *msg, Strata__Msg **out,
                          uint64_t *sender, bool *hello)
{
    *out = NULL;
    *hello = false;
    st_env_frame f;
    st_err e = st_env_open(env, nng_msg_body(msg), nng_msg_len(msg), &f);
    if (e != ST_OK)
        return e;
    if (f.kind != kind)
        return st_errorf(ST_EPROTO, "frame of kind %d where kind %d was expected", (int)f.kind,
                         (int)kind);
    if (f.body_len == 0) {
        if (sender)
            *sender = f.sender;
        *hello = true;
        return ST_OK;
    }
    Strata__Msg *m;
    if ((e = st_msg_decode(f.body, f.body_len, f.sender, &m)) != ST_OK)
        return e;
    if (sender)
        *sender = f.sender;
    *out = m;
    return ST_OK;
}

st_err st_msg_link_hello(st_env *env, st_env_kind kind, nng_msg **out)
{
    *out = NULL;
    nng_msg *msg;
    int rv = nng_msg_alloc(&msg, st_env_size(env, 0));
    if (rv != 0)
        return st_err_nng(rv, "nng_msg_alloc");
    st_err e = st_env_seal(env, kind, nng_msg_body(msg), 0);
    if (e != ST_OK) {
        nng_msg_free(msg);
        return e;
    }
    *out = msg;
    return ST_OK;
}

st_err st_msg_pack(st_env *env, st_env_kind kind, const Strata__Msg *m, nng_msg **out)
{
    return st_msg_pack_max(env, kind, m, SIZE_MAX, out);
}

void st_msg_free(Strata__Msg *m)
{
    if (m)
        strata__msg__free_unpacked(m, NULL);
}

st_err st_msg_send(nng_socket s, st_env *env, st_env_kind kind, const Strata__Msg *m)
{
    nng_msg *msg;
    st_err e = st_msg_pack(env, kind, m, &msg);
    if (e != ST_OK)
        return e;
    int rv = nng_sendmsg(s, msg, 0);
    if (rv != 0) {
        nng_msg_free(msg);
        return st_err_nng(rv, "send");
    }
    return ST_OK;
}

st_err st_msg_recv(nng_socket s, st_env *env, st_env_kind kind, Strata__Msg **out, uint64_t *sender)
{
    *out = NULL;
    nng_msg *msg;
    int rv = nng_recvmsg(s, &msg, 0);
    if (rv != 0)
        return st_err_nng(rv, "recv");
    st_err e = st_msg_unpack(env, kind, msg, out, sender);
    nng_msg_free(msg);
    return e;
}

void st_msg_hello_msg(Strata__Msg *m, Strata__Hello *h)
{
    strata__msg__init(m);
    strata__hello__init(h);
    m->body_case = STRATA__MSG__BODY_HELLO;
    m->hello = h;
}

/* msg_round - one request and its reply on req (st_msg_call's body). */
static st_err msg_round(nng_socket req, st_env *env, const Strata__Msg *m, int timeout_ms,
                        Strata__Msg **reply)
{
    nng_socket_set_ms(req, NNG_OPT_SENDTIMEO, timeout_ms);
    nng_socket_set_ms(req, NNG_OPT_RECVTIMEO, timeout_ms);
    st_err e = st_msg_send(req, env, ST_ENV_CONTROL, m);
    if (e != ST_OK)
        return e;
    Strata__Msg *r;
    if ((e = st_msg_recv(req, env, ST_ENV_CONTROL, &r, NULL)))
        return e;
    return st_msg_reply(r, reply);
}

st_err st_msg_hello(nng_socket req, st_env *env, int timeout_ms)
{
    Strata__Msg m, *r;
    Strata__Hello h;
    st_msg_hello_msg(&m, &h);
    st_err e = msg_round(req, env, &m, timeout_ms, &r);
    if (e != ST_OK)
        return e;
    if (r->body_case != STRATA__MSG__BODY_ACK)
        e = st_errorf(ST_EPROTO, "a %s answered a Hello (an Ack was expected)",
                      st_msg_case_name(r));
    st_msg_free(r);
    return e;
}

st_err st_msg_call(nng_socket req, st_env *env, const Strata__Msg *m, int timeout_ms,
                   Strata__Msg **reply)
{
    *reply = NULL;
    st_err e = st_env_unbound(env) ? st_msg_hello(req, env, timeout_ms) : ST_OK;
    return e != ST_OK ? e : msg_round(req, env, m, timeout_ms, reply);
}

st_err st_msg_reply(Strata__Msg *r, Strata__Msg **reply)
{
    *reply = NULL;
    if (r->body_case == STRATA__MSG__BODY_ERROR) {
        const Strata__Error *er = r->error;
        st_err code = (er->code > 0 && er->code < ST_ERR_COUNT) ? (st_err)er->code : ST_EPROTO;
        st_err e = st_errorf(code, "%s", er->message ? er->message : "");
        st_msg_free(r);
        return e;
    }
    *reply = r;
    return ST_OK;
}

void st_msg_error(Strata__Msg *m, Strata__Error *e, st_err code, const char *message)
{
    strata__msg__init(m);
    strata__error__init(e);
    e->code = (uint32_t)code;
    e->message = (char *)message;
    m->body_case = STRATA__MSG__BODY_ERROR;
    m->error = e;
}

void st_sampling_to_pb(const st_sampler_params *p, Strata__Sampling *out)
{
    strata__sampling__init(out);
    out->temp = p->temp;
    out->top_k = p->top_k;
    out->top_p = p->top_p;
    out->min_p = p->min_p;
    out->repeat_penalty = p->repeat_penalty;
    out->repeat_last_n = p->repeat_last_n;
    out->seed = p->seed;
}

st_err st_sampling_from_pb(const Strata__Sampling *s, st_sampler_params *out)
{
    if (s == NULL) {
        *out = st_sampler_params_default();
        return ST_OK;
    }
    st_sampler_params p = {
        .temp = s->temp,
        .top_k = s->top_k,
        .top_p = s->top_p,
        .min_p = s->min_p,
        .repeat_penalty = s->repeat_penalty,
        .repeat_last_n = s->repeat_last_n,
        .seed = s->seed,
    };
    *out = p;
    return st_sampler_params_validate(out);
}

const char *st_msg_case_name(const Strata__Msg *m)
{
    const ProtobufCFieldDescriptor *fd =
        protobuf_c_message_descriptor_get_field(&strata__msg__descriptor, (unsigned)m->body_case);
    return fd ? fd->name : "none";
}
