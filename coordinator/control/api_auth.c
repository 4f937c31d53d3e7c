/* api_auth.c - who may ask the coordinator for what (issue 12,
 * docs/security.md).
 *
 * Three credentials reach the control socket. The cluster key (role
 * MEMBER) is held by the coordinator and its workers; frames made with it
 * may do anything, as before this file existed, so tools given the cluster
 * key keep working. Admin keys (--admin-key FILE) may do what an operator
 * does: generate, poll, cancel, status with every detail, plans, replan,
 * drain and the test hooks, but never speak as a worker. Client keys
 * (--client-keys FILE) may generate, poll and cancel their own requests
 * and read a status without the workers, links and plan. The envelope
 * tells which credential verified a frame (common/wire/envelope.h: the key id);
 * answers go back sealed with that same credential. Without any key the
 * cluster is open (loopback only, common/net/exposure.h) and every role check
 * passes, but the owner checks below still hold per envelope sender.
 *
 * Owners: every request is bound to who created it (envelope sender and
 * credential) and known to clients by a random 64-bit id (the scheduler's
 * own ids count up; they never leave the coordinator's control replies).
 * Poll and Cancel from anyone else are answered as for an unknown id, so
 * an id is never confirmed to a stranger. Admins may poll and cancel any
 * request. Sessions are namespaced per credential: a
 * client's (or admin's) session_id maps to a keyed 64-bit hash
 * (crypto_shorthash, SipHash-2-4) of (credential, session_id), in an open
 * cluster of (envelope sender, session_id), so two clients never share KV,
 * and PollReply.reused cannot tell one client about another's prompt; the
 * cluster key's session ids are taken as sent (members are trusted).
 *
 * Slots (finding 6): a request holds a control slot until its answer has
 * left, and a client that never reads its answers can hold one for the
 * reply timeout. So requests not made with the cluster key (in a keyed
 * cluster) may not take the last idle slots (a reserve for heartbeats and
 * worker messages: they are dropped unanswered, never answered into a
 * socket that may not drain), and a connection with AUTH_PIPE_MAX_STUCK
 * answers stuck for AUTH_STUCK_NS (it does not read them; a client using
 * one request at a time never has more than one) is closed, which frees
 * their slots: checked when it sends another request and each turn of the
 * coordinator's loop (coord_auth_sweep), so a connection that sends
 * nothing more is closed as surely as one that keeps sending.
 *
 * Per-client caps (a client is a client key; in an open cluster, an
 * envelope sender; the cluster key and admin keys have none): live requests
 * (--max-requests-per-client), the logits bytes its requests may hold
 * (--max-logits-per-client), parked long polls (a quarter of the parkable
 * slots), and per request, max_tokens (--max-new-tokens). Each refusal is an Error naming the cap,
 * counted in SecurityCounters. */
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/clock.h"
#include "common/base/log.h"
#include "common/wire/msg.h"
#include "coordinator/coord_impl.h"

#define AUTH "auth"
#define AUTH_OWNER_SLACK 2         /* owner table: this many times max_requests */
#define AUTH_REQ_SHARE 4           /* default per-client share of max_requests and parks */
#define AUTH_LOGITS_REQUESTS 2     /* default logits cap: this many requests at the limit */
#define AUTH_PIPE_MAX_STUCK 4      /* answers stuck in one client connection at most */
#define AUTH_STUCK_NS 250000000ull /* an answer leaving this long is stuck: not read */
#define AUTH_RESERVE_MIN 4         /* idle slots kept for members: at least this many, */
#define AUTH_RESERVE_DIV 8         /* ... or this fraction of the slots */
#define AUTH_SESS_IN_MAX 16        /* bytes hashed into a session id: id || owner */
#define AUTH_QUOTA_TEXT 240        /* a quota refusal's message */

/* auth_own - the counters of who's own credential when it is a client key
 * (what its Status shows), else NULL. */
static coord_sec *auth_own(const st_coord *c, const coord_who *who)
{
    return who->role == ST_ROLE_CLIENT && who->cred < c->auth.n_sec_cred
               ? &c->auth.sec_cred[who->cred]
               : NULL;
}

/* AUTH_COUNT - counts a refusal of who's request: coordinator-wide and in
 * its credential's own counters. */
#define AUTH_COUNT(c, who, field)                                                                  \
    do {                                                                                           \
        coord_sec *own_ = auth_own(c, who);                                                        \
        (c)->auth.sec.field++;                                                                     \
        if (own_ != NULL)                                                                          \
            own_->field++;                                                                         \
    } while (0)

