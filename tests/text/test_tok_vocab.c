/* test_tok_vocab.c - our tokenizer against llama.cpp's own tokenizer cases:
 * the vocabulary-only GGUFs of real models in the llama.cpp source
 * (models/ggml-vocab-NAME.gguf) with their texts (NAME.gguf.inp, cases
 * separated by "\n__ggml_vocab_test__\n") and the ids llama.cpp expects
 * (NAME.gguf.out, one line per case, ids separated by spaces), encoded as
 * llama.cpp's tests/test-tokenizer-0 does: no BOS, no special-token
 * parsing.
 *
 * The source folder is $STRATA_LLAMA_SRC, else $HOME/.cache/llama-ref/work/src
 * (where deploy's build-llama-ref.sh puts it). Without it the test prints
 * why and exits 77, which meson reports as SKIP, never as a pass.
 *
 * Per file it prints the tokenizer model and pre-tokenizer and the cases
 * passed. A file whose tokenizer.ggml.model or tokenizer.ggml.pre Strata
 * refuses (st_tok_from_gguf gives ST_ETYPE) is listed as UNSUPPORTED with the
 * reason and is counted neither as passed nor as failed, except the files of
 * vt_required (the families Strata claims), which fail the test when
 * refused. Exit 1 when any case of a supported file differs, a file cannot
 * be read, or no file was checked at all.
 *
 * Then the cases of argv[1] (tests/text/tok_vocab_special.json): texts with
 * special-token text (chat prompts), encoded with special-token parsing and
 * without BOS, against the ids llama-tokenize gave
 * (tests/text/tok_vocab_record.py); the Phi-3 ones check its right strip. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/model/gguf.h"
#include "common/text/tokenizer.h"

enum {
    VT_EXIT_SKIP = 77,  /* meson's "skipped" */
    VT_PATH = 4096,     /* room for one path */
    VT_SHOW_TEXT = 160, /* bytes of a failing text shown */
    VT_SHOW_IDS = 40,   /* ids of a failing case shown */
    VT_MAX_FILES = 256, /* vocabulary files considered */
};

static const char vt_sep[] = "\n__ggml_vocab_test__\n";
static const char vt_suffix[] = ".gguf.inp";
static const char vt_prefix[] = "ggml-vocab-";

/* The vocabularies whose tokenizer Strata supports by design: refusing one
 * of them is a failure, not an "unsupported" line. */
static const char *const vt_required[] = {
    "llama-spm", "phi-3",  "llama-bpe", "qwen2",     "qwen35", "gpt-2",
    "mpt",       "falcon", "starcoder", "refact",    "command-r", "deepseek-coder",
};

/* vt_read - the whole file at path, NUL-terminated (caller frees), or NULL. */
static char *vt_read(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    char *b = NULL;
    long sz = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        sz = ftell(f);
    if (sz >= 0 && fseek(f, 0, SEEK_SET) == 0)
        b = malloc((size_t)sz + 1);
    if (b != NULL && fread(b, 1, (size_t)sz, f) != (size_t)sz) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b != NULL) {
        b[sz] = '\0';
        *len = (size_t)sz;
    }
    return b;
}

/* vt_show - prints n bytes of s quoted, escaping control bytes, cut at
 * VT_SHOW_TEXT bytes. */
static void vt_show(const char *s, size_t n)
{
    fputc('"', stdout);
    for (size_t i = 0; i < n && i < VT_SHOW_TEXT; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n')
            fputs("\\n", stdout);
        else if (c == '\t')
            fputs("\\t", stdout);
        else if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20 || c == 0x7F)
            printf("\\x%02x", c);
        else
            fputc(c, stdout);
    }
    fputs(n > VT_SHOW_TEXT ? "\"..." : "\"", stdout);
}

static void vt_show_ids(const char *what, const int32_t *ids, size_t n)
{
    printf("      %s (%zu):", what, n);
    for (size_t i = 0; i < n && i < VT_SHOW_IDS; i++)
        printf(" %d", ids[i]);
    puts(n > VT_SHOW_IDS ? " ..." : "");
}

