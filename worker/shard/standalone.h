/* standalone.h - a sidecar shard server: layers [first, last) of a model
 * served directly to clients, without a coordinator (docs/shards.md).
 *
 * `strata-worker --standalone --layers A:B --model M` runs one. It binds
 * only the tensors of its range (worker/engine/model.h), listens on one NNG REP
 * socket and answers each request in turn with the stage engine
 * (worker/engine/stage.h). Requests and replies are STEP frames (common/wire/step.h)
 * inside envelopes (common/wire/envelope.h; keyed with --cluster-key): the meta
 * is a ShardRequest or ShardReply (proto/strata.proto), the payload an
 * activation packet (common/wire/wire.h) whose plan hash is the model id and
 * whose stage is the layer it enters. A hello tells the client the range,
 * the hidden size, the model id, the accepted dtypes, the most tokens per
 * step and the context; a step runs its rows (each a session's positions
 * [pos0, pos0 + n)) and replies with the hidden states after layer B - 1
 * in the dtype the client asks for; an end forgets a session.
 *
 * Sessions hold a KV cache each (worker/data/sessions.h): at most max_sessions,
 * the least recently used evicted for a new one, and those idle for
 * longer than ttl_s forgotten. A step of an unknown session must start at
 * position 0 (ST_ENOENT otherwise, telling the client to replay its
 * history, which the client library does). Bad input gets an error reply
 * and changes nothing else; a frame failing its MAC is dropped and
 * counted (INV-5); frames beyond the receive limit are dropped by NNG.
 * Nothing aborts on remote input.
 *
 * The same server answers for an embedding service (cfg.ends): its hello
 * says `ends`, and it runs ShardEmbed (ids -> rows) and ShardLogits
 * (final hidden states -> logits) requests instead of steps. */
#ifndef ST_WORKER_STANDALONE_H
#define ST_WORKER_STANDALONE_H

#include <stdbool.h>
#include <stdint.h>

#include <pthread.h>
#include <signal.h>

#include "common/base/err.h"
#include "worker/embed/embed_local.h"

#define ST_STANDALONE_SESSIONS_DEFAULT 16
#define ST_STANDALONE_TTL_DEFAULT_S 600
#define ST_STANDALONE_MAX_TOKENS_DEFAULT 128

typedef struct st_standalone_cfg {
    const char *model;
    int64_t first, last;   /* layers [first, last) */
    const char *listen;    /* NNG URL; port 0 picks one */
    const char *key_file;  /* NULL: frames are not authenticated */
    bool encrypt;          /* seal frames (needs key_file) */
    int threads;           /* compute threads; 0: the cores */
    bool force_ref;        /* reference kernels */
    uint32_t max_sessions; /* KV caches at most */
    uint32_t ttl_s;        /* idle sessions are forgotten after this */
    int64_t n_ctx;         /* positions per session; 0: the model's */
    const char *cache_type; /* KV cache dtype name (--cache-type); NULL: ST_KV_DEFAULT_DTYPE */
    int64_t max_tokens;    /* tokens per step at most */
    uint32_t dtype_mask;   /* bit (1 << st_wire_dtype) per accepted dtype */
    /* An embedding service instead (strata-embed --listen): no layers are
     * loaded (model, first and last are unused); embed and logits requests
     * are answered with these ends, borrowed, used under lock (shared with
     * the HTTP side). */
    st_ends *ends;
    pthread_mutex_t *lock;
} st_standalone_cfg;

typedef struct st_standalone st_standalone;

/* st_standalone_open - loads the range, opens the socket and listens.
 * The caller owns *out (st_standalone_close). */
st_err st_standalone_open(const st_standalone_cfg *cfg, st_standalone **out);

/* st_standalone_url - the bound listen address (tcp://HOST:PORT). */
const char *st_standalone_url(const st_standalone *s);

/* st_standalone_start - starts the serving thread. */
st_err st_standalone_start(st_standalone *s);

/* st_standalone_close - stops serving (the request in progress
 * finishes), joins the thread and frees; NULL is a no-op. */
void st_standalone_close(st_standalone *s);

/* st_standalone_block_signals - blocks SIGINT and SIGTERM (in *set, for
 * main's sigwait) in this thread and those it creates later, and ignores
 * SIGPIPE: a server's signal set-up, before any thread exists. */
void st_standalone_block_signals(sigset_t *set);

/* st_standalone_main - `strata-worker --standalone ...`: flags, signals,
 * life cycle; returns the exit status. */
int st_standalone_main(int argc, char **argv);

#endif
