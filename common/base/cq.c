/* cq.c - the owner thread's event queue and its wait helpers (see cq.h,
 * where the event-loop rule they serve is stated). */
#include "common/base/cq.h"

#include <errno.h>
#include <stdlib.h>

#define CQ_NS_PER_S 1000000000u

st_err st_cq_cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    int rv = pthread_condattr_init(&ca);
    if (rv != 0)
        return st_err_errno(rv, "condition variable attributes");
    rv = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (rv == 0)
        rv = pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rv != 0)
        return st_err_errno(rv, "condition variable on CLOCK_MONOTONIC");
    return ST_OK;
}

struct timespec st_cq_deadline(uint64_t wait_ns)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + wait_ns % CQ_NS_PER_S;
    ts.tv_sec += (time_t)(wait_ns / CQ_NS_PER_S + ns / CQ_NS_PER_S);
    ts.tv_nsec = (long)(ns % CQ_NS_PER_S);
    return ts;
}

st_err st_cq_init(st_cq *q)
{
    q->head = q->tail = NULL;
    q->dropped = 0;
    if (pthread_mutex_init(&q->mu, NULL) != 0)
        return st_errorf(ST_EINTERNAL, "event queue mutex");
    st_err e = st_cq_cond_init(&q->cv);
    if (e != ST_OK) {
        pthread_mutex_destroy(&q->mu);
        return e;
    }
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
        struct timespec ts = st_cq_deadline(wait_ns);
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
