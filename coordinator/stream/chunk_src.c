/* chunk_src.c - the chunk servers named in a streaming worker's Prepare
 * (see chunk_src.h). */
#include "coordinator/stream/chunk_src.h"

#include <stdbool.h>
#include <string.h>

/* cs_overlaps - whether worker id's stage in p (NULL: none) shares a layer
 * with [first, last). */
static bool cs_overlaps(const st_plan *p, uint64_t id, uint32_t first, uint32_t last)
{
    int s = p != NULL ? st_plan_stage_of(p, id) : -1;
    return s >= 0 && p->stages[s].first < last && first < p->stages[s].last;
}

/* cs_rank - 0: holds the stage's chunks now (its model file, or a serving
 * stage overlapping it); 1: a stage of the new plan overlapping it; 2: other. */
static int cs_rank(const st_member *m, const st_plan *cur, const st_plan *next, uint32_t first,
                   uint32_t last)
{
    if (!m->join->join->cap->streams || cs_overlaps(cur, m->id, first, last))
        return 0;
    return cs_overlaps(next, m->id, first, last) ? 1 : 2;
}

size_t st_chunk_sources(const st_members *ms, uint64_t to, const st_plan *cur, const st_plan *next,
                        const char **out, size_t cap)
{
    const st_member *r = NULL;
    for (size_t i = 0; i < ms->n && r == NULL; i++)
        if (ms->v[i].id == to && ms->v[i].life == ST_MEMBER_ALIVE)
            r = &ms->v[i];
    int st = next != NULL ? st_plan_stage_of(next, to) : -1;
    if (r == NULL || !r->join->join->cap->streams || st < 0)
        return 0;
    if (cap > ST_CHUNK_SOURCES_MAX)
        cap = ST_CHUNK_SOURCES_MAX;
    const Strata__Capability *rc = r->join->join->cap;
    uint32_t first = next->stages[st].first, last = next->stages[st].last;
    size_t n = 0;
    for (int rank = 0; rank < 3; rank++) {
        for (size_t i = 0; i < ms->n && n < cap; i++) {
            const st_member *m = &ms->v[i];
            const Strata__Capability *c = m->join->join->cap;
            if (m == r || m->life != ST_MEMBER_ALIVE || !st_member_url_ok(c->chunk_addr) ||
                c->model_id.len != rc->model_id.len ||
                memcmp(c->model_id.data, rc->model_id.data, rc->model_id.len) != 0 ||
                (rc->chunk_addr != NULL && strcmp(c->chunk_addr, rc->chunk_addr) == 0) ||
                cs_rank(m, cur, next, first, last) != rank)
                continue;
            bool dup = false;
            for (size_t k = 0; k < n && !dup; k++)
                dup = strcmp(out[k], c->chunk_addr) == 0;
            if (!dup)
                out[n++] = c->chunk_addr;
        }
    }
    return n;
}
