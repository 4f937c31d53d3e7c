/* standalone.c - the sidecar shard server (see standalone.h).
 *
 * Design. A shard server is the stage engine behind one REP socket and
 * nothing else: no coordinator, no plan, no heartbeat. One serving thread
 * receives a request, answers it and takes the next, so the engine, the
 * session table and the codec are owned by that thread and need no lock;
 * requests of several clients are served one after another, each running
 * all of its rows in one forward pass. What a cluster worker learns from
 * its plan (the range, the epoch, the plan hash) a client learns from the
 * hello reply instead, and the packets carry the model id where a plan
 * hash would be, so a client of another model, or one sending to the
 * wrong range, is refused by the same wire checks as in a cluster.
 *
 * Sessions are the client's: its rows name them, the first step of an
 * unknown one must start at position 0, and a later step may start
 * anywhere up to what is filled (a rewrite, as re-prefill and replay do).
 * Capacity is bounded twice: at most max_sessions caches (the least
 * recently used evicted for a new session; worker/data/sessions.h), and those
 * idle for ttl_s forgotten before each step. A forgotten session's next
 * step gets ST_ENOENT, on which the client library replays its history
 * from position 0, so eviction costs time, never correctness.
 *
 * Every request is checked before it changes anything: the envelope (a
 * frame failing its MAC is dropped without a reply and counted), the
 * meta's size and budget, the packet (framing, CRC, dtype among those
 * accepted, hidden size, model id, stage, token count at most max_tokens),
 * the rows (distinct sessions, positions that fit), and only then are
 * sessions acquired and the batch run. Any failure is an error reply. */
#include "worker/shard/standalone.h"

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/clock.h"
#include "common/base/log.h"
#include "common/net/netaddr.h"
#include "common/net/pipe_gate.h"
#include "common/net/shard.h"
#include "worker/data/sessions.h"
#include "worker/engine/stage.h"

/* how long a reply may wait for a client that stopped reading */
#define SA_REPLY_TIMEOUT_MS 10000
#define SA_URL_MAX 256

struct st_standalone {
    st_standalone_cfg cfg;
    st_model *m;
    st_pool *pool;
    const st_kernel_ops *ops;
    st_stage_ctx *ctx;
    st_dtype kv_dtype; /* cfg.cache_type: every session's KV cache */
    st_sessions sess;
    double *used_at; /* [max_sessions] last step of the session on slot i */
    uint64_t tick;
    st_env env;
    st_wire_ctx *wctx;
    nng_socket sock;
    bool sock_open;
    st_pipe_gate *gate; /* the socket's connections (common/net/pipe_gate.h); freed after it */
    pthread_t thread;
    bool started;
    char url[SA_URL_MAX];
    const st_hparams *hp; /* of the model or of the ends */
    const uint8_t *model_id;
    uint32_t hidden;
    size_t out_floats;   /* room of out */
    float *in, *out;     /* [max_tokens][hidden] */
    st_wire_row *rows;   /* [ST_SHARD_MAX_ROWS] */
    st_batch_row *brows; /* [ST_SHARD_MAX_ROWS] */
    uint64_t auth_dropped;
};

/* sa_send - sends frame msg (taken) to the client. */
static void sa_send(st_standalone *s, nng_msg *msg)
{
    int rv = nng_sendmsg(s->sock, msg, 0);
    if (rv != 0) {
        nng_msg_free(msg);
        st_log(ST_LOG_WARN, "shard", "reply not sent: %s", nng_strerror(rv));
    }
}

/* sa_error - an error reply of code e with this thread's detail. */
static void sa_error(st_standalone *s, st_err e)
{
    Strata__Error er = STRATA__ERROR__INIT;
    er.code = (uint32_t)e;
    er.message = (char *)st_errdetail();
    Strata__ShardReply r = STRATA__SHARD_REPLY__INIT;
    r.error = &er;
    st_log(ST_LOG_DEBUG, "shard", "error reply: %s", st_errmsg(e));
    nng_msg *msg;
    if (st_shard_frame(&s->env, &r.base, NULL, NULL, NULL, NULL, NULL, &msg) == ST_OK)
        sa_send(s, msg);
}

