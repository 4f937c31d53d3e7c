/* test_tokenizer.c - the SentencePiece tokenizer against llama.cpp's ids
 * (golden/tokenizer-llama-spm.json), over both the GGUF vocabulary and
 * llama2.c's tokenizer.bin; round trips, streaming, malformed input,
 * out-of-range ids, scaling and random bytes on the real vocabulary; the
 * shared fixtures (tok_test.h) and main(), whose one test case also holds
 * the tests of test_tokenizer_build.c (merge order, construction and file
 * errors) and test_tokenizer_cli.c (the tokenize / detokenize commands). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/text/tok_test.h"

/* ---- fixtures ----------------------------------------------------------- */

const char *tt_shared_dir(void)
{
    const char *s = getenv("STRATA_SHARED");
    return s && *s ? s : "../shared";
}

char *tt_read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)sz + 1);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(fread(b, 1, (size_t)sz, f), (size_t)sz);
    b[sz] = '\0';
    fclose(f);
    *len = (size_t)sz;
    return b;
}

tt_golden *tt_load_golden(size_t *n_cases)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/golden/tokenizer-llama-spm.json", tt_shared_dir());
    size_t len;
    char *js = tt_read_all(path, &len);
    cJSON *root = cJSON_Parse(js);
    ck_assert_msg(root != NULL, "bad JSON in %s", path);
    cJSON *cases = cJSON_GetObjectItem(root, "cases");
    ck_assert(cJSON_IsArray(cases));
    size_t n = (size_t)cJSON_GetArraySize(cases);
    ck_assert_uint_gt(n, 10);
    tt_golden *gc = calloc(n, sizeof *gc);
    for (size_t i = 0; i < n; i++) {
        cJSON *c = cJSON_GetArrayItem(cases, (int)i);
        cJSON *t = cJSON_GetObjectItem(c, "text"), *ids = cJSON_GetObjectItem(c, "ids");
        ck_assert(cJSON_IsString(t) && cJSON_IsArray(ids));
        gc[i].text = strdup(t->valuestring);
        gc[i].n = (size_t)cJSON_GetArraySize(ids);
        gc[i].ids = malloc((gc[i].n + 1) * sizeof(int32_t));
        for (size_t j = 0; j < gc[i].n; j++)
            gc[i].ids[j] = (int32_t)cJSON_GetArrayItem(ids, (int)j)->valueint;
    }
    cJSON_Delete(root);
    free(js);
    *n_cases = n;
    return gc;
}

void tt_free_golden(tt_golden *gc, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(gc[i].text);
        free(gc[i].ids);
    }
    free(gc);
}

st_tokenizer *tt_load_gguf_tok(st_gguf **g)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/models/llama-2-tiny-random.gguf", tt_shared_dir());
    st_err e = st_gguf_open(path, g);
    ck_assert_msg(e == ST_OK, "st_gguf_open: %s", st_errmsg(e));
    st_tokenizer *tok;
    e = st_tok_from_gguf(*g, &tok);
    ck_assert_msg(e == ST_OK, "st_tok_from_gguf: %s", st_errmsg(e));
    return tok;
}

st_tokenizer *tt_load_llama2c_tok(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/models/tokenizer.bin", tt_shared_dir());
    st_tokenizer *tok;
    st_err e = st_tok_from_llama2c(path, &tok);
    ck_assert_msg(e == ST_OK, "st_tok_from_llama2c: %s", st_errmsg(e));
    return tok;
}

/* utf8_valid - an independent strict UTF-8 check for the streaming test. */
static int utf8_valid(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t k;
        unsigned cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            k = 2;
            cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            k = 3;
            cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            k = 4;
            cp = c & 0x07;
        } else {
            return 0;
        }
        if (i + k > n)
            return 0;
        for (size_t j = 1; j < k; j++) {
            if ((s[i + j] & 0xC0) != 0x80)
                return 0;
            cp = cp << 6 | (s[i + j] & 0x3F);
        }
        if ((k == 2 && cp < 0x80) || (k == 3 && cp < 0x800) || (k == 4 && cp < 0x10000) ||
            cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += k;
    }
    return 1;
}

