/* test_links.c - the coordinator's link matrix (coordinator/planner/links.h):
 * measured pairs from the workers' reports, the freshest report winning,
 * bad or stale reports ignored, and the assumption for the rest. */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "coordinator/planner/links.h"

static const uint64_t ids[3] = {11, 22, 33};
static const double rtt[3] = {0.4, 0.8, 1.2};

START_TEST(test_fallback_only)
{
    st_link m[9];
    ck_assert_uint_eq(st_links_fill(ids, 3, rtt, 1e9, NULL, 0, 600, m), 0);
    for (size_t a = 0; a < 3; a++)
        for (size_t b = 0; b < 3; b++) {
            const st_link *l = &m[a * 3 + b];
            ck_assert(!l->measured);
            ck_assert_double_eq(l->bw, 1e9);
            double want = a == b ? 0 : (rtt[a] + rtt[b]) / 4 * 1e-3;
            ck_assert_double_eq_tol(l->latency_s, want, 1e-15);
        }
}
END_TEST

START_TEST(test_measured_and_direction)
{
    st_link_obs o[] = {
        {.from = 11, .to = 22, .latency_s = 0.0001, .bw = 120e6, .samples = 8, .age_s = 3},
        {.from = 22, .to = 11, .latency_s = 0.0002, .bw = 900e6, .samples = 8, .age_s = 1},
        {.from = 33, .to = 99, .latency_s = 0.0001, .bw = 1e9, .samples = 8, .age_s = 1}, /* unknown
                                                                                           */
    };
    st_link m[9];
    ck_assert_uint_eq(st_links_fill(ids, 3, rtt, 1e9, o, 3, 600, m), 2);
    ck_assert(m[0 * 3 + 1].measured);
    ck_assert_double_eq(m[0 * 3 + 1].bw, 120e6); /* 11 -> 22 is what 11 measured */
    ck_assert_double_eq(m[0 * 3 + 1].latency_s, 0.0001);
    ck_assert_uint_eq(m[0 * 3 + 1].samples, 8);
    ck_assert_double_eq(m[0 * 3 + 1].age_s, 3);
    ck_assert(m[1 * 3 + 0].measured);
    ck_assert_double_eq(m[1 * 3 + 0].bw, 900e6);
    /* the others are assumed */
    ck_assert(!m[0 * 3 + 2].measured && !m[2 * 3 + 0].measured && !m[1 * 3 + 2].measured);
    ck_assert_double_eq_tol(m[1 * 3 + 2].latency_s, (0.8 + 1.2) / 4 * 1e-3, 1e-15);
    ck_assert(!m[0].measured && m[0].latency_s == 0);
}
END_TEST

START_TEST(test_freshest_wins)
{
    st_link_obs o[] = {
        {.from = 11, .to = 33, .latency_s = 0.001, .bw = 1e8, .samples = 8, .age_s = 50},
        {.from = 11, .to = 33, .latency_s = 0.002, .bw = 2e8, .samples = 8, .age_s = 5},
        {.from = 11, .to = 33, .latency_s = 0.003, .bw = 3e8, .samples = 8, .age_s = 20},
    };
    st_link m[9];
    ck_assert_uint_eq(st_links_fill(ids, 3, rtt, 1e9, o, 3, 600, m), 1);
    ck_assert_double_eq(m[0 * 3 + 2].bw, 2e8);
    ck_assert_double_eq(m[0 * 3 + 2].age_s, 5);
}
END_TEST

START_TEST(test_bad_reports_ignored)
{
    st_link_obs o[] = {
        {.from = 11, .to = 22, .latency_s = NAN, .bw = 1e8, .samples = 8, .age_s = 1},
        {.from = 11, .to = 33, .latency_s = 0.001, .bw = INFINITY, .samples = 8, .age_s = 1},
        {.from = 22, .to = 11, .latency_s = 0.001, .bw = 1e8, .samples = 8, .age_s = 700},
        {.from = 22, .to = 33, .latency_s = 0.001, .bw = 1e8, .samples = 0, .age_s = 1},
        {.from = 33, .to = 33, .latency_s = 0.001, .bw = 1e8, .samples = 8, .age_s = 1},
        {.from = 33, .to = 11, .latency_s = -1, .bw = 1e8, .samples = 8, .age_s = 1},
        {.from = 33, .to = 22, .latency_s = 0.001, .bw = 10, .samples = 8, .age_s = 1},
        {.from = 0, .to = 22, .latency_s = 0.001, .bw = 1e8, .samples = 8, .age_s = 1},
    };
    st_link m[9];
    ck_assert_uint_eq(st_links_fill(ids, 3, rtt, 1e9, o, 8, 600, m), 0);
    for (size_t i = 0; i < 9; i++)
        ck_assert(!m[i].measured && m[i].bw == 1e9);
    /* the stale one counts with a longer allowed age */
    ck_assert_uint_eq(st_links_fill(ids, 3, rtt, 1e9, o, 8, 800, m), 1);
    ck_assert(m[1 * 3 + 0].measured);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("links");
    TCase *t = tcase_create("links");
    tcase_add_test(t, test_fallback_only);
    tcase_add_test(t, test_measured_and_direction);
    tcase_add_test(t, test_freshest_wins);
    tcase_add_test(t, test_bad_reports_ignored);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
