/* msg.c - protobuf control messages in envelopes over NNG (see msg.h). */
#include "common/msg.h"

#include <stdlib.h>
#include <string.h>

st_err st_msg_pack(st_env *env, st_env_kind kind, const Strata__Msg *m, nng_msg **out)
{
    *out = NULL;
    size_t body = strata__msg__get_packed_size(m);
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
    *out = NULL;
    st_env_frame f;
    st_err e = st_env_open(env, nng_msg_body(msg), nng_msg_len(msg), &f);
    if (e != ST_OK)
        return e;
    if (f.kind != kind)
        return st_errorf(ST_EPROTO, "frame of kind %d where kind %d was expected", (int)f.kind,
                         (int)kind);
    Strata__Msg *m = strata__msg__unpack(NULL, f.body_len, f.body);
    if (m == NULL)
        return st_errorf(ST_EFORMAT, "malformed protobuf message (%zu bytes) from sender %llu",
                         f.body_len, (unsigned long long)f.sender);
    if (m->body_case == STRATA__MSG__BODY__NOT_SET) {
        strata__msg__free_unpacked(m, NULL);
        return st_errorf(ST_EFORMAT, "message from sender %llu has no body",
                         (unsigned long long)f.sender);
    }
    if (sender)
        *sender = f.sender;
    *out = m;
    return ST_OK;
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

st_err st_msg_recv(nng_socket s, st_env *env, st_env_kind kind, Strata__Msg **out,
                   uint64_t *sender)
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

st_err st_msg_call(nng_socket req, st_env *env, const Strata__Msg *m, int timeout_ms,
                   Strata__Msg **reply)
{
    *reply = NULL;
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
        .temp = s->temp, .top_k = s->top_k, .top_p = s->top_p, .min_p = s->min_p,
        .repeat_penalty = s->repeat_penalty, .repeat_last_n = s->repeat_last_n, .seed = s->seed,
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
