/* i8gate.c - the coordinator's i8 accuracy gate (see i8gate.h). */
#include "coordinator/cluster/i8gate.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/base/log.h"
#include "common/model/manifest.h"
#include "coordinator/coord_impl.h"
#include "coordinator/cluster/i8gate_child.h"

#define CO "coordinator"
#define I8_CACHE_EXT ".i8gate"
#define I8_BESIDE_SUFFIX ".strata-i8gate"
#define I8_CACHE_VERSION 1
#define I8_LINE_MAX 512
#define I8_CACHE_FIELDS 7 /* the figures' line */
#define I8_NS 1e-9
#define I8_HOLD_POLL_NS 20000000 /* 20 ms */

/* One run of the gate: the thread's own state, owned by the owner thread
 * (freed after the join). The thread writes figs, err, msg and seconds,
 * then posts the job; the owner reads them only after that event. */
struct coord_i8job {
    char *hold; /* tests only: start once this file exists (NULL: at once) */
    st_cq *q;
    coord_i8child *child; /* the child process that runs the gate (i8gate_child.h) */
    pthread_t thr;
    st_wgate_figs figs;
    st_err err;
    char msg[sizeof(((coord_i8gate *)0)->error)];
    double seconds;
};

static double i8_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * I8_NS;
}

static void *i8_main(void *arg)
{
    coord_i8job *j = arg;
    /* the test hold point: the gate starts once the file exists */
    const struct timespec tick = {.tv_nsec = I8_HOLD_POLL_NS};
    while (j->hold != NULL && access(j->hold, F_OK) != 0 && !coord_i8child_stopped(j->child))
        nanosleep(&tick, NULL);
    double t0 = i8_now();
    j->err = coord_i8child_run(j->child, &j->figs, j->msg, sizeof j->msg);
    j->seconds = i8_now() - t0;
    st_cq_event ev = {.kind = ST_CQ_I8GATE, .op = j};
    st_cq_push(j->q, &ev);
    return NULL;
}

/* ---- the cache ---- */

/* i8_key - the cache's first line: the model file (size, mtime) and the
 * calibration run the figures belong to. */
static void i8_key(const struct stat *st, char *out, size_t cap)
{
    snprintf(out, cap, "strata-i8gate %d size=%llu mtime=%lld.%09ld prompt=%d steps=%d\n",
             I8_CACHE_VERSION, (unsigned long long)st->st_size, (long long)st->st_mtim.tv_sec,
             (long)st->st_mtim.tv_nsec, ST_WGATE_CALIB_ID, ST_WGATE_CALIB_STEPS);
}

/* i8_paths - the cache file under the cache directory (empty when there is
 * none) and beside the model. */
static void i8_paths(const st_coord *c, char other[PATH_MAX], char beside[PATH_MAX])
{
    other[0] = '\0';
    if (c->cfg.cache_dir != NULL &&
        st_manifest_cache_file(c->cfg.model_path, c->cfg.cache_dir, I8_CACHE_EXT, other,
                               PATH_MAX) != ST_OK) {
        st_log(ST_LOG_WARN, CO, "no i8 gate cache under %s: %s", c->cfg.cache_dir, st_errdetail());
        other[0] = '\0';
    }
    if ((size_t)snprintf(beside, PATH_MAX, "%s%s", c->cfg.model_path, I8_BESIDE_SUFFIX) >= PATH_MAX)
        beside[0] = '\0';
}

/* i8_read - the figures in cache file path if its key is key: true. */
static bool i8_read(const char *path, const char *key, st_wgate_figs *f)
{
    FILE *fp = fopen(path, "r");
    if (fp == NULL)
        return false;
    char l1[I8_LINE_MAX], l2[I8_LINE_MAX];
    unsigned long long clamps = 0;
    bool ok = fgets(l1, sizeof l1, fp) != NULL && strcmp(l1, key) == 0 &&
              fgets(l2, sizeof l2, fp) != NULL && fgetc(fp) == EOF;
    fclose(fp);
    memset(f, 0, sizeof *f);
    ok = ok && sscanf(l2, "steps=%d top1=%d margin=%d/%d top5sum=%lg maxerr=%lg clamps=%llu\n",
                      &f->steps, &f->top1_agree, &f->margin_steps, &f->margin_fail, &f->top5_sum,
                      &f->max_err, &clamps) == I8_CACHE_FIELDS;
    f->clamps = clamps;
    return ok && f->steps == ST_WGATE_CALIB_STEPS && f->top1_agree >= 0 &&
           f->top1_agree <= f->steps;
}

/* i8_write - the figures under key into path (a temporary name, then a
 * rename). */
