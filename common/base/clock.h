/* clock.h - monotonic time helpers. */
#ifndef ST_CLOCK_H
#define ST_CLOCK_H

#include <stdint.h>

/* st_now_ns - nanoseconds on CLOCK_MONOTONIC. */
uint64_t st_now_ns(void);

/* st_now_s - seconds on CLOCK_MONOTONIC as a double. */
double st_now_s(void);

/* st_sleep_ms - sleeps ms milliseconds (restarting after signals). */
void st_sleep_ms(uint32_t ms);

#endif
