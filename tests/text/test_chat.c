/* test_chat.c - chat templates (common/text/chat.h): every case of
 * tests/text/chat_cases.json (path in argv[1]) rendered byte for byte;
 * recognition of the templates of the shared models and of template
 * texts of each family (the file's "detect" entries); the override; the errors for an unknown
 * template (the names listed), a family not rendered and a model without template; the encoding
 * rule (special tokens parsed, one BOS as the vocabulary asks); the conversation of `strata chat`
 * (cli/chat_conv.c): a second turn only appends, and gives the ids of the whole rendered
 * conversation. */
#include <check.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/chat_conv.h"
#include "common/text/chat.h"
#include "common/model/gguf.h"
#include "common/text/tokenizer.h"

/* The number of cases chat_cases.json holds (a shrunk file fails). */
#define CHAT_N_CASES 68
/* The number of template texts it holds for recognition: 16 small ones,
 * 10 real templates of Gemma, Phi-3 and Qwen models. */
#define CHAT_N_DETECT 26
/* The most messages one case has. */
#define CHAT_MAX_MSGS 8

static const char *cases_path;

static const char *shared_dir(void)
{
    const char *s = getenv("STRATA_SHARED");
    return s && *s ? s : "../shared";
}

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)sz + 1);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(fread(b, 1, (size_t)sz, f), (size_t)sz);
    b[sz] = '\0';
    fclose(f);
    return b;
}

static st_gguf *open_model(const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/models/%s", shared_dir(), name);
    st_gguf *g = NULL;
    st_err e = st_gguf_open(path, &g);
    ck_assert_msg(e == ST_OK, "%s: %s", path, st_errmsg(e));
    return g;
}

/* ---- the recorded cases ---- */

START_TEST(recorded_cases)
{
    char *js = read_all(cases_path);
    cJSON *root = cJSON_Parse(js);
    ck_assert_msg(root != NULL, "bad JSON in %s", cases_path);
    cJSON *cases = cJSON_GetObjectItem(root, "cases");
    ck_assert(cJSON_IsArray(cases));
    int n = cJSON_GetArraySize(cases);
    ck_assert_int_eq(n, CHAT_N_CASES);
    int per[ST_CHAT_COUNT] = {0};
    for (int i = 0; i < n; i++) {
        cJSON *c = cJSON_GetArrayItem(cases, i);
        cJSON *tn = cJSON_GetObjectItem(c, "template"), *cn = cJSON_GetObjectItem(c, "case");
        cJSON *ms = cJSON_GetObjectItem(c, "messages"), *exp = cJSON_GetObjectItem(c, "expected");
        cJSON *gen = cJSON_GetObjectItem(c, "add_generation_prompt");
        ck_assert(cJSON_IsString(tn) && cJSON_IsString(cn) && cJSON_IsArray(ms) &&
                  cJSON_IsString(exp) && cJSON_IsBool(gen));
        /* a case with a model uses the model's own template */
        cJSON *model = cJSON_GetObjectItem(c, "model");
        st_chat_tmpl t;
        st_err e;
        if (cJSON_IsString(model)) {
            st_gguf *g = open_model(model->valuestring);
            e = st_chat_from_gguf(g, NULL, &t);
            st_gguf_close(g);
        } else {
            e = st_chat_detect(tn->valuestring, strlen(tn->valuestring), &t);
        }
        ck_assert_msg(e == ST_OK, "%s: %s", tn->valuestring, st_errmsg(e));
        ck_assert_str_eq(st_chat_tmpl_name(t), tn->valuestring);
        st_chat_msg m[CHAT_MAX_MSGS];
        int nm = cJSON_GetArraySize(ms);
        ck_assert_int_le(nm, CHAT_MAX_MSGS);
        for (int k = 0; k < nm; k++) {
            cJSON *o = cJSON_GetArrayItem(ms, k);
            m[k].role = cJSON_GetObjectItem(o, "role")->valuestring;
            m[k].content = cJSON_GetObjectItem(o, "content")->valuestring;
        }
        char *text = NULL;
        size_t len = 0;
        e = st_chat_render(t, m, (size_t)nm, cJSON_IsTrue(gen), &text, &len);
        ck_assert_msg(e == ST_OK, "%s", st_errmsg(e));
        ck_assert_msg(len == strlen(exp->valuestring) && memcmp(text, exp->valuestring, len) == 0,
                      "%s/%s:\n got [%s]\nwant [%s]", tn->valuestring, cn->valuestring, text,
                      exp->valuestring);
        per[t]++;
        free(text);
    }
    for (int t = 0; t < ST_CHAT_COUNT; t++)
        if (per[t])
            printf("chat: %-18s %d exact cases\n", st_chat_tmpl_name((st_chat_tmpl)t), per[t]);
    cJSON_Delete(root);
    free(js);
}
END_TEST

