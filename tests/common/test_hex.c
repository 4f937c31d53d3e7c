/* test_hex.c - common/base/hex.h: digits, the buffer check (nothing but "" on
 * a short buffer), and the short prefix of messages. */
#include <check.h>
#include <string.h>

#include "common/base/hex.h"

static const uint8_t bytes[] = {0x00, 0x01, 0x7f, 0x80, 0xab, 0xcd, 0xef, 0xff, 0x3c, 0xa5};

START_TEST(digits)
{
    char out[2 * sizeof bytes + 1];
    ck_assert_int_eq(st_hex(bytes, sizeof bytes, out, sizeof out), ST_OK);
    ck_assert_str_eq(out, "00017f80abcdefff3ca5");
    ck_assert_int_eq(st_hex(bytes, 0, out, 1), ST_OK);
    ck_assert_str_eq(out, "");
    ck_assert_int_eq(st_hex(NULL, 0, out, sizeof out), ST_OK);
    ck_assert_str_eq(out, "");
}
END_TEST

START_TEST(buffer_checked)
{
    char out[2 * sizeof bytes + 1];
    memset(out, 'x', sizeof out);
    ck_assert_int_eq(st_hex(bytes, sizeof bytes, out, sizeof out - 1), ST_ERANGE);
    ck_assert_str_eq(out, "");
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "10 bytes"));
    ck_assert_int_eq(st_hex(bytes, 1, out, 2), ST_ERANGE);
    ck_assert_str_eq(out, "");
    ck_assert_int_eq(st_hex(bytes, 1, out, 0), ST_ERANGE);
    ck_assert_int_eq(st_hex(bytes, 1, out, 3), ST_OK);
    ck_assert_str_eq(out, "00");
}
END_TEST

START_TEST(short_prefix)
{
    char out[ST_HEX_SHORT_CAP];
    st_hex_short(bytes, sizeof bytes, out);
    ck_assert_str_eq(out, "00017f80abcdefff");
    st_hex_short(bytes + 4, 3, out);
    ck_assert_str_eq(out, "abcdef");
    st_hex_short(bytes, 0, out);
    ck_assert_str_eq(out, "");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("hex");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, digits);
    tcase_add_test(tc, buffer_checked);
    tcase_add_test(tc, short_prefix);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
