/* tok_load.c - the tokenizer's vocabulary sources: GGUF metadata
 * (SentencePiece "llama" and byte-level BPE "gpt2") and llama2.c's
 * tokenizer.bin.
 *
 * Design. Both readers only gather arrays (pieces, lengths, scores, types)
 * and special ids, then hand them to st_tok_from_pieces, which owns all the
 * validation of the vocabulary itself. The GGUF reader relies on st_gguf's
 * typed getters for presence and types and checks that the three arrays
 * agree in length; scores and types are read from the mapping byte by byte
 * (no unaligned access). A BPE vocabulary has no scores (all 0 then) but
 * merges, handed with the pre-tokenizer name to tok_bpe_build once the
 * vocabulary is built. tokenizer.bin has no count, so it is read whole
 * and walked twice: once to validate every length against the bytes left
 * and size the buffers, once to convert (' ' becomes "▁", the first
 * three ids get their fixed spellings and types). */
#include "common/text/tok_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/model/arch.h"
#include "common/base/le.h"

/* ---- GGUF --------------------------------------------------------------- */

static st_err tok_opt_id(const st_gguf *g, const char *key, int32_t *id)
{
    if (st_gguf_find_kv(g, key) == NULL)
        return ST_OK; /* the default stays */
    uint32_t v;
    st_err e = st_gguf_get_u32(g, key, &v);
    if (e != ST_OK)
        return e;
    if (v > INT32_MAX)
        return st_errorf(ST_ERANGE, "%s = %u is not a token id", key, v);
    *id = (int32_t)v;
    return ST_OK;
}

static st_err tok_opt_bool(const st_gguf *g, const char *key, bool *b)
{
    if (st_gguf_find_kv(g, key) == NULL)
        return ST_OK;
    return st_gguf_get_bool(g, key, b);
}

/* Spellings of end-of-turn control tokens, looked up in this order when
 * the file names no eot_token_id (llama.cpp looks for these among others:
 * Llama 3, ChatML, Phi-3, Gemma). */
static const char *const tok_eot_texts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>",
                                            "<end_of_turn>"};

/* tok_phi3_names - what general.name contains (any case) for llama.cpp to
 * give Phi-3's special tokens their right strip (tok_find_rstrip). */
static const char *const tok_phi3_names[] = {"phi-3", "phi3"};

/* tok_find_rstrip - sets t->rstrip_special as llama.cpp does: for a model
 * whose general.name contains "phi-3" or "phi3" (ASCII case ignored). */
static void tok_find_rstrip(const st_gguf *g, st_tokenizer *t)
{
    st_gguf_str name;
    if (st_gguf_get_str(g, st_arch_gkey_name(ST_AG_NAME), &name) != ST_OK)
        return;
    for (size_t k = 0; k < sizeof tok_phi3_names / sizeof tok_phi3_names[0]; k++) {
        size_t nl = strlen(tok_phi3_names[k]);
        for (uint64_t i = 0; i + nl <= name.len && !t->rstrip_special; i++)
            t->rstrip_special = strncasecmp(name.data + i, tok_phi3_names[k], nl) == 0;
    }
}

/* tok_find_eot - the EOT id: the key when present, else a control token
 * spelled as in tok_eot_texts, else -1 (already in t->cfg). */
static st_err tok_find_eot(const st_gguf *g, st_tokenizer *t)
{
    if (st_gguf_find_kv(g, st_arch_gkey_name(ST_AG_TOK_EOT)) != NULL) {
        int32_t id = -1;
        st_err e = tok_opt_id(g, st_arch_gkey_name(ST_AG_TOK_EOT), &id);
        if (e != ST_OK)
            return e;
        if ((size_t)id >= t->n_vocab)
            return st_errorf(ST_ERANGE, "%s %d outside the vocabulary of %zu",
                             st_arch_gkey_name(ST_AG_TOK_EOT), id, t->n_vocab);
        t->cfg.eot_id = id;
        return ST_OK;
    }
    for (size_t i = 0; i < sizeof tok_eot_texts / sizeof tok_eot_texts[0]; i++) {
        int32_t id = tok_lookup(t, tok_eot_texts[i], strlen(tok_eot_texts[i]));
        if (id >= 0 && t->type[id] == ST_TOK_CONTROL) {
            t->cfg.eot_id = id;
            break;
        }
    }
    return ST_OK;
}

