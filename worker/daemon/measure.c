/* measure.c - start-up self-measurement of weight streaming (see measure.h).
 *
 * Design. Decoding one token is a sequence of mat-vecs whose time is the
 * weight bytes divided by how fast this machine streams them through the
 * selected kernels; that rate depends on the dtype (dequantisation work
 * per byte differs) and on the memory system. So the worker measures the
 * rate directly, per dtype, with the very kernels and thread pool it will
 * serve with, over a matrix larger than the L3 cache so the figure is about
 * memory, not cache. Values are kept sane (finite, normal, non-zero block
 * scales) so no kernel hits a slow path that real weights would not hit.
 * One buffer is shared by all dtypes; each dtype gets an equal share of
 * the time budget, and at least MEAS_MIN_RUNS repetitions unless its
 * warm-up alone took MEAS_SLOW_SHARES shares (a kernel that slow is
 * measured by what it did). The reported figure is the fastest
 * repetition: other processes taking the core (a shared machine, tests
 * run side by side) only ever slow a run down, and one preempted run
 * reported as the machine's speed makes the planner leave a worker out
 * (a worker measured f32 at 0.67 GB/s beside another's 9.94, on one
 * machine, from a single preempted run). */
#include "worker/daemon/measure.h"

#include <hwloc.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/base/clock.h"
#include "common/base/log.h"
#include "worker/engine/model.h"

#define MEAS_COLS 4096 /* columns of the matrix: a llama-ish width, a multiple of 32 */
#define MEAS_MAX_REPS 15
#define MEAS_MIN_RUNS 3    /* repetitions at least, past the share if need be ... */
#define MEAS_SLOW_SHARES 4 /* ... unless the warm-up took this many shares */

typedef struct meas_job {
    const st_kernel_ops *ops;
    st_dtype t;
    bool r8; /* time the R8 product (what st_model_place serves) */
    const uint8_t *w;
    size_t rb; /* weight row bytes */
    long rows;
    const void *x;
    size_t x_stride;
    float *y;
} meas_job;

static void meas_run(void *arg, int ith, int nth)
{
    const meas_job *j = arg;
    long b, e;
    st_pool_split(j->rows, ith, nth, &b, &e);
    if (j->r8) { /* whole groups of 8 rows */
        st_pool_split(j->rows / 8, ith, nth, &b, &e);
        b *= 8;
        e *= 8;
    }
    if (b < e)
        (j->r8 ? j->ops->mul_mat_r8 : j->ops->mul_mat)[j->t](MEAS_COLS, j->w, j->rb, b, e, j->x,
                                                             j->x_stride, 1, j->y, j->rows);
}

