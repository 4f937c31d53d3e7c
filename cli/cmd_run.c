/* cmd_run.c - `strata run`: generate text with the whole model in this
 * process (the stage [0, n_layer) with embedding and head).
 *
 * The prompt is prefilled in chunks, then one token is decoded per step
 * until -n tokens, EOS or EOT, or the context's end. --force-ids replaces the
 * sampled token of each step by the given one (teacher forcing) so that
 * --logits-out can be compared step by step with a reference. Text is
 * streamed through the detokenizer, which never splits a UTF-8 character. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/local.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/sampling.h"
#include "common/tokenizer.h"

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
} run_opts;

static void run_usage(void)
{
    fprintf(stderr,
            "usage: strata run MODEL (--prompt TEXT | --prompt-ids 1,2,3) [-n N] [--temp T]\n"
            "       [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--seed S]\n"
            "       [--threads N] [--ctx N] [--chunk N] [--ids] [--logits-out FILE]\n"
            "       [--force-ids a,b,c] [--kernels ref|auto]\n");
}

static int run_parse(int argc, char **argv, run_opts *o)
{
    memset(o, 0, sizeof *o);
    o->sp = st_sampler_params_default();
    o->n = 64;
    o->eng.chunk = 128;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        const char *v;
        int r = cli_parse_sampling(argc, argv, &i, &o->sp);
        if (r == 0)
            r = cli_parse_local(argc, argv, &i, CLI_LOCAL_THREADS | CLI_LOCAL_CHUNK | CLI_LOCAL_CTX |
                                CLI_LOCAL_KERNELS, &o->eng);
        if (r < 0)
            return 2;
        if (r > 0)
            continue;
        if (strcmp(f, "--prompt") == 0) {
            if (!(o->prompt = cli_need_value(argc, argv, &i)))
                return 2;
        } else if (strcmp(f, "--prompt-ids") == 0) {
            if (!(v = cli_need_value(argc, argv, &i)) ||
                cli_parse_ids(f, v, &o->prompt_ids, &o->n_prompt_ids))
                return 2;
        } else if (strcmp(f, "--force-ids") == 0) {
            if (!(v = cli_need_value(argc, argv, &i)) || cli_parse_ids(f, v, &o->force, &o->n_force))
                return 2;
        } else if (strcmp(f, "-n") == 0 || strcmp(f, "--n-predict") == 0) {
            if (!(v = cli_need_value(argc, argv, &i)) || cli_parse_i64(f, v, 0, 1 << 24, &o->n))
                return 2;
            o->n_set = 1;
        } else if (strcmp(f, "--ids") == 0) {
            o->ids_only = 1;
        } else if (strcmp(f, "--logits-out") == 0) {
            if (!(o->logits_out = cli_need_value(argc, argv, &i)))
                return 2;
        } else if (cli_operand("run", f, &o->model, run_usage) != 0) {
            return 2;
        }
    }
    if (o->model == NULL || (o->prompt == NULL) == (o->prompt_ids == NULL)) {
        fprintf(stderr, "strata: run: a MODEL and exactly one of --prompt, --prompt-ids are "
                        "required\n");
        run_usage();
        return 2;
    }
    if (o->force && !o->n_set)
        o->n = (int64_t)o->n_force;
    st_err e = st_sampler_params_validate(&o->sp);
    if (e != ST_OK) {
        fprintf(stderr, "strata: run: %s\n", st_errmsg(e));
        return 2;
    }
    return 0;
}

static void run_free(run_opts *o)
{
    free(o->prompt_ids);
    free(o->force);
}

/* run_write - writes n bytes to stdout and flushes (streaming). */
static void run_write(const char *b, size_t n)
{
    if (n) {
        fwrite(b, 1, n, stdout);
        fflush(stdout);
    }
}

