/* wire_test.h - helpers shared by the wire codec tests: deterministic
 * activation-like data, a builder of valid packets, and the suites.
 *
 * The base packet every malformed case starts from uses the constants
 * below; fuzz/fuzz_wire.c uses the same ones, so packets written by
 * `test_wire --write-corpus DIR` are meaningful seeds for it. */
#ifndef ST_TEST_WIRE_H
#define ST_TEST_WIRE_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "common/wire/wire.h"

#define WT_EPOCH 7u
#define WT_STAGE 1u
#define WT_HIDDEN 64u
#define WT_PLAN_BYTE 0xABu
#define WT_MAX_TOKENS 4096u

/* wt_rng - splitmix64 stream. */
typedef struct wt_rng {
    uint64_t s;
} wt_rng;

/* wt_next - the next 64 random bits. */
uint64_t wt_next(wt_rng *r);

/* wt_unit - uniform in [0, 1). */
double wt_unit(wt_rng *r);

/* wt_gauss - standard normal (Box-Muller). */
float wt_gauss(wt_rng *r);

/* wt_activations - n_tok x hidden values like a transformer's hidden state:
 * N(0, 1), a few channels scaled x20, and rare x50 outliers. */
void wt_activations(float *x, size_t n_tok, uint32_t hidden, uint64_t seed);

/* wt_plan_hash - the fixed plan hash. */
const uint8_t *wt_plan_hash(void);

/* A packet under test with what it was made from. */
typedef struct wt_pkt {
    unsigned char *buf; /* malloc'ed, len bytes (+ room to grow by 64) */
    size_t len;
    st_wire_hdr h;
    st_wire_row rows[3];
    float *x; /* the encoded values */
    size_t n_floats;
} wt_pkt;

/* wt_build - a valid packet of three rows (1, 2 and 3 tokens) of hidden
 * values. Aborts the test on failure. */
void wt_build(wt_pkt *p, st_wire_dtype dt, int zstd_level, int planes, uint32_t hidden);

/* wt_free - frees p's buffers. */
void wt_free(wt_pkt *p);

/* wt_expect - the receiver expectations matching wt_build's packets. */
void wt_expect(st_wire_expect *e);

/* wt_put32 / wt_put64 - little-endian stores into a packet. */
void wt_put32(unsigned char *p, uint32_t v);
void wt_put64(unsigned char *p, uint64_t v);

/* The suites. */
Suite *wt_convert_suite(int exhaustive);
Suite *wt_codec_suite(void);
Suite *wt_corpus_suite(void);

/* wt_write_corpus - writes every corpus packet as DIR/NAME, prefixed by
 * the fuzz harness's mode byte. Returns 0 on success. */
int wt_write_corpus(const char *dir);

#endif
