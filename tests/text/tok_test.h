/* tok_test.h - fixtures shared by the SentencePiece tokenizer tests
 * (test_tokenizer.c, test_tokenizer_build.c, test_tokenizer_cli.c): the
 * shared directory, llama.cpp's golden ids, the two real vocabularies, and
 * the suites. The fixtures fail the running Check test on error. */
#ifndef ST_TEST_TOK_TEST_H
#define ST_TEST_TOK_TEST_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "common/model/gguf.h"
#include "common/text/tokenizer.h"

/* One case of golden/tokenizer-llama-spm.json: a text and llama.cpp's ids
 * for it (with BOS). */
typedef struct tt_golden {
    char *text;
    int32_t *ids;
    size_t n;
} tt_golden;

/* tt_shared_dir - $STRATA_SHARED, or ../shared. */
const char *tt_shared_dir(void);

/* tt_read_all - the whole file at path, NUL-terminated (caller frees);
 * *len excludes the terminator. */
char *tt_read_all(const char *path, size_t *len);

/* tt_load_golden - every golden case (free with tt_free_golden). */
tt_golden *tt_load_golden(size_t *n_cases);
void tt_free_golden(tt_golden *gc, size_t n);

/* tt_load_gguf_tok - the tokenizer of the tiny llama GGUF; *g is the open
 * file (the caller closes it). */
st_tokenizer *tt_load_gguf_tok(st_gguf **g);

/* tt_load_llama2c_tok - the tokenizer of llama2.c's tokenizer.bin. */
st_tokenizer *tt_load_llama2c_tok(void);

/* The tests of the other files, added to main()'s one test case: the
 * tokenizers built from pieces, GGUF metadata and damaged files
 * (test_tokenizer_build.c), the tokenize / detokenize commands
 * (test_tokenizer_cli.c). */
void tt_add_build_tests(TCase *tc);
void tt_add_cli_tests(TCase *tc);

#endif
