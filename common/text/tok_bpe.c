/* tok_bpe.c - byte-level BPE (GGUF tokenizer model "gpt2"): the
 * pre-tokenizers, GPT-2's byte alphabet, the merge table and the encoder.
 *
 * Contract. tok_bpe_build attaches to a built vocabulary what BPE needs; the
 * result is immutable and shared by threads (each encode call makes its own
 * PCRE2 match data and work arrays). tok_bpe_encode takes plain text (the
 * special tokens are already split out by tok_encode.c) and appends ids;
 * tok_bpe_render turns a piece back into bytes.
 *
 * Design.
 * - Pre-tokenizer: one row per tokenizer.ggml.pre name in tok_pres, with
 *   up to TOK_MAX_STAGES PCRE2 patterns (llama.cpp's, in its order), compiled
 *   with PCRE2_UTF | PCRE2_UCP (Unicode classes for \p{L}, \p{N}, \s),
 *   PCRE2_MATCH_INVALID_UTF and PCRE2_DOLLAR_ENDONLY, JIT-compiled when PCRE2
 *   can. The first pattern cuts the text into its matches and the runs
 *   between them (text the pattern leaves out, or invalid UTF-8 it cannot
 *   read); each next pattern cuts every piece of the one before the same way,
 *   seeing only that piece; the last pattern's pieces are the words. No byte
 *   is ever lost.
 * - Byte alphabet: GPT-2 spells each byte as one character: the printable
 *   bytes 33..126, 161..172 and 174..255 as the code point of the same
 *   value, the 68 others, in byte order, as U+0100 onwards. Both directions
 *   are computed from these ranges; no table is written out.
 * - Merges: tokenizer.ggml.merges lists "left right" pairs, rank = position.
 *   Each is resolved once to (left id, right id) -> (rank, merged id) in an
 *   open-addressing hash table keyed by the two ids. A word starts as one
 *   symbol per byte (the id of the byte's character) in a linked list;
 *   adjacent pairs that have a merge go into a binary min-heap on (rank,
 *   leftmost position); popping applies the merge unless it is stale (a
 *   side gone or changed), then the new neighbour pairs are pushed. Each
 *   merge pushes at most two pairs: O(n log n) per word.
 * - Llama 3 ("llama-bpe") ignores merges for a word that is a token as a
 *   whole, as llama.cpp does for that pre-tokenizer. */
#include "common/text/tok_impl.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/model/arch.h"

/* ---- pre-tokenizers ----------------------------------------------------- */

/* The most patterns a pre-tokenizer applies one after the other. */
#define TOK_MAX_STAGES 6

/* A pre-tokenizer: patterns[0] cuts the text into pieces (its matches and
 * the runs between them), patterns[1] cuts each of those the same way
 * without looking past its ends, and so on (llama.cpp's sequence of
 * regexes); NULL ends the list. */
typedef struct tok_pre {
    const char *name;
    const char *patterns[TOK_MAX_STAGES];
    bool ignore_merges;
} tok_pre;

/* Whitespace in the patterns is Unicode's White_Space property, the set
 * llama.cpp's pre-tokenizers use; PCRE2's \s under UCP also takes U+180E,
 * which White_Space no longer has. TOK_WS is \s, TOK_NWS \S; the patterns
 * are otherwise llama.cpp's, alternative for alternative. */
#define TOK_WS "\\p{White_Space}"
#define TOK_NWS "\\P{White_Space}"
#define TOK_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
/* GPT-2's pattern as llama.cpp writes it (runs of whitespace before a
 * non-space are left between matches, which makes them pieces anyway). */
#define TOK_PAT_GPT2                                                                               \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" TOK_WS "\\p{L}\\p{N}]+|" TOK_WS            \
    "+(?!" TOK_NWS ")"
