/* tok_decode.c - from ids back to text: st_tok_decode and the streaming
 * detokenizer.
 *
 * Design. Decoding renders each id ("▁" -> ' ', byte token -> its byte,
 * a BPE piece -> its bytes through GPT-2's byte alphabet, control and
 * unused -> nothing unless asked, UNK -> " ⁇ ") and drops the one space the
 * prefix introduced at the start of a text. The streaming detokenizer renders
 * the same way but passes the bytes through a small UTF-8 assembler, so it
 * never emits half a character; invalid sequences become U+FFFD. */
#include "common/text/tok_impl.h"

#include <stdlib.h>
#include <string.h>

/* ---- decode ------------------------------------------------------------- */

st_err st_tok_decode(const st_tokenizer *tok, const int32_t *ids, size_t n, char **text,
                     size_t *len)
{
    return st_tok_decode_ex(tok, ids, n, false, text, len);
}

st_err st_tok_decode_ex(const st_tokenizer *tok, const int32_t *ids, size_t n, bool show_control,
                        char **text, size_t *len)
{
    if (tok == NULL || text == NULL || len == NULL || (ids == NULL && n > 0))
        return st_errorf(ST_EINVAL, "st_tok_decode: NULL argument");
    *text = NULL;
    *len = 0;
    size_t cap = 1;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (size_t)ids[i] >= tok->n_vocab)
            return st_errorf(ST_ERANGE,
                             "token id %d (position %zu) outside the vocabulary [0, %zu)", ids[i],
                             i, tok->n_vocab);
        cap += tok_render(tok, ids[i], show_control, NULL);
    }
    char *out = malloc(cap);
    if (out == NULL)
        return st_errorf(ST_ENOMEM, "st_tok_decode: out of memory for %zu bytes", cap);
    size_t k = 0;
    bool strip = tok->cfg.add_space_prefix;
    for (size_t i = 0; i < n; i++) {
        size_t r = tok_render(tok, ids[i], show_control, out + k);
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
    size_t r = tok_render(t, id, d->show_control, piece);
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
