/* wire.c - activation packets: layout, validation, integrity, decoding.
 *
 * Design. An activation packet is not protobuf: it is a fixed 128-byte
 * little-endian header at fixed offsets, 16 bytes per row, and the payload,
 * so encoding writes the hidden states once, straight into the message,
 * and decoding reads them once, straight into the stage's input buffer.
 * docs/wire-format.md gives every byte and the rules for new versions.
 *
 * Distrust comes in layers, each finished before the next one starts:
 *  1. framing - magic, version, header length, known flags, the row count
 *     and the payload length agree with the bytes received (nothing beyond
 *     the 128-byte header is read yet, and only to size the packet);
 *  2. integrity - CRC-32C over payload, rows and header (tag zeroed), in
 *     that order so the encoder can fold the checksum into its conversion
 *     pass (authenticity is the envelope's, common/wire/envelope.h);
 *  3. fields - reserved bytes, dtype, flag combinations, hidden size, and
 *     raw length = tokens x record size; then the receiver's expectations
 *     (epoch and plan hash, stage, hidden size, token limit, dtype);
 *  4. rows - every row's token count and position range, their sum;
 *  5. payload - only now is anything decoded. A zstd frame must declare
 *     its content size, equal to the raw length, must end exactly at the
 *     packet's end and may not need a window above 2^17 bytes; it is
 *     decompressed in token-sized chunks that never exceed the raw length.
 *
 * Every error names its field and both values where there are two (the
 * packet's epoch and the receiver's). Conversions come from kernels/
 * convert.h (SIMD when the CPU has it, bit-identical to the reference). */
#include "common/wire/wire.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/base/hex.h"
#include "common/wire/wire_impl.h"

/* The version-1 dtypes: the one table of their names and payload sizes
 * (docs/wire-format.md section 2). A token of hidden values takes
 * value_bytes x hidden + token_extra bytes. */
static const struct wire_dtype_info {
    const char *name;   /* as flags, plans and Capability.wire_dtypes spell it */
    size_t value_bytes; /* one value in the payload (its alignment too) */
    size_t token_extra; /* a token's bytes besides its values: i8's f32 scale */
} wire_dtypes[ST_WIRE_DT_COUNT] = {
    [ST_WIRE_F32] = {"f32", sizeof(float), 0},
    [ST_WIRE_BF16] = {"bf16", sizeof(uint16_t), 0},
    [ST_WIRE_F16] = {"f16", sizeof(uint16_t), 0},
    [ST_WIRE_I8] = {"i8", sizeof(int8_t), sizeof(float)},
};

const char *st_wire_dtype_name(st_wire_dtype d)
{
    if (d == ST_WIRE_AUTO)
        return "auto";
    return ((unsigned)d < ST_WIRE_DT_COUNT) ? wire_dtypes[d].name : "?";
}

st_err st_wire_dtype_from_name(const char *name, st_wire_dtype *out)
{
    for (unsigned d = 0; name != NULL && d < ST_WIRE_DT_COUNT; d++) {
        if (strcmp(name, wire_dtypes[d].name) == 0) {
            *out = (st_wire_dtype)d;
            return ST_OK;
        }
    }
    return st_errorf(ST_ETYPE, "wire dtype '%s' is not one of " ST_WIRE_DTYPE_NAMES,
                     name ? name : "(null)");
}

uint64_t st_wire_token_bytes(st_wire_dtype d, uint32_t hidden)
{
    if ((unsigned)d >= ST_WIRE_DT_COUNT)
        return 0;
    return wire_dtypes[d].value_bytes * (uint64_t)hidden + wire_dtypes[d].token_extra;
}

size_t st_wire_value_bytes(st_wire_dtype d)
{
    return (unsigned)d < ST_WIRE_DT_COUNT ? wire_dtypes[d].value_bytes : 0;
}

bool st_wire_dtype_planes(st_wire_dtype d)
{
    return (unsigned)d < ST_WIRE_DT_COUNT && wire_dtypes[d].value_bytes == sizeof(uint16_t);
}

st_err st_wire_ctx_new(int force_ref, st_wire_ctx **out)
{
    if (out == NULL)
        return st_errorf(ST_EINVAL, "st_wire_ctx_new: out is NULL");
    st_wire_ctx *ctx = calloc(1, sizeof *ctx);
    if (ctx == NULL)
        return st_errorf(ST_ENOMEM, "wire context: %zu bytes", sizeof *ctx);
    ctx->cv = st_convert_select(force_ref);
    *out = ctx;
    return ST_OK;
}

