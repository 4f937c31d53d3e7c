/* i8gate_child.h - the i8 accuracy gate's child process (i8gate.h): the
 * worker binary's `strata-worker --wire-gate MODEL --threads N --parent
 * PID` (worker/wire_gate_main.h; PID: the coordinator's, so the kernel
 * kills the child if the coordinator dies, even by SIGKILL), which runs the engine the coordinator never
 * links, and prints the figures as one line of JSON (the format is in
 * common/wire/wire_gate_figs.h).
 *
 * The child is started with posix_spawn (no shell): stdin /dev/null, its
 * stdout and stderr on pipes, no other descriptor, default signal actions
 * and an empty signal mask, the coordinator's environment (STRATA_KERNELS
 * included). Its stdout is read to the end, at most ST_WGATE_LINE_MAX bytes
 * (more is refused), and the last line of its stderr kept; then it is
 * reaped (waitpid) and its line parsed (cJSON) into figures checked for
 * range. Every way it can go wrong is an error with why, as the status
 * shows it: the binary cannot be started, the child was killed by a
 * signal or exited with a status other than 0 (with its stderr's last
 * line), a line too long, not one line, bad JSON, a figure missing or out
 * of range, the child's own {"error"}.
 *
 * Threads: coord_i8child_run on one thread; coord_i8child_stop from any
 * other, at any time: it sends SIGTERM to the child if it runs (never to a
 * pid already reaped: the pid is held under a mutex until the reap) and
 * wakes the run, which then reaps the child and returns ST_ECANCELED; a
 * run not started yet does not start. No zombie and no descriptor outlive
 * a run. */
#ifndef ST_COORD_I8GATE_CHILD_H
#define ST_COORD_I8GATE_CHILD_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/base/err.h"
#include "common/wire/wire_gate_figs.h"

typedef struct coord_i8child coord_i8child;

/* coord_i8child_bin - the worker binary: flag (--worker-bin) when not
 * NULL, else strata-worker beside this executable (/proc/self/exe), else
 * ../worker/strata-worker from it (the build tree), whichever is an
 * executable file first: true with out; false with why (cap bytes: the
 * paths tried, and --worker-bin). */
bool coord_i8child_bin(const char *flag, char out[PATH_MAX], char *why, size_t cap);

/* coord_i8child_new - a child to be run: bin --wire-gate model --threads
 * threads --parent (our pid). Freed with coord_i8child_free. */
st_err coord_i8child_new(const char *bin, const char *model, int threads, coord_i8child **out);

/* coord_i8child_run - starts the child, reads it, reaps it: ST_OK with
 * *figs, else an error with why in msg (cap bytes; a why too long ends
 * with "..."). Once per child. */
st_err coord_i8child_run(coord_i8child *ch, st_wgate_figs *figs, char *msg, size_t cap);

/* coord_i8child_stop - from another thread: the run ends soon (above). */
void coord_i8child_stop(coord_i8child *ch);

/* coord_i8child_stopped - whether coord_i8child_stop was called. */
bool coord_i8child_stopped(coord_i8child *ch);

/* coord_i8child_free - after the run returned, or when it never started;
 * NULL is fine. */
void coord_i8child_free(coord_i8child *ch);

#endif
