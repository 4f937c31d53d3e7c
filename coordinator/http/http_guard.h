/* http_guard.h - the HTTP gateway's connection guard: a cap on the
 * connections of one client address and absolute deadlines for a
 * request's headers and body (docs/http-api.md, "Limits").
 *
 * libmicrohttpd's connection timeout is an idle timeout: every byte
 * resets it, so a client that sends a header byte every few seconds holds
 * its connection for ever, and a few thousand of them fill the table. Its
 * per-address limit refuses silently. The guard replaces both:
 *
 * - MHD calls http_guard_accept (its accept policy) before it makes a
 *   connection and http_guard_notify (MHD_OPTION_NOTIFY_CONNECTION) when
 *   one starts and when it closes. The guard keeps every live connection,
 *   its socket and its address's count; a connection beyond the address's
 *   cap is refused at accept, or (two accepted at once by two MHD threads)
 *   shut down when it starts. Either is counted in per_ip_refused.
 * - The gateway tells the guard where a connection's request is
 *   (http_guard_phase): waiting for headers (from accept, or from the end
 *   of the previous request on a kept-alive connection), reading the body
 *   (from the end of the headers), or answered / being answered (no
 *   deadline: a stream lasts as long as its generation). A thread checks
 *   every HTTP_GUARD_TICK_MS and shuts down (shutdown(2), SHUT_RDWR) the
 *   socket of a connection past its phase's deadline; MHD then sees the
 *   end of the stream and closes the connection itself. Counted in
 *   header_deadline_closed / body_deadline_closed.
 *
 * Safety: MHD notifies a connection's close before it closes the socket,
 * and the guard removes the connection under its mutex on that notice, so
 * the thread never shuts down a socket MHD has closed (or a reused
 * descriptor). Every function here is thread-safe. */
#ifndef ST_COORD_HTTP_GUARD_H
#define ST_COORD_HTTP_GUARD_H

#include <microhttpd.h>
#include <stdint.h>
#include <sys/socket.h>

#include "common/base/err.h"
#include "coordinator/http/http_stats.h"

#define HTTP_GUARD_TICK_MS 250u /* how often deadlines are checked */

typedef struct http_guard_cfg {
    uint32_t per_ip;   /* connections of one address (an IPv6 /64); 0: no cap */
    uint32_t header_s; /* headers complete within this from accept (or the last request); 0: none */
    uint32_t body_s;   /* the body complete within this from the headers; 0: none */
    uint32_t max_conns; /* sizes the address table */
} http_guard_cfg;

typedef enum http_guard_ph {
    HTTP_GUARD_HEADERS = 0, /* waiting for a request's headers */
    HTTP_GUARD_BODY,        /* headers read; reading the body */
    HTTP_GUARD_ANSWER       /* answering (or suspended for a generation) */
} http_guard_ph;

typedef struct http_guard http_guard;

/* http_guard_open - a guard counting into counts (which must outlive it);
 * starts its deadline thread (none when both deadlines are 0). */
st_err http_guard_open(const http_guard_cfg *cfg, st_http_guard_counts *counts, http_guard **out);

/* http_guard_close - stops the thread and frees; call after
 * MHD_stop_daemon (every connection's close notified). NULL: a no-op. */
void http_guard_close(http_guard *g);

/* http_guard_accept - MHD's accept policy callback (cls: the guard):
 * MHD_NO when addr already holds per_ip connections. */
enum MHD_Result http_guard_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen);

/* http_guard_notify - MHD's connection notice callback (cls: the guard). */
void http_guard_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                       enum MHD_ConnectionNotificationCode code);

/* http_guard_phase - conn's request is now at ph (its clock restarts). */
void http_guard_phase(http_guard *g, struct MHD_Connection *conn, http_guard_ph ph);

#endif