void st_wire_ctx_free(st_wire_ctx *ctx)
{
    if (ctx == NULL)
        return;
    ZSTD_freeCCtx(ctx->cctx);
    ZSTD_freeDCtx(ctx->dctx);
    free(ctx->scratch[0]);
    free(ctx->scratch[1]);
    free(ctx);
}

const char *st_wire_ctx_convert_name(const st_wire_ctx *ctx) { return ctx->cv->name; }

st_err wire_scratch(st_wire_ctx *ctx, int i, size_t n, unsigned char **out)
{
    if (ctx->scratch_cap[i] < n) {
        size_t cap = n < 4096 ? 4096 : n;
        unsigned char *p = realloc(ctx->scratch[i], cap);
        if (p == NULL)
            return st_errorf(ST_ENOMEM, "wire scratch buffer of %zu bytes", cap);
        ctx->scratch[i] = p;
        ctx->scratch_cap[i] = cap;
    }
    *out = ctx->scratch[i];
    return ST_OK;
}

void wire_split_planes(const uint16_t *src, unsigned char *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        dst[i] = (unsigned char)(src[i] >> 8);
        dst[n + i] = (unsigned char)src[i];
    }
}

void wire_merge_planes(const unsigned char *src, uint16_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = (uint16_t)((src[i] << 8) | src[n + i]);
}

void wire_integ_init(wire_integ *g, const st_convert_ops *cv)
{
    g->crc = 0;
    g->cv = cv;
}

void wire_integ_update(wire_integ *g, const void *p, size_t n)
{
    g->crc = g->cv->crc32c(g->crc, p, n);
}

void wire_integ_header(wire_integ *g, const unsigned char *hdr)
{
    unsigned char h[ST_WIRE_HDR_SIZE];
    memcpy(h, hdr, sizeof h);
    memset(h + ST_WIRE_OFF_TAG, 0, ST_WIRE_TAG_SIZE);
    wire_integ_update(g, h, sizeof h);
}

void wire_integ_final(wire_integ *g, uint8_t tag[ST_WIRE_TAG_SIZE])
{
    memset(tag, 0, ST_WIRE_TAG_SIZE);
    st_le_st32(tag, g->crc);
}

/* wire_frame - layer 1: parses the header into *h and checks what sizes
 * the packet; *payload_off is where the payload starts. */
