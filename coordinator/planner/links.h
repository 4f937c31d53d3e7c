/* links.h - the coordinator's link matrix (docs/placement.md, "Links"):
 * worker-to-worker latency and bandwidth for the planner, measured by the
 * workers themselves (LinkMeasure in their heartbeats) where available
 * and assumed from the coordinator's own control round trips elsewhere.
 * Pure: no I/O, no clock, no global state. */
#ifndef ST_COORD_LINKS_H
#define ST_COORD_LINKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ST_LINK_MAX_AGE_S 600.0 /* older measurements are not used */
#define ST_LINK_BW_MIN 1.0e5    /* bytes/s: sane bounds of a reported bandwidth */
#define ST_LINK_BW_MAX 1.0e11
#define ST_LINK_LAT_MAX_S 10.0 /* a reported latency above this is not believed */

/* One worker's report about its link to another (from -> to). */
typedef struct st_link_obs {
    uint64_t from, to;
    double latency_s;
    double bw; /* bytes/s */
    uint32_t samples;
    double age_s; /* at the time of use */
} st_link_obs;

/* One entry of the matrix. */
typedef struct st_link {
    double latency_s;
    double bw;
    bool measured;    /* false: assumed */
    uint32_t samples; /* of the measurement (0 when assumed) */
    double age_s;
} st_link;

/* st_link_obs_valid - finite latency in [0, ST_LINK_LAT_MAX_S], bandwidth
 * in [ST_LINK_BW_MIN, ST_LINK_BW_MAX], age in [0, max_age_s], samples > 0,
 * from != to, neither id 0. */
bool st_link_obs_valid(const st_link_obs *o, double max_age_s);

/* st_links_fill - the n x n matrix out (row a: from ids[a], column b: to
 * ids[b]) from n_obs observations: a pair gets its freshest valid
 * observation (st_link_obs_valid with max_age_s), else the assumption
 * latency (rtt_ms[a] + rtt_ms[b]) / 4 ms (the coordinator's round trips to
 * both ends, halved twice: one way, and a worker-to-worker hop is taken to
 * cost half of the two legs through the coordinator) and bandwidth
 * bw_assumed. The diagonal is latency 0, bw_assumed, not measured.
 * Returns how many off-diagonal pairs are measured. */
size_t st_links_fill(const uint64_t *ids, size_t n, const double *rtt_ms, double bw_assumed,
                     const st_link_obs *obs, size_t n_obs, double max_age_s, st_link *out);

#endif
