/* pipe_gate.h - bounds what unauthenticated peers can make a listening
 * NNG socket hold (issue 33, H1).
 *
 * The problem. libnng's TCP transport reads a frame's 8-byte length, then
 * allocates a message of that length and fills it as the bytes arrive; the
 * socket's NNG_OPT_RECVMAXSZ is the only check, and it runs before any MAC
 * of ours. A stranger who opens connections, declares frames just under
 * the limit and sends all but the last byte makes the process hold about
 * (connections x limit) bytes for as long as it likes: NNG never times a
 * partial frame out, and it offers no view of one (libnng 1.5.2; the same
 * in later releases). We cannot change that allocation without a receive
 * path of our own under NNG, so the gate bounds the number of connections
 * that can hold such a frame instead.
 *
 * States. A connection (an NNG pipe) is *proven* once a frame that came
 * on it passed authentication (the receiver calls st_pipe_gate_vouch after
 * its envelope opened: MAC or AEAD tag, clock, replay window); a
 * stranger's connections never are. Until then it is NEW (no complete
 * frame yet: it may be holding a partial one), PENDING (a complete frame
 * arrived and waits to be judged: st_pipe_gate_seen, for receivers that
 * queue frames before opening them) or FAILED (a frame failed
 * authentication: st_pipe_gate_failed). On each gated socket:
 *   - at most cfg.max_pipes connections at once, and cfg.max_per_addr from
 *     one remote address; a connection beyond either is closed before the
 *     socket sees it (counted: refused);
 *   - NEW or FAILED connections: a newcomer beyond cfg.max_unproven of
 *     them closes one that connected ST_PIPE_GATE_GRACE_MS ago or more,
 *     if there is one; beyond cfg.max_new (a burst allowance, for sockets
 *     many clients dial at once: the coordinator's control socket) one of
 *     any age (counted: evicted). The victim is of the address with the
 *     most of them, the oldest. A peer that floods connections so evicts
 *     its own first; a legitimate one sends its first frame right after
 *     connecting and is PENDING once it has arrived, so it is evicted only
 *     by a flood from its own address in between. PENDING connections are
 *     never evicted: a reply to a request that arrived is never cut off
 *     because the receiver is slow to judge it (a stalled event loop);
 *   - with cfg.unproven_ms, a connection not proven that long after it
 *     connected is closed (counted: expired): a frame trickled or left
 *     unfinished is dropped with its connection. Only for sockets whose
 *     peers speak first (REP sockets: a REQ peer sends its request when it
 *     connects). A PULL socket's PUSH peer may stay silent for long before
 *     its first frame, and a frame handed to a connection as the receiver
 *     closes it is lost, so PULL sockets get the caps and eviction without
 *     the deadline.
 * So strangers make a socket hold at most max_new partial frames of
 * NNG_OPT_RECVMAXSZ bytes (st_pipe_gate_unproven_for sizes max_unproven
 * from a byte budget; max_new is that too unless the socket's owner
 * allows a burst), plus those of connections whose complete frame
 * waits to be judged (PENDING): a stranger who sends a small frame before
 * a partial one keeps that connection until the receiver judges the small
 * one (it then becomes FAILED and evictable) - on a receiver that queues
 * frames (the coordinator) as long as its queue takes, bounded then only
 * by max_pipes and max_per_addr. The memory of an evicted connection is
 * freed as NNG closes it (at once, on its own threads). A proven
 * connection (a member, or a client holding a key) is trusted like its
 * key: no deadline, no eviction.
 *
 * In-process (inproc://) connections are not gated. An open cluster (no
 * key) proves every well-formed frame, so there the gate bounds strangers
 * only until their first frame.
 *
 * Threads. The gate runs in NNG's pipe callbacks and its own NNG timer;
 * st_pipe_gate_seen, _failed, _vouch and _add_counts may be called from any
 * thread. The gate closes pipes only after releasing its lock. */
#ifndef ST_PIPE_GATE_H
#define ST_PIPE_GATE_H

#include <nng/nng.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"

/* Defaults for every gated socket (docs/security.md, "Connections"). */
#define ST_PIPE_GATE_MAX_PIPES 1024u  /* connections at once on one socket */
#define ST_PIPE_GATE_MAX_PER_ADDR 256u /* ... from one remote address */
/* Bytes of partial frames unproven connections may make one socket hold;
 * st_pipe_gate_unproven_for divides it by the socket's frame limit. */
