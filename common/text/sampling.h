/* sampling.h - choosing the next token from logits: repetition penalty,
 * greedy or temperature sampling with top-k, top-p and min-p, driven by a
 * small seeded RNG whose state is plain data (it travels with a session).
 *
 * The order follows llama.cpp's default chain: penalty, then (unless
 * greedy) top-k, top-p, min-p on the untempered distribution, then the
 * temperature over the kept tokens and one draw. Sampling is deterministic
 * given the parameters, the logits, the history and the RNG state. */
#ifndef ST_SAMPLING_H
#define ST_SAMPLING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"

typedef struct st_sampler_params {
    float temp;            /* 0: greedy; > 0: sampling temperature */
    int32_t top_k;         /* keep the k most likely; 0: off */
    float top_p;           /* nucleus mass in (0, 1]; 1: off */
    float min_p;           /* drop p < min_p * p_max; in [0, 1]; 0: off */
    float repeat_penalty;  /* > 0; 1: off */
    int32_t repeat_last_n; /* history window of the penalty; 0: off */
    uint64_t seed;         /* seeds a session's RNG */
} st_sampler_params;

/* st_sampler_params_default - temp 0.8, top_k 40, top_p 0.95, min_p 0.05,
 * repeat_penalty 1 (off), repeat_last_n 64, seed 0. */
st_sampler_params st_sampler_params_default(void);

/* The valid range of each field: the one definition. st_sampler_params_validate
 * checks them; the front ends that parse the fields (the CLI's flags,
 * cli/args.c; the HTTP gateway, coordinator/http/http_req.c) take their bounds
 * from here. A value is valid when it is a number in [lo, hi] (lo excluded
 * when lo_open); NaN never is. */
typedef struct st_sampler_range {
    const char *name; /* the field, as messages name it */
    float lo, hi;
    bool lo_open;
} st_sampler_range;

extern const st_sampler_range st_sampler_range_temp;           /* [0, 100] */
extern const st_sampler_range st_sampler_range_top_k;          /* [0, 2^30] */
extern const st_sampler_range st_sampler_range_top_p;          /* (0, 1] */
extern const st_sampler_range st_sampler_range_min_p;          /* [0, 1] */
extern const st_sampler_range st_sampler_range_repeat_penalty; /* [0.01, 100] */
extern const st_sampler_range st_sampler_range_repeat_last_n;  /* [0, 2^31] */

/* The OpenAI API's temperature is [0, 2]: the HTTP gateway narrows
 * st_sampler_range_temp's upper bound to this one. */
#define ST_SAMPLER_TEMP_MAX_OPENAI 2.0f

/* st_sampler_range_has - whether v is in r (false for NaN). */
bool st_sampler_range_has(const st_sampler_range *r, double v);

/* st_sampler_params_validate - ST_EINVAL naming the first field outside
 * its range above ("sampler params: top_p 0 must be in (0, 1]"). */
st_err st_sampler_params_validate(const st_sampler_params *p);

/* The RNG: xoshiro256** seeded through splitmix64. Plain data: its
 * ST_RNG_WORDS words travel with a session (StepRow.rng, RowResult.rng). */
#define ST_RNG_WORDS 4
typedef struct st_rng {
    uint64_t s[ST_RNG_WORDS];
} st_rng;

/* st_rng_seed - the state for seed (every seed, 0 included, is valid). */
void st_rng_seed(st_rng *r, uint64_t seed);
/* st_rng_next_u64 - the next 64 random bits. */
uint64_t st_rng_next_u64(st_rng *r);
/* st_rng_next_f32 - a uniform float in [0, 1) (24 random bits). */
float st_rng_next_f32(st_rng *r);

/* Work space of st_sample for vocabularies up to cap ids: allocate once
 * per stream (or per thread), reuse for every token. */
typedef struct st_sample_scratch {
    size_t cap;
    int32_t *idx;  /* candidate ids */
    float *prob;   /* their probabilities */
    uint8_t *mark; /* penalty bookkeeping; all zero between calls */
} st_sample_scratch;

/* st_sample_scratch_init - allocates for n_vocab ids (ST_ENOMEM). */
st_err st_sample_scratch_init(st_sample_scratch *s, size_t n_vocab);
/* st_sample_scratch_free - frees; a zeroed or freed scratch is a no-op. */
void st_sample_scratch_free(st_sample_scratch *s);

/* st_sample - picks *out_id from logits[0..n_vocab).
 * 1. Repetition penalty: each distinct id among the last repeat_last_n of
 *    history[0..n_hist) has its logit divided by repeat_penalty if
 *    positive, multiplied if not (logits is modified).
 * 2. temp == 0: the first maximal logit; the RNG is not used.
 * 3. Otherwise: top-k (if > 0), softmax, top-p (the smallest prefix of the
 *    descending order with mass >= top_p, at least one), min-p (drop
 *    p < min_p * p_max), then softmax of logit / temp over what is left and
 *    one draw from rng (exactly one st_rng_next_f32).
 * ST_EINVAL for invalid params, n_vocab == 0 or above the scratch's cap, a
 * NaN or +Inf logit, or all logits -Inf; ST_ERANGE names a history id
 * outside [0, n_vocab). */
st_err st_sample(const st_sampler_params *p, st_rng *rng, float *logits, size_t n_vocab,
                 const int32_t *history, size_t n_hist, st_sample_scratch *scratch,
                 int32_t *out_id);

#endif
