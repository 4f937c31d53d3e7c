/* convert.h - conversions of activation rows between f32 and the wire
 * dtypes (f16, bf16, per-token i8), and the CRC32C checksum, as one table of
 * function pointers per variant.
 *
 * Design. Every entry has a scalar reference (convert_ref.c, built on the
 * scalar conversions of kernels/fp16.h, which define rounding and the bf16
 * subnormal flush); the x86 variant (convert_x86.c, AVX2 + F16C + SSE4.2
 * + PCLMULQDQ)
 * must agree with it bit for bit on every finite input: the tests compare
 * them on random and edge inputs and on all 65536 16-bit codes.
 *
 * Encoders never silently send a non-finite value: each returns n when all
 * of its n inputs are finite, else the index of the first NaN or Inf, and
 * then the contents of dst (and of *n_clamped, *scale) are unspecified.
 *
 * The x86 table is compiled with -mavx2 -mfma -mf16c and may only be used
 * after the runtime check of st_convert_get() / st_convert_select()
 * (cpuid and xgetbv). Nothing here allocates, locks or keeps state. */
#ifndef ST_CONVERT_H
#define ST_CONVERT_H

#include <stddef.h>
#include <stdint.h>

/* Largest finite IEEE half; f16 encoding clamps |x| > this to +-it. */
#define ST_F16_MAX 65504.0f

typedef enum st_convert_variant {
    ST_CONV_REF = 0,
    ST_CONV_X86 = 1, /* AVX2 + F16C + SSE4.2 (crc32) + PCLMULQDQ */
    ST_CONV_COUNT
} st_convert_variant;

typedef struct st_convert_ops {
    const char *name; /* "ref" or "avx2" */
    st_convert_variant variant;

    /* f32_copy - dst[i] = src[i]; returns n, or the index of the first
     * non-finite src value. */
    size_t (*f32_copy)(const float *src, float *dst, size_t n);

    /* f32_to_f16 - IEEE half, round to nearest even; |x| > 65504 is
     * clamped to +-65504 and counted: *n_clamped += that count. Returns n,
     * or the index of the first non-finite value. */
    size_t (*f32_to_f16)(const float *src, uint16_t *dst, size_t n, uint64_t *n_clamped);

    /* f16_to_f32 - exact widening of all n codes; a NaN comes out quiet
     * (bit 22 set, as F16C does), its sign and other payload bits kept.
     * Returns n, or the index of the first Inf or NaN code. */
    size_t (*f16_to_f32)(const uint16_t *src, float *dst, size_t n);

    /* f32_to_bf16 - bfloat16, round to nearest even, f32 subnormals
     * flushed to signed zero (st_f32_to_bf16). Returns n, or the index of
     * the first value that is non-finite or would round to +-Inf
     * (|x| >= 0x1.ffp127, bits 0x7f7f8000). */
    size_t (*f32_to_bf16)(const float *src, uint16_t *dst, size_t n);

    /* bf16_to_f32 - exact widening (bits << 16) of all n codes. Returns n,
     * or the index of the first Inf or NaN code. */
    size_t (*bf16_to_f32)(const uint16_t *src, float *dst, size_t n);

    /* f32_to_i8 - one token, symmetric: a = max|x|. If a < 2^-126 (the
     * smallest normal f32, zero included) then *scale = 0 and every q = 0.
     * Otherwise *scale = a / 127 and, with inv = 127 / a (both f32
     * divisions), q = round_half_even(x * inv) clamped to [-127, 127].
     * Returns n, or the index of the first value that is non-finite or
     * |x| >= 2^127 (whose q * scale could overflow). */
    size_t (*f32_to_i8)(const float *src, int8_t *dst, size_t n, float *scale);

    /* i8_to_f32 - dst[i] = (float)q[i] * scale (one f32 product). */
    void (*i8_to_f32)(const int8_t *src, float scale, float *dst, size_t n);

    /* crc32c - CRC-32C (Castagnoli, reflected poly 0x82F63B78) of n bytes,
     * continuing from crc in zlib style: crc32c(0, "123456789", 9) is
     * 0xE3069283 and crc32c(crc32c(0, a, na), b, nb) = crc32c(0, ab, na+nb). */
    uint32_t (*crc32c)(uint32_t crc, const void *buf, size_t n);

    /* f32_copy_crc, f32_to_f16_crc, f32_to_bf16_crc - as f32_copy,
     * f32_to_f16 and f32_to_bf16, and *crc = crc32c(*crc, dst bytes) when
     * all values were finite (*crc is unspecified otherwise). The SIMD
     * variant checksums each piece of output while it is still in cache. */
    size_t (*f32_copy_crc)(const float *src, float *dst, size_t n, uint32_t *crc);
    size_t (*f32_to_f16_crc)(const float *src, uint16_t *dst, size_t n, uint64_t *n_clamped,
                             uint32_t *crc);
    size_t (*f32_to_bf16_crc)(const float *src, uint16_t *dst, size_t n, uint32_t *crc);
} st_convert_ops;

/* st_convert_ref - the scalar reference table (never NULL). */
const st_convert_ops *st_convert_ref(void);

/* st_convert_get - the table of variant v, or NULL when v is not compiled
 * in or this CPU / OS lacks what it needs (cpuid: AVX, AVX2, FMA, F16C,
 * SSE4.2, PCLMULQDQ, OSXSAVE; xgetbv: the OS saves the YMM state). */
const st_convert_ops *st_convert_get(st_convert_variant v);

/* st_convert_select - the fastest supported table, or the reference when
 * force_ref is nonzero or the environment sets STRATA_KERNELS=ref. */
const st_convert_ops *st_convert_select(int force_ref);

/* st_convert_x86_ops - the x86 table WITHOUT any check (convert_x86.c);
 * only st_convert_get() calls it, after the runtime check. */
const st_convert_ops *st_convert_x86_ops(void);

/* st_crc32c_shift - the CRC register value `reg` advanced over nbytes zero
 * bytes (reg * x^(8 nbytes) mod P, reflected, no pre/post inversion): the
 * tool that combines CRCs of separately computed pieces. Scalar, slow
 * (square and multiply): used by tests to check the x86 constants. */
uint32_t st_crc32c_shift(uint32_t reg, uint64_t nbytes);

#endif
