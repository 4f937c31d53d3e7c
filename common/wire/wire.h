/* wire.h - activation packets: the versioned binary format of the hidden
 * states that cross a stage boundary (docs/wire-format.md, byte by byte).
 *
 * A packet is a fixed 128-byte little-endian header, one 16-byte
 * descriptor per row (session id, first position, token count), then the
 * payload: the hidden states of every token of every row, in row order, as
 * f32, bf16, f16 or per-token i8 (a f32 scale, then the token's int8
 * values), optionally one zstd frame (with 16-bit payloads optionally split
 * per token into a high-byte plane and a low-byte plane). A CRC-32C tag
 * covers the whole packet; the decoder checks it before it trusts any field
 * beyond the framing. It detects corruption, not forgery: between processes
 * a packet always travels inside an envelope (common/wire/envelope.h), whose
 * MAC, or AEAD with --encrypt, authenticates it under a cluster key.
 *
 * Threads: an st_wire_ctx (zstd contexts, scratch) belongs to one thread at
 * a time; everything else is stateless. Errors name the field at fault in
 * st_errdetail(). */
#ifndef ST_WIRE_H
#define ST_WIRE_H

#include <nng/nng.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"

#define ST_WIRE_MAGIC 0x50415453u /* bytes "STAP" */
#define ST_WIRE_VERSION 2u
#define ST_WIRE_HDR_SIZE 128u /* fixed header of version 2 */
#define ST_WIRE_ROW_SIZE 16u  /* one row descriptor */
#define ST_WIRE_PLAN_HASH_SIZE 32u
#define ST_WIRE_TAG_SIZE 16u /* CRC-32C (4 bytes + 12 zero) */
#define ST_WIRE_MAX_ROWS 4096u
#define ST_WIRE_MAX_HIDDEN (1u << 20)
#define ST_WIRE_ZSTD_DEFAULT_LEVEL 1
#define ST_WIRE_ZSTD_WINDOW_LOG 17 /* frames may not need a larger window */

/* Byte offsets of the version-2 header fields (docs/wire-format.md). The
 * header names no batch and no sequence number: a packet travels inside a
 * frame whose own fields name them (common/wire/step.h). */
enum {
    ST_WIRE_OFF_MAGIC = 0,     /* u32 */
    ST_WIRE_OFF_VERSION = 4,   /* u16 */
    ST_WIRE_OFF_HDR_LEN = 6,   /* u16 */
    ST_WIRE_OFF_FLAGS = 8,     /* u32 */
    ST_WIRE_OFF_DTYPE = 12,    /* u8 */
    ST_WIRE_OFF_RSV0 = 13,     /* u8, zero */
    ST_WIRE_OFF_STAGE = 14,    /* u16 */
    ST_WIRE_OFF_EPOCH = 16,    /* u64 */
    ST_WIRE_OFF_RSV3 = 24,     /* 16 bytes, zero (batch_id and seq in version 1) */
    ST_WIRE_OFF_PLAN = 40,     /* 32 bytes */
    ST_WIRE_OFF_N_ROWS = 72,   /* u32 */
    ST_WIRE_OFF_HIDDEN = 76,   /* u32 */
    ST_WIRE_OFF_N_TOKENS = 80, /* u32 */
    ST_WIRE_OFF_RSV1 = 84,     /* u32, zero */
    ST_WIRE_OFF_RAW_LEN = 88,  /* u64 */
    ST_WIRE_OFF_WIRE_LEN = 96, /* u64 */
    ST_WIRE_OFF_TAG = 104,     /* 16 bytes */
    ST_WIRE_OFF_RSV2 = 120,    /* 8 bytes, zero */
};

/* Header flags. Bits not in ST_WIRE_F_KNOWN are rejected. */
#define ST_WIRE_F_ZSTD 0x1u   /* payload is one zstd frame */
#define ST_WIRE_F_PLANES 0x2u /* 16-bit payload split in byte planes (needs ZSTD) */
#define ST_WIRE_F_KNOWN 0x3u

/* Payload dtypes (their wire codes). */
typedef enum st_wire_dtype {
    ST_WIRE_F32 = 0,
    ST_WIRE_BF16 = 1,
    ST_WIRE_F16 = 2,
    ST_WIRE_I8 = 3,
    ST_WIRE_DT_COUNT
} st_wire_dtype;

/* The dtypes' names in code order, as messages list them (the one
 * spelling of the list; st_wire_dtype_name's table in wire.c agrees, which
 * tests/wire/test_wire.c checks). */
