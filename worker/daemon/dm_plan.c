/* dm_plan.c - the worker's side of the coordinator's plans: Prepare and
 * Commit (docs/cluster.md, "Plans (two phases)"; the state and its
 * threads: dm_plan.h). The control REP that receives them is dm_rep.c.
 *
 * Design. A Prepare is checked whole before anything is loaded (INV-3):
 * epoch newer than the current one, a 32-byte plan hash, the model id
 * equal to this worker's file (else Refuse naming both ids), layer ranges
 * contiguous over [0, n_layer), addresses well-formed, limits sane, at
 * most ST_DP_MAX_NEXT workers (replicas) per stage, this worker at most
 * once, boundary dtypes known, the KV cache type (Plan.cache_type, empty:
 * f32) one of f32, f16, q8_0 and usable with the model's heads, and the
 * stage's weights plus a full KV reserve (max_sessions x n_ctx, in that
 * cache type) within the memory budget (else Refuse
 * with the numbers). Those bytes are common/model/llama.h's
 * (st_minfo_stage_bytes, st_kv_bytes): the counts the coordinator placed
 * the stage with. The stage is then loaded on a loader thread (a worker
 * without --model first fetches and verifies the stage's chunks there:
 * fetch_dm.c, docs/streaming.md) so
 * the control thread keeps heart-beating and the data thread keeps serving
 * the old epoch; the Prepare's reply (Ready with the resident bytes, or
 * Refuse with the loader's error) goes out when the loader ends. A stage
 * of exactly the layer range of the committed stage (or of a prepared one
 * never committed) takes a reference to those placed weights instead of
 * loading them again (d->pl.kept, model.h's Ownership): a replan that changes
 * only boundary dtypes, zstd or addresses costs a stage context, not a
 * read, a repack and a second copy in memory. The REP
 * socket receives nothing else meanwhile: its next receive is armed only
 * after the reply, which is how REP serialises requests anyway.
 *
 * Commit publishes the prepared stage to the data thread. The rules that
 * follow are pure functions of ctl_check.h (unit-tested). Only the
 * coordinator this worker joined may send either (dm_rep.c); and whoever
 * sends them, a Commit must name the epoch and plan hash of the Prepare
 * this worker answered Ready to: a Commit without that Prepare (another
 * epoch, none prepared) is refused with ST_EPROTO, one with another hash
 * with ST_EEPOCH, one at or below the committed epoch as stale
 * (ST_EEPOCH); each is counted (Counters.refused_control) and changes
 * nothing, so a stranger's Commit{epoch = 2^64-1} cannot make the worker
 * refuse every later plan. A worker the plan leaves out is prepared too:
 * its Prepare makes it a spare at that epoch (Ready with 0 bytes) and the
 * Commit publishes that.
 *
 * The plan hash is recomputed (BLAKE2b-256 of the Plan packed with an empty
 * hash) and a Prepare whose hash differs is refused (counted): the hash is
 * what the STEP frames and the Commit name the plan by. The plan's
 * incarnation must be the joined coordinator's. The plan also says who may
 * send this stage STEP frames (st_dp_plan.prev_senders): the coordinator's
 * step sender for stage 0, else the data senders of the previous stage's
 * workers; a plan without them is refused. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/hex.h"
#include "common/model/llama.h"
#include "common/base/log.h"
#include "common/net/netaddr.h"
#include "worker/daemon/dm_internal.h"

bool dm_addr_ok(const char *s)
{
    if (s == NULL)
        return false;
    size_t n = strlen(s);
    if (n < 1 || n > 255)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f)
            return false;
    return st_is_tcp(s) || strncmp(s, "ipc://", 6) == 0 || strncmp(s, "inproc://", 9) == 0;
}

/* dm_why - writes a refusal reason; returns ST_EINVAL. */
static st_err dm_why(char *reason, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static st_err dm_why(char *reason, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, cap, fmt, ap);
    va_end(ap);
    return ST_EINVAL;
}

/* dm_plan_senders - who may send STEP frames to stage me of p (see the
 * file comment) into o; false when the plan does not say. */
