/* embed_routes.c - the embedding service's endpoints (see embed_http.h):
 * every body is checked field by field (types, counts, ids inside the
 * vocabulary, the hidden size; a packet by the wire decoder) and only then
 * computed. Called under the ends' lock (embed_http.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/embed/embed_http_impl.h"

#define EH_CACHE_ETAG_EXTRA 24 /* quotes, dash, a long long, NUL */
#define EH_ROW_METHODS MHD_HTTP_METHOD_GET ", " MHD_HTTP_METHOD_HEAD
#define EH_DEFAULT_TOP_K 1
#define EH_DEFAULT_TEMP 1.0

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

/* eh_want_packet - the wire dtype of the packet form when the client
 * accepts it (Accept: application/x-strata-packet; ?dtype=, default f32):
 * 1, 0 for JSON, -1 with msg for a bad or misplaced dtype. */
static int eh_want_packet(eh_req *q, st_wire_dtype *dt, char *msg)
{
    const char *acc = MHD_lookup_connection_value(q->c, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT);
    const char *d = MHD_lookup_connection_value(q->c, MHD_GET_ARGUMENT_KIND, "dtype");
    bool packet = acc != NULL && strstr(acc, ST_EMBED_PACKET_TYPE) != NULL;
    *dt = ST_WIRE_F32;
    if (d != NULL && !packet) {
        snprintf(msg, EH_MSG_MAX, "dtype is for the packet form (Accept: %s)",
                 ST_EMBED_PACKET_TYPE);
        return -1;
    }
    if (d != NULL && st_wire_dtype_from_name(d, dt) != ST_OK) {
        snprintf(msg, EH_MSG_MAX, "dtype '%.32s' is not one of " ST_WIRE_DTYPE_NAMES, d);
        return -1;
    }
    return packet ? 1 : 0;
}

/* eh_rows_packet - rows[n][n_embd] as one wire packet of dtype dt: one
 * row (session 0, position 0, n tokens) at stage 0 with the model id as
 * the plan hash, as the NNG side's embed replies (docs/shards.md). */
static enum MHD_Result eh_rows_packet(eh_req *q, const float *rows, long n, st_wire_dtype dt)
{
    const st_hparams *hp = st_ends_hparams(q->s->ends);
    st_wire_hdr h;
    memset(&h, 0, sizeof h);
    memcpy(h.plan_hash, st_ends_model_id(q->s->ends), ST_WIRE_PLAN_HASH_SIZE);
    h.n_rows = 1;
    h.hidden = (uint32_t)hp->n_embd;
    st_wire_row r = {.session_id = 0, .pos0 = 0, .n_tokens = (uint32_t)n};
    st_wire_opts o = {.dtype = dt};
    size_t cap = 0, len = 0;
    st_err e = st_wire_encode_size(&h, &r, &o, &cap);
    char *buf = e == ST_OK ? malloc(cap) : NULL;
    if (e == ST_OK && buf == NULL)
        e = st_errorf(ST_ENOMEM, "a packet of %zu bytes", cap);
    if (e == ST_OK)
        e = st_wire_encode_buf(&h, &r, rows, &o, q->s->wctx, buf, cap, &len, NULL);
    if (e != ST_OK) {
        free(buf);
        return eh_error(q, MHD_HTTP_INTERNAL_SERVER_ERROR, st_errmsg(e));
    }
    return eh_send(q, MHD_HTTP_OK, buf, len, ST_EMBED_PACKET_TYPE, NULL);
}

