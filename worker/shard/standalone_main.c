/* standalone_main.c - `strata-worker --standalone`: the flags, signals and
 * life cycle of a sidecar shard server (worker/shard/standalone.h). Signals are
 * handled as in worker_main.c: blocked in every thread, waited for with
 * sigwait() by main. Protected mode (common/net/exposure.h): beyond loopback
 * a server needs --cluster-key or --insecure. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/exit_guard.h"
#include "common/net/exposure.h"
#include "common/base/log.h"
#include "common/wire/wire.h"
#include "worker/shard/standalone.h"

#define SM_MAX_SESSIONS 4096
#define SM_MAX_TTL_S 86400
#define SM_MAX_STEP_TOKENS 4096

static void sm_usage(FILE *f)
{
    fprintf(f,
            "usage: strata-worker --standalone --layers A:B --model PATH [--listen ADDR]\n"
            "       [--cluster-key FILE] [--encrypt] [--insecure] [--threads N]\n"
            "       [--sessions N] [--ttl-s N] [--ctx N] [--max-tokens N]\n"
            "       [--dtypes f32,bf16,f16,i8] [--kernels ref|auto] [--log LEVEL]\n"
            "\n"
            "Serves layers [A, B) of the model to clients (the strata.h library,\n"
            "`strata run --shards`) without a coordinator (docs/shards.md).\n"
            "  --listen ADDR       default tcp://127.0.0.1:0; beyond loopback it needs\n"
            "                      --cluster-key or --insecure\n"
            "  --sessions N        KV caches at most (default %d; LRU eviction)\n"
            "  --ttl-s N           forget sessions idle for N s (default %d)\n"
            "  --ctx N             positions per session (default: the model's)\n"
            "  --max-tokens N      tokens per step at most (default %d)\n"
            "  --dtypes LIST       wire dtypes accepted (default all four)\n"
            "\n"
            "Prints `listening on tcp://HOST:PORT` on its first line.\n",
            ST_STANDALONE_SESSIONS_DEFAULT, ST_STANDALONE_TTL_DEFAULT_S,
            ST_STANDALONE_MAX_TOKENS_DEFAULT);
}

static int sm_long(const char *flag, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || errno != 0 || v < lo || v > hi) {
        fprintf(stderr, "strata-worker: %s '%s': an integer in %ld..%ld is required\n", flag, s, lo,
                hi);
        return -1;
    }
    *out = v;
    return 0;
}

/* sm_layers - "A:B" with 0 <= A < B. */
static int sm_layers(const char *v, st_standalone_cfg *c)
{
    char *end;
    errno = 0;
    long a = strtol(v, &end, 10);
    if (end == v || *end != ':' || errno != 0 || a < 0)
        goto bad;
    const char *b0 = end + 1;
    long b = strtol(b0, &end, 10);
    if (end == b0 || *end != '\0' || errno != 0 || b <= a)
        goto bad;
    c->first = a;
    c->last = b;
    return 0;
bad:
    fprintf(stderr, "strata-worker: --layers '%s': A:B with 0 <= A < B is required\n", v);
    return -1;
}

/* sm_dtypes - a comma-separated list of wire dtype names into a mask. */
static int sm_dtypes(const char *v, uint32_t *mask)
{
    *mask = 0;
    char name[16];
    for (const char *p = v; *p != '\0';) {
        size_t n = strcspn(p, ",");
        st_wire_dtype d;
        if (n == 0 || n >= sizeof name)
            goto bad;
        memcpy(name, p, n);
        name[n] = '\0';
        if (st_wire_dtype_from_name(name, &d) != ST_OK)
            goto bad;
        *mask |= 1u << d;
        p += n + (p[n] == ',');
    }
    if (*mask != 0)
        return 0;
bad:
    fprintf(stderr, "strata-worker: --dtypes '%s': names among f32, bf16, f16, i8\n", v);
    return -1;
}

