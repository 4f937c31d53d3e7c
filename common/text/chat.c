/* chat.c - chat templates (see chat.h): recognition by markers and the
 * rendering of each format. */
#include "common/text/chat.h"

#include "common/model/arch.h"

#include <stdlib.h>
#include <string.h>

/* The first capacity of a rendered prompt, grown by doubling. */
#define CHAT_BUF_MIN 256

static const char *const chat_names[ST_CHAT_COUNT] = {
    [ST_CHAT_CHATML] = "chatml",
    [ST_CHAT_LLAMA2] = "llama2",
    [ST_CHAT_LLAMA2_SYS] = "llama2-sys",
    [ST_CHAT_LLAMA2_SYS_BOS] = "llama2-sys-bos",
    [ST_CHAT_LLAMA2_SYS_STRIP] = "llama2-sys-strip",
    [ST_CHAT_MISTRAL_V1] = "mistral-v1",
    [ST_CHAT_MISTRAL_V3] = "mistral-v3",
    [ST_CHAT_MISTRAL_V3_TEKKEN] = "mistral-v3-tekken",
    [ST_CHAT_MISTRAL_V7] = "mistral-v7",
    [ST_CHAT_MISTRAL_V7_TEKKEN] = "mistral-v7-tekken",
    [ST_CHAT_PHI3] = "phi3",
    [ST_CHAT_ZEPHYR] = "zephyr",
    [ST_CHAT_GEMMA] = "gemma",
    [ST_CHAT_LLAMA3] = "llama3",
};

static const char chat_name_list[] =
    "chatml, llama2, llama2-sys, llama2-sys-bos, llama2-sys-strip, mistral-v1, mistral-v3, "
    "mistral-v3-tekken, mistral-v7, mistral-v7-tekken, phi3, zephyr, gemma, llama3";

const char *st_chat_tmpl_name(st_chat_tmpl t)
{
    return (unsigned)t < ST_CHAT_COUNT ? chat_names[t] : "?";
}

const char *st_chat_names(void) { return chat_name_list; }

/* ---- recognition ---- */

/* A template being recognised: its text (not NUL-terminated). */
typedef struct chat_src {
    const char *s;
    size_t len;
} chat_src;

static bool chat_has(chat_src t, const char *needle)
{
    size_t n = strlen(needle);
    if (n > t.len)
        return false;
    for (size_t i = 0; i + n <= t.len; i++)
        if (memcmp(t.s + i, needle, n) == 0)
            return true;
    return false;
}

static st_err chat_unsupported(const char *family)
{
    return st_errorf(ST_ETYPE,
                     "the chat template looks like %s, which Strata does not render; "
                     "choose one with --chat-template NAME (%s)",
                     family, chat_name_list);
}

/* chat_detect_inst - the [INST] families (and text starting "mistral"). */
static st_chat_tmpl chat_detect_inst(chat_src t)
{
    if (chat_has(t, "[SYSTEM_PROMPT]"))
        return ST_CHAT_MISTRAL_V7;
    /* the official Mistral v1 template, then v3 and v3-tekken */
    if (chat_has(t, "' [INST] ' + system_message") || chat_has(t, "[AVAILABLE_TOOLS]")) {
        if (chat_has(t, " [INST]"))
            return ST_CHAT_MISTRAL_V1;
        if (chat_has(t, "\"[INST]\""))
            return ST_CHAT_MISTRAL_V3_TEKKEN;
        return ST_CHAT_MISTRAL_V3;
    }
    if (chat_has(t, "content.strip()"))
        return ST_CHAT_LLAMA2_SYS_STRIP;
    if (chat_has(t, "bos_token + '[INST]"))
        return ST_CHAT_LLAMA2_SYS_BOS;
    if (chat_has(t, "<<SYS>>"))
        return ST_CHAT_LLAMA2_SYS;
    return ST_CHAT_LLAMA2;
}

