/* test_gen.c - one generation (common/text/gen.h): each stop rule (EOS and EOT,
 * a stop string split over ids, max tokens, a full context, and their
 * order), the text of a UTF-8 character split over ids, the prompt's
 * echo, and st_gen_step drawing the ids a plain st_sample loop draws. */
#include <check.h>
#include <math.h>
#include <string.h>

#include "common/text/gen.h"

/* The vocabulary of the tests: SentencePiece pieces ("▁" is a space). */
enum {
    T_UNK,
    T_BOS,
    T_EOS,
    T_EOT,
    T_HELLO, /* " Hello" */
    T_WOR,   /* " wor" */
    T_LD,    /* "ld" */
    T_E2,    /* the bytes of U+20AC, the euro sign */
    T_82,
    T_AC,
    T_BANG, /* "!" */
    T_N
};

static st_tokenizer *tok_new(void)
{
    const char *pieces[T_N] =
        {"<unk>",  "<s>",    "</s>",   "<|eot|>", "\xe2\x96\x81Hello", "\xe2\x96\x81wor", "ld",
         "<0xE2>", "<0x82>", "<0xAC>", "!"};
    int32_t types[T_N] = {ST_TOK_UNKNOWN, ST_TOK_CONTROL, ST_TOK_CONTROL, ST_TOK_CONTROL,
                          ST_TOK_NORMAL,  ST_TOK_NORMAL,  ST_TOK_NORMAL,  ST_TOK_BYTE,
                          ST_TOK_BYTE,    ST_TOK_BYTE,    ST_TOK_NORMAL};
    st_tok_config c = st_tok_config_default();
    c.eot_id = T_EOT;
    st_tokenizer *tok = NULL;
    ck_assert_int_eq(st_tok_from_pieces(pieces, NULL, NULL, types, T_N, &c, &tok), ST_OK);
    return tok;
}

static const int32_t prompt[] = {T_BOS, T_HELLO};
#define N_PROMPT (sizeof prompt / sizeof prompt[0])
#define N_CTX 64

static st_gen *gen_new(const st_gen_params *p, const st_tokenizer *tok)
{
    st_gen *g = NULL;
    st_err e = st_gen_open(p, tok, T_N, N_CTX, prompt, N_PROMPT, &g);
    ck_assert_msg(e == ST_OK, "st_gen_open: %s", st_errmsg(e));
    return g;
}

/* accept - accepts id, checks its stop and its text. */
static void accept(st_gen *g, int32_t id, bool forced, st_gen_stop stop, const char *text)
{
    st_gen_tok t;
    st_err e = st_gen_accept(g, id, forced, &t);
    ck_assert_msg(e == ST_OK, "st_gen_accept(%d): %s", id, st_errmsg(e));
    ck_assert_int_eq(t.id, id);
    ck_assert_int_eq(t.stop, stop);
    ck_assert_int_eq(st_gen_stopped(g), stop);
    ck_assert_uint_eq(t.len, strlen(text));
    ck_assert(memcmp(t.text, text, t.len) == 0);
}

START_TEST(eos_and_eot)
{
    st_tokenizer *tok = tok_new();
    st_gen_params p = st_gen_params_default(tok, 10);
    ck_assert_int_eq(p.eos_id, T_EOS);
    ck_assert_int_eq(p.eot_id, T_EOT);
    st_gen *g = gen_new(&p, tok);
    accept(g, T_HELLO, false, ST_GEN_GO, "Hello"); /* the text's start: no space */
    accept(g, T_EOS, true, ST_GEN_GO, "");         /* forced: the end ids do not stop */
    accept(g, T_EOS, false, ST_GEN_EOS, "");
    size_t n;
    const int32_t *ids = st_gen_ids(g, &n);
    ck_assert_uint_eq(n, N_PROMPT + 3);
    ck_assert_int_eq(ids[n - 1], T_EOS); /* the id that stops is kept */
    ck_assert_uint_eq(st_gen_n_generated(g), 3);
    st_gen_tok t;
    ck_assert_int_eq(st_gen_accept(g, T_BANG, false, &t), ST_EINVAL); /* over */
    st_gen_close(g);
    g = gen_new(&p, tok);
    accept(g, T_EOT, false, ST_GEN_EOS, "");
    st_gen_close(g);
    st_tok_free(tok);
}
END_TEST

