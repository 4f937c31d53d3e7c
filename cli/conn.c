/* conn.c - the CLI's connection to a coordinator (see conn.h). */
#include "cli/conn.h"

#include <inttypes.h>
#include <nng/protocol/reqrep0/req.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "common/net/exposure.h"
#include "common/net/netaddr.h"

#define CLI_CONN_MAX_FRAME ((size_t)64 << 20)

#define CLI_CONN_TIMEOUT_MAX_MS (24ll * 3600 * 1000)

size_t cli_conn_rows(cli_conn_opts *c, bool json_ok, st_opt *out)
{
    const st_opt rows[CLI_CONN_ROWS] = {
        {.name = "--coordinator", .type = ST_OPT_STR, .dest = &c->addr, .value = "ADDR",
         .help = "the coordinator, tcp://HOST:PORT (default: $STRATA_COORDINATOR)"},
        {.name = "--cluster-key", .type = ST_OPT_STR, .dest = &c->key, .value = "FILE",
         .help = "the cluster key (may do everything)"},
        {.name = "--admin-key", .type = ST_OPT_STR, .dest = &c->admin_key, .value = "FILE",
         .help = "an admin key (default: $STRATA_ADMIN_KEY)"},
        {.name = "--client-key", .type = ST_OPT_STR, .dest = &c->client_key, .value = "FILE",
         .help = "a client key (default: $STRATA_CLIENT_KEY)"},
        {.name = "--encrypt", .type = ST_OPT_FLAG, .dest = &c->encrypt,
         .help = "seal every frame (needs the key)"},
        {.name = "--timeout-ms", .type = ST_OPT_I64, .dest = &c->timeout_ms, .min = 1,
         .max = CLI_CONN_TIMEOUT_MAX_MS, .value = "N", .help = "the reply's deadline"},
        {.name = "--json", .type = ST_OPT_FLAG, .dest = &c->json, .help = "print JSON"},
    };
    const size_t n = json_ok ? CLI_CONN_ROWS : CLI_CONN_ROWS - 1; /* --json is the last */
    memcpy(out, rows, n * sizeof rows[0]);
    return n;
}

void cli_conn_close(cli_conn *c)
{
    if (c->open)
        nng_close(c->s);
    if (c->env_open)
        st_env_fini(&c->env);
    c->open = c->env_open = false;
}

/* cli_conn_cred - the credential to use: one flag, else one of the
 * environment variables; *role and *path (NULL: none). 0 or 2 (usage). */
static int cli_conn_cred(const cli_conn_opts *o, const char *cmd, st_env_role *role,
                         const char **path)
{
    int flags = (o->key != NULL) + (o->client_key != NULL) + (o->admin_key != NULL);
    if (flags > 1) {
        fprintf(stderr, "strata: %s: give one of --cluster-key, --admin-key and --client-key\n",
                cmd);
        return 2;
    }
    const char *ea = getenv("STRATA_ADMIN_KEY"), *ec = getenv("STRATA_CLIENT_KEY");
    ea = ea && ea[0] ? ea : NULL;
    ec = ec && ec[0] ? ec : NULL;
    if (flags == 0 && ea && ec) {
        fprintf(stderr,
                "strata: %s: both STRATA_ADMIN_KEY and STRATA_CLIENT_KEY are set; unset "
                "one or give a key flag\n",
                cmd);
        return 2;
    }
    *role = ST_ROLE_MEMBER;
    *path = o->key;
    if (o->admin_key || (flags == 0 && ea)) {
        *role = ST_ROLE_ADMIN;
        *path = o->admin_key ? o->admin_key : ea;
    } else if (o->client_key || (flags == 0 && ec)) {
        *role = ST_ROLE_CLIENT;
        *path = o->client_key ? o->client_key : ec;
    }
    return 0;
}

/* cli_conn_key - loads the key of path for role into key; 0 or 1. */
static int cli_conn_key(const char *path, st_env_role role, const char *cmd,
                        uint8_t key[ST_KEY_BYTES])
{
    st_err e;
    if (role == ST_ROLE_MEMBER) {
        if ((e = st_key_load(path, key)) == ST_OK)
            return 0;
    } else {
        uint8_t(*keys)[ST_KEY_BYTES] = NULL;
        size_t n;
        if ((e = st_keyfile_read(path, 1, &keys, &n)) == ST_OK) {
            memcpy(key, keys[0], ST_KEY_BYTES);
            sodium_memzero(keys, sizeof *keys);
            free(keys);
            return 0;
        }
    }
    fprintf(stderr, "strata: %s: %s\n", cmd, st_errmsg(e));
    return 1;
}

