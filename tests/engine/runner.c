/* runner.c - whole-model runner for the engine tests (see runner.h). */
#include "tests/engine/runner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int runner_open(test_runner *r, const char *path, int64_t first, int64_t last, int threads,
                const st_kernel_ops *ops, int64_t max_tokens, int64_t n_ctx, st_dtype kv_dtype)
{
    memset(r, 0, sizeof *r);
    st_err e;
    if ((e = st_model_open(path, first, last, &r->m)) || (e = st_pool_open(threads, 0, &r->pool)) ||
        (e = st_stage_ctx_open(r->m, max_tokens, r->pool, ops, &r->ctx)) ||
        (e = st_stage_kv_alloc(r->ctx, n_ctx, kv_dtype, &r->kv))) {
        fprintf(stderr, "runner_open %s: %s\n", path, st_errmsg(e));
        runner_close(r);
        return -1;
    }
    r->n_vocab = st_model_hparams(r->m)->n_vocab;
    int64_t width = r->n_vocab > st_model_hparams(r->m)->n_embd ? r->n_vocab
                                                                : st_model_hparams(r->m)->n_embd;
    r->logits = malloc((size_t)max_tokens * (size_t)width * sizeof(float));
    return 0;
}

void runner_close(test_runner *r)
{
    free(r->logits);
    st_kv_free(r->kv);
    st_stage_ctx_close(r->ctx);
    st_pool_close(r->pool);
    st_model_close(r->m);
    memset(r, 0, sizeof *r);
}

int runner_eval(test_runner *r, const int32_t *ids, int64_t n, int64_t pos, int64_t chunk)
{
    for (int64_t done = 0; done < n; done += chunk) {
        int64_t k = n - done < chunk ? n - done : chunk;
        st_batch_row row = {.kv = r->kv, .pos = pos + done, .n_tok = k, .tokens = ids + done};
        st_err e = st_stage_forward(r->ctx, &row, 1, NULL, ST_OUT_LOGITS, r->logits,
                                    (size_t)r->n_vocab);
        if (e != ST_OK) {
            fprintf(stderr, "runner_eval: %s\n", st_errmsg(e));
            return -1;
        }
    }
    return 0;
}
