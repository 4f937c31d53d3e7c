/* gguf.h - a validating reader of GGUF v3 files, mapped read-only.
 *
 * st_gguf_open() maps the file and parses the header, every metadata pair
 * (all value types, arrays included, nested arrays rejected) and the tensor
 * table, validating everything before anything indexes memory: magic,
 * version (3; 2 is read too), counts against the file size, string lengths,
 * value types, general.alignment (a power of two), tensor dimensions
 * (1..4, each >= 1, products without overflow, ne0 a multiple of the
 * dtype's block), tensor types (the ones kernels/ supports), data offsets
 * (aligned, inside the file, not overlapping). Each failure returns its own
 * st_err code with a detail naming the key, tensor or offset.
 *
 * Mapping is lazy: no tensor byte is read until someone touches it, so a
 * stage that touches only its tensors makes only them resident.
 * Strings point into the mapping and are NOT NUL-terminated. */
#ifndef ST_GGUF_H
#define ST_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "kernels/kernels.h"

typedef enum st_gguf_type {
    ST_GGUF_UINT8 = 0,
    ST_GGUF_INT8 = 1,
    ST_GGUF_UINT16 = 2,
    ST_GGUF_INT16 = 3,
    ST_GGUF_UINT32 = 4,
    ST_GGUF_INT32 = 5,
    ST_GGUF_FLOAT32 = 6,
    ST_GGUF_BOOL = 7,
    ST_GGUF_STRING = 8,
    ST_GGUF_ARRAY = 9,
    ST_GGUF_UINT64 = 10,
    ST_GGUF_INT64 = 11,
    ST_GGUF_FLOAT64 = 12,
    ST_GGUF_TYPE_COUNT
} st_gguf_type;

typedef struct st_gguf_str {
    uint64_t len;
    const char *data; /* into the mapping; not NUL-terminated */
} st_gguf_str;

typedef struct st_gguf_kv {
    st_gguf_str key;
    st_gguf_type type;
    union {
        uint64_t u64; /* UINT8/16/32/64, BOOL (0 or 1) */
        int64_t i64;  /* INT8/16/32/64 */
        double f64;   /* FLOAT32/64 */
        st_gguf_str str;
    } v;
    /* arrays (type == ST_GGUF_ARRAY): */
    st_gguf_type arr_type;
    uint64_t arr_n;
    const void *arr_data;  /* scalar arrays: packed little-endian values in the mapping */
    st_gguf_str *arr_strs; /* string arrays: arr_n entries (owned by the st_gguf) */
} st_gguf_kv;

#define ST_GGUF_MAX_DIMS 4

typedef struct st_gguf_tensor {
    st_gguf_str name;
    uint32_t n_dims;
    int64_t ne[ST_GGUF_MAX_DIMS]; /* ne[0] contiguous; unused dims are 1 */
    uint32_t ggml_type;
    st_dtype dtype;
    uint64_t offset; /* from the start of the data section */
    size_t nbytes;
    const void *data; /* into the mapping */
} st_gguf_tensor;

typedef struct st_gguf st_gguf;

/* st_gguf_open - maps and validates path; *out is owned by the caller and
 * freed with st_gguf_close. On error *out is NULL. */
st_err st_gguf_open(const char *path, st_gguf **out);

/* st_gguf_open_mem - the same over a caller's buffer, which must outlive
 * the handle (used by tests and the fuzzer). */
st_err st_gguf_open_mem(const void *buf, size_t len, st_gguf **out);

/* st_gguf_close - unmaps and frees; NULL is a no-op. */
void st_gguf_close(st_gguf *g);

/* The one key the container itself reads (and the writer honours): the
 * data section's alignment. common/model/arch.h names it with the other keys
 * (ST_AG_ALIGNMENT) from this spelling. */
#define ST_GGUF_KEY_ALIGNMENT "general.alignment"

uint32_t st_gguf_version(const st_gguf *g);
size_t st_gguf_alignment(const st_gguf *g);
size_t st_gguf_file_size(const st_gguf *g);
const void *st_gguf_base(const st_gguf *g); /* start of the mapping */

