/* test_sampling.c - the sampler and its RNG: validation, greedy, seeds,
 * top-k / top-p / min-p, frequencies against the softmax, the repetition
 * penalty and bad inputs. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/text/sampling.h"

static st_sampler_params plain(float temp)
{
    st_sampler_params p = st_sampler_params_default();
    p.temp = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    return p;
}

static void random_logits(st_rng *r, float *l, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        l[i] = (st_rng_next_f32(r) - 0.5f) * scale;
}

static size_t argmax(const float *l, size_t n)
{
    size_t b = 0;
    for (size_t i = 1; i < n; i++)
        if (l[i] > l[b])
            b = i;
    return b;
}

static int32_t sample1(const st_sampler_params *p, st_rng *rng, const float *logits, size_t n,
                       st_sample_scratch *s)
{
    float l[256];
    ck_assert_uint_le(n, 256);
    memcpy(l, logits, n * sizeof *l);
    int32_t id = -1;
    st_err e = st_sample(p, rng, l, n, NULL, 0, s, &id);
    ck_assert_msg(e == ST_OK, "st_sample: %s", st_errmsg(e));
    ck_assert(id >= 0 && (size_t)id < n);
    return id;
}

/* tally - draws n_draws ids with a fresh RNG seeded with seed. */
static void tally(const st_sampler_params *p, uint64_t seed, const float *logits, size_t n,
                  size_t n_draws, size_t *cnt)
{
    st_sample_scratch s;
    ck_assert_int_eq(st_sample_scratch_init(&s, n), ST_OK);
    st_rng rng;
    st_rng_seed(&rng, seed);
    memset(cnt, 0, n * sizeof *cnt);
    for (size_t i = 0; i < n_draws; i++)
        cnt[sample1(p, &rng, logits, n, &s)]++;
    st_sample_scratch_free(&s);
}

/* expected - softmax(l / temp) over the ids with keep[i], zero elsewhere. */
static void expected(const float *l, const int *keep, size_t n, double temp, double *prob)
{
    double mx = -INFINITY, z = 0.0;
    for (size_t i = 0; i < n; i++)
        if (keep[i] && l[i] > mx)
            mx = l[i];
    for (size_t i = 0; i < n; i++) {
        prob[i] = keep[i] ? exp((l[i] - mx) / temp) : 0.0;
        z += prob[i];
    }
    for (size_t i = 0; i < n; i++)
        prob[i] /= z;
}

/* chi2 - chi-square of counts against probabilities (cells of p == 0
 * must be empty). */
static double chi2(const size_t *cnt, const double *prob, size_t n, size_t total)
{
    double x = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (prob[i] == 0.0) {
            ck_assert_msg(cnt[i] == 0, "token %zu drawn %zu times but excluded", i, cnt[i]);
            continue;
        }
        double e = prob[i] * (double)total;
        x += ((double)cnt[i] - e) * ((double)cnt[i] - e) / e;
    }
    return x;
}

/* ---- validation ---------------------------------------------------------- */

static void expect_invalid(st_sampler_params p, const char *field)
{
    ck_assert_int_eq(st_sampler_params_validate(&p), ST_EINVAL);
    ck_assert_msg(strstr(st_errdetail(), field) != NULL, "detail '%s' does not name %s",
                  st_errdetail(), field);
    /* st_sample refuses the same params */
    st_sample_scratch s;
    ck_assert_int_eq(st_sample_scratch_init(&s, 4), ST_OK);
    float l[4] = {0, 1, 2, 3};
    st_rng r;
    st_rng_seed(&r, 1);
    int32_t id;
    ck_assert_int_eq(st_sample(&p, &r, l, 4, NULL, 0, &s, &id), ST_EINVAL);
    st_sample_scratch_free(&s);
}

START_TEST(validate)
{
    st_sampler_params d = st_sampler_params_default();
    ck_assert_int_eq(st_sampler_params_validate(&d), ST_OK);
    ck_assert_int_eq(d.repeat_last_n, 64);
    st_sampler_params p;
    float bad_temp[] = {NAN, INFINITY, -INFINITY, -0.5f};
    for (size_t i = 0; i < 4; i++) {
        p = d;
        p.temp = bad_temp[i];
        expect_invalid(p, "temp");
    }
    float bad_top_p[] = {0.0f, -0.1f, 1.0001f, NAN};
    for (size_t i = 0; i < 4; i++) {
        p = d;
        p.top_p = bad_top_p[i];
        expect_invalid(p, "top_p");
    }
    float bad_min_p[] = {-0.01f, 1.01f, NAN};
    for (size_t i = 0; i < 3; i++) {
        p = d;
        p.min_p = bad_min_p[i];
        expect_invalid(p, "min_p");
    }
    float bad_pen[] = {0.0f, -1.0f, NAN, INFINITY};
    for (size_t i = 0; i < 4; i++) {
        p = d;
        p.repeat_penalty = bad_pen[i];
        expect_invalid(p, "repeat_penalty");
    }
    p = d;
    p.top_k = -1;
    expect_invalid(p, "top_k");
    p = d;
    p.repeat_last_n = -1;
    expect_invalid(p, "repeat_last_n");
    /* edges that are valid */
    p = d;
    p.temp = 0.0f;
    p.top_p = 1.0f;
    p.min_p = 1.0f;
    p.top_k = 0;
    p.repeat_last_n = 0;
    ck_assert_int_eq(st_sampler_params_validate(&p), ST_OK);
}
END_TEST