/* tok_bpe_attach - reads merges and pre and builds the BPE extras of t. */
static st_err tok_bpe_attach(const st_gguf *g, st_tokenizer *t)
{
    const st_gguf_kv *merges;
    st_err e = st_gguf_get_arr(g, st_arch_gkey_name(ST_AG_TOK_MERGES), ST_GGUF_STRING, &merges);
    if (e != ST_OK)
        return e;
    const char *pre = NULL;
    size_t pre_len = 0;
    if (st_gguf_find_kv(g, st_arch_gkey_name(ST_AG_TOK_PRE)) != NULL) {
        st_gguf_str p;
        if ((e = st_gguf_get_str(g, st_arch_gkey_name(ST_AG_TOK_PRE), &p)) != ST_OK)
            return e;
        pre = p.data;
        pre_len = (size_t)p.len;
    }
    size_t n = (size_t)merges->arr_n;
    const char **ms = malloc((n ? n : 1) * sizeof *ms);
    size_t *ml = malloc((n ? n : 1) * sizeof *ml);
    if (ms == NULL || ml == NULL) {
        free(ms);
        free(ml);
        return st_errorf(ST_ENOMEM, "tokenizer: out of memory for %zu merges", n);
    }
    for (size_t i = 0; i < n; i++) {
        ms[i] = merges->arr_strs[i].data;
        ml[i] = (size_t)merges->arr_strs[i].len;
    }
    t->model = ST_TOK_MODEL_BPE;
    e = tok_bpe_build(t, pre, pre_len, ms, ml, n);
    free(ms);
    free(ml);
    return e;
}

