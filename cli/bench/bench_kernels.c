/* bench_kernels.c - `strata bench kernels`: the speed of each kernel.
 *
 * For every weight dtype, mul_mat is timed at two shapes of a TinyLlama-
 * sized model: decode (one activation row against the 32000 x 2048 output
 * head, whose weights do not fit in the L3 cache, so the figure is weight
 * streaming from memory), batch (the same matrix against 2, 4 and 8
 * activation rows, or the sizes of --batch: decode of several sessions in
 * one step, still streaming) and prefill (64 activation rows against a
 * 5632 x 2048 FFN matrix, compute-bound). Rows are split over the pool's
 * threads as the engine does. Each line gives the time per call, the GB/s
 * of weight bytes read and the GFLOP/s (2 flops per multiply-add), the
 * median of several timed runs. Before timing, each product is checked
 * against the reference kernels on a few rows ("ref: bit-exact" or the
 * largest relative difference), so a fast but wrong kernel shows at once.
 * Row operations (rmsnorm, rope, softmax, silu_mul, add, attn_head over
 * f32, f16 and Q8_0 caches, the Q8_0 activation quantizer) follow at the
 * engine's sizes. Dtypes with an
 * R8 product in the chosen variant (Q8_0, Q4_0, Q4_K, Q6_K with AVX2 or
 * AVX-512) are timed twice: in the file's layout and in the R8 layout the
 * engine repacks them into at load (lines "q8_0r8", "q4_0r8", "q4_kr8",
 * "q6_kr8"). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "common/base/clock.h"
#include "common/base/pool.h"
#include "kernels/kernels.h"
#include "kernels/rope.h"
#include "kernels/repack.h"

typedef struct bk_opts {
    int64_t threads;
    int force_ref;
    int variant;     /* an st_kvariant named by --kernels, or -1 (auto / ref) */
    int dtype;       /* the st_dtype named by --type, or -1 (all) */
    double min_time; /* seconds per timed run */
    int64_t runs;    /* timed runs per figure */
} bk_opts;

typedef struct bk_mm {
    const st_kernel_ops *ops;
    st_dtype t;
    int64_t n, rows, nx;
    size_t w_stride, x_stride;
    unsigned char *w, *x;
    unsigned char *wr; /* the R8 layout of w (kernels/repack.h), or NULL */
    float *y;
} bk_mm;

static uint64_t bk_rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void bk_fill(uint64_t *s, float *x, int64_t n, float scale)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)((double)(bk_rng(s) >> 11) * 0x1p-52 - 1.0) * scale;
}

static int bk_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void bk_mm_job(void *arg, int ith, int nth)
{
    bk_mm *m = arg;
    /* split in multiples of 8 rows, as the engine does */
    long b, e;
    st_pool_split((long)((m->rows + 7) / 8), ith, nth, &b, &e);
    b *= 8;
    e *= 8;
    if (e > m->rows)
        e = m->rows;
    if (b < e && m->wr != NULL)
        m->ops->mul_mat_r8[m->t](m->n, m->wr, m->w_stride, b, e, m->x, m->x_stride, m->nx, m->y,
                                 m->rows);
    else if (b < e)
        m->ops->mul_mat[m->t](m->n, m->w, m->w_stride, b, e, m->x, m->x_stride, m->nx, m->y,
                              m->rows);
}

/* bk_mm_init - random weights (quantized by the reference, or random
 * blocks for the K-quants) and activations. */
