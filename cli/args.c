/* args.c - the CLI's shared option rows and cli_opts (see args.h). */
#include "cli/args.h"

#include "common/model/llama.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cli_ids_parse - "a,b,c" into a malloc'ed array of non-negative ids:
 * ST_EINVAL (any other text) or ST_ENOMEM, with a detail. */
static st_err cli_ids_parse(const char *s, int32_t **ids, size_t *n)
{
    size_t cap = 1;
    for (const char *p = s; *p; p++)
        cap += *p == ',';
    int32_t *v = malloc(cap * sizeof *v);
    if (v == NULL)
        return st_errorf(ST_ENOMEM, "out of memory");
    size_t k = 0;
    const char *p = s;
    for (;;) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno != 0 || x < 0 || x > INT32_MAX || (*end != ',' && *end != '\0')) {
            free(v);
            return st_errorf(ST_EINVAL, "'%s' is not a list of token ids like 1,2,3", s);
        }
        v[k++] = (int32_t)x;
        if (*end == '\0')
            break;
        p = end + 1;
    }
    *ids = v;
    *n = k;
    return ST_OK;
}

int cli_parse_ids(const char *flag, const char *s, int32_t **ids, size_t *n)
{
    if (cli_ids_parse(s, ids, n) != ST_OK) {
        fprintf(stderr, "strata: %s: %s\n", flag, st_errdetail());
        return 1;
    }
    return 0;
}

#define CLI_THREADS_MAX 1024
#define CLI_CHUNK_MAX 4096
#define CLI_CTX_MAX (1 << 24)

_Static_assert(sizeof(int32_t) == sizeof(int), "--top-k is an ST_OPT_INT row into an int32_t");

size_t cli_sampling_rows(st_sampler_params *sp, st_opt *out)
{
    const st_opt rows[CLI_SAMPLING_ROWS] = {
        {.name = "--temp", .type = ST_OPT_FLOAT, .dest = &sp->temp, .dmin = st_sampler_range_temp.lo,
         .dmax = st_sampler_range_temp.hi, .value = "T", .help = "sampling temperature (0: greedy)"},
        {.name = "--top-k", .type = ST_OPT_INT, .dest = &sp->top_k, .min = (int64_t)st_sampler_range_top_k.lo,
         .max = (int64_t)st_sampler_range_top_k.hi, .value = "K", .help = "keep the K most likely (0: all)"},
        {.name = "--top-p", .type = ST_OPT_FLOAT, .dest = &sp->top_p, .dmin = st_sampler_range_top_p.lo,
         .dmax = st_sampler_range_top_p.hi,
         .value = "P", .help = "nucleus: the likeliest ids up to mass P"},
        {.name = "--min-p", .type = ST_OPT_FLOAT, .dest = &sp->min_p, .dmin = st_sampler_range_min_p.lo,
         .dmax = st_sampler_range_min_p.hi,
         .value = "P", .help = "drop ids below P times the likeliest"},
        {.name = "--repeat-penalty", .type = ST_OPT_FLOAT, .dest = &sp->repeat_penalty,
         .dmin = st_sampler_range_repeat_penalty.lo,
         .dmax = st_sampler_range_repeat_penalty.hi, .value = "R",
         .help = "penalty on ids already seen (1: none)"},
        {.name = "--seed", .type = ST_OPT_U64, .dest = &sp->seed, .umin = 0, .umax = UINT64_MAX,
         .value = "S", .help = "the sampler's seed"},
    };
    memcpy(out, rows, sizeof rows);
    return CLI_SAMPLING_ROWS;
}

/* cli_kernels_opt - --kernels ref|auto|avx2|avx512 into the
 * `const st_kernel_ops *` dest (auto: NULL). */
static st_err cli_kernels_opt(const char *v, void *dest)
{
    const st_kernel_ops **ops = dest;
    if (strcmp(v, "auto") == 0) {
        *ops = NULL;
        return ST_OK;
    }
    const st_kvariant k = st_kvariant_from_name(v);
    if (k == ST_KVAR_COUNT)
        return st_errorf(ST_EINVAL, "'%s' is not ref, auto, avx2 or avx512", v);
    if ((*ops = st_kernels_get(k)) == NULL)
        return st_errorf(ST_EINVAL, "%s is not supported by this CPU or build", v);
    return ST_OK;
}

size_t cli_local_rows(unsigned which, cli_local_opts *o, st_opt *out)
{
    const st_opt rows[CLI_LOCAL_ROWS] = {
        {.name = "--threads", .alias = "-t", .type = ST_OPT_I64, .dest = &o->threads, .min = 1,
         .max = CLI_THREADS_MAX, .value = "N", .help = "compute threads (default: the cores)"},
        {.name = "--chunk", .type = ST_OPT_I64, .dest = &o->chunk, .min = 1, .max = CLI_CHUNK_MAX,
         .value = "N", .help = "tokens per prefill forward"},
        {.name = "--ctx", .type = ST_OPT_I64, .dest = &o->ctx, .min = 1, .max = CLI_CTX_MAX,
         .value = "N", .help = "KV positions (default: the model's)"},
        {.name = "--kernels", .type = ST_OPT_FN, .dest = &o->ops, .fn = cli_kernels_opt,
         .value = "ref|auto|avx2|avx512", .help = "the kernels (default auto: the best)"},
        st_opt_cache_type(&o->cache_type),
    };
    const unsigned bit[CLI_LOCAL_ROWS] = {CLI_LOCAL_THREADS, CLI_LOCAL_CHUNK, CLI_LOCAL_CTX,
                                          CLI_LOCAL_KERNELS, CLI_LOCAL_CACHE};
    size_t n = 0;
    for (size_t i = 0; i < CLI_LOCAL_ROWS; i++)
        if (which & bit[i])
            out[n++] = rows[i];
    return n;
}

st_dtype cli_local_kv_dtype(const cli_local_opts *o)
{
    st_dtype t = ST_KV_DEFAULT_DTYPE;
    if (st_kv_dtype_from_name(o->cache_type, &t) != ST_OK)
        st_errclear(); /* unreachable: the row's choices are cache types */
    return t;
}

st_err cli_ids_opt(const char *value, void *dest)
{
    cli_ids *l = dest;
    int32_t *ids;
    size_t n;
    st_err e = cli_ids_parse(value, &ids, &n);
    if (e != ST_OK)
        return e;
    free(l->ids);
    l->ids = ids;
    l->n = n;
    return ST_OK;
}

int cli_opts(const char *cmd, const char *synopsis, const st_opt *rows, size_t n,
             const char **ops, size_t max_ops, size_t *n_ops, int argc, char **argv)
{
    const st_opt_spec s = {.synopsis = synopsis,
                           .opts = rows,
                           .n_opts = n,
                           .operands = ops,
                           .max_operands = max_ops,
                           .n_operands = n_ops};
    bool help;
    if (st_opt_parse(&s, argc, argv, 1, &help) != ST_OK) {
        fprintf(stderr, "strata: %s: %s (see strata %s --help)\n", cmd, st_errdetail(), cmd);
        return 2;
    }
    return help ? 0 : CLI_OPTS_GO;
}
