/* embed_http_impl.h - the embedding service's state, shared by
 * embed_http.c (the server, keys, limits, metrics, answers) and
 * embed_routes.c (the endpoints). */
#ifndef ST_WORKER_EMBED_HTTP_IMPL_H
#define ST_WORKER_EMBED_HTTP_IMPL_H

#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/http/http_keys.h"
#include "common/http/http_metrics.h"
#include "common/http/http_rate.h"
#include "common/wire/wire.h"
#include "worker/embed/embed_http.h"
#include "worker/embed/embed_row.h"

#define EH_ETAG_HASH_BYTES 8
#define EH_IDENT_MAX 80
#define EH_MSG_MAX 256
#define EH_METRICS_PATH "/metrics"

/* The endpoints, as /metrics counts them; EH_EP_OTHER last. */
typedef enum eh_ep {
    EH_EP_EMBED = 0,
    EH_EP_LOGITS,
    EH_EP_ROW,
    EH_EP_TOKENIZE,
    EH_EP_DETOKENIZE,
    EH_EP_METRICS,
    EH_EP_OTHER,
    EH_EP_COUNT
} eh_ep;

struct st_embed_srv {
    st_ends *ends;
    pthread_mutex_t *lock; /* the ends and wctx; shared with the NNG side (worker/shard/standalone.h) */
    st_wire_ctx *wctx;
    struct MHD_Daemon *d;
    st_embed_cfg cfg;
    st_http_keys *keys; /* NULL: no keys */
    st_http_rate *rate;
    char hash[2 * EH_ETAG_HASH_BYTES + 1]; /* the ETags' model part */
    char model_hex[2 * ST_ENDS_ID_BYTES + 1];
    /* metrics (any thread) */
    st_http_reqs reqs;
    atomic_uint_fast64_t auth_failures, rate_limited;
    atomic_uint_fast64_t rows_embedded, rows_head;
    atomic_uint_fast64_t bytes_in, bytes_out;
};

/* One request, kept in MHD's per-request pointer: made by the URI callback
 * (embed_http.c eh_uri, which sees the target as sent), completed by the
 * first call of the access handler (started). */
typedef struct eh_req {
    st_embed_srv *s;
    struct MHD_Connection *c;
    bool started;    /* ep and head are set */
    eh_ep ep;        /* from the decoded path */
    bool head;       /* a HEAD request: MHD sends no body, none is counted as sent */
    st_err row_err;  /* st_embed_row_target of the target as sent */
    uint64_t row_id; /* its id when row_err is ST_OK */
    char *body;
    size_t len, cap;
    bool too_big;
    uint32_t rows; /* rows computed, spent on the tokens-per-minute bucket */
} eh_req;

/* embed_http.c */

/* eh_send - queues body[0..len) (taken, freed; NULL: no body) with status,
 * content type and, when etag is set, the ETag and caching headers;
 * counts it in the metrics. */
enum MHD_Result eh_send(eh_req *q, unsigned status, char *body, size_t len, const char *type,
                        const char *etag);

/* eh_json - queues o (freed) as the JSON body. */
enum MHD_Result eh_json(eh_req *q, unsigned status, cJSON *o, const char *etag);

/* eh_error - queues {"error": {"message", "code"}}. */
enum MHD_Result eh_error(eh_req *q, unsigned status, const char *msg);

/* eh_not_allowed - queues 405 with `Allow: allow` (the methods the path
 * takes, e.g. "GET, HEAD") and a message naming them. */
enum MHD_Result eh_not_allowed(eh_req *q, const char *allow);

/* embed_routes.c */

/* eh_classify - the endpoint of url. */
eh_ep eh_classify(const char *url);

/* eh_route - answers a complete request (the key and the limits passed);
 * takes the ends' lock where it computes. */
enum MHD_Result eh_route(eh_req *q, const char *method);

#endif
