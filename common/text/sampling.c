/* sampling.c - repetition penalty, greedy and top-k / top-p / min-p /
 * temperature sampling, and the seeded RNG.
 *
 * Design. st_sample never allocates: the caller's scratch holds a
 * candidate index array, a probability array and a byte per id used to
 * apply the penalty once per distinct id (set while applying, cleared
 * right after, so it is all zero between calls).
 *
 * The candidate set lives in scratch->idx and shrinks stage by stage:
 * - top-k keeps the k best ids with a min-heap of size k (root = the worst
 *   kept), O(n log k);
 * - top-p turns the candidates into a max-heap and pops the best one at a
 *   time until the popped mass reaches top_p, so it costs O(n + m log n)
 *   for m kept tokens instead of a full sort;
 * - min-p is one linear filter, since p_i >= min_p * p_max is
 *   exp(l_i - l_max) >= min_p.
 * "Better" is a total order (higher logit, then lower id), so every stage
 * and therefore every draw is deterministic. Probabilities are computed
 * as exp(l - l_max) with sums in double. The temperature is applied last,
 * over the kept tokens only (llama.cpp's default order), and the draw
 * walks the kept tokens accumulating weights until they exceed
 * u * total, u from one st_rng_next_f32.
 *
 * The RNG is xoshiro256** (Blackman and Vigna) with its state filled by
 * splitmix64 from the seed, so any seed, 0 included, gives a good state. */
#include "common/text/sampling.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

st_sampler_params st_sampler_params_default(void)
{
    st_sampler_params p = {.temp = 0.8f,
                           .top_k = 40,
                           .top_p = 0.95f,
                           .min_p = 0.05f,
                           .repeat_penalty = 1.0f,
                           .repeat_last_n = 64,
                           .seed = 0};
    return p;
}

const st_sampler_range st_sampler_range_temp = {"temp", 0.0f, 100.0f, false};
const st_sampler_range st_sampler_range_top_k = {"top_k", 0.0f, (float)(1 << 30), false};
const st_sampler_range st_sampler_range_top_p = {"top_p", 0.0f, 1.0f, true};
const st_sampler_range st_sampler_range_min_p = {"min_p", 0.0f, 1.0f, false};
const st_sampler_range st_sampler_range_repeat_penalty = {"repeat_penalty", 0.01f, 100.0f, false};
/* 2^31: every int32_t >= 0 */
const st_sampler_range st_sampler_range_repeat_last_n = {"repeat_last_n", 0.0f, 2147483648.0f,
                                                         false};

bool st_sampler_range_has(const st_sampler_range *r, double v)
{
    const double lo = (double)r->lo;
    return (r->lo_open ? v > lo : v >= lo) && v <= (double)r->hi;
}

/* smp_check - ST_EINVAL naming r's field when v is outside r. */
static st_err smp_check(const st_sampler_range *r, double v)
{
    if (st_sampler_range_has(r, v))
        return ST_OK;
    return st_errorf(ST_EINVAL, "sampler params: %s %g must be in %c%g, %g]", r->name, v,
                     r->lo_open ? '(' : '[', (double)r->lo, (double)r->hi);
}

st_err st_sampler_params_validate(const st_sampler_params *p)
{
    if (p == NULL)
        return st_errorf(ST_EINVAL, "sampler params: NULL");
    st_err e;
    if ((e = smp_check(&st_sampler_range_temp, (double)p->temp)) != ST_OK ||
        (e = smp_check(&st_sampler_range_top_k, (double)p->top_k)) != ST_OK ||
        (e = smp_check(&st_sampler_range_top_p, (double)p->top_p)) != ST_OK ||
        (e = smp_check(&st_sampler_range_min_p, (double)p->min_p)) != ST_OK ||
        (e = smp_check(&st_sampler_range_repeat_penalty, (double)p->repeat_penalty)) != ST_OK ||
        (e = smp_check(&st_sampler_range_repeat_last_n, (double)p->repeat_last_n)) != ST_OK)
        return e;
    return ST_OK;
}

/* ---- RNG ---------------------------------------------------------------- */

