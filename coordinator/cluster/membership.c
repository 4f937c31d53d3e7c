/* membership.c - the member table (see membership.h).
 *
 * Validation comes first and is pure: a Join is checked field by field
 * before anything is stored, so a hostile or buggy worker gets an Error
 * naming the field and changes nothing (INV-3). Liveness is a timestamp
 * per member compared with the heartbeat timeout on every loop of the
 * coordinator; nothing here runs on its own. */
#include "coordinator/cluster/membership.h"

#include "common/base/hex.h"
#include "common/base/host.h"
#include "common/net/netaddr.h"
#include "common/base/version.h"
#include "coordinator/planner/placement.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* a worker's fetch has at most 2 * ST_FETCH_MAX_SOURCES sources (worker/fetch/fetch.h) */
#define MB_FETCH_SOURCES_MAX 16

#define MS_TRANSPORT ST_TCP_SCHEME /* the one scheme a worker may announce */
#define MS_URL_MAX 255

/* st_member_url_ok (membership.h): tcp:// only (a worker listens on
 * nothing else, daemon.c), of 1..MS_URL_MAX bytes. ipc:// and inproc://
 * would let a joiner make the coordinator, every prober and every fetching
 * worker dial local sockets of their hosts. */
bool st_member_url_ok(const char *s)
{
    if (s == NULL)
        return false;
    size_t n = strlen(s);
    return n > strlen(MS_TRANSPORT) && n <= MS_URL_MAX &&
           strncmp(s, MS_TRANSPORT, strlen(MS_TRANSPORT)) == 0;
}

st_err st_join_protocol(const Strata__Join *j, uint32_t *agreed)
{
    *agreed = 0;
    const char *line = j->cap != NULL ? j->cap->version : NULL;
    if (line != NULL && strlen(line) > ST_VERSION_LINE_MAX)
        return st_errorf(ST_EINVAL, "capability version has %zu bytes; at most %d", strlen(line),
                         ST_VERSION_LINE_MAX);
    st_proto_range peer = {.oldest = j->protocol_oldest, .version = j->protocol};
    return st_proto_negotiate(peer, line, "coordinator", agreed);
}