uint64_t st_gguf_n_kv(const st_gguf *g);
const st_gguf_kv *st_gguf_kv_at(const st_gguf *g, uint64_t i);
/* st_gguf_find_kv - the pair whose key equals key, or NULL. */
const st_gguf_kv *st_gguf_find_kv(const st_gguf *g, const char *key);

/* Typed getters: ST_EMISSING if absent (detail names the key), ST_ETYPE if
 * the stored type does not convert (integers of any width convert when the
 * value fits; FLOAT32/64 convert to float). */
st_err st_gguf_get_u32(const st_gguf *g, const char *key, uint32_t *out);
st_err st_gguf_get_u64(const st_gguf *g, const char *key, uint64_t *out);
st_err st_gguf_get_f32(const st_gguf *g, const char *key, float *out);
st_err st_gguf_get_bool(const st_gguf *g, const char *key, bool *out);
st_err st_gguf_get_str(const st_gguf *g, const char *key, st_gguf_str *out);
/* st_gguf_get_arr - an array of elem_type (any type if elem_type is
 * ST_GGUF_TYPE_COUNT); *kv receives the pair. */
st_err st_gguf_get_arr(const st_gguf *g, const char *key, st_gguf_type elem_type,
                       const st_gguf_kv **kv);

/* st_gguf_str_eq - whether s equals the C string c. */
bool st_gguf_str_eq(st_gguf_str s, const char *c);

uint64_t st_gguf_n_tensors(const st_gguf *g);
const st_gguf_tensor *st_gguf_tensor_at(const st_gguf *g, uint64_t i);
/* st_gguf_find_tensor - the tensor named name, or NULL. */
const st_gguf_tensor *st_gguf_find_tensor(const st_gguf *g, const char *name);

/* st_gguf_model_id - BLAKE2b-256 of the file's bytes from offset 0 to the
 * end of the tensor table (header, metadata, tensor infos): equal files
 * have equal ids, and any change of metadata or of the table changes it. */
st_err st_gguf_model_id(const st_gguf *g, uint8_t out[32]);

/* st_gguf_touch - brings a tensor's pages into memory (madvise WILLNEED and
 * one read per page) and returns the page-rounded bytes it spans. */
size_t st_gguf_touch(const st_gguf *g, const st_gguf_tensor *t);

/* st_gguf_release - tells the kernel that the whole pages inside [p, p + n)
 * of the file's mapping will not be read again (madvise DONTNEED: they
 * leave the process's resident set; read again, they would come back from
 * the file). Does nothing when the file was read into memory instead of
 * mapped, or when [p, p + n) is not inside the mapping. */
void st_gguf_release(const st_gguf *g, const void *p, size_t n);

/* st_gguf_resident_bytes - bytes of the mapping now resident (mincore). */
st_err st_gguf_resident_bytes(const st_gguf *g, size_t *out);

/* st_gguf_data_offset - file offset of the data section (tensor offsets
 * are relative to it). */
size_t st_gguf_data_offset(const st_gguf *g);

/* st_gguf_table_end - file offset just past the tensor table: the bytes
 * [0, table_end) are what st_gguf_model_id hashes. */
size_t st_gguf_table_end(const st_gguf *g);

/* st_gguf_arr_f64 - element i of a numeric array (integers, bools and
 * floats) as a double, read without unaligned access. ST_ERANGE if i is out
 * of range or kv is not an array, ST_ETYPE for string arrays. */
st_err st_gguf_arr_f64(const st_gguf_kv *kv, uint64_t i, double *out);

/* st_gguf_arr_i64 - element i of an integer or bool array. ST_ERANGE if i
 * is out of range (or a UINT64 value exceeds INT64_MAX), ST_ETYPE if the
 * array does not hold integers. */
st_err st_gguf_arr_i64(const st_gguf_kv *kv, uint64_t i, int64_t *out);

#endif