static st_err i8_write(const char *path, const char *key, const st_wgate_figs *f)
{
    char tmp[PATH_MAX];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid()) >= sizeof tmp)
        return st_errorf(ST_ERANGE, "i8 gate cache path '%s' is too long", path);
    FILE *fp = fopen(tmp, "w");
    if (fp == NULL)
        return st_err_errno(errno, tmp);
    bool ok = fprintf(fp,
                      "%ssteps=%d top1=%d margin=%d/%d top5sum=%.17g maxerr=%.17g clamps=%llu\n",
                      key, f->steps, f->top1_agree, f->margin_steps, f->margin_fail, f->top5_sum,
                      f->max_err, (unsigned long long)f->clamps) > 0;
    int en = errno;
    if (fclose(fp) != 0 && ok) {
        ok = false;
        en = errno;
    }
    if (!ok || rename(tmp, path) != 0) {
        en = ok ? errno : en;
        unlink(tmp);
        return st_err_errno(en, path);
    }
    return ST_OK;
}

/* i8_cache_load - the cached figures of the model file: true. */
static bool i8_cache_load(const st_coord *c, st_wgate_figs *f)
{
    struct stat st;
    if (stat(c->cfg.model_path, &st) != 0)
        return false;
    char key[I8_LINE_MAX], other[PATH_MAX], beside[PATH_MAX];
    i8_key(&st, key, sizeof key);
    i8_paths(c, other, beside);
    return (other[0] && i8_read(other, key, f)) || (beside[0] && i8_read(beside, key, f));
}

/* i8_cache_store - the figures into the cache (else beside the model); a
 * failure is logged: the gate then runs again at the next start. */
static void i8_cache_store(const st_coord *c, const st_wgate_figs *f)
{
    struct stat st;
    if (stat(c->cfg.model_path, &st) != 0) {
        st_log(ST_LOG_WARN, CO, "the i8 gate's figures are not cached: %s: %s", c->cfg.model_path,
               strerror(errno));
        return;
    }
    char key[I8_LINE_MAX], other[PATH_MAX], beside[PATH_MAX], why[300] = "no cache directory";
    i8_key(&st, key, sizeof key);
    i8_paths(c, other, beside);
    if (other[0] && i8_write(other, key, f) == ST_OK)
        return;
    if (other[0])
        snprintf(why, sizeof why, "%s", st_errdetail());
    if (beside[0] && i8_write(beside, key, f) == ST_OK)
        return;
    st_log(ST_LOG_WARN, CO,
           "the i8 gate's figures are not cached (%s; %s): it runs again at "
           "the next start",
           why, st_errdetail());
}

/* ---- the state machine ---- */

static void i8_verdict(st_coord *c)
{
    coord_i8gate *g = &c->i8;
    g->state = st_wgate_pass(ST_WIRE_I8, &g->figs, g->top1_min, NULL) ? COORD_I8_PASSED
                                                                      : COORD_I8_FAILED;
    char text[400];
    st_log(g->state == COORD_I8_PASSED ? ST_LOG_INFO : ST_LOG_WARN, CO, "i8 accuracy gate %s",
           coord_i8gate_text(c, text, sizeof text));
}

/* i8_job_free - frees a job whose thread was joined or never started. */
static void i8_job_free(coord_i8job *j)
{
    coord_i8child_free(j->child);
    free(j->hold);
    free(j);
}

st_err coord_i8gate_start(st_coord *c)
{
    coord_i8gate *g = &c->i8;
    memset(g, 0, sizeof *g);
    g->top1_min = c->cfg.i8_gate_top1 > 0 ? c->cfg.i8_gate_top1 : ST_WGATE_I8_TOP1_MIN;
    if (!c->cfg.allow_i8)
        return ST_OK;
    if (i8_cache_load(c, &g->figs)) {
        g->cached = true;
        i8_verdict(c);
        return ST_OK;
    }
    char bin[PATH_MAX];
    if (!coord_i8child_bin(c->cfg.worker_bin, bin, g->error, sizeof g->error)) {
        g->state = COORD_I8_FAILED;
        st_log(ST_LOG_WARN, CO,
               "i8 accuracy gate failed: it could not run on %s (%s): no boundary gets i8",
               c->cfg.model_path, g->error);
        return ST_OK;
    }
    coord_i8job *j = calloc(1, sizeof *j);
    if (j == NULL || (c->cfg.i8_gate_hold && (j->hold = strdup(c->cfg.i8_gate_hold)) == NULL)) {
        free(j);
        return st_errorf(ST_ENOMEM, "the i8 gate");
    }
    st_err e = coord_i8child_new(bin, c->cfg.model_path, COORD_I8GATE_THREADS, &j->child);
    if (e != ST_OK) {
        i8_job_free(j);
        return e;
    }
    j->q = &c->q;
    int rc = pthread_create(&j->thr, NULL, i8_main, j);
    if (rc != 0) {
        i8_job_free(j);
        return st_err_errno(rc, "the i8 gate's thread");
    }
    g->job = j;
    g->state = COORD_I8_PENDING;
    st_log(ST_LOG_INFO, CO,
           "i8 accuracy gate: running on %s in a child process, `%s --wire-gate MODEL --threads "
           "%d` (i8 at every layer boundary, %d greedy steps after the prompt id %d, top1 >= "
           "%.3g%% to pass); no boundary gets i8 until it passes",
           c->cfg.model_path, bin, COORD_I8GATE_THREADS, ST_WGATE_CALIB_STEPS, ST_WGATE_CALIB_ID,
           g->top1_min);
    return ST_OK;
}

