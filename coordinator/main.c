/* main.c - `strata-coordinator`: flags, signals, and the event loop.
 *
 * The process prints the addresses it bound ("listening on tcp://...",
 * "results on tcp://...") as its first lines on stdout, then serves until
 * SIGINT or SIGTERM: requests in flight are ended with a clear reason,
 * parked polls answered, sockets closed, exit status 0. A start-up error
 * (bad flag, unreadable model, key file readable by others, address in
 * use) is one line on stderr and exit status 1 (2 for usage errors).
 * Protected mode (common/net/exposure.h): without --cluster-key, a --listen or
 * --results beyond loopback is a usage error unless --insecure; so is an
 * --http beyond loopback without --api-key-file. With --http the gateway
 * (http.h) starts after the coordinator and prints "http on http://...",
 * and stops before it. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/crash.h"
#include "common/wire/envelope.h"
#include "common/base/exit_guard.h"
#include "common/net/exposure.h"
#include "common/base/log.h"
#include "common/model/manifest.h"
#include "common/base/opt.h"
#include "common/net/netaddr.h"
#include "common/base/units.h"
#include "common/base/version.h"
#include "coordinator/coord.h"
#include "coordinator/http/http.h"
#include "coordinator/control/net.h"
#include "coordinator/planner/placement.h"
#include "coordinator/stream/weights.h"

#define MAX_SPLIT 256
#define MAIN_MAX_BODY ((size_t)1 << 30)
#define MAIN_MAX_DEADLINE_S 3600 /* --http-header-s, --http-body-s */

static volatile sig_atomic_t main_stop;

static void main_on_signal(int sig)
{
    (void)sig;
    main_stop = 1;
}

static const char main_synopsis[] =
    "strata-coordinator --version\n"
    "       strata-coordinator --model PATH [FLAGS]";

static const char main_epilogue[] =
            "Credentials (docs/security.md): --client-keys and --admin-key name files of\n"
            "keys, one per line ('#' comments, mode 0600), and need --cluster-key.\n"
            "Client keys may generate, poll and cancel their own requests; admin keys\n"
            "also replan, drain and read the plan; only the cluster key speaks as a worker.\n"
            "\n"
            "--http serves the OpenAI-compatible API (docs/http-api.md). Without\n"
            "--api-key-file it must be a loopback address unless --insecure is given.\n"
            "Without --cluster-key, --listen and --results must be loopback addresses\n"
            "unless --insecure is given. --encrypt (needs the key) seals every frame with\n"
            "XChaCha20-Poly1305; every worker and client must then use --encrypt too.\n"
            "--weights serves the model's manifest and chunks to workers started without a\n"
            "model file (docs/streaming.md; default: the --listen host, its port + 1, any\n"
            "port when that is 0); the manifest is cached beside the model or under\n"
            "--cache-dir (default ~/.cache/strata). --fetch-timeout-ms bounds the Prepare\n"
            "of such a worker (default 3600000). --test-corrupt-chunk and --test-refuse-chunks\n"
            "(chunk requests after N served are refused) need --test-hooks.\n"
            "\n"
            "--wire auto (the default) gives each boundary its own dtype\n"
            "(docs/wire-format.md 6.1). --allow-i8 lets it choose i8 once an accuracy gate\n"
            "on --model passes: at start the coordinator runs the whole model in a child\n"
            "process, `strata-worker --wire-gate MODEL --threads 1` (it maps the whole model\n"
            "file and holds 64 x vocab f32 logits; it takes what `strata bench wire MODEL\n"
            "--wire i8 --threads 1` does), greedy from the id 1 for 64 steps, with i8 at\n"
            "every layer boundary against f32; it passes with top-1 agreement >= 90%.\n"
            "--worker-bin PATH names that strata-worker (default: the one beside this\n"
            "executable, else ../worker/strata-worker from it; none: the gate fails).\n"
            "Its figures are cached beside the\n"
            "manifest (per model file size and mtime). --test-i8-gate-top1 (another\n"
            "threshold) and --test-i8-gate-hold (the gate starts once FILE exists) need\n"
            "--test-hooks.\n";

