/* pool.c - fork-join thread pool with hwloc pinning (see pool.h).
 *
 * A job is published by storing fn/arg and bumping an atomic generation
 * counter; each worker runs its share and decrements an atomic count of
 * pending workers. Both sides first spin on those atomics for at most
 * POOL_SPIN_NS (a few tens of microseconds: the gap between two phases of
 * a forward pass is far shorter, and a futex wake-up costs about as much as
 * a small phase), then sleep on a condition variable. Sleepers announce
 * themselves (sleepers, caller_waiting) before their last check, with
 * sequentially consistent atomics on both sides, so a wake-up is never
 * lost; the mutex is taken only when someone sleeps. A worker idle for
 * longer than the spin bound costs no CPU, so several processes can share
 * the cores. */
#include "common/base/pool.h"

#include <hwloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "common/base/log.h"

#define POOL_SPIN_NS 50000L     /* longest spin before sleeping */
#define POOL_SPINS_PER_CLOCK 64 /* spins between two reads of the clock */

typedef struct pool_thread {
    struct st_pool *pool;
    pthread_t tid;
    int ith;
} pool_thread;

struct st_pool {
    int nth;
    pool_thread *threads; /* nth - 1 workers; thread 0 is the caller */
    pthread_mutex_t mu;
    pthread_cond_t cv_work;
    pthread_cond_t cv_done;
    atomic_ulong gen;   /* job generation */
    atomic_int pending; /* workers still running the job */
    atomic_int stop;
    atomic_int sleepers;       /* workers asleep (or about to be) on cv_work */
    atomic_int caller_waiting; /* the caller asleep (or about to be) on cv_done */
    st_pool_fn fn;             /* written before gen is bumped, read after */
    void *arg;
    hwloc_topology_t topo;
    int topo_ok;
    int pin;
};

static inline void pool_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static long pool_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000000000L + ts.tv_nsec;
}

void st_pool_split(long n, int ith, int nth, long *begin, long *end)
{
    long q = n / nth, r = n % nth;
    *begin = (long)ith * q + (ith < r ? ith : r);
    *end = *begin + q + (ith < r ? 1 : 0);
}

static void pool_pin(st_pool *p, int ith)
{
    if (!p->pin || !p->topo_ok)
        return;
    int ncores = hwloc_get_nbobjs_by_type(p->topo, HWLOC_OBJ_CORE);
    if (ncores <= 0)
        return;
    hwloc_obj_t core = hwloc_get_obj_by_type(p->topo, HWLOC_OBJ_CORE, (unsigned)(ith % ncores));
    if (core == NULL || core->cpuset == NULL)
        return;
    hwloc_bitmap_t set = hwloc_bitmap_dup(core->cpuset);
    hwloc_bitmap_singlify(set);
    if (hwloc_set_cpubind(p->topo, set, HWLOC_CPUBIND_THREAD) != 0)
        st_log(ST_LOG_DEBUG, "pool", "pinning thread %d failed; running unpinned", ith);
    hwloc_bitmap_free(set);
}

/* pool_job_ready - a new job (gen differs from seen) or stop. */
static bool pool_job_ready(st_pool *p, unsigned long seen)
{
    return atomic_load(&p->gen) != seen || atomic_load(&p->stop);
}

/* pool_workers_done - no worker still runs the job (seen unused). */
static bool pool_workers_done(st_pool *p, unsigned long seen)
{
    (void)seen;
    return atomic_load(&p->pending) == 0;
}

/* pool_spin - spins until ready(p, seen) holds (returns true) or about
 * POOL_SPIN_NS have passed (returns false: the caller sleeps). The clock is
 * read every POOL_SPINS_PER_CLOCK spins, starting from the first read. */
static bool pool_spin(st_pool *p, bool (*ready)(st_pool *, unsigned long), unsigned long seen)
{
    long t0 = 0;
    for (unsigned spins = 1;; spins++) {
        if (ready(p, seen))
            return true;
        pool_relax();
        if (spins % POOL_SPINS_PER_CLOCK == 0) {
            long t = pool_now_ns();
            if (t0 == 0)
                t0 = t;
            else if (t - t0 > POOL_SPIN_NS)
                return false;
        }
    }
}

/* pool_wait_job - returns once gen differs from seen or stop is set:
 * spins up to POOL_SPIN_NS, then sleeps on cv_work. */
static void pool_wait_job(st_pool *p, unsigned long seen)
{
    if (pool_spin(p, pool_job_ready, seen))
        return;
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->sleepers, 1);
    while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop))
        pthread_cond_wait(&p->cv_work, &p->mu);
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->mu);
}

