/* replay.h - a receiving envelope's anti-replay table: which sequence
 * numbers each sender has had accepted (the rule: envelope.h, "With a
 * cluster key ..."; the memory: replay.c's top).
 *
 * Ownership: st_replay_open allocates a table, st_replay_close frees it;
 * the envelope that opened it is its only user (one thread at a time). */
#ifndef STRATA_COMMON_REPLAY_H
#define STRATA_COMMON_REPLAY_H

#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"

#define ST_ENV_MAX_PEERS 1024 /* senders the table holds; the least recently seen leaves */
/* ST_ENV_REPLAY_WINDOW - sequence numbers a sender's window spans: its
 * highest accepted and the ST_ENV_REPLAY_WINDOW - 1 below it. Sequence
 * numbers are microseconds of the sender's clock, not frame counts, so a
 * window of 64 or 1024 numbers (IPsec's and DTLS's frame counts) would
 * cover only 64 us or 1 ms of sending: a frame held back behind later ones
 * of its sender (its receive callback preempted on a loaded host, for a
 * scheduler period: CFS's is 12 ms on 2 cores) would still be refused.
 * 16384 covers 16.4 ms of the sender's clock; a frame held back longer is
 * refused as a replay. A multiple of 64 (bitmap words). */
#define ST_ENV_REPLAY_WINDOW 16384u

typedef struct st_replay st_replay;

/* What a table holds (tests, diagnostics). */
typedef struct st_replay_stats {
    size_t senders; /* slots taken */
    size_t dense;   /* of them, windows kept as a bitmap */
    size_t bytes;   /* heap bytes of the windows (the table's slots apart) */
} st_replay_stats;

/* st_replay_open - an empty table in *out; ST_ENOMEM. */
st_err st_replay_open(st_replay **out);
void st_replay_close(st_replay *r);

/* st_replay_check - ST_OK if seq is new for (sender, cred) and then
 * records it; ST_EAUTH saying why if not (a replay: nothing recorded);
 * ST_ENOMEM if the window cannot grow (nothing recorded). */
st_err st_replay_check(st_replay *r, uint64_t sender, uint32_t cred, uint64_t seq);

void st_replay_stats_get(const st_replay *r, st_replay_stats *s);

#endif
