/* gen.c - one generation's state and step (see gen.h for the contract).
 *
 * The stop-string window: a stop string completed by an id's text ends in
 * that text, so it lies within the last (longest stop - 1) bytes of the
 * text before plus the new text. Only that window is kept and searched, so
 * a step costs O(window) however long the text grows. */
#include "common/text/gen.h"

#include <stdlib.h>
#include <string.h>

/* The first capacity of the prompt's echo, doubled as it grows. */
#define GEN_ECHO_CAP0 256

struct st_gen {
    st_gen_params p; /* p.stop points to stop below */
    const st_tokenizer *tok;
    size_t n_vocab;
    int64_t n_ctx;
    int32_t *ids; /* [cap_ids]: the prompt, then the generated ids */
    size_t n_ids, n_prompt, cap_ids;
    st_gen_stop stop_reason;
    bool finished;
    st_rng rng;
    st_sample_scratch scr; /* allocated by the first st_gen_step */
    float *work;           /* [n_vocab] the logits st_sample modifies */
    bool has_text;
    st_detok dt;
    char *dbuf; /* [dcap] one id's text */
    size_t dcap;
    char **stop; /* [n_stop] copies */
    size_t max_stop;
    char *win; /* [max_stop - 1 + dcap] the stop-string window */
    size_t n_win;
    char *echo; /* the prompt's text (ST_GEN_TEXT_PROMPT) */
    size_t n_echo, cap_echo;
};

st_gen_params st_gen_params_default(const st_tokenizer *tok, uint32_t max_tokens)
{
    return (st_gen_params){.sp = st_sampler_params_default(),
                           .max_tokens = max_tokens,
                           .eos_id = tok ? st_tok_eos(tok) : -1,
                           .eot_id = tok ? st_tok_eot(tok) : -1,
                           .text = ST_GEN_TEXT_START};
}

void st_gen_close(st_gen *g)
{
    if (g == NULL)
        return;
    for (size_t i = 0; i < g->p.n_stop; i++)
        free(g->stop[i]);
    free(g->stop);
    free(g->ids);
    free(g->work);
    st_sample_scratch_free(&g->scr);
    free(g->dbuf);
    free(g->win);
    free(g->echo);
    free(g);
}

static st_err gen_echo_put(st_gen *g, const char *b, size_t n)
{
    if (n == 0)
        return ST_OK;
    if (g->n_echo + n > g->cap_echo) {
        size_t cap = g->cap_echo ? g->cap_echo : GEN_ECHO_CAP0;
        while (cap < g->n_echo + n)
            cap *= 2;
        char *e = realloc(g->echo, cap);
        if (e == NULL)
            return st_errorf(ST_ENOMEM, "generation: the prompt's text");
        g->echo = e;
        g->cap_echo = cap;
    }
    memcpy(g->echo + g->n_echo, b, n);
    g->n_echo += n;
    return ST_OK;
}

/* gen_text_init - the detokenizer, its buffer, the stop strings' window;
 * the prompt through the detokenizer for ST_GEN_TEXT_PROMPT (its text kept
 * as the echo) and ST_GEN_TEXT_AFTER. */
static st_err gen_text_init(st_gen *g, const int32_t *prompt, size_t n_prompt)
{
    g->dcap = st_detok_bound(g->tok);
    if ((g->dbuf = malloc(g->dcap)) == NULL)
        return st_errorf(ST_ENOMEM, "generation: text buffer");
    if (g->max_stop > 0 && (g->win = malloc(g->max_stop - 1 + g->dcap)) == NULL)
        return st_errorf(ST_ENOMEM, "generation: stop-string window");
    st_detok_init(&g->dt, g->tok, g->p.text != ST_GEN_TEXT_CONTINUE);
    if (g->p.text != ST_GEN_TEXT_PROMPT && g->p.text != ST_GEN_TEXT_AFTER)
        return ST_OK;
    for (size_t i = 0; i < n_prompt; i++) {
        if ((size_t)prompt[i] >= st_tok_n_vocab(g->tok))
            continue; /* a padding id: no text */
        size_t nw = 0;
        st_err e = st_detok_push(&g->dt, prompt[i], g->dbuf, g->dcap, &nw);
        if (e == ST_OK && g->p.text == ST_GEN_TEXT_PROMPT)
            e = gen_echo_put(g, g->dbuf, nw);
        if (e != ST_OK)
            return e;
    }
    return ST_OK;
}

