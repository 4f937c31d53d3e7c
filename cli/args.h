/* args.h - strict parsing of command-line values for the CLI.
 * Every parser rejects trailing garbage, empty strings and out-of-range
 * values, printing "strata: FLAG: reason" to stderr and returning nonzero. */
#ifndef ST_CLI_ARGS_H
#define ST_CLI_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "common/sampling.h"

/* cli_parse_i64 - a decimal integer in [lo, hi]. */
int cli_parse_i64(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out);

/* cli_parse_u64 - a decimal unsigned integer. */
int cli_parse_u64(const char *flag, const char *s, uint64_t *out);

/* cli_parse_f32 - a finite float in [lo, hi]. */
int cli_parse_f32(const char *flag, const char *s, float lo, float hi, float *out);

/* cli_parse_ids - "a,b,c" into a malloc'ed array of non-negative ids
 * (caller frees *ids). */
int cli_parse_ids(const char *flag, const char *s, int32_t **ids, size_t *n);

/* cli_need_value - fetches the value after argv[*i] (advancing *i), or
 * prints "FLAG needs a value" and returns NULL. */
const char *cli_need_value(int argc, char **argv, int *i);

/* cli_parse_sampling - parses argv[*i] if it is one of the sampling flags
 * shared by `strata run` and `strata generate` (--temp, --top-k, --top-p,
 * --min-p, --repeat-penalty, --seed), advancing *i past its value; returns
 * 1 if it was one, 0 if not, -1 on a bad value (message printed). */
int cli_parse_sampling(int argc, char **argv, int *i, st_sampler_params *sp);

#endif
