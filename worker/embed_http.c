/* embed_http.c - the embedding and head service's HTTP side (see
 * embed_http.h).
 *
 * Design. The service is a thin shell around st_ends: every request is
 * read whole (bounded by max_body: past it the rest is consumed and
 * dropped and the answer is 413), parsed as JSON, checked field by field
 * (types, counts, ids inside the vocabulary, the hidden size) and only then
 * computed. libmicrohttpd runs one internal polling thread, which calls
 * every handler; the ends are used under the lock they share with the
 * service's NNG side (--listen, worker/standalone.h). Rows are
 * immutable facts of the model file, so GET /v1/embeddings/N is made for
 * caches: its ETag names the model hash and the id, it is valid forever,
 * and a client or proxy presenting the ETag gets 304 with no body. */
#include "worker/embed_http.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/hex.h"

#define EH_ETAG_HASH_BYTES 8
#define EH_CACHE_CONTROL "public, max-age=31536000, immutable"
#define EH_ROW_PREFIX "/v1/embeddings/"
#define EH_ID_DIGITS_MAX 10
#define EH_MSG_MAX 256

struct st_embed_srv {
    st_ends *ends;
    pthread_mutex_t *lock; /* shared with the NNG side (worker/standalone.h) */
    struct MHD_Daemon *d;
    size_t max_body;
    char hash[2 * EH_ETAG_HASH_BYTES + 1];   /* the ETags' model part */
    char model_hex[2 * ST_ENDS_ID_BYTES + 1];
};

typedef struct eh_req {
    char *body;
    size_t len, cap;
    int too_big;
} eh_req;

/* eh_send - queues body (taken; NULL: empty) with status and type. */
static enum MHD_Result eh_send(struct MHD_Connection *c, unsigned status, char *body,
                               const char *etag)
{
    size_t n = body ? strlen(body) : 0;
    struct MHD_Response *r = MHD_create_response_from_buffer(n, body ? body : (void *)"",
                                                             body ? MHD_RESPMEM_MUST_FREE
                                                                  : MHD_RESPMEM_PERSISTENT);
    if (r == NULL) {
        free(body);
        return MHD_NO;
    }
    if (body != NULL)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    if (etag != NULL) {
        MHD_add_response_header(r, MHD_HTTP_HEADER_ETAG, etag);
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, EH_CACHE_CONTROL);
    }
    enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

/* eh_json - queues o (freed) as the body. */
static enum MHD_Result eh_json(struct MHD_Connection *c, unsigned status, cJSON *o,
                               const char *etag)
{
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (s == NULL)
        return eh_send(c, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, NULL);
    return eh_send(c, status, s, etag);
}

static enum MHD_Result eh_error(struct MHD_Connection *c, unsigned status, const char *msg)
{
    cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddNumberToObject(e, "code", status);
    return eh_json(c, status, o, NULL);
}

/* eh_ids - the array a of ids inside [0, n_vocab) into ids (cap);
 * returns the count or -1 with msg. */
static long eh_ids(const cJSON *a, int64_t n_vocab, int32_t *ids, size_t cap, char *msg)
{
    if (!cJSON_IsArray(a)) {
        snprintf(msg, EH_MSG_MAX, "an array of token ids is required");
        return -1;
    }
    size_t n = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, a)
    {
        if (n == cap) {
            snprintf(msg, EH_MSG_MAX, "more than %zu ids", cap);
            return -1;
        }
        double v = cJSON_IsNumber(x) ? x->valuedouble : -1;
        if (v != floor(v) || v < 0 || v >= (double)n_vocab) {
            snprintf(msg, EH_MSG_MAX, "id %zu is not an integer in 0..%lld", n,
                     (long long)n_vocab - 1);
            return -1;
        }
        ids[n++] = (int32_t)v;
    }
    return (long)n;
}

/* eh_row - a JSON array of the n floats of p. */
static cJSON *eh_row(const float *p, int64_t n)
{
    cJSON *a = cJSON_CreateArray();
    for (int64_t i = 0; a != NULL && i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)p[i]));
    return a;
}

