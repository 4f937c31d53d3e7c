/* bench_wire_codec.c - `strata bench wire-codec [--seconds S] [--level L]`:
 * encode and decode throughput of activation packets on one thread.
 *
 * For hidden sizes 2048, 4096, 8192 and 1, 32, 256 tokens, it times memcpy
 * of the f32 hidden states, then encoding (st_wire_encode_buf into a
 * reused buffer) and decoding (st_wire_decode into a reused f32 buffer) of
 * every dtype without and with zstd (and with byte planes for 16-bit
 * dtypes), in the same run on the same data. Rates are GB/s of f32 input
 * (tokens x hidden x 4 bytes), whatever the dtype; "x mc" is the ratio to
 * memcpy's rate for that shape; "ratio" is raw payload / zstd payload.
 * The data look like transformer hidden states: N(0, 1), a few channels
 * x20, rare x50 outliers. Each figure is the best of three timed runs of
 * S/3 seconds (default S 0.2), taken in rounds of memcpy, encode, decode
 * so that noise on a shared machine does not skew one side of a ratio;
 * memcpy's figure is the best over all rounds of its shape. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "common/base/clock.h"
#include "common/wire/wire.h"

typedef struct bw_cfg {
    st_wire_dtype dt;
    int zstd; /* use zstd at the chosen level */
    int planes;
} bw_cfg;

static const bw_cfg bw_cfgs[] = {
    {ST_WIRE_F32, 0, 0},  {ST_WIRE_F32, 1, 0}, {ST_WIRE_BF16, 0, 0}, {ST_WIRE_BF16, 1, 0},
    {ST_WIRE_BF16, 1, 1}, {ST_WIRE_F16, 0, 0}, {ST_WIRE_F16, 1, 0},  {ST_WIRE_F16, 1, 1},
    {ST_WIRE_I8, 0, 0},   {ST_WIRE_I8, 1, 0},
};
#define BW_NCFG (sizeof bw_cfgs / sizeof bw_cfgs[0])