static st_err auth_load(st_coord *c, const char *path, st_env_role role)
{
    uint8_t(*keys)[ST_KEY_BYTES];
    size_t n;
    st_err e = st_keyfile_read(path, ST_ENV_MAX_CREDS - c->seal.rep.n_creds, &keys, &n);
    if (e != ST_OK)
        return e;
    for (size_t i = 0; i < n && e == ST_OK; i++)
        e = st_env_accept(&c->seal.rep, keys[i], role);
    sodium_memzero(keys, n * sizeof *keys);
    free(keys);
    if (e == ST_OK)
        st_log(ST_LOG_INFO, AUTH, "%zu %s key(s) from %s", n, st_env_role_name(role), path);
    return e;
}

st_err coord_auth_open(st_coord *c)
{
    const st_coord_cfg *cfg = &c->cfg;
    st_err e = ST_OK;
    if ((cfg->client_keys_path || cfg->admin_key_path) && !c->seal.keyed)
        return st_errorf(ST_EINVAL, "--client-keys and --admin-key need --cluster-key");
    if (cfg->client_keys_path && (e = auth_load(c, cfg->client_keys_path, ST_ROLE_CLIENT)))
        return e;
    if (cfg->admin_key_path && (e = auth_load(c, cfg->admin_key_path, ST_ROLE_ADMIN)))
        return e;
    c->auth.n_sec_cred = c->seal.rep.n_creds + 1; /* index: st_env_frame.cred */
    if ((c->auth.sec_cred = calloc(c->auth.n_sec_cred, sizeof *c->auth.sec_cred)) == NULL)
        return st_errorf(ST_ENOMEM, "counters of %zu credentials", c->auth.n_sec_cred);
    randombytes_buf(c->auth.sess_key, sizeof c->auth.sess_key);
    c->auth.n_owners = (size_t)cfg->max_requests * AUTH_OWNER_SLACK;
    c->auth.slot_who = calloc(cfg->slots, sizeof *c->auth.slot_who);
    c->auth.slot_guard = calloc(cfg->slots, sizeof *c->auth.slot_guard);
    c->auth.owners = calloc(c->auth.n_owners, sizeof *c->auth.owners);
    if (c->auth.slot_who == NULL || c->auth.slot_guard == NULL || c->auth.owners == NULL)
        return st_errorf(ST_ENOMEM, "request owners");
    c->auth.max_req_client = cfg->max_requests_per_client ? cfg->max_requests_per_client
                                                          : cfg->max_requests / AUTH_REQ_SHARE;
    if (c->auth.max_req_client == 0)
        c->auth.max_req_client = 1;
    c->auth.max_parks_client = (uint32_t)(c->parks.max / AUTH_REQ_SHARE);
    if (c->auth.max_parks_client == 0)
        c->auth.max_parks_client = 1;
    c->auth.max_logits_client = cfg->max_logits_per_client
                                    ? cfg->max_logits_per_client
                                    : AUTH_LOGITS_REQUESTS * ST_SCHED_MAX_LOGITS_BYTES;
    return ST_OK;
}

void coord_auth_close(st_coord *c)
{
    free(c->auth.slot_who);
    free(c->auth.slot_guard);
    free(c->auth.owners);
    free(c->auth.sec_cred);
    c->auth.sec_cred = NULL;
    c->auth.n_sec_cred = 0;
    c->auth.slot_who = NULL;
    c->auth.slot_guard = NULL;
    c->auth.owners = NULL;
    sodium_memzero(c->auth.sess_key, sizeof c->auth.sess_key);
}

/* auth_role_may - the request kinds each role may send (docs/security.md). */
static bool auth_role_may(st_env_role role, int bc)
{
    if (role == ST_ROLE_OPEN || role == ST_ROLE_MEMBER)
        return true;
    switch (bc) {
    case STRATA__MSG__BODY_HELLO: /* changes nothing; binds what follows */
    case STRATA__MSG__BODY_GENERATE:
    case STRATA__MSG__BODY_POLL:
    case STRATA__MSG__BODY_CANCEL:
    case STRATA__MSG__BODY_STATUS_REQ: /* a client's leaves out workers, links and plan */
        return true;
    case STRATA__MSG__BODY_PLAN_REQ:
    case STRATA__MSG__BODY_PLAN_DRY_RUN:
    case STRATA__MSG__BODY_REPLAN:
    case STRATA__MSG__BODY_DRAIN:
    case STRATA__MSG__BODY_HOLD:
        return role == ST_ROLE_ADMIN;
    default: /* Join, Heartbeat, Leave, StaleReport and anything else: members only */
        return false;
    }
}

