/* main.c - `strata-coordinator`: flags, signals, and the event loop.
 *
 * The process prints the addresses it bound ("listening on tcp://...",
 * "results on tcp://...") as its first lines on stdout, then serves until
 * SIGINT or SIGTERM: requests in flight are ended with a clear reason,
 * parked polls answered, sockets closed, exit status 0. A start-up error
 * (bad flag, unreadable model, key file readable by others, address in
 * use) is one line on stderr and exit status 1 (2 for usage errors).
 * Protected mode (common/exposure.h): without --cluster-key, a --listen or
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

#include "common/crash.h"
#include "common/envelope.h"
#include "common/exit_guard.h"
#include "common/exposure.h"
#include "common/log.h"
#include "common/manifest.h"
#include "common/netaddr.h"
#include "common/units.h"
#include "common/version.h"
#include "coordinator/coord.h"
#include "coordinator/http.h"
#include "coordinator/net.h"
#include "coordinator/placement.h"
#include "coordinator/weights.h"

#define MAX_SPLIT 256
/* Control contexts beyond the HTTP lanes' long polls (heartbeats, CLI). */
#define MAIN_BASE_SLOTS 64u
#define MAIN_MAX_BODY ((size_t)1 << 30)
#define MAIN_MAX_DEADLINE_S 3600 /* --http-header-s, --http-body-s */

static volatile sig_atomic_t main_stop;

static void main_on_signal(int sig)
{
    (void)sig;
    main_stop = 1;
}

static void main_usage(FILE *f)
{
    fprintf(f,
            "usage: strata-coordinator --version\n"
            "       strata-coordinator --model PATH [--listen ADDR] [--min-workers N]\n"
            "       [--cluster-key FILE] [--encrypt] [--insecure]\n"
            "       [--wire f32|bf16|f16|i8|auto] [--allow-i8] [--worker-bin PATH] [--zstd]\n"
            "       [--heartbeat-ms N] [--heartbeat-timeout-ms N] [--step-timeout-ms N]\n"
            "       [--prepare-timeout-ms N] [--queue-timeout-ms N] [--chunk N]\n"
            "       [--max-tokens N] [--ctx N] [--max-sessions N] [--max-requests N]\n"
            "       [--client-timeout-ms N] [--session-ttl-ms N] [--pipeline-depth N]\n"
            "       [--split N1,N2,...] [--results ADDR] [--advertise HOST]\n"
            "       [--objective latency|throughput] [--replan-margin F] [--imbalance-ms N]\n"
            "       [--no-imbalance] [--min-samples N] [--replicas] [--test-hooks]\n"
            "       [--test-i8-gate-top1 PCT] [--test-i8-gate-hold FILE]\n"
            "       [--log error|warn|info|debug]\n"
            "       [--http HOST:PORT [--alias NAME] [--chat-template NAME] [--api-key-file FILE]\n"
            "        [--max-body BYTES]\n"
            "        [--http-streams N] [--http-threads N] [--http-max-conns N]\n"
            "        [--http-per-ip N] [--http-timeout-s N] [--http-header-s N]\n"
            "        [--http-body-s N] [--http-ping-s N]\n"
            "        [--rate-rpm N] [--rate-tpm N]\n"
            "        [--rate-table-size N]]\n"
            "       [--client-keys FILE] [--admin-key FILE] [--max-requests-per-client N]\n"
            "       [--max-logits-per-client BYTES] [--max-new-tokens N]\n"
            "       [--weights ADDR | --no-weights] [--weights-chunk BYTES] [--cache-dir DIR]\n"
            "       [--fetch-timeout-ms N] [--test-corrupt-chunk K] [--test-refuse-chunks N]\n"
            "\n"
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
            "every layer boundary against f32; it passes with top-1 agreement >= 90%%.\n"
            "--worker-bin PATH names that strata-worker (default: the one beside this\n"
            "executable, else ../worker/strata-worker from it; none: the gate fails).\n"
            "Its figures are cached beside the\n"
            "manifest (per model file size and mtime). --test-i8-gate-top1 (another\n"
            "threshold) and --test-i8-gate-hold (the gate starts once FILE exists) need\n"
            "--test-hooks.\n");
}

