/* net.h - the coordinator's NNG plumbing: every socket it owns, and every
 * asynchronous operation on them, turned into events on one st_cq.
 *
 * - control: a REP socket listening on --listen, served by a pool of
 *   nng_ctx slots. A slot receives one request, posts ST_CQ_CTL and then
 *   waits until the main thread answers through st_net_reply (at once, or
 *   later for a parked long poll); the send's completion re-arms the
 *   slot's receive inside the callback (that touches only the slot).
 * - results: a PULL socket; one receive at a time, re-armed by the main
 *   thread after it consumed the ST_CQ_RESULT event.
 * - peers: per worker a REQ socket dialing its control address (RPC:
 *   Prepare, Commit, EndSessions), and one PUSH socket dialing stage 0's
 *   data address (STEP frames). Each outgoing message is an st_net_op with
 *   its own context and aio, so several can be outstanding; its end
 *   (reply, error or timeout) posts ST_CQ_OP_DONE.
 *
 * Every TCP endpoint gets TCP_NODELAY; REQ resends are disabled (a resent
 * frame would be refused as a replay under a cluster key). */
#ifndef ST_COORD_NET_H
#define ST_COORD_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/cq.h"
#include "common/base/err.h"
#include "common/net/pipe_gate.h"

#define ST_NET_ADDR_MAX 256
#define ST_NET_MAX_SLOTS 1024
/* The control socket's frame limit on TCP (a listener of another
 * transport keeps ST_MSG_CONTROL_MAX_FRAME): a
 * Generate of some 300k prompt ids, heartbeats, joins and admin requests
 * fit; a stranger's partial frame costs at most this (common/net/pipe_gate.h:
 * the control socket evicts an unauthenticated connection younger than a
 * second only beyond 256 of them, its max_new, because clients connect in
 * bursts and a request waiting for a free slot leaves its connection
 * unjudged). */
#define ST_NET_CTL_TCP_MAX_FRAME ((size_t)1 << 20)

/* The kinds of the events the sockets post (st_cq_event.kind; the queue
 * and the rule it serves: common/base/cq.h). */
typedef enum st_net_event {
    ST_CQ_CTL = 1,     /* a request arrived on REP context `slot` (msg set) */
    ST_CQ_RESULT = 2,  /* a frame arrived on the results PULL socket (msg set) */
    ST_CQ_OP_DONE = 3, /* an outgoing operation (RPC call or step send) ended: op */
    ST_CQ_I8GATE = 4,  /* the i8 accuracy gate's thread ended: op (coordinator/cluster/i8gate.h) */
    ST_CQ_GATEWAY = 5, /* the HTTP gateway submitted or cancelled (coordinator/http/gateway.h) */
} st_net_event;

typedef struct st_net st_net;
typedef struct st_peer st_peer;
typedef struct st_net_op st_net_op;

/* What an outgoing operation was for; returned with its completion. */
typedef enum st_op_what {
    ST_OP_PREPARE = 1,
    ST_OP_COMMIT = 2,
    ST_OP_END_SESSIONS = 3,
    ST_OP_STEP = 4,
} st_op_what;

typedef struct st_op_tag {
    st_op_what what;
    uint64_t worker_id;
    uint64_t epoch;
    uint64_t batch_id;
    uint64_t req_seq; /* envelope seq of the request: its reply must answer it */
} st_op_tag;

/* st_net_open - opens the control REP socket on listen_url with n_slots
 * contexts (1..ST_NET_MAX_SLOTS) and the results PULL socket on
 * results_url (NULL: derived from listen_url, port 0 on the same host),
 * and starts receiving. The results socket accepts frames up to max_frame
 * bytes (step results with logits), the control socket up to
 * ST_NET_CTL_TCP_MAX_FRAME on TCP and ST_MSG_CONTROL_MAX_FRAME (msg.h)
 * on a listen_url that is not TCP: NNG refuses a longer frame from its
 * length prefix, before allocating it.
 * Events go to q, which must outlive the st_net. */
st_err st_net_open(st_cq *q, const char *listen_url, const char *results_url, uint32_t n_slots,
                   size_t max_frame, st_net **out);

/* st_net_close - closes every socket, stops and frees every aio (waiting
 * for running callbacks); NULL is a no-op. Pending events stay in q. */
void st_net_close(st_net *n);

/* st_net_ctl_addr - the bound control address ("tcp://HOST:PORT"). */
const char *st_net_ctl_addr(const st_net *n);

/* st_net_results_addr - the bound results address. */
const char *st_net_results_addr(const st_net *n);

/* st_net_n_slots - the number of REP contexts. */
uint32_t st_net_n_slots(const st_net *n);

/* Connections (common/net/pipe_gate.h): both sockets cap their connections
 * and those not yet authenticated; the control socket closes one that sent
 * no authenticated frame within ST_PIPE_GATE_UNPROVEN_MS. A frame's
 * connection is PENDING from its arrival (the callbacks) until the loop
 * judges it. */
