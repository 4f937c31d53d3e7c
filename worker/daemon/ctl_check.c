/* ctl_check.c - who may steer a worker, and which plan messages it takes
 * (see ctl_check.h).
 *
 * Design. Issue 12 found that a worker took Prepare, Commit and
 * EndSessions from anyone, became a spare at any epoch a Commit named
 * (so a stranger's Commit{2^64-1} made it refuse every later plan), and
 * only logged a plan hash that was not the plan's. The rules here close
 * that, as pure functions of what the worker holds (st_ctl_state):
 *
 * - Control requests come from the coordinator the worker joined: the
 *   sender id its JoinReply named (st_ctl_sender_check).
 * - A Prepare's plan is of that coordinator's incarnation, newer than the
 *   committed epoch, and its hash is BLAKE2b-256 of the plan: the name the
 *   Commit and every STEP frame use for it (st_ctl_prepare_check).
 * - A Commit names the prepared plan, epoch and hash; anything else is
 *   refused and changes nothing, and so cannot wedge the worker
 *   (st_ctl_commit_check). A worker the plan leaves out is prepared too,
 *   as a spare (worker/daemon/dm_plan.c).
 * - STEP frames come from the previous stage of the plan, or the
 *   coordinator for stage 0 (st_ctl_step_sender_ok, dp_step.c).
 *
 * Without a cluster key sender ids are not authenticated: a stranger who
 * copies the coordinator's id passes the first rule, and the others must
 * (and do) hold alone. */
#include "worker/daemon/ctl_check.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/base/hex.h"

st_err st_ctl_sender_check(const st_ctl_state *s, const char *what, uint64_t sender, char *why,
                           size_t cap)
{
    if (s->coord_ctl != 0 && sender == s->coord_ctl)
        return ST_OK;
    if (s->coord_ctl == 0)
        snprintf(why, cap, "%s from sender %llu: this worker has joined no coordinator", what,
                 (unsigned long long)sender);
    else
        snprintf(why, cap,
                 "%s from sender %llu: only the coordinator this worker joined (sender "
                 "%llu, incarnation %llu) may send it",
                 what, (unsigned long long)sender, (unsigned long long)s->coord_ctl,
                 (unsigned long long)s->incarnation);
    return ST_EAUTH;
}

st_err st_ctl_plan_hash(const Strata__Plan *p, char *why, size_t cap)
{
    if (p->plan_hash.len != ST_CTL_HASH_BYTES) {
        snprintf(why, cap, "plan of epoch %llu: hash of %zu bytes; %d expected",
                 (unsigned long long)p->epoch, p->plan_hash.len, ST_CTL_HASH_BYTES);
        return ST_EEPOCH;
    }
    Strata__Plan c = *p;
    c.plan_hash.len = 0;
    c.plan_hash.data = NULL;
    size_t n = strata__plan__get_packed_size(&c);
    uint8_t *buf = malloc(n ? n : 1), h[ST_CTL_HASH_BYTES];
    if (buf == NULL) {
        snprintf(why, cap, "out of memory for the plan's %zu bytes", n);
        return ST_ENOMEM;
    }
    strata__plan__pack(&c, buf);
    int rc = sodium_init() < 0 ? -1 : crypto_generichash(h, sizeof h, buf, n, NULL, 0);
    free(buf);
    if (rc != 0) {
        snprintf(why, cap, "the plan's hash cannot be computed (libsodium)");
        return ST_ESODIUM;
    }
    if (sodium_memcmp(h, p->plan_hash.data, ST_CTL_HASH_BYTES) == 0)
        return ST_OK;
    char a[ST_HEX_SHORT_CAP], b[ST_HEX_SHORT_CAP];
    st_hex_short(p->plan_hash.data, p->plan_hash.len, a);
    st_hex_short(h, sizeof h, b);
    snprintf(why, cap, "plan of epoch %llu: hash %s.. is not BLAKE2b-256 of the plan (%s..)",
             (unsigned long long)p->epoch, a, b);
    return ST_EEPOCH;
}

st_err st_ctl_prepare_check(const st_ctl_state *s, const Strata__Plan *p, char *why, size_t cap)
{
    if (p == NULL) {
        snprintf(why, cap, "Prepare carries no plan");
        return ST_EINVAL;
    }
    unsigned long long ep = (unsigned long long)p->epoch;
    if (p->epoch == 0) {
        snprintf(why, cap, "plan epoch 0 is invalid");
        return ST_EINVAL;
    }
    if (s->have_cur && p->epoch <= s->cur_epoch) {
        snprintf(why, cap, "plan epoch %llu is not newer than the current epoch %llu (stale)", ep,
                 (unsigned long long)s->cur_epoch);
        return ST_EEPOCH;
    }
    if (p->incarnation != s->incarnation) {
        snprintf(why, cap,
                 "plan of epoch %llu is of coordinator incarnation %llu; this worker "
                 "joined incarnation %llu",
                 ep, (unsigned long long)p->incarnation, (unsigned long long)s->incarnation);
        return ST_EAUTH;
    }
    return st_ctl_plan_hash(p, why, cap);
}

st_err st_ctl_commit_check(const st_ctl_state *s, uint64_t epoch, const uint8_t *hash,
                           size_t hash_len, char *why, size_t cap)
{
    unsigned long long ep = (unsigned long long)epoch;
    if (hash_len != ST_CTL_HASH_BYTES) {
        snprintf(why, cap, "commit of epoch %llu: plan hash of %zu bytes", ep, hash_len);
        return ST_EINVAL;
    }
    char a[ST_HEX_SHORT_CAP], b[ST_HEX_SHORT_CAP];
    st_hex_short(hash, hash_len, a);
    if (s->have_cur && epoch <= s->cur_epoch) {
        snprintf(why, cap, "commit of epoch %llu is stale: epoch %llu is committed", ep,
                 (unsigned long long)s->cur_epoch);
        return ST_EEPOCH;
    }
    if (!s->have_pending || s->pending_epoch != epoch) {
        if (s->have_pending)
            snprintf(why, cap,
                     "commit of epoch %llu (plan hash %s..) without a matching Prepare: "
                     "epoch %llu is prepared",
                     ep, a, (unsigned long long)s->pending_epoch);
        else
            snprintf(why, cap,
                     "commit of epoch %llu (plan hash %s..) without a matching Prepare: "
                     "no plan is prepared",
                     ep, a);
        return ST_EPROTO;
    }
    if (sodium_memcmp(hash, s->pending_hash, ST_CTL_HASH_BYTES) != 0) {
        st_hex_short(s->pending_hash, ST_CTL_HASH_BYTES, b);
        snprintf(why, cap, "commit of epoch %llu with plan hash %s..; the prepared plan's is %s..",
                 ep, a, b);
        return ST_EEPOCH;
    }
    return ST_OK;
}

bool st_ctl_step_sender_ok(const uint64_t *prev, uint32_t n, uint64_t sender)
{
    for (uint32_t k = 0; k < n && sender != 0; k++)
        if (prev[k] == sender)
            return true;
    return false;
}

bool st_ctl_step_route_sender_ok(const uint64_t *prev, uint32_t n, uint32_t replica,
                                 uint64_t sender)
{
    return replica < n && st_ctl_step_sender_ok(&prev[replica], 1, sender);
}
