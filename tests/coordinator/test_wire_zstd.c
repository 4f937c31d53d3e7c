/* test_wire_zstd.c - `--wire auto`'s per-boundary zstd rule (common/wire/wire.h
 * st_wire_zstd_choose, through st_wire_choose as the coordinator calls
 * it): transfer time saved by the measured ratio against the measured
 * codec cost, with the hysteresis band; and the sender's sampler
 * (common/wire/wire_sample.h) on data of known compressibility. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire/wire.h"
#include "common/wire/wire_sample.h"

#define HIDDEN 2048u    /* TinyLlama's: f32 8 KiB per token */
#define COMPUTE_S 0.010 /* a stage's compute per token: f32 fits any link above 8.2 MB/s */
/* f32 with ratio 2 and 0.5 + 0.5 ns/B: saves 4096 B / bw, costs 8.192 us;
 * saved / cost = ZS_K / bw */
#define ZS_K 0.5e9

static st_wire_link_in zlink(double bw, double ratio)
{
    st_wire_link_in in = {.hidden = HIDDEN,
                          .bw = bw,
                          .latency_s = 0.001,
                          .measured = true,
                          .compute_s = COMPUTE_S,
                          .accept_mask = 1u << ST_WIRE_F32,
                          .accept_zstd = true};
    in.zstd[ST_WIRE_F32] =
        (st_wire_zmeas){.ratio = ratio, .compress_ns = 0.5, .decompress_ns = 0.5, .samples = 3};
    return in;
}

/* zchoose - st_wire_choose's zstd for in (f32 on every link here). */
static bool zchoose(st_wire_link_in in, char *why)
{
    st_wire_choice ch;
    ck_assert_int_eq(st_wire_choose(&in, &ch), ST_OK);
    ck_assert_int_eq(ch.dtype, ST_WIRE_F32);
    if (why)
        strcpy(why, ch.why);
    return ch.zstd;
}

START_TEST(test_slow_compressible_on)
{
    char why[ST_WIRE_WHY_MAX];
    /* 10 MB/s, ratio 2: saves 410 us per token against 8.2 us of codec */
    ck_assert(zchoose(zlink(10e6, 2.0), why));
    ck_assert_ptr_nonnull(strstr(why, "; zstd on: saves 410 us/token (ratio 2 over 3 samples) > "
                                      "8.19 us of codec"));
    /* the 16-bit dtypes are judged on their own ratio: a slow link's f16 */
    st_wire_link_in in = zlink(1e6, 1.0);
    in.accept_mask = ST_WIRE_MASK_ALL;
    in.zstd[ST_WIRE_F16] =
        (st_wire_zmeas){.ratio = 1.08, .compress_ns = 1.0, .decompress_ns = 0.5, .samples = 1};
    st_wire_choice ch;
    ck_assert_int_eq(st_wire_choose(&in, &ch), ST_OK);
    ck_assert_int_eq(ch.dtype, ST_WIRE_F16);
    ck_assert(ch.zstd); /* 4096 B: saves 303 us, costs 6.1 us */
}
END_TEST

START_TEST(test_fast_link_off)
{
    char why[ST_WIRE_WHY_MAX];
    /* 10 GB/s: ratio 2 saves 0.41 us, the codec costs 8.2 us */
    ck_assert(!zchoose(zlink(10e9, 2.0), why));
    ck_assert_ptr_nonnull(strstr(why, "; zstd off: saves 0.41 us/token"));
    /* a ratio of 1 or less never pays, however slow the link */
    ck_assert(!zchoose(zlink(1e5, 1.0), NULL));
    ck_assert(!zchoose(zlink(1e5, 0.9), NULL));
}
END_TEST

START_TEST(test_unknown_off)
{
    char why[ST_WIRE_WHY_MAX];
    st_wire_link_in in = zlink(1e6, 2.0);
    in.zstd[ST_WIRE_F32].samples = 0; /* not measured yet (an old sender reports nothing) */
    ck_assert(!zchoose(in, why));
    ck_assert_ptr_nonnull(strstr(why, "zstd off: its ratio on f32 activations not measured yet"));
    /* reports that are not believable count as not measured */
    double bad[] = {NAN, INFINITY, 0, -1, ST_WIRE_ZMEAS_RATIO_MAX * 2};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert(!zchoose(zlink(1e6, bad[i]), NULL));
    in = zlink(1e6, 2.0);
    in.zstd[ST_WIRE_F32].compress_ns = NAN;
    ck_assert(!zchoose(in, NULL));
    in = zlink(1e6, 2.0);
    in.zstd[ST_WIRE_F32].decompress_ns = -1;
    ck_assert(!zchoose(in, NULL));
    /* a measurement of another dtype does not count */
    in = zlink(1e6, 2.0);
    in.zstd[ST_WIRE_F16] = in.zstd[ST_WIRE_F32];
    in.zstd[ST_WIRE_F32] = (st_wire_zmeas){0};
    ck_assert(!zchoose(in, NULL));
    /* unknown bandwidth */
    ck_assert(!zchoose(zlink(0, 2.0), why));
    ck_assert_ptr_nonnull(strstr(why, "zstd off: link bandwidth unknown"));
}
END_TEST

START_TEST(test_receiver_without_zstd_off)
{
    char why[ST_WIRE_WHY_MAX];
    st_wire_link_in in = zlink(1e6, 2.0);
    in.accept_zstd = false; /* an old worker (no Capability.wire_zstd) */
    ck_assert(!zchoose(in, why));
    ck_assert_ptr_nonnull(strstr(why, "zstd off: a receiver does not take zstd packets"));
    /* held on by a plan is no reason to keep sending it zstd */
    in.has_held = true;
    in.held = ST_WIRE_F32;
    in.held_zstd = true;
    ck_assert(!zchoose(in, NULL));
}
END_TEST

