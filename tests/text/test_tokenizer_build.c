/* test_tokenizer_build.c - SentencePiece tokenizers built by hand: merge
 * order on a tiny vocabulary of pieces, st_tok_from_pieces' errors, GGUF
 * tokenizer metadata (files built in memory) and damaged llama2.c
 * tokenizer files. */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/text/tok_test.h"

/* ---- merge order on a tiny vocabulary ----------------------------------- */

static st_tokenizer *tiny(float ab, float ba, bool prefix)
{
    const char *p[] = {"<unk>", "<s>",          "</s>", "a",   "b",  "ab",
                       "ba",    "\xe2\x96\x81", "c",    "abc", "bc", "a"};
    float s[] = {0, 0, 0, 0, 0, ab, ba, 0, 0, 5, 0.5f, 0};
    int32_t t[] = {2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    st_tok_config cfg = st_tok_config_default();
    cfg.add_space_prefix = prefix;
    st_tokenizer *tok;
    ck_assert_int_eq(st_tok_from_pieces(p, NULL, s, t, 12, &cfg, &tok), ST_OK);
    return tok;
}

static void expect_ids(st_tokenizer *tok, const char *text, const int32_t *want, size_t nw)
{
    int32_t *ids;
    size_t n;
    ck_assert_int_eq(st_tok_encode(tok, text, strlen(text), false, &ids, &n), ST_OK);
    ck_assert_msg(n == nw && memcmp(ids, want, n * sizeof *ids) == 0, "'%s': got %zu ids", text, n);
    free(ids);
}

START_TEST(merge_order)
{
    st_tokenizer *tok = tiny(1, 1, false);
    /* later duplicate of "a" (id 11) wins the lookup, as in llama.cpp */
    expect_ids(tok, "aba", (int32_t[]){5, 11}, 2); /* tie: leftmost pair merges */
    expect_ids(tok, "bab", (int32_t[]){6, 4}, 2);
    expect_ids(tok, "abc", (int32_t[]){9}, 1); /* ab first, then abc */
    expect_ids(tok, "bc", (int32_t[]){10}, 1);
    expect_ids(tok, "abx", (int32_t[]){5, 0}, 2); /* no byte tokens: UNK */
    st_tok_free(tok);
    tok = tiny(1, 2, false);
    expect_ids(tok, "aba", (int32_t[]){11, 6}, 2); /* higher score wins */
    st_tok_free(tok);
    tok = tiny(1, 1, true);
    expect_ids(tok, " a", (int32_t[]){7, 7, 11}, 3);
    char *text;
    size_t len;
    ck_assert_int_eq(st_tok_decode(tok, (int32_t[]){7, 7, 11}, 3, &text, &len), ST_OK);
    ck_assert_str_eq(text, " a");
    free(text);
    st_tok_free(tok);
    tok = tiny(1, 1, false);
    ck_assert_int_eq(st_tok_decode(tok, (int32_t[]){7, 11}, 2, &text, &len), ST_OK);
    ck_assert_str_eq(text, " a"); /* no prefix, no strip */
    free(text);
    st_tok_free(tok);
}
END_TEST

START_TEST(from_pieces_errors)
{
    const char *p[] = {"<unk>", "<s>", "</s>", "<0x4G>"};
    int32_t t[] = {2, 3, 3, 6};
    st_tok_config cfg = st_tok_config_default();
    st_tokenizer *tok = (st_tokenizer *)1;
    ck_assert_int_eq(st_tok_from_pieces(p, NULL, NULL, t, 4, &cfg, &tok), ST_EFORMAT);
    ck_assert_ptr_null(tok);
    t[3] = 7;
    ck_assert_int_eq(st_tok_from_pieces(p, NULL, NULL, t, 4, &cfg, &tok), ST_ERANGE);
    t[3] = 1;
    cfg.eos_id = 4;
    ck_assert_int_eq(st_tok_from_pieces(p, NULL, NULL, t, 4, &cfg, &tok), ST_ERANGE);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "eos"));
    cfg = st_tok_config_default();
    ck_assert_int_eq(st_tok_from_pieces(p, NULL, NULL, t, 0, &cfg, &tok), ST_EINVAL);
    float s[] = {0, 0, 0, NAN};
    ck_assert_int_eq(st_tok_from_pieces(p, NULL, s, t, 4, &cfg, &tok), ST_EFORMAT);
    ck_assert_int_eq(st_tok_from_pieces(p, NULL, NULL, t, 4, &cfg, &tok), ST_OK);
    st_tok_free(tok);
}
END_TEST

