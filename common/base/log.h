/* log.h - leveled logging to stderr.
 *
 * The level is set once at start-up (st_log_init, from a flag or the
 * STRATA_LOG environment variable: error, warn, info, debug) before any
 * thread is started; messages below it cost one comparison. Each line is
 * "TIME [level] component: message", TIME the UTC wall clock to the
 * millisecond (2026-12-01T20:40:01.123Z), left out under systemd (the
 * JOURNAL_STREAM variable: the journal stamps each line), and is written
 * with one write(2) so lines of different threads never interleave. */
#ifndef ST_LOG_H
#define ST_LOG_H

#include <stdbool.h>

typedef enum st_log_level {
    ST_LOG_ERROR = 0,
    ST_LOG_WARN = 1,
    ST_LOG_INFO = 2,
    ST_LOG_DEBUG = 3,
} st_log_level;

/* The level names, as a flag's error message lists them. */
#define ST_LOG_LEVEL_NAMES "error, warn, info or debug"

/* The level names indexed by st_log_level, then NULL (a CHOICE row of an
 * option table, common/base/opt.h, takes it as it is). */
extern const char *const st_log_level_names[];

/* st_log_level_from_name - the level called name ("error", "warn", "info"
 * or "debug": the names each line prints) into *out when out is not NULL;
 * false for any other name (*out unchanged). The one table of the names. */
bool st_log_level_from_name(const char *name, st_log_level *out);

/* st_log_init - sets the level from `level` if not NULL, else from
 * STRATA_LOG, else warn. Unknown names leave the level at warn. */
void st_log_init(const char *level);

/* st_log_set_level - sets the level directly. */
void st_log_set_level(st_log_level lvl);

/* st_log_enabled - whether messages of lvl are printed. */
int st_log_enabled(st_log_level lvl);

/* st_log - prints one line if lvl is enabled. */
void st_log(st_log_level lvl, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
