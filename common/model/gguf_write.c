/* gguf_write.c - the GGUF v3 writer.
 *
 * Design. The writer collects pairs and tensor descriptions in memory
 * (values copied, tensor bytes only referenced) and serialises in one go:
 * everything before the data section is built in a growable byte buffer
 * (gw_buf), which is what both the file mode and the memory mode emit, so
 * the two cannot disagree. While building it records the file offset of
 * every field (the layout), which lets tests corrupt one field of an
 * otherwise valid file.
 *
 * Tensor offsets follow from the shapes alone: each tensor starts at the
 * next multiple of the alignment after the previous one's end. That is
 * what makes the streaming mode possible: the whole table can be written
 * before the first data byte exists, and st_gguf_writer_write only has to
 * count bytes and insert zero padding at tensor boundaries.
 *
 * Files are produced through a temporary file in the target's folder that
 * is synced and renamed at the end: readers see either no file or a whole
 * one. Everything the writer accepts is validated the way the reader
 * validates it (shapes, block multiples, duplicates), so the writer cannot
 * produce a file our reader rejects. */
#include "common/model/gguf_write.h"
#include "common/model/gguf_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GW_DEFAULT_ALIGNMENT 32

typedef struct gw_buf {
    uint8_t *p;
    size_t len;
    size_t cap;
    bool failed; /* an allocation failed: the buffer is unusable */
} gw_buf;

typedef struct gw_kv {
    char *key;
    st_gguf_type type;
    uint8_t scalar[8]; /* scalar value, little-endian */
    char *str;         /* STRING value */
    size_t str_len;
    st_gguf_type arr_type;
    uint64_t arr_n;
    uint8_t *arr_data; /* scalar arrays: packed values; string arrays: concatenated bytes */
    size_t *arr_lens;  /* string arrays: length of each */
    st_gguf_kv_layout layout;
} gw_kv;

typedef struct gw_tensor {
    char *name;
    st_dtype dtype;
    uint32_t n_dims;
    int64_t ne[ST_GGUF_MAX_DIMS];
    const void *data; /* NULL for streamed tensors */
    size_t nbytes;
    uint64_t offset;
    st_gguf_tensor_layout layout;
} gw_tensor;

struct st_gguf_writer {
    char *path;     /* final path (NULL for a memory writer) */
    char *tmp_path; /* temporary file */
    FILE *fp;
    size_t alignment;
    gw_kv *kvs;
    uint64_t n_kv, cap_kv;
    gw_tensor *tensors;
    uint64_t n_tensors, cap_tensors;
    bool laid_out;  /* layout fields are valid */
    bool streaming; /* begin_data was called */
    bool finished;
    bool finish_tried; /* finish is single-shot: after a failure, only free */
    size_t data_off;
    uint64_t cur;    /* streaming: tensor being written */
    size_t cur_done; /* bytes of it written */
};

static void gw_buf_put(gw_buf *b, const void *src, size_t n)
{
    if (b->failed)
        return;
    if (b->cap - b->len < n) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap - b->len < n)
            cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (p == NULL) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void gw_buf_u32(gw_buf *b, uint32_t v) { gw_buf_put(b, &v, 4); }
static void gw_buf_u64(gw_buf *b, uint64_t v) { gw_buf_put(b, &v, 8); }

static void gw_buf_str(gw_buf *b, const char *s, size_t n)
{
    gw_buf_u64(b, n);
    gw_buf_put(b, s, n);
}

static st_err gw_alloc(st_gguf_writer **out)
{
    *out = calloc(1, sizeof **out);
    if (*out == NULL)
        return st_errorf(ST_ENOMEM, "gguf writer: handle");
    (*out)->alignment = GW_DEFAULT_ALIGNMENT;
    return ST_OK;
}

st_err st_gguf_writer_new(st_gguf_writer **out) { return gw_alloc(out); }

