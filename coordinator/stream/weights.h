/* weights.h - the coordinator's weights server (docs/streaming.md): the
 * manifest of its model file and the file's chunks, to workers that start
 * without a model file.
 *
 * A separate NNG REP socket served by its own thread (common/net/manifest_serve.h
 * over the model file), which only reads the model file and its manifest: it shares no state with
 * the coordinator's event loop (common/base/cq.h), so serving chunks never delays the loop, and the loop
 * never waits for a read. The manifest is computed (or read from its cache, common/model/manifest.h) on
 * the first request, not at start, so a coordinator whose workers all hold the file never hashes
 * it. */
#ifndef ST_COORD_WEIGHTS_H
#define ST_COORD_WEIGHTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/net/pipe_gate.h"

typedef struct st_weights_cfg {
    const char *model_path;
    const char *listen;    /* tcp://HOST:PORT (port 0: any) */
    const char *cache_dir; /* the manifest's second place (NULL: beside the file only) */
    uint32_t chunk_size;   /* ST_MANIFEST_CHUNK_MIN..MAX */
    const char *key_path;  /* the cluster key (NULL: none) */
    bool encrypt;
    int64_t test_corrupt_chunk; /* test hook: this chunk is sent corrupted the first time
                                   it is asked for (-1: never) */
    int64_t test_refuse_after;  /* test hook: chunk requests after this many served are
                                   refused (-1: never; 0: all) */
} st_weights_cfg;

typedef struct st_weights st_weights;

/* st_weights_open - binds cfg->listen and starts the serving thread; the
 * bound address goes to addr[0..cap). */
st_err st_weights_open(const st_weights_cfg *cfg, st_weights **out, char *addr, size_t cap);

/* st_weights_gate_counts - adds the weights socket's connection counts
 * (common/net/pipe_gate.h) to *sum. NULL w: nothing. */
void st_weights_gate_counts(st_weights *w, st_pipe_gate_counts *sum);

/* st_weights_close - stops the thread and closes the socket; NULL is a no-op. */
void st_weights_close(st_weights *w);

#endif
