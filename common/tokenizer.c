/* tokenizer.c - SentencePiece (llama) tokenizer: vocabulary, encode, decode,
 * streaming detokenizer.
 *
 * Design. The vocabulary is stored flat: every piece copied, NUL-terminated,
 * into one text buffer, with per-id offset, length, score and type arrays,
 * and an open-addressing hash table (FNV-1a, linear probing, load <= 1/2)
 * from piece bytes to id, built once when the tokenizer is made. All three
 * sources (GGUF metadata, llama2.c's tokenizer.bin, plain arrays) funnel
 * into st_tok_from_pieces, so they share one validation path.
 *
 * Encoding reproduces llama.cpp's SPM tokenizer. The text is normalised
 * (every ' ' becomes "▁", and "▁" is prepended when the vocabulary asks for
 * a space prefix), split into UTF-8 characters (a byte that does not start
 * a valid character is a symbol of its own, so malformed input is encoded
 * byte by byte), and the symbols are kept in a doubly linked list over an
 * array. Every adjacent pair whose concatenation is a piece goes into a
 * binary max-heap keyed by (score, then leftmost position). Popping the
 * best pair merges it unless it is stale (one side already merged away or
 * grown: detected by comparing the pair's recorded byte size with the
 * current sizes), then the two new neighbour pairs are pushed. Each merge
 * pushes at most two pairs, so the heap never exceeds 3 * symbols and is
 * allocated once: O(n log n) for n characters. A final symbol that is a
 * piece gives its id; otherwise its bytes become byte tokens "<0xXX>" (or
 * one UNK when the vocabulary lacks byte tokens). Lookups during merging
 * hash the concatenation in place, since merged symbols are contiguous in
 * the normalised text.
 *
 * Decoding renders each id ("▁" -> ' ', byte token -> its byte, control
 * and unused -> nothing, UNK -> " ⁇ ") and drops the one space the prefix
 * introduced at the start of a text. The streaming detokenizer renders the
 * same way but passes the bytes through a small UTF-8 assembler, so it
 * never emits half a character; invalid sequences become U+FFFD. */
#include "common/tokenizer.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct st_tokenizer {
    size_t n_vocab;
    char *text;        /* all pieces, each NUL-terminated */
    size_t *off;       /* piece i starts at text + off[i] */
    uint32_t *len;     /* its length in bytes */
    float *score;
    uint8_t *type;     /* st_tok_type */
    int32_t byte_id[256];
    bool byte_complete; /* all 256 byte tokens exist */
    int32_t *ht;       /* hash slots: id or -1 */
    size_t ht_mask;
    size_t max_render; /* longest rendering of one id */
    st_tok_config cfg;
};

static const char tok_space_mark[] = "\xe2\x96\x81"; /* U+2581 "▁" */
static const char tok_unk_text[] = " \xe2\x81\x87 ";  /* " ⁇ " */

st_tok_config st_tok_config_default(void)
{
    st_tok_config c = {.bos_id = 1, .eos_id = 2, .unk_id = 0, .add_bos = true,
                       .add_space_prefix = true};
    return c;
}

/* ---- hash table --------------------------------------------------------- */

static uint64_t tok_hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static int32_t tok_lookup(const st_tokenizer *t, const char *s, size_t n)
{
    size_t slot = (size_t)tok_hash(s, n) & t->ht_mask;
    for (;;) {
        int32_t id = t->ht[slot];
        if (id < 0)
            return -1;
        if (t->len[id] == n && memcmp(t->text + t->off[id], s, n) == 0)
            return id;
        slot = (slot + 1) & t->ht_mask;
    }
}

static void tok_insert(st_tokenizer *t, int32_t id)
{
    const char *s = t->text + t->off[id];
    size_t n = t->len[id];
    size_t slot = (size_t)tok_hash(s, n) & t->ht_mask;
    for (;;) {
        int32_t cur = t->ht[slot];
        if (cur < 0 || (t->len[cur] == n && memcmp(t->text + t->off[cur], s, n) == 0)) {
            t->ht[slot] = id; /* a duplicate piece: the later id wins */
            return;
        }
        slot = (slot + 1) & t->ht_mask;
    }
}

