/* tk_util.h - what the kernel test binaries (test_kernels, test_repack)
 * share: deterministic random numbers, checked allocation, and the list of
 * kernel variants the op tests loop over. Test code only.
 *
 * Variants. An op test is a check loop test over i in [0,
 * tk_variant_count()) taking tk_variant(i): the tables st_kernels_get
 * returns on this machine, the reference first. So an absent variant is
 * not a test that passes without testing; each suite prints which
 * variants it runs (tk_variants_print), and tk_variants_tcase fails when
 * the CPU and OS support a variant (st_kernels_cpu_has) whose table is
 * missing. STRATA_KERNELS=ref changes nothing here: only the selectors
 * (st_kernels_select, st_convert_select) obey it, st_kernels_get does not,
 * so the SIMD tables are tested under it too. */
#ifndef ST_TESTS_TK_UTIL_H
#define ST_TESTS_TK_UTIL_H

#include <check.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

/* tk_rng - a splitmix64 stream; seed it with {seed}. */
typedef struct tk_rng {
    uint64_t s;
} tk_rng;

/* tk_next - the next 64 random bits. */
uint64_t tk_next(tk_rng *r);

/* tk_unif - uniform in [-1, 1). */
float tk_unif(tk_rng *r);

/* tk_fill - x[i] = tk_unif(r) * scale for i < n. */
void tk_fill(tk_rng *r, float *x, int64_t n, float scale);

/* tk_alloc - n zeroed bytes (at least 1); a failed allocation fails the
 * test. */
void *tk_alloc(size_t n);

/* tk_variant_count - how many variants st_kernels_get returns here (the
 * reference always: at least 1). */
int tk_variant_count(void);

/* tk_variant - the i-th of them in st_kvariant order (i = 0: the
 * reference); fails the test if there is no i-th. */
const st_kernel_ops *tk_variant(int i);

/* tk_variants_print - prints which variants the loop tests of `suite`
 * run, which ones this CPU lacks, and a note when STRATA_KERNELS=ref is
 * set (stdout, in the meson test log). */
void tk_variants_print(const char *suite);

/* tk_variants_check - compares what the CPU and OS support (has[v]) with
 * the tables present (table[v]) for every variant v: returns true when
 * each supported variant has a table, no unsupported one has, and each
 * table says it is v; otherwise false with the first mismatch in why (a
 * string of cap bytes). */
bool tk_variants_check(const bool has[ST_KVAR_COUNT],
                       const st_kernel_ops *const table[ST_KVAR_COUNT], char *why, size_t cap);

/* tk_variants_tcase - "variants": tk_variants_check on this machine
 * (st_kernels_cpu_has against st_kernels_get), and its own unit test
 * with made-up inputs (a CPU with AVX2 and no AVX2 table must fail). */
TCase *tk_variants_tcase(void);

#endif
