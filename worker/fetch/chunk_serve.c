/* chunk_serve.c - a worker's chunk server (see chunk_serve.h,
 * docs/streaming.md).
 *
 * Design. The serving (socket, thread, envelopes, the checks of a request
 * against the manifest) is common/net/manifest_serve.c's, shared with the
 * coordinator's weights server; this file only chooses the source. A
 * streaming worker's source is its fetch cache: the manifest it fetched
 * (fixed once the header is in, so its grid is the one its clients use)
 * and the chunks the journal names verified, read by st_fetch_read under
 * the fetch's lock while the loader thread may be fetching other chunks
 * (a verified chunk is never written again). A worker with --model serves
 * its file through st_mfile, adopting the grid the requests name. The
 * server thread touches nothing else of the daemon. */
#include "worker/fetch/chunk_serve.h"

#include <stdlib.h>

#include "common/net/manifest_serve.h"

struct st_chunk_serve {
    st_fetch *fetch;
    st_mfile *file;
    st_mserve *srv;
};

static st_err cs_manifest(void *ctx, uint32_t chunk_size, const st_manifest **m)
{
    st_chunk_serve *c = ctx;
    st_err e = st_fetch_manifest(c->fetch, m);
    if (e == ST_OK && chunk_size != 0 && chunk_size != (*m)->chunk_size)
        return st_errorf(ST_EINVAL, "chunks of %u bytes asked for; this worker's cache has %u",
                         chunk_size, (*m)->chunk_size);
    return e;
}

static st_err cs_read(void *ctx, uint64_t i, uint8_t *buf, size_t len)
{
    st_chunk_serve *c = ctx;
    return st_fetch_read(c->fetch, i, buf, len);
}

st_err st_chunk_serve_open(const st_chunk_serve_cfg *cfg, st_chunk_serve **out, char *addr,
                           size_t cap)
{
    *out = NULL;
    st_chunk_serve *c = calloc(1, sizeof *c);
    if (c == NULL)
        return st_errorf(ST_ENOMEM, "chunk server");
    st_mserve_cfg sc = {.name = "chunks",
                        .flag = "--serve-chunks",
                        .listen = cfg->listen,
                        .key = cfg->key,
                        .encrypt = cfg->encrypt,
                        .test_corrupt_chunk = -1,
                        .test_corrupt_all = cfg->test_corrupt,
                        .test_refuse_after = -1};
    st_err e = ST_OK;
    if (cfg->fetch != NULL) {
        c->fetch = cfg->fetch;
        sc.src = (st_chunk_src){.manifest = cs_manifest, .read = cs_read, .ctx = c};
    } else if ((e = st_mfile_open(cfg->model_path, cfg->cache_dir, ST_MANIFEST_CHUNK_DEFAULT, true,
                                  &c->file)) == ST_OK) {
        sc.src = st_mfile_src(c->file);
    }
    if (e == ST_OK)
        e = st_mserve_open(&sc, &c->srv, addr, cap);
    if (e != ST_OK) {
        st_chunk_serve_close(c);
        return e;
    }
    *out = c;
    return ST_OK;
}

void st_chunk_serve_gate_counts(st_chunk_serve *c, st_pipe_gate_counts *sum)
{
    if (c != NULL)
        st_mserve_gate_counts(c->srv, sum);
}

void st_chunk_serve_close(st_chunk_serve *c)
{
    if (c == NULL)
        return;
    st_mserve_close(c->srv); /* first: its thread reads the source */
    st_mfile_close(c->file);
    free(c);
}