static bool dm_plan_senders(const Strata__Plan *p, int32_t me, st_dp_plan *o)
{
    o->n_prev = 0;
    if (me < 0)
        return true; /* a spare takes no STEP frame */
    if (me == 0) {
        o->prev_senders[o->n_prev++] = p->step_sender;
        return p->step_sender != 0;
    }
    const Strata__Stage *pv = p->stages[me - 1];
    if (pv->n_data_senders != pv->n_worker_ids) /* n_worker_ids <= ST_DP_MAX_NEXT: checked */
        return false;
    for (size_t k = 0; k < pv->n_data_senders; k++) {
        if (pv->data_senders[k] == 0)
            return false;
        o->prev_senders[o->n_prev++] = pv->data_senders[k];
    }
    return true;
}

st_ctl_state dm_ctl_state(const st_daemon *d)
{
    st_ctl_state s = {.coord_ctl = d->mb.coord_ctl,
                      .incarnation = d->mb.incarnation,
                      .have_cur = d->pl.have_cur,
                      .cur_epoch = d->pl.cur_epoch,
                      .have_pending = d->pl.pending != NULL};
    if (d->pl.pending != NULL) {
        s.pending_epoch = d->pl.pending->plan.epoch;
        memcpy(s.pending_hash, d->pl.pending->plan.plan_hash, sizeof s.pending_hash);
    }
    return s;
}

/* dm_plan_check - validates the layout of plan (see the file comment;
 * its epoch, incarnation and hash are st_ctl_prepare_check's) and extracts
 * this worker's part into *o (index -1 when it is not in the plan). */
