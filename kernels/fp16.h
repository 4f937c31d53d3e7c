/* fp16.h - scalar conversions between f32 and the 16-bit float formats.
 *
 * These are the reference conversions every SIMD path is tested against.
 * f16: IEEE 754 binary16, round to nearest even, overflow to +-Inf (the
 * wire codec clamps before calling), NaN stays NaN, subnormals kept.
 * bf16: the top 16 bits of f32, round to nearest even; NaN stays a quiet
 * NaN. Subnormal f32 inputs are flushed to signed zero, because hardware
 * bf16 conversion (AVX512-BF16) does so: the one rule for both paths. */
#ifndef ST_FP16_H
#define ST_FP16_H

#include <stdint.h>
#include <string.h>

static inline uint32_t st_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float st_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* st_f16_to_f32 - exact widening of an IEEE half. */
static inline float st_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                man <<= 1;
                e++;
            } while ((man & 0x400u) == 0);
            man &= 0x3ffu;
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | (man << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    return st_bits_f32(u);
}

/* st_f32_to_f16 - IEEE half, round to nearest even (overflow -> Inf). */
static inline uint16_t st_f32_to_f16(float f)
{
    uint32_t x = st_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) /* Inf or NaN */
        return (uint16_t)(sign | 0x7c00u |
                          (absx > 0x7f800000u ? 0x200u | ((absx >> 13) & 0x3ffu) : 0));
    if (absx >= 0x477ff000u) /* rounds to >= 65520: overflow */
        return (uint16_t)(sign | 0x7c00u);
    if (absx < 0x38800000u) {   /* below the smallest normal half: subnormal or zero */
        if (absx < 0x33000000u) /* < 2^-25: rounds to zero */
            return (uint16_t)sign;
        uint32_t e = absx >> 23;
        uint32_t m = (absx & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t r = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1u)))
            r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = absx - 0x38000000u; /* rebias exponent 127 -> 15 */
    uint32_t m = r >> 13;
    uint32_t rem = r & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (m & 1u)))
        m++;
    return (uint16_t)(sign | m);
}

/* st_bf16_to_f32 - exact widening of a bfloat16. */
static inline float st_bf16_to_f32(uint16_t h) { return st_bits_f32((uint32_t)h << 16); }

/* st_f32_to_bf16 - bfloat16, round to nearest even, subnormals flushed. */
static inline uint16_t st_f32_to_bf16(float f)
{
    uint32_t x = st_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: keep quiet NaN */
        return (uint16_t)((x >> 16) | 0x40u);
    if ((x & 0x7f800000u) == 0) /* zero or subnormal: flush */
        return (uint16_t)((x >> 16) & 0x8000u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

#endif