static enum MHD_Result eh_embed(eh_req *q, const cJSON *j)
{
    const st_hparams *hp = st_ends_hparams(q->s->ends);
    char msg[EH_MSG_MAX];
    st_wire_dtype dt;
    int packet = eh_want_packet(q, &dt, msg);
    if (packet < 0)
        return eh_error(q, MHD_HTTP_BAD_REQUEST, msg);
    int32_t *ids = malloc(ST_EMBED_MAX_IDS * sizeof *ids);
    long n = ids ? eh_ids(cJSON_GetObjectItem(j, "token_ids"), hp->n_vocab, ids, ST_EMBED_MAX_IDS,
                          msg)
                 : -1;
    if (n == 0 && packet) {
        n = -1;
        snprintf(msg, sizeof msg, "the packet form needs at least one id");
    }
    float *rows = n > 0 ? malloc((size_t)n * (size_t)hp->n_embd * sizeof *rows) : NULL;
    enum MHD_Result r;
    if (n < 0 || ids == NULL) {
        r = eh_error(q, MHD_HTTP_BAD_REQUEST, ids ? msg : "out of memory");
    } else if (n > 0 && (rows == NULL || st_ends_embed(q->s->ends, ids, n, rows) != ST_OK)) {
        r = eh_error(q, MHD_HTTP_INTERNAL_SERVER_ERROR, st_errdetail());
    } else {
        q->rows = (uint32_t)n;
        atomic_fetch_add(&q->s->rows_embedded, (uint64_t)n);
        if (packet) {
            r = eh_rows_packet(q, rows, n, dt);
        } else {
            cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "rows");
            cJSON_AddStringToObject(o, "model", q->s->model_hex);
            for (long i = 0; i < n; i++)
                cJSON_AddItemToArray(a, eh_row(rows + (size_t)i * (size_t)hp->n_embd, hp->n_embd));
            r = eh_json(q, MHD_HTTP_OK, o, NULL);
        }
    }
    free(rows);
    free(ids);
    return r;
}