#define MAIN_MIN_WORKERS_MAX 256
#define MAIN_HEARTBEAT_MS_MIN 10
#define MAIN_HEARTBEAT_MS_MAX 600000
#define MAIN_HOUR_MS 3600000
#define MAIN_DAY_MS 86400000
#define MAIN_STEP_TOKENS_MAX 4096
#define MAIN_CTX_MAX (1u << 24)
#define MAIN_SESSIONS_MAX 4096
#define MAIN_REQUESTS_MAX 65536
#define MAIN_CLIENT_TIMEOUT_MIN_MS 1000
#define MAIN_PIPELINE_MAX 16
#define MAIN_MIN_SAMPLES_MAX 100000
#define MAIN_MIN_BODY 1024
#define MAIN_HTTP_THREADS_MAX 64
#define MAIN_CONNS_MAX 1000000
#define MAIN_RATE_TABLE_MAX (1u << 22)
#define MAIN_HTTP_S_MAX 3600
#define MAIN_SPLIT_LAYERS_MAX (1u << 20)

/* The split's storage: --split fills it and points c->split at it. */
typedef struct main_split_dest {
    st_coord_cfg *c;
    uint32_t *split; /* MAX_SPLIT entries */
} main_split_dest;

/* main_split - --split N1,N2,...: layer counts per worker. */
static st_err main_split(const char *s, void *dest)
{
    main_split_dest *d = dest;
    size_t n = 0;
    const char *p = s;
    for (;;) {
        char *end;
        errno = 0;
        unsigned long long x = strtoull(p, &end, 10);
        if (end == p || *p == '-' || errno != 0 || x > MAIN_SPLIT_LAYERS_MAX ||
            (*end != ',' && *end != '\0') || n == MAX_SPLIT)
            return st_errorf(ST_EINVAL, "'%s' is not a list of layer counts like 3,3 (at most %d)",
                             s, MAX_SPLIT);
        d->split[n++] = (uint32_t)x;
        if (*end == '\0')
            break;
        p = end + 1;
    }
    d->c->split = d->split;
    d->c->n_split = n;
    return ST_OK;
}

/* main_weights_addr - --weights tcp://HOST:PORT into the `const char *`
 * dest (the check the weights server relies on). */
static st_err main_weights_addr(const char *v, void *dest)
{
    if (!st_tcp_split(v, NULL))
        return st_errorf(ST_EINVAL, "'%s': a tcp://HOST:PORT address", v);
    *(const char **)dest = v;
    return ST_OK;
}

/* main_wire - --wire f32|bf16|f16|i8|auto into the st_wire_dtype dest. */
static st_err main_wire(const char *v, void *dest)
{
    st_wire_dtype *w = dest;
    /* auto: each boundary its own dtype (docs/wire-format.md 6.1) */
    if (strcmp(v, st_wire_dtype_name(ST_WIRE_AUTO)) == 0) {
        *w = ST_WIRE_AUTO;
        return ST_OK;
    }
    if (st_wire_dtype_from_name(v, w) != ST_OK)
        return st_errorf(ST_EINVAL, "'%s' is not " ST_WIRE_DTYPE_NAMES " or auto", v);
    return ST_OK;
}

/* main_objective - --objective latency|throughput into the `const char *`
 * dest. */
static st_err main_objective(const char *v, void *dest)
{
    st_place_objective ob;
    if (st_place_objective_from_name(v, &ob) != ST_OK)
        return st_errorf(ST_EINVAL, "'%s' is not latency or throughput", v);
    *(const char **)dest = v;
    return ST_OK;
}

