/* fetch_dm.c - the worker daemon's use of weight streaming (fetch.h,
 * docs/streaming.md): a worker started without --model fetches the
 * model's header at start-up (so it knows the model id it joins with and
 * its hyperparameters) and its stage's chunks in Prepare, on the loader
 * thread, before loading; its heartbeats carry the fetch's progress.
 *
 * Envelope identity: the fetcher's requests use a sender id of their own,
 * random, since they go to another socket (the weights server's) than the
 * daemon's requests. */
#include <limits.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/manifest.h"
#include "worker/dm_internal.h"

st_err dm_fetch_open(st_daemon *d, const st_worker_cfg *cfg)
{
    if (cfg->model != NULL)
        return ST_OK;
    char wdef[ST_DP_ADDR_MAX], cdef[PATH_MAX];
    const char *from = cfg->weights_from, *cache = cfg->cache_dir;
    st_err e;
    if (from == NULL) {
        if ((e = st_weights_default_addr(cfg->coordinator, wdef, sizeof wdef)))
            return st_errwrap(e, "no --model: the weights come from --weights-from, by default "
                                 "the coordinator's port + 1");
        from = wdef;
    }
    if (cache == NULL && (e = st_cache_dir_default(cdef, sizeof cdef)) != ST_OK)
        return st_errwrap(e, "no --model and no --cache-dir");
    if (cache == NULL)
        cache = cdef;
    if (sodium_init() < 0)
        return st_err_sodium("sodium_init");
    st_fetch_cfg fc = {.sources = from,
                       .cache_dir = cache,
                       .key = d->keyed ? d->key : NULL,
                       .encrypt = cfg->encrypt,
                       .max_rate = cfg->max_fetch_rate,
                       .pause_after = cfg->test_fetch_pause_after};
    randombytes_buf(&fc.sender, sizeof fc.sender);
    fc.sender |= 1; /* nonzero */
    const char *path;
    if ((e = st_fetch_open(&fc, &d->fetch)) || (e = st_fetch_header(d->fetch, &path)))
        return e;
    free(d->s_model);
    if ((d->s_model = strdup(path)) == NULL)
        return st_errorf(ST_ENOMEM, "model path");
    d->cfg.model = d->s_model;
    st_log(ST_LOG_INFO, "worker", "no --model: weights from %s, cached under %s", from, cache);
    return ST_OK;
}

st_err dm_fetch_stage(st_daemon *d, const st_dp_plan *p)
{
    if (d->fetch == NULL)
        return ST_OK;
    return st_fetch_stage(d->fetch, d->g, p->first, p->last, d->hp.n_layer);
}

Strata__FetchProgress *dm_fetch_pb(st_daemon *d, Strata__FetchProgress *out)
{
    if (d->fetch == NULL)
        return NULL;
    st_fetch_stats s;
    st_fetch_progress(d->fetch, &s);
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
    return out;
}
