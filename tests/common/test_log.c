/* test_log.c - the level names of common/base/log.h: each name is its level,
 * nothing else is one, and st_log_init follows them. */
#include <check.h>
#include <stddef.h>

#include "common/base/log.h"

START_TEST(names)
{
    static const struct {
        const char *name;
        st_log_level lvl;
    } known[] = {{"error", ST_LOG_ERROR},
                 {"warn", ST_LOG_WARN},
                 {"info", ST_LOG_INFO},
                 {"debug", ST_LOG_DEBUG}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        st_log_level l = ST_LOG_ERROR == known[i].lvl ? ST_LOG_DEBUG : ST_LOG_ERROR;
        ck_assert(st_log_level_from_name(known[i].name, &l));
        ck_assert_int_eq(l, known[i].lvl);
        ck_assert(st_log_level_from_name(known[i].name, NULL));
    }
    static const char *const bad[] = {"", "Error", "warning", "trace", "info ", "3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        st_log_level l = ST_LOG_INFO;
        ck_assert_msg(!st_log_level_from_name(bad[i], &l), "'%s' accepted", bad[i]);
        ck_assert_int_eq(l, ST_LOG_INFO);
    }
}
END_TEST

START_TEST(init_follows_names)
{
    st_log_init("debug");
    ck_assert(st_log_enabled(ST_LOG_DEBUG));
    st_log_init("error");
    ck_assert(!st_log_enabled(ST_LOG_WARN));
    ck_assert(st_log_enabled(ST_LOG_ERROR));
    st_log_init("nonsense"); /* an unknown name leaves the level */
    ck_assert(!st_log_enabled(ST_LOG_WARN));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("log");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, names);
    tcase_add_test(tc, init_follows_names);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