/* Qwen2's (Llama 3's with single digits). */
#define TOK_PAT_QWEN2                                                                              \
    TOK_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^" TOK_WS                           \
                     "\\p{L}\\p{N}]+[\\r\\n]*|" TOK_WS "*[\\r\\n]+|" TOK_WS "+(?!" TOK_NWS      \
                     ")|" TOK_WS "+"

/* DeepSeek's CJK run (its tokenizer.json's range list, as llama.cpp has it):
 * U+4E00..U+9FA5, U+0800..U+4E00, U+AC00..U+D7FF. */
#define TOK_PAT_DEEPSEEK_CJK "[\\x{4e00}-\\x{9fa5}\\x{0800}-\\x{4e00}\\x{ac00}-\\x{d7ff}]+"

static const tok_pre tok_pres[] = {
    {"gpt2", {TOK_PAT_GPT2 "|" TOK_WS "+"}, false},
    {"gpt-2", {TOK_PAT_GPT2}, false},
    {"mpt", {TOK_PAT_GPT2}, false},
    {"starcoder", {"\\p{N}", TOK_PAT_GPT2}, false},
    {"refact", {"\\p{N}", TOK_PAT_GPT2}, false},
    {"command-r", {"\\p{N}", TOK_PAT_GPT2}, false},
    {"falcon", {"[\\p{P}\\$\\+<=>\\^~\\|`]+", TOK_PAT_GPT2, "[0-9][0-9][0-9]"}, false},
    {"deepseek-coder",
     {"[\\r\\n]", TOK_WS "?\\p{L}+", TOK_WS "?\\p{P}+", TOK_PAT_DEEPSEEK_CJK, "\\p{N}"},
     false},
    {"llama-bpe",
     {TOK_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^" TOK_WS
                       "\\p{L}\\p{N}]+[\\r\\n]*|" TOK_WS "*[\\r\\n]+|" TOK_WS "+(?!" TOK_NWS
                       ")|" TOK_WS "+"},
     true},
    {"qwen2", {TOK_PAT_QWEN2}, false},
    {"qwen35",
     {TOK_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^" TOK_WS
                       "\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|" TOK_WS "*[\\r\\n]+|" TOK_WS
                       "+(?!" TOK_NWS ")|" TOK_WS "+"},
     false},
};
#define TOK_N_PRES (sizeof tok_pres / sizeof tok_pres[0])

/* ---- byte alphabet ------------------------------------------------------ */

enum {
    TOK_BYTES = 256,
    TOK_SHIFT_BASE = 0x100, /* first code point of the shifted bytes */
    TOK_LOW_END = 33,       /* bytes 0..32 are shifted */
    TOK_MID_LO = 127,       /* bytes 127..160 are shifted */
    TOK_MID_HI = 160,
    TOK_SOFT_HYPHEN = 173, /* and byte 173 */
    TOK_N_SHIFTED = 68,
    TOK_MAX_CHAR = 2,    /* bytes of one alphabet character in UTF-8 */
    TOK_MSG_BYTES = 256, /* room for a PCRE2 message or the list of pre names */
};

/* tok_byte_cp - the code point that spells byte b. */
static uint32_t tok_byte_cp(uint8_t b)
{
    if (b < TOK_LOW_END)
        return TOK_SHIFT_BASE + b;
    if (b >= TOK_MID_LO && b <= TOK_MID_HI)
        return TOK_SHIFT_BASE + TOK_LOW_END + (uint32_t)(b - TOK_MID_LO);
    if (b == TOK_SOFT_HYPHEN)
        return TOK_SHIFT_BASE + TOK_N_SHIFTED - 1;
    return b;
}

/* tok_cp_byte - the byte code point cp spells, or -1 outside the alphabet. */
static int tok_cp_byte(uint32_t cp)
{
    if (cp >= TOK_SHIFT_BASE) {
        uint32_t k = cp - TOK_SHIFT_BASE;
        if (k < TOK_LOW_END)
            return (int)k;
        if (k < TOK_LOW_END + (TOK_MID_HI - TOK_MID_LO + 1))
            return (int)(TOK_MID_LO + k - TOK_LOW_END);
        return k == TOK_N_SHIFTED - 1 ? TOK_SOFT_HYPHEN : -1;
    }
    bool shifted = cp < TOK_LOW_END || (cp >= TOK_MID_LO && cp <= TOK_MID_HI) ||
                   cp == TOK_SOFT_HYPHEN;
    return shifted ? -1 : (int)cp;
}