/* ---- GGUF metadata errors (files built in memory) ----------------------- */

typedef struct gbuf {
    uint8_t b[4096];
    size_t n;
    uint64_t nkv;
} gbuf;

static void put(gbuf *g, const void *p, size_t n)
{
    ck_assert_uint_le(g->n + n, sizeof g->b);
    memcpy(g->b + g->n, p, n);
    g->n += n;
}
static void put_u32(gbuf *g, uint32_t v) { put(g, &v, 4); }
static void put_u64(gbuf *g, uint64_t v) { put(g, &v, 8); }
static void put_str(gbuf *g, const char *s)
{
    put_u64(g, strlen(s));
    put(g, s, strlen(s));
}
static void kv_head(gbuf *g, const char *key, uint32_t type)
{
    put_str(g, key);
    put_u32(g, type);
    g->nkv++;
}
static void kv_str(gbuf *g, const char *key, const char *v)
{
    kv_head(g, key, ST_GGUF_STRING);
    put_str(g, v);
}
static void kv_u32(gbuf *g, const char *key, uint32_t v)
{
    kv_head(g, key, ST_GGUF_UINT32);
    put_u32(g, v);
}
static void kv_bool(gbuf *g, const char *key, uint8_t v)
{
    kv_head(g, key, ST_GGUF_BOOL);
    put(g, &v, 1);
}
static void kv_arr_str(gbuf *g, const char *key, const char *const *v, size_t n)
{
    kv_head(g, key, ST_GGUF_ARRAY);
    put_u32(g, ST_GGUF_STRING);
    put_u64(g, n);
    for (size_t i = 0; i < n; i++)
        put_str(g, v[i]);
}
static void kv_arr_32(gbuf *g, const char *key, uint32_t type, const void *v, size_t n)
{
    kv_head(g, key, ST_GGUF_ARRAY);
    put_u32(g, type);
    put_u64(g, n);
    put(g, v, 4 * n);
}

/* finish - header in front, padded to the alignment; returns the file. */
static uint8_t *finish(const gbuf *g, size_t *len)
{
    size_t n = 24 + g->n;
    n = (n + 31) / 32 * 32;
    uint8_t *f = calloc(1, n);
    memcpy(f, "GGUF", 4);
    uint32_t ver = 3;
    uint64_t nt = 0;
    memcpy(f + 4, &ver, 4);
    memcpy(f + 8, &nt, 8);
    memcpy(f + 16, &g->nkv, 8);
    memcpy(f + 24, g->b, g->n);
    *len = n;
    return f;
}

static st_err tok_from_buf(const gbuf *g, st_tokenizer **tok)
{
    size_t len;
    uint8_t *f = finish(g, &len);
    st_gguf *gg;
    st_err e = st_gguf_open_mem(f, len, &gg);
    ck_assert_msg(e == ST_OK, "st_gguf_open_mem: %s", st_errmsg(e));
    e = st_tok_from_gguf(gg, tok);
    st_gguf_close(gg);
    free(f);
    return e;
}

static const char *const mini_tokens[] = {"<unk>", "<s>", "</s>",
                                          ("\xe2\x96\x81"
                                           "a"),
                                          "b"};
