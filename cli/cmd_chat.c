/* cmd_chat.c - `strata chat`: a multi-turn conversation read from stdin,
 * one user message per line, each reply streamed to stdout.
 *
 * The prompt of each turn is the conversation rendered with the model's
 * chat template (common/text/chat.h; --chat-template NAME overrides) and kept
 * as ids by chat_conv (cli/chat_conv.h). Locally (strata chat MODEL) the
 * whole model runs in this process and its KV cache stays between turns:
 * a turn prefills only the ids after the longest common prefix of what
 * the cache holds and the new prompt, which is the new turn when the
 * template renders earlier turns unchanged. Through a coordinator
 * (strata chat MODEL --coordinator ADDR: the model file is read for its
 * template and tokenizer only) each turn is a Generate request of
 * prompt_ids with one client session id, so the coordinator's prefix reuse
 * applies. --no-reuse (local) prefills every turn from position 0, for
 * comparison: the replies must not change. Generation ends at a stop of
 * common/text/gen.h: EOS or EOT, -n ids, or a full context. After each turn a
 * line goes to stderr: "chat: turn T: prompt P tokens, reused R tokens,
 * prefilled F; generated G tokens in S s (X tok/s)". */
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/chat_conv.h"
#include "cli/commands.h"
#include "cli/conn.h"
#include "common/base/clock.h"
#include "common/wire/msg.h"
#include "common/text/gen.h"
#include "common/text/sampling.h"
#include "worker/engine/local.h"

/* The default reply length limit, in ids. */
#define CHAT_DEFAULT_N 256
/* The default prefill chunk of the local engine. */
#define CHAT_DEFAULT_CHUNK 128
/* How long one Poll may wait at the coordinator, and the extra time its
 * reply may take on the wire. */
#define CHAT_POLL_WAIT_MS 10000
#define CHAT_POLL_SLACK_MS 15000

typedef struct chat_opts {
    const char *model;
    const char *system;
    const char *tmpl;
    int64_t n;
    cli_local_opts eng; /* --threads, --chunk, --ctx */
    bool no_reuse;      /* local: prefill the whole conversation every turn */
    st_sampler_params sp;
    cli_conn_opts c;
} chat_opts;

static const char chat_synopsis[] =
    "strata chat MODEL [--system TEXT] [--chat-template NAME] [-n N] [--temp T]\n"
    "       [--seed S] [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R]\n"
    "       [--threads N] [--ctx N] [--chunk N] [--cache-type f32|f16|q8_0] [--no-reuse]\n"
    "       [--coordinator ADDR [--cluster-key FILE] [--encrypt] [--timeout-ms N]]\n"
    "one user message per line of stdin; the replies go to stdout";

#define CHAT_N_MAX (1 << 24)
#define CHAT_ROWS 4 /* chat_parse's own rows */

/* chat_parse - CLI_OPTS_GO to run, else the exit status (cli_opts). */
static int chat_parse(int argc, char **argv, chat_opts *o)
{
    memset(o, 0, sizeof *o);
    o->sp = st_sampler_params_default();
    o->n = CHAT_DEFAULT_N;
    o->eng.chunk = CHAT_DEFAULT_CHUNK;
    st_opt rows[CHAT_ROWS + CLI_SAMPLING_ROWS + CLI_LOCAL_ROWS + CLI_CONN_ROWS] = {
        {.name = "--system", .type = ST_OPT_STR, .dest = &o->system, .value = "TEXT",
         .help = "the system message"},
        {.name = "--chat-template", .type = ST_OPT_STR, .dest = &o->tmpl, .value = "NAME",
         .help = "a template by name (default: the model's)"},
        {.name = "--n-predict", .alias = "-n", .type = ST_OPT_I64, .dest = &o->n, .min = 1,
         .max = CHAT_N_MAX, .value = "N", .help = "tokens per reply at most"},
        {.name = "--no-reuse", .type = ST_OPT_FLAG, .dest = &o->no_reuse,
         .help = "local: prefill the whole conversation every turn"},
    };
    size_t n = CHAT_ROWS;
    n += cli_sampling_rows(&o->sp, rows + n);
    n += cli_local_rows(CLI_LOCAL_THREADS | CLI_LOCAL_CHUNK | CLI_LOCAL_CTX | CLI_LOCAL_CACHE,
                        &o->eng, rows + n);
    n += cli_conn_rows(&o->c, false, rows + n);
    size_t n_ops = 0;
    int st = cli_opts("chat", chat_synopsis, rows, n, &o->model, 1, &n_ops, argc, argv);
    if (st != CLI_OPTS_GO)
        return st;
    if (o->model == NULL) {
        fprintf(stderr, "strata: chat: a MODEL is required (with --coordinator, the file the "
                        "coordinator serves: its template and tokenizer are read)\n"
                        "usage: %s\n",
                chat_synopsis);
        return 2;
    }
    st_err e = st_sampler_params_validate(&o->sp);
    if (e != ST_OK) {
        fprintf(stderr, "strata: chat: %s\n", st_errmsg(e));
        return 2;
    }
    return CLI_OPTS_GO;
}

