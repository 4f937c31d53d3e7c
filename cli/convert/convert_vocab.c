/* convert_vocab.c - the vocabularies `strata convert` writes: the
 * placeholder SPM vocabulary of the shared test files, and llama2.c's
 * tokenizer.bin (convert_impl.h; the format of both in cmd_convert.c's
 * file comment). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/convert/convert_impl.h"
#include "common/text/tokenizer.h"

void cv_vocab_free(cv_vocab *v)
{
    if (v->toks != NULL)
        for (int64_t i = 0; i < v->n; i++)
            free(v->toks[i]);
    free(v->toks);
    free(v->lens);
    free(v->scores);
    free(v->types);
    memset(v, 0, sizeof *v);
}

static st_err cv_vocab_alloc(cv_vocab *v, int64_t n)
{
    memset(v, 0, sizeof *v);
    v->n = n;
    v->toks = calloc((size_t)n, sizeof *v->toks);
    v->lens = calloc((size_t)n, sizeof *v->lens);
    v->scores = calloc((size_t)n, sizeof *v->scores);
    v->types = calloc((size_t)n, sizeof *v->types);
    if (!v->toks || !v->lens || !v->scores || !v->types) {
        cv_vocab_free(v);
        return st_errorf(ST_ENOMEM, "convert: vocabulary of %lld tokens", (long long)n);
    }
    return ST_OK;
}

static st_err cv_vocab_set(cv_vocab *v, int64_t i, const char *s, size_t len, float score,
                           int32_t type)
{
    v->toks[i] = malloc(len + 1);
    if (v->toks[i] == NULL)
        return st_errorf(ST_ENOMEM, "convert: token %lld", (long long)i);
    memcpy(v->toks[i], s, len);
    v->toks[i][len] = '\0';
    v->lens[i] = len;
    v->scores[i] = score;
    v->types[i] = type;
    return ST_OK;
}

/* The special and byte tokens shared by both vocabularies: ids 0..258. */
static st_err cv_vocab_fixed(cv_vocab *v)
{
    static const char *const special[CV_N_SPECIAL] =
        {[CV_ID_UNK] = "<unk>", [CV_ID_BOS] = "<s>", [CV_ID_EOS] = "</s>"};
    static const int32_t special_type[CV_N_SPECIAL] =
        {[CV_ID_UNK] = ST_TOK_UNKNOWN, [CV_ID_BOS] = ST_TOK_CONTROL, [CV_ID_EOS] = ST_TOK_CONTROL};
    st_err e = ST_OK;
    for (int i = 0; i < CV_N_SPECIAL && !e; i++)
        e = cv_vocab_set(v, i, special[i], strlen(special[i]), 0.0f, special_type[i]);
    for (int b = 0; b < CV_N_BYTE && !e; b++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        e = cv_vocab_set(v, CV_N_SPECIAL + b, s, 6, 0.0f, ST_TOK_BYTE);
    }
    return e;
}

st_err cv_vocab_placeholder(cv_vocab *v, int64_t n)
{
    st_err e = cv_vocab_alloc(v, n);
    if (e)
        return e;
    e = cv_vocab_fixed(v);
    /* letters: the k-th string of the sequence a..z, aa..zz, aaa.. */
    char word[16];
    int64_t piece = 0, k = 0;
    for (int64_t id = CV_MIN_VOCAB; id < n && !e; k++) {
        int len = 1;
        int64_t rem = k, span = 26;
        while (rem >= span) {
            rem -= span;
            span *= 26;
            len++;
        }
        for (int c = len - 1; c >= 0; c--) {
            word[c] = (char)('a' + rem % 26);
            rem /= 26;
        }
        char marked[24];
        memcpy(marked, "\xE2\x96\x81", 3); /* U+2581, SentencePiece's word start */
        memcpy(marked + 3, word, (size_t)len);
        e = cv_vocab_set(v, id++, marked, (size_t)len + 3, -(float)piece, ST_TOK_NORMAL);
        piece++;
        if (!e && id < n) {
            e = cv_vocab_set(v, id++, word, (size_t)len, -(float)piece, ST_TOK_NORMAL);
            piece++;
        }
    }
    if (e)
        cv_vocab_free(v);
    return e;
}

