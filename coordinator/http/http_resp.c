/* http_resp.c - OpenAI-shaped answer documents (see http_resp.h). */
#include "coordinator/http/http_resp.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* resp_string - a cJSON string of NUL-free text[0..len). */
static cJSON *resp_string(const char *text, size_t len)
{
    char *s = malloc(len + 1);
    if (s == NULL)
        return NULL;
    memcpy(s, text, len);
    s[len] = '\0';
    cJSON *v = cJSON_CreateString(s);
    free(s);
    return v;
}

/* resp_escape - the JSON string literal of NUL-free text[0..len). */
static char *resp_escape(const char *text, size_t len)
{
    cJSON *s = resp_string(text, len);
    char *esc = s ? cJSON_PrintUnformatted(s) : NULL;
    cJSON_Delete(s);
    return esc;
}

/* resp_text - a JSON string of text[0..len): cJSON strings end at a NUL,
 * so a text holding one is added as a raw, escaped string. */
static cJSON *resp_text(const char *text, size_t len)
{
    if (memchr(text, '\0', len) == NULL)
        return resp_string(text, len);
    /* split at the NULs, escape the pieces with cJSON, join with \u0000 */
    size_t cap = len * 6 + 3, at = 0;
    char *raw = malloc(cap);
    if (raw == NULL)
        return NULL;
    raw[at++] = '"';
    size_t p = 0;
    while (p <= len) {
        const char *z = memchr(text + p, '\0', len - p);
        size_t q = z ? (size_t)(z - text) : len;
        char *esc = resp_escape(text + p, q - p);
        if (esc == NULL) {
            free(raw);
            return NULL;
        }
        size_t el = strlen(esc) - 2; /* without the quotes */
        memcpy(raw + at, esc + 1, el);
        at += el;
        free(esc);
        if (z == NULL)
            break;
        memcpy(raw + at, "\\u0000", 6);
        at += 6;
        p = q + 1;
    }
    raw[at++] = '"';
    raw[at] = '\0';
    cJSON *v = cJSON_CreateRaw(raw);
    free(raw);
    return v;
}

static cJSON *resp_head(const st_http_ident *r, bool chunk)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL)
        return NULL;
    const char *obj = r->kind == ST_HTTP_CHAT
                          ? (chunk ? "chat.completion.chunk" : "chat.completion")
                          : "text_completion";
    cJSON_AddStringToObject(o, "id", r->id);
    cJSON_AddStringToObject(o, "object", obj);
    cJSON_AddNumberToObject(o, "created", (double)r->created);
    cJSON_AddStringToObject(o, "model", r->model);
    return o;
}

static void resp_usage(cJSON *o, uint32_t n_prompt, uint32_t n_gen)
{
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    if (u == NULL)
        return;
    cJSON_AddNumberToObject(u, "prompt_tokens", n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", n_gen);
    cJSON_AddNumberToObject(u, "total_tokens", (double)n_prompt + n_gen);
}

static void resp_finish(cJSON *c, const char *finish)
{
    if (finish)
        cJSON_AddStringToObject(c, "finish_reason", finish);
    else
        cJSON_AddNullToObject(c, "finish_reason");
}

/* resp_done - prints o (NULL when any part failed: cJSON items whose
 * allocation failed are missing, so the count of members is checked by
 * the caller through `ok`). */
static char *resp_done(cJSON *o, bool ok)
{
    char *s = ok && o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

char *st_http_resp_full(const st_http_ident *r, const char *text, size_t len, const char *finish,
                        uint32_t n_prompt, uint32_t n_gen)
{
    cJSON *o = resp_head(r, false);
    cJSON *cs = o ? cJSON_AddArrayToObject(o, "choices") : NULL;
    cJSON *c = cs ? cJSON_CreateObject() : NULL;
    cJSON *t = c ? resp_text(text, len) : NULL;
    bool ok = t != NULL;
    if (c)
        cJSON_AddItemToArray(cs, c);
    if (ok) {
        cJSON_AddNumberToObject(c, "index", 0);
        if (r->kind == ST_HTTP_CHAT) {
            cJSON *m = cJSON_AddObjectToObject(c, "message");
            ok = m != NULL;
            if (m) {
                cJSON_AddStringToObject(m, "role", "assistant");
                cJSON_AddItemToObject(m, "content", t);
            } else {
                cJSON_Delete(t);
            }
        } else {
            cJSON_AddItemToObject(c, "text", t);
            cJSON_AddNullToObject(c, "logprobs");
        }
        resp_finish(c, finish);
        resp_usage(o, n_prompt, n_gen);
    }
    return resp_done(o, ok);
}

char *st_http_resp_chunk(const st_http_ident *r, const char *text, size_t len, bool first,
                         const char *finish)
{
    cJSON *o = resp_head(r, true);
    cJSON *cs = o ? cJSON_AddArrayToObject(o, "choices") : NULL;
    cJSON *c = cs ? cJSON_CreateObject() : NULL;
    bool ok = c != NULL;
    if (!ok)
        return resp_done(o, false);
    cJSON_AddItemToArray(cs, c);
    cJSON_AddNumberToObject(c, "index", 0);
    cJSON *t = finish && len == 0 ? NULL : resp_text(text, len);
    if (r->kind == ST_HTTP_CHAT) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        ok = d != NULL;
        if (d && first)
            cJSON_AddStringToObject(d, "role", "assistant");
        if (d && t)
            cJSON_AddItemToObject(d, "content", t);
        else
            cJSON_Delete(t);
    } else {
        if (t == NULL)
            t = resp_text("", 0);
        ok = t != NULL;
        cJSON_AddItemToObject(c, "text", t);
        cJSON_AddNullToObject(c, "logprobs");
    }
    resp_finish(c, finish);
    return resp_done(o, ok);
}

char *st_http_resp_usage(const st_http_ident *r, uint32_t n_prompt, uint32_t n_gen)
{
    cJSON *o = resp_head(r, true);
    bool ok = o && cJSON_AddArrayToObject(o, "choices") != NULL;
    if (ok)
        resp_usage(o, n_prompt, n_gen);
    return resp_done(o, ok);
}

char *st_http_resp_models(const char *id, const char *alias, int64_t created)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *d = o ? cJSON_AddArrayToObject(o, "data") : NULL;
    bool ok = d != NULL;
    if (ok)
        cJSON_AddStringToObject(o, "object", "list");
    for (int i = 0; ok && i < 2; i++) {
        const char *name = i ? alias : id;
        if (name == NULL)
            continue;
        cJSON *m = cJSON_CreateObject();
        ok = m != NULL;
        if (m) {
            cJSON_AddStringToObject(m, "id", name);
            cJSON_AddStringToObject(m, "object", "model");
            cJSON_AddNumberToObject(m, "created", (double)created);
            cJSON_AddStringToObject(m, "owned_by", "strata");
            cJSON_AddItemToArray(d, m);
        }
    }
    return resp_done(o, ok);
}
