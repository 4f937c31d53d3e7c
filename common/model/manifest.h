/* manifest.h - the manifest of a model file for weight streaming
 * (docs/streaming.md): the file cut into fixed-size chunks, each named by
 * its BLAKE2b-256 hash.
 *
 * Chunk i covers the bytes [i * chunk_size, min((i + 1) * chunk_size,
 * file_size)) of the file: a grid over the whole file, so a chunk's place
 * is its index and a worker keeps the chunks it fetched at their original
 * offsets (a sparse copy of the file that the GGUF reader maps as is). The
 * chunks below data_offset hold the header (metadata and tensor table);
 * the model id (st_gguf_model_id) is the hash of its first table_end bytes,
 * so a worker that has the header chunks checks the manifest's model id
 * itself.
 *
 * The coordinator computes a manifest once per model file and caches it
 * (st_manifest_cached): under the cache directory, or beside the file when
 * there is none or it cannot be written; a cached manifest is used only while the
 * file's size and modification time and the chunk size are those it was
 * computed for. */
#ifndef ST_MANIFEST_H
#define ST_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/model/gguf.h"
#include "strata.pb-c.h"

#define ST_MANIFEST_HASH 32                           /* BLAKE2b-256 */
#define ST_MANIFEST_CHUNK_DEFAULT ((uint32_t)4 << 20) /* 4 MiB */
#define ST_MANIFEST_CHUNK_MIN ((uint32_t)64 << 10)    /* 64 KiB */
#define ST_MANIFEST_CHUNK_MAX ((uint32_t)64 << 20)    /* 64 MiB */
#define ST_MANIFEST_MAX_CHUNKS ((uint64_t)1 << 20)    /* hashes of at most 32 MiB */
/* Room for the envelope and the protobuf fields around a chunk's or the
 * hashes' bytes in one frame. */
#define ST_MANIFEST_FRAME_SLACK ((size_t)64 << 10)
/* The largest frame of the weights protocol (a chunk of the largest size,
 * or a manifest of the most chunks): a weights socket's RECVMAXSZ. */
#define ST_MANIFEST_MAX_FRAME ((size_t)ST_MANIFEST_CHUNK_MAX + ST_MANIFEST_FRAME_SLACK)

typedef struct st_manifest {
    uint8_t model_id[ST_MANIFEST_HASH];
    uint64_t file_size;
    uint32_t chunk_size;
    uint64_t data_offset;
    uint64_t n_chunks;
    uint8_t (*hash)[ST_MANIFEST_HASH]; /* [n_chunks], owned */
} st_manifest;

/* st_manifest_compute - reads the GGUF file at path (validated by
 * st_gguf_open) chunk by chunk, one chunk in memory at a time, and fills
 * *out (freed with st_manifest_free). */
st_err st_manifest_compute(const char *path, uint32_t chunk_size, st_manifest *out);

/* st_manifest_cached - the manifest of path: read from its cache file when
 * one matches (size, mtime, chunk size, self-check), else computed and
 * written to cache_dir/manifests/<hash of the absolute path>.manifest, or,
 * when cache_dir is NULL or that cannot be written, to path +
 * ".strata-manifest". *computed says which happened; a cache
 * file that cannot be written is logged, not an error. */
st_err st_manifest_cached(const char *path, const char *cache_dir, uint32_t chunk_size,
                          st_manifest *out, bool *computed);

/* st_manifest_cache_file - cache_dir/manifests/<BLAKE2b of path's absolute
 * path><ext> into out (the directories created): the manifest's cache file
 * (ext ".manifest") and what else is cached per model file beside it. */
st_err st_manifest_cache_file(const char *path, const char *cache_dir, const char *ext, char *out,
                              size_t cap);

/* st_manifest_free - frees what *m owns; a zeroed manifest is fine. */
void st_manifest_free(st_manifest *m);

/* st_manifest_chunk - the file offset and length of chunk i (< n_chunks). */
void st_manifest_chunk(const st_manifest *m, uint64_t i, uint64_t *off, size_t *len);

/* st_manifest_read - reads chunk i (< n_chunks) of the file open as fd
 * into buf (st_manifest_chunk's length, given in *len); errors name path
 * (ST_ETRUNC when the file ends inside the chunk). */
st_err st_manifest_read(const st_manifest *m, int fd, const char *path, uint64_t i, void *buf,
                        size_t *len);

/* st_manifest_check - ST_OK when data[0..len) is chunk i (its length and
 * hash); ST_ECHECKSUM (or ST_ERANGE for a wrong index or length) naming
 * the chunk otherwise. */
st_err st_manifest_check(const st_manifest *m, uint64_t i, const void *data, size_t len);

/* st_manifest_to_pb - *pb describes m (pointers into m: m must outlive it). */
void st_manifest_to_pb(const st_manifest *m, Strata__Manifest *pb);

/* st_manifest_from_pb - a received manifest, checked (model id length,
 * chunk size in range, chunk count equal to the file size's, hashes'
 * length, data offset inside the file) into *out. */
st_err st_manifest_from_pb(const Strata__Manifest *pb, st_manifest *out);

/* st_manifest_stage_chunks - marks in need[0..n_chunks) (not cleared
 * first) the chunks a stage [first, last) of an n_layer model needs: the
 * header's, and those holding any byte of the stage's tensors (its layers;
 * the token embedding for the first stage, and for the last when the head
 * is tied; the output norm and head for the last), by the tensor table of
 * g, the model the manifest describes. ST_ERANGE when a tensor lies beyond
 * the manifest's file. */
st_err st_manifest_stage_chunks(const st_manifest *m, const st_gguf *g, int64_t first, int64_t last,
                                int64_t n_layer, bool *need);

/* st_weights_default_addr - the weights server's default address beside a
 * control address tcp://HOST:PORT: the same host, PORT + ST_WEIGHTS_PORT_STEP
 * (port 0 stays 0: any port, printed at start). ST_EINVAL for another form. */
#define ST_WEIGHTS_PORT_STEP 1
st_err st_weights_default_addr(const char *ctl, char *out, size_t cap);

/* st_cache_dir_default - $XDG_CACHE_HOME/strata, else $HOME/.cache/strata
 * (docs/streaming.md); ST_ENOENT when neither variable is set. */
st_err st_cache_dir_default(char *out, size_t cap);

#endif
