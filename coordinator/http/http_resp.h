/* http_resp.h - the JSON documents of generation answers, in OpenAI's
 * shapes (pure functions): a whole chat.completion or text_completion,
 * one streamed chunk (chat.completion.chunk or text_completion), the
 * usage chunk, and the model list. Each returns a malloc'ed,
 * NUL-terminated compact JSON text, or NULL when memory runs out. Text
 * arguments are bytes [0, len) of UTF-8 (the coordinator never splits a
 * character); a NUL byte in them is sent as \u0000, never cut. */
#ifndef ST_COORD_HTTP_RESP_H
#define ST_COORD_HTTP_RESP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "coordinator/http/http_req.h"

/* What every document of one request shares. */
typedef struct st_http_ident {
    st_http_kind kind;
    const char *id;  /* "chatcmpl-..." or "cmpl-..." */
    int64_t created; /* Unix seconds */
    const char *model;
} st_http_ident;

/* st_http_resp_full - the non-streamed answer: text, finish_reason, usage. */
char *st_http_resp_full(const st_http_ident *r, const char *text, size_t len, const char *finish,
                        uint32_t n_prompt, uint32_t n_gen);

/* st_http_resp_chunk - one streamed chunk: the text delta (chat: with
 * "role":"assistant" when first), finish_reason null unless finish is set
 * (then an empty delta is normal). */
char *st_http_resp_chunk(const st_http_ident *r, const char *text, size_t len, bool first,
                         const char *finish);

/* st_http_resp_usage - the usage chunk of stream_options.include_usage:
 * "choices": [] and the usage. */
char *st_http_resp_usage(const st_http_ident *r, uint32_t n_prompt, uint32_t n_gen);

/* st_http_resp_models - GET /v1/models: id, then alias when not NULL. */
char *st_http_resp_models(const char *id, const char *alias, int64_t created);

#endif
