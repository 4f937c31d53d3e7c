/* variants.h - private hooks between select.c, the SIMD variants and the
 * wire conversions' selector (convert_ref.c).
 *
 * Each SIMD variant lives in its own translation unit, compiled with the
 * ISA flags it needs, and exposes only a function returning its table (or
 * NULL while the variant is not written). select.c calls it only after the
 * runtime cpuid/xgetbv check succeeded, so no SIMD instruction runs on a CPU
 * or OS that lacks it. Not part of the public API. */
#ifndef ST_KERNELS_VARIANTS_H
#define ST_KERNELS_VARIANTS_H

#include <stdbool.h>

#include "kernels/kernels.h"

/* st_kernels_cpu_has_crc_clmul - SSE4.2 (crc32) and PCLMULQDQ in cpuid
 * (what the x86 wire conversions of convert_x86.c need besides
 * st_kernels_cpu_has(ST_KVAR_AVX2)); false on non-x86 machines. */
bool st_kernels_cpu_has_crc_clmul(void);

/* st_kernels_env_forces_ref - whether the environment sets
 * STRATA_KERNELS=ref (read on each call), which st_kernels_select and
 * st_convert_select obey. */
bool st_kernels_env_forces_ref(void);

/* st_kernels_avx2_table - the AVX2+FMA+F16C table, or NULL if this build
 * has none yet. Call only when the CPU and OS support AVX2, FMA and F16C. */
const st_kernel_ops *st_kernels_avx2_table(void);

/* st_kernels_avx512_table - the AVX-512 table (AVX-512 float, K-quant and
 * VNNI R8 products, AVX2 kernels for the rest). Call only when the CPU and
 * OS support AVX-512 F/BW/VL/VNNI/BF16 with their state and AVX2, FMA and F16C. */
const st_kernel_ops *st_kernels_avx512_table(void);

#endif
