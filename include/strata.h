/* strata.h - libstrata: generate text with a model split over standalone
 * shard servers (`strata-worker --standalone`), keeping only the ends of
 * the model (token embedding, output norm and head, tokenizer) in the
 * calling process. See docs/shards.md.
 *
 * A chain is opened from a local GGUF file (the embedding, head and
 * tokenizer are read from it; no layer is loaded; or, with an embedding
 * service, the tokenizer alone) and a list of shard
 * server addresses in layer order; a server whose layer range is already
 * covered is a replacement. The library keeps each generation's token
 * history; when a server is lost (its connection closes), does not answer
 * in time or forgot the session, a replacement of the same range takes
 * over and the history is replayed: the continuation is identical to the
 * one without the failure, and to `strata run` on the whole model.
 *
 * Errors: every function returning int returns 0 on success or a positive
 * error code (Strata's st_err values); strata_strerror() names a code and
 * strata_chain_error() gives the last failure's message on a chain.
 *
 * Threading: a chain may be used by one thread at a time (calls on one
 * chain must not overlap; different chains are independent). Callbacks run
 * on the calling thread, inside strata_generate. */
#ifndef STRATA_H
#define STRATA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct strata_chain strata_chain;

/* What a chain is made of. Strings are borrowed for the duration of
 * strata_chain_open only. */
typedef struct strata_chain_config {
    const char *model;         /* GGUF path: embedding, head, tokenizer */
    const char *const *shards; /* [n_shards] tcp://HOST:PORT in layer order */
    size_t n_shards;
    const char *key_file; /* cluster key of the servers, or NULL */
    int encrypt;          /* nonzero: seal frames (needs key_file) */
    const char *dtype;    /* wire dtype: "f32" (NULL), "bf16", "f16", "i8" */
    int threads;          /* for the head; 0: the cores */
    int timeout_ms;       /* per exchange with a server; 0: 60000 */
    const char *embed;    /* NULL: the ends are local; else the NNG address
                           * of an embedding service (strata-embed
                           * --listen): rows and logits are asked of it
                           * and only the tokenizer is read from model */
} strata_chain_config;

/* Sampling, as `strata run`'s flags, in their ranges (temp [0, 100], top_k
 * [0, 2^30], top_p (0, 1], min_p [0, 1], repeat_penalty [0.01, 100],
 * repeat_last_n >= 0); strata_sampling_default() gives its defaults (temp
 * 0.8, top_k 40, top_p 0.95, min_p 0.05, no repeat penalty over the last
 * 64, seed 0). temp 0 is greedy. */
typedef struct strata_sampling {
    float temp;
    int32_t top_k;
    float top_p;
    float min_p;
    float repeat_penalty;
    int32_t repeat_last_n;
    uint64_t seed;
} strata_sampling;

/* Called once per generated token, in order, with its id and its text
 * (bytes that complete UTF-8 characters; possibly none; not
 * NUL-terminated, valid during the call only). Return 0 to go on, nonzero
 * to stop the generation (strata_generate then returns 0). */
typedef int (*strata_token_fn)(void *arg, int32_t id, const char *text, size_t len);

/* strata_sampling_default - the defaults above. Thread-safe. */
strata_sampling strata_sampling_default(void);

/* strata_chain_open - loads the ends of cfg->model, connects to every
 * server (each must answer) and checks that they form a chain of the
 * model's layers. On success *out is the caller's, freed with
 * strata_chain_close. On failure *out is NULL and, when err is not NULL,
 * a message is written to err[0..err_len) (NUL-terminated). Thread-safe
 * (each call opens its own chain). */
int strata_chain_open(const strata_chain_config *cfg, strata_chain **out, char *err,
                      size_t err_len);

/* strata_chain_close - closes the connections and frees the chain; NULL
 * is a no-op. Not concurrently with another call on the chain. */
void strata_chain_close(strata_chain *c);

/* strata_tokenize - the ids of text (with BOS when the model adds one) in
 * a new array *ids of *n ids, the caller's to free with strata_free. */
int strata_tokenize(strata_chain *c, const char *text, int32_t **ids, size_t *n);

/* strata_free - frees what the library returned to the caller. */
void strata_free(void *p);

/* strata_generate - prefills prompt[0..n_prompt) and generates up to
 * n_predict tokens with sp (NULL: the defaults), stopping early at EOS or
 * EOT, at the end of the context, or when fn returns nonzero. The prompt
 * is borrowed for the call. fn may be NULL. The session is ended on the
 * servers before returning. */
int strata_generate(strata_chain *c, const int32_t *prompt, size_t n_prompt, int n_predict,
                    const strata_sampling *sp, strata_token_fn fn, void *arg);

/* strata_chain_replays - failures the chain survived so far (a history
 * replayed to a replacement or to a server that forgot the session). */
uint64_t strata_chain_replays(const strata_chain *c);

/* strata_chain_error - the message of the last failure on c (owned by c,
 * valid until the next call on c; "" if none). */
const char *strata_chain_error(const strata_chain *c);

/* strata_strerror - a static description of code e. Thread-safe. */
const char *strata_strerror(int e);

#ifdef __cplusplus
}
#endif

#endif
