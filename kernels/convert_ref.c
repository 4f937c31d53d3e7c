/* convert_ref.c - scalar references of the wire conversions and CRC32C,
 * and the runtime choice of a variant.
 *
 * The references are deliberately plain loops over kernels/fp16.h's scalar
 * conversions: they define the results, and every SIMD variant is tested to
 * reproduce them bit for bit. Rounding to integers (i8) is written with
 * floorf and comparisons so it does not depend on the FPU rounding mode.
 * CRC32C uses a byte-wise table (the x86 variant uses the crc32 instruction
 * on three interleaved streams, combined with st_crc32c_shift's algebra). */
#include "kernels/convert.h"

#include <math.h>
#include <string.h>

#include "kernels/fp16.h"
#include "kernels/kernels_ref.h"
#include "kernels/variants.h"

#define CONV_CRC_POLY 0x82F63B78u

/* conv_crc_table[b] - CRC register after one byte b from register 0. */
static const uint32_t conv_crc_table[256] = {
    0x00000000u, 0xf26b8303u, 0xe13b70f7u, 0x1350f3f4u, 0xc79a971fu, 0x35f1141cu, 0x26a1e7e8u,
    0xd4ca64ebu, 0x8ad958cfu, 0x78b2dbccu, 0x6be22838u, 0x9989ab3bu, 0x4d43cfd0u, 0xbf284cd3u,
    0xac78bf27u, 0x5e133c24u, 0x105ec76fu, 0xe235446cu, 0xf165b798u, 0x030e349bu, 0xd7c45070u,
    0x25afd373u, 0x36ff2087u, 0xc494a384u, 0x9a879fa0u, 0x68ec1ca3u, 0x7bbcef57u, 0x89d76c54u,
    0x5d1d08bfu, 0xaf768bbcu, 0xbc267848u, 0x4e4dfb4bu, 0x20bd8edeu, 0xd2d60dddu, 0xc186fe29u,
    0x33ed7d2au, 0xe72719c1u, 0x154c9ac2u, 0x061c6936u, 0xf477ea35u, 0xaa64d611u, 0x580f5512u,
    0x4b5fa6e6u, 0xb93425e5u, 0x6dfe410eu, 0x9f95c20du, 0x8cc531f9u, 0x7eaeb2fau, 0x30e349b1u,
    0xc288cab2u, 0xd1d83946u, 0x23b3ba45u, 0xf779deaeu, 0x05125dadu, 0x1642ae59u, 0xe4292d5au,
    0xba3a117eu, 0x4851927du, 0x5b016189u, 0xa96ae28au, 0x7da08661u, 0x8fcb0562u, 0x9c9bf696u,
    0x6ef07595u, 0x417b1dbcu, 0xb3109ebfu, 0xa0406d4bu, 0x522bee48u, 0x86e18aa3u, 0x748a09a0u,
    0x67dafa54u, 0x95b17957u, 0xcba24573u, 0x39c9c670u, 0x2a993584u, 0xd8f2b687u, 0x0c38d26cu,
    0xfe53516fu, 0xed03a29bu, 0x1f682198u, 0x5125dad3u, 0xa34e59d0u, 0xb01eaa24u, 0x42752927u,
    0x96bf4dccu, 0x64d4cecfu, 0x77843d3bu, 0x85efbe38u, 0xdbfc821cu, 0x2997011fu, 0x3ac7f2ebu,
    0xc8ac71e8u, 0x1c661503u, 0xee0d9600u, 0xfd5d65f4u, 0x0f36e6f7u, 0x61c69362u, 0x93ad1061u,
    0x80fde395u, 0x72966096u, 0xa65c047du, 0x5437877eu, 0x4767748au, 0xb50cf789u, 0xeb1fcbadu,
    0x197448aeu, 0x0a24bb5au, 0xf84f3859u, 0x2c855cb2u, 0xdeeedfb1u, 0xcdbe2c45u, 0x3fd5af46u,
    0x7198540du, 0x83f3d70eu, 0x90a324fau, 0x62c8a7f9u, 0xb602c312u, 0x44694011u, 0x5739b3e5u,
    0xa55230e6u, 0xfb410cc2u, 0x092a8fc1u, 0x1a7a7c35u, 0xe811ff36u, 0x3cdb9bddu, 0xceb018deu,
    0xdde0eb2au, 0x2f8b6829u, 0x82f63b78u, 0x709db87bu, 0x63cd4b8fu, 0x91a6c88cu, 0x456cac67u,
    0xb7072f64u, 0xa457dc90u, 0x563c5f93u, 0x082f63b7u, 0xfa44e0b4u, 0xe9141340u, 0x1b7f9043u,
    0xcfb5f4a8u, 0x3dde77abu, 0x2e8e845fu, 0xdce5075cu, 0x92a8fc17u, 0x60c37f14u, 0x73938ce0u,
    0x81f80fe3u, 0x55326b08u, 0xa759e80bu, 0xb4091bffu, 0x466298fcu, 0x1871a4d8u, 0xea1a27dbu,
    0xf94ad42fu, 0x0b21572cu, 0xdfeb33c7u, 0x2d80b0c4u, 0x3ed04330u, 0xccbbc033u, 0xa24bb5a6u,
    0x502036a5u, 0x4370c551u, 0xb11b4652u, 0x65d122b9u, 0x97baa1bau, 0x84ea524eu, 0x7681d14du,
    0x2892ed69u, 0xdaf96e6au, 0xc9a99d9eu, 0x3bc21e9du, 0xef087a76u, 0x1d63f975u, 0x0e330a81u,
    0xfc588982u, 0xb21572c9u, 0x407ef1cau, 0x532e023eu, 0xa145813du, 0x758fe5d6u, 0x87e466d5u,
    0x94b49521u, 0x66df1622u, 0x38cc2a06u, 0xcaa7a905u, 0xd9f75af1u, 0x2b9cd9f2u, 0xff56bd19u,
    0x0d3d3e1au, 0x1e6dcdeeu, 0xec064eedu, 0xc38d26c4u, 0x31e6a5c7u, 0x22b65633u, 0xd0ddd530u,
    0x0417b1dbu, 0xf67c32d8u, 0xe52cc12cu, 0x1747422fu, 0x49547e0bu, 0xbb3ffd08u, 0xa86f0efcu,
    0x5a048dffu, 0x8ecee914u, 0x7ca56a17u, 0x6ff599e3u, 0x9d9e1ae0u, 0xd3d3e1abu, 0x21b862a8u,
    0x32e8915cu, 0xc083125fu, 0x144976b4u, 0xe622f5b7u, 0xf5720643u, 0x07198540u, 0x590ab964u,
    0xab613a67u, 0xb831c993u, 0x4a5a4a90u, 0x9e902e7bu, 0x6cfbad78u, 0x7fab5e8cu, 0x8dc0dd8fu,
    0xe330a81au, 0x115b2b19u, 0x020bd8edu, 0xf0605beeu, 0x24aa3f05u, 0xd6c1bc06u, 0xc5914ff2u,
    0x37faccf1u, 0x69e9f0d5u, 0x9b8273d6u, 0x88d28022u, 0x7ab90321u, 0xae7367cau, 0x5c18e4c9u,
    0x4f48173du, 0xbd23943eu, 0xf36e6f75u, 0x0105ec76u, 0x12551f82u, 0xe03e9c81u, 0x34f4f86au,
    0xc69f7b69u, 0xd5cf889du, 0x27a40b9eu, 0x79b737bau, 0x8bdcb4b9u, 0x988c474du, 0x6ae7c44eu,
    0xbe2da0a5u, 0x4c4623a6u, 0x5f16d052u, 0xad7d5351u,
};

