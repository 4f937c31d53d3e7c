/* cmd_run.c - `strata run`: generate text with the whole model in this
 * process (the stage [0, n_layer) with embedding and head).
 *
 * The prompt is prefilled in chunks, then one token is decoded per step
 * until a stop of common/text/gen.h: -n tokens, EOS or EOT, or the context's
 * end. --force-ids replaces the
 * sampled token of each step by the given one (teacher forcing) so that
 * --logits-out can be compared step by step with a reference. Text is
 * streamed through the detokenizer, which never splits a UTF-8 character. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "common/base/clock.h"
#include "common/text/gen.h"
#include "common/base/log.h"
#include "common/text/sampling.h"
#include "common/text/tokenizer.h"
#include "include/strata.h"
#include "worker/engine/local.h"

#define ST_RUN_MAX_SHARDS 64

/* --shards: the chain of shard servers run through libstrata (include/strata.h,
 * docs/shards.md) instead of the local engine; the model file gives the
 * embedding, head and tokenizer only. */
typedef struct run_shard_opts {
    char *list;          /* --shards ADDR[,ADDR...] (a copy, split in place) */
    const char *key;     /* --shard-key FILE */
    const char *embed;   /* --embed ADDR: an embedding service's NNG address */
    const char *dtype;   /* --shard-dtype f32|bf16|f16|i8 */
    int64_t timeout_ms;  /* --shard-timeout-ms */
    int64_t pause_after; /* --pause-after N: test hold point (0: none) */
} run_shard_opts;

typedef struct run_opts {
    const char *model;
    const char *prompt;
    int32_t *prompt_ids;
    size_t n_prompt_ids;
    int32_t *force;
    size_t n_force;
    int64_t n;
    int n_set;
    cli_local_opts eng; /* --threads, --chunk, --ctx, --kernels */
    int ids_only;
    const char *logits_out;
    st_sampler_params sp;
    run_shard_opts sh; /* --shards and its flags */
} run_opts;

static const char run_synopsis[] =
    "strata run MODEL (--prompt TEXT | --prompt-ids 1,2,3) [-n N] [--temp T]\n"
    "       [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--seed S]\n"
    "       [--threads N] [--ctx N] [--chunk N] [--ids] [--logits-out FILE]\n"
    "       [--force-ids a,b,c] [--kernels ref|auto|avx2|avx512] [--cache-type f32|f16|q8_0]\n"
    "       [--shards ADDR[,ADDR...] [--embed ADDR] [--shard-key FILE]\n"
    "        [--shard-dtype f32|bf16|f16|i8]\n"
    "        [--shard-timeout-ms N] [--pause-after N]]";

#define RUN_N_MAX (1 << 24)
#define RUN_SHARD_TIMEOUT_MAX_MS 86400000
#define RUN_ROWS 12 /* run_parse's own rows */

