/* worker_main.c - `strata-worker`: flags, signals, and the daemon's life
 * cycle (docs/worker.md).
 *
 * Signals: SIGINT and SIGTERM are blocked in every thread before any is
 * created (NNG's, the pool's, the daemon's), and main() waits for them
 * with sigwait(), so no handler runs in an arbitrary thread and shutdown
 * is ordinary code: the data thread finishes its batch, the control thread
 * sends Leave, the sockets are closed, and main returns 0. The release
 * after Leave runs under an exit guard (common/exit_guard.h): NNG 1.5.2's
 * close can wait forever, and the guard then ends the process with 0. SIGPIPE is
 * ignored. SIGUSR1 is the daemon's own request to leave (a completed
 * drain, daemon.h): the same shutdown follows. This is the only file that
 * ends the process. While st_daemon_open runs, a start-up watch thread takes
 * SIGINT and SIGTERM instead (wm_watch). Protected mode (common/exposure.h): without a cluster
 * key, a --listen beyond loopback is refused unless --insecure. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/crash.h"
#include "common/exit_guard.h"
#include "common/exposure.h"
#include "common/log.h"
#include "common/units.h"
#include "common/version.h"
#include "common/wire.h"
#include "worker/daemon.h"
#include "worker/standalone.h"
#include "worker/wire_gate_main.h"

static void wm_usage(FILE *f)
{
    fprintf(f, "usage: strata-worker --version\n"
               "       strata-worker --wire-gate MODEL [--threads N] [--log LEVEL]\n"
               "       strata-worker --coordinator ADDR [--model PATH] [--listen ADDR]\n"
               "       [--advertise ADDR] [--control-port N] [--advertise-control ADDR]\n"
               "       [--memory BYTES] [--threads N] [--name NAME]\n"
               "       [--cluster-key FILE] [--encrypt] [--insecure] [--heartbeat-ms N]\n"
               "       [--throttle F]\n"
               "       [--throttle-file PATH] [--spare] [--stay-after-drain] [--probe-s N]\n"
               "       [--no-probe] [--wire-accept LIST] [--kernels ref|auto] [--log LEVEL]\n"
               "       [--weights-from ADDR[,ADDR...]] [--cache-dir DIR] [--max-fetch-rate BYTES]\n"
               "       [--serve-chunks ADDR]\n"
               "\n"
               "  --coordinator ADDR  the coordinator's control address, tcp://HOST:PORT\n"
               "                      (default: $STRATA_COORDINATOR)\n"
               "  --model PATH        the GGUF model (default: $STRATA_MODEL); only the\n"
               "                      tensors of the stage the plan gives are loaded. Without\n"
               "                      it, the stage's weights are streamed (docs/streaming.md)\n"
               "  --weights-from A    without --model: weights servers, tcp:// addresses\n"
               "                      separated by commas (default: the coordinator's host and\n"
               "                      port + 1)\n"
               "  --cache-dir DIR     without --model: the verified chunks (default\n"
               "                      $XDG_CACHE_HOME/strata or ~/.cache/strata)\n"
               "  --max-fetch-rate B  cap on the fetch, bytes per second (suffixes k M G)\n"
               "  --serve-chunks ADDR serve verified chunks to other workers' --weights-from on\n"
               "                      tcp://HOST:PORT: those of its cache, or its --model file\n"
               "  --listen ADDR       data-plane listen address (default tcp://127.0.0.1:0);\n"
               "                      the control socket listens on the same host, port 0.\n"
               "                      Beyond loopback it needs --cluster-key or --insecure\n"
               "  --advertise ADDR    data address announced to the coordinator (default: the\n"
               "                      bound address, with 127.0.0.1 for 0.0.0.0)\n"
               "  --control-port N    the control socket's port on the --listen host (default\n"
               "                      0: any)\n"
               "  --advertise-control ADDR\n"
               "                      control address announced to the coordinator and the\n"
               "                      other workers' probes (default: the data address's host,\n"
               "                      the bound control port)\n"
               "  --memory BYTES      memory budget for weights + KV, suffixes k M G T\n"
               "                      (default: MemAvailable)\n"
               "  --threads N         compute threads (default: the cores)\n"
               "  --name NAME         name shown by `strata status` (default: HOST-PID)\n"
               "  --cluster-key FILE  32-byte key (mode 0600); authenticates every frame\n"
               "                      (`strata keygen FILE` makes one)\n"
               "  --encrypt           seal every frame with XChaCha20-Poly1305 (needs the key;\n"
               "                      every member of the cluster must use it)\n"
               "  --insecure          listen beyond loopback without a key (logs a warning)\n"
               "  --heartbeat-ms N    heartbeat interval until the coordinator sets one\n"
               "                      (default 1000)\n"
               "  --throttle F        test only: look F times slower (F >= 1, default 1)\n"
               "  --throttle-file P   test only: read F from P at every heartbeat\n"
               "  --spare             join without wanting a stage\n"
               "  --stay-after-drain  once drained, stay joined as a spare (default: leave and\n"
               "                      exit 0 when the plan without it is committed)\n"
               "  --probe-s N         re-measure each link to another worker every N s\n"
               "                      (default 60; 0: once per peer)\n"
               "  --no-probe          do not measure links (the coordinator assumes them)\n"
               "  --wire-accept LIST  boundary dtypes it accepts, e.g. f16,bf16 (default:\n"
               "                      f32,f16,bf16,i8); the coordinator never sends it another\n"
               "  --kernels ref|auto  scalar reference kernels, or the best (default auto)\n"
               "  --log LEVEL         error, warn, info (default) or debug; or $STRATA_LOG\n"
               "  --test-hooks        test only: allow --test-fetch-pause-after N (stop fetching\n"
               "                      after N chunks until shut down) and --test-serve-corrupt\n"
               "                      (the chunk server flips a bit of every chunk) and\n"
               "                      --test-fetch-call-ms N (a fetch request's wait, not 30 s)\n"
               "                      and --test-speed B (announce B bytes/s for every dtype,\n"
               "                      suffixes k M G, instead of the start-up measurement)\n"
               "                      and --test-hang-release (after Leave, the release of\n"
               "                      sockets and memory never ends: the exit guard's case)\n"
               "\n"
               "Prints `listening on tcp://HOST:PORT` (data) and `control on tcp://HOST:PORT`\n"
               "on its first two lines. SIGINT/SIGTERM: finish the batch, leave, exit 0.\n"
               "Drained (`strata drain`): the same, by itself, unless --stay-after-drain.\n"
               "\n"
               "--wire-gate MODEL runs the i8 accuracy gate on MODEL (the whole model, i8 at\n"
               "every layer boundary against f32, docs/wire-format.md 6.1) and prints its\n"
               "figures as one line of JSON; exit 0 when they were computed, 1 when it could\n"
               "not run. The coordinator runs it for --allow-i8 (its --worker-bin).\n");
}

/* wm_value - the value after flag argv[*i], or NULL with a message. */
static const char *wm_value(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc || argv[*i + 1][0] == '\0') {
        fprintf(stderr, "strata-worker: %s needs a value\n", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

static int wm_long(const char *flag, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end != '\0' || errno != 0 || v < lo || v > hi) {
        fprintf(stderr, "strata-worker: %s '%s': an integer in %ld..%ld is required\n", flag, s, lo,
                hi);
        return -1;
    }
    *out = v;
    return 0;
}

/* wm_parse - 0 to run, 1 after --help, 2 on a bad flag (message printed). */
/* wm_fetch_flag - f v if it is a weight-streaming flag (docs/streaming.md):
 * 1 if it was, 2 on a bad value (message printed), 0 if not. */
static int wm_fetch_flag(const char *f, const char *v, st_worker_cfg *c)
{
    long n;
    if (strcmp(f, "--weights-from") == 0) {
        c->weights_from = v;
    } else if (strcmp(f, "--cache-dir") == 0) {
        c->cache_dir = v;
    } else if (strcmp(f, "--max-fetch-rate") == 0) {
        uint64_t r;
        st_err e = st_parse_bytes(v, &r);
        if (e != ST_OK || r == 0) {
            fprintf(stderr,
                    "strata-worker: --max-fetch-rate '%s': bytes per second above 0 "
                    "(%s)\n",
                    v, e != ST_OK ? st_errdetail() : "0");
            return 2;
        }
        c->max_fetch_rate = (double)r;
    } else if (strcmp(f, "--serve-chunks") == 0) {
        c->serve_chunks = v;
    } else if (strcmp(f, "--test-fetch-pause-after") == 0) {
        if (wm_long(f, v, 0, LONG_MAX, &n))
            return 2;
        c->test_fetch_pause_after = n;
    } else if (strcmp(f, "--test-fetch-call-ms") == 0) {
        if (wm_long(f, v, 1, INT_MAX, &n))
            return 2;
        c->test_fetch_call_ms = (int)n;
    } else {
        return 0;
    }
    return 1;
}

static int wm_parse(int argc, char **argv, st_worker_cfg *c, const char **log_level, bool *insecure)
{
    memset(c, 0, sizeof *c);
    c->coordinator = getenv("STRATA_COORDINATOR");
    c->model = getenv("STRATA_MODEL");
    c->listen = "tcp://127.0.0.1:0";
    c->heartbeat_ms = 1000;
    c->throttle = 1.0;
    c->probe_s = 60;
    c->test_fetch_pause_after = -1;
    bool test_hooks = false;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = NULL;
        long n;
        if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) {
            wm_usage(stdout);
            return 1;
        }
        if (strcmp(f, "--spare") == 0) {
            c->spare = true;
            continue;
        }
        if (strcmp(f, "--stay-after-drain") == 0) {
            c->stay_after_drain = true;
            continue;
        }
        if (strcmp(f, "--no-probe") == 0) {
            c->no_probe = true;
            continue;
        }
        if (strcmp(f, "--encrypt") == 0) {
            c->encrypt = true;
            continue;
        }
        if (strcmp(f, "--insecure") == 0) {
            *insecure = true;
            continue;
        }
        if (strcmp(f, "--test-hooks") == 0) {
            test_hooks = true;
            continue;
        }
        if (strcmp(f, "--test-serve-corrupt") == 0) {
            c->test_serve_corrupt = true;
            continue;
        }
        if (strcmp(f, "--test-hang-release") == 0) {
            c->test_hang_release = true;
            continue;
        }
        static const char *const valued[] = {"--coordinator",
                                             "--model",
                                             "--listen",
                                             "--advertise",
                                             "--control-port",
                                             "--advertise-control",
                                             "--memory",
                                             "--threads",
                                             "--name",
                                             "--cluster-key",
                                             "--heartbeat-ms",
                                             "--throttle",
                                             "--throttle-file",
                                             "--kernels",
                                             "--log",
                                             "--probe-s",
                                             "--weights-from",
                                             "--cache-dir",
                                             "--max-fetch-rate",
                                             "--test-fetch-pause-after",
                                             "--serve-chunks",
                                             "--wire-accept",
                                             "--test-fetch-call-ms",
                                             "--test-speed",
                                             NULL};
        bool known = false;
        for (int k = 0; valued[k] != NULL; k++)
            known = known || strcmp(f, valued[k]) == 0;
        if (!known) {
            fprintf(stderr, "strata-worker: unknown argument '%s' (see --help)\n", f);
            return 2;
        }
        if ((v = wm_value(argc, argv, &i)) == NULL)
            return 2;
        int ff = wm_fetch_flag(f, v, c);
        if (ff == 2)
            return 2;
        if (ff == 1) {
            continue;
        } else if (strcmp(f, "--coordinator") == 0) {
            c->coordinator = v;
        } else if (strcmp(f, "--model") == 0) {
            c->model = v;
        } else if (strcmp(f, "--listen") == 0) {
            c->listen = v;
        } else if (strcmp(f, "--advertise") == 0) {
            c->advertise = v;
        } else if (strcmp(f, "--advertise-control") == 0) {
            c->advertise_control = v;
        } else if (strcmp(f, "--control-port") == 0) {
            if (wm_long(f, v, 0, ST_DAEMON_PORT_MAX, &n))
                return 2;
            c->control_port = (int)n;
        } else if (strcmp(f, "--name") == 0) {
            if (strlen(v) > 100) {
                fprintf(stderr, "strata-worker: --name is longer than 100 bytes\n");
                return 2;
            }
            c->name = v;
        } else if (strcmp(f, "--cluster-key") == 0) {
            c->key_file = v;
        } else if (strcmp(f, "--test-speed") == 0) {
            uint64_t r;
            st_err e = st_parse_bytes(v, &r);
            if (e != ST_OK || r == 0) {
                fprintf(stderr, "strata-worker: --test-speed '%s': bytes per second above 0 (%s)\n",
                        v, e != ST_OK ? st_errdetail() : "0");
                return 2;
            }
            c->test_speed = (double)r;
        } else if (strcmp(f, "--throttle-file") == 0) {
            c->throttle_file = v;
        } else if (strcmp(f, "--log") == 0) {
            if (!st_log_level_from_name(v, NULL)) {
                fprintf(stderr, "strata-worker: --log '%s': " ST_LOG_LEVEL_NAMES "\n", v);
                return 2;
            }
            *log_level = v;
        } else if (strcmp(f, "--kernels") == 0) {
            if (strcmp(v, "ref") != 0 && strcmp(v, "auto") != 0) {
                fprintf(stderr, "strata-worker: --kernels '%s': ref or auto\n", v);
                return 2;
            }
            c->force_ref = strcmp(v, "ref") == 0;
        } else if (strcmp(f, "--memory") == 0) {
            st_err e = st_parse_bytes(v, &c->memory);
            if (e == ST_OK && (c->memory < (1u << 20) || c->memory > (1ull << 50)))
                e = st_errorf(ST_EINVAL, "%s is outside 1 MiB..1 PiB", v);
            if (e != ST_OK) {
                fprintf(stderr, "strata-worker: --memory: %s\n", st_errdetail());
                return 2;
            }
        } else if (strcmp(f, "--threads") == 0) {
            if (wm_long(f, v, 1, 1024, &n))
                return 2;
            c->threads = (int)n;
        } else if (strcmp(f, "--probe-s") == 0) {
            if (wm_long(f, v, 0, 86400, &n))
                return 2;
            c->probe_s = (double)n;
        } else if (strcmp(f, "--heartbeat-ms") == 0) {
            if (wm_long(f, v, 10, 600000, &n))
                return 2;
            c->heartbeat_ms = (uint32_t)n;
        } else if (strcmp(f, "--wire-accept") == 0) {
            if (st_wire_mask_parse(v, &c->wire_accept) != ST_OK) {
                fprintf(stderr, "strata-worker: --wire-accept: %s\n", st_errdetail());
                return 2;
            }
        } else if (strcmp(f, "--throttle") == 0) {
            char *end;
            errno = 0;
            double t = strtod(v, &end);
            if (*end != '\0' || errno != 0 || !isfinite(t) || t < 1.0 || t > 1000.0) {
                fprintf(stderr, "strata-worker: --throttle '%s': a number in [1, 1000]\n", v);
                return 2;
            }
            c->throttle = t;
        }
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
    if (st_version_asked(argc, argv)) { /* the version flag block (common/version.h) */
        st_version_print(stdout, "strata-worker");
        return 0;
    }
    st_crash_install("strata-worker");
    /* --standalone: a sidecar shard server without a coordinator, with its
     * own flags (worker/standalone_main.c, docs/shards.md); --wire-gate: the
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
