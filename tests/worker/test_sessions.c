/* test_sessions.c - the worker's session -> KV slot map: bounds, LRU
 * eviction, pinning, ending, resizing, against a reference model. */
#include <check.h>
#include <stdlib.h>

#include "worker/data/sessions.h"

static st_kv *kv_new(void)
{
    st_kv *kv = NULL;
    ck_assert_int_eq(st_kv_alloc(1, 4, 4, 4, ST_DT_F32, &kv), ST_OK);
    return kv;
}

/* acq - acquires id with pin; asserts success; gives the cache a KV. */
static st_session *acq(st_sessions *s, uint64_t id, uint64_t pin, bool *fresh)
{
    st_session *x = NULL;
    bool f = false;
    ck_assert_int_eq(st_sessions_acquire(s, id, pin, &x, &f), ST_OK);
    ck_assert_ptr_nonnull(x);
    ck_assert_uint_eq(x->id, id);
    if (x->kv == NULL)
        x->kv = kv_new();
    if (fresh)
        *fresh = f;
    return x;
}

START_TEST(test_init_bounds)
{
    st_sessions s;
    ck_assert_int_eq(st_sessions_init(&s, 0), ST_EINVAL);
    ck_assert_int_eq(st_sessions_init(&s, ST_SESSIONS_MAX + 1), ST_EINVAL);
    ck_assert_int_eq(st_sessions_init(&s, 1), ST_OK);
    ck_assert_uint_eq(st_sessions_count(&s), 0);
    ck_assert_ptr_null(st_sessions_find(&s, 1));
    st_sessions_fini(&s);
    st_sessions_fini(&s); /* a finished set is a no-op */
}
END_TEST

START_TEST(test_acquire_find)
{
    st_sessions s;
    ck_assert_int_eq(st_sessions_init(&s, 4), ST_OK);
    bool fresh;
    st_session *a = acq(&s, 42, 1, &fresh);
    ck_assert(fresh);
    ck_assert_uint_eq(st_sessions_count(&s), 1);
    st_session *b = acq(&s, 42, 2, &fresh);
    ck_assert(!fresh);
    ck_assert_ptr_eq(a, b);
    ck_assert_uint_eq(b->pin, 2);
    ck_assert_ptr_eq(st_sessions_find(&s, 42), a);
    ck_assert_ptr_null(st_sessions_find(&s, 43));
    ck_assert_uint_eq(st_sessions_count(&s), 1);
    st_sessions_fini(&s);
}
END_TEST

START_TEST(test_lru_eviction_reuses_cache)
{
    st_sessions s;
    ck_assert_int_eq(st_sessions_init(&s, 3), ST_OK);
    acq(&s, 1, 1, NULL);
    st_kv *kv2 = acq(&s, 2, 2, NULL)->kv;
    acq(&s, 3, 3, NULL);
    acq(&s, 1, 4, NULL); /* 1 becomes the most recent: 2 is the least */
    bool fresh;
    st_session *x = acq(&s, 4, 5, &fresh);
    ck_assert(fresh);
    ck_assert_ptr_eq(x->kv, kv2); /* the evicted session's cache is handed over */
    ck_assert_ptr_null(st_sessions_find(&s, 2));
    ck_assert_ptr_nonnull(st_sessions_find(&s, 1));
    ck_assert_ptr_nonnull(st_sessions_find(&s, 3));
    ck_assert_ptr_nonnull(st_sessions_find(&s, 4));
    ck_assert_uint_eq(st_sessions_count(&s), 3);
    ck_assert_uint_eq(s.evictions, 1);
    acq(&s, 5, 6, NULL); /* now 3 is the least recent */
    ck_assert_ptr_null(st_sessions_find(&s, 3));
    ck_assert_uint_eq(s.evictions, 2);
    st_sessions_fini(&s);
}
END_TEST

START_TEST(test_pinned_not_evicted)
{
    st_sessions s;
    ck_assert_int_eq(st_sessions_init(&s, 2), ST_OK);
    acq(&s, 1, 5, NULL);
    acq(&s, 2, 6, NULL);
    /* the least recent (1) carries the current pin 5: 2 goes instead */
    acq(&s, 3, 5, NULL);
    ck_assert_ptr_nonnull(st_sessions_find(&s, 1));
    ck_assert_ptr_null(st_sessions_find(&s, 2));
    /* every slot pinned with 5: a new session is refused, nothing changes */
    st_session *x = (st_session *)1;
    bool fresh = true;
    ck_assert_int_eq(st_sessions_acquire(&s, 4, 5, &x, &fresh), ST_EBUSY);
    ck_assert_ptr_null(x);
    ck_assert(!fresh);
    ck_assert_uint_eq(st_sessions_count(&s), 2);
    ck_assert_ptr_nonnull(st_sessions_find(&s, 1));
    ck_assert_ptr_nonnull(st_sessions_find(&s, 3));
    ck_assert_ptr_null(st_sessions_find(&s, 4));
    /* the next batch (pin 6) may evict */
    acq(&s, 4, 6, NULL);
    ck_assert_ptr_null(st_sessions_find(&s, 1));
    st_sessions_fini(&s);
}
END_TEST

