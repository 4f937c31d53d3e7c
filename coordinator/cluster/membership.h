/* membership.h - the workers the coordinator knows: join validation,
 * heartbeats, loss by timeout, leave. Each member keeps the Join it sent
 * (its capability) and its last Heartbeat as unpacked protobuf messages,
 * so Status can show them without copying field by field.
 *
 * The table is bounded (ST_MEMBERS_MAX): lost and departed members are
 * kept for a while so `strata status` can show them, then dropped, their
 * last counters folded into a retired sum so cluster totals never go
 * backwards. */
#ifndef ST_COORD_MEMBERSHIP_H
#define ST_COORD_MEMBERSHIP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/wire/wire.h"
#include "strata.pb-c.h"

#define ST_MEMBERS_MAX 256
#define ST_MEMBERS_PENDING_MAX 16 /* joined, no heartbeat yet: at most this many */
#define ST_MEMBERS_JOIN_RATE 32   /* joins admitted per ST_MEMBERS_JOIN_WINDOW_NS */
#define ST_MEMBERS_JOIN_WINDOW_NS 1000000000ull

typedef enum st_member_life {
    ST_MEMBER_ALIVE = 0,
    ST_MEMBER_LOST, /* no heartbeat within the timeout */
    ST_MEMBER_LEFT, /* sent Leave, or replaced by a rejoin from its address */
} st_member_life;

typedef struct st_member {
    uint64_t id;
    uint64_t order; /* join order (placement follows it) */
    st_member_life life;
    bool heard;              /* a heartbeat came after the join: it knows its id */
    uint64_t excluded_until; /* refused or failed a plan: not placed before this (ns) */
    uint32_t n_excluded;     /* exclusions so far (each doubles the next one's length) */
    char why[256];           /* reason of exclusion or loss */
    uint64_t joined_ns;
    uint64_t last_hb_ns;
    uint64_t gone_ns;  /* when it was lost or left */
    Strata__Msg *join; /* owned: the Join it sent (join->join->cap is valid) */
    Strata__Msg *hb;   /* owned: its last Heartbeat, or NULL */
    void *rpc;         /* the coordinator's REQ peer for it (opaque here) */
    /* placement (docs/placement.md) */
    bool draining;        /* `strata drain`: no new plan places it */
    bool drained;         /* a committed plan without it serves: it may stop */
    uint64_t drain_epoch; /* that plan's epoch */
    uint64_t rpc_sent_ns; /* when its last Commit was sent (0: none outstanding) */
    double rtt_ms;        /* control round trip (Commit -> Ack), EMA; 0: not measured */
    double meas_spb;      /* last measured time per byte of weights (s/B); 0: none */
    uint64_t meas_ns;     /* when meas_spb was taken */
    double one_spb;       /* the same from one-token steps only (--wire auto); 0: none */
    uint64_t one_ns;      /* when one_spb was taken */
    /* who joined it (issue 12): only that envelope sender, with that
     * credential, may heartbeat, report or leave for this id */
    uint64_t sender;
    uint32_t cred;
} st_member;

typedef struct st_members {
    st_member *v; /* [ST_MEMBERS_MAX] */
    size_t n;
    uint64_t next_id; /* ids are (incarnation base) + counter */
    uint64_t next_order;
    Strata__Counters retired; /* counters of members dropped from the table */
    uint64_t window_ns;       /* start of the current join-rate window */
    uint32_t window_joins;    /* joins admitted in it */
} st_members;

/* st_join_protocol - the protocol a Join's sender and this coordinator
 * agree on (common/base/version.h's rule) into *agreed; ST_EVERSION naming
 * both versions ("protocol N; coordinator speaks 1", and both builds when
 * the Join names its own), ST_EINVAL for a build line longer than
 * ST_VERSION_LINE_MAX. */
st_err st_join_protocol(const Strata__Join *j, uint32_t *agreed);

/* st_member_url_ok - an address the coordinator, the workers' probers and
 * their weight fetches may be told to dial: a tcp:// URL of 1..255 bytes. */
bool st_member_url_ok(const char *s);

/* st_join_validate - checks a Join against docs/cluster.md: protocol
 * version (st_join_protocol), capability
 * present, cores and threads 1..4096, memory budget 1 MiB..1 PiB, name at
 * most 255 bytes, data and control addresses (and the chunk server's, when
 * it names one) of 1..255 bytes with a
 * tcp:// scheme (the only transport dialed), speeds finite and positive with a
 * dtype name, throttle 0 or finite and positive, model id of 32 bytes
 * equal to model_id, and, when it lists wire dtypes, one of them `wire`
 * (under ST_WIRE_AUTO: at least one version-1 dtype) (ST_EINVAL or
 * ST_EPROTO naming the field). */
st_err st_join_validate(const Strata__Join *j, const uint8_t model_id[32], st_wire_dtype wire);

