/* msg.h - control messages (protobuf Msg) in envelopes over NNG.
 *
 * Ownership, stated once: st_msg_send() takes the nng_msg on success and
 * leaves nothing to free on failure (it frees what it allocated); a
 * Strata__Msg returned through an out-parameter belongs to the caller, who
 * frees it with st_msg_free(). Every received message is checked (envelope,
 * MAC and replay when keyed, protobuf well-formedness, a body set in the
 * oneof) before any field is used, and decoded within a memory budget
 * (st_msg_decode). */
#ifndef ST_MSG_H
#define ST_MSG_H

#include <nng/nng.h>
#include <stdint.h>

#include "common/wire/envelope.h"
#include "common/base/err.h"
#include "common/text/sampling.h"
#include "strata.pb-c.h"

/* Limits of the lists a received Msg may carry, checked on its wire bytes
 * before it is decoded (msg.c): names (kernels, dtypes, speeds, wire
 * dtypes of a Join), layers (of a Heartbeat, stages of a Plan), peers
 * (links of a Heartbeat, peers of a HeartbeatReply), stop strings of a
 * GenerateRequest; StepResult rows are bounded by ST_WIRE_MAX_ROWS. */
#define ST_MSG_MAX_NAMES 64
#define ST_MSG_MAX_LAYERS 65535
#define ST_MSG_MAX_PEERS 1024
#define ST_MSG_MAX_STOP 256

/* The largest frame a control socket (REQ/REP between members and
 * clients) accepts: its RECVMAXSZ. Replies that would exceed it are
 * refused before they are packed. */
#define ST_MSG_CONTROL_MAX_FRAME ((size_t)4 << 20)

/* st_msg_pack - m serialised inside an envelope of kind into *out;
 * ST_ERANGE (nothing allocated) when its body exceeds ST_ENV_MAX_BODY. */
st_err st_msg_pack(st_env *env, st_env_kind kind, const Strata__Msg *m, nng_msg **out);

/* st_msg_pack_max - st_msg_pack, refusing with ST_ERANGE naming the
 * message and sizes (before allocating) a frame longer than max_frame:
 * what the receiver would refuse (its RECVMAXSZ). */
st_err st_msg_pack_max(st_env *env, st_env_kind kind, const Strata__Msg *m, size_t max_frame,
                       nng_msg **out);

/* st_msg_unpack - checks msg's envelope (kind must be `kind`) and unpacks
 * its Msg; msg stays the caller's. ST_EFORMAT for a malformed protobuf or
 * an empty oneof, ST_ERANGE for one over its budget or list limits
 * (st_msg_decode), ST_EAUTH for a MAC or replay failure. */
st_err st_msg_unpack(st_env *env, st_env_kind kind, nng_msg *msg, Strata__Msg **out,
                     uint64_t *sender);

/* st_msg_unpack_link - st_msg_unpack for a data link's receiver (the
 * coordinator's results socket): an envelope of kind with an empty body is
 * a dialer's hello (st_msg_link_hello): *hello true, *out NULL, ST_OK, its
 * envelope checked (MAC, replay) as any frame's. Otherwise as
 * st_msg_unpack, *hello false. The envelope is opened once. */
st_err st_msg_unpack_link(st_env *env, st_env_kind kind, nng_msg *msg, Strata__Msg **out,
                          uint64_t *sender, bool *hello);

/* st_msg_decode - the Msg of body[0..len) (sender names it in errors),
 * bounded before decoding (pbuf_budget.h): ST_ERANGE naming the list,
 * count and limit, or the size and budget, when it asks for more;
 * ST_EFORMAT for malformed bytes or an empty oneof. */
st_err st_msg_decode(const uint8_t *body, size_t len, uint64_t sender, Strata__Msg **out);

/* st_msg_free - frees an unpacked Msg; NULL is a no-op. */
void st_msg_free(Strata__Msg *m);

/* st_msg_link_hello - an envelope of kind with an empty body, sealed by env:
 * what a PUSH dialer sends first on a data link (STEP, RESULT), so that
 * the receiver's connection gate (common/net/pipe_gate.h) sees its connection
 * authenticated before its first batch. Receivers take an empty STEP or
 * RESULT body as a hello and drop it. *out is the caller's. */
st_err st_msg_link_hello(st_env *env, st_env_kind kind, nng_msg **out);

/* st_msg_send - packs m and sends it on s (blocking, honouring the
 * socket's send timeout). */
st_err st_msg_send(nng_socket s, st_env *env, st_env_kind kind, const Strata__Msg *m);

/* st_msg_recv - receives one message on s and unpacks it (st_msg_unpack). */
st_err st_msg_recv(nng_socket s, st_env *env, st_env_kind kind, Strata__Msg **out,
                   uint64_t *sender);

/* st_msg_call - a request/reply round trip on a REQ socket: sends m, waits
 * up to timeout_ms for the reply. An Error reply is returned as its code
 * with its message as detail (and *reply is NULL). When env would send m
 * unbound (st_env_unbound: a keyed requester of a coordinator that has no
 * verified reply to its last request) a Hello exchange comes first
 * (st_msg_hello, timeout_ms of its own), so m is bound to the coordinator
 * that answers now. */
st_err st_msg_call(nng_socket req, st_env *env, const Strata__Msg *m, int timeout_ms,
                   Strata__Msg **reply);

/* st_msg_hello - a Hello and its Ack on a REQ socket to a coordinator:
 * env (learn_peer) learns the coordinator's id from the verified reply, so
 * its next request is bound to it (envelope.h). ST_EPROTO for a reply
 * that is not an Ack; an Error reply as st_msg_call. */
st_err st_msg_hello(nng_socket req, st_env *env, int timeout_ms);

/* st_msg_hello_msg - a Hello in m (h: its body; both the caller's). */
void st_msg_hello_msg(Strata__Msg *m, Strata__Hello *h);

/* st_msg_reply - a received reply r (taken): ST_OK with *reply = r, or,
 * for an Error reply, its code (ST_EPROTO when outside st_err) with its
 * message as detail and *reply NULL (r freed). st_msg_call's last step,
 * for callers that receive replies themselves (common/net/client.c). */
st_err st_msg_reply(Strata__Msg *r, Strata__Msg **reply);

/* st_msg_error - fills m (and e) as an Error reply of code with message. */
void st_msg_error(Strata__Msg *m, Strata__Error *e, st_err code, const char *message);

/* st_sampling_to_pb - out (initialised here) with the fields of p; the one
 * place sampling parameters become protobuf. */
void st_sampling_to_pb(const st_sampler_params *p, Strata__Sampling *out);

/* st_sampling_from_pb - the parameters of a received Sampling (s NULL:
 * st_sampler_params_default()), range-checked before anyone uses them:
 * ST_EINVAL naming the field for a NaN or negative temperature, a top_p
 * outside (0, 1], ... (st_sampler_params_validate). The one place protobuf
 * becomes sampling parameters. */
st_err st_sampling_from_pb(const Strata__Sampling *s, st_sampler_params *out);

/* st_msg_case_name - the name of m's body case, for logs. */
const char *st_msg_case_name(const Strata__Msg *m);

#endif
