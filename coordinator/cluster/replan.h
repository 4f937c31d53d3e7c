/* replan.h - the coordinator's placement state and the entry points of
 * replan.c (the replan decision: when to replan, which plan, the planner's
 * inputs) and admin_plan.c (the admin requests about plans: dry run,
 * replan, drain). Switching to a plan is switch.h's. Included by
 * coord_impl.h; only the main thread uses any of it. */
#ifndef ST_COORD_REPLAN_H
#define ST_COORD_REPLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "coordinator/coord.h"
#include "coordinator/planner/links.h"
#include "coordinator/cluster/membership.h"
#include "coordinator/planner/placement.h"
#include "coordinator/cluster/plan.h"
#include "strata.pb-c.h"

#define COORD_PL_DEFAULT_IMBALANCE_MS 5000u
#define COORD_PL_DEFAULT_MIN_SAMPLES 20u
#define COORD_PL_REMEMBER_NS (300ull * 1000000000ull) /* measurements outlive a stage 5 min */
#define COORD_PL_DEFAULT_RTT_MS 0.2                   /* before any Commit was timed */
#define COORD_PL_BANDWIDTH 1.0e9                      /* bytes/s of a link not measured yet */

/* One boundary of the serving plan as --wire auto's latest check chose it
 * (wire_live.h). */
typedef struct coord_wire_live {
    char dtype[8];
    bool zstd;
    char why[ST_WIRE_WHY_MAX];
} coord_wire_live;

/* The placement state of a coordinator (lazily set up from its cfg). */
typedef struct coord_pl {
    bool init;
    st_place_objective objective;
    double margin;
    uint64_t imbalance_ns; /* 0: imbalance checks off */
    uint32_t min_samples;
    uint64_t last_check_ns;
    uint64_t wire_check_ns; /* the last --wire auto check of the serving plan's dtypes */
    uint64_t last_samples;  /* per-layer samples of the serving workers at the last check */
    st_imbalance imb;
    double calibration; /* the last k of st_place_calibrate */
    char decision[400]; /* what the last replan decided, for logs and ReplanReply */
    bool started;       /* the last coord_replan started a round */
    st_err last_err;    /* the last coord_replan's planner error (ST_OK: none) */
    /* --wire auto's boundaries of the serving plan as the latest check
     * chose them (wire_live.c): shown by status and `strata plan` */
    coord_wire_live *live; /* [n_live], index = the stage the boundary enters */
    uint32_t n_live;
    uint64_t live_epoch; /* the plan they were evaluated for (0: none) */
    uint64_t live_ns;    /* when */
} coord_pl;

/* The planner's inputs built from the live members at one moment. */
typedef struct coord_pl_view {
    size_t n; /* planner inputs: the placeable members */
    st_place_worker w[ST_MEMBERS_MAX];
    const char *source[ST_MEMBERS_MAX]; /* "measured", "remembered", "announced" */
    double *lat;                        /* [n x n] link latency, s */
    double *bw;                         /* [n x n] bytes/s */
    st_link *links;                     /* [n x n] the same with measured / assumed */
    double *act_ab;                     /* [n x n] bytes per token of each link in the dtype
                                         * --wire auto would give it (NULL: a fixed --wire) */
    size_t n_measured;                  /* off-diagonal pairs measured */
    st_place_model m;
    st_place_opts o;
    double calibration;              /* k of st_place_calibrate */
    double wire_spb[ST_MEMBERS_MAX]; /* --wire auto's time per byte for one token: the
                                      * one-token steps' measurement (remembered as
                                      * meas_spb is), else w[].spb */
} coord_pl_view;

/* coord_pl_view_build - the planner's inputs for objective (replicas as
 * given) from c's placeable members, refreshing their measurements. */
st_err coord_pl_view_build(st_coord *c, st_place_objective objective, bool replicas,
                           coord_pl_view **out);

/* coord_links - the link matrix out[n x n] between members ids[0..n)
 * (st_links_fill over the live members' last heartbeats' LinkMeasure
 * reports; assumed from the Commit round trips elsewhere); *n_measured
 * (may be NULL) gets the measured pairs. ST_ENOMEM only. */
st_err coord_links(const st_coord *c, const uint64_t *ids, size_t n, st_link *out,
                   size_t *n_measured);

/* coord_wire_stages - under --wire auto, each boundary's dtype, zstd and
 * reason into p's stages (in_dtype, in_zstd, in_why) for the placement r of v
 * (st_wire_choose on the boundary's slowest link between the workers of
 * stages i - 1 and i, the dtypes all workers of stage i accept, and stage
 * i's compute time); nothing under a fixed --wire (the plan's wire).
 * ST_ETYPE names a boundary whose workers accept no common dtype. */
st_err coord_wire_stages(const st_coord *c, const coord_pl_view *v, const st_place_result *r,
                         st_plan *p);

/* coord_pl_view_free - NULL is a no-op. */
void coord_pl_view_free(coord_pl_view *v);

/* coord_replan - makes a new plan from the placeable workers and starts
 * its round (coord_prepare_all), or remembers the wish while a round is in
 * progress (the round's end makes it). force: switch even to a plan with
 * the serving plan's layout, or one the hysteresis margin would keep. */
void coord_replan(st_coord *c, bool force, const char *why);

/* coord_member_gone - worker id was lost or left: closes its peer, breaks
 * the serving plan if it had a stage (failing the batches in flight on its
 * routes), ends a round it was in (coord_switch_on_gone), replans. */
void coord_member_gone(st_coord *c, uint64_t id, st_member_life life, const char *why);

/* coord_pl_setup - fills c's placement state from its configuration (once). */
void coord_pl_setup(st_coord *c);

/* coord_on_heartbeat - after a heartbeat: at most once per heartbeat
 * interval, evaluates the serving plan against the best plan under the
 * current estimates and replans after a sustained imbalance; under --wire
 * auto, replans as soon as a boundary's dtype choice differs from the
 * serving plan's (a link was measured, or its measurement moved). */
void coord_on_heartbeat(st_coord *c);

/* coord_api_dry_run - answers control slot `slot` with the PlanProposal
 * the planner makes now for q's objective (the coordinator's if empty) and
 * replicas setting, every live member listed; an Error if it fails. */
void coord_api_dry_run(st_coord *c, uint32_t slot, const Strata__PlanDryRun *q);

/* coord_api_replan - sets the objective if q names one, replans (forced if
 * q->force) and answers ReplanReply{started, epoch, what was decided}, or
 * an Error with the planner's. */
void coord_api_replan(st_coord *c, uint32_t slot, const Strata__ReplanRequest *q);

/* coord_api_drain - marks the live worker q names (id, else name) draining
 * and replans without it (forced); answers DrainReply (drained once a
 * committed plan does not use it; repeated requests report progress),
 * ST_ENOENT for no such worker, or the planner's error when no plan exists
 * without it (the worker is then not draining). */
void coord_api_drain(st_coord *c, uint32_t slot, const Strata__DrainRequest *q);

#endif