/* ---- recognition ---- */

static st_chat_tmpl detect_ok(const char *s)
{
    st_chat_tmpl t = ST_CHAT_COUNT;
    st_err e = st_chat_detect(s, strlen(s), &t);
    ck_assert_msg(e == ST_OK, "[%s]: %s", s, st_errmsg(e));
    return t;
}

START_TEST(detect_models)
{
    static const struct {
        const char *file;
        st_chat_tmpl want;
    } m[] = {{"l3-synth-q8_0.gguf", ST_CHAT_LLAMA3},
             {"qw2-synth-q8_0.gguf", ST_CHAT_CHATML},
             /* its own template (Qwen3's) */
             {"w3-qwen3-q8_0.gguf", ST_CHAT_CHATML},
             /* no template: the format of the architecture */
             {"w3-gemma2-f16.gguf", ST_CHAT_GEMMA},
             {"w3-gemma3-q8_0.gguf", ST_CHAT_GEMMA},
             {"w3-phi3-q8_0.gguf", ST_CHAT_PHI3}};
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        st_gguf *g = open_model(m[i].file);
        st_chat_tmpl t;
        st_err e = st_chat_from_gguf(g, NULL, &t);
        ck_assert_msg(e == ST_OK, "%s: %s", m[i].file, st_errmsg(e));
        ck_assert_str_eq(st_chat_tmpl_name(t), st_chat_tmpl_name(m[i].want));
        /* the override wins over the file's template */
        ck_assert_int_eq(st_chat_from_gguf(g, "gemma", &t), ST_OK);
        ck_assert_int_eq(t, ST_CHAT_GEMMA);
        st_gguf_close(g);
    }
}
END_TEST

/* The "detect" entries of chat_cases.json: template texts and the format
 * llama.cpp recognises in each (checked by chat_record.py); the families
 * Strata does not render must be errors naming them. */
START_TEST(detect_texts)
{
    char *js = read_all(cases_path);
    cJSON *root = cJSON_Parse(js);
    ck_assert_ptr_nonnull(root);
    cJSON *det = cJSON_GetObjectItem(root, "detect");
    ck_assert(cJSON_IsArray(det));
    ck_assert_int_eq(cJSON_GetArraySize(det), CHAT_N_DETECT);
    for (int i = 0; i < cJSON_GetArraySize(det); i++) {
        cJSON *o = cJSON_GetArrayItem(det, i);
        const char *text = cJSON_GetObjectItem(o, "text")->valuestring;
        const char *want = cJSON_GetObjectItem(o, "detected")->valuestring;
        st_chat_tmpl t = ST_CHAT_COUNT;
        st_err e = st_chat_detect(text, strlen(text), &t);
        if (strcmp(want, "phi4") == 0 || strcmp(want, "falcon3") == 0) {
            ck_assert_int_eq(e, ST_ETYPE);
            ck_assert_msg(strstr(st_errdetail(), want) != NULL, "[%s]: %s", text, st_errdetail());
            continue;
        }
        ck_assert_msg(e == ST_OK, "[%s]: %s", text, st_errmsg(e));
        ck_assert_msg(strcmp(st_chat_tmpl_name(t), want) == 0, "[%s]: %s, want %s", text,
                      st_chat_tmpl_name(t), want);
    }
    cJSON_Delete(root);
    free(js);
    /* every name selects its own format */
    for (int k = 0; k < ST_CHAT_COUNT; k++)
        ck_assert_int_eq(detect_ok(st_chat_tmpl_name((st_chat_tmpl)k)), k);
}
END_TEST