/* run_parse - CLI_OPTS_GO to run, else the exit status (cli_opts). */
static int run_parse(int argc, char **argv, run_opts *o)
{
    memset(o, 0, sizeof *o);
    o->sp = st_sampler_params_default();
    o->n = 64;
    o->eng.chunk = 128;
    cli_ids prompt_ids = {0}, force = {0};
    int64_t n_predict = -1; /* -1: no -n */
    bool ids_only = false;
    const char *shards = NULL;
    st_opt rows[RUN_ROWS + CLI_SAMPLING_ROWS + CLI_LOCAL_ROWS] = {
        {.name = "--prompt", .type = ST_OPT_STR, .dest = &o->prompt, .value = "TEXT",
         .help = "the prompt"},
        {.name = "--prompt-ids", .type = ST_OPT_FN, .dest = &prompt_ids, .fn = cli_ids_opt,
         .value = "1,2,3", .help = "the prompt as token ids"},
        {.name = "--n-predict", .alias = "-n", .type = ST_OPT_I64, .dest = &n_predict, .min = 0,
         .max = RUN_N_MAX, .value = "N", .help = "tokens to generate (default 64)"},
        {.name = "--ids", .type = ST_OPT_FLAG, .dest = &ids_only,
         .help = "print the ids, not the text"},
        {.name = "--logits-out", .type = ST_OPT_STR, .dest = &o->logits_out, .value = "FILE",
         .help = "write each step's logits to FILE"},
        {.name = "--force-ids", .type = ST_OPT_FN, .dest = &force, .fn = cli_ids_opt,
         .value = "a,b,c", .help = "generate these ids (-n defaults to their count)"},
        {.name = "--shards", .type = ST_OPT_STR, .dest = &shards, .value = "ADDR[,ADDR...]",
         .help = "run through shard servers (docs/shards.md)"},
        {.name = "--embed", .type = ST_OPT_STR, .dest = &o->sh.embed, .value = "ADDR",
         .help = "with --shards: the embedding and head server"},
        {.name = "--shard-key", .type = ST_OPT_STR, .dest = &o->sh.key, .value = "FILE",
         .help = "with --shards: their cluster key"},
        {.name = "--shard-dtype", .type = ST_OPT_STR, .dest = &o->sh.dtype,
         .value = "f32|bf16|f16|i8", .help = "with --shards: the wire dtype"},
        {.name = "--shard-timeout-ms", .type = ST_OPT_I64, .dest = &o->sh.timeout_ms, .min = 1,
         .max = RUN_SHARD_TIMEOUT_MAX_MS, .value = "N", .help = "with --shards: a step's deadline"},
        {.name = "--pause-after", .type = ST_OPT_I64, .dest = &o->sh.pause_after, .min = 1,
         .max = RUN_N_MAX, .value = "N", .help = "with --shards: pause after N tokens (tests)"},
    };
    size_t n = RUN_ROWS;
    n += cli_sampling_rows(&o->sp, rows + n);
    n += cli_local_rows(CLI_LOCAL_THREADS | CLI_LOCAL_CHUNK | CLI_LOCAL_CTX | CLI_LOCAL_KERNELS |
                            CLI_LOCAL_CACHE,
                        &o->eng, rows + n);
    size_t n_ops = 0;
    int st = cli_opts("run", run_synopsis, rows, n, &o->model, 1, &n_ops, argc, argv);
    o->prompt_ids = prompt_ids.ids; /* run_free frees them */
    o->n_prompt_ids = prompt_ids.n;
    o->force = force.ids;
    o->n_force = force.n;
    if (st != CLI_OPTS_GO)
        return st;
    if (shards != NULL && (o->sh.list = strdup(shards)) == NULL) {
        fprintf(stderr, "strata: run: out of memory\n");
        return 1;
    }
    o->ids_only = ids_only;
    if (n_predict >= 0) {
        o->n = n_predict;
        o->n_set = 1;
    }
    if (o->model == NULL || (o->prompt == NULL) == (o->prompt_ids == NULL)) {
        fprintf(stderr, "strata: run: a MODEL and exactly one of --prompt, --prompt-ids are "
                        "required\nusage: %s\n",
                run_synopsis);
        return 2;
    }
    if (o->force && !o->n_set)
        o->n = (int64_t)o->n_force;
    st_err e = st_sampler_params_validate(&o->sp);
    if (e != ST_OK) {
        fprintf(stderr, "strata: run: %s\n", st_errmsg(e));
        return 2;
    }
    return CLI_OPTS_GO;
}

static void run_free(run_opts *o)
{
    free(o->prompt_ids);
    free(o->force);
    free(o->sh.list);
}

/* run_write - writes n bytes to stdout and flushes (streaming). */
static void run_write(const char *b, size_t n)
{
    if (n) {
        fwrite(b, 1, n, stdout);
        fflush(stdout);
    }
}

