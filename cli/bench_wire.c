/* bench_wire.c - `strata bench wire MODEL`: the accuracy of each wire dtype.
 *
 * First the model decodes greedily with f32 hidden states everywhere (the
 * reference path and logits). Then, teacher-forced along that same token
 * path, it runs again with the hidden state passed through a real encode and
 * decode of the activation packet (common/wire.c) of each dtype at every
 * boundary between two layers (all L-1 of them), and reports per dtype:
 * top-1 agreement with f32, whether the argmax agrees on every step whose
 * f32 top-1/top-2 margin exceeds 1% of the row's max |logit|, the mean
 * overlap of the top-5 sets, the max logit error, and the zstd (level 1)
 * compression ratio of those real hidden states (with byte planes for the
 * 16-bit dtypes). With --gate the exit
 * status is 1 when a listed dtype misses its gate: f16 and bf16 need the
 * margin rule on every step and a mean top-5 overlap >= 4.8; i8 needs top-1
 * agreement >= 90%. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/local.h"
#include "common/wire.h"

typedef struct bw_hook {
    st_wire_ctx *wctx;
    st_wire_dtype dtype;
    int64_t n_layer;
    uint8_t *buf;
    size_t cap;
    uint64_t clamps;
    uint64_t raw_bytes, zstd_bytes, plane_bytes; /* compressibility of real activations */
    st_err err;
} bw_hook;

static void bw_layer_hook(void *arg, int64_t layer, float *hidden, int64_t n_tok, int64_t n_embd)
{
    bw_hook *h = arg;
    if (layer + 1 >= h->n_layer || h->err != ST_OK)
        return; /* the last layer's output goes to the head, not over a wire */
    static const uint8_t plan[ST_WIRE_PLAN_HASH_SIZE];
    st_wire_hdr hdr = {.version = ST_WIRE_VERSION,
                       .dtype = h->dtype,
                       .stage = 1,
                       .epoch = 1,
                       .batch_id = 1,
                       .n_rows = 1,
                       .hidden = (uint32_t)n_embd,
                       .n_tokens = (uint32_t)n_tok};
    memcpy(hdr.plan_hash, plan, sizeof plan);
    st_wire_row row = {.session_id = 1, .pos0 = 0, .n_tokens = (uint32_t)n_tok};
    st_wire_opts o = {.dtype = h->dtype};
    st_wire_stats stats = {0};
    size_t len = 0;
    st_err e = st_wire_encode_buf(&hdr, &row, hidden, &o, h->wctx, h->buf, h->cap / 2, &len,
                                  &stats);
    if (e == ST_OK) {
        st_wire_expect exp = {.epoch = 1,
                              .plan_hash = plan,
                              .stage = 1,
                              .hidden = (uint32_t)n_embd,
                              .max_tokens = (uint32_t)n_tok};
        st_wire_hdr got;
        st_wire_row grow;
        e = st_wire_decode(h->wctx, h->buf, len, &exp, &got, &grow, 1, hidden,
                           (size_t)(n_tok * n_embd));
    }
    h->clamps += stats.n_clamped;
    /* the same hidden states with zstd (level 1), and byte planes for 16-bit
     * payloads: the compression ratio on real activations */
    for (int planes = 0; e == ST_OK && planes < 2; planes++) {
        if (planes && h->dtype != ST_WIRE_F16 && h->dtype != ST_WIRE_BF16)
            break;
        st_wire_opts oz = {.dtype = h->dtype, .zstd_level = 1, .plane_split = planes != 0};
        st_wire_stats sz = {0};
        size_t zl = 0;
        e = st_wire_encode_buf(&hdr, &row, hidden, &oz, h->wctx, h->buf + h->cap / 2, h->cap / 2,
                               &zl, &sz);
        if (planes) {
            h->plane_bytes += sz.wire_bytes;
        } else {
            h->raw_bytes += sz.raw_bytes;
            h->zstd_bytes += sz.wire_bytes;
        }
    }
    h->err = e;
}

