/* tg_roundtrip.c - writer -> reader round trips, the streaming mode, the
 * writer's own validation, the model id, and touch / resident bytes. */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/model/gguf.h"
#include "common/model/gguf_write.h"
#include "tests/gguf/tg_util.h"

Suite *tg_roundtrip_suite(void);

static char *tmpdir_make(void)
{
    char *d = strdup("/tmp/st_gguf_XXXXXX");
    ck_assert(mkdtemp(d) != NULL);
    return d;
}

/* Counts the entries of dir other than . and .. */
static int dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    ck_assert(d != NULL);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
    closedir(d);
    return n;
}

static void rm_dir(char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        char p[4096];
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        unlink(p);
    }
    if (d)
        closedir(d);
    rmdir(dir);
    free(dir);
}

/* Tensor payloads of the round trip: one per dtype. */
typedef struct rt_tensor {
    const char *name;
    st_dtype dt;
    uint32_t nd;
    int64_t ne[4];
    size_t nbytes;
    uint8_t *data;
} rt_tensor;

static rt_tensor rt_tensors[] = {
    {"w.f32", ST_DT_F32, 2, {64, 3, 1, 1}, 64 * 3 * 4, NULL},
    {"w.f16", ST_DT_F16, 3, {32, 2, 3, 1}, 32 * 6 * 2, NULL},
    {"w.bf16", ST_DT_BF16, 1, {96, 1, 1, 1}, 96 * 2, NULL},
    {"w.q8_0", ST_DT_Q8_0, 2, {64, 5, 1, 1}, 2 * 5 * 34, NULL},
    {"w.q4_0", ST_DT_Q4_0, 4, {32, 2, 2, 2}, 8 * 18, NULL},
};
#define RT_N (sizeof rt_tensors / sizeof rt_tensors[0])

static void rt_fill(void)
{
    uint32_t x = 12345;
    for (size_t i = 0; i < RT_N; i++) {
        free(rt_tensors[i].data);
        rt_tensors[i].data = malloc(rt_tensors[i].nbytes);
        for (size_t k = 0; k < rt_tensors[i].nbytes; k++) {
            x = x * 1664525u + 1013904223u;
            rt_tensors[i].data[k] = (uint8_t)(x >> 24);
        }
    }
}

static const uint8_t arr_u8[] = {0, 1, 255};
static const int8_t arr_i8[] = {-128, 0, 127};
static const uint16_t arr_u16[] = {0, 65535};
static const int16_t arr_i16[] = {-32768, 32767};
static const uint32_t arr_u32[] = {0, 4000000000u};
static const int32_t arr_i32[] = {-2147483647 - 1, 2147483647};
static const uint64_t arr_u64[] = {0, UINT64_MAX};
static const int64_t arr_i64[] = {INT64_MIN, INT64_MAX};
static const float arr_f32[] = {1.5f, -0.0f, 3.25e-8f};
static const double arr_f64[] = {1e300, -2.5};
static const uint8_t arr_bool[] = {1, 0, 1};

