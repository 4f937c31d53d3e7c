/* sched_fake.h - a fake pipeline for the step scheduler's unit tests
 * (test_scheduler.c, test_sched_batching.c).
 *
 * The fake keeps, per session id, the ids at each KV position, refuses a
 * row that would leave a gap (as the stage engine does), and "samples" the
 * next id as a hash of the whole context, so the id depends on every
 * position being right. */
#ifndef ST_TEST_SCHED_FAKE_H
#define ST_TEST_SCHED_FAKE_H

#include <check.h>
#include <stdint.h>

#include "coordinator/sched/scheduler.h"

#define V 64
#define MS 1000000ull

typedef struct fake {
    uint64_t sid[32];
    int32_t kv[32][512];
    uint32_t len[32];
    int n;
    int32_t eos_after; /* sample EOS once a context is this long (0: never) */
    int32_t forced;    /* >= 0: every sample is this id */
} fake;

/* fake_run - runs batch b; fills res (and rng storage) for sampled rows;
 * returns how many. */
size_t fake_run(fake *f, const st_sched_batch *b, st_sched_result_row *res, uint64_t (*rng)[4]);

/* fake_complete - runs batch b on the fake and completes it at now. */
void fake_complete(st_sched *s, fake *f, const st_sched_batch *b, uint64_t now);

/* cfg_default - the tests' configuration (4 sessions, chunk 16, 40 ids per
 * batch, one batch in flight). */
st_sched_cfg cfg_default(void);

/* req_of - a greedy request for prompt p[0..n) and max new ids. */
st_gen_req req_of(const int32_t *p, size_t n, uint32_t max);

/* drive - runs steps until nothing is left to do (or max_steps); calls
 * fault(step) before each step when given. Returns the steps run. */
int drive(st_sched *s, fake *f, uint64_t *now, int max_steps,
          void (*fault)(st_sched *, int, const st_sched_batch *, void *), void *arg);

/* view - the view of request id (asserting it exists). */
st_req_view view(st_sched *s, uint64_t id);

/* reference - the ids generated for prompt p with no fault, alone. */
void reference(const int32_t *p, size_t n, uint32_t max, int32_t *out, uint32_t *n_out);

#endif
