/* i8gate_child.c - the i8 accuracy gate's child process (see
 * i8gate_child.h). */
#include "coordinator/cluster/i8gate_child.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#define IC_WORKER_NAME "strata-worker"
#define IC_BUILD_REL "/../worker/" IC_WORKER_NAME /* the build tree: coordinator/, worker/ */
#define IC_FLAG "--wire-gate"
#define IC_ERRLINE_MAX 160 /* the child's stderr: its last line kept, at most this */
#define IC_READ_CHUNK 4096
#define IC_CUT "..."
#define IC_EXACT_MAX 9007199254740992.0 /* 2^53: counts a double holds exactly */
#define IC_SHOW_MAX 80                  /* bytes of a bad line shown */
#define IC_N_FIGS 10                    /* the numbers of the JSON line */
#define IC_STOPPED (-1)                 /* ic_read_all: the stop's wake-up came */
#define IC_TERM_GRACE_MS 2000           /* a child told to end (SIGTERM) gets this, then SIGKILL */
#define IC_TERM_POLL_NS 10000000L

extern char **environ;

struct coord_i8child {
    char *bin, *model;
    int threads;
    atomic_int stop;
    int wake[2]; /* the stop's wake-up: the run's poll ends */
    pthread_mutex_t mu;
    pid_t pid;  /* mu's: the child from its start until its reap, else 0 */
    char *msg;  /* the run's why */
    size_t cap; /* of msg */
};

/* The child's output as the run reads it. */
typedef struct ic_out {
    char line[ST_WGATE_LINE_MAX + 1]; /* stdout, NUL-terminated */
    size_t n;
    bool over;                                              /* stdout went past the limit */
    char cur[IC_ERRLINE_MAX + 1], last[IC_ERRLINE_MAX + 1]; /* stderr: the line read, the last */
    size_t ncur;
    bool cur_cut;
} ic_out;

/* ic_vfmt - fmt into buf (cap bytes); a text too long for it ends with
 * "...", never cut silently. */
static void ic_vfmt(char *buf, size_t cap, const char *fmt, va_list ap)
{
    int n = vsnprintf(buf, cap, fmt, ap);
    if (n >= (int)cap && cap >= sizeof IC_CUT)
        memcpy(buf + cap - sizeof IC_CUT, IC_CUT, sizeof IC_CUT);
}

__attribute__((format(printf, 3, 4))) static void ic_fmt(char *buf, size_t cap, const char *fmt,
                                                         ...)
{
    va_list ap;
    va_start(ap, fmt);
    ic_vfmt(buf, cap, fmt, ap);
    va_end(ap);
}

/* ic_fail - e, with the run's why formatted. */
__attribute__((format(printf, 3, 4))) static st_err ic_fail(coord_i8child *ch, st_err e,
                                                            const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ic_vfmt(ch->msg, ch->cap, fmt, ap);
    va_end(ap);
    return e;
}

