/* weights.c - the coordinator's weights server (see weights.h,
 * docs/streaming.md).
 *
 * Design. The server is common/net/manifest_serve.h's over the model file
 * (st_mfile): one thread owning one REP socket, reading only the file and
 * its manifest, so it shares nothing with the event loop. The manifest's
 * grid is fixed by --weights-chunk: a request for another grid is refused
 * (a worker serving its own file follows this grid instead). The cluster
 * key is loaded here, as the server's envelopes are keyed like every
 * control message (a worker without the key gets nothing). */
#include "coordinator/stream/weights.h"

#include <sodium.h>
#include <stdlib.h>

#include "common/wire/envelope.h"
#include "common/net/manifest_serve.h"

struct st_weights {
    st_mfile *file;
    st_mserve *srv;
    uint8_t key[ST_KEY_BYTES];
};

st_err st_weights_open(const st_weights_cfg *cfg, st_weights **out, char *addr, size_t cap)
{
    *out = NULL;
    st_weights *w = calloc(1, sizeof *w);
    if (w == NULL)
        return st_errorf(ST_ENOMEM, "weights server");
    bool keyed = cfg->key_path != NULL;
    st_err e;
    if ((e = st_mfile_open(cfg->model_path, cfg->cache_dir, cfg->chunk_size, false, &w->file)) ||
        (keyed && (e = st_key_load(cfg->key_path, w->key)))) {
        st_weights_close(w);
        return e;
    }
    st_mserve_cfg sc = {.name = "weights",
                        .flag = "--weights",
                        .listen = cfg->listen,
                        .key = keyed ? w->key : NULL,
                        .encrypt = cfg->encrypt,
                        .src = st_mfile_src(w->file),
                        .test_corrupt_chunk = cfg->test_corrupt_chunk,
                        .test_refuse_after = cfg->test_refuse_after};
    if ((e = st_mserve_open(&sc, &w->srv, addr, cap))) {
        st_weights_close(w);
        return e;
    }
    *out = w;
    return ST_OK;
}

void st_weights_gate_counts(st_weights *w, st_pipe_gate_counts *sum)
{
    if (w != NULL)
        st_mserve_gate_counts(w->srv, sum);
}

void st_weights_close(st_weights *w)
{
    if (w == NULL)
        return;
    st_mserve_close(w->srv); /* first: its thread reads the file */
    st_mfile_close(w->file);
    sodium_memzero(w->key, sizeof w->key);
    free(w);
}
