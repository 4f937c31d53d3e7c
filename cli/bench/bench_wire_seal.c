/* bench_wire_seal.c - `strata bench wire-seal [--rounds N] [--ms M]`: the
 * cost of one hop's envelope (common/wire/envelope.c) in each cluster mode, on
 * one thread: the sender's st_env_seal and the receiver's st_env_open of
 * the same frame, back to back, as every STEP and RESULT frame pays.
 *
 * Modes: open (no key: header only), mac (cluster key: HMAC-SHA-512-256 of
 * header and body, the replay window) and sealed (--encrypt: XChaCha20-
 * Poly1305 of the body in place, the header as additional data, the same
 * replay window; the open path touches only the 32-byte header, so only its
 * time is shown). Frame bodies are the activation packets of f16 hops:
 * hidden 2048 and 4096 for 1 (decode), 32 and 256 (prefill) tokens (128-byte
 * header, 16 bytes per row, 2 bytes per value). Each round times every mode
 * for M ms (default 50) in turn, so the three share the machine's noise; a
 * figure is the median over N rounds (default 9). Reported: microseconds
 * per hop and GB/s of body bytes, and the sealed path's cost over the MAC
 * path (ratio of per-hop times). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "common/base/clock.h"
#include "common/wire/envelope.h"

#define BS_ROUNDS_DEFAULT 9
#define BS_ROUNDS_MAX 101
#define BS_MS_DEFAULT 50
#define BS_MS_MAX 10000
#define BS_WIRE_HDR 128 /* activation packet header (docs/wire-format.md) */
#define BS_WIRE_ROW 16  /* one row descriptor */
#define BS_F16_BYTES 2
#define BS_NS_PER_MS 1000000ull

enum { BS_OPEN, BS_MAC, BS_SEALED, BS_NMODES };

typedef struct bs_shape {
    uint32_t hidden, tokens;
} bs_shape;

static const bs_shape bs_shapes[] = {
    {2048, 1}, {2048, 32}, {2048, 256}, {4096, 1}, {4096, 32}, {4096, 256},
};
#define BS_NSHAPES (sizeof bs_shapes / sizeof bs_shapes[0])

static int bs_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double bs_median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, bs_cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* bs_time - seconds per hop (seal + open) of a body_len frame in mode,
 * timed for at least budget_ns; ST_OK or the first failure. */
static st_err bs_time(st_env *tx, st_env *rx, uint8_t *buf, size_t body_len, uint64_t budget_ns,
                      double *per_hop)
{
    size_t len = st_env_size(tx, body_len);
    uint64_t n = 0, t0 = st_now_ns(), t;
    do {
        st_env_frame f;
        st_err e = st_env_seal(tx, ST_ENV_STEP, buf, body_len);
        if (e == ST_OK)
            e = st_env_open(rx, buf, len, &f);
        if (e != ST_OK)
            return e;
        n++;
        t = st_now_ns();
    } while (t - t0 < budget_ns);
    *per_hop = (double)(t - t0) * 1e-9 / (double)n;
    return ST_OK;
}

