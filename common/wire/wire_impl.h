/* wire_impl.h - internals shared by wire.c (format, checks, decoding) and
 * wire_enc.c (encoding). Not for use outside the wire module. */
#ifndef ST_WIRE_IMPL_H
#define ST_WIRE_IMPL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <zstd.h>

#include "common/base/le.h"
#include "common/wire/wire.h"
#include "kernels/convert.h"

/* Payload bytes converted per step: small enough that the fused checksum
 * pass reads them back from L1/L2. */
#define WIRE_CHUNK_BYTES (24u * 1024u)

struct st_wire_ctx {
    const st_convert_ops *cv;
    ZSTD_CCtx *cctx;           /* created on first use */
    ZSTD_DCtx *dctx;           /* created on first use */
    unsigned char *scratch[2]; /* grown on demand, malloc-aligned */
    size_t scratch_cap[2];
};

/* The running integrity tag of one packet: CRC-32C over payload, then
 * rows, then the header with its tag field zeroed. */
typedef struct wire_integ {
    uint32_t crc;
    const st_convert_ops *cv;
} wire_integ;

/* wire_integ_init - starts a tag. */
void wire_integ_init(wire_integ *g, const st_convert_ops *cv);

/* wire_integ_update - feeds n bytes. */
void wire_integ_update(wire_integ *g, const void *p, size_t n);

/* wire_integ_final - the 16-byte tag field (CRC: 4 LE bytes + 12 zero). */
void wire_integ_final(wire_integ *g, uint8_t tag[ST_WIRE_TAG_SIZE]);

/* wire_integ_header - feeds the 128-byte header with its tag field zeroed. */
void wire_integ_header(wire_integ *g, const unsigned char *hdr);

/* wire_scratch - ctx scratch buffer i (0 or 1) of at least n bytes. */
st_err wire_scratch(st_wire_ctx *ctx, int i, size_t n, unsigned char **out);

/* wire_split_planes - n 16-bit values to n high bytes then n low bytes. */
void wire_split_planes(const uint16_t *src, unsigned char *dst, size_t n);

/* wire_merge_planes - the inverse of wire_split_planes. */
void wire_merge_planes(const unsigned char *src, uint16_t *dst, size_t n);

/* wire_by_precision - the dtypes of this version, the most precise first:
 * f32, f16, bf16, i8 (the order --wire auto chooses in). */
extern const st_wire_dtype wire_by_precision[ST_WIRE_DT_COUNT];

#endif