START_TEST(test_zstd_hysteresis)
{
    char why[ST_WIRE_WHY_MAX];
    /* saved / cost = 1.1: pays, but not by the 20% band: off when off */
    st_wire_link_in in = zlink(ZS_K / 1.1, 2.0);
    ck_assert(!zchoose(in, why));
    ck_assert_ptr_nonnull(strstr(why, "<= 120% of"));
    /* ... and stays on when on */
    in.has_held = true;
    in.held = ST_WIRE_F32;
    in.held_zstd = true;
    ck_assert(zchoose(in, why));
    ck_assert_ptr_nonnull(strstr(why, ">= 80% of"));
    /* 0.9: still on while held on, off otherwise */
    in.bw = ZS_K / 0.9;
    ck_assert(zchoose(in, NULL));
    in.held_zstd = false;
    ck_assert(!zchoose(in, NULL));
    /* 0.75: off even when held on */
    in.held_zstd = true;
    in.bw = ZS_K / 0.75;
    ck_assert(!zchoose(in, why));
    ck_assert_ptr_nonnull(strstr(why, "< 80% of"));
    /* 1.25: on from off */
    in.held_zstd = false;
    in.bw = ZS_K / 1.25;
    ck_assert(zchoose(in, NULL));
    /* held on for another dtype: the band does not apply to this one */
    in.held = ST_WIRE_F16;
    in.held_zstd = true;
    in.bw = ZS_K / 1.1;
    ck_assert(!zchoose(in, NULL));
}
END_TEST

START_TEST(test_forced)
{
    char why[ST_WIRE_WHY_MAX];
    st_wire_link_in in = zlink(10e9, 1.0);
    in.force_zstd = true; /* --zstd: every boundary */
    ck_assert(zchoose(in, why));
    ck_assert_ptr_nonnull(strstr(why, "zstd on: --zstd (every boundary)"));
}
END_TEST

START_TEST(test_sampler)
{
    st_wire_zsampler *s;
    ck_assert_int_eq(st_wire_zsampler_new(0, &s), ST_OK);
    st_wire_zmeas m[ST_WIRE_DT_COUNT];
    st_wire_zsampler_get(s, m);
    for (unsigned d = 0; d < ST_WIRE_DT_COUNT; d++)
        ck_assert(!st_wire_zmeas_valid(&m[d])); /* nothing sampled: unknown */
    /* one packet in ST_WIRE_ZSAMPLE_EVERY, the first included */
    unsigned due = 0;
    for (unsigned i = 0; i < 3 * ST_WIRE_ZSAMPLE_EVERY; i++) {
        bool d = st_wire_zsampler_due(s);
        ck_assert(d == (i % ST_WIRE_ZSAMPLE_EVERY == 0));
        due += d;
    }
    ck_assert_uint_eq(due, 3);
    /* a few distinct values repeated: compressible in every dtype */
    uint32_t n = 64, h = 256;
    float *x = malloc((size_t)n * h * sizeof *x);
    for (size_t i = 0; i < (size_t)n * h; i++)
        x[i] = (float)(i % 4) * 0.5f;
    ck_assert_int_eq(st_wire_zsampler_take(s, x, n, h), ST_OK);
    st_wire_zsampler_get(s, m);
    for (unsigned d = 0; d < ST_WIRE_DT_COUNT; d++) {
        ck_assert(st_wire_zmeas_valid(&m[d]));
        ck_assert_uint_eq(m[d].samples, 1);
        ck_assert(m[d].ratio > 4);
    }
    /* uniform random bits: f32 does not compress */
    uint32_t seed = 12345;
    for (size_t i = 0; i < (size_t)n * h; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((double)seed / 4294967296.0 * 2 - 1) * 7.3f;
    }
    for (unsigned k = 0; k < ST_WIRE_ZSAMPLE_KEEP; k++)
        ck_assert_int_eq(st_wire_zsampler_take(s, x, n, h), ST_OK);
    st_wire_zsampler_get(s, m); /* the medians are now the random samples' */
    ck_assert_uint_eq(m[ST_WIRE_F32].samples, 1 + ST_WIRE_ZSAMPLE_KEEP);
    ck_assert(m[ST_WIRE_F32].ratio < 1.2);
    ck_assert(m[ST_WIRE_F32].compress_ns > 0 && m[ST_WIRE_F32].decompress_ns > 0);
    /* a non-finite value fails the sample and changes nothing */
    x[5] = NAN;
    ck_assert_int_eq(st_wire_zsampler_take(s, x, n, h), ST_ERANGE);
    st_wire_zmeas m2[ST_WIRE_DT_COUNT];
    st_wire_zsampler_get(s, m2);
    ck_assert_uint_eq(m2[ST_WIRE_F32].samples, m[ST_WIRE_F32].samples);
    ck_assert_int_eq(st_wire_zsampler_take(s, x, 0, h), ST_EINVAL);
    free(x);
    st_wire_zsampler_free(s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("wire_zstd");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_slow_compressible_on);
    tcase_add_test(tc, test_fast_link_off);
    tcase_add_test(tc, test_unknown_off);
    tcase_add_test(tc, test_receiver_without_zstd_off);
    tcase_add_test(tc, test_zstd_hysteresis);
    tcase_add_test(tc, test_forced);
    tcase_add_test(tc, test_sampler);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