START_TEST(stop_string_split)
{
    st_tokenizer *tok = tok_new();
    const char *stop[] = {"xyz!", "world"};
    st_gen_params p = st_gen_params_default(tok, 10);
    p.stop = stop;
    p.n_stop = 2;
    p.text = ST_GEN_TEXT_AFTER; /* the prompt's " Hello" is not generated text */
    st_gen *g = gen_new(&p, tok);
    accept(g, T_WOR, false, ST_GEN_GO, " wor");
    accept(g, T_LD, false, ST_GEN_STOP_STRING, "ld"); /* " wor" + "ld" completes "world" */
    st_gen_close(g);
    /* a stop string over three ids, the window sliding over unrelated text */
    const char *stop2[] = {"ld!ld"};
    p.stop = stop2;
    p.n_stop = 1;
    g = gen_new(&p, tok);
    accept(g, T_HELLO, false, ST_GEN_GO, " Hello");
    accept(g, T_HELLO, false, ST_GEN_GO, " Hello");
    accept(g, T_LD, false, ST_GEN_GO, "ld");
    accept(g, T_BANG, false, ST_GEN_GO, "!");
    accept(g, T_LD, false, ST_GEN_STOP_STRING, "ld");
    st_gen_close(g);
    /* EOS comes before a stop string; a stop string before the limit */
    const char *stop3[] = {"!"};
    p.stop = stop3;
    p.max_tokens = 1;
    g = gen_new(&p, tok);
    accept(g, T_BANG, false, ST_GEN_STOP_STRING, "!");
    st_gen_close(g);
    /* an empty stop string is refused */
    const char *empty[] = {""};
    p.stop = empty;
    st_gen *bad = NULL;
    ck_assert_int_eq(st_gen_open(&p, tok, T_N, N_CTX, prompt, N_PROMPT, &bad), ST_EINVAL);
    ck_assert_ptr_null(bad);
    st_tok_free(tok);
}
END_TEST

START_TEST(max_tokens)
{
    st_tokenizer *tok = tok_new();
    st_gen_params p = st_gen_params_default(tok, 2);
    st_gen *g = gen_new(&p, tok);
    accept(g, T_BANG, false, ST_GEN_GO, "!");
    accept(g, T_BANG, false, ST_GEN_LENGTH, "!");
    st_gen_close(g);
    p.max_tokens = 0; /* over before its first step */
    g = gen_new(&p, tok);
    ck_assert_int_eq(st_gen_stopped(g), ST_GEN_LENGTH);
    float logits[T_N] = {0};
    st_gen_tok t;
    ck_assert_int_eq(st_gen_step(g, logits, &t), ST_EINVAL);
    st_gen_close(g);
    st_tok_free(tok);
}
END_TEST

START_TEST(context_full)
{
    st_tokenizer *tok = tok_new();
    st_gen_params p = st_gen_params_default(tok, 10);
    const int64_t n_ctx = 4; /* the prompt's 2 ids leave room for 2 more */
    st_gen *g;
    ck_assert_int_eq(st_gen_open(&p, tok, T_N, n_ctx, prompt, N_PROMPT, &g), ST_OK);
    accept(g, T_BANG, false, ST_GEN_GO, "!");
    accept(g, T_BANG, false, ST_GEN_CTX_FULL, "!"); /* 4 ids: positions 0..3 */
    st_gen_close(g);
    /* max tokens comes first when both are reached */
    p.max_tokens = 2;
    ck_assert_int_eq(st_gen_open(&p, tok, T_N, n_ctx, prompt, N_PROMPT, &g), ST_OK);
    accept(g, T_BANG, false, ST_GEN_GO, "!");
    accept(g, T_BANG, false, ST_GEN_LENGTH, "!");
    st_gen_close(g);
    /* a prompt must leave room for one id */
    ck_assert_int_eq(st_gen_open(&p, tok, T_N, 2, prompt, N_PROMPT, &g), ST_ERANGE);
    ck_assert_int_eq(st_gen_open(&p, tok, T_N, 3, prompt, N_PROMPT, &g), ST_OK);
    accept(g, T_BANG, false, ST_GEN_CTX_FULL, "!");
    st_gen_close(g);
    st_tok_free(tok);
}
END_TEST

