/* pool.h - a fork-join thread pool.
 *
 * st_pool_run(pool, fn, arg) calls fn(arg, ith, nth) once on each of the
 * pool's nth threads (the caller is thread 0) and returns when all are
 * done. Work is split by the callee from (ith, nth), for example by output
 * rows. Between jobs a worker (and the caller waiting for the workers)
 * spins for at most about 50 microseconds, so back-to-back phases of a
 * forward pass hand over without a futex round trip, then sleeps on a
 * condition variable: an idle pool costs no CPU, so several processes can
 * share the cores (the README demo, tests, sidecars) without collapsing. Threads are pinned to
 * cores with hwloc when hwloc reports a usable topology; otherwise they run unpinned (logged). A
 * pool is driven by one thread at a time. */
#ifndef ST_POOL_H
#define ST_POOL_H

#include "common/base/err.h"

typedef struct st_pool st_pool;

typedef void (*st_pool_fn)(void *arg, int ith, int nth);

/* st_pool_open - starts a pool of n_threads (0 = the cores of the process's
 * cpuset as hwloc sees them, 1 if unknown); pin != 0 pins with hwloc. */
st_err st_pool_open(int n_threads, int pin, st_pool **out);

/* st_pool_close - joins the threads and frees; NULL is a no-op. */
void st_pool_close(st_pool *p);

/* st_pool_size - the number of threads, the caller included. */
int st_pool_size(const st_pool *p);

/* st_pool_run - runs fn on every thread and waits for all of them. */
void st_pool_run(st_pool *p, st_pool_fn fn, void *arg);

/* st_pool_split - the [begin, end) share of thread ith of nth over n items
 * (contiguous, sizes differing by at most one). */
void st_pool_split(long n, int ith, int nth, long *begin, long *end);

/* st_ncores - cores available to this process (hwloc, then sysconf). */
int st_ncores(void);

#endif
