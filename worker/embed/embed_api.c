/* embed_api.c - libstrata's public API (include/strata.h): a chain of
 * shard servers (common/net/chain.h) between the ends of the model, local
 * (worker/embed/embed_local.h) or an embedding service's (common/net/shard.h), and a generation
 * (common/text/gen.h) around them, as `strata run` has: the same sampler, seeded the same way, over
 * the same logits, with the same stop rules, so the ids are those of `strata run`. */
#include "include/strata.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/net/chain.h"
#include "common/wire/envelope.h"
#include "common/text/gen.h"
#include "common/text/sampling.h"
#include "common/net/shard.h"
#include "worker/embed/embed_local.h"

#define API_TIMEOUT_DEFAULT_MS 60000
#define API_ERR_MAX 512

struct strata_chain {
    st_ends *ends;    /* the tokenizer; the embedding and head unless remote */
    st_shard *remote; /* an embedding service, or NULL */
    st_chain *chain;
    int64_t n_ctx;
    int64_t n_vocab;
    char err[API_ERR_MAX];
};

/* api_fail - records e's message on c and returns e. */
static int api_fail(strata_chain *c, st_err e)
{
    snprintf(c->err, sizeof c->err, "%s", st_errmsg(e));
    return (int)e;
}

strata_sampling strata_sampling_default(void)
{
    st_sampler_params p = st_sampler_params_default();
    return (strata_sampling){.temp = p.temp,
                             .top_k = p.top_k,
                             .top_p = p.top_p,
                             .min_p = p.min_p,
                             .repeat_penalty = p.repeat_penalty,
                             .repeat_last_n = p.repeat_last_n,
                             .seed = p.seed};
}

static st_err api_open(const strata_chain_config *cfg, strata_chain *c)
{
    st_wire_dtype dt = ST_WIRE_F32;
    uint8_t key[ST_KEY_BYTES];
    st_err e;
    if (cfg->model == NULL || cfg->shards == NULL || cfg->n_shards == 0)
        return st_errorf(ST_EINVAL, "a chain needs a model and at least one shard server");
    if (cfg->dtype != NULL && (e = st_wire_dtype_from_name(cfg->dtype, &dt)) != ST_OK)
        return e;
    if (cfg->encrypt && cfg->key_file == NULL)
        return st_errorf(ST_EINVAL, "encryption needs a key file");
    if (cfg->key_file != NULL && (e = st_key_load(cfg->key_file, key)) != ST_OK)
        return st_errwrap(e, "key %s", cfg->key_file);
    const bool local = cfg->embed == NULL;
    const int tmo = cfg->timeout_ms > 0 ? cfg->timeout_ms : API_TIMEOUT_DEFAULT_MS;
    const uint8_t *k = cfg->key_file ? key : NULL;
    if ((e = st_ends_open(cfg->model, cfg->threads, false, local, local, &c->ends)) != ST_OK)
        e = st_errwrap(e, "%s", cfg->model);
    if (e == ST_OK && !local &&
        (e = st_shard_connect(cfg->embed, k, cfg->encrypt != 0, ST_WIRE_F32, tmo, &c->remote)) ==
            ST_OK &&
        !st_shard_info_of(c->remote)->ends)
        e = st_errorf(ST_EINVAL, "%s is a shard server, not an embedding service", cfg->embed);
    if (e == ST_OK)
        e = st_chain_open((const char *const *)cfg->shards, cfg->n_shards, k, cfg->encrypt != 0, dt,
                          tmo, &c->chain);
    sodium_memzero(key, sizeof key);
    if (e != ST_OK)
        return e;
    const st_hparams *hp = st_ends_hparams(c->ends);
    if (c->remote != NULL && (memcmp(st_shard_info_of(c->remote)->model_id,
                                     st_ends_model_id(c->ends), ST_WIRE_PLAN_HASH_SIZE) != 0 ||
                              st_shard_info_of(c->remote)->n_vocab != hp->n_vocab))
        return st_errorf(ST_EEPOCH, "the embedding service serves another model than %s",
                         cfg->model);
    if (memcmp(st_chain_model_id(c->chain), st_ends_model_id(c->ends), ST_WIRE_PLAN_HASH_SIZE) !=
            0 ||
        st_chain_n_layer(c->chain) != hp->n_layer || st_chain_hidden(c->chain) != hp->n_embd)
        return st_errorf(ST_EEPOCH, "the shard servers serve another model than %s", cfg->model);
    c->n_ctx = st_chain_n_ctx(c->chain) < hp->n_ctx_train ? st_chain_n_ctx(c->chain)
                                                          : hp->n_ctx_train;
    c->n_vocab = hp->n_vocab;
    return ST_OK;
}

int strata_chain_open(const strata_chain_config *cfg, strata_chain **out, char *err, size_t err_len)
{
    *out = NULL;
    strata_chain *c = calloc(1, sizeof *c);
    if (c == NULL) {
        if (err != NULL && err_len > 0)
            snprintf(err, err_len, "out of memory");
        return ST_ENOMEM;
    }
    st_err e = api_open(cfg, c);
    if (e != ST_OK) {
        if (err != NULL && err_len > 0)
            snprintf(err, err_len, "%s", st_errmsg(e));
        strata_chain_close(c);
        return (int)e;
    }
    *out = c;
    return 0;
}

void strata_chain_close(strata_chain *c)
{
    if (c == NULL)
        return;
    st_chain_close(c->chain);
    st_shard_close(c->remote);
    st_ends_close(c->ends);
    free(c);
}

int strata_tokenize(strata_chain *c, const char *text, int32_t **ids, size_t *n)
{
    const st_tokenizer *tok = st_ends_tok(c->ends);
    st_err e = st_tok_encode(tok, text, strlen(text), st_tok_add_bos(tok), ids, n);
    return e == ST_OK ? 0 : api_fail(c, e);
}

