/* local.h - a single-process engine: the whole model as one stage
 * [0, n_layer) with embedding and head, one session, prompts prefilled in
 * chunks. Used by the CLI (`strata run`, `strata chat`, `strata bench
 * run`) and by the wire accuracy gate (worker/engine/wire_gate.h), which the
 * coordinator runs too. */
#ifndef ST_WORKER_LOCAL_H
#define ST_WORKER_LOCAL_H

#include "common/base/pool.h"
#include "worker/engine/stage.h"

typedef struct st_local {
    st_model *m;
    st_pool *pool;
    const st_kernel_ops *ops;
    st_stage_ctx *ctx;
    st_kv *kv;
    int64_t chunk; /* prefill chunk (tokens per forward) */
    int64_t n_ctx; /* KV positions */
    int64_t n_vocab;
    float *logits; /* [n_vocab] logits of the last evaluated token */
} st_local;

/* st_local_open - loads path with threads (0 = cores), kernels ops (NULL:
 * st_kernels_select's choice, which STRATA_KERNELS=ref may force), prefill
 * chunk, context n_ctx (0 = the model's) and a KV cache of dtype kv_dtype
 * (st_stage_kv_alloc). Logs the kernel variant and the cache's type. */
st_err st_local_open(st_local *l, const char *path, int threads, const st_kernel_ops *ops,
                     int64_t chunk, int64_t n_ctx, st_dtype kv_dtype);

/* st_local_close - frees everything; safe on a zeroed struct. */
void st_local_close(st_local *l);

/* st_local_eval - runs ids[0..n) at positions pos.. in chunks; the logits
 * of the last token land in l->logits. */
st_err st_local_eval(st_local *l, const int32_t *ids, int64_t n, int64_t pos);

#endif
