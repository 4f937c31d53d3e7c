/* test_wire_corpus.c - hand-made malformed activation packets, each with
 * the error code it must get and a word its detail must contain.
 *
 * Every case starts from a valid packet of wt_build (three rows of 1, 2 and
 * 3 tokens, hidden 64), changes bytes, and when the framing is still
 * intact re-seals it (wt_reseal, wire_reseal.h), so that the check under
 * test is reached instead of the checksum. The same packets, prefixed with the
 * mode byte of fuzz/fuzz_wire.c, are the fuzzer's seeds
 * (`test_wire --write-corpus DIR`). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "tests/wire/wire_reseal.h"
#include "tests/wire/wire_test.h"

typedef struct wc_case {
    const char *name;
    st_wire_dtype dt;
    int zstd, planes;                    /* the base packet */
    uint32_t hidden;                     /* 0: WT_HIDDEN */
    void (*mutate)(wt_pkt *p);           /* NULL: none */
    int reseal;                          /* re-seal after mutating */
    void (*receiver)(st_wire_expect *e); /* NULL: matching expectations */
    size_t rows_cap, out_cap;            /* 0: enough */
    st_err code;
    const char *detail; /* substring of st_errdetail() */
} wc_case;

static size_t wc_payload_off(const wt_pkt *p)
{
    return ST_WIRE_HDR_SIZE + (size_t)p->h.n_rows * ST_WIRE_ROW_SIZE;
}

/* wc_replace_payload - a new payload (and wire_len) for p. */
static void wc_replace_payload(wt_pkt *p, const void *pay, size_t n)
{
    size_t off = wc_payload_off(p);
    unsigned char *b = malloc(off + n + 64);
    memcpy(b, p->buf, off);
    memcpy(b + off, pay, n);
    wt_put64(b + ST_WIRE_OFF_WIRE_LEN, n);
    free(p->buf);
    p->buf = b;
    p->len = off + n;
}

/* wc_raw - the base packet's raw f32 payload bytes (f32 packets only). */
static const unsigned char *wc_raw(const wt_pkt *p) { return (const unsigned char *)p->x; }

static void m_magic(wt_pkt *p) { p->buf[0] = 'X'; }
static void m_version(wt_pkt *p) { p->buf[ST_WIRE_OFF_VERSION] = 3; }
static void m_version1(wt_pkt *p) { p->buf[ST_WIRE_OFF_VERSION] = 1; } /* had batch_id, seq */
static void m_hdr_len(wt_pkt *p) { p->buf[ST_WIRE_OFF_HDR_LEN] = 120; }
static void m_flags(wt_pkt *p) { p->buf[ST_WIRE_OFF_FLAGS] |= 0x8; }
static void m_flag_mac(wt_pkt *p) { p->buf[ST_WIRE_OFF_FLAGS] |= 0x4; } /* the removed MAC flag */
static void m_trunc1(wt_pkt *p) { p->len -= 1; }
static void m_trunc_hdr(wt_pkt *p) { p->len = 100; }
static void m_trunc_tiny(wt_pkt *p) { p->len = 5; }
static void m_trailing(wt_pkt *p) { p->buf[p->len++] = 0; }
static void m_rows0(wt_pkt *p) { wt_put32(p->buf + ST_WIRE_OFF_N_ROWS, 0); }
static void m_rows_huge(wt_pkt *p) { wt_put32(p->buf + ST_WIRE_OFF_N_ROWS, 5000); }
static void m_rows_more(wt_pkt *p) { wt_put32(p->buf + ST_WIRE_OFF_N_ROWS, 4); }
static void m_rows_fewer(wt_pkt *p) { wt_put32(p->buf + ST_WIRE_OFF_N_ROWS, 2); }
static void m_ntok(wt_pkt *p) { wt_put32(p->buf + ST_WIRE_OFF_N_TOKENS, 7); }
static void m_row_sum(wt_pkt *p) { wt_put32(p->buf + ST_WIRE_HDR_SIZE + 2 * 16 + 12, 4); }
static void m_row_zero(wt_pkt *p) { wt_put32(p->buf + ST_WIRE_HDR_SIZE + 12, 0); }
static void m_pos_overflow(wt_pkt *p)
{
    wt_put32(p->buf + ST_WIRE_HDR_SIZE + 16 + 8, UINT32_MAX - 1);
}
static void m_row_tok_huge(wt_pkt *p) { wt_put32(p->buf + ST_WIRE_HDR_SIZE + 16 + 12, UINT32_MAX); }

