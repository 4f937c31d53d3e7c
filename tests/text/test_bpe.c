/* test_bpe.c - the byte-level BPE tokenizer against llama.cpp's ids
 * (golden/wave2/tokenizer-llama3-bpe.json and tokenizer-qwen2-bpe.json,
 * vocabularies of l3-synth-q8_0.gguf and qw2-synth-q8_0.gguf), with and
 * without special-token parsing; round trips, streaming over multi-byte
 * characters, invalid UTF-8, control tokens, the merge order on a small
 * hand-made vocabulary, load errors (unknown pre-tokenizer, missing
 * merges), the tokenize command and the speed on long texts. */
#include <check.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/commands.h"
#include "common/model/gguf.h"
#include "common/model/gguf_write.h"
#include "common/text/tokenizer.h"

/* ---- fixtures ----------------------------------------------------------- */

typedef struct bpe_case {
    char *text;
    bool special;
    int32_t *ids;
    size_t n;
} bpe_case;

typedef struct bpe_vocab {
    const char *model;  /* file under models/ */
    const char *golden; /* file under golden/wave2/ */
} bpe_vocab;

static const bpe_vocab vocab_l3 = {"l3-synth-q8_0.gguf", "tokenizer-llama3-bpe.json"};
static const bpe_vocab vocab_qw2 = {"qw2-synth-q8_0.gguf", "tokenizer-qwen2-bpe.json"};

/* The number of cases each golden file holds. */
#define BPE_N_CASES 31

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

static bpe_case *load_cases(const bpe_vocab *v, size_t *n_cases)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/golden/wave2/%s", shared_dir(), v->golden);
    char *js = read_all(path);
    cJSON *root = cJSON_Parse(js);
    ck_assert_msg(root != NULL, "bad JSON in %s", path);
    cJSON *cases = cJSON_GetObjectItem(root, "cases");
    ck_assert(cJSON_IsArray(cases));
    size_t n = (size_t)cJSON_GetArraySize(cases);
    ck_assert_uint_eq(n, BPE_N_CASES);
    bpe_case *c = calloc(n, sizeof *c);
    for (size_t i = 0; i < n; i++) {
        cJSON *o = cJSON_GetArrayItem(cases, (int)i);
        cJSON *t = cJSON_GetObjectItem(o, "text"), *ids = cJSON_GetObjectItem(o, "ids");
        cJSON *sp = cJSON_GetObjectItem(o, "special");
        ck_assert(cJSON_IsString(t) && cJSON_IsArray(ids) && cJSON_IsBool(sp));
        c[i].text = strdup(t->valuestring);
        c[i].special = cJSON_IsTrue(sp);
        c[i].n = (size_t)cJSON_GetArraySize(ids);
        c[i].ids = malloc((c[i].n + 1) * sizeof(int32_t));
        for (size_t j = 0; j < c[i].n; j++)
            c[i].ids[j] = (int32_t)cJSON_GetArrayItem(ids, (int)j)->valueint;
    }
    cJSON_Delete(root);
    free(js);
    *n_cases = n;
    return c;
}

static void free_cases(bpe_case *c, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(c[i].text);
        free(c[i].ids);
    }
    free(c);
}

static st_tokenizer *load_tok(const bpe_vocab *v)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/models/%s", shared_dir(), v->model);
    st_gguf *g;
    st_err e = st_gguf_open(path, &g);
    ck_assert_msg(e == ST_OK, "st_gguf_open: %s", st_errmsg(e));
    st_tokenizer *tok;
    e = st_tok_from_gguf(g, &tok);
    st_gguf_close(g);
    ck_assert_msg(e == ST_OK, "st_tok_from_gguf: %s", st_errmsg(e));
    ck_assert_int_eq(st_tok_model_of(tok), ST_TOK_MODEL_BPE);
    return tok;
}

