/* wire_live.c - see wire_live.h. */
#include "coordinator/cluster/wire_live.h"

#include <stdlib.h>
#include <string.h>

/* wl_member_zmeas - worker id's last reported zstd measurement of dtype d;
 * false when it reported none or one not believable (st_wire_zmeas_valid). */
static bool wl_member_zmeas(const st_coord *c, uint64_t id, st_wire_dtype d, st_wire_zmeas *out)
{
    const st_member *m = st_members_find((st_members *)&c->ms, id);
    if (m == NULL || m->hb == NULL)
        return false;
    const Strata__Heartbeat *h = m->hb->heartbeat;
    for (size_t k = 0; k < h->n_zstd; k++) {
        const Strata__ZstdMeasure *z = h->zstd[k];
        st_wire_dtype zd;
        if (z->dtype == NULL || st_wire_dtype_from_name(z->dtype, &zd) != ST_OK || zd != d)
            continue;
        *out = (st_wire_zmeas){.ratio = z->ratio,
                               .compress_ns = z->compress_ns_per_byte,
                               .decompress_ns = z->decompress_ns_per_byte,
                               .samples = z->samples};
        return st_wire_zmeas_valid(out);
    }
    return false;
}

void coord_wire_zin(const st_coord *c, const coord_pl_view *v, const st_place_stage *from,
                    const st_place_stage *to, st_wire_link_in *in)
{
    in->force_zstd = c->cfg.zstd;
    in->accept_zstd = to->n_rep > 0;
    for (uint32_t y = 0; y < to->n_rep; y++) {
        const st_member *m = st_members_find((st_members *)&c->ms, v->w[to->rep[y]].id);
        in->accept_zstd = in->accept_zstd && m != NULL && m->join->join->cap->wire_zstd;
    }
    for (unsigned d = 0; d < ST_WIRE_DT_COUNT; d++) {
        st_wire_zmeas w = {0};
        bool all = from->n_rep > 0;
        for (uint32_t x = 0; x < from->n_rep && all; x++) {
            st_wire_zmeas z;
            all = wl_member_zmeas(c, v->w[from->rep[x]].id, (st_wire_dtype)d, &z);
            if (all && x == 0) {
                w = z;
            } else if (all) {
                w.ratio = z.ratio < w.ratio ? z.ratio : w.ratio;
                w.compress_ns = z.compress_ns > w.compress_ns ? z.compress_ns : w.compress_ns;
                w.decompress_ns = z.decompress_ns > w.decompress_ns ? z.decompress_ns
                                                                    : w.decompress_ns;
                w.samples = z.samples < w.samples ? z.samples : w.samples;
            }
        }
        in->zstd[d] = all ? w : (st_wire_zmeas){0};
    }
}

void coord_wire_live_set(st_coord *c, const st_plan *q, uint64_t now)
{
    if (c->pl.n_live != q->n_stages) {
        coord_wire_live *l = calloc(q->n_stages ? q->n_stages : 1, sizeof *l);
        if (l == NULL)
            return; /* the previous choice stays shown with its own age */
        free(c->pl.live);
        c->pl.live = l;
        c->pl.n_live = q->n_stages;
    }
    for (uint32_t i = 0; i < q->n_stages; i++) {
        coord_wire_live *l = &c->pl.live[i];
        memcpy(l->dtype, q->stages[i].in_dtype, sizeof l->dtype);
        l->dtype[sizeof l->dtype - 1] = '\0';
        l->zstd = q->stages[i].in_zstd;
        memcpy(l->why, q->stages[i].in_why, sizeof l->why);
        l->why[sizeof l->why - 1] = '\0';
    }
    c->pl.live_epoch = q->epoch;
    c->pl.live_ns = now;
}

void coord_wire_live_pb(const st_coord *c, Strata__Plan *pb, uint64_t now)
{
    if (c->pl.live == NULL || c->pl.live_epoch != pb->epoch || c->pl.n_live != pb->n_stages)
        return;
    for (size_t i = 1; i < pb->n_stages; i++) {
        Strata__Stage *s = pb->stages[i];
        const coord_wire_live *l = &c->pl.live[i];
        s->live_dtype = (char *)l->dtype;
        s->live_zstd = l->zstd;
        s->live_why = (char *)l->why;
        s->live_age_s = (double)(now - c->pl.live_ns) * 1e-9;
    }
}

void coord_wire_live_free(st_coord *c)
{
    free(c->pl.live);
    c->pl.live = NULL;
    c->pl.n_live = 0;
    c->pl.live_epoch = 0;
}