/* ---- construction ------------------------------------------------------- */

static int tok_hex(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* tok_parse_byte - the byte of a "<0xXX>" piece, or -1. */
static int tok_parse_byte(const char *s, size_t n)
{
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return -1;
    int hi = tok_hex(s[3]), lo = tok_hex(s[4]);
    if (hi < 0 || lo < 0)
        return -1;
    return hi * 16 + lo;
}

/* tok_render - writes the text of id (valid) to dst and returns its length
 * (at most t->max_render); with dst NULL, returns a bound on it. */
static size_t tok_render(const st_tokenizer *t, int32_t id, char *dst)
{
    const char *s = t->text + t->off[id];
    size_t n = t->len[id];
    switch (t->type[id]) {
    case ST_TOK_BYTE:
        if (dst)
            dst[0] = (char)tok_parse_byte(s, n);
        return 1;
    case ST_TOK_CONTROL:
    case ST_TOK_UNUSED:
        return 0;
    case ST_TOK_UNKNOWN:
        if (dst)
            memcpy(dst, tok_unk_text, sizeof tok_unk_text - 1);
        return sizeof tok_unk_text - 1;
    case ST_TOK_USER_DEFINED:
        if (dst)
            memcpy(dst, s, n);
        return n;
    default:
        break;
    }
    if (dst == NULL)
        return n; /* "▁" only shrinks */
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        if (n - i >= 3 && memcmp(s + i, tok_space_mark, 3) == 0) {
            dst[k++] = ' ';
            i += 3;
        } else {
            dst[k++] = s[i++];
        }
    }
    return k;
}

void st_tok_free(st_tokenizer *tok)
{
    if (tok == NULL)
        return;
    free(tok->text);
    free(tok->off);
    free(tok->len);
    free(tok->score);
    free(tok->type);
    free(tok->ht);
    free(tok);
}

st_err st_tok_from_pieces(const char *const *pieces, const size_t *lens, const float *scores,
                          const int32_t *types, size_t n, const st_tok_config *cfg,
                          st_tokenizer **out)
{
    if (out == NULL)
        return st_errorf(ST_EINVAL, "st_tok_from_pieces: out is NULL");
    *out = NULL;
    if (pieces == NULL || cfg == NULL)
        return st_errorf(ST_EINVAL, "st_tok_from_pieces: pieces or cfg is NULL");
    if (n == 0 || n > INT32_MAX)
        return st_errorf(ST_EINVAL, "tokenizer: vocabulary of %zu pieces (need 1..%d)", n,
                         INT32_MAX);
    int32_t special[3] = {cfg->bos_id, cfg->eos_id, cfg->unk_id};
    const char *special_name[3] = {"bos_token_id", "eos_token_id", "unknown_token_id"};
    for (int i = 0; i < 3; i++)
        if (special[i] < 0 || (size_t)special[i] >= n)
            return st_errorf(ST_ERANGE, "tokenizer: %s %d outside the vocabulary of %zu",
                             special_name[i], special[i], n);

    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (pieces[i] == NULL)
            return st_errorf(ST_EINVAL, "tokenizer: piece %zu is NULL", i);
        size_t l = lens ? lens[i] : strlen(pieces[i]);
        if (l > ST_TOK_MAX_PIECE)
            return st_errorf(ST_ERANGE, "tokenizer: piece %zu has %zu bytes (limit %d)", i, l,
                             ST_TOK_MAX_PIECE);
        total += l + 1; /* cannot overflow: n <= INT32_MAX, l <= 4096 */
        int32_t ty = types ? types[i] : ST_TOK_NORMAL;
        if (ty < ST_TOK_NORMAL || ty > ST_TOK_BYTE)
            return st_errorf(ST_ERANGE, "tokenizer: token %zu has type %d (valid: 1..6)", i, ty);
        if (ty == ST_TOK_BYTE && tok_parse_byte(pieces[i], l) < 0)
            return st_errorf(ST_EFORMAT, "tokenizer: byte token %zu is not spelled <0xXX>", i);
        if (scores && isnan(scores[i]))
            return st_errorf(ST_EFORMAT, "tokenizer: token %zu has a NaN score", i);
    }

    st_tokenizer *t = calloc(1, sizeof *t);
    if (t == NULL)
        return st_errorf(ST_ENOMEM, "tokenizer: out of memory");
    size_t slots = 2;
    while (slots < 2 * n)
        slots *= 2;
    t->n_vocab = n;
    t->cfg = *cfg;
    t->text = malloc(total);
    t->off = malloc(n * sizeof *t->off);
    t->len = malloc(n * sizeof *t->len);
    t->score = malloc(n * sizeof *t->score);
    t->type = malloc(n);
    t->ht = malloc(slots * sizeof *t->ht);
    if (!t->text || !t->off || !t->len || !t->score || !t->type || !t->ht) {
        st_tok_free(t);
        return st_errorf(ST_ENOMEM, "tokenizer: out of memory for %zu pieces", n);
    }
    t->ht_mask = slots - 1;
    for (size_t s = 0; s < slots; s++)
        t->ht[s] = -1;
    for (int b = 0; b < 256; b++)
        t->byte_id[b] = -1;

    size_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l = lens ? lens[i] : strlen(pieces[i]);
        memcpy(t->text + pos, pieces[i], l);
        t->text[pos + l] = '\0';
        t->off[i] = pos;
        t->len[i] = (uint32_t)l;
        pos += l + 1;
        t->score[i] = scores ? scores[i] : 0.0f;
        t->type[i] = (uint8_t)(types ? types[i] : ST_TOK_NORMAL);
        if (t->type[i] == ST_TOK_BYTE && t->byte_id[tok_parse_byte(pieces[i], l)] < 0)
            t->byte_id[tok_parse_byte(pieces[i], l)] = (int32_t)i;
        tok_insert(t, (int32_t)i);
        size_t r = tok_render(t, (int32_t)i, NULL);
        t->max_render = r > t->max_render ? r : t->max_render;
    }
    t->byte_complete = true;
    for (int b = 0; b < 256; b++)
        t->byte_complete = t->byte_complete && t->byte_id[b] >= 0;
    *out = t;
    return ST_OK;
}

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

