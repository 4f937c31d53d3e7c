/* exit_guard.c - a bound on the release of a process's resources at exit
 * (see exit_guard.h for why: NNG 1.5.2's close can wait forever). One
 * thread per guard, waiting on a condition variable with a deadline; the
 * closer sets the flag under the mutex and joins it. */
#include "common/base/exit_guard.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/base/cq.h"
#include "common/base/log.h"

struct st_exit_guard {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
    bool closed; /* under mu */
    int bound_ms, status;
    char what[160];
};

static void *eg_main(void *arg)
{
    st_exit_guard *g = arg;
    struct timespec ts = st_cq_deadline((uint64_t)g->bound_ms * 1000000u);
    pthread_mutex_lock(&g->mu);
    while (!g->closed)
        if (pthread_cond_timedwait(&g->cv, &g->mu, &ts) != 0 && !g->closed) {
            pthread_mutex_unlock(&g->mu);
            st_log(ST_LOG_ERROR, "exit",
                   "%s did not end within %d ms: exiting without it (status %d). The "
                   "orderly part of the shutdown was done; the usual cause is NNG 1.5.2's "
                   "close, which waits forever once a message arrived on a closing pipe "
                   "(nanomsg/nng#1543; see common/base/exit_guard.h)",
                   g->what, g->bound_ms, g->status);
            _exit(g->status);
        }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

st_err st_exit_guard_open(const char *what, int bound_ms, int status, st_exit_guard **out)
{
    *out = NULL;
    if (bound_ms <= 0)
        return st_errorf(ST_EINVAL, "exit guard: a bound of %d ms", bound_ms);
    st_exit_guard *g = calloc(1, sizeof *g);
    if (g == NULL)
        return st_errorf(ST_ENOMEM, "exit guard");
    snprintf(g->what, sizeof g->what, "%s", what);
    g->bound_ms = bound_ms;
    g->status = status;
    st_err e = st_cq_cond_init(&g->cv); /* st_cq_deadline's clock */
    if (e != ST_OK) {
        free(g);
        return e;
    }
    pthread_mutex_init(&g->mu, NULL);
    if (pthread_create(&g->th, NULL, eg_main, g) != 0) {
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        free(g);
        return st_errorf(ST_EINTERNAL, "exit guard: cannot start its thread");
    }
    *out = g;
    return ST_OK;
}

void st_exit_guard_close(st_exit_guard *g)
{
    if (g == NULL)
        return;
    pthread_mutex_lock(&g->mu);
    g->closed = true;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->th, NULL);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}