static st_err dm_plan_check(const st_daemon *d, const Strata__Plan *p, st_dp_plan *o, char *why,
                            size_t cap)
{
    memset(o, 0, sizeof *o); /* epoch, incarnation and hash: st_ctl_prepare_check */
    if (p->model_id.len != 32 || memcmp(p->model_id.data, d->self.model_id, 32) != 0) {
        char a[ST_HEX_SHORT_CAP], b[ST_HEX_SHORT_CAP];
        st_hex_short(p->model_id.data, p->model_id.len, a);
        st_hex_short(d->self.model_id, 32, b);
        return dm_why(why, cap,
                      "plan model id %s.. (%zu bytes) differs from this worker's model "
                      "%s.. (%s)",
                      a, p->model_id.len, b, d->self.cfg.model);
    }
    if ((int64_t)p->n_layer != d->self.hp.n_layer)
        return dm_why(why, cap, "plan has %u layers; the model has %lld", p->n_layer,
                      (long long)d->self.hp.n_layer);
    if (p->n_stages < 1 || (int64_t)p->n_stages > d->self.hp.n_layer || p->n_stages > 65535)
        return dm_why(why, cap, "plan has %zu stages for %lld layers", p->n_stages,
                      (long long)d->self.hp.n_layer);
    if (p->max_tokens < 1 || p->max_tokens > ST_DP_MAX_TOKENS)
        return dm_why(why, cap, "plan max_tokens %u is outside 1..%u", p->max_tokens,
                      ST_DP_MAX_TOKENS);
    if (p->n_ctx < 1 || (int64_t)p->n_ctx > d->self.hp.n_ctx_train)
        return dm_why(why, cap, "plan n_ctx %u is outside 1..%lld (the model's context)", p->n_ctx,
                      (long long)d->self.hp.n_ctx_train);
    if (p->max_sessions < 1 || p->max_sessions > 65536)
        return dm_why(why, cap, "plan max_sessions %u is outside 1..65536", p->max_sessions);
    /* the cache type the coordinator reserved for; empty: f32, as before typed caches */
    o->kv_dtype = ST_DT_F32;
    if (p->cache_type != NULL && p->cache_type[0] != '\0' &&
        st_kv_dtype_from_name(p->cache_type, &o->kv_dtype) != ST_OK)
        return dm_why(why, cap, "plan cache type: %s", st_errdetail());
    if (st_kv_dtype_check(o->kv_dtype, d->self.hp.head_dim) != ST_OK)
        return dm_why(why, cap, "plan cache type: %s", st_errdetail());
    if (!dm_addr_ok(p->result_addr))
        return dm_why(why, cap, "plan result_addr is not a tcp://, ipc:// or inproc:// URL");
    int32_t me = -1;
    size_t rep = 0;
    uint32_t prev = 0;
    for (size_t i = 0; i < p->n_stages; i++) {
        const Strata__Stage *s = p->stages[i];
        if (s->index != i || s->first != prev || s->last <= s->first || s->last > p->n_layer)
            return dm_why(why, cap,
                          "stage %zu (index %u, layers [%u, %u)) does not continue "
                          "the layer ranges at %u",
                          i, s->index, s->first, s->last, prev);
        prev = s->last;
        if (s->n_worker_ids < 1 || s->n_data_addrs != s->n_worker_ids)
            return dm_why(why, cap, "stage %zu has %zu workers and %zu addresses", i,
                          s->n_worker_ids, s->n_data_addrs);
        if (s->n_worker_ids > ST_DP_MAX_NEXT)
            return dm_why(why, cap,
                          "stage %zu has %zu workers; at most %d replicas per stage are "
                          "served",
                          i, s->n_worker_ids, ST_DP_MAX_NEXT);
        for (size_t j = 0; j < s->n_data_addrs; j++)
            if (!dm_addr_ok(s->data_addrs[j]))
                return dm_why(why, cap, "stage %zu: data address %zu is not a valid URL", i, j);
        st_wire_dtype dt;
        if (i > 0 && (s->in_dtype == NULL || st_wire_dtype_from_name(s->in_dtype, &dt) != ST_OK))
            return dm_why(why, cap, "stage %zu: unknown boundary dtype '%.16s'", i,
                          s->in_dtype ? s->in_dtype : "");
        for (size_t j = 0; j < s->n_worker_ids; j++) {
            if (s->worker_ids[j] != d->mb.worker_id)
                continue;
            if (me >= 0)
                return dm_why(why, cap, "worker %llu appears twice in the plan",
                              (unsigned long long)d->mb.worker_id);
            me = (int32_t)i;
            rep = j;
        }
    }
    if (prev != p->n_layer)
        return dm_why(why, cap, "the stages cover layers [0, %u) of %u", prev, p->n_layer);
    if (!dm_plan_senders(p, me, o))
        return dm_why(why, cap,
                      "the plan does not say who sends stage %d its STEP frames (a "
                      "zero step_sender, or data_senders unlike the workers of stage %d)",
                      me, me - 1);
    o->epoch = p->epoch;
    memcpy(o->plan_hash, p->plan_hash.data, 32);
    o->index = me;
    o->n_stages = (uint32_t)p->n_stages;
    o->zstd = p->zstd;
    o->max_tokens = p->max_tokens;
    o->n_ctx = p->n_ctx;
    o->max_sessions = p->max_sessions;
    snprintf(o->result_addr, sizeof o->result_addr, "%s", p->result_addr);
    if (me < 0)
        return ST_OK;
    const Strata__Stage *s = p->stages[me];
    o->first = s->first;
    o->last = s->last;
    o->replica = (uint32_t)rep;
    o->n_replicas = (uint32_t)s->n_worker_ids;
    o->in_dtype = ST_WIRE_F32;
    if (me > 0)
        st_wire_dtype_from_name(s->in_dtype, &o->in_dtype);
    if ((size_t)me + 1 < p->n_stages) {
        const Strata__Stage *nx = p->stages[me + 1];
        o->n_next = (uint32_t)nx->n_data_addrs; /* checked: 1..ST_DP_MAX_NEXT */
        for (size_t k = 0; k < nx->n_data_addrs; k++)
            snprintf(o->next_addrs[k], sizeof o->next_addrs[k], "%s", nx->data_addrs[k]);
        st_wire_dtype_from_name(nx->in_dtype, &o->out_dtype);
        o->out_zstd = nx->in_zstd;
    }
    return ST_OK;
}

/* ---- Prepare ---- */

