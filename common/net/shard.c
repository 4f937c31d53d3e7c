/* shard.c - shard server frames and a client connection (see shard.h).
 *
 * The connection waits for its reply on an aio; a pipe-removal callback
 * of the socket marks the connection lost and cancels the aio in flight.
 * Both sides of that race hold the connection's mutex: the caller records
 * its aio before starting it and checks the lost flag after, the callback
 * sets the flag and cancels whatever aio is recorded, so a loss is seen
 * whichever comes first. REQ's resend is off: a request is never sent
 * twice (a keyed server would refuse the second as a replay, and a step
 * is not idempotent for the caller's bookkeeping). */
#include "common/net/shard.h"

#include <nng/protocol/reqrep0/req.h>
#include <pthread.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire/pbuf_budget.h"

/* the receive limit until the hello reply gives the server's sizes */
#define SHARD_HELLO_MAX_FRAME ((size_t)1 << 20)

struct st_shard {
    nng_socket sock;
    bool open;
    nng_aio *aio;
    pthread_mutex_t mu;
    bool lost;      /* the pipe to the server closed */
    bool in_flight; /* aio is recorded for the callback to cancel */
    st_env env;
    st_wire_ctx *wctx;
    st_wire_dtype dtype;
    int timeout_ms;
    char addr[256];
    st_shard_info info;
    st_wire_row *rows; /* [1] */
};

st_err st_shard_frame(st_env *env, const ProtobufCMessage *meta, const st_wire_hdr *h,
                      const st_wire_row *rows, const float *hidden, const st_wire_opts *o,
                      st_wire_ctx *wctx, nng_msg **out)
{
    *out = NULL;
    size_t mlen = protobuf_c_message_get_packed_size(meta);
    if (mlen > ST_SHARD_META_MAX)
        return st_errorf(ST_ERANGE, "shard meta of %zu bytes (at most %zu)", mlen,
                         ST_SHARD_META_MAX);
    uint8_t *mb = malloc(mlen > 0 ? mlen : 1);
    if (mb == NULL)
        return st_errorf(ST_ENOMEM, "shard meta of %zu bytes", mlen);
    protobuf_c_message_pack(meta, mb);
    size_t bound = 0, len = 0;
    st_err e = ST_OK;
    if (h != NULL && (e = st_wire_encode_size(h, rows, o, &bound)) != ST_OK) {
        free(mb);
        return e;
    }
    st_step_out so;
    e = st_step_begin(env, mb, mlen, bound, &so);
    free(mb);
    if (e != ST_OK)
        return e;
    if (h != NULL &&
        (e = st_wire_encode_buf(h, rows, hidden, o, wctx, so.pkt, bound, &len, NULL)) != ST_OK) {
        st_step_abort(&so);
        return e;
    }
    return st_step_finish(env, &so, len, out);
}

st_err st_shard_parse(st_env *env, uint8_t *buf, size_t len, const ProtobufCMessageDescriptor *d,
                      ProtobufCMessage **meta, st_step_parts *parts, uint64_t *sender)
{
    *meta = NULL;
    st_err e = st_step_open(env, buf, len, parts, sender);
    if (e != ST_OK)
        return e;
    if (parts->hello) /* shard peers send none: an empty frame is malformed here */
        return st_errorf(ST_EFORMAT, "an empty %s frame from sender %016llx", d->name,
                         (unsigned long long)*sender);
    if (parts->meta_len > ST_SHARD_META_MAX)
        return st_errorf(ST_ERANGE, "%s of %zu bytes from sender %016llx (at most %zu)", d->name,
                         parts->meta_len, (unsigned long long)*sender, ST_SHARD_META_MAX);
    return st_pb_unpack(d, parts->meta, parts->meta_len, d->short_name, *sender, meta);
}

/* shard_pipe_gone - NNG's callback when a pipe of the socket closed. */
static void shard_pipe_gone(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    (void)p;
    (void)ev;
    st_shard *s = arg;
    pthread_mutex_lock(&s->mu);
    s->lost = true;
    if (s->in_flight)
        nng_aio_cancel(s->aio);
    pthread_mutex_unlock(&s->mu);
}

