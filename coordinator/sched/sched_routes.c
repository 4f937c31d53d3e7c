/* sched_routes.c - sessions and routes (see scheduler.h, "Routes" in
 * scheduler.c's design notes): which route a new session takes, how a new
 * plan re-pins the sessions, and which of them keep their KV across a
 * plan switch.
 *
 * A session's KV lives on the workers of its route. A new session takes
 * the least-loaded route. At a plan switch the coordinator first says
 * which old routes run every layer on the same workers as a new route
 * (st_sched_keep_kv): their sessions move to that route keeping their
 * cached length and stay there; every other session forgets its KV and is
 * spread over the new routes by st_sched_set_routes, re-prefilling from
 * its history.
 *
 * Also the scheduler's side of the test-only step gate (hold.h): setting
 * it and listing the sessions it parks (st_sched_form skips them through
 * sched_parked, so a parked session stays pinned and is re-routed at a
 * switch like any session between steps). */
#include <string.h>

#include "coordinator/sched/sched_impl.h"

/* sched_route_load - running sessions (x 2^16) plus all sessions on route
 * r: the least loaded route takes the next session. */
static uint64_t sched_route_load(const st_sched *s, uint32_t r)
{
    uint64_t run = 0, all = 0;
    for (uint32_t i = 0; i < s->cfg.max_sessions; i++) {
        const sched_sess *ss = &s->sess[i];
        if (!ss->used || ss->route != r)
            continue;
        all++;
        run += ss->req != NULL && ss->req->state == RQ_RUNNING;
    }
    return (run << 16) + all;
}

uint32_t sched_least_loaded(const st_sched *s)
{
    uint32_t best = 0;
    uint64_t best_load = UINT64_MAX;
    for (uint32_t r = 0; r < s->n_routes; r++) {
        uint64_t l = sched_route_load(s, r);
        if (l < best_load) {
            best_load = l;
            best = r;
        }
    }
    return best;
}

st_err st_sched_set_routes(st_sched *s, uint32_t n_routes)
{
    if (n_routes == 0 || n_routes > ST_SCHED_MAX_ROUTES)
        return st_errorf(ST_EINVAL, "scheduler: %u routes; 1..%d are allowed", n_routes,
                         ST_SCHED_MAX_ROUTES);
    s->n_routes = n_routes;
    memset(s->route_batches, 0, sizeof s->route_batches);
    uint32_t count[ST_SCHED_MAX_ROUTES] = {0};
    for (uint32_t i = 0; i < s->cfg.max_sessions; i++) { /* in flight or kept: they stay */
        sched_sess *ss = &s->sess[i];
        if (ss->used && (ss->in_flight || ss->route_kept)) {
            if (ss->route >= n_routes) {
                ss->route %= n_routes;
                ss->n_cached = 0;
            }
            count[ss->route]++;
        }
    }
    for (uint32_t i = 0; i < s->cfg.max_sessions; i++) {
        sched_sess *ss = &s->sess[i];
        if (!ss->used || ss->in_flight || ss->route_kept)
            continue;
        uint32_t best = 0;
        for (uint32_t r = 1; r < n_routes; r++)
            if (count[r] < count[best])
                best = r;
        if (best != ss->route)
            ss->n_cached = 0; /* its KV is on another route's workers */
        ss->route = best;
        count[best]++;
    }
    for (uint32_t i = 0; i < s->cfg.max_sessions; i++)
        s->sess[i].route_kept = false;
    return ST_OK;
}

int st_sched_route_of(const st_sched *s, uint64_t session_id)
{
    for (uint32_t i = 0; i < s->cfg.max_sessions; i++)
        if (s->sess[i].used && s->sess[i].id == session_id)
            return (int)s->sess[i].route;
    return -1;
}

void st_sched_forget_kv(st_sched *s)
{
    for (uint32_t i = 0; i < s->cfg.max_sessions; i++) {
        s->st.kv_reprefilled += s->sess[i].used && s->sess[i].n_cached > 0;
        s->sess[i].n_cached = 0;
    }
}

void st_sched_keep_kv(st_sched *s, const int32_t *map, uint32_t n_old)
{
    for (uint32_t i = 0; i < s->cfg.max_sessions; i++) {
        sched_sess *ss = &s->sess[i];
        bool has = ss->used && ss->n_cached > 0;
        if (ss->route < n_old && map[ss->route] >= 0) {
            ss->route = (uint32_t)map[ss->route];
            ss->route_kept = ss->n_cached > 0;
            s->st.kv_kept += has;
        } else {
            ss->n_cached = 0;
            s->st.kv_reprefilled += has;
        }
    }
}

/* ---- the test-only step gate (hold.h) ---- */

void st_sched_set_hold(st_sched *s, const st_hold *h) { s->hold = *h; }

void st_sched_get_hold(const st_sched *s, st_hold *h) { *h = s->hold; }

size_t st_sched_held(const st_sched *s, st_held *out, size_t cap)
{
    size_t n = 0;
    for (uint32_t i = 0; i < s->cfg.max_sessions; i++) {
        const sched_sess *ss = &s->sess[i];
        if (!ss->used || ss->req == NULL || ss->req->state != RQ_RUNNING || ss->in_flight ||
            !sched_parked(s, ss))
            continue;
        if (n < cap)
            out[n] = (st_held){.request_id = ss->req->id,
                               .session_id = ss->id,
                               .tokens = ss->req->n_ids,
                               .route = ss->route};
        n++;
    }
    return n;
}