bool coord_i8child_bin(const char *flag, char out[PATH_MAX], char *why, size_t cap)
{
    if (flag != NULL) {
        if (strlen(flag) < PATH_MAX) {
            memcpy(out, flag, strlen(flag) + 1);
            return true;
        }
        ic_fmt(why, cap, "--worker-bin is longer than %d bytes", PATH_MAX - 1);
        return false;
    }
    char dir[PATH_MAX], beside[PATH_MAX], built[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
    char *slash = n > 0 ? memrchr(dir, '/', (size_t)n) : NULL;
    if (slash == NULL) {
        ic_fmt(why, cap,
               "no %s found: the coordinator's own path is unknown (/proc/self/exe: %s); name "
               "the worker binary with --worker-bin PATH",
               IC_WORKER_NAME, n < 0 ? strerror(errno) : "no directory");
        return false;
    }
    *slash = '\0';
    bool fit = (size_t)snprintf(beside, sizeof beside, "%s/%s", dir, IC_WORKER_NAME) <
                   sizeof beside &&
               (size_t)snprintf(built, sizeof built, "%s%s", dir, IC_BUILD_REL) < sizeof built;
    if (fit && access(beside, X_OK) == 0) {
        memcpy(out, beside, sizeof beside);
        return true;
    }
    if (fit && access(built, X_OK) == 0) {
        memcpy(out, built, sizeof built);
        return true;
    }
    ic_fmt(why, cap, "no %s found to run it: tried %s and %s; name one with --worker-bin PATH",
           IC_WORKER_NAME, beside, built);
    return false;
}

st_err coord_i8child_new(const char *bin, const char *model, int threads, coord_i8child **out)
{
    *out = NULL;
    coord_i8child *ch = calloc(1, sizeof *ch);
    if (ch == NULL)
        return st_errorf(ST_ENOMEM, "the i8 gate's child");
    ch->wake[0] = ch->wake[1] = -1;
    pthread_mutex_init(&ch->mu, NULL);
    atomic_init(&ch->stop, 0);
    ch->threads = threads;
    if ((ch->bin = strdup(bin)) == NULL || (ch->model = strdup(model)) == NULL) {
        coord_i8child_free(ch);
        return st_errorf(ST_ENOMEM, "the i8 gate's child");
    }
    if (pipe2(ch->wake, O_CLOEXEC) != 0) {
        int en = errno;
        ch->wake[0] = ch->wake[1] = -1;
        coord_i8child_free(ch);
        return st_err_errno(en, "the i8 gate's wake-up pipe");
    }
    *out = ch;
    return ST_OK;
}

void coord_i8child_free(coord_i8child *ch)
{
    if (ch == NULL)
        return;
    for (int k = 0; k < 2; k++)
        if (ch->wake[k] >= 0)
            close(ch->wake[k]);
    pthread_mutex_destroy(&ch->mu);
    free(ch->bin);
    free(ch->model);
    free(ch);
}

bool coord_i8child_stopped(coord_i8child *ch) { return atomic_load(&ch->stop) != 0; }

void coord_i8child_stop(coord_i8child *ch)
{
    atomic_store(&ch->stop, 1);
    pthread_mutex_lock(&ch->mu); /* the child, if started and not reaped yet */
    if (ch->pid > 0)
        kill(ch->pid, SIGTERM);
    pthread_mutex_unlock(&ch->mu);
    const char wake = 1; /* the pipe holds a byte at least: the run's poll ends */
    ssize_t w = write(ch->wake[1], &wake, 1);
    (void)w; /* a full pipe already wakes it */
}

/* ic_err_byte - one byte of the child's stderr into its line being read;
 * a line ends at '\n' and becomes the last one unless blank. */
static void ic_err_byte(ic_out *o, char c)
{
    if (c == '\n') {
        if (o->ncur > 0) {
            o->cur[o->ncur] = '\0';
            if (o->cur_cut)
                memcpy(o->cur + IC_ERRLINE_MAX - (sizeof IC_CUT - 1), IC_CUT, sizeof IC_CUT);
            memcpy(o->last, o->cur, sizeof o->last);
        }
        o->ncur = 0;
        o->cur_cut = false;
    } else if (o->ncur < IC_ERRLINE_MAX) {
        o->cur[o->ncur++] = c;
    } else {
        o->cur_cut = true;
    }
}

/* ic_read_all - reads the child's stdout (fds[0]) and stderr (fds[1]) to
 * their ends: 0; IC_STOPPED when the stop's wake-up came first; else an
 * errno. */
static int ic_read_all(coord_i8child *ch, int fds[2], ic_out *o)
{
    char buf[IC_READ_CHUNK];
    struct pollfd p[3] = {{.fd = fds[0], .events = POLLIN},
                          {.fd = fds[1], .events = POLLIN},
                          {.fd = ch->wake[0], .events = POLLIN}};
    while (p[0].fd >= 0 || p[1].fd >= 0) {
        if (poll(p, 3, -1) < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (p[2].revents != 0)
            return IC_STOPPED;
        for (int k = 0; k < 2; k++) {
            if (p[k].fd < 0 || p[k].revents == 0)
                continue;
            ssize_t n = read(p[k].fd, buf, sizeof buf);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0)
                return errno;
            if (n == 0) {
                p[k].fd = -1; /* its end */
                continue;
            }
            for (ssize_t i = 0; i < n; i++) {
                if (k == 1)
                    ic_err_byte(o, buf[i]);
                else if (o->n < ST_WGATE_LINE_MAX)
                    o->line[o->n++] = buf[i];
                else
                    o->over = true;
            }
        }
    }
    ic_err_byte(o, '\n'); /* a last line without its '\n' */
    o->line[o->n] = '\0';
    return 0;
}

/* ic_num - the number key of o within [lo, hi] and whole if integral:
 * true with *v. */
static bool ic_num(const cJSON *o, const char *key, double lo, double hi, bool integral, double *v)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(x))
        return false;
    *v = x->valuedouble;
    return isfinite(*v) && *v >= lo && *v <= hi && (!integral || *v == floor(*v));
}

/* ic_show - how much of a line of len bytes (its '\n' included) an error
 * shows: at most IC_SHOW_MAX bytes. */
static int ic_show(size_t len) { return len - 1 < IC_SHOW_MAX ? (int)(len - 1) : IC_SHOW_MAX; }

/* ic_cut - "..." after a line shown in part, else "". */
static const char *ic_cut(size_t len) { return len - 1 > IC_SHOW_MAX ? IC_CUT : ""; }

