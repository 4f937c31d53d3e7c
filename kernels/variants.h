/* variants.h - private hooks between select.c and the SIMD variants.
 *
 * Each SIMD variant lives in its own translation unit, compiled with the
 * ISA flags it needs, and exposes only a function returning its table (or
 * NULL while the variant is not written). select.c calls it only after the
 * runtime cpuid/xgetbv check succeeded, so no SIMD instruction runs on a CPU
 * or OS that lacks it. Not part of the public API. */
#ifndef ST_KERNELS_VARIANTS_H
#define ST_KERNELS_VARIANTS_H

#include "kernels/kernels.h"

/* st_kernels_avx2_table - the AVX2+FMA+F16C table, or NULL if this build
 * has none yet. Call only when the CPU and OS support AVX2, FMA and F16C. */
const st_kernel_ops *st_kernels_avx2_table(void);

/* st_kernels_avx512_table - the AVX-512 table (AVX-512 F/BW/VL K-quant
 * products, AVX2 kernels for the rest). Call only when the CPU and OS
 * support AVX-512 F/BW/VL with their state and AVX2, FMA and F16C. */
const st_kernel_ops *st_kernels_avx512_table(void);

#endif