/* bw_data - activation-like values from a fixed seed (splitmix64 + Box-Muller). */
static void bw_data(float *x, size_t n, uint32_t hidden)
{
    uint64_t s = 0x5eed;
    for (size_t i = 0; i < n; i++) {
        uint64_t z[2];
        for (int k = 0; k < 2; k++) {
            uint64_t v = (s += 0x9e3779b97f4a7c15ull);
            v = (v ^ (v >> 30)) * 0xbf58476d1ce4e5b9ull;
            v = (v ^ (v >> 27)) * 0x94d049bb133111ebull;
            z[k] = v ^ (v >> 31);
        }
        double u1 = (double)(z[0] >> 11) * 0x1p-53 + 0x1p-60, u2 = (double)(z[1] >> 11) * 0x1p-53;
        float v = (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
        if ((i % hidden) % 977 == 13)
            v *= 20.0f;
        if (z[1] % 1000 == 0)
            v *= 50.0f;
        x[i] = v;
    }
}

/* The operation being timed. */
typedef enum bw_op { BW_MEMCPY, BW_ENCODE, BW_DECODE } bw_op;

typedef struct bw_job {
    bw_op op;
    st_wire_ctx *ctx;
    const st_wire_hdr *h;
    const st_wire_row *row;
    const st_wire_opts *o;
    const float *x;
    float *out;
    unsigned char *pkt;
    size_t cap, len, n;
} bw_job;

static st_err bw_run_once(bw_job *j)
{
    st_wire_hdr d;
    st_wire_row r;
    st_wire_expect ex = {.epoch = j->h->epoch,
                         .plan_hash = j->h->plan_hash,
                         .stage = j->h->stage,
                         .hidden = j->h->hidden,
                         .max_tokens = UINT32_MAX};
    switch (j->op) {
    case BW_MEMCPY:
        memcpy(j->out, j->x, j->n * sizeof(float));
        __asm__ volatile("" : : "r"(j->out) : "memory");
        return ST_OK;
    case BW_ENCODE:
        return st_wire_encode_buf(j->h, j->row, j->x, j->o, j->ctx, j->pkt, j->cap, &j->len, NULL);
    default:
        return st_wire_decode(j->ctx, j->pkt, j->len, &ex, &d, &r, 1, j->out, j->n);
    }
}

/* bw_rate - GB/s of f32 input of one timed run of about secs seconds. */
static int bw_rate(bw_job *j, double secs, double *gbs)
{
    st_err e = bw_run_once(j); /* warm-up, and the error check */
    if (e != ST_OK) {
        fprintf(stderr, "strata: bench wire-codec: %s\n", st_errmsg(e));
        return 1;
    }
    uint64_t iters = 0;
    double t0 = st_now_s(), t;
    do {
        for (int k = 0; k < 8; k++)
            (void)bw_run_once(j);
        iters += 8;
        t = st_now_s() - t0;
    } while (t < secs);
    *gbs = (double)iters * (double)(j->n * sizeof(float)) / t / 1e9;
    return 0;
}

/* Results of one configuration: best encode and decode rates, and the
 * best memcpy rate measured between them. */
typedef struct bw_res {
    double enc, dec, mc;
    st_wire_stats st;
} bw_res;

/* bw_measure - three rounds of memcpy, encode, decode (secs / 3 each);
 * the best of each, so a moment of noise on the shared machine hits
 * neither side of a ratio alone. */
static int bw_measure(bw_job *j, double secs, bw_res *res)
{
    st_err e = st_wire_encode_buf(j->h, j->row, j->x, j->o, j->ctx, j->pkt, j->cap, &j->len,
                                  &res->st);
    if (e != ST_OK) {
        fprintf(stderr, "strata: bench wire-codec: %s\n", st_errmsg(e));
        return 1;
    }
    res->enc = res->dec = res->mc = 0.0;
    static const bw_op ops[3] = {BW_MEMCPY, BW_ENCODE, BW_DECODE};
    for (int round = 0; round < 3; round++) {
        for (int k = 0; k < 3; k++) {
            double r;
            j->op = ops[k];
            if (bw_rate(j, secs / 3.0, &r) != 0)
                return 1;
            double *best = k == 0 ? &res->mc : k == 1 ? &res->enc : &res->dec;
            *best = r > *best ? r : *best;
        }
    }
    return 0;
}

/* bw_worst - the worst ratios to memcpy per dtype (without zstd). */
typedef struct bw_worst {
    double enc[ST_WIRE_DT_COUNT], dec[ST_WIRE_DT_COUNT];
} bw_worst;

static int bw_shape(st_wire_ctx *ctx, uint32_t hidden, uint32_t tokens, double secs, int level,
                    bw_worst *w)
{
    size_t n = (size_t)hidden * tokens;
    /* page-aligned buffers: glibc's memcpy (rep movsb) is slow on some CPUs
     * when source and destination are close modulo 4096 */
    size_t fbytes = (n * sizeof(float) + 4095) & ~(size_t)4095;
    float *x = aligned_alloc(4096, fbytes), *out = aligned_alloc(4096, fbytes);
    st_wire_hdr h = {.epoch = 1, .stage = 1, .n_rows = 1, .hidden = hidden};
    st_wire_row row = {.session_id = 1, .pos0 = 0, .n_tokens = tokens};
    st_wire_opts o[BW_NCFG];
    size_t cap = 0;
    for (size_t c = 0; c < BW_NCFG; c++) {
        o[c] = (st_wire_opts){.dtype = bw_cfgs[c].dt,
                              .zstd_level = bw_cfgs[c].zstd ? level : 0,
                              .plane_split = bw_cfgs[c].planes != 0};
        size_t b = 0;
        st_err e = st_wire_encode_size(&h, &row, &o[c], &b);
        if (e != ST_OK) {
            fprintf(stderr, "strata: bench wire-codec: %s\n", st_errmsg(e));
            free(x);
            free(out);
            return 1;
        }
        cap = b > cap ? b : cap;
    }
    unsigned char *pkt = aligned_alloc(4096, (cap + 4095) & ~(size_t)4095);
    if (x == NULL || out == NULL || pkt == NULL) {
        fprintf(stderr, "strata: bench wire-codec: out of memory\n");
        free(x);
        free(out);
        free(pkt);
        return 1;
    }
    bw_data(x, n, hidden);
    bw_job j =
        {.ctx = ctx, .h = &h, .row = &row, .x = x, .out = out, .pkt = pkt, .cap = cap, .n = n};
    bw_res res[BW_NCFG];
    double mc = 0.0;
    int rc = 0;
    for (size_t c = 0; rc == 0 && c < BW_NCFG; c++) {
        j.o = &o[c];
        rc = bw_measure(&j, secs, &res[c]);
        mc = rc == 0 && res[c].mc > mc ? res[c].mc : mc;
    }
    if (rc == 0)
        printf("%6u %6u %9.2f  memcpy %7.2f GB/s (best of %d runs)\n", hidden, tokens,
               (double)(n * sizeof(float)) / 1048576.0, mc, (int)(3 * BW_NCFG));
    for (size_t c = 0; rc == 0 && c < BW_NCFG; c++) {
        char name[24];
        snprintf(name, sizeof name, "%s%s%s", st_wire_dtype_name(o[c].dtype),
                 o[c].zstd_level ? "+zstd" : "", o[c].plane_split ? "+planes" : "");
        printf("%6s %6s %9s  %-16s enc %7.2f (%4.2fx)  dec %7.2f (%4.2fx)  ratio %5.3f  %5.3f of "
               "f32\n",
               "", "", "", name, res[c].enc, res[c].enc / mc, res[c].dec, res[c].dec / mc,
               (double)res[c].st.raw_bytes / (double)res[c].st.wire_bytes,
               (double)res[c].st.packet_bytes / (double)(n * sizeof(float)));
        if (!bw_cfgs[c].zstd) {
            st_wire_dtype d = o[c].dtype;
            w->enc[d] = res[c].enc / mc < w->enc[d] ? res[c].enc / mc : w->enc[d];
            w->dec[d] = res[c].dec / mc < w->dec[d] ? res[c].dec / mc : w->dec[d];
        }
    }
    fflush(stdout);
    free(x);
    free(out);
    free(pkt);
    return rc;
}

#define BWC_SECONDS_MIN 0.01
#define BWC_SECONDS_MAX 60.0
#define BWC_LEVEL_MIN (-7)
#define BWC_LEVEL_MAX 19

int st_bench_wire_codec(int argc, char **argv)
{
    float secs = 0.2f;
    int64_t level = ST_WIRE_ZSTD_DEFAULT_LEVEL;
    const st_opt rows[] = {
        {.name = "--seconds", .type = ST_OPT_FLOAT, .dest = &secs, .dmin = BWC_SECONDS_MIN,
         .dmax = BWC_SECONDS_MAX, .value = "S", .help = "seconds per figure (default 0.2)"},
        {.name = "--level", .type = ST_OPT_I64, .dest = &level, .min = BWC_LEVEL_MIN,
         .max = BWC_LEVEL_MAX, .value = "L", .help = "the zstd level: -7..-1 or 1..19"},
    };
    int st = cli_opts("bench wire-codec", "strata bench wire-codec [--seconds S] [--level L]", rows,
                      sizeof rows / sizeof rows[0], NULL, 0, NULL, argc, argv);
    if (st != CLI_OPTS_GO)
        return st;
    if (level == 0) {
        fprintf(stderr, "strata: --level: 0 would mean no zstd; use -7..-1 or 1..19\n");
        return 2;
    }
    st_wire_ctx *ctx;
    st_err e = st_wire_ctx_new(0, &ctx);
    if (e != ST_OK) {
        fprintf(stderr, "strata: bench wire-codec: %s\n", st_errmsg(e));
        return 1;
    }
    printf("wire codec: conversions %s, one thread, zstd level %d, %.2f s per figure, packets of "
           "one row\n"
           "rates in GB/s of f32 input (tokens x hidden x 4 B); (x) = ratio to memcpy of the same "
           "bytes;\n"
           "ratio = raw payload / zstd payload; last column = packet bytes / f32 bytes\n\n"
           "%6s %6s %9s\n",
           st_wire_ctx_convert_name(ctx), (int)level, (double)secs, "hidden", "tokens", "f32 MiB");
    static const uint32_t hiddens[] = {2048, 4096, 8192}, tokens[] = {1, 32, 256};
    bw_worst w;
    for (int d = 0; d < ST_WIRE_DT_COUNT; d++)
        w.enc[d] = w.dec[d] = 1e9;
    int rc = 0;
    for (size_t a = 0; rc == 0 && a < 3; a++)
        for (size_t b = 0; rc == 0 && b < 3; b++)
            rc = bw_shape(ctx, hiddens[a], tokens[b], secs, (int)level, &w);
    if (rc == 0) {
        printf("\nworst ratio to memcpy over all shapes (target >= 0.50 for f16, bf16, i8):\n");
        for (int d = 0; d < ST_WIRE_DT_COUNT; d++)
            printf("  %-5s encode %4.2fx  decode %4.2fx%s\n", st_wire_dtype_name((st_wire_dtype)d),
                   w.enc[d], w.dec[d],
                   d == ST_WIRE_F32
                       ? ""
                       : (w.enc[d] >= 0.5 && w.dec[d] >= 0.5 ? "  ok" : "  BELOW TARGET"));
    }
    st_wire_ctx_free(ctx);
    return rc;
}