/* eh_utf8_ok - whether p[0..n) is valid UTF-8 (a JSON string must be). */
static int eh_utf8_ok(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t k = p[i] < 0x80         ? 1
                   : (p[i] >> 5) == 6  ? 2
                   : (p[i] >> 4) == 14 ? 3
                   : (p[i] >> 3) == 30 ? 4
                                       : 0;
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

/* eh_topk - the head applied to the final hidden state x: the top_k ids
 * with their pieces and logprobs at temperature temp. */
static enum MHD_Result eh_topk(eh_req *q, const float *x, int top_k, double temp)
{
    const st_hparams *hp = st_ends_hparams(q->s->ends);
    float *lg = malloc((size_t)hp->n_vocab * sizeof *lg);
    eh_cand *cd = malloc((size_t)hp->n_vocab * sizeof *cd);
    enum MHD_Result r;
    if (!lg || !cd) {
        r = eh_error(q, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
    } else if (st_ends_logits(q->s->ends, x, 1, lg) != ST_OK) {
        r = eh_error(q, MHD_HTTP_INTERNAL_SERVER_ERROR, st_errdetail());
    } else {
        q->rows = 1;
        atomic_fetch_add(&q->s->rows_head, 1);
        double mx = -INFINITY, sum = 0;
        for (int64_t v = 0; v < hp->n_vocab; v++)
            mx = fmax(mx, lg[v] / temp);
        for (int64_t v = 0; v < hp->n_vocab; v++) {
            sum += exp(lg[v] / temp - mx);
            cd[v] = (eh_cand){(int32_t)v, lg[v]};
        }
        qsort(cd, (size_t)hp->n_vocab, sizeof *cd, eh_cand_cmp);
        cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "top_k");
        for (int k = 0; k < top_k && k < hp->n_vocab; k++) {
            cJSON *e = cJSON_CreateObject();
            const char *piece;
            size_t plen;
            cJSON_AddNumberToObject(e, "id", cd[k].id);
            if (st_tok_piece(st_ends_tok(q->s->ends), cd[k].id, &piece, &plen) == ST_OK &&
                eh_utf8_ok((const unsigned char *)piece, plen)) {
                char *p0 = strndup(piece, plen);
                cJSON_AddStringToObject(e, "token", p0 ? p0 : "");
                free(p0);
            } else {
                cJSON_AddNullToObject(e, "token");
            }
            cJSON_AddNumberToObject(e, "logprob", cd[k].v / temp - mx - log(sum));
            cJSON_AddItemToArray(a, e);
        }
        r = eh_json(q, MHD_HTTP_OK, o, NULL);
    }
    free(lg);
    free(cd);
    return r;
}

/* eh_topk_ok - whether top_k and temp are in range. */
static bool eh_topk_ok(double top_k, double temp)
{
    return temp > 0 && isfinite(temp) && top_k == floor(top_k) && top_k >= 1 &&
           top_k <= ST_EMBED_MAX_TOP_K;
}

static enum MHD_Result eh_logits(eh_req *q, const cJSON *j)
{
    const st_hparams *hp = st_ends_hparams(q->s->ends);
    const cJSON *h = cJSON_GetObjectItem(j, "hidden"), *k = cJSON_GetObjectItem(j, "top_k"),
                *t = cJSON_GetObjectItem(j, "temperature");
    double temp = t == NULL ? EH_DEFAULT_TEMP : cJSON_IsNumber(t) ? t->valuedouble : -1;
    double top_k = k == NULL ? EH_DEFAULT_TOP_K : cJSON_IsNumber(k) ? k->valuedouble : -1;
    if (!cJSON_IsArray(h) || !eh_topk_ok(top_k, temp))
        return eh_error(q, MHD_HTTP_BAD_REQUEST,
                        "hidden (an array), top_k (1..1000) and a "
                        "positive finite temperature are required");
    if (cJSON_GetArraySize(h) != hp->n_embd) {
        char msg[EH_MSG_MAX];
        snprintf(msg, sizeof msg, "hidden has %d values; the model's width is %lld",
                 cJSON_GetArraySize(h), (long long)hp->n_embd);
        return eh_error(q, MHD_HTTP_UNPROCESSABLE_CONTENT, msg);
    }
    float *x = malloc((size_t)hp->n_embd * sizeof *x);
    size_t i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, h)
    {
        if (x == NULL || !cJSON_IsNumber(v) || !isfinite(v->valuedouble))
            break;
        x[i++] = (float)v->valuedouble;
    }
    enum MHD_Result r;
    if (x == NULL)
        r = eh_error(q, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
    else if (i != (size_t)hp->n_embd)
        r = eh_error(q, MHD_HTTP_BAD_REQUEST, "hidden holds a value that is not a finite number");
    else
        r = eh_topk(q, x, (int)top_k, temp);
    free(x);
    return r;
}

/* eh_query_num - the query argument name as a number (def when absent);
 * false when present but not a number. */
static bool eh_query_num(eh_req *q, const char *name, double def, double *out)
{
    const char *v = MHD_lookup_connection_value(q->c, MHD_GET_ARGUMENT_KIND, name);
    char *end;
    *out = def;
    if (v == NULL)
        return true;
    *out = strtod(v, &end);
    return end != v && *end == '\0';
}

/* eh_logits_packet - POST /v1/logits with a wire packet of one token
 * (stage n_layer, the model id as the plan hash, any dtype), top_k and
 * temperature in the query. */
static enum MHD_Result eh_logits_packet(eh_req *q)
{
    const st_hparams *hp = st_ends_hparams(q->s->ends);
    double top_k, temp;
    if (!eh_query_num(q, "top_k", EH_DEFAULT_TOP_K, &top_k) ||
        !eh_query_num(q, "temperature", EH_DEFAULT_TEMP, &temp) || !eh_topk_ok(top_k, temp))
        return eh_error(q, MHD_HTTP_BAD_REQUEST,
                        "?top_k= (1..1000) and ?temperature= (positive, "
                        "finite) must be numbers");
    st_wire_expect x = {.plan_hash = st_ends_model_id(q->s->ends),
                        .stage = (uint16_t)hp->n_layer,
                        .hidden = (uint32_t)hp->n_embd,
                        .max_tokens = 1};
    st_wire_hdr h;
    st_wire_row row;
    float *in = malloc((size_t)hp->n_embd * sizeof *in);
    if (in == NULL)
        return eh_error(q, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
    st_err e = st_wire_decode(q->s->wctx, q->body, q->len, &x, &h, &row, 1, in, (size_t)hp->n_embd);
    if (e == ST_OK && h.n_tokens != 1)
        e = st_errorf(ST_ERANGE, "n_tokens %u: /v1/logits takes one hidden state", h.n_tokens);
    enum MHD_Result r = e != ST_OK ? eh_error(q, MHD_HTTP_BAD_REQUEST, st_errmsg(e))
                                   : eh_topk(q, in, (int)top_k, temp);
    free(in);
    return r;
}

static enum MHD_Result eh_tokenize(eh_req *q, const cJSON *j)
{
    const cJSON *t = cJSON_GetObjectItem(j, "text");
    if (!cJSON_IsString(t))
        return eh_error(q, MHD_HTTP_BAD_REQUEST, "text (a string) is required");
    const st_tokenizer *tok = st_ends_tok(q->s->ends);
    int32_t *ids = NULL;
    size_t n = 0;
    st_err e = st_tok_encode(tok, t->valuestring, strlen(t->valuestring), st_tok_add_bos(tok), &ids,
                             &n);
    if (e != ST_OK)
        return eh_error(q, MHD_HTTP_BAD_REQUEST, st_errdetail());
    cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "tokens");
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
    free(ids);
    return eh_json(q, MHD_HTTP_OK, o, NULL);
}

static enum MHD_Result eh_detokenize(eh_req *q, const cJSON *j)
{
    int32_t *ids = malloc(ST_EMBED_MAX_IDS * sizeof *ids);
    char msg[EH_MSG_MAX];
    long n = ids ? eh_ids(cJSON_GetObjectItem(j, "tokens"), st_ends_hparams(q->s->ends)->n_vocab,
                          ids, ST_EMBED_MAX_IDS, msg)
                 : -1;
    char *text = NULL;
    size_t len = 0;
    enum MHD_Result r;
    if (n < 0) {
        r = eh_error(q, MHD_HTTP_BAD_REQUEST, ids ? msg : "out of memory");
    } else if (st_tok_decode(st_ends_tok(q->s->ends), ids, (size_t)n, &text, &len) != ST_OK) {
        r = eh_error(q, MHD_HTTP_BAD_REQUEST, st_errdetail());
    } else if (!eh_utf8_ok((const unsigned char *)text, len)) {
        r = eh_error(q, MHD_HTTP_UNPROCESSABLE_CONTENT,
                     "the ids decode to bytes that are not "
                     "UTF-8");
    } else {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "text", text);
        r = eh_json(q, MHD_HTTP_OK, o, NULL);
    }
    free(text);
    free(ids);
    return r;
}