st_err st_gguf_writer_open(const char *path, st_gguf_writer **out)
{
    *out = NULL;
    st_gguf_writer *w;
    st_err e = gw_alloc(&w);
    if (e)
        return e;
    size_t n = strlen(path);
    w->path = strdup(path);
    w->tmp_path = malloc(n + 16);
    if (w->path == NULL || w->tmp_path == NULL) {
        st_gguf_writer_free(w);
        return st_errorf(ST_ENOMEM, "gguf writer: path");
    }
    snprintf(w->tmp_path, n + 16, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(w->tmp_path);
    if (fd < 0) {
        int en = errno;
        free(w->tmp_path);
        w->tmp_path = NULL;
        st_gguf_writer_free(w);
        return st_errorf(ST_EIO, "gguf writer: create temporary file for '%s': %s", path,
                         strerror(en));
    }
    (void)fchmod(fd, 0644); /* mkstemp creates 0600; a model file is meant to be shared */
    w->fp = fdopen(fd, "wb");
    if (w->fp == NULL) {
        int en = errno;
        close(fd);
        st_gguf_writer_free(w);
        return st_errorf(ST_EIO, "gguf writer: fdopen '%s': %s", path, strerror(en));
    }
    setvbuf(w->fp, NULL, _IOFBF, 1 << 20);
    *out = w;
    return ST_OK;
}

void st_gguf_writer_free(st_gguf_writer *w)
{
    if (w == NULL)
        return;
    if (w->fp != NULL)
        fclose(w->fp);
    if (w->tmp_path != NULL && !w->finished)
        unlink(w->tmp_path);
    for (uint64_t i = 0; i < w->n_kv; i++) {
        free(w->kvs[i].key);
        free(w->kvs[i].str);
        free(w->kvs[i].arr_data);
        free(w->kvs[i].arr_lens);
    }
    for (uint64_t i = 0; i < w->n_tensors; i++)
        free(w->tensors[i].name);
    free(w->kvs);
    free(w->tensors);
    free(w->path);
    free(w->tmp_path);
    free(w);
}

/* Appends a new pair named key (checked for duplicates) and returns it. */
static st_err gw_new_kv(st_gguf_writer *w, const char *key, st_gguf_type type, gw_kv **out)
{
    if (w->streaming || w->finished)
        return st_errorf(ST_EINVAL, "gguf writer: key '%s' added after the data began", key);
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kvs[i].key, key) == 0)
            return st_errorf(ST_EFORMAT, "gguf writer: duplicate key '%s'", key);
    if (w->n_kv == w->cap_kv) {
        uint64_t cap = w->cap_kv ? w->cap_kv * 2 : 32;
        gw_kv *p = realloc(w->kvs, (size_t)cap * sizeof *p);
        if (p == NULL)
            return st_errorf(ST_ENOMEM, "gguf writer: %llu pairs", (unsigned long long)cap);
        w->kvs = p;
        w->cap_kv = cap;
    }
    gw_kv *kv = &w->kvs[w->n_kv];
    memset(kv, 0, sizeof *kv);
    kv->key = strdup(key);
    if (kv->key == NULL)
        return st_errorf(ST_ENOMEM, "gguf writer: key '%s'", key);
    kv->type = type;
    w->n_kv++;
    w->laid_out = false;
    *out = kv;
    return ST_OK;
}

/* Forgets the pair added last (its value could not be stored). */
static void gw_drop_last(st_gguf_writer *w)
{
    gw_kv *kv = &w->kvs[--w->n_kv];
    free(kv->key);
    free(kv->str);
    free(kv->arr_data);
    free(kv->arr_lens);
    memset(kv, 0, sizeof *kv);
}

static st_err gw_scalar(st_gguf_writer *w, const char *key, st_gguf_type t, const void *v)
{
    bool is_align = strcmp(key, ST_GGUF_KEY_ALIGNMENT) == 0;
    size_t align = 0;
    if (is_align) {
        uint64_t a = 0;
        if (t != ST_GGUF_UINT8 && t != ST_GGUF_UINT16 && t != ST_GGUF_UINT32 && t != ST_GGUF_UINT64)
            return st_errorf(ST_EINVAL, "gguf writer: general.alignment must be unsigned (type %d)",
                             t);
        memcpy(&a, v, gg_scalar_size(t)); /* little-endian: the low bytes */
        if (a == 0 || (a & (a - 1)) != 0 || a > (1u << 30))
            return st_errorf(ST_EINVAL,
                             "gguf writer: general.alignment %llu is not a power of two in 1..2^30",
                             (unsigned long long)a);
        align = (size_t)a;
    }
    gw_kv *kv;
    st_err e = gw_new_kv(w, key, t, &kv);
    if (e)
        return e;
    memcpy(kv->scalar, v, gg_scalar_size(t));
    if (is_align)
        w->alignment = align;
    return ST_OK;
}