/* main_margin - --replan-margin F in [0, 1) into the st_coord_cfg dest. */
static st_err main_margin(const char *v, void *dest)
{
    st_coord_cfg *c = dest;
    char *end;
    errno = 0;
    double m = strtod(v, &end);
    if (*v == '\0' || *end != '\0' || errno != 0 || !(m >= 0 && m < 1))
        return st_errorf(ST_EINVAL, "'%s' is not a fraction in [0, 1)", v);
    c->replan_margin = m;
    c->replan_margin_set = true;
    return ST_OK;
}

/* main_top1 - --test-i8-gate-top1 PCT in (0, 100] into the double dest. */
static st_err main_top1(const char *v, void *dest)
{
    char *end;
    errno = 0;
    double t = strtod(v, &end);
    if (*end != '\0' || errno != 0 || !(t > 0 && t <= 100))
        return st_errorf(ST_EINVAL, "'%s' is not a percent in (0, 100]", v);
    *(double *)dest = t;
    return ST_OK;
}

/* main_client_timeout - --client-timeout-ms: 0 (never) or 1000..3600000,
 * into the uint32_t dest. */
static st_err main_client_timeout(const char *v, void *dest)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (*v == '\0' || *v == '-' || *end != '\0' || errno != 0 || x > MAIN_HOUR_MS)
        return st_errorf(ST_EINVAL, "'%s' is not an integer in [0, %d]", v, MAIN_HOUR_MS);
    if (x != 0 && x < MAIN_CLIENT_TIMEOUT_MIN_MS)
        return st_errorf(ST_EINVAL, "use 0 (never) or at least %d", MAIN_CLIENT_TIMEOUT_MIN_MS);
    *(uint32_t *)dest = (uint32_t)x;
    return ST_OK;
}

/* main_log - --log LEVEL: set at once (st_log_init; an unknown name leaves
 * warn, as it always did). */
static st_err main_log(const char *v, void *dest)
{
    (void)dest;
    st_log_init(v);
    return ST_OK;
}

/* main_u32_row - a decimal flag in [lo, hi] into *dest. */
static st_opt main_u32_row(const char *name, uint32_t *dest, uint32_t lo, uint32_t hi,
                           const char *help)
{
    return (st_opt){.name = name,
                    .type = ST_OPT_U32,
                    .dest = dest,
                    .min = lo,
                    .max = hi,
                    .value = "N",
                    .help = help};
}

/* main_parse - the flags into c, split (MAX_SPLIT), *max_set, hc, wc and
 * *no_weights: 0 to run, -1 after --help, 2 on a bad flag (message
 * printed). */
