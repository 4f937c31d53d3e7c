/* tokenizer.h - the tokenizers of Strata: SentencePiece (GGUF model
 * "llama") and byte-level BPE (GGUF model "gpt2": GPT-2, Llama 3, Qwen2).
 *
 * A tokenizer is built from a vocabulary: per id a piece (bytes), a score
 * (f32) and a type (normal, unknown, control, user-defined, unused, byte),
 * plus the ids of BOS / EOS / EOT / UNK and two flags (add BOS, add a space
 * prefix); a BPE vocabulary adds its ranked merges and a pre-tokenizer
 * (tokenizer.ggml.pre). It comes from a GGUF file (tokenizer.ggml.*), from
 * llama2.c's tokenizer.bin, or from arrays (tests; SentencePiece only).
 *
 * Encoding first splits special-token text out (user-defined tokens always,
 * control tokens when asked), as llama.cpp does. SentencePiece then follows
 * llama.cpp's SPM tokenizer (merge the best-scoring adjacent pair, leftmost
 * on ties, then byte fallback). BPE splits the text with the
 * pre-tokenizer's regexes (PCRE2, UTF + UCP), maps each piece's bytes to
 * GPT-2's byte alphabet and merges the lowest-ranked adjacent pair,
 * leftmost on ties. Decoding maps pieces back to text; st_detok streams
 * text token by token without ever splitting a UTF-8 character. A
 * tokenizer is immutable after it is built and may be shared by threads. */
#ifndef ST_TOKENIZER_H
#define ST_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/model/gguf.h"

/* Token types, numbered as in GGUF's tokenizer.ggml.token_type. */
typedef enum st_tok_type {
    ST_TOK_NORMAL = 1,
    ST_TOK_UNKNOWN = 2,
    ST_TOK_CONTROL = 3,
    ST_TOK_USER_DEFINED = 4,
    ST_TOK_UNUSED = 5,
    ST_TOK_BYTE = 6,
} st_tok_type;

/* The longest piece accepted, in bytes (a longer one is an error). */
#define ST_TOK_MAX_PIECE 4096

/* The longest text st_tok_encode accepts, in bytes. */
#define ST_TOK_MAX_TEXT ((size_t)1 << 26)

typedef struct st_tokenizer st_tokenizer;

/* The algorithm of a vocabulary. */
typedef enum st_tok_model {
    ST_TOK_MODEL_SPM = 0, /* SentencePiece, GGUF "llama" */
    ST_TOK_MODEL_BPE = 1, /* byte-level BPE, GGUF "gpt2" */
} st_tok_model;

/* Special ids and flags of a vocabulary. */
typedef struct st_tok_config {
    int32_t bos_id;        /* default 1 */
    int32_t eos_id;        /* default 2 */
    int32_t unk_id;        /* default 0 */
    int32_t eot_id;        /* end of turn; default -1 (none) */
    bool add_bos;          /* default true: encoders should prepend BOS */
    bool add_space_prefix; /* default true: text starts with a "▁" */
} st_tok_config;

/* st_tok_config_default - bos 1, eos 2, unk 0, add_bos, add_space_prefix. */
st_tok_config st_tok_config_default(void);

/* st_tok_from_pieces - builds a tokenizer from n pieces (pieces[i] has
 * lens[i] bytes; lens NULL means NUL-terminated pieces), scores (NULL:
 * all 0) and types (st_tok_type values; NULL: all normal). Byte tokens must
 * be spelled "<0xXX>". The ids of cfg must lie in [0, n). When a piece
 * occurs twice, lookups find the later id (as llama.cpp does). Everything
 * is copied. ST_EINVAL for n == 0 or n > INT32_MAX, ST_ERANGE for an id, a
 * type or a piece length (> ST_TOK_MAX_PIECE) out of range, ST_EFORMAT for
 * a misspelled byte token or a NaN score. */
st_err st_tok_from_pieces(const char *const *pieces, const size_t *lens, const float *scores,
                          const int32_t *types, size_t n, const st_tok_config *cfg,
                          st_tokenizer **out);

