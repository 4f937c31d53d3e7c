/* fetch_dm.c - the worker daemon's use of weight streaming (fetch.h,
 * docs/streaming.md; its state and who touches it: fetch_dm.h): a worker
 * started without --model fetches the model's header at start-up (so it
 * knows the model id it joins with and its hyperparameters) and its
 * stage's chunks in Prepare, on the loader thread, before loading; its
 * heartbeats carry the fetch's progress.
 *
 * With --serve-chunks the worker also serves chunks to other workers
 * (chunk_serve.h): the verified chunks of its cache, or its model file;
 * its Join names the server (Capability.chunk_addr), and the coordinator
 * names such members in a streaming worker's Prepare (chunk_sources): that
 * stage's fetch asks them too, beside --weights-from.
 *
 * Envelope identity: the fetcher's requests use a sender id of their own,
 * random, since they go to another socket (the weights server's) than the
 * daemon's requests. */
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/log.h"
#include "common/model/manifest.h"
#include "common/net/netaddr.h"
#include "worker/daemon/dm_internal.h"

/* dm_serve_open - --serve-chunks: the chunk server over the fetch cache
 * (streaming) or the model file; its address printed for operators and
 * tests as "chunks on ADDR". */
static st_err dm_serve_open(st_daemon *d, const st_worker_cfg *cfg, const char *cache)
{
    if (cfg->serve_chunks == NULL)
        return ST_OK;
    char addr[ST_DP_ADDR_MAX];
    st_chunk_serve_cfg sc = {.listen = cfg->serve_chunks,
                             .key = d->self.keyed ? d->self.key : NULL,
                             .encrypt = cfg->encrypt,
                             .fetch = d->fe.fetch,
                             .model_path = d->self.cfg.model,
                             .cache_dir = cache,
                             .test_corrupt = cfg->test_serve_corrupt};
    st_err e = st_chunk_serve_open(&sc, &d->fe.serve, addr, sizeof addr);
    if (e != ST_OK)
        return e;
    snprintf(d->fe.chunk_addr, sizeof d->fe.chunk_addr, "%s", addr);
    st_log(ST_LOG_INFO, "worker", "chunks on %s (%s)", addr,
           d->fe.fetch != NULL ? "the verified chunks of its cache" : "its model file");
    return ST_OK;
}

void st_open_stop_ask(st_open_stop *os, int sig)
{
    pthread_mutex_lock(&os->mu);
    os->sig = sig;
    st_fetch_stop(os->fetch); /* NULL: none in progress */
    pthread_mutex_unlock(&os->mu);
}

int st_open_stop_asked(st_open_stop *os)
{
    pthread_mutex_lock(&os->mu);
    int sig = os->sig;
    pthread_mutex_unlock(&os->mu);
    return sig;
}

/* dm_open_stop_attach - makes f the fetch a stop ends (NULL: none); false
 * when a stop was asked already (os NULL: never). */
static bool dm_open_stop_attach(st_open_stop *os, st_fetch *f)
{
    if (os == NULL)
        return true;
    pthread_mutex_lock(&os->mu);
    bool go = os->sig == 0;
    os->fetch = go ? f : NULL;
    pthread_mutex_unlock(&os->mu);
    return go;
}

st_err dm_fetch_open(st_daemon *d, const st_worker_cfg *cfg)
{
    char wdef[ST_DP_ADDR_MAX], cdef[PATH_MAX];
    const char *from = cfg->weights_from, *cache = cfg->cache_dir;
    st_err e;
    if (cache == NULL && st_cache_dir_default(cdef, sizeof cdef) == ST_OK)
        cache = cdef;
    if (cfg->model != NULL) /* its manifest cached beside the file when no cache dir */
        return dm_serve_open(d, cfg, cache);
    if (from == NULL) {
        if ((e = st_weights_default_addr(cfg->coordinator, wdef, sizeof wdef)))
            return st_errwrap(e, "no --model: the weights come from --weights-from, by default "
                                 "the coordinator's port + 1");
        from = wdef;
    }
    if (cache == NULL)
        return st_errorf(ST_ENOENT, "no --model and no --cache-dir, and no default cache "
                                    "directory (neither XDG_CACHE_HOME nor HOME is set)");
    if (sodium_init() < 0)
        return st_err_sodium("sodium_init");
    st_fetch_cfg fc = {.sources = from,
                       .cache_dir = cache,
                       .key = d->self.keyed ? d->self.key : NULL,
                       .encrypt = cfg->encrypt,
                       .max_rate = cfg->max_fetch_rate,
                       .pause_after = cfg->test_fetch_pause_after,
                       .call_ms = cfg->test_fetch_call_ms};
    randombytes_buf(&fc.sender, sizeof fc.sender);
    fc.sender |= 1; /* nonzero */
    const char *path;
    if ((e = st_fetch_open(&fc, &d->fe.fetch)) != ST_OK)
        return e;
    if (!dm_open_stop_attach(cfg->open_stop, d->fe.fetch))
        return st_errorf(ST_ECANCELED, "stopped before the model's header was fetched");
    e = st_fetch_header(d->fe.fetch, &path);
    dm_open_stop_attach(cfg->open_stop, NULL);
    if (e != ST_OK)
        return e;
    free(d->self.s_model);
    if ((d->self.s_model = strdup(path)) == NULL)
        return st_errorf(ST_ENOMEM, "model path");
    d->self.cfg.model = d->self.s_model;
    st_log(ST_LOG_INFO, "worker", "no --model: weights from %s, cached under %s", from, cache);
    return dm_serve_open(d, cfg, cache);
}