static bool ids_equal(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

static void print_ids(const char *what, const int32_t *ids, size_t n)
{
    fprintf(stderr, "  %s:", what);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n");
}

/* has_twin - whether the cases record text again with the other mode. */
static bool has_twin(const bpe_case *c, size_t n, size_t i)
{
    for (size_t j = 0; j < n; j++)
        if (j != i && strcmp(c[j].text, c[i].text) == 0 && c[j].special != c[i].special)
            return true;
    return false;
}

/* ---- golden ids --------------------------------------------------------- */

/* run_golden - every case in its recorded mode; a case recorded in one
 * mode only must give the same ids in the other (the file records the
 * special mode only where it differs). Prints the pass counts. */
static void run_golden(const bpe_vocab *v)
{
    st_tokenizer *tok = load_tok(v);
    size_t n;
    bpe_case *c = load_cases(v, &n);
    size_t pass[2] = {0, 0}, total[2] = {0, 0}; /* [special] */
    for (size_t i = 0; i < n; i++) {
        for (int mode = 0; mode < 2; mode++) {
            bool special = mode == 1;
            if (special != c[i].special && has_twin(c, n, i))
                continue; /* the other record covers this mode */
            int32_t *ids;
            size_t m;
            st_err e = st_tok_encode_ex(tok, c[i].text, strlen(c[i].text), st_tok_add_bos(tok),
                                        special, &ids, &m);
            ck_assert_msg(e == ST_OK, "encode: %s", st_errmsg(e));
            total[mode]++;
            if (ids_equal(ids, m, c[i].ids, c[i].n)) {
                pass[mode]++;
            } else {
                fprintf(stderr, "%s case %zu (special %d) '%s' differs\n", v->golden, i, mode,
                        c[i].text);
                print_ids("want", c[i].ids, c[i].n);
                print_ids("got ", ids, m);
            }
            free(ids);
        }
    }
    fprintf(stderr, "%s: special off %zu/%zu, special on %zu/%zu\n", v->golden, pass[0], total[0],
            pass[1], total[1]);
    ck_assert_uint_eq(pass[0], total[0]);
    ck_assert_uint_eq(pass[1], total[1]);
    free_cases(c, n);
    st_tok_free(tok);
}

START_TEST(golden_llama3) { run_golden(&vocab_l3); }
END_TEST

START_TEST(golden_qwen2) { run_golden(&vocab_qw2); }
END_TEST

/* ---- round trips and streaming ------------------------------------------ */

/* round_trip - decode(encode(text)) == text for every plain-text case
 * (BOS decodes to nothing), and for the special-parsing case with control
 * tokens shown; and the streaming detokenizer, fed one id at
 * a time, gives the same bytes, each chunk whole UTF-8 characters. */
static void round_trip(const bpe_vocab *v)
{
    st_tokenizer *tok = load_tok(v);
    size_t n;
    bpe_case *c = load_cases(v, &n);
    size_t cap = st_detok_bound(tok);
    char *chunk = malloc(cap);
    for (size_t i = 0; i < n; i++) {
        size_t tl = strlen(c[i].text), len;
        if (c[i].special) {
            /* special text comes back when control tokens are shown, past
             * the BOS the vocabulary's rule added */
            size_t skip = st_tok_add_bos(tok) ? 1 : 0;
            char *text;
            ck_assert_int_eq(st_tok_decode_ex(tok, c[i].ids + skip, c[i].n - skip, true, &text,
                                              &len),
                             ST_OK);
            ck_assert_str_eq(text, c[i].text);
            free(text);
            continue;
        }
        char *text;
        ck_assert_int_eq(st_tok_decode(tok, c[i].ids, c[i].n, &text, &len), ST_OK);
        ck_assert_msg(len == tl && memcmp(text, c[i].text, tl) == 0, "round trip of '%s' gave '%s'",
                      c[i].text, text);
        free(text);

        st_detok d;
        st_detok_init(&d, tok, true);
        char *acc = malloc(tl + 1);
        size_t k = 0, nw;
        for (size_t j = 0; j < c[i].n; j++) {
            ck_assert_int_eq(st_detok_push(&d, c[i].ids[j], chunk, cap, &nw), ST_OK);
            /* a chunk never ends inside a character: its last lead byte
             * is followed by all its continuation bytes */
            for (size_t b = 0; b < nw;) {
                unsigned char lead = (unsigned char)chunk[b];
                size_t need = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
                ck_assert_msg(b + need <= nw, "chunk splits a character in '%s'", c[i].text);
                b += need;
            }
            ck_assert_uint_le(k + nw, tl);
            memcpy(acc + k, chunk, nw);
            k += nw;
        }
        ck_assert_int_eq(st_detok_flush(&d, chunk, cap, &nw), ST_OK);
        ck_assert_uint_eq(nw, 0);
        ck_assert_msg(k == tl && memcmp(acc, c[i].text, tl) == 0, "stream of '%s'", c[i].text);
        free(acc);
    }
    free(chunk);
    free_cases(c, n);
    st_tok_free(tok);
}

START_TEST(round_trip_llama3) { round_trip(&vocab_l3); }
END_TEST

START_TEST(round_trip_qwen2) { round_trip(&vocab_qw2); }
END_TEST

/* stream_multibyte - "🦙" is split over byte-level tokens (Llama 3: "ðŁ",
 * "¦", "Ļ"): nothing comes out until the character is complete. */
START_TEST(stream_multibyte)
{
    st_tokenizer *tok = load_tok(&vocab_l3);
    static const char text[] = "\xf0\x9f\xa6\x99\xe6\x97\xa5"; /* 🦙日 */
    int32_t *ids;
    size_t n;
    ck_assert_int_eq(st_tok_encode(tok, text, strlen(text), false, &ids, &n), ST_OK);
    ck_assert_uint_ge(n, 3);
    size_t cap = st_detok_bound(tok), nw, k = 0;
    char *chunk = malloc(cap), out[16];
    st_detok d;
    st_detok_init(&d, tok, false);
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(st_detok_push(&d, ids[i], chunk, cap, &nw), ST_OK);
        ck_assert(nw == 0 || nw == 3 || nw == 4); /* whole characters only */
        memcpy(out + k, chunk, nw);
        k += nw;
        if (i == 0)
            ck_assert_uint_eq(nw, 0); /* the first token holds part of 🦙 */
    }
    ck_assert_uint_eq(k, strlen(text));
    ck_assert_mem_eq(out, text, k);
    /* a stream cut inside a character ends with U+FFFD */
    st_detok_init(&d, tok, false);
    ck_assert_int_eq(st_detok_push(&d, ids[0], chunk, cap, &nw), ST_OK);
    ck_assert_int_eq(st_detok_flush(&d, chunk, cap, &nw), ST_OK);
    ck_assert_uint_eq(nw, 3);
    ck_assert_mem_eq(chunk, "\xef\xbf\xbd", 3);
    free(chunk);
    free(ids);
    st_tok_free(tok);
}
END_TEST

