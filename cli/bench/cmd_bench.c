/* cmd_bench.c - `strata bench`: dispatches to the benchmarks, and
 * `strata bench run MODEL`, the end-to-end speed of the single-process
 * engine.
 *
 * bench run evaluates a synthetic prompt (--prompt tokens, one forward
 * pass when it fits the chunk) and then decodes --gen tokens greedily, one
 * forward pass each, --repeat times from position 0, after one untimed
 * warm-up round. It prints the median, min and max tok/s of both phases,
 * the weight bytes streamed per decoded token (every layer matrix, the
 * norms and the output head: the token embedding contributes one row; of a
 * mixture of experts' layer, the router and n_expert_used experts), the
 * GB/s that makes at the decode rate, and the machine's read bandwidth
 * measured in the same run by a read loop over a buffer far larger than
 * the L3 cache on the same pool of threads (median of runs before and
 * after the timed rounds), so that decode reads as a fraction of the
 * bandwidth ceiling. Scripts parse the lines that start with "prompt: "
 * and "decode: " (exactly one each, "<median> tok/s (min <x>, max <y>)"
 * first); no other line starts with those words. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "common/base/clock.h"
#include "common/base/log.h"
#include "worker/engine/local.h"

/* ---- memory bandwidth ---- */

#define BR_BW_BYTES ((size_t)512 << 20) /* 16x a 32 MiB L3 */
#define BR_BW_RUNS 3                    /* timed passes per measurement */
#define BR_CPU_LINES 32 /* /proc/cpuinfo lines read: the first processor's are enough */

typedef struct br_bw {
    const uint64_t *buf;
    size_t n; /* uint64 words */
    uint64_t sink[64];
} br_bw;

static void br_bw_job(void *arg, int ith, int nth)
{
    br_bw *b = arg;
    long s, e;
    st_pool_split((long)(b->n / 8), ith, nth, &s, &e);
    const uint64_t *p = b->buf + (size_t)s * 8;
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
    for (long k = s; k < e; k++, p += 8) {
        a0 += p[0];
        a1 += p[1];
        a2 += p[2];
        a3 += p[3];
        a4 += p[4];
        a5 += p[5];
        a6 += p[6];
        a7 += p[7];
    }
    b->sink[(ith % 8) * 8] = a0 ^ a1 ^ a2 ^ a3 ^ a4 ^ a5 ^ a6 ^ a7;
}

static int br_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* br_bandwidth - nruns timed read passes over buf; appends GB/s to out. */
static void br_bandwidth(st_pool *pool, br_bw *b, int nruns, double *out, int *n_out)
{
    for (int r = 0; r < nruns; r++) {
        double t = st_now_s();
        st_pool_run(pool, br_bw_job, b);
        out[(*n_out)++] = (double)(b->n * 8) / (st_now_s() - t) / 1e9;
    }
}

double st_bench_print_bandwidth(st_pool *pool)
{
    uint64_t *buf = malloc(BR_BW_BYTES);
    if (buf == NULL) {
        printf("bandwidth: not measured (no memory for its %zu MiB buffer)\n", BR_BW_BYTES >> 20);
        return 0.0;
    }
    br_bw bw = {.buf = buf, .n = BR_BW_BYTES / 8};
    for (size_t k = 0; k < bw.n; k++)
        buf[k] = k;
    double runs[BR_BW_RUNS];
    int n = 0;
    br_bandwidth(pool, &bw, 1, runs, &n); /* warm-up pass */
    n = 0;
    br_bandwidth(pool, &bw, BR_BW_RUNS, runs, &n);
    free(buf);
    qsort(runs, (size_t)n, sizeof(double), br_cmp);
    printf("bandwidth: %.2f GB/s read, %d threads (median of %d; min %.2f, max %.2f)\n",
           runs[n / 2], st_pool_size(pool), n, runs[0], runs[n - 1]);
    return runs[n / 2];
}

/* ---- the CPU ---- */

/* br_cpuinfo_value - the value of /proc/cpuinfo's first line whose name is
 * key (text up to the tab or colon) in lines, or NULL. */
static const char *br_cpuinfo_value(char *const *lines, int n, const char *key)
{
    for (int i = 0; i < n; i++) {
        const size_t k = strcspn(lines[i], "\t:");
        const char *colon = strchr(lines[i], ':');
        if (colon != NULL && k == strlen(key) && strncmp(lines[i], key, k) == 0)
            return colon + 1 + strspn(colon + 1, " \t");
    }
    return NULL;
}