static uint64_t meas_rand(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15ull;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* meas_fill - makes buf[0..n) valid weights of t: normal values in
 * [0.125, 0.5) for float types; for the quantised ones the half 0x2000
 * (about 0.0078) in every 16-bit slot, so every block scale is sane in the
 * plain and in the R8 layout alike (the quants' values do not change the
 * time of the integer kernels). */
static void meas_fill(uint8_t *buf, size_t n, st_dtype t)
{
    if (t == ST_DT_F32) {
        uint32_t *p = (uint32_t *)buf;
        for (size_t i = 0; i < n / 4; i++)
            p[i] = 0x3E000000u | (p[i] & 0x007FFFFFu);
    } else if (t == ST_DT_F16) {
        uint16_t *p = (uint16_t *)buf;
        for (size_t i = 0; i < n / 2; i++)
            p[i] = (uint16_t)(0x3000u | (p[i] & 0x0FFFu));
    } else if (t == ST_DT_BF16) {
        uint16_t *p = (uint16_t *)buf;
        for (size_t i = 0; i < n / 2; i++)
            p[i] = (uint16_t)(0x3E00u | (p[i] & 0x00FFu));
    } else {
        for (size_t off = 0; off + 2 <= n; off += 2) {
            buf[off] = 0x00; /* half 0x2000, little-endian */
            buf[off + 1] = 0x20;
        }
    }
}

/* meas_dtype - times mat-vecs over the first rows of buf as dtype t. */
static st_err meas_dtype(st_pool *pool, const st_kernel_ops *ops, st_dtype t, uint8_t *buf,
                         size_t buf_bytes, const float *xf, void *xq, float *y, double budget_s,
                         st_measure *out)
{
    size_t rb, xs;
    st_dtype act = st_dtype_info_of(t)->act;
    if (st_row_size(t, MEAS_COLS, &rb) != ST_K_OK || st_row_size(act, MEAS_COLS, &xs) != ST_K_OK)
        return st_errorf(ST_EINTERNAL, "measure: row size of %s", st_dtype_info_of(t)->name);
    const bool r8 = st_model_serves_r8(ops, t); /* the layout the engine will serve */
    long rows = (long)(buf_bytes / rb);
    if (r8)
        rows -= rows % 8;
    meas_fill(buf, (size_t)rows * rb, t);
    const void *x = xf;
    if (act != ST_DT_F32) {
        ops->from_float[act](xf, xq, MEAS_COLS);
        x = xq;
    }
    meas_job j = {ops, t, r8, buf, rb, rows, x, xs, y};
    double best = 0.0; /* the fastest repetition's rate */
    int n = 0;
    double t_start = st_now_s();
    st_pool_run(pool, meas_run, &j); /* warm-up: faults and caches */
    double warm = st_now_s() - t_start;
    if (warm >= budget_s / 2 && warm > 0) { /* a slow kernel: the warm-up counts as a run */
        best = (double)rows * (double)rb / warm;
        n++;
    }
    const bool slow = warm >= budget_s * MEAS_SLOW_SHARES;
    while (n < MEAS_MAX_REPS &&
           (st_now_s() - t_start < budget_s || (n < MEAS_MIN_RUNS && !slow))) {
        double t0 = st_now_s();
        st_pool_run(pool, meas_run, &j);
        double dt = st_now_s() - t0;
        double r = dt > 0 ? (double)rows * (double)rb / dt : 0.0;
        best = r > best ? r : best;
        n++;
    }
    out->bytes_per_s[t] = best;
    out->reps[t] = n;
    return ST_OK;
}

st_err st_measure_speeds(st_pool *pool, const st_kernel_ops *ops, size_t buf_bytes, double budget_s,
                         st_measure *out)
{
    memset(out, 0, sizeof *out);
    if (buf_bytes < (1u << 20) || buf_bytes > (1u << 30) || !(budget_s > 0 && budget_s <= 60))
        return st_errorf(ST_EINVAL, "measure: buffer %zu bytes or budget %g s out of range",
                         buf_bytes, budget_s);
    double t0 = st_now_s();
    uint8_t *buf = malloc(buf_bytes);
    float *xf = malloc(MEAS_COLS * sizeof(float));
    void *xq = malloc(MEAS_COLS * sizeof(float));     /* f32 is the widest activation */
    float *y = malloc(buf_bytes / 8 * sizeof(float)); /* rows <= buf_bytes / 8 (q4_0: 2304/row) */
    st_err e = ST_OK;
    if (buf == NULL || xf == NULL || xq == NULL || y == NULL) {
        e = st_errorf(ST_ENOMEM, "measure: buffers of %zu bytes", buf_bytes);
        goto done;
    }
    uint64_t seed = 0x5eed;
    uint64_t *w64 = (uint64_t *)buf;
    for (size_t i = 0; i < buf_bytes / 8; i++)
        w64[i] = meas_rand(&seed);
    for (int i = 0; i < MEAS_COLS; i++)
        xf[i] = (float)((double)(meas_rand(&seed) >> 11) * 0x1p-53 * 2.0 - 1.0);
    double share = budget_s / ST_DT_COUNT;
    for (int t = 0; t < ST_DT_COUNT && e == ST_OK; t++) {
        if (ops->mul_mat[t] == NULL)
            continue;
        e = meas_dtype(pool, ops, (st_dtype)t, buf, buf_bytes, xf, xq, y, share, out);
    }
    out->seconds = st_now_s() - t0;
done:
    free(buf);
    free(xf);
    free(xq);
    free(y);
    return e;
}

void st_measure_topology(st_topology *out)
{
    memset(out, 0, sizeof *out);
    int cores = st_ncores();
    out->cores = cores > 0 ? (uint32_t)cores : 1u;
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) == 0) {
        if (hwloc_topology_load(topo) == 0) {
            hwloc_obj_t l3 = hwloc_get_obj_by_type(topo, HWLOC_OBJ_L3CACHE, 0);
            if (l3 != NULL && l3->attr != NULL)
                out->l3_bytes = l3->attr->cache.size;
        }
        hwloc_topology_destroy(topo);
    }
    if (out->l3_bytes == 0) {
        long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
        if (v > 0)
            out->l3_bytes = (uint64_t)v;
    }
    /* unknowns make this worker a host of its own (coordinator/planner/concurrency.h) */
    st_err e = st_host_id(out->host_id);
    out->has_host_id = e == ST_OK;
    if (e != ST_OK)
        st_log(ST_LOG_WARN, "measure", "no host id: %s", st_errmsg(e));
    if ((e = st_host_cpus(out->cpus, sizeof out->cpus)) != ST_OK)
        st_log(ST_LOG_WARN, "measure", "no CPU list: %s", st_errmsg(e));
}
