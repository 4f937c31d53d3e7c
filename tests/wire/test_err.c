/* test_err.c - the per-thread error detail (common/base/err.h): st_errwrap puts
 * a context in front of the detail a callee recorded, stands alone when
 * there was none, nests, takes its arguments from the old detail itself,
 * and marks a detail cut to fit its buffer with "..." instead of cutting
 * it silently. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/err.h"

#define TE_LONG 2000

START_TEST(test_wrap_prefixes)
{
    ck_assert_int_eq(st_errorf(ST_EINVAL, "temp %s must be >= 0", "nan"), ST_EINVAL);
    ck_assert_int_eq(st_errwrap(ST_EINVAL, "row %d (session %d)", 3, 77), ST_EINVAL);
    ck_assert_str_eq(st_errdetail(), "row 3 (session 77): temp nan must be >= 0");
    ck_assert_int_eq(st_errwrap(ST_EPROTO, "batch %d", 9), ST_EPROTO); /* returns its code */
    ck_assert_str_eq(st_errdetail(), "batch 9: row 3 (session 77): temp nan must be >= 0");
    ck_assert_str_eq(st_errmsg(ST_EPROTO),
                     "protocol error: batch 9: row 3 (session 77): temp nan must be >= 0");
}
END_TEST

START_TEST(test_wrap_without_detail)
{
    st_errclear();
    ck_assert_int_eq(st_errwrap(ST_ENOMEM, "KV cache of session %d", 5), ST_ENOMEM);
    ck_assert_str_eq(st_errdetail(), "KV cache of session 5");
}
END_TEST

/* the arguments may point into the detail being wrapped */
START_TEST(test_wrap_own_detail)
{
    st_errorf(ST_EIO, "disk");
    st_errwrap(ST_EIO, "%s again", st_errdetail());
    ck_assert_str_eq(st_errdetail(), "disk again: disk");
}
END_TEST

START_TEST(test_wrap_long_marked)
{
    char *big = malloc(TE_LONG + 1);
    ck_assert_ptr_nonnull(big);
    memset(big, 'x', TE_LONG);
    big[TE_LONG] = '\0';
    st_errorf(ST_ERANGE, "%s", big);
    st_errwrap(ST_ERANGE, "stage %d", 2);
    const char *d = st_errdetail();
    size_t n = strlen(d);
    ck_assert_uint_lt(n, TE_LONG);
    ck_assert_int_eq(strncmp(d, "stage 2: xxx", 12), 0);
    ck_assert_str_eq(d + n - 3, "...");
    /* a context longer than the buffer alone */
    st_errclear();
    st_errwrap(ST_ERANGE, "%s", big);
    d = st_errdetail();
    n = strlen(d);
    ck_assert_uint_lt(n, TE_LONG);
    ck_assert_str_eq(d + n - 3, "...");
    free(big);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("err");
    TCase *tc = tcase_create("wrap");
    tcase_add_test(tc, test_wrap_prefixes);
    tcase_add_test(tc, test_wrap_without_detail);
    tcase_add_test(tc, test_wrap_own_detail);
    tcase_add_test(tc, test_wrap_long_marked);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
