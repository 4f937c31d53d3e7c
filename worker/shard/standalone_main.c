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

#include "common/net/netaddr.h"
#include "common/base/exit_guard.h"
#include "common/net/exposure.h"
#include "common/base/log.h"
#include "common/base/opt.h"
#include "common/wire/wire.h"
#include "worker/shard/standalone.h"

#define SM_MAX_SESSIONS 4096
#define SM_MAX_TTL_S 86400
#define SM_MAX_STEP_TOKENS 4096
#define SM_MAX_THREADS 1024
#define SM_MAX_CTX (1L << 24)
#define SM_HELP_MAX 80 /* a help line with a default filled in */

static const char sm_synopsis[] =
    "strata-worker --standalone --layers A:B --model PATH [--listen ADDR]\n"
    "       [--cluster-key FILE] [--encrypt] [--insecure] [--threads N]\n"
    "       [--sessions N] [--ttl-s N] [--ctx N] [--cache-type f32|f16|q8_0] [--max-tokens N]\n"
    "       [--dtypes f32,bf16,f16,i8] [--kernels ref|auto] [--log LEVEL]\n"
    "\n"
    "Serves layers [A, B) of the model to clients (the strata.h library,\n"
    "`strata run --shards`) without a coordinator (docs/shards.md).";

static const char sm_epilogue[] = "Prints `listening on tcp://HOST:PORT` on its first line.\n";

static const char *const sm_kernels[] = {"ref", "auto", NULL};

/* sm_layers - "A:B" with 0 <= A < B, into the st_standalone_cfg dest. */
static st_err sm_layers(const char *v, void *dest)
{
    st_standalone_cfg *c = dest;
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
    return ST_OK;
bad:
    return st_errorf(ST_EINVAL, "'%s': A:B with 0 <= A < B is required", v);
}

/* sm_dtypes - --dtypes LIST: st_wire_mask_parse's list (as the worker's
 * --wire-accept) into the uint32_t mask dest. */
static st_err sm_dtypes(const char *v, void *dest) { return st_wire_mask_parse(v, dest); }

/* sm_parse - 0 to run, 1 after --help, 2 on a bad flag (message printed). */
static int sm_parse(int argc, char **argv, st_standalone_cfg *c, const char **level, bool *insecure)
{
    memset(c, 0, sizeof *c);
    c->model = getenv("STRATA_MODEL");
    c->listen = ST_TCP_LOOPBACK_ANY;
    c->first = c->last = -1;
    c->max_sessions = ST_STANDALONE_SESSIONS_DEFAULT;
    c->ttl_s = ST_STANDALONE_TTL_DEFAULT_S;
    c->max_tokens = ST_STANDALONE_MAX_TOKENS_DEFAULT;
    c->dtype_mask = (1u << ST_WIRE_DT_COUNT) - 1;
    const char *kernels = "auto";
    char help_sessions[SM_HELP_MAX], help_ttl[SM_HELP_MAX], help_tokens[SM_HELP_MAX];
    snprintf(help_sessions, sizeof help_sessions,
             "KV caches at most (default %d; LRU eviction)", ST_STANDALONE_SESSIONS_DEFAULT);
    snprintf(help_ttl, sizeof help_ttl, "forget sessions idle for N s (default %d)",
             ST_STANDALONE_TTL_DEFAULT_S);
    snprintf(help_tokens, sizeof help_tokens, "tokens per step at most (default %d)",
             ST_STANDALONE_MAX_TOKENS_DEFAULT);
    const st_opt opts[] = {
        {.name = "--standalone", .type = ST_OPT_FLAG, .help = "this mode"},
        {.name = "--layers", .type = ST_OPT_FN, .dest = c, .fn = sm_layers, .value = "A:B",
         .help = "the layers served, [A, B)"},
        {.name = "--model", .type = ST_OPT_STR, .dest = &c->model, .value = "PATH",
         .help = "the GGUF model (default: $STRATA_MODEL)"},
        {.name = "--listen", .type = ST_OPT_STR, .dest = &c->listen, .value = "ADDR",
         .help = "default tcp://127.0.0.1:0; beyond loopback it needs\n"
                 "--cluster-key or --insecure"},
        st_opt_cluster_key(&c->key_file),
        st_opt_encrypt(&c->encrypt),
        st_opt_insecure(insecure),
        st_opt_threads(&c->threads, SM_MAX_THREADS),
        {.name = "--sessions", .type = ST_OPT_U32, .dest = &c->max_sessions, .min = 1,
         .max = SM_MAX_SESSIONS, .value = "N", .help = help_sessions},
        {.name = "--ttl-s", .type = ST_OPT_U32, .dest = &c->ttl_s, .min = 1, .max = SM_MAX_TTL_S,
         .value = "N", .help = help_ttl},
        {.name = "--ctx", .type = ST_OPT_I64, .dest = &c->n_ctx, .min = 1, .max = SM_MAX_CTX,
         .value = "N", .help = "positions per session (default: the model's)"},
        st_opt_cache_type(&c->cache_type),
        {.name = "--max-tokens", .type = ST_OPT_I64, .dest = &c->max_tokens, .min = 1,
         .max = SM_MAX_STEP_TOKENS, .value = "N", .help = help_tokens},
        {.name = "--dtypes", .type = ST_OPT_FN, .dest = &c->dtype_mask, .fn = sm_dtypes,
         .value = "LIST", .help = "wire dtypes accepted (default all four)"},
        {.name = "--kernels", .type = ST_OPT_CHOICE, .dest = &kernels, .choices = sm_kernels,
         .value = "ref|auto", .help = "scalar reference kernels, or the best (default auto)"},
        /* not the shared st_opt_log: an unknown level is passed on to
         * st_log_init (the level stays warn), as before the table */
        {.name = "--log", .type = ST_OPT_STR, .dest = level, .value = "LEVEL",
         .help = "error, warn, info (default) or debug; or $STRATA_LOG"},
    };
    const st_opt_spec spec = {.synopsis = sm_synopsis,
                              .epilogue = sm_epilogue,
                              .opts = opts,
                              .n_opts = sizeof opts / sizeof opts[0],
                              .empty_is_missing = true};
    bool help;
    if (st_opt_parse(&spec, argc, argv, 1, &help) != ST_OK) {
        fprintf(stderr, "strata-worker: %s (see --standalone --help)\n", st_errdetail());
        return 2;
    }
    if (help)
        return 1;
    c->force_ref = strcmp(kernels, "ref") == 0;
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