static void *dm_loader(void *arg)
{
    st_daemon *d = arg;
    d->pl.ld.out = NULL;
    const char *what = "fetching"; /* without --model: the stage's chunks first (fetch_dm.c) */
    /* weights kept from the stage before are resident: nothing to fetch */
    d->pl.ld.err = d->pl.ld.kept != NULL ? ST_OK : dm_fetch_stage(d, &d->pl.ld.plan);
    if (d->pl.ld.err == ST_OK) {
        what = "loading";
        d->pl.ld.err = st_dp_stage_load(d->self.cfg.model, &d->pl.ld.plan, d->self.pool,
                                        d->self.ops, d->pl.ld.kept, &d->pl.ld.out);
    }
    st_model_close(d->pl.ld.kept);
    d->pl.ld.kept = NULL;
    if (d->pl.ld.err != ST_OK)
        snprintf(d->pl.ld.msg, sizeof d->pl.ld.msg, "%s stage %d (layers [%lld, %lld)): %s", what,
                 d->pl.ld.plan.index, (long long)d->pl.ld.plan.first, (long long)d->pl.ld.plan.last,
                 st_errmsg(d->pl.ld.err));
    pthread_mutex_lock(&d->sh.mu);
    d->sh.ev_loader = true;
    pthread_cond_broadcast(&d->sh.cv);
    pthread_mutex_unlock(&d->sh.mu);
    return NULL;
}

void dm_prepare(st_daemon *d, const Strata__Prepare *pr)
{
    char why[600];
    st_dp_plan plan;
    uint64_t epoch = pr->plan != NULL ? pr->plan->epoch : 0;
    if (d->mb.worker_id == 0) {
        dm_refuse(d, epoch, "this worker has not joined yet");
        return;
    }
    st_ctl_state cs = dm_ctl_state(d);
    st_err ce = st_ctl_prepare_check(&cs, pr->plan, why, sizeof why);
    if (ce == ST_OK)
        ce = dm_plan_check(d, pr->plan, &plan, why, sizeof why);
    if (ce != ST_OK) {
        if (ce == ST_EEPOCH || ce == ST_EAUTH)
            dm_count_refused(d); /* stale, another incarnation's, a wrong hash */
        dm_refuse(d, epoch, why);
        return;
    }
    /* the weights to reuse when the layer range stays (st_dp_stage_load):
     * the prepared stage's, else the committed one's */
    st_model *kept = d->pl.pending != NULL && d->pl.pending->model != NULL ? d->pl.pending->model
                                                                           : d->pl.kept;
    if (!st_dp_stage_keeps(kept, &plan))
        kept = NULL;
    kept = st_model_ref(kept);       /* the loader's (ld.kept), dropped on every other way out */
    st_dp_stage_free(d->pl.pending); /* a prepared plan that was never committed */
    d->pl.pending = NULL;
    if (plan.index < 0) {
        st_model_close(kept);
        st_dp_stage *s;
        if (st_dp_stage_spare(&plan, &s) != ST_OK) {
            dm_refuse(d, epoch, "out of memory");
            return;
        }
        d->pl.pending = s;
        st_log(ST_LOG_INFO, "control", "prepared epoch %llu: not in the plan (spare)",
               (unsigned long long)epoch);
        dm_ready(d, epoch, 0);
        return;
    }
    st_minfo mi;
    st_err e = st_minfo_from_gguf(d->self.g, &mi);
    if (e != ST_OK) {
        st_model_close(kept);
        snprintf(why, sizeof why, "the model's facts: %s", st_errmsg(e));
        dm_refuse(d, epoch, why);
        return;
    }
    uint64_t w = st_minfo_stage_bytes(&mi, (uint32_t)plan.first, (uint32_t)plan.last);
    st_minfo_free(&mi);
    uint64_t per = st_kv_bytes(plan.last - plan.first, plan.n_ctx, d->self.hp.kv_dim,
                               plan.kv_dtype);
    uint64_t kv = per * plan.max_sessions;
    if (per == 0 || kv / plan.max_sessions != per || w + kv < w || w + kv > d->self.memory) {
        snprintf(why, sizeof why,
                 "stage %d (layers [%lld, %lld)) needs %llu bytes of weights + "
                 "%llu bytes of KV (%u sessions x %u positions) = %llu bytes; the memory budget "
                 "is %llu bytes",
                 plan.index, (long long)plan.first, (long long)plan.last, (unsigned long long)w,
                 (unsigned long long)kv, plan.max_sessions, plan.n_ctx,
                 (unsigned long long)(w + kv), (unsigned long long)d->self.memory);
        st_model_close(kept);
        dm_refuse(d, epoch, why);
        return;
    }
    d->pl.ld.plan = plan;
    d->pl.ld.kept = kept;
    dm_fetch_sources(d, pr); /* streaming: the members the coordinator names */
    if (pthread_create(&d->pl.ld.th, NULL, dm_loader, d) != 0) {
        st_model_close(d->pl.ld.kept);
        d->pl.ld.kept = NULL;
        dm_refuse(d, epoch, "cannot start the loader thread");
        return;
    }
    d->pl.loading = true;
    dm_rep_hold(d);
    st_log(ST_LOG_INFO, "control", "preparing epoch %llu: stage %d of %u, layers [%lld, %lld)",
           (unsigned long long)epoch, plan.index, plan.n_stages, (long long)plan.first,
           (long long)plan.last);
}