/* invalid_utf8 - bytes that are not UTF-8 are kept: each run the
 * pre-tokenizer cannot read is encoded through its byte-level tokens, so
 * decoding gives the bytes back (llama.cpp would encode U+FFFD instead). */
START_TEST(invalid_utf8)
{
    static const char *const texts[] = {
        "ab\xff"
        "cd",
        "\xc3",
        "x\xe6\x97",
        "\xed\xa0\x80 surrogate",
        "\xf0\x9f\xa6",
        "ok \xc0\xaf overlong \xfe\xff",
        "\x80\x80\x80",
        "caf\xc3\xa9\xc3",
    };
    const bpe_vocab *vs[2] = {&vocab_l3, &vocab_qw2};
    for (int v = 0; v < 2; v++) {
        st_tokenizer *tok = load_tok(vs[v]);
        for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
            size_t tl = strlen(texts[i]), n, len;
            int32_t *ids;
            char *back;
            ck_assert_int_eq(st_tok_encode(tok, texts[i], tl, false, &ids, &n), ST_OK);
            ck_assert_uint_le(n, tl);
            ck_assert_int_eq(st_tok_decode(tok, ids, n, &back, &len), ST_OK);
            ck_assert_uint_eq(len, tl);
            ck_assert_mem_eq(back, texts[i], tl);
            free(back);
            free(ids);
        }
        st_tok_free(tok);
    }
}
END_TEST

/* control_tokens - control tokens render as nothing unless asked; EOS and
 * EOT come from the file (EOT by its spelling: no eot_token_id key). */
