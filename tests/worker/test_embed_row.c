/* test_embed_row.c - strata-embed's row URL (worker/embed/embed_row.h): a row
 * has exactly one target, the decimal id without a leading zero; every
 * other spelling (leading zeros, percent-escapes, a NUL escape, signs,
 * spaces, hex, a trailing slash, a query, a fragment) is refused. */
#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/embed/embed_row.h"

#define TR_SENTINEL 0xdeadbeefULL
#define TR_TARGET_MAX 64   /* a suffix, or an id printed back */
#define TR_ALL_IDS 100000u /* every id of a 100k vocabulary round-trips */
#define TR_ALPHABET "019%+ /?"
#define TR_ALPHABET_LEN (sizeof TR_ALPHABET - 1)
#define TR_LEN_MAX 5 /* suffixes of up to this many symbols of TR_ALPHABET */

/* tr_parse - st_embed_row_target of PREFIX+suffix; *id keeps TR_SENTINEL
 * unless it succeeds. */
static st_err tr_parse(const char *suffix, uint64_t *id)
{
    char t[sizeof ST_EMBED_ROW_PREFIX + TR_TARGET_MAX];
    snprintf(t, sizeof t, "%s%s", ST_EMBED_ROW_PREFIX, suffix);
    *id = TR_SENTINEL;
    return st_embed_row_target(t, id);
}

START_TEST(test_canonical)
{
    static const struct {
        const char *s;
        uint64_t id;
    } ok[] = {{"0", 0},
              {"1", 1},
              {"10", 10},
              {"31999", 31999},
              {"4294967295", 4294967295ULL},
              {"9999999999", 9999999999ULL}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        uint64_t id;
        ck_assert_msg(tr_parse(ok[i].s, &id) == ST_OK, "%s refused", ok[i].s);
        ck_assert_uint_eq(id, ok[i].id);
    }
}
END_TEST

START_TEST(test_other_spellings)
{
    /* as sent on the wire, before any decoding: the "01", "%31",
     * "1%00" among them */
    static const char *const bad[] =
        {"01",   "00", "000", "%31", "%30", "1%00", "%00", "+1", "%2B1",        "%2b1",
         "1%20", "1 ", " 1",  "0x1", "1/",  "1/x",  "1?x", "1?", "1#x",         "-1",
         "-0",   "",   "abc", "1a",  "1.0", "1e3",  "%",   "1%", "\xef\xbc\x91" /* fullwidth 1 */};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t id;
        ck_assert_msg(tr_parse(bad[i], &id) == ST_EINVAL, "'%s' accepted", bad[i]);
        ck_assert_msg(id == TR_SENTINEL, "'%s' wrote the id", bad[i]);
        ck_assert(strlen(st_errdetail()) > 0);
    }
    static const char *const other[] = {"/v1/embeddings",           "/v1/embeddings1",
                                        "/v1/Embeddings/1",         "//v1/embeddings/1",
                                        "/v1/%65mbeddings/1",       "/v1/embed",
                                        "http://h/v1/embeddings/1", "/v1/embeddings//1"};
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
        uint64_t id = TR_SENTINEL;
        ck_assert_msg(st_embed_row_target(other[i], &id) == ST_EINVAL, "'%s' accepted", other[i]);
        ck_assert(id == TR_SENTINEL);
    }
    uint64_t id = TR_SENTINEL;
    ck_assert(st_embed_row_target(NULL, &id) == ST_EINVAL && id == TR_SENTINEL);
}
END_TEST

START_TEST(test_too_long)
{
    uint64_t id;
    ck_assert(tr_parse("12345678901", &id) == ST_ERANGE && id == TR_SENTINEL);
    ck_assert(tr_parse("99999999999999999999999999", &id) == ST_ERANGE && id == TR_SENTINEL);
    /* a leading zero is a spelling error before it is a length */
    ck_assert(tr_parse("012345678901", &id) == ST_EINVAL);
}
END_TEST

START_TEST(test_every_id_round_trips)
{
    for (unsigned n = 0; n < TR_ALL_IDS; n++) {
        char s[TR_TARGET_MAX];
        uint64_t id;
        snprintf(s, sizeof s, "%u", n);
        ck_assert(tr_parse(s, &id) == ST_OK && id == n);
        snprintf(s, sizeof s, "0%u", n);
        ck_assert_msg(tr_parse(s, &id) == ST_EINVAL, "'%s' accepted", s);
    }
}
END_TEST

/* Every suffix of up to TR_LEN_MAX symbols over digits, '%', '+', space,
 * '/' and '?': accepted exactly when printing its id gives the suffix back,
 * so no id has two targets. */
START_TEST(test_one_target_per_id)
{
    size_t accepted = 0, tried = 0;
    for (size_t len = 0; len <= TR_LEN_MAX; len++) {
        size_t total = 1;
        for (size_t k = 0; k < len; k++)
            total *= TR_ALPHABET_LEN;
        for (size_t code = 0; code < total; code++) {
            char s[TR_LEN_MAX + 1];
            size_t c = code;
            for (size_t k = 0; k < len; k++, c /= TR_ALPHABET_LEN)
                s[k] = TR_ALPHABET[c % TR_ALPHABET_LEN];
            s[len] = '\0';
            uint64_t id;
            char back[TR_TARGET_MAX];
            bool ok = tr_parse(s, &id) == ST_OK;
            snprintf(back, sizeof back, "%llu", (unsigned long long)id);
            ck_assert_msg(ok == (strcmp(back, s) == 0 && id != TR_SENTINEL), "'%s': accepted %d", s,
                          ok);
            accepted += ok;
            tried++;
        }
    }
    /* the canonical numbers over {0, 1, 9} of up to 5 digits: 1 + 2*(1+3+9+27+81) */
    ck_assert_uint_eq(accepted, 1 + 2 * (1 + 3 + 9 + 27 + 81));
    ck_assert_uint_gt(tried, accepted);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("embed_row");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_canonical);
    tcase_add_test(tc, test_other_spellings);
    tcase_add_test(tc, test_too_long);
    tcase_add_test(tc, test_every_id_round_trips);
    tcase_add_test(tc, test_one_target_per_id);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