static int main_parse(int argc, char **argv, st_coord_cfg *c, uint32_t *split, bool *max_set,
                      st_http_cfg *hc, st_weights_cfg *wc, bool *no_weights)
{
    main_split_dest sd = {.c = c, .split = split};
    uint32_t max_tokens = 0; /* 0: no --max-tokens (its range starts at 1) */
    uint32_t max_body = (uint32_t)hc->max_body;
    const st_opt opts[] = {
        {.name = "--model", .type = ST_OPT_STR, .dest = &c->model_path, .value = "PATH",
         .help = "the GGUF model (required)"},
        {.name = "--listen", .type = ST_OPT_STR, .dest = &c->listen, .value = "ADDR",
         .help = "the control address, tcp://HOST:PORT"},
        {.name = "--results", .type = ST_OPT_STR, .dest = &c->results, .value = "ADDR",
         .help = "the results address, tcp://HOST:PORT"},
        {.name = "--advertise", .type = ST_OPT_STR, .dest = &c->advertise, .value = "HOST",
         .help = "the host announced to workers"},
        main_u32_row("--min-workers", &c->min_workers, 1, MAIN_MIN_WORKERS_MAX,
                     "no first plan before N workers joined"),
        st_opt_cluster_key(&c->key_path),
        st_opt_encrypt(&c->encrypt),
        st_opt_insecure(&c->insecure),
        {.name = "--wire", .type = ST_OPT_FN, .dest = &c->wire, .fn = main_wire,
         .value = "f32|bf16|f16|i8|auto", .help = "the boundary dtype (default auto)"},
        {.name = "--allow-i8", .type = ST_OPT_FLAG, .dest = &c->allow_i8,
         .help = "auto may choose i8 after the accuracy gate"},
        {.name = "--worker-bin", .type = ST_OPT_STR, .dest = &c->worker_bin, .value = "PATH",
         .help = "the strata-worker that runs the i8 gate"},
        {.name = "--zstd", .type = ST_OPT_FLAG, .dest = &c->zstd,
         .help = "compress activations with zstd"},
        main_u32_row("--heartbeat-ms", &c->heartbeat_ms, MAIN_HEARTBEAT_MS_MIN,
                     MAIN_HEARTBEAT_MS_MAX, "the workers' heartbeat interval"),
        main_u32_row("--heartbeat-timeout-ms", &c->heartbeat_timeout_ms, 20, MAIN_HOUR_MS,
                     "a worker silent this long is gone"),
        main_u32_row("--step-timeout-ms", &c->step_timeout_ms, 10, MAIN_HOUR_MS,
                     "a step's deadline"),
        main_u32_row("--prepare-timeout-ms", &c->prepare_timeout_ms, 100, MAIN_HOUR_MS,
                     "a Prepare's deadline"),
        main_u32_row("--queue-timeout-ms", &c->queue_timeout_ms, 100, MAIN_HOUR_MS,
                     "the longest wait in the queue"),
        main_u32_row("--chunk", &c->chunk, 1, MAIN_STEP_TOKENS_MAX, "prefill ids per row"),
        main_u32_row("--max-tokens", &max_tokens, 1, MAIN_STEP_TOKENS_MAX,
                     "ids per batch (default: at least --chunk)"),
        main_u32_row("--ctx", &c->n_ctx, 2, MAIN_CTX_MAX, "positions (default: the model's)"),
        main_u32_row("--max-sessions", &c->max_sessions, 1, MAIN_SESSIONS_MAX,
                     "KV slots per worker"),
        st_opt_cache_type(&c->cache_type),
        main_u32_row("--max-requests", &c->max_requests, 1, MAIN_REQUESTS_MAX,
                     "requests at once"),
        {.name = "--client-timeout-ms", .type = ST_OPT_FN, .dest = &c->client_timeout_ms,
         .fn = main_client_timeout, .value = "N",
         .help = "cancel a request not polled this long (0: never, else >= 1000)"},
        main_u32_row("--session-ttl-ms", &c->session_ttl_ms, 100, MAIN_DAY_MS,
                     "idle client sessions end after this"),
        main_u32_row("--pipeline-depth", &c->pipeline_depth, 0, MAIN_PIPELINE_MAX,
                     "batches in flight (0: the plan's stage count)"),
        {.name = "--split", .type = ST_OPT_FN, .dest = &sd, .fn = main_split,
         .value = "N1,N2,...", .help = "fixed layer counts per worker"},
        {.name = "--objective", .type = ST_OPT_FN, .dest = &c->objective, .fn = main_objective,
         .value = "latency|throughput", .help = "what placement optimizes"},
        {.name = "--replan-margin", .type = ST_OPT_FN, .dest = c, .fn = main_margin,
         .value = "F", .help = "replan hysteresis, a fraction of step time in [0, 1)"},
        main_u32_row("--imbalance-ms", &c->imbalance_ms, 100, MAIN_HOUR_MS,
                     "sustained imbalance before a replan"),
        {.name = "--no-imbalance", .type = ST_OPT_FLAG, .dest = &c->no_imbalance,
         .help = "never replan on heartbeats"},
        main_u32_row("--min-samples", &c->min_samples, 1, MAIN_MIN_SAMPLES_MAX,
                     "per-layer samples before a measurement counts"),
        {.name = "--replicas", .type = ST_OPT_FLAG, .dest = &c->replicas,
         .help = "commit plans with replicas of the bottleneck stages"},
        {.name = "--test-hooks", .type = ST_OPT_FLAG, .dest = &c->test_hooks,
         .help = "tests only: the step gate and the --test-* flags"},
        {.name = "--test-i8-gate-top1", .type = ST_OPT_FN, .dest = &c->i8_gate_top1,
         .fn = main_top1, .value = "PCT", .help = "tests only: the gate's threshold"},
        {.name = "--test-i8-gate-hold", .type = ST_OPT_STR, .dest = &c->i8_gate_hold,
         .value = "FILE", .help = "tests only: the gate starts once FILE exists"},
        {.name = "--log", .type = ST_OPT_FN, .fn = main_log, .value = "error|warn|info|debug",
         .help = "the log level"},
        {.name = "--http", .type = ST_OPT_STR, .dest = &hc->listen, .value = "HOST:PORT",
         .help = "serve the OpenAI-compatible API"},
        {.name = "--alias", .type = ST_OPT_STR, .dest = &hc->alias, .value = "NAME",
         .help = "another model name"},
        {.name = "--chat-template", .type = ST_OPT_STR, .dest = &hc->chat_template,
         .value = "NAME", .help = "a template name or text over the file's"},
        {.name = "--api-key-file", .type = ST_OPT_STR, .dest = &hc->api_key_file,
         .value = "FILE", .help = "the API keys"},
        main_u32_row("--max-body", &max_body, MAIN_MIN_BODY, (uint32_t)MAIN_MAX_BODY,
                     "bytes of a request body"),
        main_u32_row("--http-streams", &hc->streams, 1, ST_HTTP_MAX_STREAMS,
                     "generation requests at once"),
        main_u32_row("--http-threads", &hc->threads, 1, MAIN_HTTP_THREADS_MAX, "HTTP threads"),
        main_u32_row("--http-max-conns", &hc->max_conns, 1, MAIN_CONNS_MAX,
                     "connections at once"),
        main_u32_row("--http-per-ip", &hc->per_ip_conns, 0, MAIN_CONNS_MAX,
                     "connections per client address (0: no limit)"),
        main_u32_row("--http-timeout-s", &hc->timeout_s, 1, MAIN_HTTP_S_MAX,
                     "an idle connection is closed after N s"),
        main_u32_row("--http-header-s", &hc->header_s, 0, MAIN_MAX_DEADLINE_S,
                     "a request's headers' deadline (0: none)"),
        main_u32_row("--http-body-s", &hc->body_s, 0, MAIN_MAX_DEADLINE_S,
                     "a body's deadline from its headers (0: none)"),
        main_u32_row("--http-ping-s", &hc->ping_s, 1, MAIN_HTTP_S_MAX,
                     "an SSE comment after this much silence"),
        main_u32_row("--rate-rpm", &hc->limits.rpm, 0, UINT32_MAX,
                     "requests per minute (0: no limit)"),
        main_u32_row("--rate-tpm", &hc->limits.tpm, 0, UINT32_MAX,
                     "generated tokens per minute (0: no limit)"),
        main_u32_row("--rate-table-size", &hc->rate_table, 1, MAIN_RATE_TABLE_MAX,
                     "identities the rate limiter remembers"),
        {.name = "--client-keys", .type = ST_OPT_STR, .dest = &c->client_keys_path,
         .value = "FILE", .help = "client keys (needs --cluster-key)"},
        {.name = "--admin-key", .type = ST_OPT_STR, .dest = &c->admin_key_path, .value = "FILE",
         .help = "admin keys (needs --cluster-key)"},
        main_u32_row("--max-requests-per-client", &c->max_requests_per_client, 1,
                     MAIN_REQUESTS_MAX, "live requests of one client"),
        {.name = "--max-logits-per-client", .type = ST_OPT_SIZE,
         .dest = &c->max_logits_per_client, .umin = 1, .umax = UINT64_MAX, .value = "BYTES",
         .help = "logits bytes one client's requests may hold"},
        main_u32_row("--max-new-tokens", &c->max_new_tokens, 1, MAIN_CTX_MAX,
                     "max_tokens a client may ask for"),
        {.name = "--weights", .type = ST_OPT_FN, .dest = &wc->listen, .fn = main_weights_addr,
         .value = "ADDR", .help = "the weights server's address"},
        {.name = "--no-weights", .type = ST_OPT_FLAG, .dest = no_weights,
         .help = "serve no weights"},
        main_u32_row("--weights-chunk", &wc->chunk_size, ST_MANIFEST_CHUNK_MIN,
                     ST_MANIFEST_CHUNK_MAX, "bytes per streamed chunk"),
        {.name = "--cache-dir", .type = ST_OPT_STR, .dest = &wc->cache_dir, .value = "DIR",
         .help = "where the manifest is cached"},
        main_u32_row("--fetch-timeout-ms", &c->fetch_timeout_ms, 100, UINT32_MAX,
                     "the Prepare of a streaming worker"),
        {.name = "--test-corrupt-chunk", .type = ST_OPT_I64, .dest = &wc->test_corrupt_chunk,
         .min = 0, .max = UINT32_MAX, .value = "K",
         .help = "tests only: chunk K is sent corrupted once"},
        {.name = "--test-refuse-chunks", .type = ST_OPT_I64, .dest = &wc->test_refuse_after,
         .min = 0, .max = UINT32_MAX, .value = "N",
         .help = "tests only: refuse chunk requests after N served"},
    };
    const st_opt_spec spec = {.synopsis = main_synopsis,
                              .epilogue = main_epilogue,
                              .opts = opts,
                              .n_opts = sizeof opts / sizeof opts[0]};
    bool help;
    if (st_opt_parse(&spec, argc, argv, 1, &help) != ST_OK) {
        fprintf(stderr, "strata-coordinator: %s (see --help)\n", st_errdetail());
        return 2;
    }
    if (help)
        return -1;
    hc->max_body = max_body;
    if (max_tokens != 0) {
        c->max_tokens = max_tokens;
        *max_set = true;
    }
    return 0;
}

