/* tokenizer.c - the tokenizer's vocabulary (SentencePiece and BPE).
 *
 * Design. The vocabulary is stored flat: every piece copied, NUL-terminated,
 * into one text buffer, with per-id offset, length, score and type arrays,
 * and an open-addressing hash table (FNV-1a, linear probing, load <= 1/2)
 * from piece bytes to id, built once when the tokenizer is made. All three
 * sources (GGUF metadata, llama2.c's tokenizer.bin, plain arrays) funnel
 * into st_tok_from_pieces, so they share one validation path.
 *
 * Files. This one holds the vocabulary (construction, the piece table,
 * accessors) and the primitives the others share: byte pieces, rendering
 * an id as text, escaping spaces. tok_load.c reads the vocabulary from a
 * GGUF file or llama2.c's tokenizer.bin, tok_encode.c splits special
 * tokens out and is the SPM encoder, tok_bpe.c the byte-level BPE encoder,
 * tok_decode.c decodes and streams text back; the struct, the hash lookup
 * and the UTF-8 classes they share are in the private tok_impl.h. */
#include "common/text/tok_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char tok_space_mark[] = "\xe2\x96\x81"; /* U+2581 "▁" */
static const char tok_unk_text[] = " \xe2\x81\x87 "; /* " ⁇ " */

st_tok_config st_tok_config_default(void)
{
    st_tok_config c = {.bos_id = 1,
                       .eos_id = 2,
                       .unk_id = 0,
                       .eot_id = -1,
                       .add_bos = true,
                       .add_space_prefix = true};
    return c;
}

/* ---- hash table --------------------------------------------------------- */

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
int tok_parse_byte(const char *s, size_t n)
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
size_t tok_render(const st_tokenizer *t, int32_t id, bool show_control, char *dst)
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
        if (!show_control)
            return 0;
        if (dst)
            memcpy(dst, s, n);
        return n;
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
        return n; /* "▁" and the byte alphabet only shrink */
    if (t->model == ST_TOK_MODEL_BPE)
        return tok_bpe_render(s, n, dst);
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

/* tok_escape - copies n bytes of src to dst with ' ' spelled "▁"; returns
 * the bytes written (at most 3 * n). */
size_t tok_escape(const char *src, size_t n, char *dst)
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
    free(tok->special);
    tok_bpe_free(tok->bpe);
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
    if (cfg->eot_id < -1 || (cfg->eot_id >= 0 && (size_t)cfg->eot_id >= n))
        return st_errorf(ST_ERANGE, "tokenizer: eot_token_id %d outside the vocabulary of %zu",
                         cfg->eot_id, n);

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
        size_t r = tok_render(t, (int32_t)i, true, NULL);
        t->max_render = r > t->max_render ? r : t->max_render;
    }
    t->byte_complete = true;
    for (int b = 0; b < 256; b++)
        t->byte_complete = t->byte_complete && t->byte_id[b] >= 0;
    st_err e = tok_finish(t);
    if (e != ST_OK) {
        st_tok_free(t);
        return e;
    }
    *out = t;
    return ST_OK;
}

/* tok_u64_cmp - qsort order of uint64 keys, ascending. */
static int tok_u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : (x > y);
}

st_err tok_finish(st_tokenizer *t)
{
    size_t k = 0;
    for (size_t i = 0; i < t->n_vocab; i++)
        k += tok_is_special_type(t->type[i]) && t->len[i] > 0;
    free(t->special);
    t->n_special = 0;
    t->special = malloc((k ? k : 1) * sizeof *t->special);
    uint64_t *key = malloc((k ? k : 1) * sizeof *key);
    if (t->special == NULL || key == NULL) {
        free(key);
        return st_errorf(ST_ENOMEM, "tokenizer: out of memory for %zu special tokens", k);
    }
    /* Longest piece first, then the lower id: (UINT32_MAX - len, id). */
    for (size_t i = 0; i < t->n_vocab; i++)
        if (tok_is_special_type(t->type[i]) && t->len[i] > 0)
            key[t->n_special++] = (uint64_t)(UINT32_MAX - t->len[i]) << 32 | (uint64_t)i;
    qsort(key, t->n_special, sizeof *key, tok_u64_cmp);
    for (size_t i = 0; i < t->n_special; i++)
        t->special[i] = (int32_t)(key[i] & UINT32_MAX);
    free(key);
    return ST_OK;
}

/* ---- accessors ---------------------------------------------------------- */

size_t st_tok_n_vocab(const st_tokenizer *tok) { return tok->n_vocab; }
int32_t st_tok_bos(const st_tokenizer *tok) { return tok->cfg.bos_id; }
int32_t st_tok_eos(const st_tokenizer *tok) { return tok->cfg.eos_id; }
int32_t st_tok_unk(const st_tokenizer *tok) { return tok->cfg.unk_id; }
int32_t st_tok_eot(const st_tokenizer *tok) { return tok->cfg.eot_id; }
st_tok_model st_tok_model_of(const st_tokenizer *tok) { return tok->model; }
bool st_tok_add_bos(const st_tokenizer *tok) { return tok->cfg.add_bos; }
bool st_tok_add_space_prefix(const st_tokenizer *tok) { return tok->cfg.add_space_prefix; }

st_err tok_check_id(const st_tokenizer *t, int32_t id)
{
    if (id < 0 || (size_t)id >= t->n_vocab)
        return st_errorf(ST_ERANGE, "token id %d outside the vocabulary [0, %zu)", id, t->n_vocab);
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
