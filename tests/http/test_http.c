/* test_http.c - the HTTP gateway's pure parts: request bodies (every field
 * and its type errors), stop-string cuts, answers, API key files, rate
 * buckets under an injected clock, and the metrics text. */
#include <check.h>
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/http/http_keys.h"
#include "common/http/http_rate.h"
#include "coordinator/http/http_req.h"
#include "coordinator/http/http_resp.h"
#include "coordinator/http/http_stats.h"

#define NS_PER_S 1000000000ull

/* parse_err - parses body as kind, expects a 400 whose message starts
 * with field. */
static void parse_err(st_http_kind kind, const char *body, const char *field)
{
    st_http_gen g;
    st_http_error e;
    st_err rc = st_http_parse(kind, body, strlen(body), &g, &e);
    st_http_gen_free(&g);
    ck_assert_msg(rc == ST_EINVAL, "accepted: %s", body);
    ck_assert_int_eq(e.status, 400);
    ck_assert_str_eq(e.type, "invalid_request_error");
    ck_assert_msg(strncmp(e.message, field, strlen(field)) == 0,
                  "%s: message '%s' does not "
                  "name '%s'",
                  body, e.message, field);
}

START_TEST(test_parse_chat_all_fields)
{
    const char *b =
        "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"S\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
        "{\"type\":\"text\",\"text\":\"b\"}]},{\"role\":\"assistant\",\"content\":null}],"
        "\"max_tokens\":5,\"max_completion_tokens\":7,\"temperature\":0,\"top_p\":0.5,"
        "\"seed\":-1,\"stop\":[\"x\",\"yz\"],\"stream\":true,\"stream_options\":"
        "{\"include_usage\":true},\"n\":1,\"user\":\"u\",\"session_id\":42,"
        "\"logprobs\":false,\"unknown\":{\"deep\":[1]}}";
    st_http_gen g;
    st_http_error e;
    ck_assert_int_eq(st_http_parse(ST_HTTP_CHAT, b, strlen(b), &g, &e), ST_OK);
    ck_assert_str_eq(g.model, "m");
    ck_assert_uint_eq(g.n_msgs, 3);
    ck_assert_str_eq(g.msgs[1].content, "ab");
    ck_assert_str_eq(g.msgs[2].content, "");
    ck_assert_uint_eq(g.max_tokens, 7);
    ck_assert(g.has_temperature && g.temperature == 0);
    ck_assert(g.has_top_p && g.top_p == 0.5);
    ck_assert(g.has_seed && g.seed == UINT64_MAX);
    ck_assert_uint_eq(g.n_stop, 2);
    ck_assert_str_eq(g.stop[1], "yz");
    ck_assert(g.stream && g.include_usage);
    ck_assert_str_eq(g.user, "u");
    ck_assert_str_eq(g.session_id, "42");
    st_http_gen_free(&g);
    const char *nulls = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"model\":null,"
                        "\"max_tokens\":null,\"stop\":null,\"stream\":null,\"n\":null}";
    ck_assert_int_eq(st_http_parse(ST_HTTP_CHAT, nulls, strlen(nulls), &g, &e), ST_OK);
    ck_assert_ptr_null(g.model);
    ck_assert(!g.stream && g.max_tokens == 0 && g.n_stop == 0);
    st_http_gen_free(&g);
}
END_TEST

#define CHAT_OK "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"

