/* sessions.c - bounded session -> KV slot map with LRU eviction (see
 * sessions.h).
 *
 * Design. A worker keeps the KV cache of every live session for its
 * layers. The number of caches is bounded by the plan (INV-6), so the map
 * is a fixed array of slots; when a new session arrives and all slots are
 * taken, the least recently used session loses its cache (the scheduler
 * re-prefills it from its history if it comes back: it gets an error for
 * a position > 0 on a session the worker does not know). The cache memory
 * of an evicted or ended session is reused as is (an ended session's
 * cache waits on its free slot), so steady-state operation allocates
 * nothing and never holds more than cap caches.
 *
 * The hash table has at least twice as many buckets as slots, holds slot
 * numbers (+1, 0 = empty), probes linearly and deletes by backward shift,
 * so no tombstones accumulate. Ids are mixed with the splitmix64 finaliser
 * before masking; session ids chosen by a client cannot make probing worse
 * than the table's load allows, since the table never holds more than cap
 * entries in 2 * cap buckets. */
#include "worker/data/sessions.h"

#include <stdlib.h>
#include <string.h>

static uint64_t ses_mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/* ses_bucket - the bucket holding id, or the empty bucket where it would go. */
static uint32_t ses_bucket(const st_sessions *s, uint64_t id)
{
    uint32_t b = (uint32_t)(ses_mix(id) & s->table_mask);
    while (s->table[b] != 0 && s->slots[s->table[b] - 1].id != id)
        b = (b + 1) & s->table_mask;
    return b;
}

static void ses_table_del(st_sessions *s, uint64_t id)
{
    uint32_t b = ses_bucket(s, id);
    if (s->table[b] == 0)
        return;
    s->table[b] = 0;
    /* backward shift: move later entries of the run into the hole when
     * their home bucket does not lie cyclically in (hole, entry] */
    uint32_t hole = b, j = b;
    for (;;) {
        j = (j + 1) & s->table_mask;
        if (s->table[j] == 0)
            return;
        uint32_t home = (uint32_t)(ses_mix(s->slots[s->table[j] - 1].id) & s->table_mask);
        bool stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!stays) {
            s->table[hole] = s->table[j];
            s->table[j] = 0;
            hole = j;
        }
    }
}

static void ses_unlink(st_sessions *s, uint32_t i)
{
    st_session *x = &s->slots[i];
    if (x->prev != ST_SESSION_NONE)
        s->slots[x->prev].next = x->next;
    else
        s->mru = x->next;
    if (x->next != ST_SESSION_NONE)
        s->slots[x->next].prev = x->prev;
    else
        s->lru = x->prev;
    x->prev = x->next = ST_SESSION_NONE;
}

static void ses_push_front(st_sessions *s, uint32_t i)
{
    st_session *x = &s->slots[i];
    x->prev = ST_SESSION_NONE;
    x->next = s->mru;
    if (s->mru != ST_SESSION_NONE)
        s->slots[s->mru].prev = i;
    s->mru = i;
    if (s->lru == ST_SESSION_NONE)
        s->lru = i;
}

static st_err ses_alloc(st_sessions *s, uint32_t cap)
{
    memset(s, 0, sizeof *s);
    if (cap < 1 || cap > ST_SESSIONS_MAX)
        return st_errorf(ST_EINVAL, "max_sessions %u is outside 1..%u", cap, ST_SESSIONS_MAX);
    uint32_t buckets = 2;
    while (buckets < 2 * cap)
        buckets *= 2;
    s->slots = calloc(cap, sizeof *s->slots);
    s->table = calloc(buckets, sizeof *s->table);
    s->free_slots = calloc(cap, sizeof *s->free_slots);
    if (s->slots == NULL || s->table == NULL || s->free_slots == NULL) {
        free(s->slots);
        free(s->table);
        free(s->free_slots);
        memset(s, 0, sizeof *s);
        return st_errorf(ST_ENOMEM, "session table of %u slots", cap);
    }
    s->cap = cap;
    s->table_mask = buckets - 1;
    s->mru = s->lru = ST_SESSION_NONE;
    for (uint32_t i = 0; i < cap; i++) {
        s->slots[i].prev = s->slots[i].next = ST_SESSION_NONE;
        s->free_slots[i] = cap - 1 - i; /* slot 0 on top */
    }
    s->n_free = cap;
    return ST_OK;
}

st_err st_sessions_init(st_sessions *s, uint32_t cap) { return ses_alloc(s, cap); }

