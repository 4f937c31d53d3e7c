/* sched_req.c - the requests of the scheduler (see scheduler.h and
 * sched_impl.h): validation on submit, the per-request streaming text
 * (its generation, common/text/gen.h, and token text offsets), the end of a
 * request with its finish reason, views for Poll, cancel.
 *
 * A request ends exactly once (sched_finish): on a stop of its generation
 * (common/text/gen.h, the rules of `strata run`: EOS or EOT "eos", a stop
 * string "stop", its token limit or a full context "length"; the id that
 * stops is part of its ids, and its text), an error, a cancel or shutdown.
 * The generation's text is ended then, so a character left incomplete
 * shows as U+FFFD at the very end.
 *
 * Ids (sched_new_id): session and batch ids come from the configured
 * generator, random 64-bit numbers by default, so a blind guess names a
 * live one with probability (live ids) / 2^64 (a forged STEP or result
 * must name them); a draw that is 0 or names a
 * live session or a batch in flight is drawn again. */
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/sched/sched_impl.h"

/* sched_id_taken - whether id is 0, a live session's or a batch's in flight. */
static bool sched_id_taken(const st_sched *s, uint64_t id)
{
    if (id == 0)
        return true;
    for (uint32_t i = 0; i < s->cfg.max_sessions; i++)
        if (s->sess[i].used && s->sess[i].id == id)
            return true;
    for (uint32_t i = 0; i < s->cfg.max_in_flight; i++)
        if (s->batches[i].used && s->batches[i].b.id == id)
            return true;
    return false;
}

uint64_t sched_new_id(st_sched *s, st_sched_id_kind kind)
{
    for (int k = 0; k < ST_SCHED_ID_TRIES; k++) {
        uint64_t id;
        if (s->cfg.new_id != NULL)
            id = s->cfg.new_id(s->cfg.id_arg, kind);
        else
            randombytes_buf(&id, sizeof id);
        if (!sched_id_taken(s, id))
            return id;
    }
    return 0;
}

void sched_req_free(sched_req *r)
{
    if (r == NULL)
        return;
    st_gen_close(r->gen);
    free(r->prompt);
    free(r->ids);
    free(r->times);
    free(r->text_off);
    free(r->text);
    free(r->logits);
    free(r);
}

/* ---- requests ---- */

/* sched_unknown - ST_ENOENT for request id, which is not in the table: an
 * id at or below this scheduler's id base was made by an earlier
 * coordinator (ids count up from its start time), whose state is gone. */
static st_err sched_unknown(const st_sched *s, uint64_t id)
{
    if (id <= s->cfg.id_base)
        return st_errorf(ST_ENOENT,
                         "request %llu was made before this coordinator started (it "
                         "restarted, and the request's state is gone): submit it again",
                         (unsigned long long)id);
    return st_errorf(ST_ENOENT, "request %llu is unknown or expired", (unsigned long long)id);
}

sched_req *sched_find(const st_sched *s, uint64_t id)
{
    for (size_t i = 0; i < s->n_req; i++)
        if (s->req[i]->id == id)
            return s->req[i];
    return NULL;
}

size_t sched_live(const st_sched *s)
{
    size_t n = 0;
    for (size_t i = 0; i < s->n_req; i++)
        n += s->req[i]->state != RQ_DONE;
    return n;
}

/* sched_drop - frees request i (finished, or never started). */
void sched_drop(st_sched *s, size_t i)
{
    sched_req *r = s->req[i];
    if (r->sess)
        r->sess->req = NULL;
    sched_req_free(r);
    memmove(&s->req[i], &s->req[i + 1], (s->n_req - i - 1) * sizeof *s->req);
    s->n_req--;
}

static st_err sched_text_put(sched_req *r, const char *b, size_t n)
{
    if (n == 0)
        return ST_OK;
    if (r->text_len + n > r->text_cap) {
        size_t cap = r->text_cap ? r->text_cap : 256;
        while (cap < r->text_len + n)
            cap *= 2;
        char *t = realloc(r->text, cap);
        if (t == NULL)
            return st_errorf(ST_ENOMEM, "text of request %llu", (unsigned long long)r->id);
        r->text = t;
        r->text_cap = cap;
    }
    memcpy(r->text + r->text_len, b, n);
    r->text_len += n;
    return ST_OK;
}

/* sched_finish - ends r with reason (and an error for "error" and
 * "cancelled"); flushes its detokenizer. */
void sched_finish(st_sched *s, sched_req *r, const char *reason, st_err err, const char *msg,
                  uint64_t now)
{
    (void)s; /* unused: r's text is its own generation's (r->gen) */
    if (r->state == RQ_DONE)
        return;
    const bool ran = r->state == RQ_RUNNING;
    r->state = RQ_DONE;
    r->finish = reason;
    r->err = err;
    snprintf(r->err_msg, sizeof r->err_msg, "%s", msg ? msg : "");
    r->done_ns = now;
    if (ran) { /* a queued request has no text to end */
        const char *rest;
        size_t n_rest;
        st_gen_finish(r->gen, &rest, &n_rest);
        sched_text_put(r, rest, n_rest);
    }
}

