/* http_loadgen.c - a load generator for Strata's HTTP API in C: CLIENTS
 * concurrent streaming /v1/completions requests on one thread (libcurl's
 * multi interface does the HTTP; cJSON reads each event), each reading
 * Server-Sent Events until [DONE]. The same requests and the same output as
 * bench/http-load.mjs, at a fraction of Node's CPU, so that on a small
 * machine the client takes less of the cores the server runs on (the native
 * side's load generator, tests/cluster/loadgen, is C as well).
 *
 *   http_loadgen URL CLIENTS MAX_TOKENS PROMPT_LEN
 *
 * Prints one JSON line: {"clients", "ok", "errors", "first_error", "tokens",
 * "wall_s", "tok_s", "itl_p50_ms", "itl_p99_ms", "ttft_p50_ms"}; a client's
 * tokens are its usage chunk's completion_tokens; inter-token latency is
 * the gap between consecutive events carrying text (the client's clock).
 * Exit status 1 when any request failed. */
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LG_PROMPT_MUL_I 7919u    /* prompt ids: the formula http-load.mjs uses */
#define LG_PROMPT_MUL_K 104729u
#define LG_PROMPT_MOD 1000u
#define LG_POLL_MS 1000
#define LG_ERR_MAX 256
#define LG_EVENT_END "\n\n"
#define LG_DATA "data: "
#define LG_DONE "[DONE]"

typedef struct lg_vec {
    double *v;
    size_t n, cap;
} lg_vec;

typedef struct lg_client {
    CURL *easy;
    char *body;
    char *buf; /* received bytes not yet a whole event */
    size_t len, cap;
    double last_ms;
    bool got_text, done, failed;
    long tokens;
    char err[LG_ERR_MAX];
} lg_client;

static lg_vec lg_gaps, lg_ttfts;
static double lg_t0_ms; /* when every request was sent (one batch) */

static double lg_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void lg_push(lg_vec *v, double x)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 1024;
        double *p = realloc(v->v, cap * sizeof *p);
        if (!p) {
            fprintf(stderr, "http_loadgen: out of memory\n");
            exit(2);
        }
        v->v = p;
        v->cap = cap;
    }
    v->v[v->n++] = x;
}

static int lg_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* the p-th percentile as http-load.mjs takes it; NAN when empty */
static double lg_pct(lg_vec *v, double p)
{
    if (v->n == 0)
        return NAN;
    qsort(v->v, v->n, sizeof *v->v, lg_cmp);
    size_t k = (size_t)floor(p / 100.0 * (double)v->n);
    return v->v[k < v->n ? k : v->n - 1];
}

static void lg_fail(lg_client *c, const char *what)
{
    if (!c->failed)
        snprintf(c->err, sizeof c->err, "%s", what);
    c->failed = true;
}

/* one event's data (NUL-terminated) */
static void lg_event(lg_client *c, const char *data)
{
    if (strcmp(data, LG_DONE) == 0) {
        c->done = true;
        return;
    }
    cJSON *j = cJSON_Parse(data);
    if (!j) {
        lg_fail(c, "an event is not JSON");
        return;
    }
    cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (e) {
        cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
        lg_fail(c, cJSON_IsString(m) ? m->valuestring : "an error event");
    }
    cJSON *u = cJSON_GetObjectItemCaseSensitive(j, "usage");
    cJSON *ct = u ? cJSON_GetObjectItemCaseSensitive(u, "completion_tokens") : NULL;
    if (cJSON_IsNumber(ct))
        c->tokens = (long)ct->valuedouble;
    cJSON *ch = cJSON_GetObjectItemCaseSensitive(j, "choices");
    cJSON *c0 = cJSON_IsArray(ch) ? cJSON_GetArrayItem(ch, 0) : NULL;
    cJSON *text = c0 ? cJSON_GetObjectItemCaseSensitive(c0, "text") : NULL;
    if (cJSON_IsString(text) && text->valuestring[0]) {
        double now = lg_now_ms();
        if (c->got_text)
            lg_push(&lg_gaps, now - c->last_ms);
        else
            lg_push(&lg_ttfts, now - lg_t0_ms);
        c->got_text = true;
        c->last_ms = now;
    }
    cJSON_Delete(j);
}

static size_t lg_write(char *p, size_t size, size_t n, void *arg)
{
    lg_client *c = arg;
    size_t len = size * n;
    if (c->len + len + 1 > c->cap) {
        size_t cap = (c->len + len + 1) * 2;
        char *b = realloc(c->buf, cap);
        if (!b)
            return 0; /* libcurl ends the transfer with an error */
        c->buf = b;
        c->cap = cap;
    }
    memcpy(c->buf + c->len, p, len);
    c->len += len;
    c->buf[c->len] = '\0';
    char *start = c->buf, *end;
    while ((end = strstr(start, LG_EVENT_END)) != NULL) {
        *end = '\0';
        if (strncmp(start, LG_DATA, strlen(LG_DATA)) == 0)
            lg_event(c, start + strlen(LG_DATA));
        start = end + strlen(LG_EVENT_END);
    }
    c->len -= (size_t)(start - c->buf);
    memmove(c->buf, start, c->len + 1);
    return len;
}