START_TEST(test_parse_type_errors)
{
    parse_err(ST_HTTP_CHAT, "{\"model\":1," CHAT_OK "}", "model");
    parse_err(ST_HTTP_CHAT, "{\"user\":[]," CHAT_OK "}", "user");
    parse_err(ST_HTTP_CHAT, "{}", "messages");
    parse_err(ST_HTTP_CHAT, "{\"messages\":\"hi\"}", "messages");
    parse_err(ST_HTTP_CHAT, "{\"messages\":[]}", "messages");
    parse_err(ST_HTTP_CHAT, "{\"messages\":[3]}", "messages[0]");
    parse_err(ST_HTTP_CHAT, "{\"messages\":[{\"content\":\"x\"}]}", "messages[0].role");
    parse_err(ST_HTTP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}",
              "messages[0].content");
    parse_err(ST_HTTP_CHAT,
              "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
              "\"image_url\"}]}]}",
              "messages[0].content[0]");
    parse_err(ST_HTTP_CHAT, "{\"max_tokens\":\"5\"," CHAT_OK "}", "max_tokens");
    parse_err(ST_HTTP_CHAT, "{\"max_tokens\":1.5," CHAT_OK "}", "max_tokens");
    parse_err(ST_HTTP_CHAT, "{\"max_tokens\":0," CHAT_OK "}", "max_tokens");
    parse_err(ST_HTTP_CHAT, "{\"max_completion_tokens\":-3," CHAT_OK "}", "max_completion_tokens");
    parse_err(ST_HTTP_CHAT, "{\"temperature\":\"hot\"," CHAT_OK "}", "temperature");
    parse_err(ST_HTTP_CHAT, "{\"temperature\":2.5," CHAT_OK "}", "temperature");
    parse_err(ST_HTTP_CHAT, "{\"temperature\":-0.1," CHAT_OK "}", "temperature");
    parse_err(ST_HTTP_CHAT, "{\"temperature\":1e999," CHAT_OK "}", "temperature");
    parse_err(ST_HTTP_CHAT, "{\"top_p\":0," CHAT_OK "}", "top_p");
    parse_err(ST_HTTP_CHAT, "{\"top_p\":1.01," CHAT_OK "}", "top_p");
    parse_err(ST_HTTP_CHAT, "{\"seed\":\"7\"," CHAT_OK "}", "seed");
    parse_err(ST_HTTP_CHAT, "{\"seed\":0.5," CHAT_OK "}", "seed");
    parse_err(ST_HTTP_CHAT, "{\"stop\":3," CHAT_OK "}", "stop");
    parse_err(ST_HTTP_CHAT, "{\"stop\":[\"a\",4]," CHAT_OK "}", "stop[1]");
    parse_err(ST_HTTP_CHAT, "{\"stop\":[\"\"]," CHAT_OK "}", "stop[0]");
    parse_err(ST_HTTP_CHAT,
              "{\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\","
              "\"10\",\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]," CHAT_OK "}",
              "stop");
    parse_err(ST_HTTP_CHAT, "{\"stream\":\"yes\"," CHAT_OK "}", "stream");
    parse_err(ST_HTTP_CHAT, "{\"stream_options\":1," CHAT_OK "}", "stream_options");
    parse_err(ST_HTTP_CHAT, "{\"stream_options\":{\"include_usage\":1}," CHAT_OK "}",
              "stream_options.include_usage");
    parse_err(ST_HTTP_CHAT, "{\"n\":2," CHAT_OK "}", "n");
    parse_err(ST_HTTP_CHAT, "{\"n\":\"1\"," CHAT_OK "}", "n");
    parse_err(ST_HTTP_CHAT, "{\"session_id\":true," CHAT_OK "}", "session_id");
    parse_err(ST_HTTP_CHAT, "{\"session_id\":-1," CHAT_OK "}", "session_id");
    parse_err(ST_HTTP_CHAT, "{\"session_id\":\"\"," CHAT_OK "}", "session_id");
    parse_err(ST_HTTP_COMPLETION, "{}", "prompt");
    parse_err(ST_HTTP_COMPLETION, "{\"prompt\":5}", "prompt");
    parse_err(ST_HTTP_COMPLETION, "{\"prompt\":[]}", "prompt");
    parse_err(ST_HTTP_COMPLETION, "{\"prompt\":[1,2.5]}", "prompt[1]");
    parse_err(ST_HTTP_COMPLETION, "{\"prompt\":[1,-2]}", "prompt[1]");
    parse_err(ST_HTTP_COMPLETION, "{\"prompt\":[\"a\",\"b\"]}", "prompt");
    parse_err(ST_HTTP_COMPLETION, "{\"prompt\":{}}", "prompt");
}
END_TEST

START_TEST(test_parse_malformed)
{
    st_http_gen g;
    st_http_error e;
    const char *bad[] =
        {"", "{", "{\"prompt\":}", "[1,2]", "\"x\"", "{\"prompt\":\"a\"} x", "{\"prompt\":NaN}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(st_http_parse(ST_HTTP_COMPLETION, bad[i], strlen(bad[i]), &g, &e),
                         ST_EINVAL);
        ck_assert_int_eq(e.status, 400);
        st_http_gen_free(&g);
    }
}
END_TEST