st_err st_gguf_writer_add_u8(st_gguf_writer *w, const char *k, uint8_t v)
{
    return gw_scalar(w, k, ST_GGUF_UINT8, &v);
}
st_err st_gguf_writer_add_i8(st_gguf_writer *w, const char *k, int8_t v)
{
    return gw_scalar(w, k, ST_GGUF_INT8, &v);
}
st_err st_gguf_writer_add_u16(st_gguf_writer *w, const char *k, uint16_t v)
{
    return gw_scalar(w, k, ST_GGUF_UINT16, &v);
}
st_err st_gguf_writer_add_i16(st_gguf_writer *w, const char *k, int16_t v)
{
    return gw_scalar(w, k, ST_GGUF_INT16, &v);
}
st_err st_gguf_writer_add_u32(st_gguf_writer *w, const char *k, uint32_t v)
{
    return gw_scalar(w, k, ST_GGUF_UINT32, &v);
}
st_err st_gguf_writer_add_i32(st_gguf_writer *w, const char *k, int32_t v)
{
    return gw_scalar(w, k, ST_GGUF_INT32, &v);
}
st_err st_gguf_writer_add_u64(st_gguf_writer *w, const char *k, uint64_t v)
{
    return gw_scalar(w, k, ST_GGUF_UINT64, &v);
}
st_err st_gguf_writer_add_i64(st_gguf_writer *w, const char *k, int64_t v)
{
    return gw_scalar(w, k, ST_GGUF_INT64, &v);
}
st_err st_gguf_writer_add_f32(st_gguf_writer *w, const char *k, float v)
{
    return gw_scalar(w, k, ST_GGUF_FLOAT32, &v);
}
st_err st_gguf_writer_add_f64(st_gguf_writer *w, const char *k, double v)
{
    return gw_scalar(w, k, ST_GGUF_FLOAT64, &v);
}

st_err st_gguf_writer_add_bool(st_gguf_writer *w, const char *k, bool v)
{
    uint8_t b = v ? 1 : 0;
    return gw_scalar(w, k, ST_GGUF_BOOL, &b);
}

st_err st_gguf_writer_add_strn(st_gguf_writer *w, const char *key, const char *s, size_t len)
{
    gw_kv *kv;
    st_err e = gw_new_kv(w, key, ST_GGUF_STRING, &kv);
    if (e)
        return e;
    kv->str = malloc(len ? len : 1);
    if (kv->str == NULL) {
        gw_drop_last(w);
        return st_errorf(ST_ENOMEM, "gguf writer: key '%s': string of %zu bytes", key, len);
    }
    if (len)
        memcpy(kv->str, s, len);
    kv->str_len = len;
    return ST_OK;
}

st_err st_gguf_writer_add_str(st_gguf_writer *w, const char *key, const char *s)
{
    return st_gguf_writer_add_strn(w, key, s, strlen(s));
}

st_err st_gguf_writer_add_arr(st_gguf_writer *w, const char *key, st_gguf_type elem_type,
                              const void *vals, uint64_t n)
{
    size_t esz = gg_scalar_size(elem_type);
    if (esz == 0)
        return st_errorf(ST_ETYPE, "gguf writer: key '%s': %d is not a scalar element type", key,
                         elem_type);
    if (n > SIZE_MAX / esz)
        return st_errorf(ST_EOVERFLOW, "gguf writer: key '%s': %llu elements", key,
                         (unsigned long long)n);
    if (elem_type == ST_GGUF_BOOL)
        for (uint64_t i = 0; i < n; i++)
            if (((const uint8_t *)vals)[i] > 1)
                return st_errorf(ST_EINVAL,
                                 "gguf writer: key '%s': bool element %llu is not 0 or 1", key,
                                 (unsigned long long)i);
    gw_kv *kv;
    st_err e = gw_new_kv(w, key, ST_GGUF_ARRAY, &kv);
    if (e)
        return e;
    size_t bytes = (size_t)n * esz;
    kv->arr_type = elem_type;
    kv->arr_n = n;
    kv->arr_data = malloc(bytes ? bytes : 1);
    if (kv->arr_data == NULL) {
        gw_drop_last(w);
        return st_errorf(ST_ENOMEM, "gguf writer: key '%s': %zu bytes", key, bytes);
    }
    if (bytes)
        memcpy(kv->arr_data, vals, bytes);
    return ST_OK;
}