/* Adds every kind of pair and the rt_tensors (streamed or not). */
static void rt_build(st_gguf_writer *w, int streamed)
{
    ck_assert(st_gguf_writer_add_u8(w, "s.u8", 0xAB) == ST_OK);
    ck_assert(st_gguf_writer_add_i8(w, "s.i8", -5) == ST_OK);
    ck_assert(st_gguf_writer_add_u16(w, "s.u16", 0xBEEF) == ST_OK);
    ck_assert(st_gguf_writer_add_i16(w, "s.i16", -30000) == ST_OK);
    ck_assert(st_gguf_writer_add_u32(w, "s.u32", 4000000000u) == ST_OK);
    ck_assert(st_gguf_writer_add_i32(w, "s.i32", -123456) == ST_OK);
    ck_assert(st_gguf_writer_add_u64(w, "s.u64", 0xFEDCBA9876543210ull) == ST_OK);
    ck_assert(st_gguf_writer_add_i64(w, "s.i64", -1234567890123ll) == ST_OK);
    ck_assert(st_gguf_writer_add_f32(w, "s.f32", 0.1f) == ST_OK);
    ck_assert(st_gguf_writer_add_f64(w, "s.f64", 0.1) == ST_OK);
    ck_assert(st_gguf_writer_add_bool(w, "s.bool_t", true) == ST_OK);
    ck_assert(st_gguf_writer_add_bool(w, "s.bool_f", false) == ST_OK);
    ck_assert(st_gguf_writer_add_str(w, "s.str", "h\xC3\xA9llo") == ST_OK);
    ck_assert(st_gguf_writer_add_strn(w, "s.str_nul", "a\0b", 3) == ST_OK);
    ck_assert(st_gguf_writer_add_str(w, "s.str_empty", "") == ST_OK);
    ck_assert(st_gguf_writer_add_arr(w, "a.u8", ST_GGUF_UINT8, arr_u8, 3) == ST_OK);
    ck_assert(st_gguf_writer_add_arr(w, "a.i8", ST_GGUF_INT8, arr_i8, 3) == ST_OK);
    ck_assert(st_gguf_writer_add_arr(w, "a.u16", ST_GGUF_UINT16, arr_u16, 2) == ST_OK);
    ck_assert(st_gguf_writer_add_arr(w, "a.i16", ST_GGUF_INT16, arr_i16, 2) == ST_OK);
    ck_assert(st_gguf_writer_add_arr(w, "a.u32", ST_GGUF_UINT32, arr_u32, 2) == ST_OK);
    ck_assert(st_gguf_writer_add_arr(w, "a.i32", ST_GGUF_INT32, arr_i32, 2) == ST_OK);
    ck_assert(st_gguf_writer_add_arr(w, "a.u64", ST_GGUF_UINT64, arr_u64, 2) == ST_OK);
    ck_assert(st_gguf_writer_add_arr(w, "a.i64", ST_GGUF_INT64, arr_i64, 2) == ST_OK);
    ck_assert(st_gguf_writer_add_arr(w, "a.f32", ST_GGUF_FLOAT32, arr_f32, 3) == ST_OK);
    ck_assert(st_gguf_writer_add_arr(w, "a.f64", ST_GGUF_FLOAT64, arr_f64, 2) == ST_OK);
    ck_assert(st_gguf_writer_add_arr(w, "a.bool", ST_GGUF_BOOL, arr_bool, 3) == ST_OK);
    ck_assert(st_gguf_writer_add_arr(w, "a.empty", ST_GGUF_INT32, NULL, 0) == ST_OK);
    const char *strs[] = {"x", "", "\xE2\x96\x81word"};
    ck_assert(st_gguf_writer_add_arr_str(w, "a.str", strs, NULL, 3) == ST_OK);
    const char *bins[] = {"\0\1", "zz"};
    size_t lens[] = {2, 1};
    ck_assert(st_gguf_writer_add_arr_str(w, "a.bin", bins, lens, 2) == ST_OK);
    for (size_t i = 0; i < RT_N; i++) {
        rt_tensor *t = &rt_tensors[i];
        st_err e;
        if (streamed) {
            size_t nb;
            e = st_gguf_writer_add_tensor_info(w, t->name, t->dt, t->nd, t->ne, &nb);
            ck_assert_uint_eq(nb, t->nbytes);
        } else {
            e = st_gguf_writer_add_tensor(w, t->name, t->dt, t->nd, t->ne, t->data, t->nbytes);
        }
        ck_assert_msg(e == ST_OK, "%s: %s", t->name, st_errmsg(e));
    }
}

static const st_gguf_kv *kv_of(const st_gguf *g, const char *key, st_gguf_type t)
{
    const st_gguf_kv *kv = st_gguf_find_kv(g, key);
    ck_assert_msg(kv != NULL, "%s missing", key);
    ck_assert_msg(kv->type == t, "%s: type %d", key, kv->type);
    return kv;
}

