/* step.h - the STEP frame: one batch on its way from the coordinator to
 * stage 0 and from each stage to the next. This is its one home: every
 * sender packs it and every receiver opens it here.
 *
 * The body of an envelope of kind ST_ENV_STEP (envelope.h), little-endian:
 *   0             meta_len u32
 *   4             StepMeta protobuf [meta_len]
 *   4 + meta_len  activation packet (wire.h) to the end of the body;
 *                 empty in the frames sent to stage 0
 * A worker forwards the meta bytes as it received them, in front of its
 * own packet, so a batch's meta is packed once (by the coordinator).
 * The meta is the one place that names the batch (epoch, plan hash, batch
 * id) and its rows (session, position, ids; a row's size is its count of
 * ids); the envelope carries the frame's sequence number. The packet
 * names neither batch nor sequence: it holds the hidden states with what
 * its codec checks (wire.h), and a receiver requires its rows to equal the
 * meta's (worker/data/dp_step.c).
 *
 * Opening reads nothing before checking it lies inside the frame: the
 * envelope first (st_env_open), then the meta length against the body,
 * then the protobuf. Bad input gives an st_err with a detail naming the
 * sizes and the sender; nothing aborts. */
#ifndef ST_STEP_H
#define ST_STEP_H

#include <nng/nng.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/wire/envelope.h"
#include "common/base/err.h"
#include "strata.pb-c.h"

/* bytes of the meta length in front of the StepMeta */
#define ST_STEP_LEN_BYTES 4

/* the largest StepMeta a receiver decodes (rows of up to ST_WIRE_MAX_ROWS
 * sessions with their tokens and repetition histories fit many times) */
#define ST_STEP_META_MAX ((size_t)8 << 20)

/* The parts of an opened STEP body; both point into the checked body. */
typedef struct st_step_parts {
    const uint8_t *meta; /* the StepMeta protobuf */
    size_t meta_len;
    const uint8_t *pkt; /* the activation packet (pkt_len 0: none) */
    size_t pkt_len;
    bool hello; /* an empty body: a dialer's hello (msg.h st_msg_link_hello), nothing else set */
} st_step_parts;

/* st_step_split - splits body[0..len) into meta and packet. ST_ETRUNC
 * when the body is shorter than the meta length field, or than the meta
 * length it names. */
st_err st_step_split(const uint8_t *body, size_t len, st_step_parts *out);

/* st_step_open - checks the frame buf[0..len) with st_env_open (whose
 * errors, ST_EAUTH among them, are returned as they are; buf is decrypted
 * in place), requires kind ST_ENV_STEP (ST_EPROTO otherwise) and splits
 * its body (st_step_split); an empty body is a hello (out->hello).
 * *sender gets the frame's sender. */
st_err st_step_open(st_env *env, uint8_t *buf, size_t len, st_step_parts *out, uint64_t *sender);

/* st_step_meta_unpack - the StepMeta of p; ST_EFORMAT naming its size and
 * sender when it is not a well-formed protobuf; ST_ERANGE naming the
 * sizes when it is larger than ST_STEP_META_MAX, has more rows than
 * ST_WIRE_MAX_ROWS or would decode beyond its budget (pbuf_budget.h),
 * all checked before it is decoded. The caller frees *out with
 * st_step_meta_free. */
st_err st_step_meta_unpack(const st_step_parts *p, uint64_t sender, Strata__StepMeta **out);

/* st_step_max_frame - the largest STEP frame (envelope included) carrying
 * up to max_tokens tokens of hidden floats in any wire dtype, with or
 * without zstd, in up to ST_WIRE_MAX_ROWS rows, behind a StepMeta of up to
 * ST_STEP_META_MAX bytes: the receive limit of a data socket. ST_ERANGE
 * when hidden or max_tokens is 0 or the frame could not be sent at all
 * (beyond ST_ENV_MAX_BODY). */
st_err st_step_max_frame(uint32_t hidden, uint32_t max_tokens, size_t *out);

/* st_step_meta_free - frees an unpacked StepMeta; NULL is a no-op. */
void st_step_meta_free(Strata__StepMeta *m);

/* A STEP frame being written: an nng message holding the envelope header,
 * the meta length, the meta and room for a packet. */
typedef struct st_step_out {
    nng_msg *msg;
    uint8_t *pkt; /* where the packet goes: pkt_cap bytes */
    size_t pkt_cap;
    size_t meta_len;
} st_step_out;

/* st_step_begin - a frame for env with the meta bytes meta[0..meta_len)
 * and room for a packet of up to pkt_cap bytes; the caller writes the
 * packet at o->pkt and finishes with st_step_finish (or st_step_abort).
 * ST_ERANGE naming the sizes when the body would exceed ST_ENV_MAX_BODY. */
st_err st_step_begin(const st_env *env, const uint8_t *meta, size_t meta_len, size_t pkt_cap,
                     st_step_out *o);

/* st_step_finish - seals the frame with a packet of pkt_len bytes
 * (<= pkt_cap; ST_EINVAL otherwise) and drops the unused room. On success
 * *out is the caller's (to send or free); on failure the frame is freed. */
st_err st_step_finish(st_env *env, st_step_out *o, size_t pkt_len, nng_msg **out);

/* st_step_abort - frees a frame that will not be finished; a finished or
 * aborted one is a no-op. */
void st_step_abort(st_step_out *o);

/* st_step_pack - a sealed STEP frame of meta with no packet (the frames
 * sent to stage 0) in *out, the caller's to send or free. */
st_err st_step_pack(st_env *env, const Strata__StepMeta *meta, nng_msg **out);

#endif