/* vt_parse_ids - the ids of one .out line (start..end), into a malloc'ed
 * array; false on a malformed line. */
static bool vt_parse_ids(const char *start, const char *end, int32_t **ids, size_t *n)
{
    size_t cap = (size_t)(end - start) / 2 + 1, k = 0;
    int32_t *v = malloc(cap * sizeof *v);
    if (v == NULL)
        return false;
    const char *p = start;
    while (p < end) {
        while (p < end && (*p == ' ' || *p == '\r'))
            p++;
        if (p >= end)
            break;
        char *q;
        long x = strtol(p, &q, 10);
        if (q == p || q > end || x < 0 || x > INT32_MAX || k == cap) {
            free(v);
            return false;
        }
        v[k++] = (int32_t)x;
        p = q;
    }
    *ids = v;
    *n = k;
    return true;
}

/* vt_required_name - whether the vocabulary NAME is in vt_required. */
static bool vt_required_name(const char *name)
{
    for (size_t i = 0; i < sizeof vt_required / sizeof vt_required[0]; i++)
        if (strcmp(vt_required[i], name) == 0)
            return true;
    return false;
}

/* vt_meta - the string value of key in g, as "%.*s" arguments ("-" if absent). */
static st_gguf_str vt_meta(const st_gguf *g, const char *key)
{
    st_gguf_str s;
    if (st_gguf_get_str(g, key, &s) != ST_OK) {
        s.data = "-";
        s.len = 1;
    }
    return s;
}

typedef struct vt_totals {
    int files_ok, files_failed, files_unsupported;
    long cases_ok, cases_failed;
} vt_totals;

/* vt_run_cases - runs every case of inp/out through tok; returns the cases
 * that differ (or -1 when the files disagree on the number of cases). */
static long vt_run_cases(const st_tokenizer *tok, const char *inp, size_t inp_len, const char *out,
                         size_t out_len, long *n_cases)
{
    const size_t sep_len = sizeof vt_sep - 1;
    long bad = 0, k = 0;
    size_t ip = 0, op = 0;
    while (ip < inp_len) {
        const char *next = strstr(inp + ip, vt_sep); /* .inp holds no NUL */
        size_t tlen = next ? (size_t)(next - (inp + ip)) : inp_len - ip;
        if (op >= out_len)
            return -1;
        const char *line = out + op, *eol = memchr(line, '\n', out_len - op);
        if (eol == NULL)
            eol = out + out_len;
        int32_t *want = NULL, *got = NULL;
        size_t n_want = 0, n_got = 0;
        if (!vt_parse_ids(line, eol, &want, &n_want))
            return -1;
        st_err e = st_tok_encode(tok, inp + ip, tlen, false, &got, &n_got);
        bool same = e == ST_OK && n_got == n_want &&
                    (n_want == 0 || memcmp(got, want, n_want * sizeof *want) == 0);
        if (!same) {
            bad++;
            printf("    case %ld differs: ", k);
            vt_show(inp + ip, tlen);
            putchar('\n');
            if (e != ST_OK)
                printf("      encode failed: %s\n", st_errmsg(e));
            vt_show_ids("llama.cpp", want, n_want);
            if (e == ST_OK)
                vt_show_ids("strata   ", got, n_got);
        }
        free(want);
        free(got);
        k++;
        op = (size_t)(eol - out) + 1;
        ip = next ? (size_t)(next - inp) + sep_len : inp_len;
    }
    if (op < out_len)
        return -1; /* more expected lines than texts */
    *n_cases = k;
    return bad;
}