static void m_ntok_huge(wt_pkt *p)
{
    wt_put32(p->buf + ST_WIRE_OFF_N_TOKENS, UINT32_MAX);
    wt_put64(p->buf + ST_WIRE_OFF_RAW_LEN, (uint64_t)UINT32_MAX * 4 * WT_HIDDEN);
    wt_put64(p->buf + ST_WIRE_OFF_WIRE_LEN, (uint64_t)UINT32_MAX * 4 * WT_HIDDEN);
}

static void m_hidden0(wt_pkt *p) { wt_put32(p->buf + ST_WIRE_OFF_HIDDEN, 0); }
static void m_hidden_big(wt_pkt *p) { wt_put32(p->buf + ST_WIRE_OFF_HIDDEN, 1u << 21); }
static void m_hidden32(wt_pkt *p) { wt_put32(p->buf + ST_WIRE_OFF_HIDDEN, 32); }

static void m_raw_len(wt_pkt *p) { wt_put64(p->buf + ST_WIRE_OFF_RAW_LEN, p->h.raw_len + 2); }

static void m_wire_more(wt_pkt *p) { wt_put64(p->buf + ST_WIRE_OFF_WIRE_LEN, p->h.wire_len + 4); }
static void m_wire_less(wt_pkt *p) { wt_put64(p->buf + ST_WIRE_OFF_WIRE_LEN, p->h.wire_len - 4); }
static void m_wire_huge(wt_pkt *p) { wt_put64(p->buf + ST_WIRE_OFF_WIRE_LEN, UINT64_MAX - 10); }
static void m_dtype9(wt_pkt *p) { p->buf[ST_WIRE_OFF_DTYPE] = 9; }
static void m_dtype_bf16(wt_pkt *p) { p->buf[ST_WIRE_OFF_DTYPE] = ST_WIRE_BF16; }
static void m_planes(wt_pkt *p) { p->buf[ST_WIRE_OFF_FLAGS] |= ST_WIRE_F_PLANES; }
static void m_rsv0(wt_pkt *p) { p->buf[ST_WIRE_OFF_RSV0] = 1; }
static void m_rsv1(wt_pkt *p) { p->buf[ST_WIRE_OFF_RSV1 + 2] = 1; }
static void m_rsv2(wt_pkt *p) { p->buf[ST_WIRE_OFF_RSV2 + 7] = 0x80; }
static void m_rsv3(wt_pkt *p) { p->buf[ST_WIRE_OFF_RSV3 + 8] = 3; } /* version 1's seq 3 */
static void m_tag_pad(wt_pkt *p) { p->buf[ST_WIRE_OFF_TAG + 8] = 1; }
static void m_flip_payload(wt_pkt *p) { p->buf[p->len - 3] ^= 0x10; }
static void m_flip_row(wt_pkt *p) { p->buf[ST_WIRE_HDR_SIZE + 1] ^= 1; }
static void m_flip_epoch(wt_pkt *p) { p->buf[ST_WIRE_OFF_EPOCH] ^= 1; }
static void m_epoch3(wt_pkt *p) { wt_put64(p->buf + ST_WIRE_OFF_EPOCH, 3); }

static void m_scale_nan(wt_pkt *p)
{
    wt_put32(p->buf + wc_payload_off(p) + 2 * (4 + WT_HIDDEN), 0x7fc00000u);
}

static void m_scale_neg(wt_pkt *p) { p->buf[wc_payload_off(p) + 3 * (4 + WT_HIDDEN) + 3] |= 0x80; }

static void m_scale_huge(wt_pkt *p)
{
    wt_put32(p->buf + wc_payload_off(p) + 4 * (4 + WT_HIDDEN), 0x7f000000u); /* 2^127 */
}

/* a non-finite value in the payload at token 4, index 9 */
static unsigned char *wc_val(wt_pkt *p, size_t esz)
{
    return p->buf + wc_payload_off(p) + esz * (4 * WT_HIDDEN + 9);
}

static void m_f16_inf(wt_pkt *p)
{
    wc_val(p, 2)[0] = 0x00;
    wc_val(p, 2)[1] = 0xfc; /* -Inf */
}