st_err st_tok_from_gguf(const st_gguf *g, st_tokenizer **out)
{
    if (out == NULL || g == NULL)
        return st_errorf(ST_EINVAL, "st_tok_from_gguf: NULL argument");
    *out = NULL;
    st_gguf_str model;
    st_err e = st_gguf_get_str(g, st_arch_gkey_name(ST_AG_TOK_MODEL), &model);
    if (e != ST_OK)
        return e;
    bool bpe = st_gguf_str_eq(model, "gpt2");
    if (!bpe && !st_gguf_str_eq(model, "llama"))
        return st_errorf(ST_ETYPE,
                         "%s is '%.*s': only 'llama' (SentencePiece) and "
                         "'gpt2' (byte-level BPE) are supported",
                         st_arch_gkey_name(ST_AG_TOK_MODEL), (int)(model.len > 64 ? 64 : model.len),
                         model.data);
    const st_gguf_kv *toks, *scores = NULL, *types;
    if ((e = st_gguf_get_arr(g, st_arch_gkey_name(ST_AG_TOK_TOKENS), ST_GGUF_STRING, &toks)) !=
            ST_OK ||
        (e = st_gguf_get_arr(g, st_arch_gkey_name(ST_AG_TOK_TYPES), ST_GGUF_INT32, &types)) !=
            ST_OK)
        return e;
    if ((!bpe || st_gguf_find_kv(g, st_arch_gkey_name(ST_AG_TOK_SCORES)) != NULL) &&
        (e = st_gguf_get_arr(g, st_arch_gkey_name(ST_AG_TOK_SCORES), ST_GGUF_FLOAT32, &scores)) !=
            ST_OK)
        return e;
    if (bpe && st_gguf_find_kv(g, st_arch_gkey_name(ST_AG_TOK_MERGES)) == NULL)
        return st_errorf(ST_EMISSING, "%s is missing (a 'gpt2' vocabulary needs its merges)",
                         st_arch_gkey_name(ST_AG_TOK_MERGES));
    uint64_t n = toks->arr_n;
    if (scores && scores->arr_n != n)
        return st_errorf(ST_ESHAPE, "%s has %llu entries, tokens has %llu",
                         st_arch_gkey_name(ST_AG_TOK_SCORES), (unsigned long long)scores->arr_n,
                         (unsigned long long)n);
    if (types->arr_n != n)
        return st_errorf(ST_ESHAPE, "%s has %llu entries, tokens has %llu",
                         st_arch_gkey_name(ST_AG_TOK_TYPES), (unsigned long long)types->arr_n,
                         (unsigned long long)n);
    if (n == 0 || n > INT32_MAX)
        return st_errorf(ST_ESHAPE, "%s has %llu entries (need 1..%d)",
                         st_arch_gkey_name(ST_AG_TOK_TOKENS), (unsigned long long)n, INT32_MAX);

    st_tok_config cfg = st_tok_config_default();
    if (bpe) {
        st_gguf_str pre = {0};
        if (st_gguf_find_kv(g, st_arch_gkey_name(ST_AG_TOK_PRE)) != NULL &&
            (e = st_gguf_get_str(g, st_arch_gkey_name(ST_AG_TOK_PRE), &pre)) != ST_OK)
            return e;
        cfg.add_bos = pre.data != NULL && st_gguf_str_eq(pre, "llama-bpe");
        cfg.add_space_prefix = false;
    }
    if ((e = tok_opt_id(g, st_arch_gkey_name(ST_AG_TOK_BOS), &cfg.bos_id)) != ST_OK ||
        (e = tok_opt_id(g, st_arch_gkey_name(ST_AG_TOK_EOS), &cfg.eos_id)) != ST_OK ||
        (e = tok_opt_id(g, st_arch_gkey_name(ST_AG_TOK_UNK), &cfg.unk_id)) != ST_OK ||
        (e = tok_opt_bool(g, st_arch_gkey_name(ST_AG_TOK_ADD_BOS), &cfg.add_bos)) != ST_OK ||
        (e = tok_opt_bool(g, st_arch_gkey_name(ST_AG_TOK_ADD_SPACE), &cfg.add_space_prefix)) !=
            ST_OK)
        return e;

    const char **pieces = malloc(n * sizeof *pieces);
    size_t *lens = malloc(n * sizeof *lens);
    float *sc = malloc(n * sizeof *sc);
    int32_t *ty = malloc(n * sizeof *ty);
    if (!pieces || !lens || !sc || !ty) {
        e = st_errorf(ST_ENOMEM, "tokenizer: out of memory for %llu tokens", (unsigned long long)n);
        goto done;
    }
    const uint8_t *sp = scores ? scores->arr_data : NULL, *tp = types->arr_data;
    for (uint64_t i = 0; i < n; i++) {
        pieces[i] = toks->arr_strs[i].data; /* from_pieces checks the lengths */
        lens[i] = (size_t)toks->arr_strs[i].len;
        uint32_t bits = sp ? st_le_ld32(sp + 4 * i) : 0;
        memcpy(&sc[i], &bits, sizeof bits);
        ty[i] = (int32_t)st_le_ld32(tp + 4 * i);
    }
    e = st_tok_from_pieces(pieces, lens, sc, ty, (size_t)n, &cfg, out);
    if (e == ST_OK)
        e = tok_find_eot(g, *out);
    if (e == ST_OK)
        tok_find_rstrip(g, *out);
    if (e == ST_OK && bpe)
        e = tok_bpe_attach(g, *out);
    if (e != ST_OK) {
        st_tok_free(*out);
        *out = NULL;
    }
done:
    free(pieces);
    free(lens);
    free(sc);
    free(ty);
    return e;
}

/* ---- llama2.c tokenizer.bin -------------------------------------------- */

static st_err tok_read_file(const char *path, uint8_t **buf, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return st_err_errno(errno, path);
    long sz = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        sz = ftell(f);
    if (sz < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return st_errorf(ST_EIO, "%s: cannot determine the file size", path);
    }
    uint8_t *b = malloc((size_t)sz + 1);
    if (b == NULL) {
        fclose(f);
        return st_errorf(ST_ENOMEM, "%s: out of memory for %ld bytes", path, sz);
    }
    size_t got = fread(b, 1, (size_t)sz, f);
    fclose(f);
    if (got != (size_t)sz) {
        free(b);
        return st_errorf(ST_EIO, "%s: read %zu of %ld bytes", path, got, sz);
    }
    *buf = b;
    *len = got;
    return ST_OK;
}

