/* runner.h - a whole-model runner for the engine tests: stage [0, L) with
 * embedding and head, one session, prompts prefilled in chunks. */
#ifndef ST_TEST_RUNNER_H
#define ST_TEST_RUNNER_H

#include "worker/engine/stage.h"

typedef struct test_runner {
    st_model *m;
    st_pool *pool;
    st_stage_ctx *ctx;
    st_kv *kv;
    float *logits; /* [max_tokens][n_vocab] */
    int64_t n_vocab;
} test_runner;

/* runner_open - model at path, first..last (-1 = all), threads, kernels,
 * a KV cache of n_ctx positions in kv_dtype. */
int runner_open(test_runner *r, const char *path, int64_t first, int64_t last, int threads,
                const st_kernel_ops *ops, int64_t max_tokens, int64_t n_ctx, st_dtype kv_dtype);
void runner_close(test_runner *r);

/* runner_eval - feeds ids at pos in chunks of `chunk`; logits of the last
 * token into r->logits (row 0). Returns 0 on success. */
int runner_eval(test_runner *r, const int32_t *ids, int64_t n, int64_t pos, int64_t chunk);

#endif
