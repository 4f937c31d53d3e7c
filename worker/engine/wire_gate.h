/* wire_gate.h - the wire accuracy gate: how far the logits move when the
 * hidden state crosses every layer boundary in a lossy wire dtype.
 *
 * The model runs whole in this process (worker/engine/local.h). First it decodes
 * greedily with f32 hidden states everywhere: the reference token path and
 * logits. Then, teacher-forced along that same path, it runs again with
 * the hidden state passed through a real encode and decode of the
 * activation packet (common/wire/wire.c) of one dtype at every boundary between
 * two layers (all n_layer - 1 of them: a superset of any plan's
 * boundaries, so the figures are conservative for every plan), and
 * compares each step's logits with the reference's: top-1 agreement, the
 * argmax on every step whose f32 top-1/top-2 margin exceeds 1% of the
 * row's max |logit| (ST_WGATE_MARGIN), the mean overlap of the top-5 sets,
 * the max logit error, f16 clamps, and the zstd (level 1) compression of
 * those real hidden states (with byte planes for the 16-bit dtypes).
 *
 * The figures and the gates' verdicts (st_wgate_pass) are pure arithmetic
 * in common/wire/wire_gate_figs.h: f32 must be exact; f16 and bf16 need the
 * margin rule on every step and a mean top-5 overlap >= 4.8; i8 needs
 * top-1 agreement >= 90%. `strata bench wire --gate` prints every dtype's
 * figures and verdict; for --allow-i8 the coordinator runs the i8 gate
 * (st_wgate_i8) in a child process, `strata-worker --wire-gate MODEL`
 * (worker/wire_gate_main.c), and reads its figures as JSON
 * (coordinator/cluster/i8gate.h).
 *
 * Cost: the whole model is mapped and run in one process, with a KV cache
 * for the prompt and steps and n_steps x n_vocab f32 reference logits.
 *
 * Threads: a gate is used by one thread at a time; st_wgate_cancel's flag
 * may be set from any thread. */
#ifndef ST_WORKER_WIRE_GATE_H
#define ST_WORKER_WIRE_GATE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/wire/wire.h"
#include "common/wire/wire_gate_figs.h" /* the figures and their verdicts */

typedef struct st_wgate st_wgate;

/* st_wgate_open - loads the model at path with threads (0 = cores) and a
 * context of n_ctx positions (0: the model's); *out is freed with
 * st_wgate_close. */
st_err st_wgate_open(const char *path, int threads, int64_t n_ctx, st_wgate **out);

/* st_wgate_close - frees everything; NULL is fine. */
void st_wgate_close(st_wgate *g);

/* st_wgate_cancel - a flag polled between steps: once it is nonzero,
 * st_wgate_reference and st_wgate_run return ST_ECANCELED. NULL: none. */
void st_wgate_cancel(st_wgate *g, const atomic_int *flag);

/* The model's layers, hidden size and context (the one opened with). */
int64_t st_wgate_n_layer(const st_wgate *g);
int64_t st_wgate_n_embd(const st_wgate *g);
int64_t st_wgate_n_ctx(const st_wgate *g);

/* st_wgate_reference - the f32 greedy path: prompt[0..n_prompt) then
 * n_steps greedy ids, with each step's logits kept. ST_ERANGE when
 * n_prompt + n_steps exceeds the context. */
st_err st_wgate_reference(st_wgate *g, const int32_t *prompt, size_t n_prompt, int64_t n_steps);

/* st_wgate_run - the reference path again, teacher-forced, with the hidden
 * state through an encode and decode of dtype d at every layer boundary;
 * its figures against the reference into *out. After st_wgate_reference. */
st_err st_wgate_run(st_wgate *g, st_wire_dtype d, st_wgate_figs *out);

/* st_wgate_i8 - the coordinator's i8 gate on the model at path, as
 * `strata-worker --wire-gate` runs it: the calibration run
 * (ST_WGATE_CALIB_ID, ST_WGATE_CALIB_STEPS) with i8 at every layer
 * boundary, on threads threads, cancelled by *cancel. */
st_err st_wgate_i8(const char *path, int threads, const atomic_int *cancel, st_wgate_figs *out);

#endif