static void check_arr(const st_gguf *g, const char *key, st_gguf_type et, const void *vals,
                      uint64_t n, size_t esz)
{
    const st_gguf_kv *kv;
    ck_assert(st_gguf_get_arr(g, key, et, &kv) == ST_OK);
    ck_assert_uint_eq(kv->arr_n, n);
    if (n)
        ck_assert_msg(memcmp(kv->arr_data, vals, n * esz) == 0, "%s values", key);
}

static void rt_check(const st_gguf *g)
{
    ck_assert_uint_eq(st_gguf_n_kv(g), 29);
    ck_assert_uint_eq(kv_of(g, "s.u8", ST_GGUF_UINT8)->v.u64, 0xAB);
    ck_assert_int_eq(kv_of(g, "s.i8", ST_GGUF_INT8)->v.i64, -5);
    ck_assert_uint_eq(kv_of(g, "s.u16", ST_GGUF_UINT16)->v.u64, 0xBEEF);
    ck_assert_int_eq(kv_of(g, "s.i16", ST_GGUF_INT16)->v.i64, -30000);
    ck_assert_uint_eq(kv_of(g, "s.u32", ST_GGUF_UINT32)->v.u64, 4000000000u);
    ck_assert_int_eq(kv_of(g, "s.i32", ST_GGUF_INT32)->v.i64, -123456);
    ck_assert(kv_of(g, "s.u64", ST_GGUF_UINT64)->v.u64 == 0xFEDCBA9876543210ull);
    ck_assert(kv_of(g, "s.i64", ST_GGUF_INT64)->v.i64 == -1234567890123ll);
    ck_assert(kv_of(g, "s.f32", ST_GGUF_FLOAT32)->v.f64 == (double)0.1f);
    ck_assert(kv_of(g, "s.f64", ST_GGUF_FLOAT64)->v.f64 == 0.1);
    ck_assert_uint_eq(kv_of(g, "s.bool_t", ST_GGUF_BOOL)->v.u64, 1);
    ck_assert_uint_eq(kv_of(g, "s.bool_f", ST_GGUF_BOOL)->v.u64, 0);
    ck_assert(st_gguf_str_eq(kv_of(g, "s.str", ST_GGUF_STRING)->v.str, "h\xC3\xA9llo"));
    st_gguf_str sn = kv_of(g, "s.str_nul", ST_GGUF_STRING)->v.str;
    ck_assert(sn.len == 3 && memcmp(sn.data, "a\0b", 3) == 0);
    ck_assert(st_gguf_str_eq(kv_of(g, "s.str_empty", ST_GGUF_STRING)->v.str, ""));

    /* typed getters and their conversions */
    uint32_t u32;
    uint64_t u64;
    float f;
    bool b;
    st_gguf_str s;
    ck_assert(st_gguf_get_u32(g, "s.u8", &u32) == ST_OK && u32 == 0xAB);
    ck_assert(st_gguf_get_u32(g, "s.u32", &u32) == ST_OK && u32 == 4000000000u);
    ck_assert(st_gguf_get_u32(g, "s.u64", &u32) == ST_ETYPE);
    ck_assert(st_gguf_get_u32(g, "s.i32", &u32) == ST_ETYPE);
    ck_assert(st_gguf_get_u64(g, "s.u64", &u64) == ST_OK && u64 == 0xFEDCBA9876543210ull);
    ck_assert(st_gguf_get_u64(g, "s.i8", &u64) == ST_ETYPE);
    ck_assert(st_gguf_get_u64(g, "s.f32", &u64) == ST_ETYPE);
    ck_assert(st_gguf_get_f32(g, "s.f32", &f) == ST_OK && f == 0.1f);
    ck_assert(st_gguf_get_f32(g, "s.f64", &f) == ST_OK && f == 0.1f);
    ck_assert(st_gguf_get_f32(g, "s.u32", &f) == ST_ETYPE);
    ck_assert(st_gguf_get_bool(g, "s.bool_t", &b) == ST_OK && b);
    ck_assert(st_gguf_get_bool(g, "s.u8", &b) == ST_ETYPE);
    ck_assert(st_gguf_get_str(g, "s.str", &s) == ST_OK && s.len == 6);
    ck_assert(st_gguf_get_str(g, "a.str", &s) == ST_ETYPE);
    ck_assert(st_gguf_get_str(g, "missing", &s) == ST_EMISSING);

    check_arr(g, "a.u8", ST_GGUF_UINT8, arr_u8, 3, 1);
    check_arr(g, "a.i8", ST_GGUF_INT8, arr_i8, 3, 1);
    check_arr(g, "a.u16", ST_GGUF_UINT16, arr_u16, 2, 2);
    check_arr(g, "a.i16", ST_GGUF_INT16, arr_i16, 2, 2);
    check_arr(g, "a.u32", ST_GGUF_UINT32, arr_u32, 2, 4);
    check_arr(g, "a.i32", ST_GGUF_INT32, arr_i32, 2, 4);
    check_arr(g, "a.u64", ST_GGUF_UINT64, arr_u64, 2, 8);
    check_arr(g, "a.i64", ST_GGUF_INT64, arr_i64, 2, 8);
    check_arr(g, "a.f32", ST_GGUF_FLOAT32, arr_f32, 3, 4);
    check_arr(g, "a.f64", ST_GGUF_FLOAT64, arr_f64, 2, 8);
    check_arr(g, "a.bool", ST_GGUF_BOOL, arr_bool, 3, 1);
    check_arr(g, "a.empty", ST_GGUF_INT32, NULL, 0, 4);
    const st_gguf_kv *kv;
    ck_assert(st_gguf_get_arr(g, "a.u8", ST_GGUF_TYPE_COUNT, &kv) == ST_OK);
    ck_assert(st_gguf_get_arr(g, "s.u8", ST_GGUF_TYPE_COUNT, &kv) == ST_ETYPE);
    int64_t iv;
    double dv;
    ck_assert(st_gguf_get_arr(g, "a.i8", ST_GGUF_INT8, &kv) == ST_OK);
    ck_assert(st_gguf_arr_i64(kv, 0, &iv) == ST_OK && iv == -128);
    ck_assert(st_gguf_get_arr(g, "a.u64", ST_GGUF_UINT64, &kv) == ST_OK);
    ck_assert(st_gguf_arr_i64(kv, 1, &iv) == ST_ERANGE);
    ck_assert(st_gguf_arr_f64(kv, 1, &dv) == ST_OK && dv == (double)UINT64_MAX);
    ck_assert(st_gguf_get_arr(g, "a.f32", ST_GGUF_FLOAT32, &kv) == ST_OK);
    ck_assert(st_gguf_arr_f64(kv, 2, &dv) == ST_OK && dv == (double)3.25e-8f);
    ck_assert(st_gguf_arr_i64(kv, 0, &iv) == ST_ETYPE);
    ck_assert(st_gguf_get_arr(g, "a.str", ST_GGUF_STRING, &kv) == ST_OK);
    ck_assert(st_gguf_arr_f64(kv, 0, &dv) == ST_ETYPE);
    ck_assert_uint_eq(kv->arr_n, 3);
    ck_assert(st_gguf_str_eq(kv->arr_strs[0], "x"));
    ck_assert(st_gguf_str_eq(kv->arr_strs[1], ""));
    ck_assert(st_gguf_str_eq(kv->arr_strs[2], "\xE2\x96\x81word"));
    ck_assert(st_gguf_get_arr(g, "a.bin", ST_GGUF_STRING, &kv) == ST_OK);
    ck_assert(kv->arr_strs[0].len == 2 && memcmp(kv->arr_strs[0].data, "\0\1", 2) == 0);
    ck_assert(st_gguf_str_eq(kv->arr_strs[1], "z"));

    ck_assert_uint_eq(st_gguf_n_tensors(g), RT_N);
    for (size_t i = 0; i < RT_N; i++) {
        const rt_tensor *r = &rt_tensors[i];
        const st_gguf_tensor *t = st_gguf_tensor_at(g, i);
        ck_assert(st_gguf_str_eq(t->name, r->name));
        ck_assert(st_gguf_find_tensor(g, r->name) == t);
        ck_assert_int_eq(t->dtype, r->dt);
        ck_assert_uint_eq(t->ggml_type, st_dtype_info_of(r->dt)->ggml_type);
        ck_assert_uint_eq(t->n_dims, r->nd);
        for (int d = 0; d < 4; d++)
            ck_assert_int_eq(t->ne[d], r->ne[d]);
        ck_assert_uint_eq(t->nbytes, r->nbytes);
        ck_assert_msg(memcmp(t->data, r->data, r->nbytes) == 0, "%s bytes", r->name);
        ck_assert_uint_eq((uintptr_t)((const uint8_t *)t->data - (const uint8_t *)st_gguf_base(g)) %
                              32,
                          0);
    }
}

