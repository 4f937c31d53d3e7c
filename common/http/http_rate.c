/* http_rate.c - token buckets per identity in a bounded LRU table (see
 * http_rate.h). The table is an array of entries, a chained hash index
 * over them and a doubly linked recency list, all by index and all
 * allocated at open. */
#include "common/http/http_rate.h"

#include <pthread.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define RATE_NONE UINT32_MAX
#define RATE_NS_PER_S 1e9
#define RATE_S_PER_MIN 60.0
#define RATE_FNV_OFFSET 1469598103934665603ull /* FNV-1a, 64-bit */
#define RATE_FNV_PRIME 1099511628211ull

typedef struct rate_bucket {
    double level;   /* tokens now (may be negative: debt) */
    uint64_t at_ns; /* when level was computed */
} rate_bucket;

typedef struct rate_entry {
    char id[ST_HTTP_RATE_ID_MAX + 1];
    rate_bucket req, tok;
    uint32_t hnext;      /* hash chain */
    uint32_t prev, next; /* recency: head is the most recent */
} rate_entry;

struct st_http_rate {
    pthread_mutex_t mu;
    rate_entry *e;
    uint32_t cap, n;
    uint32_t *heads;  /* [n_heads] */
    uint32_t n_heads; /* a power of two >= cap */
    uint32_t lru_head, lru_tail;
};

st_err st_http_rate_open(uint32_t cap, st_http_rate **out)
{
    *out = NULL;
    if (cap < 1 || cap > ST_HTTP_RATE_MAX_TABLE)
        return st_errorf(ST_EINVAL, "rate table size %u not in 1..%u", cap, ST_HTTP_RATE_MAX_TABLE);
    st_http_rate *r = calloc(1, sizeof *r);
    if (r == NULL)
        return st_errorf(ST_ENOMEM, "rate table");
    r->cap = cap;
    r->n_heads = 1;
    while (r->n_heads < cap)
        r->n_heads *= 2;
    r->e = calloc(cap, sizeof *r->e);
    r->heads = malloc((size_t)r->n_heads * sizeof *r->heads);
    if (r->e == NULL || r->heads == NULL || pthread_mutex_init(&r->mu, NULL) != 0) {
        free(r->e);
        free(r->heads);
        free(r);
        return st_errorf(ST_ENOMEM, "rate table of %u entries", cap);
    }
    for (uint32_t i = 0; i < r->n_heads; i++)
        r->heads[i] = RATE_NONE;
    r->lru_head = r->lru_tail = RATE_NONE;
    *out = r;
    return ST_OK;
}

void st_http_rate_close(st_http_rate *r)
{
    if (r == NULL)
        return;
    pthread_mutex_destroy(&r->mu);
    free(r->e);
    free(r->heads);
    free(r);
}

/* rate_key - the identity as stored: itself, or a hash of it when long. */
static void rate_key(const char *id, char out[ST_HTTP_RATE_ID_MAX + 1])
{
    size_t n = strlen(id);
    if (n <= ST_HTTP_RATE_ID_MAX) {
        memcpy(out, id, n + 1);
        return;
    }
    uint8_t h[ST_HTTP_RATE_ID_MAX / 2 - 1];
    crypto_generichash(h, sizeof h, (const uint8_t *)id, n, NULL, 0);
    out[0] = '#';
    sodium_bin2hex(out + 1, ST_HTTP_RATE_ID_MAX, h, sizeof h);
}

static uint32_t rate_slot(const st_http_rate *r, const char *key)
{
    uint64_t h = RATE_FNV_OFFSET;
    for (const unsigned char *p = (const unsigned char *)key; *p; p++)
        h = (h ^ *p) * RATE_FNV_PRIME;
    return (uint32_t)(h & (r->n_heads - 1));
}

static void rate_unlink(st_http_rate *r, uint32_t i)
{
    rate_entry *x = &r->e[i];
    if (x->prev != RATE_NONE)
        r->e[x->prev].next = x->next;
    else
        r->lru_head = x->next;
    if (x->next != RATE_NONE)
        r->e[x->next].prev = x->prev;
    else
        r->lru_tail = x->prev;
}

static void rate_push_front(st_http_rate *r, uint32_t i)
{
    rate_entry *x = &r->e[i];
    x->prev = RATE_NONE;
    x->next = r->lru_head;
    if (r->lru_head != RATE_NONE)
        r->e[r->lru_head].prev = i;
    r->lru_head = i;
    if (r->lru_tail == RATE_NONE)
        r->lru_tail = i;
}

static void rate_unhash(st_http_rate *r, uint32_t i)
{
    uint32_t *p = &r->heads[rate_slot(r, r->e[i].id)];
    while (*p != i)
        p = &r->e[*p].hnext;
    *p = r->e[i].hnext;
}