/* shard_await - runs aio's operation started by start(), cancelled when
 * the connection is (or gets) lost; the aio's result. */
static int shard_await(st_shard *s, void (*start)(nng_socket, nng_aio *))
{
    pthread_mutex_lock(&s->mu);
    bool lost = s->lost;
    s->in_flight = !lost;
    pthread_mutex_unlock(&s->mu);
    if (lost)
        return NNG_ECLOSED;
    nng_aio_set_timeout(s->aio, (nng_duration)s->timeout_ms);
    start(s->sock, s->aio);
    pthread_mutex_lock(&s->mu);
    if (s->lost)
        nng_aio_cancel(s->aio);
    pthread_mutex_unlock(&s->mu);
    nng_aio_wait(s->aio);
    pthread_mutex_lock(&s->mu);
    s->in_flight = false;
    lost = s->lost;
    pthread_mutex_unlock(&s->mu);
    int rv = nng_aio_result(s->aio);
    return rv == NNG_ECANCELED && lost ? NNG_ECLOSED : rv;
}

static void shard_start_send(nng_socket sock, nng_aio *aio) { nng_send_aio(sock, aio); }
static void shard_start_recv(nng_socket sock, nng_aio *aio) { nng_recv_aio(sock, aio); }

/* shard_rv - an NNG result as an st_err naming the server. */
static st_err shard_rv(const st_shard *s, int rv, const char *what)
{
    if (rv == NNG_ECLOSED || rv == NNG_ECONNREFUSED || rv == NNG_ECONNRESET)
        return st_errorf(ST_ECLOSED, "shard server %s: connection lost (%s)", s->addr, what);
    if (rv == NNG_ETIMEDOUT)
        return st_errorf(ST_ETIMEOUT, "shard server %s: no reply within %d ms (%s)", s->addr,
                         s->timeout_ms, what);
    return st_errorf(ST_ENNG, "shard server %s: %s: %s", s->addr, what, nng_strerror(rv));
}

/* shard_call - sends frame req (taken), receives and opens the reply;
 * *reply and *parts point into *held, which the caller frees. */
static st_err shard_call(st_shard *s, nng_msg *req, Strata__ShardReply **reply,
                         st_step_parts *parts, nng_msg **held)
{
    *held = NULL;
    *reply = NULL;
    nng_aio_set_msg(s->aio, req);
    int rv = shard_await(s, shard_start_send);
    if (rv != 0) {
        nng_msg_free(req);
        nng_aio_set_msg(s->aio, NULL);
        return shard_rv(s, rv, "sending");
    }
    if ((rv = shard_await(s, shard_start_recv)) != 0)
        return shard_rv(s, rv, "waiting for the reply");
    nng_msg *m = nng_aio_get_msg(s->aio);
    nng_aio_set_msg(s->aio, NULL);
    uint64_t sender;
    ProtobufCMessage *pm;
    st_err e = st_shard_parse(&s->env, nng_msg_body(m), nng_msg_len(m),
                              &strata__shard_reply__descriptor, &pm, parts, &sender);
    if (e != ST_OK) {
        nng_msg_free(m);
        return st_errwrap(e, "shard server %s: reply", s->addr);
    }
    Strata__ShardReply *r = (Strata__ShardReply *)pm;
    if (r->error != NULL) {
        st_err code = r->error->code > ST_OK && r->error->code < ST_ERR_COUNT
                          ? (st_err)r->error->code
                          : ST_EPROTO;
        e = st_errorf(code, "shard server %s: %s", s->addr, r->error->message);
        protobuf_c_message_free_unpacked(pm, NULL);
        nng_msg_free(m);
        return e;
    }
    *reply = r;
    *held = m;
    return ST_OK;
}

/* shard_request - a ShardRequest frame; NULL h: no packet. */
static st_err shard_request(st_shard *s, Strata__ShardRequest *rq, const st_wire_hdr *h,
                            const float *hidden, nng_msg **out)
{
    st_wire_opts o = {.dtype = s->dtype};
    return st_shard_frame(&s->env, &rq->base, h, s->rows, hidden, &o, s->wctx, out);
}