START_TEST(detect_errors)
{
    st_chat_tmpl t;
    const char *unknown = "{% for m in messages %}{{ m.content }}{% endfor %}";
    ck_assert_int_eq(st_chat_detect(unknown, strlen(unknown), &t), ST_ETYPE);
    const char *d = st_errdetail();
    for (int k = 0; k < ST_CHAT_COUNT; k++)
        ck_assert_msg(strstr(d, st_chat_tmpl_name((st_chat_tmpl)k)) != NULL,
                      "the error [%s] does not list %s", d, st_chat_tmpl_name((st_chat_tmpl)k));
    ck_assert_int_eq(st_chat_detect("nonsense", strlen("nonsense"), &t), ST_ETYPE);
    /* families llama.cpp knows and Strata does not render are named */
    const char *phi4 = "<|im_start|>{{ role }}<|im_sep|>";
    ck_assert_int_eq(st_chat_detect(phi4, strlen(phi4), &t), ST_ETYPE);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "phi4"));
    const char *falcon3 = "<|user|>\n{{ c }}</s><|assistant|>";
    ck_assert_int_eq(st_chat_detect(falcon3, strlen(falcon3), &t), ST_ETYPE);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "falcon3"));
    /* a model without a template and no override */
    st_gguf *g = open_model("stories260K.gguf");
    ck_assert_int_eq(st_chat_from_gguf(g, NULL, &t), ST_EMISSING);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "--chat-template"));
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "llama3"));
    ck_assert_int_eq(st_chat_from_gguf(g, "zephyr", &t), ST_OK);
    ck_assert_int_eq(t, ST_CHAT_ZEPHYR);
    st_gguf_close(g);
    /* bad messages */
    st_chat_msg bad = {"user", NULL};
    char *text;
    size_t len;
    ck_assert_int_eq(st_chat_render(ST_CHAT_CHATML, &bad, 1, true, &text, &len), ST_EINVAL);
    ck_assert_int_eq(st_chat_render(ST_CHAT_COUNT, NULL, 0, true, &text, &len), ST_EINVAL);
    ck_assert_int_eq(st_chat_render(ST_CHAT_CHATML, NULL, 0, false, &text, &len), ST_OK);
    ck_assert_uint_eq(len, 0);
    ck_assert_str_eq(text, "");
    free(text);
}
END_TEST

/* ---- encoding ---- */

static int32_t find_id(const st_tokenizer *tok, const char *piece)
{
    int32_t id = -1;
    ck_assert_int_eq(st_tok_find(tok, piece, strlen(piece), &id), ST_OK);
    return id;
}

START_TEST(encode_rule)
{
    static const st_chat_msg m[] = {{"system", "You are terse."}, {"user", "Hi"}};
    /* Llama 3: the vocabulary adds BOS; the rendered text has none, so one */
    st_gguf *g = open_model("l3-synth-q8_0.gguf");
    st_tokenizer *tok = NULL;
    ck_assert_int_eq(st_tok_from_gguf(g, &tok), ST_OK);
    char *text;
    size_t len;
    ck_assert_int_eq(st_chat_render(ST_CHAT_LLAMA3, m, 2, true, &text, &len), ST_OK);
    int32_t *ids;
    size_t n;
    ck_assert_int_eq(st_chat_encode(tok, text, len, true, &ids, &n), ST_OK);
    ck_assert_uint_gt(n, 2);
    ck_assert_int_eq(ids[0], st_tok_bos(tok));
    ck_assert_int_eq(ids[1], find_id(tok, "<|start_header_id|>"));
    size_t n_bos = 0, n_eot = 0;
    for (size_t i = 0; i < n; i++) {
        n_bos += ids[i] == st_tok_bos(tok);
        n_eot += ids[i] == find_id(tok, "<|eot_id|>");
    }
    ck_assert_uint_eq(n_bos, 1);
    ck_assert_uint_eq(n_eot, 2);
    ck_assert_int_eq(ids[n - 1], find_id(tok, "\xc4\x8a\xc4\x8a")); /* "\n\n" */
    free(ids);
    ck_assert_int_eq(st_chat_encode(tok, text, len, false, &ids, &n), ST_OK);
    ck_assert_int_eq(ids[0], find_id(tok, "<|start_header_id|>"));
    free(ids);
    free(text);
    st_tok_free(tok);
    st_gguf_close(g);
    /* Qwen2 (ChatML): the vocabulary adds no BOS */
    g = open_model("qw2-synth-q8_0.gguf");
    ck_assert_int_eq(st_tok_from_gguf(g, &tok), ST_OK);
    ck_assert_int_eq(st_chat_render(ST_CHAT_CHATML, m, 2, true, &text, &len), ST_OK);
    ck_assert_int_eq(st_chat_encode(tok, text, len, true, &ids, &n), ST_OK);
    ck_assert_int_eq(ids[0], find_id(tok, "<|im_start|>"));
    ck_assert_int_eq(ids[n - 1], find_id(tok, "\xc4\x8a")); /* "\n" */
    free(ids);
    free(text);
    st_tok_free(tok);
    st_gguf_close(g);
}
END_TEST

