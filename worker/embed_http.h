/* embed_http.h - `strata-embed`: the embedding and head service (docs/shards.md).
 *
 * It holds only the ends of a model (worker/embed_local.h: token_embd,
 * output_norm, output or the tied embedding, the tokenizer) and answers
 * over HTTP (libmicrohttpd, one internal polling thread, so the ends are
 * used by one thread):
 *   POST /v1/embed        {"token_ids": [...]}  -> {"model", "rows": [[...]]}
 *   POST /v1/logits       {"hidden": [...], "top_k": K, "temperature": T}
 *                         -> {"top_k": [{"id", "token", "logprob"}]} (the
 *                         output norm and head applied here)
 *   GET  /v1/embeddings/N -> {"id", "row"}, ETag "MODELHASH-N",
 *                         Cache-Control public, max-age=31536000, immutable;
 *                         304 without a body on a matching If-None-Match
 *   POST /v1/tokenize     {"text"} -> {"tokens"}
 *   POST /v1/detokenize   {"tokens"} -> {"text"}
 * With --listen the same ends answer ShardEmbed and ShardLogits requests
 * over NNG (worker/standalone.h), the client library's remote ends.
 * Errors are JSON {"error": {"message", "code"}} with their status: 400 a
 * malformed body or id, 404 an id outside the vocabulary or an unknown
 * path, 405 a wrong method, 413 a body over the limit, 422 a hidden state
 * of the wrong size. Floats are printed so that they read back to the same
 * f32. */
#ifndef ST_WORKER_EMBED_HTTP_H
#define ST_WORKER_EMBED_HTTP_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "worker/embed_local.h"

#define ST_EMBED_MAX_BODY_DEFAULT ((size_t)1 << 20)
#define ST_EMBED_MAX_IDS 4096      /* ids per /v1/embed or /v1/detokenize */
#define ST_EMBED_MAX_TOP_K 1000

typedef struct st_embed_srv st_embed_srv;

/* st_embed_srv_open - serves ends (borrowed, used under lock) on
 * host:port (port 0 picks one); bodies over max_body bytes get 413.
 * *bound gets the bound port. */
st_err st_embed_srv_open(st_ends *ends, pthread_mutex_t *lock, const char *host, int port,
                         size_t max_body, st_embed_srv **out, int *bound);

/* st_embed_srv_close - stops the daemon and frees; NULL is a no-op. */
void st_embed_srv_close(st_embed_srv *s);

#endif
