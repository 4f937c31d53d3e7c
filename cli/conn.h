/* conn.h - the CLI's request/reply connection to a coordinator, shared by
 * the cluster commands (status, generate, plan, replan, drain): the flags
 * every such command takes, opening (address from --coordinator or
 * STRATA_COORDINATOR, optional cluster key), one request/reply, and a JSON
 * helper for 64-bit ids. Each function prints its own one-line error. */
#ifndef ST_CLI_CONN_H
#define ST_CLI_CONN_H

#include <cjson/cJSON.h>
#include <nng/nng.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/wire/envelope.h"
#include "common/wire/msg.h"
#include "common/base/opt.h"

typedef struct cli_conn {
    nng_socket s;
    bool open;
    st_env env;
    bool env_open;
    int timeout_ms;
} cli_conn;

/* Flags every cluster command takes. */
typedef struct cli_conn_opts {
    const char *addr;
    const char *key;        /* --cluster-key: the cluster key (may do everything) */
    const char *client_key; /* --client-key (or STRATA_CLIENT_KEY): a client key file */
    const char *admin_key;  /* --admin-key (or STRATA_ADMIN_KEY): an admin key file */
    bool encrypt;           /* --encrypt: seal every frame (needs key) */
    int64_t timeout_ms;
    bool json;
} cli_conn_opts;

/* cli_conn_rows - the option rows (common/base/opt.h) of the common flags
 * (--coordinator, --cluster-key, --admin-key, --client-key, --encrypt,
 * --timeout-ms, and --json when json_ok) into out, which has room for
 * CLI_CONN_ROWS; returns how many it wrote. They point into c. */
#define CLI_CONN_ROWS 7
size_t cli_conn_rows(cli_conn_opts *c, bool json_ok, st_opt *out);

/* cli_conn_open - connects to the coordinator with at most one credential
 * (--cluster-key, --admin-key or --client-key; without a flag
 * STRATA_ADMIN_KEY or STRATA_CLIENT_KEY, files of one key: docs/security.md);
 * 0, or the exit status to return (2 usage, 1 runtime) after printing the
 * error. */
int cli_conn_open(cli_conn *c, const cli_conn_opts *o, const char *cmd);

/* cli_conn_close - closes; safe on a zeroed or closed connection. */
void cli_conn_close(cli_conn *c);

/* cli_conn_call - one request/reply; prints the error and returns nonzero
 * on failure (an Error reply included). */
int cli_conn_call(cli_conn *c, const Strata__Msg *m, int timeout_ms, Strata__Msg **reply,
                  const char *cmd);

/* cli_conn_expect - cli_conn_call expecting a reply of body case want;
 * prints the error (an unexpected reply included) and returns nonzero
 * otherwise, with *reply NULL. The caller frees a reply it got. */
int cli_conn_expect(cli_conn *c, const Strata__Msg *m, int timeout_ms, Strata__Msg__BodyCase want,
                    Strata__Msg **reply, const char *cmd);

/* cli_conn_once - opens a connection with o, makes one cli_conn_expect
 * exchange (o->timeout_ms, or default_timeout_ms when o gives none) and
 * closes it: 0 with *reply set (the caller frees it), or the exit status
 * to return (2 usage, 1 runtime) after printing the error. */
int cli_conn_once(const cli_conn_opts *o, const Strata__Msg *m, int default_timeout_ms,
                  Strata__Msg__BodyCase want, Strata__Msg **reply, const char *cmd);

/* cli_json_u64 - adds k = v as an exact JSON integer (ids exceed 2^53). */
void cli_json_u64(cJSON *o, const char *k, uint64_t v);

#endif