START_TEST(test_roundtrip_file_and_mem)
{
    rt_fill();
    char *dir = tmpdir_make();
    char path[4200];
    snprintf(path, sizeof path, "%s/rt.gguf", dir);
    st_gguf_writer *w;
    ck_assert(st_gguf_writer_open(path, &w) == ST_OK);
    rt_build(w, 0);
    ck_assert(access(path, F_OK) != 0); /* nothing at the final path before finish */
    st_err e = st_gguf_writer_finish(w);
    ck_assert_msg(e == ST_OK, "%s", st_errmsg(e));
    st_gguf_writer_free(w);
    ck_assert_int_eq(dir_entries(dir), 1); /* the temporary file is gone */

    st_gguf *g;
    e = st_gguf_open(path, &g);
    ck_assert_msg(e == ST_OK, "%s", st_errmsg(e));
    rt_check(g);
    ck_assert(st_gguf_find_kv(g, "general.alignment") == NULL);
    ck_assert_uint_eq(st_gguf_file_size(g) % 32, 0);

    /* the memory mode produces the same bytes */
    ck_assert(st_gguf_writer_new(&w) == ST_OK);
    rt_build(w, 0);
    uint8_t *buf;
    size_t len;
    ck_assert(st_gguf_writer_to_mem(w, &buf, &len) == ST_OK);
    ck_assert_uint_eq(len, st_gguf_file_size(g));
    ck_assert(memcmp(buf, st_gguf_base(g), len) == 0);
    st_gguf *gm;
    ck_assert(st_gguf_open_mem(buf, len, &gm) == ST_OK);
    rt_check(gm);
    st_gguf_close(gm);
    free(buf);
    st_gguf_writer_free(w);
    st_gguf_close(g);

    /* alignment 64 when general.alignment says so */
    ck_assert(st_gguf_writer_new(&w) == ST_OK);
    ck_assert(st_gguf_writer_add_u32(w, "general.alignment", 64) == ST_OK);
    rt_build(w, 0);
    ck_assert(st_gguf_writer_to_mem(w, &buf, &len) == ST_OK);
    ck_assert(st_gguf_open_mem(buf, len, &g) == ST_OK);
    ck_assert_uint_eq(st_gguf_alignment(g), 64);
    for (uint64_t i = 0; i < st_gguf_n_tensors(g); i++)
        ck_assert_uint_eq(st_gguf_tensor_at(g, i)->offset % 64, 0);
    ck_assert_uint_eq(st_gguf_data_offset(g) % 64, 0);
    st_gguf_close(g);
    free(buf);
    st_gguf_writer_free(w);
    rm_dir(dir);
}
END_TEST

