/* workers_file.c - the workers file (workers_file.h, docs/placement.md).
 *
 * Strict by design: a capacity plan built on a misspelt key or a speed in
 * the wrong unit is worse than an error. Every object accepts only its
 * documented keys, every number is checked for type, integrality and
 * range, and every error names the field as a path ("workers[1].speeds.
 * q8_0"). The JSON is read with cJSON; nothing is kept from it. */
#include "coordinator/planner/workers_file.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/units.h"
#include "common/wire/wire.h"

#define WF_WHY_MAX 256 /* bytes of a byte-count error kept for the field's error */

/* wf_keys - ST_EINVAL if o has a key not in allowed (NULL-terminated). */
static st_err wf_keys(const cJSON *o, const char *path, const char *const *allowed)
{
    for (const cJSON *it = o->child; it != NULL; it = it->next) {
        bool ok = false;
        for (size_t i = 0; allowed[i] && !ok; i++)
            ok = it->string && strcmp(it->string, allowed[i]) == 0;
        if (!ok)
            return st_errorf(ST_EINVAL, "%s: unknown key '%.40s'", path,
                             it->string ? it->string : "");
    }
    return ST_OK;
}

/* wf_num - a number field in [lo, hi] (integral if integer); absent: *out
 * unchanged and *found false. */
static st_err wf_num(const cJSON *o, const char *key, const char *path, double lo, double hi,
                     bool integer, double *out, bool *found)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (found)
        *found = v != NULL;
    if (v == NULL)
        return ST_OK;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return st_errorf(ST_EINVAL, "%s.%s: not a number", path, key);
    double d = v->valuedouble;
    if (d < lo || d > hi || (integer && d != floor(d)))
        return st_errorf(ST_EINVAL, "%s.%s = %g: not %s in [%g, %g]", path, key, d,
                         integer ? "an integer" : "a number", lo, hi);
    *out = d;
    return ST_OK;
}

static st_err wf_str(const cJSON *o, const char *key, const char *path, char *out, size_t cap)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (v == NULL)
        return ST_OK;
    if (!cJSON_IsString(v) || v->valuestring == NULL)
        return st_errorf(ST_EINVAL, "%s.%s: not a string", path, key);
    if (strlen(v->valuestring) >= cap || v->valuestring[0] == '\0')
        return st_errorf(ST_EINVAL, "%s.%s: '%.40s' is empty or longer than %zu bytes", path, key,
                         v->valuestring, cap - 1);
    snprintf(out, cap, "%s", v->valuestring);
    return ST_OK;
}

static st_err wf_bool(const cJSON *o, const char *key, const char *path, bool *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (v == NULL)
        return ST_OK;
    if (!cJSON_IsBool(v))
        return st_errorf(ST_EINVAL, "%s.%s: not true or false", path, key);
    *out = cJSON_IsTrue(v);
    return ST_OK;
}

/* wf_bytes - a byte count given as a number or a string of the grammar of
 * common/base/units.h ("512M", "1.5T", "16GiB"). */
static st_err wf_bytes(const cJSON *o, const char *key, const char *path, uint64_t *out,
                       bool *found)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    *found = v != NULL;
    if (v == NULL)
        return ST_OK;
    if (cJSON_IsString(v) && v->valuestring) {
        if (st_parse_bytes(v->valuestring, out) != ST_OK) {
            char why[WF_WHY_MAX]; /* the parser's detail, before it is overwritten */
            snprintf(why, sizeof why, "%s", st_errdetail());
            return st_errorf(ST_EINVAL, "%s.%s: %s", path, key, why);
        }
        return ST_OK;
    }
    double d = 0;
    st_err e = wf_num(o, key, path, 0, 9007199254740992.0, true, &d, NULL);
    *out = (uint64_t)d;
    return e;
}

