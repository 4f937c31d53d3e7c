/* coord.h - the coordinator process: configuration, start-up, the event
 * loop and shutdown. main.c parses flags into an st_coord_cfg and calls
 * these; everything else is internal (coord_impl.h). */
#ifndef ST_COORD_COORD_H
#define ST_COORD_COORD_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/wire/wire.h"

typedef struct st_coord_cfg {
    const char *model_path;
    const char *listen;       /* control address (default tcp://127.0.0.1:0) */
    const char *results;      /* results address, NULL: same host, port 0 */
    const char *advertise;    /* host put into result_addr, NULL: the bound one */
    const char *key_path;     /* cluster key file, NULL: open cluster */
    const uint8_t *local_key; /* no key_path, loopback: this generated key, written to
                               * the local key file (common/net/exposure.h); or NULL */
    bool encrypt;             /* seal every frame (needs key_path) */
    bool insecure;            /* keyless listening beyond loopback allowed */
    uint32_t min_workers;     /* no first plan before this many joined */
    st_wire_dtype wire;       /* boundary dtype of every stage, or ST_WIRE_AUTO: each
                               * boundary its own (docs/wire-format.md 6.1) */
    bool zstd;
    bool allow_i8;            /* --wire auto may choose i8 once the accuracy gate passed
                               * (coordinator/cluster/i8gate.h) */
    double i8_gate_top1;      /* the gate's top-1 threshold in percent; 0: 90 (tests only) */
    const char *i8_gate_hold; /* tests only: the gate starts once this file exists */
    const char *worker_bin;   /* the strata-worker that runs the gate (--wire-gate); NULL:
                               * beside this executable (coordinator/cluster/i8gate.h) */
    const char *cache_dir;    /* where the i8 gate's figures are cached (NULL: beside the
                               * model) */
    uint32_t heartbeat_ms;
    uint32_t heartbeat_timeout_ms;
    uint32_t step_timeout_ms;
    uint32_t prepare_timeout_ms;
    uint32_t fetch_timeout_ms; /* Prepare of a worker that streams its weights
                                  (Capability.streams; docs/streaming.md) */
    uint32_t queue_timeout_ms;
    uint32_t chunk;        /* prefill ids per row */
    uint32_t max_tokens;   /* ids per batch (Plan.max_tokens) */
    uint32_t n_ctx;        /* 0: the model's context_length */
    const char *cache_type; /* KV cache dtype name (--cache-type); NULL: ST_KV_DEFAULT_DTYPE */
    uint32_t max_sessions; /* KV slots per worker */
    uint32_t max_requests;
    uint32_t client_timeout_ms; /* a request not polled this long is cancelled (0: never) */
    uint32_t session_ttl_ms;    /* idle client sessions end after this */
    uint32_t pipeline_depth;    /* batches in flight; 0: the plan's stage count */
    uint32_t slots;             /* REP contexts */
    const uint32_t *split;      /* fixed layer counts per worker, or NULL */
    size_t n_split;
    /* placement (docs/placement.md); zero values mean the defaults */
    const char *objective;  /* "latency" or "throughput" (NULL: throughput) */
    double replan_margin;   /* hysteresis, fraction of step time (if margin_set) */
    bool replan_margin_set; /* false: 0.10 */
    uint32_t imbalance_ms;  /* sustained imbalance before a replan (0: 5000) */
    bool no_imbalance;      /* never replan on heartbeats */
    uint32_t min_samples;   /* per-layer samples before a measurement counts (0: 20) */
    bool replicas;          /* commit plans whose bottleneck stages have replicas
                             * (throughput objective; off: one worker per stage) */
    bool test_hooks;        /* accept the test-only HoldRequest (coordinator/cluster/hold.h);
                             * never in production */
    /* credentials and per-client caps (issue 12, docs/security.md) */
    const char *client_keys_path;     /* client keys, one per line (needs key_path), or NULL */
    const char *admin_key_path;       /* admin keys, same format (needs key_path), or NULL */
    uint32_t max_requests_per_client; /* live requests of one client; 0: max_requests / 4 */
    uint64_t max_logits_per_client;   /* logits bytes one client's requests may hold;
                                       * 0: twice the per-request limit */
    uint32_t max_new_tokens;          /* max_tokens a client may ask for; 0: the context */
} st_coord_cfg;

/* st_coord_cfg_default - the documented defaults (model_path NULL). */
st_coord_cfg st_coord_cfg_default(void);

typedef struct st_coord st_coord;

/* st_coord_open - loads the model's metadata and tokenizer, the cluster
 * key, binds the control and results sockets and prints their addresses
 * ("listening on ...", "results on ...") on stdout. */
st_err st_coord_open(const st_coord_cfg *cfg, st_coord **out);

/* st_coord_key_file - the generated key's file (cfg.local_key written
 * at open and kept after close, so a restart on the address keeps the key
 * the workers hold), or NULL when the cluster key came from a
 * file of the operator's or there is none. */
const char *st_coord_key_file(const st_coord *c);

/* st_coord_set_weights - the weights server main.c opened beside c, whose
 * socket's connection counts `strata status` adds to the coordinator's
 * (NULL: none). It must outlive st_coord_run. */
struct st_weights;
void st_coord_set_weights(st_coord *c, struct st_weights *w);

/* st_coord_gateway - the attachment of the in-process HTTP gateway
 * (gateway.h): valid from st_coord_open until st_coord_close. */
struct st_gw;
struct st_gw *st_coord_gateway(st_coord *c);

/* st_coord_run - the event loop; returns when *stop becomes nonzero. */
void st_coord_run(st_coord *c, volatile sig_atomic_t *stop);

/* st_coord_close - ends every request with a clear reason, answers parked
 * polls, closes every socket and frees everything; NULL is a no-op. */
void st_coord_close(st_coord *c);

#endif
