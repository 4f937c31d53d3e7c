/* units.h - byte counts as people write them: the one grammar of every
 * byte count Strata reads from a flag or a file (`strata-worker --memory`,
 * the workers file's "memory" and model_facts byte fields), and the one
 * printer of byte counts in messages and status text (st_fmt_bytes*).
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

#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"

/* st_parse_bytes - the byte count s (see the file comment) into *out.
 * ST_EINVAL for anything else, an overflow of 64 bits included, with a
 * detail quoting s and saying what is wrong; *out is unchanged then. */
st_err st_parse_bytes(const char *s, uint64_t *out);

/* A buffer that holds any text of st_fmt_bytes or st_fmt_bytes_exact. */
#define ST_FMT_BYTES_CAP 48

/* st_fmt_bytes - b for a status line, in the largest binary unit it
 * reaches: "1.50 GiB" (two decimals), "12.5 MiB", "3.0 KiB" (one decimal),
 * "512 B", into buf of cap bytes (snprintf's truncation below
 * ST_FMT_BYTES_CAP); returns buf. */
const char *st_fmt_bytes(uint64_t b, char *buf, size_t cap);

/* st_fmt_bytes_exact - b for an error or plan message, rounded and exact:
 * "1.50 GiB (1610612736 B)", "12.50 MiB (13107200 B)", below 1 MiB
 * "4096 B", and UINT64_MAX (a sum that overflowed) "more than 16 EiB";
 * into buf as st_fmt_bytes; returns buf. */
const char *st_fmt_bytes_exact(uint64_t b, char *buf, size_t cap);

#endif
