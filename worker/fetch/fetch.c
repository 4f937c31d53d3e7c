/* fetch.c - a worker's weight streaming (see fetch.h, docs/streaming.md):
 * the fetch loop; the source table it asks is fetch_src.c's.
 *
 * Design. A fetch is a loop over the chunks a stage needs that the cache
 * does not hold, one request and one chunk in flight at a time: the chunk
 * arrives in one NNG message, is unpacked (a second copy), hashed against
 * the manifest, written at its offset in the sparse file and synced, and
 * only then named in the journal; both copies are freed before the next
 * request. So a fetch holds about two chunks in memory whatever the stage's
 * size, and a process killed at any point leaves a journal that names only
 * whole, verified chunks: the next start takes those from the cache and
 * fetches the rest (bytes fetched twice: none).
 *
 * Each chunk is asked for from the source ft_next picks (round the live
 * sources; a timed-out one set aside: fetch_src.c). A chunk that fails
 * verification is dropped and counted, its source gets a strike, and the
 * chunk is asked for again from the next source (the same one when it is
 * the only one left). A source that does not answer within
 * FETCH_CALL_MS, or answers with an error, is tried again after the others,
 * at most FETCH_TRIES times per chunk: then the fetch fails and the worker
 * refuses the Prepare with that error (so a stalled fetch ends, and the
 * coordinator's long Prepare timeout for streaming workers is only a
 * backstop). --max-fetch-rate spaces the requests so the average rate
 * since the fetch began stays under the cap.
 *
 * A stage fetch may also use the sources its Prepare named (the chunk
 * servers of other members, st_fetch_extra): each adds one request to a
 * chunk's FETCH_TRIES, so members that lack a chunk (an Error, which is
 * quick) do not use up the tries the configured sources had. */
#include "worker/fetch/fetch.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/base/clock.h"
#include "common/base/cq.h"
#include "common/base/hex.h"
#include "common/base/log.h"
#include "worker/fetch/fetch_impl.h"

#define FETCH_CALL_MS 30000         /* one request's wait for its chunk (default) */
#define FETCH_TRIES 5               /* failed requests of one chunk before giving up */
#define FETCH_MANIFEST_WAIT_S 120.0 /* for a first source to answer at start */
#define FETCH_RETRY_MS 500          /* between rounds of asking for the manifest */
#define FETCH_LOG_EVERY_S 2.0       /* progress lines */
#define FETCH_LINE_MAX 128          /* a journal line */

/* ---- the stop flag ---- */

bool ft_stopped(st_fetch *f)
{
    pthread_mutex_lock(&f->mu);
    bool s = f->stop;
    pthread_mutex_unlock(&f->mu);
    return s;
}

/* ft_sleep - waits ms or until st_fetch_stop; false when stopped. */
static bool ft_sleep(st_fetch *f, double ms)
{
    pthread_mutex_lock(&f->mu);
    if (ms > 0 && !f->stop) {
        struct timespec ts = st_cq_deadline((uint64_t)(ms * 1e6));
        pthread_cond_timedwait(&f->cv, &f->mu, &ts);
    }
    bool s = f->stop;
    pthread_mutex_unlock(&f->mu);
    return !s;
}

/* ---- the cache ---- */

static st_err ft_mkdirs(const char *dir)
{
    char p[PATH_MAX];
    if ((size_t)snprintf(p, sizeof p, "%s", dir) >= sizeof p)
        return st_errorf(ST_ERANGE, "cache directory '%s' is too long", dir);
    for (char *c = p + 1;; c++) {
        bool end = *c == '\0';
        if (*c == '/' || end) {
            *c = '\0';
            if (mkdir(p, 0700) != 0 && errno != EEXIST)
                return st_err_errno(errno, p);
            if (end)
                return ST_OK;
            *c = '/';
        }
    }
}

/* ft_journal_read - marks in f->have the chunks the journal names with the
 * manifest's hash (a torn last line or another chunk size is skipped). */
