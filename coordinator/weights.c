/* weights.c - the coordinator's weights server (see weights.h,
 * docs/streaming.md).
 *
 * Design. One thread owns one REP socket, the model file's descriptor, the
 * manifest and one chunk buffer; nothing else touches them, so there is
 * no lock. It answers ManifestRequest with the manifest and ChunkRequest
 * with the chunk's bytes read from the file with pread (the page cache
 * makes repeated requests cheap), one request at a time: the link, not
 * the disk, bounds a fetch, and NNG queues what arrives meanwhile. Requests
 * are envelopes under the cluster key like every control message (a
 * worker without the key gets nothing); a request for another model id, a
 * chunk index beyond the manifest or any other message is answered with an
 * Error. The file is not re-checked per request: a model file replaced
 * under a running coordinator is an operator error the workers detect
 * (every chunk is hashed against the manifest computed before). */
#include "coordinator/weights.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/envelope.h"
#include "common/log.h"
#include "common/manifest.h"
#include "common/msg.h"

#define WS "weights"
#define WS_SEND_TIMEOUT_MS 30000 /* a reply no peer takes is dropped after this */

struct st_weights {
    st_weights_cfg cfg;
    char *path, *cache_dir;
    nng_socket s;
    bool open, env_ok, started;
    pthread_t th;
    st_env env;
    uint8_t key[ST_KEY_BYTES];
    int fd;
    st_manifest m;
    bool have_m, corrupted;
    uint8_t *buf;
    uint64_t served_bytes, served_chunks;
};

/* ws_manifest - the manifest, computed or read on first use. */
static st_err ws_manifest(st_weights *w)
{
    if (w->have_m)
        return ST_OK;
    bool computed;
    double t0 = (double)clock() / CLOCKS_PER_SEC;
    st_err e = st_manifest_cached(w->path, w->cache_dir, w->cfg.chunk_size, &w->m, &computed);
    if (e != ST_OK)
        return e;
    if ((w->buf = malloc(w->m.chunk_size)) == NULL) {
        st_manifest_free(&w->m);
        return st_errorf(ST_ENOMEM, "weights: a chunk buffer of %u bytes", w->cfg.chunk_size);
    }
    w->have_m = true;
    st_log(ST_LOG_INFO, WS, "manifest of %s: %llu chunks of %u bytes, %s (%.2f s CPU)", w->path,
           (unsigned long long)w->m.n_chunks, w->m.chunk_size,
           computed ? "computed" : "from its cache", (double)clock() / CLOCKS_PER_SEC - t0);
    return ST_OK;
}

/* ws_chunk - reads chunk req->index into w->buf; *len gets its length. */
static st_err ws_chunk(st_weights *w, const Strata__ChunkRequest *req, size_t *len)
{
    if (req->model_id.len != ST_MANIFEST_HASH ||
        memcmp(req->model_id.data, w->m.model_id, ST_MANIFEST_HASH) != 0)
        return st_errorf(ST_ENOENT, "this server has another model");
    if (req->index >= w->m.n_chunks)
        return st_errorf(ST_ERANGE, "chunk %u of %llu", req->index,
                         (unsigned long long)w->m.n_chunks);
    uint64_t off;
    st_manifest_chunk(&w->m, req->index, &off, len);
    size_t got = 0;
    while (got < *len) {
        ssize_t r = pread(w->fd, w->buf + got, *len - got, (off_t)(off + got));
        if (r <= 0)
            return r < 0 ? st_err_errno(errno, w->path)
                         : st_errorf(ST_ETRUNC, "%s is shorter than its manifest", w->path);
        got += (size_t)r;
    }
    if ((int64_t)req->index == w->cfg.test_corrupt_chunk && !w->corrupted) {
        w->buf[*len / 2] ^= 1; /* one bit: the hash must catch it */
        w->corrupted = true;
        st_log(ST_LOG_WARN, WS, "test hook: chunk %u sent corrupted", req->index);
    }
    return ST_OK;
}

/* ws_answer - the reply to request r (or an Error) sent on the socket. */
static void ws_answer(st_weights *w, const Strata__Msg *r)
{
    Strata__Msg out = STRATA__MSG__INIT;
    Strata__Manifest mpb;
    Strata__Chunk ch = STRATA__CHUNK__INIT;
    Strata__Error er;
    st_err e = ws_manifest(w);
    if (e == ST_OK && r->body_case == STRATA__MSG__BODY_MANIFEST_REQ) {
        st_manifest_to_pb(&w->m, &mpb);
        out.body_case = STRATA__MSG__BODY_MANIFEST;
        out.manifest = &mpb;
    } else if (e == ST_OK && r->body_case == STRATA__MSG__BODY_CHUNK_REQ) {
        size_t len = 0;
        if ((e = ws_chunk(w, r->chunk_req, &len)) == ST_OK) {
            ch.index = r->chunk_req->index;
            ch.data.data = w->buf;
            ch.data.len = len;
            out.body_case = STRATA__MSG__BODY_CHUNK;
            out.chunk = &ch;
            w->served_bytes += len;
            w->served_chunks++;
        }
    } else if (e == ST_OK) {
        e = st_errorf(ST_EPROTO,
                      "the weights server takes ManifestRequest and ChunkRequest "
                      "only (got body %d)",
                      (int)r->body_case);
    }
    char why[300];
    if (e != ST_OK) {
        snprintf(why, sizeof why, "%s", st_errmsg(e));
        st_log(ST_LOG_WARN, WS, "request refused: %s", why);
        st_msg_error(&out, &er, e, why);
    }
    nng_msg *msg;
    if ((e = st_msg_pack_max(&w->env, ST_ENV_CONTROL, &out, ST_MANIFEST_MAX_FRAME, &msg))) {
        st_log(ST_LOG_ERROR, WS, "reply not packed: %s", st_errmsg(e));
        return;
    }
    int rv = nng_sendmsg(w->s, msg, 0);
    if (rv != 0) {
        nng_msg_free(msg);
        st_log(ST_LOG_WARN, WS, "reply not sent: %s", nng_strerror(rv));
    }
}