/* ic_parse - the child's output (its exit status 0) into *f. */
static st_err ic_parse(coord_i8child *ch, const ic_out *o, st_wgate_figs *f)
{
    size_t len = o->n;
    if (o->over)
        return ic_fail(ch, ST_ERANGE, "%s printed a line over %d bytes", ch->bin,
                       ST_WGATE_LINE_MAX);
    if (len == 0 || o->line[len - 1] != '\n' || memchr(o->line, '\n', len - 1) != NULL)
        return ic_fail(ch, ST_EFORMAT, "%s printed %s, not one line of JSON", ch->bin,
                       len == 0 ? "nothing" : "another shape");
    cJSON *root = cJSON_ParseWithLength(o->line, len - 1);
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(root, "error");
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(root, "dtype");
    const double steps = ST_WGATE_CALIB_STEPS;
    double v[IC_N_FIGS];
    st_err e = ST_OK;
    if (!cJSON_IsObject(root)) {
        e = ic_fail(ch, ST_EFORMAT, "bad JSON from %s: %.*s%s", ch->bin, ic_show(len), o->line,
                    ic_cut(len));
    } else if (cJSON_IsString(err)) {
        e = ic_fail(ch, ST_EPROTO, "%s: %s", ch->bin, err->valuestring);
    } else if (!cJSON_IsString(dt) || strcmp(dt->valuestring, st_wire_dtype_name(ST_WIRE_I8))) {
        e = ic_fail(ch, ST_EFORMAT, "bad JSON from %s: no \"dtype\": \"i8\"", ch->bin);
    } else if (!(ic_num(root, "steps", steps, steps, true, &v[0]) &&
                 ic_num(root, "top1_agree", 0, steps, true, &v[1]) &&
                 ic_num(root, "margin_steps", 0, steps, true, &v[2]) &&
                 ic_num(root, "margin_fail", 0, v[2], true, &v[3]) &&
                 ic_num(root, "top5_sum", 0, steps * ST_WGATE_TOPK, false, &v[4]) &&
                 ic_num(root, "max_err", 0, HUGE_VAL, false, &v[5]) &&
                 ic_num(root, "clamps", 0, IC_EXACT_MAX, true, &v[6]) &&
                 ic_num(root, "raw_bytes", 0, IC_EXACT_MAX, true, &v[7]) &&
                 ic_num(root, "zstd_bytes", 0, IC_EXACT_MAX, true, &v[8]) &&
                 ic_num(root, "plane_bytes", 0, IC_EXACT_MAX, true, &v[9]))) {
        e = ic_fail(ch, ST_EFORMAT,
                    "bad JSON from %s: a figure missing or out of range (steps must be %d): %.*s%s",
                    ch->bin, ST_WGATE_CALIB_STEPS, ic_show(len), o->line, ic_cut(len));
    } else {
        *f = (st_wgate_figs){.steps = (int)v[0],
                             .top1_agree = (int)v[1],
                             .margin_steps = (int)v[2],
                             .margin_fail = (int)v[3],
                             .top5_sum = v[4],
                             .max_err = v[5],
                             .clamps = (uint64_t)v[6],
                             .raw_bytes = (uint64_t)v[7],
                             .zstd_bytes = (uint64_t)v[8],
                             .plane_bytes = (uint64_t)v[9]};
    }
    cJSON_Delete(root);
    return e;
}

/* ic_spawn - the child with stdout on out and stderr on err (above): *pid,
 * or an error. */
static st_err ic_spawn(coord_i8child *ch, int out, int err, pid_t *pid)
{
    char threads[16], parent[24];
    snprintf(threads, sizeof threads, "%d", ch->threads);
    snprintf(parent, sizeof parent, "%ld", (long)getpid());
    char *const argv[] = {ch->bin, IC_FLAG,    ch->model, "--threads",
                          threads, "--parent", parent,    NULL};
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    sigset_t none, dfl;
    sigemptyset(&none);
    sigemptyset(&dfl);
    sigaddset(&dfl, SIGPIPE);
    sigaddset(&dfl, SIGINT);
    sigaddset(&dfl, SIGTERM);
    int rc = posix_spawn_file_actions_init(&fa);
    if (rc != 0)
        return ic_fail(ch, ST_ENOMEM, "posix_spawn_file_actions_init: %s", strerror(rc));
    if ((rc = posix_spawnattr_init(&at)) != 0) {
        posix_spawn_file_actions_destroy(&fa);
        return ic_fail(ch, ST_ENOMEM, "posix_spawnattr_init: %s", strerror(rc));
    }
    st_err e = ST_OK;
    if ((rc = posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0)) ||
        (rc = posix_spawn_file_actions_adddup2(&fa, out, STDOUT_FILENO)) ||
        (rc = posix_spawn_file_actions_adddup2(&fa, err, STDERR_FILENO)) ||
        (rc = posix_spawn_file_actions_addclosefrom_np(&fa, STDERR_FILENO + 1)) ||
        (rc = posix_spawnattr_setsigmask(&at, &none)) ||
        (rc = posix_spawnattr_setsigdefault(&at, &dfl)) ||
        (rc = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF)))
        e = ic_fail(ch, ST_EINTERNAL, "posix_spawn's attributes: %s", strerror(rc));
    else if ((rc = posix_spawn(pid, ch->bin, &fa, &at, argv, environ)) != 0)
        e = ic_fail(ch, rc == ENOENT ? ST_ENOENT : ST_EIO,
                    "cannot start the worker binary %s (--worker-bin names another): %s", ch->bin,
                    strerror(rc));
    posix_spawnattr_destroy(&at);
    posix_spawn_file_actions_destroy(&fa);
    return e;
}

