/* test_tokenizer_cli.c - `strata tokenize` and `strata detokenize`
 * (cli/cmd_text.c, linked into this test): the golden ids printed and
 * decoded back, and their one-line errors with exit status 1 or 2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "tests/text/tok_test.h"

/* ---- the CLI commands (cmd_text.c, linked into this test) --------------- */

/* run_cmd - runs a command with stdout and stderr captured into out / err
 * (NUL-terminated, at most cap - 1 bytes each); returns its exit status. */
static int run_cmd(int (*fn)(int, char **), int argc, char **argv, char *out, char *err, size_t cap)
{
    char po[] = "/tmp/st_cli_out_XXXXXX", pe[] = "/tmp/st_cli_err_XXXXXX";
    int fo = mkstemp(po), fe = mkstemp(pe);
    ck_assert(fo >= 0 && fe >= 0);
    fflush(stdout);
    fflush(stderr);
    int so = dup(1), se = dup(2);
    dup2(fo, 1);
    dup2(fe, 2);
    int rc = fn(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(so, 1);
    dup2(se, 2);
    close(so);
    close(se);
    ssize_t a = pread(fo, out, cap - 1, 0), b = pread(fe, err, cap - 1, 0);
    out[a > 0 ? a : 0] = '\0';
    err[b > 0 ? b : 0] = '\0';
    close(fo);
    close(fe);
    unlink(po);
    unlink(pe);
    return rc;
}

static int one_line(const char *s)
{
    const char *nl = strchr(s, '\n');
    return nl != NULL && nl[1] == '\0' && nl != s;
}

START_TEST(cli_commands)
{
    char model[1024], out[4096], err[4096];
    snprintf(model, sizeof model, "%s/models/llama-2-tiny-random.gguf", tt_shared_dir());
    size_t n_cases;
    tt_golden *gc = tt_load_golden(&n_cases);
    for (size_t i = 0; i < n_cases; i++) {
        char *argv[] = {"tokenize", model, gc[i].text, NULL};
        ck_assert_int_eq(run_cmd(st_cmd_tokenize, 3, argv, out, err, sizeof out), 0);
        char want[4096] = "ids: ";
        size_t k = strlen(want);
        for (size_t j = 0; j < gc[i].n; j++)
            k += (size_t)snprintf(want + k, sizeof want - k, j ? ",%d" : "%d", gc[i].ids[j]);
        snprintf(want + k, sizeof want - k, "\n");
        ck_assert_str_eq(out, want);
        ck_assert_str_eq(err, "");
        /* detokenize the same ids: the text and a newline */
        char *ids_arg = want + 5;
        ids_arg[strlen(ids_arg) - 1] = '\0';
        char *dargv[] = {"detokenize", model, ids_arg, NULL};
        ck_assert_int_eq(run_cmd(st_cmd_detokenize, 3, dargv, out, err, sizeof out), 0);
        ck_assert_uint_eq(strlen(out), strlen(gc[i].text) + 1);
        ck_assert_mem_eq(out, gc[i].text, strlen(gc[i].text));
    }
    tt_free_golden(gc, n_cases);

    char *a1[] = {"detokenize", model, "1,15043,32000", NULL};
    ck_assert_int_eq(run_cmd(st_cmd_detokenize, 3, a1, out, err, sizeof out), 1);
    ck_assert_str_eq(out, "");
    ck_assert(one_line(err) && strstr(err, "32000") != NULL);
    char *a2[] = {"detokenize", model, "1,x", NULL};
    ck_assert_int_eq(run_cmd(st_cmd_detokenize, 3, a2, out, err, sizeof out), 2);
    ck_assert(one_line(err));
    char *a3[] = {"tokenize", "/nonexistent/model.gguf", "hi", NULL};
    ck_assert_int_eq(run_cmd(st_cmd_tokenize, 3, a3, out, err, sizeof out), 1);
    ck_assert(one_line(err) && strstr(err, "/nonexistent/model.gguf") != NULL);
    char *a4[] = {"tokenize", model, NULL};
    ck_assert_int_eq(run_cmd(st_cmd_tokenize, 2, a4, out, err, sizeof out), 2);
    ck_assert(one_line(err));
    char *a5[] = {"detokenize", model, "1", "2", NULL};
    ck_assert_int_eq(run_cmd(st_cmd_detokenize, 4, a5, out, err, sizeof out), 2);
    ck_assert(one_line(err));
    char notgguf[1024];
    snprintf(notgguf, sizeof notgguf, "%s/models/tokenizer.bin", tt_shared_dir());
    char *a6[] = {"tokenize", notgguf, "hi", NULL};
    ck_assert_int_eq(run_cmd(st_cmd_tokenize, 3, a6, out, err, sizeof out), 1);
    ck_assert(one_line(err));
    ck_assert_str_eq(out, "");
}
END_TEST

void tt_add_cli_tests(TCase *tc) { tcase_add_test(tc, cli_commands); }
