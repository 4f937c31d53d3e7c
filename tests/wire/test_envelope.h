/* test_envelope.h - what the envelope's unit tests share
 * (test_envelope.c, test_envelope_window.c). */
#ifndef TE_ENVELOPE_H
#define TE_ENVELOPE_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "common/wire/envelope.h"

#define TE_BODY 300
#define TE_SENDER 0x1234
#define TE_RECEIVER 0x9999

typedef struct te_frame {
    uint8_t buf[ST_ENV_HDR + TE_BODY + ST_ENV_MAC];
    size_t len;
} te_frame;

/* te_key - a key of 32 bytes b. */
void te_key(uint8_t key[ST_KEY_BYTES], uint8_t b);

/* te_body - n patterned bytes. */
void te_body(uint8_t *p, size_t n);

/* te_seal - a frame of body_len patterned bytes sealed by tx. */
void te_seal(st_env *tx, te_frame *f, size_t body_len);

/* te_window_tcase - the anti-replay window's tests (test_envelope_window.c). */
TCase *te_window_tcase(void);

#endif
