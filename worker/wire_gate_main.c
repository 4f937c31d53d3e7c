/* wire_gate_main.c - `strata-worker --wire-gate` (see wire_gate_main.h). */
#include "worker/wire_gate_main.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/log.h"
#include "worker/wire_gate.h"

#define WGM "strata-worker --wire-gate"
#define WGM_THREADS_MAX 1024
#define WGM_PID_MAX 4194304 /* the kernel's pid_max limit (PID_MAX_LIMIT on 64-bit) */
#define WGM_EXIT_RAN 0
#define WGM_EXIT_FAILED 1
#define WGM_EXIT_USAGE 2

static int wgm_usage(void)
{
    fprintf(stderr, "usage: strata-worker --wire-gate MODEL [--threads N] [--parent PID] "
                    "[--log LEVEL]\n"
                    "  runs the i8 accuracy gate on MODEL and prints its figures as one line\n"
                    "  of JSON (--threads: compute threads, default the cores; --parent: the\n"
                    "  process that started it, whose end ends the gate too)\n");
    return WGM_EXIT_USAGE;
}

/* wgm_print - o as one line on stdout, at most ST_WGATE_LINE_MAX bytes
 * with its '\n': 0, else -1 (message on stderr). Frees o. */
static int wgm_print(cJSON *o)
{
    char *s = o != NULL ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (s == NULL) {
        fprintf(stderr, "%s: out of memory for the figures' JSON\n", WGM);
        return -1;
    }
    size_t n = strlen(s);
    int rc = 0;
    if (n + 1 > ST_WGATE_LINE_MAX) {
        fprintf(stderr, "%s: the figures' JSON is %zu bytes, over the limit of %d\n", WGM, n + 1,
                ST_WGATE_LINE_MAX);
        rc = -1;
    } else if (printf("%s\n", s) < 0 || fflush(stdout) != 0) {
        fprintf(stderr, "%s: writing the figures: %s\n", WGM, strerror(errno));
        rc = -1;
    }
    cJSON_free(s);
    return rc;
}

/* wgm_bind_parent - the kernel sends us SIGKILL when the thread that
 * started us ends (PR_SET_PDEATHSIG), so a gate outlives no coordinator,
 * also one killed with SIGKILL; parent already gone (we were re-parented
 * before the call) is an error. 0, else -1 (message on stderr). */
static int wgm_bind_parent(long parent)
{
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
        fprintf(stderr, "%s: prctl(PR_SET_PDEATHSIG): %s\n", WGM, strerror(errno));
        return -1;
    }
    const long now = (long)getppid();
    if (now != parent) {
        fprintf(stderr,
                "%s: --parent %ld is not this process's parent (%ld): the process that "
                "started it has ended\n",
                WGM, parent, now);
        return -1;
    }
    return 0;
}

/* wgm_figs - the figures as the JSON object of wire_gate_figs.h. */
static cJSON *wgm_figs(const st_wgate_figs *f)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL)
        return NULL;
    const struct {
        const char *key;
        double v;
    } num[] = {{"steps", f->steps},
               {"top1_agree", f->top1_agree},
               {"margin_steps", f->margin_steps},
               {"margin_fail", f->margin_fail},
               {"top5_sum", f->top5_sum},
               {"max_err", f->max_err},
               {"clamps", (double)f->clamps},
               {"raw_bytes", (double)f->raw_bytes},
               {"zstd_bytes", (double)f->zstd_bytes},
               {"plane_bytes", (double)f->plane_bytes}};
    bool ok = cJSON_AddStringToObject(o, "dtype", st_wire_dtype_name(ST_WIRE_I8)) != NULL;
    for (size_t i = 0; ok && i < sizeof num / sizeof num[0]; i++)
        ok = cJSON_AddNumberToObject(o, num[i].key, num[i].v) != NULL;
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

int st_wire_gate_main(int argc, char **argv)
{
    const char *model = NULL, *level = NULL;
    long threads = 0, parent = 0;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (i + 1 >= argc || argv[i + 1][0] == '\0') {
            fprintf(stderr, "%s: %s needs a value\n", WGM, f);
            return wgm_usage();
        }
        const char *v = argv[++i];
        if (strcmp(f, "--wire-gate") == 0) {
            model = v;
        } else if (strcmp(f, "--threads") == 0) {
            char *end;
            errno = 0;
            threads = strtol(v, &end, 10);
            if (*end != '\0' || errno != 0 || threads < 1 || threads > WGM_THREADS_MAX) {
                fprintf(stderr, "%s: --threads '%s': an integer in 1..%d is required\n", WGM, v,
                        WGM_THREADS_MAX);
                return WGM_EXIT_USAGE;
            }
        } else if (strcmp(f, "--parent") == 0) {
            char *end;
            errno = 0;
            parent = strtol(v, &end, 10);
            if (*end != '\0' || errno != 0 || parent < 1 || parent > WGM_PID_MAX) {
                fprintf(stderr, "%s: --parent '%s': a process id in 1..%d is required\n", WGM, v,
                        WGM_PID_MAX);
                return WGM_EXIT_USAGE;
            }
        } else if (strcmp(f, "--log") == 0) {
            if (!st_log_level_from_name(v, NULL)) {
                fprintf(stderr, "%s: --log '%s': " ST_LOG_LEVEL_NAMES "\n", WGM, v);
                return WGM_EXIT_USAGE;
            }
            level = v;
        } else {
            fprintf(stderr, "%s: unknown argument '%s'\n", WGM, f);
            return wgm_usage();
        }
    }
    if (model == NULL)
        return wgm_usage();
    if (parent != 0 && wgm_bind_parent(parent) != 0)
        return WGM_EXIT_FAILED;
    st_log_init(level != NULL ? level : getenv("STRATA_LOG") != NULL ? NULL : "warn");

    st_wgate_figs f;
    st_err e = st_wgate_i8(model, (int)threads, NULL, &f);
    if (e != ST_OK) {
        char why[ST_WGATE_LINE_MAX / 2];
        snprintf(why, sizeof why, "%s", st_errmsg(e));
        fprintf(stderr, "%s: %s\n", WGM, why);
        cJSON *o = cJSON_CreateObject();
        if (o != NULL && cJSON_AddStringToObject(o, "error", why) == NULL) {
            cJSON_Delete(o);
            o = NULL;
        }
        wgm_print(o);
        return WGM_EXIT_FAILED;
    }
    return wgm_print(wgm_figs(&f)) == 0 ? WGM_EXIT_RAN : WGM_EXIT_FAILED;
}
