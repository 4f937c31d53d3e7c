/* coord_api.h - the coordinator's control API (api.c): one answer to
 * every request of the control socket, and the long polls parked until
 * their request moves on.
 *
 * State: coord_parks, embedded in st_coord (coord_impl.h) as c->parks.
 * Only the coordinator's main thread touches it, and only api.c changes it
 * (from coord_parks_open at start to coord_parks_close at the end).
 * Invariants: n <= max, max = three quarters of the control slots, so
 * heartbeats always find a free slot; list[0..n) are the parked polls,
 * each holding its slot until it is answered. */
#ifndef ST_COORD_API_H
#define ST_COORD_API_H

#include <nng/nng.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "coordinator/coord.h"
#include "coordinator/control/coord_auth.h"
#include "coordinator/sched/scheduler.h"
#include "strata.pb-c.h"

/* A long poll waiting for tokens; it holds its REP slot until answered. */
typedef struct coord_park {
    uint32_t slot;
    uint64_t req_id;
    uint32_t after;
    uint64_t deadline_ns;
    coord_who who;
} coord_park;

/* The parked polls of a coordinator. */
typedef struct coord_parks {
    coord_park *list; /* [max] */
    size_t n, max;
} coord_parks;

/* coord_parks_open - sizes p for a control socket of `slots` slots (max:
 * three quarters of them), none parked; ST_ENOMEM. */
st_err coord_parks_open(coord_parks *p, uint32_t slots);
/* coord_parks_close - frees p's list (after its polls were answered:
 * coord_api_parks with all); a zeroed p is a no-op. */
void coord_parks_close(coord_parks *p);
/* coord_api_handle - handles one request (msg, freed here) of control slot
 * `slot` and answers it, now or (a parked Poll) later. */
void coord_api_handle(st_coord *c, uint32_t slot, nng_msg *msg);
/* coord_api_parks - answers the parked polls whose request moved on, ended or
 * whose wait is over (all: every one, at shutdown). */
void coord_api_parks(st_coord *c, uint64_t now_ns, bool all);
/* coord_api_send - answers slot with r, sealed with the credential that
 * verified its request (an Error reply if r cannot be packed). Every
 * answer on the control socket goes out through it. */
void coord_api_send(st_coord *c, uint32_t slot, const Strata__Msg *r);
/* coord_api_reply_error - answers slot with Error{code, message}. */
void coord_api_reply_error(st_coord *c, uint32_t slot, st_err code, const char *message);

/* The Status of a coordinator as one caller sees it (api_status.c, whose
 * comment says what each role sees): sr and what it points into. sr also
 * borrows from the coordinator's state, so it is read on the coordinator's
 * thread before the loop turns again. */
#define COORD_STATUS_I8_TEXT 400
typedef struct coord_status {
    Strata__StatusReply sr;
    Strata__SecurityCounters sec;
    Strata__Counters cn;
    Strata__SchedStatus sch;
    Strata__WorkerStatus *ws;  /* owned */
    Strata__WorkerStatus **wp; /* owned */
    Strata__Plan *pb;          /* owned (st_plan_pb_free) */
    Strata__HoldState *hold;   /* owned (coord_hold_pb_free) */
    uint32_t route_sessions[ST_SCHED_MAX_ROUTES];
    uint64_t route_batches[ST_SCHED_MAX_ROUTES];
    char i8[COORD_STATUS_I8_TEXT];
} coord_status;
/* coord_status_build - *s: the Status a caller of who's role sees, now;
 * ST_ENOMEM (then s holds nothing to free). */
st_err coord_status_build(st_coord *c, const coord_who *who, coord_status *s);
/* coord_status_free - frees what s owns; a zeroed s is a no-op. */
void coord_status_free(coord_status *s);

#endif