st_err st_join_validate(const Strata__Join *j, const uint8_t model_id[32], st_wire_dtype wire)
{
    uint32_t agreed;
    st_err e = st_join_protocol(j, &agreed);
    if (e != ST_OK)
        return e;
    const Strata__Capability *c = j->cap;
    if (c == NULL)
        return st_errorf(ST_EPROTO, "join without a capability");
    if (c->cores < 1 || c->cores > 4096)
        return st_errorf(ST_EINVAL, "capability cores = %u is not in 1..4096", c->cores);
    if (c->threads < 1 || c->threads > 4096)
        return st_errorf(ST_EINVAL, "capability threads = %u is not in 1..4096", c->threads);
    if (c->host_id.len != 0 && c->host_id.len != ST_HOST_ID_BYTES)
        return st_errorf(ST_EINVAL, "capability host_id has %zu bytes; 0 or %d", c->host_id.len,
                         ST_HOST_ID_BYTES);
    if (c->cpus != NULL && strlen(c->cpus) >= ST_HOST_CPUS_MAX)
        return st_errorf(ST_EINVAL, "capability cpus has %zu bytes; at most %d", strlen(c->cpus),
                         ST_HOST_CPUS_MAX - 1);
    if (c->memory_budget < (1ull << 20) || c->memory_budget > (1ull << 50))
        return st_errorf(ST_EINVAL, "capability memory_budget = %llu is not in 1 MiB..1 PiB",
                         (unsigned long long)c->memory_budget);
    if (c->name && strlen(c->name) > 255)
        return st_errorf(ST_EINVAL, "capability name has %zu bytes; at most 255", strlen(c->name));
    if (!st_member_url_ok(c->data_addr))
        return st_errorf(ST_EINVAL,
                         "capability data_addr '%.64s' is not a %s address of 1..%d "
                         "bytes (no other transport is dialed)",
                         c->data_addr ? c->data_addr : "", MS_TRANSPORT, MS_URL_MAX);
    if (!st_member_url_ok(c->ctl_addr))
        return st_errorf(ST_EINVAL,
                         "capability ctl_addr '%.64s' is not a %s address of 1..%d "
                         "bytes (no other transport is dialed)",
                         c->ctl_addr ? c->ctl_addr : "", MS_TRANSPORT, MS_URL_MAX);
    if (c->chunk_addr != NULL && c->chunk_addr[0] != '\0' && !st_member_url_ok(c->chunk_addr))
        return st_errorf(ST_EINVAL,
                         "capability chunk_addr '%.64s' is not a %s address of 1..%d "
                         "bytes (no other transport is dialed)",
                         c->chunk_addr, MS_TRANSPORT, MS_URL_MAX);
    for (size_t i = 0; i < c->n_speeds; i++) {
        const Strata__DtypeSpeed *sp = c->speeds[i];
        if (sp == NULL || sp->dtype == NULL || sp->dtype[0] == '\0' || strlen(sp->dtype) > 15)
            return st_errorf(ST_EINVAL, "capability speeds[%zu] has no dtype name", i);
        if (!isfinite(sp->bytes_per_s) || !(sp->bytes_per_s > 0))
            return st_errorf(ST_EINVAL,
                             "capability speeds[%zu] (%s) = %g bytes/s is not finite "
                             "and positive",
                             i, sp->dtype, sp->bytes_per_s);
    }
    if (c->throttle != 0 && (!isfinite(c->throttle) || !(c->throttle > 0)))
        return st_errorf(ST_EINVAL, "capability throttle = %g is not finite and positive",
                         c->throttle);
    if (c->model_id.len != 32)
        return st_errorf(ST_EINVAL, "capability model_id has %zu bytes; a model id has 32",
                         c->model_id.len);
    if (memcmp(c->model_id.data, model_id, 32) != 0) {
        char theirs[ST_HEX_SHORT_CAP], ours[ST_HEX_SHORT_CAP];
        st_hex_short(c->model_id.data, c->model_id.len, theirs);
        st_hex_short(model_id, 32, ours);
        return st_errorf(ST_EINVAL,
                         "model id %s.. differs from the coordinator's %s..: the "
                         "worker has another model file",
                         theirs, ours);
    }
    if (wire == ST_WIRE_AUTO) {
        /* each boundary gets a dtype its receiver lists (replan.c); none listed is f32 */
        if (st_wire_accept_mask(c->wire_dtypes, c->n_wire_dtypes, NULL) == 0)
            return st_errorf(ST_EINVAL, "the worker accepts no wire dtype this coordinator "
                                        "knows (" ST_WIRE_DTYPE_NAMES ")");
    } else if (c->n_wire_dtypes > 0) {
        bool ok = false;
        for (size_t i = 0; i < c->n_wire_dtypes && !ok; i++) {
            st_wire_dtype d;
            ok = c->wire_dtypes[i] && st_wire_dtype_from_name(c->wire_dtypes[i], &d) == ST_OK &&
                 d == wire;
        }
        if (!ok)
            return st_errorf(ST_EINVAL, "the worker does not accept the cluster's wire dtype %s",
                             st_wire_dtype_name(wire));
    }
    return ST_OK;
}

st_err st_members_init(st_members *ms, uint64_t id_base)
{
    memset(ms, 0, sizeof *ms);
    ms->v = calloc(ST_MEMBERS_MAX, sizeof *ms->v);
    if (ms->v == NULL)
        return st_errorf(ST_ENOMEM, "member table");
    ms->next_id = id_base;
    strata__counters__init(&ms->retired);
    return ST_OK;
}

