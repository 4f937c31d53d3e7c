/* i8gate.h - the coordinator's i8 accuracy gate (--allow-i8 under --wire
 * auto, docs/wire-format.md 6.1).
 *
 * States: not asked (no --allow-i8), pending (the gate runs), passed or
 * failed (with its figures, or failed because it could not run). Under
 * --wire auto a boundary may get i8 only once the gate passed
 * (coord_i8gate_allows): until then st_wire_choose never considers i8.
 *
 * The gate (worker/engine/wire_gate.h, st_wgate_i8) runs the served model (--model)
 * whole, on one thread (COORD_I8GATE_THREADS), on a fixed calibration
 * prompt (the id ST_WGATE_CALIB_ID, then ST_WGATE_CALIB_STEPS greedy
 * steps), with i8 at every layer boundary: a superset of any plan's
 * boundaries, so its verdict is conservative for every plan. It passes with
 * top-1 agreement >= 90% with f32 (ST_WGATE_I8_TOP1_MIN; a test may set
 * another threshold under --test-hooks): the verdict is the coordinator's,
 * from the figures (common/wire/wire_gate_figs.h).
 *
 * The child process (i8gate_child.h): the coordinator never links the
 * stage engine (docs/architecture.md), so the gate runs in the worker
 * binary, the program that owns the engine: `strata-worker --wire-gate
 * MODEL --threads 1` (worker/wire_gate_main.h), started with posix_spawn
 * (no shell), which prints the figures as one line of JSON. That also
 * keeps the mapped model and the 64 x n_vocab f32 logits out of the
 * coordinator's memory. The binary is --worker-bin, else strata-worker
 * beside this executable (/proc/self/exe), else ../worker/strata-worker
 * from it (the build tree); when none exists the gate fails at start,
 * naming the paths tried. Any other failure (the binary cannot be
 * started, the child was killed by a signal or exited with a status other
 * than 0, with its stderr's last line; a line over ST_WGATE_LINE_MAX, bad
 * JSON, figures out of range) is the gate failing because it could not
 * run, with why.
 *
 * Threads: a thread of the gate's own waits for the test hold point (once
 * its file exists), then starts the child, reads its output to the end,
 * reaps it (waitpid) and posts the figures to the owner thread
 * (common/base/cq.h, ST_CQ_I8GATE); coord_i8gate_done takes them there. It
 * touches nothing of the coordinator's. coord_i8gate_stop sends the child
 * SIGTERM and waits for the thread, which reaps it: no zombie, no
 * descriptor left; a coordinator killed outright takes the child with it
 * (--parent: PR_SET_PDEATHSIG). Everything else here is the owner thread's.
 *
 * The cache: the figures are written beside the model's manifest cache
 * (--cache-dir/manifests/<hash of the model's absolute path>.i8gate, else
 * the model's path + ".strata-i8gate"), keyed by the model file's size and
 * modification time and the calibration run; a restart on the same file
 * reads them instead of running the gate. The verdict is recomputed from
 * the figures with the threshold in force. */
#ifndef ST_COORD_I8GATE_H
#define ST_COORD_I8GATE_H

#include <stdbool.h>
#include <stddef.h>

#include "common/base/err.h"
#include "common/wire/wire_gate_figs.h"

#define COORD_I8GATE_THREADS 1

typedef enum coord_i8_state {
    COORD_I8_NOT_ASKED = 0,
    COORD_I8_PENDING,
    COORD_I8_PASSED,
    COORD_I8_FAILED,
} coord_i8_state;

typedef struct coord_i8job coord_i8job;

typedef struct coord_i8gate {
    coord_i8_state state;
    st_wgate_figs figs; /* passed or failed: the figures (failed with an error: none) */
    double top1_min;    /* the threshold in force, percent */
    double seconds;     /* the gate's run time (0: from the cache) */
    bool cached;        /* the figures came from the cache */
    char error[320];    /* failed because the gate could not run: why */
    coord_i8job *job;   /* the running gate, or NULL */
} coord_i8gate;

struct st_coord;

/* coord_i8gate_start - at start: not asked without --allow-i8; else the
 * cached figures when they match the model file; else failed when no
 * worker binary is found; else the gate started on its thread (pending).
 * ST_OK unless the thread cannot be started. */
st_err coord_i8gate_start(struct st_coord *c);

/* coord_i8gate_done - the gate's thread posted op (its job): its verdict
 * taken, logged with its figures and time, cached; when it passed and a
 * plan exists, the plan is evaluated again (coord_replan) so a slow
 * boundary may move to i8. */
void coord_i8gate_done(struct st_coord *c, void *op);

/* coord_i8gate_stop - at shutdown, before the event queue goes: cancels the
 * running gate (SIGTERM to its child) and waits for its thread, which
 * reaps the child. */
void coord_i8gate_stop(struct st_coord *c);

/* coord_i8gate_allows - whether i8 may be chosen now (the gate passed). */
bool coord_i8gate_allows(const struct st_coord *c);

/* coord_i8gate_text - the gate's state with its figures, as status shows it:
 * "not asked (--allow-i8 not given)", "pending: ...", "passed: top1 98.4% >=
 * 90% ...", "failed: ...". */
const char *coord_i8gate_text(const struct st_coord *c, char *buf, size_t cap);

/* coord_i8gate_note - appends the gate's short state to a boundary's
 * reason why (cap bytes): "; i8 gate passed (top1 98.4% >= 90%)". A reason
 * with no room left is logged, and keeps its own text whole. */
void coord_i8gate_note(const struct st_coord *c, char *why, size_t cap);

#endif
