/* hold.h - the test-only step gate ("hold point", docs/cluster.md "Hold
 * (test hooks)"): tests make an event (a plan switch, a drain, a cancel, a
 * slot reuse) happen at a known step instead of racing the model's speed.
 *
 * Contract:
 * - Off by default; the coordinator accepts a HoldRequest only when it was
 *   started with --test-hooks (coordinator/cluster/hold.c), so production never
 *   parks anything.
 * - When on, a running request that has at least after_tokens generated
 *   ids (every request, or only request_id when it is not 0) is parked:
 *   st_sched_form gives its session no further row, so it stops between
 *   two steps with no batch in flight. A batch already in flight comes back
 *   as usual; a request never gets more than one id past the moment it
 *   reaches the gate (one id per batch, one batch per session).
 * - A parked session is an ordinary session between steps: plan switches,
 *   drains, KV keep/forget and cancels treat it as any other (it never
 *   blocks a switch: nothing of it is in flight). Its request still ends on
 *   cancel, client timeout or shutdown.
 * - Releasing (or moving the gate) changes nothing but which sessions the
 *   next st_sched_form may pick.
 * - Off, the scheduler's cost is one test of `on` per session per batch. */
#ifndef ST_COORD_HOLD_H
#define ST_COORD_HOLD_H

#include <stdbool.h>
#include <stdint.h>

typedef struct st_hold {
    bool on;
    uint32_t after_tokens; /* park once a request has this many generated ids */
    uint64_t request_id;   /* only this request; 0: every request */
} st_hold;

/* One parked request (st_sched_held). */
typedef struct st_held {
    uint64_t request_id;
    uint64_t session_id;
    uint32_t tokens; /* generated ids it has */
    uint32_t route;
} st_held;

/* st_hold_parks - whether gate h parks request req_id that has n_ids
 * generated ids. */
static inline bool st_hold_parks(const st_hold *h, uint64_t req_id, uint32_t n_ids)
{
    return h->on && n_ids >= h->after_tokens && (h->request_id == 0 || h->request_id == req_id);
}

#endif