static st_err wire_frame(const unsigned char *b, size_t len, st_wire_hdr *h, size_t *payload_off)
{
    if (b == NULL)
        return st_errorf(ST_EINVAL, "wire packet: buffer is NULL");
    if (len < 8)
        return st_errorf(ST_ETRUNC, "wire packet: %zu bytes, shorter than the 8-byte preamble",
                         len);
    uint32_t magic = st_le_ld32(b + ST_WIRE_OFF_MAGIC);
    if (magic != ST_WIRE_MAGIC)
        return st_errorf(ST_EFORMAT,
                         "wire packet: field 'magic' is 0x%08x, expected 0x%08x (\"STAP\")", magic,
                         ST_WIRE_MAGIC);
    h->version = st_le_ld16(b + ST_WIRE_OFF_VERSION);
    if (h->version != ST_WIRE_VERSION)
        return st_errorf(ST_EVERSION,
                         "wire packet: field 'version' is %u; this build reads version %u only",
                         h->version, ST_WIRE_VERSION);
    uint16_t hl = st_le_ld16(b + ST_WIRE_OFF_HDR_LEN);
    if (hl != ST_WIRE_HDR_SIZE)
        return st_errorf(ST_EFORMAT, "wire packet: field 'header_len' is %u; version %u has %u", hl,
                         ST_WIRE_VERSION, ST_WIRE_HDR_SIZE);
    if (len < ST_WIRE_HDR_SIZE)
        return st_errorf(ST_ETRUNC, "wire packet: %zu bytes, shorter than its %u-byte header", len,
                         ST_WIRE_HDR_SIZE);
    h->flags = st_le_ld32(b + ST_WIRE_OFF_FLAGS);
    if (h->flags & ~ST_WIRE_F_KNOWN)
        return st_errorf(ST_EFORMAT,
                         "wire packet: field 'flags' is 0x%x with unknown bits 0x%x (known: 0x1 "
                         "zstd, 0x2 planes)",
                         h->flags, h->flags & ~ST_WIRE_F_KNOWN);
    h->dtype = (st_wire_dtype)b[ST_WIRE_OFF_DTYPE];
    h->stage = st_le_ld16(b + ST_WIRE_OFF_STAGE);
    h->epoch = st_le_ld64(b + ST_WIRE_OFF_EPOCH);
    memcpy(h->plan_hash, b + ST_WIRE_OFF_PLAN, ST_WIRE_PLAN_HASH_SIZE);
    h->n_rows = st_le_ld32(b + ST_WIRE_OFF_N_ROWS);
    h->hidden = st_le_ld32(b + ST_WIRE_OFF_HIDDEN);
    h->n_tokens = st_le_ld32(b + ST_WIRE_OFF_N_TOKENS);
    h->raw_len = st_le_ld64(b + ST_WIRE_OFF_RAW_LEN);
    h->wire_len = st_le_ld64(b + ST_WIRE_OFF_WIRE_LEN);
    if (h->n_rows == 0 || h->n_rows > ST_WIRE_MAX_ROWS)
        return st_errorf(ST_ERANGE, "wire packet: field 'n_rows' is %u, must be in [1, %u]",
                         h->n_rows, ST_WIRE_MAX_ROWS);
    uint64_t off = ST_WIRE_HDR_SIZE + (uint64_t)h->n_rows * ST_WIRE_ROW_SIZE;
    if (h->wire_len > UINT64_MAX - off || off + h->wire_len > SIZE_MAX)
        return st_errorf(ST_EOVERFLOW,
                         "wire packet: field 'wire_len' %llu overflows the packet size",
                         (unsigned long long)h->wire_len);
    uint64_t total = off + h->wire_len;
    if (len < total)
        return st_errorf(ST_ETRUNC,
                         "wire packet: %zu bytes, but header + %u rows + wire_len %llu need %llu",
                         len, h->n_rows, (unsigned long long)h->wire_len,
                         (unsigned long long)total);
    if (len > total)
        return st_errorf(ST_EFORMAT,
                         "wire packet: %zu bytes, %llu more than header + %u rows + wire_len %llu",
                         len, (unsigned long long)(len - total), h->n_rows,
                         (unsigned long long)h->wire_len);
    *payload_off = (size_t)off;
    return ST_OK;
}