static uint32_t tok_le32(const void *p)
{
    const uint8_t *b = p;
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

st_err st_tok_from_gguf(const st_gguf *g, st_tokenizer **out)
{
    if (out == NULL || g == NULL)
        return st_errorf(ST_EINVAL, "st_tok_from_gguf: NULL argument");
    *out = NULL;
    st_gguf_str model;
    st_err e = st_gguf_get_str(g, "tokenizer.ggml.model", &model);
    if (e != ST_OK)
        return e;
    if (!st_gguf_str_eq(model, "llama"))
        return st_errorf(ST_ETYPE,
                         "tokenizer.ggml.model is '%.*s': only 'llama' (SentencePiece) is "
                         "supported",
                         (int)(model.len > 64 ? 64 : model.len), model.data);
    const st_gguf_kv *toks, *scores, *types;
    if ((e = st_gguf_get_arr(g, "tokenizer.ggml.tokens", ST_GGUF_STRING, &toks)) != ST_OK ||
        (e = st_gguf_get_arr(g, "tokenizer.ggml.scores", ST_GGUF_FLOAT32, &scores)) != ST_OK ||
        (e = st_gguf_get_arr(g, "tokenizer.ggml.token_type", ST_GGUF_INT32, &types)) != ST_OK)
        return e;
    uint64_t n = toks->arr_n;
    if (scores->arr_n != n)
        return st_errorf(ST_ESHAPE, "tokenizer.ggml.scores has %llu entries, tokens has %llu",
                         (unsigned long long)scores->arr_n, (unsigned long long)n);
    if (types->arr_n != n)
        return st_errorf(ST_ESHAPE, "tokenizer.ggml.token_type has %llu entries, tokens has %llu",
                         (unsigned long long)types->arr_n, (unsigned long long)n);
    if (n == 0 || n > INT32_MAX)
        return st_errorf(ST_ESHAPE, "tokenizer.ggml.tokens has %llu entries (need 1..%d)",
                         (unsigned long long)n, INT32_MAX);

    st_tok_config cfg = st_tok_config_default();
    if ((e = tok_opt_id(g, "tokenizer.ggml.bos_token_id", &cfg.bos_id)) != ST_OK ||
        (e = tok_opt_id(g, "tokenizer.ggml.eos_token_id", &cfg.eos_id)) != ST_OK ||
        (e = tok_opt_id(g, "tokenizer.ggml.unknown_token_id", &cfg.unk_id)) != ST_OK ||
        (e = tok_opt_bool(g, "tokenizer.ggml.add_bos_token", &cfg.add_bos)) != ST_OK ||
        (e = tok_opt_bool(g, "tokenizer.ggml.add_space_prefix", &cfg.add_space_prefix)) != ST_OK)
        return e;

    const char **pieces = malloc(n * sizeof *pieces);
    size_t *lens = malloc(n * sizeof *lens);
    float *sc = malloc(n * sizeof *sc);
    int32_t *ty = malloc(n * sizeof *ty);
    if (!pieces || !lens || !sc || !ty) {
        e = st_errorf(ST_ENOMEM, "tokenizer: out of memory for %llu tokens",
                      (unsigned long long)n);
        goto done;
    }
    const uint8_t *sp = scores->arr_data, *tp = types->arr_data;
    for (uint64_t i = 0; i < n; i++) {
        pieces[i] = toks->arr_strs[i].data; /* from_pieces checks the lengths */
        lens[i] = (size_t)toks->arr_strs[i].len;
        uint32_t bits = tok_le32(sp + 4 * i);
        memcpy(&sc[i], &bits, sizeof bits);
        ty[i] = (int32_t)tok_le32(tp + 4 * i);
    }
    e = st_tok_from_pieces(pieces, lens, sc, ty, (size_t)n, &cfg, out);
done:
    free(pieces);
    free(lens);
    free(sc);
    free(ty);
    return e;
}

/* ---- llama2.c tokenizer.bin -------------------------------------------- */

/* tok_escape - copies n bytes of src to dst with ' ' spelled "▁"; returns
 * the bytes written (at most 3 * n). */
static size_t tok_escape(const char *src, size_t n, char *dst)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == ' ') {
            memcpy(dst + k, tok_space_mark, 3);
            k += 3;
        } else {
            dst[k++] = src[i];
        }
    }
    return k;
}

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
    int32_t max_len = flen >= 4 ? (int32_t)tok_le32(buf) : -1;
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
        int32_t l = (int32_t)tok_le32(buf + p + 4);
        if (l < 0 || l > max_len) {
            e = st_errorf(ST_EFORMAT, "%s: token %zu: length %d outside 0..%d (offset %zu)",
                          path, n, l, max_len, p + 4);
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
        uint32_t bits = tok_le32(buf + p);
        memcpy(&sc[i], &bits, sizeof bits);
        size_t l = tok_le32(buf + p + 4);
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

/* ---- accessors ---------------------------------------------------------- */

size_t st_tok_n_vocab(const st_tokenizer *tok) { return tok->n_vocab; }
int32_t st_tok_bos(const st_tokenizer *tok) { return tok->cfg.bos_id; }
int32_t st_tok_eos(const st_tokenizer *tok) { return tok->cfg.eos_id; }
int32_t st_tok_unk(const st_tokenizer *tok) { return tok->cfg.unk_id; }
bool st_tok_add_bos(const st_tokenizer *tok) { return tok->cfg.add_bos; }
bool st_tok_add_space_prefix(const st_tokenizer *tok) { return tok->cfg.add_space_prefix; }

static st_err tok_check_id(const st_tokenizer *t, int32_t id)
{
    if (id < 0 || (size_t)id >= t->n_vocab)
        return st_errorf(ST_ERANGE, "token id %d outside the vocabulary [0, %zu)", id,
                         t->n_vocab);
    return ST_OK;
}

st_err st_tok_piece(const st_tokenizer *tok, int32_t id, const char **piece, size_t *len)
{
    st_err e = tok_check_id(tok, id);
    if (e != ST_OK)
        return e;
    *piece = tok->text + tok->off[id];
    *len = tok->len[id];
    return ST_OK;
}

st_err st_tok_type_of(const st_tokenizer *tok, int32_t id, st_tok_type *type)
{
    st_err e = tok_check_id(tok, id);
    if (e != ST_OK)
        return e;
    *type = (st_tok_type)tok->type[id];
    return ST_OK;
}

st_err st_tok_score(const st_tokenizer *tok, int32_t id, float *score)
{
    st_err e = tok_check_id(tok, id);
    if (e != ST_OK)
        return e;
    *score = tok->score[id];
    return ST_OK;
}

st_err st_tok_find(const st_tokenizer *tok, const char *piece, size_t len, int32_t *id)
{
    int32_t v = tok_lookup(tok, piece, len);
    if (v < 0)
        return st_errorf(ST_ENOENT, "piece of %zu bytes not in the vocabulary", len);
    *id = v;
    return ST_OK;
}

/* ---- UTF-8 -------------------------------------------------------------- */

/* tok_utf8_need - the length of a character starting with lead byte b,
 * or 0 if b cannot start one. */
static unsigned tok_utf8_need(uint8_t b)
{
    if (b < 0x80)
        return 1;
    if (b >= 0xC2 && b <= 0xDF)
        return 2;
    if (b >= 0xE0 && b <= 0xEF)
        return 3;
    if (b >= 0xF0 && b <= 0xF4)
        return 4;
    return 0;
}

/* tok_utf8_cont_ok - whether b may be byte number idx (>= 1) of a
 * character led by lead (no overlongs, surrogates or values > U+10FFFF). */
static bool tok_utf8_cont_ok(uint8_t lead, unsigned idx, uint8_t b)
{
    uint8_t lo = 0x80, hi = 0xBF;
    if (idx == 1) {
        if (lead == 0xE0)
            lo = 0xA0;
        else if (lead == 0xED)
            hi = 0x9F;
        else if (lead == 0xF0)
            lo = 0x90;
        else if (lead == 0xF4)
            hi = 0x8F;
    }
    return b >= lo && b <= hi;
}

/* tok_utf8_char_len - the length of the valid character at s (avail bytes
 * left), or 1 when s does not start a valid character. */
static size_t tok_utf8_char_len(const uint8_t *s, size_t avail)
{
    unsigned need = tok_utf8_need(s[0]);
    if (need <= 1 || need > avail)
        return 1;
    for (unsigned i = 1; i < need; i++)
        if (!tok_utf8_cont_ok(s[0], i, s[i]))
            return 1;
    return need;
}

/* ---- encode ------------------------------------------------------------- */

typedef struct tok_sym {
    int32_t prev, next;
    uint32_t off, n; /* bytes of the normalised text; n == 0: merged away */
} tok_sym;

typedef struct tok_pair {
    float score;
    int32_t left, right;
    uint32_t size; /* bytes of left + right when pushed */
} tok_pair;

typedef struct tok_heap {
    tok_pair *a;
    size_t n;
} tok_heap;

/* tok_pair_before - whether a is popped before b: higher score, then the
 * leftmost. */
static bool tok_pair_before(const tok_pair *a, const tok_pair *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void tok_heap_push(tok_heap *h, tok_pair p)
{
    size_t i = h->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!tok_pair_before(&p, &h->a[parent]))
            break;
        h->a[i] = h->a[parent];
        i = parent;
    }
    h->a[i] = p;
}

