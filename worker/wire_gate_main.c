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

#include "common/base/log.h"
#include "common/base/opt.h"
#include "worker/engine/wire_gate.h"

#define WGM "strata-worker --wire-gate"
#define WGM_THREADS_MAX 1024
#define WGM_PID_MAX 4194304 /* the kernel's pid_max limit (PID_MAX_LIMIT on 64-bit) */
#define WGM_EXIT_RAN 0
#define WGM_EXIT_FAILED 1
#define WGM_EXIT_USAGE 2

static const char wgm_synopsis[] = WGM " MODEL [--threads N] [--parent PID] [--log LEVEL]\n"
                                   "  runs the i8 accuracy gate on MODEL and prints its figures\n"
                                   "  as one line of JSON";

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
    int threads = 0;
    long parent = 0;
    st_opt log = st_opt_log(&level);
    log.help = "error, warn (default), info or debug; or $STRATA_LOG";
    const st_opt opts[] = {
        {.name = "--wire-gate", .type = ST_OPT_STR, .dest = &model, .value = "MODEL",
         .help = "the GGUF model whose gate runs"},
        st_opt_threads(&threads, WGM_THREADS_MAX),
        {.name = "--parent", .type = ST_OPT_LONG, .dest = &parent, .min = 1, .max = WGM_PID_MAX,
         .value = "PID",
         .help = "the process that started it, whose end ends the gate\n"
                 "too"},
        log,
    };
    const st_opt_spec spec = {.synopsis = wgm_synopsis,
                              .opts = opts,
                              .n_opts = sizeof opts / sizeof opts[0],
                              .empty_is_missing = true};
    bool help;
    if (st_opt_parse(&spec, argc, argv, 1, &help) != ST_OK) {
        fprintf(stderr, "%s: %s (see --help)\n", WGM, st_errdetail());
        return WGM_EXIT_USAGE;
    }
    if (help)
        return WGM_EXIT_RAN;
    if (model == NULL) {
        st_opt_usage(&spec, stderr);
        return WGM_EXIT_USAGE;
    }
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