static st_err sched_validate(st_sched *s, const st_gen_req *g)
{
    const st_sched_cfg *c = &s->cfg;
    if (g->n_prompt == 0)
        return st_errorf(ST_EINVAL, "the prompt is empty");
    for (size_t i = 0; i < g->n_prompt; i++)
        if (g->prompt[i] < 0 || (uint32_t)g->prompt[i] >= c->n_vocab)
            return st_errorf(ST_ERANGE, "prompt_ids[%zu] = %d is outside the vocabulary of %u", i,
                             g->prompt[i], c->n_vocab);
    if (g->max_tokens == 0)
        return st_errorf(ST_EINVAL, "max_tokens is 0; it must be in 1..%u (the context)", c->n_ctx);
    if (g->max_tokens > c->n_ctx)
        return st_errorf(ST_EINVAL, "max_tokens %u exceeds the context of %u", g->max_tokens,
                         c->n_ctx);
    if (g->n_prompt >= c->n_ctx)
        return st_errorf(ST_EINVAL, "the prompt of %zu tokens does not fit the context of %u",
                         g->n_prompt, c->n_ctx);
    st_err e = st_sampler_params_validate(&g->sp);
    if (e != ST_OK)
        return e;
    if (g->n_stop > ST_SCHED_MAX_STOP)
        return st_errorf(ST_EINVAL, "%zu stop strings; at most %d", g->n_stop, ST_SCHED_MAX_STOP);
    for (size_t i = 0; i < g->n_stop; i++) {
        size_t n = g->stop[i] ? strlen(g->stop[i]) : 0;
        if (n == 0 || n > ST_SCHED_MAX_STOP_LEN)
            return st_errorf(ST_EINVAL, "stop[%zu] has %zu bytes; it must have 1..%d", i, n,
                             ST_SCHED_MAX_STOP_LEN);
    }
    if (g->want_logits &&
        (uint64_t)g->max_tokens * c->n_vocab * sizeof(float) > ST_SCHED_MAX_LOGITS_BYTES)
        return st_errorf(ST_EINVAL,
                         "want_logits with max_tokens %u and %u ids needs %llu bytes; "
                         "at most %llu",
                         g->max_tokens, c->n_vocab,
                         (unsigned long long)g->max_tokens * c->n_vocab * sizeof(float),
                         (unsigned long long)ST_SCHED_MAX_LOGITS_BYTES);
    if (sched_live(s) >= c->max_requests) {
        s->st.busy_refused++;
        return st_errorf(ST_EBUSY, "busy: %u requests are in progress (the limit); try later",
                         c->max_requests);
    }
    if (g->client_session != 0)
        for (size_t i = 0; i < s->n_req; i++)
            if (s->req[i]->state != RQ_DONE && s->req[i]->client_session == g->client_session)
                return st_errorf(ST_EBUSY, "session %llu is busy with request %llu",
                                 (unsigned long long)g->client_session,
                                 (unsigned long long)s->req[i]->id);
    return ST_OK;
}

st_err st_sched_submit(st_sched *s, const st_gen_req *g, uint64_t now_ns, uint64_t *req_id)
{
    st_err e = sched_validate(s, g);
    if (e != ST_OK)
        return e;
    if (s->n_req == s->cap_req) { /* the oldest finished request makes room */
        size_t i = 0;
        while (i < s->n_req && s->req[i]->state != RQ_DONE)
            i++;
        if (i == s->n_req)
            return st_errorf(ST_EBUSY, "request table full");
        sched_drop(s, i);
    }
    sched_req *r = calloc(1, sizeof *r);
    if (r == NULL)
        return st_errorf(ST_ENOMEM, "request");
    r->prompt = malloc(g->n_prompt * sizeof *r->prompt);
    r->ids = malloc(g->max_tokens * sizeof *r->ids);
    r->times = malloc(g->max_tokens * sizeof *r->times);
    r->text_off = calloc((size_t)g->max_tokens + 1, sizeof *r->text_off);
    if (!r->prompt || !r->ids || !r->times || !r->text_off) {
        sched_req_free(r);
        return st_errorf(ST_ENOMEM, "request");
    }
    st_gen_params gp = {.sp = g->sp,
                        .max_tokens = g->max_tokens,
                        .eos_id = s->cfg.eos_id,
                        .eot_id = s->cfg.tok ? st_tok_eot(s->cfg.tok) : -1,
                        .stop = g->stop,
                        .n_stop = g->n_stop,
                        .text = ST_GEN_TEXT_AFTER};
    if ((e = st_gen_open(&gp, s->cfg.tok, s->cfg.n_vocab, s->cfg.n_ctx, g->prompt, g->n_prompt,
                         &r->gen)) != ST_OK) {
        sched_req_free(r);
        return e;
    }
    memcpy(r->prompt, g->prompt, g->n_prompt * sizeof *r->prompt);
    r->n_prompt = (uint32_t)g->n_prompt;
    r->id = ++s->next_req;
    r->state = RQ_QUEUED;
    r->client_session = g->client_session;
    r->max_tokens = g->max_tokens;
    r->sp = g->sp;
    r->want_logits = g->want_logits;
    r->finish = "";
    r->created_ns = r->progress_ns = r->polled_ns = now_ns;
    r->max_queue_ns = g->max_queue_ns == 0 || g->max_queue_ns > s->cfg.queue_timeout_ns
                          ? s->cfg.queue_timeout_ns
                          : g->max_queue_ns;
    s->req[s->n_req++] = r;
    *req_id = r->id;
    return ST_OK;
}