/* ---- RNG ---------------------------------------------------------------- */

START_TEST(rng)
{
    st_rng a, b;
    st_rng_seed(&a, 0);
    /* splitmix64 from 0 fills the state (published reference values) */
    ck_assert_uint_eq(a.s[0], 0xe220a8397b1dcdafULL);
    ck_assert_uint_eq(a.s[1], 0x6e789e6aa1b965f4ULL);
    ck_assert_uint_eq(a.s[2], 0x06c45d188009454fULL);
    ck_assert_uint_eq(a.s[3], 0xf88bb8a8724c81ecULL);
    ck_assert_uint_eq(st_rng_next_u64(&a), 0x99ec5f36cb75f2b4ULL);
    ck_assert_uint_eq(st_rng_next_u64(&a), 0xbf6e1f784956452aULL);
    st_rng_seed(&a, 42);
    st_rng_seed(&b, 42);
    for (int i = 0; i < 1000; i++)
        ck_assert_uint_eq(st_rng_next_u64(&a), st_rng_next_u64(&b));
    st_rng_seed(&b, 43);
    int same = 0;
    for (int i = 0; i < 100; i++)
        same += st_rng_next_u64(&a) == st_rng_next_u64(&b);
    ck_assert_int_eq(same, 0);
    /* the state is plain data: a copy continues identically */
    st_rng c = a;
    ck_assert_uint_eq(st_rng_next_u64(&a), st_rng_next_u64(&c));
    double sum = 0.0;
    float lo = 1.0f, hi = 0.0f;
    for (int i = 0; i < 100000; i++) {
        float f = st_rng_next_f32(&a);
        ck_assert(f >= 0.0f && f < 1.0f);
        sum += f;
        lo = f < lo ? f : lo;
        hi = f > hi ? f : hi;
    }
    ck_assert(fabs(sum / 100000 - 0.5) < 0.005);
    ck_assert(lo < 0.001f && hi > 0.999f);
}
END_TEST

/* ---- greedy and seeds --------------------------------------------------- */

START_TEST(greedy_is_argmax)
{
    st_sample_scratch s;
    ck_assert_int_eq(st_sample_scratch_init(&s, 256), ST_OK);
    st_rng gen, r;
    st_rng_seed(&gen, 7);
    st_rng_seed(&r, 99);
    st_sampler_params p = st_sampler_params_default();
    p.temp = 0.0f;
    float l[256];
    for (int t = 0; t < 200; t++) {
        random_logits(&gen, l, 256, 20.0f);
        st_rng before = r;
        ck_assert_int_eq(sample1(&p, &r, l, 256, &s), (int32_t)argmax(l, 256));
        ck_assert_mem_eq(&before, &r, sizeof r); /* greedy draws nothing */
    }
    float ties[] = {1.0f, 3.0f, -INFINITY, 3.0f};
    ck_assert_int_eq(sample1(&p, NULL, ties, 4, &s), 1); /* first maximum; no RNG needed */
    st_sample_scratch_free(&s);
}
END_TEST

START_TEST(seeds)
{
    st_sample_scratch s;
    ck_assert_int_eq(st_sample_scratch_init(&s, 100), ST_OK);
    st_sampler_params p = st_sampler_params_default();
    float l[100];
    for (int i = 0; i < 100; i++)
        l[i] = 0.01f * (float)(i % 7);
    st_rng a, b, c;
    st_rng_seed(&a, 1234);
    st_rng_seed(&b, 1234);
    st_rng_seed(&c, 1235);
    int differ = 0;
    for (int t = 0; t < 200; t++) {
        int32_t x = sample1(&p, &a, l, 100, &s), y = sample1(&p, &b, l, 100, &s);
        ck_assert_int_eq(x, y);
        differ += x != sample1(&p, &c, l, 100, &s);
    }
    ck_assert_int_gt(differ, 100);
    st_sample_scratch_free(&s);
}
END_TEST

