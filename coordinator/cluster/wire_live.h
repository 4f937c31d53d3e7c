/* wire_live.h - --wire auto's per-boundary zstd inputs and the live
 * reasons of the serving plan's boundaries (docs/wire-format.md 6.1).
 *
 * A boundary's zstd is chosen from what its senders measured on their
 * real activations (Heartbeat.zstd) and whether its receivers take zstd
 * (Capability.wire_zstd). Its reason is recomputed at every --wire auto
 * check of the serving plan (at most once per heartbeat interval,
 * replan.c's coord_wire_check) and kept here, so status and `strata
 * plan` show the choice under the latest measurements ("measured" once a
 * link is) without a replan when nothing changes; a change of dtype or
 * zstd replans. Main thread only. */
#ifndef ST_COORD_WIRE_LIVE_H
#define ST_COORD_WIRE_LIVE_H

#include "coordinator/coord_impl.h"

/* coord_wire_zin - the zstd inputs of the boundary from -> to (indices
 * into v) into in: accept_zstd when every worker of `to` announced
 * Capability.wire_zstd; per dtype the worst believable measurement of
 * from's workers (least ratio, most cost; unmeasured when one of them has
 * none); force_zstd with the coordinator's --zstd. */
void coord_wire_zin(const st_coord *c, const coord_pl_view *v, const st_place_stage *from,
                    const st_place_stage *to, st_wire_link_in *in);

/* coord_wire_live_set - records q's boundaries (the serving plan's layout
 * under the measurements of now) as the live choice of the serving plan. */
void coord_wire_live_set(st_coord *c, const st_plan *q, uint64_t now);

/* coord_wire_live_pb - fills the live_* fields of pb's stages (a view of
 * the serving plan for a status or plan reply) when the live choice was
 * evaluated for pb's epoch; else leaves them empty. The strings point
 * into c: pb must not outlive the next check. */
void coord_wire_live_pb(const st_coord *c, Strata__Plan *pb, uint64_t now);

/* coord_wire_live_free - frees the live choice. */
void coord_wire_live_free(st_coord *c);

#endif