static int run_generate(run_opts *o, st_local *l, st_tokenizer *tok, const int32_t *prompt,
                        size_t n_prompt)
{
    int rc = 1;
    st_gen *g = NULL;
    FILE *lf = NULL;
    st_gen_params gp = st_gen_params_default(tok, (uint32_t)o->n);
    gp.sp = o->sp;
    gp.text = o->ids_only ? ST_GEN_TEXT_NONE : o->prompt ? ST_GEN_TEXT_PROMPT : ST_GEN_TEXT_START;
    st_err e = st_gen_open(&gp, tok, (size_t)l->n_vocab, l->n_ctx, prompt, n_prompt, &g);
    if (e != ST_OK) {
        fprintf(stderr, "strata: run: %s\n", st_errmsg(e));
        goto out;
    }
    if (o->logits_out && (lf = fopen(o->logits_out, "wb")) == NULL) {
        perror(o->logits_out);
        goto out;
    }
    double t0 = st_now_s();
    e = st_local_eval(l, prompt, (int64_t)n_prompt, 0);
    double t1 = st_now_s();
    if (e != ST_OK) {
        fprintf(stderr, "strata: run: %s\n", st_errmsg(e));
        goto out;
    }
    size_t n_echo = 0;
    const char *echo = st_gen_echo(g, &n_echo); /* the prompt, as llama.cpp echoes it */
    run_write(echo, n_echo);
    for (size_t step = 0; st_gen_stopped(g) == ST_GEN_GO; step++) {
        if (lf && fwrite(l->logits, sizeof(float), (size_t)l->n_vocab, lf) != (size_t)l->n_vocab) {
            perror(o->logits_out);
            goto out;
        }
        st_gen_tok t;
        e = step < o->n_force ? st_gen_accept(g, o->force[step], true, &t)
                              : st_gen_step(g, l->logits, &t);
        if (e != ST_OK) {
            fprintf(stderr, "strata: run: sampling: %s\n", st_errmsg(e));
            goto out;
        }
        run_write(t.text, t.len);
        if (t.stop == ST_GEN_CTX_FULL)
            fprintf(stderr, "strata: run: context of %lld tokens is full\n", (long long)l->n_ctx);
        if (t.stop != ST_GEN_GO)
            break;
        e = st_local_eval(l, &t.id, 1, (int64_t)(n_prompt + st_gen_n_generated(g)) - 1);
        if (e != ST_OK) {
            fprintf(stderr, "strata: run: %s\n", st_errmsg(e));
            goto out;
        }
    }
    double t2 = st_now_s();
    const int64_t n_gen = (int64_t)st_gen_n_generated(g);
    if (o->ids_only) {
        size_t n_ids;
        const int32_t *ids = st_gen_ids(g, &n_ids);
        printf("ids: ");
        for (size_t i = n_prompt; i < n_ids; i++)
            printf("%s%d", i > n_prompt ? "," : "", ids[i]);
        printf("\n");
    } else {
        const char *rest;
        size_t n_rest;
        st_gen_finish(g, &rest, &n_rest);
        run_write(rest, n_rest);
        printf("\n");
    }
    fprintf(stderr,
            "prompt: %zu tokens in %.3f s (%.2f tok/s); generation: %lld tokens in %.3f s "
            "(%.2f tok/s); kernels %s, %d threads\n",
            n_prompt, t1 - t0, (double)n_prompt / (t1 - t0), (long long)n_gen, t2 - t1,
            n_gen > 1 ? (double)(n_gen - 1) / (t2 - t1) : 0.0, l->ops->name, st_pool_size(l->pool));
    rc = 0;
out:
    if (lf && fclose(lf) != 0 && rc == 0) {
        perror(o->logits_out);
        rc = 1;
    }
    st_gen_close(g);
    return rc;
}

/* ---- --shards: generation through libstrata ---- */

typedef struct run_shard_cb {
    const run_opts *o;
    int64_t n_gen;
    int32_t *ids; /* [o->n] the generated ids (--ids) */
} run_shard_cb;

/* run_shard_token - libstrata's token callback: stream the text (or keep
 * the id), and at --pause-after N tokens stop until a line on stdin (the
 * tests' hold point: they act on the servers, then let it go on). */
static int run_shard_token(void *arg, int32_t id, const char *text, size_t len)
{
    run_shard_cb *cb = arg;
    if (id < 0) { /* the bytes left at the end */
        if (!cb->o->ids_only)
            run_write(text, len);
        return 0;
    }
    cb->ids[cb->n_gen++] = id;
    if (!cb->o->ids_only)
        run_write(text, len);
    if (cb->n_gen == cb->o->sh.pause_after) {
        char line[16];
        fprintf(stderr, "paused after %lld tokens\n", (long long)cb->n_gen);
        fflush(stderr);
        if (fgets(line, sizeof line, stdin) == NULL)
            fprintf(stderr, "strata: run: stdin closed while paused; going on\n");
    }
    return 0;
}

