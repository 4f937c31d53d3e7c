/* manifest_serve.c - the server of manifests and chunks (see
 * manifest_serve.h, docs/streaming.md).
 *
 * Design. One thread owns one REP socket, its envelope state and one chunk
 * buffer; the source's functions run on that thread only, so the server
 * takes no lock (a source shared with another thread, as a worker's fetch
 * cache, locks inside its own functions). It answers one request at a time:
 * the link, not the disk, bounds a fetch, and NNG queues what arrives
 * meanwhile. Every ChunkRequest is checked against the manifest before the
 * source is asked (the model id, the grid, the index), so a source only
 * reads chunks that exist in the grid its client verifies against, and a
 * client with another grid is refused instead of sent bytes that would fail
 * its hashes. The file source reads with pread (the page cache makes
 * repeated requests cheap) and does not re-check the file per request: a
 * model file replaced under a running server is an operator error its
 * clients detect (every chunk is hashed against the manifest). */
#include "common/net/manifest_serve.h"

#include <errno.h>
#include <fcntl.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/wire/envelope.h"
#include "common/base/log.h"
#include "common/wire/msg.h"
#include "common/net/netaddr.h"
#include "common/net/pipe_gate.h"

#define MS_SEND_TIMEOUT_MS 30000 /* a reply no peer takes is dropped after this */
#define MS_WHY_MAX 300

struct st_mserve {
    st_mserve_cfg cfg;
    char name[32];
    nng_socket s;
    st_pipe_gate *gate; /* the socket's connections (pipe_gate.h); freed after it */
    bool open, env_ok, started, corrupted;
    pthread_t th;
    st_env env;
    uint8_t key[ST_KEY_BYTES];
    uint8_t *buf;
    size_t buf_cap;
    uint64_t served_bytes, served_chunks;
};

/* ms_chunk - checks request q against the manifest and reads its chunk
 * into s->buf; *len gets its length. */
static st_err ms_chunk(st_mserve *s, const Strata__ChunkRequest *q, size_t *len)
{
    const st_manifest *m;
    st_err e = s->cfg.src.manifest(s->cfg.src.ctx, q->chunk_size, &m);
    if (e != ST_OK)
        return e;
    if (q->model_id.len != ST_MANIFEST_HASH ||
        memcmp(q->model_id.data, m->model_id, ST_MANIFEST_HASH) != 0)
        return st_errorf(ST_ENOENT, "this server has another model");
    if (q->index >= m->n_chunks)
        return st_errorf(ST_ERANGE, "chunk %u of %llu", q->index, (unsigned long long)m->n_chunks);
    if (s->cfg.test_refuse_after >= 0 && s->served_chunks >= (uint64_t)s->cfg.test_refuse_after)
        return st_errorf(ST_EBUSY, "test hook: chunk requests refused after %lld served",
                         (long long)s->cfg.test_refuse_after);
    uint64_t off;
    st_manifest_chunk(m, q->index, &off, len);
    if (*len > s->buf_cap) {
        free(s->buf);
        s->buf_cap = 0;
        if ((s->buf = malloc(m->chunk_size)) == NULL)
            return st_errorf(ST_ENOMEM, "%s: a chunk buffer of %u bytes", s->name, m->chunk_size);
        s->buf_cap = m->chunk_size;
    }
    if ((e = s->cfg.src.read(s->cfg.src.ctx, q->index, s->buf, *len)))
        return e;
    bool once = (int64_t)q->index == s->cfg.test_corrupt_chunk && !s->corrupted;
    if (once || s->cfg.test_corrupt_all) {
        s->buf[*len / 2] ^= 1; /* one bit: the hash must catch it */
        s->corrupted = s->corrupted || once;
        st_log(ST_LOG_WARN, s->name, "test hook: chunk %u sent corrupted", q->index);
    }
    return ST_OK;
}

