/* plan.c - plans, their epochs and hashes, and the two-phase switch.
 *
 * A plan is plain data (st_plan) owned by the coordinator; the protobuf
 * form is a view built when it is sent, hashed or shown. The hash is
 * BLAKE2b-256 of the Plan packed with plan_hash empty: protobuf-c packs
 * fields in field-number order with no optional variation, so equal plans
 * pack to equal bytes and a worker can recompute the hash from the Plan it
 * received.
 *
 * Epochs are (start ms << 16) | counter: the start time orders
 * incarnations, the counter orders the plans of one incarnation, so an
 * epoch never goes backwards across restarts without any file to persist.
 *
 * A stage has one worker or several replicas (each holds the stage's
 * layers and the KV of the sessions routed through it). Routes: route k
 * goes through replica k mod n_workers of every stage; with lcm(n_workers)
 * routes every replica carries as many routes as its siblings.
 *
 * A round tracks one switch: the plan's stage workers (every replica) must each answer
 * Ready to Prepare; then (once no batch is in flight, which the caller
 * decides) every live worker receives Commit and the switch is done when
 * every stage worker acknowledged. Workers outside the plan are prepared
 * too (a worker refuses a Commit without its Prepare) and become spares;
 * their failures do not stop the switch.
 *
 * A plan names who sends what on the data plane: the coordinator's STEP
 * sender (step_sender) feeds stage 0, and each stage worker's data sender
 * (data_senders) feeds the next stage and, at the last stage, returns
 * results; workers and the coordinator refuse data frames of any other
 * sender (st_plan_route_sender). */
#include "coordinator/cluster/plan.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t st_epoch_first(uint64_t start_ms) { return (start_ms << 16) | 1u; }

/* The view and its arrays in one allocation; pb comes first so the
 * Strata__Plan pointer handed out is the block's address. */
typedef struct plan_view {
    Strata__Plan pb;
    Strata__Stage *st;
    Strata__Stage **sp;
    uint64_t *ids; /* [n][ST_PLAN_MAX_REPLICAS] */
    uint64_t *snd; /* [n][ST_PLAN_MAX_REPLICAS] data senders */
    char **addrs;  /* [n][ST_PLAN_MAX_REPLICAS] */
} plan_view;