static st_err wf_link(const cJSON *l, const char *path, double *lat_ms, double *bw)
{
    static const char *const keys[] = {"latency_ms", "bandwidth", "from", "to", NULL};
    if (!cJSON_IsObject(l))
        return st_errorf(ST_EINVAL, "%s: not an object", path);
    st_err e = wf_keys(l, path, keys);
    if (e == ST_OK)
        e = wf_num(l, "latency_ms", path, 0, 1e7, false, lat_ms, NULL);
    if (e == ST_OK)
        e = wf_num(l, "bandwidth", path, 0, 1e15, false, bw, NULL);
    return e;
}

static st_err wf_facts(const cJSON *o, st_wfile *f)
{
    static const char *const keys[] =
        {"n_layer", "layer_bytes", "embd_bytes", "head_bytes", "kv_bytes_per_token_layer",
         "hidden",  "dtype",       NULL};
    const char *p = "model_facts";
    if (!cJSON_IsObject(o))
        return st_errorf(ST_EINVAL, "model_facts: not an object");
    st_err e = wf_keys(o, p, keys);
    double nl = 0, hid = 0;
    bool found;
    if (e == ST_OK &&
        (e = wf_num(o, "n_layer", p, 1, ST_PLACE_MAX_LAYERS, true, &nl, &found)) == ST_OK && !found)
        e = st_errorf(ST_EMISSING, "model_facts.n_layer is required");
    if (e == ST_OK && (e = wf_num(o, "hidden", p, 1, 1 << 20, true, &hid, &found)) == ST_OK &&
        !found)
        e = st_errorf(ST_EMISSING, "model_facts.hidden is required");
    if (e != ST_OK)
        return e;
    f->n_layer = (uint32_t)nl;
    f->hidden = (uint32_t)hid;
    if ((f->layer_bytes = calloc(f->n_layer, sizeof *f->layer_bytes)) == NULL)
        return st_errorf(ST_ENOMEM, "model_facts.layer_bytes");
    const cJSON *lb = cJSON_GetObjectItemCaseSensitive(o, "layer_bytes");
    if (cJSON_IsArray(lb)) {
        if ((uint32_t)cJSON_GetArraySize(lb) != f->n_layer)
            return st_errorf(ST_EINVAL, "model_facts.layer_bytes has %d entries; n_layer is %u",
                             cJSON_GetArraySize(lb), f->n_layer);
        uint32_t i = 0;
        for (const cJSON *it = lb->child; it; it = it->next, i++) {
            if (!cJSON_IsNumber(it) || !(it->valuedouble >= 0) ||
                it->valuedouble != floor(it->valuedouble) || it->valuedouble > 9007199254740992.0)
                return st_errorf(ST_EINVAL, "model_facts.layer_bytes[%u]: not a byte count", i);
            f->layer_bytes[i] = (uint64_t)it->valuedouble;
        }
    } else {
        uint64_t each = 0;
        if ((e = wf_bytes(o, "layer_bytes", p, &each, &found)) != ST_OK)
            return e;
        if (!found)
            return st_errorf(ST_EMISSING, "model_facts.layer_bytes is required");
        for (uint32_t i = 0; i < f->n_layer; i++)
            f->layer_bytes[i] = each;
    }
    if ((e = wf_bytes(o, "embd_bytes", p, &f->embd_bytes, &found)) ||
        (e = wf_bytes(o, "head_bytes", p, &f->head_bytes, &found)) ||
        (e = wf_bytes(o, "kv_bytes_per_token_layer", p, &f->kv_bytes_per_token_layer, &found)) ||
        (e = wf_str(o, "dtype", p, f->dtype, sizeof f->dtype)))
        return e;
    f->has_facts = true;
    return ST_OK;
}