/* st_tok_from_gguf - builds a tokenizer from g's tokenizer.ggml.* keys.
 * model "llama" (SentencePiece): tokens, scores, token_type (required, all
 * of one length, else ST_EMISSING / ST_ESHAPE), bos_token_id /
 * eos_token_id / unknown_token_id (defaults 1 / 2 / 0), add_bos_token
 * (default true), add_space_prefix (default true). model "gpt2" (byte-level
 * BPE): tokens, token_type and merges required (ST_EMISSING names a missing
 * one), scores optional; pre names the pre-tokenizer ("gpt2" when absent;
 * "gpt-2", "mpt", "starcoder", "refact", "command-r", "falcon",
 * "deepseek-coder", "llama-bpe",
 * "qwen2", "qwen35"; any other is ST_ETYPE, the detail naming it and the
 * known ones); add_bos_token defaults to true for "llama-bpe", else false;
 * no space prefix. Both: eot_token_id when present, else the id of a
 * control token spelled "<|eot_id|>", "<|im_end|>", "<|end|>" or
 * "<end_of_turn>" (Gemma), the first of these the vocabulary has, else -1.
 * When general.name contains "phi-3" or "phi3" (any case), special tokens
 * strip the whitespace to their right (see st_tok_encode_ex), as llama.cpp
 * does for Phi-3. Any other model is ST_ETYPE. The tokenizer copies what
 * it needs: g may be closed afterwards. */
st_err st_tok_from_gguf(const st_gguf *g, st_tokenizer **out);

/* st_tok_from_llama2c - reads llama2.c's tokenizer.bin (int32
 * max_token_length; per token f32 score, int32 len, len bytes; to the end
 * of the file). Pieces spell whitespace as ' ', which becomes "▁"; id 0 is
 * <unk>, 1 <s>, 2 </s> (control); "<0xXX>" pieces are byte tokens.
 * ST_EIO if unreadable, ST_ETRUNC / ST_EFORMAT for a damaged file (detail
 * names the token and offset). */
st_err st_tok_from_llama2c(const char *path, st_tokenizer **out);

/* st_tok_free - frees tok; NULL is a no-op. */
void st_tok_free(st_tokenizer *tok);

/* st_tok_n_vocab - the number of ids. */
size_t st_tok_n_vocab(const st_tokenizer *tok);
/* st_tok_bos / st_tok_eos / st_tok_unk - the special ids. */
int32_t st_tok_bos(const st_tokenizer *tok);
int32_t st_tok_eos(const st_tokenizer *tok);
int32_t st_tok_unk(const st_tokenizer *tok);
/* st_tok_eot - the end-of-turn id, -1 if the vocabulary has none. */
int32_t st_tok_eot(const st_tokenizer *tok);
/* st_tok_model_of - the algorithm of the vocabulary. */
st_tok_model st_tok_model_of(const st_tokenizer *tok);
/* st_tok_add_bos - whether the vocabulary asks for a BOS before a prompt. */
bool st_tok_add_bos(const st_tokenizer *tok);
/* st_tok_add_space_prefix - whether encoding prepends "▁". */
bool st_tok_add_space_prefix(const st_tokenizer *tok);

/* st_tok_piece - the stored piece of id (NUL-terminated, *len bytes; "▁"
 * not unescaped). ST_ERANGE (detail names the id) if id is outside the
 * vocabulary. */
st_err st_tok_piece(const st_tokenizer *tok, int32_t id, const char **piece, size_t *len);

/* st_tok_type_of - the type of id, ST_ERANGE outside the vocabulary. */
st_err st_tok_type_of(const st_tokenizer *tok, int32_t id, st_tok_type *type);

/* st_tok_score - the merge score of id, ST_ERANGE outside the vocabulary. */
st_err st_tok_score(const st_tokenizer *tok, int32_t id, float *score);

/* st_tok_find - the id of the piece of len bytes, or ST_ENOENT. */
st_err st_tok_find(const st_tokenizer *tok, const char *piece, size_t len, int32_t *id);

/* st_tok_encode - encodes len bytes of text (any bytes: invalid UTF-8 is
 * encoded byte by byte) into a malloc'ed array *ids of *n ids (caller
 * frees; never NULL on success, even for empty text). BOS is prepended when
 * add_bos. Empty text gives no piece at all (only BOS if asked). SPM: a
 * symbol not in the vocabulary becomes byte tokens, or one UNK when the
 * vocabulary lacks some byte token. BPE: a byte whose character the
 * vocabulary lacks (some vocabularies leave out bytes that valid UTF-8 never
 * holds, Falcon's some ASCII control bytes) is dropped, as llama.cpp drops
 * it; with every byte character present (GPT-2, Llama 3, Qwen2), nothing
 * is lost. O(n log n) in the text length (plus one pass over the text per
 * special token tried). ST_ERANGE if len exceeds ST_TOK_MAX_TEXT, ST_ENOMEM;
 * for BPE, ST_ERANGE also if PCRE2 gives up on the text (its match limits;
 * the detail has PCRE2's message). */
