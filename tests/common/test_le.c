/* test_le.c - the little-endian loads and stores of common/base/le.h: byte
 * order, no alignment needed, and that each store is its load's inverse. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "common/base/le.h"

START_TEST(byte_order)
{
    const uint8_t b[9] = {0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x88};
    ck_assert_uint_eq(st_le_ld16(b + 1), 0x0201u);
    ck_assert_uint_eq(st_le_ld32(b + 1), 0x04030201u); /* at an odd address */
    ck_assert_uint_eq(st_le_ld64(b + 1), 0x8807060504030201ull);
    uint8_t o[9] = {0};
    st_le_st16(o + 1, 0xbeef);
    ck_assert_uint_eq(o[1], 0xef);
    ck_assert_uint_eq(o[2], 0xbe);
    st_le_st32(o + 1, 0x04030201u);
    ck_assert(memcmp(o + 1, b + 1, 4) == 0);
    st_le_st64(o + 1, 0x8807060504030201ull);
    ck_assert(memcmp(o + 1, b + 1, 8) == 0);
    ck_assert_uint_eq(o[0], 0); /* nothing written outside */
}
END_TEST

START_TEST(round_trip)
{
    const uint64_t v[] = {0, 1, 0xff, 0x100, 0xffffffffull, 0x123456789abcdef0ull, UINT64_MAX};
    uint8_t b[8];
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        st_le_st64(b, v[i]);
        ck_assert_uint_eq(st_le_ld64(b), v[i]);
        st_le_st32(b, (uint32_t)v[i]);
        ck_assert_uint_eq(st_le_ld32(b), (uint32_t)v[i]);
        st_le_st16(b, (uint16_t)v[i]);
        ck_assert_uint_eq(st_le_ld16(b), (uint16_t)v[i]);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("le");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, byte_order);
    tcase_add_test(tc, round_trip);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
