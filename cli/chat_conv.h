/* chat_conv.h - a conversation of `strata chat` as messages and as the
 * token ids of its prompt, so that a new turn feeds only its own ids.
 *
 * The ids are the first turn's prompt, then per turn the ids the model
 * generated (as sampled, a final EOS or EOT left out) and the ids of the
 * text that follows the reply in the rendered conversation: the turn end
 * (e.g. "<|eot_id|>", "<|im_end|>\n", "</s>"), the new user message and
 * the generation prompt. That text is the difference between the
 * template's rendering of the conversation with and without the new
 * message, as llama.cpp's llama-cli computes it, so the engine's KV cache
 * keeps every earlier id and prefills only the new turn. The reply stays
 * in the cache as it was generated: where the template would trim it
 * (Llama 3, Gemma), the cache holds the untrimmed ids, as with llama-cli.
 * If the template does not render the conversation as a growing text, the
 * whole rendering is tokenized afresh (BOS as the vocabulary asks) and the
 * engine keeps only the longest common prefix. */
#ifndef ST_CLI_CHAT_CONV_H
#define ST_CLI_CHAT_CONV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/text/chat.h"
#include "common/text/tokenizer.h"

typedef struct chat_conv {
    st_chat_tmpl tmpl;
    const st_tokenizer *tok;
    st_chat_msg *msgs; /* role and content strings are owned */
    size_t n_msgs, cap_msgs;
    int32_t *ids; /* the prompt of the next reply, replies included */
    size_t n_ids, cap_ids;
    bool appended; /* the last turn only appended to ids (no re-tokenizing) */
} chat_conv;

/* chat_conv_init - an empty conversation; system (NULL for none) becomes
 * its first message. */
st_err chat_conv_init(chat_conv *c, st_chat_tmpl tmpl, const st_tokenizer *tok, const char *system);

/* chat_conv_free - frees everything; safe on a zeroed struct. */
void chat_conv_free(chat_conv *c);

/* chat_conv_user - adds a user message and makes c->ids the prompt of the
 * next reply (the conversation rendered with the generation prompt). */
st_err chat_conv_user(chat_conv *c, const char *content);

/* chat_conv_reply - adds the n ids the model generated (the last one may
 * be EOS or EOT, which is left out: the turn end comes from the template). */
st_err chat_conv_reply(chat_conv *c, const int32_t *ids, size_t n);

/* chat_conv_common - the length of the common prefix of a[0..na) and
 * b[0..nb). */
size_t chat_conv_common(const int32_t *a, size_t na, const int32_t *b, size_t nb);

#endif