/* chat_read_line - the next non-empty line of stdin without its line end
 * into *line (getline buffer); false at the end of input. */
static bool chat_read_line(char **line, size_t *cap)
{
    bool tty = isatty(STDIN_FILENO);
    for (;;) {
        if (tty) {
            fputs("> ", stderr);
            fflush(stderr);
        }
        ssize_t n = getline(line, cap, stdin);
        if (n < 0)
            return false;
        while (n > 0 && ((*line)[n - 1] == '\n' || (*line)[n - 1] == '\r'))
            (*line)[--n] = '\0';
        if (n > 0)
            return true;
    }
}

static void chat_write(const char *b, size_t n)
{
    if (n) {
        fwrite(b, 1, n, stdout);
        fflush(stdout);
    }
}

static void chat_stat(int turn, size_t n_prompt, size_t reused, size_t n_gen, double dt)
{
    fprintf(stderr,
            "chat: turn %d: prompt %zu tokens, reused %zu tokens, prefilled %zu; "
            "generated %zu tokens in %.3f s (%.2f tok/s)\n",
            turn, n_prompt, reused, n_prompt - reused, n_gen, dt,
            dt > 0 ? (double)n_gen / dt : 0.0);
}

/* ---- local ---- */

/* The local engine's state across turns: the ids its KV cache holds. */
typedef struct chat_local {
    st_local l;
    int32_t *kv; /* ids at positions [0, n_kv) */
    size_t n_kv;
    int32_t *gen; /* this turn's ids */
    st_rng rng;   /* continues from turn to turn */
} chat_local;

/* chat_local_gen - generates and streams the reply to the conversation
 * the cache holds: up to o->n ids into x->gen, *n_gen. */
static st_err chat_local_gen(chat_local *x, const chat_opts *o, const chat_conv *c, size_t *n_gen)
{
    st_local *l = &x->l;
    st_gen_params gp = st_gen_params_default(c->tok, (uint32_t)o->n);
    gp.sp = o->sp;
    gp.text = ST_GEN_TEXT_CONTINUE;
    gp.rng = &x->rng;
    st_gen *g;
    st_err e = st_gen_open(&gp, c->tok, (size_t)l->n_vocab, l->n_ctx, c->ids, c->n_ids, &g);
    if (e != ST_OK)
        return e;
    for (;;) {
        st_gen_tok t;
        if ((e = st_gen_step(g, l->logits, &t)) != ST_OK)
            break;
        chat_write(t.text, t.len);
        if (t.stop == ST_GEN_CTX_FULL)
            fprintf(stderr, "\nstrata: chat: the context of %lld tokens is full\n",
                    (long long)l->n_ctx);
        if (t.stop != ST_GEN_GO)
            break;
        if ((e = st_local_eval(l, &t.id, 1, (int64_t)x->n_kv)) != ST_OK)
            break;
        x->kv[x->n_kv++] = t.id;
    }
    size_t n_ids, n_rest;
    const int32_t *ids = st_gen_ids(g, &n_ids);
    const char *rest;
    *n_gen = n_ids - c->n_ids;
    memcpy(x->gen, ids + c->n_ids, *n_gen * sizeof *ids);
    x->rng = st_gen_rng(g);
    st_gen_finish(g, &rest, &n_rest);
    if (e == ST_OK)
        chat_write(rest, n_rest);
    st_gen_close(g);
    return e;
}

/* chat_local_turn - prefills what the cache lacks of c->ids, then samples
 * and streams up to o->n ids; the ids go to x->gen, *n_gen. */