static int bk_mm_init(bk_mm *m, const st_kernel_ops *ops, st_dtype t, int64_t n, int64_t rows,
                      int64_t nx, int r8)
{
    memset(m, 0, sizeof *m);
    m->ops = ops;
    m->t = t;
    m->n = n;
    m->rows = rows;
    m->nx = nx;
    st_dtype act = st_dtype_info_of(t)->act;
    if (st_row_size(t, n, &m->w_stride) || st_row_size(act, n, &m->x_stride))
        return -1;
    m->w = malloc(m->w_stride * (size_t)rows);
    m->x = malloc(m->x_stride * (size_t)nx);
    m->y = malloc(sizeof(float) * (size_t)(rows * nx));
    float *tmp = malloc(sizeof(float) * (size_t)n);
    if (!m->w || !m->x || !m->y || !tmp) {
        free(tmp);
        return -1;
    }
    const st_kernel_ops *ref = st_kernels_ref();
    uint64_t s = 1234 + (uint64_t)t;
    if (ref->from_float[t] != NULL) {
        for (int64_t i = 0; i < rows; i++) {
            bk_fill(&s, tmp, n, 0.1f);
            ref->from_float[t](tmp, m->w + (size_t)i * m->w_stride, n);
        }
    } else { /* K-quants (read, never written): random bytes; each odd byte's
              * top nibble 0x2 keeps every 16-bit slot, so every f16 block
              * scale, a normal half in [2^-7, 2^-6) */
        uint8_t *wb = m->w;
        for (size_t k = 0; k < m->w_stride * (size_t)rows; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            const uint8_t byte = (uint8_t)(s >> 56);
            wb[k] = k % 2 ? (uint8_t)(0x20 | (byte & 0x0f)) : byte;
        }
    }
    for (int64_t j = 0; j < nx; j++) {
        bk_fill(&s, tmp, n, 2.0f);
        ref->from_float[act](tmp, m->x + (size_t)j * m->x_stride, n);
    }
    free(tmp);
    if (r8) {
        if ((m->wr = malloc(m->w_stride * (size_t)rows)) == NULL ||
            st_r8_repack(t, n, m->w, m->w_stride, rows, m->wr) != ST_K_OK)
            return -1;
    }
    return 0;
}

static void bk_mm_free(bk_mm *m)
{
    free(m->wr);
    free(m->w);
    free(m->x);
    free(m->y);
}

/* bk_check - compares the first rows of m against the reference; returns
 * the largest relative difference (0 = bit-exact). */
static double bk_check(const bk_mm *m)
{
    const st_kernel_ops *ref = st_kernels_ref();
    const int64_t rows = m->rows < 37 ? m->rows : 37;
    float *a = malloc(sizeof(float) * (size_t)(rows * m->nx));
    float *b = malloc(sizeof(float) * (size_t)(rows * m->nx));
    if (!a || !b) {
        free(a);
        free(b);
        return INFINITY;
    }
    if (m->wr != NULL)
        m->ops->mul_mat_r8[m->t](m->n, m->wr, m->w_stride, 0, rows, m->x, m->x_stride, m->nx, a,
                                 rows);
    else
        m->ops->mul_mat[m->t](m->n, m->w, m->w_stride, 0, rows, m->x, m->x_stride, m->nx, a, rows);
    ref->mul_mat[m->t](m->n, m->w, m->w_stride, 0, rows, m->x, m->x_stride, m->nx, b, rows);
    double worst = 0.0;
    for (int64_t k = 0; k < rows * m->nx; k++) {
        if (memcmp(&a[k], &b[k], sizeof(float)) == 0)
            continue;
        double d = fabs((double)a[k] - (double)b[k]) / (fabs((double)b[k]) + 1e-30);
        worst = d > worst ? d : worst;
        if (worst == 0.0)
            worst = 1e-300; /* differing bits (e.g. signed zero) */
    }
    free(a);
    free(b);
    return worst;
}

/* bk_time - median seconds per call of fn(arg) on the pool. */
static double bk_time(st_pool *pool, st_pool_fn fn, void *arg, const bk_opts *o)
{
    st_pool_run(pool, fn, arg); /* warm-up */
    double t0 = st_now_s();
    int64_t calls = 0;
    do {
        st_pool_run(pool, fn, arg);
        calls++;
    } while (st_now_s() - t0 < o->min_time / 4);
    const double per = (st_now_s() - t0) / (double)calls;
    int64_t reps = (int64_t)(o->min_time / per) + 1;
    double med[32];
    int64_t runs = o->runs < 32 ? o->runs : 32;
    for (int64_t r = 0; r < runs; r++) {
        double t = st_now_s();
        for (int64_t k = 0; k < reps; k++)
            st_pool_run(pool, fn, arg);
        med[r] = (st_now_s() - t) / (double)reps;
    }
    qsort(med, (size_t)runs, sizeof(double), bk_cmp_double);
    return med[runs / 2];
}

