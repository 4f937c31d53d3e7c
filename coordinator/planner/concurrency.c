/* concurrency.c - the pipeline depth rule of concurrency.h. */
#include "coordinator/planner/concurrency.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* conc_root - union-find root of i (path halving) */
static size_t conc_root(size_t *up, size_t i)
{
    while (up[i] != i) {
        up[i] = up[up[i]];
        i = up[i];
    }
    return i;
}

/* conc_cpus - w's CPU list, or NULL when unknown or (noted in *bad) unparseable */
static const char *conc_cpus(const st_conc_worker *w, const char **bad)
{
    if (w->cpus == NULL || w->cpus[0] == '\0')
        return NULL;
    bool self;
    if (st_host_cpus_intersect(w->cpus, w->cpus, &self) != ST_OK) {
        *bad = w->name;
        return NULL;
    }
    return w->cpus;
}

/* conc_share - whether a and b (with their lists ca, cb from conc_cpus)
 * compute on common cores (see the rule); a list that cannot be compared
 * counts as sharing, as an unknown one does */
static bool conc_share(const st_conc_worker *a, const char *ca, const st_conc_worker *b,
                       const char *cb)
{
    if (a->host_id == NULL || b->host_id == NULL ||
        memcmp(a->host_id, b->host_id, ST_HOST_ID_BYTES) != 0)
        return false;
    bool x = true;
    return ca == NULL || cb == NULL || st_host_cpus_intersect(ca, cb, &x) != ST_OK || x;
}

/* conc_say - appends to why (a full buffer keeps what fits, terminated) */
static void conc_say(char *why, size_t cap, size_t *at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void conc_say(char *why, size_t cap, size_t *at, const char *fmt, ...)
{
    if (why == NULL || *at >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(why + *at, cap - *at, fmt, ap);
    va_end(ap);
    *at = k < 0 ? cap : *at + (size_t)k;
}

uint32_t st_conc_depth(const st_conc_worker *w, size_t n, uint32_t cap, char *why, size_t why_cap)
{
    size_t at = 0;
    if (why != NULL && why_cap > 0)
        why[0] = '\0';
    if (cap < 1)
        cap = 1;
    size_t *up = malloc((n > 0 ? n : 1) * sizeof *up);
    const char **cpus = malloc((n > 0 ? n : 1) * sizeof *cpus);
    if (up == NULL || cpus == NULL) {
        free(up);
        free(cpus);
        conc_say(why, why_cap, &at, "out of memory grouping the workers: %u", cap);
        return cap;
    }
    const char *bad = NULL;
    for (size_t i = 0; i < n; i++) {
        up[i] = i;
        cpus[i] = conc_cpus(&w[i], &bad); /* each list checked once */
    }
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (conc_share(&w[i], cpus[i], &w[j], cpus[j]))
                up[conc_root(up, j)] = conc_root(up, i);
    free(cpus);
    uint64_t total = 0;
    bool shared = false;
    for (size_t r = 0; r < n; r++) {
        if (conc_root(up, r) != r)
            continue;
        uint32_t members = 0, cores = 1, threads = 1;
        for (size_t i = 0; i < n; i++) {
            if (conc_root(up, i) != r)
                continue;
            members++;
            cores = w[i].cores > cores ? w[i].cores : cores;
            threads = w[i].threads > threads ? w[i].threads : threads;
        }
        uint32_t at_once = cores / threads > 0 ? cores / threads : 1;
        uint32_t slots = members < at_once ? members : at_once;
        total += slots;
        if (members > 1) {
            conc_say(why, why_cap, &at, "%s%u workers (", shared ? "; " : "", members);
            bool first = true;
            for (size_t i = 0; i < n; i++)
                if (conc_root(up, i) == r) {
                    conc_say(why, why_cap, &at, "%s%s", first ? "" : ", ",
                             w[i].name ? w[i].name : "?");
                    first = false;
                }
            conc_say(why, why_cap, &at, ") share %u cores at %u threads: %u at once", cores,
                     threads, slots);
            shared = true;
        }
    }
    free(up);
    uint32_t depth = total < cap ? (uint32_t)total : cap;
    if (depth < 1)
        depth = 1;
    if (!shared)
        conc_say(why, why_cap, &at, "no workers share cores");
    conc_say(why, why_cap, &at, "; at most %u (stages x routes)", cap);
    if (bad != NULL)
        conc_say(why, why_cap, &at, "; %s's CPU list does not parse: taken as its whole host",
                 bad);
    return depth;
}
