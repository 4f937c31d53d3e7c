/* dm_rep.h - the worker daemon's control server (dm_rep.c; its design is
 * the file comment there): the REP socket the coordinator sends Prepare,
 * Commit and EndSessions to and other workers send link probes to, its
 * replies, and what it counts. Part of the daemon (dm_internal.h).
 *
 * State. dm_server is changed only by dm_rep.c. It is opened by
 * dm_rep_open while st_daemon_open runs and closed by dm_rep_close after
 * the control thread ended; in between the control thread owns it (the
 * aio's callback only raises st_worker_shared.ev_rep), so it takes no
 * lock. Invariants: one request is answered at a time; a receive is armed
 * except while one is handled, after the socket closed, or while
 * `waiting` (a Prepare's reply waits for its loader, dm_plan.c:
 * dm_rep_hold, then dm_rep_resume after the reply); the counters only
 * grow. */
#ifndef ST_WORKER_DM_REP_H
#define ST_WORKER_DM_REP_H

#include <nng/nng.h>

#include "common/wire/envelope.h"
#include "common/net/pipe_gate.h"
#include "strata.pb-c.h"
#include "worker/daemon/daemon.h"

#define DM_REPLY_TIMEOUT_MS 1000

typedef struct dm_server {
    nng_socket sock;
    bool open;
    st_pipe_gate *gate; /* the socket's connections; freed after it */
    nng_aio *aio;
    st_env env;            /* sender id: the daemon's + 2 (dm_internal.h) */
    bool waiting;          /* a reply waits for the loader: no receive armed */
    uint64_t bad;          /* malformed control messages */
    uint64_t refused;      /* control requests refused (dm_ctl_allowed, Prepare, Commit) */
    uint64_t reply_failed; /* replies not packed or not sent */
} dm_server;

/* dm_rep_open - the control REP on tcp://host:want_port (0: any), its
 * envelope (the daemon's key and sender + 2) and its aio; *port gets the
 * bound port. */
st_err dm_rep_open(st_daemon *d, const char *host, int want_port, int *port);

/* dm_rep_start - arms the first receive (the control thread, at its
 * start). */
void dm_rep_start(st_daemon *d);

/* dm_rep_close - closes the socket, its gate, its aio and its envelope;
 * after the control thread ended. Safe on a server never opened. */
void dm_rep_close(st_daemon *d);

/* dm_rep_hold - the request being handled is answered later (a Prepare
 * whose stage loads): no receive is armed until dm_rep_resume. */
void dm_rep_hold(st_daemon *d);

/* dm_rep_resume - after the held request's reply: receives again. */
void dm_rep_resume(st_daemon *d);

/* dm_rep_sender - the sender id of the replies, which the coordinator
 * binds its control requests to (Capability.ctl_sender). */
uint64_t dm_rep_sender(const st_daemon *d);

/* dm_rep_counters - adds to *c the server's failed authentications, bad
 * and refused messages and reply failures, and to *g its socket's
 * connection counts. */
void dm_rep_counters(const st_daemon *d, Strata__Counters *c, st_pipe_gate_counts *g);

/* dm_on_rep - handles a completed receive on the control REP. */
void dm_on_rep(st_daemon *d);

/* dm_refused - counts a refused control request and answers it with an
 * Error of code and msg, also logged. */
void dm_refused(st_daemon *d, st_err code, const char *msg);

/* dm_count_refused - counts a refused control request answered otherwise
 * (a Prepare's Refuse). */
void dm_count_refused(st_daemon *d);

/* Replies to the request being handled; a failed send is logged. dm_reply
 * sends m; dm_reply_error an Error of code and msg; dm_reply_ack an Ack;
 * dm_refuse a Refuse of the plan of epoch for reason (logged too);
 * dm_ready a Ready of epoch with the resident bytes. */
void dm_reply(st_daemon *d, const Strata__Msg *m);
void dm_reply_error(st_daemon *d, st_err code, const char *msg);
void dm_reply_ack(st_daemon *d);
void dm_refuse(st_daemon *d, uint64_t epoch, const char *reason);
void dm_ready(st_daemon *d, uint64_t epoch, uint64_t resident);

#endif