/* main_u32 - a decimal in [lo, hi] into *out; 0 on success. */
static int main_u32(const char *flag, const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*s == '\0' || *s == '-' || *end != '\0' || errno != 0 || v < lo || v > hi) {
        fprintf(stderr, "strata-coordinator: %s: '%s' is not an integer in [%u, %u]\n", flag, s, lo,
                hi);
        return 1;
    }
    *out = (uint32_t)v;
    return 0;
}

static int main_split(const char *s, uint32_t *v, size_t *n)
{
    *n = 0;
    const char *p = s;
    for (;;) {
        char *end;
        errno = 0;
        unsigned long long x = strtoull(p, &end, 10);
        if (end == p || *p == '-' || errno != 0 || x > (1u << 20) ||
            (*end != ',' && *end != '\0') || *n == MAX_SPLIT) {
            fprintf(stderr,
                    "strata-coordinator: --split: '%s' is not a list of layer counts "
                    "like 3,3 (at most %d)\n",
                    s, MAX_SPLIT);
            return 1;
        }
        v[(*n)++] = (uint32_t)x;
        if (*end == '\0')
            return 0;
        p = end + 1;
    }
}

static const char *main_value(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, "strata-coordinator: %s needs a value\n", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

/* main_http_flag - f v if it is an HTTP flag: 1 if it was (*bad set on a
 * bad value), 0 if not. */
static int main_http_flag(const char *f, const char *v, st_http_cfg *h, int *bad)
{
    uint32_t x = 0;
    if (strcmp(f, "--http") == 0) {
        h->listen = v;
    } else if (strcmp(f, "--alias") == 0) {
        h->alias = v;
    } else if (strcmp(f, "--chat-template") == 0) {
        h->chat_template = v;
    } else if (strcmp(f, "--api-key-file") == 0) {
        h->api_key_file = v;
    } else if (strcmp(f, "--max-body") == 0) {
        *bad = main_u32(f, v, 1024, (uint32_t)MAIN_MAX_BODY, &x);
        h->max_body = x;
    } else if (strcmp(f, "--http-streams") == 0) {
        *bad = main_u32(f, v, 1, ST_HTTP_MAX_STREAMS, &h->streams);
    } else if (strcmp(f, "--http-threads") == 0) {
        *bad = main_u32(f, v, 1, 64, &h->threads);
    } else if (strcmp(f, "--http-max-conns") == 0) {
        *bad = main_u32(f, v, 1, 1000000, &h->max_conns);
    } else if (strcmp(f, "--http-per-ip") == 0) {
        *bad = main_u32(f, v, 0, 1000000, &h->per_ip_conns);
    } else if (strcmp(f, "--http-header-s") == 0) {
        *bad = main_u32(f, v, 0, MAIN_MAX_DEADLINE_S, &h->header_s);
    } else if (strcmp(f, "--http-body-s") == 0) {
        *bad = main_u32(f, v, 0, MAIN_MAX_DEADLINE_S, &h->body_s);
    } else if (strcmp(f, "--http-timeout-s") == 0) {
        *bad = main_u32(f, v, 1, 3600, &h->timeout_s);
    } else if (strcmp(f, "--http-ping-s") == 0) {
        *bad = main_u32(f, v, 1, 3600, &h->ping_s);
    } else if (strcmp(f, "--rate-rpm") == 0) {
        *bad = main_u32(f, v, 0, UINT32_MAX, &h->limits.rpm);
    } else if (strcmp(f, "--rate-tpm") == 0) {
        *bad = main_u32(f, v, 0, UINT32_MAX, &h->limits.tpm);
    } else if (strcmp(f, "--rate-table-size") == 0) {
        *bad = main_u32(f, v, 1, 1u << 22, &h->rate_table);
    } else {
        return 0;
    }
    return 1;
}

/* main_weights_flag - f v if it is a weights-server flag (weights.h,
 * docs/streaming.md): 1 if it was (*bad set on a bad value), 0 if not. */
static int main_weights_flag(const char *f, const char *v, st_weights_cfg *w, st_coord_cfg *c,
                             int *bad)
{
    uint32_t x = 0;
    if (strcmp(f, "--weights") == 0) {
        w->listen = v;
        *bad = !st_tcp_split(v, NULL);
        if (*bad)
            fprintf(stderr, "strata-coordinator: --weights '%s': a tcp://HOST:PORT address\n", v);
    } else if (strcmp(f, "--weights-chunk") == 0) {
        *bad = main_u32(f, v, ST_MANIFEST_CHUNK_MIN, ST_MANIFEST_CHUNK_MAX, &w->chunk_size);
    } else if (strcmp(f, "--cache-dir") == 0) {
        w->cache_dir = v;
    } else if (strcmp(f, "--fetch-timeout-ms") == 0) {
        *bad = main_u32(f, v, 100, UINT32_MAX, &c->fetch_timeout_ms);
    } else if (strcmp(f, "--test-corrupt-chunk") == 0) {
        *bad = main_u32(f, v, 0, UINT32_MAX, &x);
        w->test_corrupt_chunk = x;
    } else if (strcmp(f, "--test-refuse-chunks") == 0) {
        *bad = main_u32(f, v, 0, UINT32_MAX, &x);
        w->test_refuse_after = x;
    } else {
        return 0;
    }
    return 1;
}

static int main_parse(int argc, char **argv, st_coord_cfg *c, uint32_t *split, bool *max_set,
                      st_http_cfg *hc, st_weights_cfg *wc, bool *no_weights)
{
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = NULL;
        int bad = 0;
        if (strcmp(f, "-h") == 0 || strcmp(f, "--help") == 0) {
            main_usage(stdout);
            return -1;
        }
        if (strcmp(f, "--zstd") == 0) {
            c->zstd = true;
            continue;
        }
        if (strcmp(f, "--no-imbalance") == 0) {
            c->no_imbalance = true;
            continue;
        }
        if (strcmp(f, "--replicas") == 0) {
            c->replicas = true;
            continue;
        }
        if (strcmp(f, "--encrypt") == 0) {
            c->encrypt = true;
            continue;
        }
        if (strcmp(f, "--insecure") == 0) {
            c->insecure = true;
            continue;
        }
        if (strcmp(f, "--no-weights") == 0) {
            *no_weights = true;
            continue;
        }
        if (strcmp(f, "--allow-i8") == 0) { /* after the accuracy gate (i8gate.h) */
            c->allow_i8 = true;
            continue;
        }
        if (strcmp(f, "--test-hooks") == 0) { /* tests only: the step gate (hold.h) */
            c->test_hooks = true;
            continue;
        }
        if (f[0] != '-' || (v = main_value(argc, argv, &i)) == NULL) {
            if (f[0] != '-')
                fprintf(stderr, "strata-coordinator: unexpected argument '%s'\n", f);
            return 2;
        }
        if (main_http_flag(f, v, hc, &bad) || main_weights_flag(f, v, wc, c, &bad)) {
            if (bad)
                return 2;
        } else if (strcmp(f, "--model") == 0) {
            c->model_path = v;
        } else if (strcmp(f, "--listen") == 0) {
            c->listen = v;
        } else if (strcmp(f, "--results") == 0) {
            c->results = v;
        } else if (strcmp(f, "--advertise") == 0) {
            c->advertise = v;
        } else if (strcmp(f, "--cluster-key") == 0) {
            c->key_path = v;
            /* ---- credentials and per-client caps (issue 12) ---- */
        } else if (strcmp(f, "--client-keys") == 0) {
            c->client_keys_path = v;
        } else if (strcmp(f, "--admin-key") == 0) {
            c->admin_key_path = v;
        } else if (strcmp(f, "--max-requests-per-client") == 0) {
            bad = main_u32(f, v, 1, 65536, &c->max_requests_per_client);
        } else if (strcmp(f, "--max-logits-per-client") == 0) {
            if (st_parse_bytes(v, &c->max_logits_per_client) != ST_OK ||
                c->max_logits_per_client == 0) {
                fprintf(stderr,
                        "strata-coordinator: --max-logits-per-client: '%s' is not a "
                        "positive byte count\n",
                        v);
                return 2;
            }
        } else if (strcmp(f, "--max-new-tokens") == 0) {
            bad = main_u32(f, v, 1, 1u << 24, &c->max_new_tokens);
            /* ---- end of credentials ---- */
        } else if (strcmp(f, "--log") == 0) {
            st_log_init(v);
        } else if (strcmp(f, "--wire") == 0) {
            /* auto: each boundary its own dtype (docs/wire-format.md 6.1) */
            if (strcmp(v, st_wire_dtype_name(ST_WIRE_AUTO)) == 0) {
                c->wire = ST_WIRE_AUTO;
            } else if (st_wire_dtype_from_name(v, &c->wire) != ST_OK) {
                fprintf(stderr,
                        "strata-coordinator: --wire: '%s' is not f32, bf16, f16, i8 or "
                        "auto\n",
                        v);
                return 2;
            }
        } else if (strcmp(f, "--test-i8-gate-top1") == 0) { /* needs --test-hooks */
            char *end;
            errno = 0;
            c->i8_gate_top1 = strtod(v, &end);
            if (*end != '\0' || errno != 0 || !(c->i8_gate_top1 > 0 && c->i8_gate_top1 <= 100)) {
                fprintf(stderr,
                        "strata-coordinator: --test-i8-gate-top1: '%s' is not a percent "
                        "in (0, 100]\n",
                        v);
                return 2;
            }
        } else if (strcmp(f, "--test-i8-gate-hold") == 0) { /* needs --test-hooks */
            c->i8_gate_hold = v;
        } else if (strcmp(f, "--worker-bin") == 0) { /* runs the i8 gate (i8gate.h) */
            c->worker_bin = v;
        } else if (strcmp(f, "--min-workers") == 0) {
            bad = main_u32(f, v, 1, 256, &c->min_workers);
        } else if (strcmp(f, "--heartbeat-ms") == 0) {
            bad = main_u32(f, v, 10, 600000, &c->heartbeat_ms);
        } else if (strcmp(f, "--heartbeat-timeout-ms") == 0) {
            bad = main_u32(f, v, 20, 3600000, &c->heartbeat_timeout_ms);
        } else if (strcmp(f, "--step-timeout-ms") == 0) {
            bad = main_u32(f, v, 10, 3600000, &c->step_timeout_ms);
        } else if (strcmp(f, "--prepare-timeout-ms") == 0) {
            bad = main_u32(f, v, 100, 3600000, &c->prepare_timeout_ms);
        } else if (strcmp(f, "--queue-timeout-ms") == 0) {
            bad = main_u32(f, v, 100, 3600000, &c->queue_timeout_ms);
        } else if (strcmp(f, "--chunk") == 0) {
            bad = main_u32(f, v, 1, 4096, &c->chunk);
        } else if (strcmp(f, "--max-tokens") == 0) {
            bad = main_u32(f, v, 1, 4096, &c->max_tokens);
            *max_set = true;
        } else if (strcmp(f, "--ctx") == 0) {
            bad = main_u32(f, v, 2, 1u << 24, &c->n_ctx);
        } else if (strcmp(f, "--max-sessions") == 0) {
            bad = main_u32(f, v, 1, 4096, &c->max_sessions);
        } else if (strcmp(f, "--max-requests") == 0) {
            bad = main_u32(f, v, 1, 65536, &c->max_requests);
        } else if (strcmp(f, "--client-timeout-ms") == 0) {
            bad = main_u32(f, v, 0, 3600000, &c->client_timeout_ms);
            if (!bad && c->client_timeout_ms != 0 && c->client_timeout_ms < 1000) {
                fprintf(stderr, "strata-coordinator: --client-timeout-ms: use 0 (never) or at "
                                "least 1000\n");
                bad = 1;
            }
        } else if (strcmp(f, "--session-ttl-ms") == 0) {
            bad = main_u32(f, v, 100, 86400000, &c->session_ttl_ms);
        } else if (strcmp(f, "--pipeline-depth") == 0) {
            bad = main_u32(f, v, 0, 16, &c->pipeline_depth);
        } else if (strcmp(f, "--objective") == 0) {
            st_place_objective ob;
            if (st_place_objective_from_name(v, &ob) != ST_OK) {
                fprintf(stderr,
                        "strata-coordinator: --objective: '%s' is not latency or "
                        "throughput\n",
                        v);
                return 2;
            }
            c->objective = v;
        } else if (strcmp(f, "--replan-margin") == 0) {
            char *end;
            errno = 0;
            double m = strtod(v, &end);
            if (*v == '\0' || *end != '\0' || errno != 0 || !(m >= 0 && m < 1)) {
                fprintf(stderr,
                        "strata-coordinator: --replan-margin: '%s' is not a fraction in "
                        "[0, 1)\n",
                        v);
                return 2;
            }
            c->replan_margin = m;
            c->replan_margin_set = true;
        } else if (strcmp(f, "--imbalance-ms") == 0) {
            bad = main_u32(f, v, 100, 3600000, &c->imbalance_ms);
        } else if (strcmp(f, "--min-samples") == 0) {
            bad = main_u32(f, v, 1, 100000, &c->min_samples);
        } else if (strcmp(f, "--split") == 0) {
            bad = main_split(v, split, &c->n_split);
            c->split = split;
        } else {
            fprintf(stderr, "strata-coordinator: unknown flag '%s'\n", f);
            main_usage(stderr);
            return 2;
        }
        if (bad)
            return 2;
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
    if (st_version_asked(argc, argv)) { /* the version flag block (common/version.h) */
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
        fprintf(stderr, "strata-coordinator: --model PATH is required\n");
        main_usage(stderr);
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
    uint8_t key[ST_KEY_BYTES];
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
        /* room for every lane's long poll, with the parking limit of api.c
         * (three quarters of the slots) still leaving the base free */
        uint32_t slots = MAIN_BASE_SLOTS + 2 * hcfg.streams;
        cfg.slots = slots < ST_NET_MAX_SLOTS ? slots : ST_NET_MAX_SLOTS;
        hcfg.model_path = cfg.model_path;
        hcfg.coord_addr = ST_NET_INPROC_URL;
        hcfg.encrypt = cfg.encrypt;
        if (cfg.key_path) {
            st_err ke = st_key_load(cfg.key_path, key);
            if (ke != ST_OK) {
                fprintf(stderr, "strata-coordinator: %s\n", st_errmsg(ke));
                return 1;
            }
            hcfg.cluster_key = key;
        } else if (cfg.local_key) {
            hcfg.cluster_key = cfg.local_key;
        }
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
    if (hcfg.listen && (e = st_http_open(&hcfg, &http)) != ST_OK) {
        fprintf(stderr, "strata-coordinator: %s\n", st_errmsg(e));
        st_weights_close(weights);
        st_coord_close(c);
        return 1;
    }
    st_coord_run(c, &main_stop);
    st_log(ST_LOG_INFO, "coordinator", "shutting down");
    st_http_close(http);
    /* the release of NNG sockets, bounded (common/exit_guard.h): NNG 1.5.2's
     * close can wait forever; st_coord_close's own waits for the last
     * replies take at most 2.3 s */
    st_exit_guard *g = NULL;
    if ((e = st_exit_guard_open("the coordinator's release of its sockets and memory",
                                ST_EXIT_GUARD_DEFAULT_MS, 0, &g)) != ST_OK)
        st_log(ST_LOG_WARN, "coordinator", "%s", st_errmsg(e));
    st_weights_close(weights);
    st_coord_close(c);
    st_exit_guard_close(g);
    sodium_memzero(key, sizeof key);
    sodium_memzero(local_key, sizeof local_key);
    return 0;
}