static void bk_bench_mm(st_pool *pool, const st_kernel_ops *ops, st_dtype t, int r8,
                        const char *shape, int64_t n, int64_t rows, int64_t nx, const bk_opts *o)
{
    bk_mm m;
    if (bk_mm_init(&m, ops, t, n, rows, nx, r8) != 0) {
        fprintf(stderr, "strata: bench kernels: out of memory for %s %s\n",
                st_dtype_info_of(t)->name, shape);
        bk_mm_free(&m);
        return;
    }
    const double diff = bk_check(&m);
    const double s = bk_time(pool, bk_mm_job, &m, o);
    const double wbytes = (double)m.w_stride * (double)rows;
    const double flops = 2.0 * (double)n * (double)rows * (double)nx;
    char chk[48];
    if (diff == 0.0)
        snprintf(chk, sizeof chk, "ref: bit-exact");
    else
        snprintf(chk, sizeof chk, "ref: max rel diff %.2g", diff);
    char name[16];
    snprintf(name, sizeof name, "%s%s", st_dtype_info_of(t)->name, r8 ? "r8" : "");
    printf("mul_mat %-7s %-7s %5lld x %-5lld nx=%-3lld %9.3f ms %7.2f GB/s %8.2f GFLOP/s  %s\n",
           name, shape, (long long)rows, (long long)n, (long long)nx, s * 1e3, wbytes / s / 1e9,
           flops / s / 1e9, chk);
    fflush(stdout);
    bk_mm_free(&m);
}

/* ---- row operations: per-token work over T tokens, split by token ---- */

typedef struct bk_row {
    const st_kernel_ops *ops;
    int op;
    int64_t T;
    float *a, *b, *c, *scores;
    int64_t nth_scores;
    unsigned char *kv16, *kvq8; /* b's K and V rows converted to f16 and Q8_0 */
} bk_row;

enum { BK_RMSNORM, BK_ROPE, BK_SOFTMAX, BK_SILU, BK_ADD, BK_ATTN, BK_ATTN_F16, BK_ATTN_Q8, BK_QUANT,
       BK_OPS };

static const char *const bk_row_names[BK_OPS] = {
    "rmsnorm", "rope", "softmax", "silu_mul", "add", "attn_head", "attn_f16", "attn_q8_0",
    "quant_q8_0"};

/* sizes: n_embd 2048, n_ff 5632, 32 heads of 64, 4 KV heads (kv_dim 256),
 * context 128; the typed caches' rows: f16 2 bytes a value, Q8_0 34 per 32 */
#define BK_E 2048
#define BK_F 5632
#define BK_CTX 128
#define BK_KV_DIM 256
#define BK_ROW_F16 (BK_KV_DIM * 2)
#define BK_ROW_Q8 (BK_KV_DIM / 32 * 34)

/* bk_attn_typed - the 32 heads of token t over a typed cache: K rows at
 * kv, V rows BK_CTX rows after them, row bytes apart, heads of 64 values
 * head bytes apart (every 8 query heads share one KV head). */
static void bk_attn_typed(const bk_row *r, long t, int ith, const unsigned char *kv, st_dtype dt,
                          size_t row, size_t head)
{
    for (int64_t h = 0; h < 32; h++) {
        const st_attn_args a = {.q = r->a + t * BK_E + h * 64,
                                .k = kv + (h / 8) * head,
                                .v = kv + (size_t)BK_CTX * row + (h / 8) * head,
                                .kv_stride = row,
                                .kv_dtype = dt,
                                .kv0 = 0,
                                .n_kv = BK_CTX,
                                .head_dim = 64,
                                .scale = 0.125f,
                                .scores = r->scores + (size_t)ith * BK_CTX,
                                .out = r->c + t * BK_E + h * 64};
        r->ops->attn_head(&a);
    }
}