static enum MHD_Result eh_embed(st_embed_srv *s, struct MHD_Connection *c, const cJSON *j)
{
    const st_hparams *hp = st_ends_hparams(s->ends);
    int32_t *ids = malloc(ST_EMBED_MAX_IDS * sizeof *ids);
    char msg[EH_MSG_MAX];
    long n = ids ? eh_ids(cJSON_GetObjectItem(j, "token_ids"), hp->n_vocab, ids,
                          ST_EMBED_MAX_IDS, msg)
                 : -1;
    float *rows = n > 0 ? malloc((size_t)n * (size_t)hp->n_embd * sizeof *rows) : NULL;
    enum MHD_Result r;
    if (n < 0 || ids == NULL) {
        r = eh_error(c, MHD_HTTP_BAD_REQUEST, ids ? msg : "out of memory");
    } else if (n > 0 && (rows == NULL || st_ends_embed(s->ends, ids, n, rows) != ST_OK)) {
        r = eh_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, st_errdetail());
    } else {
        cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "rows");
        cJSON_AddStringToObject(o, "model", s->model_hex);
        for (long i = 0; i < n; i++)
            cJSON_AddItemToArray(a, eh_row(rows + (size_t)i * (size_t)hp->n_embd, hp->n_embd));
        r = eh_json(c, MHD_HTTP_OK, o, NULL);
    }
    free(rows);
    free(ids);
    return r;
}

/* eh_utf8_ok - whether p[0..n) is valid UTF-8 (a JSON string must be). */
static int eh_utf8_ok(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t k = p[i] < 0x80 ? 1 : (p[i] >> 5) == 6 ? 2 : (p[i] >> 4) == 14 ? 3
                                   : (p[i] >> 3) == 30 ? 4 : 0;
        if (k == 0 || i + k > n)
            return 0;
        for (size_t j = 1; j < k; j++)
            if ((p[i + j] >> 6) != 2)
                return 0;
        i += k;
    }
    return 1;
}

typedef struct eh_cand {
    int32_t id;
    float v;
} eh_cand;

static int eh_cand_cmp(const void *a, const void *b)
{
    const eh_cand *x = a, *y = b;
    return x->v < y->v ? 1 : x->v > y->v ? -1 : (x->id > y->id) - (x->id < y->id);
}

static enum MHD_Result eh_logits(st_embed_srv *s, struct MHD_Connection *c, const cJSON *j)
{
    const st_hparams *hp = st_ends_hparams(s->ends);
    const cJSON *h = cJSON_GetObjectItem(j, "hidden"), *k = cJSON_GetObjectItem(j, "top_k"),
                *t = cJSON_GetObjectItem(j, "temperature");
    double temp = t == NULL ? 1.0 : cJSON_IsNumber(t) ? t->valuedouble : -1;
    double top_k = k == NULL ? 1 : cJSON_IsNumber(k) ? k->valuedouble : -1;
    if (!cJSON_IsArray(h) || !(temp > 0 && isfinite(temp)) || top_k != floor(top_k) ||
        top_k < 1 || top_k > ST_EMBED_MAX_TOP_K)
        return eh_error(c, MHD_HTTP_BAD_REQUEST, "hidden (an array), top_k (1..1000) and a "
                        "positive finite temperature are required");
    if (cJSON_GetArraySize(h) != hp->n_embd) {
        char msg[EH_MSG_MAX];
        snprintf(msg, sizeof msg, "hidden has %d values; the model's width is %lld",
                 cJSON_GetArraySize(h), (long long)hp->n_embd);
        return eh_error(c, MHD_HTTP_UNPROCESSABLE_CONTENT, msg);
    }
    float *x = malloc((size_t)hp->n_embd * sizeof *x);
    float *lg = malloc((size_t)hp->n_vocab * sizeof *lg);
    eh_cand *cd = malloc((size_t)hp->n_vocab * sizeof *cd);
    enum MHD_Result r;
    size_t i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, h)
    {
        if (x == NULL || !cJSON_IsNumber(v) || !isfinite(v->valuedouble))
            break;
        x[i++] = (float)v->valuedouble;
    }
    if (!x || !lg || !cd) {
        r = eh_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
    } else if (i != (size_t)hp->n_embd) {
        r = eh_error(c, MHD_HTTP_BAD_REQUEST, "hidden holds a value that is not a finite number");
    } else if (st_ends_logits(s->ends, x, 1, lg) != ST_OK) {
        r = eh_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, st_errdetail());
    } else {
        double mx = -INFINITY, sum = 0;
        for (int64_t q = 0; q < hp->n_vocab; q++)
            mx = fmax(mx, lg[q] / temp);
        for (int64_t q = 0; q < hp->n_vocab; q++) {
            sum += exp(lg[q] / temp - mx);
            cd[q] = (eh_cand){(int32_t)q, lg[q]};
        }
        qsort(cd, (size_t)hp->n_vocab, sizeof *cd, eh_cand_cmp);
        cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "top_k");
        for (int q = 0; q < (int)top_k && q < hp->n_vocab; q++) {
            cJSON *e = cJSON_CreateObject();
            const char *piece;
            size_t plen;
            cJSON_AddNumberToObject(e, "id", cd[q].id);
            if (st_tok_piece(st_ends_tok(s->ends), cd[q].id, &piece, &plen) == ST_OK &&
                eh_utf8_ok((const unsigned char *)piece, plen)) {
                char *p0 = strndup(piece, plen);
                cJSON_AddStringToObject(e, "token", p0 ? p0 : "");
                free(p0);
            } else {
                cJSON_AddNullToObject(e, "token");
            }
            cJSON_AddNumberToObject(e, "logprob", cd[q].v / temp - mx - log(sum));
            cJSON_AddItemToArray(a, e);
        }
        r = eh_json(c, MHD_HTTP_OK, o, NULL);
    }
    free(x);
    free(lg);
    free(cd);
    return r;
}