static tok_pair tok_heap_pop(tok_heap *h)
{
    tok_pair top = h->a[0];
    tok_pair last = h->a[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && tok_pair_before(&h->a[c + 1], &h->a[c]))
            c++;
        if (!tok_pair_before(&h->a[c], &last))
            break;
        h->a[i] = h->a[c];
        i = c;
    }
    if (h->n > 0)
        h->a[i] = last;
    return top;
}

static void tok_try_pair(const st_tokenizer *t, const char *buf, const tok_sym *sym,
                         tok_heap *h, int32_t left, int32_t right)
{
    if (left < 0 || right < 0)
        return;
    uint32_t size = sym[left].n + sym[right].n;
    int32_t id = tok_lookup(t, buf + sym[left].off, size);
    if (id < 0)
        return;
    tok_pair p = {.score = t->score[id], .left = left, .right = right, .size = size};
    tok_heap_push(h, p);
}

st_err st_tok_encode(const st_tokenizer *tok, const char *text, size_t len, bool add_bos,
                     int32_t **ids, size_t *n)
{
    if (tok == NULL || ids == NULL || n == NULL || (text == NULL && len > 0))
        return st_errorf(ST_EINVAL, "st_tok_encode: NULL argument");
    *ids = NULL;
    *n = 0;
    if (len > ST_TOK_MAX_TEXT)
        return st_errorf(ST_ERANGE, "text of %zu bytes exceeds the limit of %zu", len,
                         (size_t)ST_TOK_MAX_TEXT);
    size_t spaces = 0;
    for (size_t i = 0; i < len; i++)
        spaces += text[i] == ' ';
    bool prefix = tok->cfg.add_space_prefix && len > 0;
    size_t blen = len + 2 * spaces + (prefix ? 3 : 0);

    char *buf = malloc(blen + 1);
    if (buf == NULL)
        return st_errorf(ST_ENOMEM, "st_tok_encode: out of memory for %zu bytes", len);
    size_t k = prefix ? tok_escape(" ", 1, buf) : 0;
    tok_escape(text, len, buf + k);

    /* Symbols: one per UTF-8 character (or invalid byte). Each merge
     * pushes at most two pairs, so the heap holds at most 3 * nsym. */
    size_t count = 0;
    for (size_t off = 0; off < blen; count++)
        off += tok_utf8_char_len((const uint8_t *)buf + off, blen - off);
    tok_sym *sym = malloc((count + 1) * sizeof *sym);
    tok_heap heap = {.a = malloc((3 * count + 1) * sizeof *heap.a), .n = 0};
    int32_t *res = malloc((blen + 1) * sizeof *res); /* BOS + at most a byte token per byte */
    if (!sym || !heap.a || !res) {
        free(buf);
        free(sym);
        free(heap.a);
        free(res);
        return st_errorf(ST_ENOMEM, "st_tok_encode: out of memory for %zu bytes", len);
    }
    int32_t nsym = 0;
    for (size_t off = 0; off < blen;) {
        size_t cl = tok_utf8_char_len((const uint8_t *)buf + off, blen - off);
        sym[nsym].prev = nsym - 1;
        sym[nsym].next = off + cl < blen ? nsym + 1 : -1;
        sym[nsym].off = (uint32_t)off;
        sym[nsym].n = (uint32_t)cl;
        nsym++;
        off += cl;
    }
    for (int32_t i = 1; i < nsym; i++)
        tok_try_pair(tok, buf, sym, &heap, i - 1, i);

    while (heap.n > 0) {
        tok_pair p = tok_heap_pop(&heap);
        tok_sym *l = &sym[p.left], *r = &sym[p.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != p.size)
            continue; /* stale: a side was merged since the pair was pushed */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            sym[r->next].prev = p.left;
        tok_try_pair(tok, buf, sym, &heap, l->prev, p.left);
        tok_try_pair(tok, buf, sym, &heap, p.left, l->next);
    }

    size_t m = 0;
    if (add_bos)
        res[m++] = tok->cfg.bos_id;
    for (int32_t i = nsym > 0 ? 0 : -1; i >= 0; i = sym[i].next) {
        int32_t id = tok_lookup(tok, buf + sym[i].off, sym[i].n);
        if (id >= 0) {
            res[m++] = id;
        } else if (tok->byte_complete) {
            for (uint32_t j = 0; j < sym[i].n; j++)
                res[m++] = tok->byte_id[(uint8_t)buf[sym[i].off + j]];
        } else {
            res[m++] = tok->cfg.unk_id;
        }
    }
    free(buf);
    free(sym);
    free(heap.a);
    int32_t *fit = realloc(res, (m ? m : 1) * sizeof *res); /* give back the worst-case room */
    *ids = fit ? fit : res;
    *n = m;
    return ST_OK;
}

