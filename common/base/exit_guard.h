/* exit_guard.h - a bound on the release of a process's resources at exit.
 *
 * Why. NNG 1.5.2 (Debian 12's libnng1) can leave its reaper thread waiting
 * forever: when a message arrives on a pipe while that pipe closes, the
 * protocol's receive callback prepares a new receive that never runs, and
 * the pipe's stop (req0_pipe_stop, and rep0's alike) waits for it
 * (nanomsg/nng#1543, #1813; reproduced with NNG 1.5.2 built with symbols:
 * "nng:reap2" waits in nni_aio_wait from req0_pipe_stop while nng_close
 * waits in nni_sock_shutdown for the pipe). From then on every nng_close in
 * the process waits for the reaper and never returns. A worker that had
 * finished its batch and sent Leave then hung in st_daemon_close, and
 * SIGTERM did not end it (CI, stream-peerlist and stream-peer).
 *
 * What. A process whose orderly part of shutdown is done (no request of its
 * own left to answer, its peers told) opens a guard before it releases its
 * resources and closes the guard after. If the release has not ended
 * within the guard's bound, the guard's thread logs an error naming what
 * was being released and why, and ends the process with _exit(status):
 * nothing is lost that a SIGKILL at that point would not lose, and
 * everything that matters was done before the guard was opened. A release
 * that ends in time closes the guard, whose thread then ends at once.
 *
 * Ownership: st_exit_guard_open returns a guard the caller closes; what
 * is copied. */
#ifndef ST_EXIT_GUARD_H
#define ST_EXIT_GUARD_H

#include "common/base/err.h"

/* the bound processes use: a release takes milliseconds, even under the
 * sanitizers on a loaded machine; the test harness allows 10 s for a stop */
#define ST_EXIT_GUARD_DEFAULT_MS 5000

typedef struct st_exit_guard st_exit_guard;

/* st_exit_guard_open - starts the guard: after bound_ms without
 * st_exit_guard_close, it logs and calls _exit(status). */
st_err st_exit_guard_open(const char *what, int bound_ms, int status, st_exit_guard **out);

/* st_exit_guard_close - the release ended: stops the guard's thread and
 * frees it (NULL is fine). */
void st_exit_guard_close(st_exit_guard *g);

#endif
