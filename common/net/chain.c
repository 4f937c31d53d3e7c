/* chain.c - a chain of shard servers with replacements and replay (see
 * chain.h). */
#include "common/net/chain.h"

#include <stdlib.h>
#include <string.h>

#include "common/base/log.h"
#include "common/net/shard.h"

typedef struct chain_link {
    st_shard *conn; /* NULL once lost, until a replacement takes over */
    int64_t first, last;
} chain_link;

struct st_chain {
    chain_link *links; /* in layer order */
    size_t n_links;
    st_shard **spares; /* NULL entries: taken */
    size_t n_spares;
    int64_t n_layer;
    uint32_t hidden;
    uint8_t model_id[ST_WIRE_PLAN_HASH_SIZE];
    int64_t n_ctx;
    int64_t max_tokens; /* per step: the smallest of the servers' */
    float *a, *b;       /* [max_tokens][hidden] */
    uint64_t replays;
};

/* chain_place - puts connection s in the chain (a link continuing it, or
 * a spare of a covered range); takes s. */
static st_err chain_place(st_chain *c, st_shard *s, int64_t *end)
{
    const st_shard_info *i = st_shard_info_of(s);
    if (c->n_links == 0 && c->n_spares == 0) {
        c->n_layer = i->n_layer;
        c->hidden = i->hidden;
        memcpy(c->model_id, i->model_id, sizeof c->model_id);
        c->n_ctx = i->n_ctx;
        c->max_tokens = i->max_tokens;
    } else if (memcmp(c->model_id, i->model_id, sizeof c->model_id) != 0 ||
               i->hidden != c->hidden || i->n_layer != c->n_layer) {
        return st_errorf(ST_EEPOCH, "shard server %s serves another model than %s",
                         st_shard_addr(s), st_shard_addr(c->links[0].conn));
    }
    if (i->n_ctx < c->n_ctx)
        c->n_ctx = i->n_ctx;
    if (i->max_tokens < c->max_tokens)
        c->max_tokens = i->max_tokens;
    if (i->first == *end && i->last > *end) {
        c->links[c->n_links++] = (chain_link){.conn = s, .first = i->first, .last = i->last};
        *end = i->last;
        return ST_OK;
    }
    for (size_t k = 0; k < c->n_links; k++)
        if (c->links[k].first == i->first && c->links[k].last == i->last) {
            c->spares[c->n_spares++] = s;
            return ST_OK;
        }
    return st_errorf(ST_EINVAL,
                     "shard server %s serves layers [%lld, %lld), which neither "
                     "continue the chain at layer %lld nor replace one of its links",
                     st_shard_addr(s), (long long)i->first, (long long)i->last, (long long)*end);
}

st_err st_chain_open(const char *const *addrs, size_t n, const uint8_t *key, bool encrypt,
                     st_wire_dtype dtype, int timeout_ms, st_chain **out)
{
    *out = NULL;
    if (n == 0)
        return st_errorf(ST_EINVAL, "a chain needs at least one shard server");
    st_chain *c = calloc(1, sizeof *c);
    if (c == NULL || (c->links = calloc(n, sizeof *c->links)) == NULL ||
        (c->spares = calloc(n, sizeof *c->spares)) == NULL) {
        st_chain_close(c);
        return st_errorf(ST_ENOMEM, "chain of %zu servers", n);
    }
    int64_t end = 0;
    st_err e = ST_OK;
    for (size_t k = 0; k < n && e == ST_OK; k++) {
        st_shard *s;
        if ((e = st_shard_connect(addrs[k], key, encrypt, dtype, timeout_ms, &s)) != ST_OK)
            break;
        if ((e = chain_place(c, s, &end)) != ST_OK)
            st_shard_close(s);
    }
    if (e == ST_OK && end != c->n_layer)
        e = st_errorf(ST_EINVAL,
                      "the shard servers cover layers [0, %lld) of %lld: the chain "
                      "is incomplete",
                      (long long)end, (long long)c->n_layer);
    if (e == ST_OK) {
        size_t nf = (size_t)c->max_tokens * c->hidden;
        c->a = malloc(nf * sizeof *c->a);
        c->b = malloc(nf * sizeof *c->b);
        if (c->a == NULL || c->b == NULL)
            e = st_errorf(ST_ENOMEM, "chain buffers of %zu floats", nf);
    }
    if (e != ST_OK) {
        st_chain_close(c);
        return e;
    }
    *out = c;
    return ST_OK;
}

void st_chain_close(st_chain *c)
{
    if (c == NULL)
        return;
    for (size_t k = 0; c->links != NULL && k < c->n_links; k++)
        st_shard_close(c->links[k].conn);
    for (size_t k = 0; c->spares != NULL && k < c->n_spares; k++)
        st_shard_close(c->spares[k]);
    free(c->links);
    free(c->spares);
    free(c->a);
    free(c->b);
    free(c);
}