bool coord_auth_allowed(st_coord *c, uint32_t slot, const coord_who *who, int bc)
{
    if (auth_role_may(who->role, bc))
        return true;
    AUTH_COUNT(c, who, role_refused);
    Strata__Msg probe = STRATA__MSG__INIT;
    probe.body_case = (Strata__Msg__BodyCase)bc;
    char text[200];
    snprintf(text, sizeof text, "a %s key may not send %s (docs/security.md)",
             st_env_role_name(who->role), st_msg_case_name(&probe));
    st_log(ST_LOG_WARN, AUTH, "sender %llu: %s", (unsigned long long)who->sender, text);
    coord_api_reply_error(c, slot, ST_EAUTH, text);
    return false;
}

static bool auth_same(const coord_who *a, const coord_who *b)
{
    return a->sender == b->sender && a->cred == b->cred;
}

/* auth_same_client - the unit per-client caps count: a client key, else
 * an envelope sender. */
static bool auth_same_client(const coord_who *a, const coord_who *b)
{
    if (a->role == ST_ROLE_CLIENT || b->role == ST_ROLE_CLIENT)
        return a->cred == b->cred && a->role == b->role;
    return auth_same(a, b);
}

/* auth_find - the owner entry of the request clients know as ext_id, or
 * NULL. */
static const coord_owner *auth_find(const st_coord *c, uint64_t ext_id)
{
    for (size_t i = 0; i < c->auth.n_owners; i++)
        if (c->auth.owners[i].req_id != 0 && c->auth.owners[i].ext_id == ext_id)
            return &c->auth.owners[i];
    return NULL;
}

uint64_t coord_auth_int(const st_coord *c, uint64_t ext_id)
{
    const coord_owner *o = auth_find(c, ext_id);
    return o ? o->req_id : 0;
}

uint64_t coord_auth_ext(const st_coord *c, uint64_t req_id)
{
    for (size_t i = 0; i < c->auth.n_owners; i++)
        if (req_id != 0 && c->auth.owners[i].req_id == req_id)
            return c->auth.owners[i].ext_id;
    return 0;
}

/* auth_sweep - frees the entries of requests the scheduler forgot. */
static void auth_sweep(st_coord *c)
{
    st_req_view v;
    for (size_t i = 0; i < c->auth.n_owners; i++)
        if (c->auth.owners[i].req_id != 0 &&
            st_sched_view(c->sched, c->auth.owners[i].req_id, &v) != ST_OK)
            c->auth.owners[i].req_id = 0;
}

bool coord_auth_request(st_coord *c, uint32_t slot, const coord_who *who, uint64_t ext_id,
                        uint64_t *req_id)
{
    const coord_owner *o = auth_find(c, ext_id);
    if (o != NULL && (who->role == ST_ROLE_ADMIN || auth_same(&o->who, who))) {
        *req_id = o->req_id;
        return true;
    }
    if (o != NULL) {
        AUTH_COUNT(c, who, foreign_refused);
        st_log(ST_LOG_WARN, AUTH, "sender %llu (%s) asked for request %llu of another client",
               (unsigned long long)who->sender, st_env_role_name(who->role),
               (unsigned long long)ext_id);
    }
    char text[160];
    snprintf(text, sizeof text, "request %llu is unknown or expired", (unsigned long long)ext_id);
    coord_api_reply_error(c, slot, ST_ENOENT, text);
    return false;
}

