/* tk_util.c - random numbers, allocation and the variant list of the
 * kernel tests (see tk_util.h). */
#include "tests/kernels/tk_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TK_WHY_BYTES 160 /* room for a tk_variants_check message */

uint64_t tk_next(tk_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

float tk_unif(tk_rng *r) { return (float)((double)(tk_next(r) >> 11) * 0x1p-52 - 1.0); }

void tk_fill(tk_rng *r, float *x, int64_t n, float scale)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = tk_unif(r) * scale;
}

void *tk_alloc(size_t n)
{
    void *p = calloc(1, n ? n : 1);
    ck_assert_ptr_nonnull(p);
    return p;
}

int tk_variant_count(void)
{
    int n = 0;
    for (int v = 0; v < ST_KVAR_COUNT; v++)
        n += st_kernels_get((st_kvariant)v) != NULL;
    return n;
}

const st_kernel_ops *tk_variant(int i)
{
    int seen = 0;
    for (int v = 0; v < ST_KVAR_COUNT; v++) {
        const st_kernel_ops *ops = st_kernels_get((st_kvariant)v);
        if (ops != NULL && seen++ == i)
            return ops;
    }
    ck_abort_msg("no variant #%d: %d present", i, seen);
    return NULL;
}

void tk_variants_print(const char *suite)
{
    printf("%s: variants run:", suite);
    for (int v = 0; v < ST_KVAR_COUNT; v++)
        if (st_kernels_get((st_kvariant)v) != NULL)
            printf(" %s", st_kvariant_name((st_kvariant)v));
    int lacking = 0;
    printf("; not supported by this CPU/OS:");
    for (int v = 0; v < ST_KVAR_COUNT; v++) {
        if (!st_kernels_cpu_has((st_kvariant)v)) {
            printf(" %s", st_kvariant_name((st_kvariant)v));
            lacking++;
        }
    }
    printf("%s", lacking ? "" : " none");
    for (int v = 0; v < ST_KVAR_COUNT; v++)
        if (st_kernels_cpu_has((st_kvariant)v) && st_kernels_get((st_kvariant)v) == NULL)
            printf("; supported but MISSING (fails 'variants'): %s",
                   st_kvariant_name((st_kvariant)v));
    printf("; st_kernels_select picks %s\n", st_kernels_select(0)->name);
    fflush(stdout);
}

bool tk_variants_check(const bool has[ST_KVAR_COUNT],
                       const st_kernel_ops *const table[ST_KVAR_COUNT], char *why, size_t cap)
{
    for (int v = 0; v < ST_KVAR_COUNT; v++) {
        const char *name = st_kvariant_name((st_kvariant)v);
        const st_kernel_ops *t = table[v];
        if (has[v] && t == NULL) {
            snprintf(why, cap, "the CPU and OS support %s but its table is missing", name);
            return false;
        }
        if (!has[v] && t != NULL) {
            snprintf(why, cap, "a %s table is offered on a CPU or OS without %s", name, name);
            return false;
        }
        if (t != NULL && (t->variant != (st_kvariant)v || strcmp(t->name, name) != 0)) {
            snprintf(why, cap, "the %s table says it is variant %d, '%s'", name, (int)t->variant,
                     t->name);
            return false;
        }
    }
    return true;
}

START_TEST(test_variants_present)
{
    bool has[ST_KVAR_COUNT];
    const st_kernel_ops *table[ST_KVAR_COUNT];
    for (int v = 0; v < ST_KVAR_COUNT; v++) {
        has[v] = st_kernels_cpu_has((st_kvariant)v);
        table[v] = st_kernels_get((st_kvariant)v);
    }
    char why[TK_WHY_BYTES];
    ck_assert_msg(tk_variants_check(has, table, why, sizeof why), "%s", why);
    ck_assert(has[ST_KVAR_REF]);
    ck_assert(!st_kernels_cpu_has(ST_KVAR_COUNT));
    ck_assert_ptr_null(st_kvariant_name(ST_KVAR_COUNT));
}
END_TEST

/* tk_variants_check on made-up machines: each row a CPU (has) and a build
 * (which tables exist), and whether the pair must pass. */
START_TEST(test_variants_check)
{
    static const st_kernel_ops ref = {.name = "ref", .variant = ST_KVAR_REF};
    static const st_kernel_ops avx2 = {.name = "avx2", .variant = ST_KVAR_AVX2};
    static const st_kernel_ops avx512 = {.name = "avx512", .variant = ST_KVAR_AVX512};
    static const st_kernel_ops mislabelled = {.name = "avx2", .variant = ST_KVAR_AVX512};
    static const struct {
        bool has[ST_KVAR_COUNT];
        const st_kernel_ops *table[ST_KVAR_COUNT];
        bool pass;
        const char *names; /* what the message must name when it fails */
    } cases[] = {
        {{true, false, false}, {&ref, NULL, NULL}, true, NULL},
        {{true, true, true}, {&ref, &avx2, &avx512}, true, NULL},
        {{true, true, false}, {&ref, &avx2, NULL}, true, NULL},
        {{true, true, false}, {&ref, NULL, NULL}, false, "avx2"}, /* AVX2 CPU, no table */
        {{true, true, true}, {&ref, &avx2, NULL}, false, "avx512"},
        {{true, true, true}, {&ref, NULL, &avx512}, false, "avx2"},
        {{true, false, false}, {&ref, &avx2, NULL}, false, "avx2"},
        {{true, true, true}, {&ref, &avx2, &mislabelled}, false, "avx512"},
        {{false, false, false}, {NULL, NULL, NULL}, true, NULL},
        {{true, false, false}, {NULL, NULL, NULL}, false, "ref"},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        char why[TK_WHY_BYTES] = "";
        const bool ok = tk_variants_check(cases[k].has, cases[k].table, why, sizeof why);
        ck_assert_msg(ok == cases[k].pass, "case %zu: %s (%s)", k, ok ? "passed" : "failed", why);
        if (!ok)
            ck_assert_msg(strstr(why, cases[k].names) != NULL, "case %zu: '%s' names no %s", k, why,
                          cases[k].names);
    }
}
END_TEST

TCase *tk_variants_tcase(void)
{
    TCase *tc = tcase_create("variants");
    tcase_add_test(tc, test_variants_present);
    tcase_add_test(tc, test_variants_check);
    return tc;
}