/* ---- decode ------------------------------------------------------------- */

st_err st_tok_decode(const st_tokenizer *tok, const int32_t *ids, size_t n, char **text,
                     size_t *len)
{
    if (tok == NULL || text == NULL || len == NULL || (ids == NULL && n > 0))
        return st_errorf(ST_EINVAL, "st_tok_decode: NULL argument");
    *text = NULL;
    *len = 0;
    size_t cap = 1;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (size_t)ids[i] >= tok->n_vocab)
            return st_errorf(ST_ERANGE, "token id %d (position %zu) outside the vocabulary [0, %zu)",
                             ids[i], i, tok->n_vocab);
        cap += tok_render(tok, ids[i], NULL);
    }
    char *out = malloc(cap);
    if (out == NULL)
        return st_errorf(ST_ENOMEM, "st_tok_decode: out of memory for %zu bytes", cap);
    size_t k = 0;
    bool strip = tok->cfg.add_space_prefix;
    for (size_t i = 0; i < n; i++) {
        size_t r = tok_render(tok, ids[i], out + k);
        if (strip && r > 0) {
            strip = false;
            if (out[k] == ' ') {
                memmove(out + k, out + k + 1, r - 1);
                r--;
            }
        }
        k += r;
    }
    out[k] = '\0';
    *text = out;
    *len = k;
    return ST_OK;
}