st_err st_plan_to_pb(const st_plan *p, bool without_hash, Strata__Plan **out)
{
    *out = NULL;
    plan_view *v = calloc(1, sizeof *v);
    uint32_t n = p->n_stages;
    if (v == NULL)
        return st_errorf(ST_ENOMEM, "plan view");
    v->st = calloc(n ? n : 1, sizeof *v->st);
    v->sp = calloc(n ? n : 1, sizeof *v->sp);
    v->ids = calloc((n ? n : 1) * (size_t)ST_PLAN_MAX_REPLICAS, sizeof *v->ids);
    v->snd = calloc((n ? n : 1) * (size_t)ST_PLAN_MAX_REPLICAS, sizeof *v->snd);
    v->addrs = calloc((n ? n : 1) * (size_t)ST_PLAN_MAX_REPLICAS, sizeof *v->addrs);
    if (!v->st || !v->sp || !v->ids || !v->snd || !v->addrs) {
        st_plan_pb_free(&v->pb);
        return st_errorf(ST_ENOMEM, "plan view");
    }
    strata__plan__init(&v->pb);
    v->pb.epoch = p->epoch;
    if (!without_hash) {
        v->pb.plan_hash.data = (uint8_t *)p->hash;
        v->pb.plan_hash.len = ST_PLAN_HASH_BYTES;
    }
    v->pb.model_id.data = (uint8_t *)p->model_id;
    v->pb.model_id.len = sizeof p->model_id;
    for (uint32_t i = 0; i < n; i++) {
        Strata__Stage *s = &v->st[i];
        strata__stage__init(s);
        s->index = i;
        s->first = p->stages[i].first;
        s->last = p->stages[i].last;
        const st_plan_stage *ps = &p->stages[i];
        if (ps->n_workers < 1 || ps->n_workers > ST_PLAN_MAX_REPLICAS) {
            st_plan_pb_free(&v->pb);
            return st_errorf(ST_EINVAL, "stage %u has %u workers; 1..%d are allowed", i,
                             ps->n_workers, ST_PLAN_MAX_REPLICAS);
        }
        uint64_t *ids = &v->ids[(size_t)i * ST_PLAN_MAX_REPLICAS];
        uint64_t *snd = &v->snd[(size_t)i * ST_PLAN_MAX_REPLICAS];
        char **addrs = &v->addrs[(size_t)i * ST_PLAN_MAX_REPLICAS];
        for (uint32_t k = 0; k < ps->n_workers; k++) {
            ids[k] = ps->worker_ids[k];
            snd[k] = ps->data_senders[k];
            addrs[k] = (char *)ps->data_addrs[k];
        }
        s->n_worker_ids = ps->n_workers;
        s->worker_ids = ids;
        s->n_data_senders = ps->n_workers;
        s->data_senders = snd;
        s->n_data_addrs = ps->n_workers;
        s->data_addrs = addrs;
        s->in_dtype = (char *)(ps->in_dtype[0] ? ps->in_dtype : p->wire);
        s->in_why = (char *)ps->in_why;
        s->in_zstd = ps->in_zstd;
        v->sp[i] = s;
    }
    v->pb.n_stages = n;
    v->pb.stages = v->sp;
    v->pb.zstd = p->zstd;
    v->pb.result_addr = (char *)p->result_addr;
    v->pb.n_layer = p->n_layer;
    v->pb.max_tokens = p->max_tokens;
    v->pb.n_ctx = p->n_ctx;
    v->pb.max_sessions = p->max_sessions;
    v->pb.incarnation = p->incarnation;
    v->pb.step_sender = p->step_sender;
    v->pb.cache_type = (char *)p->cache_type;
    *out = &v->pb;
    return ST_OK;
}

void st_plan_pb_free(Strata__Plan *pb)
{
    if (pb == NULL)
        return;
    plan_view *v = (plan_view *)pb;
    free(v->st);
    free(v->sp);
    free(v->ids);
    free(v->snd);
    free(v->addrs);
    free(v);
}

st_err st_plan_hash_pb(const Strata__Plan *pb, uint8_t out[ST_PLAN_HASH_BYTES])
{
    Strata__Plan copy = *pb;
    copy.plan_hash.data = NULL;
    copy.plan_hash.len = 0;
    size_t len = strata__plan__get_packed_size(&copy);
    uint8_t *buf = malloc(len ? len : 1);
    if (buf == NULL)
        return st_errorf(ST_ENOMEM, "plan of %zu bytes", len);
    strata__plan__pack(&copy, buf);
    int rc = crypto_generichash(out, ST_PLAN_HASH_BYTES, buf, len, NULL, 0);
    free(buf);
    return rc == 0 ? ST_OK : st_err_sodium("crypto_generichash");
}

st_err st_plan_seal(st_plan *p)
{
    Strata__Plan *pb;
    st_err e = st_plan_to_pb(p, true, &pb);
    if (e != ST_OK)
        return e;
    e = st_plan_hash_pb(pb, p->hash);
    st_plan_pb_free(pb);
    return e;
}

bool st_plan_same_layout(const st_plan *a, const st_plan *b)
{
    if (a->n_stages != b->n_stages || a->zstd != b->zstd || strcmp(a->wire, b->wire) != 0 ||
        strcmp(a->result_addr, b->result_addr) != 0 || a->n_layer != b->n_layer ||
        a->max_tokens != b->max_tokens || a->n_ctx != b->n_ctx ||
        a->max_sessions != b->max_sessions || memcmp(a->model_id, b->model_id, 32) != 0 ||
        a->step_sender != b->step_sender || strcmp(a->cache_type, b->cache_type) != 0)
        return false;
    for (uint32_t i = 0; i < a->n_stages; i++) {
        const st_plan_stage *x = &a->stages[i], *y = &b->stages[i];
        if (x->first != y->first || x->last != y->last || x->n_workers != y->n_workers ||
            strcmp(x->in_dtype, y->in_dtype) != 0 || x->in_zstd != y->in_zstd)
            return false;
        for (uint32_t k = 0; k < x->n_workers && k < ST_PLAN_MAX_REPLICAS; k++)
            if (x->worker_ids[k] != y->worker_ids[k] || x->data_senders[k] != y->data_senders[k] ||
                strcmp(x->data_addrs[k], y->data_addrs[k]) != 0)
                return false;
    }
    return true;
}

