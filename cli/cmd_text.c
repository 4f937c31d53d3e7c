/* cmd_text.c - `strata tokenize MODEL TEXT [--special]` and `strata
 * detokenize MODEL a,b,c [--special]`: the tokenizer of a GGUF model
 * (SentencePiece or byte-level BPE), from the command line.
 *
 * tokenize prints one line "ids: a,b,c" (BOS included when the model's
 * metadata asks for it); with --special, the text of control tokens (such
 * as "<|im_start|>") becomes their id instead of plain text. detokenize
 * prints the text of the ids followed by a newline, decoded as the start of
 * a text (the space prefix removed); with --special, control tokens show
 * as their text instead of nothing.
 * Every failure is one line on stderr: exit 2 for usage errors, 1 for
 * runtime errors (missing file, bad model, ids outside the vocabulary). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "common/model/gguf.h"
#include "common/text/tokenizer.h"

/* text_load - opens path and builds its tokenizer; prints the error. */
static int text_load(const char *cmd, const char *path, st_tokenizer **tok)
{
    st_gguf *g;
    st_err e = st_gguf_open(path, &g);
    if (e != ST_OK) {
        fprintf(stderr, "strata: %s: %s\n", cmd, st_errmsg(e));
        return 1;
    }
    e = st_tok_from_gguf(g, tok);
    st_gguf_close(g);
    if (e != ST_OK) {
        fprintf(stderr, "strata: %s: %s: %s\n", cmd, path, st_errmsg(e));
        return 1;
    }
    return 0;
}

static int text_wants_help(int argc, char **argv)
{
    return argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0);
}

/* text_take_special - removes a "--special" argument (anywhere after the
 * command name) from argv; returns whether there was one. */
static bool text_take_special(int *argc, char **argv)
{
    bool found = false;
    int k = 1;
    for (int i = 1; i < *argc; i++) {
        if (!found && strcmp(argv[i], "--special") == 0)
            found = true;
        else
            argv[k++] = argv[i];
    }
    *argc = k;
    return found;
}

int st_cmd_tokenize(int argc, char **argv)
{
    static const char usage[] = "usage: strata tokenize MODEL TEXT [--special]";
    bool special = text_take_special(&argc, argv);
    if (text_wants_help(argc, argv)) {
        printf("%s\n", usage);
        return 0;
    }
    if (argc != 3) {
        fprintf(stderr, "strata: tokenize: expected MODEL and TEXT (%s)\n", usage);
        return 2;
    }
    st_tokenizer *tok;
    if (text_load("tokenize", argv[1], &tok) != 0)
        return 1;
    int32_t *ids;
    size_t n;
    st_err e = st_tok_encode_ex(tok, argv[2], strlen(argv[2]), st_tok_add_bos(tok), special, &ids,
                                &n);
    st_tok_free(tok);
    if (e != ST_OK) {
        fprintf(stderr, "strata: tokenize: %s\n", st_errmsg(e));
        return 1;
    }
    fputs("ids: ", stdout);
    for (size_t i = 0; i < n; i++)
        printf(i ? ",%d" : "%d", ids[i]);
    fputc('\n', stdout);
    free(ids);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "strata: tokenize: cannot write the output\n");
        return 1;
    }
    return 0;
}

int st_cmd_detokenize(int argc, char **argv)
{
    static const char usage[] = "usage: strata detokenize MODEL a,b,c [--special]";
    bool special = text_take_special(&argc, argv);
    if (text_wants_help(argc, argv)) {
        printf("%s\n", usage);
        return 0;
    }
    if (argc != 3) {
        fprintf(stderr, "strata: detokenize: expected MODEL and IDS (%s)\n", usage);
        return 2;
    }
    int32_t *ids;
    size_t n;
    if (cli_parse_ids("IDS", argv[2], &ids, &n) != 0)
        return 2;
    st_tokenizer *tok;
    if (text_load("detokenize", argv[1], &tok) != 0) {
        free(ids);
        return 1;
    }
    char *text;
    size_t len;
    st_err e = st_tok_decode_ex(tok, ids, n, special, &text, &len);
    st_tok_free(tok);
    free(ids);
    if (e != ST_OK) {
        fprintf(stderr, "strata: detokenize: %s\n", st_errmsg(e));
        return 1;
    }
    fwrite(text, 1, len, stdout);
    fputc('\n', stdout);
    free(text);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "strata: detokenize: cannot write the output\n");
        return 1;
    }
    return 0;
}
