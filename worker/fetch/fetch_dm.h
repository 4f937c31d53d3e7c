/* fetch_dm.h - the worker daemon's use of weight streaming and of the
 * chunk server (fetch_dm.c; its design is the file comment there). Part
 * of the daemon (dm_internal.h).
 *
 * State. dm_fetching is changed only by fetch_dm.c. The handles are
 * opened while st_daemon_open runs (dm_fetch_open) and closed by
 * st_daemon_close (dm_serve_close, dm_fetch_close); in between they are
 * used from several threads, which their own modules allow (fetch.h: the
 * loader fetches, the control thread reads the progress, the main thread
 * stops; chunk_serve.h). src and n_src are written by the control thread
 * (dm_fetch_sources, in a Prepare before its loader starts) and read by
 * that loader (dm_fetch_stage), never while it runs: a Prepare is handled
 * only while no loader runs (dm_plan.h). The hb_* arrays are the control
 * thread's (dm_fetch_pb). No lock. */
#ifndef ST_WORKER_FETCH_DM_H
#define ST_WORKER_FETCH_DM_H

#include "common/net/pipe_gate.h"
#include "strata.pb-c.h"
#include "worker/fetch/chunk_serve.h"
#include "worker/daemon/daemon.h"
#include "worker/data/dataplane.h"
#include "worker/fetch/fetch.h"

typedef struct dm_fetching {
    st_fetch *fetch;                 /* weight streaming; NULL with --model */
    st_chunk_serve *serve;           /* --serve-chunks; NULL without */
    char chunk_addr[ST_DP_ADDR_MAX]; /* its address for other members (Join); "" without */
    char src[ST_FETCH_MAX_SOURCES][ST_DP_ADDR_MAX]; /* the Prepare's chunk sources */
    size_t n_src;
    /* the heartbeat's fetch sources (dm_fetch_pb) */
    st_fetch_source_stats hb_src[2 * ST_FETCH_MAX_SOURCES];
    Strata__FetchSource hb_fs[2 * ST_FETCH_MAX_SOURCES];
    Strata__FetchSource *hb_fsp[2 * ST_FETCH_MAX_SOURCES];
} dm_fetching;

/* dm_fetch_open - without --model, fetches the header at start-up (the
 * model path becomes the sparse cache file); with --serve-chunks, opens
 * the chunk server. */
st_err dm_fetch_open(st_daemon *d, const st_worker_cfg *cfg);

/* dm_serve_close - the chunk server (st_daemon_close, before the control
 * sockets; then dm_fetch_close does nothing more to it). */
void dm_serve_close(st_daemon *d);

/* dm_fetch_close - the chunk server, then the fetch (at the daemon's close). */
void dm_fetch_close(st_daemon *d);

/* dm_fetch_stop - ends a fetch in progress (st_fetch_stop); NULL fetch:
 * nothing. Any thread. */
void dm_fetch_stop(st_daemon *d);

/* dm_fetch_stage - a Prepared stage's chunks, on the loader thread;
 * ST_OK at once when not streaming. */
st_err dm_fetch_stage(st_daemon *d, const st_dp_plan *p);

/* dm_fetch_sources - keeps the well-formed chunk sources a Prepare names
 * for the stage fetch of its loader (logged once; none when not streaming). */
void dm_fetch_sources(st_daemon *d, const Strata__Prepare *pr);

/* dm_chunk_advertise - the chunk server's address for the Join: its bound
 * address, with host (the one the worker advertises) for a wildcard one. */
void dm_chunk_advertise(st_daemon *d, const char *host);

/* dm_fetch_streams - whether this worker streams its weights (no --model). */
bool dm_fetch_streams(const st_daemon *d);

/* dm_fetch_chunk_addr - the chunk server's announced address; "" without. */
const char *dm_fetch_chunk_addr(const st_daemon *d);

/* dm_serve_gate_counts - adds the chunk server's connection counts to *g. */
void dm_serve_gate_counts(const st_daemon *d, st_pipe_gate_counts *g);

/* dm_fetch_pb - the fetch's figures for a heartbeat into out (its sources
 * in d->fe.hb_*: valid until the next call); NULL when not streaming. */
Strata__FetchProgress *dm_fetch_pb(st_daemon *d, Strata__FetchProgress *out);

#endif