static void ft_journal_read(st_fetch *f)
{
    FILE *j = fopen(f->jpath, "r");
    if (j == NULL)
        return;
    char line[FETCH_LINE_MAX], hex[2 * ST_MANIFEST_HASH + 1];
    while (fgets(line, sizeof line, j) != NULL) {
        unsigned long long cs, idx;
        char want[2 * ST_MANIFEST_HASH + 2];
        if (sscanf(line, "%llu %llu %65s", &cs, &idx, want) != 3 || cs != f->m.chunk_size ||
            idx >= f->m.n_chunks || strchr(line, '\n') == NULL)
            continue;
        if (st_hex(f->m.hash[idx], ST_MANIFEST_HASH, hex, sizeof hex) == ST_OK &&
            strcmp(hex, want) == 0) {
            pthread_mutex_lock(&f->mu);
            f->have[idx] = true;
            pthread_mutex_unlock(&f->mu);
        }
    }
    fclose(j);
}

/* ft_journal_add - names verified chunk i (its bytes already synced). */
static st_err ft_journal_add(st_fetch *f, uint64_t i)
{
    char hex[2 * ST_MANIFEST_HASH + 1], line[FETCH_LINE_MAX];
    st_err e = st_hex(f->m.hash[i], ST_MANIFEST_HASH, hex, sizeof hex);
    if (e != ST_OK)
        return e;
    int n = snprintf(line, sizeof line, "%u %llu %s\n", f->m.chunk_size, (unsigned long long)i,
                     hex);
    if (write(f->jfd, line, (size_t)n) != n || fdatasync(f->jfd) != 0)
        return st_err_errno(errno, f->jpath);
    pthread_mutex_lock(&f->mu);
    f->have[i] = true;
    pthread_mutex_unlock(&f->mu);
    return ST_OK;
}

