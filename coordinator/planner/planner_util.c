/* planner_util.c - the planner's small pieces around the search: default
 * options, names and texts, comparing layouts, turning measurements into
 * speeds, and the sustained-imbalance detector.
 *
 * Speeds. A worker announces at join how fast it streams weights of each
 * dtype (bytes/s of a mat-vec larger than its caches); 1 / that, times its
 * throttle, is its announced time per byte. Once it serves a stage, its
 * heartbeats carry each layer's latency (EMA, alpha 0.1): the median over
 * its layers of latency / layer bytes is its measured time per byte (the
 * median, not the sum: one layer's EMA caught by a scheduling hiccup must
 * not move a whole stage).
 * The two scales differ (a step carries many tokens during prefill, the
 * measurement includes the hops' overheads inside a layer's time, caches
 * help small models), so the announced figures of unmeasured workers are
 * multiplied by the median ratio measured / announced of the measured ones
 * before the planner compares them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/units.h"
#include "coordinator/planner/placement.h"

st_place_opts st_place_opts_default(void)
{
    st_place_opts o;
    memset(&o, 0, sizeof o);
    o.objective = ST_PLACE_THROUGHPUT;
    o.margin = ST_PLACE_MARGIN_DEFAULT;
    return o;
}

const char *st_place_objective_name(st_place_objective o)
{
    return o == ST_PLACE_LATENCY ? "latency" : "throughput";
}

st_err st_place_objective_from_name(const char *s, st_place_objective *out)
{
    if (s && strcmp(s, "latency") == 0) {
        *out = ST_PLACE_LATENCY;
        return ST_OK;
    }
    if (s && strcmp(s, "throughput") == 0) {
        *out = ST_PLACE_THROUGHPUT;
        return ST_OK;
    }
    return st_errorf(ST_EINVAL, "objective '%.32s' is neither latency nor throughput", s ? s : "");
}

bool st_place_same_layout(const st_place_result *a, const st_place_result *b)
{
    if (a->n_stages != b->n_stages)
        return false;
    for (size_t s = 0; s < a->n_stages; s++) {
        const st_place_stage *x = &a->stages[s], *y = &b->stages[s];
        if (x->first != y->first || x->last != y->last || x->n_rep != y->n_rep)
            return false;
        for (uint32_t k = 0; k < x->n_rep; k++) {
            bool found = false;
            for (uint32_t j = 0; j < y->n_rep && !found; j++)
                found = x->rep[k] == y->rep[j];
            if (!found || x->rep[0] != y->rep[0])
                return false;
        }
    }
    return true;
}

const char *st_place_why_text(const st_place_result *r, size_t i, char *buf, size_t cap)
{
    char b[48];
    switch (r->why[i]) {
    case ST_PLACE_USED:
        snprintf(buf, cap, "in the plan");
        break;
    case ST_PLACE_WHY_SPARE:
        if (r->with_spares)
            snprintf(buf, cap, "spare: the plan takes other spares and is no better with it");
        else
            snprintf(buf, cap,
                     "spare: the others hold the model and a plan with the spares is "
                     "not %.0f%% faster",
                     100 * r->margin);
        break;
    case ST_PLACE_WHY_MEMORY:
        snprintf(buf, cap, "memory: its budget holds no stage (the smallest needs %s)",
                 st_fmt_bytes_exact(r->why_bytes[i], b, sizeof b));
        break;
    case ST_PLACE_WHY_UNNEEDED:
        snprintf(buf, cap, "not needed: the best %s plan is no better with it%s",
                 st_place_objective_name(r->objective), r->exact ? "" : " (heuristic search)");
        break;
    case ST_PLACE_WHY_SPLIT:
        snprintf(buf, cap, "--split gives it no layers");
        break;
    }
    return buf;
}

/* ---- measurements ---- */

static int pu_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void st_place_calibrate(const st_place_speed *s, size_t n, double *spb, double *k_out)
{
    double *ratio = malloc((n ? n : 1) * sizeof *ratio);
    size_t nr = 0;
    for (size_t i = 0; ratio && i < n; i++)
        if (s[i].meas_spb > 0 && isfinite(s[i].meas_spb) && s[i].cap_spb > 0 &&
            isfinite(s[i].cap_spb))
            ratio[nr++] = s[i].meas_spb / s[i].cap_spb;
    double k = 1;
    if (nr > 0) {
        qsort(ratio, nr, sizeof *ratio, pu_cmp_double);
        k = nr % 2 ? ratio[nr / 2] : 0.5 * (ratio[nr / 2 - 1] + ratio[nr / 2]);
    }
    free(ratio);
    for (size_t i = 0; i < n; i++) {
        if (s[i].meas_spb > 0 && isfinite(s[i].meas_spb))
            spb[i] = s[i].meas_spb;
        else
            spb[i] = s[i].cap_spb > 0 ? s[i].cap_spb * k : s[i].cap_spb;
    }
    if (k_out)
        *k_out = k;
}

bool st_place_measure(const st_place_model *m, uint32_t first, uint32_t last, const uint32_t *layer,
                      const double *ema_ms, const uint32_t *samples, size_t n, uint32_t min_samples,
                      double *spb)
{
    if (first >= last || last > m->n_layer)
        return false;
    double *ratio = malloc((size_t)(last - first) * sizeof *ratio);
    if (ratio == NULL)
        return false;
    size_t nr = 0;
    for (uint32_t l = first; l < last; l++) {
        bool found = false;
        for (size_t i = 0; i < n && !found; i++) {
            if (layer[i] != l)
                continue;
            double bytes = (double)(m->active_bytes ? m->active_bytes[l] : m->layer_bytes[l]);
            if (l + 1 == m->n_layer)
                bytes += (double)m->head_bytes; /* the last layer's time includes the head */
            if (samples[i] < min_samples || !(ema_ms[i] > 0) || !isfinite(ema_ms[i]) ||
                !(bytes > 0))
                break;
            ratio[nr++] = ema_ms[i] * 1e-3 / bytes;
            found = true;
        }
        if (!found) {
            free(ratio);
            return false;
        }
    }
    qsort(ratio, nr, sizeof *ratio, pu_cmp_double);
    *spb = nr % 2 ? ratio[nr / 2] : 0.5 * (ratio[nr / 2 - 1] + ratio[nr / 2]);
    free(ratio);
    return true;
}

bool st_imbalance_update(st_imbalance *t, bool imbalanced, uint64_t now_ns, uint64_t sustain_ns,
                         uint32_t min_count)
{
    if (!imbalanced) {
        t->count = 0;
        return false;
    }
    if (t->count == 0)
        t->since_ns = now_ns;
    t->count++;
    if (t->count >= min_count && now_ns - t->since_ns >= sustain_ns) {
        t->count = 0;
        return true;
    }
    return false;
}
