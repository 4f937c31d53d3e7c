/* test_opt.c - the option tables of common/base/opt.h: each type's syntax and
 * range, the errors (each naming its flag), a repeated flag, operands,
 * --help anywhere, and the usage made from the table. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/opt.h"

/* One table for every case; the values are reset by t_reset. */
static struct {
    bool flag;
    const char *str, *choice;
    int i;
    uint32_t u32;
    uint64_t u64, size;
    double d;
    const char *fn_seen[4];
    size_t n_fn;
    const char *ops[2];
    size_t n_ops;
} t;

static const char *const t_choices[] = {"ref", "auto", NULL};

/* t_fn - an ST_OPT_FN that collects each value ("bad" is refused). */
static st_err t_fn(const char *v, void *dest)
{
    (void)dest;
    if (strcmp(v, "bad") == 0)
        return st_errorf(ST_EINVAL, "'%s' is bad", v);
    if (t.n_fn < sizeof t.fn_seen / sizeof t.fn_seen[0])
        t.fn_seen[t.n_fn++] = v;
    return ST_OK;
}

static st_opt t_opts[] = {
    {.name = "--flag", .type = ST_OPT_FLAG, .dest = &t.flag, .help = "a switch"},
    {.name = "--str", .type = ST_OPT_STR, .dest = &t.str, .value = "TEXT", .help = "a string"},
    {.name = "--kernels", .type = ST_OPT_CHOICE, .dest = &t.choice, .choices = t_choices,
     .value = "ref|auto", .help = "a choice"},
    {.name = "--threads", .alias = "-t", .type = ST_OPT_INT, .dest = &t.i, .min = 1, .max = 256,
     .value = "N", .help = "an int\nover two lines"},
    {.name = "--u32", .type = ST_OPT_U32, .dest = &t.u32, .min = 0, .max = UINT32_MAX,
     .value = "N", .help = "a u32"},
    {.name = "--seed", .type = ST_OPT_U64, .dest = &t.u64, .umin = 0, .umax = UINT64_MAX,
     .value = "N", .help = "a u64"},
    {.name = "--memory", .type = ST_OPT_SIZE, .dest = &t.size, .umin = 1u << 20,
     .umax = 1ull << 40, .value = "BYTES", .help = "a byte count"},
    {.name = "--throttle", .type = ST_OPT_DOUBLE, .dest = &t.d, .dmin = 1.0, .dmax = 1000.0,
     .value = "F", .help = "a double"},
    {.name = "--each", .type = ST_OPT_FN, .fn = t_fn, .value = "V", .help = "repeatable"},
};

static st_opt_spec t_spec = {.synopsis = "prog [FLAGS] [A [B]]",
                             .epilogue = "the end\n",
                             .opts = t_opts,
                             .n_opts = sizeof t_opts / sizeof t_opts[0],
                             .operands = t.ops,
                             .max_operands = 2,
                             .n_operands = &t.n_ops};

static void t_reset(void)
{
    memset(&t, 0, sizeof t);
    t.i = -1;
}

/* t_parse - parses the NULL-terminated words after a program name. */
static st_err t_parse_v(bool empty_is_missing, bool *help, const char *const *words)
{
    char *argv[16];
    int argc = 0;
    argv[argc++] = "prog";
    for (size_t k = 0; words[k] != NULL; k++)
        argv[argc++] = (char *)words[k];
    t_spec.empty_is_missing = empty_is_missing;
    bool h = false;
    st_err e = st_opt_parse(&t_spec, argc, argv, 1, &h);
    if (help != NULL)
        *help = h;
    else
        ck_assert_msg(!h, "help unexpected");
    return e;
}

static st_err t_parse(const char *const *words)
{
    return t_parse_v(false, NULL, words);
}

/* t_bad - words are refused, the detail containing what. */
static void t_bad(const char *const *words, const char *what)
{
    ck_assert_int_eq(t_parse(words), ST_EINVAL);
    ck_assert_msg(strstr(st_errdetail(), what) != NULL, "detail '%s' does not say '%s'",
                  st_errdetail(), what);
}