/* ic_reap - waits for the child to end, then reaps it under mu (the pid is
 * never reused while a stop may signal it): its wait status. A child that
 * was told to end (ended: SIGTERM sent) and has not after IC_TERM_GRACE_MS
 * gets SIGKILL, so a stop never waits on a child that ignores SIGTERM. */
static int ic_reap(coord_i8child *ch, pid_t pid, bool ended)
{
    siginfo_t si;
    if (ended) {
        const struct timespec poll = {.tv_nsec = IC_TERM_POLL_NS};
        long waited_ms = 0;
        for (;;) {
            memset(&si, 0, sizeof si);
            int rc = waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT | WNOHANG);
            if (rc == 0 && si.si_pid == pid)
                break; /* it has ended */
            if (rc != 0 && errno != EINTR)
                break; /* nothing to wait for: the blocking wait below says so */
            if (waited_ms >= IC_TERM_GRACE_MS) {
                pthread_mutex_lock(&ch->mu);
                kill(pid, SIGKILL);
                pthread_mutex_unlock(&ch->mu);
                break;
            }
            nanosleep(&poll, NULL);
            waited_ms += IC_TERM_POLL_NS / 1000000L;
        }
    }
    while (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT) != 0 && errno == EINTR)
        ;
    int status = 0;
    pthread_mutex_lock(&ch->mu);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    ch->pid = 0;
    pthread_mutex_unlock(&ch->mu);
    return status;
}

st_err coord_i8child_run(coord_i8child *ch, st_wgate_figs *figs, char *msg, size_t cap)
{
    memset(figs, 0, sizeof *figs);
    ch->msg = msg;
    ch->cap = cap;
    msg[0] = '\0';
    int po[2], pe[2];
    if (pipe2(po, O_CLOEXEC) != 0)
        return ic_fail(ch, ST_EIO, "pipe: %s", strerror(errno));
    if (pipe2(pe, O_CLOEXEC) != 0) {
        int en = errno;
        close(po[0]);
        close(po[1]);
        return ic_fail(ch, ST_EIO, "pipe: %s", strerror(en));
    }
    pid_t pid = 0;
    st_err e = ST_OK;
    pthread_mutex_lock(&ch->mu); /* a stop either comes first or sees the pid */
    if (coord_i8child_stopped(ch))
        e = ic_fail(ch, ST_ECANCELED, "stopped");
    else if ((e = ic_spawn(ch, po[1], pe[1], &pid)) == ST_OK)
        ch->pid = pid;
    pthread_mutex_unlock(&ch->mu);
    close(po[1]);
    close(pe[1]);
    ic_out *o = e == ST_OK ? calloc(1, sizeof *o) : NULL;
    int fds[2] = {po[0], pe[0]};
    int rd = e != ST_OK ? 0 : o != NULL ? ic_read_all(ch, fds, o) : ENOMEM;
    close(po[0]);
    close(pe[0]);
    if (e != ST_OK)
        return e;
    if (rd != 0) { /* stopped, or its output unreadable: it ends now */
        pthread_mutex_lock(&ch->mu);
        kill(pid, SIGTERM);
        pthread_mutex_unlock(&ch->mu);
    }
    int status = ic_reap(ch, pid, rd != 0 || coord_i8child_stopped(ch));
    const char *last = o != NULL && o->last[0] ? o->last : "(nothing on stderr)";
    if (coord_i8child_stopped(ch) || rd == IC_STOPPED)
        e = ic_fail(ch, ST_ECANCELED, "stopped");
    else if (rd != 0)
        e = ic_fail(ch, ST_EIO, "reading the output of %s: %s", ch->bin, strerror(rd));
    else if (WIFSIGNALED(status))
        e = ic_fail(ch, ST_EIO, "%s was killed by signal %d (%s); its stderr's last line: %s",
                    ch->bin, WTERMSIG(status), strsignal(WTERMSIG(status)), last);
    else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        e = ic_fail(ch, ST_EIO, "%s exited with status %d: %s", ch->bin,
                    WIFEXITED(status) ? WEXITSTATUS(status) : -1, last);
    else
        e = ic_parse(ch, o, figs);
    free(o);
    return e;
}
