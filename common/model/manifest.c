/* manifest.c - chunk manifests of model files (see manifest.h,
 * docs/streaming.md).
 *
 * Design. The manifest is the one thing a streaming worker trusts about
 * the bytes it fetches: it arrives from the coordinator over the
 * authenticated control channel, and every chunk is hashed against it
 * before it touches the worker's cache. A grid of equal chunks over the
 * whole file (rather than one entry per tensor) keeps the manifest a flat
 * array of hashes, lets a stage's needs be computed from the tensor table
 * alone, and lets the worker store chunks at their original offsets, so
 * the GGUF reader maps the worker's sparse copy exactly as it maps the
 * original. The cost is at most one partial chunk of a neighbouring tensor
 * at each end of a stage's byte ranges.
 *
 * The cache file (little-endian):
 *   "STRATAMF" | u32 version (1) | u32 chunk_size | u64 file_size |
 *   i64 mtime_s | i64 mtime_ns | u64 data_offset | model_id[32] |
 *   u64 n_chunks | hashes[n_chunks][32] | check[32]
 * where check is the BLAKE2b-256 of everything before it. It is written to
 * a temporary name and renamed, so a reader sees a whole file or none. */
#include "common/model/manifest.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/model/arch.h"
#include "common/base/hex.h"
#include "common/base/log.h"
#include "common/net/netaddr.h"

#define MF_MAGIC "STRATAMF"
#define MF_MAGIC_LEN 8
#define MF_VERSION 1u
/* magic, version, chunk size, file size, mtime (2), data offset, id, count */
#define MF_HEAD (MF_MAGIC_LEN + 4 + 4 + 8 + 8 + 8 + 8 + ST_MANIFEST_HASH + 8)
#define MF_SUFFIX ".strata-manifest"

void st_manifest_free(st_manifest *m)
{
    if (m == NULL)
        return;
    free(m->hash);
    memset(m, 0, sizeof *m);
}

void st_manifest_chunk(const st_manifest *m, uint64_t i, uint64_t *off, size_t *len)
{
    *off = i * m->chunk_size;
    uint64_t end = *off + m->chunk_size;
    *len = (size_t)((end < m->file_size ? end : m->file_size) - *off);
}

/* mf_shape - checks a chunk size and file size and gives the chunk count. */
static st_err mf_shape(uint32_t chunk_size, uint64_t file_size, uint64_t *n)
{
    if (chunk_size < ST_MANIFEST_CHUNK_MIN || chunk_size > ST_MANIFEST_CHUNK_MAX)
        return st_errorf(ST_ERANGE, "manifest: chunk size %u is outside %u..%u", chunk_size,
                         ST_MANIFEST_CHUNK_MIN, ST_MANIFEST_CHUNK_MAX);
    if (file_size == 0)
        return st_errorf(ST_ERANGE, "manifest: an empty file");
    *n = (file_size + chunk_size - 1) / chunk_size;
    if (*n > ST_MANIFEST_MAX_CHUNKS)
        return st_errorf(ST_ERANGE,
                         "manifest: %llu bytes make %llu chunks of %u bytes (at most "
                         "%llu: use larger chunks)",
                         (unsigned long long)file_size, (unsigned long long)*n, chunk_size,
                         (unsigned long long)ST_MANIFEST_MAX_CHUNKS);
    return ST_OK;
}