#define ST_PIPE_GATE_UNPROVEN_BYTES ((size_t)12 << 20)
#define ST_PIPE_GATE_UNPROVEN_MIN 2u  /* unproven connections at least ... */
#define ST_PIPE_GATE_UNPROVEN_MAX 16u /* ... and at most, whatever the limit */
/* An unproven connection of a REP socket is closed this long after it
 * connected: its peer sends a request of at most 4 MiB when it connects. */
#define ST_PIPE_GATE_UNPROVEN_MS 10000u
#define ST_PIPE_GATE_SWEEP_MS 250u /* how often the deadline is checked */
/* Eviction prefers unauthenticated connections at least this old. */
#define ST_PIPE_GATE_GRACE_MS 1000u

typedef struct st_pipe_gate st_pipe_gate;

typedef struct st_pipe_gate_cfg {
    const char *name;               /* the socket, for logs ("control", "data", ...) */
    size_t max_frame;               /* the socket's NNG_OPT_RECVMAXSZ (logged at open) */
    uint32_t max_pipes;             /* 1..: connections at once */
    uint32_t max_per_addr;          /* 1..max_pipes: from one remote address */
    uint32_t max_unproven;          /* 1..max_new: NEW or FAILED, steady */
    uint32_t max_new;               /* max_unproven..max_pipes: NEW or FAILED, at most */
    uint32_t unproven_ms;           /* 0: no deadline; else close unproven ones this old */
} st_pipe_gate_cfg;

/* What a gate did; a process adds its gates' (Counters.conn_* in status). */
typedef struct st_pipe_gate_counts {
    uint64_t refused; /* over max_pipes or max_per_addr */
    uint64_t evicted; /* an unproven connection closed for a newer one */
    uint64_t expired; /* an unproven connection closed at unproven_ms */
    uint32_t pipes;   /* connections now */
    uint32_t unproven; /* not proven now */
} st_pipe_gate_counts;

/* st_pipe_gate_unproven_for - max_unproven for a socket whose frames are at
 * most max_frame bytes: ST_PIPE_GATE_UNPROVEN_BYTES / max_frame, within
 * [ST_PIPE_GATE_UNPROVEN_MIN, ST_PIPE_GATE_UNPROVEN_MAX]. */
uint32_t st_pipe_gate_unproven_for(size_t max_frame);

/* st_pipe_gate_cfg_for - the defaults above for a socket with frames of at
 * most max_frame bytes (max_new = max_unproven: no burst); peers_speak_first
 * gives it the unproven deadline. */
st_pipe_gate_cfg st_pipe_gate_cfg_for(const char *name, size_t max_frame, int peers_speak_first);

/* st_pipe_gate_open - gates socket s (before it listens, so no connection
 * escapes it). Installs s's ADD_PRE and REM_POST pipe callbacks: the
 * caller sets no other. ST_EINVAL for a cfg out of range, ST_ENOMEM,
 * ST_ENNG. name must outlive the gate. */
st_err st_pipe_gate_open(nng_socket s, const st_pipe_gate_cfg *cfg, st_pipe_gate **out);

/* st_pipe_gate_seen - a complete frame arrived in msg (nng_msg_get_pipe)
 * and is queued to be judged: its connection becomes PENDING unless it is
 * proven or failed. For receivers that open frames later, on another
 * thread. NULL g: nothing. */
void st_pipe_gate_seen(st_pipe_gate *g, const nng_msg *msg);

/* st_pipe_gate_failed - a frame received in msg failed authentication:
 * its connection becomes FAILED unless it is proven. NULL g: nothing. */
void st_pipe_gate_failed(st_pipe_gate *g, const nng_msg *msg);

/* st_pipe_gate_vouch - a frame received in msg passed authentication: its
 * connection is proven. NULL g: nothing. */
void st_pipe_gate_vouch(st_pipe_gate *g, const nng_msg *msg);

/* st_pipe_gate_add_counts - adds g's counts to *sum (refused, evicted,
 * expired, pipes, unproven). NULL g: nothing. */
void st_pipe_gate_add_counts(st_pipe_gate *g, st_pipe_gate_counts *sum);

/* st_pipe_gate_close - stops the deadline timer and frees the gate. Call
 * it after the socket was closed (its callbacks use the gate until then).
 * NULL: nothing. */
void st_pipe_gate_close(st_pipe_gate *g);

#endif