/* main_weights_check - completes the weights server's configuration
 * (docs/streaming.md): its default address beside --listen, the default
 * cache directory, the model, the key; 2 on a usage error. */
static int main_weights_check(const st_coord_cfg *c, st_weights_cfg *w, bool none,
                              char def[ST_NET_ADDR_MAX], char cache[PATH_MAX])
{
    if ((w->test_corrupt_chunk >= 0 || w->test_refuse_after >= 0) && !c->test_hooks) {
        fprintf(stderr, "strata-coordinator: --test-corrupt-chunk and --test-refuse-chunks need "
                        "--test-hooks\n");
        return 2;
    }
    if (none)
        return 0;
    if (w->listen == NULL) {
        if (st_weights_default_addr(c->listen, def, ST_NET_ADDR_MAX) != ST_OK) {
            fprintf(stderr, "strata-coordinator: --weights: %s\n", st_errdetail());
            return 2;
        }
        if (c->results != NULL && strcmp(c->results, def) == 0) {
            fprintf(stderr,
                    "strata-coordinator: the weights server's default address %s (the --listen "
                    "port + 1) is the --results address: give --weights ADDR or --no-weights\n",
                    def);
            return 2;
        }
        w->listen = def;
    }
    if (w->cache_dir == NULL && st_cache_dir_default(cache, PATH_MAX) == ST_OK)
        w->cache_dir = cache;
    w->model_path = c->model_path;
    w->key_path = c->key_path;
    w->encrypt = c->encrypt;
    return 0;
}

