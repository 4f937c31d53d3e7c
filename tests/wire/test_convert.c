/* test_convert.c - the wire conversions and CRC32C: the x86 variant must
 * agree with the scalar reference bit for bit (all 65536 codes for the
 * decoders; edge, random and swept f32 patterns for the encoders, every
 * finite f32 in the exhaustive run), and the references must follow the
 * documented rules (clamp and count, ties to even, subnormal flush). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/convert.h"
#include "kernels/fp16.h"
#include "tests/wire/wire_test.h"

static int cv_exhaustive;

/* cv_x86 - the x86 table; the test machine is required to have it. */
static const st_convert_ops *cv_x86(void)
{
    const st_convert_ops *x = st_convert_get(ST_CONV_X86);
    ck_assert_msg(x != NULL, "this test host lacks AVX2/F16C: the SIMD path is untested");
    return x;
}

static float cv_f(uint32_t u) { return st_bits_f32(u); }

/* cv_edges - interesting finite values; returns how many were written. */
static size_t cv_edges(float *v)
{
    static const uint32_t bits[] = {
        0x00000000u, 0x80000000u, 0x00000001u, 0x80000001u, 0x007fffffu, 0x00400000u, 0x00800000u,
        0x80800000u, 0x3f800000u, 0xbf800000u, 0x7f7fffffu, 0xff7fffffu, 0x7f7f7fffu, 0xff7f7fffu,
        0x7f7f0000u, 0x477fe000u, 0x477fefffu, 0x477ff000u, 0x477fffffu, 0x47800000u, 0xc77fe001u,
        0x3f801000u, 0x3f803000u, 0x3f800fffu, 0x3f801001u, 0x33000000u, 0x33000001u, 0x32ffffffu,
        0x33400000u, 0x33c00000u, 0x387fc000u, 0x387fe000u, 0x387fffffu, 0x38800000u, 0x3f808000u,
        0x3f818000u, 0x3f80ffffu, 0x3f817fffu, 0x3f818001u, 0x00ff8000u, 0x00fe8000u, 0x3effffffu,
        0x4b000000u, 0x4affffffu, 0xcb7fffffu, 0x42fe0000u, 0x42ff0000u, 0x43000000u,
    };
    size_t n = sizeof bits / sizeof bits[0];
    for (size_t i = 0; i < n; i++)
        v[i] = cv_f(bits[i]);
    return n;
}

/* cv_random_finite - random bit patterns with non-finite ones replaced. */
static void cv_random_finite(wt_rng *r, float *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)wt_next(r);
        if ((u & 0x7f800000u) == 0x7f800000u)
            u &= 0xbfffffffu;
        switch (wt_next(r) % 4) {
        case 0:
            v[i] = cv_f(u);
            break;
        case 1:
            v[i] = wt_gauss(r);
            break;
        case 2:
            v[i] = wt_gauss(r) * 30000.0f;
            break;
        default:
            v[i] = cv_f((u & 0x87ffffffu) | 0x30000000u);
            break; /* near f16 range */
        }
    }
}

START_TEST(test_crc32c)
{
    const st_convert_ops *ops[2] = {st_convert_ref(), cv_x86()};
    for (int k = 0; k < 2; k++)
        ck_assert_uint_eq(ops[k]->crc32c(0, "123456789", 9), 0xE3069283u);
    wt_rng r = {42};
    size_t cap = 3 * 8192 * 2 + 777;
    unsigned char *b = malloc(cap + 8);
    for (size_t i = 0; i < cap + 8; i++)
        b[i] = (unsigned char)wt_next(&r);
    for (size_t n = 0; n <= cap; n += (n < 4200 ? 1 : 61)) {
        size_t off = n % 7;
        uint32_t a = ops[0]->crc32c(0x1234u, b + off, n), x = ops[1]->crc32c(0x1234u, b + off, n);
        ck_assert_msg(a == x, "crc32c length %zu offset %zu: ref %08x avx2 %08x", n, off, a, x);
    }
    /* chaining and the combine algebra: crc(AB) = shift(crc(A), |B|) ^ crc(B) */
    for (int t = 0; t < 200; t++) {
        size_t na = wt_next(&r) % 5000, nb = wt_next(&r) % 20000;
        uint32_t whole = ops[1]->crc32c(0, b, na + nb);
        uint32_t ca = ops[1]->crc32c(0, b, na), cb = ops[1]->crc32c(0, b + na, nb);
        ck_assert_uint_eq(ops[1]->crc32c(ca, b + na, nb), whole);
        ck_assert_uint_eq(st_crc32c_shift(ca, nb) ^ cb, whole);
    }
    free(b);
}
END_TEST

