/* dm_plan.h - the worker daemon's side of the coordinator's plans
 * (dm_plan.c; its design is the file comment there): Prepare, the loader
 * thread that loads a prepared stage, Commit. Part of the daemon
 * (dm_internal.h).
 *
 * State. dm_plans is changed only by dm_plan.c, on the control thread,
 * except its loader part: while `loading`, the loader thread owns ld
 * (it reads ld.plan, drops ld.kept, writes ld.out, ld.err and ld.msg) and
 * the control thread does not touch it; the loader's end is the
 * st_worker_shared.ev_loader event, after which the control thread joins
 * it (dm_on_loader) and owns ld again. No lock: the thread's creation and
 * join order the accesses. Invariants: a Prepare is handled only while
 * not loading (the control server answers one request at a time and
 * holds the next until the loader's reply, dm_rep.h); pending is the
 * stage this worker answered Ready to and not yet committed (NULL: none);
 * kept holds a reference to the committed stage's weights (NULL for a
 * spare or before the first Commit), and ld.kept one of its own. */
#ifndef ST_WORKER_DM_PLAN_H
#define ST_WORKER_DM_PLAN_H

#include <pthread.h>

#include "strata.pb-c.h"
#include "worker/daemon/ctl_check.h"
#include "worker/daemon/daemon.h"
#include "worker/data/dataplane.h"

typedef struct dm_load {
    pthread_t th;
    st_dp_plan plan;
    st_model *kept; /* the loader's reference to weights it may reuse, or NULL */
    st_dp_stage *out;
    st_err err;
    char msg[512]; /* err's reason for the Refuse */
} dm_load;

typedef struct dm_plans {
    bool have_cur; /* a plan was committed; cur_epoch is its epoch */
    uint64_t cur_epoch;
    st_dp_stage *pending; /* prepared, not committed */
    /* a reference to the weights of the committed stage (NULL: a spare or
     * none yet), which a Prepare that keeps its layer range reuses
     * (st_dp_stage_load); the loader holds its own (ld.kept) */
    st_model *kept;
    bool loading; /* a loader thread runs (ld is its) */
    dm_load ld;
} dm_plans;

/* dm_ctl_state - what the checks of ctl_check.h read of d. */
st_ctl_state dm_ctl_state(const st_daemon *d);

/* dm_prepare - checks a Prepare and starts loading its stage, or refuses
 * it; the reply waits for the loader. */
void dm_prepare(st_daemon *d, const Strata__Prepare *pr);

/* dm_on_loader - replies to the Prepare whose loading ended. */
void dm_on_loader(st_daemon *d);

/* dm_commit - publishes the prepared stage of a Commit, or becomes a spare
 * for an epoch without this worker; replies Ack or Error. */
void dm_commit(st_daemon *d, const Strata__Commit *c);

/* dm_plans_loading - whether a loader thread runs. */
bool dm_plans_loading(const st_daemon *d);

/* dm_plans_close - joins a loader still running (only when the control
 * thread never ran to its end) and frees its stage, the prepared stage
 * and the reference to the committed weights; after the control thread
 * ended. */
void dm_plans_close(st_daemon *d);

/* dm_addr_ok - a tcp://, ipc:// or inproc:// URL of 1..255 printable
 * bytes. */
bool dm_addr_ok(const char *s);

#endif