#define ST_WIRE_DTYPE_NAMES "f32, bf16, f16, i8"

/* The header fields. Encoding reads epoch, plan_hash, stage, n_rows and
 * hidden; the rest comes from the rows and the options.
 * Decoding fills every field. */
typedef struct st_wire_hdr {
    uint16_t version;
    uint32_t flags;
    st_wire_dtype dtype;
    uint16_t stage; /* index of the stage the packet is sent to */
    uint64_t epoch;
    uint8_t plan_hash[ST_WIRE_PLAN_HASH_SIZE];
    uint32_t n_rows;
    uint32_t hidden;
    uint32_t n_tokens; /* sum of the rows' token counts */
    uint64_t raw_len;  /* payload bytes before zstd */
    uint64_t wire_len; /* payload bytes as sent */
} st_wire_hdr;

/* One row: n_tokens tokens of one session at positions [pos0, pos0+n). */
typedef struct st_wire_row {
    uint64_t session_id;
    uint32_t pos0;
    uint32_t n_tokens;
} st_wire_row;

/* Encoding options. */
typedef struct st_wire_opts {
    st_wire_dtype dtype;
    int zstd_level;   /* 0: no zstd; else a zstd level (ST_WIRE_ZSTD_DEFAULT_LEVEL) */
    bool plane_split; /* with zstd and bf16/f16 only */
} st_wire_opts;

/* What a receiver expects. plan_hash, hidden and max_tokens are required;
 * epoch and stage are compared as given (0 included). */
typedef struct st_wire_expect {
    uint64_t epoch;
    const uint8_t *plan_hash; /* ST_WIRE_PLAN_HASH_SIZE bytes */
    uint16_t stage;
    uint32_t hidden;
    uint32_t max_tokens; /* most tokens one packet may carry */
    uint32_t dtype_mask; /* bit (1 << dtype) per accepted dtype; 0: any */
} st_wire_expect;

/* Encoder statistics of one packet. */
typedef struct st_wire_stats {
    uint64_t packet_bytes; /* header + rows + payload as sent */
    uint64_t raw_bytes;    /* payload before zstd */
    uint64_t wire_bytes;   /* payload as sent */
    uint64_t n_clamped;    /* f16 values beyond +-65504, clamped */
} st_wire_stats;

typedef struct st_wire_ctx st_wire_ctx;

/* st_wire_ctx_new - a codec context (zstd contexts created on first use,
 * scratch grown on demand) using the fastest conversions this CPU runs, or
 * the scalar references when force_ref is nonzero. */
st_err st_wire_ctx_new(int force_ref, st_wire_ctx **out);

/* st_wire_ctx_free - frees ctx (NULL is fine). */
void st_wire_ctx_free(st_wire_ctx *ctx);

/* st_wire_ctx_convert_name - the conversion variant ctx uses ("avx2", "ref"). */
const char *st_wire_ctx_convert_name(const st_wire_ctx *ctx);

/* st_wire_dtype_name - "f32", "bf16", "f16", "i8", "auto" for ST_WIRE_AUTO
 * (or "?" if out of range). */
const char *st_wire_dtype_name(st_wire_dtype d);

/* st_wire_dtype_from_name - parses a dtype name; ST_ETYPE if unknown. */
st_err st_wire_dtype_from_name(const char *name, st_wire_dtype *out);

/* st_wire_token_bytes - payload bytes of one token of `hidden` values as
 * d before zstd (its record, docs/wire-format.md section 2): f32 4 x
 * hidden, bf16 and f16 2 x hidden, i8 hidden + 4 (one f32 scale); 0 for a
 * dtype out of range. The codec sizes packets by it and the planner
 * prices a hop's bytes per token by it. */
uint64_t st_wire_token_bytes(st_wire_dtype d, uint32_t hidden);

/* st_wire_value_bytes - bytes of one value of d in a payload, which is
 * also its alignment: f32 4, bf16 and f16 2, i8 1; 0 for a dtype out of
 * range. */
size_t st_wire_value_bytes(st_wire_dtype d);

/* st_wire_dtype_planes - whether d's payload may be split in byte planes
 * (ST_WIRE_F_PLANES): the 16-bit dtypes, bf16 and f16. */
bool st_wire_dtype_planes(st_wire_dtype d);

/* st_wire_dtype_by_precision - the k-th version-1 dtype, the most precise
 * first: f32, f16, bf16, i8 for k = 0..3 (the order --wire auto chooses in
 * and a worker announces them in); ST_WIRE_DT_COUNT for k beyond. */
st_wire_dtype st_wire_dtype_by_precision(size_t k);

