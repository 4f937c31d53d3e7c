/* gguf_impl.h - internals shared by the two files of the GGUF reader:
 * gguf.c (the validating parser, open and close) and gguf_access.c
 * (lookups, typed getters, the model id, page residency). PRIVATE to the
 * gguf module: nothing outside common/model/gguf*.c includes it; everyone else
 * uses common/model/gguf.h. */
#ifndef ST_GGUF_IMPL_H
#define ST_GGUF_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/model/gguf.h"

#define GG_NAME_SHOWN 96 /* characters of a key or name shown in details */

struct st_gguf {
    const uint8_t *base;
    size_t len;
    bool mapped; /* base came from mmap and is unmapped on close */
    uint32_t version;
    size_t alignment;
    uint64_t n_kv;
    st_gguf_kv *kvs;
    uint64_t *kv_sorted; /* indexes of kvs sorted by key */
    uint64_t n_tensors;
    st_gguf_tensor *tensors;
    uint64_t *t_sorted; /* indexes of tensors sorted by name */
    size_t table_end;   /* end of the tensor table: what the model id hashes */
    size_t data_off;    /* start of the data section */
};

/* gg_shown - printable length of a key or name in a detail message. */
static inline int gg_shown(st_gguf_str s)
{
    return s.len > GG_NAME_SHOWN ? GG_NAME_SHOWN : (int)s.len;
}

/* gg_scalar_size - size of one scalar of type t, or 0 for STRING, ARRAY
 * and unknown types. */
size_t gg_scalar_size(uint32_t t);

/* gg_decode_scalar - decodes one scalar of type t at p (which holds
 * gg_scalar_size(t) bytes) into kv's value union. ST_EFORMAT, naming kv's
 * key and the file offset at, for a bool other than 0 or 1; ST_EINTERNAL
 * if t is not a scalar type. */
st_err gg_decode_scalar(st_gguf_kv *kv, uint32_t t, const uint8_t *p, size_t at);

/* gg_cmp_str - the byte-wise order of two strings, a proper prefix first:
 * negative, 0 or positive as memcmp. The order of the sorted key and
 * tensor-name indexes. */
int gg_cmp_str(st_gguf_str a, st_gguf_str b);

#endif
