/* opt.h - declarative command-line options: every executable and
 * subcommand describes its flags as a table of st_opt rows, and st_opt_parse
 * reads argv against it, validates each value and prints the usage made from
 * the same table.
 *
 * Contract:
 * - A flag is an exact argv element ("--threads", or its alias "-t"); its
 *   value, when it takes one, is the next element. `--flag=value` is not a
 *   spelling of it (no executable accepted it before this module either).
 * - A flag given twice: the last value wins (ST_OPT_FN sees each, in order,
 *   and may collect them).
 * - "--help" anywhere in argv (also where a flag's value would go) prints
 *   the usage on stdout and ends the parse before anything is parsed; "-h"
 *   in a flag's place does the same where it stands. *help is set; the
 *   caller exits 0. A table may not name them.
 * - An element starting with '-' (other than "-" alone) that no row names is
 *   an unknown flag; any other element is an operand, kept in order while
 *   the spec has room for it, an error beyond.
 * - On an error st_opt_parse prints nothing: it returns ST_EINVAL with a
 *   detail that begins with the flag ("--threads: must be an integer in
 *   1..1024, got '0'", "--model needs a value", "unknown flag '--x'"); the
 *   caller prints it after its program name and exits 2. Values parsed
 *   before the error are already stored.
 * - Strings stored are argv's own (not copied): they live as long as argv.
 *
 * Shared groups (st_opt_log, st_opt_threads, st_opt_cluster_key,
 * st_opt_encrypt, st_opt_insecure, st_opt_cache_type) return the row every daemon uses for
 * that flag, with the same help text, so a table lists them by call. */
#ifndef ST_OPT_H
#define ST_OPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/base/err.h"

typedef enum st_opt_type {
    ST_OPT_FLAG,   /* no value: *(bool *)dest = true (dest NULL: accepted, ignored) */
    ST_OPT_STR,    /* *(const char **)dest = the value */
    ST_OPT_CHOICE, /* *(const char **)dest = the value, one of choices */
    ST_OPT_INT,    /* *(int *)dest: a decimal integer in [min, max] */
    ST_OPT_LONG,   /* *(long *)dest: the same */
    ST_OPT_I64,    /* *(int64_t *)dest: the same */
    ST_OPT_U32,    /* *(uint32_t *)dest: a decimal without sign in [min, max] (min >= 0) */
    ST_OPT_U64,    /* *(uint64_t *)dest: a decimal without sign in [umin, umax] */
    ST_OPT_SIZE,   /* *(uint64_t *)dest: a byte count (common/base/units.h) in [umin, umax] */
    ST_OPT_DOUBLE, /* *(double *)dest: a finite number in [dmin, dmax] */
    ST_OPT_FLOAT,  /* *(float *)dest: the same */
    ST_OPT_FN,     /* fn(value, dest): its own syntax (an address, a dtype list) */
} st_opt_type;

/* st_opt_fn - parses value into dest; on an error returns it with a detail
 * saying what is wrong (the parser puts the flag's name in front). */
typedef st_err (*st_opt_fn)(const char *value, void *dest);

typedef struct st_opt {
    const char *name;  /* "--threads" */
    const char *alias; /* "-t", or NULL */
    st_opt_type type;
    void *dest;                 /* see st_opt_type */
    int64_t min, max;           /* INT, LONG, I64, U32: the accepted range */
    uint64_t umin, umax;        /* U64, SIZE */
    double dmin, dmax;          /* DOUBLE, FLOAT */
    const char *const *choices; /* CHOICE: NULL-terminated */
    st_opt_fn fn;               /* FN */
    const char *value;          /* the value's name in the usage ("N", "FILE") */
    const char *help;           /* the usage text; '\n' continues it on a new line */
} st_opt;

typedef struct st_opt_spec {
    const char *synopsis; /* printed after "usage: " (may hold several lines) */
    const char *epilogue; /* printed after the flags, or NULL */
    const st_opt *opts;
    size_t n_opts;
    const char **operands; /* room for max_operands operands, or NULL */
    size_t max_operands;
    size_t *n_operands;    /* how many were given (may be NULL when max is 0) */
    bool empty_is_missing; /* an empty value counts as none ("needs a value") */
} st_opt_spec;

/* st_opt_parse - parses argv[first..argc) against s (see the contract). */
st_err st_opt_parse(const st_opt_spec *s, int argc, char **argv, int first, bool *help);

/* st_opt_usage - the usage made from s: "usage: SYNOPSIS", the flags with
 * their help aligned in a column, then the epilogue. */
void st_opt_usage(const st_opt_spec *s, FILE *f);

/* The shared groups. */
st_opt st_opt_log(const char **level);        /* --log error|warn|info|debug */
st_opt st_opt_threads(int *threads, int max); /* --threads N, 1..max */
st_opt st_opt_cluster_key(const char **file); /* --cluster-key FILE */
st_opt st_opt_encrypt(bool *encrypt);         /* --encrypt */
st_opt st_opt_insecure(bool *insecure);       /* --insecure */
st_opt st_opt_cache_type(const char **name);  /* --cache-type f32|f16|q8_0 (NULL left: default) */

/* st_opt_cache_type_names - the names --cache-type accepts, NULL-ended. */
const char *const *st_opt_cache_type_names(void);

#endif
