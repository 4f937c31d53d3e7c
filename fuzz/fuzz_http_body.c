/* fuzz_http_body.c - libFuzzer target of the HTTP gateway's request-body
 * parsers (coordinator/http/http_req.c), the first code that reads an HTTP
 * client's bytes, and of the API key file parser (http_keys.c).
 *
 * Input: one mode byte, then bytes. Mode & 3: 0 a chat body, 1 a
 * completion body, 2 an API key file. A body that parses must give a
 * well-formed request (messages or a prompt, stop strings within the
 * limits) whose answer documents can be built; one that does not must
 * give a 400 (or a 500 for memory) with a non-empty message; the error
 * document must be JSON either way. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/http/http_keys.h"
#include "coordinator/http/http_req.h"
#include "coordinator/http/http_resp.h"

#define FH_MODE_KEYS 2
#define FH_STATUS_BAD 400
#define FH_STATUS_OOM 500

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fh_check(int cond)
{
    if (!cond)
        abort();
}

static void fh_request(st_http_kind kind, const char *body, size_t len)
{
    st_http_gen g;
    st_http_error e;
    st_err rc = st_http_parse(kind, body, len, &g, &e);
    if (rc == ST_OK) {
        fh_check(kind == ST_HTTP_CHAT ? g.n_msgs >= 1 : (g.prompt != NULL) != g.has_ids);
        fh_check(g.n_stop <= ST_HTTP_MAX_STOP);
        for (size_t i = 0; i < g.n_stop; i++)
            fh_check(strlen(g.stop[i]) >= 1 && strlen(g.stop[i]) <= ST_HTTP_MAX_STOP_LEN);
        const char *t = kind == ST_HTTP_CHAT ? g.msgs[0].content : (g.prompt ? g.prompt : "");
        size_t vis = st_http_stop_cut(t, strlen(t), g.stop, g.n_stop, false, false);
        fh_check(vis <= strlen(t));
        st_http_ident r = {.kind = kind, .id = "x", .created = 0, .model = g.model ? g.model : ""};
        char *doc = st_http_resp_full(&r, t, strlen(t), "stop", 1, 1);
        cJSON *o = doc ? cJSON_Parse(doc) : NULL;
        fh_check(doc == NULL || o != NULL);
        cJSON_Delete(o);
        free(doc);
    } else {
        fh_check(e.status == FH_STATUS_BAD || e.status == FH_STATUS_OOM);
        fh_check(e.message[0] != '\0');
        char *doc = st_http_error_json(&e);
        cJSON *o = doc ? cJSON_Parse(doc) : NULL;
        fh_check(doc == NULL || o != NULL);
        cJSON_Delete(o);
        free(doc);
    }
    st_http_gen_free(&g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int mode = data[0] & 3;
    char *copy = malloc(size); /* exact size (no NUL): ASan sees any over-read */
    fh_check(copy != NULL);
    memcpy(copy, data + 1, size - 1);
    if (mode == FH_MODE_KEYS) {
        st_http_keys *k = NULL;
        if (st_http_keys_parse("fuzz", copy, size - 1, &k) == ST_OK) {
            fh_check(st_http_keys_count(k) >= 1);
            fh_check(st_http_keys_find(k, copy, size - 1) >= -1);
        }
        st_http_keys_free(k);
    } else {
        fh_request(mode == 0 ? ST_HTTP_CHAT : ST_HTTP_COMPLETION, copy, size - 1);
    }
    free(copy);
    return 0;
}
