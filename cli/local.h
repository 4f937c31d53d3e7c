/* local.h - a single-process engine for the CLI: the whole model as one
 * stage [0, n_layer) with embedding and head, one session, prompts
 * prefilled in chunks. Used by `strata run` and `strata bench run`. */
#ifndef ST_CLI_LOCAL_H
#define ST_CLI_LOCAL_H

#include "common/pool.h"
#include "worker/stage.h"

typedef struct cli_local {
    st_model *m;
    st_pool *pool;
    const st_kernel_ops *ops;
    st_stage_ctx *ctx;
    st_kv *kv;
    int64_t chunk; /* prefill chunk (tokens per forward) */
    int64_t n_ctx; /* KV positions */
    int64_t n_vocab;
    float *logits; /* [n_vocab] logits of the last evaluated token */
} cli_local;

/* cli_local_open - loads path with threads (0 = cores), kernels (force_ref
 * forces the reference), prefill chunk and context n_ctx (0 = the model's).
 * Logs the kernel variant chosen. */
st_err cli_local_open(cli_local *l, const char *path, int threads, int force_ref, int64_t chunk,
                      int64_t n_ctx);

/* cli_local_close - frees everything; safe on a zeroed struct. */
void cli_local_close(cli_local *l);

/* cli_local_eval - runs ids[0..n) at positions pos.. in chunks; the logits
 * of the last token land in l->logits. */
st_err cli_local_eval(cli_local *l, const int32_t *ids, int64_t n, int64_t pos);

#endif