st_err st_tok_from_llama2c(const char *path, st_tokenizer **out)
{
    if (out == NULL || path == NULL)
        return st_errorf(ST_EINVAL, "st_tok_from_llama2c: NULL argument");
    *out = NULL;
    uint8_t *buf = NULL;
    size_t flen = 0, n = 0, text_bytes = 16; /* room for "<unk>", "<s>", "</s>" */
    const char **pieces = NULL;
    size_t *lens = NULL;
    float *sc = NULL;
    int32_t *ty = NULL;
    char *text = NULL;
    st_err e = tok_read_file(path, &buf, &flen);
    if (e != ST_OK)
        return e;
    int32_t max_len = flen >= 4 ? (int32_t)st_le_ld32(buf) : -1;
    if (max_len < 0 || max_len > ST_TOK_MAX_PIECE) {
        e = st_errorf(flen < 4 ? ST_ETRUNC : ST_EFORMAT,
                      "%s: max_token_length %d outside 0..%d (file of %zu bytes)", path, max_len,
                      ST_TOK_MAX_PIECE, flen);
        goto done;
    }
    /* Pass 1: count and validate; pass 2: convert. */
    for (size_t p = 4; p < flen; n++) {
        if (flen - p < 8) {
            e = st_errorf(ST_ETRUNC, "%s: token %zu: header cut at offset %zu", path, n, p);
            goto done;
        }
        int32_t l = (int32_t)st_le_ld32(buf + p + 4);
        if (l < 0 || l > max_len) {
            e = st_errorf(ST_EFORMAT, "%s: token %zu: length %d outside 0..%d (offset %zu)", path,
                          n, l, max_len, p + 4);
            goto done;
        }
        if (flen - p - 8 < (size_t)l) {
            e = st_errorf(ST_ETRUNC, "%s: token %zu: %d bytes cut at offset %zu", path, n, l,
                          p + 8);
            goto done;
        }
        p += 8 + (size_t)l;
        text_bytes += 3 * (size_t)l + 1; /* ' ' grows to "▁" */
    }
    if (n < 3) {
        e = st_errorf(ST_EFORMAT, "%s: %zu tokens, need at least <unk>, <s>, </s>", path, n);
        goto done;
    }
    pieces = malloc(n * sizeof *pieces);
    lens = malloc(n * sizeof *lens);
    sc = malloc(n * sizeof *sc);
    ty = malloc(n * sizeof *ty);
    text = malloc(text_bytes);
    if (!pieces || !lens || !sc || !ty || !text) {
        e = st_errorf(ST_ENOMEM, "%s: out of memory for %zu tokens", path, n);
        goto done;
    }
    static const char *const fixed[3] = {"<unk>", "<s>", "</s>"};
    size_t p = 4, tp = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t bits = st_le_ld32(buf + p);
        memcpy(&sc[i], &bits, sizeof bits);
        size_t l = st_le_ld32(buf + p + 4);
        const char *src = (const char *)buf + p + 8;
        p += 8 + l;
        pieces[i] = text + tp;
        if (i <= 2) { /* "\n<s>\n" and "\n</s>\n" in the file */
            lens[i] = tok_escape(fixed[i], strlen(fixed[i]), text + tp);
            ty[i] = i == 0 ? ST_TOK_UNKNOWN : ST_TOK_CONTROL;
        } else {
            lens[i] = tok_escape(src, l, text + tp);
            ty[i] = tok_parse_byte(src, l) >= 0 ? ST_TOK_BYTE : ST_TOK_NORMAL;
        }
        tp += lens[i] + 1;
    }
    st_tok_config cfg = st_tok_config_default();
    e = st_tok_from_pieces(pieces, lens, sc, ty, n, &cfg, out);
done:
    free(buf);
    free(pieces);
    free(lens);
    free(sc);
    free(ty);
    free(text);
    return e;
}
