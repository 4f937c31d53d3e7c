/* shard.h - the protocol of standalone shard servers (worker/shard/standalone.h,
 * docs/shards.md) and one client connection to such a server.
 *
 * Every request and reply is a STEP frame (common/wire/step.h): its meta a
 * ShardRequest or ShardReply (proto/strata.proto), decoded within a budget
 * (common/wire/pbuf_budget.h), then an activation packet (common/wire/wire.h) when
 * the frame carries hidden states. Packets name the model id as their plan
 * hash, epoch 0, and as stage the first layer of the server they go to
 * (a reply: the layer after the server's range), so a packet meant for
 * another model or range is refused by the wire checks.
 *
 * A connection is one REQ socket dialing one server with one exchange at
 * a time (a keyed server refuses frames out of sequence, envelope.h). A
 * lost connection (the server's pipe closed) cancels the exchange in
 * flight: the call returns ST_ECLOSED at once, without waiting for the
 * timeout, and the socket does not resend the request elsewhere. A
 * connection is used by one thread at a time. */
#ifndef ST_SHARD_H
#define ST_SHARD_H

#include <nng/nng.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/wire/envelope.h"
#include "common/base/err.h"
#include "common/wire/step.h"
#include "common/wire/wire.h"
#include "strata.pb-c.h"

/* the most rows (sessions) one shard step carries */
#define ST_SHARD_MAX_ROWS 64u
/* a reply or request meta larger than this is refused */
#define ST_SHARD_META_MAX ((size_t)64 << 10)

/* What a server told a client in its hello reply. */
typedef struct st_shard_info {
    int64_t first, last, n_layer;
    uint32_t hidden;
    uint8_t model_id[ST_WIRE_PLAN_HASH_SIZE];
    uint32_t dtype_mask;
    uint32_t max_tokens;
    uint32_t n_ctx;
    uint32_t max_sessions;
    uint32_t ttl_s;
    bool ends;        /* an embedding service (strata-embed --listen) */
    uint32_t n_vocab; /* with ends */
} st_shard_info;

/* st_shard_frame - a sealed STEP frame in *out (the caller's to send or
 * free): meta packed, then, when h is not NULL, the packet of h, rows and
 * hidden encoded with o and wctx. */
st_err st_shard_frame(st_env *env, const ProtobufCMessage *meta, const st_wire_hdr *h,
                      const st_wire_row *rows, const float *hidden, const st_wire_opts *o,
                      st_wire_ctx *wctx, nng_msg **out);

/* st_shard_parse - opens the frame buf[0..len) (st_step_open: its errors,
 * ST_EAUTH among them, as they are), then decodes its meta as a message
 * of descriptor d within a budget (ST_ERANGE beyond ST_SHARD_META_MAX,
 * ST_EFORMAT if malformed). *parts points into buf; the caller frees *meta
 * with protobuf_c_message_free_unpacked(*meta, NULL). */
st_err st_shard_parse(st_env *env, uint8_t *buf, size_t len, const ProtobufCMessageDescriptor *d,
                      ProtobufCMessage **meta, st_step_parts *parts, uint64_t *sender);

typedef struct st_shard st_shard;

/* st_shard_connect - dials addr (waiting for the connection), says hello
 * asking for replies in dtype, and keeps the server's st_shard_info. key
 * NULL: unkeyed. timeout_ms bounds each exchange. ST_ECLOSED or ST_ENNG
 * when the server cannot be reached, ST_ETYPE when it does not accept
 * dtype, an error reply's code otherwise. */
st_err st_shard_connect(const char *addr, const uint8_t *key, bool encrypt, st_wire_dtype dtype,
                        int timeout_ms, st_shard **out);

/* st_shard_info_of - the server's hello reply. */
const st_shard_info *st_shard_info_of(const st_shard *s);

/* st_shard_addr - the address dialed. */
const char *st_shard_addr(const st_shard *s);

/* st_shard_step - runs n_tok tokens of session at positions [pos,
 * pos + n_tok) through the server: in and out hold n_tok x hidden floats.
 * n_tok must not exceed the server's max_tokens. Errors: ST_ECLOSED (the
 * connection was lost), ST_ETIMEOUT, ST_ENOENT (the server forgot the
 * session: replay from position 0), the code of any other error reply, or
 * the wire's errors for a bad reply packet. */
st_err st_shard_step(st_shard *s, uint64_t session, int64_t pos, int64_t n_tok, const float *in,
                     float *out);

/* st_shard_embed - from an embedding service (info.ends): the rows of
 * ids[0..n) into out[n][hidden]; n at most max_tokens. */
st_err st_shard_embed(st_shard *s, const int32_t *ids, int64_t n, float *out);

/* st_shard_logits - from an embedding service: the output norm and head
 * applied to hidden[n][hidden], out[n][n_vocab]; n at most max_tokens. */
st_err st_shard_logits(st_shard *s, const float *hidden, int64_t n, float *out);

/* st_shard_end - asks the server to forget session (its reply ignored on
 * a lost connection). */
st_err st_shard_end(st_shard *s, uint64_t session);

/* st_shard_close - closes the socket and frees; NULL is a no-op. */
void st_shard_close(st_shard *s);

#endif