st_err st_gguf_writer_add_arr_str(st_gguf_writer *w, const char *key, const char *const *strs,
                                  const size_t *lens, uint64_t n)
{
    if (n > SIZE_MAX / sizeof(size_t))
        return st_errorf(ST_EOVERFLOW, "gguf writer: key '%s': %llu strings", key,
                         (unsigned long long)n);
    size_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        size_t l = lens ? lens[i] : strlen(strs[i]);
        if (__builtin_add_overflow(total, l, &total))
            return st_errorf(ST_EOVERFLOW, "gguf writer: key '%s': string bytes", key);
    }
    gw_kv *kv;
    st_err e = gw_new_kv(w, key, ST_GGUF_ARRAY, &kv);
    if (e)
        return e;
    kv->arr_type = ST_GGUF_STRING;
    kv->arr_n = n;
    kv->arr_data = malloc(total ? total : 1);
    kv->arr_lens = malloc(n ? (size_t)n * sizeof(size_t) : 1);
    if (kv->arr_data == NULL || kv->arr_lens == NULL) {
        gw_drop_last(w);
        return st_errorf(ST_ENOMEM, "gguf writer: key '%s': %zu string bytes", key, total);
    }
    size_t at = 0;
    for (uint64_t i = 0; i < n; i++) {
        size_t l = lens ? lens[i] : strlen(strs[i]);
        if (l)
            memcpy(kv->arr_data + at, strs[i], l);
        kv->arr_lens[i] = l;
        at += l;
    }
    return ST_OK;
}

static st_err gw_tensor_add(st_gguf_writer *w, const char *name, st_dtype dtype, uint32_t n_dims,
                            const int64_t *ne, const void *data, size_t nbytes, bool streamed,
                            size_t *nbytes_out)
{
    if (w->streaming || w->finished)
        return st_errorf(ST_EINVAL, "gguf writer: tensor '%s' added after the data began", name);
    const st_dtype_info *di = st_dtype_info_of(dtype);
    if (di == NULL)
        return st_errorf(ST_ETYPE, "gguf writer: tensor '%s': dtype %d", name, (int)dtype);
    if (n_dims < 1 || n_dims > ST_GGUF_MAX_DIMS)
        return st_errorf(ST_ESHAPE, "gguf writer: tensor '%s': n_dims %u is not in 1..%d", name,
                         n_dims, ST_GGUF_MAX_DIMS);
    int64_t full[ST_GGUF_MAX_DIMS] = {1, 1, 1, 1};
    int64_t rows = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] < 1)
            return st_errorf(ST_ESHAPE, "gguf writer: tensor '%s': dim %u is %lld", name, d,
                             (long long)ne[d]);
        full[d] = ne[d];
        if (d > 0 && __builtin_mul_overflow(rows, ne[d], &rows))
            return st_errorf(ST_EOVERFLOW, "gguf writer: tensor '%s': element count overflows",
                             name);
    }
    size_t row, size;
    if (st_row_size(dtype, ne[0], &row) != ST_K_OK)
        return st_errorf(
            ST_ESHAPE, "gguf writer: tensor '%s': ne0 %lld is not a multiple of %s's block of %lld",
            name, (long long)ne[0], di->name, (long long)di->blck);
    if (__builtin_mul_overflow(row, (size_t)rows, &size))
        return st_errorf(ST_EOVERFLOW, "gguf writer: tensor '%s': byte size overflows", name);
    if (!streamed && size != nbytes)
        return st_errorf(ST_ESHAPE,
                         "gguf writer: tensor '%s': %zu bytes given, the shape needs %zu", name,
                         nbytes, size);
    if (!streamed && data == NULL && size > 0)
        return st_errorf(ST_EINVAL, "gguf writer: tensor '%s': NULL data", name);
    for (uint64_t i = 0; i < w->n_tensors; i++)
        if (strcmp(w->tensors[i].name, name) == 0)
            return st_errorf(ST_EFORMAT, "gguf writer: duplicate tensor name '%s'", name);
    if (w->n_tensors == w->cap_tensors) {
        uint64_t cap = w->cap_tensors ? w->cap_tensors * 2 : 64;
        gw_tensor *p = realloc(w->tensors, (size_t)cap * sizeof *p);
        if (p == NULL)
            return st_errorf(ST_ENOMEM, "gguf writer: %llu tensors", (unsigned long long)cap);
        w->tensors = p;
        w->cap_tensors = cap;
    }
    gw_tensor *t = &w->tensors[w->n_tensors];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (t->name == NULL)
        return st_errorf(ST_ENOMEM, "gguf writer: tensor '%s'", name);
    t->dtype = dtype;
    t->n_dims = n_dims;
    memcpy(t->ne, full, sizeof full);
    t->data = streamed ? NULL : data;
    t->nbytes = size;
    w->n_tensors++;
    w->laid_out = false;
    if (nbytes_out)
        *nbytes_out = size;
    return ST_OK;
}