st_err st_manifest_compute(const char *path, uint32_t chunk_size, st_manifest *out)
{
    memset(out, 0, sizeof *out);
    if (sodium_init() < 0)
        return st_err_sodium("manifest: sodium_init");
    st_gguf *g;
    st_err e = st_gguf_open(path, &g);
    if (e != ST_OK)
        return e;
    out->file_size = st_gguf_file_size(g);
    out->data_offset = st_gguf_data_offset(g);
    out->chunk_size = chunk_size;
    e = st_gguf_model_id(g, out->model_id);
    st_gguf_close(g);
    if (e != ST_OK || (e = mf_shape(chunk_size, out->file_size, &out->n_chunks)))
        return e;
    out->hash = malloc(out->n_chunks * ST_MANIFEST_HASH);
    uint8_t *buf = malloc(chunk_size);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (out->hash == NULL || buf == NULL || fd < 0) {
        e = fd < 0 ? st_err_errno(errno, path) : st_errorf(ST_ENOMEM, "manifest of %s", path);
        goto done;
    }
    for (uint64_t i = 0; i < out->n_chunks && e == ST_OK; i++) {
        size_t len;
        if ((e = st_manifest_read(out, fd, path, i, buf, &len)) == ST_OK)
            crypto_generichash(out->hash[i], ST_MANIFEST_HASH, buf, len, NULL, 0);
    }
done:
    if (fd >= 0)
        close(fd);
    free(buf);
    if (e != ST_OK)
        st_manifest_free(out);
    return e;
}

st_err st_manifest_read(const st_manifest *m, int fd, const char *path, uint64_t i, void *buf,
                        size_t *len)
{
    uint64_t off;
    size_t got = 0;
    st_manifest_chunk(m, i, &off, len);
    while (got < *len) {
        ssize_t r = pread(fd, (uint8_t *)buf + got, *len - got, (off_t)(off + got));
        if (r < 0)
            return st_err_errno(errno, path);
        if (r == 0)
            return st_errorf(ST_ETRUNC, "%s ends at %llu, inside chunk %llu", path,
                             (unsigned long long)(off + got), (unsigned long long)i);
        got += (size_t)r;
    }
    return ST_OK;
}

st_err st_manifest_check(const st_manifest *m, uint64_t i, const void *data, size_t len)
{
    if (i >= m->n_chunks)
        return st_errorf(ST_ERANGE, "chunk %llu of %llu", (unsigned long long)i,
                         (unsigned long long)m->n_chunks);
    uint64_t off;
    size_t want;
    st_manifest_chunk(m, i, &off, &want);
    if (len != want)
        return st_errorf(ST_ERANGE, "chunk %llu has %zu bytes; the manifest says %zu",
                         (unsigned long long)i, len, want);
    uint8_t h[ST_MANIFEST_HASH];
    crypto_generichash(h, sizeof h, data, len, NULL, 0);
    if (sodium_memcmp(h, m->hash[i], sizeof h) != 0) {
        char a[ST_HEX_SHORT_CAP], b[ST_HEX_SHORT_CAP];
        st_hex_short(h, sizeof h, a);
        st_hex_short(m->hash[i], sizeof h, b);
        return st_errorf(ST_ECHECKSUM,
                         "chunk %llu (offset %llu): BLAKE2b %s.. is not the "
                         "manifest's %s..",
                         (unsigned long long)i, (unsigned long long)off, a, b);
    }
    return ST_OK;
}

void st_manifest_to_pb(const st_manifest *m, Strata__Manifest *pb)
{
    strata__manifest__init(pb);
    pb->model_id.data = (uint8_t *)m->model_id;
    pb->model_id.len = ST_MANIFEST_HASH;
    pb->file_size = m->file_size;
    pb->chunk_size = m->chunk_size;
    pb->data_offset = m->data_offset;
    pb->hashes.data = (uint8_t *)m->hash;
    pb->hashes.len = (size_t)(m->n_chunks * ST_MANIFEST_HASH);
}

st_err st_manifest_from_pb(const Strata__Manifest *pb, st_manifest *out)
{
    memset(out, 0, sizeof *out);
    uint64_t n = 0;
    st_err e = mf_shape(pb->chunk_size, pb->file_size, &n);
    if (e != ST_OK)
        return e;
    if (pb->model_id.len != ST_MANIFEST_HASH)
        return st_errorf(ST_EFORMAT, "manifest: a model id of %zu bytes", pb->model_id.len);
    if (pb->hashes.len != n * ST_MANIFEST_HASH)
        return st_errorf(ST_EFORMAT, "manifest: %zu bytes of hashes for %llu chunks",
                         pb->hashes.len, (unsigned long long)n);
    if (pb->data_offset == 0 || pb->data_offset > pb->file_size)
        return st_errorf(ST_ERANGE, "manifest: data offset %llu outside the file's %llu bytes",
                         (unsigned long long)pb->data_offset, (unsigned long long)pb->file_size);
    if ((out->hash = malloc(pb->hashes.len)) == NULL)
        return st_errorf(ST_ENOMEM, "manifest of %llu chunks", (unsigned long long)n);
    memcpy(out->hash, pb->hashes.data, pb->hashes.len);
    memcpy(out->model_id, pb->model_id.data, ST_MANIFEST_HASH);
    out->file_size = pb->file_size;
    out->chunk_size = pb->chunk_size;
    out->data_offset = pb->data_offset;
    out->n_chunks = n;
    return ST_OK;
}