void st_members_fini(st_members *ms)
{
    for (size_t i = 0; i < ms->n; i++) {
        strata__msg__free_unpacked(ms->v[i].join, NULL);
        if (ms->v[i].hb)
            strata__msg__free_unpacked(ms->v[i].hb, NULL);
    }
    free(ms->v);
    ms->v = NULL;
    ms->n = 0;
}

static void ms_counters_add(Strata__Counters *sum, const Strata__Counters *c)
{
    if (c == NULL)
        return;
    sum->refused_epoch += c->refused_epoch;
    sum->auth_failed += c->auth_failed;
    sum->f16_clamps += c->f16_clamps;
    sum->bad_packets += c->bad_packets;
    sum->steps += c->steps;
    sum->refused_control += c->refused_control;
    sum->refused_step += c->refused_step;
    sum->forged_results += c->forged_results;
    sum->reply_failures += c->reply_failures;
    sum->probe_refused += c->probe_refused;
    sum->zstd_packets_sent += c->zstd_packets_sent;
    sum->zstd_raw_bytes_sent += c->zstd_raw_bytes_sent;
    sum->zstd_wire_bytes_sent += c->zstd_wire_bytes_sent;
    sum->zstd_packets_received += c->zstd_packets_received;
    sum->conn_refused += c->conn_refused;
    sum->conn_evicted += c->conn_evicted;
    sum->conn_expired += c->conn_expired;
}

/* ms_drop - removes member i (its rpc must be closed by the caller). */
static void ms_drop(st_members *ms, size_t i)
{
    st_member *m = &ms->v[i];
    if (m->hb)
        ms_counters_add(&ms->retired, m->hb->heartbeat->counters);
    strata__msg__free_unpacked(m->join, NULL);
    if (m->hb)
        strata__msg__free_unpacked(m->hb, NULL);
    memmove(&ms->v[i], &ms->v[i + 1], (ms->n - i - 1) * sizeof *ms->v);
    ms->n--;
}

st_err st_members_add(st_members *ms, Strata__Msg *join, uint64_t now_ns, st_member **out,
                      uint64_t *replaced)
{
    *out = NULL;
    *replaced = 0;
    const char *ctl = join->join->cap->ctl_addr;
    for (size_t i = 0; i < ms->n; i++)
        if (ms->v[i].life == ST_MEMBER_ALIVE &&
            strcmp(ms->v[i].join->join->cap->ctl_addr, ctl) == 0) {
            st_members_mark(&ms->v[i], ST_MEMBER_LEFT, "replaced by a new join from its address",
                            now_ns);
            *replaced = ms->v[i].id;
        }
    if (ms->n == ST_MEMBERS_MAX) { /* make room: the member gone the longest, if any */
        size_t best = ms->n;
        for (size_t i = 0; i < ms->n; i++)
            if (ms->v[i].life != ST_MEMBER_ALIVE && ms->v[i].rpc == NULL &&
                (best == ms->n || ms->v[i].gone_ns < ms->v[best].gone_ns))
                best = i;
        if (best == ms->n)
            return st_errorf(ST_EBUSY, "the cluster has %d members (the limit)", ST_MEMBERS_MAX);
        ms_drop(ms, best);
    }
    st_member *m = &ms->v[ms->n++];
    memset(m, 0, sizeof *m);
    m->id = ++ms->next_id;
    m->order = ++ms->next_order;
    m->life = ST_MEMBER_ALIVE;
    m->joined_ns = m->last_hb_ns = now_ns;
    m->join = join;
    *out = m;
    return ST_OK;
}