st_err st_gguf_writer_add_tensor(st_gguf_writer *w, const char *name, st_dtype dtype,
                                 uint32_t n_dims, const int64_t *ne, const void *data,
                                 size_t nbytes)
{
    return gw_tensor_add(w, name, dtype, n_dims, ne, data, nbytes, false, NULL);
}

st_err st_gguf_writer_add_tensor_info(st_gguf_writer *w, const char *name, st_dtype dtype,
                                      uint32_t n_dims, const int64_t *ne, size_t *nbytes)
{
    return gw_tensor_add(w, name, dtype, n_dims, ne, NULL, 0, true, nbytes);
}

static size_t gw_pad(size_t off, size_t a) { return (a - off % a) % a; }

/* Builds everything before the data section (padding included) into b and
 * records the layout. */
static st_err gw_build_meta(st_gguf_writer *w, gw_buf *b)
{
    gw_buf_put(b, "GGUF", 4);
    gw_buf_u32(b, 3);
    gw_buf_u64(b, w->n_tensors);
    gw_buf_u64(b, w->n_kv);
    for (uint64_t i = 0; i < w->n_kv; i++) {
        gw_kv *kv = &w->kvs[i];
        kv->layout.key_off = b->len;
        gw_buf_str(b, kv->key, strlen(kv->key));
        kv->layout.type_off = b->len;
        gw_buf_u32(b, kv->type);
        kv->layout.value_off = b->len;
        if (kv->type == ST_GGUF_STRING) {
            gw_buf_str(b, kv->str, kv->str_len);
        } else if (kv->type == ST_GGUF_ARRAY) {
            gw_buf_u32(b, kv->arr_type);
            gw_buf_u64(b, kv->arr_n);
            if (kv->arr_type == ST_GGUF_STRING) {
                size_t at = 0;
                for (uint64_t j = 0; j < kv->arr_n; j++) {
                    gw_buf_str(b, (const char *)kv->arr_data + at, kv->arr_lens[j]);
                    at += kv->arr_lens[j];
                }
            } else {
                gw_buf_put(b, kv->arr_data, (size_t)kv->arr_n * gg_scalar_size(kv->arr_type));
            }
        } else {
            gw_buf_put(b, kv->scalar, gg_scalar_size(kv->type));
        }
    }
    uint64_t off = 0;
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        gw_tensor *t = &w->tensors[i];
        t->offset = off;
        t->layout.name_off = b->len;
        gw_buf_str(b, t->name, strlen(t->name));
        t->layout.n_dims_off = b->len;
        gw_buf_u32(b, t->n_dims);
        t->layout.ne_off = b->len;
        for (uint32_t d = 0; d < t->n_dims; d++)
            gw_buf_u64(b, (uint64_t)t->ne[d]);
        t->layout.type_off = b->len;
        gw_buf_u32(b, st_dtype_info_of(t->dtype)->ggml_type);
        t->layout.offset_off = b->len;
        gw_buf_u64(b, off);
        t->layout.offset = off;
        if (__builtin_add_overflow(off, (uint64_t)t->nbytes, &off) ||
            __builtin_add_overflow(off, (uint64_t)gw_pad((size_t)off, w->alignment), &off))
            return st_errorf(ST_EOVERFLOW, "gguf writer: data section overflows at tensor '%s'",
                             t->name);
    }
    static const uint8_t zeros[64];
    size_t pad = gw_pad(b->len, w->alignment);
    while (pad > 0) {
        size_t k = pad < sizeof zeros ? pad : sizeof zeros;
        gw_buf_put(b, zeros, k);
        pad -= k;
    }
    if (b->failed)
        return st_errorf(ST_ENOMEM, "gguf writer: header buffer");
    w->data_off = b->len;
    for (uint64_t i = 0; i < w->n_tensors; i++)
        w->tensors[i].layout.data_off = w->data_off + (size_t)w->tensors[i].offset;
    w->laid_out = true;
    return ST_OK;
}