static st_err sa_hello(st_standalone *s, const Strata__ShardHello *hi, nng_msg **out)
{
    if (hi->dtype >= ST_WIRE_DT_COUNT || (s->cfg.dtype_mask & (1u << hi->dtype)) == 0)
        return st_errorf(ST_ETYPE,
                         "wire dtype %u is not among those this server accepts (mask "
                         "0x%x)",
                         hi->dtype, s->cfg.dtype_mask);
    Strata__ShardInfo in = STRATA__SHARD_INFO__INIT;
    in.first = (uint32_t)s->cfg.first;
    in.last = (uint32_t)s->cfg.last;
    in.n_layer = (uint32_t)s->hp->n_layer;
    in.hidden = s->hidden;
    in.model_id.data = (uint8_t *)s->model_id;
    in.model_id.len = ST_WIRE_PLAN_HASH_SIZE;
    in.dtype_mask = s->cfg.dtype_mask;
    in.max_tokens = (uint32_t)s->cfg.max_tokens;
    in.n_ctx = (uint32_t)s->cfg.n_ctx;
    in.max_sessions = s->cfg.max_sessions;
    in.ttl_s = s->cfg.ttl_s;
    in.ends = s->cfg.ends != NULL;
    in.n_vocab = (uint32_t)s->hp->n_vocab;
    Strata__ShardReply r = STRATA__SHARD_REPLY__INIT;
    r.info = &in;
    return st_shard_frame(&s->env, &r.base, NULL, NULL, NULL, NULL, NULL, out);
}

/* sa_expire - forgets the sessions idle for longer than the TTL. */
static void sa_expire(st_standalone *s)
{
    const double now = st_now_s();
    while (s->sess.lru != ST_SESSION_NONE && now - s->used_at[s->sess.lru] > (double)s->cfg.ttl_s) {
        uint64_t id = s->sess.slots[s->sess.lru].id;
        st_sessions_end(&s->sess, id);
        st_log(ST_LOG_DEBUG, "shard", "session %016llx expired", (unsigned long long)id);
    }
}

/* sa_rows - checks the rows of a decoded packet against the sessions
 * before anything changes: distinct sessions, an unknown one from 0. */
static st_err sa_rows(st_standalone *s, const st_wire_hdr *h)
{
    for (uint32_t i = 0; i < h->n_rows; i++) {
        const st_wire_row *r = &s->rows[i];
        for (uint32_t j = 0; j < i; j++)
            if (s->rows[j].session_id == r->session_id)
                return st_errorf(ST_EINVAL, "rows %u and %u name one session", j, i);
        if ((int64_t)r->pos0 + r->n_tokens > s->cfg.n_ctx)
            return st_errorf(ST_ERANGE, "row %u: positions [%u, %llu) exceed the context of %lld",
                             i, r->pos0, (unsigned long long)r->pos0 + r->n_tokens,
                             (long long)s->cfg.n_ctx);
        const st_session *sl = st_sessions_find(&s->sess, r->session_id);
        if (sl == NULL && r->pos0 != 0)
            return st_errorf(ST_ENOENT,
                             "session %016llx is unknown here (expired, evicted or "
                             "never started): replay it from position 0",
                             (unsigned long long)r->session_id);
        if (sl != NULL && sl->kv != NULL && r->pos0 > sl->kv->n_filled)
            return st_errorf(ST_ERANGE, "row %u: position %u is beyond the %lld filled", i, r->pos0,
                             (long long)sl->kv->n_filled);
    }
    if (h->n_rows > s->cfg.max_sessions)
        return st_errorf(ST_EBUSY, "%u sessions in one step; this server holds %u", h->n_rows,
                         s->cfg.max_sessions);
    return ST_OK;
}