int st_bench_wire_seal(int argc, char **argv)
{
    int64_t rounds = BS_ROUNDS_DEFAULT, ms = BS_MS_DEFAULT;
    const st_opt rows[] = {
        {.name = "--rounds", .type = ST_OPT_I64, .dest = &rounds, .min = 1, .max = BS_ROUNDS_MAX,
         .value = "N", .help = "rounds per figure"},
        {.name = "--ms", .type = ST_OPT_I64, .dest = &ms, .min = 1, .max = BS_MS_MAX,
         .value = "M", .help = "milliseconds per figure"},
    };
    int st = cli_opts("bench wire-seal", "strata bench wire-seal [--rounds N] [--ms M]", rows,
                      sizeof rows / sizeof rows[0], NULL, 0, NULL, argc, argv);
    if (st != CLI_OPTS_GO)
        return st;
    uint8_t key[ST_KEY_BYTES];
    memset(key, 0x5c, sizeof key); /* a fixed key: speed does not depend on it */
    st_env tx[BS_NMODES], rx[BS_NMODES];
    int ok = 0; /* modes whose two envelopes are set up */
    st_err e = ST_OK;
    while (ok < BS_NMODES) {
        const uint8_t *k = ok == BS_OPEN ? NULL : key;
        st_env_init_mode(&rx[ok], NULL, false, 0); /* something st_env_fini can free */
        if ((e = st_env_init_mode(&tx[ok], k, ok == BS_SEALED, 1)) != ST_OK ||
            (e = st_env_init_mode(&rx[ok], k, ok == BS_SEALED, 2)) != ST_OK) {
            st_env_fini(&tx[ok]);
            st_env_fini(&rx[ok]);
            break;
        }
        ok++;
    }
    size_t max_body = 0;
    for (size_t s = 0; s < BS_NSHAPES; s++) {
        size_t b = BS_WIRE_HDR + BS_WIRE_ROW +
                   (size_t)bs_shapes[s].hidden * bs_shapes[s].tokens * BS_F16_BYTES;
        max_body = b > max_body ? b : max_body;
    }
    uint8_t *buf = e == ST_OK ? calloc(1, ST_ENV_HDR + max_body + ST_ENV_MAC) : NULL;
    double *samples = e == ST_OK ? calloc((size_t)rounds, sizeof *samples * BS_NMODES) : NULL;
    if (e == ST_OK && (buf == NULL || samples == NULL))
        e = st_errorf(ST_ENOMEM, "bench buffers");
    printf("envelope per hop (seal + open), one thread, median of %lld rounds of %lld ms per "
           "mode, alternated; bodies are f16 activation packets\n",
           (long long)rounds, (long long)ms);
    printf("%-6s %-6s %9s | %8s | %10s %8s | %10s %8s | %s\n", "hidden", "tokens", "body B",
           "open us", "mac us", "GB/s", "sealed us", "GB/s", "sealed/mac");
    for (size_t s = 0; e == ST_OK && s < BS_NSHAPES; s++) {
        size_t body = BS_WIRE_HDR + BS_WIRE_ROW +
                      (size_t)bs_shapes[s].hidden * bs_shapes[s].tokens * BS_F16_BYTES;
        for (size_t i = 0; i < body; i++)
            buf[ST_ENV_HDR + i] = (uint8_t)(i * 131u + 7u);
        for (int64_t r = 0; e == ST_OK && r < rounds; r++)
            for (int m = 0; e == ST_OK && m < BS_NMODES; m++)
                e = bs_time(&tx[m], &rx[m], buf, body, (uint64_t)ms * BS_NS_PER_MS,
                            &samples[(size_t)m * (size_t)rounds + (size_t)r]);
        if (e != ST_OK)
            break;
        double med[BS_NMODES];
        for (int m = 0; m < BS_NMODES; m++)
            med[m] = bs_median(samples + (size_t)m * (size_t)rounds, (size_t)rounds);
        printf("%-6u %-6u %9zu | %8.2f | %10.2f %8.2f | %10.2f %8.2f | %.2fx\n",
               bs_shapes[s].hidden, bs_shapes[s].tokens, body, med[BS_OPEN] * 1e6,
               med[BS_MAC] * 1e6, (double)body / med[BS_MAC] * 1e-9, med[BS_SEALED] * 1e6,
               (double)body / med[BS_SEALED] * 1e-9, med[BS_SEALED] / med[BS_MAC]);
    }
    free(buf);
    free(samples);
    for (int m = 0; m < ok; m++) {
        st_env_fini(&tx[m]);
        st_env_fini(&rx[m]);
    }
    if (e != ST_OK) {
        fprintf(stderr, "strata: bench wire-seal: %s\n", st_errmsg(e));
        return 1;
    }
    return 0;
}