/* wire_fields - layer 3a: reserved bytes, dtype, flags, sizes. */
static st_err wire_fields(const unsigned char *b, const st_wire_hdr *h)
{
    static const struct {
        unsigned off, n;
        const char *name;
    } rsv[] = {
        {ST_WIRE_OFF_RSV0, 1, "reserved0"},
        {ST_WIRE_OFF_RSV1, 4, "reserved1"},
        {ST_WIRE_OFF_RSV2, 8, "reserved2"},
        {ST_WIRE_OFF_RSV3, 16, "reserved3"},
    };
    for (size_t r = 0; r < sizeof rsv / sizeof rsv[0]; r++)
        for (unsigned i = 0; i < rsv[r].n; i++)
            if (b[rsv[r].off + i] != 0)
                return st_errorf(ST_EFORMAT, "wire packet: field '%s' (offset %u) is not zero",
                                 rsv[r].name, rsv[r].off + i);
    for (unsigned i = 4; i < ST_WIRE_TAG_SIZE; i++)
        if (b[ST_WIRE_OFF_TAG + i] != 0)
            return st_errorf(ST_EFORMAT,
                             "wire packet: field 'tag' byte %u is not zero (CRC padding)", i);
    if ((unsigned)h->dtype >= ST_WIRE_DT_COUNT)
        return st_errorf(ST_ETYPE,
                         "wire packet: field 'dtype' is %u (known: 0 f32, 1 bf16, 2 f16, 3 i8)",
                         (unsigned)h->dtype);
    if (h->flags & ST_WIRE_F_PLANES) {
        if (!(h->flags & ST_WIRE_F_ZSTD))
            return st_errorf(ST_EFORMAT, "wire packet: field 'flags' 0x%x has planes without zstd",
                             h->flags);
        if (!st_wire_dtype_planes(h->dtype))
            return st_errorf(ST_EFORMAT,
                             "wire packet: field 'flags' has planes with dtype %s (16-bit only)",
                             st_wire_dtype_name(h->dtype));
    }
    if (h->hidden == 0 || h->hidden > ST_WIRE_MAX_HIDDEN)
        return st_errorf(ST_ERANGE, "wire packet: field 'hidden' is %u, must be in [1, %u]",
                         h->hidden, ST_WIRE_MAX_HIDDEN);
    if (h->n_tokens < h->n_rows)
        return st_errorf(ST_ERANGE, "wire packet: field 'n_tokens' is %u, fewer than its %u rows",
                         h->n_tokens, h->n_rows);
    uint64_t need;
    if (__builtin_mul_overflow((uint64_t)h->n_tokens, st_wire_token_bytes(h->dtype, h->hidden),
                               &need))
        return st_errorf(ST_EOVERFLOW, "wire packet: n_tokens %u x hidden %u overflows",
                         h->n_tokens, h->hidden);
    if (h->raw_len != need)
        return st_errorf(
            ST_EFORMAT,
            "wire packet: field 'raw_len' is %llu; %u tokens x hidden %u as %s need %llu",
            (unsigned long long)h->raw_len, h->n_tokens, h->hidden, st_wire_dtype_name(h->dtype),
            (unsigned long long)need);
    if (!(h->flags & ST_WIRE_F_ZSTD) && h->wire_len != h->raw_len)
        return st_errorf(
            ST_EFORMAT, "wire packet: field 'wire_len' %llu differs from raw_len %llu without zstd",
            (unsigned long long)h->wire_len, (unsigned long long)h->raw_len);
    if ((h->flags & ST_WIRE_F_ZSTD) && h->wire_len > ZSTD_compressBound((size_t)h->raw_len))
        return st_errorf(
            ST_EFORMAT,
            "wire packet: field 'wire_len' %llu exceeds zstd's bound %zu for raw_len %llu",
            (unsigned long long)h->wire_len, ZSTD_compressBound((size_t)h->raw_len),
            (unsigned long long)h->raw_len);
    return ST_OK;
}

/* wire_expect - layer 3b: the receiver's plan and limits. */
static st_err wire_expect(const st_wire_hdr *h, const st_wire_expect *exp)
{
    if (exp->plan_hash == NULL || exp->hidden == 0 || exp->max_tokens == 0)
        return st_errorf(ST_EINVAL,
                         "wire expectations: plan_hash, hidden and max_tokens are required");
    if (h->epoch != exp->epoch ||
        memcmp(h->plan_hash, exp->plan_hash, ST_WIRE_PLAN_HASH_SIZE) != 0) {
        char a[ST_HEX_SHORT_CAP], e[ST_HEX_SHORT_CAP];
        st_hex_short(h->plan_hash, ST_WIRE_PLAN_HASH_SIZE, a);
        st_hex_short(exp->plan_hash, ST_WIRE_PLAN_HASH_SIZE, e);
        return st_errorf(
            ST_EEPOCH,
            "wire packet: epoch %llu plan %s.. differs from the receiver's epoch %llu plan %s..",
            (unsigned long long)h->epoch, a, (unsigned long long)exp->epoch, e);
    }
    if (h->stage != exp->stage)
        return st_errorf(ST_EPROTO,
                         "wire packet: field 'stage' is %u, but this receiver is stage %u",
                         h->stage, exp->stage);
    if (h->hidden != exp->hidden)
        return st_errorf(ST_ESHAPE, "wire packet: field 'hidden' is %u, the stage expects %u",
                         h->hidden, exp->hidden);
    if (exp->dtype_mask != 0 && !(exp->dtype_mask & (1u << h->dtype)))
        return st_errorf(ST_ETYPE,
                         "wire packet: dtype %s is not accepted on this boundary (mask 0x%x)",
                         st_wire_dtype_name(h->dtype), exp->dtype_mask);
    if (h->n_tokens > exp->max_tokens)
        return st_errorf(ST_ERANGE,
                         "wire packet: field 'n_tokens' is %u, the receiver takes at most %u",
                         h->n_tokens, exp->max_tokens);
    return ST_OK;
}