/* st_wire_encode_size - an upper bound of the packet's size (exact without
 * zstd) after validating h, rows and o as st_wire_encode_buf does. */
st_err st_wire_encode_size(const st_wire_hdr *h, const st_wire_row *rows, const st_wire_opts *o,
                           size_t *out);

/* st_wire_encode_buf - encodes a packet into buf (cap bytes, at least
 * st_wire_encode_size's bound) and sets *len. hidden holds n_tokens rows of
 * h->hidden floats in row order. A NaN or Inf (or a value bf16 would round
 * to Inf) is ST_ERANGE naming row, session, token and index; nothing then
 * is meant to be sent. stats may be NULL. */
st_err st_wire_encode_buf(const st_wire_hdr *h, const st_wire_row *rows, const float *hidden,
                          const st_wire_opts *o, st_wire_ctx *ctx, void *buf, size_t cap,
                          size_t *len, st_wire_stats *stats);

/* st_wire_encode - as st_wire_encode_buf, straight into the body of a new
 * nng_msg (*out; the caller owns it). stats may be NULL. */
st_err st_wire_encode(const st_wire_hdr *h, const st_wire_row *rows, const float *hidden,
                      const st_wire_opts *o, st_wire_ctx *ctx, nng_msg **out, st_wire_stats *stats);

/* st_wire_decode - checks the framing, then the CRC over the whole
 * packet, then every field against exp, the rows (at most rows_cap) and the
 * sizes, and only then decodes the payload into hidden_out (room for
 * hidden_cap_floats floats; n_tokens * hidden are written). Errors:
 * ST_ETRUNC short packet; ST_EFORMAT bad magic, header length, flags,
 * reserved bytes or inconsistent lengths; ST_EVERSION unknown version;
 * ST_ECHECKSUM bad CRC; ST_EEPOCH epoch or
 * plan hash differs (both epochs named); ST_EPROTO wrong stage; ST_ESHAPE
 * hidden size differs; ST_ETYPE dtype unknown or not accepted; ST_ERANGE
 * counts out of range or caller buffers too small; ST_EOVERFLOW sizes
 * overflow; ST_EZSTD a corrupt zstd frame. */
st_err st_wire_decode(st_wire_ctx *ctx, const void *buf, size_t len, const st_wire_expect *exp,
                      st_wire_hdr *h, st_wire_row *rows, size_t rows_cap, float *hidden_out,
                      size_t hidden_cap_floats);

/* ---- choosing a boundary's dtype (docs/wire-format.md section 6.1) ---- */

/* The coordinator's `--wire auto`: not a wire code (never in a packet or
 * a plan), the value of a configuration that chooses per boundary. */
#define ST_WIRE_AUTO ((st_wire_dtype)ST_WIRE_DT_COUNT)
/* The share of the receiving stage's compute time one token's transfer
 * may take under `--wire auto`. */
#define ST_WIRE_AUTO_SHARE 0.10
/* Hysteresis of `--wire auto`: a boundary's dtype changes to a more
 * precise one only when that one's transfer is within (1 - band) x the
 * budget, and to a less precise one only when its own exceeds (1 + band)
 * x the budget, so a link measured near the threshold does not flip it at
 * every heartbeat. */
#define ST_WIRE_AUTO_BAND 0.20
#define ST_WIRE_WHY_MAX 448 /* a choice's reason (dtype and zstd), terminator included */
#define ST_WIRE_MASK_ALL ((1u << ST_WIRE_DT_COUNT) - 1u)

/* st_wire_accept_mask - bit (1 << dtype) per name of names[0..n) that is
 * a dtype of this version; names it does not know are skipped and counted in
 * *n_unknown (may be NULL): a newer peer may list dtypes of a later
 * version. An empty list (a worker older than per-boundary dtypes, which
 * announced none) is f32 only. */
uint32_t st_wire_accept_mask(char *const *names, size_t n, size_t *n_unknown);

/* st_wire_mask_parse - a comma-separated list of dtype names ("f16,bf16")
 * as a mask; ST_ETYPE naming an unknown or empty entry. */
st_err st_wire_mask_parse(const char *list, uint32_t *out);

/* st_wire_mask_text - the dtypes of mask as "f32,f16" (precision order)
 * into buf; "none" for 0. */
const char *st_wire_mask_text(uint32_t mask, char *buf, size_t cap);

/* What zstd (level ST_WIRE_ZSTD_DEFAULT_LEVEL) does to one dtype's payload
 * of a sender's real activations (common/wire/wire_sample.h measures it). */