START_TEST(top_k_one_is_greedy)
{
    st_sample_scratch s;
    ck_assert_int_eq(st_sample_scratch_init(&s, 256), ST_OK);
    st_rng gen, r;
    st_rng_seed(&gen, 5);
    st_rng_seed(&r, 6);
    st_sampler_params p = plain(1.5f);
    p.top_k = 1;
    float l[256];
    for (int t = 0; t < 300; t++) {
        random_logits(&gen, l, 256, 2.0f);
        ck_assert_int_eq(sample1(&p, &r, l, 256, &s), (int32_t)argmax(l, 256));
    }
    st_sample_scratch_free(&s);
}
END_TEST

START_TEST(top_p_tiny_keeps_top)
{
    st_sample_scratch s;
    ck_assert_int_eq(st_sample_scratch_init(&s, 256), ST_OK);
    st_rng gen, r;
    st_rng_seed(&gen, 8);
    st_rng_seed(&r, 9);
    st_sampler_params p = plain(1.0f);
    p.top_p = 1e-6f;
    float l[256];
    for (int t = 0; t < 300; t++) {
        random_logits(&gen, l, 256, 1.0f);
        ck_assert_int_eq(sample1(&p, &r, l, 256, &s), (int32_t)argmax(l, 256));
    }
    st_sample_scratch_free(&s);
}
END_TEST

/* ---- distributions ------------------------------------------------------ */

#define N_DRAWS 200000
/* chi-square bound: 7 degrees of freedom have p < 1e-4 above about 29.9;
 * a wrong distribution (e.g. temperature ignored) lands in the thousands. */
#define CHI2_MAX 30.0

