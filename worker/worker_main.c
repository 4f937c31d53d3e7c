/* worker_main.c - `strata-worker`: flags, signals, and the daemon's life
 * cycle (docs/worker.md).
 *
 * Signals: SIGINT and SIGTERM are blocked in every thread before any is
 * created (NNG's, the pool's, the daemon's), and main() waits for them
 * with sigwait(), so no handler runs in an arbitrary thread and shutdown
 * is ordinary code: the data thread finishes its batch, the control thread
 * sends Leave, the sockets are closed, and main returns 0. The release
 * after Leave runs under an exit guard (common/base/exit_guard.h): NNG 1.5.2's
 * close can wait forever, and the guard then ends the process with 0. SIGPIPE is
 * ignored. SIGUSR1 is the daemon's own request to leave (a completed
 * drain, daemon.h): the same shutdown follows. This is the only file that
 * ends the process. While st_daemon_open runs, a start-up watch thread takes
 * SIGINT and SIGTERM instead (wm_watch). Protected mode (common/net/exposure.h): without a cluster
 * key, a --listen beyond loopback is refused unless --insecure. */
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/net/netaddr.h"
#include "common/base/crash.h"
#include "common/base/exit_guard.h"
#include "common/net/exposure.h"
#include "common/base/log.h"
#include "common/base/opt.h"
#include "common/base/units.h"
#include "common/base/version.h"
#include "common/wire/wire.h"
#include "worker/daemon/daemon.h"
#include "worker/shard/standalone.h"
#include "worker/wire_gate_main.h"

/* wm_bytes_rate - a byte count above 0 per second (common/base/units.h), into
 * *(double *)dest. */
static st_err wm_bytes_rate(const char *v, void *dest)
{
    uint64_t r;
    st_err e = st_parse_bytes(v, &r);
    if (e != ST_OK)
        return e;
    if (r == 0)
        return st_errorf(ST_EINVAL, "'%s': bytes per second above 0 are required", v);
    *(double *)dest = (double)r;
    return ST_OK;
}

static st_err wm_wire_accept(const char *v, void *dest)
{
    return st_wire_mask_parse(v, dest);
}

static const char *const wm_kernels[] = {"ref", "auto", NULL};

#define WM_NAME_MAX 100        /* --name's bytes at most */
#define WM_MEMORY_MIN (1ull << 20)
#define WM_MEMORY_MAX (1ull << 50)
#define WM_THREADS_MAX 1024
#define WM_PROBE_S_MAX 86400
#define WM_HEARTBEAT_MS_MIN 10
#define WM_HEARTBEAT_MS_MAX 600000
#define WM_THROTTLE_MAX 1000.0

static const char wm_synopsis[] =
    "strata-worker --version\n"
    "       strata-worker --wire-gate MODEL [--threads N] [--parent PID] [--log LEVEL]\n"
    "       strata-worker --standalone --layers A:B --model PATH ... (see --standalone --help)\n"
    "       strata-worker --coordinator ADDR [FLAGS]";

static const char wm_epilogue[] =
    "Prints `listening on tcp://HOST:PORT` (data) and `control on tcp://HOST:PORT`\n"
    "on its first two lines. SIGINT/SIGTERM: finish the batch, leave, exit 0.\n"
    "Drained (`strata drain`): the same, by itself, unless --stay-after-drain.\n"
    "\n"
    "--wire-gate MODEL runs the i8 accuracy gate on MODEL (the whole model, i8 at\n"
    "every layer boundary against f32, docs/wire-format.md 6.1) and prints its\n"
    "figures as one line of JSON; exit 0 when they were computed, 1 when it could\n"
    "not run. The coordinator runs it for --allow-i8 (its --worker-bin).\n";

/* wm_parse - the flags into c, *log_level and *insecure: 0 to run, 1
 * after --help, 2 on a bad flag (message printed). */
