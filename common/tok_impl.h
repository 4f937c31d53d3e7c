/* tok_impl.h - internals shared by the files of the tokenizer:
 * tokenizer.c (the vocabulary and its primitives), tok_load.c (GGUF and
 * llama2.c sources), tok_encode.c (the SPM encoder) and tok_decode.c
 * (decode and the streaming detokenizer). PRIVATE to the tokenizer
 * module: nothing outside common/tokenizer.c and common/tok_*.c includes
 * it; everyone else uses common/tokenizer.h. */
#ifndef ST_TOK_IMPL_H
#define ST_TOK_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/tokenizer.h"

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
 * (at most t->max_render); with dst NULL, returns a bound on it. */
size_t tok_render(const st_tokenizer *t, int32_t id, char *dst);

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
