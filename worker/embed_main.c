/* embed_main.c - `strata-embed`: the flags, signals and life cycle of the
 * embedding and head service (worker/embed_http.h, docs/shards.md).
 * Signals as in worker_main.c: blocked everywhere, waited for by main.
 * Protected mode (common/exposure.h): without --api-key-file an --http
 * host beyond loopback needs --insecure, as the coordinator's --http; the
 * NNG side (--listen) is keyed with --cluster-key as shard servers are.
 * The HTTP flags are the coordinator's (docs/http-api.md). */
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/crash.h"
#include "common/exposure.h"
#include "common/http_rate.h"
#include "common/log.h"
#include "common/netaddr.h"
#include "common/units.h"
#include "common/version.h"
#include "common/wire.h"
#include "worker/embed_http.h"
#include "worker/standalone.h"

#define EM_HOST_MAX 64
#define EM_URL_MAX 96
#define EM_MAX_HTTP_THREADS 64u
#define EM_MAX_CONNS 1000000u
#define EM_MAX_TIMEOUT_S 3600u

/* The numeric HTTP flags: name, bounds, where the value goes. */
typedef struct em_u32_flag {
    const char *name;
    uint32_t min, max;
    size_t off; /* in st_embed_cfg */
} em_u32_flag;

static const em_u32_flag em_u32_flags[] = {
    {"--http-threads", 1, EM_MAX_HTTP_THREADS, offsetof(st_embed_cfg, threads)},
    {"--http-max-conns", 1, EM_MAX_CONNS, offsetof(st_embed_cfg, max_conns)},
    {"--http-per-ip", 0, EM_MAX_CONNS, offsetof(st_embed_cfg, per_ip_conns)},
    {"--http-timeout-s", 1, EM_MAX_TIMEOUT_S, offsetof(st_embed_cfg, timeout_s)},
    {"--rate-rpm", 0, UINT32_MAX, offsetof(st_embed_cfg, limits.rpm)},
    {"--rate-tpm", 0, UINT32_MAX, offsetof(st_embed_cfg, limits.tpm)},
    {"--rate-table-size", 1, ST_HTTP_RATE_MAX_TABLE, offsetof(st_embed_cfg, rate_table)},
};

/* em_u32 - f v if f is a numeric HTTP flag: 1 when set, -1 when v is out
 * of its range or not a number, 0 when f is not one. */
static int em_u32(const char *f, const char *v, st_embed_cfg *cfg)
{
    for (size_t i = 0; i < sizeof em_u32_flags / sizeof em_u32_flags[0]; i++) {
        const em_u32_flag *d = &em_u32_flags[i];
        if (strcmp(f, d->name) != 0)
            continue;
        char *end;
        errno = 0;
        unsigned long long x = strtoull(v, &end, 10);
        if (end == v || *end != '\0' || v[0] == '-' || errno != 0 || x < d->min || x > d->max)
            return -1;
        uint32_t u = (uint32_t)x;
        memcpy((char *)cfg + d->off, &u, sizeof u);
        return 1;
    }
    return 0;
}

static void em_usage(FILE *f)
{
    fprintf(f, "usage: strata-embed --version\n"
               "       strata-embed --model PATH --http HOST:PORT [--listen ADDR]\n"
               "       [--cluster-key FILE [--encrypt]] [--max-body BYTES] [--threads N]\n"
               "       [--api-key-file FILE] [--rate-rpm N] [--rate-tpm N] [--rate-table-size N]\n"
               "       [--http-threads N] [--http-max-conns N] [--http-per-ip N]\n"
               "       [--http-timeout-s N] [--kernels ref|auto] [--insecure] [--log LEVEL]\n"
               "\n"
               "Serves the token embedding and the output head of the model (only those\n"
               "tensors and the tokenizer are loaded): POST /v1/embed, /v1/logits,\n"
               "/v1/tokenize, /v1/detokenize; GET /v1/embeddings/ID, /metrics (docs/shards.md).\n"
               "  --http HOST:PORT   an IPv4 address and port (0 picks one); beyond loopback\n"
               "                     it needs --api-key-file or --insecure\n"
               "  --api-key-file, --rate-*, --http-*: as the coordinator's (docs/http-api.md);\n"
               "                     --rate-tpm counts rows (ids embedded, states through\n"
               "                     the head)\n"
               "  --listen ADDR      also answer the client library (libstrata) over NNG;\n"
               "                     beyond loopback it needs --cluster-key or --insecure\n"
               "  --max-body BYTES   larger request bodies get 413 (default 1M)\n"
               "Prints `http on http://HOST:PORT` on its first line, then with --listen\n"
               "`listening on tcp://HOST:PORT`.\n");
}

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
    if (st_version_asked(argc, argv)) { /* the version flag block (common/version.h) */
        st_version_print(stdout, "strata-embed");
        return 0;
    }
    st_crash_install("strata-embed");
    const char *model = getenv("STRATA_MODEL"), *http = NULL, *level = NULL, *listen = NULL,
               *key_file = NULL;
    bool insecure = false, force_ref = false, encrypt = false;
    int threads = 0;
    uint64_t max_body = ST_EMBED_MAX_BODY_DEFAULT;
    st_embed_cfg hc = st_embed_cfg_default();
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) {
            em_usage(stdout);
            return 0;
        }
        if (strcmp(f, "--insecure") == 0 || strcmp(f, "--encrypt") == 0) {
            *(strcmp(f, "--insecure") == 0 ? &insecure : &encrypt) = true;
            continue;
        }
        if (i + 1 >= argc || argv[i + 1][0] == '\0') {
            fprintf(stderr, "strata-embed: %s: unknown, or it needs a value (see --help)\n", f);
            return 2;
        }
        const char *v = argv[++i];
        char *end;
        int nf = em_u32(f, v, &hc);
        if (nf > 0)
            continue;
        if (strcmp(f, "--model") == 0) {
            model = v;
        } else if (strcmp(f, "--http") == 0) {
            http = v;
        } else if (strcmp(f, "--listen") == 0) {
            listen = v;
        } else if (strcmp(f, "--api-key-file") == 0) {
            hc.api_key_file = v;
        } else if (strcmp(f, "--cluster-key") == 0) {
            key_file = v;
        } else if (strcmp(f, "--log") == 0) {
            level = v;
        } else if (strcmp(f, "--kernels") == 0 && (!strcmp(v, "ref") || !strcmp(v, "auto"))) {
            force_ref = strcmp(v, "ref") == 0;
        } else if (strcmp(f, "--threads") == 0 && (threads = (int)strtol(v, &end, 10)) > 0 &&
                   *end == '\0') {
            continue;
        } else if (strcmp(f, "--max-body") == 0 && st_parse_bytes(v, &max_body) == ST_OK &&
                   max_body > 0) {
            continue;
        } else {
            fprintf(stderr, "strata-embed: %s '%s': unknown or invalid (see --help)\n", f, v);
            return 2;
        }
    }
    char host[EM_HOST_MAX], url[EM_URL_MAX];
    int port = 0;
    if (model == NULL || http == NULL || em_hostport(http, host, &port) != 0 ||
        (encrypt && key_file == NULL)) {
        fprintf(stderr, "strata-embed: --model PATH and --http HOST:PORT are required (and "
                        "--encrypt needs --cluster-key)\n");
        return 2;
    }
    st_log_init(level != NULL ? level : getenv("STRATA_LOG") != NULL ? NULL : "info");
    snprintf(url, sizeof url, ST_TCP_SCHEME "%s:%d", host, port);
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
