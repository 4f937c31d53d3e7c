/* wire_sample.c - zstd measured on a sender's activations (see
 * wire_sample.h). The payloads come from the packet encoder itself
 * (st_wire_encode_buf without zstd: the bytes zstd would see), then one
 * zstd frame per dtype is made and undone with the encoder's parameters;
 * only the zstd calls are timed. */
#include "common/wire/wire_sample.h"

#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "common/base/clock.h"

/* One dtype's kept samples (a ring) and the all-time count. raw and z
 * are the packet's payload bytes before and after zstd, estimated from
 * its sampled tokens (scaled by its tokens / the sampled ones). */
typedef struct zs_ring {
    double raw[ST_WIRE_ZSAMPLE_KEEP];
    double z[ST_WIRE_ZSAMPLE_KEEP];
    double cns[ST_WIRE_ZSAMPLE_KEEP]; /* compress ns per raw byte */
    double dns[ST_WIRE_ZSAMPLE_KEEP]; /* decompress ns per raw byte */
    uint32_t n;                       /* all samples */
} zs_ring;

struct st_wire_zsampler {
    st_wire_ctx *wctx;
    ZSTD_CCtx *cctx;
    ZSTD_DCtx *dctx;
    unsigned char *pkt, *frame, *back;
    size_t pkt_cap, frame_cap, back_cap;
    uint64_t packets;
    zs_ring r[ST_WIRE_DT_COUNT];
};

/* zs_warm - one frame of the largest window made and undone, so that the
 * first sample does not time the contexts' allocations. */
static st_err zs_warm(st_wire_zsampler *s)
{
    size_t n = (size_t)1 << ST_WIRE_ZSTD_WINDOW_LOG;
    unsigned char *src = calloc(1, n), *dst = malloc(ZSTD_compressBound(n));
    st_err e = ST_OK;
    if (src == NULL || dst == NULL) {
        e = st_errorf(ST_ENOMEM, "zstd sampler: %zu bytes", n);
    } else {
        size_t z = ZSTD_compress2(s->cctx, dst, ZSTD_compressBound(n), src, n);
        size_t b = ZSTD_isError(z) ? z : ZSTD_decompressDCtx(s->dctx, src, n, dst, z);
        if (ZSTD_isError(b))
            e = st_errorf(ST_EZSTD, "zstd sampler: warm-up: %s", ZSTD_getErrorName(b));
    }
    free(src);
    free(dst);
    return e;
}

st_err st_wire_zsampler_new(int force_ref, st_wire_zsampler **out)
{
    *out = NULL;
    st_wire_zsampler *s = calloc(1, sizeof *s);
    if (s == NULL)
        return st_errorf(ST_ENOMEM, "zstd sampler");
    st_err e = st_wire_ctx_new(force_ref, &s->wctx);
    if (e == ST_OK &&
        ((s->cctx = ZSTD_createCCtx()) == NULL || (s->dctx = ZSTD_createDCtx()) == NULL))
        e = st_errorf(ST_ENOMEM, "zstd sampler: zstd contexts");
    size_t r = 0;
    if (e == ST_OK) {
        r = ZSTD_CCtx_setParameter(s->cctx, ZSTD_c_compressionLevel, ST_WIRE_ZSTD_DEFAULT_LEVEL);
        if (!ZSTD_isError(r))
            r = ZSTD_CCtx_setParameter(s->cctx, ZSTD_c_windowLog, ST_WIRE_ZSTD_WINDOW_LOG);
        if (!ZSTD_isError(r))
            r = ZSTD_CCtx_setParameter(s->cctx, ZSTD_c_checksumFlag, 0);
        if (ZSTD_isError(r))
            e = st_errorf(ST_EZSTD, "zstd sampler: %s", ZSTD_getErrorName(r));
    }
    if (e == ST_OK)
        e = zs_warm(s);
    if (e != ST_OK) {
        st_wire_zsampler_free(s);
        return e;
    }
    *out = s;
    return ST_OK;
}

void st_wire_zsampler_free(st_wire_zsampler *s)
{
    if (s == NULL)
        return;
    st_wire_ctx_free(s->wctx);
    ZSTD_freeCCtx(s->cctx);
    ZSTD_freeDCtx(s->dctx);
    free(s->pkt);
    free(s->frame);
    free(s->back);
    free(s);
}

bool st_wire_zsampler_due(st_wire_zsampler *s) { return s->packets++ % ST_WIRE_ZSAMPLE_EVERY == 0; }

/* zs_grow - *buf of at least n bytes. */
static st_err zs_grow(unsigned char **buf, size_t *cap, size_t n)
{
    if (*cap >= n)
        return ST_OK;
    unsigned char *p = realloc(*buf, n);
    if (p == NULL)
        return st_errorf(ST_ENOMEM, "zstd sampler: %zu bytes", n);
    *buf = p;
    *cap = n;
    return ST_OK;
}