void st_sessions_fini(st_sessions *s)
{
    if (s->slots != NULL)
        for (uint32_t i = 0; i < s->cap; i++)
            st_kv_free(s->slots[i].kv);
    free(s->slots);
    free(s->table);
    free(s->free_slots);
    memset(s, 0, sizeof *s);
    s->mru = s->lru = ST_SESSION_NONE;
}

st_session *st_sessions_find(st_sessions *s, uint64_t id)
{
    if (s->count == 0)
        return NULL;
    uint32_t b = ses_bucket(s, id);
    return s->table[b] != 0 ? &s->slots[s->table[b] - 1] : NULL;
}

st_err st_sessions_acquire(st_sessions *s, uint64_t id, uint64_t pin, st_session **out, bool *fresh)
{
    *out = NULL;
    *fresh = false;
    if (s->cap == 0)
        return st_errorf(ST_EINVAL, "session table is not initialised");
    st_session *x = st_sessions_find(s, id);
    uint32_t i;
    if (x != NULL) {
        i = (uint32_t)(x - s->slots);
        ses_unlink(s, i);
    } else {
        if (s->n_free > 0) {
            i = s->free_slots[--s->n_free];
            s->count++;
        } else {
            for (i = s->lru; i != ST_SESSION_NONE && s->slots[i].pin == pin; i = s->slots[i].prev) {
            }
            if (i == ST_SESSION_NONE)
                return st_errorf(ST_EBUSY, "all %u session slots are used by the current batch",
                                 s->cap);
            ses_table_del(s, s->slots[i].id);
            ses_unlink(s, i);
            s->evictions++;
        }
        x = &s->slots[i];
        x->id = id;
        x->used = true;
        s->table[ses_bucket(s, id)] = i + 1;
        *fresh = true;
    }
    x->pin = pin;
    ses_push_front(s, i);
    *out = x;
    return ST_OK;
}

bool st_sessions_end(st_sessions *s, uint64_t id)
{
    st_session *x = st_sessions_find(s, id);
    if (x == NULL)
        return false;
    uint32_t i = (uint32_t)(x - s->slots);
    ses_table_del(s, id);
    ses_unlink(s, i);
    st_kv *kv = x->kv; /* kept for the slot's next session */
    memset(x, 0, sizeof *x);
    x->kv = kv;
    x->prev = x->next = ST_SESSION_NONE;
    s->free_slots[s->n_free++] = i;
    s->count--;
    return true;
}

void st_sessions_clear(st_sessions *s)
{
    for (uint32_t i = 0; i < s->cap; i++) {
        st_kv_free(s->slots[i].kv);
        memset(&s->slots[i], 0, sizeof s->slots[i]);
        s->slots[i].prev = s->slots[i].next = ST_SESSION_NONE;
        s->free_slots[i] = s->cap - 1 - i;
    }
    s->n_free = s->cap;
    if (s->table != NULL)
        memset(s->table, 0, ((size_t)s->table_mask + 1) * sizeof *s->table);
    s->count = 0;
    s->mru = s->lru = ST_SESSION_NONE;
}

st_err st_sessions_resize(st_sessions *s, uint32_t cap)
{
    if (cap == s->cap)
        return ST_OK;
    st_sessions n;
    st_err e = ses_alloc(&n, cap);
    if (e != ST_OK)
        return e;
    /* walk from least to most recently used so that re-inserting at the
     * front rebuilds the same order; the oldest that do not fit go */
    uint32_t skip = s->count > cap ? s->count - cap : 0;
    uint32_t k = 0;
    for (uint32_t i = s->lru; i != ST_SESSION_NONE; i = s->slots[i].prev) {
        st_session *x = &s->slots[i];
        if (k++ < skip) {
            st_kv_free(x->kv);
            x->kv = NULL;
            continue;
        }
        uint32_t j = n.free_slots[--n.n_free];
        n.count++;
        n.slots[j].id = x->id;
        n.slots[j].kv = x->kv;
        n.slots[j].pin = x->pin;
        n.slots[j].used = true;
        n.table[ses_bucket(&n, x->id)] = j + 1;
        ses_push_front(&n, j);
        x->kv = NULL;
    }
    n.evictions = s->evictions + skip;
    for (uint32_t i = 0; i < s->cap; i++)
        if (!s->slots[i].used) { /* caches kept on free slots */
            st_kv_free(s->slots[i].kv);
            s->slots[i].kv = NULL;
        }
    free(s->slots);
    free(s->table);
    free(s->free_slots);
    *s = n;
    return ST_OK;
}

uint32_t st_sessions_count(const st_sessions *s) { return s->count; }

uint32_t st_sessions_kv_count(const st_sessions *s)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->cap; i++)
        n += s->slots[i].kv != NULL;
    return n;
}
