/* host.c - the host id and CPU lists of host.h. */
#include "common/base/host.h"

#include <hwloc.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HOST_BOOT_ID "/proc/sys/kernel/random/boot_id"
#define HOST_BOOT_ID_MAX 64 /* a UUID is 36 characters and a newline */
static const char host_context[] = "strata host id v1";

st_err st_host_id(uint8_t out[ST_HOST_ID_BYTES])
{
    FILE *f = fopen(HOST_BOOT_ID, "r");
    if (f == NULL)
        return st_errorf(ST_EIO, "%s: cannot open", HOST_BOOT_ID);
    char boot[HOST_BOOT_ID_MAX];
    size_t n = fread(boot, 1, sizeof boot, f);
    fclose(f);
    if (n == 0 || n == sizeof boot)
        return st_errorf(ST_EIO, "%s: %zu bytes, not a boot id", HOST_BOOT_ID, n);
    crypto_generichash_state st;
    if (crypto_generichash_init(&st, NULL, 0, ST_HOST_ID_BYTES) != 0 ||
        crypto_generichash_update(&st, (const unsigned char *)host_context,
                                  sizeof host_context) != 0 ||
        crypto_generichash_update(&st, (const unsigned char *)boot, n) != 0 ||
        crypto_generichash_final(&st, out, ST_HOST_ID_BYTES) != 0)
        return st_errorf(ST_EIO, "BLAKE2b of the boot id failed");
    return ST_OK;
}

st_err st_host_cpus(char *buf, size_t cap)
{
    if (cap > 0)
        buf[0] = '\0';
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0)
        return st_errorf(ST_EIO, "hwloc: cannot initialise a topology");
    st_err e = ST_OK;
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    char *list = NULL;
    if (set == NULL) {
        e = st_errorf(ST_ENOMEM, "hwloc bitmap");
    } else if (hwloc_topology_load(topo) != 0 ||
               hwloc_get_cpubind(topo, set, HWLOC_CPUBIND_PROCESS) != 0 ||
               hwloc_bitmap_iszero(set) || hwloc_bitmap_list_asprintf(&list, set) < 0) {
        e = st_errorf(ST_EIO, "hwloc: cannot read the process's CPU binding");
    } else if (strlen(list) >= cap) {
        e = st_errorf(ST_ERANGE, "the CPU list has %zu bytes; at most %zu", strlen(list),
                      cap > 0 ? cap - 1 : 0);
    } else {
        memcpy(buf, list, strlen(list) + 1);
    }
    free(list);
    hwloc_bitmap_free(set);
    hwloc_topology_destroy(topo);
    return e;
}

/* host_parse - a into a new bitmap; NULL (and *e set) when it does not parse */
static hwloc_bitmap_t host_parse(const char *a, st_err *e)
{
    hwloc_bitmap_t s = hwloc_bitmap_alloc();
    if (s == NULL) {
        *e = st_errorf(ST_ENOMEM, "hwloc bitmap");
        return NULL;
    }
    if (a == NULL || a[0] == '\0' || strlen(a) >= ST_HOST_CPUS_MAX ||
        hwloc_bitmap_list_sscanf(s, a) != 0 || hwloc_bitmap_iszero(s) ||
        hwloc_bitmap_weight(s) < 0) {
        *e = st_errorf(ST_EINVAL, "'%.64s' is not a finite, non-empty CPU list", a ? a : "");
        hwloc_bitmap_free(s);
        return NULL;
    }
    return s;
}

st_err st_host_cpus_intersect(const char *a, const char *b, bool *out)
{
    st_err e = ST_OK;
    hwloc_bitmap_t x = host_parse(a, &e), y = x != NULL ? host_parse(b, &e) : NULL;
    if (y != NULL)
        *out = hwloc_bitmap_intersects(x, y) != 0;
    hwloc_bitmap_free(x);
    hwloc_bitmap_free(y);
    return e;
}