static int run_shards(run_opts *o)
{
    if (o->sh.list == NULL) {
        fprintf(stderr, "strata: run: --embed needs --shards\n");
        return 2;
    }
    if (o->force != NULL || o->logits_out != NULL || o->eng.ops == st_kernels_ref()) {
        fprintf(stderr, "strata: run: --force-ids, --logits-out and --kernels ref are not "
                        "available with --shards\n");
        return 2;
    }
    const char *addrs[ST_RUN_MAX_SHARDS];
    size_t n = 0;
    for (char *save = NULL, *t = strtok_r(o->sh.list, ",", &save); t != NULL;
         t = strtok_r(NULL, ",", &save)) {
        if (n == ST_RUN_MAX_SHARDS) {
            fprintf(stderr, "strata: run: more than %d shard servers\n", ST_RUN_MAX_SHARDS);
            return 2;
        }
        addrs[n++] = t;
    }
    strata_chain_config cfg = {.model = o->model,
                               .shards = addrs,
                               .n_shards = n,
                               .key_file = o->sh.key,
                               .dtype = o->sh.dtype,
                               .threads = (int)o->eng.threads,
                               .timeout_ms = (int)o->sh.timeout_ms,
                               .embed = o->sh.embed};
    char err[512];
    strata_chain *c;
    if (strata_chain_open(&cfg, &c, err, sizeof err) != 0) {
        fprintf(stderr, "strata: run: %s\n", err);
        return 1;
    }
    int32_t *prompt = o->prompt_ids;
    size_t n_prompt = o->n_prompt_ids;
    int rc = o->prompt ? strata_tokenize(c, o->prompt, &prompt, &n_prompt) : 0;
    run_shard_cb cb = {.o = o, .ids = malloc(((size_t)o->n + 1) * sizeof *cb.ids)};
    strata_sampling sp = {.temp = o->sp.temp,
                          .top_k = o->sp.top_k,
                          .top_p = o->sp.top_p,
                          .min_p = o->sp.min_p,
                          .repeat_penalty = o->sp.repeat_penalty,
                          .repeat_last_n = o->sp.repeat_last_n,
                          .seed = o->sp.seed};
    if (rc == 0 && cb.ids == NULL)
        rc = ST_ENOMEM;
    if (rc == 0 && o->prompt && !o->ids_only)
        run_write(o->prompt, strlen(o->prompt));
    if (rc == 0)
        rc = strata_generate(c, prompt, n_prompt, (int)o->n, &sp, run_shard_token, &cb);
    if (rc != 0) {
        fprintf(stderr, "strata: run: %s\n",
                strata_chain_error(c)[0] ? strata_chain_error(c) : strata_strerror(rc));
    } else if (o->ids_only) {
        printf("ids: ");
        for (int64_t i = 0; i < cb.n_gen; i++)
            printf("%s%d", i > 0 ? "," : "", cb.ids[i]);
        printf("\n");
    } else {
        printf("\n");
    }
    fprintf(stderr, "shards: %zu servers; %llu replays\n", n,
            (unsigned long long)strata_chain_replays(c));
    if (prompt != o->prompt_ids)
        strata_free(prompt);
    free(cb.ids);
    strata_chain_close(c);
    return rc == 0 ? 0 : 1;
}

int st_cmd_run(int argc, char **argv)
{
    run_opts o;
    int rc = run_parse(argc, argv, &o);
    if (rc != CLI_OPTS_GO) {
        run_free(&o);
        return rc;
    }
    if (o.sh.list != NULL || o.sh.embed != NULL) {
        rc = run_shards(&o);
        run_free(&o);
        return rc;
    }
    st_local l;
    st_tokenizer *tok = NULL;
    int32_t *prompt = NULL;
    size_t n_prompt = 0;
    st_err e = st_local_open(&l, o.model, (int)o.eng.threads, o.eng.ops, o.eng.chunk,
                             o.eng.ctx, cli_local_kv_dtype(&o.eng));
    if (e != ST_OK) {
        fprintf(stderr, "strata: run: %s: %s\n", o.model, st_errmsg(e));
        run_free(&o);
        return 1;
    }
    rc = 1;
    if ((e = st_tok_from_gguf(st_model_gguf(l.m), &tok))) {
        fprintf(stderr, "strata: run: tokenizer: %s\n", st_errmsg(e));
        goto out;
    }
    if (o.prompt) {
        if ((e = st_tok_encode(tok, o.prompt, strlen(o.prompt), st_tok_add_bos(tok), &prompt,
                               &n_prompt))) {
            fprintf(stderr, "strata: run: %s\n", st_errmsg(e));
            goto out;
        }
    } else {
        prompt = o.prompt_ids;
        n_prompt = o.n_prompt_ids;
        o.prompt_ids = NULL;
    }
    if (n_prompt == 0) {
        fprintf(stderr, "strata: run: the prompt is empty\n");
        goto out;
    }
    for (size_t i = 0; i < n_prompt; i++)
        if (prompt[i] >= l.n_vocab) {
            fprintf(stderr, "strata: run: token id %d is outside the vocabulary of %lld\n",
                    prompt[i], (long long)l.n_vocab);
            goto out;
        }
    for (size_t i = 0; i < o.n_force; i++)
        if (o.force[i] >= l.n_vocab) {
            fprintf(stderr, "strata: run: forced id %d is outside the vocabulary of %lld\n",
                    o.force[i], (long long)l.n_vocab);
            goto out;
        }
    if ((int64_t)n_prompt >= l.n_ctx) {
        fprintf(stderr, "strata: run: the prompt of %zu tokens does not fit the context of %lld\n",
                n_prompt, (long long)l.n_ctx);
        goto out;
    }
    rc = run_generate(&o, &l, tok, prompt, n_prompt);
out:
    free(prompt);
    st_tok_free(tok);
    st_local_close(&l);
    run_free(&o);
    return rc;
}