/* check_golden - every case: exact ids with BOS, ids[1..] without, and
 * decode(encode(x)) == x, batch and streaming. Returns the cases passed. */
static size_t check_golden(const st_tokenizer *tok, const char *label)
{
    size_t n_cases;
    tt_golden *gc = tt_load_golden(&n_cases);
    size_t passed = 0;
    size_t cap = st_detok_bound(tok);
    char *chunk = malloc(cap);
    for (size_t i = 0; i < n_cases; i++) {
        int32_t *ids;
        size_t n;
        size_t tlen = strlen(gc[i].text);
        ck_assert_int_eq(st_tok_encode(tok, gc[i].text, tlen, true, &ids, &n), ST_OK);
        int same = n == gc[i].n && memcmp(ids, gc[i].ids, n * sizeof *ids) == 0;
        if (!same) {
            fprintf(stderr, "%s case %zu '%s': got", label, i, gc[i].text);
            for (size_t j = 0; j < n; j++)
                fprintf(stderr, " %d", ids[j]);
            fprintf(stderr, "\n  want");
            for (size_t j = 0; j < gc[i].n; j++)
                fprintf(stderr, " %d", gc[i].ids[j]);
            fprintf(stderr, "\n");
        }
        ck_assert_msg(same, "%s: case %zu ('%s') ids differ from llama.cpp", label, i, gc[i].text);
        free(ids);

        ck_assert_int_eq(st_tok_encode(tok, gc[i].text, tlen, false, &ids, &n), ST_OK);
        ck_assert_uint_eq(n, gc[i].n - 1);
        ck_assert_mem_eq(ids, gc[i].ids + 1, n * sizeof *ids);
        free(ids);

        char *text;
        size_t len;
        ck_assert_int_eq(st_tok_decode(tok, gc[i].ids, gc[i].n, &text, &len), ST_OK);
        ck_assert_uint_eq(len, tlen);
        ck_assert_str_eq(text, gc[i].text);
        free(text);

        st_detok d;
        st_detok_init(&d, tok, true);
        char *acc = malloc(tlen + 1);
        size_t k = 0;
        for (size_t j = 0; j < gc[i].n; j++) {
            size_t m;
            ck_assert_int_eq(st_detok_push(&d, gc[i].ids[j], chunk, cap, &m), ST_OK);
            ck_assert_msg(utf8_valid((unsigned char *)chunk, m),
                          "%s case %zu: chunk %zu splits a character", label, i, j);
            ck_assert_uint_le(k + m, tlen);
            memcpy(acc + k, chunk, m);
            k += m;
        }
        size_t m;
        ck_assert_int_eq(st_detok_flush(&d, chunk, cap, &m), ST_OK);
        ck_assert_uint_eq(m, 0);
        ck_assert_uint_eq(k, tlen);
        ck_assert_mem_eq(acc, gc[i].text, tlen);
        free(acc);
        passed++;
    }
    free(chunk);
    tt_free_golden(gc, n_cases);
    fprintf(stderr, "%s: %zu/%zu golden cases match llama.cpp\n", label, passed, n_cases);
    return passed;
}

/* ---- golden ------------------------------------------------------------- */

START_TEST(golden_gguf)
{
    st_gguf *g;
    st_tokenizer *tok = tt_load_gguf_tok(&g);
    ck_assert_uint_eq(st_tok_n_vocab(tok), 32000);
    ck_assert_int_eq(st_tok_bos(tok), 1);
    ck_assert_int_eq(st_tok_eos(tok), 2);
    ck_assert_int_eq(st_tok_unk(tok), 0);
    ck_assert(st_tok_add_bos(tok));
    ck_assert(st_tok_add_space_prefix(tok));
    st_gguf_close(g); /* the tokenizer must not point into the mapping */
    ck_assert_uint_gt(check_golden(tok, "gguf"), 10);
    st_tok_free(tok);
}
END_TEST

START_TEST(golden_llama2c)
{
    st_tokenizer *tok = tt_load_llama2c_tok();
    ck_assert_uint_eq(st_tok_n_vocab(tok), 32000);
    ck_assert_uint_gt(check_golden(tok, "llama2c"), 10);
    st_tok_free(tok);
}
END_TEST

