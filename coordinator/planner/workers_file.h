/* workers_file.h - the workers file of `strata plan --dry-run --workers
 * FILE`: a JSON description of machines (and optionally of the model) for
 * capacity planning without a cluster. The format is documented in
 * docs/placement.md; this module parses and checks it (every error names
 * the field, e.g. "workers[2].memory: ...") and turns it into planner
 * inputs. Pure: the caller reads the file and the model. */
#ifndef ST_COORD_WORKERS_FILE_H
#define ST_COORD_WORKERS_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "coordinator/planner/placement.h"

#define ST_WFILE_MAX_WORKERS ST_PLACE_MAX_WORKERS
#define ST_WFILE_MAX_SPEEDS 8

typedef struct st_wfile_speed {
    char dtype[16];
    double bytes_per_s;
} st_wfile_speed;

typedef struct st_wfile_worker {
    char name[64];
    uint64_t id;
    uint64_t memory;
    double bytes_per_s; /* any dtype (0: absent) */
    st_wfile_speed speeds[ST_WFILE_MAX_SPEEDS];
    size_t n_speeds;
    double throttle; /* 1 when absent */
    bool spare;
    bool has_stage;
    uint32_t first, last; /* its current stage [first, last) */
    double lat_ms;        /* one-way latency to the network */
    double bw;            /* bytes/s to the network; 0: unlimited */
} st_wfile_worker;

typedef struct st_wfile {
    char *model_path; /* "model", or NULL */
    bool has_facts;   /* "model_facts" given */
    uint32_t n_layer;
    uint64_t *layer_bytes; /* [n_layer] when has_facts */
    uint64_t embd_bytes, head_bytes, kv_bytes_per_token_layer;
    uint32_t hidden;
    char dtype[16]; /* weight dtype the speeds are looked up with */
    bool objective_set;
    st_place_objective objective;
    uint32_t ctx, sessions; /* KV reserve = ctx x sessions (0: unset) */
    char wire[8];           /* "" unset */
    bool replicas;
    bool margin_set;
    double margin;
    size_t n;
    st_wfile_worker *w;  /* [n] */
    double *link_lat_ms; /* [n x n] explicit "links" (NaN: none) */
    double *link_bw;     /* [n x n] */
} st_wfile;

/* st_wfile_parse - parses the JSON text (len bytes) into f (zeroed first;
 * free with st_wfile_free, also after an error). ST_EFORMAT for JSON that
 * does not parse, ST_EINVAL for a field of the wrong type or range (the
 * detail names it), ST_EMISSING for a required field. */
st_err st_wfile_parse(const char *text, size_t len, st_wfile *f);

/* st_wfile_free - frees f's allocations; a zeroed f is a no-op. */
void st_wfile_free(st_wfile *f);

/* st_wfile_inputs - planner inputs from f for a model of n_layer layers,
 * weight dtype `dtype` and hidden size `hidden`: into w[0..f->n) (time per
 * byte = throttle / the worker's speed for dtype, else its bytes_per_s;
 * ST_EINVAL naming the worker when it has neither), the link matrices
 * lat_s and bw ([n x n]: explicit links, else the sum of both ends'
 * latencies and the smaller bandwidth) and *act_bytes (hidden x the wire
 * dtype's size, f16 when unset). Current stages outside the model are
 * ST_EINVAL. */
st_err st_wfile_inputs(const st_wfile *f, uint32_t n_layer, const char *dtype, uint32_t hidden,
                       st_place_worker *w, double *lat_s, double *bw, double *act_bytes);

#endif
