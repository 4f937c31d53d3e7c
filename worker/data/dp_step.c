/* dp_step.c - one batch on the data thread: frame and meta checks, the
 * epoch fence, sessions, the forward pass with per-layer timing, and the
 * output (a STEP frame to the next stage, or sampled tokens to the
 * coordinator). The design is described in dataplane.c. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/base/clock.h"
#include "common/base/hex.h"
#include "common/base/log.h"
#include "common/wire/msg.h"
#include "common/wire/step.h"
#include "worker/daemon/ctl_check.h"
#include "worker/data/dp_internal.h"

/* dp_warn - a warning about bad input, at most one a second (the others
 * are counted and the count is printed with the next one). */
static void dp_warn(st_dataplane *dp, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void dp_warn(st_dataplane *dp, const char *fmt, ...)
{
    double now = st_now_s();
    if (now < dp->warn_at) {
        dp->warn_quiet++;
        return;
    }
    dp->warn_at = now + 1.0;
    char line[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (dp->warn_quiet > 0)
        st_log(ST_LOG_WARN, "data", "%s (and %llu more since the last warning)", line,
               (unsigned long long)dp->warn_quiet);
    else
        st_log(ST_LOG_WARN, "data", "%s", line);
    dp->warn_quiet = 0;
}

/* dp_throttle - sleeps (throttle - 1) x dt_ns, less what earlier sleeps
 * overshot (kept in dp->debt_ns), so the total slow-down stays accurate
 * although each sleep wakes late by the timer slack and the scheduler. */
static void dp_throttle(st_dataplane *dp, uint64_t dt_ns)
{
    double want = (dp->throttle - 1.0) * (double)dt_ns - dp->debt_ns;
    if (!(want > 0)) {
        dp->debt_ns = -want; /* still ahead: nothing to sleep */
        return;
    }
    if (want > 60e9)
        want = 60e9;
    uint64_t t0 = st_now_ns();
    struct timespec ts = {.tv_sec = (time_t)(want / 1e9),
                          .tv_nsec = (long)((uint64_t)want % 1000000000u)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    dp->debt_ns = (double)(st_now_ns() - t0) - want;
}

void dp_hook(void *arg, int64_t layer, float *hidden, int64_t n_tok, int64_t n_embd)
{
    (void)hidden;
    (void)n_tok;
    (void)n_embd;
    st_dataplane *dp = arg;
    uint64_t now = st_now_ns();
    if (dp->throttle > 1.0) {
        dp_throttle(dp, now - dp->lap_ns);
        now = st_now_ns();
    }
    dp->cur->layer_ns[layer - dp->cur->plan.first] = now - dp->lap_ns;
    dp->lap_ns = now;
}

/* dp_result_error - pushes StepResult{error} to the result address. */
static void dp_result_error(st_dataplane *dp, uint64_t epoch, uint64_t batch_id, st_err code,
                            const char *msg)
{
    if (!st_push_link_ready(&dp->res)) {
        dp_warn(dp, "no result address to report to: %s", msg);
        return;
    }
    Strata__Error er = STRATA__ERROR__INIT;
    er.code = (uint32_t)code;
    er.message = (char *)msg;
    Strata__StepResult r = STRATA__STEP_RESULT__INIT;
    r.epoch = epoch;
    r.batch_id = batch_id;
    r.error = &er;
    r.worker_id = dp->worker_id;
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_RESULT;
    m.result = &r;
    nng_msg *out;
    st_err e = st_msg_pack(&dp->tx, ST_ENV_RESULT, &m, &out);
    int rv = e == ST_OK ? st_push_link_send(&dp->res, out) : 0;
    if (e != ST_OK)
        dp_warn(dp, "error result of batch %llu not sent: %s", (unsigned long long)batch_id,
                st_errmsg(e));
    else if (rv != 0) {
        nng_msg_free(out);
        dp_warn(dp, "error result of batch %llu not sent to %s: %s", (unsigned long long)batch_id,
                dp->res.addr, nng_strerror(rv));
    }
}

/* dp_fail - answers a batch that cannot be served with an error result
 * naming this worker, its stage, code and the reason formatted from fmt;
 * counts it as a bad packet when the input was at fault. */
static void dp_fail(st_dataplane *dp, uint64_t epoch, uint64_t batch_id, bool bad, st_err code,
                    const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void dp_fail(st_dataplane *dp, uint64_t epoch, uint64_t batch_id, bool bad, st_err code,
                    const char *fmt, ...)
{
    char why[512], msg[640];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    snprintf(msg, sizeof msg, "worker %s stage %d: %s%s%s", dp->name,
             dp->cur != NULL ? dp->cur->plan.index : -1, st_strerror(code), why[0] ? ": " : "",
             why);
    if (bad) {
        pthread_mutex_lock(&dp->sh->mu);
        dp->sh->c.bad_packets++;
        pthread_mutex_unlock(&dp->sh->mu);
    }
    dp_warn(dp, "batch %llu of epoch %llu failed: %s", (unsigned long long)batch_id,
            (unsigned long long)epoch, msg);
    dp_result_error(dp, epoch, batch_id, code, msg);
}

/* dp_stale - INV-2: a batch of another epoch or plan. Nothing is computed;
 * the control thread reports it (StaleReport) and the scheduler gets an
 * ST_EEPOCH result at once. */
static void dp_stale(st_dataplane *dp, const Strata__StepMeta *m)
{
    const st_dp_stage *s = dp->cur;
    uint64_t cur = s != NULL ? s->plan.epoch : 0;
    char msg[192];
    if (s != NULL && m->epoch == cur) {
        char a[ST_HEX_SHORT_CAP], b[ST_HEX_SHORT_CAP];
        st_hex_short(m->plan_hash.data, m->plan_hash.len, a);
        st_hex_short(s->plan.plan_hash, ST_WIRE_PLAN_HASH_SIZE, b);
        snprintf(msg, sizeof msg,
                 "epoch %llu refused: current epoch %llu (plan hash %s.. is not %s..)",
                 (unsigned long long)m->epoch, (unsigned long long)cur, a, b);
    } else {
        snprintf(msg, sizeof msg, "epoch %llu refused: current epoch %llu",
                 (unsigned long long)m->epoch, (unsigned long long)cur);
    }
    st_worker_shared *sh = dp->sh;
    pthread_mutex_lock(&sh->mu);
    sh->c.refused_epoch++;
    if (sh->stale_n == ST_DP_STALE_CAP) { /* drop the oldest */
        sh->stale_head = (sh->stale_head + 1) % ST_DP_STALE_CAP;
        sh->stale_n--;
        sh->stale_dropped++;
    }
    st_dp_stale *x = &sh->stale[(sh->stale_head + sh->stale_n) % ST_DP_STALE_CAP];
    x->batch_id = m->batch_id;
    x->packet_epoch = m->epoch;
    x->current_epoch = cur;
    snprintf(x->detail, sizeof x->detail, "%s", msg);
    sh->stale_n++;
    sh->ev_stale = true;
    pthread_cond_broadcast(&sh->cv);
    pthread_mutex_unlock(&sh->mu);
    dp_warn(dp, "batch %llu: %s", (unsigned long long)m->batch_id, msg);
    dp_result_error(dp, m->epoch, m->batch_id, ST_EEPOCH, msg);
}

static int dp_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* dp_check_ids - every id of ids[0..n) lies in [0, n_vocab). */
static st_err dp_check_ids(const int32_t *ids, size_t n, int64_t n_vocab, size_t row, uint64_t sid,
                           const char *what)
{
    for (size_t j = 0; j < n; j++)
        if (ids[j] < 0 || ids[j] >= n_vocab)
            return st_errorf(ST_ERANGE,
                             "row %zu (session %llu): %s id %d at %zu is outside the "
                             "vocabulary of %lld",
                             row, (unsigned long long)sid, what, ids[j], j, (long long)n_vocab);
    return ST_OK;
}

/* dp_route_at - the replica of stage i the batch's route names (0 when
 * the route is empty: a plan without replicas). */
static uint32_t dp_route_at(const Strata__StepMeta *m, uint32_t i)
{
    return m->n_route == 0 ? 0 : m->route[i];
}

/* dp_check_route - the batch's route against the plan: one entry per
 * stage, this worker's replica at its stage, an existing next worker. */
static st_err dp_check_route(const st_dp_stage *s, const Strata__StepMeta *m)
{
    const st_dp_plan *p = &s->plan;
    if (m->n_route != 0 && m->n_route != p->n_stages)
        return st_errorf(ST_EINVAL, "step meta: route has %zu entries; the plan has %u stages",
                         m->n_route, p->n_stages);
    uint32_t here = dp_route_at(m, (uint32_t)p->index);
    if (here != p->replica)
        return st_errorf(ST_EPROTO,
                         "step meta: route names replica %u of stage %d; this worker "
                         "is replica %u of %u (misrouted batch)",
                         here, p->index, p->replica, p->n_replicas);
    if (!s->is_last) {
        uint32_t next = dp_route_at(m, (uint32_t)p->index + 1);
        if (next >= p->n_next)
            return st_errorf(ST_ERANGE,
                             "step meta: route names replica %u of stage %d, which "
                             "has %u workers",
                             next, p->index + 1, p->n_next);
    }
    return ST_OK;
}

/* dp_check - the meta against the plan and the model, before any use. */
static st_err dp_check(st_dp_stage *s, const Strata__StepMeta *m, size_t pkt_len)
{
    const st_dp_plan *p = &s->plan;
    if (m->n_rows == 0)
        return st_errorf(ST_EINVAL, "step meta: no rows");
    st_err re = dp_check_route(s, m);
    if (re != ST_OK)
        return re;
    if (m->n_rows > p->max_tokens)
        return st_errorf(ST_ERANGE, "step meta: %zu rows; a batch holds at most %u tokens",
                         m->n_rows, p->max_tokens);
    uint64_t total = 0;
    for (size_t i = 0; i < m->n_rows; i++) {
        const Strata__StepRow *r = m->rows[i];
        unsigned long long sid = (unsigned long long)r->session_id;
        if (r->n_tokens < 1)
            return st_errorf(ST_EINVAL, "row %zu (session %llu): no token ids", i, sid);
        total += r->n_tokens;
        if (total > p->max_tokens)
            return st_errorf(ST_ERANGE, "step meta: more than %u tokens in the batch",
                             p->max_tokens);
        if ((uint64_t)r->pos + r->n_tokens > p->n_ctx)
            return st_errorf(ST_ERANGE,
                             "row %zu (session %llu): positions [%u, %llu) exceed "
                             "the context of %u",
                             i, sid, r->pos, (unsigned long long)r->pos + r->n_tokens, p->n_ctx);
        st_err e = dp_check_ids(r->tokens, r->n_tokens, s->n_vocab, i, r->session_id, "token");
        if (e != ST_OK)
            return e;
        if (!r->sample)
            continue;
        if (r->n_rng != ST_RNG_WORDS)
            return st_errorf(ST_EINVAL,
                             "row %zu (session %llu): rng has %zu words; %d are "
                             "required",
                             i, sid, r->n_rng, ST_RNG_WORDS);
        st_sampler_params sp;
        if ((e = st_sampling_from_pb(r->sampling, &sp)) != ST_OK)
            return st_errwrap(e, "row %zu (session %llu)", i, sid);
        if (r->n_history > p->n_ctx)
            return st_errorf(ST_ERANGE,
                             "row %zu (session %llu): history of %zu ids exceeds the "
                             "context of %u",
                             i, sid, r->n_history, p->n_ctx);
        if ((e = dp_check_ids(r->history, r->n_history, s->n_vocab, i, r->session_id, "history")))
            return e;
    }
    for (size_t i = 0; i < m->n_rows; i++)
        s->ids[i] = m->rows[i]->session_id;
    qsort(s->ids, m->n_rows, sizeof *s->ids, dp_cmp_u64);
    for (size_t i = 1; i < m->n_rows; i++)
        if (s->ids[i] == s->ids[i - 1])
            return st_errorf(ST_EINVAL, "step meta: session %llu has two rows",
                             (unsigned long long)s->ids[i]);
    if (m->n_end_sessions > ST_DP_END_CAP)
        return st_errorf(ST_ERANGE, "step meta: %zu ended sessions; at most %u", m->n_end_sessions,
                         ST_DP_END_CAP);
    if (p->index == 0 && pkt_len != 0)
        return st_errorf(ST_EPROTO, "stage 0 takes no activation packet; %zu bytes came", pkt_len);
    if (p->index > 0 && pkt_len == 0)
        return st_errorf(ST_EPROTO, "no activation packet for stage %d", p->index);
    return ST_OK;
}

/* dp_check_sender - whether sender may send this stage this STEP frame:
 * the previous stage's worker of the batch's route (StepMeta.route names
 * the replica per stage; prev_senders is indexed by replica), or the
 * coordinator for stage 0 (st_dp_plan.prev_senders). Another replica of
 * the previous stage carries other routes' batches only, so its frame for
 * this route is refused too. A frame from anyone else is counted
 * (refused_step) and dropped without an answer: an error result would
 * fail the batch it names, which a forger must not be able to do. The
 * frame has passed the epoch fence and dp_check, so it changed nothing. */
static bool dp_check_sender(st_dataplane *dp, const st_dp_stage *s, const Strata__StepMeta *m,
                            uint64_t sender)
{
    const st_dp_plan *p = &s->plan;
    uint32_t n = p->n_prev < ST_DP_MAX_NEXT ? p->n_prev : ST_DP_MAX_NEXT;
    uint32_t k = p->index == 0 ? 0 : dp_route_at(m, (uint32_t)p->index - 1);
    if (st_ctl_step_route_sender_ok(p->prev_senders, n, k, sender))
        return true;
    pthread_mutex_lock(&dp->sh->mu);
    dp->sh->c.refused_step++;
    pthread_mutex_unlock(&dp->sh->mu);
    dp_warn(dp,
            "batch %llu of epoch %llu refused: STEP from sender %llu, which is not %s "
            "(replica %u) of the plan",
            (unsigned long long)m->batch_id, (unsigned long long)m->epoch,
            (unsigned long long)sender,
            p->index == 0 ? "the coordinator" : "the previous stage's worker of its route", k);
    return false;
}

/* dp_input - decodes the activation packet into s->hin (not on stage 0).
 * Everything after it reads the batch and its rows from the meta; the
 * packet's rows must equal the meta's, so the hidden states it carries
 * are laid out as the meta says. */
static st_err dp_input(st_dataplane *dp, st_dp_stage *s, const Strata__StepMeta *m,
                       const uint8_t *pkt, size_t len)
{
    const st_dp_plan *p = &s->plan;
    if (p->index == 0)
        return ST_OK;
    st_wire_expect ex = {
        .epoch = p->epoch,
        .plan_hash = p->plan_hash,
        .stage = (uint16_t)p->index,
        .hidden = (uint32_t)s->n_embd,
        .max_tokens = p->max_tokens,
        .dtype_mask = 1u << p->in_dtype,
    };
    st_wire_hdr h;
    st_err e = st_wire_decode(dp->wire, pkt, len, &ex, &h, s->prow, p->max_tokens, s->hin,
                              s->hin_cap);
    if (e != ST_OK)
        return e;
    dp->z.zstd_recv += (h.flags & ST_WIRE_F_ZSTD) != 0;
    if (h.n_rows != m->n_rows)
        return st_errorf(ST_EPROTO, "packet has %u rows, the meta %zu", h.n_rows, m->n_rows);
    for (size_t i = 0; i < m->n_rows; i++) {
        const Strata__StepRow *r = m->rows[i];
        const st_wire_row *w = &s->prow[i];
        if (w->session_id != r->session_id || w->pos0 != r->pos || w->n_tokens != r->n_tokens)
            return st_errorf(ST_EPROTO,
                             "packet row %zu (session %llu, pos %u, %u tokens) differs "
                             "from the meta's (session %llu, pos %u, %u tokens)",
                             i, (unsigned long long)w->session_id, w->pos0, w->n_tokens,
                             (unsigned long long)r->session_id, r->pos, (unsigned)r->n_tokens);
    }
    return ST_OK;
}

/* dp_bind - a KV slot for every row: continuing sessions first (they must
 * be here and are pinned), then rows at position 0 (a fresh cache, which
 * may evict the least recently used session not in this batch). */
static st_err dp_bind(st_dataplane *dp, st_dp_stage *s, const Strata__StepMeta *m)
{
    const st_dp_plan *p = &s->plan;
    uint64_t tick = ++dp->tick;
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < m->n_rows; i++) {
            const Strata__StepRow *r = m->rows[i];
            unsigned long long sid = (unsigned long long)r->session_id;
            if ((pass == 0) != (r->pos > 0))
                continue;
            st_session *x;
            bool fresh;
            if (pass == 0) {
                x = st_sessions_find(&dp->ses, r->session_id);
                if (x == NULL || x->kv == NULL)
                    return st_errorf(ST_ENOENT,
                                     "session %llu at position %u: its KV is not on "
                                     "this worker (evicted or never prefilled); re-prefill from "
                                     "position 0",
                                     sid, r->pos);
                if ((int64_t)r->pos > x->kv->n_filled)
                    return st_errorf(ST_ERANGE,
                                     "session %llu: position %u leaves a gap after %lld "
                                     "cached positions",
                                     sid, r->pos, (long long)x->kv->n_filled);
            }
            st_err e = st_sessions_acquire(&dp->ses, r->session_id, tick, &x, &fresh);
            if (e != ST_OK)
                return st_errorf(e, "no KV slot for session %llu: this batch uses all %u slots",
                                 sid, dp->ses.cap);
            if (x->kv == NULL && (e = st_stage_kv_alloc(s->ctx, p->n_ctx, p->kv_dtype, &x->kv)) != ST_OK) {
                st_sessions_end(&dp->ses, r->session_id);
                return st_errwrap(e, "KV cache of session %llu", sid);
            }
            if (r->pos == 0)
                st_kv_reset(x->kv);
            st_batch_row *b = &s->brow[i];
            b->kv = x->kv;
            b->pos = r->pos;
            b->n_tok = (int64_t)r->n_tokens;
            b->tokens = p->index == 0 ? r->tokens : NULL;
            b->all_logits = false;
        }
    }
    return ST_OK;
}

/* dp_forward - runs the stage; fills s->layer_ns and *compute_ns. */
static st_err dp_forward(st_dataplane *dp, st_dp_stage *s, size_t n_rows, uint64_t *compute_ns)
{
    int64_t nl = s->plan.last - s->plan.first;
    memset(s->layer_ns, 0, (size_t)nl * sizeof *s->layer_ns);
    uint64_t t0 = st_now_ns();
    dp->lap_ns = t0;
    st_err e = st_stage_forward(s->ctx, s->brow, n_rows, s->plan.index == 0 ? NULL : s->hin,
                                s->is_last ? ST_OUT_LOGITS : ST_OUT_HIDDEN, s->hout, s->hout_cap);
    if (e != ST_OK)
        return e;
    uint64_t now = st_now_ns(); /* the head (last stage) counts as its last layer */
    if (dp->throttle > 1.0) {
        dp_throttle(dp, now - dp->lap_ns);
        now = st_now_ns();
    }
    s->layer_ns[nl - 1] += now - dp->lap_ns;
    *compute_ns = now - t0;
    return ST_OK;
}

/* dp_experts_delta - a mixture of experts: s->exp_delta gets what the
 * context routed per (layer, expert) since the last call, s->exp_base the
 * context's counts now; false for a dense stage. */
static bool dp_experts_delta(st_dp_stage *s)
{
    if (s->n_expert == 0 || s->ctx == NULL)
        return false;
    const int64_t nl = s->plan.last - s->plan.first;
    for (int64_t l = 0; l < nl; l++) {
        uint64_t *base = s->exp_base + (size_t)l * s->n_expert;
        uint64_t *d = s->exp_delta + (size_t)l * s->n_expert;
        const uint64_t *cnt;
        if (st_stage_expert_counts(s->ctx, s->plan.first + l, &cnt) != ST_OK) {
            memset(d, 0, (size_t)s->n_expert * sizeof *d); /* not reached: an MoE layer */
            continue;
        }
        for (uint32_t e = 0; e < s->n_expert; e++) {
            d[e] = cnt[e] - base[e]; /* the context's counts only grow */
            base[e] = cnt[e];
        }
    }
    return true;
}

/* dp_experts_add - adds s->exp_delta to the shared totals (under sh->mu)
 * when they are kept for this stage's layers (dp_swap). */
static void dp_experts_add(st_worker_shared *sh, const st_dp_stage *s)
{
    const int64_t nl = s->plan.last - s->plan.first;
    if (sh->exp_tot == NULL || sh->exp_n != nl || sh->exp_first != s->plan.first ||
        sh->n_expert != s->n_expert)
        return;
    uint64_t *tot = sh->exp_tot + (size_t)s->plan.first * s->n_expert;
    for (size_t i = 0; i < (size_t)nl * s->n_expert; i++)
        tot[i] += s->exp_delta[i];
}

/* dp_zsample - after a packet was sent: when due, what zstd does to its
 * hidden states in every dtype (wire_sample.h), for the heartbeats. A
 * failed sample is logged and changes nothing. */
static void dp_zsample(st_dataplane *dp, st_dp_stage *s, const Strata__StepMeta *m)
{
    if (!st_wire_zsampler_due(dp->zs))
        return;
    uint32_t n = 0;
    for (size_t i = 0; i < m->n_rows; i++)
        n += (uint32_t)m->rows[i]->n_tokens; /* checked by dp_check: at most max_tokens */
    st_err e = st_wire_zsampler_take(dp->zs, s->hout, n, (uint32_t)s->n_embd);
    if (e != ST_OK)
        st_log(ST_LOG_WARN, "data", "zstd sample of batch %llu: %s",
               (unsigned long long)m->batch_id, st_errmsg(e));
    dp->zs_new = dp->zs_new || e == ST_OK;
}

/* dp_send_step - encodes the hidden states for the next stage and sends
 * STEP{meta as received, packet} on; *clamps gets the f16 clamp count. */
static st_err dp_send_step(st_dataplane *dp, st_dp_stage *s, const Strata__StepMeta *m,
                           const st_step_parts *in, uint64_t *clamps)
{
    const st_dp_plan *p = &s->plan;
    uint32_t k = dp_route_at(m, (uint32_t)p->index + 1); /* checked by dp_check_route */
    if (k >= ST_DP_MAX_NEXT || !st_push_link_ready(&dp->next[k]))
        return st_errorf(ST_ECLOSED,
                         "no connection to replica %u of stage %d to send batch %llu "
                         "to",
                         k, p->index + 1, (unsigned long long)m->batch_id);
    st_wire_hdr h;
    memset(&h, 0, sizeof h);
    h.epoch = p->epoch;
    memcpy(h.plan_hash, p->plan_hash, ST_WIRE_PLAN_HASH_SIZE);
    h.stage = (uint16_t)(p->index + 1);
    h.n_rows = (uint32_t)m->n_rows;
    h.hidden = (uint32_t)s->n_embd;
    for (size_t i = 0; i < m->n_rows; i++) {
        s->wrow[i].session_id = m->rows[i]->session_id;
        s->wrow[i].pos0 = m->rows[i]->pos;
        s->wrow[i].n_tokens = (uint32_t)m->rows[i]->n_tokens; /* <= max_tokens (dp_check) */
    }
    bool zstd = p->zstd || p->out_zstd; /* --zstd, or this boundary's own choice */
    st_wire_opts o = {
        .dtype = p->out_dtype,
        .zstd_level = zstd ? ST_WIRE_ZSTD_DEFAULT_LEVEL : 0,
        .plane_split = zstd && st_wire_dtype_planes(p->out_dtype),
    };
    size_t bound, len;
    st_err e = st_wire_encode_size(&h, s->wrow, &o, &bound);
    if (e != ST_OK)
        return e;
    st_step_out so; /* the meta as received, then this stage's packet */
    if ((e = st_step_begin(&dp->tx, in->meta, in->meta_len, bound, &so)) != ST_OK)
        return st_errwrap(e, "batch %llu", (unsigned long long)m->batch_id);
    st_wire_stats st;
    e = st_wire_encode_buf(&h, s->wrow, s->hout, &o, dp->wire, so.pkt, bound, &len, &st);
    if (e != ST_OK) {
        st_step_abort(&so);
        return e;
    }
    nng_msg *out;
    if ((e = st_step_finish(&dp->tx, &so, len, &out)) != ST_OK)
        return e;
    *clamps = st.n_clamped;
    int rv;
    if ((rv = st_push_link_send(&dp->next[k], out)) != 0) { /* a successful send takes it */
        nng_msg_free(out);
        return st_errorf(ST_ENNG, "sending batch %llu to %s: %s", (unsigned long long)m->batch_id,
                         dp->next[k].addr, nng_strerror(rv));
    }
    if (zstd) {
        dp->z.zstd_sent++;
        dp->z.zstd_raw += st.raw_bytes;
        dp->z.zstd_wire += st.wire_bytes;
    }
    dp_zsample(dp, s, m);
    return ST_OK;
}

/* dp_send_results - samples the rows that ask for it and pushes the
 * StepResult to the coordinator. */
static st_err dp_send_results(st_dataplane *dp, st_dp_stage *s, const Strata__StepMeta *m,
                              double compute_ms)
{
    if (!st_push_link_ready(&dp->res))
        return st_errorf(ST_ECLOSED, "no result address for batch %llu",
                         (unsigned long long)m->batch_id);
    size_t nv = (size_t)s->n_vocab, n = 0;
    for (size_t i = 0; i < m->n_rows; i++) {
        const Strata__StepRow *r = m->rows[i];
        if (!r->sample)
            continue;
        float *lg = s->hout + i * nv;
        st_sampler_params sp;
        st_rng rng;
        memcpy(rng.s, r->rng, sizeof rng.s);     /* ST_RNG_WORDS words: checked by dp_check */
        memcpy(s->lrow, lg, nv * sizeof(float)); /* the penalty modifies its input */
        int32_t tok;
        st_err e = st_sampling_from_pb(r->sampling, &sp);
        if (e == ST_OK)
            e = st_sample(&sp, &rng, s->lrow, nv, r->history, r->n_history, &s->scratch, &tok);
        if (e != ST_OK)
            return st_errwrap(e, "sampling row %zu (session %llu)", i,
                              (unsigned long long)r->session_id);
        Strata__RowResult *x = &s->rr[n];
        strata__row_result__init(x);
        x->session_id = r->session_id;
        x->token = tok;
        x->n_rng = ST_RNG_WORDS;
        x->rng = s->rng + ST_RNG_WORDS * n;
        memcpy(x->rng, rng.s, sizeof rng.s);
        if (r->want_logits) {
            x->n_logits = nv;
            x->logits = lg;
        }
        s->rrp[n++] = x;
    }
    Strata__StepResult res = STRATA__STEP_RESULT__INIT;
    res.epoch = m->epoch;
    res.batch_id = m->batch_id;
    res.n_rows = n;
    res.rows = s->rrp;
    res.worker_id = dp->worker_id;
    res.compute_ms = compute_ms;
    Strata__Msg msg = STRATA__MSG__INIT;
    msg.body_case = STRATA__MSG__BODY_RESULT;
    msg.result = &res;
    nng_msg *out;
    st_err e = st_msg_pack(&dp->tx, ST_ENV_RESULT, &msg, &out);
    if (e != ST_OK)
        return e;
    int rv = st_push_link_send(&dp->res, out);
    if (rv != 0) {
        nng_msg_free(out);
        return st_errorf(ST_ENNG, "sending the result of batch %llu to %s: %s",
                         (unsigned long long)m->batch_id, dp->res.addr, nng_strerror(rv));
    }
    return ST_OK;
}

/* dp_step - one checked batch of the current epoch from sender. */
static void dp_step(st_dataplane *dp, const Strata__StepMeta *m, const st_step_parts *in,
                    uint64_t sender)
{
    st_dp_stage *s = dp->cur;
    if (s == NULL || m->epoch != s->plan.epoch || m->plan_hash.len != ST_WIRE_PLAN_HASH_SIZE ||
        memcmp(m->plan_hash.data, s->plan.plan_hash, ST_WIRE_PLAN_HASH_SIZE) != 0) {
        dp_stale(dp, m);
        return;
    }
    if (s->model == NULL) {
        dp_fail(dp, m->epoch, m->batch_id, true, ST_EPROTO,
                "this worker has no stage in epoch %llu (spare)",
                (unsigned long long)s->plan.epoch);
        return;
    }
    uint64_t t0 = st_now_ns(), compute_ns = 0, clamps = 0;
    memset(&dp->z, 0, sizeof dp->z);
    pthread_mutex_lock(&dp->sh->mu);
    dp->sh->in_flight = 1;
    pthread_mutex_unlock(&dp->sh->mu);
    bool computed = false, bad = true;
    st_err e = dp_check(s, m, in->pkt_len);
    if (e == ST_OK && !dp_check_sender(dp, s, m, sender)) {
        pthread_mutex_lock(&dp->sh->mu);
        dp->sh->in_flight = 0;
        pthread_mutex_unlock(&dp->sh->mu);
        return; /* refused and counted: nothing computed, nothing answered */
    }
    if (e == ST_OK)
        e = dp_input(dp, s, m, in->pkt, in->pkt_len);
    if (e == ST_OK) {
        bad = false;
        /* sessions the scheduler ended before this batch: their slots may
         * be taken by this batch's new sessions, so free them first */
        uint32_t before = st_sessions_count(&dp->ses), ended = 0;
        for (size_t i = 0; i < m->n_end_sessions; i++)
            ended += st_sessions_end(&dp->ses, m->end_sessions[i]);
        e = dp_bind(dp, s, m);
        if (ended > 0 || st_sessions_count(&dp->ses) != before)
            dp_publish_sessions(dp);
    }
    if (e == ST_OK && (e = dp_forward(dp, s, m->n_rows, &compute_ns)) == ST_OK) {
        computed = true;
        if (s->is_last)
            e = dp_send_results(dp, s, m, (double)compute_ns / 1e6);
        else
            e = dp_send_step(dp, s, m, in, &clamps);
    }
    if (e != ST_OK)
        dp_fail(dp, m->epoch, m->batch_id, bad, e, "%s", st_errdetail());
    bool experts = dp_experts_delta(s); /* also after a failed pass: what it routed */
    pthread_mutex_lock(&dp->sh->mu);
    st_worker_shared *sh = dp->sh;
    if (experts)
        dp_experts_add(sh, s);
    sh->in_flight = 0;
    sh->busy_ns += st_now_ns() - t0;
    if (computed) {
        sh->c.steps++;
        sh->c.f16_clamps += clamps;
        sh->c.zstd_sent += dp->z.zstd_sent;
        sh->c.zstd_raw += dp->z.zstd_raw;
        sh->c.zstd_wire += dp->z.zstd_wire;
        sh->c.zstd_recv += dp->z.zstd_recv;
        if (dp->zs_new)
            st_wire_zsampler_get(dp->zs, sh->zstd);
        dp->zs_new = false;
        /* a step of one token (a lone decode) also feeds the one-token EMA */
        bool one = m->n_rows == 1 && m->rows[0]->n_tokens == 1;
        for (int64_t l = 0; l < s->plan.last - s->plan.first; l++) {
            st_latency_add(&sh->lat, s->plan.first + l, (double)s->layer_ns[l] / 1e6);
            if (one)
                st_latency_add_one(&sh->lat, s->plan.first + l, (double)s->layer_ns[l] / 1e6);
        }
    }
    pthread_mutex_unlock(&dp->sh->mu);
}

void dp_frame(st_dataplane *dp, nng_msg *msg)
{
    st_step_parts in;
    uint64_t sender;
    st_err e = st_step_open(&dp->rx, nng_msg_body(msg), nng_msg_len(msg), &in, &sender);
    if (e != ST_OK) { /* no batch id to answer to: count and drop (INV-5 for ST_EAUTH) */
        pthread_mutex_lock(&dp->sh->mu);
        if (e == ST_EAUTH)
            dp->sh->c.auth_failed++;
        else
            dp->sh->c.bad_packets++;
        pthread_mutex_unlock(&dp->sh->mu);
        st_pipe_gate_failed(dp->gate, msg); /* its connection (pipe_gate.h) */
        dp_warn(dp, "frame dropped: %s", st_errmsg(e));
        return;
    }
    st_pipe_gate_vouch(dp->gate, msg); /* authenticated: its connection is proven */
    if (in.hello) /* a dialer's first frame (msg.h st_msg_link_hello): nothing to run */
        return;
    Strata__StepMeta *m;
    if ((e = st_step_meta_unpack(&in, sender, &m)) != ST_OK) {
        dp_fail(dp, dp->cur != NULL ? dp->cur->plan.epoch : 0, 0, true, e, "%s", st_errdetail());
        return;
    }
    dp_step(dp, m, &in, sender);
    st_step_meta_free(m);
}
