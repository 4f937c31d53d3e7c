/* wire_gate_figs.h - the wire accuracy gate's figures and verdicts: what
 * worker/engine/wire_gate.h measures (the model run with a lossy wire dtype at
 * every layer boundary against f32) and what its readers decide from it,
 * `strata bench wire --gate` and the coordinator's i8 gate
 * (coordinator/cluster/i8gate.h), which gets the figures from a child process
 * (`strata-worker --wire-gate MODEL`) and never links the engine.
 *
 * Pure arithmetic: no state, no I/O. */
#ifndef ST_COMMON_WIRE_GATE_FIGS_H
#define ST_COMMON_WIRE_GATE_FIGS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/wire/wire.h"

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

/* The i8 gate's figures between processes: `strata-worker --wire-gate
 * MODEL` (worker/wire_gate_main.h) prints them as one line of JSON of at
 * most ST_WGATE_LINE_MAX bytes with its '\n', an object with the numbers
 * "steps", "top1_agree", "margin_steps", "margin_fail", "top5_sum",
 * "max_err", "clamps", "raw_bytes", "zstd_bytes", "plane_bytes" (the
 * fields below; doubles printed to round-trip, counts below 2^53) and
 * "dtype": "i8", and exits 0; when the gate could not run, the object
 * {"error": "why"} with the error also on stderr, and a non-zero exit
 * status. The coordinator (coordinator/cluster/i8gate.h) reads it. */
#define ST_WGATE_LINE_MAX 4096

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

/* st_wgate_top1_pct, st_wgate_top5_mean - the figures' top-1 agreement in
 * percent and mean top-5 overlap (0 for no steps). */
double st_wgate_top1_pct(const st_wgate_figs *f);
double st_wgate_top5_mean(const st_wgate_figs *f);

/* st_wgate_pass - whether d's figures pass its gate: f32 must be exact;
 * f16 and bf16 need the margin rule on every step and a mean top-5 overlap
 * >= ST_WGATE_TOP5_MIN; i8 needs top-1 agreement >= i8_top1_min percent
 * (ST_WGATE_I8_TOP1_MIN unless a test sets another). *rule (if rule is not
 * NULL) names the rule as `strata bench wire` prints it. */
bool st_wgate_pass(st_wire_dtype d, const st_wgate_figs *f, double i8_top1_min, const char **rule);

#endif
