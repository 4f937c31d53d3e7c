/* tok_encode.c - special-token splitting and the SentencePiece (llama)
 * encoder.
 *
 * Special tokens. Before any model runs, the text is cut into fragments:
 * raw text, or the id of a special token whose piece occurs there. The
 * special tokens are tried longest piece first (t->special); each one
 * splits every raw fragment at its leftmost non-overlapping occurrences,
 * which is llama.cpp's partition. User-defined tokens always take part,
 * control and unknown ones only when special parsing is asked for. The
 * cost is one memmem pass over the raw text per special token. For Phi-3
 * (t->rstrip_special) the whitespace right after a split-out token is
 * dropped, as llama.cpp's RSTRIP attribute does.
 *
 * Design. Encoding reproduces llama.cpp's SPM tokenizer. The text is
 * normalised (every ' ' becomes "▁", and "▁" is prepended when the vocabulary
 * asks for a space prefix), split into UTF-8 characters (a byte that does not
 * start a valid character is a symbol of its own, so malformed input is
 * encoded byte by byte), and the symbols are kept in a doubly linked list over
 * an array. Every adjacent pair whose concatenation is a piece goes into a
 * binary max-heap keyed by (score, then leftmost position). Popping the best
 * pair merges it unless it is stale (one side already merged away or grown:
 * detected by comparing the pair's recorded byte size with the current sizes),
 * then the two new neighbour pairs are pushed. Each merge pushes at most two
 * pairs, so the heap never exceeds 3 * symbols and is allocated once: O(n log
 * n) for n characters. A final symbol that is a piece gives its id; otherwise
 * its bytes become byte tokens "<0xXX>" (or one UNK when the vocabulary lacks
 * byte tokens). Lookups during merging hash the concatenation in place, since
 * merged symbols are contiguous in the normalised text. */
#include "common/text/tok_impl.h"

#include <stdlib.h>
#include <string.h>

/* ---- UTF-8 -------------------------------------------------------------- */

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

static void tok_try_pair(const st_tokenizer *t, const char *buf, const tok_sym *sym, tok_heap *h,
                         int32_t left, int32_t right)
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

/* tok_spm_encode - appends the SPM ids of len bytes of plain text to
 * out[*m..] (room for 3 + len * 3 ids); prefix: start with "▁" when the
 * vocabulary adds a space prefix. ST_ENOMEM. */