/* A reply being read: the ShardReply and the packet point into held. */
typedef struct shard_reply {
    Strata__ShardReply *r;
    st_step_parts parts;
    nng_msg *held;
} shard_reply;

static void shard_reply_free(shard_reply *rp)
{
    protobuf_c_message_free_unpacked(&rp->r->base, NULL);
    nng_msg_free(rp->held);
}

/* shard_roundtrip - rq (and the packet of h and in, when h is not NULL)
 * there and its reply back into *rp (freed with shard_reply_free). */
static st_err shard_roundtrip(st_shard *s, Strata__ShardRequest *rq, const st_wire_hdr *h,
                              const float *in, shard_reply *rp)
{
    nng_msg *req;
    st_err e = shard_request(s, rq, h, in, &req);
    return e != ST_OK ? e : shard_call(s, req, &rp->r, &rp->parts, &rp->held);
}

static st_err shard_hello(st_shard *s)
{
    Strata__ShardHello hi = STRATA__SHARD_HELLO__INIT;
    hi.dtype = (uint32_t)s->dtype;
    Strata__ShardRequest rq = STRATA__SHARD_REQUEST__INIT;
    rq.req_case = STRATA__SHARD_REQUEST__REQ_HELLO;
    rq.hello = &hi;
    shard_reply rp;
    st_err e = shard_roundtrip(s, &rq, NULL, NULL, &rp);
    if (e != ST_OK)
        return e;
    const Strata__ShardInfo *in = rp.r->info;
    if (in == NULL || in->model_id.len != ST_WIRE_PLAN_HASH_SIZE || in->hidden == 0 ||
        in->hidden > ST_WIRE_MAX_HIDDEN || in->first > in->last || in->last > in->n_layer ||
        in->max_tokens == 0 || in->n_ctx == 0 ||
        (in->ends && (in->n_vocab == 0 || in->n_vocab > ST_WIRE_MAX_HIDDEN))) {
        e = st_errorf(ST_EPROTO, "shard server %s: a malformed hello reply", s->addr);
    } else {
        st_shard_info *i = &s->info;
        i->first = in->first;
        i->last = in->last;
        i->n_layer = in->n_layer;
        i->hidden = in->hidden;
        memcpy(i->model_id, in->model_id.data, ST_WIRE_PLAN_HASH_SIZE);
        i->dtype_mask = in->dtype_mask;
        i->max_tokens = in->max_tokens;
        i->n_ctx = in->n_ctx;
        i->max_sessions = in->max_sessions;
        i->ttl_s = in->ttl_s;
        i->ends = in->ends;
        i->n_vocab = in->n_vocab;
    }
    shard_reply_free(&rp);
    return e;
}