START_TEST(test_end_and_clear)
{
    st_sessions s;
    ck_assert_int_eq(st_sessions_init(&s, 2), ST_OK);
    acq(&s, 10, 1, NULL);
    acq(&s, 20, 2, NULL);
    ck_assert(st_sessions_end(&s, 10));
    ck_assert(!st_sessions_end(&s, 10));
    ck_assert(!st_sessions_end(&s, 99));
    ck_assert_uint_eq(st_sessions_count(&s), 1);
    ck_assert_ptr_null(st_sessions_find(&s, 10));
    bool fresh;
    st_session *x = acq(&s, 30, 3, &fresh); /* a free slot: nothing evicted */
    ck_assert(fresh);
    ck_assert_uint_eq(s.evictions, 0);
    ck_assert_ptr_nonnull(st_sessions_find(&s, 20));
    ck_assert_ptr_eq(st_sessions_find(&s, 30), x);
    st_sessions_clear(&s);
    ck_assert_uint_eq(st_sessions_count(&s), 0);
    ck_assert_ptr_null(st_sessions_find(&s, 20));
    ck_assert_ptr_null(st_sessions_find(&s, 30));
    acq(&s, 40, 4, NULL);
    acq(&s, 50, 5, NULL);
    ck_assert_uint_eq(st_sessions_count(&s), 2);
    ck_assert_uint_eq(s.evictions, 0);
    st_sessions_fini(&s);
}
END_TEST

/* an ended session's cache waits on its slot for the next session: no
 * allocation in steady state, never more than cap caches */
START_TEST(test_end_keeps_cache_for_reuse)
{
    st_sessions s;
    ck_assert_int_eq(st_sessions_init(&s, 2), ST_OK);
    st_kv *k1 = acq(&s, 1, 1, NULL)->kv;
    st_kv *k2 = acq(&s, 2, 2, NULL)->kv;
    ck_assert_uint_eq(st_sessions_kv_count(&s), 2);
    ck_assert(st_sessions_end(&s, 1));
    ck_assert_uint_eq(st_sessions_count(&s), 1);
    ck_assert_uint_eq(st_sessions_kv_count(&s), 2);
    bool fresh;
    st_session *x = acq(&s, 3, 3, &fresh);
    ck_assert(fresh);
    ck_assert_ptr_eq(x->kv, k1); /* the ended session's cache, to be reset by the caller */
    ck_assert(st_sessions_end(&s, 2));
    ck_assert(st_sessions_end(&s, 3));
    for (uint64_t id = 10; id < 50; id++) { /* churn: still the same two caches */
        st_session *y = acq(&s, id, id, NULL);
        ck_assert(y->kv == k1 || y->kv == k2);
        ck_assert_uint_eq(st_sessions_kv_count(&s), 2);
        if (id % 3 == 0)
            ck_assert(st_sessions_end(&s, id));
    }
    ck_assert_int_eq(st_sessions_resize(&s, 1), ST_OK); /* frees what does not fit */
    ck_assert_uint_eq(st_sessions_kv_count(&s), 1);
    ck_assert(st_sessions_end(&s, 49));
    ck_assert_uint_eq(st_sessions_kv_count(&s), 1);
    ck_assert_int_eq(st_sessions_resize(&s, 3), ST_OK); /* a kept free cache is freed */
    ck_assert_uint_eq(st_sessions_kv_count(&s), 0);
    st_sessions_clear(&s);
    ck_assert_uint_eq(st_sessions_kv_count(&s), 0);
    st_sessions_fini(&s);
}
END_TEST