/* ft_cache_open - the model's directory, sparse file and journal. */
static st_err ft_cache_open(st_fetch *f)
{
    char hex[2 * ST_MANIFEST_HASH + 1];
    st_err e = st_hex(f->m.model_id, ST_MANIFEST_HASH, hex, sizeof hex);
    if (e != ST_OK)
        return e;
    if ((size_t)snprintf(f->dir, sizeof f->dir, "%s/models/%s", f->cache_dir, hex) >=
            sizeof f->dir ||
        (size_t)snprintf(f->path, sizeof f->path, "%s/model.gguf", f->dir) >= sizeof f->path ||
        (size_t)snprintf(f->jpath, sizeof f->jpath, "%s/journal", f->dir) >= sizeof f->jpath)
        return st_errorf(ST_ERANGE, "cache directory '%s' is too long", f->cache_dir);
    if ((e = ft_mkdirs(f->dir)))
        return e;
    if ((f->fd = open(f->path, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0)
        return st_err_errno(errno, f->path);
    if ((f->jfd = open(f->jpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600)) < 0)
        return st_err_errno(errno, f->jpath);
    struct stat sb;
    if (fstat(f->fd, &sb) != 0)
        return st_err_errno(errno, f->path);
    if ((uint64_t)sb.st_size != f->m.file_size && ftruncate(f->fd, (off_t)f->m.file_size) != 0)
        return st_err_errno(errno, f->path);
    if ((f->have = calloc(f->m.n_chunks, sizeof *f->have)) == NULL)
        return st_errorf(ST_ENOMEM, "fetch: %llu chunks", (unsigned long long)f->m.n_chunks);
    return ST_OK;
}

/* ---- progress ---- */

static void ft_log(st_fetch *f, bool final)
{
    st_fetch_stats s;
    st_fetch_progress(f, &s);
    double now = st_now_s();
    if (!final && now - f->last_log < FETCH_LOG_EVERY_S)
        return;
    f->last_log = now;
    double pct = s.need_bytes ? 100.0 * (double)s.have_bytes / (double)s.need_bytes : 100.0;
    st_log(ST_LOG_INFO, FT,
           "%s %s %llu of %llu bytes (%.1f%%): fetched %llu, cached %llu, "
           "%.2f MB/s, ETA %.1f s, bad chunks %llu, bytes fetched twice %llu, sources %u, "
           "timeouts %llu",
           f->what,
           !final     ? "progress:"
           : s.active ? "now:"
                      : "done:",
           (unsigned long long)s.have_bytes, (unsigned long long)s.need_bytes, pct,
           (unsigned long long)s.fetched_bytes, (unsigned long long)s.cached_bytes, s.rate / 1e6,
           s.eta_s, (unsigned long long)s.bad_chunks, (unsigned long long)s.refetched_bytes,
           s.sources, (unsigned long long)s.timeouts);
    if (!final)
        return;
    pthread_mutex_lock(&f->mu);
    for (int i = 0; i < f->n_src; i++)
        if (f->src[i].timeouts > 0)
            st_log(ST_LOG_INFO, FT, "source %s: %llu requests, %llu timeouts%s", f->src[i].addr,
                   (unsigned long long)f->src[i].asked, (unsigned long long)f->src[i].timeouts,
                   f->src[i].streak > 0 ? " (set aside)" : "");
    pthread_mutex_unlock(&f->mu);
}

void st_fetch_progress(st_fetch *f, st_fetch_stats *out)
{
    pthread_mutex_lock(&f->mu);
    *out = f->st;
    double dt = st_now_s() - f->t0;
    out->rate = f->st.active && dt > 0 ? (double)f->st.fetched_bytes / dt : f->st.rate;
    uint64_t left = out->need_bytes - out->have_bytes;
    out->eta_s = left == 0 ? 0 : out->rate > 0 ? (double)left / out->rate : -1;
    pthread_mutex_unlock(&f->mu);
}

/* ---- chunks ---- */

/* ft_pace - waits so the rate since t0 stays under the cap. */
static bool ft_pace(st_fetch *f)
{
    if (f->cfg.max_rate <= 0)
        return !ft_stopped(f);
    double due = f->t0 + (double)f->st.fetched_bytes / f->cfg.max_rate;
    return ft_sleep(f, (due - st_now_s()) * 1e3);
}

/* ft_test_pause - the test hook: waits for st_fetch_stop once pause_after
 * chunks were fetched. */
static bool ft_test_pause(st_fetch *f)
{
    if (f->cfg.pause_after < 0 || f->fetched_total < (uint64_t)f->cfg.pause_after)
        return true;
    st_log(ST_LOG_WARN, FT, "test hook: paused after %llu fetched chunks",
           (unsigned long long)f->fetched_total);
    ft_log(f, true);
    pthread_mutex_lock(&f->mu);
    while (!f->stop)
        pthread_cond_wait(&f->cv, &f->mu);
    pthread_mutex_unlock(&f->mu);
    return false;
}

/* ft_chunk - fetches, verifies and stores chunk i. */
static st_err ft_chunk(st_fetch *f, uint64_t i)
{
    Strata__ChunkRequest cr = STRATA__CHUNK_REQUEST__INIT;
    cr.model_id.data = f->m.model_id;
    cr.model_id.len = ST_MANIFEST_HASH;
    cr.index = (uint32_t)i;
    cr.chunk_size = f->m.chunk_size;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_CHUNK_REQ;
    m.chunk_req = &cr;
    uint32_t tried = 0;                /* sources that failed this chunk */
    int s = ft_next(f, f->cur, tried); /* the requests go round the live sources */
    st_err last = ST_OK;
    char why[300] = "";
    int max_tries = FETCH_TRIES;
    for (int k = f->n_cfg; k < f->n_src; k++)
        max_tries += !f->src[k].dead; /* each named member asked once more */
    for (int tries = 0; s >= 0 && tries < max_tries;) {
        Strata__Msg *r = NULL;
        st_err e = ft_call(f, &f->src[s], &m, &r);
        if (e == ST_ECANCELED)
            return e;
        if (e == ST_OK && (r->body_case != STRATA__MSG__BODY_CHUNK || r->chunk->index != i))
            e = st_errorf(ST_EPROTO, "the reply to chunk %llu is not that chunk",
                          (unsigned long long)i);
        if (e == ST_OK &&
            (e = st_manifest_check(&f->m, i, r->chunk->data.data, r->chunk->data.len)) != ST_OK) {
            ft_strike(f, s, st_errdetail());
        } else if (e == ST_OK) {
            uint64_t off;
            size_t len;
            st_manifest_chunk(&f->m, i, &off, &len);
            ssize_t w = pwrite(f->fd, r->chunk->data.data, len, (off_t)off);
            st_msg_free(r);
            if (w != (ssize_t)len || fdatasync(f->fd) != 0)
                return st_err_errno(w < 0 || w == (ssize_t)len ? errno : ENOSPC, f->path);
            if ((e = ft_journal_add(f, i)))
                return e;
            f->cur = s;
            pthread_mutex_lock(&f->mu);
            f->st.fetched_bytes += len;
            f->st.have_bytes += len;
            f->st.fetched_chunks++;
            pthread_mutex_unlock(&f->mu);
            return ST_OK;
        } else {
            tries++;
            last = e;
            snprintf(why, sizeof why, "%s", st_errmsg(e));
            st_log(ST_LOG_WARN, FT, "chunk %llu from %s: %s", (unsigned long long)i, f->src[s].addr,
                   why);
        }
        st_msg_free(r);
        tried |= 1u << s;
        s = ft_next(f, s, tried);
    }
    if (s < 0)
        return st_errorf(ST_ECHECKSUM,
                         "chunk %llu: no weights source left (each sent bad data "
                         "%d times)",
                         (unsigned long long)i, ST_FETCH_STRIKES);
    return st_errorf(last, "chunk %llu: %d requests failed; the last: %s", (unsigned long long)i,
                     max_tries, why);
}

/* ft_run - fetches the chunks marked in need that are not present (a
 * stage's: the test pause applies). */
static st_err ft_run(st_fetch *f, const bool *need, bool stage)
{
    if (flock(f->jfd, LOCK_EX) != 0) /* another process fetching into this cache */
        return st_err_errno(errno, f->jpath);
    ft_journal_read(f); /* what it fetched meanwhile */
    pthread_mutex_lock(&f->mu);
    f->st = (st_fetch_stats){.active = true, .sources = ft_alive(f)};
    for (uint64_t i = 0; i < f->m.n_chunks; i++) {
        if (!need[i])
            continue;
        uint64_t off;
        size_t len;
        st_manifest_chunk(&f->m, i, &off, &len);
        f->st.need_bytes += len;
        if (f->have[i]) {
            f->st.have_bytes += len;
            f->st.cached_bytes += len;
        }
    }
    f->t0 = st_now_s();
    pthread_mutex_unlock(&f->mu);
    f->last_log = 0;
    f->what = stage ? "stage" : "header";
    st_err e = ST_OK;
    for (uint64_t i = 0; i < f->m.n_chunks && e == ST_OK; i++) {
        if (!need[i] || f->have[i])
            continue;
        if ((stage && !ft_test_pause(f)) || !ft_pace(f)) {
            e = st_errorf(ST_ECANCELED, "the fetch was stopped");
            break;
        }
        e = ft_chunk(f, i);
        f->fetched_total += stage && e == ST_OK;
        ft_log(f, false);
    }
    flock(f->jfd, LOCK_UN);
    pthread_mutex_lock(&f->mu);
    double dt = st_now_s() - f->t0;
    f->st.rate = dt > 0 ? (double)f->st.fetched_bytes / dt : 0;
    f->st.active = false;
    pthread_mutex_unlock(&f->mu);
    ft_log(f, true);
    return e;
}

/* ---- the handle ---- */

st_err st_fetch_open(const st_fetch_cfg *cfg, st_fetch **out)
{
    *out = NULL;
    st_fetch *f = calloc(1, sizeof *f);
    if (f == NULL)
        return st_errorf(ST_ENOMEM, "fetch");
    f->cfg = *cfg;
    f->call_ms = cfg->call_ms > 0 ? cfg->call_ms : FETCH_CALL_MS;
    f->fd = f->jfd = -1;
    pthread_mutex_init(&f->mu, NULL);
    st_cq_cond_init(&f->cv);
    st_err e = ST_OK;
    int rv = nng_aio_alloc(&f->call, NULL, NULL);
    if (rv != 0) {
        e = st_err_nng(rv, "fetch call");
        goto fail;
    }
    f->cache_dir = strdup(cfg->cache_dir);
    if (f->cache_dir == NULL) {
        e = st_errorf(ST_ENOMEM, "fetch");
        goto fail;
    }
    e = ft_sources_parse(f, cfg->sources);
    f->n_cfg = f->n_src;
    if (e == ST_OK && f->n_src == 0)
        e = st_errorf(ST_EINVAL, "no weights source (--weights-from)");
    if (e == ST_OK && (e = ft_mkdirs(cfg->cache_dir)) == ST_OK)
        e = st_env_init_mode(&f->env, cfg->key, cfg->encrypt, cfg->sender);
    if (e != ST_OK)
        goto fail;
    f->env_ok = true;
    *out = f;
    return ST_OK;
fail:
    st_fetch_close(f);
    return e;
}

/* ft_manifest - the manifest from the first source that answers. */
static st_err ft_manifest(st_fetch *f)
{
    Strata__ManifestRequest mr = STRATA__MANIFEST_REQUEST__INIT;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_MANIFEST_REQ;
    m.manifest_req = &mr;
    double until = st_now_s() + FETCH_MANIFEST_WAIT_S;
    char why[300] = "no answer";
    while (st_now_s() < until) {
        for (int s = 0; s < f->n_src; s++) {
            Strata__Msg *r = NULL;
            st_err e = ft_call(f, &f->src[s], &m, &r);
            if (e == ST_ECANCELED)
                return e;
            if (e == ST_OK && r->body_case != STRATA__MSG__BODY_MANIFEST)
                e = st_errorf(ST_EPROTO, "the reply is not a manifest");
            if (e == ST_OK)
                e = st_manifest_from_pb(r->manifest, &f->m);
            st_msg_free(r);
            if (e == ST_OK) {
                f->cur = s;
                f->have_m = true;
                return ST_OK;
            }
            snprintf(why, sizeof why, "%s: %s", f->src[s].addr, st_errmsg(e));
        }
        if (!ft_sleep(f, FETCH_RETRY_MS))
            return st_errorf(ST_ECANCELED, "the fetch was stopped");
    }
    return st_errorf(ST_ETIMEOUT, "no weights source gave a manifest in %.0f s (%s)",
                     FETCH_MANIFEST_WAIT_S, why);
}

st_err st_fetch_header(st_fetch *f, const char **path)
{
    st_err e;
    if ((e = ft_manifest(f)) || (e = ft_cache_open(f)))
        return e;
    bool *need = calloc(f->m.n_chunks, sizeof *need);
    if (need == NULL)
        return st_errorf(ST_ENOMEM, "fetch: %llu chunks", (unsigned long long)f->m.n_chunks);
    for (uint64_t i = 0; i * f->m.chunk_size < f->m.data_offset; i++)
        need[i] = true;
    e = ft_run(f, need, false);
    free(need);
    if (e != ST_OK)
        return e;
    st_gguf *g;
    uint8_t id[ST_MANIFEST_HASH];
    if ((e = st_gguf_open(f->path, &g)))
        return e;
    e = st_gguf_model_id(g, id);
    st_gguf_close(g);
    if (e == ST_OK && memcmp(id, f->m.model_id, sizeof id) != 0)
        e = st_errorf(ST_ECHECKSUM,
                      "the header fetched into %s does not hash to the manifest's "
                      "model id",
                      f->path);
    if (e == ST_OK) {
        char a[ST_HEX_SHORT_CAP];
        st_hex_short(id, sizeof id, a);
        st_log(ST_LOG_INFO, FT, "model %s.. (%llu bytes, %llu chunks of %u) cached in %s", a,
               (unsigned long long)f->m.file_size, (unsigned long long)f->m.n_chunks,
               f->m.chunk_size, f->path);
        *path = f->path;
    }
    return e;
}

st_err st_fetch_stage(st_fetch *f, const st_gguf *g, int64_t first, int64_t last, int64_t n_layer)
{
    if (!f->have_m)
        return st_errorf(ST_EINTERNAL, "fetch: no manifest");
    bool *need = calloc(f->m.n_chunks, sizeof *need);
    if (need == NULL)
        return st_errorf(ST_ENOMEM, "fetch: %llu chunks", (unsigned long long)f->m.n_chunks);
    st_err e = st_manifest_stage_chunks(&f->m, g, first, last, n_layer, need);
    if (e == ST_OK) {
        st_log(ST_LOG_INFO, FT, "stage layers [%lld, %lld): fetching what the cache lacks",
               (long long)first, (long long)last);
        e = ft_run(f, need, true);
    }
    free(need);
    return e;
}

st_err st_fetch_manifest(st_fetch *f, const st_manifest **m)
{
    if (!f->have_m)
        return st_errorf(ST_EINTERNAL, "fetch: no manifest");
    *m = &f->m;
    return ST_OK;
}

st_err st_fetch_read(st_fetch *f, uint64_t i, uint8_t *buf, size_t len)
{
    uint64_t off;
    size_t want;
    if (!f->have_m || i >= f->m.n_chunks)
        return st_errorf(ST_ERANGE, "chunk %llu is not in the manifest", (unsigned long long)i);
    st_manifest_chunk(&f->m, i, &off, &want);
    pthread_mutex_lock(&f->mu);
    bool have = f->have[i];
    pthread_mutex_unlock(&f->mu);
    if (!have)
        return st_errorf(ST_ENOENT, "chunk %llu is not in this worker's cache",
                         (unsigned long long)i);
    if (len != want)
        return st_errorf(ST_ERANGE, "chunk %llu has %zu bytes, not %zu", (unsigned long long)i,
                         want, len);
    return st_manifest_read(&f->m, f->fd, f->path, i, buf, &want); /* never written again */
}

void st_fetch_stop(st_fetch *f)
{
    if (f == NULL)
        return;
    pthread_mutex_lock(&f->mu);
    f->stop = true;
    pthread_cond_broadcast(&f->cv);
    if (f->call != NULL)
        nng_aio_cancel(f->call); /* a call in flight ends with NNG_ECANCELED (ft_exchange) */
    pthread_mutex_unlock(&f->mu);
}

void st_fetch_close(st_fetch *f)
{
    if (f == NULL)
        return;
    if (f->call != NULL)
        nng_aio_stop(f->call); /* nothing in flight when the sockets close */
    for (int i = 0; i < f->n_src; i++)
        if (f->src[i].open)
            nng_close(f->src[i].s);
    nng_aio_free(f->call);
    if (f->env_ok)
        st_env_fini(&f->env);
    if (f->fd >= 0)
        close(f->fd);
    if (f->jfd >= 0)
        close(f->jfd);
    st_manifest_free(&f->m);
    free(f->have);
    free(f->cache_dir);
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
    free(f);
}