/* ---- streaming detokenizer ---------------------------------------------- */

static const char tok_fffd[] = "\xef\xbf\xbd";

void st_detok_init(st_detok *d, const st_tokenizer *tok, bool at_text_start)
{
    memset(d, 0, sizeof *d);
    d->tok = tok;
    d->strip_space = at_text_start && tok->cfg.add_space_prefix;
}

size_t st_detok_bound(const st_tokenizer *tok)
{
    /* Each input byte emits at most 3 bytes of its own (a U+FFFD); held
     * bytes (at most 4 with the one completing them) add at most 4. */
    return 4 * (tok->max_render + 4);
}

/* tok_detok_byte - passes byte b through the UTF-8 assembler, appending
 * complete characters to out at *k. */
static void tok_detok_byte(st_detok *d, uint8_t b, char *out, size_t *k)
{
    for (;;) {
        if (d->need == 0) {
            unsigned need = tok_utf8_need(b);
            if (need == 1) {
                out[(*k)++] = (char)b;
            } else if (need == 0) {
                memcpy(out + *k, tok_fffd, 3);
                *k += 3;
            } else {
                d->pend[0] = b;
                d->n_pend = 1;
                d->need = (uint8_t)need;
            }
            return;
        }
        if (tok_utf8_cont_ok(d->pend[0], d->n_pend, b)) {
            d->pend[d->n_pend++] = b;
            if (d->n_pend == d->need) {
                memcpy(out + *k, d->pend, d->need);
                *k += d->need;
                d->n_pend = d->need = 0;
            }
            return;
        }
        /* The held sequence cannot complete: replace it, then look at b
         * afresh. */
        memcpy(out + *k, tok_fffd, 3);
        *k += 3;
        d->n_pend = d->need = 0;
    }
}