static const float mini_scores[] = {0, 0, 0, -1, -2};
static const int32_t mini_types[] = {2, 3, 3, 1, 1};

/* kv_mini_llama - a "llama" vocabulary of the five mini pieces, with
 * n_scores scores (5 is consistent). */
static void kv_mini_llama(gbuf *g, size_t n_scores)
{
    kv_str(g, "tokenizer.ggml.model", "llama");
    kv_arr_str(g, "tokenizer.ggml.tokens", mini_tokens, 5);
    kv_arr_32(g, "tokenizer.ggml.scores", ST_GGUF_FLOAT32, mini_scores, n_scores);
    kv_arr_32(g, "tokenizer.ggml.token_type", ST_GGUF_INT32, mini_types, 5);
}

START_TEST(gguf_metadata)
{
    st_tokenizer *tok;
    gbuf g = {0};
    kv_str(&g, "tokenizer.ggml.model", "t5");
    kv_arr_str(&g, "tokenizer.ggml.tokens", mini_tokens, 5);
    ck_assert_int_eq(tok_from_buf(&g, &tok), ST_ETYPE);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "t5"));

    memset(&g, 0, sizeof g);
    kv_str(&g, "tokenizer.ggml.model", "llama");
    ck_assert_int_eq(tok_from_buf(&g, &tok), ST_EMISSING);

    memset(&g, 0, sizeof g);
    kv_mini_llama(&g, 4);
    ck_assert_int_eq(tok_from_buf(&g, &tok), ST_ESHAPE);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "scores"));

    memset(&g, 0, sizeof g);
    kv_mini_llama(&g, 5);
    kv_u32(&g, "tokenizer.ggml.bos_token_id", 9);
    ck_assert_int_eq(tok_from_buf(&g, &tok), ST_ERANGE);

    memset(&g, 0, sizeof g);
    kv_mini_llama(&g, 5);
    kv_u32(&g, "tokenizer.ggml.eos_token_id", 4);
    kv_bool(&g, "tokenizer.ggml.add_bos_token", 0);
    kv_bool(&g, "tokenizer.ggml.add_space_prefix", 0);
    ck_assert_int_eq(tok_from_buf(&g, &tok), ST_OK);
    ck_assert(!st_tok_add_bos(tok));
    ck_assert(!st_tok_add_space_prefix(tok));
    ck_assert_int_eq(st_tok_eos(tok), 4);
    ck_assert_int_eq(st_tok_bos(tok), 1);
    expect_ids(tok,
               "\xe2\x96\x81"
               "ab",
               (int32_t[]){3, 4}, 2);
    expect_ids(tok, "a", (int32_t[]){0}, 1); /* no "a", no byte tokens: UNK */
    st_tok_free(tok);
}
END_TEST

/* Pieces of a chat vocabulary: Gemma's end of turn, Phi-3's user turn and
 * its <|endoftext|>, all control tokens. */
static const char *const chat_tokens[] = {"<unk>",
                                          "<s>",
                                          "</s>",
                                          ("\xe2\x96\x81"
                                           "a"),
                                          "b",
                                          "<end_of_turn>",
                                          "<|user|>",
                                          "<|endoftext|>",
                                          ("\xe2\x96\x81"
                                           "\n")};
static const float chat_scores[] = {0, 0, 0, -1, -2, 0, 0, 0, -3};
static const int32_t chat_types[] = {2, 3, 3, 1, 1, 3, 3, 3, 1};

/* kv_chat_llama - a "llama" vocabulary of chat_tokens; name: general.name
 * (NULL: none). */
static void kv_chat_llama(gbuf *g, const char *name)
{
    if (name != NULL)
        kv_str(g, "general.name", name);
    kv_str(g, "tokenizer.ggml.model", "llama");
    kv_arr_str(g, "tokenizer.ggml.tokens", chat_tokens, 9);
    kv_arr_32(g, "tokenizer.ggml.scores", ST_GGUF_FLOAT32, chat_scores, 9);
    kv_arr_32(g, "tokenizer.ggml.token_type", ST_GGUF_INT32, chat_types, 9);
}