static void bw_top5(const float *x, int64_t n, int64_t out[5])
{
    for (int k = 0; k < 5; k++) {
        int64_t best = -1;
        for (int64_t i = 0; i < n; i++) {
            int taken = 0;
            for (int j = 0; j < k; j++)
                taken |= out[j] == i;
            if (!taken && (best < 0 || x[i] > x[best]))
                best = i;
        }
        out[k] = best;
    }
}

typedef struct bw_stats {
    int steps, top1_agree, margin_steps, margin_fail;
    double top5_sum, max_err;
} bw_stats;

static void bw_compare(const float *ref, const float *got, int64_t n, bw_stats *s)
{
    int64_t r5[5], g5[5];
    bw_top5(ref, n, r5);
    bw_top5(got, n, g5);
    double scale = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)ref[i] - got[i]);
        if (d > s->max_err)
            s->max_err = d;
        if (fabs(ref[i]) > scale)
            scale = fabs(ref[i]);
    }
    int overlap = 0;
    for (int a = 0; a < 5; a++)
        for (int b = 0; b < 5; b++)
            overlap += r5[a] == g5[b];
    s->steps++;
    s->top1_agree += r5[0] == g5[0];
    s->top5_sum += overlap;
    if (ref[r5[0]] - ref[r5[1]] > 0.01 * scale) {
        s->margin_steps++;
        s->margin_fail += r5[0] != g5[0];
    }
}

