/* gen.h - one generation: the state of a token loop and its step. `strata
 * run`, `strata chat`, libstrata and the coordinator's scheduler all
 * generate through it, so each stop rule below has one definition and the
 * cluster gives the ids `strata run` gives by construction.
 *
 * Contract.
 * - Ownership: st_gen_open copies what it keeps (the params, the stop
 *   strings, the prompt); the tokenizer is borrowed and must outlive the
 *   generation. The text an st_gen_tok or st_gen_echo points to belongs to
 *   the generation and stays valid until the next call on it.
 * - The caller runs the model: it evaluates the prompt, gives each
 *   position's logits to st_gen_step (or a token chosen elsewhere to
 *   st_gen_accept), and evaluates the returned id while the step says
 *   ST_GEN_GO. The generation never touches a KV cache.
 * - History: the prompt then every accepted id (st_gen_ids); the
 *   repetition penalty of st_gen_step reads it. The RNG is seeded with
 *   params.sp.seed at open (or continues params.rng), so a generation's ids
 *   are a function of the params, the prompt and the logits.
 * - Text: each accepted id goes through one streaming detokenizer
 *   (common/text/tokenizer.h) unless text is ST_GEN_TEXT_NONE or there is no
 *   tokenizer; its output is the id's text delta (a UTF-8 character split
 *   over ids comes out whole with the id that completes it). An id of
 *   n_vocab that the tokenizer does not have (the padding rows of a model's
 *   head) has no text. st_gen_finish gives the rest (U+FFFD for a
 *   character left incomplete).
 * - Stop rules, checked after each accepted id, in this order; the id that
 *   triggers one is kept in the ids and its text in the text:
 *   1. ST_GEN_EOS: the id is eos_id or eot_id (not for an id accepted as
 *      forced: teacher forcing runs through the end ids).
 *   2. ST_GEN_STOP_STRING: the generated text (not the prompt's) now
 *      contains one of the stop strings, i.e. the text delta of this id
 *      completed one (a stop string may span several ids).
 *   3. ST_GEN_LENGTH: max_tokens ids were generated.
 *   4. ST_GEN_CTX_FULL: "context full" means the prompt and the generated
 *      ids number n_ctx: every id has a position in [0, n_ctx), the KV
 *      holds the n_ctx - 1 evaluated ones and the last id is never
 *      evaluated. A prompt must therefore have 1..n_ctx - 1 ids.
 *   After a stop, st_gen_step and st_gen_accept refuse (ST_EINVAL).
 * - Extension points, for what is not here yet: several ids per step
 *   (speculative decoding) are successive st_gen_accept calls, stopping at
 *   the first stop; a logits mask (grammars) and per-token logprobs belong
 *   in st_gen_step, before and after its st_sample. */
#ifndef ST_GEN_H
#define ST_GEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/text/sampling.h"
#include "common/text/tokenizer.h"

typedef enum st_gen_stop {
    ST_GEN_GO = 0,      /* not stopped: evaluate the id, step again */
    ST_GEN_EOS,         /* the id is EOS or EOT */
    ST_GEN_STOP_STRING, /* the text completed a stop string */
    ST_GEN_LENGTH,      /* max_tokens ids were generated */
    ST_GEN_CTX_FULL,    /* the ids fill the context (see above) */
} st_gen_stop;

/* How the text of the generated ids starts. */
typedef enum st_gen_text {
    ST_GEN_TEXT_NONE = 0, /* no text (ids only) */
    ST_GEN_TEXT_PROMPT,   /* the prompt is detokenized first, as the start of a text (its
                             text is st_gen_echo's); the generated text continues it */
    ST_GEN_TEXT_AFTER,    /* as ST_GEN_TEXT_PROMPT, the prompt's text dropped (no echo) */
    ST_GEN_TEXT_START,    /* the generated ids start a text (its space prefix removed) */
    ST_GEN_TEXT_CONTINUE, /* the generated ids continue a text (a chat turn) */
} st_gen_text;

typedef struct st_gen_params {
    st_sampler_params sp;    /* valid per st_sampler_params_validate */
    uint32_t max_tokens;     /* 0: the generation is over before its first step */
    int32_t eos_id, eot_id;  /* the end ids; -1: none */
    const char *const *stop; /* [n_stop] non-empty stop strings (copied) */
    size_t n_stop;
    st_gen_text text;
    const st_rng *rng; /* NULL: seed the RNG with sp.seed; else continue from this state
                          (copied: a conversation's next turn) */
} st_gen_params;

/* st_gen_params_default - st_sampler_params_default, the given max_tokens,
 * tok's EOS and EOT (-1 without tok), no stop strings, ST_GEN_TEXT_START,
 * the RNG seeded from the seed. */
st_gen_params st_gen_params_default(const st_tokenizer *tok, uint32_t max_tokens);

typedef struct st_gen st_gen;

/* One accepted id. text is valid until the next call on the generation. */
typedef struct st_gen_tok {
    int32_t id;
    st_gen_stop stop;
    const char *text; /* its text delta (len may be 0) */
    size_t len;
} st_gen_tok;

/* st_gen_open - a generation of prompt[0..n_prompt) in a context of n_ctx
 * over ids [0, n_vocab); tok may be NULL (then there is no text and stop
 * strings never fire). ST_EINVAL for invalid params (naming the field), an
 * empty stop string or n_vocab 0; ST_ERANGE for a prompt of 0 or n_ctx or
 * more ids or an id outside [0, n_vocab); ST_ENOMEM. */
st_err st_gen_open(const st_gen_params *p, const st_tokenizer *tok, size_t n_vocab, int64_t n_ctx,
                   const int32_t *prompt, size_t n_prompt, st_gen **out);

/* st_gen_close - frees g; NULL is a no-op. */
void st_gen_close(st_gen *g);

/* st_gen_echo - the prompt's text (ST_GEN_TEXT_PROMPT; otherwise empty). */
const char *st_gen_echo(const st_gen *g, size_t *len);

/* st_gen_step - samples the next id from logits[0..n_vocab) (not modified)
 * with the params, the history and the RNG, and accepts it. Errors of
 * st_sample; ST_ENOMEM; ST_EINVAL after a stop. */
st_err st_gen_step(st_gen *g, const float *logits, st_gen_tok *out);

/* st_gen_accept - accepts id chosen elsewhere: sampled by a worker, or
 * forced (teacher forcing: then EOS does not stop, rule 1). ST_ERANGE for
 * an id outside [0, n_vocab); ST_EINVAL after a stop. */
st_err st_gen_accept(st_gen *g, int32_t id, bool forced, st_gen_tok *out);

/* st_gen_finish - ends the text: *text, *len get what the detokenizer
 * still held (may be empty). Call once, at the end; then no more ids. */
void st_gen_finish(st_gen *g, const char **text, size_t *len);

/* st_gen_stopped - the stop reached (ST_GEN_GO while going on). */
st_gen_stop st_gen_stopped(const st_gen *g);

/* st_gen_ids - the history: the prompt then the generated ids; *n gets
 * their count. The array stays where it is until st_gen_close. */
const int32_t *st_gen_ids(const st_gen *g, size_t *n);

/* st_gen_rng - the RNG's state now (to continue it in a next generation). */
st_rng st_gen_rng(const st_gen *g);

/* st_gen_n_generated - how many ids were accepted. */
size_t st_gen_n_generated(const st_gen *g);

#endif
