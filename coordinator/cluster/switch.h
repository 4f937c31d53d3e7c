/* switch.h - the two-phase switch to a new plan (switch.c) and the
 * control RPCs it rides on.
 *
 * A round (st_round, placement.h) starts when coord_replan has sealed a
 * plan: coord_prepare_all sends Prepare to every worker of the round (a
 * worker takes no Commit without its Prepare; the ones the plan leaves
 * out become spares and their answers hold nothing up); once every stage
 * worker answered Ready and no batch is in flight (coord.c's loop),
 * coord_commit_all sends Commit to every worker of the round (its stage
 * workers and the other workers live at its start); when every stage
 * worker acknowledged and every other one answered either way, the
 * round's plan becomes the serving plan. A Refuse, an error reply, a timeout or a send that
 * fails excludes that worker (membership.h) and replans; a round ends
 * committed or abandoned, never half-way: a half-done commit marks the
 * serving plan broken until the next one. Included by coord_impl.h; only
 * the main thread calls any of it. */
#ifndef ST_COORD_SWITCH_H
#define ST_COORD_SWITCH_H

#include <nng/nng.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/base/err.h"
#include "coordinator/coord.h"
#include "coordinator/control/net.h"
#include "coordinator/cluster/plan.h"
#include "strata.pb-c.h"

#define COORD_PLAN_ERROR_MAX 320 /* room for why no plan serves */

/* The committed plan and the round that may replace it, embedded in
 * st_coord (coord_impl.h) as c->plans. Only the main thread touches it.
 * switch.c moves a round's plan into committed (has_committed, n_routes,
 * push to its stage 0) and breaks it when a commit half-fails; replan.c
 * starts rounds (next_epoch), remembers a replan wished for during one
 * (wanted, force), breaks the committed plan when a stage worker is lost
 * and says why no plan serves (error); coord.c sets next_epoch and error
 * at start, reads it to send batches, closes the pushes
 * (coord_close_pushes) and frees it at close.
 * Invariants: broken and push[] mean something only with has_committed;
 * round.phase is ST_ROUND_IDLE between rounds; every plan sealed takes
 * next_epoch and increments it, so epochs only grow. */
typedef struct coord_plans {
    st_plan committed; /* the serving plan once has_committed */
    bool has_committed;
    bool broken; /* a stage worker was lost or a commit half-failed */
    st_round round;
    uint64_t next_epoch;
    bool wanted, force; /* a replan asked for while a round ran (force: coord_replan's) */
    char error[COORD_PLAN_ERROR_MAX];
    st_peer *push[ST_PLAN_MAX_REPLICAS]; /* to each worker of stage 0 of the committed plan */
    uint32_t n_routes;                   /* routes through the committed plan's replicas */
} coord_plans;

/* coord_plans_epoch - the committed plan's epoch; 0 without one. */
uint64_t coord_plans_epoch(const coord_plans *p);

/* coord_plans_stage_of - worker id's stage in the committed plan; -1 when
 * it has none, or there is no committed plan. */
int coord_plans_stage_of(const coord_plans *p, uint64_t id);

/* coord_plans_in_round - whether a round runs whose plan gives worker id a
 * stage. */
bool coord_plans_in_round(const coord_plans *p, uint64_t id);

/* coord_rpc - sends m to worker id's control socket as an op tagged tag;
 * its end comes back as an ST_CQ_OP_DONE event carrying tag. ST_ENOENT
 * when the worker is gone or has no control peer. */
st_err coord_rpc(st_coord *c, uint64_t id, const Strata__Msg *m, int timeout_ms,
                 const st_op_tag *tag);

/* coord_prepare_all - sends Prepare of the round's plan to every worker
 * of the round (replicas included, and the others as spares); a stage
 * worker it cannot be sent to is excluded (which abandons the round and
 * replans), a spare is only logged. */
void coord_prepare_all(st_coord *c);

/* coord_commit_all - sends Commit of the ready round to every worker of
 * the round; a stage worker it cannot be sent to is excluded. */
void coord_commit_all(st_coord *c);

/* coord_on_prepare_reply / coord_on_commit_reply - an ended Prepare or
 * Commit op (rv: its NNG result; reply: the answer, or NULL). Replies of
 * an abandoned round are ignored. The last acknowledged Commit makes the
 * round's plan the serving plan: PUSH sockets to its stage 0, the sessions
 * whose route kept its workers keep their KV, draining workers it does not
 * use are drained, and a replan wished for meanwhile is made. */
void coord_on_prepare_reply(st_coord *c, const st_op_tag *t, int rv, nng_msg *reply);
void coord_on_commit_reply(st_coord *c, const st_op_tag *t, int rv, nng_msg *reply);

/* coord_switch_on_gone - worker id is gone during a round: a worker of the
 * round's plan abandons it (breaking the serving plan if it was
 * committing); a spare counts as a failed Commit acknowledgement, which
 * may complete the round. No-op outside a round or for a worker not in it. */
void coord_switch_on_gone(st_coord *c, uint64_t id);

#endif
