/* test_units.c - the byte-count grammar of common/base/units.h: every form it
 * accepts, exactly (decimals included), and what it refuses, each with a
 * detail that quotes the input; and its two printers, at each unit's
 * boundary. */
#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "common/base/units.h"

static uint64_t ok(const char *s)
{
    uint64_t v = 0;
    st_err e = st_parse_bytes(s, &v);
    ck_assert_msg(e == ST_OK, "'%s': %s", s, st_errmsg(e));
    return v;
}

/* bad - s is refused with ST_EINVAL, *out untouched, the detail quoting s
 * and containing what. */
static void bad(const char *s, const char *what)
{
    uint64_t v = 7;
    ck_assert_int_eq(st_parse_bytes(s, &v), ST_EINVAL);
    ck_assert_uint_eq(v, 7);
    if (s != NULL && s[0] != '\0')
        ck_assert_msg(strstr(st_errdetail(), s) != NULL, "detail '%s' does not quote '%s'",
                      st_errdetail(), s);
    ck_assert_msg(strstr(st_errdetail(), what) != NULL, "detail '%s' does not say '%s'",
                  st_errdetail(), what);
}

START_TEST(plain_and_suffixed)
{
    ck_assert_uint_eq(ok("0"), 0);
    ck_assert_uint_eq(ok("123"), 123);
    ck_assert_uint_eq(ok("512B"), 512);
    ck_assert_uint_eq(ok("512b"), 512);
    ck_assert_uint_eq(ok("64k"), 64u << 10);
    ck_assert_uint_eq(ok("64K"), 64u << 10);
    ck_assert_uint_eq(ok("512M"), 512ull << 20);
    ck_assert_uint_eq(ok("512m"), 512ull << 20);
    ck_assert_uint_eq(ok("2G"), 2ull << 30);
    ck_assert_uint_eq(ok("2g"), 2ull << 30);
    ck_assert_uint_eq(ok("1T"), 1ull << 40);
    ck_assert_uint_eq(ok("16GiB"), 16ull << 30);
    ck_assert_uint_eq(ok("16gib"), 16ull << 30);
    ck_assert_uint_eq(ok("4KiB"), 4096);
    ck_assert_uint_eq(ok("007M"), 7ull << 20);
}
END_TEST

START_TEST(exact_decimals)
{
    ck_assert_uint_eq(ok("1.5T"), 3ull << 39);
    ck_assert_uint_eq(ok("0.5k"), 512);
    ck_assert_uint_eq(ok("0.25G"), 1ull << 28);
    ck_assert_uint_eq(ok("1.0"), 1);
    ck_assert_uint_eq(ok("2.50M"), 5ull << 19);
    ck_assert_uint_eq(ok("1.125k"), 1152);
    ck_assert_uint_eq(ok("3.75GiB"), 15ull << 28);
    bad("1.5", "whole number");
    bad("1.1k", "whole number"); /* 1126.4 */
    bad("1.1T", "whole number"); /* 1209462790553.6 */
    bad("1.", "decimal point");
    bad("1.0000000000000000000", "decimals"); /* 19 decimals */
}
END_TEST

START_TEST(limits)
{
    ck_assert_uint_eq(ok("18446744073709551615"), UINT64_MAX);
    ck_assert_uint_eq(ok("16777215T"), ((1ull << 24) - 1) << 40);
    bad("18446744073709551616", "overflows");
    bad("16777216T", "overflows");
    bad("99999999999999999999999999999999", "overflows");
    bad("16777216.5T", "overflows");
    ck_assert_uint_eq(ok("16777215.9990234375T"), UINT64_MAX - (1ull << 40) + (1023ull << 30) + 1);
}
END_TEST

START_TEST(garbage)
{
    bad(NULL, "digit");
    bad("", "digit");
    bad("-1", "digit");
    bad("+1", "digit");
    bad(" 1", "digit");
    bad(".5G", "digit");
    bad("1 G", "not a unit");
    bad("1e30", "not a unit");
    bad("12Q", "not a unit");
    bad("1GG", "not a unit");
    bad("1Gi", "not a unit");
    bad("1GiBs", "not a unit");
    bad("1iB", "not a unit");
    bad("5GB", "ambiguous");
    bad("5gb", "ambiguous");
    bad("5MB", "ambiguous");
    bad("0x10", "not a unit");
}
END_TEST

/* fmt - st_fmt_bytes (exact: st_fmt_bytes_exact) of b equals want. */
static void fmt(bool exact, uint64_t b, const char *want)
{
    char buf[ST_FMT_BYTES_CAP];
    const char *got = exact ? st_fmt_bytes_exact(b, buf, sizeof buf)
                            : st_fmt_bytes(b, buf, sizeof buf);
    ck_assert_ptr_eq(got, buf);
    ck_assert_str_eq(got, want);
}

START_TEST(printing)
{
    fmt(false, 0, "0 B");
    fmt(false, 1023, "1023 B");
    fmt(false, 1024, "1.0 KiB");
    fmt(false, 1536, "1.5 KiB");
    fmt(false, (1ull << 20) - 1, "1024.0 KiB");
    fmt(false, 1ull << 20, "1.0 MiB");
    fmt(false, 3ull << 29, "1.50 GiB");
    fmt(false, UINT64_MAX, "17179869184.00 GiB");
    fmt(true, 0, "0 B");
    fmt(true, 1048575, "1048575 B");
    fmt(true, 1ull << 20, "1.00 MiB (1048576 B)");
    fmt(true, 3ull << 29, "1.50 GiB (1610612736 B)");
    fmt(true, UINT64_MAX - 1, "17179869184.00 GiB (18446744073709551614 B)");
    fmt(true, UINT64_MAX, "more than 16 EiB");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("units");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, plain_and_suffixed);
    tcase_add_test(tc, exact_decimals);
    tcase_add_test(tc, limits);
    tcase_add_test(tc, garbage);
    tcase_add_test(tc, printing);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