START_TEST(control_tokens)
{
    st_tokenizer *tok = load_tok(&vocab_l3);
    ck_assert_int_eq(st_tok_bos(tok), 128000);
    ck_assert_int_eq(st_tok_eos(tok), 128001);
    ck_assert_int_eq(st_tok_eot(tok), 128009);
    ck_assert(st_tok_add_bos(tok));
    int32_t ids[] = {128000, 9906, 128009};
    char *text;
    size_t len;
    ck_assert_int_eq(st_tok_decode(tok, ids, 3, &text, &len), ST_OK);
    ck_assert_str_eq(text, "Hello");
    free(text);
    ck_assert_int_eq(st_tok_decode_ex(tok, ids, 3, true, &text, &len), ST_OK);
    ck_assert_str_eq(text, "<|begin_of_text|>Hello<|eot_id|>");
    free(text);
    size_t cap = st_detok_bound(tok), nw;
    char *chunk = malloc(cap);
    st_detok d;
    st_detok_init(&d, tok, true);
    ck_assert_int_eq(st_detok_push(&d, 128000, chunk, cap, &nw), ST_OK);
    ck_assert_uint_eq(nw, 0);
    d.show_control = true;
    ck_assert_int_eq(st_detok_push(&d, 128009, chunk, cap, &nw), ST_OK);
    ck_assert_uint_eq(nw, strlen("<|eot_id|>"));
    free(chunk);
    st_tok_free(tok);

    tok = load_tok(&vocab_qw2);
    ck_assert(!st_tok_add_bos(tok));
    ck_assert_int_eq(st_tok_eos(tok), 151645);
    ck_assert_int_eq(st_tok_eot(tok), 151645);
    st_tok_free(tok);
}
END_TEST

/* ---- a small hand-made vocabulary --------------------------------------- */

/* The byte whose character mini_gguf leaves out of the vocabulary (its id
 * gets an unrelated piece instead), or -1 for none. */
static int mini_missing_byte = -1;

/* mini_gguf - a GGUF image with a byte-level vocabulary: the 256 byte
 * characters (but mini_missing_byte's), then extra pieces; merges and pre
 * as given (NULL: absent). */
static uint8_t *mini_gguf(const char *const *extra, size_t n_extra, const char *const *merges,
                          size_t n_merges, const char *pre, size_t *len)
{
    st_gguf_writer *w;
    ck_assert_int_eq(st_gguf_writer_new(&w), ST_OK);
    size_t n = 256 + n_extra;
    char **toks = calloc(n, sizeof *toks);
    int32_t *types = calloc(n, sizeof *types);
    for (int b = 0; b < 256; b++) {
        /* GPT-2's alphabet, spelled out here independently of the library */
        unsigned cp = (unsigned)b;
        if (b < 33)
            cp = 256 + (unsigned)b;
        else if (b >= 127 && b <= 160)
            cp = 256 + 33 + (unsigned)(b - 127);
        else if (b == 173)
            cp = 256 + 67;
        toks[b] = calloc(3, 1);
        if (b == mini_missing_byte) {
            strcpy(toks[b], "<>"); /* no byte character */
        } else if (cp < 0x80) {
            toks[b][0] = (char)cp;
        } else {
            toks[b][0] = (char)(0xC0 | (cp >> 6));
            toks[b][1] = (char)(0x80 | (cp & 0x3F));
        }
    }
    for (size_t i = 0; i < n_extra; i++)
        toks[256 + i] = strdup(extra[i]);
    for (size_t i = 0; i < n; i++)
        types[i] = ST_TOK_NORMAL;
    ck_assert_int_eq(st_gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2"), ST_OK);
    if (pre)
        ck_assert_int_eq(st_gguf_writer_add_str(w, "tokenizer.ggml.pre", pre), ST_OK);
    ck_assert_int_eq(st_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens",
                                                (const char *const *)toks, NULL, n),
                     ST_OK);
    ck_assert_int_eq(st_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", ST_GGUF_INT32, types,
                                            n),
                     ST_OK);
    if (merges)
        ck_assert_int_eq(st_gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", merges, NULL,
                                                    n_merges),
                         ST_OK);
    uint8_t *buf;
    ck_assert_int_eq(st_gguf_writer_to_mem(w, &buf, len), ST_OK);
    st_gguf_writer_free(w);
    for (size_t i = 0; i < n; i++)
        free(toks[i]);
    free(toks);
    free(types);
    return buf;
}