/* eh_one_row - GET or HEAD /v1/embeddings/N: 200 with the row, or 304 on
 * a matching If-None-Match, only for the one URL of a row inside the
 * vocabulary (q->row_err, read from the target as sent); 404 for every
 * other target under the prefix (another spelling of N, a query, an id
 * outside the vocabulary). HEAD computes the same answer (MHD drops the
 * body but keeps its Content-Length). */
static enum MHD_Result eh_one_row(eh_req *q)
{
    const st_hparams *hp = st_ends_hparams(q->s->ends);
    if (q->row_err == ST_EINVAL)
        return eh_error(q, MHD_HTTP_NOT_FOUND,
                        "no such row URL: a row's one URL is " ST_EMBED_ROW_PREFIX
                        "N, N in decimal without a leading zero, sign, escape, "
                        "trailing slash or query");
    if (q->row_err != ST_OK || q->row_id >= (uint64_t)hp->n_vocab)
        return eh_error(q, MHD_HTTP_NOT_FOUND, "the id is outside the vocabulary");
    long long id = (long long)q->row_id;
    char etag[2 * EH_ETAG_HASH_BYTES + EH_CACHE_ETAG_EXTRA];
    snprintf(etag, sizeof etag, "\"%s-%lld\"", q->s->hash, id);
    const char *inm = MHD_lookup_connection_value(q->c, MHD_HEADER_KIND,
                                                  MHD_HTTP_HEADER_IF_NONE_MATCH);
    if (inm != NULL && (strcmp(inm, "*") == 0 || strstr(inm, etag) != NULL))
        return eh_send(q, MHD_HTTP_NOT_MODIFIED, NULL, 0, NULL, etag);
    float *row = malloc((size_t)hp->n_embd * sizeof *row);
    int32_t i32 = (int32_t)id;
    if (row == NULL || st_ends_embed(q->s->ends, &i32, 1, row) != ST_OK) {
        free(row);
        return eh_error(q, MHD_HTTP_INTERNAL_SERVER_ERROR, "embedding");
    }
    q->rows = 1;
    atomic_fetch_add(&q->s->rows_embedded, 1);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "id", (double)id);
    cJSON_AddItemToObject(o, "row", eh_row(row, hp->n_embd));
    free(row);
    return eh_json(q, MHD_HTTP_OK, o, etag);
}

