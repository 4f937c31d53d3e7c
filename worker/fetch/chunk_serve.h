/* chunk_serve.h - a worker's chunk server (docs/streaming.md): other
 * workers fetch a model's verified chunks from this member instead of (or
 * beside) the coordinator, naming it in --weights-from.
 *
 * It is common/net/manifest_serve.h's server on its own socket and thread, over
 * one of two sources: a worker without --model serves its fetch cache
 * (the manifest it fetched, and only the chunks its journal names
 * verified: st_fetch_read); a worker with --model serves its model file,
 * with a manifest of its own computed on the first request in the grid the
 * request names (so it follows the coordinator's --weights-chunk). Either
 * way the client hashes every chunk against its own manifest: this server
 * adds sources, never trust. */
#ifndef ST_WORKER_CHUNK_SERVE_H
#define ST_WORKER_CHUNK_SERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/net/pipe_gate.h"
#include "worker/fetch/fetch.h"

typedef struct st_chunk_serve_cfg {
    const char *listen; /* tcp://HOST:PORT (port 0: any) */
    const uint8_t *key; /* the cluster key (NULL: none) */
    bool encrypt;
    st_fetch *fetch;        /* a streaming worker's cache; NULL: serve model_path */
    const char *model_path; /* with fetch NULL */
    const char *cache_dir;  /* where the model file's manifest is cached (NULL: beside it) */
    bool test_corrupt;      /* test hook: every chunk sent with a bit flipped */
} st_chunk_serve_cfg;

typedef struct st_chunk_serve st_chunk_serve;

/* st_chunk_serve_open - binds cfg->listen and starts serving; the bound
 * address goes to addr[0..cap). cfg->fetch must outlive the server. */
st_err st_chunk_serve_open(const st_chunk_serve_cfg *cfg, st_chunk_serve **out, char *addr,
                           size_t cap);

/* st_chunk_serve_gate_counts - adds its socket's connection counts
 * (common/net/pipe_gate.h) to *sum. NULL c: nothing. */
void st_chunk_serve_gate_counts(st_chunk_serve *c, st_pipe_gate_counts *sum);

/* st_chunk_serve_close - stops serving; NULL is a no-op. */
void st_chunk_serve_close(st_chunk_serve *c);

#endif