int main(int argc, char **argv)
{
    st_log_init(NULL);
    if (st_version_asked(argc, argv)) { /* the version flag block (common/base/version.h) */
        st_version_print(stdout, "strata-coordinator");
        return 0;
    }
    st_crash_install("strata-coordinator");
    st_coord_cfg cfg = st_coord_cfg_default();
    uint32_t split[MAX_SPLIT];
    bool max_set = false;
    st_http_cfg hcfg = st_http_cfg_default();
    st_weights_cfg wcfg = {.chunk_size = ST_MANIFEST_CHUNK_DEFAULT,
                           .test_corrupt_chunk = -1,
                           .test_refuse_after = -1};
    bool no_weights = false;
    char wdefault[ST_NET_ADDR_MAX], wcache[PATH_MAX];
    int rc = main_parse(argc, argv, &cfg, split, &max_set, &hcfg, &wcfg, &no_weights);
    if (rc != 0)
        return rc < 0 ? 0 : rc;
    if ((rc = main_weights_check(&cfg, &wcfg, no_weights, wdefault, wcache)) != 0)
        return rc;
    if (cfg.allow_i8 && cfg.wire != ST_WIRE_AUTO) {
        fprintf(stderr,
                "strata-coordinator: --allow-i8 goes with --wire auto (the default): it lets "
                "auto choose i8 per boundary; --wire %s puts %s on every boundary\n",
                st_wire_dtype_name(cfg.wire), st_wire_dtype_name(cfg.wire));
        return 2;
    }
    if ((cfg.i8_gate_top1 > 0 || cfg.i8_gate_hold) && !cfg.test_hooks) {
        fprintf(stderr, "strata-coordinator: --test-i8-gate-top1 and --test-i8-gate-hold need "
                        "--test-hooks\n");
        return 2;
    }
    char gcache[PATH_MAX]; /* the i8 gate's cache: beside the manifest's (i8gate.h) */
    cfg.cache_dir = wcfg.cache_dir;
    if (cfg.cache_dir == NULL && st_cache_dir_default(gcache, sizeof gcache) == ST_OK)
        cfg.cache_dir = gcache;
    if (cfg.model_path == NULL) {
        fprintf(stderr, "strata-coordinator: --model PATH is required (see --help)\n");
        return 2;
    }
    if (!max_set && cfg.max_tokens < cfg.chunk)
        cfg.max_tokens = cfg.chunk;
    if (cfg.max_tokens < cfg.chunk) {
        fprintf(stderr, "strata-coordinator: --max-tokens %u is below --chunk %u\n", cfg.max_tokens,
                cfg.chunk);
        return 2;
    }
    if (cfg.heartbeat_timeout_ms <= cfg.heartbeat_ms) {
        fprintf(stderr,
                "strata-coordinator: --heartbeat-timeout-ms %u must exceed "
                "--heartbeat-ms %u\n",
                cfg.heartbeat_timeout_ms, cfg.heartbeat_ms);
        return 2;
    }
    if (cfg.encrypt && cfg.key_path == NULL) {
        fprintf(stderr, "strata-coordinator: --encrypt needs --cluster-key FILE (`strata keygen "
                        "FILE` makes one)\n");
        return 2;
    }
    if ((cfg.client_keys_path || cfg.admin_key_path) && cfg.key_path == NULL) {
        fprintf(stderr, "strata-coordinator: --client-keys and --admin-key need --cluster-key "
                        "FILE (only the cluster key makes a worker)\n");
        return 2;
    }
    /* keyless still authenticated: on loopback a generated key (exposure.h);
     * a restart on the same address keeps the key its workers hold */
    uint8_t local_key[ST_KEY_BYTES];
    static char kept[ST_LOCAL_KEY_PATH_MAX];
    bool keyed = cfg.key_path != NULL; /* by the operator: protected mode asks this */
    if (cfg.key_path == NULL && cfg.listen != NULL &&
        st_local_key_find(cfg.listen, kept, sizeof kept)) {
        cfg.key_path = kept;
        wcfg.key_path = kept;
    } else if (cfg.key_path == NULL && cfg.listen != NULL && st_is_tcp(cfg.listen) &&
               st_addr_is_local(cfg.listen)) {
        if (sodium_init() < 0) {
            fprintf(stderr, "strata-coordinator: libsodium failed to start\n");
            return 1;
        }
        randombytes_buf(local_key, sizeof local_key);
        cfg.local_key = local_key;
    }
    const char *const lflags[] = {"--listen", "--results", "--weights"};
    const char *const lurls[] = {cfg.listen, cfg.results, no_weights ? NULL : wcfg.listen};
    if (st_listen_check("coordinator", lflags, lurls, sizeof lurls / sizeof lurls[0], keyed,
                        cfg.insecure)) {
        fprintf(stderr, "strata-coordinator: %s\n", st_errdetail());
        return 2;
    }
    if (hcfg.listen != NULL) {
        char url[ST_NET_ADDR_MAX];
        if ((size_t)snprintf(url, sizeof url, ST_TCP_SCHEME "%s", hcfg.listen) >= sizeof url) {
            fprintf(stderr, "strata-coordinator: --http: '%.40s...' is too long\n", hcfg.listen);
            return 2;
        }
        if (st_http_listen_check(url, hcfg.api_key_file != NULL, cfg.insecure)) {
            fprintf(stderr, "strata-coordinator: %s\n", st_errdetail());
            return 2;
        }
        /* a port of the coordinator's own listeners (lurls above): named
         * here, or the gateway's bind fails with no word of who holds it */
        const char *const owners[] = {"control socket", "results socket", "weights server"};
        const char *const setby[] = {"--listen", "--results",
                                     wcfg.listen == wdefault
                                         ? "--weights, default --listen's port + 1"
                                         : "--weights"};
        int k = st_listen_clash(url, lurls, sizeof lurls / sizeof lurls[0]);
        if (k >= 0) {
            fprintf(stderr,
                    "strata-coordinator: --http %s: port taken by this coordinator's %s %s (%s)\n",
                    hcfg.listen, owners[k], lurls[k], setby[k]);
            return 2;
        }
        /* the gateway's requests and status go through the coordinator's
         * attachment (gateway.h): it takes no control slot */
        hcfg.model_path = cfg.model_path;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = main_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    st_coord *c;
    st_err e = st_coord_open(&cfg, &c);
    if (e != ST_OK) {
        fprintf(stderr, "strata-coordinator: %s\n", st_errmsg(e));
        return 1;
    }
    if (cfg.local_key) /* the weights socket is keyed by the generated key too */
        wcfg.key_path = st_coord_key_file(c);
    st_weights *weights = NULL;
    char waddr[ST_NET_ADDR_MAX];
    if (!no_weights && (e = st_weights_open(&wcfg, &weights, waddr, sizeof waddr)) != ST_OK) {
        fprintf(stderr, "strata-coordinator: %s\n", st_errmsg(e));
        st_coord_close(c);
        return 1;
    }
    st_coord_set_weights(c, weights);
    if (weights != NULL) {
        printf("weights on %s\n", waddr);
        fflush(stdout);
    }
    st_http *http = NULL;
    hcfg.gw = st_coord_gateway(c);
    if (hcfg.listen && (e = st_http_open(&hcfg, &http)) != ST_OK) {
        fprintf(stderr, "strata-coordinator: %s\n", st_errmsg(e));
        st_weights_close(weights);
        st_coord_close(c);
        return 1;
    }
    st_coord_run(c, &main_stop);
    st_log(ST_LOG_INFO, "coordinator", "shutting down");
    st_http_close(http);
    /* the release of NNG sockets, bounded (common/base/exit_guard.h): NNG 1.5.2's
     * close can wait forever; st_coord_close's own waits for the last
     * replies take at most 2.3 s */
    st_exit_guard *g = NULL;
    if ((e = st_exit_guard_open("the coordinator's release of its sockets and memory",
                                ST_EXIT_GUARD_DEFAULT_MS, 0, &g)) != ST_OK)
        st_log(ST_LOG_WARN, "coordinator", "%s", st_errmsg(e));
    st_weights_close(weights);
    st_coord_close(c);
    st_exit_guard_close(g);
    sodium_memzero(local_key, sizeof local_key);
    return 0;
}