START_TEST(test_f16_decode_all)
{
    const st_convert_ops *ref = st_convert_ref(), *x = cv_x86();
    uint16_t *h = malloc(65536 * sizeof *h);
    float *a = malloc(65536 * sizeof *a), *b = malloc(65536 * sizeof *b);
    for (uint32_t i = 0; i < 65536; i++)
        h[i] = (uint16_t)i;
    ck_assert_uint_eq(ref->f16_to_f32(h, a, 65536), 0x7c00); /* the first Inf */
    ck_assert_uint_eq(x->f16_to_f32(h, b, 65536), 0x7c00);
    for (uint32_t i = 0; i < 65536; i++) {
        ck_assert_msg(st_f32_bits(a[i]) == st_f32_bits(b[i]), "f16 0x%04x: ref %08x avx2 %08x", i,
                      st_f32_bits(a[i]), st_f32_bits(b[i]));
        if ((i & 0x7c00u) != 0x7c00u) { /* finite: exact, and back to the same code */
            uint64_t c = 0;
            uint16_t back;
            ck_assert_uint_eq(ref->f32_to_f16(&a[i], &back, 1, &c), 1);
            ck_assert_uint_eq(back, i);
        } else if (i & 0x3ffu) {
            ck_assert_msg(isnan(a[i]) && (st_f32_bits(a[i]) & 0x00400000u), "f16 NaN 0x%04x", i);
        }
    }
    /* odd lengths take the tail path; the Inf at 0x7c00 is found in it */
    for (size_t n = 1; n < 40; n++) {
        size_t want = n > 3 ? 3 : n;
        ck_assert_uint_eq(ref->f16_to_f32(h + 0x7c00 - 3, a, n), want);
        ck_assert_uint_eq(x->f16_to_f32(h + 0x7c00 - 3, b, n), want);
        ck_assert(memcmp(a, b, n * sizeof *a) == 0);
        ck_assert_uint_eq(x->f16_to_f32(h + 0x7c00 - n, b, n), n); /* all finite */
        ck_assert_uint_eq(x->bf16_to_f32(h + 0x7f80 - n, b, n), n);
        ck_assert_uint_eq(x->bf16_to_f32(h + 0xff80 - 2, b, n), n > 2 ? 2 : n);
        ck_assert_uint_eq(ref->bf16_to_f32(h + 0xff80 - 2, b, n), n > 2 ? 2 : n);
    }
    free(h);
    free(a);
    free(b);
}
END_TEST

START_TEST(test_bf16_decode_all)
{
    const st_convert_ops *ref = st_convert_ref(), *x = cv_x86();
    uint16_t *h = malloc(65536 * sizeof *h);
    float *a = malloc(65536 * sizeof *a), *b = malloc(65536 * sizeof *b);
    for (uint32_t i = 0; i < 65536; i++)
        h[i] = (uint16_t)i;
    ck_assert_uint_eq(ref->bf16_to_f32(h, a, 65536), 0x7f80); /* the first Inf */
    ck_assert_uint_eq(x->bf16_to_f32(h, b, 65536), 0x7f80);
    for (uint32_t i = 0; i < 65536; i++)
        ck_assert_msg(st_f32_bits(a[i]) == i << 16 && st_f32_bits(b[i]) == i << 16,
                      "bf16 0x%04x: ref %08x avx2 %08x", i, st_f32_bits(a[i]), st_f32_bits(b[i]));
    free(h);
    free(a);
    free(b);
}
END_TEST

