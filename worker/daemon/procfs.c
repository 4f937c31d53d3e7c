/* procfs.c - the worker's readers of /proc: the memory available to a
 * new stage (MemAvailable of /proc/meminfo, the default memory budget) and
 * this process's resident set (/proc/self/statm, sent with heartbeats).
 * Declared in daemon.h. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

#include "worker/daemon/daemon.h"

st_err st_mem_available(uint64_t *out)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (f == NULL)
        return st_err_errno(errno, "/proc/meminfo");
    char line[256];
    unsigned long long kb = 0;
    bool found = false;
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
            found = true;
            break;
        }
    fclose(f);
    if (!found)
        return st_errorf(ST_EMISSING, "/proc/meminfo has no MemAvailable line");
    *out = (uint64_t)kb * 1024u;
    return ST_OK;
}

uint64_t st_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (f == NULL)
        return 0;
    unsigned long long size = 0, res = 0;
    int n = fscanf(f, "%llu %llu", &size, &res);
    fclose(f);
    long ps = sysconf(_SC_PAGESIZE);
    return n == 2 && ps > 0 ? (uint64_t)res * (uint64_t)ps : 0;
}