START_TEST(test_streaming)
{
    rt_fill();
    char *dir = tmpdir_make();
    char p1[4200], p2[4200];
    snprintf(p1, sizeof p1, "%s/a.gguf", dir);
    snprintf(p2, sizeof p2, "%s/b.gguf", dir);
    st_gguf_writer *w;
    ck_assert(st_gguf_writer_open(p1, &w) == ST_OK);
    rt_build(w, 0);
    ck_assert(st_gguf_writer_finish(w) == ST_OK);
    st_gguf_writer_free(w);

    /* stream the same tensors in chunks of 7 bytes that cross boundaries */
    ck_assert(st_gguf_writer_open(p2, &w) == ST_OK);
    rt_build(w, 1);
    ck_assert(st_gguf_writer_write(w, "x", 1) == ST_EINVAL); /* before begin_data */
    ck_assert(st_gguf_writer_begin_data(w) == ST_OK);
    ck_assert(st_gguf_writer_add_u8(w, "late", 1) == ST_EINVAL);
    size_t total = 0;
    for (size_t i = 0; i < RT_N; i++)
        total += rt_tensors[i].nbytes;
    uint8_t *all = malloc(total);
    size_t at = 0;
    for (size_t i = 0; i < RT_N; i++) {
        memcpy(all + at, rt_tensors[i].data, rt_tensors[i].nbytes);
        at += rt_tensors[i].nbytes;
    }
    for (size_t k = 0; k < total; k += 7)
        ck_assert(st_gguf_writer_write(w, all + k, total - k < 7 ? total - k : 7) == ST_OK);
    ck_assert(st_gguf_writer_write(w, "x", 1) == ST_ERANGE);
    ck_assert(st_gguf_writer_finish(w) == ST_OK);
    st_gguf_writer_free(w);
    size_t l1, l2;
    uint8_t *b1 = tg_read_path(p1, &l1), *b2 = tg_read_path(p2, &l2);
    ck_assert(b1 && b2 && l1 == l2 && memcmp(b1, b2, l1) == 0);
    free(b1);
    free(b2);
    unlink(p1);
    unlink(p2);

    /* an incomplete stream fails and leaves no file behind */
    ck_assert(st_gguf_writer_open(p2, &w) == ST_OK);
    rt_build(w, 1);
    ck_assert(st_gguf_writer_begin_data(w) == ST_OK);
    ck_assert(st_gguf_writer_write(w, all, total - 3) == ST_OK);
    ck_assert(st_gguf_writer_finish(w) == ST_ETRUNC);
    ck_assert(strstr(st_errdetail(), "w.q4_0") != NULL);
    ck_assert(st_gguf_writer_finish(w) == ST_EINVAL); /* single-shot */
    st_gguf_writer_free(w);
    ck_assert(access(p2, F_OK) != 0);
    ck_assert_int_eq(dir_entries(dir), 0);
    /* an abandoned writer leaves nothing either */
    ck_assert(st_gguf_writer_open(p2, &w) == ST_OK);
    rt_build(w, 0);
    st_gguf_writer_free(w);
    ck_assert_int_eq(dir_entries(dir), 0);
    free(all);
    rm_dir(dir);
}
END_TEST

