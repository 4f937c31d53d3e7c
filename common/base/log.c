/* log.c - leveled logging to stderr (see log.h). */
#include "common/base/log.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Written once in st_log_init before threads start, read-only afterwards. */
static st_log_level log_level = ST_LOG_WARN;
static bool log_stamp = true; /* false under systemd's journal */

/* indexed by st_log_level; NULL-terminated for option tables (opt.h CHOICE) */
const char *const st_log_level_names[] = {"error", "warn", "info", "debug", NULL};

bool st_log_level_from_name(const char *name, st_log_level *out)
{
    for (size_t i = 0; st_log_level_names[i] != NULL; i++)
        if (strcmp(name, st_log_level_names[i]) == 0) {
            if (out != NULL)
                *out = (st_log_level)i;
            return true;
        }
    return false;
}

void st_log_set_level(st_log_level lvl) { log_level = lvl; }

void st_log_init(const char *level)
{
    log_stamp = getenv("JOURNAL_STREAM") == NULL;
    if (level == NULL)
        level = getenv("STRATA_LOG");
    if (level == NULL)
        return;
    st_log_level_from_name(level, &log_level);
}

int st_log_enabled(st_log_level lvl) { return lvl <= log_level; }

void st_log(st_log_level lvl, const char *component, const char *fmt, ...)
{
    if (lvl > log_level)
        return;
    char line[1024], stamp[40] = "";
    struct timespec ts;
    struct tm tm;
    if (log_stamp && clock_gettime(CLOCK_REALTIME, &ts) == 0 && gmtime_r(&ts.tv_sec, &tm)) {
        size_t k = strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(stamp + k, sizeof stamp - k, ".%03ldZ ", ts.tv_nsec / 1000000L);
    }
    int n = snprintf(line, sizeof line, "%s[%s] %s: ", stamp, st_log_level_names[lvl], component);
    if (n < 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        return;
    size_t len = (size_t)n + (size_t)m;
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}