static void bk_row_job(void *arg, int ith, int nth)
{
    bk_row *r = arg;
    long b, e;
    st_pool_split((long)r->T, ith, nth, &b, &e);
    for (long t = b; t < e; t++) {
        switch (r->op) {
        case BK_RMSNORM:
            r->ops->rmsnorm(r->a + t * BK_E, r->b, r->c + t * BK_E, BK_E, 1e-5f);
            break;
        case BK_ROPE: { /* the angles (once per token) and the rotation */
            const st_rope_params rp = {.n_rot = 64, .base = 10000.0f, .freq_scale = 1.0f,
                                       .attn_factor = 1.0f};
            float cs[64];
            st_rope_cs(&rp, 100 + t, cs);
            r->ops->rope(r->c + t * BK_E, 32, 64, 64, cs);
            break;
        }
        case BK_SOFTMAX:
            memcpy(r->scores + (size_t)ith * BK_CTX, r->a + t * BK_CTX, BK_CTX * sizeof(float));
            r->ops->softmax(r->scores + (size_t)ith * BK_CTX, BK_CTX);
            break;
        case BK_SILU:
            memcpy(r->c + t * BK_F, r->a + t * BK_F, BK_F * sizeof(float));
            r->ops->silu_mul(r->c + t * BK_F, r->b + t * BK_F, BK_F);
            break;
        case BK_ADD:
            r->ops->add(r->c + t * BK_E, r->a + t * BK_E, BK_E);
            break;
        case BK_ATTN:
            for (int64_t h = 0; h < 32; h++) {
                const st_attn_args a = {.q = r->a + t * BK_E + h * 64,
                                        .k = r->b + (h / 8) * 64,
                                        .v = r->b + (size_t)BK_CTX * 256 + (h / 8) * 64,
                                        .kv_stride = 256 * sizeof(float),
                                        .kv_dtype = ST_DT_F32,
                                        .kv0 = 0,
                                        .n_kv = BK_CTX,
                                        .head_dim = 64,
                                        .scale = 0.125f,
                                        .scores = r->scores + (size_t)ith * BK_CTX,
                                        .out = r->c + t * BK_E + h * 64};
                r->ops->attn_head(&a);
            }
            break;
        case BK_ATTN_F16:
            bk_attn_typed(r, t, ith, r->kv16, ST_DT_F16, BK_ROW_F16, 64 * 2);
            break;
        case BK_ATTN_Q8:
            bk_attn_typed(r, t, ith, r->kvq8, ST_DT_Q8_0, BK_ROW_Q8, 64 / 32 * 34);
            break;
        case BK_QUANT:
            r->ops->from_float[ST_DT_Q8_0](r->a + t * BK_E,
                                           (unsigned char *)r->c + (size_t)t * (BK_E / 32) * 34,
                                           BK_E);
            break;
        }
    }
}

static void bk_bench_rows(st_pool *pool, const st_kernel_ops *ops, int64_t T, const bk_opts *o)
{
    const size_t big = (size_t)T * BK_F + (size_t)BK_CTX * 512;
    bk_row r = {.ops = ops, .T = T};
    r.a = malloc(big * sizeof(float));
    r.b = malloc(big * sizeof(float));
    r.c = malloc(big * sizeof(float));
    r.scores = malloc((size_t)st_pool_size(pool) * BK_CTX * sizeof(float));
    r.kv16 = malloc((size_t)2 * BK_CTX * BK_ROW_F16);
    r.kvq8 = malloc((size_t)2 * BK_CTX * BK_ROW_Q8);
    if (!r.a || !r.b || !r.c || !r.scores || !r.kv16 || !r.kvq8) {
        fprintf(stderr, "strata: bench kernels: out of memory\n");
        goto out;
    }
    uint64_t s = 99;
    bk_fill(&s, r.a, (int64_t)big, 1.0f);
    bk_fill(&s, r.b, (int64_t)big, 1.0f);
    bk_fill(&s, r.c, (int64_t)big, 1.0f);
    for (int64_t i = 0; i < 2 * BK_CTX; i++) { /* the K rows, then the V rows */
        ops->from_float[ST_DT_F16](r.b + i * BK_KV_DIM, r.kv16 + i * BK_ROW_F16, BK_KV_DIM);
        ops->from_float[ST_DT_Q8_0](r.b + i * BK_KV_DIM, r.kvq8 + i * BK_ROW_Q8, BK_KV_DIM);
    }
    for (int op = 0; op < BK_OPS; op++) {
        r.op = op;
        const double sec = bk_time(pool, bk_row_job, &r, o);
        /* bytes touched per token and flops per token (approximate) */
        double bytes = 0, flops = 0;
        switch (op) {
        case BK_RMSNORM:
            bytes = 3.0 * BK_E * 4;
            flops = 4.0 * BK_E;
            break;
        case BK_ROPE:
            bytes = 2.0 * BK_E * 4;
            flops = 3.0 * BK_E;
            break;
        case BK_SOFTMAX:
            bytes = 2.0 * BK_CTX * 4;
            flops = 4.0 * BK_CTX;
            break;
        case BK_SILU:
            bytes = 3.0 * BK_F * 4;
            flops = 5.0 * BK_F;
            break;
        case BK_ADD:
            bytes = 3.0 * BK_E * 4;
            flops = 1.0 * BK_E;
            break;
        case BK_ATTN:
            bytes = 32.0 * (2.0 * BK_CTX * 64 * 4);
            flops = 32.0 * 4.0 * BK_CTX * 64;
            break;
        case BK_ATTN_F16:
            bytes = 32.0 * (2.0 * BK_CTX * 64 * 2);
            flops = 32.0 * 4.0 * BK_CTX * 64;
            break;
        case BK_ATTN_Q8:
            bytes = 32.0 * (2.0 * BK_CTX * 64 / 32 * 34);
            flops = 32.0 * 4.0 * BK_CTX * 64;
            break;
        case BK_QUANT:
            bytes = BK_E * 4.0 + BK_E / 32 * 34.0;
            flops = 3.0 * BK_E;
            break;
        }
        printf("%-10s %-7s T=%-3lld %9.3f ms %7.2f GB/s %8.2f GFLOP/s\n", bk_row_names[op],
               T == 1 ? "decode" : "prefill", (long long)T, sec * 1e3,
               bytes * (double)T / sec / 1e9, flops * (double)T / sec / 1e9);
        fflush(stdout);
    }
out:
    free(r.a);
    free(r.b);
    free(r.c);
    free(r.scores);
    free(r.kv16);
    free(r.kvq8);
}