/* mf_mark - marks the chunks holding [off, off + len) of the file. */
static st_err mf_mark(const st_manifest *m, uint64_t off, uint64_t len, bool *need)
{
    if (len == 0)
        return ST_OK;
    if (off > m->file_size || len > m->file_size - off)
        return st_errorf(ST_ERANGE, "bytes [%llu, +%llu) lie beyond the manifest's file of %llu",
                         (unsigned long long)off, (unsigned long long)len,
                         (unsigned long long)m->file_size);
    for (uint64_t i = off / m->chunk_size; i <= (off + len - 1) / m->chunk_size; i++)
        need[i] = true;
    return ST_OK;
}

st_err st_manifest_stage_chunks(const st_manifest *m, const st_gguf *g, int64_t first, int64_t last,
                                int64_t n_layer, bool *need)
{
    st_err e = mf_mark(m, 0, m->data_offset, need);
    const bool tied = st_arch_head_tied(g), head = last == n_layer;
    uint64_t base = st_gguf_data_offset(g);
    for (uint64_t i = 0; i < st_gguf_n_tensors(g) && e == ST_OK; i++) {
        const st_gguf_tensor *t = st_gguf_tensor_at(g, i);
        int64_t layer;
        bool want = false;
        switch (st_arch_part_of(t->name, &layer)) {
        case ST_AP_LAYER:
            want = layer >= first && layer < last;
            break;
        case ST_AP_EMBD:
            want = first == 0 || (head && tied);
            break;
        case ST_AP_HEAD:
            want = head;
            break;
        case ST_AP_ROPE: /* rope factors: read by every layer */
            want = first < last;
            break;
        case ST_AP_OTHER:
            want = false;
            break;
        }
        if (want)
            e = mf_mark(m, base + t->offset, t->nbytes, need);
    }
    return e;
}

/* ---- the cache file ---- */

static uint8_t *mf_put(uint8_t *p, uint64_t v, int bytes)
{
    for (int k = 0; k < bytes; k++)
        *p++ = (uint8_t)(v >> (8 * k));
    return p;
}

static const uint8_t *mf_get(const uint8_t *p, uint64_t *v, int bytes)
{
    *v = 0;
    for (int k = 0; k < bytes; k++)
        *v |= (uint64_t)p[k] << (8 * k);
    return p + bytes;
}

/* mf_read - the manifest in cache file cpath if it is whole and matches
 * st and chunk_size: true with *out filled. */
