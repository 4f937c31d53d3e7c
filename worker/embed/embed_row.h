/* embed_row.h - the one URL of an embedding row (strata-embed's cacheable
 * GET/HEAD /v1/embeddings/N, docs/shards.md).
 *
 * A cache keys on the URL as sent, so a row has exactly one spelling: the
 * parser reads the request target as the client sent it (before any
 * percent-decoding, with its query), not the decoded path, under which
 * "01", "%31" and "1%00" all read as 1. */
#ifndef ST_WORKER_EMBED_ROW_H
#define ST_WORKER_EMBED_ROW_H

#include <stdint.h>

#include "common/base/err.h"

#define ST_EMBED_ROW_PREFIX "/v1/embeddings/"
/* Digits of the longest id read: 10 holds any uint32; longer canonical
 * numbers are ids past every vocabulary. */
#define ST_EMBED_ROW_DIGITS_MAX 10

/* st_embed_row_target - the row that the request target (NUL-terminated,
 * as received) names. It names row N only when it is exactly
 * ST_EMBED_ROW_PREFIX then N in decimal: ASCII digits only, no leading
 * zero (N = 0 is "0"), nothing after them (no '/', '?', '#', '%', space).
 * Returns ST_OK with *id = N; ST_ERANGE for a canonical number of more
 * than ST_EMBED_ROW_DIGITS_MAX digits (past any vocabulary); ST_EINVAL for
 * every other target. The detail is recorded (st_errdetail); *id is set
 * only on ST_OK. Whether N is inside the vocabulary is the caller's
 * check. Pure; any thread. */
st_err st_embed_row_target(const char *target, uint64_t *id);

#endif