static st_err gw_fwrite(st_gguf_writer *w, const void *p, size_t n)
{
    if (n > 0 && fwrite(p, 1, n, w->fp) != n) {
        int en = errno;
        return st_errorf(ST_EIO, "gguf writer: write to '%s': %s", w->tmp_path, strerror(en));
    }
    return ST_OK;
}

static st_err gw_fpad(st_gguf_writer *w, size_t n)
{
    static const uint8_t zeros[64];
    while (n > 0) {
        size_t k = n < sizeof zeros ? n : sizeof zeros;
        st_err e = gw_fwrite(w, zeros, k);
        if (e)
            return e;
        n -= k;
    }
    return ST_OK;
}

st_err st_gguf_writer_to_mem(st_gguf_writer *w, uint8_t **buf, size_t *len)
{
    *buf = NULL;
    *len = 0;
    for (uint64_t i = 0; i < w->n_tensors; i++)
        if (w->tensors[i].data == NULL && w->tensors[i].nbytes > 0)
            return st_errorf(ST_EINVAL, "gguf writer: tensor '%s' has no data (streamed)",
                             w->tensors[i].name);
    gw_buf b = {0};
    st_err e = gw_build_meta(w, &b);
    if (e) {
        free(b.p);
        return e;
    }
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        const gw_tensor *t = &w->tensors[i];
        static const uint8_t zeros[64];
        gw_buf_put(&b, t->data, t->nbytes);
        size_t pad = gw_pad(t->nbytes, w->alignment);
        while (pad > 0) {
            size_t k = pad < sizeof zeros ? pad : sizeof zeros;
            gw_buf_put(&b, zeros, k);
            pad -= k;
        }
    }
    if (b.failed) {
        free(b.p);
        return st_errorf(ST_ENOMEM, "gguf writer: file buffer");
    }
    *buf = b.p;
    *len = b.len;
    return ST_OK;
}

st_err st_gguf_writer_begin_data(st_gguf_writer *w)
{
    if (w->fp == NULL)
        return st_errorf(ST_EINVAL, "gguf writer: begin_data needs a file writer");
    if (w->streaming || w->finished)
        return st_errorf(ST_EINVAL, "gguf writer: begin_data called twice");
    for (uint64_t i = 0; i < w->n_tensors; i++)
        if (w->tensors[i].data != NULL)
            return st_errorf(
                ST_EINVAL,
                "gguf writer: tensor '%s' was given data; streaming needs add_tensor_info",
                w->tensors[i].name);
    gw_buf b = {0};
    st_err e = gw_build_meta(w, &b);
    if (!e)
        e = gw_fwrite(w, b.p, b.len);
    free(b.p);
    if (e)
        return e;
    w->streaming = true;
    w->cur = 0;
    w->cur_done = 0;
    return ST_OK;
}