static void m_bf16_nan(wt_pkt *p)
{
    wc_val(p, 2)[0] = 0xc1;
    wc_val(p, 2)[1] = 0x7f;
}

static void m_f32_nan(wt_pkt *p) { wt_put32(wc_val(p, 4), 0x7fc00001u); }

/* m_f16_inf_zstd - the f16 Inf packet with its payload then compressed. */
static void m_f16_inf_zstd(wt_pkt *p)
{
    m_f16_inf(p);
    size_t raw = p->h.raw_len, cap = ZSTD_compressBound(raw);
    unsigned char *f = malloc(cap);
    size_t n = ZSTD_compress(f, cap, p->buf + wc_payload_off(p), raw, 1);
    ck_assert(!ZSTD_isError(n));
    p->buf[ST_WIRE_OFF_FLAGS] |= ST_WIRE_F_ZSTD;
    wc_replace_payload(p, f, n);
    free(f);
}

/* zstd frames made by hand */
static void m_zstd_bomb(wt_pkt *p)
{
    size_t big = 1u << 20;
    unsigned char *zeros = calloc(1, big);
    size_t cap = ZSTD_compressBound(big);
    unsigned char *f = malloc(cap);
    size_t n = ZSTD_compress(f, cap, zeros, big, 1);
    ck_assert(!ZSTD_isError(n));
    wc_replace_payload(p, f, n);
    free(zeros);
    free(f);
}

static void m_zstd_no_size(wt_pkt *p)
{
    ZSTD_CCtx *c = ZSTD_createCCtx();
    size_t cap = ZSTD_compressBound(p->h.raw_len) + 64;
    unsigned char *f = malloc(cap);
    ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, 0);
    ZSTD_outBuffer out = {f, cap, 0};
    ZSTD_inBuffer in = {wc_raw(p), p->h.raw_len, 0};
    ck_assert_uint_eq(ZSTD_compressStream2(c, &out, &in, ZSTD_e_end), 0);
    wc_replace_payload(p, f, out.pos);
    ZSTD_freeCCtx(c);
    free(f);
}

static void m_zstd_window(wt_pkt *p)
{
    ZSTD_CCtx *c = ZSTD_createCCtx();
    size_t cap = ZSTD_compressBound(p->h.raw_len);
    unsigned char *f = malloc(cap);
    ZSTD_CCtx_setParameter(c, ZSTD_c_windowLog, 20);
    size_t n = ZSTD_compress2(c, f, cap, wc_raw(p), p->h.raw_len);
    ck_assert(!ZSTD_isError(n));
    wc_replace_payload(p, f, n);
    ZSTD_freeCCtx(c);
    free(f);
}

/* m_zstd_liar - a frame of twice the raw bytes whose content-size field
 * is patched to claim the raw length. */
static void m_zstd_liar(wt_pkt *p)
{
    size_t raw = p->h.raw_len;
    unsigned char *two = malloc(2 * raw);
    memcpy(two, wc_raw(p), raw);
    memset(two + raw, 0, raw);
    size_t cap = ZSTD_compressBound(2 * raw);
    unsigned char *f = malloc(cap);
    size_t n = ZSTD_compress(f, cap, two, 2 * raw, 1);
    ck_assert(!ZSTD_isError(n));
    unsigned fhd = f[4];
    ck_assert_msg((fhd >> 6) == 1 && (fhd & 0x20) && (fhd & 3) == 0,
                  "unexpected zstd header 0x%02x", fhd);
    f[5] = (unsigned char)(raw - 256); /* 2-byte field: value - 256 */
    f[6] = (unsigned char)((raw - 256) >> 8);
    wc_replace_payload(p, f, n);
    free(two);
    free(f);
}

static void m_zstd_cut(wt_pkt *p)
{
    unsigned char *f = malloc(p->h.wire_len);
    memcpy(f, p->buf + wc_payload_off(p), p->h.wire_len);
    wc_replace_payload(p, f, p->h.wire_len - 3);
    free(f);
}

/* m_zstd_corrupt - the first block's content damaged (its literals
 * section header), the frame's structure left intact. */