static uint64_t smp_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t smp_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void st_rng_seed(st_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < ST_RNG_WORDS; i++)
        r->s[i] = smp_splitmix64(&x);
}

uint64_t st_rng_next_u64(st_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = smp_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = smp_rotl(s[3], 45);
    return result;
}

float st_rng_next_f32(st_rng *r) { return (float)(st_rng_next_u64(r) >> 40) * 0x1.0p-24f; }

/* ---- scratch ------------------------------------------------------------ */

st_err st_sample_scratch_init(st_sample_scratch *s, size_t n_vocab)
{
    memset(s, 0, sizeof *s);
    if (n_vocab == 0 || n_vocab > INT32_MAX)
        return st_errorf(ST_EINVAL, "sample scratch: vocabulary of %zu ids", n_vocab);
    s->idx = malloc(n_vocab * sizeof *s->idx);
    s->prob = malloc(n_vocab * sizeof *s->prob);
    s->mark = calloc(n_vocab, 1);
    if (!s->idx || !s->prob || !s->mark) {
        st_sample_scratch_free(s);
        return st_errorf(ST_ENOMEM, "sample scratch: out of memory for %zu ids", n_vocab);
    }
    s->cap = n_vocab;
    return ST_OK;
}

void st_sample_scratch_free(st_sample_scratch *s)
{
    free(s->idx);
    free(s->prob);
    free(s->mark);
    memset(s, 0, sizeof *s);
}

/* ---- heaps over candidate ids ------------------------------------------- */

/* smp_better - the total order of candidates: higher logit, then lower id. */
static bool smp_better(const float *l, int32_t a, int32_t b)
{
    return l[a] > l[b] || (l[a] == l[b] && a < b);
}

/* smp_sift - restores the heap property below position i of h[0..n).
 * best_root: the root is the best (max-heap); else the worst (min-heap). */
static void smp_sift(int32_t *h, size_t n, size_t i, const float *l, bool best_root)
{
    int32_t v = h[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && smp_better(l, h[c + 1], h[c]) == best_root)
            c++;
        if (smp_better(l, h[c], v) != best_root)
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
}

static void smp_heapify(int32_t *h, size_t n, const float *l, bool best_root)
{
    for (size_t i = n / 2; i-- > 0;)
        smp_sift(h, n, i, l, best_root);
}

/* smp_top_k - keeps in idx[0..k) the k best of idx[0..n) (k < n). */
static void smp_top_k(int32_t *idx, size_t n, size_t k, const float *l)
{
    smp_heapify(idx, k, l, false);
    for (size_t i = k; i < n; i++) {
        if (smp_better(l, idx[i], idx[0])) {
            idx[0] = idx[i];
            smp_sift(idx, k, 0, l, false);
        }
    }
}

/* smp_top_p - keeps the smallest set of best candidates whose mass (under
 * weights exp(l - lmax) / z) reaches top_p; moves them to idx[0..*n). */
static void smp_top_p(int32_t *idx, size_t *n, const float *l, float lmax, double z, float top_p)
{
    size_t c = *n;
    smp_heapify(idx, c, l, true);
    double cum = 0.0;
    size_t m = 0; /* popped so far; they sit at idx[c - m .. c) */
    while (m < c) {
        int32_t best = idx[0];
        size_t last = c - m - 1;
        idx[0] = idx[last];
        idx[last] = best;
        m++;
        if (last > 0)
            smp_sift(idx, last, 0, l, true);
        cum += exp((double)l[best] - (double)lmax) / z;
        if (cum >= (double)top_p)
            break;
    }
    memmove(idx, idx + (c - m), m * sizeof *idx);
    *n = m;
}

/* ---- the sampler -------------------------------------------------------- */

