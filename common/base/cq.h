/* cq.h - "callbacks post to the owner thread": the one event-loop design of
 * the coordinator and the worker, and the queue that carries its events.
 *
 * The rule. State has one owner thread, which alone reads and writes it:
 * the coordinator's main thread owns members, plans, sessions and requests;
 * the worker's control thread owns its requests to the coordinator, the
 * stage being prepared and the replies it owes. Code on any other thread
 * (NNG's aio callbacks, a loader thread, the worker's data thread) never
 * calls into that state: it records what happened and wakes the owner,
 * under a lock held only for that record, and nothing is called while the
 * lock is held, so there is no lock order to get wrong. The owner sleeps
 * on a condition variable on CLOCK_MONOTONIC (st_cq_cond_init) until an
 * event or its earliest deadline (st_cq_deadline), acts on what it took
 * outside the lock, and never spins. The record takes one of two forms:
 *
 * - a queue of events (st_cq below), when each event carries something of
 *   its own to handle (the coordinator: a request message and its REP
 *   slot, a result frame, an ended RPC or send with its reply). The queue
 *   is bounded by construction, not by a number: every producer (a REP
 *   context, the results receiver, an RPC call, a step send, the HTTP
 *   gateway's wake-up: coordinator/http/gateway.c) has at most one operation
 *   outstanding and re-arms only after the owner consumed its previous
 *   event. A node that cannot be allocated drops its event
 *   (counted, its message freed): the producer then times out like any
 *   lost message.
 * - flags on the owner's shared state, when events carry nothing of their
 *   own and repeated ones mean the same (the worker's control thread: "the
 *   REQ or REP operation ended", "the loader finished", "a stale report
 *   was queued", "stop"; worker/data/dataplane.h, st_worker_shared). A flag per
 *   reason is set under the shared state's mutex and its condition
 *   variable signalled; what goes with it (the stale reports, the loaded
 *   stage) already sits in that state. Setting a flag allocates nothing,
 *   so no wake-up is ever lost, and a second one before the owner woke
 *   coalesces with the first.
 *
 * Threads: st_cq_push from any thread; st_cq_pop, st_cq_init and
 * st_cq_fini from the owner only. */
#ifndef ST_CQ_H
#define ST_CQ_H

#include <nng/nng.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "common/base/err.h"

/* One event; kind and what else is set are the owner's convention (the
 * coordinator's kinds: coordinator/control/net.h). */
typedef struct st_cq_event {
    uint32_t kind; /* what happened, in the owner's numbering (nonzero) */
    int rv;        /* NNG result (0 = success) */
    uint32_t slot; /* which of a producer's contexts (a REP slot) */
    nng_msg *msg;  /* owned by whoever pops the event */
    void *op;      /* the owner's record of the operation that ended */
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

/* st_cq_push - appends a copy of ev and wakes the owner. Called from NNG
 * callbacks; never blocks beyond the list lock. If the node cannot be
 * allocated the event's msg is freed and `dropped` counted: its producer
 * then times out like any lost message. */
void st_cq_push(st_cq *q, const st_cq_event *ev);

/* st_cq_pop - moves the oldest event into *out; waits up to wait_ns for one
 * (0: do not wait). Returns false if none came. */
bool st_cq_pop(st_cq *q, st_cq_event *out, uint64_t wait_ns);

/* st_cq_cond_init - initialises *cv so that its timed waits measure
 * CLOCK_MONOTONIC (deadlines from st_cq_deadline); the pthread error,
 * wrapped, if the attributes or the variable cannot be made. */
st_err st_cq_cond_init(pthread_cond_t *cv);

/* st_cq_deadline - the CLOCK_MONOTONIC instant wait_ns from now, as
 * pthread_cond_timedwait takes it on a condition variable of
 * st_cq_cond_init. */
struct timespec st_cq_deadline(uint64_t wait_ns);

#endif