/* wire_verify - layer 2: the packet's tag. */
static st_err wire_verify(const st_wire_ctx *ctx, const unsigned char *b, size_t len, size_t off)
{
    wire_integ g;
    wire_integ_init(&g, ctx->cv);
    wire_integ_update(&g, b + off, len - off);
    wire_integ_update(&g, b + ST_WIRE_HDR_SIZE, off - ST_WIRE_HDR_SIZE);
    wire_integ_header(&g, b);
    uint32_t want = st_le_ld32(b + ST_WIRE_OFF_TAG);
    if (want != g.crc)
        return st_errorf(ST_ECHECKSUM, "wire packet: CRC-32C is 0x%08x, field 'tag' says 0x%08x",
                         g.crc, want);
    return ST_OK;
}

/* wire_rows - layer 4: row descriptors into rows[]. */
static st_err wire_rows(const unsigned char *b, const st_wire_hdr *h, st_wire_row *rows,
                        size_t rows_cap)
{
    if (rows == NULL || rows_cap < h->n_rows)
        return st_errorf(ST_ERANGE, "wire packet: %u rows, the receiver's row buffer holds %zu",
                         h->n_rows, rows == NULL ? (size_t)0 : rows_cap);
    uint64_t sum = 0;
    for (uint32_t r = 0; r < h->n_rows; r++) {
        const unsigned char *p = b + ST_WIRE_HDR_SIZE + (size_t)r * ST_WIRE_ROW_SIZE;
        st_wire_row *w = &rows[r];
        w->session_id = st_le_ld64(p);
        w->pos0 = st_le_ld32(p + 8);
        w->n_tokens = st_le_ld32(p + 12);
        if (w->n_tokens == 0)
            return st_errorf(ST_ERANGE, "wire packet: row %u (session %llu) has 0 tokens", r,
                             (unsigned long long)w->session_id);
        if (w->n_tokens > UINT32_MAX - w->pos0)
            return st_errorf(ST_ERANGE,
                             "wire packet: row %u (session %llu): pos0 %u + %u tokens overflow u32",
                             r, (unsigned long long)w->session_id, w->pos0, w->n_tokens);
        sum += w->n_tokens;
    }
    if (sum != h->n_tokens)
        return st_errorf(ST_EFORMAT, "wire packet: rows hold %llu tokens, field 'n_tokens' says %u",
                         (unsigned long long)sum, h->n_tokens);
    return ST_OK;
}

/* The largest i8 scale an encoder can produce (max|x| < 2^127), so that
 * q * scale stays finite. */
#define WIRE_I8_SCALE_MAX (0x1p127f / 127.0f)

/* wire_dec_bad_value - the error for a non-finite code at element idx. */
static st_err wire_dec_bad_value(st_wire_dtype dt, uint32_t hidden, uint64_t tok0, size_t idx)
{
    return st_errorf(ST_ERANGE, "wire packet: token %llu index %llu holds an Inf or NaN %s value",
                     (unsigned long long)(tok0 + idx / hidden), (unsigned long long)(idx % hidden),
                     st_wire_dtype_name(dt));
}

/* wire_dec_tokens - converts whole tokens of record bytes each (planes
 * already merged for 16-bit) from src into dst, refusing Inf / NaN values
 * and impossible i8 scales. src is aligned for its element type. */
static st_err wire_dec_tokens(const st_wire_ctx *ctx, st_wire_dtype dt, uint32_t hidden,
                              const unsigned char *src, size_t n_tok, uint64_t tok0, float *dst)
{
    const st_convert_ops *cv = ctx->cv;
    size_t n = n_tok * (size_t)hidden, r;
    switch (dt) {
    case ST_WIRE_F32:
        r = cv->f32_copy((const float *)(const void *)src, dst, n);
        break;
    case ST_WIRE_F16:
        r = cv->f16_to_f32((const uint16_t *)(const void *)src, dst, n);
        break;
    case ST_WIRE_BF16:
        r = cv->bf16_to_f32((const uint16_t *)(const void *)src, dst, n);
        break;
    case ST_WIRE_I8:
        for (size_t t = 0; t < n_tok; t++) {
            const unsigned char *rec = src + t * (4 + (size_t)hidden);
            uint32_t sb = st_le_ld32(rec);
            float s;
            memcpy(&s, &sb, 4);
            if ((sb & 0x80000000u) || !(s <= WIRE_I8_SCALE_MAX))
                return st_errorf(
                    ST_ERANGE,
                    "wire packet: token %llu has i8 scale %g (bits 0x%08x); must be in [0, %g]",
                    (unsigned long long)(tok0 + t), (double)s, sb, (double)WIRE_I8_SCALE_MAX);
            cv->i8_to_f32((const int8_t *)(rec + 4), s, dst + t * (size_t)hidden, hidden);
        }
        return ST_OK;
    default:
        return st_errorf(ST_EINTERNAL, "wire: dtype %u reached the decoder", (unsigned)dt);
    }
    return r == n ? ST_OK : wire_dec_bad_value(dt, hidden, tok0, r);
}