st_err coord_auth_quota(st_coord *c, const coord_who *who, uint32_t max_tokens,
                        uint64_t logits_bytes, char *text, size_t cap)
{
    auth_sweep(c);
    bool capped = who->role == ST_ROLE_CLIENT || who->role == ST_ROLE_OPEN;
    uint32_t live = 0;
    uint64_t logits = logits_bytes;
    size_t free_slots = 0;
    for (size_t i = 0; i < c->auth.n_owners; i++) {
        const coord_owner *o = &c->auth.owners[i];
        if (o->req_id == 0) {
            free_slots++;
            continue;
        }
        if (!auth_same_client(&o->who, who))
            continue;
        st_req_view v;
        if (st_sched_view(c->sched, o->req_id, &v) == ST_OK && !v.done)
            live++;
        logits += o->logits_bytes; /* held until the request is forgotten */
    }
    text[0] = '\0';
    st_err code = ST_EBUSY;
    if (capped && c->cfg.max_new_tokens && max_tokens > c->cfg.max_new_tokens) {
        code = ST_ERANGE;
        snprintf(text, cap, "max_tokens %u exceeds %u (--max-new-tokens)", max_tokens,
                 c->cfg.max_new_tokens);
    } else if (capped && live >= c->auth.max_req_client)
        snprintf(text, cap,
                 "this client has %u live requests (the per-client "
                 "limit, --max-requests-per-client); try later",
                 live);
    else if (capped && logits > c->auth.max_logits_client)
        snprintf(text, cap,
                 "this client's requests would hold %llu bytes of "
                 "logits; at most %llu (--max-logits-per-client)",
                 (unsigned long long)logits, (unsigned long long)c->auth.max_logits_client);
    else if (free_slots == 0)
        snprintf(text, cap, "%zu requests are kept (the limit); try later", c->auth.n_owners);
    if (text[0] == '\0')
        return ST_OK;
    AUTH_COUNT(c, who, quota_refused);
    st_log(ST_LOG_WARN, AUTH, "sender %llu (%s): %s", (unsigned long long)who->sender,
           st_env_role_name(who->role), text);
    return code;
}

bool coord_auth_admit(st_coord *c, uint32_t slot, const coord_who *who, uint32_t max_tokens,
                      uint64_t logits_bytes)
{
    char text[AUTH_QUOTA_TEXT];
    st_err code = coord_auth_quota(c, who, max_tokens, logits_bytes, text, sizeof text);
    if (code == ST_OK)
        return true;
    coord_api_reply_error(c, slot, code, text);
    return false;
}

st_err coord_auth_bind(st_coord *c, uint64_t req_id, const coord_who *who, uint64_t logits_bytes,
                       uint64_t *ext_id)
{
    uint64_t ext;
    do /* nonzero and not in use: 64 random bits almost never need a second draw */
        randombytes_buf(&ext, sizeof ext);
    while (ext == 0 || auth_find(c, ext) != NULL);
    for (size_t i = 0; i < c->auth.n_owners; i++)
        if (c->auth.owners[i].req_id == 0) {
            c->auth.owners[i] = (coord_owner){.req_id = req_id,
                                              .ext_id = ext,
                                              .who = *who,
                                              .logits_bytes = logits_bytes};
            *ext_id = ext;
            return ST_OK;
        }
    return st_errorf(ST_EBUSY, "request owner table full (%zu)", c->auth.n_owners);
}

bool coord_auth_park_ok(st_coord *c, const coord_who *who)
{
    if (who->role == ST_ROLE_MEMBER || who->role == ST_ROLE_ADMIN)
        return true;
    uint32_t n = 0;
    for (size_t i = 0; i < c->parks.n; i++)
        n += auth_same_client(&c->parks.list[i].who, who);
    if (n < c->auth.max_parks_client)
        return true;
    AUTH_COUNT(c, who, quota_refused);
    return false;
}

uint64_t coord_auth_session(const st_coord *c, const coord_who *who, uint64_t session_id)
{
    bool open = who->role == ST_ROLE_OPEN;
    if (session_id == 0 || (who->cred == 0 && !open))
        return session_id;
    /* session_id || the credential (4 bytes), or in an open cluster ||
     * the envelope sender (8): the lengths keep the two namespaces apart */
    uint8_t in[AUTH_SESS_IN_MAX];
    size_t n = 0;
    for (int i = 0; i < 8; i++)
        in[n++] = (uint8_t)(session_id >> (8 * i));
    uint64_t owner = open ? who->sender : who->cred;
    for (int i = 0; i < (open ? 8 : 4); i++)
        in[n++] = (uint8_t)(owner >> (8 * i));
    uint8_t h[crypto_shorthash_BYTES];
    crypto_shorthash(h, in, n, c->auth.sess_key);
    uint64_t id = 0;
    for (int i = 7; i >= 0; i--)
        id = id << 8 | h[i];
    return id != 0 ? id : 1;
}

bool coord_auth_member(st_coord *c, uint32_t slot, const coord_who *who, uint64_t id)
{
    const st_member *m = st_members_find(&c->ms, id);
    if (m == NULL || (m->sender == who->sender && m->cred == who->cred))
        return true;
    c->auth.sec.member_spoofed++;
    char text[200];
    snprintf(text, sizeof text,
             "worker %llu was joined by another sender: only it may speak "
             "for it",
             (unsigned long long)id);
    st_log(ST_LOG_WARN, AUTH, "sender %llu: %s", (unsigned long long)who->sender, text);
    coord_api_reply_error(c, slot, ST_EAUTH, text);
    return false;
}