static st_err sa_step(st_standalone *s, const Strata__ShardStep *st, const st_step_parts *p,
                      nng_msg **out)
{
    if (st->reply_dtype >= ST_WIRE_DT_COUNT || (s->cfg.dtype_mask & (1u << st->reply_dtype)) == 0)
        return st_errorf(ST_ETYPE,
                         "reply dtype %u is not among those this server sends (mask "
                         "0x%x)",
                         st->reply_dtype, s->cfg.dtype_mask);
    if (s->cfg.ends != NULL)
        return st_errorf(ST_EPROTO, "an embedding service runs no layers");
    st_wire_expect x = {.plan_hash = s->model_id,
                        .stage = (uint16_t)s->cfg.first,
                        .hidden = s->hidden,
                        .max_tokens = (uint32_t)s->cfg.max_tokens,
                        .dtype_mask = s->cfg.dtype_mask};
    st_wire_hdr h;
    st_err e = st_wire_decode(s->wctx, p->pkt, p->pkt_len, &x, &h, s->rows, ST_SHARD_MAX_ROWS,
                              s->in, (size_t)s->cfg.max_tokens * s->hidden);
    if (e != ST_OK)
        return st_errwrap(e, "step packet");
    sa_expire(s);
    if ((e = sa_rows(s, &h)) != ST_OK)
        return e;
    s->tick++;
    for (uint32_t i = 0; i < h.n_rows; i++) {
        st_session *sl;
        bool fresh;
        if ((e = st_sessions_acquire(&s->sess, s->rows[i].session_id, s->tick, &sl, &fresh)))
            return e;
        if (sl->kv == NULL && (e = st_stage_kv_alloc(s->ctx, s->cfg.n_ctx, s->kv_dtype, &sl->kv)) != ST_OK) {
            st_sessions_end(&s->sess, s->rows[i].session_id);
            return e;
        }
        if (fresh)
            st_kv_reset(sl->kv);
        s->used_at[sl - s->sess.slots] = st_now_s();
        s->brows[i] = (st_batch_row){.kv = sl->kv,
                                     .pos = s->rows[i].pos0,
                                     .n_tok = s->rows[i].n_tokens};
    }
    const size_t cap = (size_t)s->cfg.max_tokens * s->hidden;
    if ((e = st_stage_forward(s->ctx, s->brows, h.n_rows, s->in, ST_OUT_HIDDEN, s->out, cap)))
        return e;
    st_wire_hdr rh = h;
    rh.stage = (uint16_t)s->cfg.last;
    rh.flags = 0;
    rh.dtype = (st_wire_dtype)st->reply_dtype;
    st_wire_opts o = {
        .dtype = rh.dtype,
        .zstd_level = st->zstd ? ST_WIRE_ZSTD_DEFAULT_LEVEL : 0,
        .plane_split = st->zstd && st_wire_dtype_planes(rh.dtype),
    };
    Strata__ShardReply r = STRATA__SHARD_REPLY__INIT;
    return st_shard_frame(&s->env, &r.base, &rh, s->rows, s->out, &o, s->wctx, out);
}

/* sa_ends_reply - the reply packet of n rows of w floats (out) for an
 * embedding service's request, sent to stage. */
static st_err sa_ends_reply(st_standalone *s, uint16_t stage, uint32_t w, uint32_t n, nng_msg **out)
{
    st_wire_hdr h;
    memset(&h, 0, sizeof h);
    memcpy(h.plan_hash, s->model_id, ST_WIRE_PLAN_HASH_SIZE);
    h.stage = stage;
    h.n_rows = 1;
    h.hidden = w;
    h.n_tokens = n;
    s->rows[0] = (st_wire_row){.session_id = 0, .pos0 = 0, .n_tokens = n};
    st_wire_opts o = {.dtype = ST_WIRE_F32};
    Strata__ShardReply r = STRATA__SHARD_REPLY__INIT;
    return st_shard_frame(&s->env, &r.base, &h, s->rows, s->out, &o, s->wctx, out);
}

static st_err sa_embed(st_standalone *s, const Strata__ShardEmbed *em, nng_msg **out)
{
    if (s->cfg.ends == NULL)
        return st_errorf(ST_EPROTO, "a shard server serves no embedding");
    if (em->n_token_ids == 0 || em->n_token_ids > (size_t)s->cfg.max_tokens)
        return st_errorf(ST_ERANGE, "%zu ids (1..%lld at a time)", em->n_token_ids,
                         (long long)s->cfg.max_tokens);
    pthread_mutex_lock(s->cfg.lock);
    st_err e = st_ends_embed(s->cfg.ends, em->token_ids, (int64_t)em->n_token_ids, s->out);
    pthread_mutex_unlock(s->cfg.lock);
    if (e != ST_OK)
        return e;
    return sa_ends_reply(s, 0, s->hidden, (uint32_t)em->n_token_ids, out);
}

