/* sched_fake.c - the fake pipeline of the scheduler's unit tests (see
 * sched_fake.h). */
#include "tests/coordinator/sched_fake.h"

#include <string.h>

static int32_t fake_next(const int32_t *ctx, uint32_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (uint32_t i = 0; i < n; i++)
        h = (h ^ (uint64_t)ctx[i]) * 1099511628211ull;
    return (int32_t)(3 + h % (V - 3)); /* never BOS/EOS/UNK */
}

static void rng_step(const uint64_t in[ST_RNG_WORDS], uint64_t out[ST_RNG_WORDS])
{
    for (int i = 0; i < 4; i++)
        out[i] = in[i] * 6364136223846793005ull + 1442695040888963407ull;
}

/* fake_run - runs batch b; fills res (and rng storage) for sampled rows. */
size_t fake_run(fake *f, const st_sched_batch *b, st_sched_result_row *res,
                uint64_t (*rng)[ST_RNG_WORDS])
{
    size_t n = 0;
    for (uint32_t i = 0; i < b->n_rows; i++) {
        const st_sched_row *r = &b->rows[i];
        int k = 0;
        while (k < f->n && f->sid[k] != r->session_id)
            k++;
        if (k == f->n) {
            ck_assert_int_lt(f->n, 32);
            f->sid[f->n] = r->session_id;
            f->len[f->n++] = 0;
        }
        ck_assert_msg(r->pos <= f->len[k], "row of session %llu at %u leaves a gap after %u",
                      (unsigned long long)r->session_id, r->pos, f->len[k]);
        ck_assert_uint_ge(r->n_tok, 1);
        memcpy(f->kv[k] + r->pos, r->tokens, r->n_tok * sizeof(int32_t));
        f->len[k] = r->pos + r->n_tok;
        if (!r->sample)
            continue;
        int32_t t = fake_next(f->kv[k], f->len[k]);
        if (f->forced >= 0)
            t = f->forced;
        if (f->eos_after && f->len[k] >= (uint32_t)f->eos_after)
            t = 2;
        rng_step(r->rng, rng[n]);
        res[n] = (st_sched_result_row){.session_id = r->session_id,
                                       .token = t,
                                       .rng = rng[n],
                                       .n_rng = 4};
        n++;
    }
    return n;
}

/* The tests name sessions by number: session and batch ids count up from
 * id_base, each kind on its own, as a scheduler's first ids (its own are
 * random). A counter pair per configuration made, from a pool (a test
 * keeps far fewer schedulers alive at once). */
#define FAKE_ID_POOL 64
typedef struct fake_ids {
    uint64_t next[2]; /* per st_sched_id_kind */
} fake_ids;

static uint64_t fake_seq_id(void *arg, st_sched_id_kind kind)
{
    return ++((fake_ids *)arg)->next[kind];
}

st_sched_cfg cfg_default(void)
{
    static fake_ids pool[FAKE_ID_POOL];
    static unsigned used;
    fake_ids *ids = &pool[used++ % FAKE_ID_POOL];
    st_sched_cfg c = {.n_ctx = 256,
                      .chunk = 16,
                      .max_batch_tokens = 40,
                      .max_sessions = 4,
                      .max_requests = 8,
                      .max_in_flight = 1,
                      .n_vocab = V,
                      .eos_id = 2,
                      .step_timeout_ns = 1000 * MS,
                      .queue_timeout_ns = 5000 * MS,
                      .finished_ttl_ns = 10000 * MS,
                      .idle_session_ttl_ns = 60000 * MS,
                      .id_base = 1000,
                      .new_id = fake_seq_id,
                      .id_arg = ids};
    ids->next[ST_SCHED_ID_SESSION] = ids->next[ST_SCHED_ID_BATCH] = c.id_base;
    return c;
}

st_gen_req req_of(const int32_t *p, size_t n, uint32_t max)
{
    st_gen_req g;
    memset(&g, 0, sizeof g);
    g.prompt = p;
    g.n_prompt = n;
    g.max_tokens = max;
    g.sp = st_sampler_params_default();
    g.sp.temp = 0;
    return g;
}

/* drive - runs steps until nothing is left to do (or max_steps); calls
 * fault(step) before each step when given. Returns the steps run. */
int drive(st_sched *s, fake *f, uint64_t *now, int max_steps,
          void (*fault)(st_sched *, int, const st_sched_batch *, void *), void *arg)
{
    st_sched_result_row res[64];
    uint64_t rng[64][ST_RNG_WORDS];
    int steps = 0;
    for (; steps < max_steps; steps++) {
        const st_sched_batch *b;
        ck_assert_int_eq(st_sched_form(s, 7, *now, &b), ST_OK);
        if (b == NULL)
            break;
        ck_assert_uint_le(b->n_tokens, 40);
        *now += MS;
        if (fault) {
            uint64_t id = b->id;
            fault(s, steps, b, arg);
            if (st_sched_in_flight(s) == 0)
                continue; /* the fault took the batch */
            ck_assert_uint_eq(b->id, id);
        }
        size_t n = fake_run(f, b, res, rng);
        ck_assert_int_eq(st_sched_complete(s, b->id, 7, res, n, *now), ST_OK);
    }
    return steps;
}

st_req_view view(st_sched *s, uint64_t id)
{
    st_req_view v;
    ck_assert_int_eq(st_sched_view(s, id, &v), ST_OK);
    return v;
}

/* reference - the ids generated for prompt with no fault. */
void reference(const int32_t *p, size_t n, uint32_t max, int32_t *out, uint32_t *n_out)
{
    st_sched_cfg c = cfg_default();
    st_sched *s;
    ck_assert_int_eq(st_sched_new(&c, &s), ST_OK);
    st_gen_req g = req_of(p, n, max);
    uint64_t id, now = 0;
    ck_assert_int_eq(st_sched_submit(s, &g, now, &id), ST_OK);
    fake f = {.forced = -1};
    drive(s, &f, &now, 10000, NULL, NULL);
    st_req_view v = view(s, id);
    ck_assert(v.done);
    memcpy(out, v.ids, v.n_ids * sizeof *out);
    *n_out = v.n_ids;
    st_sched_free(s);
}

/* fake_complete - runs batch b on the fake and completes it. */
void fake_complete(st_sched *s, fake *f, const st_sched_batch *b, uint64_t now)
{
    st_sched_result_row res[64];
    uint64_t rng[64][ST_RNG_WORDS];
    size_t n = fake_run(f, b, res, rng);
    ck_assert_int_eq(st_sched_complete(s, b->id, 7, res, n, now), ST_OK);
}
