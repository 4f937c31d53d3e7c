/* gateway.h - the in-process HTTP gateway attached to the coordinator's
 * event loop (gateway.c states the contract: who owns a request, which
 * thread touches what, how a token reaches the HTTP thread, client
 * disconnect, the coordinator's status and shutdown).
 *
 * The HTTP side (http_gen.c, on libmicrohttpd's threads) calls
 * st_gw_submit and st_gw_cancel, and reads the coordinator's tokenizer and
 * model file through st_gw_tokenizer and st_gw_gguf; http.c attaches the
 * sink of the coordinator's status (st_gw_status_attach). The
 * coordinator's side (coord_gw_*, on the coordinator's main thread only)
 * takes what was submitted, runs it in the scheduler, pushes each
 * request's progress to its ticket's sink, and publishes its status to
 * the status sink every ST_GW_STATUS_MS. */
#ifndef ST_COORD_GATEWAY_H
#define ST_COORD_GATEWAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/model/gguf.h"
#include "common/text/sampling.h"
#include "common/text/tokenizer.h"
#include "strata.pb-c.h"

/* How often the coordinator publishes its status to the gateway. */
#define ST_GW_STATUS_MS 500u

typedef struct st_gw st_gw;               /* the attachment: one per coordinator */
typedef struct st_gw_ticket st_gw_ticket; /* one submitted generation */

/* What a generation asks; st_gw_submit copies all of it. */
typedef struct st_gw_req {
    const int32_t *prompt;
    size_t n_prompt;
    uint32_t max_tokens;
    st_sampler_params sp; /* validated by the caller; the coordinator checks again */
    char *const *stop;
    size_t n_stop;
    uint64_t session_id; /* the coordinator session (0: a fresh one) */
} st_gw_req;

/* What the coordinator tells a sink. Pointers are valid during the call
 * only. An update never repeats an id: each carries the ids produced
 * since the previous one (n_ids may be 0: nothing new). */
typedef struct st_gw_update {
    bool accepted;      /* the scheduler took the request (set in the first update) */
    uint32_t n_prompt;  /* with accepted: the prompt's ids */
    uint64_t submit_ns; /* when it was accepted (st_now_ns's clock) */
    const char *text;   /* the new text, complete UTF-8 characters (and the flush at the end) */
    size_t text_len;
    uint32_t n_ids;           /* ids new in this update */
    const uint64_t *times_ns; /* [n_ids]: when each was produced */
    bool done;                /* the last update: the request ended, or the attachment ended it */
    const char *finish;       /* with done: the scheduler's reason ("length", "eos", "stop",
                                 "error", "cancelled"); NULL: the attachment refused the request
                                 or cut it off (shutdown), err says why */
    st_err err;               /* with done: ST_OK, or why it failed or was refused */
    const char *err_msg;      /* with err: the coordinator's message */
} st_gw_update;

/* The sink of a ticket, called on the coordinator's thread only, never
 * with a coordinator lock held. deliver returns the instant (st_now_ns)
 * by which it wants to be called again even if nothing happened (0:
 * only when something happens): the gateway's SSE keep-alive. release is
 * the last call: the coordinator forgets the ticket (freed after it
 * returns), so the sink must drop its pointer to the ticket there. */
typedef struct st_gw_sink {
    uint64_t (*deliver)(void *arg, const st_gw_update *u);
    void (*release)(void *arg);
    void *arg;
} st_gw_sink;

/* The sink of the coordinator's status, called on the coordinator's
 * thread only, never with a coordinator lock held: publish takes s (free
 * it with strata__status_reply__free_unpacked(s, NULL)), a copy of the
 * StatusReply a control client of role MEMBER gets (api_status.c); s is
 * NULL when the coordinator has no status to give (out of memory), and
 * once more, last, when its loop ended. */
typedef struct st_gw_status_sink {
    void (*publish)(void *arg, Strata__StatusReply *s);
    void *arg;
} st_gw_status_sink;

/* ---- the HTTP side (any thread) ---- */

/* st_gw_submit - queues q for the coordinator, whose progress goes to
 * sink from then on; *out is the ticket until sink.release. ST_ECLOSED
 * when the coordinator's loop has ended (then the sink is never called),
 * ST_ENOMEM. */
st_err st_gw_submit(st_gw *g, const st_gw_req *q, st_gw_sink sink, st_gw_ticket **out);

/* st_gw_cancel - the ticket's HTTP client went away: the coordinator
 * cancels its request at its next turn and releases the ticket without
 * another deliver. Only before the sink's release (the caller holds the
 * lock its release takes). */
void st_gw_cancel(st_gw *g, st_gw_ticket *t);

/* st_gw_tokenizer / st_gw_gguf - the coordinator's tokenizer (NULL when
 * the model has none usable) and model file: immutable, shared by
 * threads, valid until the coordinator closes. */
const st_tokenizer *st_gw_tokenizer(const st_gw *g);
st_gguf *st_gw_gguf(const st_gw *g);

/* st_gw_status_attach - sink hears the coordinator's status from the
 * loop's first turn (then every ST_GW_STATUS_MS) until its last publish,
 * when the loop ended. At most once, on the coordinator's thread before
 * st_coord_run (st_http_open's). */
void st_gw_status_attach(st_gw *g, st_gw_status_sink sink);

/* ---- the coordinator's side (its main thread only) ---- */

struct st_coord;
struct st_cq;

/* coord_gw_open - the attachment of coordinator c, whose owner sleeps on
 * q (woken by submits and cancels); tok may be NULL. */
st_err coord_gw_open(struct st_cq *q, const st_tokenizer *tok, st_gguf *gguf, st_gw **out);

/* coord_gw_take - submits what the gateway queued (answering refusals at
 * once) and cancels the tickets whose client went away. Each loop turn,
 * before the pump. */
void coord_gw_take(struct st_coord *c, uint64_t now_ns);

/* coord_gw_push - delivers every attached request's new ids and text,
 * its end (then releases its ticket), and the keep-alives due; touches
 * the live ones (an attached request has a client). Each loop turn. */
void coord_gw_push(struct st_coord *c, uint64_t now_ns);

/* coord_gw_status - publishes the coordinator's status to the status
 * sink, if one is attached and ST_GW_STATUS_MS passed since the last
 * publish (at once the first time). Each loop turn. */
void coord_gw_status(struct st_coord *c, uint64_t now_ns);

/* coord_gw_stop - the loop ended: every ticket (queued or attached) gets
 * a last update, done with ST_ECLOSED "the coordinator is shutting
 * down", and is released; later submits are refused; the status sink
 * hears its last publish (NULL) and is detached. Idempotent. */
void coord_gw_stop(struct st_coord *c);

/* coord_gw_close - frees g after coord_gw_stop; NULL is a no-op. */
void coord_gw_close(st_gw *g);

#endif
