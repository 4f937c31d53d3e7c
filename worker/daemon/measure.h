/* measure.h - a worker's start-up self-measurement for its Capability.
 *
 * st_measure_speeds() times a mat-vec (one activation row against a weight
 * matrix of about buf_bytes bytes, larger than the last-level cache, split
 * by output rows over the pool) for every weight dtype with the kernels the
 * worker will run, and reports the weight bytes streamed per second: the
 * figure the placement uses to predict a layer's decode time. The whole
 * measurement stays within budget_s seconds (plus one repetition per dtype
 * if a kernel is slower than the budget allows).
 *
 * st_measure_topology() reports the cores of the process's cpuset and the
 * size of the L3 cache (hwloc, then sysconf). */
#ifndef ST_WORKER_MEASURE_H
#define ST_WORKER_MEASURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/base/host.h"
#include "common/base/pool.h"
#include "kernels/kernels.h"

#define ST_MEASURE_BUF_DEFAULT (64u << 20)

typedef struct st_measure {
    double bytes_per_s[ST_DT_COUNT]; /* the fastest of the timed repetitions */
    int reps[ST_DT_COUNT];           /* timed repetitions per dtype */
    double seconds;                  /* wall time of the whole measurement */
} st_measure;

/* st_measure_speeds - measures every dtype (see the file comment).
 * buf_bytes in [1 MiB, 1 GiB], budget_s in (0, 60]; ST_EINVAL otherwise,
 * ST_ENOMEM if the buffers cannot be allocated. */
st_err st_measure_speeds(st_pool *pool, const st_kernel_ops *ops, size_t buf_bytes, double budget_s,
                         st_measure *out);

typedef struct st_topology {
    uint32_t cores;
    uint64_t l3_bytes; /* 0 when unknown */
    /* common/base/host.h: which CPUs of which host (Capability.host_id, cpus) */
    bool has_host_id;
    uint8_t host_id[ST_HOST_ID_BYTES];
    char cpus[ST_HOST_CPUS_MAX]; /* "" when unknown */
} st_topology;

/* st_measure_topology - fills *out; never fails (unknowns are 0 or "",
 * cores at least 1; a host id or CPU list it cannot read is logged). */
void st_measure_topology(st_topology *out);

#endif
