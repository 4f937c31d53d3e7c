/* client.h - a client of a coordinator's control socket (the CLI's calls
 * and the HTTP gateway's, coordinator/http/http.c): one REQ socket dialing the
 * coordinator, its own envelope state (sender id random per client, the
 * cluster key when the cluster has one, sealing with --encrypt), and one
 * request/reply exchange at a time, blocking or asynchronous.
 *
 * One exchange at a time is what makes a keyed client correct: the
 * coordinator refuses a frame whose sequence number is not above the last
 * one it accepted from the sender (envelope.h), so two exchanges of one
 * sender in flight at once could arrive out of order and be refused as a
 * replay, and their replies could be opened out of order here. A caller
 * that wants N exchanges in flight opens N clients (the gateway's lanes).
 *
 * An Error reply is returned as its code with its message as the detail,
 * as st_msg_call does; a code outside st_err is ST_EPROTO.
 *
 * Keyed, an exchange that would go unbound (st_env_unbound: the client's
 * first, or the first after one went unanswered) is a Hello and its Ack
 * first, then the request bound to the coordinator that answered, both
 * within the exchange's timeout (a keyed coordinator takes no other
 * request unbound: docs/security.md, "Replay"). */
#ifndef ST_CLIENT_H
#define ST_CLIENT_H

#include <stdbool.h>
#include <stdint.h>

#include "common/wire/envelope.h"
#include "common/base/err.h"
#include "strata.pb-c.h"

/* The largest reply a client accepts (a Status of a big cluster, logits). */
#define ST_CLIENT_MAX_FRAME ((size_t)64 << 20)

typedef struct st_client st_client;

/* st_client_done - the end of an asynchronous exchange, called once on an
 * NNG thread: e ST_OK with reply (the caller's, st_msg_free), or an error
 * (detail set on this thread) with reply NULL. It may start the client's
 * next exchange; it must not close the client. */
typedef void (*st_client_done)(void *arg, st_err e, Strata__Msg *reply);

/* st_client_open - a client dialing addr (tcp://, ipc:// or inproc://;
 * NNG retries a coordinator that is not up yet): key NULL for an open
 * cluster, else the 32-byte cluster key (copied); encrypt seals every
 * frame (needs key). ST_ENNG naming addr, ST_EINVAL, ST_ENOMEM. */
st_err st_client_open(const char *addr, const uint8_t *key, bool encrypt, st_client **out);

/* st_client_close - closes the socket (an exchange in flight ends with
 * ST_ENNG: its callback runs before this returns) and frees; NULL is a
 * no-op. */
void st_client_close(st_client *c);

/* st_client_call - one blocking exchange: sends m, waits up to timeout_ms
 * for the reply (*reply NULL on error). Not while an asynchronous exchange
 * of c is in flight. */
st_err st_client_call(st_client *c, const Strata__Msg *m, int timeout_ms, Strata__Msg **reply);

/* st_client_start - starts an asynchronous exchange of m (packed before
 * this returns: m may be freed then); timeout_ms bounds the whole
 * exchange; done(arg, ...) reports its end. ST_EBUSY when one is already
 * in flight; on any error done is not called. */
st_err st_client_start(st_client *c, const Strata__Msg *m, int timeout_ms, st_client_done done,
                       void *arg);

/* st_client_serving - whether a StatusReply shows a serving cluster: a
 * committed plan whose every stage worker (replicas included) is in state
 * "serving". */
bool st_client_serving(const Strata__StatusReply *s);

#endif