st_err st_chat_detect(const char *s, size_t len, st_chat_tmpl *out)
{
    if (s == NULL || out == NULL)
        return st_errorf(ST_EINVAL, "st_chat_detect: NULL argument");
    for (int i = 0; i < ST_CHAT_COUNT; i++)
        if (strlen(chat_names[i]) == len && memcmp(chat_names[i], s, len) == 0) {
            *out = (st_chat_tmpl)i;
            return ST_OK;
        }
    chat_src t = {s, len};
    /* llama.cpp's order: a template carrying the markers of two families
     * is the one tested first. The families Strata does not render are
     * tested too, so that they are named rather than misread. */
    if (chat_has(t, "<|im_start|>")) {
        if (chat_has(t, "<|im_sep|>"))
            return chat_unsupported("phi4");
        if (chat_has(t, "<end_of_utterance>"))
            return chat_unsupported("smolvlm");
        *out = ST_CHAT_CHATML;
        return ST_OK;
    }
    if ((len >= strlen("mistral") && memcmp(s, "mistral", strlen("mistral")) == 0) ||
        chat_has(t, "[INST]")) {
        *out = chat_detect_inst(t);
        return ST_OK;
    }
    if (chat_has(t, "<|assistant|>") && chat_has(t, "<|end|>")) {
        *out = ST_CHAT_PHI3;
        return ST_OK;
    }
    if (chat_has(t, "[gMASK]<sop>"))
        return chat_unsupported("chatglm4");
    if (chat_has(t, "<|assistant|>") && chat_has(t, "<|user|>"))
        return chat_unsupported(chat_has(t, "<|tool_declare|>") ? "exaone-moe"
                                : chat_has(t, "</s>")           ? "falcon3"
                                                                : "glmedge");
    if (chat_has(t, "<|{{ item['role'] }}|>") && chat_has(t, "<|begin_of_image|>"))
        return chat_unsupported("glmedge");
    if (chat_has(t, "<|user|>") && chat_has(t, "<|endoftext|>")) {
        *out = ST_CHAT_ZEPHYR;
        return ST_OK;
    }
    if (chat_has(t, "bos_token + message['role']"))
        return chat_unsupported("monarch");
    if (chat_has(t, "<start_of_turn>")) {
        *out = ST_CHAT_GEMMA;
        return ST_OK;
    }
    if (chat_has(t, "'\\n\\nAssistant: ' + eos_token"))
        return chat_unsupported("orion");
    if (chat_has(t, "GPT4 Correct "))
        return chat_unsupported("openchat");
    if (chat_has(t, "USER: ") && chat_has(t, "ASSISTANT: "))
        return chat_unsupported("vicuna");
    if (chat_has(t, "### Instruction:") && chat_has(t, "<|EOT|>"))
        return chat_unsupported("deepseek");
    if (chat_has(t, "<|START_OF_TURN_TOKEN|>") && chat_has(t, "<|USER_TOKEN|>"))
        return chat_unsupported("command-r");
    if (chat_has(t, "<|start_header_id|>") && chat_has(t, "<|end_header_id|>")) {
        *out = ST_CHAT_LLAMA3;
        return ST_OK;
    }
    return st_errorf(ST_ETYPE,
                     "the chat template is not one Strata recognises; known names: %s "
                     "(choose one with --chat-template NAME)",
                     chat_name_list);
}

st_err st_chat_from_gguf(const st_gguf *g, const char *override, st_chat_tmpl *out)
{
    if (override != NULL)
        return st_chat_detect(override, strlen(override), out);
    st_gguf_str s;
    if (g != NULL && st_gguf_get_str(g, st_arch_gkey_name(ST_AG_CHAT_TEMPLATE), &s) == ST_OK)
        return st_chat_detect(s.data, (size_t)s.len, out);
    /* no template: the architecture's format (common/model/arch.c's
     * chat_format: its chat models all use one; llama.cpp takes chatml for
     * any such file), or an error */
    const st_arch *a = NULL;
    if (g != NULL && st_arch_from_gguf(g, &a) == ST_OK && a->chat_format != NULL)
        return st_chat_detect(a->chat_format, strlen(a->chat_format), out);
    st_errclear();
    return st_errorf(ST_EMISSING,
                     "the model has no %s; choose a template with "
                     "--chat-template NAME (%s)",
                     st_arch_gkey_name(ST_AG_CHAT_TEMPLATE), chat_name_list);
}

/* ---- rendering ---- */

/* A growing text; the first failure sticks (err) and later appends do
 * nothing, so a renderer checks once at the end. */
typedef struct chat_buf {
    char *p;
    size_t len, cap;
    st_err err;
} chat_buf;