static st_err chat_local_turn(chat_local *x, const chat_opts *o, const chat_conv *c, int turn,
                              size_t *n_gen)
{
    st_local *l = &x->l;
    size_t n = c->n_ids;
    if ((int64_t)n >= l->n_ctx)
        return st_errorf(ST_ERANGE,
                         "the conversation of %zu tokens does not fit the context of "
                         "%lld",
                         n, (long long)l->n_ctx);
    size_t keep = o->no_reuse ? 0 : chat_conv_common(x->kv, x->n_kv, c->ids, n);
    if (keep == n)
        keep = n - 1; /* the last prompt id is fed again: its logits give the first sample */
    double t0 = st_now_s();
    st_err e = st_local_eval(l, c->ids + keep, (int64_t)(n - keep), (int64_t)keep);
    if (e != ST_OK)
        return e;
    memcpy(x->kv, c->ids, n * sizeof *x->kv);
    x->n_kv = n;
    if ((e = chat_local_gen(x, o, c, n_gen)) != ST_OK)
        return e;
    chat_write("\n", 1);
    chat_stat(turn, n, keep, *n_gen, st_now_s() - t0);
    return ST_OK;
}

static int chat_local_run(const chat_opts *o)
{
    chat_local x;
    memset(&x, 0, sizeof x);
    chat_conv c = {0};
    st_tokenizer *tok = NULL;
    char *line = NULL;
    size_t cap = 0;
    int rc = 1;
    st_err e = st_local_open(&x.l, o->model, (int)o->eng.threads, NULL, o->eng.chunk, o->eng.ctx,
                             cli_local_kv_dtype(&o->eng));
    if (e != ST_OK) {
        fprintf(stderr, "strata: chat: %s: %s\n", o->model, st_errmsg(e));
        return 1;
    }
    st_chat_tmpl t;
    if ((e = st_tok_from_gguf(st_model_gguf(x.l.m), &tok)) ||
        (e = st_chat_from_gguf(st_model_gguf(x.l.m), o->tmpl, &t))) {
        fprintf(stderr, "strata: chat: %s: %s\n", o->model, st_errmsg(e));
        goto out;
    }
    x.kv = malloc((size_t)x.l.n_ctx * sizeof *x.kv);
    x.gen = malloc((size_t)o->n * sizeof *x.gen);
    if (!x.kv || !x.gen) {
        fprintf(stderr, "strata: chat: out of memory\n");
        goto out;
    }
    st_rng_seed(&x.rng, o->sp.seed);
    if ((e = chat_conv_init(&c, t, tok, o->system)))
        goto fail;
    fprintf(stderr, "chat: template %s, kernels %s, context %lld\n", st_chat_tmpl_name(t),
            x.l.ops->name, (long long)x.l.n_ctx);
    for (int turn = 1; chat_read_line(&line, &cap); turn++) {
        size_t n_gen = 0;
        if ((e = chat_conv_user(&c, line)) || (e = chat_local_turn(&x, o, &c, turn, &n_gen)) ||
            (e = chat_conv_reply(&c, x.gen, n_gen)))
            goto fail;
    }
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "strata: chat: %s\n", st_errmsg(e));
out:
    free(line);
    chat_conv_free(&c);
    st_tok_free(tok);
    free(x.gen);
    free(x.kv);
    st_local_close(&x.l);
    return rc;
}

/* ---- through a coordinator ---- */

/* chat_remote_poll - polls request id until done, streaming its text;
 * the ids go to gen (capacity cap), *reused gets the coordinator's count. */
static int chat_remote_poll(cli_conn *cn, uint64_t id, int32_t *gen, size_t cap, size_t *n_gen,
                            uint32_t *reused)
{
    for (;;) {
        Strata__PollRequest pq = STRATA__POLL_REQUEST__INIT;
        pq.request_id = id;
        pq.after = (uint32_t)*n_gen;
        pq.wait_ms = CHAT_POLL_WAIT_MS;
        Strata__Msg m = STRATA__MSG__INIT;
        m.body_case = STRATA__MSG__BODY_POLL;
        m.poll = &pq;
        Strata__Msg *r = NULL;
        if (cli_conn_call(cn, &m, CHAT_POLL_WAIT_MS + CHAT_POLL_SLACK_MS, &r, "chat"))
            return 1;
        if (r->body_case != STRATA__MSG__BODY_POLL_REPLY) {
            fprintf(stderr, "strata: chat: unexpected %s reply\n", st_msg_case_name(r));
            st_msg_free(r);
            return 1;
        }
        const Strata__PollReply *p = r->poll_reply;
        if (*n_gen + p->n_ids > cap) {
            fprintf(stderr, "strata: chat: the coordinator sent %zu ids; %zu were asked for\n",
                    *n_gen + p->n_ids, cap);
            st_msg_free(r);
            return 1;
        }
        if (p->n_ids > 0) /* (a poll that waited out its time has none: ids is NULL) */
            memcpy(gen + *n_gen, p->ids, p->n_ids * sizeof *gen);
        *n_gen += p->n_ids;
        *reused = p->reused;
        chat_write((const char *)p->text.data, p->text.len);
        if (p->done) {
            int rc = 0;
            const char *fin = p->finish_reason ? p->finish_reason : "";
            if (strcmp(fin, "error") == 0 || strcmp(fin, "cancelled") == 0) {
                fprintf(stderr, "\nstrata: chat: %s: %s\n", fin,
                        p->error && p->error->message ? p->error->message : "");
                rc = 1;
            }
            st_msg_free(r);
            return rc;
        }
        st_msg_free(r);
    }
}