static int conv_finite(float x) { return (st_f32_bits(x) & 0x7f800000u) != 0x7f800000u; }

static size_t ref_f32_copy(const float *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!conv_finite(src[i]))
            return i;
        dst[i] = src[i];
    }
    return n;
}

static size_t ref_f32_to_f16(const float *src, uint16_t *dst, size_t n, uint64_t *n_clamped)
{
    uint64_t clamped = 0;
    for (size_t i = 0; i < n; i++) {
        float x = src[i];
        if (!conv_finite(x))
            return i;
        if (x > ST_F16_MAX) {
            x = ST_F16_MAX;
            clamped++;
        } else if (x < -ST_F16_MAX) {
            x = -ST_F16_MAX;
            clamped++;
        }
        dst[i] = st_f32_to_f16(x);
    }
    *n_clamped += clamped;
    return n;
}

static size_t ref_f16_to_f32(const uint16_t *src, float *dst, size_t n)
{
    size_t bad = n;
    for (size_t i = 0; i < n; i++) {
        float f = st_f16_to_f32(src[i]);
        if ((src[i] & 0x7c00u) == 0x7c00u) {
            if (src[i] & 0x3ffu)
                f = st_bits_f32(st_f32_bits(f) | 0x00400000u); /* quiet the NaN */
            bad = bad < i ? bad : i;
        }
        dst[i] = f;
    }
    return bad;
}

static size_t ref_f32_to_bf16(const float *src, uint16_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if ((st_f32_bits(src[i]) & 0x7fffffffu) >= 0x7f7f8000u) /* rounds to Inf, Inf, NaN */
            return i;
        dst[i] = st_f32_to_bf16(src[i]);
    }
    return n;
}

static size_t ref_bf16_to_f32(const uint16_t *src, float *dst, size_t n)
{
    size_t bad = n;
    for (size_t i = 0; i < n; i++) {
        if ((src[i] & 0x7f80u) == 0x7f80u && bad == n)
            bad = i;
        dst[i] = st_bf16_to_f32(src[i]);
    }
    return bad;
}

/* conv_round_even - v rounded to the nearest integer, ties to even, for
 * |v| < 2^22 (v - floorf(v) is then exact). */
static float conv_round_even(float v)
{
    float r = floorf(v);
    float d = v - r;
    if (d > 0.5f || (d == 0.5f && ((int32_t)r & 1) != 0))
        r += 1.0f;
    return r;
}