static st_err gen_check(const st_gen_params *p, size_t n_vocab, int64_t n_ctx,
                        const int32_t *prompt, size_t n_prompt)
{
    st_err e = st_sampler_params_validate(&p->sp);
    if (e != ST_OK)
        return e;
    if (n_vocab == 0)
        return st_errorf(ST_EINVAL, "generation: a vocabulary of 0 ids");
    if (n_prompt == 0 || (int64_t)n_prompt >= n_ctx)
        return st_errorf(ST_ERANGE, "generation: a prompt of %zu ids (1..%lld fit the context)",
                         n_prompt, (long long)n_ctx - 1);
    for (size_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || (size_t)prompt[i] >= n_vocab)
            return st_errorf(ST_ERANGE, "generation: prompt id %d is outside the vocabulary of %zu",
                             prompt[i], n_vocab);
    for (size_t i = 0; i < p->n_stop; i++)
        if (p->stop[i] == NULL || p->stop[i][0] == '\0')
            return st_errorf(ST_EINVAL, "generation: stop string %zu is empty", i);
    return ST_OK;
}

st_err st_gen_open(const st_gen_params *p, const st_tokenizer *tok, size_t n_vocab, int64_t n_ctx,
                   const int32_t *prompt, size_t n_prompt, st_gen **out)
{
    *out = NULL;
    st_err e = gen_check(p, n_vocab, n_ctx, prompt, n_prompt);
    if (e != ST_OK)
        return e;
    st_gen *g = calloc(1, sizeof *g);
    if (g == NULL)
        return st_errorf(ST_ENOMEM, "generation");
    g->p = *p;
    g->p.stop = NULL;
    g->p.n_stop = 0;
    g->tok = tok;
    g->n_vocab = n_vocab;
    g->n_ctx = n_ctx;
    const size_t room = (size_t)n_ctx - n_prompt; /* ids before the context is full */
    g->cap_ids = n_prompt + (p->max_tokens < room ? p->max_tokens : room);
    g->ids = malloc(g->cap_ids * sizeof *g->ids);
    g->stop = calloc(p->n_stop ? p->n_stop : 1, sizeof *g->stop);
    if (g->ids == NULL || g->stop == NULL) {
        st_gen_close(g);
        return st_errorf(ST_ENOMEM, "generation");
    }
    for (size_t i = 0; i < p->n_stop; i++) {
        if ((g->stop[i] = strdup(p->stop[i])) == NULL) {
            st_gen_close(g);
            return st_errorf(ST_ENOMEM, "generation: stop strings");
        }
        g->p.n_stop++;
        size_t n = strlen(p->stop[i]);
        g->max_stop = n > g->max_stop ? n : g->max_stop;
    }
    g->p.stop = (const char *const *)g->stop;
    memcpy(g->ids, prompt, n_prompt * sizeof *prompt);
    g->n_ids = g->n_prompt = n_prompt;
    if (p->rng != NULL)
        g->rng = *p->rng;
    else
        st_rng_seed(&g->rng, p->sp.seed);
    g->p.rng = NULL;
    g->has_text = tok != NULL && p->text != ST_GEN_TEXT_NONE;
    if (g->has_text && (e = gen_text_init(g, prompt, n_prompt)) != ST_OK) {
        st_gen_close(g);
        return e;
    }
    g->stop_reason = p->max_tokens == 0 ? ST_GEN_LENGTH : ST_GEN_GO;
    *out = g;
    return ST_OK;
}

