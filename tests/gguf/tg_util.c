/* tg_util.c - helpers of the GGUF tests (see tg_util.h). */
#include "tests/gguf/tg_util.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tg_put_u32(uint8_t *b, size_t off, uint32_t v) { memcpy(b + off, &v, 4); }

void tg_put_u64(uint8_t *b, size_t off, uint64_t v) { memcpy(b + off, &v, 8); }

void tg_base(tg_file *f, int with_align)
{
    memset(f, 0, sizeof *f);
    st_gguf_writer *w;
    ck_assert(st_gguf_writer_new(&w) == ST_OK);
    ck_assert(st_gguf_writer_add_str(w, "general.architecture", "llama") == ST_OK);
    ck_assert(st_gguf_writer_add_str(w, "general.name", "crafted") == ST_OK);
    ck_assert(st_gguf_writer_add_u32(w, "test.u32", 7) == ST_OK);
    ck_assert(st_gguf_writer_add_u32(w, "test.u3x", 8) == ST_OK);
    ck_assert(st_gguf_writer_add_bool(w, "test.bool", true) == ST_OK);
    int32_t ai[3] = {1, -2, 3};
    ck_assert(st_gguf_writer_add_arr(w, "test.arr_i32", ST_GGUF_INT32, ai, 3) == ST_OK);
    const char *as[3] = {"a", "bc", ""};
    ck_assert(st_gguf_writer_add_arr_str(w, "test.arr_str", as, NULL, 3) == ST_OK);
    if (with_align)
        ck_assert(st_gguf_writer_add_u32(w, "general.alignment", 32) == ST_OK);
    uint8_t *data = malloc(4096);
    ck_assert(data != NULL);
    for (int i = 0; i < 4096; i++)
        data[i] = (uint8_t)(i * 7 + 1);
    /* keep the f16/bf16/q scales finite: every byte pattern is some value,
     * and the reader does not look at values anyway */
    struct {
        const char *name;
        st_dtype dt;
        uint32_t nd;
        int64_t ne[4];
        size_t nbytes;
    } ts[TG_BASE_TENSORS] = {
        {"t.f32", ST_DT_F32, 2, {32, 2, 1, 1}, 256},  {"t.f16", ST_DT_F16, 2, {32, 2, 1, 1}, 128},
        {"t.q8", ST_DT_Q8_0, 2, {32, 2, 1, 1}, 68},   {"t.4d", ST_DT_F32, 4, {32, 1, 1, 1}, 128},
        {"t.bf16", ST_DT_BF16, 1, {32, 1, 1, 1}, 64}, {"t.last", ST_DT_Q4_0, 1, {64, 1, 1, 1}, 36},
    };
    size_t at = 0;
    for (int i = 0; i < TG_BASE_TENSORS; i++) {
        st_err e = st_gguf_writer_add_tensor(w, ts[i].name, ts[i].dt, ts[i].nd, ts[i].ne, data + at,
                                             ts[i].nbytes);
        ck_assert_msg(e == ST_OK, "%s", st_errmsg(e));
        at += ts[i].nbytes;
    }
    st_err e = st_gguf_writer_to_mem(w, &f->buf, &f->len);
    ck_assert_msg(e == ST_OK, "%s", st_errmsg(e));
    f->orig = malloc(f->len);
    memcpy(f->orig, f->buf, f->len);
    f->data_off = st_gguf_writer_data_offset(w);
    f->w = w;
    f->data = data;
}

void tg_reset(tg_file *f) { memcpy(f->buf, f->orig, f->len); }

void tg_free(tg_file *f)
{
    free(f->buf);
    free(f->orig);
    free(f->data);
    st_gguf_writer_free(f->w);
    memset(f, 0, sizeof *f);
}

st_gguf_kv_layout tg_kv(const tg_file *f, uint64_t i)
{
    st_gguf_kv_layout l;
    ck_assert(st_gguf_writer_kv_layout(f->w, i, &l) == ST_OK);
    return l;
}

st_gguf_tensor_layout tg_tensor(const tg_file *f, uint64_t i)
{
    st_gguf_tensor_layout l;
    ck_assert(st_gguf_writer_tensor_layout(f->w, i, &l) == ST_OK);
    return l;
}

void tg_models_dir(char *out, size_t cap)
{
    const char *shared = getenv("STRATA_SHARED");
    snprintf(out, cap, "%s/models", shared && *shared ? shared : "../shared");
}

void tg_model_path(const char *file, char *out, size_t cap)
{
    char dir[4096];
    tg_models_dir(dir, sizeof dir);
    snprintf(out, cap, "%s/%s", dir, file);
}

st_gguf *tg_open_model(const char *file)
{
    char path[8192];
    tg_model_path(file, path, sizeof path);
    st_gguf *g = NULL;
    st_err e = st_gguf_open(path, &g);
    ck_assert_msg(e == ST_OK, "%s: %s", path, st_errmsg(e));
    return g;
}

uint8_t *tg_read_path(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (fp == NULL)
        return NULL;
    if (fseek(fp, 0, SEEK_END) != 0) {
        fclose(fp);
        return NULL;
    }
    long n = ftell(fp);
    rewind(fp);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf == NULL || n < 0 || fread(buf, 1, (size_t)n, fp) != (size_t)n) {
        free(buf);
        fclose(fp);
        return NULL;
    }
    fclose(fp);
    *len = (size_t)n;
    return buf;
}

uint8_t *tg_read_model(const char *file, size_t *len)
{
    char path[8192];
    tg_model_path(file, path, sizeof path);
    uint8_t *buf = tg_read_path(path, len);
    ck_assert_msg(buf != NULL, "cannot read %s", path);
    return buf;
}
