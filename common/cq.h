/* queue.h - the coordinator's event queue: the one door between NNG's
 * callback threads and the main thread that owns all state.
 *
 * NNG completes asynchronous operations on its own threads. Their
 * callbacks do nothing but fill an st_cq_event and push it here (a mutex
 * and a condition variable, held only for the list operation); the main
 * thread pops events one by one and is the only code that reads or writes
 * members, plans, sessions and requests. No callback ever calls into that
 * state, and nothing is called while the queue's lock is held, so there is
 * no lock order to get wrong.
 *
 * The queue is bounded by construction, not by a number: every producer
 * (a REP context, the results receiver, an RPC call, a step send) has at
 * most one operation outstanding and re-arms only after the main thread
 * consumed its previous event. */
#ifndef ST_COORD_QUEUE_H
#define ST_COORD_QUEUE_H

#include <nng/nng.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"

typedef enum st_cq_kind {
    ST_CQ_CTL = 1,      /* a request arrived on REP context `slot` (msg set) */
    ST_CQ_RESULT = 2,   /* a frame arrived on the results PULL socket (msg set) */
    ST_CQ_OP_DONE = 3,  /* an outgoing operation (RPC call or step send) ended: op */
} st_cq_kind;

typedef struct st_cq_event {
    st_cq_kind kind;
    int rv;             /* NNG result (0 = success) */
    uint32_t slot;      /* ST_CQ_CTL: the REP context index */
    nng_msg *msg;       /* owned by whoever pops the event */
    void *op;           /* ST_CQ_OP_DONE: the st_net_op */
    struct st_cq_event *next;
} st_cq_event;

typedef struct st_cq {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    st_cq_event *head, *tail;
    uint64_t dropped; /* events lost to allocation failure (their msgs freed) */
} st_cq;

/* st_cq_init - an empty queue whose condition variable waits on
 * CLOCK_MONOTONIC. */
st_err st_cq_init(st_cq *q);

/* st_cq_fini - frees pending events and their messages. Only when no
 * producer can push any more (every aio stopped). */
void st_cq_fini(st_cq *q);

/* st_cq_push - appends a copy of ev and wakes the main thread. Called from
 * NNG callbacks; never blocks beyond the list lock. If the node cannot be
 * allocated the event's msg is freed and `dropped` counted: its producer
 * then times out like any lost message. */
void st_cq_push(st_cq *q, const st_cq_event *ev);

/* st_cq_pop - moves the oldest event into *out; waits up to wait_ns for one
 * (0: do not wait). Returns false if none came. */
bool st_cq_pop(st_cq *q, st_cq_event *out, uint64_t wait_ns);

#endif
