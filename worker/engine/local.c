/* local.c - the single-process engine (see local.h). */
#include "worker/engine/local.h"

#include <stdlib.h>
#include <string.h>

#include "common/base/log.h"

st_err st_local_open(st_local *l, const char *path, int threads, const st_kernel_ops *ops,
                     int64_t chunk, int64_t n_ctx, st_dtype kv_dtype)
{
    memset(l, 0, sizeof *l);
    st_err e;
    if ((e = st_model_open(path, 0, -1, &l->m)))
        return e;
    const st_hparams *hp = st_model_hparams(l->m);
    if (n_ctx <= 0 || n_ctx > hp->n_ctx_train)
        n_ctx = hp->n_ctx_train;
    if (chunk <= 0)
        chunk = 128;
    l->chunk = chunk;
    l->n_ctx = n_ctx;
    l->n_vocab = hp->n_vocab;
    l->ops = ops != NULL ? ops : st_kernels_select(0);
    st_log(ST_LOG_INFO, "engine", "kernels: %s, KV cache: %s", l->ops->name,
           st_dtype_info_of(kv_dtype) != NULL ? st_dtype_info_of(kv_dtype)->name : "?");
    if ((e = st_pool_open(threads, 1, &l->pool)) || (e = st_model_place(l->m, l->ops, l->pool)) ||
        (e = st_stage_ctx_open(l->m, chunk, l->pool, l->ops, &l->ctx)) ||
        (e = st_stage_kv_alloc(l->ctx, n_ctx, kv_dtype, &l->kv)))
        goto fail;
    l->logits = malloc((size_t)l->n_vocab * sizeof(float));
    if (l->logits == NULL) {
        e = st_errorf(ST_ENOMEM, "logits");
        goto fail;
    }
    return ST_OK;
fail:
    st_local_close(l);
    return e;
}

void st_local_close(st_local *l)
{
    free(l->logits);
    st_kv_free(l->kv);
    st_stage_ctx_close(l->ctx);
    st_pool_close(l->pool);
    st_model_close(l->m);
    memset(l, 0, sizeof *l);
}

st_err st_local_eval(st_local *l, const int32_t *ids, int64_t n, int64_t pos)
{
    if (n < 1)
        return st_errorf(ST_EINVAL, "nothing to evaluate");
    if (pos + n > l->n_ctx)
        return st_errorf(ST_ERANGE, "%lld tokens at position %lld exceed the context of %lld",
                         (long long)n, (long long)pos, (long long)l->n_ctx);
    for (int64_t done = 0; done < n; done += l->chunk) {
        int64_t k = n - done < l->chunk ? n - done : l->chunk;
        st_batch_row row = {.kv = l->kv, .pos = pos + done, .n_tok = k, .tokens = ids + done};
        st_err e = st_stage_forward(l->ctx, &row, 1, NULL, ST_OUT_LOGITS, l->logits,
                                    (size_t)l->n_vocab);
        if (e != ST_OK)
            return e;
    }
    return ST_OK;
}