START_TEST(llama2c_matches_gguf_vocab)
{
    st_gguf *g;
    st_tokenizer *a = tt_load_gguf_tok(&g);
    st_tokenizer *b = tt_load_llama2c_tok();
    ck_assert_uint_eq(st_tok_n_vocab(a), st_tok_n_vocab(b));
    size_t nonzero = 0;
    for (int32_t id = 0; id < (int32_t)st_tok_n_vocab(a); id++) {
        const char *pa, *pb;
        size_t la, lb;
        float sa, sb;
        st_tok_type ta, tb;
        ck_assert_int_eq(st_tok_piece(a, id, &pa, &la), ST_OK);
        ck_assert_int_eq(st_tok_piece(b, id, &pb, &lb), ST_OK);
        ck_assert_msg(la == lb && memcmp(pa, pb, la) == 0, "piece %d differs", id);
        ck_assert_int_eq(st_tok_score(a, id, &sa), ST_OK);
        ck_assert_int_eq(st_tok_score(b, id, &sb), ST_OK);
        ck_assert_msg(sa == sb, "score %d: %g vs %g", id, (double)sa, (double)sb);
        nonzero += sb != 0.0f;
        ck_assert_int_eq(st_tok_type_of(a, id, &ta), ST_OK);
        ck_assert_int_eq(st_tok_type_of(b, id, &tb), ST_OK);
        ck_assert_msg(ta == tb, "type %d: %d vs %d", id, ta, tb);
    }
    ck_assert_uint_gt(nonzero, 31000); /* tokenizer.bin really carries the scores */
    st_tok_free(a);
    st_tok_free(b);
    st_gguf_close(g);
}
END_TEST

/* ---- behaviour on the real vocabulary ----------------------------------- */

START_TEST(empty_and_bos)
{
    st_tokenizer *tok = tt_load_llama2c_tok();
    int32_t *ids;
    size_t n;
    ck_assert_int_eq(st_tok_encode(tok, "", 0, true, &ids, &n), ST_OK);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(ids[0], 1);
    free(ids);
    ck_assert_int_eq(st_tok_encode(tok, NULL, 0, false, &ids, &n), ST_OK);
    ck_assert_ptr_nonnull(ids);
    ck_assert_uint_eq(n, 0);
    free(ids);
    char *text;
    size_t len;
    int32_t specials[] = {1, 2};
    ck_assert_int_eq(st_tok_decode(tok, specials, 2, &text, &len), ST_OK);
    ck_assert_uint_eq(len, 0);
    ck_assert_str_eq(text, "");
    free(text);
    int32_t unk[] = {1, 0};
    ck_assert_int_eq(st_tok_decode(tok, unk, 2, &text, &len), ST_OK);
    ck_assert_str_eq(text, "\xe2\x81\x87 "); /* " ⁇ " less the stripped prefix space */
    free(text);
    st_tok_free(tok);
}
END_TEST

START_TEST(malformed_utf8)
{
    st_tokenizer *tok = tt_load_llama2c_tok();
    const char x[] = "a\xff b\xe6\x97\xed\xa0\x80"
                     "c\xc0\xaf\xf4\x90\x80\x80 \xe2\x82";
    size_t xl = sizeof x - 1;
    int32_t *ids;
    size_t n;
    ck_assert_int_eq(st_tok_encode(tok, x, xl, true, &ids, &n), ST_OK);
    int saw_ff = 0, saw_c0 = 0;
    for (size_t i = 0; i < n; i++) {
        ck_assert(ids[i] >= 0 && ids[i] < 32000);
        saw_ff |= ids[i] == 3 + 0xff;
        saw_c0 |= ids[i] == 3 + 0xc0;
    }
    ck_assert(saw_ff && saw_c0); /* invalid bytes fall back to byte tokens */
    char *text;
    size_t len;
    ck_assert_int_eq(st_tok_decode(tok, ids, n, &text, &len), ST_OK);
    ck_assert_uint_eq(len, xl);
    ck_assert_mem_eq(text, x, xl); /* batch decode returns the exact bytes */
    free(text);

    /* Streaming repairs: one U+FFFD per maximal invalid subpart. */
    size_t cap = st_detok_bound(tok);
    char *chunk = malloc(cap), out[256];
    size_t k = 0, m;
    st_detok d;
    st_detok_init(&d, tok, true);
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(st_detok_push(&d, ids[i], chunk, cap, &m), ST_OK);
        ck_assert(utf8_valid((unsigned char *)chunk, m));
        memcpy(out + k, chunk, m);
        k += m;
    }
    ck_assert_int_eq(st_detok_flush(&d, chunk, cap, &m), ST_OK);
    memcpy(out + k, chunk, m);
    k += m;