/* wire_dec_plain - payload without zstd. */
static st_err wire_dec_plain(st_wire_ctx *ctx, const st_wire_hdr *h, const unsigned char *pay,
                             float *out)
{
    const uint64_t rec = st_wire_token_bytes(h->dtype, h->hidden);
    const uintptr_t align = st_wire_value_bytes(h->dtype);
    if ((uintptr_t)pay % align == 0)
        return wire_dec_tokens(ctx, h->dtype, h->hidden, pay, h->n_tokens, 0, out);
    /* values at a misaligned address: through aligned scratch, by chunks */
    size_t tpc = rec >= WIRE_CHUNK_BYTES ? 1 : WIRE_CHUNK_BYTES / (size_t)rec;
    unsigned char *s = NULL;
    st_err e = wire_scratch(ctx, 0, tpc * (size_t)rec, &s);
    for (uint64_t t = 0; e == ST_OK && t < h->n_tokens; t += tpc) {
        size_t k = (size_t)(h->n_tokens - t < tpc ? h->n_tokens - t : tpc);
        memcpy(s, pay + t * rec, k * (size_t)rec);
        e = wire_dec_tokens(ctx, h->dtype, h->hidden, s, k, t, out + t * h->hidden);
    }
    return e;
}

/* wire_zfill - decompresses exactly `want` bytes into dst. */
static st_err wire_zfill(ZSTD_DCtx *d, ZSTD_inBuffer *in, void *dst, size_t want, size_t *ret,
                         uint64_t done, uint64_t raw_len)
{
    ZSTD_outBuffer out = {dst, want, 0};
    while (out.pos < out.size) {
        size_t ip = in->pos, op = out.pos;
        size_t r = ZSTD_decompressStream(d, &out, in);
        if (ZSTD_isError(r))
            return st_err_zstd(r, "wire packet: zstd payload");
        *ret = r;
        if (r == 0 && out.pos < out.size)
            return st_errorf(ST_EFORMAT,
                             "wire packet: zstd frame ends after %llu bytes, raw_len is %llu",
                             (unsigned long long)(done + out.pos), (unsigned long long)raw_len);
        if (in->pos == ip && out.pos == op)
            return st_errorf(ST_EFORMAT,
                             "wire packet: zstd frame truncated after %llu of %llu bytes",
                             (unsigned long long)(done + out.pos), (unsigned long long)raw_len);
    }
    return ST_OK;
}

/* wire_zfinish - the frame must end exactly here, producing nothing more. */
static st_err wire_zfinish(ZSTD_DCtx *d, ZSTD_inBuffer *in, size_t ret, uint64_t raw_len)
{
    unsigned char extra;
    while (ret != 0) {
        ZSTD_outBuffer out = {&extra, 1, 0};
        size_t ip = in->pos;
        ret = ZSTD_decompressStream(d, &out, in);
        if (ZSTD_isError(ret))
            return st_err_zstd(ret, "wire packet: zstd payload");
        if (out.pos != 0)
            return st_errorf(ST_EFORMAT, "wire packet: zstd frame decompresses beyond raw_len %llu",
                             (unsigned long long)raw_len);
        if (ret != 0 && in->pos == ip)
            return st_errorf(ST_EFORMAT, "wire packet: zstd frame truncated at raw_len %llu",
                             (unsigned long long)raw_len);
    }
    if (in->pos != in->size)
        return st_errorf(ST_EFORMAT, "wire packet: %zu bytes after the zstd frame",
                         in->size - in->pos);
    return ST_OK;
}

/* wire_zstd_window - the window size the header of the zstd frame f
 * declares (its content size fcs when it is a single segment). */
