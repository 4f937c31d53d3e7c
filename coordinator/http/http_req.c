/* http_req.c - request bodies and error documents of the HTTP gateway
 * (see http_req.h). */
#include "coordinator/http/http_req.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/text/sampling.h"

#define HTTP_BAD 400
#define HTTP_SERVER_ERROR 500
#define HTTP_INVALID "invalid_request_error"
/* The largest integer a JSON number (a double) carries exactly. */
#define HTTP_MAX_EXACT 9007199254740992.0
/* Separates tenant and session id in the session hash input. */
#define HTTP_SESSION_SEP "\x1f"

void st_http_error_set(st_http_error *e, int status, const char *type, const char *code,
                       const char *fmt, ...)
{
    e->status = status;
    e->type = type;
    e->code = code;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof e->message) /* cut: say so */
        memcpy(e->message + sizeof e->message - 4, "...", 4);
}

static st_err http_bad(st_http_error *e, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static st_err http_bad(st_http_error *e, const char *code, const char *fmt, ...)
{
    char text[ST_HTTP_ERR_MSG];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    st_http_error_set(e, HTTP_BAD, HTTP_INVALID, code, "%s", text);
    return ST_EINVAL;
}

static bool http_absent(const cJSON *v) { return v == NULL || cJSON_IsNull(v); }

/* http_int - an integral number in [lo, hi] into *out. */
static st_err http_int(const cJSON *v, const char *name, double lo, double hi, int64_t *out,
                       st_http_error *err)
{
    if (!cJSON_IsNumber(v))
        return http_bad(err, "invalid_type", "%s: expected an integer", name);
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d))
        return http_bad(err, "invalid_type", "%s: expected an integer", name);
    if (d < lo || d > hi)
        return http_bad(err, "invalid_value", "%s: %.17g is not in [%.17g, %.17g]", name, d, lo,
                        hi);
    *out = (int64_t)d;
    return ST_OK;
}

/* http_num - a finite number in [lo, hi] (lo excluded when lo_open). */
static st_err http_num(const cJSON *v, const char *name, double lo, bool lo_open, double hi,
                       double *out, st_http_error *err)
{
    if (!cJSON_IsNumber(v))
        return http_bad(err, "invalid_type", "%s: expected a number", name);
    double d = v->valuedouble;
    if (!isfinite(d) || d < lo || (lo_open && d == lo) || d > hi)
        return http_bad(err, "invalid_value", "%s: %.17g is not in %c%g, %g]", name, d,
                        lo_open ? '(' : '[', lo, hi);
    *out = d;
    return ST_OK;
}

static st_err http_bool(const cJSON *v, const char *name, bool *out, st_http_error *err)
{
    if (!cJSON_IsBool(v))
        return http_bad(err, "invalid_type", "%s: expected a boolean", name);
    *out = cJSON_IsTrue(v);
    return ST_OK;
}

/* http_oom - an allocation failed: a 500, not the client's fault. */
static st_err http_oom(st_http_error *err, const char *what)
{
    st_http_error_set(err, HTTP_SERVER_ERROR, "server_error", NULL, "out of memory for %s", what);
    return ST_ENOMEM;
}

static st_err http_strdup(const char *s, size_t len, char **out, st_http_error *err)
{
    char *d = malloc(len + 1);
    if (d == NULL)
        return http_oom(err, "a string");
    memcpy(d, s, len);
    d[len] = '\0';
    *out = d;
    return ST_OK;
}

static st_err http_string(const cJSON *v, const char *name, char **out, st_http_error *err)
{
    if (!cJSON_IsString(v))
        return http_bad(err, "invalid_type", "%s: expected a string", name);
    return http_strdup(v->valuestring, strlen(v->valuestring), out, err);
}

/* http_content - a message's content: a string, an array of parts whose
 * "text" parts are concatenated, or null (""). */