static st_err mini_tok(const char *const *extra, size_t n_extra, const char *const *merges,
                       size_t n_merges, const char *pre, st_tokenizer **tok)
{
    size_t len;
    uint8_t *buf = mini_gguf(extra, n_extra, merges, n_merges, pre, &len);
    st_gguf *g;
    st_err e = st_gguf_open_mem(buf, len, &g);
    ck_assert_msg(e == ST_OK, "st_gguf_open_mem: %s", st_errmsg(e));
    e = st_tok_from_gguf(g, tok);
    st_gguf_close(g);
    free(buf);
    return e;
}

static void expect(const st_tokenizer *tok, const char *text, const int32_t *want, size_t nw)
{
    int32_t *ids;
    size_t n;
    ck_assert_int_eq(st_tok_encode(tok, text, strlen(text), false, &ids, &n), ST_OK);
    if (!ids_equal(ids, n, want, nw)) {
        print_ids("want", want, nw);
        print_ids("got ", ids, n);
        ck_abort_msg("ids of '%s'", text);
    }
    free(ids);
}

/* merge_rank - the lowest rank merges first, leftmost on ties; the gpt2
 * pre-tokenizer is the default; id b < 256 is byte b's character, ids
 * 256.. the extra pieces. */
START_TEST(merge_rank)
{
    static const char *const extra[] = {"ab",
                                        "bc",
                                        "abc",
                                        "aa",
                                        "aaa",
                                        "aaaa",
                                        "\xc4\xa0"
                                        "a"};
    static const char *const merges[] = {"b c",   "a b",  "a bc",      "a a",
                                         "aa aa", "aa a", "\xc4\xa0 a"};
    st_tokenizer *tok;
    ck_assert_int_eq(mini_tok(extra, 7, merges, 7, NULL, &tok), ST_OK);
    ck_assert(!st_tok_add_bos(tok));
    expect(tok, "abc", (int32_t[]){256 + 2}, 1); /* b c (rank 0), then a bc */
    expect(tok, "ab", (int32_t[]){256}, 1);
    expect(tok, "aaa", (int32_t[]){256 + 4}, 1); /* a a leftmost, then aa a */
    expect(tok, "aaaa", (int32_t[]){256 + 5}, 1);
    expect(tok, "a a", (int32_t[]){'a', 256 + 6}, 2); /* " a" is one word (gpt2) */
    expect(tok, "ba", (int32_t[]){'b', 'a'}, 2);      /* no merge "b a" */
    st_tok_free(tok);
}
END_TEST

/* missing_byte - a vocabulary without the character of some byte (Falcon's
 * lacks 0x03, StarCoder's 0xC0) is accepted; that byte is dropped from the
 * text, as llama.cpp drops it, and no merge spans it. */
START_TEST(missing_byte)
{
    static const char *const extra[] = {"ab", "!!"};
    static const char *const merges[] = {"a b", "! !"};
    st_tokenizer *tok;
    mini_missing_byte = 0x03;
    st_err e = mini_tok(extra, 2, merges, 2, "gpt-2", &tok);
    mini_missing_byte = -1;
    ck_assert_int_eq(e, ST_OK);
    expect(tok, "ab\x03" "ab", (int32_t[]){256, 256}, 2);
    expect(tok, "!!", (int32_t[]){257}, 1);
    expect(tok, "!\x03!", (int32_t[]){'!', '!'}, 2); /* one word, cut at the byte */
    expect(tok, "\x03", NULL, 0);
    st_tok_free(tok);
}
END_TEST

/* load_errors - an unknown pre-tokenizer names itself and the known ones;
 * missing or malformed merges are refused. */
START_TEST(load_errors)
{
    static const char *const merges[] = {"a b"};
    static const char *const bad[] = {"ab"};
    static const char *const extra[] = {"ab"};
    st_tokenizer *tok = NULL;
    ck_assert_int_eq(mini_tok(extra, 1, merges, 1, "no-such-pre", &tok), ST_ETYPE);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "no-such-pre"));
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "llama-bpe"));
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "qwen2"));
    ck_assert_ptr_null(tok);
    ck_assert_int_eq(mini_tok(extra, 1, NULL, 0, "qwen2", &tok), ST_EMISSING);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "merges"));
    ck_assert_int_eq(mini_tok(extra, 1, bad, 1, "llama-bpe", &tok), ST_EFORMAT);
    ck_assert_ptr_nonnull(strstr(st_errdetail(), "merges[0]"));
    ck_assert_int_eq(mini_tok(extra, 1, merges, 1, "llama-bpe", &tok), ST_OK);
    ck_assert(st_tok_add_bos(tok)); /* the llama-bpe default */
    st_tok_free(tok);
}
END_TEST