/* tok_byte_utf8 - writes the UTF-8 of byte b's character (1 or 2 bytes). */
static size_t tok_byte_utf8(uint8_t b, char *dst)
{
    uint32_t cp = tok_byte_cp(b);
    if (cp < 0x80) {
        dst[0] = (char)cp;
        return 1;
    }
    dst[0] = (char)(0xC0 | (cp >> 6));
    dst[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

size_t tok_bpe_render(const char *s, size_t n, char *dst)
{
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint8_t lead = (uint8_t)s[i];
        unsigned need = tok_utf8_need(lead);
        if (need == 2 && i + 1 < n && tok_utf8_cont_ok(lead, 1, (uint8_t)s[i + 1])) {
            uint32_t cp = (uint32_t)(lead & 0x1F) << 6 | ((uint8_t)s[i + 1] & 0x3F);
            int b = tok_cp_byte(cp);
            if (b >= 0) {
                dst[k++] = (char)b;
            } else {
                dst[k++] = s[i];
                dst[k++] = s[i + 1];
            }
            i += 2;
        } else {
            dst[k++] = s[i++]; /* ASCII spells itself; bytes outside the alphabet are copied */
        }
    }
    return k;
}

/* ---- merge table -------------------------------------------------------- */

typedef struct tok_merge {
    uint64_t key;   /* left id << 32 | right id */
    uint32_t rank;  /* TOK_NO_RANK: empty slot */
    int32_t result; /* the merged id */
} tok_merge;

#define TOK_NO_RANK UINT32_MAX
#define TOK_HASH_MUL 0x9E3779B97F4A7C15ULL /* Fibonacci hashing */

struct tok_bpe {
    pcre2_code *re[TOK_MAX_STAGES]; /* the pre-tokenizer's patterns */
    size_t n_re;
    bool ignore_merges;
    int32_t byte_tok[TOK_BYTES]; /* the id of each byte's character */
    tok_merge *mt;
    size_t mt_mask;
};

static uint64_t tok_merge_key(int32_t l, int32_t r)
{
    return (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
}

static size_t tok_merge_slot(const tok_bpe *b, uint64_t key)
{
    return (size_t)((key * TOK_HASH_MUL) >> 32) & b->mt_mask;
}

/* tok_merge_find - the merge of ids (l, r), or NULL. */
static const tok_merge *tok_merge_find(const tok_bpe *b, int32_t l, int32_t r)
{
    uint64_t key = tok_merge_key(l, r);
    for (size_t s = tok_merge_slot(b, key);; s = (s + 1) & b->mt_mask) {
        const tok_merge *m = &b->mt[s];
        if (m->rank == TOK_NO_RANK)
            return NULL;
        if (m->key == key)
            return m;
    }
}

/* tok_merge_add - records (l, r) -> result at rank unless the pair is
 * already there (the earlier, lower rank wins). */
static void tok_merge_add(tok_bpe *b, int32_t l, int32_t r, uint32_t rank, int32_t result)
{
    uint64_t key = tok_merge_key(l, r);
    for (size_t s = tok_merge_slot(b, key);; s = (s + 1) & b->mt_mask) {
        tok_merge *m = &b->mt[s];
        if (m->rank == TOK_NO_RANK) {
            *m = (tok_merge){.key = key, .rank = rank, .result = result};
            return;
        }
        if (m->key == key)
            return;
    }
}

void tok_bpe_free(tok_bpe *b)
{
    if (b == NULL)
        return;
    for (size_t i = 0; i < b->n_re; i++)
        pcre2_code_free(b->re[i]);
    free(b->mt);
    free(b);
}

/* tok_bpe_compile - compiles pre's patterns into b->re. PCRE2_DOLLAR_ENDONLY:
 * a "$" means the end of the piece, as in llama.cpp's ECMAScript regexes. */
static st_err tok_bpe_compile(tok_bpe *b, const tok_pre *pre)
{
    for (size_t i = 0; i < TOK_MAX_STAGES && pre->patterns[i] != NULL; i++) {
        int code;
        PCRE2_SIZE at;
        pcre2_code *re = pcre2_compile(
            (PCRE2_SPTR)pre->patterns[i], PCRE2_ZERO_TERMINATED,
            PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY, &code, &at,
            NULL);
        if (re == NULL) {
            PCRE2_UCHAR msg[TOK_MSG_BYTES];
            pcre2_get_error_message(code, msg, sizeof msg);
            return st_errorf(ST_EINTERNAL,
                             "pre-tokenizer '%s': PCRE2 rejects its pattern %zu at %zu: %s",
                             pre->name, i, (size_t)at, (const char *)msg);
        }
        /* JIT is an optimisation only: without it (no JIT support on this
         * platform), pcre2_match interprets the pattern. */
        (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
        b->re[b->n_re++] = re;
    }
    b->ignore_merges = pre->ignore_merges;
    return ST_OK;
}

st_err tok_bpe_build(st_tokenizer *t, const char *pre, size_t pre_len, const char *const *merges,
                     const size_t *merge_lens, size_t n)
{
    const tok_pre *p = NULL;
    if (pre == NULL) {
        p = &tok_pres[0];
    } else {
        for (size_t i = 0; i < TOK_N_PRES && p == NULL; i++)
            if (strlen(tok_pres[i].name) == pre_len && memcmp(tok_pres[i].name, pre, pre_len) == 0)
                p = &tok_pres[i];
    }
    if (p == NULL) {
        char known[TOK_MSG_BYTES] = "";
        for (size_t i = 0; i < TOK_N_PRES; i++)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "",
                     tok_pres[i].name);
        return st_errorf(ST_ETYPE, "%s '%.*s' is not supported (known: %s)",
                         st_arch_gkey_name(ST_AG_TOK_PRE), (int)(pre_len > 64 ? 64 : pre_len), pre,
                         known);
    }
    tok_bpe *b = calloc(1, sizeof *b);
    if (b == NULL)
        return st_errorf(ST_ENOMEM, "tokenizer: out of memory");
    for (int c = 0; c < TOK_BYTES; c++) {
        char u[TOK_MAX_CHAR];
        size_t ul = tok_byte_utf8((uint8_t)c, u);
        b->byte_tok[c] = tok_lookup(t, u, ul); /* -1: the vocabulary lacks it */
    }
    size_t slots = 2;
    while (slots < 2 * n)
        slots *= 2;
    b->mt = malloc(slots * sizeof *b->mt);
    char *cat = malloc(ST_TOK_MAX_PIECE + 1);
    if (b->mt == NULL || cat == NULL) {
        free(cat);
        tok_bpe_free(b);
        return st_errorf(ST_ENOMEM, "tokenizer: out of memory for %zu merges", n);
    }
    b->mt_mask = slots - 1;
    for (size_t s = 0; s < slots; s++)
        b->mt[s].rank = TOK_NO_RANK;
    for (size_t i = 0; i < n; i++) {
        const char *m = merges[i];
        size_t ml = merge_lens[i];
        const char *sp = ml > 1 ? memchr(m + 1, ' ', ml - 1) : NULL;
        if (sp == NULL || ml - 1 > ST_TOK_MAX_PIECE) {
            free(cat);
            tok_bpe_free(b);
            return st_errorf(ST_EFORMAT, "%s[%zu] is not 'left right'",
                             st_arch_gkey_name(ST_AG_TOK_MERGES), i);
        }
        size_t ll = (size_t)(sp - m), rl = ml - ll - 1;
        memcpy(cat, m, ll);
        memcpy(cat + ll, sp + 1, rl);
        int32_t l = tok_lookup(t, m, ll), r = tok_lookup(t, sp + 1, rl);
        int32_t res = tok_lookup(t, cat, ll + rl);
        if (l >= 0 && r >= 0 && res >= 0) /* else the merge can never apply to ids */
            tok_merge_add(b, l, r, (uint32_t)i, res);
    }
    free(cat);
    st_err e = tok_bpe_compile(b, p);
    if (e != ST_OK) {
        tok_bpe_free(b);
        return e;
    }
    t->bpe = b;
    return ST_OK;
}

/* ---- encoder ------------------------------------------------------------ */

typedef struct tok_bsym {
    int32_t id, prev, next; /* id -1: merged away */
} tok_bsym;

typedef struct tok_bpair {
    uint32_t rank;
    int32_t left, right;
    int32_t lid, rid; /* the ids when pushed: the pair is stale if either changed */
    int32_t result;   /* the merged id */
} tok_bpair;

/* tok_work - per-call work arrays, sized for the longest word. */
typedef struct tok_work {
    tok_bsym *sym;
    tok_bpair *heap;
    size_t nheap;
    char *spelled; /* a word in the byte alphabet (ignore_merges lookup) */
} tok_work;

static bool tok_bpair_before(const tok_bpair *a, const tok_bpair *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void tok_bheap_push(tok_work *w, tok_bpair p)
{
    size_t i = w->nheap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!tok_bpair_before(&p, &w->heap[parent]))
            break;
        w->heap[i] = w->heap[parent];
        i = parent;
    }
    w->heap[i] = p;
}

static tok_bpair tok_bheap_pop(tok_work *w)
{
    tok_bpair top = w->heap[0], last = w->heap[--w->nheap];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= w->nheap)
            break;
        if (c + 1 < w->nheap && tok_bpair_before(&w->heap[c + 1], &w->heap[c]))
            c++;
        if (!tok_bpair_before(&w->heap[c], &last))
            break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (w->nheap > 0)
        w->heap[i] = last;
    return top;
}

