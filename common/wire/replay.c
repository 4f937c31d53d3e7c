/* replay.c - the anti-replay table (replay.h).
 *
 * The rule (envelope.h): a keyed frame is taken once, if its number is
 * above the highest its (sender, credential) has had accepted (the window
 * slides up to it), or at most ST_ENV_REPLAY_WINDOW - 1 below that and
 * not yet accepted; a sender the table evicted raised the floor to its
 * highest number, and nothing at or below the floor a slot had when it
 * was taken is accepted through that slot.
 *
 * The table is two arrays of ST_ENV_MAX_PEERS: the slots, which every
 * frame scans (sender, credential, last use: kept compact), and beside
 * them each slot's window, the numbers accepted in (high -
 * ST_ENV_REPLAY_WINDOW, high]. A window has two forms that answer the
 * same question exactly:
 *   sparse - a sorted array of those numbers. Numbers are microseconds of
 *            the sender's clock and a window spans 16.4 ms, so a sender
 *            whose frames come one at a time (a client's requests, a long
 *            poll, a worker's heartbeats) keeps a few entries: the table
 *            costs tens of bytes per sender seen;
 *   dense  - a ring of ST_ENV_REPLAY_WINDOW bits (2 KiB), bit n %
 *            ST_ENV_REPLAY_WINDOW telling whether n was accepted; taken
 *            when the sparse array would outgrow it (a sender pipelining
 *            more than RP_SPARSE_MAX frames within one window).
 * A dense window that slides by a whole window (everything in it left)
 * becomes sparse again. So what the table holds follows its senders'
 * recent rates, never more than 2 KiB per slot (2 MiB full); an earlier
 * form gave every sender seen its 2 KiB bitmap, which a coordinator
 * serving one-shot clients kept growing to that bound.
 *
 * Nothing is recorded unless the whole check passes, and an allocation
 * that fails leaves the window as it was (ST_ENOMEM): no failure opens a
 * hole a replay could pass through. */
#include "common/wire/replay.h"

#include <assert.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define RP_WORD_BITS 64u
#define RP_WORDS (ST_ENV_REPLAY_WINDOW / RP_WORD_BITS)
static_assert(ST_ENV_REPLAY_WINDOW % RP_WORD_BITS == 0 && RP_WORDS > 0,
              "the replay window is whole bitmap words");
#define RP_SPARSE_MIN 4u       /* entries of a new sparse array */
#define RP_SPARSE_MAX RP_WORDS /* entries at most: the bitmap's bytes */
static_assert(RP_SPARSE_MIN <= RP_SPARSE_MAX, "a sparse array fits under the bitmap");

/* One sender's slot: what the scan per frame reads. */
typedef struct rp_slot {
    uint64_t sender;
    uint64_t used; /* tick of last use, 0 = free */
    uint32_t cred; /* the credential that verified its frames */
} rp_slot;

/* One slot's window (the forms: the top of this file). */
typedef struct rp_window {
    uint64_t high; /* the highest number accepted */
    uint64_t base; /* the floor when the slot was taken: nothing at or below it */
    uint64_t *v;   /* sparse: [n] ascending, room for cap; dense: [RP_WORDS] ring */
    uint32_t n, cap;
    bool dense;
} rp_window;

struct st_replay {
    rp_slot *slots;  /* [ST_ENV_MAX_PEERS] */
    rp_window *wins; /* [ST_ENV_MAX_PEERS], wins[i] is slots[i]'s */
    uint64_t tick;
    uint64_t floor; /* the highest number of a sender evicted */
};

st_err st_replay_open(st_replay **out)
{
    st_replay *r = calloc(1, sizeof *r);
    if (r != NULL) {
        r->slots = calloc(ST_ENV_MAX_PEERS, sizeof *r->slots);
        r->wins = calloc(ST_ENV_MAX_PEERS, sizeof *r->wins);
    }
    if (r == NULL || r->slots == NULL || r->wins == NULL) {
        st_replay_close(r);
        return st_errorf(ST_ENOMEM, "replay table");
    }
    *out = r;
    return ST_OK;
}