/* vt_file - checks the vocabulary NAME (its .gguf, .inp and .out in dir). */
static void vt_file(const char *dir, const char *name, vt_totals *tot)
{
    char path[VT_PATH], pin[VT_PATH], pout[VT_PATH];
    int lp = snprintf(path, sizeof path, "%s/%s%s.gguf", dir, vt_prefix, name);
    int li = snprintf(pin, sizeof pin, "%s/%s%s.gguf.inp", dir, vt_prefix, name);
    int lo = snprintf(pout, sizeof pout, "%s/%s%s.gguf.out", dir, vt_prefix, name);
    if (lp < 0 || li < 0 || lo < 0 || (size_t)li >= sizeof pin || (size_t)lo >= sizeof pout) {
        printf("%-16s FAIL: path too long\n", name);
        tot->files_failed++;
        return;
    }
    st_gguf *g = NULL;
    st_err e = st_gguf_open(path, &g);
    if (e != ST_OK) {
        printf("%-16s FAIL: cannot open: %s\n", name, st_errmsg(e));
        tot->files_failed++;
        return;
    }
    st_gguf_str model = vt_meta(g, "tokenizer.ggml.model");
    st_gguf_str pre = vt_meta(g, "tokenizer.ggml.pre");
    char kind[VT_PATH];
    snprintf(kind, sizeof kind, "model %.*s, pre %.*s", (int)model.len, model.data, (int)pre.len,
             pre.data);
    st_tokenizer *tok = NULL;
    e = st_tok_from_gguf(g, &tok);
    st_gguf_close(g);
    if (e == ST_ETYPE && !vt_required_name(name)) {
        printf("%-16s UNSUPPORTED (%s): %s\n", name, kind, st_errmsg(e));
        tot->files_unsupported++;
        return;
    }
    if (e != ST_OK) {
        printf("%-16s FAIL (%s): cannot build the tokenizer: %s\n", name, kind, st_errmsg(e));
        tot->files_failed++;
        return;
    }
    size_t inp_len = 0, out_len = 0;
    char *inp = vt_read(pin, &inp_len), *out = vt_read(pout, &out_len);
    long n_cases = 0, bad = -1;
    if (inp != NULL && out != NULL)
        bad = vt_run_cases(tok, inp, inp_len, out, out_len, &n_cases);
    if (bad < 0 || n_cases == 0) {
        printf("%-16s FAIL (%s): %s and %s unreadable or of different case counts\n", name, kind,
               pin, pout);
        tot->files_failed++;
    } else {
        printf("%-16s %s (%s): %ld/%ld cases pass\n", name, bad ? "FAIL" : "ok", kind,
               n_cases - bad, n_cases);
        tot->cases_ok += n_cases - bad;
        tot->cases_failed += bad;
        if (bad)
            tot->files_failed++;
        else
            tot->files_ok++;
    }
    free(inp);
    free(out);
    st_tok_free(tok);
}

/* vt_special - runs the special-token cases of the JSON file at path;
 * returns the number that fail (a case not recorded, a vocabulary that
 * does not load, different ids), or -1 when the file is unreadable. */