static void tok_bpe_try(const tok_bpe *b, tok_work *w, int32_t left, int32_t right)
{
    if (left < 0 || right < 0)
        return;
    const tok_merge *m = tok_merge_find(b, w->sym[left].id, w->sym[right].id);
    if (m == NULL)
        return;
    tok_bpair p = {.rank = m->rank,
                   .left = left,
                   .right = right,
                   .lid = w->sym[left].id,
                   .rid = w->sym[right].id,
                   .result = m->result};
    tok_bheap_push(w, p);
}

/* tok_bpe_merge - appends the ids of the word s (n > 0 bytes, each with a
 * byte token) after merging its pairs. */
static void tok_bpe_merge(const st_tokenizer *t, tok_work *w, const uint8_t *s, size_t n,
                          int32_t *out, size_t *m)
{
    const tok_bpe *b = t->bpe;
    if (n == 1) {
        out[(*m)++] = b->byte_tok[s[0]];
        return;
    }
    int32_t ns = (int32_t)n;
    for (int32_t i = 0; i < ns; i++)
        w->sym[i] = (tok_bsym){.id = b->byte_tok[s[i]],
                               .prev = i - 1,
                               .next = i + 1 < ns ? i + 1 : -1};
    w->nheap = 0;
    for (int32_t i = 1; i < ns; i++)
        tok_bpe_try(b, w, i - 1, i);
    while (w->nheap > 0) {
        tok_bpair p = tok_bheap_pop(w);
        tok_bsym *l = &w->sym[p.left], *r = &w->sym[p.right];
        if (l->id != p.lid || r->id != p.rid || l->next != p.right)
            continue; /* stale */
        l->id = p.result;
        r->id = -1;
        l->next = r->next;
        if (r->next >= 0)
            w->sym[r->next].prev = p.left;
        tok_bpe_try(b, w, l->prev, p.left);
        tok_bpe_try(b, w, p.left, l->next);
    }
    for (int32_t i = 0; i >= 0; i = w->sym[i].next)
        out[(*m)++] = w->sym[i].id;
}