/* chat_tokens_rules - llama.cpp's rules for chat vocabularies: without
 * eot_token_id, Gemma's <end_of_turn> is the end of turn; when
 * general.name says Phi-3 (any case), the whitespace after a special token
 * split out of the text is dropped (but after <|endoftext|>, <s>, <unk>),
 * for any other name it stays. */
START_TEST(chat_tokens_rules)
{
    st_tokenizer *tok;
    gbuf g = {0};
    kv_chat_llama(&g, "Phi3-Mini");
    ck_assert_int_eq(tok_from_buf(&g, &tok), ST_OK);
    ck_assert_int_eq(st_tok_eot(tok), 5);
    int32_t *ids;
    size_t n;
    /* "<|user|>\na": the newline is dropped, "a" gets its space prefix */
    ck_assert_int_eq(st_tok_encode_ex(tok, "<|user|>\na", 10, false, true, &ids, &n), ST_OK);
    ck_assert_uint_eq(n, 2);
    ck_assert_int_eq(ids[0], 6);
    ck_assert_int_eq(ids[1], 3);
    free(ids);
    ck_assert_int_eq(st_tok_encode_ex(tok, "<|endoftext|>\na", 15, false, true, &ids, &n),
                     ST_OK);
    ck_assert_uint_eq(n, 3); /* the newline stays: "\xe2\x96\x81\n", then "a" is UNK */
    ck_assert_int_eq(ids[0], 7);
    ck_assert_int_eq(ids[1], 8);
    ck_assert_int_eq(ids[2], 0);
    free(ids);
    st_tok_free(tok);

    memset(&g, 0, sizeof g);
    kv_chat_llama(&g, "gemma-2");
    ck_assert_int_eq(tok_from_buf(&g, &tok), ST_OK);
    ck_assert_int_eq(st_tok_eot(tok), 5);
    ck_assert_int_eq(st_tok_encode_ex(tok, "<|user|>\na", 10, false, true, &ids, &n), ST_OK);
    ck_assert_uint_eq(n, 3); /* the newline stays */
    ck_assert_int_eq(ids[0], 6);
    ck_assert_int_eq(ids[1], 8);
    ck_assert_int_eq(ids[2], 0);
    free(ids);
    st_tok_free(tok);
}
END_TEST

START_TEST(llama2c_damaged)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/models/tokenizer.bin", tt_shared_dir());
    size_t len;
    char *full = tt_read_all(path, &len);
    char tmp[] = "/tmp/st_tok_XXXXXX";
    int fd = mkstemp(tmp);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, full, len - 3), (ssize_t)(len - 3));
    close(fd);
    st_tokenizer *tok;
    ck_assert_int_eq(st_tok_from_llama2c(tmp, &tok), ST_ETRUNC);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "31999"));
    fd = open(tmp, O_WRONLY | O_TRUNC);
    ck_assert_int_ge(fd, 0);
    int32_t bad_len[3] = {27, 0, 100}; /* max 27, then a token claiming 100 bytes */
    ck_assert_int_eq(write(fd, bad_len, sizeof bad_len), (ssize_t)sizeof bad_len);
    close(fd);
    ck_assert_int_eq(st_tok_from_llama2c(tmp, &tok), ST_EFORMAT);
    unlink(tmp);
    ck_assert_int_eq(st_tok_from_llama2c("/nonexistent/tokenizer.bin", &tok), ST_ENOENT);
    free(full);
}
END_TEST

void tt_add_build_tests(TCase *tc)
{
    tcase_add_test(tc, merge_order);
    tcase_add_test(tc, from_pieces_errors);
    tcase_add_test(tc, gguf_metadata);
    tcase_add_test(tc, chat_tokens_rules);
    tcase_add_test(tc, llama2c_damaged);
}
