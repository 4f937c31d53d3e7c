/* kv.c - per-session KV cache of a stage (see kv.h). */
#include "worker/engine/kv.h"

#include <stdlib.h>

st_err st_kv_alloc(int64_t n_layers, int64_t n_ctx, int64_t kv_dim, int64_t head_dim, st_dtype t,
                   st_kv **out)
{
    *out = NULL;
    st_err e = st_kv_dtype_check(t, head_dim);
    if (e != ST_OK)
        return e;
    size_t bytes = st_kv_bytes(n_layers, n_ctx, kv_dim, t);
    size_t row = 0, head = 0;
    if (bytes == 0 || st_row_size(t, kv_dim, &row) != ST_K_OK ||
        st_row_size(t, head_dim, &head) != ST_K_OK)
        return st_errorf(ST_EOVERFLOW, "KV cache of %lld layers x %lld positions x %lld values",
                         (long long)n_layers, (long long)n_ctx, (long long)kv_dim);
    st_kv *kv = calloc(1, sizeof *kv);
    if (kv == NULL)
        return st_errorf(ST_ENOMEM, "KV cache header");
    kv->k = calloc(1, bytes / 2);
    kv->v = calloc(1, bytes / 2);
    if (kv->k == NULL || kv->v == NULL) {
        st_kv_free(kv);
        return st_errorf(ST_ENOMEM, "KV cache of %zu bytes", bytes);
    }
    kv->n_layers = n_layers;
    kv->n_ctx = n_ctx;
    kv->kv_dim = kv_dim;
    kv->head_dim = head_dim;
    kv->dtype = t;
    kv->row_bytes = row;
    kv->head_bytes = head;
    *out = kv;
    return ST_OK;
}

void st_kv_free(st_kv *kv)
{
    if (kv == NULL)
        return;
    free(kv->k);
    free(kv->v);
    free(kv);
}

void st_kv_reset(st_kv *kv) { kv->n_filled = 0; }
