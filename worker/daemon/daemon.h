/* daemon.h - the worker daemon `strata-worker`: its control side (join,
 * heartbeats, the control server for Prepare / Commit / EndSessions, plan
 * state) and the assembly of the whole process (docs/worker.md).
 *
 * Life cycle, driven by main(): st_daemon_open() loads the model's
 * metadata (no weights), the cluster key, the kernels and the thread pool,
 * binds the data and control listeners (printing `listening on ...` and
 * `control on ...`), and measures the machine; st_daemon_start() starts
 * the control thread and the data thread; st_daemon_shutdown() lets the
 * data thread finish its batch, sends Leave and joins both threads;
 * st_daemon_close() frees. No function here exits the process.
 *
 * Leaving by itself: when the coordinator says (HeartbeatReply.leave) that
 * a committed plan without this worker serves and no step in flight uses
 * it (a drain), the daemon logs why and raises cfg.leave_signal in the
 * process; main() then shuts down as for SIGTERM (the Leave it sends says
 * "drained") and exits 0. With cfg.stay_after_drain it stays joined as a
 * drained spare instead (docs/worker.md). */
#ifndef ST_WORKER_DAEMON_H
#define ST_WORKER_DAEMON_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/net/netaddr.h"

#define ST_DAEMON_PORT_MAX ST_PORT_MAX /* the highest TCP port (common/net/netaddr.h) */

typedef struct st_worker_cfg {
    const char *coordinator;        /* tcp://HOST:PORT of the coordinator's control REP */
    const char *model;              /* GGUF path; NULL: stream the weights (docs/streaming.md) */
    const char *weights_from;       /* without model: weights servers, tcp:// separated by commas
                                     * (NULL: the coordinator's host, its port + 1) */
    const char *cache_dir;          /* without model: the chunk cache (NULL: ~/.cache/strata) */
    double max_fetch_rate;          /* bytes per second (0: no cap) */
    int64_t test_fetch_pause_after; /* test hook (fetch.h): -1 none */
    int test_fetch_call_ms;         /* test hook (fetch.h): a request's wait; 0 the default */
    const char *serve_chunks;       /* the chunk server's address (chunk_serve.h); NULL: none */
    bool test_serve_corrupt;        /* test hook: the chunk server flips a bit of every chunk */
    bool test_hang_release;         /* test hook (worker_main.c): the release after shutdown
                                     * never ends, as NNG 1.5.2's close can (exit_guard.h) */
    double test_speed;              /* test hook: bytes/s announced for every dtype instead
                                     * of the start-up measurement's; 0: measured */
    const char *listen;             /* data PULL: tcp://HOST:PORT (port 0: any) */
    const char *advertise;          /* data address announced; NULL: derived from listen */
    int control_port;               /* the control REP's port on listen's host (0: any,
                                     * at most ST_DAEMON_PORT_MAX) */
    const char *advertise_control;  /* control address announced; NULL: the data address's
                                     * host (advertise's, else listen's) and the bound port */
    const char *name;               /* NULL: HOSTNAME-PID */
    const char *key_file;           /* cluster key; NULL: open cluster */
    bool encrypt;                   /* seal every frame (needs key_file) */
    const char *throttle_file;      /* re-read every heartbeat; NULL: none */
    uint64_t memory;                /* budget in bytes; 0: MemAvailable */
    int threads;                    /* pool threads; 0: the cores */
    uint32_t heartbeat_ms;          /* until the JoinReply says otherwise */
    double throttle;                /* >= 1; test-only slow-down */
    bool spare;                     /* join as a spare */
    bool force_ref;                 /* scalar reference kernels */
    bool stay_after_drain;          /* drained: stay joined as a spare instead of leaving */
    double probe_s;                 /* link probe interval per peer (s); 0: each peer once */
    bool no_probe;                  /* do not measure links */
    uint32_t wire_accept;           /* boundary dtypes it accepts (bit 1 << st_wire_dtype);
                                     * 0: every one */
    int leave_signal;               /* raised in the process (kill) when the daemon decides to
                                     * leave by itself (drained); 0: none */
    struct st_open_stop *open_stop; /* a stop during st_daemon_open (below); NULL: none */
} st_worker_cfg;

/* A stop asked for while st_daemon_open runs. Without --model, open
 * fetches the model's header, which waits as long as no source answers
 * (docs/streaming.md); main() waits for its signals only after open. So
 * main's start-up watch (worker_main.c) calls st_open_stop_ask on SIGINT or
 * SIGTERM: the header fetch in progress is stopped (st_fetch_stop) and
 * open fails with ST_ECANCELED; one not begun yet is never begun. The
 * caller owns the struct and initialises it with ST_OPEN_STOP_INIT. */
typedef struct st_open_stop {
    pthread_mutex_t mu;
    int sig;                /* the signal that asked (0: none yet) */
    struct st_fetch *fetch; /* the header fetch in progress, or NULL */
} st_open_stop;

#define ST_OPEN_STOP_INIT {.mu = PTHREAD_MUTEX_INITIALIZER}

/* st_open_stop_ask - records sig and stops the header fetch in progress. */
void st_open_stop_ask(st_open_stop *os, int sig);

/* st_open_stop_asked - the signal that asked, or 0. */
int st_open_stop_asked(st_open_stop *os);

typedef struct st_daemon st_daemon;

/* st_daemon_open - everything before the threads (see the file comment).
 * Errors name the flag or file at fault. */
st_err st_daemon_open(const st_worker_cfg *cfg, st_daemon **out);

/* st_daemon_start - starts the data and control threads. */
st_err st_daemon_start(st_daemon *d);

/* st_daemon_shutdown - the data thread finishes the batch it computes and
 * stops; the control thread sends Leave (if joined; 1 s at most) and
 * stops. Idempotent. */
void st_daemon_shutdown(st_daemon *d);

/* st_daemon_leaving - true once the daemon decided to leave by itself
 * (it raised cfg.leave_signal); its reason in *why (may be NULL). */
bool st_daemon_leaving(st_daemon *d, const char **why);

/* st_daemon_close - shuts down if needed, closes the sockets, frees;
 * NULL is a no-op. */
void st_daemon_close(st_daemon *d);

/* st_mem_available - MemAvailable of /proc/meminfo in bytes (procfs.c). */
st_err st_mem_available(uint64_t *out);

/* st_rss_bytes - the resident set of this process (/proc/self/statm;
 * procfs.c). */
uint64_t st_rss_bytes(void);

#endif
