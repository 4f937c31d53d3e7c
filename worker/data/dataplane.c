/* dataplane.c - the worker's data thread (see dataplane.h).
 *
 * Design. One thread runs every batch of this worker, start to end:
 * receive a STEP frame on the PULL, check it, run the stage, send the
 * result on. Keeping the stage context, the KV caches and the sockets on
 * one thread means none of them needs a lock; the thread talks to the
 * control thread only through st_worker_shared, twice per batch (before:
 * swap in a committed stage, free ended sessions, read the throttle;
 * after: publish counters and per-layer latency).
 *
 * Checks come before use (INV-3), in this order: the envelope (MAC and
 * replay when keyed: a failure is counted and dropped without an answer,
 * INV-5); the STEP framing and the StepMeta protobuf (common/wire/step.c); the
 * epoch and plan hash (INV-2: a mismatch computes nothing, is counted,
 * queued for the control thread's StaleReport and answered at once with an
 * ST_EEPOCH StepResult so the scheduler fails the batch instead of waiting
 * for its deadline);
 * then every row (counts, positions, ids, RNG words, sampling parameters);
 * then the sender (dp_check_sender: the previous stage of the plan, or the
 * coordinator for stage 0; any other sender's frame is dropped unanswered
 * and counted as refused_step before it touches a session or the KV);
 * then the activation packet (st_wire_decode checks its own CRC, header
 * and rows, which must equal the meta's). Any failure after the envelope
 * is answered with an error StepResult to the plan's result address.
 *
 * Waiting is a blocking receive with a timeout (ST_DP_POLL_MS), never a
 * spin: the timeout only bounds how late a stop request or an idle swap is
 * noticed. Per-layer time is taken by the stage's layer hook, which also
 * applies the test-only throttle (sleeping (F - 1) times the layer's
 * compute time), so the latency the worker reports is what a slower
 * machine would show. The time after the last layer (the head, or nothing)
 * is added to the last layer, the embedding to the first.
 *
 * Replicas. A stage may have several workers; each keeps the KV of the
 * sessions routed through it. The data thread keeps a PUSH per worker of
 * the next stage and forwards a batch to the one its StepMeta.route names
 * (replica 0 when the route is empty); a batch whose route names another
 * replica of this stage was misrouted and is refused. Each PUSH is a
 * worker/data/push_link.h link: pointed at a new address, it gets a new socket
 * (libnng 1.5.2 can crash on a socket whose dialer was closed, that
 * header says why). */
#include "worker/data/dataplane.h"

#include <assert.h>
#include <nng/protocol/pipeline0/pull.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "common/base/clock.h"
#include "common/base/cq.h"
#include "common/base/log.h"
#include "common/wire/msg.h"
#include "common/wire/step.h"
#include "worker/data/dp_internal.h"

st_err st_worker_shared_init(st_worker_shared *sh)
{
    memset(sh, 0, sizeof *sh);
    sh->throttle = 1.0;
    sh->end_ids = calloc(ST_DP_END_CAP, sizeof *sh->end_ids);
    if (sh->end_ids == NULL)
        return st_errorf(ST_ENOMEM, "EndSessions buffer");
    if (pthread_mutex_init(&sh->mu, NULL) != 0) {
        free(sh->end_ids);
        return st_errorf(ST_EINTERNAL, "mutex of the shared state");
    }
    st_err e = st_cq_cond_init(&sh->cv);
    if (e != ST_OK) {
        pthread_mutex_destroy(&sh->mu);
        free(sh->end_ids);
        return e;
    }
    return ST_OK;
}

void st_worker_shared_fini(st_worker_shared *sh)
{
    st_dp_stage_free(sh->next);
    st_latency_fini(&sh->lat);
    free(sh->exp_tot);
    free(sh->end_ids);
    pthread_cond_destroy(&sh->cv);
    pthread_mutex_destroy(&sh->mu);
}

/* ---- stages ---- */

st_err st_dp_stage_spare(const st_dp_plan *plan, st_dp_stage **out)
{
    *out = NULL;
    if (plan->index != -1)
        return st_errorf(ST_EINVAL, "a spare stage object for stage index %d", plan->index);
    st_dp_stage *s = calloc(1, sizeof *s);
    if (s == NULL)
        return st_errorf(ST_ENOMEM, "spare stage");
    s->plan = *plan;
    *out = s;
    return ST_OK;
}

bool st_dp_stage_keeps(const st_model *kept, const st_dp_plan *plan)
{
    return kept != NULL && plan->index >= 0 && st_model_first(kept) == plan->first &&
           st_model_last(kept) == plan->last;
}