START_TEST(utf8_split)
{
    st_tokenizer *tok = tok_new();
    st_gen_params p = st_gen_params_default(tok, 10);
    p.text = ST_GEN_TEXT_CONTINUE;
    st_gen *g = gen_new(&p, tok);
    accept(g, T_HELLO, false, ST_GEN_GO, " Hello"); /* a continuation keeps its space */
    accept(g, T_E2, false, ST_GEN_GO, "");
    accept(g, T_82, false, ST_GEN_GO, "");
    accept(g, T_AC, false, ST_GEN_GO, "\xe2\x82\xac"); /* the whole character at once */
    accept(g, T_E2, false, ST_GEN_GO, "");
    const char *rest;
    size_t n;
    st_gen_finish(g, &rest, &n); /* a character left incomplete */
    ck_assert_uint_eq(n, 3);
    ck_assert(memcmp(rest, "\xef\xbf\xbd", 3) == 0);
    st_gen_tok t;
    ck_assert_int_eq(st_gen_accept(g, T_BANG, false, &t), ST_EINVAL);
    st_gen_close(g);
    /* a stop string may end inside a character's ids */
    const char *stop[] = {"!\xe2\x82\xac"};
    p.stop = stop;
    p.n_stop = 1;
    g = gen_new(&p, tok);
    accept(g, T_BANG, false, ST_GEN_GO, "!");
    accept(g, T_E2, false, ST_GEN_GO, "");
    accept(g, T_82, false, ST_GEN_GO, "");
    accept(g, T_AC, false, ST_GEN_STOP_STRING, "\xe2\x82\xac");
    st_gen_close(g);
    st_tok_free(tok);
}
END_TEST

START_TEST(echo_and_no_text)
{
    st_tokenizer *tok = tok_new();
    st_gen_params p = st_gen_params_default(tok, 10);
    p.text = ST_GEN_TEXT_PROMPT;
    st_gen *g = gen_new(&p, tok);
    size_t n;
    const char *echo = st_gen_echo(g, &n);
    ck_assert_uint_eq(n, 5);
    ck_assert(memcmp(echo, "Hello", 5) == 0);
    accept(g, T_WOR, false, ST_GEN_GO, " wor"); /* continues the prompt's text */
    st_gen_close(g);
    p.text = ST_GEN_TEXT_NONE;
    g = gen_new(&p, tok);
    accept(g, T_WOR, false, ST_GEN_GO, "");
    st_gen_close(g);
    /* a model's head may have more rows than the tokenizer has pieces:
     * those ids have no text */
    p.text = ST_GEN_TEXT_START;
    ck_assert_int_eq(st_gen_open(&p, tok, T_N + 2, N_CTX, prompt, N_PROMPT, &g), ST_OK);
    accept(g, T_N + 1, false, ST_GEN_GO, "");
    accept(g, T_HELLO, false, ST_GEN_GO, "Hello");
    st_gen_close(g);
    /* without a tokenizer: ids only; the end ids are the params' */
    p = st_gen_params_default(NULL, 10);
    p.eos_id = T_BANG;
    g = gen_new(&p, NULL);
    accept(g, T_WOR, false, ST_GEN_GO, "");
    accept(g, T_BANG, false, ST_GEN_EOS, "");
    st_gen_close(g);
    st_tok_free(tok);
}
END_TEST