/* ms_answer - the reply to request r (or an Error) sent on the socket. */
static void ms_answer(st_mserve *s, const Strata__Msg *r)
{
    Strata__Msg out = STRATA__MSG__INIT;
    Strata__Manifest mpb;
    Strata__Chunk ch = STRATA__CHUNK__INIT;
    Strata__Error er;
    st_err e = ST_OK;
    const st_manifest *m;
    if (r->body_case == STRATA__MSG__BODY_MANIFEST_REQ) {
        if ((e = s->cfg.src.manifest(s->cfg.src.ctx, r->manifest_req->chunk_size, &m)) == ST_OK) {
            st_manifest_to_pb(m, &mpb);
            out.body_case = STRATA__MSG__BODY_MANIFEST;
            out.manifest = &mpb;
        }
    } else if (r->body_case == STRATA__MSG__BODY_CHUNK_REQ) {
        size_t len = 0;
        if ((e = ms_chunk(s, r->chunk_req, &len)) == ST_OK) {
            ch.index = r->chunk_req->index;
            ch.data.data = s->buf;
            ch.data.len = len;
            out.body_case = STRATA__MSG__BODY_CHUNK;
            out.chunk = &ch;
            s->served_bytes += len;
            s->served_chunks++;
        }
    } else {
        e = st_errorf(ST_EPROTO,
                      "the %s server takes ManifestRequest and ChunkRequest only (got "
                      "body %d)",
                      s->name, (int)r->body_case);
    }
    char why[MS_WHY_MAX];
    if (e != ST_OK) {
        /* the Error carries the code: its text is the detail alone */
        snprintf(why, sizeof why, "%s", st_errdetail()[0] ? st_errdetail() : st_strerror(e));
        st_log(ST_LOG_WARN, s->name, "request refused: %s: %s", st_strerror(e), why);
        st_msg_error(&out, &er, e, why);
    }
    nng_msg *msg;
    if ((e = st_msg_pack_max(&s->env, ST_ENV_CONTROL, &out, ST_MANIFEST_MAX_FRAME, &msg))) {
        st_log(ST_LOG_ERROR, s->name, "reply not packed: %s", st_errmsg(e));
        return;
    }
    int rv = nng_sendmsg(s->s, msg, 0);
    if (rv != 0) {
        nng_msg_free(msg);
        st_log(ST_LOG_WARN, s->name, "reply not sent: %s", nng_strerror(rv));
    }
}

static void *ms_main(void *arg)
{
    st_mserve *s = arg;
    for (;;) {
        nng_msg *msg;
        int rv = nng_recvmsg(s->s, &msg, 0);
        if (rv == NNG_ECLOSED)
            break;
        if (rv != 0)
            continue;
        Strata__Msg *r = NULL;
        st_err e = st_msg_unpack(&s->env, ST_ENV_CONTROL, msg, &r, NULL);
        if (e == ST_OK) /* its connection (pipe_gate.h) */
            st_pipe_gate_vouch(s->gate, msg);
        else
            st_pipe_gate_failed(s->gate, msg);
        nng_msg_free(msg);
        if (e != ST_OK) { /* no reply: a REP context waits for the next request */
            st_log(ST_LOG_WARN, s->name, "request dropped: %s", st_errmsg(e));
            continue;
        }
        ms_answer(s, r);
        st_msg_free(r);
    }
    st_log(ST_LOG_INFO, s->name, "served %llu chunks, %llu bytes",
           (unsigned long long)s->served_chunks, (unsigned long long)s->served_bytes);
    return NULL;
}

void st_mserve_gate_counts(st_mserve *s, st_pipe_gate_counts *sum)
{
    if (s != NULL)
        st_pipe_gate_add_counts(s->gate, sum);
}

st_err st_mserve_open(const st_mserve_cfg *cfg, st_mserve **out, char *addr, size_t cap)
{
    *out = NULL;
    st_mserve *s = calloc(1, sizeof *s);
    if (s == NULL)
        return st_errorf(ST_ENOMEM, "%s server", cfg->name);
    s->cfg = *cfg;
    snprintf(s->name, sizeof s->name, "%s", cfg->name);
    st_err e = ST_OK;
    int rv;
    if (cfg->key != NULL)
        memcpy(s->key, cfg->key, ST_KEY_BYTES);
    if (sodium_init() < 0) {
        e = st_err_sodium("sodium_init");
        goto fail;
    }
    uint64_t sender;
    randombytes_buf(&sender, sizeof sender); /* its own stream of sequence numbers */
    if ((e = st_env_init_mode(&s->env, cfg->key != NULL ? s->key : NULL, cfg->encrypt, sender | 1)))
        goto fail;
    s->env_ok = true;
    if ((rv = nng_rep0_open(&s->s)) != 0) {
        e = st_err_nng(rv, "chunk server socket");
        goto fail;
    }
    s->open = true;
    nng_socket_set_size(s->s, NNG_OPT_RECVMAXSZ, ST_MSERVE_MAX_REQUEST);
    nng_socket_set_ms(s->s, NNG_OPT_SENDTIMEO, MS_SEND_TIMEOUT_MS);
    st_pipe_gate_cfg gc = st_pipe_gate_cfg_for(s->name, ST_MSERVE_MAX_REQUEST, true);
    if ((e = st_pipe_gate_open(s->s, &gc, &s->gate)) != ST_OK)
        goto fail;
    nng_listener l;
    int port = 0;
    st_hostport hp;
    if (!st_tcp_split(cfg->listen, &hp)) {
        e = st_errorf(ST_EINVAL, "%s '%s': not a tcp://HOST:PORT address", cfg->flag, cfg->listen);
        goto fail;
    }
    if ((rv = nng_listener_create(&l, s->s, cfg->listen)) != 0 ||
        (rv = nng_listener_start(l, 0)) != 0 ||
        (rv = nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port)) != 0) {
        e = st_errorf(ST_ENNG, "%s %s: %s", cfg->flag, cfg->listen, nng_strerror(rv));
        goto fail;
    }
    snprintf(addr, cap, "%.*s:%d", (int)(ST_TCP_SCHEME_LEN + hp.host_len), cfg->listen, port);
    if (pthread_create(&s->th, NULL, ms_main, s) != 0) {
        e = st_errorf(ST_EINTERNAL, "cannot start the %s thread", cfg->name);
        goto fail;
    }
    s->started = true;
    *out = s;
    return ST_OK;