static st_err http_content(const cJSON *v, size_t i, char **out, st_http_error *err)
{
    if (http_absent(v))
        return http_strdup("", 0, out, err);
    if (cJSON_IsString(v))
        return http_strdup(v->valuestring, strlen(v->valuestring), out, err);
    if (!cJSON_IsArray(v))
        return http_bad(err, "invalid_type",
                        "messages[%zu].content: expected a string or an "
                        "array of text parts",
                        i);
    size_t total = 0, k = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, v)
    {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "type");
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (!cJSON_IsObject(p) || !cJSON_IsString(t) || strcmp(t->valuestring, "text") != 0 ||
            !cJSON_IsString(x))
            return http_bad(err, "invalid_type",
                            "messages[%zu].content[%zu]: expected "
                            "{\"type\": \"text\", \"text\": string} (only text parts are "
                            "supported)",
                            i, k);
        total += strlen(x->valuestring);
        k++;
    }
    char *d = malloc(total + 1);
    if (d == NULL)
        return http_oom(err, "message content");
    size_t at = 0;
    cJSON_ArrayForEach(p, v)
    {
        const char *s = cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring;
        size_t n = strlen(s);
        memcpy(d + at, s, n);
        at += n;
    }
    d[at] = '\0';
    *out = d;
    return ST_OK;
}

static st_err http_messages(const cJSON *v, st_http_gen *g, st_http_error *err)
{
    if (http_absent(v))
        return http_bad(err, "missing_field", "messages: required");
    if (!cJSON_IsArray(v))
        return http_bad(err, "invalid_type", "messages: expected an array");
    int n = cJSON_GetArraySize(v);
    if (n < 1 || n > ST_HTTP_MAX_MESSAGES)
        return http_bad(err, "invalid_value", "messages: %d messages; 1..%d are accepted", n,
                        ST_HTTP_MAX_MESSAGES);
    if ((g->msgs = calloc((size_t)n, sizeof *g->msgs)) == NULL)
        return http_oom(err, "messages");
    const cJSON *m;
    cJSON_ArrayForEach(m, v)
    {
        size_t i = g->n_msgs;
        if (!cJSON_IsObject(m))
            return http_bad(err, "invalid_type", "messages[%zu]: expected an object", i);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsString(role) || role->valuestring[0] == '\0')
            return http_bad(err, "invalid_type",
                            "messages[%zu].role: expected a non-empty "
                            "string",
                            i);
        char *r = NULL, *c = NULL;
        st_err e = http_strdup(role->valuestring, strlen(role->valuestring), &r, err);
        if (e == ST_OK && (e = http_content(cJSON_GetObjectItemCaseSensitive(m, "content"), i, &c,
                                            err)) != ST_OK) {
            free(r);
            return e;
        }
        if (e != ST_OK)
            return e;
        g->msgs[i] = (st_chat_msg){.role = r, .content = c};
        g->n_msgs++;
    }
    return ST_OK;
}

/* http_prompt - a completion's prompt: a string, an array of token ids, or
 * an array holding one of those (a batch of one). */
static st_err http_prompt(const cJSON *v, st_http_gen *g, st_http_error *err)
{
    if (http_absent(v))
        return http_bad(err, "missing_field", "prompt: required");
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) >= 1 &&
        (cJSON_IsString(v->child) || cJSON_IsArray(v->child))) {
        if (cJSON_GetArraySize(v) != 1)
            return http_bad(err, "invalid_value",
                            "prompt: a batch of %d prompts; only one "
                            "prompt per request is supported",
                            cJSON_GetArraySize(v));
        v = v->child;
    }
    if (cJSON_IsString(v))
        return http_strdup(v->valuestring, strlen(v->valuestring), &g->prompt, err);
    if (!cJSON_IsArray(v))
        return http_bad(err, "invalid_type",
                        "prompt: expected a string or an array of token "
                        "ids");
    int n = cJSON_GetArraySize(v);
    if (n < 1)
        return http_bad(err, "invalid_value", "prompt: an empty array of token ids");
    if ((g->prompt_ids = malloc((size_t)n * sizeof *g->prompt_ids)) == NULL)
        return http_oom(err, "prompt ids");
    const cJSON *x;
    cJSON_ArrayForEach(x, v)
    {
        int64_t id;
        char name[40];
        snprintf(name, sizeof name, "prompt[%zu]", g->n_prompt_ids);
        st_err e = http_int(x, name, 0, INT32_MAX, &id, err);
        if (e != ST_OK)
            return e;
        g->prompt_ids[g->n_prompt_ids++] = (int32_t)id;
    }
    g->has_ids = true;
    return ST_OK;
}