START_TEST(test_writer_rejects)
{
    st_gguf_writer *w;
    ck_assert(st_gguf_writer_new(&w) == ST_OK);
    ck_assert(st_gguf_writer_add_u32(w, "k", 1) == ST_OK);
    ck_assert(st_gguf_writer_add_str(w, "k", "again") == ST_EFORMAT);
    ck_assert(strstr(st_errdetail(), "'k'") != NULL);
    ck_assert(st_gguf_writer_add_u32(w, "general.alignment", 48) == ST_EINVAL);
    ck_assert(st_gguf_writer_add_u32(w, "general.alignment", 0) == ST_EINVAL);
    ck_assert(st_gguf_writer_add_i32(w, "general.alignment", 32) == ST_EINVAL);
    ck_assert(st_gguf_writer_add_arr(w, "a", ST_GGUF_STRING, NULL, 0) == ST_ETYPE);
    ck_assert(st_gguf_writer_add_arr(w, "a", ST_GGUF_ARRAY, NULL, 0) == ST_ETYPE);
    uint8_t bad_bool[] = {0, 2};
    ck_assert(st_gguf_writer_add_arr(w, "a", ST_GGUF_BOOL, bad_bool, 2) == ST_EINVAL);
    static uint8_t data[1024];
    int64_t ne[4] = {32, 2, 1, 1};
    ck_assert(st_gguf_writer_add_tensor(w, "t", ST_DT_F32, 2, ne, data, 256) == ST_OK);
    ck_assert(st_gguf_writer_add_tensor(w, "t", ST_DT_F32, 2, ne, data, 256) == ST_EFORMAT);
    ck_assert(st_gguf_writer_add_tensor(w, "u", ST_DT_F32, 2, ne, data, 255) == ST_ESHAPE);
    ck_assert(st_gguf_writer_add_tensor(w, "u", ST_DT_F32, 0, ne, data, 256) == ST_ESHAPE);
    ck_assert(st_gguf_writer_add_tensor(w, "u", ST_DT_F32, 5, ne, data, 256) == ST_ESHAPE);
    ck_assert(st_gguf_writer_add_tensor(w, "u", ST_DT_COUNT, 2, ne, data, 256) == ST_ETYPE);
    int64_t ne_q[4] = {48, 1, 1, 1};
    ck_assert(st_gguf_writer_add_tensor(w, "u", ST_DT_Q4_0, 1, ne_q, data, 27) == ST_ESHAPE);
    int64_t ne_z[4] = {32, 0, 1, 1};
    ck_assert(st_gguf_writer_add_tensor(w, "u", ST_DT_F32, 2, ne_z, data, 0) == ST_ESHAPE);
    ck_assert(st_gguf_writer_finish(w) == ST_EINVAL); /* memory writer */
    ck_assert(st_gguf_writer_begin_data(w) == ST_EINVAL);
    st_gguf_kv_layout l;
    ck_assert(st_gguf_writer_kv_layout(w, 0, &l) == ST_EINVAL); /* not serialised yet */
    uint8_t *buf;
    size_t len;
    ck_assert(st_gguf_writer_to_mem(w, &buf, &len) == ST_OK);
    ck_assert(st_gguf_writer_kv_layout(w, 0, &l) == ST_OK);
    ck_assert_uint_eq(l.key_off, 24);
    ck_assert(st_gguf_writer_kv_layout(w, 1, &l) == ST_ERANGE);
    free(buf);
    st_gguf_writer_free(w);
    ck_assert(st_gguf_writer_open("/nonexistent-dir/x.gguf", &w) == ST_EIO);
    ck_assert(w == NULL);
}
END_TEST