typedef enum MHD_Result (*eh_post_fn)(eh_req *, const cJSON *);

/* The POST endpoints, by eh_ep. */
static const struct {
    const char *path;
    eh_ep ep;
    eh_post_fn fn;
} eh_posts[] = {
    {"/v1/embed", EH_EP_EMBED, eh_embed},
    {"/v1/logits", EH_EP_LOGITS, eh_logits},
    {"/v1/tokenize", EH_EP_TOKENIZE, eh_tokenize},
    {"/v1/detokenize", EH_EP_DETOKENIZE, eh_detokenize},
};

eh_ep eh_classify(const char *url)
{
    if (strncmp(url, ST_EMBED_ROW_PREFIX, strlen(ST_EMBED_ROW_PREFIX)) == 0)
        return EH_EP_ROW;
    if (strcmp(url, EH_METRICS_PATH) == 0)
        return EH_EP_METRICS;
    for (size_t i = 0; i < sizeof eh_posts / sizeof eh_posts[0]; i++)
        if (strcmp(url, eh_posts[i].path) == 0)
            return eh_posts[i].ep;
    return EH_EP_OTHER;
}

enum MHD_Result eh_route(eh_req *q, const char *method)
{
    const bool post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
    if (q->ep == EH_EP_ROW) {
        if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && !q->head)
            return eh_not_allowed(q, EH_ROW_METHODS);
        return eh_one_row(q);
    }
    for (size_t i = 0; i < sizeof eh_posts / sizeof eh_posts[0]; i++) {
        if (q->ep != eh_posts[i].ep)
            continue;
        if (!post)
            return eh_not_allowed(q, MHD_HTTP_METHOD_POST);
        if (q->too_big) {
            char msg[EH_MSG_MAX];
            snprintf(msg, sizeof msg, "the body is over the limit of %zu bytes",
                     q->s->cfg.max_body);
            return eh_error(q, MHD_HTTP_CONTENT_TOO_LARGE, msg);
        }
        const char *ct = MHD_lookup_connection_value(q->c, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_TYPE);
        if (ct != NULL && strncmp(ct, ST_EMBED_PACKET_TYPE, strlen(ST_EMBED_PACKET_TYPE)) == 0) {
            if (q->ep == EH_EP_LOGITS)
                return eh_logits_packet(q);
            return eh_error(q, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE,
                            "only /v1/logits takes a "
                            "packet body");
        }
        cJSON *j = q->body ? cJSON_ParseWithLength(q->body, q->len) : NULL;
        if (!cJSON_IsObject(j)) {
            cJSON_Delete(j);
            return eh_error(q, MHD_HTTP_BAD_REQUEST, "the body is not a JSON object");
        }
        enum MHD_Result r = eh_posts[i].fn(q, j);
        cJSON_Delete(j);
        return r;
    }
    return eh_error(q, MHD_HTTP_NOT_FOUND, "no such path");
}
