/* http_req.h - the HTTP gateway's request bodies and error documents, as
 * pure functions (no sockets, no clock): what /v1/chat/completions and
 * /v1/completions accept, and the OpenAI-shaped JSON the gateway answers
 * with. docs/http-api.md is the user's view of the same rules.
 *
 * Parsing (st_http_parse) reads a body with cJSON and either fills an
 * st_http_gen or fills an st_http_error naming the offending field: a
 * wrongly typed, NaN, infinite or out-of-range value is a 400
 * invalid_request_error whose message starts with the field's name;
 * unknown fields are ignored; null is "absent" for every optional field.
 * Nothing here depends on the model: token ids are range-checked against
 * n_vocab by the caller, the model name by the router. */
#ifndef ST_COORD_HTTP_REQ_H
#define ST_COORD_HTTP_REQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/text/chat.h"
#include "common/base/err.h"

/* Stop strings per request and bytes per stop string: the scheduler's
 * limits (coordinator/sched/scheduler.h), so a request the gateway accepts is
 * never refused for them by the coordinator. */
#define ST_HTTP_MAX_STOP 16
#define ST_HTTP_MAX_STOP_LEN 256
/* The largest max_tokens accepted (the coordinator bounds it further by
 * the context). */
#define ST_HTTP_MAX_TOKENS (1u << 24)
/* Messages per conversation. */
#define ST_HTTP_MAX_MESSAGES 4096
/* The longest error message. */
#define ST_HTTP_ERR_MSG 320

typedef enum st_http_kind {
    ST_HTTP_CHAT = 1,       /* POST /v1/chat/completions */
    ST_HTTP_COMPLETION = 2, /* POST /v1/completions */
} st_http_kind;

/* A generation request; every string and array is owned (st_http_gen_free). */
typedef struct st_http_gen {
    st_http_kind kind;
    char *model;       /* NULL: absent */
    st_chat_msg *msgs; /* chat: the conversation */
    size_t n_msgs;
    char *prompt;        /* completion: the prompt text, or */
    int32_t *prompt_ids; /* ... its token ids (has_ids) */
    size_t n_prompt_ids;
    bool has_ids;
    uint32_t max_tokens; /* 0: absent (max_completion_tokens wins over max_tokens) */
    bool has_temperature;
    double temperature; /* [0, 2] */
    bool has_top_p;
    double top_p; /* (0, 1] */
    bool has_seed;
    uint64_t seed; /* a negative JSON seed is taken modulo 2^64 */
    char **stop;
    size_t n_stop;
    bool stream;
    bool include_usage; /* stream_options.include_usage */
    char *user;         /* NULL: absent */
    char *session_id;   /* NULL: absent; an integer is kept as its decimal text */
} st_http_gen;

/* An error answer: HTTP status, OpenAI type and code (code NULL: JSON null). */
typedef struct st_http_error {
    int status;
    const char *type;
    const char *code;
    char message[ST_HTTP_ERR_MSG];
} st_http_error;

/* st_http_error_set - fills e (the message is formatted and truncated to
 * ST_HTTP_ERR_MSG - 1 bytes, marked with "..." when cut). */
void st_http_error_set(st_http_error *e, int status, const char *type, const char *code,
                       const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* st_http_parse - parses body[0..len) as a request of kind into *out
 * (zeroed first; free it with st_http_gen_free also on failure). ST_OK, or
 * ST_EINVAL with *err filled (status 400), or ST_ENOMEM (status 500). */
st_err st_http_parse(st_http_kind kind, const char *body, size_t len, st_http_gen *out,
                     st_http_error *err);

/* st_http_gen_free - frees what *g owns; a zeroed g is a no-op. */
void st_http_gen_free(st_http_gen *g);

/* st_http_error_json - {"error":{"message","type","code"}} of e, malloc'ed
 * and NUL-terminated (NULL on allocation failure). */
char *st_http_error_json(const st_http_error *e);

/* st_http_stop_cut - how many bytes of text[0..len) may be shown. When the
 * request ended with reason "stop", the text up to (not including) the
 * earliest occurrence of any stop string. While it runs (done false), the
 * text except its last (longest stop - 1) bytes, which could begin a stop
 * string, and never inside a UTF-8 character. Otherwise len. */
size_t st_http_stop_cut(const char *text, size_t len, char *const *stop, size_t n_stop, bool done,
                        bool stopped);

/* st_http_finish_reason - OpenAI's finish_reason for the coordinator's
 * ("eos" and "stop" -> "stop", "length" -> "length"); NULL for "error",
 * "cancelled" and anything else (the request failed). */
const char *st_http_finish_reason(const char *coord_reason);

#define ST_HTTP_SESSION_KEY_BYTES 32 /* the key of st_http_session_hash */

/* st_http_session_hash - the coordinator session id of a request: 0 (a
 * fresh session) when session_id is NULL, else a nonzero 64-bit BLAKE2b
 * of (tenant, session_id) keyed with key, so that two API keys never share
 * a session and, the key being the gateway's secret (drawn at start), no
 * one outside can compute which coordinator session a (tenant, id) is. */
uint64_t st_http_session_hash(const uint8_t key[ST_HTTP_SESSION_KEY_BYTES], const char *tenant,
                              const char *session_id);

#endif
