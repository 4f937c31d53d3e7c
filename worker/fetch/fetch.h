/* fetch.h - a worker's weight streaming (docs/streaming.md): the manifest
 * of the cluster's model from a weights server, then the chunks a stage
 * needs, each verified against the manifest before it is kept.
 *
 * The chunks live in the cache directory, under the model id:
 *   <cache>/models/<model id hex>/model.gguf  a sparse file of the model's
 *                                             size; a chunk at its offset
 *   <cache>/models/<model id hex>/journal     one line per verified chunk:
 *                                             "<chunk size> <index> <hash hex>"
 * A chunk is present when the journal names it with the manifest's hash,
 * so a restart resumes and a later plan reuses what is there, and the
 * GGUF reader maps model.gguf as it maps the original (holes read as
 * zeros, and no stage touches another stage's bytes). The journal line is
 * written only after the chunk's bytes are on disk (fdatasync); the
 * directory is locked (flock) while a process fetches, so workers sharing
 * a cache directory fetch a chunk once.
 *
 * Threads: st_fetch_header and st_fetch_stage run on one thread at a time
 * (the daemon's start-up, then its loader thread); st_fetch_progress,
 * st_fetch_read and st_fetch_stop may be called from any thread. */
#ifndef ST_WORKER_FETCH_H
#define ST_WORKER_FETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/model/gguf.h"
#include "common/model/manifest.h"

#define ST_FETCH_MAX_SOURCES 8
#define ST_FETCH_ADDR_MAX 256 /* a source's address, with its NUL */
_Static_assert(2 * ST_FETCH_MAX_SOURCES <= 32, "a chunk's failed sources are a uint32_t mask");
#define ST_FETCH_STRIKES 2 /* bad chunks after which a source is no longer used */

typedef struct st_fetch_cfg {
    const char *sources;   /* weights servers: tcp:// addresses separated by commas */
    const char *cache_dir; /* created when missing */
    const uint8_t *key;    /* the cluster key (NULL: none) */
    bool encrypt;
    uint64_t sender;     /* envelope sender id of the requests */
    double max_rate;     /* bytes per second (0: no cap) */
    int64_t pause_after; /* test hook: once this many chunks of stages (not the
                            header's) were fetched, wait for st_fetch_stop before the
                            next (-1: never) */
    int call_ms;         /* one request's wait for its reply (0: the default, 30 s; tests
                            set less) */
} st_fetch_cfg;

typedef struct st_fetch_stats {
    bool active;
    uint64_t need_bytes, have_bytes, fetched_bytes, cached_bytes, refetched_bytes;
    uint64_t bad_chunks, fetched_chunks;
    double rate;  /* bytes per second of this fetch so far */
    double eta_s; /* -1 when unknown */
    uint32_t sources;
    uint64_t timeouts; /* requests of this fetch that no source answered in time */
} st_fetch_stats;

/* One source's figures since it was first used (a named source's carry
 * over to a later Prepare that names the same address). A source that let
 * a request time out is set aside: asked again only when no other live
 * source is free, or after a span of requests and time that doubles with
 * each timeout in a row (docs/streaming.md, "Sources that do not answer"). */
typedef struct st_fetch_source_stats {
    char addr[ST_FETCH_ADDR_MAX];
    uint64_t requests, timeouts;
    bool aside;   /* set aside now */
    bool dropped; /* no longer used (bad data ST_FETCH_STRIKES times) */
} st_fetch_source_stats;

typedef struct st_fetch st_fetch;

/* st_fetch_open - parses the sources and makes the cache directory. */
st_err st_fetch_open(const st_fetch_cfg *cfg, st_fetch **out);

/* st_fetch_header - asks the sources for the manifest (waiting for one to
 * answer, as a worker waits for its coordinator), fetches the header's
 * chunks and checks the model id; *path (owned by f) is the sparse file to
 * open as the model. */
st_err st_fetch_header(st_fetch *f, const char **path);

/* st_fetch_stage - makes the chunks of stage [first, last) of an n_layer
 * model present (g: the sparse file opened, for its tensor table); returns
 * when every one is verified on disk, or with the error that stopped it
 * (no source left, a source not answering, the disk, ST_ECANCELED after
 * st_fetch_stop). */
st_err st_fetch_stage(st_fetch *f, const st_gguf *g, int64_t first, int64_t last, int64_t n_layer);

/* st_fetch_extra - the sources the coordinator named for the next stage
 * fetch (Prepare.chunk_sources; docs/streaming.md), beside the configured
 * ones: tcp:// addresses, at most ST_FETCH_MAX_SOURCES used, one already
 * a source named once. They replace the previous stage's extra sources
 * (n = 0: none). Same thread as st_fetch_stage; returns how many it added. */
size_t st_fetch_extra(st_fetch *f, const char *const *addrs, size_t n);

/* st_fetch_progress - the figures of the current or last fetch. */
void st_fetch_progress(st_fetch *f, st_fetch_stats *out);

/* st_fetch_sources - the figures of up to max sources (the configured
 * ones, then the named ones) into out; returns how many. */
size_t st_fetch_sources(st_fetch *f, st_fetch_source_stats *out, size_t max);

/* st_fetch_manifest - the manifest st_fetch_header received (fixed from
 * then on: any thread may read it while f is open). */
st_err st_fetch_manifest(st_fetch *f, const st_manifest **m);

/* st_fetch_read - chunk i of the cache into buf[0..len) when the journal
 * names it verified (ST_ENOENT when not, ST_ERANGE for an index or length
 * outside the manifest); any thread, beside a running fetch (a worker's
 * chunk server: chunk_serve.h). */
st_err st_fetch_read(st_fetch *f, uint64_t i, uint8_t *buf, size_t len);

/* st_fetch_stop - makes a running fetch end with ST_ECANCELED soon (it
 * closes the sources' sockets); f stays to be closed. */
void st_fetch_stop(st_fetch *f);

/* st_fetch_close - frees f; NULL is a no-op. */
void st_fetch_close(st_fetch *f);

#endif
