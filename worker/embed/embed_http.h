/* embed_http.h - `strata-embed`: the embedding and head service (docs/shards.md).
 *
 * It holds only the ends of a model (worker/embed/embed_local.h: token_embd,
 * output_norm, output or the tied embedding, the tokenizer) and answers
 * over HTTP (libmicrohttpd, a few polling threads; the ends are used under
 * one lock):
 *   POST /v1/embed        {"token_ids": [...]}  -> {"model", "rows": [[...]]},
 *                         or with Accept: application/x-strata-packet the
 *                         rows as one wire packet (common/wire/wire.h; f32, or
 *                         ?dtype=bf16|f16|i8)
 *   POST /v1/logits       {"hidden": [...], "top_k": K, "temperature": T},
 *                         or a packet of one token (Content-Type
 *                         application/x-strata-packet, ?top_k=K&temperature=T)
 *                         -> {"top_k": [{"id", "token", "logprob"}]} (the
 *                         output norm and head applied here)
 *   GET  /v1/embeddings/N -> {"id", "row"}, ETag "MODELHASH-N",
 *                         Cache-Control public, max-age=31536000, immutable;
 *                         304 without a body on a matching If-None-Match;
 *                         HEAD: the same status and headers, no body; N
 *                         has one spelling (worker/embed/embed_row.h), any other
 *                         target under the prefix is 404
 *   POST /v1/tokenize     {"text"} -> {"tokens"}
 *   POST /v1/detokenize   {"tokens"} -> {"text"}
 *   GET  /metrics         Prometheus text (common/http/http_metrics.h)
 * With --api-key-file every path but an unknown one needs `Authorization:
 * Bearer KEY` (common/http/http_keys.h); rate limits are token buckets per key
 * or client address (common/http/http_rate.h), /metrics excepted.
 * With --listen the same ends answer ShardEmbed and ShardLogits requests
 * over NNG (worker/shard/standalone.h), the client library's remote ends.
 * Errors are JSON {"error": {"message", "code"}} with their status: 400 a
 * malformed body or id, 404 an id outside the vocabulary, a row URL in
 * another spelling or an unknown path, 405 a wrong method (with Allow), 413 a body over the limit, 415 a packet where
 * none is taken, 422 a hidden state of the wrong size, 401 a missing or
 * wrong key, 429 a rate limit (with Retry-After). Floats are printed so
 * that they read back to the same f32. */
#ifndef ST_WORKER_EMBED_HTTP_H
#define ST_WORKER_EMBED_HTTP_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/http/http_keys.h"
#include "worker/embed/embed_local.h"

#define ST_EMBED_MAX_BODY_DEFAULT ((size_t)1 << 20)
#define ST_EMBED_MAX_IDS 4096 /* ids per /v1/embed or /v1/detokenize */
#define ST_EMBED_MAX_TOP_K 1000
/* Defaults of the connection and rate flags: the coordinator's --http ones
 * (docs/http-api.md "Limits"). */
#define ST_EMBED_DEFAULT_MAX_CONNS 4096u
#define ST_EMBED_DEFAULT_TIMEOUT_S 30u
#define ST_EMBED_DEFAULT_THREADS 2u
#define ST_EMBED_DEFAULT_RATE_TABLE 16384u
#define ST_EMBED_PACKET_TYPE "application/x-strata-packet"

typedef struct st_embed_cfg {
    const char *host;         /* an IPv4 address */
    int port;                 /* 0: any free port */
    size_t max_body;          /* bytes of a request body */
    const char *api_key_file; /* NULL: no keys (main refuses a non-loopback host then) */
    uint32_t max_conns;       /* connections at once */
    uint32_t per_ip_conns;    /* per client address (0: no limit) */
    uint32_t timeout_s;       /* an idle connection (also mid-request) is closed after this */
    uint32_t threads;         /* HTTP threads (each polls many connections) */
    uint32_t rate_table;      /* identities the rate limiter remembers */
    st_http_limits limits;    /* per key or address unless the key file says else; tpm
                               * counts rows (ids embedded, hidden states through the head) */
} st_embed_cfg;

/* st_embed_cfg_default - the defaults above; host NULL. */
st_embed_cfg st_embed_cfg_default(void);

typedef struct st_embed_srv st_embed_srv;

/* st_embed_srv_open - loads the API keys, serves ends (borrowed, used
 * under lock) as cfg says. *bound gets the bound port. */
st_err st_embed_srv_open(st_ends *ends, pthread_mutex_t *lock, const st_embed_cfg *cfg,
                         st_embed_srv **out, int *bound);

/* st_embed_srv_close - stops the daemon and frees; NULL is a no-op. */
void st_embed_srv_close(st_embed_srv *s);

#endif
