/* gguf_access.c - reading an opened GGUF file.
 *
 * Design. gguf.c validated everything at open, so this side only reads: the
 * handle's fields, pairs and tensors by index or by name (binary search in
 * the indexes the parser sorted, O(log n)), typed getters that convert
 * integer widths only when the value fits and name the key when it does
 * not, numeric array elements decoded with memcpy (no unaligned access),
 * the model id (BLAKE2b of the header, metadata and tensor table) and the
 * page-level hints on the mapping: touch (WILLNEED plus one read a page),
 * release (DONTNEED of the whole pages inside a range) and the resident
 * byte count (mincore). */
#include "common/model/gguf_impl.h"

#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Finds index i in a sorted index array whose string equals key (none
 * when there is no index). */
static const void *gg_bsearch(const void *first, size_t stride, const uint64_t *sorted, uint64_t n,
                              const char *key)
{
    if (sorted == NULL)
        return NULL;
    st_gguf_str k = {strlen(key), key};
    uint64_t lo = 0, hi = n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        const void *e = (const char *)first + sorted[mid] * stride;
        int r = gg_cmp_str(*(const st_gguf_str *)e, k);
        if (r == 0)
            return e;
        if (r < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

uint32_t st_gguf_version(const st_gguf *g) { return g->version; }
size_t st_gguf_alignment(const st_gguf *g) { return g->alignment; }
size_t st_gguf_file_size(const st_gguf *g) { return g->len; }
const void *st_gguf_base(const st_gguf *g) { return g->base; }
uint64_t st_gguf_n_kv(const st_gguf *g) { return g->n_kv; }
uint64_t st_gguf_n_tensors(const st_gguf *g) { return g->n_tensors; }
size_t st_gguf_data_offset(const st_gguf *g) { return g->data_off; }
size_t st_gguf_table_end(const st_gguf *g) { return g->table_end; }

const st_gguf_kv *st_gguf_kv_at(const st_gguf *g, uint64_t i)
{
    return i < g->n_kv ? &g->kvs[i] : NULL;
}

const st_gguf_tensor *st_gguf_tensor_at(const st_gguf *g, uint64_t i)
{
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const st_gguf_kv *st_gguf_find_kv(const st_gguf *g, const char *key)
{
    return gg_bsearch(g->kvs, sizeof *g->kvs, g->kv_sorted, g->n_kv, key);
}

const st_gguf_tensor *st_gguf_find_tensor(const st_gguf *g, const char *name)
{
    return gg_bsearch(g->tensors, sizeof *g->tensors, g->t_sorted, g->n_tensors, name);
}

bool st_gguf_str_eq(st_gguf_str s, const char *c)
{
    size_t n = strlen(c);
    return s.len == n && (n == 0 || memcmp(s.data, c, n) == 0);
}

static bool gg_is_uint(st_gguf_type t)
{
    return t == ST_GGUF_UINT8 || t == ST_GGUF_UINT16 || t == ST_GGUF_UINT32 || t == ST_GGUF_UINT64;
}

static bool gg_is_int(st_gguf_type t)
{
    return t == ST_GGUF_INT8 || t == ST_GGUF_INT16 || t == ST_GGUF_INT32 || t == ST_GGUF_INT64;
}

static st_err gg_find(const st_gguf *g, const char *key, const st_gguf_kv **kv)
{
    *kv = st_gguf_find_kv(g, key);
    if (*kv == NULL)
        return st_errorf(ST_EMISSING, "gguf: key '%s' is missing", key);
    return ST_OK;
}

st_err st_gguf_get_u64(const st_gguf *g, const char *key, uint64_t *out)
{
    const st_gguf_kv *kv;
    st_err e = gg_find(g, key, &kv);
    if (e)
        return e;
    if (gg_is_uint(kv->type)) {
        *out = kv->v.u64;
        return ST_OK;
    }
    if (gg_is_int(kv->type)) {
        if (kv->v.i64 < 0)
            return st_errorf(ST_ETYPE, "gguf: key '%s' = %lld is negative", key,
                             (long long)kv->v.i64);
        *out = (uint64_t)kv->v.i64;
        return ST_OK;
    }
    return st_errorf(ST_ETYPE, "gguf: key '%s' has type %d, not an integer", key, kv->type);
}

st_err st_gguf_get_u32(const st_gguf *g, const char *key, uint32_t *out)
{
    uint64_t v;
    st_err e = st_gguf_get_u64(g, key, &v);
    if (e)
        return e;
    if (v > UINT32_MAX)
        return st_errorf(ST_ETYPE, "gguf: key '%s' = %llu does not fit in 32 bits", key,
                         (unsigned long long)v);
    *out = (uint32_t)v;
    return ST_OK;
}

/* gg_get_as - the value of key into *out, whose C type want selects:
 * FLOAT32 reads a FLOAT32 or FLOAT64 pair into a float, BOOL a bool into a
 * bool, STRING a string into an st_gguf_str. ST_EMISSING or ST_ETYPE naming
 * the key otherwise (out untouched). */
static st_err gg_get_as(const st_gguf *g, const char *key, st_gguf_type want, void *out)
{
    const st_gguf_kv *kv;
    st_err e = gg_find(g, key, &kv);
    if (e)
        return e;
    switch (want) {
    case ST_GGUF_FLOAT32:
        if (kv->type != ST_GGUF_FLOAT32 && kv->type != ST_GGUF_FLOAT64)
            break;
        *(float *)out = (float)kv->v.f64;
        return ST_OK;
    case ST_GGUF_BOOL:
        if (kv->type != ST_GGUF_BOOL)
            break;
        *(bool *)out = kv->v.u64 != 0;
        return ST_OK;
    case ST_GGUF_STRING:
        if (kv->type != ST_GGUF_STRING)
            break;
        *(st_gguf_str *)out = kv->v.str;
        return ST_OK;
    default:
        return st_errorf(ST_EINTERNAL, "gguf: key '%s': no getter for type %d", key, want);
    }
    const char *what = want == ST_GGUF_FLOAT32 ? "a float"
                       : want == ST_GGUF_BOOL  ? "a bool"
                                               : "a string";
    return st_errorf(ST_ETYPE, "gguf: key '%s' has type %d, not %s", key, kv->type, what);
}

st_err st_gguf_get_f32(const st_gguf *g, const char *key, float *out)
{
    return gg_get_as(g, key, ST_GGUF_FLOAT32, out);
}

st_err st_gguf_get_bool(const st_gguf *g, const char *key, bool *out)
{
    return gg_get_as(g, key, ST_GGUF_BOOL, out);
}

st_err st_gguf_get_str(const st_gguf *g, const char *key, st_gguf_str *out)
{
    return gg_get_as(g, key, ST_GGUF_STRING, out);
}

st_err st_gguf_get_arr(const st_gguf *g, const char *key, st_gguf_type elem_type,
                       const st_gguf_kv **kv)
{
    st_err e = gg_find(g, key, kv);
    if (e)
        return e;
    if ((*kv)->type != ST_GGUF_ARRAY)
        return st_errorf(ST_ETYPE, "gguf: key '%s' has type %d, not an array", key, (*kv)->type);
    if (elem_type != ST_GGUF_TYPE_COUNT && (*kv)->arr_type != elem_type)
        return st_errorf(ST_ETYPE, "gguf: key '%s' is an array of type %d, not %d", key,
                         (*kv)->arr_type, elem_type);
    return ST_OK;
}

/* Decodes element i of a numeric array kv into tmp's value union. */
static st_err gg_arr_elem(const st_gguf_kv *kv, uint64_t i, st_gguf_kv *tmp)
{
    if (kv->type != ST_GGUF_ARRAY || i >= kv->arr_n)
        return st_errorf(ST_ERANGE, "gguf: key '%.*s': element %llu of %llu", gg_shown(kv->key),
                         kv->key.data, (unsigned long long)i, (unsigned long long)kv->arr_n);
    size_t sz = gg_scalar_size(kv->arr_type);
    if (sz == 0)
        return st_errorf(ST_ETYPE, "gguf: key '%.*s': array of type %d is not numeric",
                         gg_shown(kv->key), kv->key.data, kv->arr_type);
    memset(tmp, 0, sizeof *tmp);
    tmp->key = kv->key;
    return gg_decode_scalar(tmp, kv->arr_type, (const uint8_t *)kv->arr_data + i * sz, 0);
}

st_err st_gguf_arr_f64(const st_gguf_kv *kv, uint64_t i, double *out)
{
    st_gguf_kv tmp;
    st_err e = gg_arr_elem(kv, i, &tmp);
    if (e)
        return e;
    if (gg_is_uint(kv->arr_type) || kv->arr_type == ST_GGUF_BOOL)
        *out = (double)tmp.v.u64;
    else
        *out = gg_is_int(kv->arr_type) ? (double)tmp.v.i64 : tmp.v.f64;
    return ST_OK;
}

st_err st_gguf_arr_i64(const st_gguf_kv *kv, uint64_t i, int64_t *out)
{
    st_gguf_kv tmp;
    st_err e = gg_arr_elem(kv, i, &tmp);
    if (e)
        return e;
    if (kv->arr_type == ST_GGUF_FLOAT32 || kv->arr_type == ST_GGUF_FLOAT64)
        return st_errorf(ST_ETYPE, "gguf: key '%.*s': array of type %d is not integer",
                         gg_shown(kv->key), kv->key.data, kv->arr_type);
    if (kv->arr_type == ST_GGUF_UINT64 && tmp.v.u64 > (uint64_t)INT64_MAX)
        return st_errorf(ST_ERANGE, "gguf: key '%.*s': element %llu does not fit in int64",
                         gg_shown(kv->key), kv->key.data, (unsigned long long)i);
    *out = gg_is_int(kv->arr_type) ? tmp.v.i64 : (int64_t)tmp.v.u64;
    return ST_OK;
}

st_err st_gguf_model_id(const st_gguf *g, uint8_t out[32])
{
    if (sodium_init() < 0)
        return st_err_sodium("gguf: sodium_init");
    if (crypto_generichash(out, 32, g->base, g->table_end, NULL, 0) != 0)
        return st_err_sodium("gguf: crypto_generichash");
    return ST_OK;
}

size_t st_gguf_touch(const st_gguf *g, const st_gguf_tensor *t)
{
    if (t == NULL || t->nbytes == 0)
        return 0;
    long ps = sysconf(_SC_PAGESIZE);
    size_t page = ps > 0 ? (size_t)ps : 4096;
    uintptr_t b = (uintptr_t)t->data, e = b + t->nbytes;
    uintptr_t pb = b - b % page, pe = e + (page - e % page) % page;
    if (g->mapped)
        (void)madvise((void *)pb, pe - pb, MADV_WILLNEED); /* advice only: failure is harmless */
    volatile uint8_t sink = 0;
    for (uintptr_t p = b; p < e; p += page - (p % page))
        sink ^= *(const volatile uint8_t *)p;
    (void)sink;
    return pe - pb;
}

st_err st_gguf_resident_bytes(const st_gguf *g, size_t *out)
{
    if (!g->mapped) {
        *out = g->len;
        return ST_OK;
    }
    long ps = sysconf(_SC_PAGESIZE);
    size_t page = ps > 0 ? (size_t)ps : 4096;
    size_t pages = (g->len + page - 1) / page;
    unsigned char *vec = malloc(pages ? pages : 1);
    if (vec == NULL)
        return st_errorf(ST_ENOMEM, "gguf: mincore vector of %zu pages", pages);
    if (mincore((void *)g->base, g->len, vec) != 0) {
        int en = errno;
        free(vec);
        return st_errorf(ST_EIO, "gguf: mincore: %s", strerror(en));
    }
    size_t n = 0;
    for (size_t i = 0; i < pages; i++)
        n += vec[i] & 1;
    free(vec);
    size_t bytes = n * page;
    *out = bytes > g->len ? g->len : bytes;
    return ST_OK;
}

void st_gguf_release(const st_gguf *g, const void *p, size_t n)
{
    const uintptr_t base = (uintptr_t)g->base, b = (uintptr_t)p, e = b + n;
    if (!g->mapped || b < base || e > base + g->len || n == 0)
        return;
    long ps = sysconf(_SC_PAGESIZE);
    size_t page = ps > 0 ? (size_t)ps : 4096;
    uintptr_t pb = b + (page - b % page) % page, pe = e - e % page; /* whole pages inside */
    if (pb < pe)
        (void)madvise((void *)pb, pe - pb, MADV_DONTNEED); /* advice: failure only costs memory */
}