static void chat_putn(chat_buf *b, const char *s, size_t n)
{
    if (b->err != ST_OK)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : CHAT_BUF_MIN;
        while (cap < b->len + n + 1) {
            if (cap > SIZE_MAX / 2) {
                b->err = st_errorf(ST_EOVERFLOW, "chat prompt too long");
                return;
            }
            cap *= 2;
        }
        char *p = realloc(b->p, cap);
        if (p == NULL) {
            b->err = st_errorf(ST_ENOMEM, "chat prompt of %zu bytes", cap);
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void chat_put(chat_buf *b, const char *s) { chat_putn(b, s, strlen(s)); }

/* chat_is_space - C isspace in the "C" locale, as llama.cpp's trim. */
static bool chat_is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* chat_put_trim - s without leading and trailing whitespace. */
static void chat_put_trim(chat_buf *b, const char *s)
{
    size_t n = strlen(s), a = 0;
    while (a < n && chat_is_space(s[a]))
        a++;
    while (n > a && chat_is_space(s[n - 1]))
        n--;
    chat_putn(b, s + a, n - a);
}

static bool chat_role_is(const st_chat_msg *m, const char *role)
{
    return strcmp(m->role, role) == 0;
}

/* chat_llama2 - [INST] ... [/INST] with the variant's system and BOS
 * rules; there is no generation prompt (a user turn ends with [/INST]). */
static void chat_llama2(chat_buf *b, st_chat_tmpl t, const st_chat_msg *m, size_t n)
{
    bool sys = t != ST_CHAT_LLAMA2;
    bool strip = t == ST_CHAT_LLAMA2_SYS_STRIP;
    bool inside = true; /* the first [INST] has no BOS: the tokenizer adds it */
    chat_put(b, "[INST] ");
    for (size_t i = 0; i < n; i++) {
        if (!inside) {
            inside = true;
            chat_put(b, t == ST_CHAT_LLAMA2_SYS_BOS ? "<s>[INST] " : "[INST] ");
        }
        bool is_sys = chat_role_is(&m[i], "system");
        if (is_sys && sys)
            chat_put(b, "<<SYS>>\n");
        if (strip)
            chat_put_trim(b, m[i].content);
        else
            chat_put(b, m[i].content);
        if (is_sys) {
            chat_put(b, sys ? "\n<</SYS>>\n\n" : "\n");
        } else if (chat_role_is(&m[i], "user")) {
            chat_put(b, " [/INST]");
        } else {
            chat_put(b, "</s>");
            inside = false;
        }
    }
}

/* chat_mistral - v1, v3 and v3-tekken: the system text opens the first
 * [INST] block; a reply closes a block with </s>. */
static void chat_mistral(chat_buf *b, st_chat_tmpl t, const st_chat_msg *m, size_t n)
{
    const char *lead = t == ST_CHAT_MISTRAL_V1 ? " " : "";
    const char *trail = t == ST_CHAT_MISTRAL_V3_TEKKEN ? "" : " ";
    bool inside = false;
    for (size_t i = 0; i < n; i++) {
        if (!inside) {
            chat_put(b, lead);
            chat_put(b, "[INST]");
            chat_put(b, trail);
            inside = true;
        }
        if (chat_role_is(&m[i], "system")) {
            chat_put(b, m[i].content);
            chat_put(b, "\n\n");
        } else if (chat_role_is(&m[i], "user")) {
            chat_put(b, m[i].content);
            chat_put(b, lead);
            chat_put(b, "[/INST]");
        } else {
            chat_put(b, trail);
            if (t == ST_CHAT_MISTRAL_V3)
                chat_put_trim(b, m[i].content);
            else
                chat_put(b, m[i].content);
            chat_put(b, "</s>");
            inside = false;
        }
    }
}

/* chat_mistral_v7 - [SYSTEM_PROMPT] and [INST] blocks, replies end </s>. */
static void chat_mistral_v7(chat_buf *b, st_chat_tmpl t, const st_chat_msg *m, size_t n)
{
    const char *sp = t == ST_CHAT_MISTRAL_V7 ? " " : "";
    for (size_t i = 0; i < n; i++) {
        if (chat_role_is(&m[i], "system")) {
            chat_put(b, "[SYSTEM_PROMPT]");
            chat_put(b, sp);
            chat_put(b, m[i].content);
            chat_put(b, "[/SYSTEM_PROMPT]");
        } else if (chat_role_is(&m[i], "user")) {
            chat_put(b, "[INST]");
            chat_put(b, sp);
            chat_put(b, m[i].content);
            chat_put(b, "[/INST]");
        } else {
            chat_put(b, sp);
            chat_put(b, m[i].content);
            chat_put(b, "</s>");
        }
    }
}

/* chat_gemma - no system role: system text (trimmed) is prepended to the
 * next user turn; "assistant" is "model"; contents trimmed. */
static void chat_gemma(chat_buf *b, const st_chat_msg *m, size_t n, bool add_gen)
{
    chat_buf sys = {0};
    for (size_t i = 0; i < n; i++) {
        if (chat_role_is(&m[i], "system")) {
            chat_put_trim(&sys, m[i].content);
            continue;
        }
        bool model = chat_role_is(&m[i], "assistant") || chat_role_is(&m[i], "model");
        chat_put(b, "<start_of_turn>");
        chat_put(b, model ? "model" : m[i].role);
        chat_put(b, "\n");
        if (sys.len > 0 && !model) {
            chat_putn(b, sys.p, sys.len);
            chat_put(b, "\n\n");
            sys.len = 0;
        }
        chat_put_trim(b, m[i].content);
        chat_put(b, "<end_of_turn>\n");
    }
    if (sys.err != ST_OK && b->err == ST_OK)
        b->err = sys.err;
    free(sys.p);
    if (add_gen)
        chat_put(b, "<start_of_turn>model\n");
}

/* chat_tagged - the formats where every message is OPEN role MID content
 * CLOSE and the generation prompt is GEN (ChatML, Phi 3, Zephyr, Llama 3). */
static void chat_tagged(chat_buf *b, st_chat_tmpl t, const st_chat_msg *m, size_t n, bool add_gen)
{
    const char *open, *mid, *close, *gen;
    bool trim = false;
    switch (t) {
    case ST_CHAT_CHATML:
        open = "<|im_start|>", mid = "\n", close = "<|im_end|>\n", gen = "<|im_start|>assistant\n";
        break;
    case ST_CHAT_PHI3:
        open = "<|", mid = "|>\n", close = "<|end|>\n", gen = "<|assistant|>\n";
        break;
    case ST_CHAT_ZEPHYR:
        open = "<|", mid = "|>\n", close = "<|endoftext|>\n", gen = "<|assistant|>\n";
        break;
    default: /* ST_CHAT_LLAMA3 */
        open = "<|start_header_id|>", mid = "<|end_header_id|>\n\n", close = "<|eot_id|>";
        gen = "<|start_header_id|>assistant<|end_header_id|>\n\n";
        trim = true;
        break;
    }
    for (size_t i = 0; i < n; i++) {
        chat_put(b, open);
        chat_put(b, m[i].role);
        chat_put(b, mid);
        if (trim)
            chat_put_trim(b, m[i].content);
        else
            chat_put(b, m[i].content);
        chat_put(b, close);
    }
    if (add_gen)
        chat_put(b, gen);
}

st_err st_chat_render(st_chat_tmpl t, const st_chat_msg *msgs, size_t n, bool add_generation_prompt,
                      char **text, size_t *len)
{
    if ((unsigned)t >= ST_CHAT_COUNT || text == NULL || len == NULL || (n > 0 && msgs == NULL))
        return st_errorf(ST_EINVAL, "st_chat_render: bad argument");
    for (size_t i = 0; i < n; i++)
        if (msgs[i].role == NULL || msgs[i].content == NULL)
            return st_errorf(ST_EINVAL, "chat message %zu has no %s", i,
                             msgs[i].role == NULL ? "role" : "content");
    chat_buf b = {0};
    chat_putn(&b, "", 0); /* an empty conversation is an empty string, not NULL */
    switch (t) {
    case ST_CHAT_LLAMA2:
    case ST_CHAT_LLAMA2_SYS:
    case ST_CHAT_LLAMA2_SYS_BOS:
    case ST_CHAT_LLAMA2_SYS_STRIP:
        chat_llama2(&b, t, msgs, n);
        break;
    case ST_CHAT_MISTRAL_V1:
    case ST_CHAT_MISTRAL_V3:
    case ST_CHAT_MISTRAL_V3_TEKKEN:
        chat_mistral(&b, t, msgs, n);
        break;
    case ST_CHAT_MISTRAL_V7:
    case ST_CHAT_MISTRAL_V7_TEKKEN:
        chat_mistral_v7(&b, t, msgs, n);
        break;
    case ST_CHAT_GEMMA:
        chat_gemma(&b, msgs, n, add_generation_prompt);
        break;
    default:
        chat_tagged(&b, t, msgs, n, add_generation_prompt);
        break;
    }
    if (b.err != ST_OK) {
        free(b.p);
        return b.err;
    }
    *text = b.p;
    *len = b.len;
    return ST_OK;
}

st_err st_chat_encode(const st_tokenizer *tok, const char *text, size_t len, bool with_bos,
                      int32_t **ids, size_t *n)
{
    return st_tok_encode_ex(tok, text, len, with_bos && st_tok_add_bos(tok), true, ids, n);
}
