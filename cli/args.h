/* args.h - the CLI's side of common/base/opt.h: the option rows several
 * subcommands share (the local engine's, the sampling flags), token-id
 * lists, and cli_opts, which runs a subcommand's table and turns the result
 * into its exit status. Values are parsed strictly: trailing garbage and
 * out-of-range values are refused with a message naming the flag. */
#ifndef ST_CLI_ARGS_H
#define ST_CLI_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "common/base/opt.h"
#include "common/text/sampling.h"
#include "kernels/kernels.h"

/* cli_parse_ids - "a,b,c" into a malloc'ed array of non-negative ids
 * (caller frees *ids): 0, else nonzero after printing "strata: FLAG:
 * reason" (for an operand; a flag's list is a cli_ids row, below). */
int cli_parse_ids(const char *flag, const char *s, int32_t **ids, size_t *n);

/* The flags of the local engine (worker/engine/local.h) a command may take. */
typedef enum cli_local_flag {
    CLI_LOCAL_THREADS = 1u << 0, /* --threads N, -t N: 1..1024 (unset 0: every core) */
    CLI_LOCAL_CHUNK = 1u << 1,   /* --chunk N: 1..4096 tokens per prefill forward */
    CLI_LOCAL_CTX = 1u << 2,     /* --ctx N: 1..2^24 KV positions (unset 0: the model's) */
    CLI_LOCAL_KERNELS = 1u << 3, /* --kernels ref|auto|avx2|avx512: sets ops */
    CLI_LOCAL_CACHE = 1u << 4,   /* --cache-type f32|f16|q8_0 (st_opt_cache_type) */
} cli_local_flag;

/* Their values; a command presets its defaults before parsing. */
typedef struct cli_local_opts {
    int64_t threads, chunk, ctx;
    const st_kernel_ops *ops; /* the variant --kernels named; NULL: auto (best, or STRATA_KERNELS) */
    const char *cache_type;   /* --cache-type; NULL: ST_KV_DEFAULT_DTYPE (st_kv_dtype_from_name) */
} cli_local_opts;

/* Option rows (common/base/opt.h) shared by subcommands; each fills out (room
 * for its _ROWS count) and returns how many rows it wrote. The rows point
 * into the struct given, which must outlive the parse. */
#define CLI_LOCAL_ROWS 5
/* cli_local_rows - the local engine's flags that `which` (cli_local_flag
 * bits) admits. Shared by `strata run`, `strata chat`, `strata bench run`. */
size_t cli_local_rows(unsigned which, cli_local_opts *o, st_opt *out);

/* cli_local_kv_dtype - the KV cache dtype o->cache_type names (the option
 * row admitted only cache types; unset: ST_KV_DEFAULT_DTYPE). */
st_dtype cli_local_kv_dtype(const cli_local_opts *o);

#define CLI_SAMPLING_ROWS 6
/* cli_sampling_rows - the sampling flags shared by `strata run` and
 * `strata generate`: --temp, --top-k, --top-p, --min-p, --repeat-penalty,
 * --seed. */
size_t cli_sampling_rows(st_sampler_params *sp, st_opt *out);

/* A list of token ids a flag gave ("1,2,3"); ids is malloc'ed, the
 * caller frees it. cli_ids_opt is its ST_OPT_FN (dest: a cli_ids, whose
 * previous list it frees when the flag is given again). */
typedef struct cli_ids {
    int32_t *ids;
    size_t n;
} cli_ids;
st_err cli_ids_opt(const char *value, void *dest);

/* cli_opts - parses a subcommand's arguments (argv[0] is its name, cmd in
 * the messages: "run") against rows n, with room for max_ops operands in
 * ops (*n_ops set; ops may be NULL when max_ops is 0). Returns
 * CLI_OPTS_GO to go on, else the exit status to return: 0 after --help
 * (the usage, "strata SYNOPSIS" and the rows, on stdout), 2 after an error
 * (printed as "strata: CMD: DETAIL", the detail naming the flag). */
#define CLI_OPTS_GO (-1)
int cli_opts(const char *cmd, const char *synopsis, const st_opt *rows, size_t n,
             const char **ops, size_t max_ops, size_t *n_ops, int argc, char **argv);

#endif