st_err st_shard_connect(const char *addr, const uint8_t *key, bool encrypt, st_wire_dtype dtype,
                        int timeout_ms, st_shard **out)
{
    *out = NULL;
    if (strlen(addr) >= sizeof((st_shard *)0)->addr)
        return st_errorf(ST_EINVAL, "shard address '%.40s...' is too long", addr);
    st_shard *s = calloc(1, sizeof *s);
    if (s == NULL || (s->rows = calloc(1, sizeof *s->rows)) == NULL) {
        free(s);
        return st_errorf(ST_ENOMEM, "shard connection");
    }
    pthread_mutex_init(&s->mu, NULL);
    snprintf(s->addr, sizeof s->addr, "%s", addr);
    s->dtype = dtype;
    s->timeout_ms = timeout_ms;
    uint64_t sender;
    randombytes_buf(&sender, sizeof sender);
    st_err e = st_env_init_mode(&s->env, key, encrypt, sender | 1);
    int rv;
    if (e == ST_OK && (e = st_wire_ctx_new(0, &s->wctx)) == ST_OK) {
        if ((rv = nng_aio_alloc(&s->aio, NULL, NULL)) != 0 || (rv = nng_req0_open(&s->sock)) != 0) {
            e = st_err_nng(rv, "shard client socket");
        } else {
            s->open = true;
            nng_socket_set_ms(s->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
            nng_socket_set_size(s->sock, NNG_OPT_RECVMAXSZ, SHARD_HELLO_MAX_FRAME);
            nng_pipe_notify(s->sock, NNG_PIPE_EV_REM_POST, shard_pipe_gone, s);
            if ((rv = nng_dial(s->sock, addr, NULL, 0)) != 0)
                e = st_errorf(rv == NNG_ECONNREFUSED ? ST_ECLOSED : ST_ENNG, "shard server %s: %s",
                              addr, nng_strerror(rv));
        }
    }
    if (e == ST_OK)
        e = shard_hello(s);
    size_t max_frame = 0; /* the replies of steps: the server's largest */
    const uint32_t widest = s->info.ends && s->info.n_vocab > s->info.hidden ? s->info.n_vocab
                                                                             : s->info.hidden;
    if (e == ST_OK && (e = st_step_max_frame(widest, s->info.max_tokens, &max_frame)) == ST_OK)
        nng_socket_set_size(s->sock, NNG_OPT_RECVMAXSZ, max_frame);
    if (e == ST_OK && (s->info.dtype_mask & (1u << dtype)) == 0)
        e = st_errorf(ST_ETYPE, "shard server %s does not accept %s packets", addr,
                      st_wire_dtype_name(dtype));
    if (e != ST_OK) {
        st_shard_close(s);
        return e;
    }
    *out = s;
    return ST_OK;
}

const st_shard_info *st_shard_info_of(const st_shard *s) { return &s->info; }
const char *st_shard_addr(const st_shard *s) { return s->addr; }

/* shard_exchange - sends rq (with the packet of h and in when h is not
 * NULL) and decodes the reply packet: one row (session, pos, n_tok) of
 * out_hidden floats per token, at stage out_stage, into out. */
static st_err shard_exchange(st_shard *s, Strata__ShardRequest *rq, const st_wire_hdr *h,
                             const float *in, uint16_t out_stage, uint32_t out_hidden,
                             uint64_t session, int64_t pos, int64_t n_tok, float *out)
{
    shard_reply rp;
    st_err e = shard_roundtrip(s, rq, h, in, &rp);
    if (e != ST_OK)
        return e;
    st_wire_expect x = {.plan_hash = s->info.model_id,
                        .stage = out_stage,
                        .hidden = out_hidden,
                        .max_tokens = (uint32_t)n_tok,
                        .dtype_mask = 1u << s->dtype};
    st_wire_hdr rh;
    st_wire_row rr;
    e = st_wire_decode(s->wctx, rp.parts.pkt, rp.parts.pkt_len, &x, &rh, &rr, 1, out,
                       (size_t)n_tok * out_hidden);
    if (e == ST_OK && (rh.n_rows != 1 || rr.session_id != session || rr.pos0 != (uint32_t)pos ||
                       rr.n_tokens != (uint32_t)n_tok))
        e = st_errorf(ST_EPROTO, "shard server %s answered for other rows", s->addr);
    shard_reply_free(&rp);
    return e == ST_OK ? ST_OK : st_errwrap(e, "shard server %s: reply packet", s->addr);
}

/* shard_hdr - the header of a request packet of one row to stage. */
static void shard_hdr(st_shard *s, uint16_t stage, uint32_t hidden, uint64_t session, int64_t pos,
                      int64_t n_tok, st_wire_hdr *h)
{
    memset(h, 0, sizeof *h);
    memcpy(h->plan_hash, s->info.model_id, ST_WIRE_PLAN_HASH_SIZE);
    h->stage = stage;
    h->n_rows = 1;
    h->hidden = hidden;
    s->rows[0] = (st_wire_row){.session_id = session,
                               .pos0 = (uint32_t)pos,
                               .n_tokens = (uint32_t)n_tok};
}

/* shard_fits - n_tok tokens at pos fit one request to s. */
static st_err shard_fits(const st_shard *s, int64_t pos, int64_t n_tok)
{
    const st_shard_info *i = &s->info;
    if (n_tok < 1 || n_tok > (int64_t)i->max_tokens || pos < 0 || pos + n_tok > (int64_t)i->n_ctx)
        return st_errorf(ST_ERANGE,
                         "shard server %s: %lld tokens at position %lld (at most %u "
                         "tokens, a context of %u)",
                         s->addr, (long long)n_tok, (long long)pos, i->max_tokens, i->n_ctx);
    return ST_OK;
}

st_err st_shard_step(st_shard *s, uint64_t session, int64_t pos, int64_t n_tok, const float *in,
                     float *out)
{
    st_err e = shard_fits(s, pos, n_tok);
    if (e != ST_OK)
        return e;
    Strata__ShardStep st = STRATA__SHARD_STEP__INIT;
    st.reply_dtype = (uint32_t)s->dtype;
    Strata__ShardRequest rq = STRATA__SHARD_REQUEST__INIT;
    rq.req_case = STRATA__SHARD_REQUEST__REQ_STEP;
    rq.step = &st;
    st_wire_hdr h;
    shard_hdr(s, (uint16_t)s->info.first, s->info.hidden, session, pos, n_tok, &h);
    return shard_exchange(s, &rq, &h, in, (uint16_t)s->info.last, s->info.hidden, session, pos,
                          n_tok, out);
}

/* shard_ends_fits - s is an embedding service and n rows fit a request. */
static st_err shard_ends_fits(const st_shard *s, int64_t n)
{
    if (!s->info.ends)
        return st_errorf(ST_EINVAL, "%s is not an embedding service", s->addr);
    return shard_fits(s, 0, n);
}

st_err st_shard_embed(st_shard *s, const int32_t *ids, int64_t n, float *out)
{
    st_err e = shard_ends_fits(s, n);
    if (e != ST_OK)
        return e;
    Strata__ShardEmbed em = STRATA__SHARD_EMBED__INIT;
    em.token_ids = (int32_t *)ids;
    em.n_token_ids = (size_t)n;
    Strata__ShardRequest rq = STRATA__SHARD_REQUEST__INIT;
    rq.req_case = STRATA__SHARD_REQUEST__REQ_EMBED;
    rq.embed = &em;
    return shard_exchange(s, &rq, NULL, NULL, 0, s->info.hidden, 0, 0, n, out);
}

st_err st_shard_logits(st_shard *s, const float *hidden, int64_t n, float *out)
{
    st_err e = shard_ends_fits(s, n);
    if (e != ST_OK)
        return e;
    Strata__ShardLogits lg = STRATA__SHARD_LOGITS__INIT;
    Strata__ShardRequest rq = STRATA__SHARD_REQUEST__INIT;
    rq.req_case = STRATA__SHARD_REQUEST__REQ_LOGITS;
    rq.logits = &lg;
    st_wire_hdr h;
    const uint16_t head = (uint16_t)s->info.n_layer;
    shard_hdr(s, head, s->info.hidden, 0, 0, n, &h);
    return shard_exchange(s, &rq, &h, hidden, head, s->info.n_vocab, 0, 0, n, out);
}

st_err st_shard_end(st_shard *s, uint64_t session)
{
    Strata__ShardEnd en = STRATA__SHARD_END__INIT;
    en.session_id = session;
    Strata__ShardRequest rq = STRATA__SHARD_REQUEST__INIT;
    rq.req_case = STRATA__SHARD_REQUEST__REQ_END;
    rq.end = &en;
    shard_reply rp;
    st_err e = shard_roundtrip(s, &rq, NULL, NULL, &rp);
    if (e == ST_OK)
        shard_reply_free(&rp);
    return e;
}

void st_shard_close(st_shard *s)
{
    if (s == NULL)
        return;
    if (s->open)
        nng_close(s->sock);
    if (s->aio != NULL) {
        nng_msg *m = nng_aio_get_msg(s->aio);
        if (m != NULL)
            nng_msg_free(m);
        nng_aio_free(s->aio);
    }
    st_wire_ctx_free(s->wctx);
    st_env_fini(&s->env);
    pthread_mutex_destroy(&s->mu);
    free(s->rows);
    free(s);
}