/* st_gen_step draws what st_sample draws over the same history with the
 * same RNG, and a next generation continues the RNG through params.rng. */
START_TEST(step_is_the_sampler)
{
    st_gen_params p = st_gen_params_default(NULL, 40);
    p.sp.temp = 1.0f;
    p.sp.repeat_penalty = 1.3f;
    p.sp.seed = 7;
    st_gen *g = gen_new(&p, NULL);
    st_rng rng, lrng;
    st_rng_seed(&rng, p.sp.seed);
    st_rng_seed(&lrng, 99);
    st_sample_scratch scr;
    ck_assert_int_eq(st_sample_scratch_init(&scr, T_N), ST_OK);
    int32_t hist[N_PROMPT + 40];
    memcpy(hist, prompt, sizeof prompt);
    size_t n_hist = N_PROMPT;
    for (int k = 0; k < 40; k++) {
        float logits[T_N], work[T_N];
        for (int i = 0; i < T_N; i++)
            logits[i] = 4.0f * st_rng_next_f32(&lrng);
        memcpy(work, logits, sizeof work);
        int32_t want;
        ck_assert_int_eq(st_sample(&p.sp, &rng, work, T_N, hist, n_hist, &scr, &want), ST_OK);
        hist[n_hist++] = want;
        st_gen_tok t;
        ck_assert_int_eq(st_gen_step(g, logits, &t), ST_OK);
        ck_assert_int_eq(t.id, want);
        if (t.stop != ST_GEN_GO) {
            ck_assert(want == p.eos_id || k == 39);
            break;
        }
    }
    st_rng now = st_gen_rng(g);
    ck_assert(memcmp(&now, &rng, sizeof rng) == 0);
    p.rng = &now;
    st_gen *next = gen_new(&p, NULL);
    st_rng cont = st_gen_rng(next);
    ck_assert(memcmp(&cont, &rng, sizeof rng) == 0);
    st_gen_close(next);
    st_gen_close(g);
    st_sample_scratch_free(&scr);
    /* bad params are refused, naming the field */
    p.rng = NULL;
    p.sp.top_p = 0.0f;
    ck_assert_int_eq(st_gen_open(&p, NULL, T_N, N_CTX, prompt, N_PROMPT, &g), ST_EINVAL);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "top_p"));
}
END_TEST

/* The one definition of the ranges: the bounds validate applies. */
START_TEST(sampler_ranges)
{
    ck_assert(st_sampler_range_has(&st_sampler_range_temp, 0.0));
    ck_assert(st_sampler_range_has(&st_sampler_range_temp, 100.0));
    ck_assert(!st_sampler_range_has(&st_sampler_range_temp, 100.5));
    ck_assert(!st_sampler_range_has(&st_sampler_range_temp, NAN));
    ck_assert(!st_sampler_range_has(&st_sampler_range_top_p, 0.0));
    ck_assert(st_sampler_range_has(&st_sampler_range_top_p, 1.0));
    ck_assert(st_sampler_range_has(&st_sampler_range_repeat_penalty, (double)0.01f));
    st_sampler_params sp = st_sampler_params_default();
    sp.temp = 101.0f;
    ck_assert_int_eq(st_sampler_params_validate(&sp), ST_EINVAL);
    ck_assert_str_eq(st_errdetail(), "sampler params: temp 101 must be in [0, 100]");
    sp = st_sampler_params_default();
    sp.repeat_penalty = 0.01f; /* the CLI's lowest --repeat-penalty */
    ck_assert_int_eq(st_sampler_params_validate(&sp), ST_OK);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gen");
    TCase *tc = tcase_create("gen");
    tcase_add_test(tc, eos_and_eot);
    tcase_add_test(tc, stop_string_split);
    tcase_add_test(tc, max_tokens);
    tcase_add_test(tc, context_full);
    tcase_add_test(tc, utf8_split);
    tcase_add_test(tc, echo_and_no_text);
    tcase_add_test(tc, step_is_the_sampler);
    tcase_add_test(tc, sampler_ranges);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
