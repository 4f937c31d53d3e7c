/* manifest_serve.h - a server of a model's manifest and chunks over NNG
 * (docs/streaming.md): the coordinator's weights server
 * (coordinator/stream/weights.c) and a worker's chunk server (worker/fetch/chunk_serve.c)
 * are this one server over two kinds of source.
 *
 * The server is one REP socket and one thread that owns it, its envelope
 * state and one chunk buffer. It answers ManifestRequest with the source's
 * manifest and ChunkRequest with the chunk's bytes, checking the request
 * against the manifest first (model id, chunk size, index); anything else,
 * and a chunk the source does not hold verified, gets an Error. Requests
 * and replies are envelopes under the cluster key like every control
 * message. The source's functions run on the server's thread only.
 *
 * The file source (st_mfile) serves a whole model file: its manifest is
 * computed or read from its cache (st_manifest_cached) on the first
 * request, not at start. */
#ifndef ST_MANIFEST_SERVE_H
#define ST_MANIFEST_SERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/model/manifest.h"
#include "common/net/pipe_gate.h"

typedef struct st_chunk_src {
    /* manifest - the source's manifest for a grid of chunk_size bytes (0:
     * its own) in *m, valid until the next call; an error when it has
     * none of that grid. */
    st_err (*manifest)(void *ctx, uint32_t chunk_size, const st_manifest **m);
    /* read - chunk i (< n_chunks of the manifest just given) into
     * buf[0..len): ST_ENOENT when the source does not hold it verified. */
    st_err (*read)(void *ctx, uint64_t i, uint8_t *buf, size_t len);
    void *ctx;
} st_chunk_src;

typedef struct st_mserve_cfg {
    const char *name;   /* in its log lines: "weights", "chunks" */
    const char *flag;   /* the flag that gave listen, in errors: "--weights" */
    const char *listen; /* tcp://HOST:PORT (port 0: any) */
    const uint8_t *key; /* the cluster key, ST_KEY_BYTES (NULL: none) */
    bool encrypt;
    st_chunk_src src;
    /* test hooks (-1 / false: none) */
    int64_t test_corrupt_chunk; /* this chunk is sent with a bit flipped the first time */
    bool test_corrupt_all;      /* every chunk is sent with a bit flipped */
    int64_t test_refuse_after;  /* chunk requests after this many served get an Error */
} st_mserve_cfg;

typedef struct st_mserve st_mserve;

/* st_mserve_open - binds cfg->listen and starts the serving thread; the
 * bound address goes to addr[0..cap). cfg->src must outlive the server. */
st_err st_mserve_open(const st_mserve_cfg *cfg, st_mserve **out, char *addr, size_t cap);

/* A server's socket takes requests of at most this many bytes: a
 * ManifestRequest or ChunkRequest (a 32-byte model id and two numbers)
 * sealed in its envelope is under 128 bytes. Its connections are gated
 * (common/net/pipe_gate.h): one that sent no authenticated request within
 * ST_PIPE_GATE_UNPROVEN_MS is closed. */
#define ST_MSERVE_MAX_REQUEST ((size_t)4 << 10)

/* st_mserve_gate_counts - adds the socket's connection counts to *sum.
 * NULL s: nothing. */
void st_mserve_gate_counts(st_mserve *s, st_pipe_gate_counts *sum);

/* st_mserve_close - stops the thread and closes the socket; NULL is a no-op. */
void st_mserve_close(st_mserve *s);

typedef struct st_mfile st_mfile;

/* st_mfile_open - a source serving the model file at path (opened now, so
 * a missing file is an error at start). Its manifest's chunk size is
 * chunk_size; with adopt, a request naming another chunk size makes it
 * compute the manifest of that grid instead (a worker serving its own file
 * follows the coordinator's grid), else such a request is refused. cache_dir
 * as st_manifest_cached (NULL: beside the file). */
st_err st_mfile_open(const char *path, const char *cache_dir, uint32_t chunk_size, bool adopt,
                     st_mfile **out);

/* st_mfile_src - the source's functions over f. */
st_chunk_src st_mfile_src(st_mfile *f);

/* st_mfile_close - NULL is a no-op. */
void st_mfile_close(st_mfile *f);

#endif
