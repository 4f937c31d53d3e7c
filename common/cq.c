/* queue.c - the event queue between NNG callbacks and the main thread
 * (see queue.h). */
#include "common/cq.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

st_err st_cq_init(st_cq *q)
{
    q->head = q->tail = NULL;
    q->dropped = 0;
    if (pthread_mutex_init(&q->mu, NULL) != 0)
        return st_errorf(ST_EINTERNAL, "event queue mutex");
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0 ||
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0 ||
        pthread_cond_init(&q->cv, &ca) != 0) {
        pthread_mutex_destroy(&q->mu);
        return st_errorf(ST_EINTERNAL, "event queue condition variable");
    }
    pthread_condattr_destroy(&ca);
    return ST_OK;
}

void st_cq_fini(st_cq *q)
{
    st_cq_event *e = q->head;
    while (e) {
        st_cq_event *n = e->next;
        if (e->msg)
            nng_msg_free(e->msg);
        free(e);
        e = n;
    }
    q->head = q->tail = NULL;
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
}

void st_cq_push(st_cq *q, const st_cq_event *ev)
{
    st_cq_event *n = malloc(sizeof *n);
    pthread_mutex_lock(&q->mu);
    if (n == NULL) {
        q->dropped++;
        pthread_mutex_unlock(&q->mu);
        if (ev->msg)
            nng_msg_free(ev->msg);
        return;
    }
    *n = *ev;
    n->next = NULL;
    if (q->tail)
        q->tail->next = n;
    else
        q->head = n;
    q->tail = n;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

bool st_cq_pop(st_cq *q, st_cq_event *out, uint64_t wait_ns)
{
    pthread_mutex_lock(&q->mu);
    if (q->head == NULL && wait_ns > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + wait_ns % 1000000000u;
        ts.tv_sec += (time_t)(wait_ns / 1000000000u + ns / 1000000000u);
        ts.tv_nsec = (long)(ns % 1000000000u);
        while (q->head == NULL) {
            if (pthread_cond_timedwait(&q->cv, &q->mu, &ts) == ETIMEDOUT)
                break;
        }
    }
    st_cq_event *e = q->head;
    if (e) {
        q->head = e->next;
        if (q->head == NULL)
            q->tail = NULL;
    }
    pthread_mutex_unlock(&q->mu);
    if (e == NULL)
        return false;
    *out = *e;
    out->next = NULL;
    free(e);
    return true;
}