/* plan_find - the stage and replica index of worker_id; false if none. */
static bool plan_find(const st_plan *p, uint64_t worker_id, int *stage, int *rep)
{
    for (uint32_t i = 0; i < p->n_stages; i++)
        for (uint32_t k = 0; k < p->stages[i].n_workers && k < ST_PLAN_MAX_REPLICAS; k++)
            if (p->stages[i].worker_ids[k] == worker_id) {
                *stage = (int)i;
                *rep = (int)k;
                return true;
            }
    *stage = *rep = -1;
    return false;
}

int st_plan_stage_of(const st_plan *p, uint64_t worker_id)
{
    int st, rep;
    plan_find(p, worker_id, &st, &rep);
    return st;
}

int st_plan_replica_of(const st_plan *p, uint64_t worker_id)
{
    int st, rep;
    plan_find(p, worker_id, &st, &rep);
    return rep;
}

bool st_plan_route_sender(const st_plan *p, uint32_t route, uint64_t sender, bool last_only)
{
    for (uint32_t i = last_only && p->n_stages > 0 ? p->n_stages - 1 : 0; i < p->n_stages; i++) {
        uint32_t k = st_plan_route_worker(p, route, i);
        if (k < ST_PLAN_MAX_REPLICAS && p->stages[i].data_senders[k] == sender && sender != 0)
            return true;
    }
    return false;
}

uint32_t st_plan_n_workers(const st_plan *p)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < p->n_stages; i++)
        n += p->stages[i].n_workers;
    return n;
}