void dm_on_loader(st_daemon *d)
{
    if (!d->pl.loading)
        return;
    pthread_join(d->pl.ld.th, NULL);
    d->pl.loading = false;
    if (d->pl.ld.err == ST_OK) {
        d->pl.pending = d->pl.ld.out;
        d->pl.ld.out = NULL;
        size_t res = st_dp_stage_resident(d->pl.pending);
        st_log(ST_LOG_INFO, "control", "ready for epoch %llu: %zu bytes of weights resident",
               (unsigned long long)d->pl.ld.plan.epoch, res);
        dm_ready(d, d->pl.ld.plan.epoch, res);
    } else {
        dm_refuse(d, d->pl.ld.plan.epoch, d->pl.ld.msg);
    }
    dm_rep_resume(d);
}

/* ---- Commit ---- */

static void dm_publish(st_daemon *d, st_dp_stage *s)
{
    pthread_mutex_lock(&d->sh.mu);
    st_dp_stage *old = d->sh.have_next ? d->sh.next : NULL;
    d->sh.next = s;
    d->sh.have_next = true;
    pthread_mutex_unlock(&d->sh.mu);
    st_dp_stage_free(old); /* committed but never taken: superseded */
    st_model_close(d->pl.kept);
    d->pl.kept = st_model_ref(s->model); /* NULL for a spare: its weights go with the old stage */
    d->pl.have_cur = true;
    d->pl.cur_epoch = s->plan.epoch;
}

void dm_commit(st_daemon *d, const Strata__Commit *c)
{
    char msg[320];
    st_ctl_state cs = dm_ctl_state(d);
    st_err e = st_ctl_commit_check(&cs, c->epoch, c->plan_hash.data, c->plan_hash.len, msg,
                                   sizeof msg);
    if (e != ST_OK) {
        dm_refused(d, e, msg); /* a prepared plan stays for its own Commit */
        return;
    }
    st_dp_stage *s = d->pl.pending;
    d->pl.pending = NULL;
    bool spare = s->plan.index < 0;
    dm_publish(d, s);
    st_log(ST_LOG_INFO, "control", "committed epoch %llu%s", (unsigned long long)c->epoch,
           spare ? " without this worker: spare" : "");
    dm_reply_ack(d);
}

bool dm_plans_loading(const st_daemon *d) { return d->pl.loading; }

void dm_plans_close(st_daemon *d)
{
    if (d->pl.loading) {
        pthread_join(d->pl.ld.th, NULL);
        d->pl.loading = false;
        st_dp_stage_free(d->pl.ld.out);
        d->pl.ld.out = NULL;
    }
    st_dp_stage_free(d->pl.pending);
    d->pl.pending = NULL;
    st_model_close(d->pl.kept);
    d->pl.kept = NULL;
}