void st_bench_print_cpu(const st_kernel_ops *ops)
{
    /* the x86 flags of the kernels' instructions (kernels/select.c) */
    static const char *const isa[] = {"avx2",        "fma",         "f16c",
                                      "avx512f",     "avx512bw",    "avx512vl",
                                      "avx512_vnni", "avx512_bf16", "avx_vnni"};
    char *lines[BR_CPU_LINES];
    int n = 0;
    size_t cap = 0;
    char *line = NULL;
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f != NULL && n < BR_CPU_LINES && getline(&line, &cap, f) > 0 && line[0] != '\n') {
        line[strcspn(line, "\n")] = '\0';
        lines[n++] = line;
        line = NULL;
        cap = 0;
    }
    free(line);
    if (f != NULL)
        fclose(f);
    const char *model = br_cpuinfo_value(lines, n, "model name");
    const char *fam = br_cpuinfo_value(lines, n, "cpu family");
    const char *mod = br_cpuinfo_value(lines, n, "model");
    const char *flags = br_cpuinfo_value(lines, n, "flags");
    printf("cpu: %s (family %s, model %s); flags:", model ? model : "unknown", fam ? fam : "?",
           mod ? mod : "?");
    for (size_t k = 0; k < sizeof isa / sizeof isa[0]; k++) {
        const size_t len = strlen(isa[k]);
        for (const char *p = flags; p != NULL && *p != '\0'; p += strcspn(p, " ")) {
            p += strspn(p, " ");
            if (strncmp(p, isa[k], len) == 0 && (p[len] == ' ' || p[len] == '\0')) {
                printf(" %s", isa[k]);
                break;
            }
        }
    }
    printf("; kernels %s (variants this CPU supports:", ops->name);
    for (int v = 0; v < ST_KVAR_COUNT; v++)
        if (st_kernels_cpu_has((st_kvariant)v))
            printf(" %s", st_kvariant_name((st_kvariant)v));
    printf(")\n");
    for (int i = 0; i < n; i++)
        free(lines[i]);
}

/* ---- load from other processes ---- */

/* br_cpu_busy - seconds of non-idle CPU time of the whole machine (all
 * CPUs, from /proc/stat) and of this process; returns -1 if unknown. */