static st_err wire_zstd_window(const unsigned char *f, size_t n, uint64_t fcs, uint64_t *window)
{
    if (n < 6 || st_le_ld32(f) != 0xFD2FB528u)
        return st_errorf(ST_EFORMAT, "wire packet: payload is not a zstd frame");
    if (f[4] & 0x20) { /* Single_Segment_flag */
        *window = fcs;
        return ST_OK;
    }
    uint64_t base = 1ull << (10 + (f[5] >> 3));
    *window = base + (base / 8) * (f[5] & 7u);
    return ST_OK;
}

/* wire_dec_zstd - payload as one zstd frame, decompressed by token chunks. */
static st_err wire_dec_zstd(st_wire_ctx *ctx, const st_wire_hdr *h, const unsigned char *pay,
                            float *out)
{
    size_t wl = (size_t)h->wire_len;
    unsigned long long fcs = ZSTD_getFrameContentSize(pay, wl);
    if (fcs == ZSTD_CONTENTSIZE_ERROR || fcs == ZSTD_CONTENTSIZE_UNKNOWN)
        return st_errorf(ST_EFORMAT, "wire packet: zstd frame without a readable content size");
    if (fcs != h->raw_len)
        return st_errorf(ST_EFORMAT,
                         "wire packet: zstd frame content size %llu differs from raw_len %llu", fcs,
                         (unsigned long long)h->raw_len);
    uint64_t window = 0;
    st_err e = wire_zstd_window(pay, wl, fcs, &window);
    if (e != ST_OK)
        return e;
    if (window > (1u << ST_WIRE_ZSTD_WINDOW_LOG))
        return st_errorf(ST_EFORMAT, "wire packet: zstd frame window %llu exceeds %u bytes",
                         (unsigned long long)window, 1u << ST_WIRE_ZSTD_WINDOW_LOG);
    size_t fsz = ZSTD_findFrameCompressedSize(pay, wl);
    if (ZSTD_isError(fsz) || fsz != wl)
        return st_errorf(ST_EFORMAT, "wire packet: zstd frame size %s differs from wire_len %zu",
                         ZSTD_isError(fsz) ? ZSTD_getErrorName(fsz) : "(other)", wl);
    if (ctx->dctx == NULL && (ctx->dctx = ZSTD_createDCtx()) == NULL)
        return st_errorf(ST_ENOMEM, "wire: ZSTD_createDCtx failed");
    size_t r = ZSTD_DCtx_reset(ctx->dctx, ZSTD_reset_session_and_parameters);
    if (!ZSTD_isError(r))
        r = ZSTD_DCtx_setParameter(ctx->dctx, ZSTD_d_windowLogMax, ST_WIRE_ZSTD_WINDOW_LOG);
    if (ZSTD_isError(r))
        return st_err_zstd(r, "wire: zstd decoder setup");
    ZSTD_inBuffer in = {pay, wl, 0};
    size_t ret = 1;
    const size_t rec = (size_t)st_wire_token_bytes(h->dtype, h->hidden);
    const bool planes = (h->flags & ST_WIRE_F_PLANES) != 0;
    size_t tpc = rec >= WIRE_CHUNK_BYTES ? 1 : WIRE_CHUNK_BYTES / rec;
    unsigned char *s0 = NULL, *s1 = NULL;
    e = wire_scratch(ctx, 0, tpc * rec, &s0);
    if (e == ST_OK && planes)
        e = wire_scratch(ctx, 1, tpc * rec, &s1);
    for (uint64_t t = 0; e == ST_OK && t < h->n_tokens; t += tpc) {
        size_t k = (size_t)(h->n_tokens - t < tpc ? h->n_tokens - t : tpc);
        e = wire_zfill(ctx->dctx, &in, s0, k * rec, &ret, t * rec, h->raw_len);
        if (e != ST_OK)
            break;
        const unsigned char *src = s0;
        if (planes) {
            for (size_t j = 0; j < k; j++)
                wire_merge_planes(s0 + j * rec, (uint16_t *)(void *)(s1 + j * rec), h->hidden);
            src = s1;
        }
        e = wire_dec_tokens(ctx, h->dtype, h->hidden, src, k, t, out + t * h->hidden);
    }
    return e != ST_OK ? e : wire_zfinish(ctx->dctx, &in, ret, h->raw_len);
}

