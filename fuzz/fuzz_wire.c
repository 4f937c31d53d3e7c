/* fuzz_wire.c - libFuzzer target of the activation packet decoder.
 *
 * Input: one mode byte, then a packet. Mode bits:
 *   0x01  re-seal the packet first (wt_reseal, tests/wire/wire_reseal.h),
 *         so that inputs get past the CRC and reach the field, row and
 *         payload checks;
 *   0x02  take the receiver's epoch, plan hash, stage and hidden size from
 *         the packet's own header when it has 128 bytes (else epoch 7, plan
 *         hash 0xAB x 32, stage 1, hidden 64: the constants of tests/wire);
 *   0x08  use the scalar reference conversions instead of SIMD.
 * Other bits are ignored (0x04 was the packet MAC's, removed from the
 * format: the envelope authenticates packets). Each input runs
 * st_wire_decode on an exact-size copy (so ASan sees any over-read); when
 * decoding succeeds, the values are encoded again in the packet's dtype
 * and decoded again, and the header, rows and (for f32) values must
 * survive. Seeds: `test_wire --write-corpus DIR`. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire/wire.h"
#include "tests/wire/wire_reseal.h"

#define FW_MAX_TOKENS 4096u
#define FW_OUT_FLOATS (1u << 22)

static void fw_check(int cond)
{
    if (!cond)
        abort();
}

/* fw_state - buffers made once per process (libFuzzer runs many inputs). */
typedef struct fw_state {
    st_wire_ctx *ctx[2];
    st_wire_row *rows, *rows2;
    float *out, *out2;
    unsigned char *pkt2;
    size_t pkt2_cap;
} fw_state;

static fw_state *fw_get(void)
{
    static fw_state s;
    if (s.out == NULL) {
        fw_check(st_wire_ctx_new(0, &s.ctx[0]) == ST_OK);
        fw_check(st_wire_ctx_new(1, &s.ctx[1]) == ST_OK);
        s.rows = calloc(ST_WIRE_MAX_ROWS, sizeof *s.rows);
        s.rows2 = calloc(ST_WIRE_MAX_ROWS, sizeof *s.rows2);
        s.out = malloc((size_t)FW_OUT_FLOATS * sizeof *s.out);
        s.out2 = malloc((size_t)FW_OUT_FLOATS * sizeof *s.out2);
        fw_check(s.rows && s.rows2 && s.out && s.out2);
    }
    return &s;
}

/* fw_reencode - encodes what was decoded and decodes it again. */
static void fw_reencode(fw_state *s, st_wire_ctx *ctx, const st_wire_hdr *h,
                        const st_wire_expect *exp)
{
    st_wire_opts o = {.dtype = h->dtype,
                      .zstd_level = (h->flags & ST_WIRE_F_ZSTD) ? 1 : 0,
                      .plane_split = (h->flags & ST_WIRE_F_PLANES) != 0};
    size_t cap, len;
    fw_check(st_wire_encode_size(h, s->rows, &o, &cap) == ST_OK);
    if (cap > s->pkt2_cap) {
        free(s->pkt2);
        s->pkt2 = malloc(cap);
        fw_check(s->pkt2 != NULL);
        s->pkt2_cap = cap;
    }
    st_err e = st_wire_encode_buf(h, s->rows, s->out, &o, ctx, s->pkt2, cap, &len, NULL);
    if (e == ST_ERANGE) /* a NaN / Inf / huge code in the decoded payload: refused, fine */
        return;
    fw_check(e == ST_OK);
    st_wire_hdr h2;
    size_t nf = (size_t)h->n_tokens * h->hidden;
    fw_check(st_wire_decode(ctx, s->pkt2, len, exp, &h2, s->rows2, ST_WIRE_MAX_ROWS, s->out2,
                            FW_OUT_FLOATS) == ST_OK);
    fw_check(h2.n_rows == h->n_rows && h2.n_tokens == h->n_tokens && h2.dtype == h->dtype);
    fw_check(h2.epoch == h->epoch && h2.stage == h->stage &&
             memcmp(h2.plan_hash, h->plan_hash, ST_WIRE_PLAN_HASH_SIZE) == 0);
    fw_check(memcmp(s->rows, s->rows2, h->n_rows * sizeof *s->rows) == 0);
    if (h->dtype == ST_WIRE_F32)
        fw_check(memcmp(s->out, s->out2, nf * sizeof *s->out) == 0);
}

/* fw_ld - the little-endian integer of n bytes at p. */
static uint64_t fw_ld(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    fw_state *s = fw_get();
    const unsigned mode = data[0];
    const size_t len = size - 1;
    unsigned char *pkt = malloc(len ? len : 1);
    fw_check(pkt != NULL);
    memcpy(pkt, data + 1, len);

    uint8_t plan[ST_WIRE_PLAN_HASH_SIZE];
    memset(plan, 0xAB, sizeof plan);
    if (mode & 1)
        (void)wt_reseal(pkt, len); /* fails when the rows overrun the input: fine */

    st_wire_expect exp = {.epoch = 7,
                          .plan_hash = plan,
                          .stage = 1,
                          .hidden = 64,
                          .max_tokens = FW_MAX_TOKENS};
    if ((mode & 2) && len >= ST_WIRE_HDR_SIZE) {
        exp.epoch = fw_ld(pkt + ST_WIRE_OFF_EPOCH, 8);
        memcpy(plan, pkt + ST_WIRE_OFF_PLAN, sizeof plan);
        exp.stage = (uint16_t)fw_ld(pkt + ST_WIRE_OFF_STAGE, 2);
        exp.hidden = (uint32_t)fw_ld(pkt + ST_WIRE_OFF_HIDDEN, 4);
    }
    st_wire_hdr h;
    st_wire_ctx *ctx = s->ctx[(mode & 8) ? 1 : 0];
    st_err e = st_wire_decode(ctx, pkt, len, &exp, &h, s->rows, ST_WIRE_MAX_ROWS, s->out,
                              FW_OUT_FLOATS);
    if (e == ST_OK)
        fw_reencode(s, ctx, &h, &exp);
    free(pkt);
    return 0;
}