static long vt_special(const char *dir, const char *path)
{
    size_t len = 0;
    char *js = vt_read(path, &len);
    cJSON *root = js ? cJSON_Parse(js) : NULL;
    free(js);
    cJSON *cases = root ? cJSON_GetObjectItem(root, "cases") : NULL;
    if (!cJSON_IsArray(cases)) {
        printf("FAIL: %s unreadable\n", path);
        cJSON_Delete(root);
        return -1;
    }
    long bad = 0, n = 0;
    for (int i = 0; i < cJSON_GetArraySize(cases); i++, n++) {
        cJSON *c = cJSON_GetArrayItem(cases, i);
        cJSON *v = cJSON_GetObjectItem(c, "vocab"), *t = cJSON_GetObjectItem(c, "text");
        cJSON *ids = cJSON_GetObjectItem(c, "ids");
        if (!cJSON_IsString(v) || !cJSON_IsString(t) || !cJSON_IsArray(ids)) {
            printf("  special case %d: malformed or not recorded (tok_vocab_record.py)\n", i);
            bad++;
            continue;
        }
        char gp[VT_PATH];
        int lp = snprintf(gp, sizeof gp, "%s/%s%s.gguf", dir, vt_prefix, v->valuestring);
        st_gguf *g = NULL;
        st_tokenizer *tok = NULL;
        st_err e = lp > 0 && (size_t)lp < sizeof gp ? st_gguf_open(gp, &g) : ST_ERANGE;
        if (e == ST_OK)
            e = st_tok_from_gguf(g, &tok);
        st_gguf_close(g);
        int32_t *got = NULL;
        size_t n_got = 0, n_want = (size_t)cJSON_GetArraySize(ids);
        const char *text = t->valuestring;
        if (e == ST_OK)
            e = st_tok_encode_ex(tok, text, strlen(text), false, true, &got, &n_got);
        bool same = e == ST_OK && n_got == n_want;
        for (size_t k = 0; same && k < n_want; k++)
            same = cJSON_GetArrayItem(ids, (int)k)->valueint == got[k];
        if (!same) {
            bad++;
            printf("  special case %d (%s) differs: ", i, v->valuestring);
            vt_show(text, strlen(text));
            putchar('\n');
            if (e != ST_OK)
                printf("      %s\n", st_errmsg(e));
            else
                vt_show_ids("strata   ", got, n_got);
        }
        free(got);
        st_tok_free(tok);
    }
    printf("special-token cases (%s): %ld/%ld pass\n", path, n - bad, n);
    cJSON_Delete(root);
    return bad;
}

static int vt_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
    char src[VT_PATH], dir[VT_PATH];
    const char *env = getenv("STRATA_LLAMA_SRC");
    const char *home = getenv("HOME");
    if (env && *env)
        snprintf(src, sizeof src, "%s", env);
    else
        snprintf(src, sizeof src, "%s/.cache/llama-ref/work/src", home ? home : ".");
    int ld = snprintf(dir, sizeof dir, "%s/models", src);
    if (ld < 0 || (size_t)ld >= sizeof dir) {
        printf("FAIL: the llama.cpp source path is too long: %s\n", src);
        return 1;
    }
    DIR *d = opendir(dir);
    if (d == NULL) {
        printf("SKIP: no llama.cpp source at %s (set STRATA_LLAMA_SRC to its folder; "
               "deploy's build-llama-ref.sh fetches it): the tokenizer cases were NOT run\n",
               src);
        return VT_EXIT_SKIP;
    }
    char *names[VT_MAX_FILES];
    size_t n = 0;
    const size_t pl = sizeof vt_prefix - 1, sl = sizeof vt_suffix - 1;
    for (struct dirent *ent; (ent = readdir(d)) != NULL && n < VT_MAX_FILES;) {
        size_t l = strlen(ent->d_name);
        if (l > pl + sl && strncmp(ent->d_name, vt_prefix, pl) == 0 &&
            strcmp(ent->d_name + l - sl, vt_suffix) == 0)
            names[n++] = strndup(ent->d_name + pl, l - pl - sl);
    }
    closedir(d);
    if (n == 0) {
        printf("SKIP: %s holds no ggml-vocab-*.gguf.inp: the tokenizer cases were NOT run\n", dir);
        return VT_EXIT_SKIP;
    }
    qsort(names, n, sizeof names[0], vt_cmp);
    printf("llama.cpp tokenizer cases from %s\n", dir);
    vt_totals tot = {0};
    for (size_t i = 0; i < n; i++) {
        vt_file(dir, names[i], &tot);
        free(names[i]);
    }
    printf("files: %d pass, %d fail, %d unsupported (listed above, not counted as passed); "
           "cases of supported files: %ld pass, %ld fail\n",
           tot.files_ok, tot.files_failed, tot.files_unsupported, tot.cases_ok,
           tot.cases_failed);
    long bad_special = argc > 1 ? vt_special(dir, argv[1]) : 0;
    return tot.files_failed == 0 && tot.files_ok > 0 && bad_special == 0 ? 0 : 1;
}