st_err st_wire_decode(st_wire_ctx *ctx, const void *buf, size_t len, const st_wire_expect *exp,
                      st_wire_hdr *h, st_wire_row *rows, size_t rows_cap, float *hidden_out,
                      size_t hidden_cap_floats)
{
    if (ctx == NULL || exp == NULL || h == NULL)
        return st_errorf(ST_EINVAL, "st_wire_decode: ctx, exp and h are required");
    const unsigned char *b = buf;
    size_t off = 0;
    st_err e = wire_frame(b, len, h, &off);
    if (e == ST_OK)
        e = wire_verify(ctx, b, len, off);
    if (e == ST_OK)
        e = wire_fields(b, h);
    if (e == ST_OK)
        e = wire_expect(h, exp);
    if (e == ST_OK)
        e = wire_rows(b, h, rows, rows_cap);
    if (e != ST_OK)
        return e;
    uint64_t nf = (uint64_t)h->n_tokens * h->hidden;
    if (hidden_out == NULL || hidden_cap_floats < nf)
        return st_errorf(ST_ERANGE,
                         "wire packet: %u tokens x hidden %u = %llu floats, the output holds %zu",
                         h->n_tokens, h->hidden, (unsigned long long)nf,
                         hidden_out == NULL ? (size_t)0 : hidden_cap_floats);
    if (h->flags & ST_WIRE_F_ZSTD)
        return wire_dec_zstd(ctx, h, b + off, hidden_out);
    return wire_dec_plain(ctx, h, b + off, hidden_out);
}

/* wire_by_precision - the dtypes, the most precise first (wire_impl.h,
 * st_wire_dtype_by_precision). */
const st_wire_dtype wire_by_precision[ST_WIRE_DT_COUNT] = {
    ST_WIRE_F32,
    ST_WIRE_F16,
    ST_WIRE_BF16,
    ST_WIRE_I8,
};

st_wire_dtype st_wire_dtype_by_precision(size_t k)
{
    return k < ST_WIRE_DT_COUNT ? wire_by_precision[k] : ST_WIRE_DT_COUNT;
}

/* ---- choosing a boundary's dtype ---- */

uint32_t st_wire_accept_mask(char *const *names, size_t n, size_t *n_unknown)
{
    size_t unknown = 0;
    uint32_t mask = 0;
    for (size_t i = 0; i < n; i++) {
        bool known = false;
        for (unsigned d = 0; names[i] != NULL && d < ST_WIRE_DT_COUNT && !known; d++)
            if (strcmp(names[i], wire_dtypes[d].name) == 0) {
                mask |= 1u << d;
                known = true;
            }
        unknown += !known;
    }
    if (n_unknown)
        *n_unknown = unknown;
    return n == 0 ? 1u << ST_WIRE_F32 : mask;
}

st_err st_wire_mask_parse(const char *list, uint32_t *out)
{
    uint32_t mask = 0;
    const char *p = list ? list : "";
    for (;;) {
        size_t len = strcspn(p, ",");
        unsigned d = 0;
        while (d < ST_WIRE_DT_COUNT &&
               !(strlen(wire_dtypes[d].name) == len && strncmp(p, wire_dtypes[d].name, len) == 0))
            d++;
        if (d == ST_WIRE_DT_COUNT)
            return st_errorf(ST_ETYPE,
                             "wire dtype list '%s': '%.*s' is not one of " ST_WIRE_DTYPE_NAMES,
                             list ? list : "", (int)len, p);
        mask |= 1u << d;
        if (p[len] == '\0')
            break;
        p += len + 1;
    }
    *out = mask;
    return ST_OK;
}

const char *st_wire_mask_text(uint32_t mask, char *buf, size_t cap)
{
    size_t used = 0;
    if (cap == 0)
        return buf;
    buf[0] = '\0';
    for (size_t k = 0; k < ST_WIRE_DT_COUNT && used < cap; k++) {
        st_wire_dtype d = wire_by_precision[k];
        if (!(mask & (1u << d)))
            continue;
        int w = snprintf(buf + used, cap - used, "%s%s", used ? "," : "", st_wire_dtype_name(d));
        if (w < 0)
            break;
        used += (size_t)w;
    }
    if (used == 0)
        snprintf(buf, cap, "none");
    return buf;
}