static void m_zstd_corrupt(wt_pkt *p)
{
    unsigned char *f = p->buf + wc_payload_off(p);
    static const size_t did[4] = {0, 1, 2, 4}, fcs[4] = {0, 2, 4, 8};
    unsigned fhd = f[4];
    int single = (fhd & 0x20) != 0;
    size_t fh = 5 + (single ? 0 : 1) + did[fhd & 3] +
                ((fhd >> 6) == 0 ? (size_t)single : fcs[fhd >> 6]);
    ck_assert(fh + 4 <= p->h.wire_len);
    ck_assert_msg(((f[fh] >> 1) & 3) == 2, "first block is not compressed");
    f[fh + 3] ^= 0xff;
}

static void m_zstd_skippable(wt_pkt *p)
{
    unsigned char f[16] = {0x50, 0x2a, 0x4d, 0x18, 8, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8};
    wc_replace_payload(p, f, sizeof f);
}

/* receivers */
static void r_hidden128(st_wire_expect *e) { e->hidden = 128; }
static void r_hidden8192(st_wire_expect *e) { e->hidden = 8192; }
static void r_epoch8(st_wire_expect *e) { e->epoch = 8; }
static void r_stage2(st_wire_expect *e) { e->stage = 2; }
static void r_f32_only(st_wire_expect *e) { e->dtype_mask = 1u << ST_WIRE_F32; }
static void r_max5(st_wire_expect *e) { e->max_tokens = 5; }

static void r_other_plan(st_wire_expect *e)
{
    static uint8_t h[ST_WIRE_PLAN_HASH_SIZE];
    memset(h, WT_PLAN_BYTE, sizeof h);
    h[20] = 0;
    e->plan_hash = h;
}