#define R "\xef\xbf\xbd"
    const char want[] = "a" R " b" R R R R "c" R R R R R R " " R;
#undef R
    ck_assert_uint_eq(k, sizeof want - 1);
    ck_assert_mem_eq(out, want, k);
    free(chunk);
    free(ids);
    st_tok_free(tok);
}
END_TEST

START_TEST(detok_continuation)
{
    st_tokenizer *tok = tt_load_llama2c_tok();
    int32_t *ids;
    size_t n;
    ck_assert_int_eq(st_tok_encode(tok, "there was", 9, false, &ids, &n), ST_OK);
    size_t cap = st_detok_bound(tok);
    char *chunk = malloc(cap);
    char out[64];
    size_t k = 0, m;
    st_detok d;
    st_detok_init(&d, tok, false); /* generated text after a prompt keeps its space */
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(st_detok_push(&d, ids[i], chunk, cap, &m), ST_OK);
        memcpy(out + k, chunk, m);
        k += m;
    }
    out[k] = '\0';
    ck_assert_str_eq(out, " there was");
    /* a character split over byte tokens is held back until complete */
    st_detok_init(&d, tok, false);
    int32_t llama[] = {3 + 0xf0, 3 + 0x9f, 3 + 0xa6, 3 + 0x99}; /* U+1F999 */
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(st_detok_push(&d, llama[i], chunk, cap, &m), ST_OK);
        ck_assert_uint_eq(m, 0);
    }
    ck_assert_int_eq(st_detok_push(&d, llama[3], chunk, cap, &m), ST_OK);
    ck_assert_uint_eq(m, 4);
    ck_assert_mem_eq(chunk, "\xf0\x9f\xa6\x99", 4);
    /* an incomplete character at the end is flushed as U+FFFD */
    ck_assert_int_eq(st_detok_push(&d, llama[0], chunk, cap, &m), ST_OK);
    ck_assert_uint_eq(m, 0);
    ck_assert_int_eq(st_detok_flush(&d, chunk, cap, &m), ST_OK);
    ck_assert_uint_eq(m, 3);
    ck_assert_mem_eq(chunk, "\xef\xbf\xbd", 3);
    ck_assert_int_eq(st_detok_push(&d, 1, chunk, cap - 1, &m), ST_EINVAL);
    free(chunk);
    free(ids);
    st_tok_free(tok);
}
END_TEST

START_TEST(out_of_range_ids)
{
    st_tokenizer *tok = tt_load_llama2c_tok();
    int32_t bad[] = {1, 15043, 32000};
    char *text = (char *)1;
    size_t len;
    ck_assert_int_eq(st_tok_decode(tok, bad, 3, &text, &len), ST_ERANGE);
    ck_assert_ptr_null(text);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "32000"));
    int32_t neg[] = {-5};
    ck_assert_int_eq(st_tok_decode(tok, neg, 1, &text, &len), ST_ERANGE);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "-5"));
    const char *p;
    ck_assert_int_eq(st_tok_piece(tok, 40000, &p, &len), ST_ERANGE);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "40000"));
    ck_assert_int_eq(st_tok_piece(tok, 15043, &p, &len), ST_OK);
    ck_assert_str_eq(p, "\xe2\x96\x81Hello");
    st_detok d;
    st_detok_init(&d, tok, true);
    size_t cap = st_detok_bound(tok), m;
    char *chunk = malloc(cap);
    ck_assert_int_eq(st_detok_push(&d, 123456, chunk, cap, &m), ST_ERANGE);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "123456"));
    free(chunk);
    int32_t id;
    ck_assert_int_eq(st_tok_find(tok, "\xe2\x96\x81world", 8, &id), ST_OK);
    ck_assert_int_eq(id, 3186);
    ck_assert_int_eq(st_tok_find(tok, "zzzzqqqq", 8, &id), ST_ENOENT);
    st_tok_free(tok);
}
END_TEST

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