static enum MHD_Result eh_tokenize(st_embed_srv *s, struct MHD_Connection *c, const cJSON *j)
{
    const cJSON *t = cJSON_GetObjectItem(j, "text");
    if (!cJSON_IsString(t))
        return eh_error(c, MHD_HTTP_BAD_REQUEST, "text (a string) is required");
    const st_tokenizer *tok = st_ends_tok(s->ends);
    int32_t *ids = NULL;
    size_t n = 0;
    st_err e = st_tok_encode(tok, t->valuestring, strlen(t->valuestring), st_tok_add_bos(tok),
                             &ids, &n);
    if (e != ST_OK)
        return eh_error(c, MHD_HTTP_BAD_REQUEST, st_errdetail());
    cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "tokens");
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
    free(ids);
    return eh_json(c, MHD_HTTP_OK, o, NULL);
}

static enum MHD_Result eh_detokenize(st_embed_srv *s, struct MHD_Connection *c, const cJSON *j)
{
    int32_t *ids = malloc(ST_EMBED_MAX_IDS * sizeof *ids);
    char msg[EH_MSG_MAX];
    long n = ids ? eh_ids(cJSON_GetObjectItem(j, "tokens"), st_ends_hparams(s->ends)->n_vocab,
                          ids, ST_EMBED_MAX_IDS, msg)
                 : -1;
    char *text = NULL;
    size_t len = 0;
    enum MHD_Result r;
    if (n < 0) {
        r = eh_error(c, MHD_HTTP_BAD_REQUEST, ids ? msg : "out of memory");
    } else if (st_tok_decode(st_ends_tok(s->ends), ids, (size_t)n, &text, &len) != ST_OK) {
        r = eh_error(c, MHD_HTTP_BAD_REQUEST, st_errdetail());
    } else if (!eh_utf8_ok((const unsigned char *)text, len)) {
        r = eh_error(c, MHD_HTTP_UNPROCESSABLE_CONTENT, "the ids decode to bytes that are not "
                     "UTF-8");
    } else {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "text", text);
        r = eh_json(c, MHD_HTTP_OK, o, NULL);
    }
    free(text);
    free(ids);
    return r;
}

/* eh_one_row - GET /v1/embeddings/N. */
static enum MHD_Result eh_one_row(st_embed_srv *s, struct MHD_Connection *c, const char *id_s)
{
    const st_hparams *hp = st_ends_hparams(s->ends);
    size_t nd = strspn(id_s, "0123456789");
    if (nd == 0 || id_s[nd] != '\0' || nd > EH_ID_DIGITS_MAX)
        return eh_error(c, MHD_HTTP_BAD_REQUEST, "the id must be a decimal integer");
    long long id = atoll(id_s);
    if (id >= hp->n_vocab)
        return eh_error(c, MHD_HTTP_NOT_FOUND, "the id is outside the vocabulary");
    char etag[2 * EH_ETAG_HASH_BYTES + 3 + 24]; /* quotes, dash, a long long, NUL */
    snprintf(etag, sizeof etag, "\"%s-%lld\"", s->hash, id);
    const char *inm = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                  MHD_HTTP_HEADER_IF_NONE_MATCH);
    if (inm != NULL && (strcmp(inm, "*") == 0 || strstr(inm, etag) != NULL))
        return eh_send(c, MHD_HTTP_NOT_MODIFIED, NULL, etag);
    float *row = malloc((size_t)hp->n_embd * sizeof *row);
    int32_t i32 = (int32_t)id;
    if (row == NULL || st_ends_embed(s->ends, &i32, 1, row) != ST_OK) {
        free(row);
        return eh_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "embedding");
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "id", (double)id);
    cJSON_AddItemToObject(o, "row", eh_row(row, hp->n_embd));
    free(row);
    return eh_json(c, MHD_HTTP_OK, o, etag);
}

typedef enum MHD_Result (*eh_post_fn)(st_embed_srv *, struct MHD_Connection *, const cJSON *);