static char *lg_body(unsigned i, unsigned max_tokens, unsigned prompt_len)
{
    cJSON *b = cJSON_CreateObject();
    cJSON *prompt = cJSON_AddArrayToObject(b, "prompt");
    for (unsigned k = 0; k < prompt_len; k++)
        cJSON_AddItemToArray(prompt, cJSON_CreateNumber(1 + (i * LG_PROMPT_MUL_I + k * LG_PROMPT_MUL_K) % LG_PROMPT_MOD));
    cJSON_AddNumberToObject(b, "max_tokens", max_tokens);
    cJSON_AddNumberToObject(b, "temperature", 0);
    cJSON_AddBoolToObject(b, "stream", true);
    cJSON *so = cJSON_AddObjectToObject(b, "stream_options");
    cJSON_AddBoolToObject(so, "include_usage", true);
    char *s = cJSON_PrintUnformatted(b);
    cJSON_Delete(b);
    return s;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: http_loadgen URL CLIENTS MAX_TOKENS PROMPT_LEN\n");
        return 2;
    }
    unsigned clients = (unsigned)strtoul(argv[2], NULL, 10);
    unsigned max_tokens = (unsigned)strtoul(argv[3], NULL, 10);
    unsigned prompt_len = (unsigned)strtoul(argv[4], NULL, 10);
    if (clients == 0 || curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "http_loadgen: no clients, or libcurl did not start\n");
        return 2;
    }
    size_t url_len = strlen(argv[1]) + sizeof "/v1/completions";
    char *url = malloc(url_len);
    lg_client *cs = calloc(clients, sizeof *cs);
    CURLM *multi = curl_multi_init();
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
    if (!url || !cs || !multi || !hdr) {
        fprintf(stderr, "http_loadgen: out of memory\n");
        return 2;
    }
    snprintf(url, url_len, "%s/v1/completions", argv[1]);
    double t0 = lg_t0_ms = lg_now_ms();
    for (unsigned i = 0; i < clients; i++) {
        lg_client *c = &cs[i];
        c->body = lg_body(i, max_tokens, prompt_len);
        c->easy = curl_easy_init();
        if (!c->body || !c->easy) {
            fprintf(stderr, "http_loadgen: out of memory\n");
            return 2;
        }
        curl_easy_setopt(c->easy, CURLOPT_URL, url);
        curl_easy_setopt(c->easy, CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(c->easy, CURLOPT_POSTFIELDS, c->body);
        curl_easy_setopt(c->easy, CURLOPT_WRITEFUNCTION, lg_write);
        curl_easy_setopt(c->easy, CURLOPT_WRITEDATA, c);
        curl_easy_setopt(c->easy, CURLOPT_PRIVATE, c);
        curl_multi_add_handle(multi, c->easy);
    }
    int running = 1;
    while (running) {
        CURLMcode mc = curl_multi_perform(multi, &running);
        if (mc == CURLM_OK && running)
            mc = curl_multi_poll(multi, NULL, 0, LG_POLL_MS, NULL);
        if (mc != CURLM_OK) {
            fprintf(stderr, "http_loadgen: %s\n", curl_multi_strerror(mc));
            return 2;
        }
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(multi, &left)) != NULL) {
            if (m->msg != CURLMSG_DONE)
                continue;
            lg_client *c;
            long status = 0;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&c);
            curl_easy_getinfo(m->easy_handle, CURLINFO_RESPONSE_CODE, &status);
            if (m->data.result != CURLE_OK)
                lg_fail(c, curl_easy_strerror(m->data.result));
            else if (status != 200) {
                char what[LG_ERR_MAX];
                snprintf(what, sizeof what, "status %ld: %.200s", status, c->buf ? c->buf : "");
                lg_fail(c, what);
            } else if (!c->done)
                lg_fail(c, "no [DONE]");
        }
    }
    double wall_s = (lg_now_ms() - t0) / 1e3;
    unsigned ok = 0, errors = 0;
    long tokens = 0;
    const char *first_error = NULL;
    for (unsigned i = 0; i < clients; i++) {
        if (cs[i].failed) {
            errors++;
            if (!first_error)
                first_error = cs[i].err;
        } else {
            ok++;
            tokens += cs[i].tokens;
        }
    }
    cJSON *out = cJSON_CreateObject();
    cJSON_AddNumberToObject(out, "clients", clients);
    cJSON_AddNumberToObject(out, "ok", ok);
    cJSON_AddNumberToObject(out, "errors", errors);
    if (first_error)
        cJSON_AddStringToObject(out, "first_error", first_error);
    cJSON_AddNumberToObject(out, "tokens", (double)tokens);
    cJSON_AddNumberToObject(out, "wall_s", round(wall_s * 1e3) / 1e3);
    cJSON_AddNumberToObject(out, "tok_s", round((double)tokens / wall_s * 10) / 10);
    double p50 = lg_pct(&lg_gaps, 50), p99 = lg_pct(&lg_gaps, 99), tt = lg_pct(&lg_ttfts, 50);
    /* cJSON prints NAN as null, as JSON.stringify prints http-load.mjs's */
    cJSON_AddNumberToObject(out, "itl_p50_ms", p50);
    cJSON_AddNumberToObject(out, "itl_p99_ms", p99);
    cJSON_AddNumberToObject(out, "ttft_p50_ms", tt);
    char *s = cJSON_PrintUnformatted(out);
    puts(s ? s : "{}");
    free(s);
    cJSON_Delete(out);
    for (unsigned i = 0; i < clients; i++) {
        curl_multi_remove_handle(multi, cs[i].easy);
        curl_easy_cleanup(cs[i].easy);
        cJSON_free(cs[i].body);
        free(cs[i].buf);
    }
    curl_slist_free_all(hdr);
    curl_multi_cleanup(multi);
    curl_global_cleanup();
    free(cs);
    free(url);
    free(lg_gaps.v);
    free(lg_ttfts.v);
    return errors ? 1 : 0;
}