START_TEST(long_text_scales)
{
    st_tokenizer *tok = tt_load_llama2c_tok();
    size_t n_cases;
    tt_golden *gc = tt_load_golden(&n_cases);
    size_t cap = 1 << 19, k = 0;
    char *big = malloc(cap + 1);
    for (size_t i = 0; k < cap; i = (i + 1) % n_cases) {
        size_t l = strlen(gc[i].text);
        if (l > cap - k)
            l = cap - k;
        memcpy(big + k, gc[i].text, l);
        k += l;
    }
    /* cutting mid-character is fine: malformed input must round-trip too */
    int32_t *ids;
    size_t n;
    double t0 = now_s();
    ck_assert_int_eq(st_tok_encode(tok, big, cap, true, &ids, &n), ST_OK);
    double t1 = now_s();
    ck_assert_uint_gt(n, cap / 8);
    char *text;
    size_t len;
    ck_assert_int_eq(st_tok_decode(tok, ids, n, &text, &len), ST_OK);
    ck_assert_uint_eq(len, cap);
    ck_assert_mem_eq(text, big, cap);
    free(text);
    free(ids);
    /* one long run of a single character: the worst case for naive merging */
    memset(big, 'a', cap);
    double t2 = now_s();
    ck_assert_int_eq(st_tok_encode(tok, big, cap, false, &ids, &n), ST_OK);
    double t3 = now_s();
    ck_assert_int_eq(st_tok_decode(tok, ids, n, &text, &len), ST_OK);
    ck_assert_mem_eq(text, big, cap);
    free(text);
    free(ids);
    fprintf(stderr, "encode 512 KiB: mixed %.3f s, 'aaaa' %.3f s\n", t1 - t0, t3 - t2);
    ck_assert_msg(t1 - t0 < 20.0 && t3 - t2 < 20.0, "encoding does not scale");
    free(big);
    tt_free_golden(gc, n_cases);
    st_tok_free(tok);
}
END_TEST

/* ---- random bytes round trip ------------------------------------------- */

START_TEST(random_bytes_round_trip)
{
    st_tokenizer *tok = tt_load_llama2c_tok();
    uint64_t x = 0x1234567;
    char buf[64];
    for (int t = 0; t < 3000; t++) {
        size_t len = (size_t)(t % 40);
        for (size_t i = 0; i < len; i++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            uint8_t b = (uint8_t)(x >> 56);
            buf[i] = (char)(b < 64    ? ' '
                            : b < 128 ? 'a' + b % 26
                                      : b); /* spaces, letters, any high byte */
        }
        int32_t *ids;
        size_t n;
        ck_assert_int_eq(st_tok_encode(tok, buf, len, t % 2 == 0, &ids, &n), ST_OK);
        char *text;
        size_t tl;
        ck_assert_int_eq(st_tok_decode(tok, ids, n, &text, &tl), ST_OK);
        ck_assert_uint_eq(tl, len);
        ck_assert_mem_eq(text, buf, len);
        free(text);
        free(ids);
    }
    st_tok_free(tok);
}
END_TEST

static Suite *tokenizer_suite(void)
{
    Suite *s = suite_create("tokenizer");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, golden_gguf);
    tcase_add_test(tc, golden_llama2c);
    tcase_add_test(tc, llama2c_matches_gguf_vocab);
    tcase_add_test(tc, empty_and_bos);
    tcase_add_test(tc, malformed_utf8);
    tcase_add_test(tc, detok_continuation);
    tcase_add_test(tc, out_of_range_ids);
    tcase_add_test(tc, long_text_scales);
    tt_add_build_tests(tc);
    tcase_add_test(tc, random_bytes_round_trip);
    tt_add_cli_tests(tc);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(tokenizer_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
