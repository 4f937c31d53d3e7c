/* test_version.c - common/base/version.h: the protocol compatibility rule, the
 * refusal naming both versions, the build's identity and --version. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/version.h"

static st_proto_range r(uint32_t oldest, uint32_t version)
{
    return (st_proto_range){.oldest = oldest, .version = version};
}

START_TEST(rule)
{
    uint32_t a = 99;
    ck_assert(st_proto_agree(r(1, 1), r(1, 1), &a));
    ck_assert_uint_eq(a, 1);
    /* a newer peer that still speaks ours: the lower version, both ways */
    ck_assert(st_proto_agree(r(1, 3), r(2, 2), &a));
    ck_assert_uint_eq(a, 2);
    ck_assert(st_proto_agree(r(2, 2), r(1, 3), &a));
    ck_assert_uint_eq(a, 2);
    /* overlapping ranges */
    ck_assert(st_proto_agree(r(2, 5), r(4, 7), &a));
    ck_assert_uint_eq(a, 5);
    /* an oldest of 0 (builds before the field): its version only */
    ck_assert(st_proto_agree(r(0, 3), r(1, 3), &a));
    ck_assert_uint_eq(a, 3);
    ck_assert(!st_proto_agree(r(0, 4), r(1, 3), &a));
    ck_assert_uint_eq(a, 0);
    /* disjoint: each side too new for the other */
    ck_assert(!st_proto_agree(r(4, 5), r(1, 3), &a));
    ck_assert(!st_proto_agree(r(1, 3), r(4, 5), &a));
    ck_assert_uint_eq(a, 0);
    /* malformed: version 0, oldest above version */
    ck_assert(!st_proto_agree(r(0, 0), r(1, 1), &a));
    ck_assert(!st_proto_agree(r(1, 1), r(0, 0), &a));
    ck_assert(!st_proto_agree(r(3, 2), r(1, 3), &a));
    ck_assert_uint_eq(a, 0);
}
END_TEST

START_TEST(ours_agree)
{
    uint32_t a = 0;
    st_proto_range o = st_proto_ours();
    ck_assert_uint_eq(o.version, ST_PROTO_VERSION);
    ck_assert_uint_eq(o.oldest, ST_PROTO_OLDEST);
    ck_assert_uint_le(o.oldest, o.version);
    ck_assert_int_eq(st_proto_negotiate(o, NULL, "coordinator", &a), ST_OK);
    ck_assert_uint_eq(a, ST_PROTO_VERSION);
    /* a newer build that keeps speaking ours joins at ours */
    ck_assert_int_eq(st_proto_negotiate(r(ST_PROTO_VERSION, ST_PROTO_VERSION + 1), "9.9.9",
                                        "coordinator", &a),
                     ST_OK);
    ck_assert_uint_eq(a, ST_PROTO_VERSION);
}
END_TEST

START_TEST(refusal_names_both)
{
    uint32_t a = 7;
    char want[160];
    /* the form the coordinator's Join check has always used */
    ck_assert_int_eq(st_proto_negotiate(r(0, ST_PROTO_VERSION + 1), NULL, "coordinator", &a),
                     ST_EVERSION);
    ck_assert_uint_eq(a, 0);
    snprintf(want, sizeof want, "protocol %u; coordinator speaks %u", ST_PROTO_VERSION + 1,
             ST_PROTO_VERSION);
    ck_assert_str_eq(st_errdetail(), want);
    /* a range, and the builds when the peer names its own */
    ck_assert_int_eq(st_proto_negotiate(r(90, 99), "9.9.9 (commit abc, debug)", "coordinator", &a),
                     ST_EVERSION);
    snprintf(want, sizeof want,
             "protocol 90..99; coordinator speaks %u (peer strata 9.9.9 "
             "(commit abc, debug); coordinator strata %s)",
             ST_PROTO_VERSION, st_version_line());
    ck_assert_str_eq(st_errdetail(), want);
    ck_assert_int_eq(st_proto_negotiate(r(0, 0), "", "worker", &a), ST_EVERSION);
    snprintf(want, sizeof want, "protocol 0; worker speaks %u", ST_PROTO_VERSION);
    ck_assert_str_eq(st_errdetail(), want);
}
END_TEST

START_TEST(identity)
{
    const char *line = st_version_line();
    ck_assert_str_ne(st_version_release(), "");
    ck_assert_str_ne(st_version_commit(), "");
    ck_assert_str_ne(st_version_buildtype(), "");
    ck_assert_uint_le(strlen(line), ST_VERSION_LINE_MAX);
    char want[ST_VERSION_LINE_MAX + 1];
    snprintf(want, sizeof want, "%s (commit %s, %s)", st_version_release(), st_version_commit(),
             st_version_buildtype());
    ck_assert_str_eq(line, want);
}
END_TEST

START_TEST(print)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ck_assert_ptr_nonnull(f);
    st_version_print(f, "strata-test");
    fclose(f);
    char head[ST_VERSION_LINE_MAX + 32];
    snprintf(head, sizeof head, "strata-test %s\ncommit %s\nbuild %s\n", st_version_release(),
             st_version_commit(), st_version_buildtype());
    ck_assert_int_eq(strncmp(text, head, strlen(head)), 0);
    ck_assert_ptr_nonnull(strstr(text, "kernels compiled: ref"));
    ck_assert_ptr_nonnull(strstr(text, "this CPU runs: ref"));
    ck_assert_ptr_nonnull(strstr(text, "; selected: "));
    free(text);
    setenv("STRATA_KERNELS", "ref", 1);
    f = open_memstream(&text, &len);
    st_version_print(f, "strata-test");
    fclose(f);
    unsetenv("STRATA_KERNELS");
    ck_assert_ptr_nonnull(strstr(text, "; selected: ref\n"));
    free(text);
    char *argv_yes[] = {"strata", "--version", NULL},
         *argv_no[] = {"strata", "run", "--version", NULL};
    ck_assert(st_version_asked(2, argv_yes));
    ck_assert(!st_version_asked(3, argv_no));
    ck_assert(!st_version_asked(1, argv_yes));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("version");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, rule);
    tcase_add_test(tc, ours_agree);
    tcase_add_test(tc, refusal_names_both);
    tcase_add_test(tc, identity);
    tcase_add_test(tc, print);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
