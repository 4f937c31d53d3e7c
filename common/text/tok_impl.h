/* tok_impl.h - internals shared by the files of the tokenizer:
 * tokenizer.c (the vocabulary and its primitives), tok_load.c (GGUF and
 * llama2.c sources), tok_encode.c (special-token splitting and the SPM
 * encoder), tok_bpe.c (the byte-level BPE vocabulary extras and encoder)
 * and tok_decode.c (decode and the streaming detokenizer). PRIVATE to the tokenizer
 * module: nothing outside common/text/tokenizer.c and common/text/tok_*.c includes
 * it; everyone else uses common/text/tokenizer.h. */
#ifndef ST_TOK_IMPL_H
#define ST_TOK_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/text/tokenizer.h"

/* tok_bpe - what a byte-level BPE vocabulary adds (tok_bpe.c owns it). */
typedef struct tok_bpe tok_bpe;

struct st_tokenizer {
    st_tok_model model;
    tok_bpe *bpe;     /* ST_TOK_MODEL_BPE only */
    int32_t *special; /* control / user-defined / unknown ids, longest piece first */
    size_t n_special;
    size_t n_vocab;
    char *text;    /* all pieces, each NUL-terminated */
    size_t *off;   /* piece i starts at text + off[i] */
    uint32_t *len; /* its length in bytes */
    float *score;
    uint8_t *type; /* st_tok_type */
    int32_t byte_id[256];
    bool byte_complete; /* all 256 byte tokens exist */
    int32_t *ht;        /* hash slots: id or -1 */
    size_t ht_mask;
    size_t max_render; /* longest rendering of one id */
    /* Phi-3 (llama.cpp's rule, by general.name): the whitespace after a
     * special token split out of the text is dropped, but after <unk>,
     * <s> and <|endoftext|> (tok_encode.c). */
    bool rstrip_special;
    st_tok_config cfg;
};

/* tok_hash - FNV-1a of the n bytes at s: the hash of the piece table.
 * tok_lookup - the id whose piece is the n bytes at s, or -1. Both are
 * inline: the encoder looks up every candidate pair. */
static inline uint64_t tok_hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static inline int32_t tok_lookup(const st_tokenizer *t, const char *s, size_t n)
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

/* tok_parse_byte - the byte of a "<0xXX>" piece of n bytes, or -1. */
int tok_parse_byte(const char *s, size_t n);

/* tok_render - writes the text of id (valid) to dst and returns its length
 * (at most t->max_render); with dst NULL, returns a bound on it. Control
 * and unused tokens render as nothing unless show_control (then their
 * piece). */
size_t tok_render(const st_tokenizer *t, int32_t id, bool show_control, char *dst);

/* tok_is_special_type - whether encoding splits tokens of type ty out of
 * the text: control, user-defined and unknown (llama.cpp's set). */
static inline bool tok_is_special_type(uint8_t ty)
{
    return ty == ST_TOK_CONTROL || ty == ST_TOK_USER_DEFINED || ty == ST_TOK_UNKNOWN;
}

/* tok_finish - the steps every source ends with: the list of special
 * tokens (t->special, longest first). ST_ENOMEM. */
st_err tok_finish(st_tokenizer *t);

/* ---- byte-level BPE (tok_bpe.c) ----------------------------------------- */

/* tok_bpe_build - attaches the BPE extras to t (pieces and types already
 * in place): the pre-tokenizer named pre (NULL: "gpt2"), the n merges
 * ("left right", spelled in the byte-level alphabet) ranked by position.
 * ST_ETYPE names an unknown pre-tokenizer, ST_EFORMAT a merge without a
 * space, ST_ENOMEM, ST_EINTERNAL if PCRE2 rejects a pattern. */
st_err tok_bpe_build(st_tokenizer *t, const char *pre, size_t pre_len, const char *const *merges,
                     const size_t *merge_lens, size_t n);

/* tok_bpe_free - frees b; NULL is a no-op. */
void tok_bpe_free(tok_bpe *b);

/* tok_bpe_encode - appends the ids of len bytes of plain text (no special
 * tokens in it) to out[*m..]; out has room for len more ids. ST_ENOMEM. */
st_err tok_bpe_encode(const st_tokenizer *t, const char *text, size_t len, int32_t *out, size_t *m);

/* tok_bpe_render - the bytes of the byte-level piece s (n bytes) into dst
 * (at most n bytes); characters outside the byte alphabet are copied. */
size_t tok_bpe_render(const char *s, size_t n, char *dst);

/* tok_escape - copies n bytes of src to dst with ' ' spelled "▁";
 * returns the bytes written (at most 3 * n). */
size_t tok_escape(const char *src, size_t n, char *dst);

/* tok_check_id - ST_OK if id is in the vocabulary, else ST_ERANGE naming
 * the id. */
st_err tok_check_id(const st_tokenizer *t, int32_t id);

/* tok_utf8_need - the length of a character starting with lead byte b,
 * or 0 if b cannot start one. */
static inline unsigned tok_utf8_need(uint8_t b)
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
static inline bool tok_utf8_cont_ok(uint8_t lead, unsigned idx, uint8_t b)
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

#endif
