/* host.h - which machine a process computes on, and on which of its CPUs:
 * what a worker announces (Capability.host_id, Capability.cpus) so the
 * coordinator knows which workers share cores (coordinator/planner/concurrency.h).
 *
 * The host id is BLAKE2b-128 of the running kernel's boot id
 * (/proc/sys/kernel/random/boot_id) under a fixed context: every process
 * under one kernel (containers and network namespaces included) has the
 * same one, two machines (or one machine's two boots) different ones, and
 * the boot id itself is not disclosed. A cloned VM image keeps
 * /etc/machine-id but not the boot id, which is why the boot id is used.
 *
 * The CPU list is the process's CPU binding in the kernel's list format
 * ("0-3,8"), as hwloc reads and writes it. Two workers of one host share
 * cores when their lists intersect. */
#ifndef ST_HOST_H
#define ST_HOST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"

#define ST_HOST_ID_BYTES 16   /* Capability.host_id */
#define ST_HOST_CPUS_MAX 1024 /* bytes of Capability.cpus, terminator included */

/* st_host_id - this kernel's host id into out. ST_EIO (nothing written)
 * when the boot id cannot be read. */
st_err st_host_id(uint8_t out[ST_HOST_ID_BYTES]);

/* st_host_cpus - this process's CPU binding as a list into buf (cap
 * bytes). ST_EIO when hwloc cannot tell, ST_ERANGE when the list does not
 * fit; buf is "" then. */
st_err st_host_cpus(char *buf, size_t cap);

/* st_host_cpus_intersect - whether the CPU lists a and b name a common
 * CPU into *out; ST_EINVAL (naming the list) when one does not parse. */
st_err st_host_cpus_intersect(const char *a, const char *b, bool *out);

#endif
