/* wire_gate.h - the wire accuracy gate: how far the logits move when the
 * hidden state crosses every layer boundary in a lossy wire dtype.
 *
 * The model runs whole in this process (worker/local.h). First it decodes
 * greedily with f32 hidden states everywhere: the reference token path and
 * logits. Then, teacher-forced along that same path, it runs again with
 * the hidden state passed through a real encode and decode of the
 * activation packet (common/wire.c) of one dtype at every boundary between
 * two layers (all n_layer - 1 of them: a superset of any plan's
 * boundaries, so the figures are conservative for every plan), and
 * compares each step's logits with the reference's: top-1 agreement, the
 * argmax on every step whose f32 top-1/top-2 margin exceeds 1% of the
 * row's max |logit| (ST_WGATE_MARGIN), the mean overlap of the top-5 sets,
 * the max logit error, f16 clamps, and the zstd (level 1) compression of
 * those real hidden states (with byte planes for the 16-bit dtypes).
 *
 * The gates (st_wgate_pass): f32 must be exact; f16 and bf16 need the
 * margin rule on every step and a mean top-5 overlap >= 4.8; i8 needs
 * top-1 agreement >= 90%. `strata bench wire --gate` prints every dtype's
 * figures and verdict; the coordinator runs the i8 gate on its model for
 * --allow-i8 (coordinator/i8gate.h).
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

#include "common/err.h"
#include "common/wire.h"

#define ST_WGATE_MARGIN 0.01     /* of max |logit|: a step whose argmax must agree */
#define ST_WGATE_TOP5_MIN 4.8    /* 16-bit dtypes: mean top-5 overlap */
#define ST_WGATE_I8_TOP1_MIN 90. /* i8: top-1 agreement, percent */
#define ST_WGATE_TOPK 5
/* The calibration run the coordinator's i8 gate uses (and `strata bench
 * wire`'s defaults): the prompt is the one id 1 (BOS in llama
 * vocabularies; an id of any vocabulary of two or more), then this many
 * greedy steps. */
#define ST_WGATE_CALIB_ID 1
#define ST_WGATE_CALIB_STEPS 64

/* One dtype's figures against the f32 reference. */
typedef struct st_wgate_figs {
    int steps;        /* compared steps */
    int top1_agree;   /* steps whose argmax equals the reference's */
    int margin_steps; /* steps whose reference margin exceeds ST_WGATE_MARGIN */
    int margin_fail;  /* of those, steps whose argmax differs */
    double top5_sum;  /* sum over steps of the top-5 sets' overlap */
    double max_err;   /* max |logit - reference logit| */
    uint64_t clamps;  /* values clamped by the encoder (f16 range) */
    uint64_t raw_bytes, zstd_bytes, plane_bytes; /* zstd on the real hidden states */
} st_wgate_figs;

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

/* st_wgate_top1_pct, st_wgate_top5_mean - the figures' top-1 agreement in
 * percent and mean top-5 overlap (0 for no steps). */
double st_wgate_top1_pct(const st_wgate_figs *f);
double st_wgate_top5_mean(const st_wgate_figs *f);

/* st_wgate_pass - whether d's figures pass its gate (above; i8's top-1
 * threshold is i8_top1_min, ST_WGATE_I8_TOP1_MIN unless a test sets
 * another); *rule names the rule as `strata bench wire` prints it. */
bool st_wgate_pass(st_wire_dtype d, const st_wgate_figs *f, double i8_top1_min, const char **rule);

/* st_wgate_i8 - the coordinator's i8 gate on the model at path: the
 * calibration run (ST_WGATE_CALIB_ID, ST_WGATE_CALIB_STEPS) with i8 at
 * every layer boundary, on threads threads, cancelled by *cancel. */
st_err st_wgate_i8(const char *path, int threads, const atomic_int *cancel, st_wgate_figs *out);

#endif
