/* clock.c - monotonic time helpers (see clock.h). */
#include "common/base/clock.h"

#include <errno.h>
#include <time.h>

uint64_t st_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double st_now_s(void) { return (double)st_now_ns() * 1e-9; }

void st_sleep_ms(uint32_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}