START_TEST(frequencies_follow_softmax)
{
    float l[8] = {1.0f, 0.5f, 0.0f, -0.5f, 2.0f, -1.0f, 0.3f, 1.5f};
    int all[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    size_t cnt[8];
    double prob[8];
    float temps[] = {1.0f, 0.6f, 2.5f};
    for (int k = 0; k < 3; k++) {
        st_sampler_params p = plain(temps[k]);
        tally(&p, 77 + (uint64_t)k, l, 8, N_DRAWS, cnt);
        expected(l, all, 8, temps[k], prob);
        double x = chi2(cnt, prob, 8, N_DRAWS);
        fprintf(stderr, "temp %.1f: chi2 %.2f (7 dof)\n", (double)temps[k], x);
        ck_assert_msg(x < CHI2_MAX, "temp %g: chi2 %g", (double)temps[k], x);
        /* the same counts are far from a wrong temperature */
        expected(l, all, 8, temps[k] * 1.3, prob);
        ck_assert(chi2(cnt, prob, 8, N_DRAWS) > 10 * CHI2_MAX);
    }
    /* top-k 5 at temp 0.7: renormalised over the five best */
    st_sampler_params p = plain(0.7f);
    p.top_k = 5;
    tally(&p, 3, l, 8, N_DRAWS, cnt);
    int keep5[8] = {1, 1, 0, 0, 1, 0, 1, 1};
    expected(l, keep5, 8, 0.7, prob);
    double x = chi2(cnt, prob, 8, N_DRAWS);
    fprintf(stderr, "top-k 5: chi2 %.2f (4 dof)\n", x);
    ck_assert(x < CHI2_MAX);
}
END_TEST

START_TEST(top_p_and_min_p_sets)
{
    /* probabilities 0.5, 0.3, 0.15, 0.05 */
    float l[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    size_t cnt[4];
    double prob[4];
    struct {
        float top_p, min_p, temp;
        int keep[4];
    } cases[] = {
        {0.75f, 0.0f, 1.0f, {1, 1, 0, 0}}, /* 0.5 < 0.75 <= 0.8 */
        {0.85f, 0.0f, 1.0f, {1, 1, 1, 0}}, {0.40f, 0.0f, 1.0f, {1, 0, 0, 0}},
        {1.0f, 0.2f, 1.0f, {1, 1, 1, 0}},  /* threshold 0.1 */
        {1.0f, 0.5f, 1.0f, {1, 1, 0, 0}},  /* threshold 0.25 */
        {1.0f, 0.5f, 2.0f, {1, 1, 0, 0}},  /* filters see untempered p */
        {0.85f, 0.5f, 1.0f, {1, 1, 0, 0}}, /* both */
        {1.0f, 1.0f, 1.0f, {1, 0, 0, 0}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        st_sampler_params p = plain(cases[c].temp);
        p.top_p = cases[c].top_p;
        p.min_p = cases[c].min_p;
        tally(&p, 1000 + c, l, 4, 50000, cnt);
        expected(l, cases[c].keep, 4, cases[c].temp, prob);
        double x = chi2(cnt, prob, 4, 50000);
        ck_assert_msg(x < CHI2_MAX, "case %zu: chi2 %g", c, x);
    }
}
END_TEST

START_TEST(ties_prefer_low_ids)
{
    float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t cnt[8];
    st_sampler_params p = plain(1.0f);
    p.top_k = 3;
    tally(&p, 4, l, 8, 3000, cnt);
    for (int i = 0; i < 8; i++)
        ck_assert(i < 3 ? cnt[i] > 800 : cnt[i] == 0);
    p = plain(1.0f);
    p.top_p = 0.3f; /* 1/8 each: three reach 0.375 */
    tally(&p, 5, l, 8, 3000, cnt);
    for (int i = 0; i < 8; i++)
        ck_assert(i < 3 ? cnt[i] > 800 : cnt[i] == 0);
}
END_TEST

START_TEST(neg_inf_never_drawn)
{
    float l[64];
    for (int i = 0; i < 64; i++)
        l[i] = i % 2 ? -INFINITY : 0.1f * (float)i;
    size_t cnt[64];
    st_sampler_params p = plain(1.0f);
    tally(&p, 11, l, 64, 20000, cnt);
    for (int i = 1; i < 64; i += 2)
        ck_assert_uint_eq(cnt[i], 0);
    p.top_k = 60; /* the kept set includes -inf ids: still never drawn */
    p.top_p = 0.99f;
    tally(&p, 12, l, 64, 20000, cnt);
    for (int i = 1; i < 64; i += 2)
        ck_assert_uint_eq(cnt[i], 0);
}
END_TEST

/* ---- repetition penalty -------------------------------------------------- */

START_TEST(repetition_penalty)
{
    st_sample_scratch s;
    ck_assert_int_eq(st_sample_scratch_init(&s, 8), ST_OK);
    st_sampler_params p = plain(0.0f);
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = 64;
    float l[8] = {2.0f, 1.9f, -1.0f, 0.5f, 0.0f, 0.0f, 0.0f, 0.0f};
    int32_t hist[] = {0, 2, 0, 0};
    int32_t id;
    ck_assert_int_eq(st_sample(&p, NULL, l, 8, hist, 4, &s, &id), ST_OK);
    ck_assert_int_eq(id, 1);  /* token 0 was repeated: 2.0 -> 1.0 */
    ck_assert(l[0] == 1.0f);  /* once per distinct id, however often it occurs */
    ck_assert(l[2] == -2.0f); /* negative logits are multiplied */
    ck_assert(l[1] == 1.9f && l[3] == 0.5f);
    for (int i = 0; i < 8; i++)
        ck_assert_uint_eq(s.mark[i], 0);
    /* the window: only the last repeat_last_n ids count */
    float m[8] = {2.0f, 1.9f, -1.0f, 0.5f, 0.0f, 0.0f, 0.0f, 0.0f};
    int32_t hist2[] = {0, 3};
    p.repeat_last_n = 1;
    ck_assert_int_eq(st_sample(&p, NULL, m, 8, hist2, 2, &s, &id), ST_OK);
    ck_assert_int_eq(id, 0);
    ck_assert(m[0] == 2.0f && m[3] == 0.25f);
    /* repeat_last_n 0 or penalty 1: no change */
    float q[8] = {2.0f, 1.9f, 0, 0, 0, 0, 0, 0};
    p.repeat_last_n = 0;
    ck_assert_int_eq(st_sample(&p, NULL, q, 8, hist, 4, &s, &id), ST_OK);
    ck_assert(q[0] == 2.0f && id == 0);
    p.repeat_last_n = 64;
    p.repeat_penalty = 1.0f;
    ck_assert_int_eq(st_sample(&p, NULL, q, 8, hist, 4, &s, &id), ST_OK);
    ck_assert(q[0] == 2.0f && id == 0);
    /* with sampling, a penalised token becomes rarer */
    float base[8] = {1.0f, 1.0f, 0, 0, 0, 0, 0, 0};
    size_t with = 0, without = 0;
    st_rng r1, r2;
    st_rng_seed(&r1, 5);
    st_rng_seed(&r2, 5);
    st_sampler_params sp = plain(1.0f);
    sp.repeat_penalty = 1.5f;
    int32_t h0[] = {0};
    for (int t = 0; t < 20000; t++) {
        float a[8], b[8];
        memcpy(a, base, sizeof a);
        memcpy(b, base, sizeof b);
        ck_assert_int_eq(st_sample(&sp, &r1, a, 8, h0, 1, &s, &id), ST_OK);
        with += id == 0;
        ck_assert_int_eq(st_sample(&sp, &r2, b, 8, NULL, 0, &s, &id), ST_OK);
        without += id == 0;
    }
    ck_assert_uint_lt(with * 10, without * 9);
    st_sample_scratch_free(&s);
}
END_TEST

/* ---- bad inputs ---------------------------------------------------------- */

START_TEST(bad_inputs)
{
    st_sample_scratch s;
    ck_assert_int_eq(st_sample_scratch_init(&s, 4), ST_OK);
    st_sampler_params p = plain(1.0f);
    st_rng r;
    st_rng_seed(&r, 1);
    int32_t id;
    float l[5] = {0, 1, NAN, 2, 0};
    ck_assert_int_eq(st_sample(&p, &r, l, 4, NULL, 0, &s, &id), ST_EINVAL);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "2"));
    float inf[4] = {0, INFINITY, 1, 2};
    ck_assert_int_eq(st_sample(&p, &r, inf, 4, NULL, 0, &s, &id), ST_EINVAL);
    float ninf[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    ck_assert_int_eq(st_sample(&p, &r, ninf, 4, NULL, 0, &s, &id), ST_EINVAL);
    float ok[5] = {0, 1, 2, 3, 4};
    ck_assert_int_eq(st_sample(&p, &r, ok, 5, NULL, 0, &s, &id), ST_EINVAL); /* > cap */
    ck_assert_int_eq(st_sample(&p, &r, ok, 0, NULL, 0, &s, &id), ST_EINVAL);
    ck_assert_int_eq(st_sample(&p, NULL, ok, 4, NULL, 0, &s, &id), ST_EINVAL); /* no RNG */
    p.repeat_penalty = 1.3f;
    int32_t hist[] = {1, 4};
    ck_assert_int_eq(st_sample(&p, &r, ok, 4, hist, 2, &s, &id), ST_ERANGE);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "4"));
    ck_assert(ok[1] == 1.0f); /* nothing was penalised */
    int32_t neg[] = {-3};
    ck_assert_int_eq(st_sample(&p, &r, ok, 4, neg, 1, &s, &id), ST_ERANGE);
    ck_assert_int_eq(st_sample(&p, &r, ok, 4, hist, 1, &s, &id), ST_OK);
    st_sample_scratch_free(&s);
    st_sample_scratch_free(&s); /* freed twice is a no-op */
}
END_TEST

