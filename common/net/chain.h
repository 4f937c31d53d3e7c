/* chain.h - a client's chain of standalone shard servers covering the
 * layers [0, n_layer) of one model, with replacements and replay
 * (docs/shards.md; the servers: worker/shard/standalone.h; one connection:
 * common/net/shard.h).
 *
 * The servers are given in layer order; a server whose range is already
 * covered by the chain is a replacement for the link of that range. The
 * embedding of token ids is the caller's (a callback), so a forward pass
 * is: embed the ids, run them through each link in turn, keep the last
 * token's hidden state after the last layer. The caller applies the head.
 *
 * Failure and replay. The caller keeps each session's token history and
 * passes it whole to every forward call. When a link fails (its server
 * lost, no reply in time, or the server forgot the session), the chain
 * replaces a lost or silent server by a connected replacement of the same
 * range (or fails with ST_ECLOSED naming the range when none is left),
 * then replays the history from position 0 through every link: servers
 * rewrite their caches from 0, and since a token's result depends neither
 * on its batch nor on the prompt's chunking (INV-7), the replayed states
 * are bit-identical and so is the continuation. A chain is used by one
 * thread at a time. */
#ifndef ST_CHAIN_H
#define ST_CHAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/wire/wire.h"

/* The embedding of n ids into out[n][hidden]. */
typedef st_err (*st_chain_embed_fn)(void *arg, const int32_t *ids, int64_t n, float *out);

typedef struct st_chain st_chain;

/* st_chain_open - connects to the n servers at addrs (each must answer
 * its hello) and arranges them: the chain must start at layer 0, continue
 * without gaps to n_layer, and every server must serve one model (its id)
 * with one hidden size. key NULL: unkeyed. dtype is the wire dtype of
 * every packet; timeout_ms bounds each exchange. */
st_err st_chain_open(const char *const *addrs, size_t n, const uint8_t *key, bool encrypt,
                     st_wire_dtype dtype, int timeout_ms, st_chain **out);

/* st_chain_close - ends no sessions; closes every connection; NULL is a
 * no-op. */
void st_chain_close(st_chain *c);

/* Facts of the chain: layers, hidden size, the model id (32 bytes), the
 * smallest context of its servers, its links and spares. */
int64_t st_chain_n_layer(const st_chain *c);
uint32_t st_chain_hidden(const st_chain *c);
const uint8_t *st_chain_model_id(const st_chain *c);
int64_t st_chain_n_ctx(const st_chain *c);
size_t st_chain_links(const st_chain *c);
size_t st_chain_spares(const st_chain *c);
/* st_chain_replays - histories replayed so far (failures survived). */
uint64_t st_chain_replays(const st_chain *c);

/* st_chain_forward - runs the tokens hist[pos, n_hist) of session (whose
 * positions [0, pos) went through before) through the chain and puts the
 * hidden state of hist[n_hist - 1] after the last layer in
 * last[hidden]. On a failure it replaces and replays as the file comment
 * says; errors: ST_ECLOSED (a range with no server left), the codes of a
 * server's refusal, the embedding's. */
st_err st_chain_forward(st_chain *c, uint64_t session, const int32_t *hist, int64_t n_hist,
                        int64_t pos, st_chain_embed_fn embed, void *arg, float *last);

/* st_chain_end - asks every link to forget session (errors ignored: a
 * server that is gone forgets it anyway). */
void st_chain_end(st_chain *c, uint64_t session);

#endif