START_TEST(values)
{
    t_reset();
    const char *const w[] = {"--flag", "--str", "x y", "--kernels", "ref", "-t", "256",
                             "--u32", "4294967295", "--seed", "18446744073709551615",
                             "--memory", "64M", "--throttle", "2.5", NULL};
    ck_assert_int_eq(t_parse(w), ST_OK);
    ck_assert(t.flag);
    ck_assert_str_eq(t.str, "x y");
    ck_assert_str_eq(t.choice, "ref");
    ck_assert_int_eq(t.i, 256);
    ck_assert_uint_eq(t.u32, UINT32_MAX);
    ck_assert_uint_eq(t.u64, UINT64_MAX);
    ck_assert_uint_eq(t.size, 64u << 20);
    ck_assert(t.d == 2.5);
    ck_assert_uint_eq(t.n_ops, 0);
}
END_TEST

START_TEST(ranges)
{
    t_reset();
    t_bad((const char *const[]){"--threads", "0", NULL},
          "--threads: must be an integer in 1..256, got '0'");
    t_bad((const char *const[]){"--threads", "257", NULL}, "--threads: ");
    t_bad((const char *const[]){"-t", "4x", NULL}, "-t: must be an integer");
    t_bad((const char *const[]){"--threads", "", NULL}, "got ''");
    t_bad((const char *const[]){"--u32", "4294967296", NULL}, "--u32: ");
    t_bad((const char *const[]){"--u32", "-1", NULL}, "--u32: ");
    t_bad((const char *const[]){"--seed", "-1", NULL}, "--seed: ");
    t_bad((const char *const[]){"--memory", "1k", NULL}, "--memory: must be");
    t_bad((const char *const[]){"--memory", "1GB", NULL}, "--memory: ");
    t_bad((const char *const[]){"--throttle", "0.5", NULL}, "--throttle: must be a number");
    t_bad((const char *const[]){"--throttle", "nan", NULL}, "--throttle: ");
    t_bad((const char *const[]){"--kernels", "avx9", NULL},
          "--kernels: must be one of ref, auto, got 'avx9'");
    t_bad((const char *const[]){"--each", "bad", NULL}, "--each: 'bad' is bad");
    ck_assert_int_eq(t.i, -1); /* nothing refused was stored */
}
END_TEST

START_TEST(unknown_and_missing)
{
    t_reset();
    t_bad((const char *const[]){"--nope", NULL}, "unknown flag '--nope'");
    t_bad((const char *const[]){"-x", NULL}, "unknown flag '-x'");
    /* --flag=value was never a spelling: it is an unknown flag */
    t_bad((const char *const[]){"--threads=4", NULL}, "unknown flag '--threads=4'");
    t_bad((const char *const[]){"--flag=1", NULL}, "unknown flag '--flag=1'");
    t_bad((const char *const[]){"--str", NULL}, "--str needs a value");
    t_bad((const char *const[]){"--flag", "-t", NULL}, "-t needs a value");
    /* an empty value: a value, unless the spec says it is missing */
    ck_assert_int_eq(t_parse((const char *const[]){"--str", "", NULL}), ST_OK);
    ck_assert_str_eq(t.str, "");
    ck_assert_int_eq(t_parse_v(true, NULL, (const char *const[]){"--str", "", NULL}), ST_EINVAL);
    ck_assert_str_eq(st_errdetail(), "--str needs a value");
}
END_TEST

START_TEST(repeated)
{
    t_reset();
    const char *const w[] = {"--threads", "3", "-t", "7", "--each", "a",
                             "--each", "b", "--flag", "--flag", NULL};
    ck_assert_int_eq(t_parse(w), ST_OK);
    ck_assert_int_eq(t.i, 7); /* the last wins */
    ck_assert(t.flag);
    ck_assert_uint_eq(t.n_fn, 2); /* a callback sees each */
    ck_assert_str_eq(t.fn_seen[0], "a");
    ck_assert_str_eq(t.fn_seen[1], "b");
}
END_TEST