/* st_net_judged - msg, received as event `which` (ST_CQ_CTL or
 * ST_CQ_RESULT), passed authentication (authentic: its connection is
 * proven) or did not (it becomes FAILED unless proven). */
void st_net_judged(st_net *n, st_net_event which, const nng_msg *msg, bool authentic);
/* st_net_gate_counts - adds both sockets' connection counts to *sum. */
void st_net_gate_counts(st_net *n, st_pipe_gate_counts *sum);

/* st_net_reply - sends msg (taken) as the answer of slot's pending
 * request; the slot then receives again. */
void st_net_reply(st_net *n, uint32_t slot, nng_msg *msg);

/* st_net_drop - abandons slot's pending request without an answer (its
 * client times out) and receives again: for a reply that could not be
 * packed, so the slot is never left busy. Counted. */
void st_net_drop(st_net *n, uint32_t slot);

/* Slots and connections (issue 12, finding 6: clients must not starve
 * heartbeats of slots). A slot is held from the request it received until
 * its answer left or was dropped; a stuck send (a client that does not
 * read) holds it for up to the reply timeout. */
/* st_net_slots_idle - slots waiting for a request now. */
uint32_t st_net_slots_idle(const st_net *n);
/* st_net_pipe_stuck - slots whose answer to the connection slot's request
 * came on has been leaving for more than age_ns (its reader does not read);
 * slot itself counts when its own answer is one of them. */
uint32_t st_net_pipe_stuck(const st_net *n, uint32_t slot, uint64_t age_ns);
/* st_net_close_pipe - closes the connection slot's request came on (the
 * answers pending on it fail, freeing their slots). */
void st_net_close_pipe(st_net *n, uint32_t slot);
/* st_net_slot_pipe - the connection slot's request came on. */
uint32_t st_net_slot_pipe(const st_net *n, uint32_t slot);
/* st_net_slot_sending_ns - when slot's answer began leaving, 0 when it is
 * not leaving now. */
uint64_t st_net_slot_sending_ns(const st_net *n, uint32_t slot);

/* st_net_reply_failures - replies dropped (st_net_drop) or whose send
 * failed, since st_net_open; the slot received again after each. */
uint64_t st_net_reply_failures(st_net *n);

/* st_net_results_rearm - starts the next receive on the results socket. */
void st_net_results_rearm(st_net *n);

/* st_peer_open_req - a REQ socket dialing url in the background (a peer
 * that is not up yet is retried by NNG). */
st_err st_peer_open_req(const char *url, size_t max_frame, st_peer **out);

/* st_peer_open_push - a PUSH socket dialing url in the background, with
 * hello (taken; NULL: none) queued as its first frame (msg.h
 * st_msg_link_hello: the receiver's connection gate sees the connection
 * authenticated before the first batch). */
st_err st_peer_open_push(const char *url, nng_msg *hello, st_peer **out);

/* Peers belong to the thread that owns the coordinator's loop: it alone
 * opens, starts operations on, cancels and closes them, and finishes their
 * operations (st_net_op_finish), so a peer's list of operations out needs
 * no lock. The callbacks on NNG's threads touch only their own op.
 *
 * Closing a REQ peer while a worker's reply is arriving on it can leave
 * NNG 1.5.2's close waiting forever, and with it every later close in the
 * process (nanomsg/nng#1543; common/base/exit_guard.h). So a peer that may
 * still answer (a worker that left, or was declared lost) is not closed at
 * once: st_peer_cancel ends its operations now, and its owner closes it
 * later (the coordinator: COORD_PEER_LINGER_NS after the worker went), when
 * any reply in flight has landed and been dropped. */

/* st_peer_cancel - ends every operation out on p at once: each posts its
 * ST_CQ_OP_DONE with an error (a REQ operation's context is closed, so a
 * reply arriving later finds nobody waiting and NNG drops it; a PUSH
 * operation's send is canceled). The socket and its connection stay open.
 * NULL is a no-op. */
void st_peer_cancel(st_peer *p);

/* st_peer_close - closes the socket: operations out end with NNG_ECLOSED
 * events (they stay valid until st_net_op_finish). NULL is a no-op. */
void st_peer_close(st_peer *p);

/* st_peer_ops - the operations started on p and not finished yet. */
size_t st_peer_ops(const st_peer *p);

/* st_peer_url - the address the peer dials. */
const char *st_peer_url(const st_peer *p);

/* st_peer_start - sends msg (taken, also on failure) on p: on a REQ peer
 * the reply is awaited too; timeout_ms bounds the whole exchange. The end
 * is posted to q as ST_CQ_OP_DONE carrying the op, whose tag is a copy of
 * *tag. */
st_err st_peer_start(st_peer *p, st_cq *q, nng_msg *msg, int timeout_ms, const st_op_tag *tag);

/* st_net_op_finish - reads an ended op's tag and frees the op (call once,
 * on the main thread, after its ST_CQ_OP_DONE event); its peer, if still
 * open, no longer counts it. */
void st_net_op_finish(st_net_op *op, st_op_tag *tag);

#endif