/* sched_finish_reason - the finish reason the API reports for a stop. */
static const char *sched_finish_reason(st_gen_stop stop)
{
    switch (stop) {
    case ST_GEN_EOS:
        return "eos";
    case ST_GEN_STOP_STRING:
        return "stop";
    case ST_GEN_LENGTH:
    case ST_GEN_CTX_FULL:
        return "length";
    case ST_GEN_GO:
        break;
    }
    return NULL;
}

/* sched_append - appends sampled id tok to r (history, ids, text, logits)
 * and ends r on a stop of its generation (common/text/gen.h). */
void sched_append(st_sched *s, sched_req *r, sched_sess *ss, const st_sched_result_row *rr,
                  uint64_t now)
{
    int32_t tok = rr->token;
    ss->hist[ss->n_hist++] = tok;
    memcpy(ss->rng, rr->rng, sizeof ss->rng);
    if (r->want_logits) {
        float *l = realloc(r->logits, ((size_t)r->n_ids + 1) * s->cfg.n_vocab * sizeof *l);
        if (l == NULL) {
            sched_finish(s, r, "error", ST_ENOMEM, "out of memory for logits", now);
            return;
        }
        r->logits = l;
        memcpy(l + (size_t)r->n_ids * s->cfg.n_vocab, rr->logits, s->cfg.n_vocab * sizeof *l);
    }
    r->times[r->n_ids] = now;
    r->ids[r->n_ids++] = tok;
    st_gen_tok t;
    st_err e = st_gen_accept(r->gen, tok, false, &t);
    if (e != ST_OK) {
        sched_finish(s, r, "error", e, st_errdetail(), now);
        return;
    }
    if (sched_text_put(r, t.text, t.len) != ST_OK) {
        sched_finish(s, r, "error", ST_ENOMEM, "out of memory for text", now);
        return;
    }
    r->text_off[r->n_ids] = (uint32_t)r->text_len;
    r->progress_ns = now;
    r->retries = r->requeues = 0;
    if (t.stop != ST_GEN_GO)
        sched_finish(s, r, sched_finish_reason(t.stop), ST_OK, NULL, now);
}

st_err st_sched_cancel(st_sched *s, uint64_t req_id, uint64_t now_ns)
{
    sched_req *r = sched_find(s, req_id);
    if (r == NULL)
        return sched_unknown(s, req_id);
    if (r->state == RQ_DONE)
        return ST_OK;
    sched_finish(s, r, "cancelled", ST_ECANCELED, "cancelled by the client", now_ns);
    if (r->sess)
        sched_settle(s, r->sess, now_ns);
    return ST_OK;
}

st_err st_sched_delivered(st_sched *s, uint64_t req_id, uint64_t now_ns)
{
    sched_req *r = sched_find(s, req_id);
    if (r == NULL)
        return sched_unknown(s, req_id);
    if (r->state == RQ_DONE && r->delivered_ns == 0)
        r->delivered_ns = now_ns ? now_ns : 1;
    return ST_OK;
}

st_err st_sched_touch(st_sched *s, uint64_t req_id, uint64_t now_ns)
{
    sched_req *r = sched_find(s, req_id);
    if (r == NULL)
        return sched_unknown(s, req_id);
    if (now_ns > r->polled_ns)
        r->polled_ns = now_ns;
    return ST_OK;
}

st_err st_sched_view(const st_sched *s, uint64_t req_id, st_req_view *v)
{
    const sched_req *r = sched_find(s, req_id);
    if (r == NULL)
        return sched_unknown(s, req_id);
    v->id = r->id;
    v->done = r->state == RQ_DONE;
    v->finish = r->finish;
    v->err = r->err;
    v->err_msg = r->err_msg;
    v->n_prompt = r->n_prompt;
    v->n_ids = r->n_ids;
    v->ids = r->ids;
    v->text = r->text ? r->text : "";
    v->text_off = r->text_off;
    v->text_len = r->text_len;
    v->logits = r->logits;
    v->want_logits = r->want_logits;
    v->n_vocab = s->cfg.n_vocab;
    v->times = r->times;
    v->steps = r->steps;
    v->missed = r->missed;
    v->reused = r->reused;
    v->submit_ns = r->created_ns;
    v->start_ns = r->start_ns;
    return ST_OK;
}

size_t st_sched_n_requests(const st_sched *s) { return sched_live(s); }