/* chat_remote_turn - one Generate of c->ids on session sid, streamed. */
static int chat_remote_turn(cli_conn *cn, const chat_opts *o, const chat_conv *c, uint64_t sid,
                            int turn, int32_t *gen, size_t *n_gen)
{
    Strata__Sampling sp;
    st_sampling_to_pb(&o->sp, &sp);
    Strata__GenerateRequest g = STRATA__GENERATE_REQUEST__INIT;
    g.prompt = (char *)"";
    g.n_prompt_ids = c->n_ids;
    g.prompt_ids = c->ids;
    g.max_tokens = (uint32_t)o->n;
    g.sampling = &sp;
    g.has_sampling = true;
    g.session_id = sid;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_GENERATE;
    m.generate = &g;
    double t0 = st_now_s();
    Strata__Msg *r = NULL;
    if (cli_conn_call(cn, &m, cn->timeout_ms, &r, "chat"))
        return 1;
    if (r->body_case != STRATA__MSG__BODY_GENERATE_REPLY) {
        fprintf(stderr, "strata: chat: unexpected %s reply\n", st_msg_case_name(r));
        st_msg_free(r);
        return 1;
    }
    uint64_t id = r->generate_reply->request_id;
    st_msg_free(r);
    uint32_t reused = 0;
    *n_gen = 0;
    int rc = chat_remote_poll(cn, id, gen, (size_t)o->n, n_gen, &reused);
    if (rc == 0) {
        chat_write("\n", 1);
        chat_stat(turn, c->n_ids, reused, *n_gen, st_now_s() - t0);
    }
    return rc;
}

static int chat_remote_run(const chat_opts *o)
{
    st_gguf *g = NULL;
    st_tokenizer *tok = NULL;
    chat_conv c = {0};
    cli_conn cn = {0};
    int32_t *gen = NULL;
    char *line = NULL;
    size_t cap = 0;
    st_chat_tmpl t;
    int rc = 1;
    st_err e;
    if ((e = st_gguf_open(o->model, &g)) || (e = st_tok_from_gguf(g, &tok)) ||
        (e = st_chat_from_gguf(g, o->tmpl, &t))) {
        fprintf(stderr, "strata: chat: %s: %s\n", o->model, st_errmsg(e));
        goto out;
    }
    if ((rc = cli_conn_open(&cn, &o->c, "chat")) != 0)
        goto out;
    rc = 1;
    if ((gen = malloc((size_t)o->n * sizeof *gen)) == NULL) {
        fprintf(stderr, "strata: chat: out of memory\n");
        goto out;
    }
    uint64_t sid = 0;
    while (sid == 0) /* 0 would ask for a fresh session per request */
        randombytes_buf(&sid, sizeof sid);
    if ((e = chat_conv_init(&c, t, tok, o->system))) {
        fprintf(stderr, "strata: chat: %s\n", st_errmsg(e));
        goto out;
    }
    fprintf(stderr, "chat: template %s, coordinator session %llu\n", st_chat_tmpl_name(t),
            (unsigned long long)sid);
    for (int turn = 1; chat_read_line(&line, &cap); turn++) {
        size_t n_gen = 0;
        if ((e = chat_conv_user(&c, line))) {
            fprintf(stderr, "strata: chat: %s\n", st_errmsg(e));
            goto out;
        }
        if (chat_remote_turn(&cn, o, &c, sid, turn, gen, &n_gen))
            goto out;
        if ((e = chat_conv_reply(&c, gen, n_gen))) {
            fprintf(stderr, "strata: chat: %s\n", st_errmsg(e));
            goto out;
        }
    }
    rc = 0;
out:
    free(line);
    free(gen);
    chat_conv_free(&c);
    cli_conn_close(&cn);
    st_tok_free(tok);
    st_gguf_close(g);
    return rc;
}

int st_cmd_chat(int argc, char **argv)
{
    chat_opts o;
    int rc = chat_parse(argc, argv, &o);
    if (rc != CLI_OPTS_GO)
        return rc;
    /* only an explicit --coordinator: STRATA_COORDINATOR does not turn a
     * local chat into a remote one */
    return o.c.addr != NULL ? chat_remote_run(&o) : chat_local_run(&o);
}
