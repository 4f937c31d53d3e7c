/* gguf_write.h - a writer of GGUF v3 files.
 *
 * Usage: st_gguf_writer_open(path), add metadata pairs and tensors in the
 * order they should appear, then st_gguf_writer_finish() writes header,
 * pairs, tensor table and the aligned data section to a temporary file
 * next to path and renames it over path, so a failed or abandoned write
 * never leaves a half file. st_gguf_writer_free() releases the writer (and
 * removes the temporary file if finish was not reached).
 *
 * Tensor data is not copied: the buffer given to st_gguf_writer_add_tensor
 * must stay valid until finish. For data too large to hold at once there
 * is a streaming mode: declare every tensor with st_gguf_writer_add_tensor_info
 * (sizes are known from the shapes), call st_gguf_writer_begin_data, which
 * writes everything up to the data section, then st_gguf_writer_write the
 * tensors' bytes in declaration order (any chunking), then finish.
 *
 * Data is aligned to 32 bytes unless general.alignment is added (then to
 * its value, which must be a power of two); general.alignment is written
 * only if it was added. Each tensor's data, the last included, is padded
 * with zeros to the alignment (as llama.cpp's writer does).
 *
 * For tests there is a memory mode: st_gguf_writer_new() builds without a
 * file and st_gguf_writer_to_mem() serialises to a buffer; the layout
 * getters give the file offsets of every field, so a test can corrupt
 * exactly one of them. */
#ifndef ST_GGUF_WRITE_H
#define ST_GGUF_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/model/gguf.h"
#include "kernels/kernels.h"

typedef struct st_gguf_writer st_gguf_writer;

/* st_gguf_writer_open - a writer that will produce path (created through a
 * temporary file "path.tmp.XXXXXX" in the same folder, opened now). */
st_err st_gguf_writer_open(const char *path, st_gguf_writer **out);

/* st_gguf_writer_new - a writer with no file, for st_gguf_writer_to_mem. */
st_err st_gguf_writer_new(st_gguf_writer **out);

/* st_gguf_writer_free - releases w; if finish did not succeed, removes the
 * temporary file. NULL is a no-op. */
void st_gguf_writer_free(st_gguf_writer *w);

/* Scalar pairs. Each fails with ST_EFORMAT if key was already added,
 * ST_EINVAL after st_gguf_writer_begin_data. Adding "general.alignment"
 * (any unsigned type) sets the data alignment: ST_EINVAL unless a power of
 * two in 1..2^30. */
st_err st_gguf_writer_add_u8(st_gguf_writer *w, const char *key, uint8_t v);
st_err st_gguf_writer_add_i8(st_gguf_writer *w, const char *key, int8_t v);
st_err st_gguf_writer_add_u16(st_gguf_writer *w, const char *key, uint16_t v);
st_err st_gguf_writer_add_i16(st_gguf_writer *w, const char *key, int16_t v);
st_err st_gguf_writer_add_u32(st_gguf_writer *w, const char *key, uint32_t v);
st_err st_gguf_writer_add_i32(st_gguf_writer *w, const char *key, int32_t v);
st_err st_gguf_writer_add_u64(st_gguf_writer *w, const char *key, uint64_t v);
st_err st_gguf_writer_add_i64(st_gguf_writer *w, const char *key, int64_t v);
st_err st_gguf_writer_add_f32(st_gguf_writer *w, const char *key, float v);
st_err st_gguf_writer_add_f64(st_gguf_writer *w, const char *key, double v);
st_err st_gguf_writer_add_bool(st_gguf_writer *w, const char *key, bool v);

/* st_gguf_writer_add_str - a string pair (C string). */
st_err st_gguf_writer_add_str(st_gguf_writer *w, const char *key, const char *s);

/* st_gguf_writer_add_strn - a string pair of len bytes (may hold NULs). */
st_err st_gguf_writer_add_strn(st_gguf_writer *w, const char *key, const char *s, size_t len);

/* st_gguf_writer_add_arr - an array of n scalars of elem_type (not STRING
 * or ARRAY: ST_ETYPE), packed little-endian at vals (copied). */
st_err st_gguf_writer_add_arr(st_gguf_writer *w, const char *key, st_gguf_type elem_type,
                              const void *vals, uint64_t n);