static st_err sa_logits(st_standalone *s, const st_step_parts *p, nng_msg **out)
{
    if (s->cfg.ends == NULL)
        return st_errorf(ST_EPROTO, "a shard server serves no head");
    const uint16_t head = (uint16_t)s->hp->n_layer;
    st_wire_expect x = {.plan_hash = s->model_id,
                        .stage = head,
                        .hidden = s->hidden,
                        .max_tokens = (uint32_t)s->cfg.max_tokens,
                        .dtype_mask = 1u << ST_WIRE_F32};
    st_wire_hdr h;
    st_err e = st_wire_decode(s->wctx, p->pkt, p->pkt_len, &x, &h, s->rows, 1, s->in,
                              (size_t)s->cfg.max_tokens * s->hidden);
    if (e != ST_OK)
        return st_errwrap(e, "logits packet");
    pthread_mutex_lock(s->cfg.lock);
    e = st_ends_logits(s->cfg.ends, s->in, h.n_tokens, s->out);
    pthread_mutex_unlock(s->cfg.lock);
    if (e != ST_OK)
        return e;
    return sa_ends_reply(s, head, (uint32_t)s->hp->n_vocab, h.n_tokens, out);
}

/* sa_handle - answers one request (or drops it: a failed MAC). */
static void sa_handle(st_standalone *s, nng_msg *msg)
{
    st_step_parts p;
    uint64_t sender;
    ProtobufCMessage *pm = NULL;
    nng_msg *reply = NULL;
    st_err e = st_shard_parse(&s->env, nng_msg_body(msg), nng_msg_len(msg),
                              &strata__shard_request__descriptor, &pm, &p, &sender);
    if (e == ST_EAUTH) /* its connection (pipe_gate.h) */
        st_pipe_gate_failed(s->gate, msg);
    else if (e == ST_OK)
        st_pipe_gate_vouch(s->gate, msg);
    if (e == ST_EAUTH) {
        s->auth_dropped++;
        st_log(ST_LOG_WARN, "shard", "frame dropped (%llu so far): %s",
               (unsigned long long)s->auth_dropped, st_errmsg(e));
        return;
    }
    if (e == ST_OK) {
        const Strata__ShardRequest *rq = (const Strata__ShardRequest *)pm;
        switch (rq->req_case) {
        case STRATA__SHARD_REQUEST__REQ_HELLO:
            e = sa_hello(s, rq->hello, &reply);
            break;
        case STRATA__SHARD_REQUEST__REQ_STEP:
            e = sa_step(s, rq->step, &p, &reply);
            break;
        case STRATA__SHARD_REQUEST__REQ_EMBED:
            e = sa_embed(s, rq->embed, &reply);
            break;
        case STRATA__SHARD_REQUEST__REQ_LOGITS:
            e = sa_logits(s, &p, &reply);
            break;
        case STRATA__SHARD_REQUEST__REQ_END: {
            st_sessions_end(&s->sess, rq->end->session_id);
            Strata__ShardReply r = STRATA__SHARD_REPLY__INIT;
            e = st_shard_frame(&s->env, &r.base, NULL, NULL, NULL, NULL, NULL, &reply);
            break;
        }
        default:
            e = st_errorf(ST_EPROTO, "a shard request without a known request");
        }
        protobuf_c_message_free_unpacked(pm, NULL);
    }
    if (e != ST_OK)
        sa_error(s, e);
    else
        sa_send(s, reply);
}

static void *sa_serve(void *arg)
{
    st_standalone *s = arg;
    for (;;) {
        nng_msg *msg;
        int rv = nng_recvmsg(s->sock, &msg, 0);
        if (rv == NNG_ECLOSED)
            break;
        if (rv != 0) {
            st_log(ST_LOG_WARN, "shard", "receive: %s", nng_strerror(rv));
            continue;
        }
        sa_handle(s, msg);
        nng_msg_free(msg);
    }
    return NULL;
}