START_TEST(operands)
{
    t_reset();
    const char *const w[] = {"one", "--flag", "-", NULL};
    ck_assert_int_eq(t_parse(w), ST_OK);
    ck_assert_uint_eq(t.n_ops, 2);
    ck_assert_str_eq(t.ops[0], "one");
    ck_assert_str_eq(t.ops[1], "-");
    t_bad((const char *const[]){"a", "b", "c", NULL}, "unexpected argument 'c'");
    /* a value that looks like a flag is the flag's value */
    ck_assert_int_eq(t_parse((const char *const[]){"--str", "--flag", NULL}), ST_OK);
    ck_assert_str_eq(t.str, "--flag");
}
END_TEST

START_TEST(help)
{
    t_reset();
    bool h = false;
    FILE *saved = stdout;
    char *buf = NULL;
    size_t len = 0;
    stdout = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(stdout);
    ck_assert_int_eq(t_parse_v(false, &h, (const char *const[]){"--help", NULL}), ST_OK);
    ck_assert(h);
    h = false; /* --help wins over an error before it, and where a value goes */
    ck_assert_int_eq(t_parse_v(false, &h, (const char *const[]){"--threads", "0", "--help", NULL}),
                     ST_OK);
    ck_assert(h);
    h = false;
    ck_assert_int_eq(t_parse_v(false, &h, (const char *const[]){"--str", "--help", NULL}), ST_OK);
    ck_assert(h);
    h = false;
    ck_assert_int_eq(t_parse_v(false, &h, (const char *const[]){"-h", NULL}), ST_OK);
    ck_assert(h);
    fclose(stdout);
    stdout = saved;
    ck_assert_ptr_nonnull(strstr(buf, "usage: prog [FLAGS] [A [B]]\n\n"));
    ck_assert_ptr_nonnull(strstr(buf, "  --flag              a switch\n"));
    ck_assert_ptr_nonnull(strstr(buf, "  --threads, -t N     an int\n"
                                      "                      over two lines\n"));
    ck_assert_ptr_nonnull(strstr(buf, "  --memory BYTES      a byte count\n"));
    ck_assert_ptr_nonnull(strstr(buf, "\nthe end\n"));
    for (size_t i = 0; i < t_spec.n_opts; i++) /* every row is listed */
        ck_assert_ptr_nonnull(strstr(buf, t_opts[i].name));
    free(buf);
}
END_TEST

START_TEST(groups)
{
    const char *level = NULL, *key = NULL;
    int threads = 0;
    bool enc = false, insecure = false;
    const st_opt opts[] = {st_opt_log(&level), st_opt_threads(&threads, 8),
                           st_opt_cluster_key(&key), st_opt_encrypt(&enc),
                           st_opt_insecure(&insecure)};
    const st_opt_spec s = {.synopsis = "g", .opts = opts, .n_opts = 5};
    char *argv[] = {"g", "--log", "debug", "--threads", "8", "--cluster-key", "k",
                    "--encrypt", "--insecure"};
    bool h;
    ck_assert_int_eq(st_opt_parse(&s, 9, argv, 1, &h), ST_OK);
    ck_assert_str_eq(level, "debug");
    ck_assert_int_eq(threads, 8);
    ck_assert_str_eq(key, "k");
    ck_assert(enc && insecure);
    char *bad[] = {"g", "--log", "loud"};
    ck_assert_int_eq(st_opt_parse(&s, 3, bad, 1, &h), ST_EINVAL);
    ck_assert_str_eq(st_errdetail(), "--log: must be one of error, warn, info, debug, got 'loud'");
    char *many[] = {"g", "--threads", "9"};
    ck_assert_int_eq(st_opt_parse(&s, 3, many, 1, &h), ST_EINVAL);
    ck_assert_str_eq(st_errdetail(), "--threads: must be an integer in 1..8, got '9'");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("opt");
    TCase *tc = tcase_create("opt");
    tcase_add_test(tc, values);
    tcase_add_test(tc, ranges);
    tcase_add_test(tc, unknown_and_missing);
    tcase_add_test(tc, repeated);
    tcase_add_test(tc, operands);
    tcase_add_test(tc, help);
    tcase_add_test(tc, groups);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
