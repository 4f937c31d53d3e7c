/* opt.c - declarative command-line options (see opt.h). */
#include "common/base/opt.h"

#include "common/base/log.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/units.h"

#define OPT_HELP_COL 22 /* the usage's help column */
#define OPT_INDENT 2    /* a flag's indent in the usage */


/* opt_find - the row named f (or aliased), or NULL. */
static const st_opt *opt_find(const st_opt_spec *s, const char *f)
{
    for (size_t i = 0; i < s->n_opts; i++) {
        const st_opt *o = &s->opts[i];
        if (strcmp(f, o->name) == 0 || (o->alias != NULL && strcmp(f, o->alias) == 0))
            return o;
    }
    return NULL;
}

/* opt_int - a decimal integer in [lo, hi]. */
static st_err opt_int(const char *f, const char *v, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end != '\0' || errno != 0 || x < lo || x > hi)
        return st_errorf(ST_EINVAL, "%s: must be an integer in %" PRId64 "..%" PRId64 ", got '%s'",
                         f, lo, hi, v);
    *out = x;
    return ST_OK;
}

/* opt_uint - a decimal integer without sign in [lo, hi]. */
static st_err opt_uint(const char *f, const char *v, uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long x = v[0] == '-' ? 0 : strtoull(v, &end, 10);
    if (v[0] == '-' || end == v || *end != '\0' || errno != 0 || x < lo || x > hi)
        return st_errorf(ST_EINVAL, "%s: must be an integer in %" PRIu64 "..%" PRIu64 ", got '%s'",
                         f, lo, hi, v);
    *out = x;
    return ST_OK;
}

/* opt_double - a finite number in [lo, hi]. */
static st_err opt_double(const char *f, const char *v, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end != '\0' || errno != 0 || !isfinite(x) || x < lo || x > hi)
        return st_errorf(ST_EINVAL, "%s: must be a number in [%g, %g], got '%s'", f, lo, hi, v);
    *out = x;
    return ST_OK;
}

/* opt_choice - v if it is one of c. */
static st_err opt_choice(const char *f, const char *v, const char *const *c)
{
    for (size_t i = 0; c[i] != NULL; i++)
        if (strcmp(v, c[i]) == 0)
            return ST_OK;
    char list[256];
    size_t n = 0;
    list[0] = '\0';
    for (size_t i = 0; c[i] != NULL && n < sizeof list; i++)
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i > 0 ? ", " : "", c[i]);
    if (n >= sizeof list)
        return st_errorf(ST_EINVAL, "%s: got '%s', not one of its names", f, v);
    return st_errorf(ST_EINVAL, "%s: must be one of %s, got '%s'", f, list, v);
}

/* opt_value - stores v for o (named f as given). */
static st_err opt_value(const st_opt *o, const char *f, const char *v)
{
    int64_t i = 0;
    uint64_t u = 0;
    double d = 0;
    st_err e = ST_OK;
    switch (o->type) {
    case ST_OPT_FLAG:
        return st_errorf(ST_EINTERNAL, "%s takes no value", f);
    case ST_OPT_STR:
        *(const char **)o->dest = v;
        return ST_OK;
    case ST_OPT_CHOICE:
        if ((e = opt_choice(f, v, o->choices)) == ST_OK)
            *(const char **)o->dest = v;
        return e;
    case ST_OPT_INT:
        if ((e = opt_int(f, v, o->min, o->max, &i)) == ST_OK)
            *(int *)o->dest = (int)i;
        return e;
    case ST_OPT_LONG:
        if ((e = opt_int(f, v, o->min, o->max, &i)) == ST_OK)
            *(long *)o->dest = (long)i;
        return e;
    case ST_OPT_I64:
        if ((e = opt_int(f, v, o->min, o->max, &i)) == ST_OK)
            *(int64_t *)o->dest = i;
        return e;
    case ST_OPT_U32:
        if ((e = opt_uint(f, v, (uint64_t)o->min, (uint64_t)o->max, &u)) == ST_OK)
            *(uint32_t *)o->dest = (uint32_t)u;
        return e;
    case ST_OPT_U64:
        if ((e = opt_uint(f, v, o->umin, o->umax, &u)) == ST_OK)
            *(uint64_t *)o->dest = u;
        return e;
    case ST_OPT_SIZE:
        if ((e = st_parse_bytes(v, &u)) != ST_OK)
            return st_errwrap(e, "%s", f);
        if (u < o->umin || u > o->umax)
            return st_errorf(ST_EINVAL, "%s: must be %" PRIu64 "..%" PRIu64 " bytes, got '%s'", f,
                             o->umin, o->umax, v);
        *(uint64_t *)o->dest = u;
        return ST_OK;
    case ST_OPT_DOUBLE:
        if ((e = opt_double(f, v, o->dmin, o->dmax, &d)) == ST_OK)
            *(double *)o->dest = d;
        return e;
    case ST_OPT_FLOAT:
        if ((e = opt_double(f, v, o->dmin, o->dmax, &d)) == ST_OK)
            *(float *)o->dest = (float)d;
        return e;
    case ST_OPT_FN:
        if ((e = o->fn(v, o->dest)) != ST_OK)
            return st_errwrap(e, "%s", f);
        return ST_OK;
    }
    return st_errorf(ST_EINTERNAL, "%s: unknown option type %d", f, (int)o->type);
}