START_TEST(test_model_id)
{
    tg_file f;
    tg_base(&f, 0);
    st_gguf *g1, *g2;
    uint8_t id1[32], id2[32], want[32];
    ck_assert(st_gguf_open_mem(f.buf, f.len, &g1) == ST_OK);
    ck_assert(st_gguf_model_id(g1, id1) == ST_OK);
    ck_assert(sodium_init() >= 0);
    crypto_generichash(want, 32, f.buf, st_gguf_table_end(g1), NULL, 0);
    ck_assert(memcmp(id1, want, 32) == 0);
    ck_assert(st_gguf_model_id(g1, id2) == ST_OK);
    ck_assert(memcmp(id1, id2, 32) == 0); /* stable */
    st_gguf_close(g1);

    /* one metadata byte: "crafted" -> "crafteD" */
    st_gguf_kv_layout l = tg_kv(&f, TG_KV_NAME);
    f.buf[l.value_off + 8 + 6] = 'D';
    ck_assert(st_gguf_open_mem(f.buf, f.len, &g2) == ST_OK);
    ck_assert(st_gguf_model_id(g2, id2) == ST_OK);
    ck_assert(memcmp(id1, id2, 32) != 0);
    st_gguf_close(g2);
    tg_reset(&f);
    /* one byte of a tensor's shape */
    st_gguf_tensor_layout lt = tg_tensor(&f, TG_T_LAST);
    tg_put_u64(f.buf, lt.ne_off, 32);
    ck_assert(st_gguf_open_mem(f.buf, f.len, &g2) == ST_OK);
    ck_assert(st_gguf_model_id(g2, id2) == ST_OK);
    ck_assert(memcmp(id1, id2, 32) != 0);
    st_gguf_close(g2);
    tg_reset(&f);
    /* same bytes in another buffer: same id */
    uint8_t *copy = malloc(f.len);
    memcpy(copy, f.buf, f.len);
    ck_assert(st_gguf_open_mem(copy, f.len, &g2) == ST_OK);
    ck_assert(st_gguf_model_id(g2, id2) == ST_OK);
    ck_assert(memcmp(id1, id2, 32) == 0);
    st_gguf_close(g2);
    free(copy);
    tg_free(&f);

    /* a real file: opened twice, the same id */
    g1 = tg_open_model("stories260K.gguf");
    g2 = tg_open_model("stories260K.gguf");
    ck_assert(st_gguf_model_id(g1, id1) == ST_OK);
    ck_assert(st_gguf_model_id(g2, id2) == ST_OK);
    ck_assert(memcmp(id1, id2, 32) == 0);
    st_gguf_close(g2);
    g2 = tg_open_model("synth-s-f32.gguf");
    ck_assert(st_gguf_model_id(g2, id2) == ST_OK);
    ck_assert(memcmp(id1, id2, 32) != 0);
    st_gguf_close(g1);
    st_gguf_close(g2);
}
END_TEST