START_TEST(test_parse_completion_prompts)
{
    st_http_gen g;
    st_http_error e;
    const char *b = "{\"prompt\":[[5,6,7]]}";
    ck_assert_int_eq(st_http_parse(ST_HTTP_COMPLETION, b, strlen(b), &g, &e), ST_OK);
    ck_assert(g.has_ids && g.n_prompt_ids == 3 && g.prompt_ids[2] == 7);
    st_http_gen_free(&g);
    b = "{\"prompt\":[\"one\"],\"stop\":\"\\n\"}";
    ck_assert_int_eq(st_http_parse(ST_HTTP_COMPLETION, b, strlen(b), &g, &e), ST_OK);
    ck_assert(!g.has_ids);
    ck_assert_str_eq(g.prompt, "one");
    ck_assert_uint_eq(g.n_stop, 1);
    ck_assert_str_eq(g.stop[0], "\n");
    st_http_gen_free(&g);
}
END_TEST

START_TEST(test_stop_cut)
{
    char *stop[] = {"END", "xy"};
    const char *t = "abcEN";
    ck_assert_uint_eq(st_http_stop_cut(t, 5, stop, 2, false, false), 3); /* "EN" may begin END */
    ck_assert_uint_eq(st_http_stop_cut(t, 5, stop, 0, false, false), 5);
    ck_assert_uint_eq(st_http_stop_cut("abENDxy", 7, stop, 2, true, true), 2);
    ck_assert_uint_eq(st_http_stop_cut("axyEND", 6, stop, 2, true, true), 1);
    ck_assert_uint_eq(st_http_stop_cut("abEND", 5, stop, 2, true, false), 5); /* eos: no cut */
    const char *u = "a\xc3\xa9"; /* a, e-acute: a hold of 2 must not split the character */
    ck_assert_uint_eq(st_http_stop_cut(u, 3, stop, 2, false, false), 1);
    char *one[] = {"Z"};
    ck_assert_uint_eq(st_http_stop_cut(u, 3, one, 1, false, false), 3);
}
END_TEST

START_TEST(test_finish_and_session)
{
    ck_assert_str_eq(st_http_finish_reason("eos"), "stop");
    ck_assert_str_eq(st_http_finish_reason("stop"), "stop");
    ck_assert_str_eq(st_http_finish_reason("length"), "length");
    ck_assert_ptr_null(st_http_finish_reason("error"));
    ck_assert_ptr_null(st_http_finish_reason("cancelled"));
    uint8_t k1[ST_HTTP_SESSION_KEY_BYTES] = {1}, k2[ST_HTTP_SESSION_KEY_BYTES] = {2};
    ck_assert_uint_eq(st_http_session_hash(k1, "k:1", NULL), 0);
    uint64_t a = st_http_session_hash(k1, "k:1", "s"), b = st_http_session_hash(k1, "k:2", "s");
    ck_assert(a != 0 && b != 0 && a != b);
    ck_assert_uint_eq(a, st_http_session_hash(k1, "k:1", "s"));
    /* keyed: another gateway's secret gives another session id */
    ck_assert(a != st_http_session_hash(k2, "k:1", "s"));
}
END_TEST