st_err st_detok_push(st_detok *d, int32_t id, char *out, size_t cap, size_t *n_out)
{
    const st_tokenizer *t = d->tok;
    *n_out = 0;
    st_err e = tok_check_id(t, id);
    if (e != ST_OK)
        return e;
    if (cap < st_detok_bound(t))
        return st_errorf(ST_EINVAL, "st_detok_push: capacity %zu below the bound %zu", cap,
                         st_detok_bound(t));
    char piece[ST_TOK_MAX_PIECE + 8];
    size_t r = tok_render(t, id, piece);
    size_t start = 0;
    if (d->strip_space && r > 0) {
        d->strip_space = false;
        start = piece[0] == ' ';
    }
    size_t k = 0;
    for (size_t i = start; i < r; i++)
        tok_detok_byte(d, (uint8_t)piece[i], out, &k);
    *n_out = k;
    return ST_OK;
}

st_err st_detok_flush(st_detok *d, char *out, size_t cap, size_t *n_out)
{
    *n_out = 0;
    if (cap < st_detok_bound(d->tok))
        return st_errorf(ST_EINVAL, "st_detok_flush: capacity %zu below the bound %zu", cap,
                         st_detok_bound(d->tok));
    if (d->need != 0) {
        memcpy(out, tok_fffd, 3);
        *n_out = 3;
        d->n_pend = d->need = 0;
    }
    return ST_OK;
}