/* cl_open - connects to the coordinator (printing the error). */
int cli_conn_open(cli_conn *c, const cli_conn_opts *o, const char *cmd)
{
    memset(c, 0, sizeof *c);
    const char *addr = o->addr ? o->addr : getenv("STRATA_COORDINATOR");
    if (addr == NULL || addr[0] == '\0') {
        fprintf(stderr,
                "strata: %s: no coordinator: give --coordinator ADDR or set "
                "STRATA_COORDINATOR\n",
                cmd);
        return 2;
    }
    st_env_role role;
    const char *path;
    int rc = cli_conn_cred(o, cmd, &role, &path);
    if (rc != 0)
        return rc;
    if (o->encrypt && path == NULL) {
        fprintf(stderr,
                "strata: %s: --encrypt needs a key (--cluster-key, --admin-key or "
                "--client-key FILE)\n",
                cmd);
        return 2;
    }
    char local[ST_LOCAL_KEY_PATH_MAX]; /* keyless: a local coordinator's key (exposure.h) */
    if (path == NULL && st_local_key_find(addr, local, sizeof local)) {
        path = local;
        role = ST_ROLE_MEMBER;
    }
    uint8_t key[ST_KEY_BYTES];
    st_err e;
    if (path && cli_conn_key(path, role, cmd, key))
        return 1;
    if (sodium_init() < 0) {
        fprintf(stderr, "strata: %s: libsodium failed to start\n", cmd);
        return 1;
    }
    uint64_t sender;
    randombytes_buf(&sender, sizeof sender);
    e = st_env_init_cred(&c->env, path ? key : NULL, role, o->encrypt, sender);
    if (e == ST_OK && path == NULL)
        c->env.role = ST_ROLE_OPEN;
    c->env.learn_peer = true; /* bind requests to the coordinator that answered (envelope.h) */
    sodium_memzero(key, sizeof key);
    if (e != ST_OK) {
        fprintf(stderr, "strata: %s: %s\n", cmd, st_errmsg(e));
        return 1;
    }
    c->env_open = true;
    int rv = nng_req0_open(&c->s);
    if (rv != 0) {
        fprintf(stderr, "strata: %s: %s\n", cmd, nng_strerror(rv));
        cli_conn_close(c);
        return 1;
    }
    c->open = true;
    nng_socket_set_ms(c->s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    nng_socket_set_size(c->s, NNG_OPT_RECVMAXSZ, CLI_CONN_MAX_FRAME);
    nng_dialer d;
    if ((rv = nng_dialer_create(&d, c->s, addr)) == 0) {
        if (st_is_tcp(addr))
            nng_dialer_set_bool(d, NNG_OPT_TCP_NODELAY, true);
        rv = nng_dialer_start(d, 0);
    }
    if (rv != 0) {
        fprintf(stderr, "strata: %s: cannot reach the coordinator at %s: %s\n", cmd, addr,
                nng_strerror(rv));
        cli_conn_close(c);
        return 1;
    }
    c->timeout_ms = o->timeout_ms > 0 ? (int)o->timeout_ms : 10000;
    return 0;
}

/* cl_call - one request/reply; prints the error and returns nonzero on
 * failure (an Error reply included). */
int cli_conn_call(cli_conn *c, const Strata__Msg *m, int timeout_ms, Strata__Msg **reply,
                  const char *cmd)
{
    st_err e = st_msg_call(c->s, &c->env, m, timeout_ms, reply);
    if (e != ST_OK) {
        /* a reset or closed connection: the coordinator stopped or restarted
         * (a new one does not know the requests of the old one) */
        fprintf(stderr, "strata: %s: %s%s\n", cmd, st_errmsg(e),
                e == ST_ENNG ? " (the connection to the coordinator failed: it stopped, "
                               "restarted or cannot be reached)"
                             : "");
        return 1;
    }
    return 0;
}

int cli_conn_expect(cli_conn *c, const Strata__Msg *m, int timeout_ms, Strata__Msg__BodyCase want,
                    Strata__Msg **reply, const char *cmd)
{
    if (cli_conn_call(c, m, timeout_ms, reply, cmd))
        return 1;
    if ((*reply)->body_case != want) {
        fprintf(stderr, "strata: %s: unexpected %s reply\n", cmd, st_msg_case_name(*reply));
        st_msg_free(*reply);
        *reply = NULL;
        return 1;
    }
    return 0;
}

int cli_conn_once(const cli_conn_opts *o, const Strata__Msg *m, int default_timeout_ms,
                  Strata__Msg__BodyCase want, Strata__Msg **reply, const char *cmd)
{
    *reply = NULL;
    cli_conn c;
    int rc = cli_conn_open(&c, o, cmd);
    if (rc != 0)
        return rc;
    int timeout = o->timeout_ms > 0 ? (int)o->timeout_ms : default_timeout_ms;
    rc = cli_conn_expect(&c, m, timeout, want, reply, cmd);
    cli_conn_close(&c);
    return rc;
}

void cli_json_u64(cJSON *o, const char *k, uint64_t v)
{
    char b[24];
    snprintf(b, sizeof b, "%" PRIu64, v); /* exact: ids exceed a double's 53 bits */
    cJSON_AddRawToObject(o, k, b);
}