const char *st_gen_echo(const st_gen *g, size_t *len)
{
    *len = g->n_echo;
    return g->echo ? g->echo : "";
}

/* gen_stop_string - whether the text delta d[0..n) completes a stop
 * string; slides the window. */
static bool gen_stop_string(st_gen *g, const char *d, size_t n)
{
    if (g->max_stop == 0 || n == 0)
        return false;
    memcpy(g->win + g->n_win, d, n);
    g->n_win += n;
    for (size_t i = 0; i < g->p.n_stop; i++)
        if (memmem(g->win, g->n_win, g->stop[i], strlen(g->stop[i])) != NULL)
            return true;
    const size_t keep = g->max_stop - 1;
    if (g->n_win > keep) {
        memmove(g->win, g->win + g->n_win - keep, keep);
        g->n_win = keep;
    }
    return false;
}

st_err st_gen_accept(st_gen *g, int32_t id, bool forced, st_gen_tok *out)
{
    if (g->stop_reason != ST_GEN_GO || g->finished)
        return st_errorf(ST_EINVAL, "generation: an id after its end");
    if (id < 0 || (size_t)id >= g->n_vocab)
        return st_errorf(ST_ERANGE, "generation: id %d is outside the vocabulary of %zu", id,
                         g->n_vocab);
    g->ids[g->n_ids++] = id;
    size_t nw = 0;
    if (g->has_text && (size_t)id < st_tok_n_vocab(g->tok)) {
        st_err e = st_detok_push(&g->dt, id, g->dbuf, g->dcap, &nw);
        if (e != ST_OK)
            return e;
    }
    const size_t n_gen = g->n_ids - g->n_prompt;
    st_gen_stop s = ST_GEN_GO;
    if (!forced && (id == g->p.eos_id || id == g->p.eot_id))
        s = ST_GEN_EOS;
    else if (gen_stop_string(g, g->dbuf, nw))
        s = ST_GEN_STOP_STRING;
    else if (n_gen == g->p.max_tokens)
        s = ST_GEN_LENGTH;
    else if ((int64_t)g->n_ids >= g->n_ctx)
        s = ST_GEN_CTX_FULL;
    g->stop_reason = s;
    *out = (st_gen_tok){.id = id, .stop = s, .text = g->has_text ? g->dbuf : "", .len = nw};
    return ST_OK;
}

st_err st_gen_step(st_gen *g, const float *logits, st_gen_tok *out)
{
    if (g->stop_reason != ST_GEN_GO || g->finished)
        return st_errorf(ST_EINVAL, "generation: a step after its end");
    if (g->work == NULL) {
        if ((g->work = malloc(g->n_vocab * sizeof *g->work)) == NULL ||
            st_sample_scratch_init(&g->scr, g->n_vocab) != ST_OK)
            return st_errorf(ST_ENOMEM, "generation: sampler buffers");
    }
    memcpy(g->work, logits, g->n_vocab * sizeof *g->work);
    int32_t id;
    st_err e = st_sample(&g->p.sp, &g->rng, g->work, g->n_vocab, g->ids, g->n_ids, &g->scr, &id);
    if (e != ST_OK)
        return e;
    return st_gen_accept(g, id, false, out);
}

void st_gen_finish(st_gen *g, const char **text, size_t *len)
{
    *text = "";
    *len = 0;
    if (g->finished)
        return;
    g->finished = true;
    if (g->has_text && st_detok_flush(&g->dt, g->dbuf, g->dcap, len) == ST_OK)
        *text = g->dbuf;
}

st_gen_stop st_gen_stopped(const st_gen *g) { return g->stop_reason; }

const int32_t *st_gen_ids(const st_gen *g, size_t *n)
{
    *n = g->n_ids;
    return g->ids;
}

st_rng st_gen_rng(const st_gen *g) { return g->rng; }

size_t st_gen_n_generated(const st_gen *g) { return g->n_ids - g->n_prompt; }