static st_err wf_worker(const cJSON *o, size_t i, st_wfile_worker *w)
{
    static const char *const keys[] = {"name",     "id",    "memory", "bytes_per_s", "speeds",
                                       "throttle", "spare", "stage",  "link",        NULL};
    char p[32];
    snprintf(p, sizeof p, "workers[%zu]", i);
    if (!cJSON_IsObject(o))
        return st_errorf(ST_EINVAL, "%s: not an object", p);
    snprintf(w->name, sizeof w->name, "worker%zu", i);
    w->id = i + 1;
    w->throttle = 1;
    double id = (double)w->id;
    bool found;
    st_err e = wf_keys(o, p, keys);
    if (e == ST_OK)
        e = wf_str(o, "name", p, w->name, sizeof w->name);
    if (e == ST_OK)
        e = wf_num(o, "id", p, 1, 9007199254740992.0, true, &id, NULL);
    w->id = (uint64_t)id;
    if (e == ST_OK && (e = wf_bytes(o, "memory", p, &w->memory, &found)) == ST_OK && !found)
        e = st_errorf(ST_EMISSING, "%s.memory is required", p);
    if (e == ST_OK)
        e = wf_num(o, "bytes_per_s", p, 1, 1e16, false, &w->bytes_per_s, NULL);
    if (e == ST_OK)
        e = wf_num(o, "throttle", p, 1, 1000, false, &w->throttle, NULL);
    if (e == ST_OK)
        e = wf_bool(o, "spare", p, &w->spare);
    if (e != ST_OK)
        return e;
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(o, "speeds");
    if (sp != NULL) {
        if (!cJSON_IsObject(sp))
            return st_errorf(ST_EINVAL, "%s.speeds: not an object of dtype: bytes/s", p);
        for (const cJSON *it = sp->child; it; it = it->next) {
            if (w->n_speeds == ST_WFILE_MAX_SPEEDS || !it->string || !it->string[0] ||
                strlen(it->string) >= sizeof w->speeds[0].dtype)
                return st_errorf(ST_EINVAL, "%s.speeds: at most %d dtypes of 1..15 characters", p,
                                 ST_WFILE_MAX_SPEEDS);
            if (!cJSON_IsNumber(it) || !(it->valuedouble >= 1) || !(it->valuedouble <= 1e16))
                return st_errorf(ST_EINVAL, "%s.speeds.%s: not bytes/s in [1, 1e16]", p,
                                 it->string);
            st_wfile_speed *s = &w->speeds[w->n_speeds++];
            snprintf(s->dtype, sizeof s->dtype, "%s", it->string);
            s->bytes_per_s = it->valuedouble;
        }
    }
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "stage");
    if (st != NULL) {
        const cJSON *a = cJSON_GetArrayItem(st, 0), *b = cJSON_GetArrayItem(st, 1);
        if (!cJSON_IsArray(st) || cJSON_GetArraySize(st) != 2 || !cJSON_IsNumber(a) ||
            !cJSON_IsNumber(b) || a->valuedouble < 0 || b->valuedouble <= a->valuedouble ||
            a->valuedouble != floor(a->valuedouble) || b->valuedouble != floor(b->valuedouble) ||
            b->valuedouble > ST_PLACE_MAX_LAYERS)
            return st_errorf(ST_EINVAL, "%s.stage: not [first, last) with 0 <= first < last", p);
        w->has_stage = true;
        w->first = (uint32_t)a->valuedouble;
        w->last = (uint32_t)b->valuedouble;
    }
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(o, "link");
    if (l != NULL) {
        char lp[48];
        snprintf(lp, sizeof lp, "%s.link", p);
        if ((e = wf_link(l, lp, &w->lat_ms, &w->bw)) != ST_OK)
            return e;
    }
    return ST_OK;
}