static const wc_case wc_cases[] = {
    {"bad_magic", ST_WIRE_F32, 0, 0, 0, m_magic, 0, NULL, 0, 0, ST_EFORMAT, "magic"},
    {"version_3", ST_WIRE_F32, 0, 0, 0, m_version, 0, NULL, 0, 0, ST_EVERSION, "'version' is 3"},
    {"version_1", ST_WIRE_F32, 0, 0, 0, m_version1, 0, NULL, 0, 0, ST_EVERSION, "'version' is 1"},
    {"header_len", ST_WIRE_F32, 0, 0, 0, m_hdr_len, 0, NULL, 0, 0, ST_EFORMAT, "header_len"},
    {"unknown_flag", ST_WIRE_F16, 0, 0, 0, m_flags, 0, NULL, 0, 0, ST_EFORMAT, "unknown bits 0x8"},
    {"mac_flag_unknown", ST_WIRE_F16, 0, 0, 0, m_flag_mac, 1, NULL, 0, 0, ST_EFORMAT,
     "unknown bits 0x4"},
    {"truncated_1", ST_WIRE_F16, 0, 0, 0, m_trunc1, 0, NULL, 0, 0, ST_ETRUNC, "need"},
    {"truncated_header", ST_WIRE_F16, 0, 0, 0, m_trunc_hdr, 0, NULL, 0, 0, ST_ETRUNC, "header"},
    {"truncated_preamble", ST_WIRE_F16, 0, 0, 0, m_trunc_tiny, 0, NULL, 0, 0, ST_ETRUNC,
     "preamble"},
    {"trailing_byte", ST_WIRE_F16, 0, 0, 0, m_trailing, 0, NULL, 0, 0, ST_EFORMAT, "more than"},
    {"rows_zero", ST_WIRE_F16, 0, 0, 0, m_rows0, 0, NULL, 0, 0, ST_ERANGE, "n_rows"},
    {"rows_too_many", ST_WIRE_F16, 0, 0, 0, m_rows_huge, 0, NULL, 0, 0, ST_ERANGE, "n_rows"},
    {"rows_vs_payload_more", ST_WIRE_F16, 0, 0, 0, m_rows_more, 0, NULL, 0, 0, ST_ETRUNC, "rows"},
    {"rows_vs_payload_fewer", ST_WIRE_F16, 0, 0, 0, m_rows_fewer, 0, NULL, 0, 0, ST_EFORMAT,
     "rows"},
    {"n_tokens_vs_raw_len", ST_WIRE_F16, 0, 0, 0, m_ntok, 1, NULL, 0, 0, ST_EFORMAT, "raw_len"},
    {"n_tokens_huge", ST_WIRE_F32, 0, 0, 0, m_ntok_huge, 0, NULL, 0, 0, ST_ETRUNC, "need"},
    {"row_sum_mismatch", ST_WIRE_F16, 0, 0, 0, m_row_sum, 1, NULL, 0, 0, ST_EFORMAT, "rows hold 7"},
    {"row_zero_tokens", ST_WIRE_F16, 0, 0, 0, m_row_zero, 1, NULL, 0, 0, ST_ERANGE, "0 tokens"},
    {"row_position_overflow", ST_WIRE_F16, 0, 0, 0, m_pos_overflow, 1, NULL, 0, 0, ST_ERANGE,
     "overflow"},
    {"row_token_count_overflow", ST_WIRE_F16, 0, 0, 0, m_row_tok_huge, 1, NULL, 0, 0, ST_EFORMAT,
     "rows hold 4294967299"},
    {"hidden_zero", ST_WIRE_F16, 0, 0, 0, m_hidden0, 1, NULL, 0, 0, ST_ERANGE, "hidden"},
    {"hidden_too_big", ST_WIRE_F16, 0, 0, 0, m_hidden_big, 1, NULL, 0, 0, ST_ERANGE, "hidden"},
    {"hidden_vs_raw_len", ST_WIRE_F16, 0, 0, 0, m_hidden32, 1, NULL, 0, 0, ST_EFORMAT, "raw_len"},
    {"hidden_mismatch", ST_WIRE_F16, 0, 0, 0, NULL, 0, r_hidden128, 0, 0, ST_ESHAPE,
     "'hidden' is 64"},
    {"raw_len_mismatch", ST_WIRE_F16, 0, 0, 0, m_raw_len, 1, NULL, 0, 0, ST_EFORMAT, "raw_len"},
    {"wire_len_longer", ST_WIRE_F16, 0, 0, 0, m_wire_more, 0, NULL, 0, 0, ST_ETRUNC, "wire_len"},
    {"wire_len_shorter", ST_WIRE_F16, 0, 0, 0, m_wire_less, 0, NULL, 0, 0, ST_EFORMAT, "wire_len"},
    {"wire_len_overflow", ST_WIRE_F16, 0, 0, 0, m_wire_huge, 0, NULL, 0, 0, ST_EOVERFLOW,
     "wire_len"},
    {"wire_len_vs_raw_zstd", ST_WIRE_F16, 1, 0, 0, m_raw_len, 1, NULL, 0, 0, ST_EFORMAT, "raw_len"},
    {"dtype_unknown", ST_WIRE_F16, 0, 0, 0, m_dtype9, 1, NULL, 0, 0, ST_ETYPE, "dtype"},
    {"dtype_vs_raw_len", ST_WIRE_F32, 0, 0, 0, m_dtype_bf16, 1, NULL, 0, 0, ST_EFORMAT, "raw_len"},
    {"planes_without_zstd", ST_WIRE_F16, 0, 0, 0, m_planes, 1, NULL, 0, 0, ST_EFORMAT,
     "planes without zstd"},
    {"planes_with_f32", ST_WIRE_F32, 1, 0, 0, m_planes, 1, NULL, 0, 0, ST_EFORMAT, "16-bit"},
    {"reserved0", ST_WIRE_F16, 0, 0, 0, m_rsv0, 1, NULL, 0, 0, ST_EFORMAT, "reserved0"},
    {"reserved1", ST_WIRE_F16, 0, 0, 0, m_rsv1, 1, NULL, 0, 0, ST_EFORMAT, "reserved1"},
    {"reserved2", ST_WIRE_F16, 0, 0, 0, m_rsv2, 1, NULL, 0, 0, ST_EFORMAT, "reserved2"},
    {"reserved3", ST_WIRE_F16, 0, 0, 0, m_rsv3, 1, NULL, 0, 0, ST_EFORMAT, "reserved3"},
    {"crc_tag_padding", ST_WIRE_F16, 0, 0, 0, m_tag_pad, 0, NULL, 0, 0, ST_EFORMAT, "tag"},
    {"checksum_payload", ST_WIRE_F16, 0, 0, 0, m_flip_payload, 0, NULL, 0, 0, ST_ECHECKSUM, "CRC"},
    {"checksum_row", ST_WIRE_BF16, 0, 0, 0, m_flip_row, 0, NULL, 0, 0, ST_ECHECKSUM, "CRC"},
    {"checksum_header", ST_WIRE_I8, 1, 0, 0, m_flip_epoch, 0, NULL, 0, 0, ST_ECHECKSUM, "CRC"},
    {"stale_epoch", ST_WIRE_F16, 0, 0, 0, NULL, 0, r_epoch8, 0, 0, ST_EEPOCH,
     "epoch 7 plan abababab"},
    {"old_epoch_sent", ST_WIRE_F16, 0, 0, 0, m_epoch3, 1, NULL, 0, 0, ST_EEPOCH,
     "receiver's epoch 7"},
    {"wrong_plan_hash", ST_WIRE_F16, 0, 0, 0, NULL, 0, r_other_plan, 0, 0, ST_EEPOCH, "plan"},
    {"wrong_stage", ST_WIRE_F16, 0, 0, 0, NULL, 0, r_stage2, 0, 0, ST_EPROTO, "stage"},
    {"dtype_not_accepted", ST_WIRE_F16, 0, 0, 0, NULL, 0, r_f32_only, 0, 0, ST_ETYPE, "f16"},
    {"too_many_tokens", ST_WIRE_F16, 0, 0, 0, NULL, 0, r_max5, 0, 0, ST_ERANGE, "at most 5"},
    {"rows_buffer_small", ST_WIRE_F16, 0, 0, 0, NULL, 0, NULL, 2, 0, ST_ERANGE, "row buffer"},
    {"output_buffer_small", ST_WIRE_F16, 0, 0, 0, NULL, 0, NULL, 0, 6 * WT_HIDDEN - 1, ST_ERANGE,
     "output"},
    {"i8_scale_nan", ST_WIRE_I8, 0, 0, 0, m_scale_nan, 1, NULL, 0, 0, ST_ERANGE, "token 2"},
    {"i8_scale_negative", ST_WIRE_I8, 0, 0, 0, m_scale_neg, 1, NULL, 0, 0, ST_ERANGE, "token 3"},
    {"i8_scale_too_large", ST_WIRE_I8, 0, 0, 0, m_scale_huge, 1, NULL, 0, 0, ST_ERANGE, "token 4"},
    {"f16_inf_value", ST_WIRE_F16, 0, 0, 0, m_f16_inf, 1, NULL, 0, 0, ST_ERANGE, "token 4 index 9"},
    {"bf16_nan_value", ST_WIRE_BF16, 0, 0, 0, m_bf16_nan, 1, NULL, 0, 0, ST_ERANGE,
     "token 4 index 9"},
    {"f32_nan_value", ST_WIRE_F32, 0, 0, 0, m_f32_nan, 1, NULL, 0, 0, ST_ERANGE, "token 4 index 9"},
    {"f16_inf_value_zstd", ST_WIRE_F16, 0, 0, 0, m_f16_inf_zstd, 1, NULL, 0, 0, ST_ERANGE,
     "token 4 index 9"},
    {"zstd_bomb", ST_WIRE_F32, 1, 0, 0, m_zstd_bomb, 1, NULL, 0, 0, ST_EFORMAT,
     "content size 1048576"},
    {"zstd_no_content_size", ST_WIRE_F32, 1, 0, 0, m_zstd_no_size, 1, NULL, 0, 0, ST_EFORMAT,
     "content size"},
    {"zstd_window_too_large", ST_WIRE_F32, 1, 0, 8192, m_zstd_window, 1, r_hidden8192, 0, 0,
     ST_EFORMAT, "window 196608"},
    {"zstd_content_size_lie", ST_WIRE_F32, 1, 0, 0, m_zstd_liar, 1, NULL, 0, 0, ST_EZSTD, "zstd"},
    {"zstd_truncated_frame", ST_WIRE_F16, 1, 1, 0, m_zstd_cut, 1, NULL, 0, 0, ST_EFORMAT,
     "frame size"},
    {"zstd_corrupt_frame", ST_WIRE_F16, 1, 1, 1024, m_zstd_corrupt, 1, NULL, 0, 0, ST_EZSTD,
     "zstd"},
    {"zstd_skippable_frame", ST_WIRE_F32, 1, 0, 0, m_zstd_skippable, 1, NULL, 0, 0, ST_EFORMAT,
     "content size"},
};