/* ---- command line and speed --------------------------------------------- */

START_TEST(cli_special)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/models/qw2-synth-q8_0.gguf", shared_dir());
    char *argv1[] = {"tokenize", path, "<|im_start|>user", "--special", NULL};
    ck_assert_int_eq(st_cmd_tokenize(4, argv1), 0);
    char *argv2[] = {"tokenize", path, "<|im_start|>user", NULL};
    ck_assert_int_eq(st_cmd_tokenize(3, argv2), 0);
    char *argv3[] = {"detokenize", path, "151644,872", "--special", NULL};
    ck_assert_int_eq(st_cmd_detokenize(4, argv3), 0);
}
END_TEST

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The long-text size for the speed test, and a bound far above what any
 * machine needs (a quadratic merge loop on the one-word text would
 * exceed it by orders of magnitude). */
#define BPE_LONG_TEXT ((size_t)100 * 1024)
#define BPE_MAX_SECONDS 10.0

START_TEST(long_text_speed)
{
    st_tokenizer *tok = load_tok(&vocab_l3);
    size_t n_cases;
    bpe_case *c = load_cases(&vocab_l3, &n_cases);
    char *prose = malloc(BPE_LONG_TEXT + 1), *word = malloc(BPE_LONG_TEXT + 1);
    size_t k = 0;
    for (size_t i = 0; k < BPE_LONG_TEXT; i = (i + 1) % n_cases) {
        size_t l = strlen(c[i].text);
        l = l < BPE_LONG_TEXT - k ? l : BPE_LONG_TEXT - k;
        memcpy(prose + k, c[i].text, l);
        k += l;
    }
    /* a valid UTF-8 prefix: cut at a character boundary */
    while (k > 0 && ((unsigned char)prose[k - 1] & 0xC0) == 0x80)
        k--;
    if (k > 0 && (unsigned char)prose[k - 1] >= 0xC0)
        k--;
    for (size_t i = 0; i < BPE_LONG_TEXT; i++)
        word[i] = "abcdefghij"[i % 10];
    const char *texts[3] = {prose, prose, word};
    size_t lens[3] = {k, k, BPE_LONG_TEXT};
    bool special[3] = {false, true, false};
    const char *names[3] = {"mixed prose", "mixed prose, special parsing", "one 100 KB word"};
    for (int t = 0; t < 3; t++) {
        int32_t *ids;
        size_t n, len;
        char *back;
        double t0 = now_s();
        ck_assert_int_eq(st_tok_encode_ex(tok, texts[t], lens[t], false, special[t], &ids, &n),
                         ST_OK);
        double dt = now_s() - t0;
        fprintf(stderr, "llama3 encode, %s: %zu bytes -> %zu ids in %.1f ms (%.1f MB/s)\n",
                names[t], lens[t], n, dt * 1e3, (double)lens[t] / dt / 1e6);
        ck_assert(dt < BPE_MAX_SECONDS);
        ck_assert_int_eq(st_tok_decode_ex(tok, ids, n, true, &back, &len), ST_OK);
        ck_assert_uint_eq(len, lens[t]);
        ck_assert_mem_eq(back, texts[t], len);
        free(back);
        free(ids);
    }
    free(prose);
    free(word);
    free_cases(c, n_cases);
    st_tok_free(tok);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("bpe");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, golden_llama3);
    tcase_add_test(tc, golden_qwen2);
    tcase_add_test(tc, round_trip_llama3);
    tcase_add_test(tc, round_trip_qwen2);
    tcase_add_test(tc, stream_multibyte);
    tcase_add_test(tc, invalid_utf8);
    tcase_add_test(tc, control_tokens);
    tcase_add_test(tc, merge_rank);
    tcase_add_test(tc, missing_byte);
    tcase_add_test(tc, load_errors);
    tcase_add_test(tc, cli_special);
    tcase_add_test(tc, long_text_speed);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