fail:
    st_mserve_close(s);
    return e;
}

void st_mserve_close(st_mserve *s)
{
    if (s == NULL)
        return;
    if (s->open)
        nng_close(s->s); /* ends the thread's receive */
    if (s->started)
        pthread_join(s->th, NULL);
    st_pipe_gate_close(s->gate);
    if (s->env_ok)
        st_env_fini(&s->env);
    sodium_memzero(s->key, sizeof s->key);
    free(s->buf);
    free(s);
}

/* ---- the file source ---- */

struct st_mfile {
    char *path, *cache_dir;
    int fd;
    uint32_t chunk_size;
    bool adopt, have_m;
    st_manifest m;
};

static st_err mfile_manifest(void *ctx, uint32_t chunk_size, const st_manifest **out)
{
    st_mfile *f = ctx;
    uint32_t want = chunk_size != 0 ? chunk_size : f->have_m ? f->m.chunk_size : f->chunk_size;
    if (want != f->chunk_size && !f->adopt)
        return st_errorf(ST_EINVAL, "chunks of %u bytes asked for; this server's are %u bytes",
                         want, f->chunk_size);
    if (!f->have_m || f->m.chunk_size != want) {
        st_manifest_free(&f->m);
        f->have_m = false;
        bool computed;
        clock_t t0 = clock();
        st_err e = st_manifest_cached(f->path, f->cache_dir, want, &f->m, &computed);
        if (e != ST_OK)
            return e;
        f->have_m = true;
        st_log(ST_LOG_INFO, "manifest", "%s: %llu chunks of %u bytes, %s (%.2f s CPU)", f->path,
               (unsigned long long)f->m.n_chunks, f->m.chunk_size,
               computed ? "computed" : "from its cache", (double)(clock() - t0) / CLOCKS_PER_SEC);
    }
    *out = &f->m;
    return ST_OK;
}

static st_err mfile_read(void *ctx, uint64_t i, uint8_t *buf, size_t len)
{
    st_mfile *f = ctx;
    size_t got;
    (void)len; /* the server asked for chunk i of this manifest: its length */
    return st_manifest_read(&f->m, f->fd, f->path, i, buf, &got);
}

st_err st_mfile_open(const char *path, const char *cache_dir, uint32_t chunk_size, bool adopt,
                     st_mfile **out)
{
    *out = NULL;
    st_mfile *f = calloc(1, sizeof *f);
    if (f == NULL)
        return st_errorf(ST_ENOMEM, "model file source");
    f->fd = -1;
    f->chunk_size = chunk_size;
    f->adopt = adopt;
    f->path = strdup(path);
    f->cache_dir = cache_dir != NULL ? strdup(cache_dir) : NULL;
    if (f->path == NULL || (cache_dir != NULL && f->cache_dir == NULL)) {
        st_mfile_close(f);
        return st_errorf(ST_ENOMEM, "model file source");
    }
    if ((f->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        st_err e = st_err_errno(errno, path);
        st_mfile_close(f);
        return e;
    }
    *out = f;
    return ST_OK;
}

st_chunk_src st_mfile_src(st_mfile *f)
{
    return (st_chunk_src){.manifest = mfile_manifest, .read = mfile_read, .ctx = f};
}

void st_mfile_close(st_mfile *f)
{
    if (f == NULL)
        return;
    if (f->fd >= 0)
        close(f->fd);
    st_manifest_free(&f->m);
    free(f->path);
    free(f->cache_dir);
    free(f);
}
