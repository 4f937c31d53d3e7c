/* probe.h - worker-to-worker link measurement (docs/cluster.md, "Links").
 *
 * A prober owns one thread that measures the links from this worker to the
 * peers the coordinator told it about (HeartbeatReply.peers). Per peer and
 * round it opens a REQ socket to the peer's control address and makes a
 * few small Probe round trips (the first one, which also sets the
 * connection up, is not counted) and a few large ones (payload
 * ST_PROBE_PAYLOAD) back to back between two halves of the small ones, so
 * that a passing disturbance (a busy core) hits both kinds alike and a
 * token bucket on the path shows its rate rather than its burst; the
 * peer's control thread answers each with a tiny
 * ProbeReply. latency = median small RTT / 2; bandwidth = payload /
 * (median large RTT - median small RTT), clamped to [ST_PROBE_BW_MIN,
 * ST_PROBE_BW_MAX] (st_probe_estimate). Rounds repeat every interval and
 * soon (ST_PROBE_FIRST_S) for a peer that is new or whose address changed;
 * a round that failed, or whose large probes were not slower than its
 * small ones (noise: no information about the bandwidth), is retried
 * after ST_PROBE_RETRY_S. The interval of a peer is
 * stretched so probes stay under ST_PROBE_BUDGET of the measured bandwidth.
 * Never on the data path: the data thread is not involved, and the control
 * thread only hands over peers and reads results (both under a mutex held
 * for copies only). Frames are enveloped and, with a cluster key, MACed
 * like every other control frame, from their own sender id. */
#ifndef ST_WORKER_PROBE_H
#define ST_WORKER_PROBE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"

#define ST_PROBE_PAYLOAD ((size_t)1 << 20)     /* large probe payload (bytes) */
#define ST_PROBE_MAX_PAYLOAD ((size_t)1 << 20) /* a peer refuses bigger probes */
#define ST_PROBE_SMALL 7u                      /* counted small round trips per round */
#define ST_PROBE_LARGE 5u                      /* large round trips per round */
#define ST_PROBE_FIRST_S                                                                           \
    1.0 /* a new peer is first measured after this:                                                \
         * a join is followed by a plan and loading */
#define ST_PROBE_TIMEOUT_MS 3000
#define ST_PROBE_RETRY_S 5.0
#define ST_PROBE_BUDGET 0.005 /* share of a link's capacity over time */
#define ST_PROBE_BW_MIN 1.0e5 /* bytes/s */
#define ST_PROBE_BW_MAX 1.0e11
#define ST_PROBE_MAX_PEERS 256
#define ST_PROBE_ADDR_MAX 256

/* A peer to measure: its worker id and control address. */
typedef struct st_probe_peer {
    uint64_t id;
    char addr[ST_PROBE_ADDR_MAX];
} st_probe_peer;

/* One link's latest measurement. */
typedef struct st_probe_link {
    uint64_t peer_id;
    double latency_s; /* one way */
    double bw;        /* bytes/s, this worker -> the peer */
    uint32_t samples; /* round trips behind the figures */
    double when_s;    /* st_now_s() when the round ended */
} st_probe_link;

typedef struct st_prober st_prober;

/* st_probe_median - the median of v[0..n) (sorted in place; the mean of
 * the two middle values for even n); 0 for n == 0. */
double st_probe_median(double *v, size_t n);

/* st_probe_estimate - latency (s, one way) and bandwidth (bytes/s) from
 * ns small and nl large round-trip times (s; both arrays are sorted in
 * place) of a probe whose large payload is payload bytes. ST_EINVAL when
 * either set is empty or holds a time that is not finite and positive;
 * ST_ERANGE when the large median is not above the small one (the
 * payload's time is lost in the noise: measure again). The bandwidth is
 * clamped to [ST_PROBE_BW_MIN, ST_PROBE_BW_MAX]. */
st_err st_probe_estimate(double *small_s, size_t ns, double *large_s, size_t nl, size_t payload,
                         double *latency_s, double *bw);

/* st_probe_open - a prober (thread not started) that signs frames with key
 * (32 bytes, or NULL for an open cluster), and seals them when encrypt, as
 * envelope sender `sender`; interval_s between rounds to one peer (0:
 * measure once per peer). */
st_err st_probe_open(const uint8_t *key, bool encrypt, uint64_t sender, double interval_s,
                     st_prober **out);

/* st_probe_start - starts the thread. */
st_err st_probe_start(st_prober *p);

/* st_probe_set_peers - the peers to measure from now on (self_id: this
 * worker's id, sent in probes). New peers or changed addresses are
 * measured at once; peers no longer listed are forgotten with their
 * results. At most ST_PROBE_MAX_PEERS are kept (the rest ignored, logged).
 * Only tcp:// peers are kept: another address (ipc://, inproc://) is
 * never dialed, logged and counted. */
void st_probe_set_peers(st_prober *p, uint64_t self_id, const st_probe_peer *peers, size_t n);

/* st_probe_refused - peer addresses never dialed for their transport
 * (not tcp://) so far. */
uint64_t st_probe_refused(st_prober *p);

/* st_probe_links - copies up to cap measured links into out; returns how many. */
size_t st_probe_links(st_prober *p, st_probe_link *out, size_t cap);

/* st_probe_stop - asks the thread to stop, without waiting: a round in
 * progress ends after the call in flight (its reply, or its timeout of
 * ST_PROBE_TIMEOUT_MS; never cut short: probe.c says why), a dial in
 * progress at once. NULL is a no-op; so is a second call. */
void st_probe_stop(st_prober *p);

/* st_probe_close - st_probe_stop, then waits for the thread and frees;
 * NULL is a no-op. */
void st_probe_close(st_prober *p);

#endif
