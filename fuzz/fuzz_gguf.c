/* fuzz_gguf.c - libFuzzer target of the GGUF reader.
 *
 * Each input is parsed with st_gguf_open_mem from a heap copy of exactly
 * its length (so ASan sees any over-read); on success every pair, array
 * element and tensor the reader returned is walked and read, tensor bytes
 * included, so a pointer the validator let through that leaves the buffer
 * is caught. The reader must never crash, hang or leak, whatever the bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/model/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t fz_sum(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint8_t s = 0;
    for (size_t i = 0; i < n; i++)
        s ^= b[i];
    return s;
}

static void fz_walk(const st_gguf *g)
{
    volatile uint8_t sink = 0;
    for (uint64_t i = 0; i < st_gguf_n_kv(g); i++) {
        const st_gguf_kv *kv = st_gguf_kv_at(g, i);
        sink ^= fz_sum(kv->key.data, (size_t)kv->key.len);
        if (kv->type == ST_GGUF_STRING)
            sink ^= fz_sum(kv->v.str.data, (size_t)kv->v.str.len);
        if (kv->type != ST_GGUF_ARRAY)
            continue;
        if (kv->arr_type == ST_GGUF_STRING) {
            for (uint64_t k = 0; k < kv->arr_n; k++)
                sink ^= fz_sum(kv->arr_strs[k].data, (size_t)kv->arr_strs[k].len);
        } else {
            for (uint64_t k = 0; k < kv->arr_n; k++) {
                double d;
                if (st_gguf_arr_f64(kv, k, &d) == ST_OK)
                    sink ^= (uint8_t)(d != d);
            }
        }
        char key[64];
        size_t n = kv->key.len < sizeof key - 1 ? (size_t)kv->key.len : sizeof key - 1;
        memcpy(key, kv->key.data, n);
        key[n] = '\0';
        (void)st_gguf_find_kv(g, key);
    }
    uint32_t u32;
    float f;
    st_gguf_str s;
    (void)st_gguf_get_u32(g, "llama.block_count", &u32);
    (void)st_gguf_get_f32(g, "llama.rope.freq_base", &f);
    (void)st_gguf_get_str(g, "general.architecture", &s);
    for (uint64_t i = 0; i < st_gguf_n_tensors(g); i++) {
        const st_gguf_tensor *t = st_gguf_tensor_at(g, i);
        sink ^= fz_sum(t->name.data, (size_t)t->name.len);
        sink ^= fz_sum(t->data, t->nbytes);
    }
    uint8_t id[32];
    (void)st_gguf_model_id(g, id);
    (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size ? size : 1);
    if (copy == NULL)
        return 0;
    if (size)
        memcpy(copy, data, size);
    st_gguf *g = NULL;
    if (st_gguf_open_mem(copy, size, &g) == ST_OK) {
        fz_walk(g);
        st_gguf_close(g);
    }
    free(copy);
    return 0;
}
