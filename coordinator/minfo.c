/* minfo.c - model facts from GGUF metadata for the coordinator (see
 * minfo.h). Key and tensor names and the supported architectures (llama,
 * qwen2) are common/arch.h's. Tensors are attributed by name
 * (st_arch_part_of): "blk.N.*" to layer N (biases included),
 * token_embd to the embedding, output_norm / output to the head (a model
 * without output.weight ties its head to the embedding, so the last stage
 * holds the embedding's bytes too); anything else counts in the total
 * only. */
#include "coordinator/minfo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/arch.h"
#include "kernels/kernels.h"

#define MINFO_DEFAULT_CTX 2048 /* context_length when the file has none (llama.cpp's) */

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

st_err st_minfo_from_gguf(const st_gguf *g, st_minfo *m)
{
    memset(m, 0, sizeof *m);
    const st_arch *a;
    st_err e = st_arch_from_gguf(g, &a);
    if (e != ST_OK)
        return e;
    char k[ST_AK_COUNT][ST_ARCH_NAME_MAX];
    for (int i = 0; i < ST_AK_COUNT; i++)
        st_arch_key_name(a, (st_arch_key)i, k[i]);
    if ((e = minfo_u32(g, k[ST_AK_BLOCK_COUNT], true, 0, &m->n_layer)) ||
        (e = minfo_u32(g, k[ST_AK_EMBEDDING_LENGTH], true, 0, &m->n_embd)) ||
        (e = minfo_u32(g, k[ST_AK_HEAD_COUNT], true, 0, &m->n_head)) ||
        (e = minfo_u32(g, k[ST_AK_CONTEXT_LENGTH], false, MINFO_DEFAULT_CTX, &m->n_ctx_train)))
        return e;
    if ((e = minfo_u32(g, k[ST_AK_HEAD_COUNT_KV], false, m->n_head, &m->n_head_kv)))
        return e;
    if (m->n_embd % m->n_head != 0 || m->n_head % m->n_head_kv != 0)
        return st_errorf(ST_ESHAPE, "embedding_length %u, head_count %u, head_count_kv %u do not "
                         "divide", m->n_embd, m->n_head, m->n_head_kv);
    char embd[ST_ARCH_NAME_MAX];
    st_arch_tensor_name(ST_AT_TOKEN_EMBD, 0, embd);
    const st_gguf_tensor *te = st_gguf_find_tensor(g, embd);
    if (te == NULL)
        return st_errorf(ST_EMISSING, "tensor '%s' is missing", embd);
    if (te->ne[1] < 1 || te->ne[1] > (1 << 30))
        return st_errorf(ST_ESHAPE, "tensor '%s' has %lld rows", embd, (long long)te->ne[1]);
    if ((e = minfo_u32(g, k[ST_AK_VOCAB_SIZE], false, (uint32_t)te->ne[1], &m->n_vocab)))
        return e;
    uint64_t kv_dim = (uint64_t)m->n_head_kv * (m->n_embd / m->n_head);
    m->kv_bytes_per_token_layer = 2 * kv_dim * sizeof(float);

    m->layer_bytes = calloc(m->n_layer, sizeof *m->layer_bytes);
    uint64_t dt_bytes[ST_DT_COUNT] = {0};
    if (m->layer_bytes == NULL)
        return st_errorf(ST_ENOMEM, "layer table of %u layers", m->n_layer);
    bool tied = st_arch_head_tied(g);
    for (uint64_t i = 0; i < st_gguf_n_tensors(g); i++) {
        const st_gguf_tensor *t = st_gguf_tensor_at(g, i);
        m->total_bytes += t->nbytes;
        int64_t l;
        st_arch_part part = st_arch_part_of(t->name, &l);
        if (part == ST_AP_LAYER) {
            if (l >= m->n_layer) {
                e = st_errorf(ST_ESHAPE, "tensor '%.*s' names layer %lld of a %u-layer model",
                              (int)t->name.len, t->name.data, (long long)l, m->n_layer);
                st_minfo_free(m);
                return e;
            }
            m->layer_bytes[l] += t->nbytes;
            if ((unsigned)t->dtype < ST_DT_COUNT)
                dt_bytes[t->dtype] += t->nbytes;
        } else if (part == ST_AP_EMBD) {
            m->embd_bytes += t->nbytes;
            if (tied)
                m->head_bytes += t->nbytes;
        } else if (part == ST_AP_HEAD) {
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
