/* units.h - byte counts as people write them: the one grammar of every
 * byte count Strata reads from a flag or a file (`strata-worker --memory`,
 * the workers file's "memory" and model_facts byte fields).
 *
 * Grammar (letters in any case):
 *
 *     COUNT  = DIGITS [ "." DIGITS ] [ UNIT [ "iB" ] | "B" ]
 *     UNIT   = "k" | "M" | "G" | "T"     binary: 2^10, 2^20, 2^30, 2^40
 *
 * so "4096", "64k", "512M", "2g", "1.5T", "16GiB" and "512B" are byte
 * counts. A decimal must come to a whole number of bytes ("0.5k" is 512,
 * "1.5" is refused), and the count must fit 64 bits. "GB", "MB", ... are
 * refused rather than guessed: they mean powers of ten to some readers and
 * of two to others; the error says to write "G" or "GiB". Nothing else is
 * accepted: no sign, no spaces, no exponent, no other unit. */
#ifndef ST_UNITS_H
#define ST_UNITS_H

#include <stdint.h>

#include "common/base/err.h"

/* st_parse_bytes - the byte count s (see the file comment) into *out.
 * ST_EINVAL for anything else, an overflow of 64 bits included, with a
 * detail quoting s and saying what is wrong; *out is unchanged then. */
st_err st_parse_bytes(const char *s, uint64_t *out);

#endif