/* st_members_init - an empty table whose ids count up from id_base. */
st_err st_members_init(st_members *ms, uint64_t id_base);

/* st_members_fini - frees every member's messages (not their rpc). */
void st_members_fini(st_members *ms);

/* st_members_add - adds a member for join (a validated Msg with a join
 * body, taken on success). A live member with the same control address is
 * marked LEFT first ("replaced"); its id is returned in *replaced (0 if
 * none) so the caller can close its peer and replan. ST_EBUSY when the
 * table is full of live members. */
st_err st_members_add(st_members *ms, Strata__Msg *join, uint64_t now_ns, st_member **out,
                      uint64_t *replaced);

/* st_members_admit - whether a Join (validated) from envelope sender
 * `sender` may be added at now_ns, before st_members_add: ST_EBUSY when
 * ST_MEMBERS_JOIN_RATE joins were admitted in the last window or
 * ST_MEMBERS_PENDING_MAX live members have not heartbeated yet (a join
 * flood cannot fill the table); ST_EAUTH when a live member that another
 * sender joined holds its control address and was heard from within
 * quiet_ns (a stranger cannot take a serving worker's place; a restarted
 * worker, silent since, can). Counts the join in the rate window when it
 * is admitted. */
st_err st_members_admit(st_members *ms, const Strata__Join *j, uint64_t sender, uint64_t now_ns,
                        uint64_t quiet_ns);

/* st_members_find - the member with id (any life), or NULL. */
st_member *st_members_find(st_members *ms, uint64_t id);

/* st_members_heartbeat - records hb (a Msg with a heartbeat body, taken on
 * success) for its worker and sets *first when it is the member's first
 * heartbeat; ST_ENOENT if the id is unknown or not alive (the worker must
 * join again), ST_EINVAL for more than ST_MEMBERS_MAX link reports (their
 * values are checked where they are used, coordinator/planner/links.h). */
st_err st_members_heartbeat(st_members *ms, Strata__Msg *hb, uint64_t now_ns, bool *first);

/* st_member_placeable - alive, heard from since its join (so a Prepare
 * cannot overtake the JoinReply), not excluded at now_ns, and not
 * draining or drained. */
bool st_member_placeable(const st_member *m, uint64_t now_ns);

/* st_member_exclude - keeps m out of plans for 15 s, doubling with each
 * exclusion up to 5 minutes (a refusal may be transient; one that is not
 * costs a failed Prepare now and then, never a stuck cluster). */
void st_member_exclude(st_member *m, const char *why, uint64_t now_ns);

/* st_members_mark - sets a member's life (LOST or LEFT) with a reason. */
void st_members_mark(st_member *m, st_member_life life, const char *why, uint64_t now_ns);

/* st_members_expire - marks LOST every live member silent for timeout_ns
 * and writes their ids to lost (up to cap); returns how many. */
size_t st_members_expire(st_members *ms, uint64_t now_ns, uint64_t timeout_ns, uint64_t *lost,
                         size_t cap);

/* st_members_pause - moves the last heartbeat of every live member later
 * by gap_ns, to now_ns at most: time the coordinator did not run is not
 * silence (coord.c). */
void st_members_pause(st_members *ms, uint64_t gap_ns, uint64_t now_ns);

/* st_members_gc - drops members gone for longer than keep_ns (their rpc
 * must already be closed by the caller), folding their counters into
 * retired. */
void st_members_gc(st_members *ms, uint64_t now_ns, uint64_t keep_ns);

/* st_members_counters - adds the counters of every member's last
 * heartbeat and the retired ones to *sum. */
void st_members_counters(const st_members *ms, Strata__Counters *sum);

/* st_member_speed - the member's speed for weight dtype (bytes/s, divided
 * by its throttle): the matching DtypeSpeed, else the mean of those it
 * announced, else 1e9. */
double st_member_speed(const st_member *m, const char *dtype);

/* st_member_measured - the member's measured time per byte (s/B) from its
 * last heartbeat, if that heartbeat serves `epoch` and reports every layer
 * of [first, last) with at least min_samples samples
 * (st_place_measure over token_bytes[n_layer], the bytes one token reads
 * per layer (st_minfo_layer_active_bytes), and head_bytes). From every
 * step's EMA, or with one_token from the one-token steps' EMA
 * (LayerLatency.one_token_ema_ms: a lone decode's time, not the load's). */
bool st_member_measured(const st_member *m, uint64_t epoch, uint32_t first, uint32_t last,
                        const uint64_t *token_bytes, uint32_t n_layer, uint64_t head_bytes,
                        uint32_t min_samples, bool one_token, double *spb);

/* st_member_rtt_sample - folds one control round trip of ms milliseconds
 * into m->rtt_ms (EMA, alpha 0.3; the first sample sets it). */
void st_member_rtt_sample(st_member *m, double ms);

#endif
