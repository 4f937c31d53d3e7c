/* bench_wire.c - `strata bench wire MODEL`: the accuracy of each wire dtype,
 * as the wire accuracy gate measures it (worker/engine/wire_gate.h: an f32 greedy
 * reference, then the same path teacher-forced with the hidden state
 * through a real encode and decode of each dtype at every layer boundary).
 * Per dtype it prints top-1 agreement with f32, the margin rule, the mean
 * top-5 overlap, the max logit error, f16 clamps and the zstd (level 1)
 * compression ratio of those real hidden states (with byte planes for the
 * 16-bit dtypes). With --gate the exit status is 1 when a listed dtype
 * misses its gate (st_wgate_pass). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "common/wire/wire.h"
#include "worker/engine/wire_gate.h"

#define BW_N_MAX 100000
#define BW_THREADS_MAX 1024

int st_bench_wire(int argc, char **argv)
{
    const char *model = NULL, *wires = "f32,bf16,f16,i8";
    int32_t *prompt = NULL;
    size_t n_prompt = 0;
    int64_t n = ST_WGATE_CALIB_STEPS, threads = 0; /* the calibration run by default */
    int rc = 2;
    bool gate = false;
    cli_ids ids = {0};
    const st_opt rows[] = {
        {.name = "--wire", .type = ST_OPT_STR, .dest = &wires, .value = "f32,bf16,f16,i8",
         .help = "the dtypes measured (default all four)"},
        {.name = "--prompt-ids", .type = ST_OPT_FN, .dest = &ids, .fn = cli_ids_opt,
         .value = "1,2,3", .help = "the prompt (default: the calibration id)"},
        {.name = "-n", .type = ST_OPT_I64, .dest = &n, .min = 1, .max = BW_N_MAX, .value = "N",
         .help = "steps (default: the calibration's)"},
        {.name = "--threads", .type = ST_OPT_I64, .dest = &threads, .min = 1,
         .max = BW_THREADS_MAX, .value = "N", .help = "compute threads (default: the cores)"},
        {.name = "--gate", .type = ST_OPT_FLAG, .dest = &gate,
         .help = "exit 1 when a listed dtype misses its gate"},
    };
    size_t n_ops = 0;
    int st = cli_opts("bench wire",
                      "strata bench wire MODEL [--wire f32,bf16,f16,i8] [--prompt-ids 1,2,3] "
                      "[-n N] [--threads N] [--gate]",
                      rows, sizeof rows / sizeof rows[0], &model, 1, &n_ops, argc, argv);
    prompt = ids.ids;
    n_prompt = ids.n;
    if (st != CLI_OPTS_GO) {
        rc = st;
        goto out;
    }
    if (model == NULL) {
        fprintf(stderr, "usage: strata bench wire MODEL [--wire f32,bf16,f16,i8] "
                        "[--prompt-ids 1,2,3] [-n N] [--threads N] [--gate]\n");
        goto out;
    }
    if (prompt == NULL) {
        prompt = malloc(sizeof *prompt);
        prompt[0] = ST_WGATE_CALIB_ID;
        n_prompt = 1;
    }
    rc = 1;
    st_wgate *g;
    st_err e = st_wgate_open(model, (int)threads, 0, &g);
    if (e != ST_OK) {
        fprintf(stderr, "strata: bench wire: %s: %s\n", model, st_errmsg(e));
        goto out;
    }
    if ((int64_t)n_prompt + n > st_wgate_n_ctx(g)) {
        fprintf(stderr, "strata: bench wire: prompt + n exceeds the context of %lld\n",
                (long long)st_wgate_n_ctx(g));
        st_wgate_close(g);
        goto out;
    }
    /* 1: the f32 reference path */
    e = st_wgate_reference(g, prompt, n_prompt, n);
    int64_t n_layer = st_wgate_n_layer(g);
    printf("model %s: %lld layers, hidden %lld; %lld greedy steps after a %zu-token prompt; "
           "%lld boundaries\n",
           model, (long long)n_layer, (long long)st_wgate_n_embd(g), (long long)n, n_prompt,
           (long long)(n_layer - 1));
    printf("%-5s %8s %14s %11s %12s %8s %7s %7s %s\n", "wire", "top1%", "margin-argmax",
           "top5-mean", "max-logit-err", "clamps", "zstd", "planes", "gate");
    int failed = 0;
    const char *p = wires;
    while (e == ST_OK && *p) {
        char name[16];
        size_t k = strcspn(p, ",");
        snprintf(name, sizeof name, "%.*s", (int)(k < 15 ? k : 15), p);
        p += k + (p[k] == ',');
        st_wire_dtype d;
        if ((e = st_wire_dtype_from_name(name, &d)))
            break;
        st_wgate_figs s;
        if ((e = st_wgate_run(g, d, &s)) != ST_OK)
            break;
        const char *verdict;
        failed |= !st_wgate_pass(d, &s, ST_WGATE_I8_TOP1_MIN, &verdict);
        char pr[16] = "-";
        if (s.plane_bytes)
            snprintf(pr, sizeof pr, "%.3f", (double)s.raw_bytes / (double)s.plane_bytes);
        printf("%-5s %7.1f%% %7d/%-6d %11.3f %12.4g %8llu %7.3f %7s %s\n", name,
               st_wgate_top1_pct(&s), s.margin_steps - s.margin_fail, s.margin_steps,
               st_wgate_top5_mean(&s), s.max_err, (unsigned long long)s.clamps,
               (double)s.raw_bytes / (double)s.zstd_bytes, pr, verdict);
    }
    if (e != ST_OK) {
        fprintf(stderr, "strata: bench wire: %s\n", st_errmsg(e));
        rc = 1;
    } else {
        rc = gate && failed ? 1 : 0;
    }
    st_wgate_close(g);
out:
    free(prompt);
    return rc;
}
