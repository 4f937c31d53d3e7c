/* test_crash.c - common/base/crash.h: a child process that faults writes the
 * report (program, signal, address, thread, a call chain through this
 * program, the end line) to stderr and still dies by the same signal; for a
 * wild write, a stack overflow (the report runs on its alternate stack) and
 * abort(). Skipped under AddressSanitizer, where the report is not
 * installed (ASan's own is). */
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/base/crash.h"

#define SKIP 77
#define REPORT_MAX 65536
#define WILD_ADDR 0x10u

static volatile uintptr_t wild = WILD_ADDR;

static __attribute__((noinline)) void fault_write(void)
{
    *(volatile int *)wild = 1;
}

static volatile int deep = 1; /* always nonzero: recursion without end */

static __attribute__((noinline)) int overflow(int depth)
{
    volatile char pad[1024];
    pad[0] = (char)depth;
    return deep ? overflow(depth + 1) + pad[0] : 0;
}

typedef struct crash_case {
    const char *name;
    int sig;
    const char *addr; /* NULL: not checked */
} crash_case;

static void child(int which)
{
    prctl(PR_SET_NAME, "crashtest", 0, 0, 0);
    st_crash_install("crash-test");
    if (which == 0)
        fault_write();
    else if (which == 1)
        overflow(0);
    else
        abort();
    _exit(0); /* not reached */
}

static int run(int which, const crash_case *c)
{
    int fd[2];
    if (pipe(fd) != 0)
        return 1;
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], STDERR_FILENO);
        child(which);
    }
    close(fd[1]);
    static char rep[REPORT_MAX];
    size_t len = 0;
    ssize_t r;
    while (len < sizeof rep - 1 && (r = read(fd[0], rep + len, sizeof rep - 1 - len)) > 0)
        len += (size_t)r;
    rep[len] = '\0';
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    char head[128];
    snprintf(head, sizeof head, "crash-test: fatal signal %d (%s)", c->sig, sigabbrev_np(c->sig));
    const char *fail = NULL;
    if (!WIFSIGNALED(st) || WTERMSIG(st) != c->sig)
        fail = "the child did not die by the signal";
    else if (strncmp(rep, head, strlen(head)) != 0)
        fail = "the report's first line";
    else if (c->addr && !strstr(rep, c->addr))
        fail = "the faulting address";
    else if (!strstr(rep, ", thread crashtest; call chain:\n"))
        fail = "the thread's name";
    else if (!strstr(rep, "test_crash("))
        fail = "a frame in this program";
    else if (!strstr(rep, "crash-test: end of the crash report\n"))
        fail = "the end line";
    printf("%s: %s\n", c->name, fail ? "FAIL" : "ok");
    if (fail)
        printf("  %s; status 0x%x; report:\n%s\n", fail, (unsigned)st, rep);
    return fail != NULL;
}

int main(void)
{
#if defined(__SANITIZE_ADDRESS__)
    const bool under_asan = true;
#else
    const bool under_asan = false;
#endif
    if (under_asan) {
        printf("skip: under AddressSanitizer the crash report is not installed (ASan reports)\n");
        return SKIP;
    }
    char addr[32];
    snprintf(addr, sizeof addr, "at address 0x%x,", WILD_ADDR);
    const crash_case cases[] = {
        {"wild write", SIGSEGV, addr},
        {"stack overflow", SIGSEGV, NULL},
        {"abort", SIGABRT, NULL},
    };
    int bad = 0;
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++)
        bad += run(i, &cases[i]);
    return bad ? 1 : 0;
}