static st_err wf_links(const cJSON *arr, st_wfile *f)
{
    if (!cJSON_IsArray(arr))
        return st_errorf(ST_EINVAL, "links: not an array");
    size_t i = 0;
    for (const cJSON *it = arr->child; it; it = it->next, i++) {
        char p[32];
        snprintf(p, sizeof p, "links[%zu]", i);
        double lat = NAN, bw = 0;
        st_err e = wf_link(it, p, &lat, &bw);
        if (e != ST_OK)
            return e;
        char from[64] = "", to[64] = "";
        if ((e = wf_str(it, "from", p, from, sizeof from)) ||
            (e = wf_str(it, "to", p, to, sizeof to)))
            return e;
        size_t a = f->n, b = f->n;
        for (size_t k = 0; k < f->n; k++) {
            if (strcmp(f->w[k].name, from) == 0)
                a = k;
            if (strcmp(f->w[k].name, to) == 0)
                b = k;
        }
        if (a == f->n || b == f->n || a == b)
            return st_errorf(ST_EINVAL, "%s: from '%s' to '%s' must name two workers", p, from, to);
        if (isnan(lat))
            return st_errorf(ST_EMISSING, "%s.latency_ms is required", p);
        f->link_lat_ms[a * f->n + b] = f->link_lat_ms[b * f->n + a] = lat;
        f->link_bw[a * f->n + b] = f->link_bw[b * f->n + a] = bw;
    }
    return ST_OK;
}

static st_err wf_top(const cJSON *root, st_wfile *f)
{
    static const char *const keys[] = {"model",    "model_facts", "objective", "ctx",
                                       "sessions", "wire",        "replicas",  "margin",
                                       "link",     "workers",     "links",     NULL};
    if (!cJSON_IsObject(root))
        return st_errorf(ST_EINVAL, "the workers file is not a JSON object");
    st_err e = wf_keys(root, "the workers file", keys);
    if (e != ST_OK)
        return e;
    const char *p = "the workers file";
    char buf[4096] = "";
    if ((e = wf_str(root, "model", p, buf, sizeof buf)))
        return e;
    if (buf[0] && (f->model_path = strdup(buf)) == NULL)
        return st_errorf(ST_ENOMEM, "model path");
    const cJSON *mf = cJSON_GetObjectItemCaseSensitive(root, "model_facts");
    if (mf && (e = wf_facts(mf, f)))
        return e;
    char obj[16] = "";
    if ((e = wf_str(root, "objective", p, obj, sizeof obj)))
        return e;
    if (obj[0]) {
        if ((e = st_place_objective_from_name(obj, &f->objective)))
            return st_errorf(e, "objective: '%s' is not latency or throughput", obj);
        f->objective_set = true;
    }
    double ctx = 0, ses = 0;
    if ((e = wf_num(root, "ctx", p, 1, 1 << 24, true, &ctx, NULL)) ||
        (e = wf_num(root, "sessions", p, 1, 65536, true, &ses, NULL)) ||
        (e = wf_str(root, "wire", p, f->wire, sizeof f->wire)) ||
        (e = wf_bool(root, "replicas", p, &f->replicas)) ||
        (e = wf_num(root, "margin", p, 0, 0.999999, false, &f->margin, &f->margin_set)))
        return e;
    f->ctx = (uint32_t)ctx;
    f->sessions = (uint32_t)ses;
    double dlat = 0, dbw = 0;
    const cJSON *dl = cJSON_GetObjectItemCaseSensitive(root, "link");
    if (dl && (e = wf_link(dl, "link", &dlat, &dbw)))
        return e;
    const cJSON *ws = cJSON_GetObjectItemCaseSensitive(root, "workers");
    if (!cJSON_IsArray(ws) || cJSON_GetArraySize(ws) < 1 ||
        cJSON_GetArraySize(ws) > ST_WFILE_MAX_WORKERS)
        return st_errorf(ST_EINVAL, "workers: an array of 1..%d workers is required",
                         ST_WFILE_MAX_WORKERS);
    f->n = (size_t)cJSON_GetArraySize(ws);
    f->w = calloc(f->n, sizeof *f->w);
    f->link_lat_ms = malloc(f->n * f->n * sizeof *f->link_lat_ms);
    f->link_bw = malloc(f->n * f->n * sizeof *f->link_bw);
    if (!f->w || !f->link_lat_ms || !f->link_bw)
        return st_errorf(ST_ENOMEM, "%zu workers", f->n);
    size_t i = 0;
    for (const cJSON *it = ws->child; it; it = it->next, i++) {
        f->w[i].lat_ms = dlat;
        f->w[i].bw = dbw;
        if ((e = wf_worker(it, i, &f->w[i])))
            return e;
        for (size_t k = 0; k < i; k++)
            if (f->w[k].id == f->w[i].id || strcmp(f->w[k].name, f->w[i].name) == 0)
                return st_errorf(ST_EINVAL,
                                 "workers[%zu]: id %llu or name '%s' repeats "
                                 "workers[%zu]'s",
                                 i, (unsigned long long)f->w[i].id, f->w[i].name, k);
    }
    for (size_t k = 0; k < f->n * f->n; k++) {
        f->link_lat_ms[k] = NAN;
        f->link_bw[k] = 0;
    }
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(root, "links");
    if (ls && (e = wf_links(ls, f)))
        return e;
    return ST_OK; /* without "model" or "model_facts" the caller must give --model */
}

