/* minfo.c - model facts from GGUF metadata for the coordinator (see
 * minfo.h). Tensors are attributed by name: "blk.N.*" to layer N,
 * token_embd to the embedding, output_norm / output to the head (a model
 * without output.weight ties its head to the embedding, so the last stage
 * holds the embedding's bytes too); anything else counts in the total
 * only. */
#include "coordinator/minfo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

static st_err minfo_u32(const st_gguf *g, const char *key, bool required, uint32_t dflt,
                        uint32_t *out)
{
    uint64_t v;
    st_err e = st_gguf_get_u64(g, key, &v);
    if (e == ST_EMISSING && !required) {
        *out = dflt;
        return ST_OK;
    }
    if (e != ST_OK)
        return e;
    if (v < 1 || v > (1u << 31))
        return st_errorf(ST_ERANGE, "key '%s' = %llu is out of range 1..2^31", key,
                         (unsigned long long)v);
    *out = (uint32_t)v;
    return ST_OK;
}

/* minfo_layer_of - the layer number of a "blk.N." tensor name, or -1. */
static int64_t minfo_layer_of(st_gguf_str name)
{
    if (name.len < 5 || memcmp(name.data, "blk.", 4) != 0)
        return -1;
    int64_t v = 0;
    uint64_t i = 4;
    for (; i < name.len && name.data[i] >= '0' && name.data[i] <= '9'; i++) {
        v = v * 10 + (name.data[i] - '0');
        if (v > (1 << 30))
            return -1;
    }
    if (i == 4 || i >= name.len || name.data[i] != '.')
        return -1;
    return v;
}

st_err st_minfo_from_gguf(const st_gguf *g, st_minfo *m)
{
    memset(m, 0, sizeof *m);
    st_gguf_str arch;
    st_err e = st_gguf_get_str(g, "general.architecture", &arch);
    if (e != ST_OK)
        return e;
    if (!st_gguf_str_eq(arch, "llama"))
        return st_errorf(ST_ETYPE, "general.architecture is '%.*s'; only 'llama' is supported",
                         (int)(arch.len > 64 ? 64 : arch.len), arch.data);
    if ((e = minfo_u32(g, "llama.block_count", true, 0, &m->n_layer)) ||
        (e = minfo_u32(g, "llama.embedding_length", true, 0, &m->n_embd)) ||
        (e = minfo_u32(g, "llama.attention.head_count", true, 0, &m->n_head)) ||
        (e = minfo_u32(g, "llama.context_length", false, 2048, &m->n_ctx_train)))
        return e;
    if ((e = minfo_u32(g, "llama.attention.head_count_kv", false, m->n_head, &m->n_head_kv)))
        return e;
    if (m->n_embd % m->n_head != 0 || m->n_head % m->n_head_kv != 0)
        return st_errorf(ST_ESHAPE, "embedding_length %u, head_count %u, head_count_kv %u do not "
                         "divide", m->n_embd, m->n_head, m->n_head_kv);
    const st_gguf_tensor *te = st_gguf_find_tensor(g, "token_embd.weight");
    if (te == NULL)
        return st_errorf(ST_EMISSING, "tensor 'token_embd.weight' is missing");
    if (te->ne[1] < 1 || te->ne[1] > (1 << 30))
        return st_errorf(ST_ESHAPE, "tensor 'token_embd.weight' has %lld rows",
                         (long long)te->ne[1]);
    if ((e = minfo_u32(g, "llama.vocab_size", false, (uint32_t)te->ne[1], &m->n_vocab)))
        return e;
    uint64_t kv_dim = (uint64_t)m->n_head_kv * (m->n_embd / m->n_head);
    m->kv_bytes_per_token_layer = 2 * kv_dim * sizeof(float);

    m->layer_bytes = calloc(m->n_layer, sizeof *m->layer_bytes);
    uint64_t dt_bytes[ST_DT_COUNT] = {0};
    if (m->layer_bytes == NULL)
        return st_errorf(ST_ENOMEM, "layer table of %u layers", m->n_layer);
    bool tied = st_gguf_find_tensor(g, "output.weight") == NULL;
    for (uint64_t i = 0; i < st_gguf_n_tensors(g); i++) {
        const st_gguf_tensor *t = st_gguf_tensor_at(g, i);
        m->total_bytes += t->nbytes;
        int64_t l = minfo_layer_of(t->name);
        if (l >= 0) {
            if (l >= m->n_layer) {
                e = st_errorf(ST_ESHAPE, "tensor '%.*s' names layer %lld of a %u-layer model",
                              (int)t->name.len, t->name.data, (long long)l, m->n_layer);
                st_minfo_free(m);
                return e;
            }
            m->layer_bytes[l] += t->nbytes;
            if ((unsigned)t->dtype < ST_DT_COUNT)
                dt_bytes[t->dtype] += t->nbytes;
        } else if (st_gguf_str_eq(t->name, "token_embd.weight")) {
            m->embd_bytes += t->nbytes;
            if (tied)
                m->head_bytes += t->nbytes;
        } else if (st_gguf_str_eq(t->name, "output_norm.weight") ||
                   st_gguf_str_eq(t->name, "output.weight")) {
            m->head_bytes += t->nbytes;
        }
    }
    for (uint32_t l = 0; l < m->n_layer; l++)
        if (m->layer_bytes[l] == 0) {
            e = st_errorf(ST_EMISSING, "layer %u has no tensors (blk.%u.*)", l, l);
            st_minfo_free(m);
            return e;
        }
    int best = 0;
    for (int d = 1; d < ST_DT_COUNT; d++)
        if (dt_bytes[d] > dt_bytes[best])
            best = d;
    snprintf(m->dtype, sizeof m->dtype, "%s", st_dtype_info_of((st_dtype)best)->name);
    if ((e = st_gguf_model_id(g, m->model_id))) {
        st_minfo_free(m);
        return e;
    }
    st_gguf_str name;
    if (st_gguf_get_str(g, "general.name", &name) == ST_OK)
        snprintf(m->name, sizeof m->name, "%.*s", (int)(name.len > 127 ? 127 : name.len),
                 name.data);
    return ST_OK;
}

void st_minfo_free(st_minfo *m)
{
    free(m->layer_bytes);
    m->layer_bytes = NULL;
}