typedef struct st_wire_zmeas {
    double ratio;         /* raw bytes / frame bytes; not > 0: not measured */
    double compress_ns;   /* per raw payload byte, frame overhead included */
    double decompress_ns; /* per raw payload byte */
    uint32_t samples;     /* 0: not measured */
} st_wire_zmeas;

/* Bounds of a believable measurement (a worker's report is remote input):
 * outside them it counts as not measured. */
#define ST_WIRE_ZMEAS_RATIO_MAX 1000.0
#define ST_WIRE_ZMEAS_NS_MAX 1.0e6

/* st_wire_zmeas_valid - samples > 0, ratio finite in (0,
 * ST_WIRE_ZMEAS_RATIO_MAX], both costs finite in [0, ST_WIRE_ZMEAS_NS_MAX]. */
bool st_wire_zmeas_valid(const st_wire_zmeas *m);

/* One boundary as `--wire auto` sees it. */
typedef struct st_wire_link_in {
    uint32_t hidden;      /* values per token */
    double bw;            /* bytes/s of the link; <= 0 or not finite: unknown */
    double latency_s;     /* one way; paid by every dtype alike, shown in the reason */
    bool measured;        /* the link was measured (else assumed) */
    double compute_s;     /* the receiving stage's compute time per token; <= 0: unknown */
    uint32_t accept_mask; /* what the receiver accepts (st_wire_accept_mask) */
    bool allow_i8;        /* i8 may be chosen (the plan's accuracy gate passed) */
    double share;         /* of compute_s a token's transfer may take; 0: ST_WIRE_AUTO_SHARE */
    bool has_held;        /* the boundary has a dtype now (the serving plan's) ... */
    st_wire_dtype held;   /* ... this one: kept while within ST_WIRE_AUTO_BAND */
    bool held_zstd;       /* ... and it is compressed (with has_held) */
    bool accept_zstd;     /* every receiver takes zstd packets (Capability.wire_zstd) */
    bool force_zstd;      /* zstd on every boundary (the coordinator's --zstd) */
    /* per dtype, what zstd did to the senders' activations (the worst
     * sender's: least ratio, most cost); not measured: never zstd */
    st_wire_zmeas zstd[ST_WIRE_DT_COUNT];
} st_wire_link_in;

typedef struct st_wire_choice {
    st_wire_dtype dtype;
    bool zstd; /* compress the boundary (st_wire_zstd_choose) */
    char why[ST_WIRE_WHY_MAX];
} st_wire_choice;

/* st_wire_choose - the dtype of one boundary and whether it is
 * compressed (the latter by st_wire_zstd_choose for the chosen dtype,
 * its reason appended to why): among the dtypes the
 * receiver accepts (i8 only when allow_i8), in the order f32 > f16 > bf16
 * > i8, the first whose transfer of one token (st_wire_token_bytes / bw)
 * stays within share x compute_s; when none does, the accepted dtype with
 * the fewest bytes (the most precise of those); when the bandwidth or the
 * compute time is unknown, the most precise accepted. The latency is the
 * same for every dtype, so it does not enter the choice. With has_held,
 * an accepted held dtype stays unless the choice clears the hysteresis
 * band (ST_WIRE_AUTO_BAND). out->why says which rule chose and its
 * figures. ST_ETYPE when the receiver accepts
 * none of the candidates; ST_EINVAL for a NULL argument, hidden 0 or a
 * share outside (0, 1]. */
st_err st_wire_choose(const st_wire_link_in *in, st_wire_choice *out);

/* st_wire_zstd_choose - whether the boundary in carries dtype d as zstd
 * frames (docs/wire-format.md 6.1). Per token of B = st_wire_token_bytes
 * bytes, zstd saves B x (1 - 1/ratio) / bw seconds of transfer and costs
 * B x (compress_ns + decompress_ns) ns of codec, both measured
 * (in->zstd[d]). With force_zstd, always. A boundary compressed now (has_held, held == d and
 * held_zstd) stays so while saved >= (1 - ST_WIRE_AUTO_BAND) x cost;
 * otherwise it is compressed only when saved > (1 + ST_WIRE_AUTO_BAND) x
 * cost. Never when the receiver does not take zstd, the bandwidth is
 * unknown or d's measurement is missing or not believable
 * (st_wire_zmeas_valid). The reason ("zstd on: ..." or "zstd off: ...")
 * into why (cap bytes; may be NULL). */
bool st_wire_zstd_choose(const st_wire_link_in *in, st_wire_dtype d, char *why, size_t cap);

#endif
