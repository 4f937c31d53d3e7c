/* ctl_check.h - the worker's checks of who steers it and of the plan
 * messages it is sent (docs/security.md, "Cluster control and data
 * frames"): pure functions of the worker's plan state, used by the control
 * server (dm_rep.c, dm_plan.c) and the data thread (dp_step.c), unit-tested
 * on their own (tests/worker/test_ctl_check.c).
 *
 * Contract. Each check returns ST_OK or an error code with a reason in
 * why (cap bytes, always terminated), and changes nothing: the caller
 * refuses the message, counts it, and keeps its state. They hold with or
 * without a cluster key: a copied sender id passes st_ctl_sender_check,
 * but a Commit still needs its Prepare, a plan its hash, and epochs only
 * grow. */
#ifndef ST_WORKER_CTL_CHECK_H
#define ST_WORKER_CTL_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "strata.pb-c.h"

#define ST_CTL_HASH_BYTES 32 /* a plan hash: BLAKE2b-256 */

/* What the checks read of a worker's plans. */
typedef struct st_ctl_state {
    uint64_t coord_ctl;   /* the joined coordinator's control sender; 0: not joined */
    uint64_t incarnation; /* the joined coordinator's incarnation */
    bool have_cur;        /* a plan is committed */
    uint64_t cur_epoch;
    bool have_pending; /* a plan is prepared (Ready answered), not committed */
    uint64_t pending_epoch;
    uint8_t pending_hash[ST_CTL_HASH_BYTES];
} st_ctl_state;

/* st_ctl_sender_check - a Prepare, Commit or EndSessions (named what) from
 * sender: ST_OK when it is the joined coordinator's control sender;
 * ST_EAUTH before any join or from anyone else. */
st_err st_ctl_sender_check(const st_ctl_state *s, const char *what, uint64_t sender, char *why,
                           size_t cap);

/* st_ctl_plan_hash - ST_OK when p's plan_hash is BLAKE2b-256 of p packed
 * with an empty hash (what the coordinator seals, coordinator/cluster/plan.c);
 * ST_EEPOCH when it is another (or not 32 bytes); ST_ENOMEM or
 * ST_ESODIUM when it cannot be computed. */
st_err st_ctl_plan_hash(const Strata__Plan *p, char *why, size_t cap);

/* st_ctl_prepare_check - a Prepare's plan p (NULL: none): ST_EINVAL for no
 * plan or epoch 0; ST_EEPOCH for an epoch at or below the committed one
 * (stale) or a wrong hash (st_ctl_plan_hash); ST_EAUTH for another
 * incarnation than the joined coordinator's. The plan's layout is checked
 * by the caller (dm_plan.c). */
st_err st_ctl_prepare_check(const st_ctl_state *s, const Strata__Plan *p, char *why, size_t cap);

/* st_ctl_commit_check - a Commit of epoch with hash[0..hash_len): ST_OK
 * when it names the prepared plan (its epoch and hash); ST_EINVAL for a
 * hash that is not 32 bytes; ST_EEPOCH for an epoch at or below the
 * committed one (stale) or another hash than the prepared plan's;
 * ST_EPROTO when no plan of that epoch is prepared. */
st_err st_ctl_commit_check(const st_ctl_state *s, uint64_t epoch, const uint8_t *hash,
                           size_t hash_len, char *why, size_t cap);

/* st_ctl_step_sender_ok - whether sender is one of prev[0..n): who may
 * send a stage STEP frames (st_dp_plan.prev_senders); 0 never is. */
bool st_ctl_step_sender_ok(const uint64_t *prev, uint32_t n, uint64_t sender);

/* st_ctl_step_route_sender_ok - whether sender is the one worker that may
 * send a batch of a given route: prev[replica], the replica of the
 * previous stage that the batch's route names (st_dp_plan.prev_senders,
 * StepMeta.route), with replica < n. Another replica of that stage carries
 * other routes' batches only, so its frames for this route are refused. */
bool st_ctl_step_route_sender_ok(const uint64_t *prev, uint32_t n, uint32_t replica,
                                 uint64_t sender);

#endif