static st_err smp_penalize(const st_sampler_params *p, float *logits, size_t n_vocab,
                           const int32_t *history, size_t n_hist, uint8_t *mark)
{
    if (p->repeat_penalty == 1.0f || p->repeat_last_n == 0 || n_hist == 0)
        return ST_OK;
    size_t w = (size_t)p->repeat_last_n < n_hist ? (size_t)p->repeat_last_n : n_hist;
    const int32_t *h = history + (n_hist - w);
    for (size_t i = 0; i < w; i++)
        if (h[i] < 0 || (size_t)h[i] >= n_vocab)
            return st_errorf(ST_ERANGE, "history id %d (position %zu) outside [0, %zu)", h[i],
                             n_hist - w + i, n_vocab);
    for (size_t i = 0; i < w; i++) {
        int32_t id = h[i];
        if (mark[id])
            continue;
        mark[id] = 1;
        if (logits[id] > 0.0f)
            logits[id] /= p->repeat_penalty;
        else
            logits[id] *= p->repeat_penalty;
    }
    for (size_t i = 0; i < w; i++)
        mark[h[i]] = 0;
    return ST_OK;
}

st_err st_sample(const st_sampler_params *p, st_rng *rng, float *logits, size_t n_vocab,
                 const int32_t *history, size_t n_hist, st_sample_scratch *scratch, int32_t *out_id)
{
    if (p == NULL || logits == NULL || scratch == NULL || out_id == NULL ||
        (history == NULL && n_hist > 0))
        return st_errorf(ST_EINVAL, "st_sample: NULL argument");
    st_err e = st_sampler_params_validate(p);
    if (e != ST_OK)
        return e;
    if (n_vocab == 0 || n_vocab > scratch->cap)
        return st_errorf(ST_EINVAL, "st_sample: n_vocab %zu outside 1..%zu (scratch)", n_vocab,
                         scratch->cap);
    if (p->temp > 0.0f && rng == NULL)
        return st_errorf(ST_EINVAL, "st_sample: temp %g needs an RNG", (double)p->temp);
    for (size_t i = 0; i < n_vocab; i++)
        if (isnan(logits[i]) || logits[i] == INFINITY)
            return st_errorf(ST_EINVAL, "st_sample: logit %zu is %g", i, (double)logits[i]);
    e = smp_penalize(p, logits, n_vocab, history, n_hist, scratch->mark);
    if (e != ST_OK)
        return e;

    size_t best = 0;
    for (size_t i = 1; i < n_vocab; i++)
        if (logits[i] > logits[best])
            best = i;
    float lmax = logits[best];
    if (lmax == -INFINITY)
        return st_errorf(ST_EINVAL, "st_sample: every logit is -inf");
    if (p->temp == 0.0f) {
        *out_id = (int32_t)best;
        return ST_OK;
    }

    int32_t *idx = scratch->idx;
    float *w = scratch->prob;
    size_t n = n_vocab;
    for (size_t i = 0; i < n; i++)
        idx[i] = (int32_t)i;
    if (p->top_k > 0 && (size_t)p->top_k < n) {
        smp_top_k(idx, n, (size_t)p->top_k, logits);
        n = (size_t)p->top_k;
    }
    /* lmax stays the best logit: every stage keeps the best candidate. */
    if (p->top_p < 1.0f) {
        double z = 0.0;
        for (size_t i = 0; i < n; i++)
            z += exp((double)logits[idx[i]] - (double)lmax);
        smp_top_p(idx, &n, logits, lmax, z, p->top_p);
    }
    if (p->min_p > 0.0f) {
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            if (exp((double)logits[idx[i]] - (double)lmax) >= (double)p->min_p)
                idx[m++] = idx[i];
        n = m; /* the best has ratio 1 >= min_p, so m >= 1 */
    }

    double total = 0.0;
    for (size_t i = 0; i < n; i++) {
        w[i] = (float)exp(((double)logits[idx[i]] - (double)lmax) / (double)p->temp);
        total += w[i];
    }
    double u = (double)st_rng_next_f32(rng) * total;
    double cum = 0.0;
    size_t pick = n;
    for (size_t i = 0; i < n; i++) {
        cum += w[i];
        if (cum > u) {
            pick = i;
            break;
        }
    }
    if (pick == n) { /* rounding left u at the very top: the last token of weight > 0 */
        pick = n - 1;
        while (pick > 0 && w[pick] == 0.0f)
            pick--;
    }
    *out_id = idx[pick];
    return ST_OK;
}
