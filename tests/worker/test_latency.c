/* test_latency.c - per-layer latency: EMA (alpha 0.1) and the
 * nearest-rank p99 over the last 100 samples. */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "worker/daemon/latency.h"

START_TEST(test_ema)
{
    st_latency l;
    ck_assert_int_eq(st_latency_init(&l, 3, 2), ST_OK);
    st_lat_stat s;
    ck_assert_int_eq(st_latency_stat(&l, 3, &s), ST_OK);
    ck_assert_uint_eq(s.samples, 0);
    ck_assert(s.ema_ms == 0.0 && s.p99_ms == 0.0);
    ck_assert_int_eq(st_latency_add(&l, 3, 10.0), ST_OK);
    ck_assert_int_eq(st_latency_stat(&l, 3, &s), ST_OK);
    ck_assert(s.ema_ms == 10.0); /* the first sample initialises it */
    ck_assert_int_eq(st_latency_add(&l, 3, 20.0), ST_OK);
    ck_assert_int_eq(st_latency_stat(&l, 3, &s), ST_OK);
    ck_assert_double_eq_tol(s.ema_ms, 11.0, 1e-12);
    double ref = 11.0;
    for (int i = 0; i < 50; i++) {
        double x = (double)(i % 7) + 0.5;
        ck_assert_int_eq(st_latency_add(&l, 3, x), ST_OK);
        ref = 0.1 * x + 0.9 * ref;
    }
    ck_assert_int_eq(st_latency_stat(&l, 3, &s), ST_OK);
    ck_assert_double_eq_tol(s.ema_ms, ref, 1e-9);
    ck_assert_uint_eq(s.samples, 52);
    ck_assert_int_eq(s.layer, 3);
    /* the other layer is untouched */
    ck_assert_int_eq(st_latency_stat(&l, 4, &s), ST_OK);
    ck_assert_uint_eq(s.samples, 0);
    st_latency_fini(&l);
}
END_TEST

/* the one-token EMA takes only st_latency_add_one's samples (a lone decode
 * step's), and st_latency_add's EMA every step's: a prefill-sized sample
 * moves the one and not the other */
START_TEST(test_one_token)
{
    st_latency l;
    ck_assert_int_eq(st_latency_init(&l, 0, 1), ST_OK);
    st_lat_stat s;
    for (int i = 0; i < 10; i++) {
        ck_assert_int_eq(st_latency_add(&l, 0, 2.0), ST_OK);
        ck_assert_int_eq(st_latency_add_one(&l, 0, 2.0), ST_OK);
    }
    ck_assert_int_eq(st_latency_add(&l, 0, 60.0), ST_OK); /* a 128-token chunk's step */
    ck_assert_int_eq(st_latency_stat(&l, 0, &s), ST_OK);
    ck_assert_double_eq_tol(s.ema_ms, 0.1 * 60.0 + 0.9 * 2.0, 1e-12);
    ck_assert_uint_eq(s.samples, 11);
    ck_assert(s.one_ema_ms == 2.0);
    ck_assert_uint_eq(s.one_samples, 10);
    ck_assert_int_eq(st_latency_add_one(&l, 0, 3.0), ST_OK);
    ck_assert_int_eq(st_latency_stat(&l, 0, &s), ST_OK);
    ck_assert_double_eq_tol(s.one_ema_ms, 0.1 * 3.0 + 0.9 * 2.0, 1e-12);
    ck_assert_uint_eq(s.samples, 11); /* add_one does not count in the all-steps EMA */
    ck_assert_int_eq(st_latency_add_one(&l, 1, 1.0), ST_ERANGE);
    ck_assert_int_eq(st_latency_add_one(&l, 0, NAN), ST_EINVAL);
    ck_assert_int_eq(st_latency_add_one(&l, 0, -1.0), ST_EINVAL);
    ck_assert_int_eq(st_latency_stat(&l, 0, &s), ST_OK);
    ck_assert_uint_eq(s.one_samples, 11);
    st_latency_reset(&l);
    ck_assert_int_eq(st_latency_stat(&l, 0, &s), ST_OK);
    ck_assert(s.one_samples == 0 && s.one_ema_ms == 0.0);
    st_latency_fini(&l);
}
END_TEST