static bool mf_read(const char *cpath, const struct stat *st, uint32_t chunk_size, st_manifest *out)
{
    FILE *f = fopen(cpath, "rb");
    if (f == NULL)
        return false;
    uint8_t head[MF_HEAD];
    bool ok = fread(head, 1, sizeof head, f) == sizeof head &&
              memcmp(head, MF_MAGIC, MF_MAGIC_LEN) == 0;
    uint64_t ver = 0, cs = 0, size = 0, ms = 0, mns = 0, doff = 0, n = 0;
    const uint8_t *p = head + MF_MAGIC_LEN;
    p = mf_get(mf_get(mf_get(p, &ver, 4), &cs, 4), &size, 8);
    p = mf_get(mf_get(mf_get(p, &ms, 8), &mns, 8), &doff, 8);
    const uint8_t *id = p;
    mf_get(p + ST_MANIFEST_HASH, &n, 8);
    uint64_t want_n = 0;
    ok = ok && ver == MF_VERSION && cs == chunk_size && size == (uint64_t)st->st_size &&
         (int64_t)ms == (int64_t)st->st_mtim.tv_sec && (int64_t)mns == st->st_mtim.tv_nsec &&
         mf_shape(chunk_size, size, &want_n) == ST_OK && n == want_n && doff <= size;
    uint8_t *hashes = ok ? malloc(n * ST_MANIFEST_HASH) : NULL;
    uint8_t check[ST_MANIFEST_HASH], got[ST_MANIFEST_HASH];
    ok = hashes != NULL && fread(hashes, ST_MANIFEST_HASH, n, f) == n &&
         fread(check, 1, sizeof check, f) == sizeof check && fgetc(f) == EOF;
    fclose(f);
    if (ok) {
        crypto_generichash_state s;
        crypto_generichash_init(&s, NULL, 0, sizeof got);
        crypto_generichash_update(&s, head, sizeof head);
        crypto_generichash_update(&s, hashes, n * ST_MANIFEST_HASH);
        crypto_generichash_final(&s, got, sizeof got);
        ok = sodium_memcmp(got, check, sizeof got) == 0;
    }
    if (!ok) {
        free(hashes);
        return false;
    }
    memcpy(out->model_id, id, ST_MANIFEST_HASH);
    out->file_size = size;
    out->chunk_size = chunk_size;
    out->data_offset = doff;
    out->n_chunks = n;
    out->hash = (uint8_t(*)[ST_MANIFEST_HASH])hashes;
    return true;
}

/* mf_write - writes m for a file of stat st to cpath (through a temporary
 * name and a rename). */
static st_err mf_write(const char *cpath, const struct stat *st, const st_manifest *m)
{
    uint8_t head[MF_HEAD], check[ST_MANIFEST_HASH];
    memcpy(head, MF_MAGIC, MF_MAGIC_LEN);
    uint8_t *p = head + MF_MAGIC_LEN;
    p = mf_put(mf_put(mf_put(p, MF_VERSION, 4), m->chunk_size, 4), m->file_size, 8);
    p = mf_put(mf_put(p, (uint64_t)st->st_mtim.tv_sec, 8), (uint64_t)st->st_mtim.tv_nsec, 8);
    p = mf_put(p, m->data_offset, 8);
    memcpy(p, m->model_id, ST_MANIFEST_HASH);
    mf_put(p + ST_MANIFEST_HASH, m->n_chunks, 8);
    crypto_generichash_state s;
    crypto_generichash_init(&s, NULL, 0, sizeof check);
    crypto_generichash_update(&s, head, sizeof head);
    crypto_generichash_update(&s, (const uint8_t *)m->hash, m->n_chunks * ST_MANIFEST_HASH);
    crypto_generichash_final(&s, check, sizeof check);
    char tmp[PATH_MAX];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.%ld.tmp", cpath, (long)getpid()) >= sizeof tmp)
        return st_errorf(ST_ERANGE, "manifest cache path '%s' is too long", cpath);
    FILE *f = fopen(tmp, "wb");
    if (f == NULL)
        return st_err_errno(errno, tmp);
    bool ok = fwrite(head, 1, sizeof head, f) == sizeof head &&
              fwrite(m->hash, ST_MANIFEST_HASH, m->n_chunks, f) == m->n_chunks &&
              fwrite(check, 1, sizeof check, f) == sizeof check;
    int en = errno;
    if (fclose(f) != 0 && ok) {
        ok = false;
        en = errno;
    }
    if (!ok || rename(tmp, cpath) != 0) {
        en = ok ? errno : en;
        unlink(tmp);
        return st_err_errno(en, cpath);
    }
    return ST_OK;
}