/* sa_listen - the REP socket on cfg.listen; s->url gets the bound address. */
static st_err sa_listen(st_standalone *s)
{
    int rv;
    size_t max_frame;
    st_err e = st_step_max_frame(s->hidden, (uint32_t)s->cfg.max_tokens, &max_frame);
    if (e != ST_OK)
        return e;
    if ((rv = nng_rep0_open(&s->sock)) != 0)
        return st_err_nng(rv, "shard socket");
    s->sock_open = true;
    nng_socket_set_ms(s->sock, NNG_OPT_SENDTIMEO, SA_REPLY_TIMEOUT_MS);
    nng_socket_set_size(s->sock, NNG_OPT_RECVMAXSZ, max_frame);
    st_pipe_gate_cfg gc = st_pipe_gate_cfg_for("shard", max_frame, true); /* clients speak first */
    if ((e = st_pipe_gate_open(s->sock, &gc, &s->gate)) != ST_OK)
        return e;
    nng_listener l;
    if ((rv = nng_listener_create(&l, s->sock, s->cfg.listen)) != 0 ||
        (rv = nng_listener_set_bool(l, NNG_OPT_TCP_NODELAY, true)) != 0 ||
        (rv = nng_listener_start(l, 0)) != 0)
        return st_errorf(ST_ENNG, "--listen %s: %s", s->cfg.listen, nng_strerror(rv));
    /* tcp://, tcp4://, tcp6://: tcp:// with the bound port, and the
     * loopback host for a wildcard one (as the worker daemon announces);
     * any other scheme as written */
    int port = 0;
    st_hostport hp;
    if (st_tcp_any_split(s->cfg.listen, &hp) &&
        nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port) == 0) {
        const char *lo = st_host_any_loopback(hp.host, hp.host_len);
        if (!st_tcp_format(lo != NULL ? lo : hp.host, lo != NULL ? strlen(lo) : hp.host_len, port,
                           s->url, sizeof s->url))
            return st_errorf(ST_ERANGE, "--listen %s: the bound address is too long",
                             s->cfg.listen);
    } else if ((size_t)snprintf(s->url, sizeof s->url, "%s", s->cfg.listen) >= sizeof s->url) {
        return st_errorf(ST_ERANGE, "--listen %s: the address is too long", s->cfg.listen);
    }
    return ST_OK;
}

/* sa_load_stage - the layers, the engine and the sessions. */
static st_err sa_load_stage(st_standalone *s)
{
    st_standalone_cfg *c = &s->cfg;
    st_err e;
    if (c->first >= c->last)
        return st_errorf(ST_ERANGE, "--layers %lld:%lld is empty", (long long)c->first,
                         (long long)c->last);
    if ((e = st_model_open(c->model, c->first, c->last, &s->m)) != ST_OK)
        return st_errwrap(e, "%s", c->model);
    s->hp = st_model_hparams(s->m);
    s->model_id = st_model_id(s->m);
    s->ops = st_kernels_select(c->force_ref);
    if ((e = st_kv_dtype_from_name(c->cache_type, &s->kv_dtype)) ||
        (e = st_kv_dtype_check(s->kv_dtype, s->hp->head_dim)))
        return st_errwrap(e, "--cache-type");
    if ((e = st_pool_open(c->threads, 1, &s->pool)) ||
        (e = st_model_place(s->m, s->ops, s->pool)) ||
        (e = st_stage_ctx_open(s->m, c->max_tokens, s->pool, s->ops, &s->ctx)) ||
        (e = st_sessions_init(&s->sess, c->max_sessions)))
        return e;
    s->used_at = calloc(c->max_sessions, sizeof *s->used_at);
    return s->used_at ? ST_OK : st_errorf(ST_ENOMEM, "session table");
}

