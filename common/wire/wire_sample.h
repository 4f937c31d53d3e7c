/* wire_sample.h - what zstd would do to a sender's real activations: one
 * outbound packet in ST_WIRE_ZSAMPLE_EVERY (the first one included) has
 * at most ST_WIRE_ZSAMPLE_TOKENS of its tokens encoded as every dtype,
 * and each payload compressed (level ST_WIRE_ZSTD_DEFAULT_LEVEL, window
 * log ST_WIRE_ZSTD_WINDOW_LOG, as the encoder does) and decompressed,
 * timed, whether or not the packet itself is sent compressed. A worker
 * reports the figures of its last ST_WIRE_ZSAMPLE_KEEP samples in its
 * heartbeats (Heartbeat.zstd); `--wire auto` decides each boundary's zstd
 * from them (st_wire_zstd_choose). Byte planes are not applied: the ratio
 * is that of plain payloads (planes gain ~1% on bf16, section 2.1).
 *
 * Cost: per sample, at most ST_WIRE_ZSAMPLE_TOKENS x hidden values
 * converted four times and 4 x ST_WIRE_ZSAMPLE_RUNS zstd round trips
 * (hidden 2048: 16 tokens are 128 KiB of f32, near 0.3 ms a round trip at
 * ~1 GB/s), once per ST_WIRE_ZSAMPLE_EVERY packets. Threads: a sampler belongs to one
 * thread. */
#ifndef ST_WIRE_SAMPLE_H
#define ST_WIRE_SAMPLE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/wire/wire.h"

#define ST_WIRE_ZSAMPLE_EVERY 32u  /* one packet in this many is sampled */
#define ST_WIRE_ZSAMPLE_TOKENS 16u /* at most this many of its tokens */
#define ST_WIRE_ZSAMPLE_KEEP 9u    /* medians over the last this many samples */
/* ST_WIRE_ZSAMPLE_RUNS - round trips per payload of a sample, whose
 * fastest gives its costs: a round trip the thread was preempted in (a
 * scheduler slice, milliseconds against microseconds of work) would make
 * zstd look hundreds of times slower, and a boundary's first decision
 * rests on one sample. Costs are a minimum, the ratio is exact. */
#define ST_WIRE_ZSAMPLE_RUNS 3u

typedef struct st_wire_zsampler st_wire_zsampler;

/* st_wire_zsampler_new - a sampler with no samples; force_ref as for
 * st_wire_ctx_new. */
st_err st_wire_zsampler_new(int force_ref, st_wire_zsampler **out);

/* st_wire_zsampler_free - frees s (NULL is fine). */
void st_wire_zsampler_free(st_wire_zsampler *s);

/* st_wire_zsampler_due - counts one outbound packet; true when it is to
 * be sampled (the 1st, the 1 + ST_WIRE_ZSAMPLE_EVERY-th, ...). */
bool st_wire_zsampler_due(st_wire_zsampler *s);

/* st_wire_zsampler_take - samples the first min(n_tokens,
 * ST_WIRE_ZSAMPLE_TOKENS) tokens of hidden (n_tokens x hidden_size f32
 * values). ST_ERANGE for a non-finite value (the packet itself fails the
 * same way), ST_EINVAL for no token or a hidden size out of range,
 * ST_ENOMEM, ST_EZSTD; a failed sample changes nothing. */
st_err st_wire_zsampler_take(st_wire_zsampler *s, const float *hidden, uint32_t n_tokens,
                             uint32_t hidden_size);

/* st_wire_zsampler_get - per dtype, over the kept samples: the ratio of
 * their packets' payload bytes together (each packet's estimated from its
 * sampled tokens, so a prefill of many tokens weighs more than a decode
 * step of one), the medians of the costs per byte (robust to a sample
 * that was preempted), and the count of all samples (0: none yet). */
void st_wire_zsampler_get(const st_wire_zsampler *s, st_wire_zmeas out[ST_WIRE_DT_COUNT]);

#endif