int64_t st_chain_n_layer(const st_chain *c) { return c->n_layer; }
uint32_t st_chain_hidden(const st_chain *c) { return c->hidden; }
const uint8_t *st_chain_model_id(const st_chain *c) { return c->model_id; }
int64_t st_chain_n_ctx(const st_chain *c) { return c->n_ctx; }
size_t st_chain_links(const st_chain *c) { return c->n_links; }
uint64_t st_chain_replays(const st_chain *c) { return c->replays; }

size_t st_chain_spares(const st_chain *c)
{
    size_t n = 0;
    for (size_t k = 0; k < c->n_spares; k++)
        n += c->spares[k] != NULL;
    return n;
}

/* chain_replace - link k lost its server: a spare of its range takes
 * over. ST_ECLOSED when none is left. */
static st_err chain_replace(st_chain *c, size_t k)
{
    chain_link *l = &c->links[k];
    for (size_t j = 0; j < c->n_spares; j++) {
        const st_shard_info *i = c->spares[j] ? st_shard_info_of(c->spares[j]) : NULL;
        if (i != NULL && i->first == l->first && i->last == l->last) {
            l->conn = c->spares[j];
            c->spares[j] = NULL;
            st_log(ST_LOG_WARN, "chain", "layers [%lld, %lld): replacement %s takes over",
                   (long long)l->first, (long long)l->last, st_shard_addr(l->conn));
            return ST_OK;
        }
    }
    return st_errorf(ST_ECLOSED,
                     "layers [%lld, %lld): the server is lost and no replacement is "
                     "left",
                     (long long)l->first, (long long)l->last);
}

/* chain_pass - runs hist[pos, n_hist) through every link; *failed gets
 * the link that failed (or SIZE_MAX). */
static st_err chain_pass(st_chain *c, uint64_t session, const int32_t *hist, int64_t n_hist,
                         int64_t pos, st_chain_embed_fn embed, void *arg, float *last,
                         size_t *failed)
{
    *failed = SIZE_MAX;
    for (int64_t p = pos; p < n_hist; p += c->max_tokens) {
        const int64_t n = n_hist - p < c->max_tokens ? n_hist - p : c->max_tokens;
        st_err e = embed(arg, hist + p, n, c->a);
        if (e != ST_OK)
            return e;
        for (size_t k = 0; k < c->n_links; k++) {
            if (c->links[k].conn == NULL) {
                *failed = k;
                return st_errorf(ST_ECLOSED, "layers [%lld, %lld) have no server",
                                 (long long)c->links[k].first, (long long)c->links[k].last);
            }
            if ((e = st_shard_step(c->links[k].conn, session, p, n, c->a, c->b)) != ST_OK) {
                *failed = k;
                return e;
            }
            float *t = c->a;
            c->a = c->b;
            c->b = t;
        }
        if (p + n == n_hist)
            memcpy(last, c->a + (size_t)(n - 1) * c->hidden, c->hidden * sizeof *last);
    }
    return ST_OK;
}

st_err st_chain_forward(st_chain *c, uint64_t session, const int32_t *hist, int64_t n_hist,
                        int64_t pos, st_chain_embed_fn embed, void *arg, float *last)
{
    if (pos < 0 || pos >= n_hist || n_hist > c->n_ctx)
        return st_errorf(ST_ERANGE, "tokens [%lld, %lld) do not fit the chain's context of %lld",
                         (long long)pos, (long long)n_hist, (long long)c->n_ctx);
    /* every failure survived consumes a spare or is a forgotten session;
     * more attempts than links and spares means the servers keep failing */
    const size_t attempts = c->n_links + c->n_spares + 1;
    st_err e = ST_OK;
    for (size_t t = 0; t < attempts; t++) {
        size_t k;
        e = chain_pass(c, session, hist, n_hist, pos, embed, arg, last, &k);
        if (e == ST_OK || k == SIZE_MAX)
            return e;
        if (e != ST_ENOENT && e != ST_ECLOSED && e != ST_ETIMEOUT)
            return e; /* a refusal: replaying would be refused again */
        st_log(ST_LOG_WARN, "chain", "%s; replaying %lld tokens", st_errmsg(e), (long long)n_hist);
        if (e != ST_ENOENT) {
            st_shard_close(c->links[k].conn);
            c->links[k].conn = NULL;
            if ((e = chain_replace(c, k)) != ST_OK)
                return e;
        }
        c->replays++;
        pos = 0;
    }
    return st_errwrap(e, "gave up after %zu replays", attempts);
}

void st_chain_end(st_chain *c, uint64_t session)
{
    for (size_t k = 0; k < c->n_links; k++)
        if (c->links[k].conn != NULL)
            (void)st_shard_end(c->links[k].conn, session);
}