static st_err sa_load(st_standalone *s, const uint8_t *key)
{
    st_standalone_cfg *c = &s->cfg;
    st_err e;
    if (c->ends != NULL) {
        s->hp = st_ends_hparams(c->ends);
        s->model_id = st_ends_model_id(c->ends);
        s->ops = st_kernels_select(c->force_ref);
    } else if ((e = sa_load_stage(s)) != ST_OK) {
        return e;
    }
    if (c->n_ctx <= 0 || c->n_ctx > s->hp->n_ctx_train)
        c->n_ctx = s->hp->n_ctx_train;
    s->hidden = (uint32_t)s->hp->n_embd;
    uint64_t sender;
    randombytes_buf(&sender, sizeof sender);
    size_t n = (size_t)c->max_tokens * s->hidden;
    s->out_floats = c->ends != NULL && s->hp->n_vocab > s->hp->n_embd
                        ? (size_t)c->max_tokens * (size_t)s->hp->n_vocab
                        : n;
    if ((e = st_env_init_mode(&s->env, key, c->encrypt, sender | 1)) ||
        (e = st_wire_ctx_new(c->force_ref, &s->wctx)))
        return e;
    s->in = malloc(n * sizeof *s->in);
    s->out = malloc(s->out_floats * sizeof *s->out);
    s->rows = calloc(ST_SHARD_MAX_ROWS, sizeof *s->rows);
    s->brows = calloc(ST_SHARD_MAX_ROWS, sizeof *s->brows);
    if (!s->in || !s->out || !s->rows || !s->brows)
        return st_errorf(ST_ENOMEM, "shard buffers for %lld tokens", (long long)c->max_tokens);
    return ST_OK;
}

st_err st_standalone_open(const st_standalone_cfg *cfg, st_standalone **out)
{
    *out = NULL;
    st_standalone *s = calloc(1, sizeof *s);
    if (s == NULL)
        return st_errorf(ST_ENOMEM, "shard server");
    s->cfg = *cfg;
    uint8_t key[ST_KEY_BYTES];
    st_err e = ST_OK;
    if (cfg->key_file != NULL && (e = st_key_load(cfg->key_file, key)) != ST_OK)
        e = st_errwrap(e, "--cluster-key %s", cfg->key_file);
    if (e == ST_OK)
        e = sa_load(s, cfg->key_file != NULL ? key : NULL);
    sodium_memzero(key, sizeof key);
    if (e == ST_OK)
        e = sa_listen(s);
    if (e != ST_OK) {
        st_standalone_close(s);
        return e;
    }
    if (s->m != NULL)
        st_log(ST_LOG_INFO, "shard",
               "layers [%lld, %lld) of %lld, %zu weight bytes; %u sessions "
               "of %lld positions (%s KV cache, %zu bytes each), TTL %u s, %lld tokens per "
               "step; kernels %s",
               (long long)cfg->first, (long long)cfg->last, (long long)s->hp->n_layer,
               st_model_weight_bytes(s->m), cfg->max_sessions, (long long)s->cfg.n_ctx,
               st_dtype_info_of(s->kv_dtype)->name,
               st_kv_bytes(cfg->last - cfg->first, s->cfg.n_ctx, s->hp->kv_dim, s->kv_dtype),
               cfg->ttl_s, (long long)cfg->max_tokens, s->ops->name);
    *out = s;
    return ST_OK;
}

const char *st_standalone_url(const st_standalone *s) { return s->url; }

st_err st_standalone_start(st_standalone *s)
{
    int rv = pthread_create(&s->thread, NULL, sa_serve, s);
    if (rv != 0)
        return st_err_errno(rv, "shard serving thread");
    s->started = true;
    return ST_OK;
}

void st_standalone_close(st_standalone *s)
{
    if (s == NULL)
        return;
    if (s->sock_open)
        nng_close(s->sock);
    if (s->gate != NULL) { /* a shard server has no status: its counts go to the log */
        st_pipe_gate_counts gc = {0};
        st_pipe_gate_add_counts(s->gate, &gc);
        st_log(ST_LOG_INFO, "shard",
               "unauthenticated connections closed: over a cap %llu, for a newer one %llu, at "
               "the deadline %llu",
               (unsigned long long)gc.refused, (unsigned long long)gc.evicted,
               (unsigned long long)gc.expired);
    }
    st_pipe_gate_close(s->gate);
    if (s->started)
        pthread_join(s->thread, NULL);
    st_sessions_fini(&s->sess);
    st_stage_ctx_close(s->ctx);
    st_pool_close(s->pool);
    st_model_close(s->m);
    st_wire_ctx_free(s->wctx);
    st_env_fini(&s->env);
    free(s->used_at);
    free(s->in);
    free(s->out);
    free(s->rows);
    free(s->brows);
    free(s);
}