/* sm_parse - 0 to run, 1 after --help, 2 on a bad flag (message printed). */
static int sm_parse(int argc, char **argv, st_standalone_cfg *c, const char **level, bool *insecure)
{
    memset(c, 0, sizeof *c);
    c->model = getenv("STRATA_MODEL");
    c->listen = "tcp://127.0.0.1:0";
    c->first = c->last = -1;
    c->max_sessions = ST_STANDALONE_SESSIONS_DEFAULT;
    c->ttl_s = ST_STANDALONE_TTL_DEFAULT_S;
    c->max_tokens = ST_STANDALONE_MAX_TOKENS_DEFAULT;
    c->dtype_mask = (1u << ST_WIRE_DT_COUNT) - 1;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v;
        long n;
        if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) {
            sm_usage(stdout);
            return 1;
        }
        bool *const sw[] = {NULL, &c->encrypt, insecure}; /* the switches, by name below */
        const char *const sw_name[] = {"--standalone", "--encrypt", "--insecure"};
        size_t k = 0;
        while (k < sizeof sw / sizeof sw[0] && strcmp(f, sw_name[k]) != 0)
            k++;
        if (k < sizeof sw / sizeof sw[0]) {
            if (sw[k] != NULL)
                *sw[k] = true;
            continue;
        }
        if (i + 1 >= argc || argv[i + 1][0] == '\0') {
            fprintf(stderr,
                    "strata-worker: %s: unknown, or it needs a value (see --standalone "
                    "--help)\n",
                    f);
            return 2;
        }
        v = argv[++i];
        if (strcmp(f, "--layers") == 0) {
            if (sm_layers(v, c))
                return 2;
        } else if (strcmp(f, "--model") == 0) {
            c->model = v;
        } else if (strcmp(f, "--listen") == 0) {
            c->listen = v;
        } else if (strcmp(f, "--cluster-key") == 0) {
            c->key_file = v;
        } else if (strcmp(f, "--log") == 0) {
            *level = v;
        } else if (strcmp(f, "--kernels") == 0) {
            if (strcmp(v, "ref") != 0 && strcmp(v, "auto") != 0) {
                fprintf(stderr, "strata-worker: --kernels '%s': ref or auto\n", v);
                return 2;
            }
            c->force_ref = strcmp(v, "ref") == 0;
        } else if (strcmp(f, "--dtypes") == 0) {
            if (sm_dtypes(v, &c->dtype_mask))
                return 2;
        } else if (strcmp(f, "--threads") == 0) {
            if (sm_long(f, v, 1, 1024, &n))
                return 2;
            c->threads = (int)n;
        } else if (strcmp(f, "--sessions") == 0) {
            if (sm_long(f, v, 1, SM_MAX_SESSIONS, &n))
                return 2;
            c->max_sessions = (uint32_t)n;
        } else if (strcmp(f, "--ttl-s") == 0) {
            if (sm_long(f, v, 1, SM_MAX_TTL_S, &n))
                return 2;
            c->ttl_s = (uint32_t)n;
        } else if (strcmp(f, "--ctx") == 0) {
            if (sm_long(f, v, 1, 1L << 24, &n))
                return 2;
            c->n_ctx = n;
        } else if (strcmp(f, "--max-tokens") == 0) {
            if (sm_long(f, v, 1, SM_MAX_STEP_TOKENS, &n))
                return 2;
            c->max_tokens = n;
        } else {
            fprintf(stderr, "strata-worker: unknown argument '%s' (see --standalone --help)\n", f);
            return 2;
        }
    }
    if (c->model == NULL || c->model[0] == '\0' || c->first < 0) {
        fprintf(stderr, "strata-worker: --standalone needs --layers A:B and --model PATH\n");
        return 2;
    }
    if (c->encrypt && c->key_file == NULL) {
        fprintf(stderr, "strata-worker: --encrypt needs --cluster-key FILE\n");
        return 2;
    }
    return 0;
}

void st_standalone_block_signals(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, set, NULL); /* inherited by every thread */
    signal(SIGPIPE, SIG_IGN);
}

int st_standalone_main(int argc, char **argv)
{
    st_standalone_cfg cfg;
    const char *level = NULL;
    bool insecure = false;
    int r = sm_parse(argc, argv, &cfg, &level, &insecure);
    if (r != 0)
        return r == 1 ? 0 : 2;
    st_log_init(level != NULL ? level : getenv("STRATA_LOG") != NULL ? NULL : "info");
    const char *const lflag = "--listen";
    if (st_listen_check("shard", &lflag, &cfg.listen, 1, cfg.key_file != NULL, insecure)) {
        fprintf(stderr, "strata-worker: %s\n", st_errdetail());
        return 2;
    }
    sigset_t set;
    st_standalone_block_signals(&set);
    st_standalone *s;
    st_err e = st_standalone_open(&cfg, &s);
    if (e == ST_OK && (e = st_standalone_start(s)) != ST_OK)
        st_standalone_close(s);
    if (e != ST_OK) {
        fprintf(stderr, "strata-worker: %s\n", st_errmsg(e));
        return 1;
    }
    printf("listening on %s\n", st_standalone_url(s));
    fflush(stdout);
    int sig = 0;
    while (sigwait(&set, &sig) != 0)
        ;
    st_log(ST_LOG_INFO, "shard", "%s: finishing the current request and exiting", strsignal(sig));
    /* its socket closes first, so no reply leaves after this point: the
     * release is bounded (common/base/exit_guard.h: NNG 1.5.2's close can wait
     * forever) */
    st_exit_guard *g = NULL;
    st_err ge = st_exit_guard_open("the shard server's release of its socket and memory",
                                   ST_EXIT_GUARD_DEFAULT_MS, 0, &g);
    if (ge != ST_OK)
        st_log(ST_LOG_WARN, "shard", "%s", st_errmsg(ge));
    st_standalone_close(s);
    st_exit_guard_close(g);
    return 0;
}
