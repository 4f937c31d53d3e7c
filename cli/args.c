/* args.c - strict parsing of command-line values (see args.h). */
#include "cli/args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_parse_i64(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*s == '\0' || *end != '\0' || errno != 0) {
        fprintf(stderr, "strata: %s: '%s' is not an integer\n", flag, s);
        return 1;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "strata: %s: %lld is out of range [%lld, %lld]\n", flag, v, (long long)lo,
                (long long)hi);
        return 1;
    }
    *out = v;
    return 0;
}

int cli_parse_u64(const char *flag, const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    if (*s == '-') {
        fprintf(stderr, "strata: %s: '%s' must not be negative\n", flag, s);
        return 1;
    }
    unsigned long long v = strtoull(s, &end, 10);
    if (*s == '\0' || *end != '\0' || errno != 0) {
        fprintf(stderr, "strata: %s: '%s' is not an unsigned integer\n", flag, s);
        return 1;
    }
    *out = v;
    return 0;
}

int cli_parse_f32(const char *flag, const char *s, float lo, float hi, float *out)
{
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (*s == '\0' || *end != '\0' || errno != 0 || !isfinite(v)) {
        fprintf(stderr, "strata: %s: '%s' is not a finite number\n", flag, s);
        return 1;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "strata: %s: %g is out of range [%g, %g]\n", flag, (double)v, (double)lo,
                (double)hi);
        return 1;
    }
    *out = v;
    return 0;
}

int cli_parse_ids(const char *flag, const char *s, int32_t **ids, size_t *n)
{
    size_t cap = 1;
    for (const char *p = s; *p; p++)
        cap += *p == ',';
    int32_t *v = malloc(cap * sizeof *v);
    if (v == NULL) {
        fprintf(stderr, "strata: %s: out of memory\n", flag);
        return 1;
    }
    size_t k = 0;
    const char *p = s;
    for (;;) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno != 0 || x < 0 || x > INT32_MAX || (*end != ',' && *end != '\0')) {
            fprintf(stderr, "strata: %s: '%s' is not a list of token ids like 1,2,3\n", flag, s);
            free(v);
            return 1;
        }
        v[k++] = (int32_t)x;
        if (*end == '\0')
            break;
        p = end + 1;
    }
    *ids = v;
    *n = k;
    return 0;
}

const char *cli_need_value(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, "strata: %s needs a value\n", argv[*i]);
        return NULL;
    }
    (*i)++;
    return argv[*i];
}

/* cli_parse_sampling - one of the sampling flags shared with `strata
 * generate`; returns 1 if argv[*i] was one (parsed into sp), 0 if not,
 * -1 on a bad value. The bounds are common/text/sampling.h's ranges (closed
 * here: top_p's open lower bound is left to st_sampler_params_validate). */
int cli_parse_sampling(int argc, char **argv, int *i, st_sampler_params *sp)
{
    const char *f = argv[*i];
    const char *v;
    int64_t iv;
    if (strcmp(f, "--temp") == 0) {
        if (!(v = cli_need_value(argc, argv, i)) ||
            cli_parse_f32(f, v, st_sampler_range_temp.lo, st_sampler_range_temp.hi, &sp->temp))
            return -1;
    } else if (strcmp(f, "--top-k") == 0) {
        if (!(v = cli_need_value(argc, argv, i)) ||
            cli_parse_i64(f, v, (int64_t)st_sampler_range_top_k.lo,
                          (int64_t)st_sampler_range_top_k.hi, &iv))
            return -1;
        sp->top_k = (int32_t)iv;
    } else if (strcmp(f, "--top-p") == 0) {
        if (!(v = cli_need_value(argc, argv, i)) ||
            cli_parse_f32(f, v, st_sampler_range_top_p.lo, st_sampler_range_top_p.hi, &sp->top_p))
            return -1;
    } else if (strcmp(f, "--min-p") == 0) {
        if (!(v = cli_need_value(argc, argv, i)) ||
            cli_parse_f32(f, v, st_sampler_range_min_p.lo, st_sampler_range_min_p.hi, &sp->min_p))
            return -1;
    } else if (strcmp(f, "--repeat-penalty") == 0) {
        if (!(v = cli_need_value(argc, argv, i)) ||
            cli_parse_f32(f, v, st_sampler_range_repeat_penalty.lo,
                          st_sampler_range_repeat_penalty.hi, &sp->repeat_penalty))
            return -1;
    } else if (strcmp(f, "--seed") == 0) {
        if (!(v = cli_need_value(argc, argv, i)) || cli_parse_u64(f, v, &sp->seed))
            return -1;
    } else {
        return 0;
    }
    return 1;
}

int cli_parse_local(int argc, char **argv, int *i, unsigned which, cli_local_opts *o)
{
    const char *f = argv[*i];
    const char *v;
    if ((which & CLI_LOCAL_THREADS) && (strcmp(f, "--threads") == 0 || strcmp(f, "-t") == 0)) {
        if (!(v = cli_need_value(argc, argv, i)) || cli_parse_i64(f, v, 1, 1024, &o->threads))
            return -1;
    } else if ((which & CLI_LOCAL_CHUNK) && strcmp(f, "--chunk") == 0) {
        if (!(v = cli_need_value(argc, argv, i)) || cli_parse_i64(f, v, 1, 4096, &o->chunk))
            return -1;
    } else if ((which & CLI_LOCAL_CTX) && strcmp(f, "--ctx") == 0) {
        if (!(v = cli_need_value(argc, argv, i)) || cli_parse_i64(f, v, 1, 1 << 24, &o->ctx))
            return -1;
    } else if ((which & CLI_LOCAL_KERNELS) && strcmp(f, "--kernels") == 0) {
        if (!(v = cli_need_value(argc, argv, i)))
            return -1;
        if (strcmp(v, "auto") == 0) {
            o->ops = NULL;
            return 1;
        }
        const st_kvariant k = st_kvariant_from_name(v);
        if (k == ST_KVAR_COUNT) {
            fprintf(stderr, "strata: --kernels: '%s' is not ref, auto, avx2 or avx512\n", v);
            return -1;
        }
        if ((o->ops = st_kernels_get(k)) == NULL) {
            fprintf(stderr, "strata: --kernels: %s is not supported by this CPU or build\n", v);
            return -1;
        }
    } else {
        return 0;
    }
    return 1;
}

int cli_operand(const char *cmd, const char *arg, const char **model, void (*usage)(void))
{
    if (arg[0] == '-') {
        fprintf(stderr, "strata: %s: unknown flag '%s'\n", cmd, arg);
        usage();
        return 2;
    }
    if (*model != NULL) {
        fprintf(stderr, "strata: %s: unexpected argument '%s'\n", cmd, arg);
        return 2;
    }
    *model = arg;
    return 0;
}