/* zs_one - one dtype's payload of the sample: raw and zstd bytes, costs. */
static st_err zs_one(st_wire_zsampler *s, st_wire_dtype d, const float *hidden, uint32_t n,
                     uint32_t hidden_size, double *rawb, double *zb, double *cns, double *dns)
{
    st_wire_hdr h;
    memset(&h, 0, sizeof h);
    h.n_rows = 1;
    h.hidden = hidden_size;
    st_wire_row row = {.session_id = 1, .pos0 = 0, .n_tokens = n};
    st_wire_opts o = {.dtype = d};
    size_t bound, len;
    st_err e = st_wire_encode_size(&h, &row, &o, &bound);
    if (e == ST_OK)
        e = zs_grow(&s->pkt, &s->pkt_cap, bound);
    if (e == ST_OK)
        e = st_wire_encode_buf(&h, &row, hidden, &o, s->wctx, s->pkt, bound, &len, NULL);
    if (e != ST_OK)
        return e;
    size_t off = ST_WIRE_HDR_SIZE + ST_WIRE_ROW_SIZE, raw = len - off;
    if ((e = zs_grow(&s->frame, &s->frame_cap, ZSTD_compressBound(raw))) != ST_OK ||
        (e = zs_grow(&s->back, &s->back_cap, raw)) != ST_OK)
        return e;
    /* each cost is the fastest of ST_WIRE_ZSAMPLE_RUNS round trips (wire_sample.h) */
    uint64_t best_c = UINT64_MAX, best_d = UINT64_MAX;
    size_t z = 0;
    for (unsigned run = 0; run < ST_WIRE_ZSAMPLE_RUNS; run++) {
        uint64_t t0 = st_now_ns();
        z = ZSTD_compress2(s->cctx, s->frame, s->frame_cap, s->pkt + off, raw);
        uint64_t t1 = st_now_ns();
        if (ZSTD_isError(z))
            return st_errorf(ST_EZSTD, "zstd sampler: compressing %zu bytes: %s", raw,
                             ZSTD_getErrorName(z));
        size_t b = ZSTD_decompressDCtx(s->dctx, s->back, s->back_cap, s->frame, z);
        uint64_t t2 = st_now_ns();
        if (ZSTD_isError(b) || b != raw || memcmp(s->back, s->pkt + off, raw) != 0)
            return st_errorf(ST_EZSTD,
                             "zstd sampler: the frame of %zu bytes did not round-trip (%s)", raw,
                             ZSTD_isError(b) ? ZSTD_getErrorName(b) : "other bytes");
        if (t1 - t0 < best_c)
            best_c = t1 - t0;
        if (t2 - t1 < best_d)
            best_d = t2 - t1;
    }
    *rawb = (double)raw;
    *zb = (double)z;
    *cns = (double)best_c / (double)raw;
    *dns = (double)best_d / (double)raw;
    return ST_OK;
}

st_err st_wire_zsampler_take(st_wire_zsampler *s, const float *hidden, uint32_t n_tokens,
                             uint32_t hidden_size)
{
    if (n_tokens == 0 || hidden_size == 0 || hidden_size > ST_WIRE_MAX_HIDDEN)
        return st_errorf(ST_EINVAL, "zstd sampler: %u tokens of hidden size %u", n_tokens,
                         hidden_size);
    uint32_t n = n_tokens < ST_WIRE_ZSAMPLE_TOKENS ? n_tokens : ST_WIRE_ZSAMPLE_TOKENS;
    double raw[ST_WIRE_DT_COUNT], z[ST_WIRE_DT_COUNT], cns[ST_WIRE_DT_COUNT], dns[ST_WIRE_DT_COUNT];
    for (unsigned d = 0; d < ST_WIRE_DT_COUNT; d++) {
        st_err e = zs_one(s, (st_wire_dtype)d, hidden, n, hidden_size, &raw[d], &z[d], &cns[d],
                          &dns[d]);
        if (e != ST_OK)
            return e;
    }
    double scale = (double)n_tokens / (double)n; /* the packet's tokens per sampled one */
    for (unsigned d = 0; d < ST_WIRE_DT_COUNT; d++) {
        zs_ring *r = &s->r[d];
        uint32_t k = r->n % ST_WIRE_ZSAMPLE_KEEP;
        r->raw[k] = raw[d] * scale;
        r->z[k] = z[d] * scale;
        r->cns[k] = cns[d];
        r->dns[k] = dns[d];
        r->n++;
    }
    return ST_OK;
}

static int zs_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* zs_median - the median of v[0..n) (n >= 1; the upper one of two). */
static double zs_median(const double *v, uint32_t n)
{
    double t[ST_WIRE_ZSAMPLE_KEEP];
    memcpy(t, v, n * sizeof *t);
    qsort(t, n, sizeof *t, zs_cmp);
    return t[n / 2];
}

void st_wire_zsampler_get(const st_wire_zsampler *s, st_wire_zmeas out[ST_WIRE_DT_COUNT])
{
    for (unsigned d = 0; d < ST_WIRE_DT_COUNT; d++) {
        const zs_ring *r = &s->r[d];
        uint32_t k = r->n < ST_WIRE_ZSAMPLE_KEEP ? r->n : ST_WIRE_ZSAMPLE_KEEP;
        out[d] = (st_wire_zmeas){.samples = r->n};
        if (k == 0)
            continue;
        double raw = 0, z = 0; /* the ratio of the sampled packets' bytes together */
        for (uint32_t i = 0; i < k; i++) {
            raw += r->raw[i];
            z += r->z[i];
        }
        out[d].ratio = raw / z;
        out[d].compress_ns = zs_median(r->cns, k);
        out[d].decompress_ns = zs_median(r->dns, k);
    }
}