/* i8_join - waits for the job's thread and frees the job. */
static void i8_join(coord_i8job *j)
{
    pthread_join(j->thr, NULL);
    i8_job_free(j);
}

void coord_i8gate_done(st_coord *c, void *op)
{
    coord_i8gate *g = &c->i8;
    coord_i8job *j = op;
    if (j == NULL || j != g->job)
        return; /* not ours: nothing to take */
    g->job = NULL;
    g->figs = j->figs;
    g->seconds = j->seconds;
    if (j->err != ST_OK) {
        snprintf(g->error, sizeof g->error, "%s", j->msg);
        g->state = COORD_I8_FAILED;
        st_log(ST_LOG_WARN, CO,
               "i8 accuracy gate failed: it could not run on %s (%s) after %.3g s: "
               "no boundary gets i8",
               c->cfg.model_path, g->error, g->seconds);
        i8_join(j);
        return;
    }
    i8_join(j);
    i8_cache_store(c, &g->figs);
    i8_verdict(c);
    if (g->state == COORD_I8_PASSED && c->plans.has_committed)
        coord_replan(c, false, "the i8 accuracy gate passed");
}

void coord_i8gate_stop(st_coord *c)
{
    coord_i8job *j = c->i8.job;
    if (j == NULL)
        return;
    c->i8.job = NULL;
    coord_i8child_stop(j->child); /* SIGTERM to the child; the thread reaps it */
    i8_join(j); /* its event, if it posted one, carries a freed op: not looked at */
}

bool coord_i8gate_allows(const st_coord *c) { return c->i8.state == COORD_I8_PASSED; }

const char *coord_i8gate_text(const st_coord *c, char *buf, size_t cap)
{
    const coord_i8gate *g = &c->i8;
    const st_wgate_figs *f = &g->figs;
    char when[64];
    if (g->cached)
        snprintf(when, sizeof when, "from the cache");
    else
        snprintf(when, sizeof when, "computed in %.3g s", g->seconds);
    switch (g->state) {
    case COORD_I8_NOT_ASKED:
        snprintf(buf, cap, "not asked (no --allow-i8)");
        break;
    case COORD_I8_PENDING:
        snprintf(buf, cap, "pending: running on the model (i8 at every layer boundary, %d steps)",
                 ST_WGATE_CALIB_STEPS);
        break;
    case COORD_I8_PASSED:
    case COORD_I8_FAILED:
        if (g->error[0]) {
            snprintf(buf, cap, "failed: the gate could not run (%s)", g->error);
            break;
        }
        snprintf(buf, cap,
                 "%s: top1 %.1f%% %s %.3g%% (%d/%d steps), top5 %.3f, max logit error %.4g; i8 "
                 "at every layer boundary, %s",
                 g->state == COORD_I8_PASSED ? "passed" : "failed", st_wgate_top1_pct(f),
                 g->state == COORD_I8_PASSED ? ">=" : "<", g->top1_min, f->top1_agree, f->steps,
                 st_wgate_top5_mean(f), f->max_err, when);
        break;
    }
    return buf;
}

void coord_i8gate_note(const st_coord *c, char *why, size_t cap)
{
    const coord_i8gate *g = &c->i8;
    char note[96];
    switch (g->state) {
    case COORD_I8_NOT_ASKED:
        snprintf(note, sizeof note, "; i8 gate not asked");
        break;
    case COORD_I8_PENDING:
        snprintf(note, sizeof note, "; i8 gate pending");
        break;
    default:
        if (g->error[0])
            snprintf(note, sizeof note, "; i8 gate failed (could not run)");
        else
            snprintf(note, sizeof note, "; i8 gate %s (top1 %.1f%% %s %.3g%%)",
                     g->state == COORD_I8_PASSED ? "passed" : "failed", st_wgate_top1_pct(&g->figs),
                     g->state == COORD_I8_PASSED ? ">=" : "<", g->top1_min);
        break;
    }
    size_t len = strlen(why);
    if (len + strlen(note) >= cap) {
        st_log(ST_LOG_WARN, CO, "a boundary's reason has no room for '%s': %s", note + 2, why);
        return;
    }
    memcpy(why + len, note, strlen(note) + 1);
}