static int wm_parse(int argc, char **argv, st_worker_cfg *c, const char **log_level, bool *insecure)
{
    memset(c, 0, sizeof *c);
    c->coordinator = getenv("STRATA_COORDINATOR");
    c->model = getenv("STRATA_MODEL");
    c->listen = ST_TCP_LOOPBACK_ANY;
    c->heartbeat_ms = 1000;
    c->throttle = 1.0;
    c->test_fetch_pause_after = -1;
    int probe_s = 60;
    const char *kernels = "auto";
    bool test_hooks = false;
    const st_opt opts[] = {
        {.name = "--coordinator", .type = ST_OPT_STR, .dest = &c->coordinator, .value = "ADDR",
         .help = "the coordinator's control address, tcp://HOST:PORT\n"
                 "(default: $STRATA_COORDINATOR)"},
        {.name = "--model", .type = ST_OPT_STR, .dest = &c->model, .value = "PATH",
         .help = "the GGUF model (default: $STRATA_MODEL); only the\n"
                 "tensors of the stage the plan gives are loaded. Without\n"
                 "it, the stage's weights are streamed (docs/streaming.md)"},
        {.name = "--weights-from", .type = ST_OPT_STR, .dest = &c->weights_from, .value = "A",
         .help = "without --model: weights servers, tcp:// addresses\n"
                 "separated by commas (default: the coordinator's host and\n"
                 "port + 1)"},
        {.name = "--cache-dir", .type = ST_OPT_STR, .dest = &c->cache_dir, .value = "DIR",
         .help = "without --model: the verified chunks (default\n"
                 "$XDG_CACHE_HOME/strata or ~/.cache/strata)"},
        {.name = "--max-fetch-rate", .type = ST_OPT_FN, .dest = &c->max_fetch_rate,
         .fn = wm_bytes_rate, .value = "B",
         .help = "cap on the fetch, bytes per second (suffixes k M G)"},
        {.name = "--serve-chunks", .type = ST_OPT_STR, .dest = &c->serve_chunks, .value = "ADDR",
         .help = "serve verified chunks to other workers' --weights-from on\n"
                 "tcp://HOST:PORT: those of its cache, or its --model file"},
        {.name = "--listen", .type = ST_OPT_STR, .dest = &c->listen, .value = "ADDR",
         .help = "data-plane listen address (default tcp://127.0.0.1:0);\n"
                 "the control socket listens on the same host, port 0.\n"
                 "Beyond loopback it needs --cluster-key or --insecure"},
        {.name = "--advertise", .type = ST_OPT_STR, .dest = &c->advertise, .value = "ADDR",
         .help = "data address announced to the coordinator (default: the\n"
                 "bound address, with 127.0.0.1 for 0.0.0.0)"},
        {.name = "--control-port", .type = ST_OPT_INT, .dest = &c->control_port, .min = 0,
         .max = ST_DAEMON_PORT_MAX, .value = "N",
         .help = "the control socket's port on the --listen host (default\n"
                 "0: any)"},
        {.name = "--advertise-control", .type = ST_OPT_STR, .dest = &c->advertise_control,
         .value = "ADDR",
         .help = "control address announced to the coordinator and the\n"
                 "other workers' probes (default: the data address's host,\n"
                 "the bound control port)"},
        {.name = "--memory", .type = ST_OPT_SIZE, .dest = &c->memory, .umin = WM_MEMORY_MIN,
         .umax = WM_MEMORY_MAX, .value = "BYTES",
         .help = "memory budget for weights + KV, suffixes k M G T, 1M..1P\n"
                 "(default: MemAvailable)"},
        st_opt_threads(&c->threads, WM_THREADS_MAX),
        {.name = "--name", .type = ST_OPT_STR, .dest = &c->name, .value = "NAME",
         .help = "name shown by `strata status` (default: HOST-PID)"},
        st_opt_cluster_key(&c->key_file),
        st_opt_encrypt(&c->encrypt),
        st_opt_insecure(insecure),
        {.name = "--heartbeat-ms", .type = ST_OPT_U32, .dest = &c->heartbeat_ms,
         .min = WM_HEARTBEAT_MS_MIN, .max = WM_HEARTBEAT_MS_MAX, .value = "N",
         .help = "heartbeat interval until the coordinator sets one\n"
                 "(default 1000)"},
        {.name = "--throttle", .type = ST_OPT_DOUBLE, .dest = &c->throttle, .dmin = 1.0,
         .dmax = WM_THROTTLE_MAX, .value = "F",
         .help = "test only: look F times slower (F >= 1, default 1)"},
        {.name = "--throttle-file", .type = ST_OPT_STR, .dest = &c->throttle_file, .value = "P",
         .help = "test only: read F from P at every heartbeat"},
        {.name = "--spare", .type = ST_OPT_FLAG, .dest = &c->spare,
         .help = "join without wanting a stage"},
        {.name = "--stay-after-drain", .type = ST_OPT_FLAG, .dest = &c->stay_after_drain,
         .help = "once drained, stay joined as a spare (default: leave and\n"
                 "exit 0 when the plan without it is committed)"},
        {.name = "--probe-s", .type = ST_OPT_INT, .dest = &probe_s, .min = 0,
         .max = WM_PROBE_S_MAX, .value = "N",
         .help = "re-measure each link to another worker every N s\n"
                 "(default 60; 0: once per peer)"},
        {.name = "--no-probe", .type = ST_OPT_FLAG, .dest = &c->no_probe,
         .help = "do not measure links (the coordinator assumes them)"},
        {.name = "--wire-accept", .type = ST_OPT_FN, .dest = &c->wire_accept,
         .fn = wm_wire_accept, .value = "LIST",
         .help = "boundary dtypes it accepts, e.g. f16,bf16 (default:\n"
                 "f32,f16,bf16,i8); the coordinator never sends it another"},
        {.name = "--kernels", .type = ST_OPT_CHOICE, .dest = &kernels, .choices = wm_kernels,
         .value = "ref|auto", .help = "scalar reference kernels, or the best (default auto)"},
        st_opt_log(log_level),
        {.name = "--test-hooks", .type = ST_OPT_FLAG, .dest = &test_hooks,
         .help = "test only: allow the --test-* flags below"},
        {.name = "--test-fetch-pause-after", .type = ST_OPT_I64,
         .dest = &c->test_fetch_pause_after, .min = 0, .max = INT64_MAX, .value = "N",
         .help = "stop fetching after N chunks until shut down"},
        {.name = "--test-serve-corrupt", .type = ST_OPT_FLAG, .dest = &c->test_serve_corrupt,
         .help = "the chunk server flips a bit of every chunk"},
        {.name = "--test-fetch-call-ms", .type = ST_OPT_INT, .dest = &c->test_fetch_call_ms,
         .min = 1, .max = INT_MAX, .value = "N", .help = "a fetch request's wait, not 30 s"},
        {.name = "--test-speed", .type = ST_OPT_FN, .dest = &c->test_speed, .fn = wm_bytes_rate,
         .value = "B",
         .help = "announce B bytes/s for every dtype, suffixes k M G,\n"
                 "instead of the start-up measurement"},
        {.name = "--test-hang-release", .type = ST_OPT_FLAG, .dest = &c->test_hang_release,
         .help = "after Leave, the release of sockets and memory never\n"
                 "ends: the exit guard's case"},
    };
    const st_opt_spec spec = {.synopsis = wm_synopsis,
                              .epilogue = wm_epilogue,
                              .opts = opts,
                              .n_opts = sizeof opts / sizeof opts[0],
                              .empty_is_missing = true};
    bool help;
    if (st_opt_parse(&spec, argc, argv, 1, &help) != ST_OK) {
        fprintf(stderr, "strata-worker: %s (see --help)\n", st_errdetail());
        return 2;
    }
    if (help)
        return 1;
    c->probe_s = probe_s;
    c->force_ref = strcmp(kernels, "ref") == 0;
    if (c->name != NULL && strlen(c->name) > WM_NAME_MAX) {
        fprintf(stderr, "strata-worker: --name is longer than %d bytes\n", WM_NAME_MAX);
        return 2;
    }
    if (c->coordinator == NULL || c->coordinator[0] == '\0') {
        fprintf(stderr, "strata-worker: --coordinator ADDR is required (see --help)\n");
        return 2;
    }
    if (c->model != NULL && c->model[0] == '\0')
        c->model = NULL; /* an empty $STRATA_MODEL: none */
    if (c->test_serve_corrupt && !test_hooks) {
        fprintf(stderr, "strata-worker: --test-serve-corrupt needs --test-hooks\n");
        return 2;
    }
    if (c->test_fetch_pause_after >= 0 && !test_hooks) {
        fprintf(stderr, "strata-worker: --test-fetch-pause-after needs --test-hooks\n");
        return 2;
    }
    if (c->test_fetch_call_ms > 0 && !test_hooks) {
        fprintf(stderr, "strata-worker: --test-fetch-call-ms needs --test-hooks\n");
        return 2;
    }
    if (c->test_hang_release && !test_hooks) {
        fprintf(stderr, "strata-worker: --test-hang-release needs --test-hooks\n");
        return 2;
    }
    if (c->test_speed > 0 && !test_hooks) {
        fprintf(stderr, "strata-worker: --test-speed needs --test-hooks\n");
        return 2;
    }
    static char local_key[ST_LOCAL_KEY_PATH_MAX]; /* keyless: a local coordinator's key */
    if (c->key_file == NULL && st_local_key_find(c->coordinator, local_key, sizeof local_key)) {
        c->key_file = local_key;
        fprintf(stderr, "strata-worker: no --cluster-key: using the local coordinator's key %s\n",
                local_key);
    }
    if (c->encrypt && c->key_file == NULL) {
        fprintf(stderr, "strata-worker: --encrypt needs --cluster-key FILE (`strata keygen FILE` "
                        "makes one)\n");
        return 2;
    }
    return 0;
}