START_TEST(test_error_json)
{
    st_http_error e;
    st_http_error_set(&e, 404, "invalid_request_error", "model_not_found", "no %s", "x");
    char *s = st_http_error_json(&e);
    ck_assert_str_eq(s, "{\"error\":{\"message\":\"no x\",\"type\":\"invalid_request_error\","
                        "\"code\":\"model_not_found\"}}");
    free(s);
    st_http_error_set(&e, 500, "server_error", NULL, "%s", "y");
    s = st_http_error_json(&e);
    ck_assert_str_eq(s, "{\"error\":{\"message\":\"y\",\"type\":\"server_error\",\"code\":null}}");
    free(s);
    char big[1000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    st_http_error_set(&e, 400, "t", NULL, "%s", big);
    ck_assert_uint_eq(strlen(e.message), ST_HTTP_ERR_MSG - 1);
    ck_assert_str_eq(e.message + ST_HTTP_ERR_MSG - 4, "...");
}
END_TEST

START_TEST(test_resp_documents)
{
    st_http_ident r = {.kind = ST_HTTP_CHAT, .id = "chatcmpl-1", .created = 7, .model = "m"};
    char *s = st_http_resp_chunk(&r, "hi", 2, true, NULL);
    ck_assert_str_eq(s, "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":7,"
                        "\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":"
                        "\"assistant\",\"content\":\"hi\"},\"finish_reason\":null}]}");
    free(s);
    s = st_http_resp_chunk(&r, "", 0, false, "stop");
    ck_assert_ptr_nonnull(strstr(s, "\"delta\":{},\"finish_reason\":\"stop\""));
    free(s);
    s = st_http_resp_usage(&r, 3, 4);
    ck_assert_ptr_nonnull(strstr(s, "\"choices\":[],\"usage\":{\"prompt_tokens\":3,"
                                    "\"completion_tokens\":4,\"total_tokens\":7}"));
    free(s);
    r.kind = ST_HTTP_COMPLETION;
    s = st_http_resp_full(&r, "a\0b\"", 4, "length", 1, 2);
    cJSON *o = cJSON_Parse(s);
    ck_assert_ptr_nonnull(o);
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
    ck_assert_str_eq(cJSON_GetObjectItem(o, "object")->valuestring, "text_completion");
    ck_assert_ptr_nonnull(strstr(s, "\"text\":\"a\\u0000b\\\"\""));
    ck_assert_str_eq(cJSON_GetObjectItem(c, "finish_reason")->valuestring, "length");
    cJSON_Delete(o);
    free(s);
    s = st_http_resp_models("l3", "alias", 5);
    ck_assert_str_eq(s, "{\"data\":[{\"id\":\"l3\",\"object\":\"model\",\"created\":5,\"owned_by\":"
                        "\"strata\"},{\"id\":\"alias\",\"object\":\"model\",\"created\":5,"
                        "\"owned_by\":\"strata\"}],\"object\":\"list\"}");
    free(s);
}
END_TEST

START_TEST(test_keys_parse)
{
    const char *t = "# keys\n\nkey-aaaa-0001 rpm=60 tpm=1000\n  key-bbbb-0002\t\n";
    st_http_keys *k;
    ck_assert_int_eq(st_http_keys_parse("f", t, strlen(t), &k), ST_OK);
    ck_assert_uint_eq(st_http_keys_count(k), 2);
    ck_assert_int_eq(st_http_keys_find(k, "key-bbbb-0002", 13), 1);
    ck_assert_int_eq(st_http_keys_find(k, "key-aaaa-0001", 13), 0);
    ck_assert_int_eq(st_http_keys_find(k, "key-aaaa-000", 12), -1);
    ck_assert_int_eq(st_http_keys_find(k, "", 0), -1);
    st_http_limits l = st_http_keys_limits(k, 0);
    ck_assert(l.rpm == 60 && l.tpm == 1000);
    l = st_http_keys_limits(k, 1);
    ck_assert(l.rpm == 0 && l.tpm == 0);
    /* the key's own limits win; the server's fill what the key leaves */
    st_http_limits dflt = {.rpm = 5, .tpm = 7};
    l = st_http_keys_limits_over(k, 0, dflt);
    ck_assert(l.rpm == 60 && l.tpm == 1000);
    l = st_http_keys_limits_over(k, 1, dflt);
    ck_assert(l.rpm == 5 && l.tpm == 7);
    st_http_keys_free(k);
    const char *bad[] = {"",
                         "# only\n",
                         "short\n",
                         "key-aaaa-0001 rpm=x\n",
                         "key-aaaa-0001 burst=3\n",
                         "key-aaaa-0001\nkey-aaaa-0001\n",
                         "key-aaaa-0001 rpm=99999999999\n",
                         "key-\001aaa-0001\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(st_http_keys_parse("f", bad[i], strlen(bad[i]), &k) != ST_OK, "%zu", i);
        ck_assert_ptr_null(k);
    }
}
END_TEST

START_TEST(test_keys_file_mode)
{
    char path[] = "/tmp/strata-keys-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    const char *t = "key-aaaa-0001\n";
    ck_assert_int_eq(write(fd, t, strlen(t)), (int)strlen(t));
    close(fd);
    st_http_keys *k;
    ck_assert_int_eq(chmod(path, 0644), 0);
    ck_assert_int_eq(st_http_keys_load(path, &k), ST_EINVAL);
    ck_assert_int_eq(chmod(path, 0620), 0);
    ck_assert_int_eq(st_http_keys_load(path, &k), ST_EINVAL);
    ck_assert_int_eq(chmod(path, 0600), 0);
    ck_assert_int_eq(st_http_keys_load(path, &k), ST_OK);
    ck_assert_uint_eq(st_http_keys_count(k), 1);
    st_http_keys_free(k);
    unlink(path);
    ck_assert_int_eq(st_http_keys_load(path, &k), ST_ENOENT);
}
END_TEST

START_TEST(test_rate_requests)
{
    st_http_rate *r;
    ck_assert_int_eq(st_http_rate_open(16, &r), ST_OK);
    st_http_limits l = {.rpm = 2, .tpm = 0};
    uint64_t t = 1000 * NS_PER_S;
    ck_assert_uint_eq(st_http_rate_admit(r, "a", l, t), 0);
    ck_assert_uint_eq(st_http_rate_admit(r, "a", l, t), 0);
    ck_assert_uint_eq(st_http_rate_admit(r, "a", l, t), 30); /* 1 token per 30 s */
    ck_assert_uint_eq(st_http_rate_admit(r, "b", l, t), 0);  /* its own bucket */
    ck_assert_uint_eq(st_http_rate_admit(r, "a", l, t + 29 * NS_PER_S), 1);
    ck_assert_uint_eq(st_http_rate_admit(r, "a", l, t + 30 * NS_PER_S), 0);
    ck_assert_uint_eq(st_http_rate_admit(r, "a", l, t + 30 * NS_PER_S), 30);
    st_http_limits none = {0, 0};
    ck_assert_uint_eq(st_http_rate_admit(r, "c", none, t), 0);
    ck_assert_uint_eq(st_http_rate_entries(r), 2); /* unlimited ones are not recorded */
    st_http_rate_close(r);
}
END_TEST

START_TEST(test_rate_tokens)
{
    st_http_rate *r;
    ck_assert_int_eq(st_http_rate_open(4, &r), ST_OK);
    st_http_limits l = {.rpm = 0, .tpm = 60};
    uint64_t t = 5 * NS_PER_S;
    ck_assert_uint_eq(st_http_rate_admit(r, "k", l, t), 0);
    st_http_rate_spend(r, "k", l, 90, t); /* 30 in debt: 31 s to reach 1 */
    ck_assert_uint_eq(st_http_rate_admit(r, "k", l, t), 31);
    ck_assert_uint_eq(st_http_rate_admit(r, "k", l, t + 31 * NS_PER_S), 0);
    /* refill is capped at a minute's allowance */
    st_http_rate_spend(r, "k", l, 60, t + 1000 * NS_PER_S);
    ck_assert_uint_eq(st_http_rate_admit(r, "k", l, t + 1000 * NS_PER_S), 1);
    st_http_rate_close(r);
}
END_TEST

START_TEST(test_rate_lru_bounded)
{
    st_http_rate *r;
    ck_assert_int_eq(st_http_rate_open(3, &r), ST_OK);
    st_http_limits l = {.rpm = 1, .tpm = 0};
    uint64_t t = NS_PER_S;
    char id[32];
    ck_assert_uint_eq(st_http_rate_admit(r, "old", l, t), 0);
    ck_assert_uint_eq(st_http_rate_admit(r, "hot", l, t), 0);
    for (int i = 0; i < 10000; i++) {
        snprintf(id, sizeof id, "flood-%d", i);
        ck_assert_uint_eq(st_http_rate_admit(r, id, l, t), 0);
        ck_assert_uint_eq(st_http_rate_admit(r, "hot", l, t), 60); /* kept: recently seen */
        ck_assert_uint_le(st_http_rate_entries(r), 3);
    }
    ck_assert_uint_eq(st_http_rate_admit(r, "old", l, t), 0); /* evicted: starts full */
    char longid[300];
    memset(longid, 'x', sizeof longid - 1);
    longid[sizeof longid - 1] = '\0';
    ck_assert_uint_eq(st_http_rate_admit(r, longid, l, t), 0);
    ck_assert_uint_eq(st_http_rate_admit(r, longid, l, t), 60);
    st_http_rate_close(r);
    ck_assert_int_eq(st_http_rate_open(0, &r), ST_EINVAL);
    st_http_rate_close(NULL);
}
END_TEST

START_TEST(test_metrics_text)
{
    static st_http_metrics m;
    st_http_metrics_init(&m);
    st_http_metrics_request(&m, ST_HTTP_EP_CHAT, 200);
    st_http_metrics_request(&m, ST_HTTP_EP_CHAT, 200);
    st_http_metrics_request(&m, ST_HTTP_EP_HEALTH, 503);
    st_http_metrics_request(&m, ST_HTTP_EP_OTHER, 42); /* out of range: counted as 599 */
    atomic_fetch_add(&m.generated_tokens, 9);
    st_http_metrics_ttft(&m, 20000000); /* 0.02 s */
    st_http_metrics_itl(&m, 3000000);   /* 0.003 s */
    Strata__StatusReply s = STRATA__STATUS_REPLY__INIT;
    Strata__SchedStatus q = STRATA__SCHED_STATUS__INIT;
    Strata__Counters c = STRATA__COUNTERS__INIT;
    Strata__WorkerStatus w = STRATA__WORKER_STATUS__INIT;
    Strata__Heartbeat hb = STRATA__HEARTBEAT__INIT;
    Strata__LayerLatency ll = STRATA__LAYER_LATENCY__INIT;
    Strata__Counters wc = STRATA__COUNTERS__INIT;
    Strata__LayerLatency *lls[] = {&ll};
    Strata__WorkerStatus *ws[] = {&w};
    ll.layer = 3;
    ll.ema_ms = 1.5;
    wc.steps = 77;
    hb.n_layers = 1;
    hb.layers = lls;
    hb.counters = &wc;
    w.id = 5;
    w.name = "w\"0";
    w.state = "serving";
    w.last = &hb;
    q.queued = 4;
    q.kv_bytes = 1024;
    c.bad_packets = 2;
    s.epoch = 3;
    s.sched = &q;
    s.counters = &c;
    s.n_workers = 1;
    s.workers = ws;
    char *t;
    size_t len;
    ck_assert_int_eq(st_http_metrics_render(&m, &s, "l3", &t, &len), ST_OK);
    ck_assert_uint_eq(strlen(t), len);
    const char *want[] = {
        "# TYPE strata_http_requests_total counter\n",
        "strata_http_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"} 2\n",
        "strata_http_requests_total{endpoint=\"/health\",status=\"503\"} 1\n",
        "strata_http_requests_total{endpoint=\"other\",status=\"599\"} 1\n",
        "strata_generated_tokens_total 9\n",
        "strata_time_to_first_token_seconds_bucket{le=\"0.01\"} 0\n",
        "strata_time_to_first_token_seconds_bucket{le=\"0.025\"} 1\n",
        "strata_time_to_first_token_seconds_bucket{le=\"+Inf\"} 1\n",
        "strata_time_to_first_token_seconds_sum 0.020000000\n",
        "strata_inter_token_latency_seconds_bucket{le=\"0.0025\"} 0\n",
        "strata_inter_token_latency_seconds_bucket{le=\"0.005\"} 1\n",
        "strata_inter_token_latency_seconds_count 1\n",
        "strata_info{model=\"l3\"} 1\n",
        "strata_epoch 3\n",
        "strata_queue_depth 4\n",
        "strata_kv_bytes 1024\n",
        "strata_bad_packets_total 2\n",
        "strata_worker_layer_latency_ema_seconds{worker=\"w\\\"0\",id=\"5\",layer=\"3\"} "
        "0.001500000\n",
        "strata_worker_steps_total{worker=\"w\\\"0\",id=\"5\"} 77\n",
        "strata_worker_up{worker=\"w\\\"0\",id=\"5\"} 1\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(t, want[i]) != NULL, "missing: %s", want[i]);
    /* every line is a comment or "name{labels} value" */
    for (char *line = strtok(t, "\n"); line; line = strtok(NULL, "\n"))
        ck_assert_msg(line[0] == '#' || strchr(line, ' ') != NULL, "bad line: %s", line);
    free(t);
    ck_assert_int_eq(st_http_metrics_render(&m, NULL, "l3", &t, &len), ST_OK);
    ck_assert_ptr_null(strstr(t, "strata_epoch"));
    free(t);
}
END_TEST

static Suite *http_suite(void)
{
    Suite *s = suite_create("http");
    TCase *tc = tcase_create("pure");
    tcase_add_test(tc, test_parse_chat_all_fields);
    tcase_add_test(tc, test_parse_type_errors);
    tcase_add_test(tc, test_parse_malformed);
    tcase_add_test(tc, test_parse_completion_prompts);
    tcase_add_test(tc, test_stop_cut);
    tcase_add_test(tc, test_finish_and_session);
    tcase_add_test(tc, test_error_json);
    tcase_add_test(tc, test_resp_documents);
    tcase_add_test(tc, test_keys_parse);
    tcase_add_test(tc, test_keys_file_mode);
    tcase_add_test(tc, test_rate_requests);
    tcase_add_test(tc, test_rate_tokens);
    tcase_add_test(tc, test_rate_lru_bounded);
    tcase_add_test(tc, test_metrics_text);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(http_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
