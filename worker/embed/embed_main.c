/* embed_main.c - `strata-embed`: the flags, signals and life cycle of the
 * embedding and head service (worker/embed/embed_http.h, docs/shards.md).
 * Signals as in worker_main.c: blocked everywhere, waited for by main.
 * Protected mode (common/net/exposure.h): without --api-key-file an --http
 * host beyond loopback needs --insecure, as the coordinator's --http; the
 * NNG side (--listen) is keyed with --cluster-key as shard servers are.
 * The HTTP flags are the coordinator's (docs/http-api.md). */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/crash.h"
#include "common/net/exposure.h"
#include "common/http/http_rate.h"
#include "common/base/log.h"
#include "common/base/opt.h"
#include "common/net/netaddr.h"
#include "common/base/units.h"
#include "common/base/version.h"
#include "common/wire/wire.h"
#include "worker/embed/embed_http.h"
#include "worker/shard/standalone.h"

#define EM_HOST_MAX 64
#define EM_URL_MAX 96
_Static_assert(ST_TCP_ADDR_SIZE(EM_HOST_MAX) <= EM_URL_MAX, "tcp://HOST:PORT of --http fits");
#define EM_MAX_HTTP_THREADS 64u
#define EM_MAX_CONNS 1000000u
#define EM_MAX_TIMEOUT_S 3600u

static const char em_synopsis[] =
    "strata-embed --version\n"
    "       strata-embed --model PATH --http HOST:PORT [--listen ADDR]\n"
    "       [--cluster-key FILE [--encrypt]] [--max-body BYTES] [--threads N]\n"
    "       [--api-key-file FILE] [--rate-rpm N] [--rate-tpm N] [--rate-table-size N]\n"
    "       [--http-threads N] [--http-max-conns N] [--http-per-ip N]\n"
    "       [--http-timeout-s N] [--kernels ref|auto] [--insecure] [--log LEVEL]\n"
    "\n"
    "Serves the token embedding and the output head of the model (only those\n"
    "tensors and the tokenizer are loaded): POST /v1/embed, /v1/logits,\n"
    "/v1/tokenize, /v1/detokenize; GET /v1/embeddings/ID, /metrics (docs/shards.md).\n"
    "--api-key-file, --rate-*, --http-*: as the coordinator's (docs/http-api.md);\n"
    "--rate-tpm counts rows (ids embedded, states through the head).";

static const char em_epilogue[] =
    "Prints `http on http://HOST:PORT` on its first line, then with --listen\n"
    "`listening on tcp://HOST:PORT`.\n";

static const char *const em_kernels[] = {"ref", "auto", NULL};

/* em_hostport - splits "HOST:PORT". */
static int em_hostport(const char *v, char host[EM_HOST_MAX], int *port)
{
    st_hostport hp;
    long p;
    if (!st_hostport_split(v, &hp) || hp.host_len == 0 || hp.host_len >= EM_HOST_MAX ||
        !st_port_parse(hp.port, ST_PORT_MAX, &p))
        return -1;
    memcpy(host, hp.host, hp.host_len);
    host[hp.host_len] = '\0';
    *port = (int)p;
    return 0;
}

