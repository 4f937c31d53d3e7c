/* links.c - the link matrix (see links.h).
 *
 * Design. Workers measure the links they send over (probe.h on the worker:
 * small and large probes to each peer's control socket) and report them in
 * every heartbeat; the coordinator keeps only the members' last heartbeats
 * and rebuilds the matrix when it needs one (a replan, a dry run, a
 * status), so nothing here holds state. The direction matters: a -> b is
 * what a measured sending to b (a rate limit on a's egress shows on a -> b
 * only), and that is the direction of an activation from a stage on a to
 * the next on b. A pair nobody measured yet keeps the earlier estimate,
 * marked "assumed" wherever it is shown. Reports are checked (INV-3) and
 * a bad one is treated as absent, never trusted. */
#include "coordinator/planner/links.h"

#include <math.h>

bool st_link_obs_valid(const st_link_obs *o, double max_age_s)
{
    return o->from != 0 && o->to != 0 && o->from != o->to && o->samples > 0 &&
           isfinite(o->latency_s) && o->latency_s >= 0 && o->latency_s <= ST_LINK_LAT_MAX_S &&
           isfinite(o->bw) && o->bw >= ST_LINK_BW_MIN && o->bw <= ST_LINK_BW_MAX &&
           isfinite(o->age_s) && o->age_s >= 0 && o->age_s <= max_age_s;
}

/* lk_index - position of id in ids, or n. */
static size_t lk_index(const uint64_t *ids, size_t n, uint64_t id)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] == id)
            return i;
    return n;
}

size_t st_links_fill(const uint64_t *ids, size_t n, const double *rtt_ms, double bw_assumed,
                     const st_link_obs *obs, size_t n_obs, double max_age_s, st_link *out)
{
    for (size_t a = 0; a < n; a++)
        for (size_t b = 0; b < n; b++)
            out[a * n + b] = (st_link){.latency_s = a == b ? 0 : (rtt_ms[a] + rtt_ms[b]) / 4 * 1e-3,
                                       .bw = bw_assumed};
    size_t measured = 0;
    for (size_t i = 0; i < n_obs; i++) {
        const st_link_obs *o = &obs[i];
        if (!st_link_obs_valid(o, max_age_s))
            continue;
        size_t a = lk_index(ids, n, o->from), b = lk_index(ids, n, o->to);
        if (a == n || b == n)
            continue;
        st_link *l = &out[a * n + b];
        if (l->measured && l->age_s <= o->age_s)
            continue; /* a fresher report of the same pair won */
        measured += !l->measured;
        *l = (st_link){.latency_s = o->latency_s,
                       .bw = o->bw,
                       .measured = true,
                       .samples = o->samples,
                       .age_s = o->age_s};
    }
    return measured;
}