static uint32_t plan_gcd(uint32_t a, uint32_t b)
{
    while (b != 0) {
        uint32_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

uint32_t st_plan_routes(const st_plan *p, uint32_t max_routes)
{
    uint64_t lcm = 1;
    uint32_t most = 1;
    for (uint32_t i = 0; i < p->n_stages; i++) {
        uint32_t r = p->stages[i].n_workers ? p->stages[i].n_workers : 1;
        if (r > most)
            most = r;
        if (lcm <= max_routes)
            lcm = lcm / plan_gcd((uint32_t)lcm, r) * r;
    }
    return lcm <= max_routes ? (uint32_t)lcm : most;
}

uint32_t st_plan_route_worker(const st_plan *p, uint32_t route, uint32_t stage)
{
    uint32_t r = p->stages[stage].n_workers ? p->stages[stage].n_workers : 1;
    return route % r;
}

bool st_plan_same_route(const st_plan *a, uint32_t ra, const st_plan *b, uint32_t rb)
{
    if (a->n_stages != b->n_stages || a->n_layer != b->n_layer || a->n_ctx != b->n_ctx ||
        a->max_sessions != b->max_sessions || strcmp(a->cache_type, b->cache_type) != 0)
        return false;
    for (uint32_t i = 0; i < a->n_stages; i++) {
        const st_plan_stage *x = &a->stages[i], *y = &b->stages[i];
        if (x->first != y->first || x->last != y->last ||
            x->worker_ids[st_plan_route_worker(a, ra, i)] !=
                y->worker_ids[st_plan_route_worker(b, rb, i)])
            return false;
    }
    return true;
}

st_err st_plan_copy(st_plan *dst, const st_plan *src)
{
    *dst = *src;
    dst->stages = NULL;
    if (src->n_stages == 0)
        return ST_OK;
    dst->stages = malloc(src->n_stages * sizeof *dst->stages);
    if (dst->stages == NULL) {
        dst->n_stages = 0;
        return st_errorf(ST_ENOMEM, "plan of %u stages", src->n_stages);
    }
    memcpy(dst->stages, src->stages, src->n_stages * sizeof *dst->stages);
    return ST_OK;
}

void st_plan_free(st_plan *p)
{
    free(p->stages);
    memset(p, 0, sizeof *p);
}

st_err st_round_begin(st_round *r, st_plan *plan, const uint64_t *others, size_t n_others,
                      uint64_t now_ns)
{
    size_t nw = st_plan_n_workers(plan);
    size_t n = nw + n_others;
    st_round_peer *peers = calloc(n ? n : 1, sizeof *peers);
    if (peers == NULL)
        return st_errorf(ST_ENOMEM, "round of %zu peers", n);
    size_t k = 0;
    for (uint32_t i = 0; i < plan->n_stages; i++)
        for (uint32_t j = 0; j < plan->stages[i].n_workers; j++) {
            peers[k].worker_id = plan->stages[i].worker_ids[j];
            peers[k].in_plan = true;
            peers[k].state = ST_RP_WAIT;
            k++;
        }
    for (size_t i = 0; i < n_others; i++) {
        peers[nw + i].worker_id = others[i];
        peers[nw + i].state = ST_RP_READY;
    }
    r->phase = ST_ROUND_PREPARING;
    r->plan = *plan;
    memset(plan, 0, sizeof *plan);
    r->peers = peers;
    r->n_peers = n;
    r->started_ns = now_ns;
    return ST_OK;
}

st_round_peer *st_round_find(st_round *r, uint64_t worker_id)
{
    for (size_t i = 0; i < r->n_peers; i++)
        if (r->peers[i].worker_id == worker_id)
            return &r->peers[i];
    return NULL;
}

st_err st_round_on_ready(st_round *r, uint64_t worker_id, uint64_t epoch, uint64_t resident)
{
    if (r->phase != ST_ROUND_PREPARING || epoch != r->plan.epoch)
        return st_errorf(ST_EEPOCH, "Ready for epoch %llu; the pending plan is epoch %llu",
                         (unsigned long long)epoch, (unsigned long long)r->plan.epoch);
    st_round_peer *p = st_round_find(r, worker_id);
    if (p == NULL || !p->in_plan)
        return st_errorf(ST_ENOENT, "worker %llu has no stage in epoch %llu",
                         (unsigned long long)worker_id, (unsigned long long)epoch);
    p->state = ST_RP_READY;
    p->resident_bytes = resident;
    for (size_t i = 0; i < r->n_peers; i++)
        if (r->peers[i].in_plan && r->peers[i].state != ST_RP_READY)
            return ST_OK;
    r->phase = ST_ROUND_READY;
    return ST_OK;
}

void st_round_start_commit(st_round *r)
{
    r->phase = ST_ROUND_COMMITTING;
    for (size_t i = 0; i < r->n_peers; i++)
        r->peers[i].state = ST_RP_WAIT;
}

bool st_round_on_ack(st_round *r, uint64_t worker_id, bool ok)
{
    st_round_peer *p = st_round_find(r, worker_id);
    if (p != NULL && r->phase == ST_ROUND_COMMITTING)
        p->state = ok ? ST_RP_ACKED : ST_RP_FAILED;
    if (r->phase != ST_ROUND_COMMITTING)
        return false;
    for (size_t i = 0; i < r->n_peers; i++) {
        const st_round_peer *q = &r->peers[i];
        if (q->state == ST_RP_WAIT || (q->in_plan && q->state != ST_RP_ACKED))
            return false;
    }
    return true;
}

void st_round_take(st_round *r, st_plan *out)
{
    *out = r->plan;
    memset(&r->plan, 0, sizeof r->plan);
    free(r->peers);
    r->peers = NULL;
    r->n_peers = 0;
    r->phase = ST_ROUND_IDLE;
}

void st_round_abort(st_round *r)
{
    st_plan_free(&r->plan);
    free(r->peers);
    r->peers = NULL;
    r->n_peers = 0;
    r->phase = ST_ROUND_IDLE;
}
