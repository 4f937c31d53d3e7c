/* test_concurrency.c - the pipeline depth rule (coordinator/planner/concurrency.h):
 * workers of one host whose CPU lists intersect share cores; a group
 * computes min(members, cores / threads) batches at once; the depth is
 * the sum, within [1, stages x routes]; unknowns are hosts of their own
 * or (a CPU list) the whole host. */
#include <check.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/planner/concurrency.h"

static const uint8_t host_a[ST_HOST_ID_BYTES] = {1, 2, 3};
static const uint8_t host_b[ST_HOST_ID_BYTES] = {9, 9, 9};

static st_conc_worker wk(const char *name, const uint8_t *host, const char *cpus, uint32_t cores,
                         uint32_t threads)
{
    return (st_conc_worker){
        .name = name, .host_id = host, .cpus = cpus, .cores = cores, .threads = threads};
}

START_TEST(test_separate_hosts)
{
    /* three hosts (or three unknown ones): one batch per stage */
    st_conc_worker w[3] = {wk("a", host_a, "0-1", 2, 2), wk("b", host_b, "0-1", 2, 2),
                           wk("c", NULL, "0-1", 2, 2)};
    char why[256];
    ck_assert_uint_eq(st_conc_depth(w, 3, 3, why, sizeof why), 3);
    ck_assert_msg(strstr(why, "no workers share cores") != NULL, "%s", why);
}
END_TEST

START_TEST(test_one_host_two_cores)
{
    /* the test bed: 3 stages of 1 thread on one 2-core host -> 2 at once */
    st_conc_worker w[3] = {wk("h1", host_a, "0-1", 2, 1), wk("h2", host_a, "0-1", 2, 1),
                           wk("h3", host_a, "0-1", 2, 1)};
    char why[256];
    ck_assert_uint_eq(st_conc_depth(w, 3, 3, why, sizeof why), 2);
    ck_assert_msg(strstr(why, "3 workers (h1, h2, h3) share 2 cores at 1 threads: 2 at once") !=
                      NULL,
                  "%s", why);
    /* every worker on every core: one at a time */
    for (int i = 0; i < 3; i++)
        w[i].threads = 2;
    ck_assert_uint_eq(st_conc_depth(w, 3, 3, why, sizeof why), 1);
    /* many cores: the stages bound it */
    for (int i = 0; i < 3; i++) {
        w[i].cores = 64;
        w[i].threads = 4;
    }
    ck_assert_uint_eq(st_conc_depth(w, 3, 3, NULL, 0), 3);
}
END_TEST

START_TEST(test_disjoint_cpus)
{
    /* one host, each worker pinned to its own socket: no sharing */
    st_conc_worker w[2] = {wk("s0", host_a, "0-31", 32, 32), wk("s1", host_a, "32-63", 32, 32)};
    ck_assert_uint_eq(st_conc_depth(w, 2, 2, NULL, 0), 2);
    /* overlapping lists share, and the relation is transitive */
    st_conc_worker v[3] = {wk("x", host_a, "0-3", 4, 4), wk("y", host_a, "3-5", 3, 3),
                           wk("z", host_a, "5,8", 2, 2)};
    char why[256];
    ck_assert_uint_eq(st_conc_depth(v, 3, 3, why, sizeof why), 1);
    ck_assert_msg(strstr(why, "3 workers (x, y, z)") != NULL, "%s", why);
    /* an unknown list is the whole host: it joins both pinned workers */
    st_conc_worker u[3] = {wk("s0", host_a, "0-31", 32, 32), wk("s1", host_a, "32-63", 32, 32),
                           wk("any", host_a, "", 64, 64)};
    ck_assert_uint_eq(st_conc_depth(u, 3, 3, NULL, 0), 1);
}
END_TEST

START_TEST(test_bounds_and_bad_lists)
{
    st_conc_worker w[4] = {wk("a", host_a, "0-7", 8, 1), wk("b", host_a, "0-7", 8, 1),
                           wk("c", host_b, "0", 1, 1), wk("d", host_b, "0", 1, 1)};
    /* host a: 2 workers, 8 at once -> 2; host b: 1 core -> 1; cap 4 */
    ck_assert_uint_eq(st_conc_depth(w, 4, 4, NULL, 0), 3);
    ck_assert_uint_eq(st_conc_depth(w, 4, 2, NULL, 0), 2); /* stages x routes bounds it */
    ck_assert_uint_eq(st_conc_depth(w, 0, 3, NULL, 0), 1); /* nobody: still one batch */
    ck_assert_uint_eq(st_conc_depth(w, 4, 0, NULL, 0), 1);
    /* a list that does not parse is the whole host, and is named */
    st_conc_worker v[2] = {wk("bad", host_a, "0-x", 2, 1), wk("ok", host_a, "8-9", 2, 1)};
    char why[256];
    ck_assert_uint_eq(st_conc_depth(v, 2, 2, why, sizeof why), 2);
    ck_assert_msg(strstr(why, "2 workers (bad, ok) share") != NULL, "%s", why);
    ck_assert_msg(strstr(why, "bad's CPU list does not parse") != NULL, "%s", why);
    /* an infinite list does not parse either */
    v[0].cpus = "4-";
    ck_assert_uint_eq(st_conc_depth(v, 2, 2, why, sizeof why), 2);
    ck_assert_msg(strstr(why, "does not parse") != NULL, "%s", why);
    /* a short why buffer is terminated */
    char tiny[8];
    memset(tiny, 'x', sizeof tiny);
    st_conc_depth(v, 2, 2, tiny, sizeof tiny);
    ck_assert_uint_eq(strlen(tiny), sizeof tiny - 1);
}
END_TEST

START_TEST(test_this_host)
{
    /* common/base/host.h on this machine: a stable id, a CPU list that parses */
    uint8_t a[ST_HOST_ID_BYTES], b[ST_HOST_ID_BYTES];
    ck_assert_int_eq(st_host_id(a), ST_OK);
    ck_assert_int_eq(st_host_id(b), ST_OK);
    ck_assert(memcmp(a, b, sizeof a) == 0);
    char cpus[ST_HOST_CPUS_MAX];
    ck_assert_int_eq(st_host_cpus(cpus, sizeof cpus), ST_OK);
    bool x = false;
    ck_assert_int_eq(st_host_cpus_intersect(cpus, cpus, &x), ST_OK);
    ck_assert(x);
    char one[1] = {'x'};
    ck_assert_int_eq(st_host_cpus(one, sizeof one), ST_ERANGE); /* no room: "" */
    ck_assert_int_eq(one[0], '\0');
    ck_assert_int_eq(st_host_cpus_intersect("0-1", "2-3", &x), ST_OK);
    ck_assert(!x);
    ck_assert_int_eq(st_host_cpus_intersect("0-1", "1,7", &x), ST_OK);
    ck_assert(x);
    ck_assert_int_eq(st_host_cpus_intersect("0-1", "", &x), ST_EINVAL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("concurrency");
    TCase *t = tcase_create("concurrency");
    tcase_add_test(t, test_separate_hosts);
    tcase_add_test(t, test_one_host_two_cores);
    tcase_add_test(t, test_disjoint_cpus);
    tcase_add_test(t, test_bounds_and_bad_lists);
    tcase_add_test(t, test_this_host);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