START_TEST(test_resize_keeps_most_recent)
{
    st_sessions s;
    ck_assert_int_eq(st_sessions_init(&s, 4), ST_OK);
    for (uint64_t id = 1; id <= 4; id++)
        acq(&s, id, id, NULL);
    st_kv *kv3 = st_sessions_find(&s, 3)->kv;
    ck_assert_int_eq(st_sessions_resize(&s, 0), ST_EINVAL);
    ck_assert_uint_eq(st_sessions_count(&s), 4);
    ck_assert_int_eq(st_sessions_resize(&s, 2), ST_OK);
    ck_assert_uint_eq(s.cap, 2);
    ck_assert_uint_eq(st_sessions_count(&s), 2);
    ck_assert_ptr_null(st_sessions_find(&s, 1));
    ck_assert_ptr_null(st_sessions_find(&s, 2));
    ck_assert_ptr_eq(st_sessions_find(&s, 3)->kv, kv3);
    ck_assert_ptr_nonnull(st_sessions_find(&s, 4));
    acq(&s, 5, 9, NULL); /* the order survived: 3 is the least recent */
    ck_assert_ptr_null(st_sessions_find(&s, 3));
    ck_assert_int_eq(st_sessions_resize(&s, 8), ST_OK);
    ck_assert_uint_eq(st_sessions_count(&s), 2);
    for (uint64_t id = 10; id < 16; id++)
        acq(&s, id, id, NULL);
    ck_assert_uint_eq(st_sessions_count(&s), 8);
    ck_assert_ptr_nonnull(st_sessions_find(&s, 4));
    ck_assert_ptr_nonnull(st_sessions_find(&s, 5));
    st_sessions_fini(&s);
}
END_TEST

/* A reference LRU over a plain array, most recent last. */
typedef struct ref_lru {
    uint64_t ids[64];
    uint64_t pins[64];
    int n, cap;
} ref_lru;

static int ref_find(const ref_lru *r, uint64_t id)
{
    for (int i = 0; i < r->n; i++)
        if (r->ids[i] == id)
            return i;
    return -1;
}

static void ref_remove(ref_lru *r, int i)
{
    for (int j = i; j + 1 < r->n; j++) {
        r->ids[j] = r->ids[j + 1];
        r->pins[j] = r->pins[j + 1];
    }
    r->n--;
}

/* ref_acquire - returns 0, or -1 when every entry carries pin. */
static int ref_acquire(ref_lru *r, uint64_t id, uint64_t pin)
{
    int i = ref_find(r, id);
    if (i >= 0) {
        ref_remove(r, i);
    } else if (r->n == r->cap) {
        int v = 0;
        while (v < r->n && r->pins[v] == pin)
            v++;
        if (v == r->n)
            return -1;
        ref_remove(r, v);
    }
    r->ids[r->n] = id;
    r->pins[r->n] = pin;
    r->n++;
    return 0;
}

START_TEST(test_random_against_reference)
{
    const int cap = 16;
    st_sessions s;
    ck_assert_int_eq(st_sessions_init(&s, (uint32_t)cap), ST_OK);
    ref_lru r = {.cap = cap};
    uint64_t seed = 12345, pin = 1;
    for (int op = 0; op < 20000; op++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t rnd = (uint32_t)(seed >> 33);
        /* ids spread over the high bits too, so hash clusters and wrap-around happen */
        uint64_t id = (uint64_t)(rnd % 40) * 0x100000001ull + (rnd % 40 < 20 ? 0 : (1ull << 63));
        if (rnd % 7 == 0)
            pin++; /* a new batch */
        if (rnd % 11 == 0) {
            bool had = ref_find(&r, id) >= 0;
            ck_assert_int_eq(st_sessions_end(&s, id), had);
            if (had)
                ref_remove(&r, ref_find(&r, id));
        } else {
            st_session *x;
            bool fresh;
            st_err e = st_sessions_acquire(&s, id, pin, &x, &fresh);
            int want = ref_acquire(&r, id, pin);
            ck_assert_int_eq(e, want == 0 ? ST_OK : ST_EBUSY);
            if (e == ST_OK && x->kv == NULL)
                x->kv = kv_new();
        }
        ck_assert_uint_le(st_sessions_count(&s), (uint32_t)cap);
        ck_assert_uint_eq(st_sessions_count(&s), (uint32_t)r.n);
        for (int k = 0; k < 40; k++) {
            uint64_t q = (uint64_t)k * 0x100000001ull + (k < 20 ? 0 : (1ull << 63));
            ck_assert_int_eq(st_sessions_find(&s, q) != NULL, ref_find(&r, q) >= 0);
        }
    }
    st_sessions_fini(&s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sessions");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_init_bounds);
    tcase_add_test(tc, test_acquire_find);
    tcase_add_test(tc, test_lru_eviction_reuses_cache);
    tcase_add_test(tc, test_pinned_not_evicted);
    tcase_add_test(tc, test_end_and_clear);
    tcase_add_test(tc, test_end_keeps_cache_for_reuse);
    tcase_add_test(tc, test_resize_keeps_most_recent);
    tcase_add_test(tc, test_random_against_reference);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