static int run_generate(run_opts *o, cli_local *l, st_tokenizer *tok, const int32_t *prompt,
                        size_t n_prompt)
{
    int rc = 1;
    size_t cap = n_prompt + (size_t)o->n + 1;
    int32_t *hist = malloc(cap * sizeof *hist);
    float *work = malloc((size_t)l->n_vocab * sizeof(float));
    st_sample_scratch scr = {0};
    size_t dcap = st_detok_bound(tok);
    char *dbuf = malloc(dcap);
    FILE *lf = NULL;
    if (!hist || !work || !dbuf || st_sample_scratch_init(&scr, (size_t)l->n_vocab)) {
        fprintf(stderr, "strata: run: out of memory\n");
        goto out;
    }
    if (o->logits_out && (lf = fopen(o->logits_out, "wb")) == NULL) {
        perror(o->logits_out);
        goto out;
    }
    memcpy(hist, prompt, n_prompt * sizeof *hist);
    size_t n_hist = n_prompt;
    st_rng rng;
    st_rng_seed(&rng, o->sp.seed);
    st_detok dt;
    st_detok_init(&dt, tok, true);

    double t0 = st_now_s();
    st_err e = cli_local_eval(l, prompt, (int64_t)n_prompt, 0);
    double t1 = st_now_s();
    if (e != ST_OK) {
        fprintf(stderr, "strata: run: %s\n", st_errmsg(e));
        goto out;
    }
    if (!o->ids_only && o->prompt) {
        /* echo the prompt, as llama.cpp does */
        for (size_t i = 0; i < n_prompt; i++) {
            size_t nw = 0;
            if (st_detok_push(&dt, prompt[i], dbuf, dcap, &nw) == ST_OK)
                run_write(dbuf, nw);
        }
    }
    int64_t n_gen = 0;
    for (int64_t step = 0; step < o->n; step++) {
        if (lf && fwrite(l->logits, sizeof(float), (size_t)l->n_vocab, lf) != (size_t)l->n_vocab) {
            perror(o->logits_out);
            goto out;
        }
        int32_t id;
        if ((size_t)step < o->n_force) {
            id = o->force[step];
        } else {
            memcpy(work, l->logits, (size_t)l->n_vocab * sizeof(float));
            e = st_sample(&o->sp, &rng, work, (size_t)l->n_vocab, hist, n_hist, &scr, &id);
            if (e != ST_OK) {
                fprintf(stderr, "strata: run: sampling: %s\n", st_errmsg(e));
                goto out;
            }
        }
        hist[n_hist++] = id;
        n_gen++;
        if (!o->ids_only) {
            size_t nw = 0;
            if (st_detok_push(&dt, id, dbuf, dcap, &nw) == ST_OK)
                run_write(dbuf, nw);
        }
        if ((size_t)step >= o->n_force && (id == st_tok_eos(tok) || id == st_tok_eot(tok)))
            break; /* end of generation: EOS, or EOT (chat models) */
        if (step + 1 == o->n)
            break;
        if ((int64_t)n_hist >= l->n_ctx) {
            fprintf(stderr, "strata: run: context of %lld tokens is full\n", (long long)l->n_ctx);
            break;
        }
        e = cli_local_eval(l, &id, 1, (int64_t)n_hist - 1);
        if (e != ST_OK) {
            fprintf(stderr, "strata: run: %s\n", st_errmsg(e));
            goto out;
        }
    }
    double t2 = st_now_s();
    if (o->ids_only) {
        printf("ids: ");
        for (size_t i = n_prompt; i < n_hist; i++)
            printf("%s%d", i > n_prompt ? "," : "", hist[i]);
        printf("\n");
    } else {
        size_t nw = 0;
        if (st_detok_flush(&dt, dbuf, dcap, &nw) == ST_OK)
            run_write(dbuf, nw);
        printf("\n");
    }
    fprintf(stderr, "prompt: %zu tokens in %.3f s (%.2f tok/s); generation: %lld tokens in %.3f s "
                    "(%.2f tok/s); kernels %s, %d threads\n",
            n_prompt, t1 - t0, (double)n_prompt / (t1 - t0), (long long)n_gen, t2 - t1,
            n_gen > 1 ? (double)(n_gen - 1) / (t2 - t1) : 0.0, l->ops->name,
            st_pool_size(l->pool));
    rc = 0;
out:
    if (lf && fclose(lf) != 0 && rc == 0) {
        perror(o->logits_out);
        rc = 1;
    }
    st_sample_scratch_free(&scr);
    free(dbuf);
    free(work);
    free(hist);
    return rc;
}

int st_cmd_run(int argc, char **argv)
{
    run_opts o;
    int rc = run_parse(argc, argv, &o);
    if (rc != 0) {
        run_free(&o);
        return rc;
    }
    cli_local l;
    st_tokenizer *tok = NULL;
    int32_t *prompt = NULL;
    size_t n_prompt = 0;
    st_err e = cli_local_open(&l, o.model, (int)o.eng.threads, o.eng.force_ref, o.eng.chunk,
                              o.eng.ctx);
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
    cli_local_close(&l);
    run_free(&o);
    return rc;
}
