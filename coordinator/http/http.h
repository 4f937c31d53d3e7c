/* http.h - the coordinator's OpenAI-compatible HTTP API (`--http
 * HOST:PORT`, docs/http-api.md). main.c fills an st_http_cfg and opens
 * the gateway after the coordinator; it serves from its own threads,
 * hands generation requests to the coordinator's attachment (`gw`,
 * coordinator/http/gateway.h) and hears the coordinator's status from it
 * (a copy the coordinator's thread publishes), so it never touches
 * coordinator state. */
#ifndef ST_COORD_HTTP_H
#define ST_COORD_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/http/http_keys.h"

/* Defaults of the flags (main.c's usage names them). */
#define ST_HTTP_DEFAULT_MAX_BODY ((size_t)1 << 20)
#define ST_HTTP_DEFAULT_MAX_CONNS 4096u
#define ST_HTTP_DEFAULT_TIMEOUT_S 30u
/* 32 connections per client address: a browser opens at most 6 to a host
 * and an SDK's pool some 10 to 20, so a small NAT of clients fits, while
 * one address holds under 1% of the default 4096 (filling the table takes
 * 128 addresses). */
#define ST_HTTP_DEFAULT_PER_IP 32u
/* A request's headers (a few KiB) must be complete 20 s after the accept
 * (or after the previous request of a kept-alive connection); its body 60 s
 * after its headers (the 1 MiB --max-body at 17.5 KiB/s). */
#define ST_HTTP_DEFAULT_HEADER_S 20u
#define ST_HTTP_DEFAULT_BODY_S 60u
#define ST_HTTP_DEFAULT_STREAMS 64u
#define ST_HTTP_DEFAULT_THREADS 2u
#define ST_HTTP_DEFAULT_RATE_TABLE 16384u
#define ST_HTTP_MAX_STREAMS 1024u
#define ST_HTTP_DEFAULT_PING_S 15u

typedef struct st_http_cfg {
    const char *listen;        /* HOST:PORT (port 0: any free port) */
    const char *model_path;    /* the coordinator's model: template, tokenizer, id */
    const char *alias;         /* another model name, or NULL */
    const char *chat_template; /* a template name or text over the file's, or NULL */
    struct st_gw *gw;          /* the coordinator's attachment (st_coord_gateway) */
    const char *api_key_file;  /* NULL: no keys (loopback only unless insecure) */
    size_t max_body;           /* bytes of a request body */
    uint32_t max_conns;        /* connections at once */
    uint32_t per_ip_conns;     /* connections per client address (0: no limit) */
    uint32_t timeout_s;        /* an idle connection (also mid-request) is closed after this */
    uint32_t header_s;         /* absolute deadline of a request's headers (0: none) */
    uint32_t body_s;           /* absolute deadline of a body from its headers (0: none) */
    uint32_t streams;          /* generation requests at once */
    uint32_t threads;          /* HTTP threads (each polls many connections) */
    uint32_t rate_table;       /* identities the rate limiter remembers */
    uint32_t ping_s;           /* an SSE comment after this much silence of a stream */
    st_http_limits limits;     /* per key or address, unless the key file says else */
} st_http_cfg;

/* st_http_cfg_default - the defaults above; listen, model_path and gw
 * NULL. */
st_http_cfg st_http_cfg_default(void);

typedef struct st_http st_http;

/* st_http_listen_check - protected mode for --http: url (tcp://HOST:PORT)
 * must be a loopback address unless there are API keys (has_keys) or
 * insecure (then a warning is logged); ST_EINVAL naming --api-key-file. */
st_err st_http_listen_check(const char *url, bool has_keys, bool insecure);

/* st_http_open - takes the coordinator's tokenizer and its model's chat
 * template, loads the API keys, starts serving and attaches to the
 * coordinator's status (st_gw_status_attach); prints "http on
 * http://HOST:PORT" (the bound port) on stdout. On the coordinator's
 * thread, before st_coord_run. */
st_err st_http_open(const st_http_cfg *cfg, st_http **out);

/* st_http_close - stops accepting, lets the requests in progress send
 * their last bytes (st_coord_run ended every one when it returned: a
 * stream gets an error event and [DONE]), stops the threads and frees;
 * NULL is a no-op. Call it after st_coord_run returned and before
 * st_coord_close (the attachment goes with the coordinator). */
void st_http_close(st_http *h);

#endif