void strata_free(void *p) { free(p); }

/* api_embed - the chain's embedding callback: local, or asked of the
 * embedding service in chunks it takes. */
static st_err api_embed(void *arg, const int32_t *ids, int64_t n, float *out)
{
    strata_chain *c = arg;
    if (c->remote == NULL)
        return st_ends_embed(c->ends, ids, n, out);
    const st_shard_info *i = st_shard_info_of(c->remote);
    for (int64_t d = 0; d < n; d += i->max_tokens) {
        const int64_t k = n - d < (int64_t)i->max_tokens ? n - d : (int64_t)i->max_tokens;
        st_err e = st_shard_embed(c->remote, ids + d, k, out + (size_t)d * i->hidden);
        if (e != ST_OK)
            return e;
    }
    return ST_OK;
}

/* A generation's buffers. */
typedef struct api_gen {
    float *last, *logits;
    st_gen *g;
} api_gen;

static void api_gen_free(api_gen *g)
{
    free(g->last);
    free(g->logits);
    st_gen_close(g->g);
}

/* api_eval - runs ids[pos, n_ids) and puts the next token's logits in
 * g->logits. */
static st_err api_eval(strata_chain *c, api_gen *g, uint64_t session, const int32_t *ids,
                       int64_t n_ids, int64_t pos)
{
    st_err e = st_chain_forward(c->chain, session, ids, n_ids, pos, api_embed, c, g->last);
    if (e != ST_OK)
        return e;
    return c->remote ? st_shard_logits(c->remote, g->last, 1, g->logits)
                     : st_ends_logits(c->ends, g->last, 1, g->logits);
}

static st_err api_generate(strata_chain *c, api_gen *g, const int32_t *prompt, size_t n_prompt,
                           int n_predict, const st_sampler_params *sp, strata_token_fn fn,
                           void *arg, uint64_t session)
{
    const st_tokenizer *tok = st_ends_tok(c->ends);
    const size_t V = (size_t)c->n_vocab;
    if (n_prompt == 0 || (int64_t)n_prompt >= c->n_ctx)
        return st_errorf(ST_ERANGE, "a prompt of %zu tokens (1..%lld fit the context)", n_prompt,
                         (long long)c->n_ctx - 1);
    st_gen_params gp = st_gen_params_default(tok, (uint32_t)n_predict);
    gp.sp = *sp;
    st_err e = st_gen_open(&gp, tok, V, c->n_ctx, prompt, n_prompt, &g->g);
    if (e != ST_OK)
        return e;
    g->last = malloc(st_chain_hidden(c->chain) * sizeof *g->last);
    g->logits = malloc(V * sizeof *g->logits);
    if (!g->last || !g->logits)
        return st_errorf(ST_ENOMEM, "generation buffers");
    size_t n_ids;
    const int32_t *ids = st_gen_ids(g->g, &n_ids);
    e = api_eval(c, g, session, ids, (int64_t)n_ids, 0);
    while (e == ST_OK && st_gen_stopped(g->g) == ST_GEN_GO) {
        st_gen_tok t;
        if ((e = st_gen_step(g->g, g->logits, &t)) != ST_OK)
            break;
        if (fn != NULL && fn(arg, t.id, t.text, t.len) != 0)
            break;
        if (t.stop != ST_GEN_GO)
            break; /* a stop of common/text/gen.h, as in `strata run` */
        ids = st_gen_ids(g->g, &n_ids);
        e = api_eval(c, g, session, ids, (int64_t)n_ids, (int64_t)n_ids - 1);
    }
    const char *rest;
    size_t n_rest;
    st_gen_finish(g->g, &rest, &n_rest);
    if (e == ST_OK && n_rest > 0 && fn != NULL)
        (void)fn(arg, -1, rest, n_rest);
    return e;
}

int strata_generate(strata_chain *c, const int32_t *prompt, size_t n_prompt, int n_predict,
                    const strata_sampling *sp, strata_token_fn fn, void *arg)
{
    c->err[0] = '\0';
    strata_sampling d = sp != NULL ? *sp : strata_sampling_default();
    st_sampler_params p = {.temp = d.temp,
                           .top_k = d.top_k,
                           .top_p = d.top_p,
                           .min_p = d.min_p,
                           .repeat_penalty = d.repeat_penalty,
                           .repeat_last_n = d.repeat_last_n,
                           .seed = d.seed};
    st_err e = st_sampler_params_validate(&p);
    if (e == ST_OK && n_predict < 0)
        e = st_errorf(ST_EINVAL, "n_predict %d is negative", n_predict);
    for (size_t i = 0; e == ST_OK && i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= c->n_vocab)
            e = st_errorf(ST_ERANGE, "token id %d is outside the vocabulary of %lld", prompt[i],
                          (long long)c->n_vocab);
    if (e != ST_OK)
        return api_fail(c, e);
    uint64_t session;
    randombytes_buf(&session, sizeof session);
    api_gen g;
    memset(&g, 0, sizeof g);
    e = api_generate(c, &g, prompt, n_prompt, n_predict, &p, fn, arg, session);
    st_chain_end(c->chain, session);
    api_gen_free(&g);
    return e == ST_OK ? 0 : api_fail(c, e);
}

uint64_t strata_chain_replays(const strata_chain *c) { return st_chain_replays(c->chain); }
const char *strata_chain_error(const strata_chain *c) { return c->err; }
const char *strata_strerror(int e)
{
    return e >= 0 && e < ST_ERR_COUNT ? st_strerror((st_err)e) : "unknown error";
}