st_err st_wfile_parse(const char *text, size_t len, st_wfile *f)
{
    memset(f, 0, sizeof *f);
    f->margin = ST_PLACE_MARGIN_DEFAULT;
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (root == NULL) {
        const char *at = cJSON_GetErrorPtr();
        size_t off = at && at >= text && at <= text + len ? (size_t)(at - text) : 0;
        return st_errorf(ST_EFORMAT, "the workers file is not valid JSON (near byte %zu)", off);
    }
    st_err e = wf_top(root, f);
    cJSON_Delete(root);
    return e;
}

void st_wfile_free(st_wfile *f)
{
    free(f->model_path);
    free(f->layer_bytes);
    free(f->w);
    free(f->link_lat_ms);
    free(f->link_bw);
    memset(f, 0, sizeof *f);
}

st_err st_wfile_inputs(const st_wfile *f, uint32_t n_layer, const char *dtype, uint32_t hidden,
                       st_place_worker *w, double *lat_s, double *bw, double *act_bytes)
{
    const char *wire = f->wire[0] ? f->wire : "f16";
    st_wire_dtype dt;
    if (st_wire_dtype_from_name(wire, &dt) != ST_OK)
        return st_errorf(ST_EINVAL, "wire: '%s' is not f32, bf16, f16 or i8", wire);
    *act_bytes = (double)st_wire_token_bytes(dt, hidden);
    for (size_t i = 0; i < f->n; i++) {
        const st_wfile_worker *x = &f->w[i];
        double speed = x->bytes_per_s;
        for (size_t k = 0; k < x->n_speeds; k++)
            if (strcmp(x->speeds[k].dtype, dtype) == 0)
                speed = x->speeds[k].bytes_per_s;
        if (!(speed > 0))
            return st_errorf(ST_EINVAL,
                             "workers[%zu] ('%s'): no speed for the model's dtype %s "
                             "(give speeds.%s or bytes_per_s)",
                             i, x->name, dtype, dtype);
        if (x->has_stage && x->last > n_layer)
            return st_errorf(ST_EINVAL,
                             "workers[%zu].stage [%u, %u) is beyond the model's %u "
                             "layers",
                             i, x->first, x->last, n_layer);
        w[i] = (st_place_worker){.id = x->id,
                                 .mem_budget = x->memory,
                                 .spb = x->throttle / speed,
                                 .spare = x->spare,
                                 .has_stage = x->has_stage,
                                 .cur_first = x->first,
                                 .cur_last = x->last};
    }
    for (size_t a = 0; a < f->n; a++)
        for (size_t b = 0; b < f->n; b++) {
            size_t k = a * f->n + b;
            if (!isnan(f->link_lat_ms[k])) {
                lat_s[k] = f->link_lat_ms[k] * 1e-3;
                bw[k] = f->link_bw[k];
            } else {
                lat_s[k] = (f->w[a].lat_ms + f->w[b].lat_ms) * 1e-3;
                double x = f->w[a].bw, y = f->w[b].bw;
                bw[k] = x > 0 && y > 0 ? (x < y ? x : y) : (x > 0 ? x : y);
            }
        }
    return ST_OK;
}