START_TEST(large_vocab)
{
    size_t n = 32000;
    st_sample_scratch s;
    ck_assert_int_eq(st_sample_scratch_init(&s, n), ST_OK);
    float *base = malloc(n * sizeof *base), *l = malloc(n * sizeof *l);
    st_rng gen, r;
    st_rng_seed(&gen, 21);
    st_rng_seed(&r, 22);
    random_logits(&gen, base, n, 16.0f);
    size_t top = argmax(base, n);
    st_sampler_params configs[3] = {st_sampler_params_default(), plain(0.8f), plain(1.0f)};
    configs[1].top_p = 0.9f;
    configs[2].min_p = 0.1f;
    for (int c = 0; c < 3; c++) {
        for (int t = 0; t < 300; t++) {
            memcpy(l, base, n * sizeof *l);
            int32_t id;
            ck_assert_int_eq(st_sample(&configs[c], &r, l, n, NULL, 0, &s, &id), ST_OK);
            ck_assert(id >= 0 && (size_t)id < n);
            /* every filter keeps the top: its neighbours in rank are plausible */
            ck_assert(base[id] > base[top] - 16.0f * 0.5f);
        }
    }
    free(base);
    free(l);
    st_sample_scratch_free(&s);
}
END_TEST

static Suite *sampling_suite(void)
{
    Suite *s = suite_create("sampling");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, validate);
    tcase_add_test(tc, rng);
    tcase_add_test(tc, greedy_is_argmax);
    tcase_add_test(tc, seeds);
    tcase_add_test(tc, top_k_one_is_greedy);
    tcase_add_test(tc, top_p_tiny_keeps_top);
    tcase_add_test(tc, frequencies_follow_softmax);
    tcase_add_test(tc, top_p_and_min_p_sets);
    tcase_add_test(tc, ties_prefer_low_ids);
    tcase_add_test(tc, neg_inf_never_drawn);
    tcase_add_test(tc, repetition_penalty);
    tcase_add_test(tc, bad_inputs);
    tcase_add_test(tc, large_vocab);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(sampling_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
