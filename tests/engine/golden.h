/* golden.h - helpers shared by the engine tests: reading the golden cases
 * of $STRATA_SHARED/golden/generation.json (and of a later wave's folder,
 * golden/wave2/generation.json) and running a model on them. */
#ifndef ST_TEST_GOLDEN_H
#define ST_TEST_GOLDEN_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

typedef struct golden_case {
    char model[128];       /* file name under models/ */
    char logits_file[128]; /* file name under dir */
    char dir[64];          /* the folder of the case under $STRATA_SHARED: "golden", ... */
    int32_t *prompt;       /* [n_prompt] */
    size_t n_prompt;
    int32_t *expected; /* [n] */
    size_t n;
    int64_t n_vocab;
} golden_case;

/* golden_load - reads every case of golden/; returns the count (0 on error). */
size_t golden_load(golden_case **cases);

/* golden_load_dir - the same for $STRATA_SHARED/<dir>/generation.json
 * (dir: "golden", "golden/wave2"). */
size_t golden_load_dir(const char *dir, golden_case **cases);
void golden_free(golden_case *cases, size_t n);

/* golden_path - "$STRATA_SHARED/<sub>/<name>" into buf. */
const char *golden_path(char *buf, size_t cap, const char *sub, const char *name);

/* golden_read_logits - n rows of n_vocab floats (malloc'ed) or NULL. */
float *golden_read_logits(const golden_case *gc);

#endif