st_err st_members_admit(st_members *ms, const Strata__Join *j, uint64_t sender, uint64_t now_ns,
                        uint64_t quiet_ns)
{
    size_t pending = 0;
    for (size_t i = 0; i < ms->n; i++) {
        const st_member *m = &ms->v[i];
        if (m->life != ST_MEMBER_ALIVE)
            continue;
        pending += !m->heard;
        if (m->sender != sender && strcmp(m->join->join->cap->ctl_addr, j->cap->ctl_addr) == 0 &&
            now_ns - m->last_hb_ns <= quiet_ns)
            return st_errorf(ST_EAUTH,
                             "control address %s belongs to live worker %llu, joined "
                             "by another sender and heard from %llu ms ago",
                             j->cap->ctl_addr, (unsigned long long)m->id,
                             (unsigned long long)((now_ns - m->last_hb_ns) / 1000000u));
    }
    if (pending >= ST_MEMBERS_PENDING_MAX)
        return st_errorf(ST_EBUSY,
                         "%zu workers joined and have not heartbeated yet (the limit); "
                         "join again later",
                         pending);
    if (now_ns - ms->window_ns >= ST_MEMBERS_JOIN_WINDOW_NS || ms->window_ns == 0) {
        ms->window_ns = now_ns;
        ms->window_joins = 0;
    }
    if (ms->window_joins >= ST_MEMBERS_JOIN_RATE)
        return st_errorf(ST_EBUSY, "more than %d joins within %llu ms; join again later",
                         ST_MEMBERS_JOIN_RATE,
                         (unsigned long long)(ST_MEMBERS_JOIN_WINDOW_NS / 1000000u));
    ms->window_joins++;
    return ST_OK;
}

st_member *st_members_find(st_members *ms, uint64_t id)
{
    for (size_t i = 0; i < ms->n; i++)
        if (ms->v[i].id == id)
            return &ms->v[i];
    return NULL;
}

st_err st_members_heartbeat(st_members *ms, Strata__Msg *hb, uint64_t now_ns, bool *first)
{
    uint64_t id = hb->heartbeat->worker_id;
    st_member *m = st_members_find(ms, id);
    if (m == NULL || m->life != ST_MEMBER_ALIVE)
        return st_errorf(ST_ENOENT, "worker %llu is not a member%s; join again",
                         (unsigned long long)id, m ? " any more" : "");
    if (hb->heartbeat->n_links > ST_MEMBERS_MAX) /* one per other member at most (INV-6) */
        return st_errorf(ST_EINVAL, "heartbeat of worker %llu: %zu links (at most %d)",
                         (unsigned long long)id, hb->heartbeat->n_links, ST_MEMBERS_MAX);
    const Strata__FetchProgress *fp = hb->heartbeat->fetch;
    if (fp != NULL && fp->n_source_stats > MB_FETCH_SOURCES_MAX) /* kept until the next one */
        return st_errorf(ST_EINVAL, "heartbeat of worker %llu: %zu fetch sources (at most %d)",
                         (unsigned long long)id, fp->n_source_stats, MB_FETCH_SOURCES_MAX);
    if (m->hb)
        strata__msg__free_unpacked(m->hb, NULL);
    m->hb = hb;
    m->last_hb_ns = now_ns;
    *first = !m->heard;
    m->heard = true;
    return ST_OK;
}

bool st_member_placeable(const st_member *m, uint64_t now_ns)
{
    return m->life == ST_MEMBER_ALIVE && m->heard && now_ns >= m->excluded_until && !m->draining &&
           !m->drained;
}

void st_member_exclude(st_member *m, const char *why, uint64_t now_ns)
{
    uint64_t d = 15ull * 1000000000u;
    for (uint32_t i = 0; i < m->n_excluded && d < 300ull * 1000000000u; i++)
        d *= 2;
    if (d > 300ull * 1000000000u)
        d = 300ull * 1000000000u;
    m->excluded_until = now_ns + d;
    m->n_excluded++;
    snprintf(m->why, sizeof m->why, "%s", why);
}

void st_members_mark(st_member *m, st_member_life life, const char *why, uint64_t now_ns)
{
    m->life = life;
    m->gone_ns = now_ns;
    snprintf(m->why, sizeof m->why, "%s", why);
}