st_err st_dp_stage_load(const char *path, const st_dp_plan *plan, st_pool *pool,
                        const st_kernel_ops *ops, st_model *kept, st_dp_stage **out)
{
    *out = NULL;
    if (plan->index < 0 || plan->max_tokens < 1 || plan->max_tokens > ST_DP_MAX_TOKENS)
        return st_errorf(ST_EINVAL, "stage %d with %u tokens per batch cannot be loaded",
                         plan->index, plan->max_tokens);
    st_dp_stage *s = calloc(1, sizeof *s);
    if (s == NULL)
        return st_errorf(ST_ENOMEM, "stage");
    s->plan = *plan;
    st_err e;
    if (st_dp_stage_keeps(kept, plan)) {
        s->model = st_model_ref(kept);
        st_log(ST_LOG_INFO, "model",
               "layers [%lld, %lld): kept the resident weights (%.1f MiB), not loaded again",
               (long long)plan->first, (long long)plan->last,
               (double)st_model_weight_bytes(kept) / (1 << 20));
    } else if ((e = st_model_open(path, plan->first, plan->last, &s->model)) ||
               (e = st_model_place(s->model, ops, pool))) {
        goto fail;
    }
    if ((e = st_stage_ctx_open(s->model, plan->max_tokens, pool, ops, &s->ctx)))
        goto fail;
    const st_hparams *hp = st_model_hparams(s->model);
    s->is_last = st_model_has_head(s->model);
    s->n_embd = hp->n_embd;
    s->n_vocab = hp->n_vocab;
    s->kv_session_bytes = st_kv_bytes(plan->last - plan->first, plan->n_ctx, hp->kv_dim,
                                      plan->kv_dtype);
    size_t T = plan->max_tokens;
    s->hin_cap = T * (size_t)hp->n_embd;
    s->hout_cap = T * (size_t)(s->is_last ? hp->n_vocab : hp->n_embd);
    s->hin = malloc(s->hin_cap * sizeof(float));
    s->hout = malloc(s->hout_cap * sizeof(float));
    s->brow = calloc(T, sizeof *s->brow);
    s->wrow = calloc(T, sizeof *s->wrow);
    s->prow = calloc(T, sizeof *s->prow);
    s->ids = calloc(T, sizeof *s->ids);
    s->rr = calloc(T, sizeof *s->rr);
    s->rrp = calloc(T, sizeof *s->rrp);
    s->rng = calloc(T * ST_RNG_WORDS, sizeof *s->rng);
    s->layer_ns = calloc((size_t)(plan->last - plan->first), sizeof *s->layer_ns);
    if (s->hin == NULL || s->hout == NULL || s->brow == NULL || s->wrow == NULL ||
        s->prow == NULL || s->ids == NULL || s->rr == NULL || s->rrp == NULL || s->rng == NULL ||
        s->layer_ns == NULL) {
        e = st_errorf(ST_ENOMEM, "buffers of stage %d (%u tokens)", plan->index, plan->max_tokens);
        goto fail;
    }
    if (hp->n_expert > 0) { /* per-expert load (Heartbeat.experts) */
        size_t ne = (size_t)(plan->last - plan->first) * (size_t)hp->n_expert;
        s->n_expert = (uint32_t)hp->n_expert;
        s->n_layer_model = (uint32_t)hp->n_layer;
        s->exp_base = calloc(ne, sizeof *s->exp_base);
        s->exp_delta = calloc(ne, sizeof *s->exp_delta);
        if (s->exp_base == NULL || s->exp_delta == NULL) {
            e = st_errorf(ST_ENOMEM, "expert counts of stage %d", plan->index);
            goto fail;
        }
    }
    if (s->is_last) {
        s->lrow = malloc((size_t)hp->n_vocab * sizeof(float));
        if (s->lrow == NULL) {
            e = st_errorf(ST_ENOMEM, "logits row");
            goto fail;
        }
        if ((e = st_sample_scratch_init(&s->scratch, (size_t)hp->n_vocab)))
            goto fail;
    }
    *out = s;
    return ST_OK;
fail:
    st_dp_stage_free(s);
    return e;
}

size_t st_dp_stage_resident(const st_dp_stage *s)
{
    return s != NULL && s->model != NULL ? st_model_resident(s->model) : 0;
}

