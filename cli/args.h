/* args.h - strict parsing of command-line values for the CLI.
 * Every parser rejects trailing garbage, empty strings and out-of-range
 * values, printing "strata: FLAG: reason" to stderr and returning nonzero. */
#ifndef ST_CLI_ARGS_H
#define ST_CLI_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "common/text/sampling.h"
#include "kernels/kernels.h"

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

/* The flags of the local engine (worker/engine/local.h) a command may take. */
typedef enum cli_local_flag {
    CLI_LOCAL_THREADS = 1u << 0, /* --threads N, -t N: 1..1024 (unset 0: every core) */
    CLI_LOCAL_CHUNK = 1u << 1,   /* --chunk N: 1..4096 tokens per prefill forward */
    CLI_LOCAL_CTX = 1u << 2,     /* --ctx N: 1..2^24 KV positions (unset 0: the model's) */
    CLI_LOCAL_KERNELS = 1u << 3, /* --kernels ref|auto|avx2|avx512: sets ops */
} cli_local_flag;

/* Their values; a command presets its defaults before parsing. */
typedef struct cli_local_opts {
    int64_t threads, chunk, ctx;
    const st_kernel_ops *ops; /* the variant --kernels named; NULL: auto (best, or STRATA_KERNELS) */
} cli_local_opts;

/* cli_parse_local - parses argv[*i] if it is one of the local engine's
 * flags that `which` (cli_local_flag bits) admits, advancing *i past its
 * value; returns 1 if it was, 0 if not, -1 on a bad value (message
 * printed). Shared by `strata run`, `strata chat` and `strata bench run`. */
int cli_parse_local(int argc, char **argv, int *i, unsigned which, cli_local_opts *o);

/* cli_operand - an argument no flag parser took: an unknown flag (its
 * message, then usage(): returns 2), the MODEL when *model is still NULL
 * (set: returns 0), else an unexpected argument (its message: 2). cmd
 * names the command in the messages ("run"). */
int cli_operand(const char *cmd, const char *arg, const char **model, void (*usage)(void));

/* cli_parse_sampling - parses argv[*i] if it is one of the sampling flags
 * shared by `strata run` and `strata generate` (--temp, --top-k, --top-p,
 * --min-p, --repeat-penalty, --seed), advancing *i past its value; returns
 * 1 if it was one, 0 if not, -1 on a bad value (message printed). */
int cli_parse_sampling(int argc, char **argv, int *i, st_sampler_params *sp);

#endif