#define BK_THREADS_MAX 1024
#define BK_TIME_MIN 0.001
#define BK_TIME_MAX 60.0
#define BK_RUNS_MAX 31
#define BK_BATCHES_MAX 8
#define BK_BATCH_MAX 512
#define BK_BATCH_TEXT_MAX 128 /* --batch's text at most (longer: refused) */

/* --batch N,N,...: the batch sizes of the batched mul_mat figures. */
typedef struct bk_batches {
    int64_t v[BK_BATCHES_MAX];
    int n;
} bk_batches;

/* bk_kernels_opt - --kernels ref|auto|avx2|avx512 into the bk_opts dest. */
static st_err bk_kernels_opt(const char *v, void *dest)
{
    bk_opts *o = dest;
    if (strcmp(v, "ref") == 0) {
        o->force_ref = 1;
        return ST_OK;
    }
    if (strcmp(v, "auto") == 0)
        return ST_OK;
    const st_kvariant k = st_kvariant_from_name(v);
    if (k == ST_KVAR_COUNT)
        return st_errorf(ST_EINVAL, "'%s' is not ref, auto, avx2 or avx512", v);
    o->variant = (int)k;
    return ST_OK;
}

/* bk_type_opt - --type DTYPE into the int dest (an st_dtype). */
static st_err bk_type_opt(const char *v, void *dest)
{
    st_dtype t;
    if (st_dtype_from_name(v, &t) != ST_K_OK)
        return st_errorf(ST_EINVAL, "unknown dtype '%s'", v);
    *(int *)dest = (int)t;
    return ST_OK;
}

/* bk_batch_opt - --batch N,N,...: 1..BK_BATCHES_MAX sizes of 1..512. */
static st_err bk_batch_opt(const char *v, void *dest)
{
    bk_batches *b = dest;
    char buf[BK_BATCH_TEXT_MAX];
    if (strlen(v) >= sizeof buf)
        return st_errorf(ST_EINVAL, "'%s' is longer than %d bytes", v, BK_BATCH_TEXT_MAX - 1);
    snprintf(buf, sizeof buf, "%s", v);
    bk_batches nb = {.n = 0};
    for (char *sv = NULL, *tok = strtok_r(buf, ",", &sv); tok; tok = strtok_r(NULL, ",", &sv)) {
        if (nb.n == BK_BATCHES_MAX)
            return st_errorf(ST_EINVAL, "at most %d sizes", BK_BATCHES_MAX);
        char *end;
        errno = 0;
        long long x = strtoll(tok, &end, 10);
        if (end == tok || *end != '\0' || errno != 0 || x < 1 || x > BK_BATCH_MAX)
            return st_errorf(ST_EINVAL, "'%s' is not a batch size in 1..%d", tok, BK_BATCH_MAX);
        nb.v[nb.n++] = x;
    }
    *b = nb;
    return ST_OK;
}

static const char *const bk_only_names[] = {"mul_mat", "rows", NULL};