/* cv_vocab_llama2c: tokenizer.bin is an int32 max length, then per token
 * an f32 score, an int32 length and the bytes. Spaces become U+2581 again
 * (llama2.c's export replaced them) and "\n<s>\n" / "\n</s>\n" become
 * "<s>" / "</s>". */
st_err cv_vocab_llama2c(cv_vocab *v, const char *path, int64_t n)
{
    FILE *fp = fopen(path, "rb");
    if (fp == NULL)
        return st_errorf(errno == ENOENT ? ST_ENOENT : ST_EIO, "convert: open '%s': %s", path,
                         strerror(errno));
    st_err e = cv_vocab_alloc(v, n);
    if (e) {
        fclose(fp);
        return e;
    }
    int32_t max_len;
    char *buf = NULL, *out = NULL;
    if (fread(&max_len, 4, 1, fp) != 1 || max_len < 1 || max_len > (1 << 20)) {
        e = st_errorf(ST_EFORMAT, "convert: '%s': bad max token length", path);
        goto done;
    }
    buf = malloc((size_t)max_len);
    out = malloc((size_t)max_len * 3 + 1);
    if (buf == NULL || out == NULL) {
        e = st_errorf(ST_ENOMEM, "convert: token buffer");
        goto done;
    }
    int64_t count = 0;
    for (;;) {
        float score;
        int32_t len;
        size_t got = fread(&score, 1, 4, fp);
        if (got == 0 && feof(fp))
            break;
        if (got != 4 || fread(&len, 4, 1, fp) != 1) {
            e = st_errorf(ST_ETRUNC, "convert: '%s': token %lld is truncated", path,
                          (long long)count);
            goto done;
        }
        if (len < 0 || len > max_len) {
            e = st_errorf(ST_EFORMAT, "convert: '%s': token %lld has length %d (max %d)", path,
                          (long long)count, len, max_len);
            goto done;
        }
        if (len > 0 && fread(buf, 1, (size_t)len, fp) != (size_t)len) {
            e = st_errorf(ST_ETRUNC, "convert: '%s': token %lld is truncated", path,
                          (long long)count);
            goto done;
        }
        if (count >= n) {
            count++;
            continue; /* keep counting for the error message */
        }
        size_t m = 0;
        for (int32_t i = 0; i < len; i++) {
            if (buf[i] == ' ') {
                memcpy(out + m, "\xE2\x96\x81", 3);
                m += 3;
            } else {
                out[m++] = buf[i];
            }
        }
        int32_t type = ST_TOK_NORMAL;
        if (count == 0) {
            type = ST_TOK_UNKNOWN;
        } else if (count == 1 || count == 2) {
            const char *name = count == 1 ? "<s>" : "</s>";
            char wrapped[8];
            snprintf(wrapped, sizeof wrapped, "\n%s\n", name);
            if (m == strlen(wrapped) && memcmp(out, wrapped, m) == 0) {
                m = strlen(name);
                memcpy(out, name, m);
            }
            type = ST_TOK_CONTROL;
        } else if (m == 6 && memcmp(out, "<0x", 3) == 0 && out[5] == '>') {
            type = ST_TOK_BYTE;
        }
        e = cv_vocab_set(v, count, out, m, score, type);
        if (e)
            goto done;
        count++;
    }
    if (count != n)
        e = st_errorf(ST_ESHAPE,
                      "convert: tokenizer '%s' has %lld tokens, the model's vocab_size is %lld",
                      path, (long long)count, (long long)n);
done:
    free(buf);
    free(out);
    fclose(fp);
    if (e)
        cv_vocab_free(v);
    return e;
}