static const struct {
    const char *path;
    eh_post_fn fn;
} eh_posts[] = {
    {"/v1/embed", eh_embed},
    {"/v1/logits", eh_logits},
    {"/v1/tokenize", eh_tokenize},
    {"/v1/detokenize", eh_detokenize},
};

static enum MHD_Result eh_route(st_embed_srv *s, struct MHD_Connection *c, const char *url,
                                const char *method, eh_req *q)
{
    const int post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
    if (strncmp(url, EH_ROW_PREFIX, strlen(EH_ROW_PREFIX)) == 0) {
        if (strcmp(method, MHD_HTTP_METHOD_GET) != 0)
            return eh_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "GET only");
        return eh_one_row(s, c, url + strlen(EH_ROW_PREFIX));
    }
    for (size_t i = 0; i < sizeof eh_posts / sizeof eh_posts[0]; i++) {
        if (strcmp(url, eh_posts[i].path) != 0)
            continue;
        if (!post)
            return eh_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "POST only");
        if (q->too_big) {
            char msg[EH_MSG_MAX];
            snprintf(msg, sizeof msg, "the body is over the limit of %zu bytes", s->max_body);
            return eh_error(c, MHD_HTTP_CONTENT_TOO_LARGE, msg);
        }
        cJSON *j = q->body ? cJSON_ParseWithLength(q->body, q->len) : NULL;
        if (!cJSON_IsObject(j)) {
            cJSON_Delete(j);
            return eh_error(c, MHD_HTTP_BAD_REQUEST, "the body is not a JSON object");
        }
        enum MHD_Result r = eh_posts[i].fn(s, c, j);
        cJSON_Delete(j);
        return r;
    }
    return eh_error(c, MHD_HTTP_NOT_FOUND, "no such path");
}

static enum MHD_Result eh_access(void *cls, struct MHD_Connection *c, const char *url,
                                 const char *method, const char *version, const char *upload,
                                 size_t *upload_size, void **req_cls)
{
    (void)version;
    st_embed_srv *s = cls;
    eh_req *q = *req_cls;
    if (q == NULL) {
        if ((q = calloc(1, sizeof *q)) == NULL)
            return MHD_NO;
        *req_cls = q;
        return MHD_YES;
    }
    if (*upload_size > 0) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (q->too_big || q->len + n > s->max_body) {
            q->too_big = 1; /* the rest is read and dropped; 413 at the end */
            return MHD_YES;
        }
        if (q->len + n > q->cap) {
            size_t cap = q->cap ? q->cap : n;
            while (cap < q->len + n)
                cap *= 2;
            char *b = realloc(q->body, cap);
            if (b == NULL)
                return MHD_NO;
            q->body = b;
            q->cap = cap;
        }
        memcpy(q->body + q->len, upload, n);
        q->len += n;
        return MHD_YES;
    }
    pthread_mutex_lock(s->lock);
    enum MHD_Result r = eh_route(s, c, url, method, q);
    pthread_mutex_unlock(s->lock);
    return r;
}

static void eh_completed(void *cls, struct MHD_Connection *c, void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    (void)toe;
    eh_req *q = *req_cls;
    if (q != NULL) {
        free(q->body);
        free(q);
    }
    *req_cls = NULL;
}

st_err st_embed_srv_open(st_ends *ends, pthread_mutex_t *lock, const char *host, int port,
                         size_t max_body, st_embed_srv **out, int *bound)
{
    *out = NULL;
    st_embed_srv *s = calloc(1, sizeof *s);
    if (s == NULL)
        return st_errorf(ST_ENOMEM, "embedding service");
    s->ends = ends;
    s->lock = lock;
    s->max_body = max_body;
    st_hex(st_ends_model_id(ends), EH_ETAG_HASH_BYTES, s->hash, sizeof s->hash);
    st_hex(st_ends_model_id(ends), ST_ENDS_ID_BYTES, s->model_hex, sizeof s->model_hex);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        free(s);
        return st_errorf(ST_EINVAL, "--http host '%s' is not an IPv4 address", host);
    }
    s->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, 0, NULL, NULL,
                            eh_access, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_NOTIFY_COMPLETED, eh_completed, s, MHD_OPTION_END);
    if (s->d == NULL) {
        free(s);
        return st_errorf(ST_EIO, "cannot listen on %s:%d", host, port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    *bound = di ? di->port : port;
    *out = s;
    return ST_OK;
}

void st_embed_srv_close(st_embed_srv *s)
{
    if (s == NULL)
        return;
    if (s->d != NULL)
        MHD_stop_daemon(s->d);
    free(s);
}