/* rate_get - the entry of id (made, evicting the least recent one when
 * the table is full; its buckets start full), moved to the front. */
static rate_entry *rate_get(st_http_rate *r, const char *id, st_http_limits lim, uint64_t now)
{
    char key[ST_HTTP_RATE_ID_MAX + 1];
    rate_key(id, key);
    uint32_t s = rate_slot(r, key);
    for (uint32_t i = r->heads[s]; i != RATE_NONE; i = r->e[i].hnext)
        if (strcmp(r->e[i].id, key) == 0) {
            rate_unlink(r, i);
            rate_push_front(r, i);
            return &r->e[i];
        }
    uint32_t i;
    if (r->n < r->cap) {
        i = r->n++;
    } else {
        i = r->lru_tail;
        rate_unlink(r, i);
        rate_unhash(r, i);
    }
    rate_entry *x = &r->e[i];
    memcpy(x->id, key, sizeof x->id);
    x->req = (rate_bucket){.level = lim.rpm, .at_ns = now};
    x->tok = (rate_bucket){.level = lim.tpm, .at_ns = now};
    x->hnext = r->heads[s];
    r->heads[s] = i;
    rate_push_front(r, i);
    return x;
}

/* rate_refill - brings b to now under a per-minute limit. */
static void rate_refill(rate_bucket *b, uint32_t per_min, uint64_t now)
{
    if (now > b->at_ns) {
        b->level += (double)(now - b->at_ns) / RATE_NS_PER_S * per_min / RATE_S_PER_MIN;
        b->at_ns = now;
    }
    if (b->level > per_min)
        b->level = per_min;
}

/* rate_wait_s - whole seconds until b reaches 1 (0 when it has). */
static uint32_t rate_wait_s(const rate_bucket *b, uint32_t per_min)
{
    if (per_min == 0 || b->level >= 1)
        return 0;
    double s = (1 - b->level) * RATE_S_PER_MIN / per_min;
    uint32_t w = (uint32_t)s;
    return w < s ? w + 1 : (w ? w : 1);
}

uint32_t st_http_rate_admit(st_http_rate *r, const char *id, st_http_limits lim, uint64_t now_ns)
{
    if (lim.rpm == 0 && lim.tpm == 0)
        return 0;
    pthread_mutex_lock(&r->mu);
    rate_entry *x = rate_get(r, id, lim, now_ns);
    rate_refill(&x->req, lim.rpm, now_ns);
    rate_refill(&x->tok, lim.tpm, now_ns);
    uint32_t wr = rate_wait_s(&x->req, lim.rpm), wt = rate_wait_s(&x->tok, lim.tpm);
    uint32_t wait = wr > wt ? wr : wt;
    if (wait == 0 && lim.rpm)
        x->req.level -= 1;
    pthread_mutex_unlock(&r->mu);
    return wait;
}

void st_http_rate_spend(st_http_rate *r, const char *id, st_http_limits lim, uint32_t n,
                        uint64_t now_ns)
{
    if (lim.tpm == 0 || n == 0)
        return;
    pthread_mutex_lock(&r->mu);
    rate_entry *x = rate_get(r, id, lim, now_ns);
    rate_refill(&x->tok, lim.tpm, now_ns);
    x->tok.level -= n;
    pthread_mutex_unlock(&r->mu);
}

uint32_t st_http_rate_wait(st_http_rate *r, const char *id, st_http_limits lim, uint64_t now_ns)
{
    if (lim.rpm == 0 && lim.tpm == 0)
        return 0;
    char key[ST_HTTP_RATE_ID_MAX + 1];
    rate_key(id, key);
    uint32_t wait = 0;
    pthread_mutex_lock(&r->mu);
    uint32_t s = rate_slot(r, key);
    for (uint32_t i = r->heads[s]; i != RATE_NONE; i = r->e[i].hnext) {
        if (strcmp(r->e[i].id, key) != 0)
            continue;
        rate_entry *x = &r->e[i];
        rate_refill(&x->req, lim.rpm, now_ns);
        rate_refill(&x->tok, lim.tpm, now_ns);
        uint32_t wr = rate_wait_s(&x->req, lim.rpm), wt = rate_wait_s(&x->tok, lim.tpm);
        wait = wr > wt ? wr : wt;
        break;
    }
    pthread_mutex_unlock(&r->mu);
    return wait;
}

size_t st_http_rate_entries(st_http_rate *r)
{
    pthread_mutex_lock(&r->mu);
    size_t n = r->n;
    pthread_mutex_unlock(&r->mu);
    return n;
}