/* cv_check_16 - both variants' f16 (clamped, counted) and bf16 encodings
 * of v[0..n) agree. */
static void cv_check_16(const float *v, size_t n)
{
    const st_convert_ops *ref = st_convert_ref(), *x = cv_x86();
    uint16_t *a = malloc((n + 1) * 2), *b = malloc((n + 1) * 2);
    uint64_t ca = 0, cb = 0;
    ck_assert_uint_eq(ref->f32_to_f16(v, a, n, &ca), n);
    ck_assert_uint_eq(x->f32_to_f16(v, b, n, &cb), n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(a[i] == b[i], "f16 of %08x: ref %04x avx2 %04x", st_f32_bits(v[i]), a[i],
                      b[i]);
    ck_assert_uint_eq(ca, cb);
    float *w = malloc((n + 1) * sizeof *w); /* bf16 refuses |x| >= 0x1.ffp127 */
    for (size_t i = 0; i < n; i++)
        w[i] = (st_f32_bits(v[i]) & 0x7fffffffu) >= 0x7f7f8000u ? 1.5f : v[i];
    ck_assert_uint_eq(ref->f32_to_bf16(w, a, n), n);
    ck_assert_uint_eq(x->f32_to_bf16(w, b, n), n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(a[i] == b[i], "bf16 of %08x: ref %04x avx2 %04x", st_f32_bits(w[i]), a[i],
                      b[i]);
    free(w);
    free(a);
    free(b);
}

START_TEST(test_16bit_encode)
{
    float v[4096 + 64];
    size_t ne = cv_edges(v);
    for (size_t n = 0; n <= ne; n++)
        cv_check_16(v, n);
    wt_rng r = {7};
    for (int t = 0; t < 200; t++) {
        size_t n = (size_t)(wt_next(&r) % 4160);
        cv_random_finite(&r, v, n);
        cv_check_16(v, n);
    }
    /* the rules themselves, on the reference */
    const st_convert_ops *ref = st_convert_ref();
    float in[6] = {65504.0f, 65505.0f, -70000.0f, 1e30f, 65519.0f, -0.0f};
    uint16_t o[6];
    uint64_t c = 0;
    ck_assert_uint_eq(ref->f32_to_f16(in, o, 6, &c), 6);
    ck_assert_uint_eq(c, 4);
    ck_assert_uint_eq(o[0], 0x7bffu);
    ck_assert_uint_eq(o[1], 0x7bffu);
    ck_assert_uint_eq(o[2], 0xfbffu);
    ck_assert_uint_eq(o[3], 0x7bffu);
    ck_assert_uint_eq(o[5], 0x8000u);
    float tie[3] = {cv_f(0x3f808000u), cv_f(0x3f818000u), cv_f(0x00400000u)};
    ck_assert_uint_eq(ref->f32_to_bf16(tie, o, 3), 3);
    ck_assert_uint_eq(o[0], 0x3f80u); /* tie to even: down */
    ck_assert_uint_eq(o[1], 0x3f82u); /* tie to even: up */
    ck_assert_uint_eq(o[2], 0x0000u); /* subnormal flushed */
}
END_TEST

START_TEST(test_sweep)
{
    /* every f32 pattern with a stride (all of them in the exhaustive run):
     * non-finite ones are replaced by finite neighbours */
    const size_t blk = 1u << 16;
    const uint64_t stride = cv_exhaustive ? 1 : 4099;
    float *v = malloc(blk * sizeof *v);
    uint16_t *a = malloc(blk * 2), *b = malloc(blk * 2);
    const st_convert_ops *ref = st_convert_ref(), *x = cv_x86();
    uint64_t u = 0;
    while (u < (1ull << 32)) {
        size_t n = 0;
        for (; n < blk && u < (1ull << 32); n++, u += stride) {
            uint32_t w = (uint32_t)u;
            if ((w & 0x7fffffffu) >= 0x7f7f8000u)
                w &= 0xff00ffffu;
            v[n] = cv_f(w);
        }
        uint64_t ca = 0, cb = 0;
        ck_assert_uint_eq(ref->f32_to_f16(v, a, n, &ca), n);
        ck_assert_uint_eq(x->f32_to_f16(v, b, n, &cb), n);
        ck_assert_msg(memcmp(a, b, n * 2) == 0 && ca == cb, "f16 sweep differs near %08llx",
                      (unsigned long long)u);
        ck_assert_uint_eq(ref->f32_to_bf16(v, a, n), n);
        ck_assert_uint_eq(x->f32_to_bf16(v, b, n), n);
        ck_assert_msg(memcmp(a, b, n * 2) == 0, "bf16 sweep differs near %08llx",
                      (unsigned long long)u);
    }
    free(v);
    free(a);
    free(b);
}
END_TEST

/* cv_check_i8 - both variants quantize v[0..n) identically (values with
 * |x| >= 2^127, which i8 refuses, replaced). */
static void cv_check_i8(const float *vin, size_t n)
{
    const st_convert_ops *ref = st_convert_ref(), *x = cv_x86();
    float *v = malloc((n + 1) * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = (st_f32_bits(vin[i]) & 0x7fffffffu) >= 0x7f000000u ? -0x1.fffffep126f : vin[i];
    int8_t *a = malloc(n + 1), *b = malloc(n + 1);
    float sa = -1.0f, sb = -2.0f;
    ck_assert_uint_eq(ref->f32_to_i8(v, a, n, &sa), n);
    ck_assert_uint_eq(x->f32_to_i8(v, b, n, &sb), n);
    ck_assert_uint_eq(st_f32_bits(sa), st_f32_bits(sb));
    ck_assert_msg(memcmp(a, b, n) == 0, "i8 of %zu values differs", n);
    float *da = malloc((n + 1) * sizeof *da), *db = malloc((n + 1) * sizeof *db);
    ref->i8_to_f32(a, sa, da, n);
    x->i8_to_f32(b, sb, db, n);
    ck_assert(memcmp(da, db, n * sizeof *da) == 0);
    for (size_t i = 0; i < n; i++) /* the error bound of the format */
        ck_assert_msg(fabsf(da[i] - v[i]) <= 0.5f * sa * 1.0001f + 1e-37f,
                      "i8 error at %zu: %g vs %g (scale %g)", i, (double)da[i], (double)v[i],
                      (double)sa);
    free(v);
    free(a);
    free(b);
    free(da);
    free(db);
}

START_TEST(test_i8)
{
    static const size_t lens[] = {1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 100, 4096, 4097};
    float *v = malloc(5000 * sizeof *v);
    wt_rng r = {99};
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
        for (int t = 0; t < 20; t++) {
            for (size_t i = 0; i < lens[l]; i++)
                v[i] = wt_gauss(&r) * (t % 3 == 0 ? 1e-3f : t % 3 == 1 ? 1.0f : 3e4f);
            cv_check_i8(v, lens[l]);
        }
        float e[64];
        size_t ne = cv_edges(e);
        cv_check_i8(e, ne < lens[l] ? ne : lens[l]);
    }
    /* ties to even: amax 127 gives inv 1 */
    const st_convert_ops *ref = st_convert_ref();
    float ties[8] = {127.0f, 2.5f, 3.5f, -2.5f, -3.5f, 0.5f, -0.5f, 1.5f};
    int8_t q[8];
    float s;
    ck_assert_uint_eq(ref->f32_to_i8(ties, q, 8, &s), 8);
    ck_assert(s == 1.0f);
    static const int8_t want[8] = {127, 2, 4, -2, -4, 0, 0, 2};
    ck_assert(memcmp(q, want, 8) == 0);
    cv_check_i8(ties, 8);
    /* amax below the smallest normal: scale 0, all zero */
    float tiny[3] = {cv_f(0x00000005u), -cv_f(0x007fffffu), 0.0f};
    ck_assert_uint_eq(ref->f32_to_i8(tiny, q, 3, &s), 3);
    ck_assert(s == 0.0f && q[0] == 0 && q[1] == 0 && q[2] == 0);
    cv_check_i8(tiny, 3);
    free(v);
}
END_TEST

START_TEST(test_nonfinite)
{
    const st_convert_ops *ops[2] = {st_convert_ref(), cv_x86()};
    static const uint32_t badv[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u,
                                    0x7f800001u};
    float *v = malloc(200 * sizeof *v), *f = malloc(200 * sizeof *f);
    uint16_t h[200];
    int8_t q[200];
    for (int k = 0; k < 2; k++) {
        for (size_t n = 1; n < 120; n += 7) {
            for (size_t at = 0; at < n; at += 5) {
                for (size_t i = 0; i < n; i++)
                    v[i] = (float)i * 0.25f - 3.0f;
                v[at] = cv_f(badv[(n + at) % 5]);
                if (at + 3 < n)
                    v[at + 3] = cv_f(0x7f800000u); /* a later one does not matter */
                uint64_t c = 0;
                float s;
                ck_assert_uint_eq(ops[k]->f32_copy(v, f, n), at);
                ck_assert_uint_eq(ops[k]->f32_to_f16(v, h, n, &c), at);
                ck_assert_uint_eq(ops[k]->f32_to_bf16(v, h, n), at);
                ck_assert_uint_eq(ops[k]->f32_to_i8(v, q, n, &s), at);
                v[at] = cv_f(0x7f7f8000u); /* finite, but Inf as bf16 */
                if (at + 3 < n)
                    v[at + 3] = 1.0f;
                ck_assert_uint_eq(ops[k]->f32_to_bf16(v, h, n), at);
                ck_assert_uint_eq(ops[k]->f32_to_f16(v, h, n, &c), n);
                ck_assert_uint_eq(ops[k]->f32_to_i8(v, q, n, &s), at);
                v[at] = cv_f(0x7f7f7fffu); /* largest that rounds to a finite bf16 */
                ck_assert_uint_eq(ops[k]->f32_to_bf16(v, h, n), n);
                v[at] = -cv_f(0x7f000000u); /* 2^127: beyond i8 */
                ck_assert_uint_eq(ops[k]->f32_to_i8(v, q, n, &s), at);
                v[at] = cv_f(0x7effffffu);
                ck_assert_uint_eq(ops[k]->f32_to_i8(v, q, n, &s), n);
            }
        }
    }
    free(v);
    free(f);
}
END_TEST

/* cv_check_fused - the *_crc encoders of both variants equal the plain
 * encoder followed by crc32c, on v[0..n). */
static void cv_check_fused(const float *v, size_t n, uint32_t crc0)
{
    const st_convert_ops *ops[2] = {st_convert_ref(), cv_x86()};
    float *f = malloc((n + 1) * sizeof *f);
    uint16_t *h = malloc((n + 1) * 2), *w = malloc((n + 1) * 2);
    for (int k = 0; k < 2; k++) {
        const st_convert_ops *o = ops[k];
        uint32_t c = crc0;
        ck_assert_uint_eq(o->f32_copy_crc(v, f, n, &c), n);
        ck_assert_uint_eq(c, st_convert_ref()->crc32c(crc0, v, n * 4));
        ck_assert(memcmp(f, v, n * 4) == 0);
        uint64_t ca = 0, cb = 0;
        c = crc0;
        ck_assert_uint_eq(o->f32_to_f16_crc(v, h, n, &ca, &c), n);
        ck_assert_uint_eq(st_convert_ref()->f32_to_f16(v, w, n, &cb), n);
        ck_assert_msg(memcmp(h, w, n * 2) == 0 && ca == cb, "%s f16_crc n %zu", o->name, n);
        ck_assert_uint_eq(c, st_convert_ref()->crc32c(crc0, w, n * 2));
        c = crc0;
        ck_assert_uint_eq(o->f32_to_bf16_crc(v, h, n, &c), n);
        ck_assert_uint_eq(st_convert_ref()->f32_to_bf16(v, w, n), n);
        ck_assert_msg(memcmp(h, w, n * 2) == 0, "%s bf16_crc n %zu", o->name, n);
        ck_assert_uint_eq(c, st_convert_ref()->crc32c(crc0, w, n * 2));
    }
    free(f);
    free(h);
    free(w);
}

START_TEST(test_fused_crc)
{
    static const size_t around[] = {96, 192, 768, 1536, 6144, 12288, 24576, 36864};
    size_t cap = 36864 * 2 + 64;
    float *v = malloc(cap * sizeof *v);
    wt_rng r = {3};
    for (size_t i = 0; i < cap; i++)
        v[i] = wt_gauss(&r) * (i % 97 == 0 ? 40000.0f : 3.0f); /* some clamp in f16 */
    for (size_t n = 0; n < 300; n++)
        cv_check_fused(v, n, (uint32_t)n * 2654435761u);
    for (size_t a = 0; a < sizeof around / sizeof around[0]; a++)
        for (size_t d = 0; d < 40; d += 7) {
            cv_check_fused(v, around[a] - d, 0);
            cv_check_fused(v + 1, around[a] + d, 0xffffffffu);
        }
    cv_check_fused(v, cap, 5);
    /* a non-finite value inside the fused lanes and in the tail */
    const st_convert_ops *ops[2] = {st_convert_ref(), cv_x86()};
    float *f = malloc(cap * sizeof *f);
    uint16_t *h = malloc(cap * 2);
    static const size_t at[] = {0, 5, 4095, 4096, 9000, 12287, 12290, 24600, 36863};
    for (int k = 0; k < 2; k++)
        for (size_t a = 0; a < sizeof at / sizeof at[0]; a++) {
            float keep = v[at[a]];
            v[at[a]] = st_bits_f32(0x7fc00000u);
            uint32_t c = 0;
            uint64_t cl = 0;
            ck_assert_uint_eq(ops[k]->f32_copy_crc(v, f, 36864, &c), at[a]);
            ck_assert_uint_eq(ops[k]->f32_to_f16_crc(v, h, 36864, &cl, &c), at[a]);
            ck_assert_uint_eq(ops[k]->f32_to_bf16_crc(v, h, 36864, &c), at[a]);
            v[at[a]] = keep;
        }
    free(f);
    free(h);
    free(v);
}
END_TEST

START_TEST(test_select)
{
    ck_assert_ptr_eq(st_convert_select(1), st_convert_ref());
    ck_assert_ptr_eq(st_convert_get(ST_CONV_REF), st_convert_ref());
    ck_assert_ptr_null(st_convert_get(ST_CONV_COUNT));
    setenv("STRATA_KERNELS", "ref", 1);
    ck_assert_ptr_eq(st_convert_select(0), st_convert_ref());
    unsetenv("STRATA_KERNELS");
    ck_assert_str_eq(st_convert_select(0)->name, "avx2");
}
END_TEST

Suite *wt_convert_suite(int exhaustive)
{
    cv_exhaustive = exhaustive;
    Suite *s = suite_create(exhaustive ? "wire_convert_exhaustive" : "wire_convert");
    TCase *tc = tcase_create("convert");
    tcase_set_timeout(tc, exhaustive ? 1200 : 120);
    if (exhaustive) {
        tcase_add_test(tc, test_sweep);
    } else {
        tcase_add_test(tc, test_crc32c);
        tcase_add_test(tc, test_f16_decode_all);
        tcase_add_test(tc, test_bf16_decode_all);
        tcase_add_test(tc, test_16bit_encode);
        tcase_add_test(tc, test_sweep);
        tcase_add_test(tc, test_i8);
        tcase_add_test(tc, test_nonfinite);
        tcase_add_test(tc, test_fused_crc);
        tcase_add_test(tc, test_select);
    }
    suite_add_tcase(s, tc);
    return s;
}