void dm_serve_close(st_daemon *d)
{
    st_chunk_serve_close(d->fe.serve);
    d->fe.serve = NULL;
}

void dm_fetch_close(st_daemon *d)
{
    dm_serve_close(d); /* first: it reads the fetch's cache */
    st_fetch_close(d->fe.fetch);
    d->fe.fetch = NULL;
}

void dm_fetch_stop(st_daemon *d) { st_fetch_stop(d->fe.fetch); }

bool dm_fetch_streams(const st_daemon *d) { return d->fe.fetch != NULL; }

const char *dm_fetch_chunk_addr(const st_daemon *d) { return d->fe.chunk_addr; }

void dm_serve_gate_counts(const st_daemon *d, st_pipe_gate_counts *g)
{
    st_chunk_serve_gate_counts(d->fe.serve, g);
}

void dm_chunk_advertise(st_daemon *d, const char *host)
{
    st_hostport hp;
    if (!st_tcp_split(d->fe.chunk_addr, &hp))
        return;
    char a[ST_DP_ADDR_MAX];
    long port;
    if (st_host_is_any(hp.host, hp.host_len) && st_port_parse(hp.port, ST_PORT_MAX, &port) &&
        st_tcp_format(host, strlen(host), port, a, sizeof a))
        memcpy(d->fe.chunk_addr, a, sizeof a);
}

void dm_fetch_sources(st_daemon *d, const Strata__Prepare *pr)
{
    d->fe.n_src = 0;
    if (d->fe.fetch == NULL)
        return;
    char list[ST_FETCH_MAX_SOURCES * (ST_DP_ADDR_MAX + 2)] = "";
    size_t off = 0, refused = 0;
    for (size_t i = 0; i < pr->n_chunk_sources; i++) {
        const char *a = pr->chunk_sources[i];
        /* INV-3: only well-formed tcp:// addresses are dialled (as probe peers) */
        if (!dm_addr_ok(a) || !st_is_tcp(a) || strlen(a) >= ST_DP_ADDR_MAX ||
            d->fe.n_src == ST_FETCH_MAX_SOURCES) {
            refused++;
            continue;
        }
        bool dup = strcmp(a, d->fe.chunk_addr) == 0; /* its own server */
        for (size_t k = 0; k < d->fe.n_src && !dup; k++)
            dup = strcmp(d->fe.src[k], a) == 0;
        if (dup)
            continue;
        snprintf(d->fe.src[d->fe.n_src++], ST_DP_ADDR_MAX, "%s", a);
        off += (size_t)snprintf(list + off, sizeof list - off, "%s%s", off ? ", " : "", a);
    }
    uint64_t epoch = pr->plan != NULL ? pr->plan->epoch : 0;
    if (refused > 0)
        st_log(ST_LOG_WARN, "fetch",
               "epoch %llu: %zu chunk source(s) the coordinator named not used (not a tcp:// "
               "address, or more than %d)",
               (unsigned long long)epoch, refused, ST_FETCH_MAX_SOURCES);
    st_log(ST_LOG_INFO, "fetch", "epoch %llu: the coordinator names %zu chunk source(s)%s%s",
           (unsigned long long)epoch, d->fe.n_src, d->fe.n_src ? ": " : "", list);
}

st_err dm_fetch_stage(st_daemon *d, const st_dp_plan *p)
{
    if (d->fe.fetch == NULL)
        return ST_OK;
    const char *extra[ST_FETCH_MAX_SOURCES];
    for (size_t i = 0; i < d->fe.n_src; i++)
        extra[i] = d->fe.src[i];
    st_fetch_extra(d->fe.fetch, extra, d->fe.n_src);
    return st_fetch_stage(d->fe.fetch, d->self.g, p->first, p->last, d->self.hp.n_layer);
}

Strata__FetchProgress *dm_fetch_pb(st_daemon *d, Strata__FetchProgress *out)
{
    if (d->fe.fetch == NULL)
        return NULL;
    st_fetch_stats s;
    st_fetch_progress(d->fe.fetch, &s);
    strata__fetch_progress__init(out);
    out->active = s.active;
    out->need_bytes = s.need_bytes;
    out->have_bytes = s.have_bytes;
    out->fetched_bytes = s.fetched_bytes;
    out->cached_bytes = s.cached_bytes;
    out->rate_bytes_per_s = s.rate;
    out->eta_s = s.eta_s;
    out->bad_chunks = s.bad_chunks;
    out->sources = s.sources;
    out->refetched_bytes = s.refetched_bytes;
    out->timeouts = s.timeouts;
    size_t n = st_fetch_sources(d->fe.fetch, d->fe.hb_src,
                                sizeof d->fe.hb_src / sizeof d->fe.hb_src[0]);
    for (size_t i = 0; i < n; i++) {
        Strata__FetchSource *fs = &d->fe.hb_fs[i];
        strata__fetch_source__init(fs);
        fs->addr = d->fe.hb_src[i].addr;
        fs->requests = d->fe.hb_src[i].requests;
        fs->timeouts = d->fe.hb_src[i].timeouts;
        fs->aside = d->fe.hb_src[i].aside;
        fs->dropped = d->fe.hb_src[i].dropped;
        d->fe.hb_fsp[i] = fs;
    }
    out->source_stats = d->fe.hb_fsp;
    out->n_source_stats = n;
    return out;
}