/* tok_bpe_word - appends the ids of the word s (n > 0 bytes) to out: the
 * word's own id when the pre-tokenizer ignores merges and the word is a
 * token; else the merged runs between the bytes the vocabulary has no
 * token for, which are dropped (llama.cpp drops them too; such
 * vocabularies, e.g. StarCoder's, lack bytes that valid UTF-8 never holds,
 * and Falcon's some ASCII control bytes). */
static void tok_bpe_word(const st_tokenizer *t, tok_work *w, const uint8_t *s, size_t n,
                         int32_t *out, size_t *m)
{
    const tok_bpe *b = t->bpe;
    if (b->ignore_merges && n > 1) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            k += tok_byte_utf8(s[i], w->spelled + k);
        int32_t id = tok_lookup(t, w->spelled, k);
        if (id >= 0) {
            out[(*m)++] = id;
            return;
        }
    }
    size_t run = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && b->byte_tok[s[i]] >= 0)
            continue;
        if (i > run)
            tok_bpe_merge(t, w, s + run, i - run, out, m);
        run = i + 1;
    }
}

/* tok_bpe_split - cuts s[from..to) with pattern number stage into its
 * matches and the runs between them (bytes no pattern reads, or text the
 * pattern leaves out), each cut further by the next pattern; the pieces of
 * the last pattern are words, encoded to out. The pattern sees only
 * s[from..to): a lookahead stops at the piece's end. md has room for the
 * whole match. */
