/* tg_util.h - helpers of the GGUF tests: the shared models folder and a
 * small crafted file whose fields the tests corrupt one at a time. */
#ifndef ST_TESTS_TG_UTIL_H
#define ST_TESTS_TG_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "common/model/gguf.h"
#include "common/model/gguf_write.h"

/* Pairs of the crafted file, by index. */
enum {
    TG_KV_ARCH = 0,    /* general.architecture = "llama" */
    TG_KV_NAME = 1,    /* general.name = "crafted" */
    TG_KV_U32 = 2,     /* test.u32 = 7 */
    TG_KV_U3X = 3,     /* test.u3x = 8 (one byte from test.u32) */
    TG_KV_BOOL = 4,    /* test.bool = true */
    TG_KV_ARR_I32 = 5, /* test.arr_i32 = [1, -2, 3] */
    TG_KV_ARR_STR = 6, /* test.arr_str = ["a", "bc", ""] */
    TG_BASE_KVS = 7,
    TG_KV_ALIGN = 7, /* general.alignment = 32 (only when asked for) */
};

/* Tensors of the crafted file, by index. */
enum {
    TG_T_F32 = 0,  /* t.f32  F32  [32, 2] */
    TG_T_F16 = 1,  /* t.f16  F16  [32, 2] */
    TG_T_Q8 = 2,   /* t.q8   Q8_0 [32, 2] */
    TG_T_4D = 3,   /* t.4d   F32  [32, 1, 1, 1] */
    TG_T_BF16 = 4, /* t.bf16 BF16 [32] */
    TG_T_LAST = 5, /* t.last Q4_0 [64] */
    TG_BASE_TENSORS = 6,
};

typedef struct tg_file {
    uint8_t *buf;  /* the bytes under test */
    uint8_t *orig; /* pristine copy (tg_reset) */
    size_t len;
    size_t data_off;
    st_gguf_writer *w; /* kept for its layout */
    void *data;        /* tensor bytes */
} tg_file;

/* tg_base - builds the crafted file (with general.alignment if with_align). */
void tg_base(tg_file *f, int with_align);
void tg_reset(tg_file *f);
void tg_free(tg_file *f);
st_gguf_kv_layout tg_kv(const tg_file *f, uint64_t i);
st_gguf_tensor_layout tg_tensor(const tg_file *f, uint64_t i);
void tg_put_u32(uint8_t *b, size_t off, uint32_t v);
void tg_put_u64(uint8_t *b, size_t off, uint64_t v);

/* tg_models_dir - $STRATA_SHARED/models (default ../shared/models). */
void tg_models_dir(char *out, size_t cap);
/* tg_model_path - the path of a file in the models folder. */
void tg_model_path(const char *file, char *out, size_t cap);
/* tg_open_model - opens a shared model or fails the test. */
st_gguf *tg_open_model(const char *file);
/* tg_read_model - the whole file in a malloc'ed buffer or fails the test. */
uint8_t *tg_read_model(const char *file, size_t *len);
/* tg_read_path - the whole file at path (NULL if it cannot be read). */
uint8_t *tg_read_path(const char *path, size_t *len);

#endif