static int br_cpu_busy(double *machine, double *self)
{
    FILE *f = fopen("/proc/stat", "r");
    if (f == NULL)
        return -1;
    unsigned long long v[8] = {0};
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    long hz = sysconf(_SC_CLK_TCK);
    if (n < 5 || hz <= 0)
        return -1;
    /* user nice system idle iowait irq softirq steal: busy = all but idle, iowait */
    unsigned long long busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    *machine = (double)busy / (double)hz;
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return -1;
    *self = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
            (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
    return 0;
}

/* ---- bench run ---- */

typedef struct br_opts {
    const char *model;
    int64_t prompt, gen, repeat;
    cli_local_opts eng; /* --threads, --chunk, --kernels */
} br_opts;

#define BR_TOKENS_MAX (1 << 20)
#define BR_REPEAT_MAX 1000
#define BR_ROWS 3 /* br_parse's own rows */

/* br_parse - CLI_OPTS_GO to run, else the exit status (cli_opts). */
static int br_parse(int argc, char **argv, br_opts *o)
{
    static const char synopsis[] = "strata bench run MODEL [--prompt N] [--gen N] [--threads N] "
                                   "[--repeat N] [--chunk N] [--kernels ref|auto|avx2|avx512] "
                                   "[--cache-type f32|f16|q8_0]";
    memset(o, 0, sizeof *o);
    o->prompt = 64;
    o->gen = 128;
    o->repeat = 5;
    o->eng.chunk = 128;
    st_opt rows[BR_ROWS + CLI_LOCAL_ROWS] = {
        {.name = "--prompt", .type = ST_OPT_I64, .dest = &o->prompt, .min = 1,
         .max = BR_TOKENS_MAX, .value = "N", .help = "prompt tokens (default 64)"},
        {.name = "--gen", .type = ST_OPT_I64, .dest = &o->gen, .min = 1, .max = BR_TOKENS_MAX,
         .value = "N", .help = "generated tokens (default 128)"},
        {.name = "--repeat", .type = ST_OPT_I64, .dest = &o->repeat, .min = 1,
         .max = BR_REPEAT_MAX, .value = "N", .help = "runs, the median reported (default 5)"},
    };
    const size_t n = BR_ROWS + cli_local_rows(CLI_LOCAL_THREADS | CLI_LOCAL_CHUNK |
                                                  CLI_LOCAL_KERNELS | CLI_LOCAL_CACHE,
                                              &o->eng, rows + BR_ROWS);
    size_t n_ops = 0;
    int st = cli_opts("bench run", synopsis, rows, n, &o->model, 1, &n_ops, argc, argv);
    if (st != CLI_OPTS_GO)
        return st;
    if (o->model == NULL) {
        fprintf(stderr, "usage: %s\n", synopsis);
        return 2;
    }
    return CLI_OPTS_GO;
}

static size_t br_weight_bytes(const st_weight *w) { return (size_t)w->n_out * w->row_bytes; }

/* br_bytes_per_token - weight bytes one decoded token reads: in a mixture
 * of experts, the router and the n_expert_used experts a token runs
 * (expert 0's bytes each: one bank of experts shares its shapes and dtypes). */
static double br_bytes_per_token(const st_model *m)
{
    const st_hparams *hp = st_model_hparams(m);
    double b = 0.0;
    for (int64_t l = st_model_first(m); l < st_model_last(m); l++) {
        const st_layer *L = st_model_layer(m, l);
        b += (double)(br_weight_bytes(&L->wq) + br_weight_bytes(&L->wk) + br_weight_bytes(&L->wv) +
                      br_weight_bytes(&L->wo));
        if (L->experts != NULL)
            b += (double)br_weight_bytes(&L->w_router) +
                 (double)hp->n_expert_used *
                     (double)(br_weight_bytes(&L->experts[0].gate) +
                              br_weight_bytes(&L->experts[0].up) +
                              br_weight_bytes(&L->experts[0].down));
        else
            b += (double)(br_weight_bytes(&L->w_gate) + br_weight_bytes(&L->w_up) +
                          br_weight_bytes(&L->w_down));
        b += 2.0 * (double)hp->n_embd * sizeof(float);
    }
    if (st_model_has_head(m))
        b += (double)br_weight_bytes(st_model_output(m)) + (double)hp->n_embd * sizeof(float);
    if (st_model_has_embd(m))
        b += (double)st_model_tok_embd(m)->row_bytes;
    return b;
}

/* br_round - one prompt evaluation and gen decode steps; seconds of each. */
static st_err br_round(st_local *l, const int32_t *prompt, int64_t n_prompt, int64_t gen,
                       double *t_prompt, double *t_decode)
{
    double t0 = st_now_s();
    st_err e = st_local_eval(l, prompt, n_prompt, 0);
    if (e != ST_OK)
        return e;
    double t1 = st_now_s();
    for (int64_t g = 0; g < gen; g++) {
        int32_t id = (int32_t)l->ops->argmax(l->logits, l->n_vocab);
        if ((e = st_local_eval(l, &id, 1, n_prompt + g)) != ST_OK)
            return e;
    }
    *t_prompt = t1 - t0;
    *t_decode = st_now_s() - t1;
    return ST_OK;
}

static void br_stats(double *v, int64_t n, double *med, double *mn, double *mx)
{
    qsort(v, (size_t)n, sizeof(double), br_cmp);
    *mn = v[0];
    *mx = v[n - 1];
    *med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int st_bench_run(int argc, char **argv)
{
    br_opts o;
    int rc = br_parse(argc, argv, &o);
    if (rc != CLI_OPTS_GO)
        return rc;
    st_local l;
    st_err e = st_local_open(&l, o.model, (int)o.eng.threads, o.eng.ops, o.eng.chunk, 0,
                             cli_local_kv_dtype(&o.eng));
    if (e != ST_OK) {
        fprintf(stderr, "strata: bench run: %s\n", st_errmsg(e));
        return 1;
    }
    if (o.prompt + o.gen > l.n_ctx) {
        fprintf(stderr,
                "strata: bench run: --prompt %lld + --gen %lld exceed the context of %lld\n",
                (long long)o.prompt, (long long)o.gen, (long long)l.n_ctx);
        st_local_close(&l);
        return 2;
    }
    int32_t *prompt = malloc((size_t)o.prompt * sizeof(int32_t));
    double *tp = calloc((size_t)o.repeat, sizeof(double));
    double *td = calloc((size_t)o.repeat, sizeof(double));
    br_bw bw = {.n = BR_BW_BYTES / 8};
    uint64_t *bwbuf = malloc(BR_BW_BYTES);
    double bws[16];
    int n_bw = 0;
    rc = 1;
    if (!prompt || !tp || !td || !bwbuf) {
        fprintf(stderr, "strata: bench run: out of memory\n");
        goto out;
    }
    for (size_t k = 0; k < bw.n; k++)
        bwbuf[k] = k;
    bw.buf = bwbuf;
    /* a fixed, model-independent prompt: BOS then spread ids */
    for (int64_t i = 0; i < o.prompt; i++)
        prompt[i] = i == 0 ? 1 : (int32_t)((i * 7919 + 13) % l.n_vocab);

    const double bpt = br_bytes_per_token(l.m);
    printf("model: %s  weights read per decoded token %.3f GB  kernels %s  threads %d  "
           "chunk %lld\n",
           o.model, bpt / 1e9, l.ops->name, st_pool_size(l.pool), (long long)l.chunk);
    st_bench_print_cpu(l.ops);
    fflush(stdout);
    br_bandwidth(l.pool, &bw, 1, bws, &n_bw); /* warm-up pass */
    n_bw = 0;
    br_bandwidth(l.pool, &bw, BR_BW_RUNS, bws, &n_bw);
    double wp, wd;
    if ((e = br_round(&l, prompt, o.prompt, o.gen < 8 ? o.gen : 8, &wp, &wd)) != ST_OK) {
        fprintf(stderr, "strata: bench run: %s\n", st_errmsg(e));
        goto out;
    }
    double m0 = 0, s0 = 0, m1 = 0, s1 = 0;
    const int load_ok = br_cpu_busy(&m0, &s0) == 0;
    const double w0 = st_now_s();
    for (int64_t r = 0; r < o.repeat; r++) {
        double a, b;
        if ((e = br_round(&l, prompt, o.prompt, o.gen, &a, &b)) != ST_OK) {
            fprintf(stderr, "strata: bench run: %s\n", st_errmsg(e));
            goto out;
        }
        tp[r] = (double)o.prompt / a;
        td[r] = (double)o.gen / b;
        st_log(ST_LOG_DEBUG, "bench", "round %lld: prompt %.2f tok/s, decode %.2f tok/s",
               (long long)r, tp[r], td[r]);
    }
    const double wall = st_now_s() - w0;
    const int load_ok2 = load_ok && br_cpu_busy(&m1, &s1) == 0;
    br_bandwidth(l.pool, &bw, BR_BW_RUNS, bws, &n_bw);

    double bmed, bmin, bmax, pmed, pmin, pmax, dmed, dmin, dmax;
    br_stats(bws, n_bw, &bmed, &bmin, &bmax);
    br_stats(tp, o.repeat, &pmed, &pmin, &pmax);
    br_stats(td, o.repeat, &dmed, &dmin, &dmax);
    const double ceiling = bmed * 1e9 / bpt; /* tok/s if decode streamed at bmed */
    printf("bandwidth: %.2f GB/s read, %d threads (median of %d; min %.2f, max %.2f)\n", bmed,
           st_pool_size(l.pool), n_bw, bmin, bmax);
    if (load_ok2) {
        const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        const double other = ((m1 - m0) - (s1 - s0)) / (wall * (double)(ncpu > 0 ? ncpu : 1));
        printf("machine: other processes used %.0f%% of %ld CPUs during the timed rounds%s\n",
               100.0 * (other > 0 ? other : 0), ncpu, other > 0.05 ? " (figures disturbed)" : "");
    }
    printf("prompt: %.2f tok/s (min %.2f, max %.2f) %lld tokens, median of %lld\n", pmed, pmin,
           pmax, (long long)o.prompt, (long long)o.repeat);
    printf("decode: %.2f tok/s (min %.2f, max %.2f) %lld tokens, median of %lld; "
           "%.2f GB/s of weights = %.1f%% of the %.2f GB/s read bandwidth "
           "(ceiling %.2f tok/s)\n",
           dmed, dmin, dmax, (long long)o.gen, (long long)o.repeat, dmed * bpt / 1e9,
           100.0 * dmed * bpt / (bmed * 1e9), bmed, ceiling);
    rc = 0;
out:
    free(prompt);
    free(tp);
    free(td);
    free(bwbuf);
    st_local_close(&l);
    return rc;
}

/* ---- dispatch ---- */

int st_cmd_bench(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(int argc, char **argv);
    } subs[] = {
        {"run", st_bench_run},
        {"kernels", st_bench_kernels},
        {"wire-codec", st_bench_wire_codec},
        {"wire", st_bench_wire},
        {"wire-seal", st_bench_wire_seal},
    };
    const bool help = argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0);
    if (argc < 2 || help) {
        fprintf(help ? stdout : stderr,
                "usage: strata bench (run MODEL | kernels | wire-codec | wire MODEL | "
                "wire-seal) ...\n");
        return help ? 0 : 2;
    }
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
        if (strcmp(argv[1], subs[i].name) == 0)
            return subs[i].fn(argc - 1, argv + 1);
    fprintf(stderr,
            "strata: bench: unknown benchmark '%s' (run, kernels, wire-codec, wire, "
            "wire-seal)\n",
            argv[1]);
    return 2;
}
