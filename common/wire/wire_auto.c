/* wire_auto.c - `--wire auto`: each boundary's dtype and whether it is
 * compressed, from the link, the receiving stage's compute time, what the
 * receivers accept and what zstd measurably does to the senders'
 * activations (docs/wire-format.md 6.1; see st_wire_choose and
 * st_wire_zstd_choose in wire.h).
 *
 * Design. Pure functions of st_wire_link_in: the coordinator gathers the
 * inputs (links, heartbeats, capabilities, the serving plan's choice for
 * the hysteresis) and shows the reason each returns, so a reason always
 * carries the figures its rule compared. */
#include <math.h>
#include <stdio.h>

#include "common/wire/wire.h"
#include "common/wire/wire_impl.h"

/* Units of the reasons: microseconds, milliseconds, MB/s, ns per s. */
#define WIRE_US 1e6
#define WIRE_MS 1e3
#define WIRE_MB 1e6
#define WIRE_NS 1e9

bool st_wire_zmeas_valid(const st_wire_zmeas *m)
{
    return m->samples > 0 && isfinite(m->ratio) && m->ratio > 0 &&
           m->ratio <= ST_WIRE_ZMEAS_RATIO_MAX && isfinite(m->compress_ns) && m->compress_ns >= 0 &&
           m->compress_ns <= ST_WIRE_ZMEAS_NS_MAX && isfinite(m->decompress_ns) &&
           m->decompress_ns >= 0 && m->decompress_ns <= ST_WIRE_ZMEAS_NS_MAX;
}

bool st_wire_zstd_choose(const st_wire_link_in *in, st_wire_dtype d, char *why, size_t cap)
{
    char dummy[8];
    if (why == NULL || cap == 0) {
        why = dummy;
        cap = sizeof dummy;
    }
    if ((unsigned)d >= ST_WIRE_DT_COUNT) {
        snprintf(why, cap, "zstd off: dtype %u unknown", (unsigned)d);
        return false;
    }
    if (in->force_zstd) {
        snprintf(why, cap, "zstd on: --zstd (every boundary)");
        return true;
    }
    if (!in->accept_zstd) {
        snprintf(why, cap, "zstd off: a receiver does not take zstd packets");
        return false;
    }
    if (!(in->bw > 0 && isfinite(in->bw))) {
        snprintf(why, cap, "zstd off: link bandwidth unknown");
        return false;
    }
    const st_wire_zmeas *m = &in->zstd[d];
    if (!st_wire_zmeas_valid(m)) {
        snprintf(why, cap, "zstd off: its ratio on %s activations not measured yet",
                 st_wire_dtype_name(d));
        return false;
    }
    double bytes = (double)st_wire_token_bytes(d, in->hidden);
    double saved = (bytes - bytes / m->ratio) / in->bw;
    double cost = bytes * (m->compress_ns + m->decompress_ns) / WIRE_NS;
    bool held = in->has_held && in->held == d && in->held_zstd;
    bool on = held ? saved >= cost * (1 - ST_WIRE_AUTO_BAND)
                   : saved > cost * (1 + ST_WIRE_AUTO_BAND);
    const char *cmp = on ? (saved > cost * (1 + ST_WIRE_AUTO_BAND) ? ">" : ">= 80% of")
                         : (held ? "< 80% of" : "<= 120% of");
    snprintf(why, cap,
             "zstd %s: saves %.3g us/token (ratio %.3g over %u samples) %s %.3g us of codec "
             "(%.2g + %.2g ns/B)",
             on ? "on" : "off", saved * WIRE_US, m->ratio, m->samples, cmp, cost * WIRE_US,
             m->compress_ns, m->decompress_ns);
    return on;
}