/* The start-up watch. st_daemon_open may fetch the model's header for
 * long (no --model, no source answering: docs/streaming.md), and main()
 * waits for its signals only after open. Meanwhile this thread waits for
 * SIGINT or SIGTERM and asks the open to stop (st_open_stop_ask); main
 * ends it with WM_WATCH_END once open has returned. SIGUSR2 is blocked in
 * every thread: sent from outside it is ignored. */
#define WM_WATCH_END SIGUSR2

static void *wm_watch(void *arg)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, WM_WATCH_END);
    int sig = 0;
    while (sigwait(&set, &sig) != 0)
        ;
    if (sig != WM_WATCH_END)
        st_open_stop_ask(arg, sig);
    return NULL;
}

int main(int argc, char **argv)
{
    if (st_version_asked(argc, argv)) { /* the version flag block (common/base/version.h) */
        st_version_print(stdout, "strata-worker");
        return 0;
    }
    st_crash_install("strata-worker");
    /* --standalone: a sidecar shard server without a coordinator, with its
     * own flags (worker/shard/standalone_main.c, docs/shards.md); --wire-gate: the
     * i8 accuracy gate's figures, for the coordinator (wire_gate_main.h) */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--standalone") == 0)
            return st_standalone_main(argc, argv);
        if (strcmp(argv[i], "--wire-gate") == 0)
            return st_wire_gate_main(argc, argv);
    }

    st_worker_cfg cfg;
    const char *level = NULL;
    bool insecure = false;
    int r = wm_parse(argc, argv, &cfg, &level, &insecure);
    if (r != 0)
        return r == 1 ? 0 : 2;
    st_log_init(level != NULL ? level : getenv("STRATA_LOG") != NULL ? NULL : "info");
    /* the control socket shares --listen's host */
    const char *const lflags[] = {"--listen", "--serve-chunks"};
    const char *const lurls[] = {cfg.listen, cfg.serve_chunks};
    if (st_listen_check("worker", lflags, lurls, cfg.serve_chunks != NULL ? 2 : 1,
                        cfg.key_file != NULL, insecure)) {
        fprintf(stderr, "strata-worker: %s\n", st_errdetail());
        return 2;
    }

    sigset_t set, all;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1); /* the daemon's own "leave now" (a completed drain) */
    cfg.leave_signal = SIGUSR1;
    all = set;
    sigaddset(&all, WM_WATCH_END); /* only ever sent to the start-up watch */
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* inherited by every thread */
    signal(SIGPIPE, SIG_IGN);

    st_open_stop os = ST_OPEN_STOP_INIT;
    cfg.open_stop = &os;
    pthread_t watch;
    bool watching = pthread_create(&watch, NULL, wm_watch, &os) == 0;
    st_daemon *d;
    st_err e = st_daemon_open(&cfg, &d);
    if (watching) {
        pthread_kill(watch, WM_WATCH_END);
        pthread_join(watch, NULL);
    }
    int asked = st_open_stop_asked(&os);
    if (e != ST_OK && asked != 0 && e == ST_ECANCELED) {
        st_log(ST_LOG_INFO, "worker", "%s during start-up: %s; exit 0", strsignal(asked),
               st_errmsg(e));
        return 0;
    }
    if (e != ST_OK) {
        fprintf(stderr, "strata-worker: %s\n", st_errmsg(e));
        return 1;
    }
    if (asked != 0) { /* came during open, after the header fetch: never joined */
        st_log(ST_LOG_INFO, "worker", "%s during start-up: exit 0 without joining",
               strsignal(asked));
        st_daemon_close(d);
        return 0;
    }
    if ((e = st_daemon_start(d)) != ST_OK) {
        fprintf(stderr, "strata-worker: %s\n", st_errmsg(e));
        st_daemon_close(d);
        return 1;
    }
    int sig = 0;
    const char *why = NULL;
    for (;;) {
        if (sigwait(&set, &sig) != 0)
            continue;
        if (sig != SIGUSR1)
            break;
        if (st_daemon_leaving(d, &why))
            break;
        st_log(ST_LOG_WARN, "worker", "SIGUSR1 ignored: the daemon did not ask to leave");
    }
    if (sig == SIGUSR1)
        st_log(ST_LOG_INFO, "worker", "%s: finishing and leaving; exit 0", why);
    else
        st_log(ST_LOG_INFO, "worker", "%s: finishing the current batch and leaving",
               strsignal(sig));
    st_daemon_shutdown(d); /* the batch finished, Leave sent: the orderly part */
    st_exit_guard *g = NULL;
    e = st_exit_guard_open("the worker's release of its sockets and memory",
                           ST_EXIT_GUARD_DEFAULT_MS, 0, &g);
    if (e != ST_OK) /* the release goes on unguarded */
        st_log(ST_LOG_WARN, "worker", "%s", st_errmsg(e));
    while (cfg.test_hang_release)
        pause(); /* the guard ends the process */
    st_daemon_close(d);
    st_exit_guard_close(g);
    return 0;
}