START_TEST(test_p99_window)
{
    st_latency l;
    ck_assert_int_eq(st_latency_init(&l, 0, 1), ST_OK);
    st_lat_stat s;
    /* 1..10: fewer than 100 samples, the p99 is the largest */
    for (int i = 1; i <= 10; i++)
        st_latency_add(&l, 0, (double)i);
    st_latency_stat(&l, 0, &s);
    ck_assert(s.p99_ms == 10.0);
    /* 100 samples 1..100 in a scrambled order: rank 99 is 99 */
    st_latency_reset(&l);
    for (int i = 0; i < 100; i++)
        st_latency_add(&l, 0, (double)(((i * 37) % 100) + 1));
    st_latency_stat(&l, 0, &s);
    ck_assert_uint_eq(s.samples, 100);
    ck_assert(s.p99_ms == 99.0);
    /* 50 more, 101..150: the window holds 51..150, p99 = 149 */
    for (int i = 101; i <= 150; i++)
        st_latency_add(&l, 0, (double)i);
    st_latency_stat(&l, 0, &s);
    ck_assert_uint_eq(s.samples, 150);
    ck_assert(s.p99_ms == 149.0);
    /* one huge outlier leaves the window after 100 more samples */
    st_latency_add(&l, 0, 1e6);
    st_latency_stat(&l, 0, &s);
    ck_assert(s.p99_ms == 150.0); /* the largest is at rank 100, p99 is rank 99 */
    for (int i = 0; i < 100; i++)
        st_latency_add(&l, 0, 1.0);
    st_latency_stat(&l, 0, &s);
    ck_assert(s.p99_ms == 1.0);
    st_latency_fini(&l);
}
END_TEST

START_TEST(test_p99_function)
{
    double v[ST_LAT_WINDOW] = {0};
    ck_assert(st_latency_p99(v, 0) == 0.0);
    v[0] = 4.0;
    ck_assert(st_latency_p99(v, 1) == 4.0);
    for (int i = 0; i < ST_LAT_WINDOW; i++)
        v[i] = (double)(ST_LAT_WINDOW - i);    /* descending; must not be modified */
    ck_assert(st_latency_p99(v, 50) == 100.0); /* rank ceil(49.5) = 50 of 51..100 */
    ck_assert(st_latency_p99(v, 100) == 99.0);
    ck_assert(v[0] == 100.0 && v[99] == 1.0);
}
END_TEST

START_TEST(test_invalid)
{
    st_latency l;
    ck_assert_int_eq(st_latency_init(&l, -1, 2), ST_EINVAL);
    ck_assert_int_eq(st_latency_init(&l, 0, -2), ST_EINVAL);
    ck_assert_int_eq(st_latency_init(&l, 5, 0), ST_OK); /* a spare tracks nothing */
    st_lat_stat s;
    ck_assert_int_eq(st_latency_stat(&l, 5, &s), ST_ERANGE);
    st_latency_fini(&l);
    ck_assert_int_eq(st_latency_init(&l, 2, 3), ST_OK);
    ck_assert_int_eq(st_latency_add(&l, 1, 1.0), ST_ERANGE);
    ck_assert_int_eq(st_latency_add(&l, 5, 1.0), ST_ERANGE);
    ck_assert_int_eq(st_latency_add(&l, 2, -1.0), ST_EINVAL);
    ck_assert_int_eq(st_latency_add(&l, 2, NAN), ST_EINVAL);
    ck_assert_int_eq(st_latency_add(&l, 2, INFINITY), ST_EINVAL);
    ck_assert_int_eq(st_latency_stat(&l, 2, &s), ST_OK);
    ck_assert_uint_eq(s.samples, 0); /* nothing was recorded */
    ck_assert_int_eq(st_latency_add(&l, 4, 0.0), ST_OK);
    ck_assert_int_eq(st_latency_stat(&l, 4, &s), ST_OK);
    ck_assert_uint_eq(s.samples, 1);
    st_latency_reset(&l);
    ck_assert_int_eq(st_latency_stat(&l, 4, &s), ST_OK);
    ck_assert_uint_eq(s.samples, 0);
    st_latency_fini(&l);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("latency");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_ema);
    tcase_add_test(tc, test_one_token);
    tcase_add_test(tc, test_p99_window);
    tcase_add_test(tc, test_p99_function);
    tcase_add_test(tc, test_invalid);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