st_err st_tok_encode(const st_tokenizer *tok, const char *text, size_t len, bool add_bos,
                     int32_t **ids, size_t *n);

/* st_tok_encode_ex - st_tok_encode with special-token parsing: the text of
 * user-defined tokens always becomes their id (for either model, as
 * llama.cpp does); with parse_special, so does the text of control (and
 * unknown) tokens, longest first. st_tok_encode is st_tok_encode_ex with
 * parse_special false. For SentencePiece, a text fragment that follows a
 * special token gets its own space prefix (llama.cpp's rule). For a Phi-3
 * vocabulary (by general.name), the whitespace (C's isspace) right after a
 * special token split out of the text is dropped, except after <unk>, <s>
 * and <|endoftext|> (llama.cpp's RSTRIP attribute for Phi-3). For BPE,
 * invalid UTF-8 is kept byte for byte: each maximal run of bytes the
 * pre-tokenizer cannot read is a piece of its own and encodes to its
 * byte-level tokens (llama.cpp turns such bytes into U+FFFD instead), so
 * decode(encode(x)) == x for any bytes x without special-token text when
 * the vocabulary has every byte's character. */
st_err st_tok_encode_ex(const st_tokenizer *tok, const char *text, size_t len, bool add_bos,
                        bool parse_special, int32_t **ids, size_t *n);

/* st_tok_decode - the text of ids[0..n) seen as the start of a text:
 * "▁" becomes ' ', byte tokens their byte, control and unused tokens
 * nothing, UNK " ⁇ ", user-defined tokens their piece; and when the
 * vocabulary adds a space prefix, the first space of the text is removed,
 * so decode(encode(x)) == x for every byte string x. The output is the
 * exact bytes (no UTF-8 repair). *text is malloc'ed and NUL-terminated,
 * *len excludes the NUL. ST_ERANGE names the first id outside the
 * vocabulary (nothing is allocated then). */
st_err st_tok_decode(const st_tokenizer *tok, const int32_t *ids, size_t n, char **text,
                     size_t *len);

/* st_tok_decode_ex - st_tok_decode; with show_control, control and unused
 * tokens render as their piece instead of nothing. A BPE piece maps back
 * through GPT-2's byte alphabet to its bytes (user-defined pieces are
 * copied as they are); BPE vocabularies have no space prefix to strip. */
st_err st_tok_decode_ex(const st_tokenizer *tok, const int32_t *ids, size_t n, bool show_control,
                        char **text, size_t *len);

/* Streaming detokenizer: plain data, no allocation; keep one per stream.
 * It emits only complete UTF-8 characters: bytes of a character that is
 * not yet complete are held back; a sequence that turns out invalid comes
 * out as U+FFFD (one per maximal invalid subpart), as does an incomplete
 * character left at st_detok_flush. */
typedef struct st_detok {
    const st_tokenizer *tok;
    uint8_t pend[4];   /* bytes of the character being assembled */
    uint8_t n_pend;    /* how many are held */
    uint8_t need;      /* the character's full length (0: none pending) */
    bool strip_space;  /* drop the next leading space (text start) */
    bool show_control; /* render control tokens as their piece (init: false) */
} st_detok;

/* st_detok_init - starts a stream over tok. at_text_start: the ids begin a
 * text, so the space prefix is removed as st_tok_decode does; false for a
 * continuation (generated tokens after a prompt). */
void st_detok_init(st_detok *d, const st_tokenizer *tok, bool at_text_start);

/* st_detok_bound - the most bytes one st_detok_push or st_detok_flush may
 * write for tok: the capacity callers give them. */
size_t st_detok_bound(const st_tokenizer *tok);

/* st_detok_push - feeds id; writes the text now complete to out (cap
 * bytes, no NUL) and its length to *n_out (may be 0). ST_ERANGE for an id
 * outside the vocabulary (state unchanged), ST_EINVAL if cap is below
 * st_detok_bound. */
st_err st_detok_push(st_detok *d, int32_t id, char *out, size_t cap, size_t *n_out);

/* st_detok_flush - ends the stream: an incomplete character left pending
 * comes out as U+FFFD. ST_EINVAL if cap is below st_detok_bound. */
st_err st_detok_flush(st_detok *d, char *out, size_t cap, size_t *n_out);

#endif