#define WC_N (sizeof wc_cases / sizeof wc_cases[0])

/* wc_make - the case's packet. */
static void wc_make(const wc_case *c, wt_pkt *p)
{
    uint32_t hidden = c->hidden ? c->hidden : WT_HIDDEN;
    wt_build(p, c->dt, c->zstd, c->planes, hidden);
    p->h.raw_len = 6ull * (c->dt == ST_WIRE_F32  ? 4 * hidden
                           : c->dt == ST_WIRE_I8 ? 4 + hidden
                                                 : 2 * hidden);
    p->h.wire_len = p->len - wc_payload_off(p);
    if (c->mutate)
        c->mutate(p);
    if (c->reseal)
        ck_assert_msg(wt_reseal(p->buf, p->len) == 0, "%s: reseal: the rows overrun the packet",
                      c->name);
}

START_TEST(test_corpus_case)
{
    const wc_case *c = &wc_cases[_i];
    wt_pkt p;
    wc_make(c, &p);
    st_wire_expect ex;
    wt_expect(&ex);
    if (c->hidden)
        ex.hidden = c->hidden;
    if (c->receiver)
        c->receiver(&ex);
    size_t out_cap = c->out_cap ? c->out_cap : p.n_floats;
    float *out = malloc((p.n_floats + 16) * sizeof *out);
    st_wire_row rows[4];
    st_wire_hdr h;
    for (int force_ref = 0; force_ref <= 1; force_ref++) {
        st_wire_ctx *ctx;
        ck_assert_int_eq(st_wire_ctx_new(force_ref, &ctx), ST_OK);
        /* the decoder gets exactly len bytes: ASan sees any over-read */
        unsigned char *exact = malloc(p.len ? p.len : 1);
        memcpy(exact, p.buf, p.len);
        st_errclear();
        st_err e = st_wire_decode(ctx, exact, p.len, &ex, &h, rows, c->rows_cap ? c->rows_cap : 3,
                                  out, out_cap);
        ck_assert_msg(e == c->code, "case %s: got %s (%s), expected %s", c->name, st_strerror(e),
                      st_errdetail(), st_strerror(c->code));
        ck_assert_msg(strstr(st_errdetail(), c->detail) != NULL, "case %s: detail '%s' lacks '%s'",
                      c->name, st_errdetail(), c->detail);
        free(exact);
        st_wire_ctx_free(ctx);
    }
    free(out);
    wt_free(&p);
}
END_TEST