/* auth_pipe_closed - closes the connection of slot's guarded request when it
 * holds AUTH_PIPE_MAX_STUCK stuck answers; its slots are no longer guarded
 * (their answers fail), and its requests that arrive before the close took
 * effect are dropped: one connection is closed and counted once. */
static bool auth_pipe_closed(st_coord *c, uint32_t slot)
{
    const coord_guard *g = &c->auth.slot_guard[slot];
    if (!g->on)
        return false;
    if (g->pipe == c->auth.closed_pipe)
        return true; /* a request that came before the close took effect */
    if (st_net_pipe_stuck(c->net, slot, AUTH_STUCK_NS) < AUTH_PIPE_MAX_STUCK)
        return false;
    AUTH_COUNT(c, &g->who, pipes_closed);
    c->auth.closed_pipe = g->pipe;
    st_log(ST_LOG_WARN, AUTH,
           "sender %llu (%s): its connection does not read its answers "
           "(%d are stuck): closed",
           (unsigned long long)g->who.sender, st_env_role_name(g->who.role), AUTH_PIPE_MAX_STUCK);
    st_net_close_pipe(c->net, slot);
    for (uint32_t i = 0; i < st_net_n_slots(c->net); i++)
        if (c->auth.slot_guard[i].pipe == c->auth.closed_pipe)
            c->auth.slot_guard[i].on = false;
    return true;
}

void coord_auth_sweep(st_coord *c)
{
    if (c->auth.slot_guard == NULL)
        return;
    uint64_t now = st_now_ns();
    for (uint32_t i = 0; i < st_net_n_slots(c->net); i++) {
        uint64_t t = st_net_slot_sending_ns(c->net, i);
        if (t != 0 && now - t > AUTH_STUCK_NS)
            auth_pipe_closed(c, i);
    }
}

bool coord_auth_slot_ok(st_coord *c, uint32_t slot, const coord_who *who, bool trusted)
{
    coord_guard *g = &c->auth.slot_guard[slot];
    g->on = !trusted;
    g->pipe = st_net_slot_pipe(c->net, slot);
    g->who = *who;
    if (trusted)
        return true;
    uint32_t n = st_net_n_slots(c->net), reserve = n / AUTH_RESERVE_DIV;
    if (reserve < AUTH_RESERVE_MIN)
        reserve = AUTH_RESERVE_MIN;
    if (auth_pipe_closed(c, slot)) {
        /* dropped below with the connection's other requests */
    } else if (st_net_slots_idle(c->net) < reserve) {
        AUTH_COUNT(c, who, slots_refused);
    } else {
        return true;
    }
    memset(&c->auth.slot_who[slot], 0, sizeof c->auth.slot_who[slot]);
    st_net_drop(c->net, slot);
    return false;
}

bool coord_auth_bound(st_coord *c, uint32_t slot, const coord_who *who, int bc)
{
    if (!c->seal.keyed || who->bound || bc == STRATA__MSG__BODY_HELLO)
        return true;
    AUTH_COUNT(c, who, unbound_refused);
    Strata__Msg probe = STRATA__MSG__INIT;
    probe.body_case = (Strata__Msg__BodyCase)bc;
    char text[200];
    snprintf(text, sizeof text,
             "%s not bound to this coordinator: send a Hello first (a frame from before "
             "its start, replayed, is refused so; docs/security.md)",
             st_msg_case_name(&probe));
    st_log(ST_LOG_WARN, AUTH, "sender %llu (%s): %s", (unsigned long long)who->sender,
           st_env_role_name(who->role), text);
    coord_api_reply_error(c, slot, ST_EAUTH, text);
    return false;
}

void coord_auth_pb(const st_coord *c, const coord_who *who, Strata__SecurityCounters *out)
{
    static const coord_sec none;
    const coord_sec *own = auth_own(c, who);
    bool client = who->role == ST_ROLE_CLIENT;
    const coord_sec *s = client ? (own != NULL ? own : &none) : &c->auth.sec;
    strata__security_counters__init(out);
    out->role_refused = s->role_refused;
    out->member_spoofed = s->member_spoofed;
    out->joins_refused = s->joins_refused;
    out->stale_refused = s->stale_refused;
    out->foreign_refused = s->foreign_refused;
    out->quota_refused = s->quota_refused;
    out->pipes_closed = s->pipes_closed;
    out->slots_refused = s->slots_refused;
    out->unbound_refused = s->unbound_refused;
    out->role = (char *)st_env_role_name(who->role);
    out->scope = (char *)(client ? "credential" : "coordinator");
}