int st_bench_kernels(int argc, char **argv)
{
    bk_opts o =
        {.threads = 0, .force_ref = 0, .variant = -1, .dtype = -1, .min_time = 0.2, .runs = 5};
    const char *only = NULL;
    bk_batches bb = {.v = {2, 4, 8}, .n = 3}; /* small batches (decode of several sessions) */
    const st_opt rows[] = {
        {.name = "--threads", .alias = "-t", .type = ST_OPT_I64, .dest = &o.threads, .min = 1,
         .max = BK_THREADS_MAX, .value = "N", .help = "compute threads (default: the cores)"},
        {.name = "--kernels", .type = ST_OPT_FN, .dest = &o, .fn = bk_kernels_opt,
         .value = "ref|auto|avx2|avx512", .help = "the kernels (default auto: the best)"},
        {.name = "--time", .type = ST_OPT_DOUBLE, .dest = &o.min_time, .dmin = BK_TIME_MIN,
         .dmax = BK_TIME_MAX, .value = "SECONDS", .help = "seconds per timed run (default 0.2)"},
        {.name = "--runs", .type = ST_OPT_I64, .dest = &o.runs, .min = 1, .max = BK_RUNS_MAX,
         .value = "N", .help = "timed runs per figure (default 5)"},
        {.name = "--only", .type = ST_OPT_CHOICE, .dest = &only, .choices = bk_only_names,
         .value = "mul_mat|rows", .help = "one family of kernels"},
        {.name = "--type", .type = ST_OPT_FN, .dest = &o.dtype, .fn = bk_type_opt,
         .value = "DTYPE", .help = "one weight dtype (default all)"},
        {.name = "--batch", .type = ST_OPT_FN, .dest = &bb, .fn = bk_batch_opt,
         .value = "N,N,...", .help = "the batch sizes (default 2,4,8)"},
    };
    int st = cli_opts("bench kernels",
                      "strata bench kernels [--threads N] [--kernels ref|auto|avx2|avx512] "
                      "[--time SECONDS] [--runs N] [--only mul_mat|rows] [--type DTYPE] "
                      "[--batch N,N,...]",
                      rows, sizeof rows / sizeof rows[0], NULL, 0, NULL, argc, argv);
    if (st != CLI_OPTS_GO)
        return st;
    const int64_t *batch = bb.v;
    const int nbatch = bb.n;
    const st_kernel_ops *ops = o.variant >= 0 ? st_kernels_get((st_kvariant)o.variant)
                                              : st_kernels_select(o.force_ref);
    if (ops == NULL) {
        fprintf(stderr, "strata: bench kernels: variant %s is not supported by this CPU or build\n",
                st_kvariant_name((st_kvariant)o.variant));
        return 1;
    }
    st_pool *pool = NULL;
    st_err e = st_pool_open((int)o.threads, 1, &pool);
    if (e != ST_OK) {
        fprintf(stderr, "strata: bench kernels: %s\n", st_errmsg(e));
        return 1;
    }
    printf("kernels %s, %d threads; median of %lld runs of >= %.2f s\n", ops->name,
           st_pool_size(pool), (long long)o.runs, o.min_time);
    st_bench_print_cpu(ops);
    st_bench_print_bandwidth(pool);
    fflush(stdout);
    if (only == NULL || strcmp(only, "mul_mat") == 0) {
        for (int t = 0; t < ST_DT_COUNT; t++) {
            if (ops->mul_mat[t] == NULL) /* Q8_K: activations only */
                continue;
            if (o.dtype >= 0 && t != o.dtype)
                continue;
            /* the plain layout, then the R8 layout the engine serves (Q8_0, Q4_0) */
            for (int r8 = 0; r8 < 2; r8++) {
                if (r8 && ops->mul_mat_r8[t] == NULL)
                    continue;
                bk_bench_mm(pool, ops, (st_dtype)t, r8, "decode", BK_E, 32000, 1, &o);
                for (int b = 0; b < nbatch; b++)
                    bk_bench_mm(pool, ops, (st_dtype)t, r8, "batch", BK_E, 32000, batch[b], &o);
                bk_bench_mm(pool, ops, (st_dtype)t, r8, "prefill", BK_E, BK_F, 64, &o);
            }
        }
    }
    if (only == NULL || strcmp(only, "rows") == 0) {
        bk_bench_rows(pool, ops, 1, &o);
        bk_bench_rows(pool, ops, 64, &o);
    }
    st_pool_close(pool);
    return 0;
}
