/* chat_conv.c - the conversation of `strata chat` (see chat_conv.h). */
#include "cli/chat_conv.h"

#include <stdlib.h>
#include <string.h>

/* The first capacity of the message and id arrays, grown by doubling. */
#define CONV_MIN_CAP 16
/* Stands for a reply's content when rendering, to find the text after it
 * (a control character no template emits). */
#define CONV_MARK "\x01"

static st_err conv_grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return ST_OK;
    size_t c = *cap ? *cap : CONV_MIN_CAP;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (q == NULL)
        return st_errorf(ST_ENOMEM, "conversation of %zu entries", c);
    *p = q;
    *cap = c;
    return ST_OK;
}

static st_err conv_add_msg(chat_conv *c, const char *role, const char *content, size_t len)
{
    st_err e = conv_grow((void **)&c->msgs, &c->cap_msgs, c->n_msgs + 1, sizeof *c->msgs);
    if (e != ST_OK)
        return e;
    char *r = strdup(role);
    char *t = malloc(len + 1);
    if (r == NULL || t == NULL) {
        free(r);
        free(t);
        return st_errorf(ST_ENOMEM, "chat message of %zu bytes", len);
    }
    memcpy(t, content, len);
    t[len] = '\0';
    c->msgs[c->n_msgs++] = (st_chat_msg){.role = r, .content = t};
    return ST_OK;
}

static st_err conv_add_ids(chat_conv *c, const int32_t *ids, size_t n)
{
    st_err e = conv_grow((void **)&c->ids, &c->cap_ids, c->n_ids + n, sizeof *c->ids);
    if (e != ST_OK)
        return e;
    memcpy(c->ids + c->n_ids, ids, n * sizeof *ids);
    c->n_ids += n;
    return ST_OK;
}

/* conv_detok - the text of ids as a continuation (no space prefix
 * removed). */
static st_err conv_detok(const st_tokenizer *tok, const int32_t *ids, size_t n, char **out,
                         size_t *len)
{
    st_detok d;
    st_detok_init(&d, tok, false);
    size_t cap = st_detok_bound(tok);
    char *buf = malloc(cap);
    char *text = NULL;
    size_t tl = 0;
    st_err e = buf ? ST_OK : st_errorf(ST_ENOMEM, "detokenizer buffer");
    for (size_t i = 0; i <= n && e == ST_OK; i++) {
        size_t nw = 0;
        e = i < n ? st_detok_push(&d, ids[i], buf, cap, &nw) : st_detok_flush(&d, buf, cap, &nw);
        if (e == ST_OK) {
            char *t = realloc(text, tl + nw + 1);
            if (t == NULL) {
                e = st_errorf(ST_ENOMEM, "reply text");
                break;
            }
            memcpy(t + tl, buf, nw);
            tl += nw;
            t[tl] = '\0';
            text = t;
        }
    }
    free(buf);
    if (e != ST_OK) {
        free(text);
        return e;
    }
    *out = text ? text : strdup("");
    *len = tl;
    return *out ? ST_OK : st_errorf(ST_ENOMEM, "reply text");
}

st_err chat_conv_init(chat_conv *c, st_chat_tmpl tmpl, const st_tokenizer *tok, const char *system)
{
    memset(c, 0, sizeof *c);
    c->tmpl = tmpl;
    c->tok = tok;
    if (system != NULL)
        return conv_add_msg(c, "system", system, strlen(system));
    return ST_OK;
}

void chat_conv_free(chat_conv *c)
{
    for (size_t i = 0; i < c->n_msgs; i++) {
        free((char *)c->msgs[i].role);
        free((char *)c->msgs[i].content);
    }
    free(c->msgs);
    free(c->ids);
    memset(c, 0, sizeof *c);
}

/* conv_delta - when the last message is a reply already in c->ids: the
 * text that follows it in the rendering of msgs + the new user message
 * (the last of c->msgs) with the generation prompt, into *out (malloc'ed);
 * *out NULL when the template does not render the conversation as a
 * growing text. */
static st_err conv_delta(chat_conv *c, char **out, size_t *len)
{
    *out = NULL;
    size_t n_past = c->n_msgs - 1; /* the messages before the new one */
    st_chat_msg *reply = &c->msgs[n_past - 1];
    const char *content = reply->content;
    char *q = NULL, *m = NULL, *r = NULL;
    size_t lq, lm, lr;
    st_err e = st_chat_render(c->tmpl, c->msgs, n_past, false, &q, &lq);
    if (e == ST_OK) {
        reply->content = CONV_MARK;
        e = st_chat_render(c->tmpl, c->msgs, n_past, false, &m, &lm);
        reply->content = content;
    }
    if (e == ST_OK)
        e = st_chat_render(c->tmpl, c->msgs, c->n_msgs, true, &r, &lr);
    const char *mark = e == ST_OK ? strrchr(m, CONV_MARK[0]) : NULL;
    size_t lt = mark ? lm - (size_t)(mark + 1 - m) : 0; /* the turn end after the reply */
    /* the rendering without the new message ends with that turn end, and
     * the rendering with it extends the one without */
    if (mark != NULL && lq >= lt && memcmp(q + lq - lt, mark + 1, lt) == 0 && lr >= lq &&
        memcmp(r, q, lq) == 0) {
        char *d = malloc(lt + (lr - lq) + 1);
        if (d == NULL) {
            e = st_errorf(ST_ENOMEM, "chat turn text");
        } else {
            memcpy(d, mark + 1, lt);
            memcpy(d + lt, r + lq, lr - lq);
            d[lt + lr - lq] = '\0';
            *out = d;
            *len = lt + lr - lq;
        }
    }
    free(q);
    free(m);
    free(r);
    return e;
}

st_err chat_conv_user(chat_conv *c, const char *content)
{
    st_err e = conv_add_msg(c, "user", content, strlen(content));
    if (e != ST_OK)
        return e;
    char *d = NULL;
    size_t ld = 0;
    int32_t *ids = NULL;
    size_t n = 0;
    bool after_reply = c->n_ids > 0 && c->n_msgs >= 2 &&
                       strcmp(c->msgs[c->n_msgs - 2].role, "assistant") == 0;
    if (after_reply && (e = conv_delta(c, &d, &ld)))
        return e;
    c->appended = d != NULL;
    if (c->appended) {
        /* only the new part: the ids of earlier turns stay as they are */
        e = st_chat_encode(c->tok, d, ld, false, &ids, &n);
    } else {
        e = st_chat_render(c->tmpl, c->msgs, c->n_msgs, true, &d, &ld);
        if (e == ST_OK)
            e = st_chat_encode(c->tok, d, ld, true, &ids, &n);
        c->n_ids = 0;
    }
    if (e == ST_OK)
        e = conv_add_ids(c, ids, n);
    free(ids);
    free(d);
    return e;
}

st_err chat_conv_reply(chat_conv *c, const int32_t *ids, size_t n)
{
    if (n > 0 && (ids[n - 1] == st_tok_eos(c->tok) || ids[n - 1] == st_tok_eot(c->tok)))
        n--;
    char *text = NULL;
    size_t len = 0;
    st_err e = conv_detok(c->tok, ids, n, &text, &len);
    if (e == ST_OK)
        e = conv_add_ids(c, ids, n);
    if (e == ST_OK)
        e = conv_add_msg(c, "assistant", text, len);
    free(text);
    return e;
}

size_t chat_conv_common(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    size_t k = 0;
    while (k < na && k < nb && a[k] == b[k])
        k++;
    return k;
}