/* ---- the conversation of strata chat ---- */

START_TEST(conversation_appends)
{
    st_gguf *g = open_model("l3-synth-q8_0.gguf");
    st_tokenizer *tok = NULL;
    ck_assert_int_eq(st_tok_from_gguf(g, &tok), ST_OK);
    for (int t = 0; t < ST_CHAT_COUNT; t++) {
        chat_conv c;
        ck_assert_int_eq(chat_conv_init(&c, (st_chat_tmpl)t, tok, "Be brief."), ST_OK);
        ck_assert_int_eq(chat_conv_user(&c, "Hello there"), ST_OK);
        ck_assert(!c.appended);
        size_t n1 = c.n_ids;
        /* a reply as the model would end it: its ids, then EOT */
        int32_t *r = NULL;
        size_t nr = 0;
        ck_assert_int_eq(st_tok_encode_ex(tok, "Hi, how can I help?", 19, false, false, &r, &nr),
                         ST_OK);
        int32_t *reply = malloc((nr + 1) * sizeof *reply);
        memcpy(reply, r, nr * sizeof *r);
        reply[nr] = st_tok_eot(tok);
        ck_assert_int_eq(chat_conv_reply(&c, reply, nr + 1), ST_OK);
        ck_assert_uint_eq(c.n_ids, n1 + nr); /* the EOT is left out */
        ck_assert_int_eq(chat_conv_user(&c, "Tell me more."), ST_OK);
        ck_assert_msg(c.appended, "%s: the second turn was re-tokenized",
                      st_chat_tmpl_name((st_chat_tmpl)t));
        ck_assert_int_eq(memcmp(c.ids + n1, r, nr * sizeof *r), 0);
        if (t == ST_CHAT_LLAMA3) {
            /* the whole conversation rendered and tokenized at once gives
             * the same ids (its special tokens are in this vocabulary) */
            char *text;
            size_t len, n;
            int32_t *all;
            ck_assert_int_eq(st_chat_render(c.tmpl, c.msgs, c.n_msgs, true, &text, &len), ST_OK);
            ck_assert_int_eq(st_chat_encode(tok, text, len, true, &all, &n), ST_OK);
            ck_assert_uint_eq(n, c.n_ids);
            ck_assert_int_eq(memcmp(all, c.ids, n * sizeof *all), 0);
            ck_assert_int_eq(c.ids[n1 + nr], st_tok_eot(tok)); /* the turn end */
            free(all);
            free(text);
        }
        free(reply);
        free(r);
        chat_conv_free(&c);
    }
    st_tok_free(tok);
    st_gguf_close(g);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_chat CHAT_CASES.json\n");
        return 2;
    }
    cases_path = argv[1];
    Suite *s = suite_create("chat");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, recorded_cases);
    tcase_add_test(tc, detect_models);
    tcase_add_test(tc, detect_texts);
    tcase_add_test(tc, detect_errors);
    tcase_add_test(tc, encode_rule);
    tcase_add_test(tc, conversation_appends);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
