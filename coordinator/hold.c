/* hold.c - the admin side of the test-only step gate (hold.h,
 * docs/cluster.md "Hold (test hooks)"): the HoldRequest handler and the
 * HoldState of replies and `strata status`.
 *
 * Contract: a HoldRequest is refused with ST_EINVAL, changing nothing,
 * unless the coordinator was started with --test-hooks; the gate then
 * never turns on, and status carries no HoldState. With --test-hooks,
 * HoldRequest{release} opens the gate and HoldRequest{after_tokens,
 * request_id} sets (or moves) it; either answers with the HoldState, the
 * gate as set and the requests it parks now. The event loop forms the
 * next batches after every request (coord_pump), so a release takes
 * effect at once. */
#include <stdio.h>
#include <stdlib.h>

#include "common/log.h"
#include "common/msg.h"
#include "coordinator/coord_impl.h"

#define HOLD "hold"

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
    free(h);
}

void coord_api_hold(st_coord *c, uint32_t slot, const Strata__HoldRequest *q)
{
    if (!c->cfg.test_hooks) {
        st_api_reply_error(c, slot, ST_EINVAL, "hold is a test hook: this coordinator was not "
                           "started with --test-hooks");
        return;
    }
    uint64_t id = q->release || q->request_id == 0 ? 0 : coord_auth_int(c, q->request_id);
    if (!q->release && q->request_id != 0 && id == 0) {
        char text[120];
        snprintf(text, sizeof text, "request %llu is unknown or expired",
                 (unsigned long long)q->request_id);
        st_api_reply_error(c, slot, ST_ENOENT, text);
        return;
    }
    st_hold h = {.on = !q->release, .after_tokens = q->release ? 0 : q->after_tokens,
                 .request_id = id};
    st_sched_set_hold(c->sched, &h);
    if (h.on && h.request_id)
        st_log(ST_LOG_INFO, HOLD, "test hook: request %llu is parked once it has %u generated ids",
               (unsigned long long)q->request_id, h.after_tokens);
    else if (h.on)
        st_log(ST_LOG_INFO, HOLD, "test hook: every request is parked once it has %u generated "
               "ids", h.after_tokens);
    else
        st_log(ST_LOG_INFO, HOLD, "test hook: the step gate is released");
    Strata__HoldState *hs;
    if (coord_hold_pb(c, &hs) != ST_OK) {
        st_api_reply_error(c, slot, ST_ENOMEM, "hold state");
        return;
    }
    Strata__Msg m = STRATA__MSG__INIT;
    m.body_case = STRATA__MSG__BODY_HOLD_STATE;
    m.hold_state = hs;
    st_api_send(c, slot, &m); /* sealed with the asker's credential (api.c) */
    coord_hold_pb_free(hs);
}
