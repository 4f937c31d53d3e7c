/* push_link.h - a PUSH socket pointed at one address, re-pointed by
 * replacing the socket, never by closing its dialer.
 *
 * Why a socket per address: libnng 1.5.2 (Debian 12's) can leave a closed
 * pipe on a PUSH socket's list of ready pipes when the pipe is closed while
 * it is still starting (our reading of the crash: nng #1653, fixed in nng
 * 1.6.0, describes this); the socket's next
 * send then removes that freed pipe from the list and the process dies in
 * nni_list_remove (libnng.so.1.5.2+0x1b9bb). Closing the dialer of a
 * socket that goes on sending is how a worker's data plane made that
 * happen: a stage swap re-points the links while a connection of the old
 * plan may be just starting (chaos-ci crashed a worker so about 2 runs in
 * 250). A socket closed whole is never sent on again, so st_push_link_point
 * closes the old socket and opens a new one; test_push_link shows the
 * difference (the old way crashes a process in seconds of churn).
 *
 * A link is owned by one thread (the worker's data thread), which does
 * every call on it; nothing here locks. */
#ifndef ST_WORKER_PUSH_LINK_H
#define ST_WORKER_PUSH_LINK_H

#include <nng/nng.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/base/err.h"

#define ST_PUSH_LINK_ADDR_MAX 256

typedef struct st_push_link {
    nng_socket s;     /* valid while open is true */
    bool open;        /* a socket exists (it may have no dialer) */
    bool dialing;     /* a dialer to addr was started */
    int32_t send_ms;  /* NNG_OPT_SENDTIMEO of each socket */
    int32_t send_buf; /* NNG_OPT_SENDBUF, in messages */
    char addr[ST_PUSH_LINK_ADDR_MAX];
} st_push_link;

/* st_push_link_open - a link without an address yet: one PUSH socket with
 * the send timeout and buffer given. ST_ENNG when NNG cannot open one. */
st_err st_push_link_open(st_push_link *l, int32_t send_ms, int32_t send_buf);

/* st_push_link_point - points l at addr: nothing if it already dials addr;
 * otherwise the current socket (its dialer, pipes and unsent messages) is
 * closed and a new one dials addr (reconnecting between reconnect_min_ms
 * and reconnect_max_ms). An empty addr leaves a socket without a dialer.
 * On an error (logged by the caller from the detail) the link has no
 * dialer: st_push_link_ready is false until a later point succeeds.
 * hello (taken; NULL: none) is queued first on a new dialer, so the
 * receiver's connection gate sees the connection authenticated at once
 * (common/net/pipe_gate.h, msg.h st_msg_link_hello); it is freed unsent when l
 * already dials addr or on an error. */
st_err st_push_link_point(st_push_link *l, const char *addr, int32_t reconnect_min_ms,
                          int32_t reconnect_max_ms, nng_msg *hello);

/* st_push_link_ready - a dialer to an address exists (sends may go out). */
bool st_push_link_ready(const st_push_link *l);

/* st_push_link_send - nng_sendmsg on the link's socket: 0 takes msg, an
 * NNG error leaves it to the caller. NNG_ECLOSED when the link has none. */
int st_push_link_send(st_push_link *l, nng_msg *msg);

/* st_push_link_close - closes the socket; the link may be opened again. */
void st_push_link_close(st_push_link *l);

#endif