int main(int argc, char **argv)
{
    if (st_version_asked(argc, argv)) { /* the version flag block (common/base/version.h) */
        st_version_print(stdout, "strata-embed");
        return 0;
    }
    st_crash_install("strata-embed");
    const char *model = getenv("STRATA_MODEL"), *http = NULL, *level = NULL, *listen = NULL,
               *key_file = NULL, *kernels = "auto";
    bool insecure = false, encrypt = false;
    int threads = 0;
    uint64_t max_body = ST_EMBED_MAX_BODY_DEFAULT;
    st_embed_cfg hc = st_embed_cfg_default();
    const st_opt opts[] = {
        {.name = "--model", .type = ST_OPT_STR, .dest = &model, .value = "PATH",
         .help = "the GGUF model (default: $STRATA_MODEL)"},
        {.name = "--http", .type = ST_OPT_STR, .dest = &http, .value = "HOST:PORT",
         .help = "an IPv4 address and port (0 picks one); beyond loopback\n"
                 "it needs --api-key-file or --insecure"},
        {.name = "--listen", .type = ST_OPT_STR, .dest = &listen, .value = "ADDR",
         .help = "also answer the client library (libstrata) over NNG;\n"
                 "beyond loopback it needs --cluster-key or --insecure"},
        st_opt_cluster_key(&key_file),
        st_opt_encrypt(&encrypt),
        {.name = "--max-body", .type = ST_OPT_SIZE, .dest = &max_body, .umin = 1,
         .umax = UINT64_MAX, .value = "BYTES",
         .help = "larger request bodies get 413 (default 1M)"},
        st_opt_threads(&threads, INT_MAX),
        {.name = "--api-key-file", .type = ST_OPT_STR, .dest = &hc.api_key_file, .value = "FILE",
         .help = "the API keys (docs/http-api.md)"},
        {.name = "--rate-rpm", .type = ST_OPT_U32, .dest = &hc.limits.rpm, .min = 0,
         .max = UINT32_MAX, .value = "N", .help = "requests per minute (0: no limit)"},
        {.name = "--rate-tpm", .type = ST_OPT_U32, .dest = &hc.limits.tpm, .min = 0,
         .max = UINT32_MAX, .value = "N", .help = "rows per minute (0: no limit)"},
        {.name = "--rate-table-size", .type = ST_OPT_U32, .dest = &hc.rate_table, .min = 1,
         .max = ST_HTTP_RATE_MAX_TABLE, .value = "N",
         .help = "identities the rate limiter remembers"},
        {.name = "--http-threads", .type = ST_OPT_U32, .dest = &hc.threads, .min = 1,
         .max = EM_MAX_HTTP_THREADS, .value = "N", .help = "HTTP threads"},
        {.name = "--http-max-conns", .type = ST_OPT_U32, .dest = &hc.max_conns, .min = 1,
         .max = EM_MAX_CONNS, .value = "N", .help = "connections at once"},
        {.name = "--http-per-ip", .type = ST_OPT_U32, .dest = &hc.per_ip_conns, .min = 0,
         .max = EM_MAX_CONNS, .value = "N", .help = "connections per client address (0: no limit)"},
        {.name = "--http-timeout-s", .type = ST_OPT_U32, .dest = &hc.timeout_s, .min = 1,
         .max = EM_MAX_TIMEOUT_S, .value = "N", .help = "an idle connection is closed after N s"},
        {.name = "--kernels", .type = ST_OPT_CHOICE, .dest = &kernels, .choices = em_kernels,
         .value = "ref|auto", .help = "scalar reference kernels, or the best (default auto)"},
        st_opt_insecure(&insecure),
        /* not the shared st_opt_log: an unknown level is passed on to
         * st_log_init (the level stays warn), as before the table */
        {.name = "--log", .type = ST_OPT_STR, .dest = &level, .value = "LEVEL",
         .help = "error, warn, info (default) or debug; or $STRATA_LOG"},
    };
    const st_opt_spec spec = {.synopsis = em_synopsis,
                              .epilogue = em_epilogue,
                              .opts = opts,
                              .n_opts = sizeof opts / sizeof opts[0],
                              .empty_is_missing = true};
    bool help;
    if (st_opt_parse(&spec, argc, argv, 1, &help) != ST_OK) {
        fprintf(stderr, "strata-embed: %s (see --help)\n", st_errdetail());
        return 2;
    }
    if (help)
        return 0;
    const bool force_ref = strcmp(kernels, "ref") == 0;
    char host[EM_HOST_MAX], url[EM_URL_MAX];
    int port = 0;
    if (model == NULL || http == NULL || em_hostport(http, host, &port) != 0 ||
        (encrypt && key_file == NULL)) {
        fprintf(stderr, "strata-embed: --model PATH and --http HOST:PORT are required (and "
                        "--encrypt needs --cluster-key)\n");
        return 2;
    }
    st_log_init(level != NULL ? level : getenv("STRATA_LOG") != NULL ? NULL : "info");
    st_tcp_format(host, strlen(host), port, url, sizeof url); /* fits: EM_URL_MAX */
    const char *const flag = "--http", *urlp = url, *lflag = "--listen";
    if (st_listen_check("embed", &flag, &urlp, 1, hc.api_key_file != NULL, insecure)) {
        fprintf(stderr, "strata-embed: %s (for --http the key is --api-key-file)\n",
                st_errdetail());
        return 2;
    }
    if (listen != NULL &&
        st_listen_check("embed", &lflag, &listen, 1, key_file != NULL, insecure)) {
        fprintf(stderr, "strata-embed: %s\n", st_errdetail());
        return 2;
    }
    sigset_t set;
    st_standalone_block_signals(&set);
    st_ends *ends = NULL;
    st_embed_srv *srv = NULL;
    int bound = 0;
    st_standalone *nng = NULL;
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    st_err e = st_ends_open(model, threads, force_ref, true, true, &ends);
    if (e == ST_OK) {
        hc.host = host;
        hc.port = port;
        hc.max_body = (size_t)max_body;
        e = st_embed_srv_open(ends, &lock, &hc, &srv, &bound);
    }
    if (e == ST_OK && listen != NULL) {
        st_standalone_cfg c = {.listen = listen,
                               .key_file = key_file,
                               .encrypt = encrypt,
                               .force_ref = force_ref,
                               .max_sessions = 1,
                               .max_tokens = ST_STANDALONE_MAX_TOKENS_DEFAULT,
                               .dtype_mask = 1u << ST_WIRE_F32,
                               .ends = ends,
                               .lock = &lock};
        if ((e = st_standalone_open(&c, &nng)) == ST_OK && (e = st_standalone_start(nng)))
            st_standalone_close(nng);
    }
    if (e != ST_OK) {
        fprintf(stderr, "strata-embed: %s\n", st_errmsg(e));
        st_embed_srv_close(srv);
        st_ends_close(ends);
        return 1;
    }
    printf("http on http://%s:%d\n", host, bound);
    if (nng != NULL)
        printf("listening on %s\n", st_standalone_url(nng));
    fflush(stdout);
    int sig = 0;
    while (sigwait(&set, &sig) != 0)
        ;
    st_log(ST_LOG_INFO, "embed", "%s: exiting", strsignal(sig));
    st_standalone_close(nng);
    st_embed_srv_close(srv);
    st_ends_close(ends);
    return 0;
}