static void *pool_main(void *a)
{
    pool_thread *t = a;
    st_pool *p = t->pool;
    pool_pin(p, t->ith);
    unsigned long seen = 0;
    for (;;) {
        pool_wait_job(p, seen);
        if (atomic_load(&p->stop))
            return NULL;
        seen = atomic_load(&p->gen);
        p->fn(p->arg, t->ith, p->nth);
        if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->caller_waiting)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

static int topo_cores(hwloc_topology_t topo)
{
    /* Cores that intersect the process's allowed cpuset (taskset). */
    hwloc_bitmap_t allowed = hwloc_bitmap_alloc();
    int n = 0;
    if (allowed && hwloc_get_cpubind(topo, allowed, HWLOC_CPUBIND_PROCESS) == 0) {
        int nc = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
        for (int i = 0; i < nc; i++) {
            hwloc_obj_t c = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, (unsigned)i);
            if (c && hwloc_bitmap_intersects(c->cpuset, allowed))
                n++;
        }
    }
    hwloc_bitmap_free(allowed);
    return n;
}

int st_ncores(void)
{
    hwloc_topology_t topo;
    int n = 0;
    if (hwloc_topology_init(&topo) == 0) {
        if (hwloc_topology_load(topo) == 0)
            n = topo_cores(topo);
        hwloc_topology_destroy(topo);
    }
    if (n <= 0) {
        long s = sysconf(_SC_NPROCESSORS_ONLN);
        n = s > 0 ? (int)s : 1;
    }
    return n;
}

st_err st_pool_open(int n_threads, int pin, st_pool **out)
{
    *out = NULL;
    if (n_threads < 0 || n_threads > 1024)
        return st_errorf(ST_EINVAL, "thread count %d out of range 0..1024", n_threads);
    st_pool *p = calloc(1, sizeof *p);
    if (p == NULL)
        return st_errorf(ST_ENOMEM, "pool");
    if (hwloc_topology_init(&p->topo) == 0) {
        if (hwloc_topology_load(p->topo) == 0)
            p->topo_ok = 1;
        else
            hwloc_topology_destroy(p->topo);
    }
    if (n_threads == 0) {
        n_threads = p->topo_ok ? topo_cores(p->topo) : 0;
        if (n_threads <= 0) {
            st_log(ST_LOG_INFO, "pool", "hwloc reported no cores; using 1 thread");
            n_threads = 1;
        }
    }
    /* Pin only when the pool takes every core of the machine and the
     * process may run on all of them: a pool using fewer cores (several
     * workers on one machine, each with --threads 1) would otherwise pin
     * every process's thread 0 to core 0; a restricted cpuset (taskset)
     * is left to the kernel's scheduler inside it. */
    p->pin = pin && p->topo_ok && topo_cores(p->topo) == n_threads &&
             topo_cores(p->topo) == hwloc_get_nbobjs_by_type(p->topo, HWLOC_OBJ_CORE);
    if (pin && !p->pin)
        st_log(ST_LOG_INFO, "pool",
               "not pinning: the pool does not span every core, the "
               "cpuset is restricted, or the topology is unknown");
    p->nth = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (p->threads == NULL) {
        st_pool_close(p);
        return st_errorf(ST_ENOMEM, "pool threads");
    }
    pool_pin(p, 0);
    for (int i = 1; i < n_threads; i++) {
        p->threads[i].pool = p;
        p->threads[i].ith = i;
        int rc = pthread_create(&p->threads[i].tid, NULL, pool_main, &p->threads[i]);
        if (rc != 0) {
            p->nth = i; /* only threads 1..i-1 exist */
            st_pool_close(p);
            return st_err_errno(rc, "pthread_create");
        }
    }
    *out = p;
    return ST_OK;
}

void st_pool_close(st_pool *p)
{
    if (p == NULL)
        return;
    if (p->threads) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->stop, 1);
        pthread_cond_broadcast(&p->cv_work);
        pthread_mutex_unlock(&p->mu);
        for (int i = 1; i < p->nth; i++)
            pthread_join(p->threads[i].tid, NULL);
        free(p->threads);
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_work);
    pthread_cond_destroy(&p->cv_done);
    if (p->topo_ok)
        hwloc_topology_destroy(p->topo);
    free(p);
}

int st_pool_size(const st_pool *p) { return p->nth; }

void st_pool_run(st_pool *p, st_pool_fn fn, void *arg)
{
    if (p->nth == 1) {
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    atomic_store(&p->pending, p->nth - 1);
    atomic_fetch_add(&p->gen, 1); /* publishes fn, arg and pending */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv_work);
        pthread_mutex_unlock(&p->mu);
    }

    fn(arg, 0, p->nth);

    if (pool_spin(p, pool_workers_done, 0))
        return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->caller_waiting, 1);
    while (atomic_load(&p->pending) > 0)
        pthread_cond_wait(&p->cv_done, &p->mu);
    atomic_store(&p->caller_waiting, 0);
    pthread_mutex_unlock(&p->mu);
}