void st_conv_ref_i8_round(const float *src, int8_t *dst, size_t n, float inv)
{
    for (size_t i = 0; i < n; i++) {
        float q = conv_round_even(src[i] * inv);
        if (q > 127.0f)
            q = 127.0f;
        if (q < -127.0f)
            q = -127.0f;
        dst[i] = (int8_t)q;
    }
}

static size_t ref_f32_to_i8(const float *src, int8_t *dst, size_t n, float *scale)
{
    float amax = 0.0f;
    for (size_t i = 0; i < n; i++) {
        if ((st_f32_bits(src[i]) & 0x7fffffffu) >= 0x7f000000u) /* >= 2^127, Inf, NaN */
            return i;
        float a = fabsf(src[i]);
        if (a > amax)
            amax = a;
    }
    if (amax < 0x1p-126f) {
        *scale = 0.0f;
        memset(dst, 0, n);
        return n;
    }
    *scale = amax / 127.0f;
    st_conv_ref_i8_round(src, dst, n, 127.0f / amax);
    return n;
}

static void ref_i8_to_f32(const int8_t *src, float scale, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = (float)src[i] * scale;
}

static uint32_t ref_crc32c(uint32_t crc, const void *buf, size_t n)
{
    const unsigned char *p = buf;
    uint32_t c = ~crc;
    for (size_t i = 0; i < n; i++)
        c = (c >> 8) ^ conv_crc_table[(c ^ p[i]) & 0xffu];
    return ~c;
}

static size_t ref_f32_copy_crc(const float *src, float *dst, size_t n, uint32_t *crc)
{
    size_t r = ref_f32_copy(src, dst, n);
    if (r == n)
        *crc = ref_crc32c(*crc, dst, n * sizeof *dst);
    return r;
}

static size_t ref_f32_to_f16_crc(const float *src, uint16_t *dst, size_t n, uint64_t *n_clamped,
                                 uint32_t *crc)
{
    size_t r = ref_f32_to_f16(src, dst, n, n_clamped);
    if (r == n)
        *crc = ref_crc32c(*crc, dst, n * sizeof *dst);
    return r;
}

static size_t ref_f32_to_bf16_crc(const float *src, uint16_t *dst, size_t n, uint32_t *crc)
{
    size_t r = ref_f32_to_bf16(src, dst, n);
    if (r == n)
        *crc = ref_crc32c(*crc, dst, n * sizeof *dst);
    return r;
}

/* conv_gf2_mulmod - a * b mod P in the reflected representation (bit 31 is
 * the coefficient of x^0). */
static uint32_t conv_gf2_mulmod(uint32_t a, uint32_t b)
{
    uint32_t p = 0;
    for (int i = 0; i < 32; i++) {
        p ^= b & (0u - ((a >> (31 - i)) & 1u));
        b = (b >> 1) ^ (CONV_CRC_POLY & (0u - (b & 1u)));
    }
    return p;
}

uint32_t st_crc32c_shift(uint32_t reg, uint64_t nbytes)
{
    uint32_t xp = 0x80000000u; /* x^0 */
    uint32_t sq = 0x00800000u; /* x^8: one byte */
    while (nbytes) {
        if (nbytes & 1u)
            xp = conv_gf2_mulmod(xp, sq);
        sq = conv_gf2_mulmod(sq, sq);
        nbytes >>= 1;
    }
    return conv_gf2_mulmod(reg, xp);
}

static const st_convert_ops conv_ref_ops = {
    .name = "ref",
    .variant = ST_CONV_REF,
    .f32_copy = ref_f32_copy,
    .f32_to_f16 = ref_f32_to_f16,
    .f16_to_f32 = ref_f16_to_f32,
    .f32_to_bf16 = ref_f32_to_bf16,
    .bf16_to_f32 = ref_bf16_to_f32,
    .f32_to_i8 = ref_f32_to_i8,
    .i8_to_f32 = ref_i8_to_f32,
    .crc32c = ref_crc32c,
    .f32_copy_crc = ref_f32_copy_crc,
    .f32_to_f16_crc = ref_f32_to_f16_crc,
    .f32_to_bf16_crc = ref_f32_to_bf16_crc,
};

const st_convert_ops *st_convert_ref(void) { return &conv_ref_ops; }

const st_convert_ops *st_convert_get(st_convert_variant v)
{
    switch (v) {
    case ST_CONV_REF:
        return &conv_ref_ops;
    case ST_CONV_X86:
        /* the AVX2 kernels' checks (AVX, AVX2, FMA, F16C, XMM and YMM state
         * saved by the OS) plus SSE4.2 and PCLMULQDQ */
#if defined(__x86_64__)
        if (st_kernels_cpu_has(ST_KVAR_AVX2) && st_kernels_cpu_has_crc_clmul())
            return st_convert_x86_ops();
#endif
        return NULL;
    default:
        return NULL;
    }
}

const st_convert_ops *st_convert_select(int force_ref)
{
    if (force_ref || st_kernels_env_forces_ref())
        return &conv_ref_ops;
    const st_convert_ops *x86 = st_convert_get(ST_CONV_X86);
    return x86 != NULL ? x86 : &conv_ref_ops;
}