static st_err http_stop(const cJSON *v, st_http_gen *g, st_http_error *err)
{
    if (http_absent(v))
        return ST_OK;
    int n = cJSON_IsString(v) ? 1 : cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (n < 0)
        return http_bad(err, "invalid_type", "stop: expected a string or an array of strings");
    if (n > ST_HTTP_MAX_STOP)
        return http_bad(err, "invalid_value", "stop: %d strings; at most %d", n, ST_HTTP_MAX_STOP);
    if (n == 0)
        return ST_OK;
    if ((g->stop = calloc((size_t)n, sizeof *g->stop)) == NULL)
        return http_oom(err, "stop strings");
    for (int i = 0; i < n; i++) {
        const cJSON *s = cJSON_IsString(v) ? v : cJSON_GetArrayItem(v, i);
        if (!cJSON_IsString(s))
            return http_bad(err, "invalid_type", "stop[%d]: expected a string", i);
        size_t len = strlen(s->valuestring);
        if (len < 1 || len > ST_HTTP_MAX_STOP_LEN)
            return http_bad(err, "invalid_value", "stop[%d]: %zu bytes; 1..%d are accepted", i, len,
                            ST_HTTP_MAX_STOP_LEN);
        st_err e = http_strdup(s->valuestring, len, &g->stop[i], err);
        if (e != ST_OK)
            return e;
        g->n_stop++;
    }
    return ST_OK;
}

/* http_session - the session_id extension: a string or a non-negative integer. */
static st_err http_session(const cJSON *v, st_http_gen *g, st_http_error *err)
{
    if (http_absent(v))
        return ST_OK;
    if (cJSON_IsString(v)) {
        if (v->valuestring[0] == '\0')
            return http_bad(err, "invalid_value", "session_id: an empty string");
        return http_strdup(v->valuestring, strlen(v->valuestring), &g->session_id, err);
    }
    int64_t id;
    st_err e = http_int(v, "session_id", 0, HTTP_MAX_EXACT, &id, err);
    if (e != ST_OK) {
        if (!cJSON_IsNumber(v))
            http_bad(err, "invalid_type", "session_id: expected a string or an integer");
        return e;
    }
    char text[24];
    int n = snprintf(text, sizeof text, "%lld", (long long)id);
    return http_strdup(text, (size_t)n, &g->session_id, err);
}

