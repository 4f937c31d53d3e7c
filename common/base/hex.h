/* hex.h - bytes as lower-case hex: the one printer of ids, hashes and
 * keys in messages, logs and JSON (model ids, plan hashes). */
#ifndef ST_HEX_H
#define ST_HEX_H

#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"

/* Bytes of an id or hash that a message shows ("3fa4c2d19e0b7a55.."):
 * enough to tell two apart, short enough for a log line. */
#define ST_HEX_SHORT 8
/* The buffer st_hex_short fills: two digits a byte and the NUL. */
#define ST_HEX_SHORT_CAP (2 * ST_HEX_SHORT + 1)

/* st_hex - the n bytes at p as 2n lower-case hex digits and a NUL into
 * out, which has cap bytes. ST_ERANGE when cap < 2n + 1: then nothing but
 * "" (when cap > 0) is written, never a part of the digits. */
st_err st_hex(const uint8_t *p, size_t n, char *out, size_t cap);

/* st_hex_short - the first min(n, ST_HEX_SHORT) bytes of p, for a message
 * that shows an id or hash by its start (followed by ".."). */
void st_hex_short(const uint8_t *p, size_t n, char out[ST_HEX_SHORT_CAP]);

#endif