static st_err tok_bpe_split(const st_tokenizer *t, tok_work *w, pcre2_match_data *md,
                            size_t stage, const uint8_t *s, size_t from, size_t to, int32_t *out,
                            size_t *m)
{
    const tok_bpe *b = t->bpe;
    if (stage == b->n_re) {
        tok_bpe_word(t, w, s + from, to - from, out, m);
        return ST_OK;
    }
    size_t pos = from;
    while (pos < to) {
        int rc = pcre2_match(b->re[stage], s, to, pos, 0, md, NULL);
        size_t start = to, end = to;
        if (rc >= 0) {
            const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            start = ov[0];
            end = ov[1];
        } else if (rc != PCRE2_ERROR_NOMATCH) {
            PCRE2_UCHAR msg[TOK_MSG_BYTES];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return st_errorf(ST_ERANGE, "pre-tokenizer: PCRE2 failed at byte %zu: %s", pos,
                             (const char *)msg);
        }
        st_err e = ST_OK;
        if (start > pos)
            e = tok_bpe_split(t, w, md, stage + 1, s, pos, start, out, m);
        if (end == start && start < to)
            end = start + 1; /* no pattern matches empty; never stall if one did */
        if (e == ST_OK && end > start)
            e = tok_bpe_split(t, w, md, stage + 1, s, start, end, out, m);
        if (e != ST_OK)
            return e;
        pos = end;
    }
    return ST_OK;
}

st_err tok_bpe_encode(const st_tokenizer *t, const char *text, size_t len, int32_t *out, size_t *m)
{
    if (len == 0)
        return ST_OK;
    tok_work w = {.sym = malloc(len * sizeof *w.sym),
                  .heap = malloc(3 * len * sizeof *w.heap),
                  .spelled = malloc(TOK_MAX_CHAR * len)};
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    st_err e;
    if (!w.sym || !w.heap || !w.spelled || !md)
        e = st_errorf(ST_ENOMEM, "st_tok_encode: out of memory for %zu bytes", len);
    else
        e = tok_bpe_split(t, &w, md, 0, (const uint8_t *)text, 0, len, out, m);
    pcre2_match_data_free(md);
    free(w.sym);
    free(w.heap);
    free(w.spelled);
    return e;
}
