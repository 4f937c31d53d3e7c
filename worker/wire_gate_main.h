/* wire_gate_main.h - `strata-worker --wire-gate MODEL [--threads N]
 * [--parent PID]`: the
 * i8 accuracy gate (worker/engine/wire_gate.h, st_wgate_i8) on MODEL, its figures
 * printed on stdout as one line of JSON (the format is in
 * common/wire/wire_gate_figs.h). The coordinator's i8 gate runs it as a child
 * process (coordinator/cluster/i8gate.h), since the engine and the mapped model
 * belong in the worker binary, not in the coordinator.
 *
 * Exit status: 0 when the figures were computed (pass or fail is the
 * reader's decision with its threshold); 1 when the gate could not run
 * (the JSON {"error": ...} on stdout and the error on stderr); 2 for a
 * usage error (stderr only). SIGTERM ends it (the default action). With
 * --parent PID (the coordinator passes its own) it asks the kernel for
 * SIGKILL when its parent ends (PR_SET_PDEATHSIG) and exits 1 at once if
 * PID is no longer its parent: a coordinator killed with SIGKILL leaves no
 * gate running. Logs go
 * to stderr at --log LEVEL, else $STRATA_LOG, else warn; the kernels are
 * chosen as everywhere (STRATA_KERNELS=ref forces the reference ones). */
#ifndef ST_WORKER_WIRE_GATE_MAIN_H
#define ST_WORKER_WIRE_GATE_MAIN_H

/* st_wire_gate_main - the mode's whole run on main's argc, argv (which
 * contain --wire-gate); its return is the exit status. */
int st_wire_gate_main(int argc, char **argv);

#endif
