/* select.c - choosing a kernel variant at run time, and the one home of
 * the CPU feature checks of kernels/ (cpuid + xgetbv).
 *
 * Design. A SIMD variant is usable only when the CPU implements its
 * instructions (cpuid) AND the OS saves the wider registers on context
 * switches (OSXSAVE set and XCR0, read with xgetbv, enabling the XMM and
 * YMM state), AND the build contains its table. st_kernels_cpu_has answers
 * the first two (what the tests hold the build to: a supported variant
 * whose table is missing is a failure, not a skip); st_kernels_get all
 * three, freshly each call (no cached global state); st_kernels_select
 * takes the fastest usable one unless the caller or the environment
 * (STRATA_KERNELS=ref, read only here, by st_kernels_env_forces_ref, which
 * st_convert_select asks too; st_kernels_get ignores it) asks for the
 * reference. The wire conversions' x86 table (convert.h) needs
 * st_kernels_cpu_has_crc_clmul in addition to the AVX2 check.
 * This layer has no logger: the caller logs the chosen table's name. */
#include "kernels/kernels.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/variants.h"

#define SEL_ENV "STRATA_KERNELS" /* the environment variable that may force the reference */
#define SEL_ENV_REF "ref"        /* its value that does */

#if defined(__x86_64__)
#include <cpuid.h>

/* sel_xcr0 - the OS-enabled state components (XCR0); 0 without OSXSAVE. */
static uint64_t sel_xcr0(void)
{
    unsigned int a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    if (!(c & bit_OSXSAVE))
        return 0;
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* sel_cpu_has_avx2 - AVX + AVX2 + FMA + F16C in cpuid and XMM|YMM state
 * enabled by the OS. */
static bool sel_cpu_has_avx2(void)
{
    unsigned int a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    const unsigned int need1 = bit_AVX | bit_FMA | bit_F16C | bit_OSXSAVE;
    if ((c & need1) != need1)
        return 0;
    if (__get_cpuid_max(0, NULL) < 7)
        return 0;
    __cpuid_count(7, 0, a, b, c, d);
    if (!(b & bit_AVX2))
        return 0;
    const uint64_t xmm_ymm = 0x6;
    return (sel_xcr0() & xmm_ymm) == xmm_ymm;
}

/* sel_cpu_has_avx512 - what sel_cpu_has_avx2 asks, plus AVX-512 F, BW, VL,
 * VNNI and BF16 in cpuid and the opmask and ZMM state enabled by the OS
 * (Zen 4 and later, Sapphire Rapids and later; AVX-512 CPUs without VNNI
 * or BF16, Skylake-SP to Ice Lake, take the AVX2 variant). */
static bool sel_cpu_has_avx512(void)
{
    if (!sel_cpu_has_avx2())
        return 0;
    unsigned int a, b, c, d;
    __cpuid_count(7, 0, a, b, c, d);
    const unsigned int need7 = bit_AVX512F | bit_AVX512BW | bit_AVX512VL;
    if ((b & need7) != need7 || !(c & bit_AVX512VNNI))
        return 0;
    __cpuid_count(7, 1, a, b, c, d);
    if (!(a & bit_AVX512BF16))
        return 0;
    const uint64_t xmm_ymm_opmask_zmm = 0xe6; /* XMM, YMM, opmask, ZMM_Hi256, Hi16_ZMM */
    return (sel_xcr0() & xmm_ymm_opmask_zmm) == xmm_ymm_opmask_zmm;
}
#endif

const char *st_kvariant_name(st_kvariant v)
{
    static const char *const names[ST_KVAR_COUNT] =
        {[ST_KVAR_REF] = "ref", [ST_KVAR_AVX2] = "avx2", [ST_KVAR_AVX512] = "avx512"};
    if ((int)v < 0 || v >= ST_KVAR_COUNT)
        return NULL;
    return names[v];
}

st_kvariant st_kvariant_from_name(const char *name)
{
    int k = 0;
    while (k < ST_KVAR_COUNT && strcmp(name, st_kvariant_name((st_kvariant)k)) != 0)
        k++;
    return (st_kvariant)k;
}

bool st_kernels_cpu_has(st_kvariant v)
{
    switch (v) {
    case ST_KVAR_REF:
        return true;
    case ST_KVAR_AVX2:
#if defined(__x86_64__)
        return sel_cpu_has_avx2();
#else
        return false;
#endif
    case ST_KVAR_AVX512:
#if defined(__x86_64__)
        return sel_cpu_has_avx512();
#else
        return false;
#endif
    case ST_KVAR_COUNT:
        return false;
    }
    return false;
}

bool st_kernels_cpu_has_crc_clmul(void)
{
#if defined(__x86_64__)
    unsigned int a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return false;
    const unsigned int need1 = bit_SSE4_2 | bit_PCLMUL;
    return (c & need1) == need1;
#else
    return false;
#endif
}

const st_kernel_ops *st_kernels_get(st_kvariant v)
{
    if (!st_kernels_cpu_has(v))
        return NULL;
    switch (v) {
    case ST_KVAR_REF:
        return st_kernels_ref();
    case ST_KVAR_AVX2:
#if defined(__x86_64__)
        return st_kernels_avx2_table();
#else
        return NULL;
#endif
    case ST_KVAR_AVX512:
#if defined(__x86_64__)
        return st_kernels_avx512_table();
#else
        return NULL;
#endif
    case ST_KVAR_COUNT:
        return NULL;
    }
    return NULL;
}

bool st_kernels_env_forces_ref(void)
{
    const char *env = getenv(SEL_ENV);
    return env != NULL && strcmp(env, SEL_ENV_REF) == 0;
}

const st_kernel_ops *st_kernels_select(int force_ref)
{
    if (force_ref || st_kernels_env_forces_ref())
        return st_kernels_ref();
    const st_kvariant order[] = {ST_KVAR_AVX512, ST_KVAR_AVX2};
    for (size_t k = 0; k < sizeof(order) / sizeof(order[0]); k++) {
        const st_kernel_ops *ops = st_kernels_get(order[k]);
        if (ops != NULL)
            return ops;
    }
    return st_kernels_ref();
}