static st_err tok_spm_encode(const st_tokenizer *tok, const char *text, size_t len, bool prefix,
                             int32_t *out, size_t *m_io)
{
    size_t spaces = 0;
    for (size_t i = 0; i < len; i++)
        spaces += text[i] == ' ';
    prefix = prefix && tok->cfg.add_space_prefix && len > 0;
    size_t blen = len + 2 * spaces + (prefix ? 3 : 0);
    if (blen == 0)
        return ST_OK;

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
    if (!sym || !heap.a) {
        free(buf);
        free(sym);
        free(heap.a);
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

    size_t m = *m_io;
    for (int32_t i = nsym > 0 ? 0 : -1; i >= 0; i = sym[i].next) {
        int32_t id = tok_lookup(tok, buf + sym[i].off, sym[i].n);
        if (id >= 0) {
            out[m++] = id;
        } else if (tok->byte_complete) {
            for (uint32_t j = 0; j < sym[i].n; j++)
                out[m++] = tok->byte_id[(uint8_t)buf[sym[i].off + j]];
        } else {
            out[m++] = tok->cfg.unk_id;
        }
    }
    *m_io = m;
    free(buf);
    free(sym);
    free(heap.a);
    return ST_OK;
}

/* ---- special tokens ----------------------------------------------------- */

/* A fragment of the text: raw bytes [off, off + len), or a special id. */
typedef struct tok_frag {
    size_t off, len;
    int32_t id; /* -1: raw text */
} tok_frag;

typedef struct tok_frags {
    tok_frag *a;
    size_t n, cap;
} tok_frags;

static bool tok_frags_push(tok_frags *v, tok_frag f)
{
    if (v->n == v->cap) {
        size_t ncap = v->cap ? 2 * v->cap : 4;
        tok_frag *g = realloc(v->a, ncap * sizeof *g);
        if (g == NULL)
            return false;
        v->a = g;
        v->cap = ncap;
    }
    v->a[v->n++] = f;
    return true;
}

/* Special tokens whose right whitespace stays even with rstrip_special
 * (llama.cpp's exceptions for Phi-3). */
static const char *const tok_keep_right[] = {"<unk>", "<s>", "<|endoftext|>"};

/* tok_rstrips - whether the whitespace after special token id is dropped. */
static bool tok_rstrips(const st_tokenizer *t, int32_t id)
{
    if (!t->rstrip_special)
        return false;
    for (size_t i = 0; i < sizeof tok_keep_right / sizeof tok_keep_right[0]; i++)
        if (t->len[id] == strlen(tok_keep_right[i]) &&
            memcmp(t->text + t->off[id], tok_keep_right[i], t->len[id]) == 0)
            return false;
    return true;
}

/* tok_c_space - C's isspace in the C locale (llama.cpp's strip test). */
static bool tok_c_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* tok_split_special - cuts text into fragments (*out, malloc'ed). Each
 * special token rebuilds the list: every raw fragment is split at the
 * token's leftmost non-overlapping occurrences. ST_ENOMEM. */
static st_err tok_split_special(const st_tokenizer *t, const char *text, size_t len,
                                bool parse_special, tok_frags *out)
{
    tok_frags cur = {0}, next = {0};
    bool ok = len == 0 || tok_frags_push(&cur, (tok_frag){.off = 0, .len = len, .id = -1});
    for (size_t s = 0; ok && s < t->n_special; s++) {
        int32_t id = t->special[s];
        if (!parse_special && t->type[id] != ST_TOK_USER_DEFINED)
            continue;
        const char *piece = t->text + t->off[id];
        size_t plen = t->len[id];
        next.n = 0;
        for (size_t i = 0; ok && i < cur.n; i++) {
            tok_frag f = cur.a[i];
            const char *hit;
            while (ok && f.id < 0 && f.len >= plen &&
                   (hit = memmem(text + f.off, f.len, piece, plen)) != NULL) {
                size_t before = (size_t)(hit - (text + f.off));
                if (before > 0)
                    ok = tok_frags_push(&next, (tok_frag){.off = f.off, .len = before, .id = -1});
                ok = ok && tok_frags_push(&next,
                                          (tok_frag){.off = f.off + before, .len = plen, .id = id});
                f.off += before + plen;
                f.len -= before + plen;
                while (f.len > 0 && tok_rstrips(t, id) && tok_c_space(text[f.off])) {
                    f.off++;
                    f.len--;
                }
            }
            if (ok && (f.id >= 0 || f.len > 0))
                ok = tok_frags_push(&next, f);
        }
        tok_frags tmp = cur;
        cur = next;
        next = tmp;
    }
    free(next.a);
    if (!ok) {
        free(cur.a);
        return st_errorf(ST_ENOMEM, "st_tok_encode: out of memory splitting special tokens");
    }
    *out = cur;
    return ST_OK;
}

st_err st_tok_encode(const st_tokenizer *tok, const char *text, size_t len, bool add_bos,
                     int32_t **ids, size_t *n)
{
    return st_tok_encode_ex(tok, text, len, add_bos, false, ids, n);
}

st_err st_tok_encode_ex(const st_tokenizer *tok, const char *text, size_t len, bool add_bos,
                        bool parse_special, int32_t **ids, size_t *n)
{
    if (tok == NULL || ids == NULL || n == NULL || (text == NULL && len > 0))
        return st_errorf(ST_EINVAL, "st_tok_encode: NULL argument");
    *ids = NULL;
    *n = 0;
    if (len > ST_TOK_MAX_TEXT)
        return st_errorf(ST_ERANGE, "text of %zu bytes exceeds the limit of %zu", len,
                         (size_t)ST_TOK_MAX_TEXT);
    tok_frags fr = {0};
    st_err e = tok_split_special(tok, text, len, parse_special, &fr);
    if (e != ST_OK)
        return e;
    const tok_frag *f = fr.a;
    size_t nf = fr.n;
    /* Worst case: BOS, then per fragment a space prefix ("▁", 3 byte
     * tokens) and a byte token per escaped byte (3 per space). */
    size_t cap = 1 + 3 * nf + 3 * len;
    int32_t *res = malloc(cap * sizeof *res);
    if (res == NULL) {
        free(fr.a);
        return st_errorf(ST_ENOMEM, "st_tok_encode: out of memory for %zu bytes", len);
    }
    size_t m = 0;
    if (add_bos)
        res[m++] = tok->cfg.bos_id;
    bool prev_special = true; /* SPM: a space prefix at the start and after a special token */
    for (size_t i = 0; i < nf && e == ST_OK; i++) {
        if (f[i].id >= 0) {
            res[m++] = f[i].id;
            prev_special = true;
            continue;
        }
        if (tok->model == ST_TOK_MODEL_BPE)
            e = tok_bpe_encode(tok, text + f[i].off, f[i].len, res, &m);
        else
            e = tok_spm_encode(tok, text + f[i].off, f[i].len, prev_special, res, &m);
        prev_special = false;
    }
    free(fr.a);
    if (e != ST_OK) {
        free(res);
        return e;
    }
    int32_t *fit = realloc(res, (m ? m : 1) * sizeof *res); /* give back the worst-case room */
    *ids = fit ? fit : res;
    *n = m;
    return ST_OK;
}