/* http_sampling - max tokens, temperature, top_p, seed, n. */
static st_err http_sampling(const cJSON *o, st_http_gen *g, st_http_error *err)
{
    const char *const mt[] = {"max_tokens", "max_completion_tokens"};
    st_err e;
    int64_t i;
    for (size_t k = 0; k < sizeof mt / sizeof mt[0]; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, mt[k]);
        if (http_absent(v))
            continue;
        if ((e = http_int(v, mt[k], 1, ST_HTTP_MAX_TOKENS, &i, err)))
            return e;
        g->max_tokens = (uint32_t)i; /* max_completion_tokens, checked last, wins */
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "temperature");
    if (!http_absent(v)) {
        if ((e = http_num(v, "temperature", st_sampler_range_temp.lo, st_sampler_range_temp.lo_open,
                          ST_SAMPLER_TEMP_MAX_OPENAI, &g->temperature, err)))
            return e;
        g->has_temperature = true;
    }
    v = cJSON_GetObjectItemCaseSensitive(o, "top_p");
    if (!http_absent(v)) {
        if ((e = http_num(v, "top_p", st_sampler_range_top_p.lo, st_sampler_range_top_p.lo_open,
                          st_sampler_range_top_p.hi, &g->top_p, err)))
            return e;
        g->has_top_p = true;
    }
    v = cJSON_GetObjectItemCaseSensitive(o, "seed");
    if (!http_absent(v)) {
        if ((e = http_int(v, "seed", -HTTP_MAX_EXACT, HTTP_MAX_EXACT, &i, err)))
            return e;
        g->seed = (uint64_t)i;
        g->has_seed = true;
    }
    v = cJSON_GetObjectItemCaseSensitive(o, "n");
    if (!http_absent(v)) {
        if ((e = http_int(v, "n", -HTTP_MAX_EXACT, HTTP_MAX_EXACT, &i, err)))
            return e;
        if (i != 1)
            return http_bad(err, "invalid_value",
                            "n: %lld choices asked; only n = 1 is "
                            "supported",
                            (long long)i);
    }
    return ST_OK;
}

/* http_stream - stream and stream_options.include_usage. */
static st_err http_stream(const cJSON *o, st_http_gen *g, st_http_error *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "stream");
    st_err e;
    if (!http_absent(v) && (e = http_bool(v, "stream", &g->stream, err)))
        return e;
    v = cJSON_GetObjectItemCaseSensitive(o, "stream_options");
    if (http_absent(v))
        return ST_OK;
    if (!cJSON_IsObject(v))
        return http_bad(err, "invalid_type", "stream_options: expected an object");
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(v, "include_usage");
    if (!http_absent(u) &&
        (e = http_bool(u, "stream_options.include_usage", &g->include_usage, err)))
        return e;
    return ST_OK;
}

st_err st_http_parse(st_http_kind kind, const char *body, size_t len, st_http_gen *out,
                     st_http_error *err)
{
    memset(out, 0, sizeof *out);
    out->kind = kind;
    const char *end = NULL;
    cJSON *o = cJSON_ParseWithLengthOpts(body, len, &end, false);
    while (o && end && end < body + len && strchr(" \t\r\n", *end) && *end)
        end++;
    if (o && end && end < body + len) { /* something after the value */
        cJSON_Delete(o);
        return http_bad(err, "invalid_json",
                        "the body is not valid JSON (text after the value "
                        "at byte %td)",
                        end - body);
    }
    if (o == NULL)
        return http_bad(err, "invalid_json", "the body is not valid JSON (near byte %td)",
                        cJSON_GetErrorPtr() && cJSON_GetErrorPtr() >= body &&
                                cJSON_GetErrorPtr() <= body + len
                            ? cJSON_GetErrorPtr() - body
                            : (ptrdiff_t)0);
    st_err e = ST_OK;
    const cJSON *v;
    if (!cJSON_IsObject(o)) {
        e = http_bad(err, "invalid_type", "the body must be a JSON object");
        goto out;
    }
    v = cJSON_GetObjectItemCaseSensitive(o, "model");
    if (!http_absent(v) && (e = http_string(v, "model", &out->model, err)))
        goto out;
    v = cJSON_GetObjectItemCaseSensitive(o, "user");
    if (!http_absent(v) && (e = http_string(v, "user", &out->user, err)))
        goto out;
    if (kind == ST_HTTP_CHAT)
        e = http_messages(cJSON_GetObjectItemCaseSensitive(o, "messages"), out, err);
    else
        e = http_prompt(cJSON_GetObjectItemCaseSensitive(o, "prompt"), out, err);
    if (e == ST_OK)
        e = http_sampling(o, out, err);
    if (e == ST_OK)
        e = http_stop(cJSON_GetObjectItemCaseSensitive(o, "stop"), out, err);
    if (e == ST_OK)
        e = http_stream(o, out, err);
    if (e == ST_OK)
        e = http_session(cJSON_GetObjectItemCaseSensitive(o, "session_id"), out, err);
out:
    cJSON_Delete(o);
    return e;
}