void st_dp_stage_free(st_dp_stage *s)
{
    if (s == NULL)
        return;
    st_stage_ctx_close(s->ctx);
    st_model_close(s->model);
    st_sample_scratch_free(&s->scratch);
    free(s->hin);
    free(s->hout);
    free(s->lrow);
    free(s->brow);
    free(s->wrow);
    free(s->prow);
    free(s->ids);
    free(s->rr);
    free(s->rrp);
    free(s->rng);
    free(s->layer_ns);
    free(s->exp_base);
    free(s->exp_delta);
    free(s);
}

/* ---- sockets ---- */

#define DP_RECONNECT_MIN_MS 50 /* the PUSH links' redial backoff */
#define DP_RECONNECT_MAX_MS 1000
#define DP_QUEUE_MSGS 16 /* messages the PULL and each PUSH link hold while a peer is slow */
static_assert(ST_DP_ADDR_MAX <= ST_PUSH_LINK_ADDR_MAX, "a plan's address fits a link");

/* dp_point - points link l at addr (push_link.h: a new socket per
 * address), a hello of kind first (msg.h st_msg_link_hello). */
static void dp_point(st_dataplane *dp, st_push_link *l, const char *addr, st_env_kind kind)
{
    nng_msg *hello = NULL;
    st_err e = addr[0] != '\0' ? st_msg_link_hello(&dp->tx, kind, &hello) : ST_OK;
    if (e == ST_OK)
        e = st_push_link_point(l, addr, DP_RECONNECT_MIN_MS, DP_RECONNECT_MAX_MS, hello);
    if (e != ST_OK)
        st_log(ST_LOG_ERROR, "data", "%s", st_errmsg(e));
}

st_err st_dp_open(const st_dp_cfg *cfg, st_worker_shared *sh, st_dataplane **out, int *bound_port)
{
    *out = NULL;
    st_dataplane *dp = calloc(1, sizeof *dp);
    if (dp == NULL)
        return st_errorf(ST_ENOMEM, "data plane");
    dp->sh = sh;
    snprintf(dp->name, sizeof dp->name, "%s", cfg->name ? cfg->name : "worker");
    st_err e;
    int rv;
    size_t max_frame; /* what the largest batch of this model needs (step.h) */
    if ((e = st_step_max_frame(cfg->hidden, ST_DP_MAX_TOKENS, &max_frame)) ||
        (e = st_env_init_mode(&dp->rx, cfg->key, cfg->encrypt, cfg->sender)) ||
        (e = st_env_init_mode(&dp->tx, cfg->key, cfg->encrypt, cfg->sender)) ||
        (e = st_wire_ctx_new(cfg->force_ref, &dp->wire)) ||
        (e = st_wire_zsampler_new(cfg->force_ref, &dp->zs)) || (e = st_sessions_init(&dp->ses, 1)))
        goto fail;
    dp->end_ids = calloc(ST_DP_END_CAP, sizeof *dp->end_ids);
    if (dp->end_ids == NULL) {
        e = st_errorf(ST_ENOMEM, "EndSessions buffer");
        goto fail;
    }
    dp->open = true; /* closing a socket that never opened (id 0) is harmless */
    if ((rv = nng_pull0_open(&dp->pull)) != 0) {
        e = st_err_nng(rv, "data socket");
        goto fail;
    }
    if ((e = st_push_link_open(&dp->res, ST_DP_SEND_MS, DP_QUEUE_MSGS)) != ST_OK)
        goto fail;
    for (int k = 0; k < ST_DP_MAX_NEXT; k++)
        if ((e = st_push_link_open(&dp->next[k], ST_DP_SEND_MS, DP_QUEUE_MSGS)) != ST_OK)
            goto fail;
    nng_socket_set_size(dp->pull, NNG_OPT_RECVMAXSZ, max_frame);
    nng_socket_set_ms(dp->pull, NNG_OPT_RECVTIMEO, ST_DP_POLL_MS);
    nng_socket_set_int(dp->pull, NNG_OPT_RECVBUF, DP_QUEUE_MSGS);
    /* PUSH peers may stay silent before their first frame: no deadline */
    st_pipe_gate_cfg gc = st_pipe_gate_cfg_for("data", max_frame, false);
    if ((e = st_pipe_gate_open(dp->pull, &gc, &dp->gate)) != ST_OK)
        goto fail;
    nng_listener l;
    if ((rv = nng_listener_create(&l, dp->pull, cfg->listen)) != 0) {
        e = st_errorf(ST_ENNG, "--listen %s: %s", cfg->listen, nng_strerror(rv));
        goto fail;
    }
    nng_listener_set_bool(l, NNG_OPT_TCP_NODELAY, true);
    nng_listener_set_size(l, NNG_OPT_RECVMAXSZ, max_frame);
    if ((rv = nng_listener_start(l, 0)) != 0) {
        e = st_errorf(ST_ENNG, "cannot listen on %s: %s", cfg->listen, nng_strerror(rv));
        goto fail;
    }
    if ((rv = nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, bound_port)) != 0) {
        e = st_errorf(ST_ENNG, "bound port of %s: %s", cfg->listen, nng_strerror(rv));
        goto fail;
    }
    *out = dp;
    return ST_OK;