START_TEST(test_touch_resident)
{
    st_gguf *g = tg_open_model("synth-s-f32.gguf");
    size_t r0, r1;
    ck_assert(st_gguf_resident_bytes(g, &r0) == ST_OK);
    ck_assert(r0 <= st_gguf_file_size(g));
    const st_gguf_tensor *t = st_gguf_find_tensor(g, "blk.3.ffn_up.weight");
    ck_assert(t != NULL);
    size_t n = st_gguf_touch(g, t);
    long page = sysconf(_SC_PAGESIZE);
    ck_assert_uint_ge(n, t->nbytes);
    ck_assert_uint_lt(n, t->nbytes + 2 * (size_t)page);
    ck_assert_uint_eq(n % (size_t)page, 0);
    ck_assert(st_gguf_resident_bytes(g, &r1) == ST_OK);
    ck_assert_uint_ge(r1, t->nbytes);
    st_gguf_close(g);

    tg_file f;
    tg_base(&f, 0);
    ck_assert(st_gguf_open_mem(f.buf, f.len, &g) == ST_OK);
    ck_assert_uint_ge(st_gguf_touch(g, st_gguf_tensor_at(g, 0)), 256);
    ck_assert(st_gguf_resident_bytes(g, &r1) == ST_OK);
    ck_assert_uint_eq(r1, f.len);
    st_gguf_close(g);
    tg_free(&f);
}
END_TEST

START_TEST(test_open_errors)
{
    st_gguf *g = (st_gguf *)0x1;
    ck_assert(st_gguf_open("/nonexistent/x.gguf", &g) == ST_ENOENT);
    ck_assert(g == NULL);
    ck_assert(strstr(st_errdetail(), "/nonexistent/x.gguf") != NULL);
    ck_assert(st_gguf_open("/tmp", &g) == ST_EINVAL);
    char path[8192];
    tg_model_path("stories260K.bin", path, sizeof path);
    ck_assert(st_gguf_open(path, &g) == ST_EFORMAT);
    ck_assert(strstr(st_errdetail(), "stories260K.bin") != NULL);
    st_gguf_close(NULL);
}
END_TEST

Suite *tg_roundtrip_suite(void)
{
    Suite *s = suite_create("gguf_roundtrip");
    TCase *tc = tcase_create("roundtrip");
    tcase_add_test(tc, test_roundtrip_file_and_mem);
    tcase_add_test(tc, test_streaming);
    tcase_add_test(tc, test_writer_rejects);
    tcase_add_test(tc, test_model_id);
    tcase_add_test(tc, test_touch_resident);
    tcase_add_test(tc, test_open_errors);
    suite_add_tcase(s, tc);
    return s;
}
