/* chat.h - chat templates: a conversation (role, content messages) to the
 * prompt text a chat model was trained on, without a Jinja engine.
 *
 * As llama.cpp does (llama-chat.cpp), the Jinja source in a GGUF's
 * tokenizer.chat_template is not run: it is recognised by the markers it
 * contains (<|im_start|> for ChatML, [INST] for Llama 2 and Mistral,
 * <|start_header_id|> for Llama 3, ...) and one of a fixed set of formats is
 * rendered in C. The set, the detection order and every format follow
 * llama.cpp's built-in (non-Jinja) templates byte for byte; the tests hold
 * recorded outputs (tests/text/chat_cases.json). A template llama.cpp
 * would recognise as another family that Strata does not render (Phi 4,
 * Falcon 3, Command R, ...) is an error naming that family, never a guess.
 *
 * The prompt text is then tokenized with special-token parsing on and BOS
 * as the vocabulary asks (st_chat_encode), which is what llama-server does
 * with a rendered prompt; the formats never contain the BOS text at their
 * start, so there is no double BOS. docs/chat.md has the table. */
#ifndef ST_CHAT_H
#define ST_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/model/gguf.h"
#include "common/text/tokenizer.h"

/* The formats, named as llama.cpp names them (st_chat_tmpl_name). */
typedef enum st_chat_tmpl {
    ST_CHAT_CHATML = 0,        /* <|im_start|>role\n...<|im_end|>\n (Qwen) */
    ST_CHAT_LLAMA2,            /* [INST] ... [/INST], system as plain text */
    ST_CHAT_LLAMA2_SYS,        /* the same with <<SYS>>\n...\n<</SYS>>\n\n */
    ST_CHAT_LLAMA2_SYS_BOS,    /* ... and <s> before each later [INST] */
    ST_CHAT_LLAMA2_SYS_STRIP,  /* ... contents trimmed */
    ST_CHAT_MISTRAL_V1,        /* " [INST] ... [/INST]" */
    ST_CHAT_MISTRAL_V3,        /* "[INST] ...[/INST]", replies trimmed */
    ST_CHAT_MISTRAL_V3_TEKKEN, /* "[INST]...[/INST]" */
    ST_CHAT_MISTRAL_V7,        /* [SYSTEM_PROMPT] ... [/SYSTEM_PROMPT][INST] ...[/INST] */
    ST_CHAT_MISTRAL_V7_TEKKEN, /* the same without the spaces */
    ST_CHAT_PHI3,              /* <|role|>\n...<|end|>\n */
    ST_CHAT_ZEPHYR,            /* <|role|>\n...<|endoftext|>\n */
    ST_CHAT_GEMMA,             /* <start_of_turn>user|model\n...<end_of_turn>\n */
    ST_CHAT_LLAMA3,            /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    ST_CHAT_COUNT
} st_chat_tmpl;

/* One message: role ("system", "user", "assistant"; other roles are
 * passed through as the template does) and content, both NUL-terminated. */
typedef struct st_chat_msg {
    const char *role;
    const char *content;
} st_chat_msg;

/* st_chat_tmpl_name - the name of t ("chatml", "llama3", ...); "?" when t
 * is out of range. */
const char *st_chat_tmpl_name(st_chat_tmpl t);

/* st_chat_names - every name, comma-separated (static), for messages. */
const char *st_chat_names(void);

/* st_chat_detect - the format of template text s: s itself when it is one
 * of the names, else the format its markers identify (llama.cpp's order).
 * ST_ETYPE when nothing matches (the detail lists the names) or when s is
 * a family Strata does not render (the detail names it). */
st_err st_chat_detect(const char *s, size_t len, st_chat_tmpl *out);

/* st_chat_from_gguf - the format to use for the model g: override (a name
 * or a template text; NULL for none) wins over the file's
 * tokenizer.chat_template. A file without one gets the format of its
 * general.architecture when that has a single one (gemma, gemma2, gemma3:
 * gemma; phi3: phi3; qwen2, qwen3, qwen3moe: chatml; llama.cpp would take
 * chatml for all). ST_EMISSING (the detail lists the names and suggests
 * --chat-template) for any other file without a template and no override;
 * ST_ETYPE as st_chat_detect. */
st_err st_chat_from_gguf(const st_gguf *g, const char *override, st_chat_tmpl *out);

/* st_chat_render - the prompt text of msgs[0..n) in format t, followed by
 * the opening of an assistant turn when add_generation_prompt (Llama 2 and
 * Mistral formats have none: their user turn ends with [/INST]). *text is
 * malloc'ed and NUL-terminated, *len excludes the NUL. ST_EINVAL for a
 * NULL role or content or t out of range, ST_ENOMEM. */
st_err st_chat_render(st_chat_tmpl t, const st_chat_msg *msgs, size_t n, bool add_generation_prompt,
                      char **text, size_t *len);

/* st_chat_encode - tokenizes rendered prompt text the way llama-server
 * does: special-token text becomes its id and, when with_bos and the
 * vocabulary asks (st_tok_add_bos), BOS is prepended. Like llama.cpp it
 * does not look for BOS text in the prompt (none of the formats above
 * starts with it); with_bos false is for a continuation of a conversation
 * already in the KV cache. Errors as st_tok_encode_ex. */
st_err st_chat_encode(const st_tokenizer *tok, const char *text, size_t len, bool with_bos,
                      int32_t **ids, size_t *n);

#endif