st_err st_gguf_writer_write(st_gguf_writer *w, const void *data, size_t n)
{
    if (!w->streaming || w->finished)
        return st_errorf(ST_EINVAL, "gguf writer: write before begin_data");
    const uint8_t *p = data;
    while (n > 0) {
        /* skip zero-byte tensors (cannot happen with dims >= 1, kept for safety) */
        while (w->cur < w->n_tensors && w->tensors[w->cur].nbytes == w->cur_done) {
            w->cur++;
            w->cur_done = 0;
        }
        if (w->cur >= w->n_tensors)
            return st_errorf(ST_ERANGE, "gguf writer: %zu bytes beyond the last tensor", n);
        gw_tensor *t = &w->tensors[w->cur];
        size_t k = t->nbytes - w->cur_done;
        if (k > n)
            k = n;
        st_err e = gw_fwrite(w, p, k);
        if (e)
            return e;
        p += k;
        n -= k;
        w->cur_done += k;
        if (w->cur_done == t->nbytes) {
            e = gw_fpad(w, gw_pad(t->nbytes, w->alignment));
            if (e)
                return e;
            w->cur++;
            w->cur_done = 0;
        }
    }
    return ST_OK;
}

st_err st_gguf_writer_finish(st_gguf_writer *w)
{
    if (w->fp == NULL || w->finished || w->finish_tried)
        return st_errorf(ST_EINVAL, "gguf writer: finish needs an open file writer, once");
    w->finish_tried = true;
    st_err e;
    if (w->streaming) {
        if (w->cur < w->n_tensors)
            return st_errorf(ST_ETRUNC, "gguf writer: tensor '%s' got %zu of its %zu bytes",
                             w->tensors[w->cur].name, w->cur_done, w->tensors[w->cur].nbytes);
    } else {
        for (uint64_t i = 0; i < w->n_tensors; i++)
            if (w->tensors[i].data == NULL)
                return st_errorf(ST_EINVAL,
                                 "gguf writer: tensor '%s' has no data; call begin_data to stream",
                                 w->tensors[i].name);
        gw_buf b = {0};
        e = gw_build_meta(w, &b);
        if (!e)
            e = gw_fwrite(w, b.p, b.len);
        free(b.p);
        if (e)
            return e;
        for (uint64_t i = 0; i < w->n_tensors; i++) {
            const gw_tensor *t = &w->tensors[i];
            e = gw_fwrite(w, t->data, t->nbytes);
            if (!e)
                e = gw_fpad(w, gw_pad(t->nbytes, w->alignment));
            if (e)
                return e;
        }
    }
    if (fflush(w->fp) != 0 || fsync(fileno(w->fp)) != 0) {
        int en = errno;
        return st_errorf(ST_EIO, "gguf writer: flush '%s': %s", w->tmp_path, strerror(en));
    }
    FILE *fp = w->fp;
    w->fp = NULL;
    if (fclose(fp) != 0) {
        int en = errno;
        return st_errorf(ST_EIO, "gguf writer: close '%s': %s", w->tmp_path, strerror(en));
    }
    if (rename(w->tmp_path, w->path) != 0) {
        int en = errno;
        return st_errorf(ST_EIO, "gguf writer: rename '%s' to '%s': %s", w->tmp_path, w->path,
                         strerror(en));
    }
    w->finished = true;
    return ST_OK;
}

st_err st_gguf_writer_kv_layout(const st_gguf_writer *w, uint64_t i, st_gguf_kv_layout *out)
{
    if (!w->laid_out)
        return st_errorf(ST_EINVAL, "gguf writer: layout asked before serialisation");
    if (i >= w->n_kv)
        return st_errorf(ST_ERANGE, "gguf writer: pair %llu of %llu", (unsigned long long)i,
                         (unsigned long long)w->n_kv);
    *out = w->kvs[i].layout;
    return ST_OK;
}

st_err st_gguf_writer_tensor_layout(const st_gguf_writer *w, uint64_t i, st_gguf_tensor_layout *out)
{
    if (!w->laid_out)
        return st_errorf(ST_EINVAL, "gguf writer: layout asked before serialisation");
    if (i >= w->n_tensors)
        return st_errorf(ST_ERANGE, "gguf writer: tensor %llu of %llu", (unsigned long long)i,
                         (unsigned long long)w->n_tensors);
    *out = w->tensors[i].layout;
    return ST_OK;
}

size_t st_gguf_writer_data_offset(const st_gguf_writer *w) { return w->data_off; }