st_err st_opt_parse(const st_opt_spec *s, int argc, char **argv, int first, bool *help)
{
    *help = false;
    if (s->n_operands != NULL)
        *s->n_operands = 0;
    for (int k = first; k < argc; k++) { /* "--help" anywhere, also where a value goes */
        if (strcmp(argv[k], "--help") == 0) {
            st_opt_usage(s, stdout);
            *help = true;
            return ST_OK;
        }
    }
    for (int k = first; k < argc; k++) {
        const char *f = argv[k];
        if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) {
            st_opt_usage(s, stdout);
            *help = true;
            return ST_OK;
        }
        const st_opt *o = opt_find(s, f);
        if (o == NULL && f[0] == '-' && f[1] != '\0')
            return st_errorf(ST_EINVAL, "unknown flag '%s'", f);
        if (o == NULL) {
            size_t n = s->n_operands != NULL ? *s->n_operands : 0;
            if (n >= s->max_operands)
                return st_errorf(ST_EINVAL, "unexpected argument '%s'", f);
            s->operands[n] = f;
            *s->n_operands = n + 1;
            continue;
        }
        if (o->type == ST_OPT_FLAG) {
            if (o->dest != NULL)
                *(bool *)o->dest = true;
            continue;
        }
        if (k + 1 >= argc || (s->empty_is_missing && argv[k + 1][0] == '\0'))
            return st_errorf(ST_EINVAL, "%s needs a value", f);
        st_err e = opt_value(o, f, argv[++k]);
        if (e != ST_OK)
            return e;
    }
    return ST_OK;
}

/* opt_text - t with each '\n' followed by the help column's indent. */
static void opt_text(FILE *f, const char *t)
{
    for (const char *p = t; *p != '\0'; p++) {
        fputc(*p, f);
        if (*p == '\n')
            fprintf(f, "%*s", OPT_HELP_COL, "");
    }
    fputc('\n', f);
}

void st_opt_usage(const st_opt_spec *s, FILE *f)
{
    fprintf(f, "usage: %s\n", s->synopsis);
    if (s->n_opts > 0)
        fputc('\n', f);
    for (size_t i = 0; i < s->n_opts; i++) {
        const st_opt *o = &s->opts[i];
        int n = fprintf(f, "%*s%s%s%s%s%s", OPT_INDENT, "", o->name, o->alias != NULL ? ", " : "",
                        o->alias != NULL ? o->alias : "", o->value != NULL ? " " : "",
                        o->value != NULL ? o->value : "");
        if (o->help == NULL) {
            fputc('\n', f);
            continue;
        }
        if (n < 0 || n + 1 > OPT_HELP_COL)
            fprintf(f, "\n%*s", OPT_HELP_COL, "");
        else
            fprintf(f, "%*s", OPT_HELP_COL - n, "");
        opt_text(f, o->help);
    }
    if (s->epilogue != NULL)
        fprintf(f, "\n%s", s->epilogue);
}

st_opt st_opt_log(const char **level)
{
    return (st_opt){.name = "--log",
                    .type = ST_OPT_CHOICE,
                    .dest = level,
                    .choices = st_log_level_names,
                    .value = "LEVEL",
                    .help = "error, warn, info (default) or debug; or $STRATA_LOG"};
}

st_opt st_opt_threads(int *threads, int max)
{
    return (st_opt){.name = "--threads",
                    .type = ST_OPT_INT,
                    .dest = threads,
                    .min = 1,
                    .max = max,
                    .value = "N",
                    .help = "compute threads (default: the cores)"};
}

st_opt st_opt_cluster_key(const char **file)
{
    return (st_opt){.name = "--cluster-key",
                    .type = ST_OPT_STR,
                    .dest = file,
                    .value = "FILE",
                    .help = "32-byte key (mode 0600); authenticates every frame\n"
                            "(`strata keygen FILE` makes one)"};
}

st_opt st_opt_encrypt(bool *encrypt)
{
    return (st_opt){.name = "--encrypt",
                    .type = ST_OPT_FLAG,
                    .dest = encrypt,
                    .help = "seal every frame with XChaCha20-Poly1305 (needs the key;\n"
                            "every member of the cluster must use it)"};
}

st_opt st_opt_insecure(bool *insecure)
{
    return (st_opt){.name = "--insecure",
                    .type = ST_OPT_FLAG,
                    .dest = insecure,
                    .help = "listen beyond loopback without a key (logs a warning)"};
}

/* The names of the KV cache types; common/model/llama.c's
 * st_kv_dtype_from_name maps each to its dtype (test_llama checks every
 * one does). */
static const char *const opt_cache_types[] = {"f32", "f16", "q8_0", NULL};

st_opt st_opt_cache_type(const char **name)
{
    return (st_opt){.name = "--cache-type",
                    .type = ST_OPT_CHOICE,
                    .dest = name,
                    .choices = opt_cache_types,
                    .value = "f32|f16|q8_0",
                    .help = "KV cache dtype (default f16; q8_0 needs head_dim % 32 == 0)"};
}

const char *const *st_opt_cache_type_names(void) { return opt_cache_types; }