st_err st_manifest_cache_file(const char *path, const char *cache_dir, const char *ext, char *out,
                              size_t cap)
{
    char abs[PATH_MAX], hex[2 * ST_MANIFEST_HASH + 1];
    uint8_t h[ST_MANIFEST_HASH];
    if (realpath(path, abs) == NULL)
        return st_err_errno(errno, path);
    crypto_generichash(h, sizeof h, (const uint8_t *)abs, strlen(abs), NULL, 0);
    st_err e = st_hex(h, sizeof h, hex, sizeof hex);
    if (e != ST_OK)
        return e;
    if ((size_t)snprintf(out, cap, "%s/manifests", cache_dir) >= cap)
        return st_errorf(ST_ERANGE, "cache directory '%s' is too long", cache_dir);
    if ((mkdir(cache_dir, 0700) != 0 && errno != EEXIST) ||
        (mkdir(out, 0700) != 0 && errno != EEXIST))
        return st_err_errno(errno, out);
    if ((size_t)snprintf(out, cap, "%s/manifests/%s%s", cache_dir, hex, ext) >= cap)
        return st_errorf(ST_ERANGE, "cache directory '%s' is too long", cache_dir);
    return ST_OK;
}

st_err st_manifest_cached(const char *path, const char *cache_dir, uint32_t chunk_size,
                          st_manifest *out, bool *computed)
{
    memset(out, 0, sizeof *out);
    *computed = false;
    struct stat st;
    if (stat(path, &st) != 0)
        return st_err_errno(errno, path);
    char beside[PATH_MAX], other[PATH_MAX] = "";
    if ((size_t)snprintf(beside, sizeof beside, "%s%s", path, MF_SUFFIX) >= sizeof beside)
        return st_errorf(ST_ERANGE, "model path '%s' is too long", path);
    if (cache_dir != NULL &&
        st_manifest_cache_file(path, cache_dir, ".manifest", other, sizeof other) != ST_OK) {
        st_log(ST_LOG_WARN, "manifest", "no manifest cache under %s: %s", cache_dir,
               st_errdetail());
        other[0] = '\0';
    }
    if ((other[0] && mf_read(other, &st, chunk_size, out)) || mf_read(beside, &st, chunk_size, out))
        return ST_OK;
    st_err e = st_manifest_compute(path, chunk_size, out);
    if (e != ST_OK)
        return e;
    *computed = true;
    char why[256] = "no cache directory";
    if (other[0] && mf_write(other, &st, out) == ST_OK)
        return ST_OK;
    if (other[0])
        snprintf(why, sizeof why, "%s", st_errdetail());
    if (mf_write(beside, &st, out) == ST_OK)
        return ST_OK;
    st_log(ST_LOG_WARN, "manifest",
           "the manifest of %s is not cached (%s; %s): it is "
           "recomputed at the next start",
           path, why, st_errdetail());
    return ST_OK;
}

st_err st_weights_default_addr(const char *ctl, char *out, size_t cap)
{
    st_hostport hp;
    if (ctl == NULL || !st_tcp_split(ctl, &hp))
        return st_errorf(ST_EINVAL,
                         "'%s' is not a tcp://HOST:PORT address: give the weights "
                         "address",
                         ctl ? ctl : "");
    long port;
    if (!st_port_parse(hp.port, ST_PORT_MAX - ST_WEIGHTS_PORT_STEP, &port))
        return st_errorf(ST_EINVAL, "'%s': no port below %d follows its port", ctl, ST_PORT_MAX);
    long wp = port == 0 ? 0 : port + ST_WEIGHTS_PORT_STEP;
    if ((size_t)snprintf(out, cap, "%.*s:%ld", (int)(ST_TCP_SCHEME_LEN + hp.host_len), ctl, wp) >=
        cap)
        return st_errorf(ST_ERANGE, "'%s' is too long", ctl);
    return ST_OK;
}

st_err st_cache_dir_default(char *out, size_t cap)
{
    const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    int n;
    if (x != NULL && x[0] == '/')
        n = snprintf(out, cap, "%s/strata", x);
    else if (h != NULL && h[0] != '\0')
        n = snprintf(out, cap, "%s/.cache/strata", h);
    else
        return st_errorf(ST_ENOENT, "no cache directory: neither XDG_CACHE_HOME nor HOME is set");
    if (n < 0 || (size_t)n >= cap)
        return st_errorf(ST_ERANGE, "the cache directory's path is too long");
    return ST_OK;
}
