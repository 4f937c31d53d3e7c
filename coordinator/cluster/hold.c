/* hold.c - the admin side of the test-only step gate (hold.h,
 * docs/cluster.md "Hold (test hooks)"): the HoldRequest handler and the
 * HoldState of replies and `strata status`.
 *
 * Contract: a HoldRequest is refused with ST_EINVAL, changing nothing,
 * unless the coordinator was started with --test-hooks; the gate then
 * never turns on, and status carries no HoldState. With --test-hooks,
 * HoldRequest{release} opens the gate and HoldRequest{after_tokens,
 * request_id} sets (or moves) it; either answers with the HoldState, the
 * gate as set and the requests it parks now (and the batches in flight,
 * so a security test can forge the result of one). The event loop forms the
 * next batches after every request (coord_pump), so a release takes
 * effect at once. */
#include <stdio.h>
#include <stdlib.h>

#include "common/base/log.h"
#include "common/wire/msg.h"
#include "coordinator/coord_impl.h"

#define HOLD "hold"

/* hold_in_flight - the batches in flight into hs (arrays freed by
 * coord_hold_pb_free through in_flight[0]). */
static st_err hold_in_flight(const st_coord *c, Strata__HoldState *hs)
{
    size_t n = st_sched_in_flight(c->sched), rows = 0;
    if (n == 0)
        return ST_OK;
    const st_sched_batch **bs = calloc(n, sizeof *bs);
    if (bs == NULL)
        return st_errorf(ST_ENOMEM, "%zu batches in flight", n);
    n = st_sched_batches(c->sched, bs, n);
    for (size_t i = 0; i < n; i++)
        rows += bs[i]->n_rows;
    Strata__InFlightBatch *fv = calloc(n, sizeof *fv);
    Strata__InFlightBatch **fp = calloc(n, sizeof *fp);
    uint64_t *sid = calloc(rows ? rows : 1, sizeof *sid);
    if (fv == NULL || fp == NULL || sid == NULL) {
        free(bs);
        free(fv);
        free(fp);
        free(sid);
        return st_errorf(ST_ENOMEM, "%zu batches in flight", n);
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        strata__in_flight_batch__init(&fv[i]);
        fv[i].batch_id = bs[i]->id;
        fv[i].route = bs[i]->route;
        fv[i].session_ids = sid + k;
        fv[i].n_session_ids = bs[i]->n_rows;
        for (uint32_t r = 0; r < bs[i]->n_rows; r++)
            sid[k++] = bs[i]->rows[r].session_id;
        fp[i] = &fv[i];
    }
    free(bs);
    hs->n_in_flight = n;
    hs->in_flight = fp;
    return ST_OK;
}

st_err coord_hold_pb(const st_coord *c, Strata__HoldState **out)
{
    *out = NULL;
    if (!c->cfg.test_hooks)
        return ST_OK;
    st_hold h;
    st_sched_get_hold(c->sched, &h);
    size_t n = st_sched_held(c->sched, NULL, 0);
    Strata__HoldState *hs = calloc(1, sizeof *hs);
    Strata__HeldRequest *hv = calloc(n ? n : 1, sizeof *hv);
    Strata__HeldRequest **hp = calloc(n ? n : 1, sizeof *hp);
    st_held *held = calloc(n ? n : 1, sizeof *held);
    if (hs == NULL || hv == NULL || hp == NULL || held == NULL) {
        free(hs);
        free(hv);
        free(hp);
        free(held);
        return st_errorf(ST_ENOMEM, "hold state of %zu requests", n);
    }
    strata__hold_state__init(hs);
    hs->on = h.on;
    hs->after_tokens = h.after_tokens;
    hs->request_id = coord_auth_ext(c, h.request_id); /* ids as clients know them */
    n = st_sched_held(c->sched, held, n);
    for (size_t i = 0; i < n; i++) {
        strata__held_request__init(&hv[i]);
        hv[i].request_id = coord_auth_ext(c, held[i].request_id);
        hv[i].session_id = held[i].session_id;
        hv[i].tokens = held[i].tokens;
        hv[i].route = held[i].route;
        hp[i] = &hv[i];
    }
    free(held);
    if (n == 0) { /* coord_hold_pb_free finds the array through held[0] */
        free(hv);
        free(hp);
        hp = NULL;
    }
    hs->n_held = n;
    hs->held = hp;
    st_err e = hold_in_flight(c, hs);
    if (e != ST_OK) {
        coord_hold_pb_free(hs);
        return e;
    }
    *out = hs;
    return ST_OK;
}

void coord_hold_pb_free(Strata__HoldState *h)
{
    if (h == NULL)
        return;
    if (h->n_held > 0)
        free(h->held[0]); /* the HeldRequest array */
    free(h->held);
    if (h->n_in_flight > 0) {
        free(h->in_flight[0]->session_ids); /* one array for every batch */
        free(h->in_flight[0]);              /* the InFlightBatch array */
    }
    free(h->in_flight);
    free(h);
}

void coord_api_hold(st_coord *c, uint32_t slot, const Strata__HoldRequest *q)
{
    if (!c->cfg.test_hooks) {
        coord_api_reply_error(c, slot, ST_EINVAL,
                              "hold is a test hook: this coordinator was not "
                              "started with --test-hooks");
        return;
    }
    uint64_t id = q->release || q->request_id == 0 ? 0 : coord_auth_int(c, q->request_id);
    if (!q->release && q->request_id != 0 && id == 0) {
        char text[120];
        snprintf(text, sizeof text, "request %llu is unknown or expired",
                 (unsigned long long)q->request_id);
        coord_api_reply_error(c, slot, ST_ENOENT, text);
        return;
    }
    st_hold h = {.on = !q->release,
                 .after_tokens = q->release ? 0 : q->after_tokens,
                 .request_id = id};
    st_sched_set_hold(c->sched, &h);
    if (h.on && h.request_id)
        st_log(ST_LOG_INFO, HOLD, "test hook: request %llu is parked once it has %u generated ids",
               (unsigned long long)q->request_id, h.after_tokens);
    else if (h.on)
        st_log(ST_LOG_INFO, HOLD,
               "test hook: every request is parked once it has %u generated "
               "ids",
               h.after_tokens);
    else
        st_log(ST_LOG_INFO, HOLD, "test hook: the step gate is released");
    Strata__HoldState *hs;
    if (coord_hold_pb(c, &hs) != ST_OK) {
        coord_api_reply_error(c, slot, ST_ENOMEM, "hold state");
        return;
    }
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_HOLD_STATE;
    m.hold_state = hs;
    coord_api_send(c, slot, &m); /* sealed with the asker's credential (api.c) */
    coord_hold_pb_free(hs);
}