int st_bench_wire(int argc, char **argv)
{
    const char *model = NULL, *wires = "f32,bf16,f16,i8";
    int32_t *prompt = NULL;
    size_t n_prompt = 0;
    int64_t n = 64, threads = 0;
    int gate = 0, rc = 2;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (strcmp(argv[i], "--wire") == 0) {
            if (!(wires = cli_need_value(argc, argv, &i)))
                goto out;
        } else if (strcmp(argv[i], "--prompt-ids") == 0) {
            if (!(v = cli_need_value(argc, argv, &i)) ||
                cli_parse_ids("--prompt-ids", v, &prompt, &n_prompt))
                goto out;
        } else if (strcmp(argv[i], "-n") == 0) {
            if (!(v = cli_need_value(argc, argv, &i)) || cli_parse_i64("-n", v, 1, 100000, &n))
                goto out;
        } else if (strcmp(argv[i], "--threads") == 0) {
            if (!(v = cli_need_value(argc, argv, &i)) ||
                cli_parse_i64("--threads", v, 1, 1024, &threads))
                goto out;
        } else if (strcmp(argv[i], "--gate") == 0) {
            gate = 1;
        } else if (argv[i][0] != '-' && model == NULL) {
            model = argv[i];
        } else {
            fprintf(stderr, "strata: bench wire: unexpected argument '%s'\n", argv[i]);
            goto out;
        }
    }
    if (model == NULL) {
        fprintf(stderr, "usage: strata bench wire MODEL [--wire f32,bf16,f16,i8] "
                        "[--prompt-ids 1,2,3] [-n N] [--threads N] [--gate]\n");
        goto out;
    }
    if (prompt == NULL) {
        prompt = malloc(sizeof *prompt);
        prompt[0] = 1;
        n_prompt = 1;
    }
    rc = 1;
    cli_local l;
    st_err e = cli_local_open(&l, model, (int)threads, 0, 128, 0);
    if (e != ST_OK) {
        fprintf(stderr, "strata: bench wire: %s: %s\n", model, st_errmsg(e));
        goto out;
    }
    const st_hparams *hp = st_model_hparams(l.m);
    if ((int64_t)n_prompt + n > l.n_ctx) {
        fprintf(stderr, "strata: bench wire: prompt + n exceeds the context of %lld\n",
                (long long)l.n_ctx);
        cli_local_close(&l);
        goto out;
    }
    size_t V = (size_t)l.n_vocab;
    float *ref = malloc((size_t)n * V * sizeof(float));
    int32_t *path = malloc(((size_t)n + n_prompt) * sizeof *path);
    memcpy(path, prompt, n_prompt * sizeof *path);
    /* 1: the f32 reference path */
    e = cli_local_eval(&l, prompt, (int64_t)n_prompt, 0);
    for (int64_t s = 0; e == ST_OK && s < n; s++) {
        memcpy(ref + (size_t)s * V, l.logits, V * sizeof(float));
        int32_t id = (int32_t)l.ops->argmax(l.logits, l.n_vocab);
        path[n_prompt + (size_t)s] = id;
        if (s + 1 < n)
            e = cli_local_eval(&l, &id, 1, (int64_t)n_prompt + s);
    }
    printf("model %s: %lld layers, hidden %lld; %lld greedy steps after a %zu-token prompt; "
           "%lld boundaries\n",
           model, (long long)hp->n_layer, (long long)hp->n_embd, (long long)n, n_prompt,
           (long long)(hp->n_layer - 1));
    printf("%-5s %8s %14s %11s %12s %8s %7s %7s %s\n", "wire", "top1%", "margin-argmax",
           "top5-mean", "max-logit-err", "clamps", "zstd", "planes", "gate");
    int failed = 0;
    bw_hook hk = {.n_layer = hp->n_layer, .cap = 0};
    if (e == ST_OK)
        e = st_wire_ctx_new(0, &hk.wctx);
    /* two halves, each room for a 128-token f32 packet with its header and
     * zstd's worst-case expansion */
    hk.cap = 2 * (65536 + (size_t)128 * (size_t)hp->n_embd * 6);
    hk.buf = malloc(hk.cap);
    const char *p = wires;
    while (e == ST_OK && *p) {
        char name[16];
        size_t k = strcspn(p, ",");
        snprintf(name, sizeof name, "%.*s", (int)(k < 15 ? k : 15), p);
        p += k + (p[k] == ',');
        if ((e = st_wire_dtype_from_name(name, &hk.dtype)))
            break;
        hk.err = ST_OK;
        hk.clamps = 0;
        hk.raw_bytes = hk.zstd_bytes = hk.plane_bytes = 0;
        st_stage_set_hook(l.ctx, bw_layer_hook, &hk);
        bw_stats s = {0};
        e = cli_local_eval(&l, path, (int64_t)n_prompt, 0);
        for (int64_t st = 0; e == ST_OK && hk.err == ST_OK && st < n; st++) {
            bw_compare(ref + (size_t)st * V, l.logits, l.n_vocab, &s);
            if (st + 1 < n)
                e = cli_local_eval(&l, &path[n_prompt + (size_t)st], 1, (int64_t)n_prompt + st);
        }
        st_stage_set_hook(l.ctx, NULL, NULL);
        if (e == ST_OK)
            e = hk.err;
        if (e != ST_OK)
            break;
        double top1 = 100.0 * s.top1_agree / s.steps, top5 = s.top5_sum / s.steps;
        const char *verdict;
        if (hk.dtype == ST_WIRE_I8)
            verdict = top1 >= 90.0 ? "pass (top1 >= 90%)" : "FAIL (top1 < 90%)";
        else if (hk.dtype == ST_WIRE_F32)
            verdict = s.max_err == 0 ? "pass (exact)" : "FAIL (f32 not exact)";
        else
            verdict = (s.margin_fail == 0 && top5 >= 4.8) ? "pass (margin argmax, top5 >= 4.8)"
                                                          : "FAIL (margin argmax or top5 < 4.8)";
        failed |= verdict[0] == 'F';
        char pr[16] = "-";
        if (hk.plane_bytes)
            snprintf(pr, sizeof pr, "%.3f", (double)hk.raw_bytes / (double)hk.plane_bytes);
        printf("%-5s %7.1f%% %7d/%-6d %11.3f %12.4g %8llu %7.3f %7s %s\n", name, top1,
               s.margin_steps - s.margin_fail, s.margin_steps, top5, s.max_err,
               (unsigned long long)hk.clamps, (double)hk.raw_bytes / (double)hk.zstd_bytes, pr,
               verdict);
    }
    if (e != ST_OK) {
        fprintf(stderr, "strata: bench wire: %s\n", st_errmsg(e));
        rc = 1;
    } else {
        rc = gate && failed ? 1 : 0;
    }
    st_wire_ctx_free(hk.wctx);
    free(hk.buf);
    free(ref);
    free(path);
    cli_local_close(&l);
out:
    free(prompt);
    return rc;
}