void st_replay_close(st_replay *r)
{
    if (r == NULL)
        return;
    if (r->wins != NULL)
        for (size_t i = 0; i < ST_ENV_MAX_PEERS; i++)
            free(r->wins[i].v);
    free(r->wins);
    free(r->slots);
    free(r);
}

/* rp_bit_mask - the bits of numbers [n, n + k) within their word of the
 * ring (k > 0, none past the word's end). */
static uint64_t rp_bit_mask(uint64_t n, uint64_t k)
{
    uint64_t off = n % RP_WORD_BITS;
    return (k == RP_WORD_BITS ? ~0ull : ((1ull << k) - 1)) << off;
}

/* rp_bit_word - the word of ring bits holding number n's bit. */
static uint64_t *rp_bit_word(uint64_t *bits, uint64_t n)
{
    return &bits[(n % ST_ENV_REPLAY_WINDOW) / RP_WORD_BITS];
}

/* rp_lower - the index of the first entry of w's sparse array not below n. */
static uint32_t rp_lower(const rp_window *w, uint64_t n)
{
    uint32_t lo = 0, hi = w->n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (w->v[mid] < n)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* rp_densify - w's sparse array becomes the ring bitmap, its numbers set. */
static st_err rp_densify(rp_window *w)
{
    uint64_t *bits = calloc(RP_WORDS, sizeof *bits);
    if (bits == NULL)
        return st_errorf(ST_ENOMEM, "replay window bitmap of a sender");
    for (uint32_t i = 0; i < w->n; i++)
        *rp_bit_word(bits, w->v[i]) |= rp_bit_mask(w->v[i], 1);
    free(w->v);
    w->v = bits;
    w->n = w->cap = 0;
    w->dense = true;
    return ST_OK;
}

/* rp_room - a sparse w has room for one more entry: its array grown, or
 * (at RP_SPARSE_MAX) w made dense. */
static st_err rp_room(rp_window *w)
{
    if (w->n < w->cap)
        return ST_OK;
    if (w->cap >= RP_SPARSE_MAX)
        return rp_densify(w);
    uint32_t cap = w->cap > 0 ? 2 * w->cap : RP_SPARSE_MIN;
    uint64_t *v = realloc(w->v, cap * sizeof *v);
    if (v == NULL)
        return st_errorf(ST_ENOMEM, "replay window of a sender");
    w->v = v;
    w->cap = cap;
    return ST_OK;
}

/* rp_restart - w holds seq alone (high = seq): a slot newly taken, or a
 * dense window slid by a whole window. Sparse again; the old array is
 * kept if sparse, the bitmap freed only once the new array is had. */
static st_err rp_restart(rp_window *w, uint64_t seq)
{
    if (w->dense) {
        uint64_t *v = malloc(RP_SPARSE_MIN * sizeof *v);
        if (v == NULL)
            return st_errorf(ST_ENOMEM, "replay window of a sender");
        free(w->v);
        w->v = v;
        w->cap = RP_SPARSE_MIN;
        w->dense = false;
    } else if (w->cap == 0) {
        st_err e = rp_room(w);
        if (e != ST_OK)
            return e;
    }
    w->v[0] = seq;
    w->n = 1;
    w->high = seq;
    return ST_OK;
}

/* rp_slide - w's window moves up to end at seq (> high), seq accepted:
 * the numbers (high, seq] enter it unseen, those it leaves are forgotten. */
static st_err rp_slide(rp_window *w, uint64_t seq)
{
    uint64_t left = seq - w->high;
    if (left >= ST_ENV_REPLAY_WINDOW) /* everything in the window leaves it */
        return rp_restart(w, seq);
    if (!w->dense) {
        uint32_t gone = 0; /* entries seq's window no longer holds: a prefix */
        while (gone < w->n && seq - w->v[gone] >= ST_ENV_REPLAY_WINDOW)
            gone++;
        if (gone == 0) {
            st_err e = rp_room(w);
            if (e != ST_OK)
                return e;
        }
        if (!w->dense) {
            memmove(w->v, w->v + gone, (w->n - gone) * sizeof *w->v);
            w->n -= gone;
            w->v[w->n++] = seq;
            w->high = seq;
            return ST_OK;
        }
    }
    for (uint64_t n = w->high + 1; left > 0;) {
        uint64_t room = RP_WORD_BITS - n % RP_WORD_BITS, k = left < room ? left : room;
        *rp_bit_word(w->v, n) &= ~rp_bit_mask(n, k);
        n += k;
        left -= k;
    }
    *rp_bit_word(w->v, seq) |= rp_bit_mask(seq, 1);
    w->high = seq;
    return ST_OK;
}

/* rp_within - seq, within w's window below its high, is recorded; why it
 * is refused (a literal) if it was accepted before; NULL otherwise. */
static st_err rp_within(rp_window *w, uint64_t seq, const char **why)
{
    *why = NULL;
    if (!w->dense) {
        uint32_t at = rp_lower(w, seq);
        if (at < w->n && w->v[at] == seq) {
            *why = "already accepted";
            return ST_OK;
        }
        st_err e = rp_room(w);
        if (e != ST_OK)
            return e;
        if (!w->dense) {
            memmove(w->v + at + 1, w->v + at, (w->n - at) * sizeof *w->v);
            w->v[at] = seq;
            w->n++;
            return ST_OK;
        }
    }
    uint64_t *word = rp_bit_word(w->v, seq);
    if (*word & rp_bit_mask(seq, 1))
        *why = "already accepted";
    else
        *word |= rp_bit_mask(seq, 1);
    return ST_OK;
}

st_err st_replay_check(st_replay *r, uint64_t sender, uint32_t cred, uint64_t seq)
{
    size_t at = ST_ENV_MAX_PEERS, oldest = 0;
    for (size_t i = 0; i < ST_ENV_MAX_PEERS; i++) {
        const rp_slot *p = &r->slots[i];
        if (p->used && p->sender == sender && p->cred == cred) {
            at = i;
            break;
        }
        if (p->used < r->slots[oldest].used)
            oldest = i;
    }
    const char *why = NULL;
    st_err e = ST_OK;
    if (at == ST_ENV_MAX_PEERS) {
        if (seq <= r->floor) { /* perhaps a sender evicted below: never replay it */
            why = "not above the floor of evicted senders";
        } else {
            /* a free slot (used 0) or the least recently seen */
            rp_slot *s = &r->slots[oldest];
            rp_window *w = &r->wins[oldest];
            uint64_t evicted = s->used ? w->high : 0;
            e = rp_restart(w, seq);
            if (e != ST_OK) /* the slot unchanged: its sender stays */
                return e;
            if (evicted > r->floor)
                r->floor = evicted;
            w->base = r->floor; /* its frames before an eviction are at or below */
            s->sender = sender;
            s->cred = cred;
            at = oldest;
        }
    } else {
        rp_window *w = &r->wins[at];
        if (seq > w->high)
            e = rp_slide(w, seq);
        else if (w->high - seq >= ST_ENV_REPLAY_WINDOW)
            why = "older than its sender's replay window";
        else if (seq <= w->base)
            why = "not above the floor of evicted senders";
        else
            e = rp_within(w, seq, &why);
        if (e != ST_OK)
            return e;
    }
    if (why != NULL)
        return st_errorf(ST_EAUTH, "replayed frame from sender %llu (seq %llu: %s)",
                         (unsigned long long)sender, (unsigned long long)seq, why);
    r->slots[at].used = ++r->tick;
    return ST_OK;
}

void st_replay_stats_get(const st_replay *r, st_replay_stats *s)
{
    memset(s, 0, sizeof *s);
    for (size_t i = 0; i < ST_ENV_MAX_PEERS; i++) {
        if (!r->slots[i].used)
            continue;
        const rp_window *w = &r->wins[i];
        s->senders++;
        s->dense += w->dense;
        s->bytes += (w->dense ? RP_WORDS : w->cap) * sizeof *w->v;
    }
}
