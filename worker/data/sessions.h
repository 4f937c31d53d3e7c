/* sessions.h - a worker's KV slots: session id -> KV cache of its layers.
 *
 * At most `cap` sessions hold a slot (Plan.max_sessions). A new session
 * takes a free slot, or the least recently used one whose pin differs from
 * the caller's current pin (so a batch never evicts a session it is about
 * to run); the evicted session's cache is handed over to the new one (the
 * caller resets it). Lookups go through an open-addressing hash table
 * (linear probing, backward-shift deletion), recency through a doubly
 * linked list, so find, acquire and end are O(1) apart from skipping
 * pinned slots at the LRU end. Caches are allocated by the caller (the
 * stage engine knows their shape) and freed here with st_kv_free, by
 * clear, resize and fini only: an ended session's cache stays on its free
 * slot for the next session (which must reset it), so serving allocates
 * nothing in steady state and at most `cap` caches ever exist (INV-6).
 *
 * Plain data, no lock: owned by the worker's data thread. */
#ifndef ST_WORKER_SESSIONS_H
#define ST_WORKER_SESSIONS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/base/err.h"
#include "worker/engine/kv.h"

#define ST_SESSIONS_MAX (1u << 20)
#define ST_SESSION_NONE UINT32_MAX

typedef struct st_session {
    uint64_t id;
    st_kv *kv;     /* NULL until the caller allocates it */
    uint64_t pin;  /* the caller's tick of the last acquire */
    uint32_t prev; /* toward the most recently used; ST_SESSION_NONE at the head */
    uint32_t next; /* toward the least recently used; ST_SESSION_NONE at the tail */
    bool used;
} st_session;

typedef struct st_sessions {
    uint32_t cap;         /* slots */
    uint32_t count;       /* slots in use */
    st_session *slots;    /* [cap] */
    uint32_t *table;      /* [table_mask + 1] slot index + 1; 0 = empty */
    uint32_t *free_slots; /* [cap] stack of unused slot indices */
    uint32_t n_free;
    uint32_t table_mask;
    uint32_t mru, lru;  /* list ends; ST_SESSION_NONE when empty */
    uint64_t evictions; /* sessions evicted for a new one */
} st_sessions;

/* st_sessions_init - an empty set of cap slots (1..ST_SESSIONS_MAX, else
 * ST_EINVAL; ST_ENOMEM). */
st_err st_sessions_init(st_sessions *s, uint32_t cap);

/* st_sessions_fini - frees every cache and the tables; a zeroed or
 * finished set is a no-op. */
void st_sessions_fini(st_sessions *s);

/* st_sessions_find - the slot of id, or NULL; does not change recency. */
st_session *st_sessions_find(st_sessions *s, uint64_t id);

/* st_sessions_acquire - the slot of id, made most recently used and given
 * pin. If id has no slot it gets a free one or the least recently used
 * slot whose pin is not `pin` (evicted: its id is forgotten, its cache kept
 * for the new session); *fresh is then true and the caller must reset or
 * allocate slot->kv. ST_EBUSY (nothing changed) when every slot is pinned
 * with `pin`. */
st_err st_sessions_acquire(st_sessions *s, uint64_t id, uint64_t pin, st_session **out,
                           bool *fresh);

/* st_sessions_end - frees id's slot (its cache stays on the slot for the
 * next session); false if id had none. */
bool st_sessions_end(st_sessions *s, uint64_t id);

/* st_sessions_clear - frees every cache and slot. */
void st_sessions_clear(st_sessions *s);

/* st_sessions_resize - changes the capacity to cap, keeping the most
 * recently used sessions that fit (the others' caches, and those kept on
 * free slots, are freed). On error (ST_EINVAL, ST_ENOMEM) the set is
 * unchanged. */
st_err st_sessions_resize(st_sessions *s, uint32_t cap);

/* st_sessions_count - slots in use. */
uint32_t st_sessions_count(const st_sessions *s);

/* st_sessions_kv_count - caches allocated (on used and on free slots). */
uint32_t st_sessions_kv_count(const st_sessions *s);

#endif