void st_http_gen_free(st_http_gen *g)
{
    for (size_t i = 0; i < g->n_msgs; i++) {
        free((char *)g->msgs[i].role);
        free((char *)g->msgs[i].content);
    }
    free(g->msgs);
    for (size_t i = 0; i < g->n_stop; i++)
        free(g->stop[i]);
    free(g->stop);
    free(g->model);
    free(g->prompt);
    free(g->prompt_ids);
    free(g->user);
    free(g->session_id);
    memset(g, 0, sizeof *g);
}

char *st_http_error_json(const st_http_error *e)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *x = o ? cJSON_AddObjectToObject(o, "error") : NULL;
    char *s = NULL;
    if (x && cJSON_AddStringToObject(x, "message", e->message) &&
        cJSON_AddStringToObject(x, "type", e->type ? e->type : HTTP_INVALID) &&
        (e->code ? cJSON_AddStringToObject(x, "code", e->code) != NULL
                 : cJSON_AddNullToObject(x, "code") != NULL))
        s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* http_utf8_start - whether byte b begins a character (is not 10xxxxxx). */
static bool http_utf8_start(unsigned char b) { return (b & 0xC0u) != 0x80u; }

size_t st_http_stop_cut(const char *text, size_t len, char *const *stop, size_t n_stop, bool done,
                        bool stopped)
{
    if (n_stop == 0)
        return len;
    if (done) {
        if (!stopped)
            return len;
        size_t cut = len;
        for (size_t i = 0; i < n_stop; i++) {
            size_t sl = strlen(stop[i]);
            const char *at = sl ? memmem(text, len, stop[i], sl) : NULL;
            if (at != NULL && (size_t)(at - text) < cut)
                cut = (size_t)(at - text);
        }
        return cut;
    }
    size_t hold = 0;
    for (size_t i = 0; i < n_stop; i++) {
        size_t sl = strlen(stop[i]);
        if (sl > 0 && sl - 1 > hold)
            hold = sl - 1;
    }
    size_t cut = len > hold ? len - hold : 0;
    while (cut > 0 && cut < len && !http_utf8_start((unsigned char)text[cut]))
        cut--;
    return cut;
}

const char *st_http_finish_reason(const char *r)
{
    if (r == NULL)
        return NULL;
    if (strcmp(r, "eos") == 0 || strcmp(r, "stop") == 0)
        return "stop";
    if (strcmp(r, "length") == 0)
        return "length";
    return NULL;
}

uint64_t st_http_session_hash(const uint8_t key[ST_HTTP_SESSION_KEY_BYTES], const char *tenant,
                              const char *session_id)
{
    if (session_id == NULL)
        return 0;
    uint8_t h[crypto_generichash_BYTES_MIN];
    crypto_generichash_state st;
    crypto_generichash_init(&st, key, ST_HTTP_SESSION_KEY_BYTES, sizeof h);
    const char *t = tenant ? tenant : "";
    crypto_generichash_update(&st, (const uint8_t *)t, strlen(t));
    crypto_generichash_update(&st, (const uint8_t *)HTTP_SESSION_SEP, strlen(HTTP_SESSION_SEP));
    crypto_generichash_update(&st, (const uint8_t *)session_id, strlen(session_id));
    crypto_generichash_final(&st, h, sizeof h);
    uint64_t v = 0;
    for (size_t i = 0; i < sizeof v; i++)
        v |= (uint64_t)h[i] << (8 * i);
    return v ? v : 1; /* 0 would ask for a fresh session */
}