void st_members_pause(st_members *ms, uint64_t gap_ns, uint64_t now_ns)
{
    for (size_t i = 0; i < ms->n; i++) {
        st_member *m = &ms->v[i];
        if (m->life == ST_MEMBER_ALIVE)
            m->last_hb_ns = now_ns - m->last_hb_ns > gap_ns ? m->last_hb_ns + gap_ns : now_ns;
    }
}

size_t st_members_expire(st_members *ms, uint64_t now_ns, uint64_t timeout_ns, uint64_t *lost,
                         size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < ms->n && n < cap; i++) {
        st_member *m = &ms->v[i];
        if (m->life == ST_MEMBER_ALIVE && now_ns - m->last_hb_ns > timeout_ns) {
            char why[96];
            snprintf(why, sizeof why, "no heartbeat for %llu ms",
                     (unsigned long long)((now_ns - m->last_hb_ns) / 1000000));
            st_members_mark(m, ST_MEMBER_LOST, why, now_ns);
            lost[n++] = m->id;
        }
    }
    return n;
}

void st_members_gc(st_members *ms, uint64_t now_ns, uint64_t keep_ns)
{
    for (size_t i = 0; i < ms->n;) {
        st_member *m = &ms->v[i];
        if (m->life != ST_MEMBER_ALIVE && m->rpc == NULL && now_ns - m->gone_ns > keep_ns)
            ms_drop(ms, i);
        else
            i++;
    }
}

void st_members_counters(const st_members *ms, Strata__Counters *sum)
{
    ms_counters_add(sum, &ms->retired);
    for (size_t i = 0; i < ms->n; i++)
        if (ms->v[i].hb)
            ms_counters_add(sum, ms->v[i].hb->heartbeat->counters);
}

double st_member_speed(const st_member *m, const char *dtype)
{
    const Strata__Capability *c = m->join->join->cap;
    double s = 0, sum = 0;
    for (size_t i = 0; i < c->n_speeds; i++) {
        sum += c->speeds[i]->bytes_per_s;
        if (strcmp(c->speeds[i]->dtype, dtype) == 0)
            s = c->speeds[i]->bytes_per_s;
    }
    if (s == 0)
        s = c->n_speeds ? sum / (double)c->n_speeds : 1e9;
    if (c->throttle > 0)
        s /= c->throttle;
    return s;
}

bool st_member_measured(const st_member *m, uint64_t epoch, uint32_t first, uint32_t last,
                        const uint64_t *token_bytes, uint32_t n_layer, uint64_t head_bytes,
                        uint32_t min_samples, bool one_token, double *spb)
{
    if (m->hb == NULL || m->hb->heartbeat->epoch != epoch)
        return false;
    const Strata__Heartbeat *h = m->hb->heartbeat;
    size_t n = h->n_layers;
    if (n == 0 || n > ST_PLACE_MAX_LAYERS)
        return false;
    uint32_t *layer = malloc(n * sizeof *layer), *samples = malloc(n * sizeof *samples);
    double *ema = malloc(n * sizeof *ema);
    bool ok = false;
    if (layer && samples && ema) {
        for (size_t i = 0; i < n; i++) {
            layer[i] = h->layers[i]->layer;
            samples[i] = one_token ? h->layers[i]->one_token_samples : h->layers[i]->samples;
            ema[i] = one_token ? h->layers[i]->one_token_ema_ms : h->layers[i]->ema_ms;
        }
        st_place_model pm = {.n_layer = n_layer,
                             .layer_bytes = token_bytes,
                             .head_bytes = head_bytes};
        ok = st_place_measure(&pm, first, last, layer, ema, samples, n, min_samples, spb);
    }
    free(layer);
    free(samples);
    free(ema);
    return ok;
}

void st_member_rtt_sample(st_member *m, double ms)
{
    if (!(ms >= 0) || !isfinite(ms))
        return;
    m->rtt_ms = m->rtt_ms > 0 ? 0.7 * m->rtt_ms + 0.3 * ms : ms;
}