static void *ws_main(void *arg)
{
    st_weights *w = arg;
    for (;;) {
        nng_msg *msg;
        int rv = nng_recvmsg(w->s, &msg, 0);
        if (rv == NNG_ECLOSED)
            break;
        if (rv != 0)
            continue;
        Strata__Msg *r = NULL;
        st_err e = st_msg_unpack(&w->env, ST_ENV_CONTROL, msg, &r, NULL);
        nng_msg_free(msg);
        if (e != ST_OK) { /* no reply: a REP context waits for the next request */
            st_log(ST_LOG_WARN, WS, "request dropped: %s", st_errmsg(e));
            continue;
        }
        ws_answer(w, r);
        st_msg_free(r);
    }
    st_log(ST_LOG_INFO, WS, "served %llu chunks, %llu bytes", (unsigned long long)w->served_chunks,
           (unsigned long long)w->served_bytes);
    return NULL;
}

st_err st_weights_open(const st_weights_cfg *cfg, st_weights **out, char *addr, size_t cap)
{
    *out = NULL;
    st_weights *w = calloc(1, sizeof *w);
    if (w == NULL)
        return st_errorf(ST_ENOMEM, "weights server");
    w->cfg = *cfg;
    w->fd = -1;
    w->path = strdup(cfg->model_path);
    w->cache_dir = cfg->cache_dir != NULL ? strdup(cfg->cache_dir) : NULL;
    st_err e = ST_OK;
    int rv;
    if (w->path == NULL || (cfg->cache_dir != NULL && w->cache_dir == NULL)) {
        e = st_errorf(ST_ENOMEM, "weights server");
        goto fail;
    }
    if ((w->fd = open(w->path, O_RDONLY | O_CLOEXEC)) < 0) {
        e = st_err_errno(errno, w->path);
        goto fail;
    }
    bool keyed = cfg->key_path != NULL;
    if (keyed && (e = st_key_load(cfg->key_path, w->key)))
        goto fail;
    if (sodium_init() < 0) {
        e = st_err_sodium("sodium_init");
        goto fail;
    }
    uint64_t sender;
    randombytes_buf(&sender, sizeof sender); /* its own stream of sequence numbers */
    if ((e = st_env_init_mode(&w->env, keyed ? w->key : NULL, cfg->encrypt, sender | 1)))
        goto fail;
    w->env_ok = true;
    if ((rv = nng_rep0_open(&w->s)) != 0) {
        e = st_err_nng(rv, "weights socket");
        goto fail;
    }
    w->open = true;
    nng_socket_set_size(w->s, NNG_OPT_RECVMAXSZ, ST_MSG_CONTROL_MAX_FRAME);
    nng_socket_set_ms(w->s, NNG_OPT_SENDTIMEO, WS_SEND_TIMEOUT_MS);
    nng_listener l;
    int port = 0;
    if ((rv = nng_listener_create(&l, w->s, cfg->listen)) != 0 ||
        (rv = nng_listener_start(l, 0)) != 0 ||
        (rv = nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port)) != 0) {
        e = st_errorf(ST_ENNG, "--weights %s: %s", cfg->listen, nng_strerror(rv));
        goto fail;
    }
    const char *colon = strrchr(cfg->listen, ':');
    snprintf(addr, cap, "%.*s:%d", (int)(colon - cfg->listen), cfg->listen, port);
    if (pthread_create(&w->th, NULL, ws_main, w) != 0) {
        e = st_errorf(ST_EINTERNAL, "cannot start the weights thread");
        goto fail;
    }
    w->started = true;
    *out = w;
    return ST_OK;
fail:
    st_weights_close(w);
    return e;
}

void st_weights_close(st_weights *w)
{
    if (w == NULL)
        return;
    if (w->open)
        nng_close(w->s); /* ends the thread's receive */
    if (w->started)
        pthread_join(w->th, NULL);
    if (w->env_ok)
        st_env_fini(&w->env);
    if (w->fd >= 0)
        close(w->fd);
    st_manifest_free(&w->m);
    sodium_memzero(w->key, sizeof w->key);
    free(w->buf);
    free(w->path);
    free(w->cache_dir);
    free(w);
}