fail:
    st_dp_close(dp);
    return e;
}

/* ---- hand-off ---- */

/* dp_sync - takes a committed stage, EndSessions ids, the throttle and
 * the worker id from the shared state; applies them outside the lock. */
static void dp_sync(st_dataplane *dp)
{
    st_worker_shared *sh = dp->sh;
    st_dp_stage *next = NULL;
    bool have_next;
    uint32_t n_end;
    pthread_mutex_lock(&sh->mu);
    have_next = sh->have_next;
    if (have_next) {
        next = sh->next;
        sh->next = NULL;
        sh->have_next = false;
    }
    n_end = sh->n_end;
    memcpy(dp->end_ids, sh->end_ids, n_end * sizeof *dp->end_ids);
    sh->n_end = 0;
    dp->throttle = sh->throttle;
    dp->worker_id = sh->worker_id;
    pthread_mutex_unlock(&sh->mu);

    for (uint32_t i = 0; i < n_end; i++)
        st_sessions_end(&dp->ses, dp->end_ids[i]);
    if (have_next && next != NULL)
        dp_swap(dp, next);
    if (n_end > 0 || have_next)
        dp_publish_sessions(dp);
}

void dp_publish_sessions(st_dataplane *dp)
{
    size_t per = dp->cur != NULL ? dp->cur->kv_session_bytes : 0;
    uint64_t kvb = (uint64_t)st_sessions_kv_count(&dp->ses) * per; /* allocated, used or kept */
    pthread_mutex_lock(&dp->sh->mu);
    dp->sh->sessions = st_sessions_count(&dp->ses);
    dp->sh->kv_bytes = kvb;
    pthread_mutex_unlock(&dp->sh->mu);
}

void dp_swap(st_dataplane *dp, st_dp_stage *n)
{
    st_dp_stage *old = dp->cur;
    const st_dp_plan *np = &n->plan;
    bool keep = old != NULL && old->model != NULL && n->model != NULL &&
                old->plan.first == np->first && old->plan.last == np->last &&
                old->plan.n_ctx == np->n_ctx && old->plan.kv_dtype == np->kv_dtype;
    if (!keep)
        st_sessions_clear(&dp->ses);
    st_err e;
    if (n->model != NULL && (e = st_sessions_resize(&dp->ses, np->max_sessions)) != ST_OK) {
        st_log(ST_LOG_WARN, "data", "sessions kept at %u slots: %s", dp->ses.cap, st_errmsg(e));
        st_sessions_clear(&dp->ses);
    }
    for (uint32_t k = 0; k < ST_DP_MAX_NEXT; k++) /* a PUSH per worker of the next stage */
        dp_point(dp, &dp->next[k], k < np->n_next ? np->next_addrs[k] : "", ST_ENV_STEP);
    if (np->result_addr[0] != '\0') /* a plan always names one (dm_plan.c checks it) */
        dp_point(dp, &dp->res, np->result_addr, ST_ENV_RESULT);
    if (n->ctx != NULL)
        st_stage_set_hook(n->ctx, dp_hook, dp);
    /* the process's expert totals: allocated with the first MoE stage (one
     * model per worker process: every later stage has its shape) */
    uint64_t *tot = NULL;
    if (n->n_expert > 0 && dp->sh->exp_tot == NULL) /* only this thread sets it */
        tot = calloc((size_t)n->n_layer_model * n->n_expert, sizeof *tot);
    st_latency lat;
    int64_t nl = n->model != NULL ? np->last - np->first : 0;
    if (st_latency_init(&lat, n->model != NULL ? np->first : 0, nl) != ST_OK)
        st_latency_init(&lat, 0, 0); /* cannot fail: no allocation */
    pthread_mutex_lock(&dp->sh->mu);
    st_latency old_lat = dp->sh->lat;
    dp->sh->lat = lat;
    dp->sh->weight_bytes = n->model != NULL ? st_model_weight_bytes(n->model) : 0;
    dp->sh->serving_epoch = np->epoch;
    if (tot != NULL) {
        dp->sh->exp_tot = tot;
        dp->sh->exp_layers = n->n_layer_model;
        dp->sh->n_expert = n->n_expert;
    }
    bool counted = dp->sh->exp_tot != NULL && n->n_expert == dp->sh->n_expert &&
                   n->n_layer_model == dp->sh->exp_layers;
    dp->sh->exp_first = counted ? np->first : 0;
    dp->sh->exp_n = counted ? nl : 0;
    pthread_mutex_unlock(&dp->sh->mu);
    if (n->n_expert > 0 && !counted)
        st_log(ST_LOG_WARN, "data", "expert counts of layers [%lld, %lld) not kept: %s",
               (long long)np->first, (long long)np->last,
               dp->sh->exp_tot == NULL ? "no memory" : "another shape than the first stage's");
    st_latency_fini(&old_lat);
    dp->cur = n;
    st_dp_stage_free(old);
    if (np->index >= 0)
        st_log(ST_LOG_INFO, "data",
               "serving epoch %llu: stage %d of %u (replica %u of %u), "
               "layers [%lld, %lld), %u next worker(s)%s",
               (unsigned long long)np->epoch, np->index, np->n_stages, np->replica, np->n_replicas,
               (long long)np->first, (long long)np->last, np->n_next,
               keep ? " (sessions kept)" : "");
    else
        st_log(ST_LOG_INFO, "data", "epoch %llu: spare (no stage)", (unsigned long long)np->epoch);
}

