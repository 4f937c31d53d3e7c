/* http_impl.h - the HTTP gateway's state, shared by http.c (the server,
 * routing, auth, limits, status) and http_gen.c (generation requests
 * through the coordinator's attachment, gateway.h; streaming). Nothing
 * here is coordinator state. */
#ifndef ST_COORD_HTTP_IMPL_H
#define ST_COORD_HTTP_IMPL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/text/chat.h"
#include "common/http/http_keys.h"
#include "common/http/http_rate.h"
#include "common/text/tokenizer.h"
#include "coordinator/http/gateway.h"
#include "coordinator/http/http.h"
#include "coordinator/http/http_guard.h"
#include "coordinator/http/http_req.h"
#include "coordinator/http/http_resp.h"
#include "coordinator/http/http_stats.h"

#define HTTP_MODEL_MAX 256
#define HTTP_IDENT_MAX 80
#define HTTP_JOB_ID_MAX 48

struct st_http {
    st_http_cfg cfg;
    struct MHD_Daemon *d;
    const st_tokenizer *tok; /* the coordinator's (st_gw_tokenizer) */
    bool has_tmpl;
    st_chat_tmpl tmpl;
    char tmpl_err[256]; /* why chat is refused when !has_tmpl */
    char model_id[HTTP_MODEL_MAX];
    st_http_keys *keys; /* NULL: no keys */
    st_http_rate *rate;
    http_guard *guard;                              /* per-address cap, header and body deadlines */
    uint8_t session_key[ST_HTTP_SESSION_KEY_BYTES]; /* drawn at open: session ids */
    st_http_metrics met;
    int64_t started; /* Unix seconds */
    /* generation requests */
    pthread_mutex_t mu;    /* n_gen, jobs list, stopping */
    pthread_cond_t cv;     /* a job left the list (close waits) */
    uint32_t n_gen;        /* generation slots in use (at most cfg.streams) */
    struct http_job *jobs; /* every job not yet freed */
    bool stopping;
    /* the coordinator's status (its publishes: http_status_publish) */
    pthread_mutex_t st_mu;       /* the fields below */
    bool status_stop;            /* st_http_close began: not serving */
    Strata__StatusReply *status; /* the latest published, or NULL */
    bool serving;
    uint32_t n_ctx; /* of the serving plan */
    uint64_t epoch;
};

/* What a connection's request is at, kept in MHD's per-request pointer. */
typedef struct http_conn {
    st_http_ep ep;
    char *body;
    size_t len, cap;
    bool too_big;
    struct http_job *job;
} http_conn;

/* http_gen.c */

/* http_gen_start - validated request g (taken) of a client with identity
 * ident under lim, tenant for session ids: takes a generation slot,
 * suspends conn and submits the request to the coordinator. ST_OK, or an error already described in
 * *err (the caller answers it; g is freed either way). */
st_err http_gen_start(st_http *h, struct MHD_Connection *conn, http_conn *hc, st_http_gen *g,
                      const char *ident, st_http_limits lim, const char *tenant,
                      st_http_error *err);

/* http_gen_resume - the access handler's call for a request whose
 * connection was resumed: queues the answer (the stream, the whole
 * document or the error). */
enum MHD_Result http_gen_resume(st_http *h, struct MHD_Connection *conn, http_conn *hc);

/* http_gen_completed - MHD ended the request of hc's job (toe:
 * MHD_REQUEST_TERMINATED_*): a job still running is cancelled. */
void http_gen_completed(st_http *h, http_conn *hc, enum MHD_RequestTerminationCode toe);

/* http.c */

/* http_queue_error - answers conn with e's JSON (Retry-After when
 * retry_s > 0) and counts it for endpoint ep. */
enum MHD_Result http_queue_error(st_http *h, struct MHD_Connection *conn, st_http_ep ep,
                                 const st_http_error *e, uint32_t retry_s);

/* http_queue_json - answers conn with status and body (taken; NULL: a 500). */
enum MHD_Result http_queue_json(st_http *h, struct MHD_Connection *conn, st_http_ep ep, int status,
                                char *body);

/* http_serving - whether the latest status shows a serving plan; *n_ctx
 * its context. */
bool http_serving(st_http *h, uint32_t *n_ctx);

#endif