START_TEST(test_corpus_base_valid)
{
    /* without the mutation every base packet decodes */
    for (size_t i = 0; i < WC_N; i++) {
        wc_case c = wc_cases[i];
        c.mutate = NULL;
        c.reseal = 0;
        wt_pkt p;
        wc_make(&c, &p);
        st_wire_expect ex;
        wt_expect(&ex);
        if (c.hidden)
            ex.hidden = c.hidden;
        float *out = malloc(p.n_floats * sizeof *out);
        st_wire_row rows[3];
        st_wire_hdr h;
        st_wire_ctx *ctx;
        ck_assert_int_eq(st_wire_ctx_new(0, &ctx), ST_OK);
        st_err e = st_wire_decode(ctx, p.buf, p.len, &ex, &h, rows, 3, out, p.n_floats);
        ck_assert_msg(e == ST_OK, "base of %s: %s", c.name, st_errmsg(e));
        st_wire_ctx_free(ctx);
        free(out);
        wt_free(&p);
    }
}
END_TEST

Suite *wt_corpus_suite(void)
{
    Suite *s = suite_create("wire_corpus");
    TCase *tc = tcase_create("malformed");
    tcase_add_test(tc, test_corpus_base_valid);
    tcase_add_loop_test(tc, test_corpus_case, 0, (int)WC_N);
    suite_add_tcase(s, tc);
    return s;
}

int wt_write_corpus(const char *dir)
{
    for (size_t i = 0; i < WC_N; i++) {
        const wc_case *c = &wc_cases[i];
        wt_pkt p;
        wc_make(c, &p);
        /* fuzz_wire's mode byte: 1 reseal, 2 expectations from the header */
        unsigned char mode = (unsigned char)(c->reseal ? 1 : 0);
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.bin", dir, c->name);
        FILE *f = fopen(path, "wb");
        if (f == NULL) {
            fprintf(stderr, "test_wire: %s: %s\n", path, strerror(errno));
            wt_free(&p);
            return -1;
        }
        int ok = fwrite(&mode, 1, 1, f) == 1 && fwrite(p.buf, 1, p.len, f) == p.len;
        ok = (fclose(f) == 0) && ok;
        wt_free(&p);
        if (!ok) {
            fprintf(stderr, "test_wire: writing %s failed\n", path);
            return -1;
        }
    }
    return 0;
}