/* st_gguf_writer_add_arr_str - an array of n strings (copied); lens may be
 * NULL (then each is a C string) or give each string's length. */
st_err st_gguf_writer_add_arr_str(st_gguf_writer *w, const char *key, const char *const *strs,
                                  const size_t *lens, uint64_t n);

/* st_gguf_writer_add_tensor - a tensor of dtype with n_dims (1..4) dims
 * ne[0..n_dims) (ne[0] contiguous, each >= 1, ne[0] a multiple of the
 * dtype's block: else ST_ESHAPE); nbytes must equal the size the shape
 * implies (ST_ESHAPE). data is not copied and must stay valid until
 * finish. ST_EFORMAT on a duplicate name. */
st_err st_gguf_writer_add_tensor(st_gguf_writer *w, const char *name, st_dtype dtype,
                                 uint32_t n_dims, const int64_t *ne, const void *data,
                                 size_t nbytes);

/* st_gguf_writer_add_tensor_info - declares a tensor whose bytes will be
 * streamed with st_gguf_writer_write; *nbytes (may be NULL) receives its
 * size. Same checks as st_gguf_writer_add_tensor. */
st_err st_gguf_writer_add_tensor_info(st_gguf_writer *w, const char *name, st_dtype dtype,
                                      uint32_t n_dims, const int64_t *ne, size_t *nbytes);

/* st_gguf_writer_begin_data - writes header, pairs, tensor table and the
 * padding before the data section; afterwards nothing can be added. Every
 * tensor must have been declared with add_tensor_info (ST_EINVAL if one
 * was given data: use one mode per writer). */
st_err st_gguf_writer_begin_data(st_gguf_writer *w);

/* st_gguf_writer_write - appends n bytes of tensor data, in declaration
 * order, crossing tensor boundaries as needed (padding is inserted by the
 * writer). ST_ERANGE if more bytes are given than the tensors hold. */
st_err st_gguf_writer_write(st_gguf_writer *w, const void *data, size_t n);

/* st_gguf_writer_finish - completes the file: without streaming, writes
 * everything; with streaming, checks that every byte was given (ST_ETRUNC
 * naming the tensor otherwise). Then flushes, syncs and renames the
 * temporary file to the final path. ST_EINVAL for a memory writer or a
 * second call: finish is tried once, and after a failure the writer can
 * only be freed (which removes the temporary file). */
st_err st_gguf_writer_finish(st_gguf_writer *w);

/* st_gguf_writer_to_mem - serialises the whole file (every tensor must
 * have data) into a malloc'ed buffer *buf of *len bytes (caller frees);
 * fills the layout returned by the getters below. */
st_err st_gguf_writer_to_mem(st_gguf_writer *w, uint8_t **buf, size_t *len);

/* File offsets of one pair's fields, valid after to_mem or begin_data. */
typedef struct st_gguf_kv_layout {
    size_t key_off;   /* the u64 key length */
    size_t type_off;  /* the u32 value type */
    size_t value_off; /* the value; for arrays the u32 element type */
} st_gguf_kv_layout;

/* File offsets of one tensor description's fields and of its data. */
typedef struct st_gguf_tensor_layout {
    size_t name_off;   /* the u64 name length */
    size_t n_dims_off; /* u32 */
    size_t ne_off;     /* n_dims u64 values */
    size_t type_off;   /* u32 ggml type */
    size_t offset_off; /* u64 data offset (relative to the data section) */
    uint64_t offset;   /* the value written there */
    size_t data_off;   /* absolute file offset of the data */
} st_gguf_tensor_layout;

/* st_gguf_writer_kv_layout - layout of pair i (ST_ERANGE if none, ST_EINVAL
 * before serialisation). */
st_err st_gguf_writer_kv_layout(const st_gguf_writer *w, uint64_t i, st_gguf_kv_layout *out);

/* st_gguf_writer_tensor_layout - layout of tensor i. */
st_err st_gguf_writer_tensor_layout(const st_gguf_writer *w, uint64_t i,
                                    st_gguf_tensor_layout *out);

/* st_gguf_writer_data_offset - file offset of the data section (valid
 * after serialisation). */
size_t st_gguf_writer_data_offset(const st_gguf_writer *w);

#endif