st_err st_wire_choose(const st_wire_link_in *in, st_wire_choice *out)
{
    if (in == NULL || out == NULL || in->hidden == 0)
        return st_errorf(ST_EINVAL, "st_wire_choose: NULL argument or hidden 0");
    double share = in->share == 0 ? ST_WIRE_AUTO_SHARE : in->share;
    if (!(share > 0 && share <= 1))
        return st_errorf(ST_EINVAL, "st_wire_choose: share %g is not in (0, 1]", share);
    st_wire_dtype cand[ST_WIRE_DT_COUNT];
    size_t nc = 0;
    for (size_t k = 0; k < ST_WIRE_DT_COUNT; k++) {
        st_wire_dtype d = wire_by_precision[k];
        if ((in->accept_mask & (1u << d)) && (d != ST_WIRE_I8 || in->allow_i8))
            cand[nc++] = d;
    }
    char acc[64];
    st_wire_mask_text(in->accept_mask, acc, sizeof acc);
    if (nc == 0)
        return st_errorf(ST_ETYPE, "no boundary dtype: the receiver accepts [%s], i8 %s", acc,
                         in->allow_i8 ? "allowed" : "not allowed");
    char tail[96] = "";
    if ((in->accept_mask & ST_WIRE_MASK_ALL) != ST_WIRE_MASK_ALL)
        snprintf(tail, sizeof tail, "; the receiver accepts %s", acc);
    const char *src = in->measured ? "measured" : "assumed";
    char zwhy[ST_WIRE_WHY_MAX / 2];
    if (!(in->bw > 0 && isfinite(in->bw)) || !(in->compute_s > 0 && isfinite(in->compute_s))) {
        out->dtype = cand[0];
        out->zstd = st_wire_zstd_choose(in, cand[0], zwhy, sizeof zwhy);
        snprintf(out->why, sizeof out->why, "%s: the most precise accepted; %s unknown%s; %s",
                 st_wire_dtype_name(cand[0]),
                 !(in->bw > 0 && isfinite(in->bw)) ? "link bandwidth" : "stage compute time", tail,
                 zwhy);
        return ST_OK;
    }
    double budget = share * in->compute_s;
    size_t pick = 0;
    bool fits = false;
    for (size_t i = 0; i < nc && !fits; i++) {
        double t = (double)st_wire_token_bytes(cand[i], in->hidden) / in->bw;
        if (t <= budget) {
            pick = i;
            fits = true;
        } else if (st_wire_token_bytes(cand[i], in->hidden) <
                   st_wire_token_bytes(cand[pick], in->hidden)) {
            pick = i;
        }
    }
    size_t held = nc; /* the held dtype's place among the candidates (nc: none) */
    for (size_t i = 0; in->has_held && i < nc; i++)
        held = cand[i] == in->held ? i : held;
    const char *rule = fits ? "the most precise within budget:" : "none fits, fewest bytes:";
    if (held < nc && held != pick) {
        double t_pick = (double)st_wire_token_bytes(cand[pick], in->hidden) / in->bw;
        double t_held = (double)st_wire_token_bytes(cand[held], in->hidden) / in->bw;
        bool keep = pick < held ? t_pick > budget * (1 - ST_WIRE_AUTO_BAND)   /* up */
                                : t_held <= budget * (1 + ST_WIRE_AUTO_BAND); /* down */
        if (keep) {
            pick = held;
            fits = t_held <= budget;
            rule = "kept within the hysteresis band:";
        }
    }
    st_wire_dtype d = cand[pick];
    uint64_t bytes = st_wire_token_bytes(d, in->hidden);
    double t = (double)bytes / in->bw;
    out->zstd = st_wire_zstd_choose(in, d, zwhy, sizeof zwhy);
    snprintf(out->why, sizeof out->why,
             "%s: %s %llu B/token at %.3g MB/s (%s) = %.3g us %s %.0f%% of %.3g ms compute; "
             "latency %.3g ms%s; %s",
             st_wire_dtype_name(d), rule, (unsigned long long)bytes, in->bw / WIRE_MB, src,
             t * WIRE_US, fits ? "<=" : ">", share * 100, in->compute_s * WIRE_MS,
             in->latency_s * WIRE_MS, tail, zwhy);
    out->dtype = d;
    return ST_OK;
}