/* ---- the thread ---- */

static void *dp_main(void *arg)
{
    st_dataplane *dp = arg;
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0); /* the throttle's sleeps are short */
    for (;;) {
        pthread_mutex_lock(&dp->sh->mu);
        bool stop = dp->sh->data_stop;
        pthread_mutex_unlock(&dp->sh->mu);
        if (stop)
            break;
        nng_msg *msg = NULL;
        int rv = nng_recvmsg(dp->pull, &msg, 0);
        /* a stage committed before this frame was sent must be in place
         * before the frame is checked: sync after the receive */
        dp_sync(dp);
        if (rv == NNG_ETIMEDOUT)
            continue;
        if (rv == NNG_ECLOSED)
            break;
        if (rv != 0) {
            st_log(ST_LOG_WARN, "data", "receive: %s", nng_strerror(rv));
            continue;
        }
        dp_frame(dp, msg);
        nng_msg_free(msg);
    }
    return NULL;
}

st_err st_dp_start(st_dataplane *dp, const cpu_set_t *cpus)
{
    pthread_attr_t at;
    if (pthread_attr_init(&at) != 0)
        return st_errorf(ST_EINTERNAL, "thread attributes");
    if (cpus != NULL && pthread_attr_setaffinity_np(&at, sizeof *cpus, cpus) != 0)
        st_log(ST_LOG_INFO, "data", "cannot bind the data thread to the pool's core");
    int rv = pthread_create(&dp->th, &at, dp_main, dp);
    pthread_attr_destroy(&at);
    if (rv != 0)
        return st_err_errno(rv, "starting the data thread");
    dp->started = true;
    return ST_OK;
}

void st_dp_stop(st_dataplane *dp)
{
    if (dp == NULL || !dp->started)
        return;
    pthread_mutex_lock(&dp->sh->mu);
    dp->sh->data_stop = true;
    pthread_mutex_unlock(&dp->sh->mu);
    pthread_join(dp->th, NULL);
    dp->started = false;
}

void st_dp_gate_counts(st_dataplane *dp, st_pipe_gate_counts *sum)
{
    if (dp != NULL)
        st_pipe_gate_add_counts(dp->gate, sum);
}

void st_dp_close(st_dataplane *dp)
{
    if (dp == NULL)
        return;
    st_dp_stop(dp);
    if (dp->open) {
        nng_close(dp->pull);
        st_pipe_gate_close(dp->gate);
        for (int k = 0; k < ST_DP_MAX_NEXT; k++)
            st_push_link_close(&dp->next[k]);
        st_push_link_close(&dp->res);
    }
    st_sessions_fini(&dp->ses);
    st_dp_stage_free(dp->cur);
    st_wire_ctx_free(dp->wire);
    st_wire_zsampler_free(dp->zs);
    st_env_fini(&dp->rx);
    st_env_fini(&dp->tx);
    free(dp->end_ids);
    free(dp);
}
