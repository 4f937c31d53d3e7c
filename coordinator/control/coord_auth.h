/* coord_auth.h - who may ask the coordinator for what (api_auth.c,
 * docs/security.md): the identity of a control request's sender, the
 * owners of requests, per-client caps and the security counters.
 *
 * State: coord_auth, embedded in st_coord (coord_impl.h) as c->auth. Only
 * the coordinator's main thread (its event loop, coord.c) touches it.
 * api_auth.c changes it, but for slot_who, which api.c records when a
 * request arrives and clears when it is answered (its answer is sealed
 * for that sender); other files ask through the coord_auth_* functions
 * below (api.c also reads sec for Status).
 *
 * Invariants: slot_who and slot_guard have one entry per control slot
 * (cfg.slots) from coord_auth_open to coord_auth_close (NULL outside);
 * owners[i] with req_id 0 is free (an entry is reused once its request is
 * gone from the scheduler); sec_cred[k] counts credential k of the
 * control envelope (st_env_frame.cred), so n_sec_cred is its number of
 * credentials + 1. */
#ifndef ST_COORD_AUTH_H
#define ST_COORD_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/wire/envelope.h"
#include "common/base/err.h"
#include "coordinator/coord.h"
#include "strata.pb-c.h"

/* Who sent a control request: its envelope sender and the credential
 * that verified it (api_auth.c, docs/security.md). */
typedef struct coord_who {
    uint64_t sender;
    uint64_t seq;  /* its sequence number: the reply is bound to (sender, seq) */
    uint32_t cred; /* st_env_frame.cred of the control envelope (c->seal.rep) */
    st_env_role role;
    bool bound; /* keyed, and bound to this coordinator (st_env_frame.bound) */
} coord_who;

/* A control slot's request held to the slot rules (not the cluster key's,
 * in a keyed cluster: api_auth.c), by sender who on connection pipe. */
typedef struct coord_guard {
    bool on;
    uint32_t pipe;
    coord_who who;
} coord_guard;

/* A request and the client that created it (api_auth.c). */
typedef struct coord_owner {
    uint64_t req_id; /* the scheduler's id; 0: free */
    uint64_t ext_id; /* the id clients see: random 64 bits (guessing: docs/security.md) */
    coord_who who;
    uint64_t logits_bytes; /* the most logits it may hold */
} coord_owner;

/* Requests refused for who sent them (SecurityCounters). */
typedef struct coord_sec {
    uint64_t role_refused, member_spoofed, joins_refused, stale_refused, foreign_refused,
        quota_refused, pipes_closed, slots_refused, unbound_refused;
} coord_sec;

/* The credentials, owners and per-client caps of a coordinator. */
typedef struct coord_auth {
    coord_who *slot_who;     /* [slots]: who sent the request a slot answers */
    coord_guard *slot_guard; /* [slots]: whether its request was held to the slot rules */
    uint32_t closed_pipe;    /* the connection closed last for its stuck answers */
    coord_owner *owners;     /* [n_owners] */
    size_t n_owners;
    uint32_t max_req_client, max_parks_client;
    uint64_t max_logits_client;
    uint8_t sess_key[16]; /* keys the per-credential session namespaces */
    coord_sec sec;
    coord_sec *sec_cred; /* [n_sec_cred]: each client key's own (what its Status shows) */
    size_t n_sec_cred;
} coord_auth;

/* coord_auth_open - loads --client-keys and --admin-key into seal.rep and
 * sizes the owner table (after seal.rep and the scheduler exist). */
st_err coord_auth_open(st_coord *c);
void coord_auth_close(st_coord *c);
/* coord_auth_allowed - whether who's role may send a request of body case
 * bc; if not, answers slot with ST_EAUTH naming both, counts it, false. */
bool coord_auth_allowed(st_coord *c, uint32_t slot, const coord_who *who, int bc);
/* coord_auth_request - the scheduler's id of the request clients know as
 * ext_id, if who may Poll or Cancel it (its creator, or an admin); else
 * answers slot with ST_ENOENT as for an unknown id (so ids are never
 * confirmed), counts a foreign one, false. */
bool coord_auth_request(st_coord *c, uint32_t slot, const coord_who *who, uint64_t ext_id,
                        uint64_t *req_id);
/* coord_auth_ext - the id clients know for the scheduler's req_id (0 if
 * none); coord_auth_int - the reverse (0 if none). */
uint64_t coord_auth_ext(const st_coord *c, uint64_t req_id);
uint64_t coord_auth_int(const st_coord *c, uint64_t ext_id);
/* coord_auth_admit - whether who may submit one more request of
 * max_tokens ids that may hold logits_bytes of logits; if not, answers
 * slot (ST_ERANGE over --max-new-tokens, else ST_EBUSY), counts. */
bool coord_auth_admit(st_coord *c, uint32_t slot, const coord_who *who, uint32_t max_tokens,
                      uint64_t logits_bytes);
/* coord_auth_quota - coord_auth_admit without a slot (the HTTP gateway's
 * admission, gateway.c): ST_OK, or the refusal's code with its message in
 * text[cap] (counted and logged). */
st_err coord_auth_quota(st_coord *c, const coord_who *who, uint32_t max_tokens,
                        uint64_t logits_bytes, char *text, size_t cap);
/* coord_auth_bind - records who as req_id's creator (after a submit) and
 * gives the request a random id for clients in *ext_id. */
st_err coord_auth_bind(st_coord *c, uint64_t req_id, const coord_who *who, uint64_t logits_bytes,
                       uint64_t *ext_id);
/* coord_auth_park_ok - whether who may park one more poll; counts if not. */
bool coord_auth_park_ok(st_coord *c, const coord_who *who);
/* coord_auth_session - the scheduler's session id for a client's
 * session_id: unchanged for the cluster key; keyed by the credential for
 * a client or admin key, and by the envelope sender in an open cluster
 * (0 stays 0: no session). */
uint64_t coord_auth_session(const st_coord *c, const coord_who *who, uint64_t session_id);
/* coord_auth_member - whether who may speak for member id (it joined it);
 * if not, answers slot with ST_EAUTH, counts, false. An unknown id passes
 * (the caller answers it as today). */
bool coord_auth_member(st_coord *c, uint32_t slot, const coord_who *who, uint64_t id);
/* coord_auth_slot_ok - whether slot's request (from who; trusted: the
 * cluster key, or any sender of an open cluster) may hold its slot: a
 * connection with 4 answers it does not read is closed, and an
 * untrusted request is dropped unanswered while fewer slots than the
 * members' reserve are idle (an answer to a client that does not read
 * would hold the slot). Counts; false after dropping the request. */
bool coord_auth_slot_ok(st_coord *c, uint32_t slot, const coord_who *who, bool trusted);
/* coord_auth_sweep - closes every connection of untrusted requests holding
 * AUTH_PIPE_MAX_STUCK stuck answers (called each loop, so the rule holds
 * when that connection sends nothing more). */
void coord_auth_sweep(st_coord *c);
/* coord_auth_bound - whether who's request may be taken as to its binding:
 * in a keyed cluster every request but a Hello must be bound to this
 * coordinator (a frame from before its start is not: docs/security.md,
 * "Replay"); if not, answers slot with ST_EAUTH, counts, false. */
bool coord_auth_bound(st_coord *c, uint32_t slot, const coord_who *who, int bc);
/* coord_auth_pb - the SecurityCounters of Status for who: a client key
 * sees only its own credential's counts (scope "credential"), every other
 * role the coordinator's (scope "coordinator"). */
void coord_auth_pb(const st_coord *c, const coord_who *who, Strata__SecurityCounters *out);

#endif
