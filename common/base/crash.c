/* crash.c - the fault report (crash.h has the contract). */
#include "common/base/crash.h"

#include <errno.h>
#include <execinfo.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#define CRASH_FRAMES 64
#define CRASH_STACK_BYTES 65536 /* the alternate stack: backtrace's frames fit */
#define CRASH_NAME_BYTES 16     /* prctl's thread names, with the NUL */
#define CRASH_HEX_DIGITS 16
#if defined(__SANITIZE_ADDRESS__)
#define CRASH_UNDER_ASAN true /* ASan's report is better (crash.h) */
#else
#define CRASH_UNDER_ASAN false
#endif

static const char *crash_prog = "strata";
static char crash_stack[CRASH_STACK_BYTES];
static const int crash_signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};

static void crash_put(const char *s)
{
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = write(STDERR_FILENO, s, n);
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

static void crash_put_hex(uintptr_t v)
{
    char b[2 + CRASH_HEX_DIGITS + 1];
    char *p = b + sizeof b - 1;
    *p = '\0';
    do {
        *--p = "0123456789abcdef"[v & 0xf];
        v >>= 4;
    } while (v != 0);
    *--p = 'x';
    *--p = '0';
    crash_put(p);
}

static void crash_put_dec(int v)
{
    char b[12];
    char *p = b + sizeof b - 1;
    unsigned u = v < 0 ? 0u - (unsigned)v : (unsigned)v;
    *p = '\0';
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    if (v < 0)
        *--p = '-';
    crash_put(p);
}

static void crash_handler(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    char name[CRASH_NAME_BYTES] = {0};
    prctl(PR_GET_NAME, name, 0, 0, 0);
    crash_put(crash_prog);
    crash_put(": fatal signal ");
    crash_put_dec(sig);
    crash_put(" (");
    crash_put(sigabbrev_np(sig) ? sigabbrev_np(sig) : "?");
    crash_put(") at address ");
    crash_put_hex((uintptr_t)si->si_addr);
    crash_put(", code ");
    crash_put_dec(si->si_code);
    crash_put(", thread ");
    crash_put(name);
    crash_put("; call chain:\n");
    void *frames[CRASH_FRAMES];
    int n = backtrace(frames, CRASH_FRAMES);
    backtrace_symbols_fd(frames, n, STDERR_FILENO);
    crash_put(crash_prog);
    crash_put(": end of the crash report\n");
    signal(sig, SIG_DFL);
    raise(sig);
}

void st_crash_install(const char *prog)
{
    if (CRASH_UNDER_ASAN)
        return;
    crash_prog = prog;
    void *warm[1];
    backtrace(warm, 1); /* loads libgcc_s now, not in the handler */
    stack_t ss = {.ss_sp = crash_stack, .ss_size = sizeof crash_stack, .ss_flags = 0};
    if (sigaltstack(&ss, NULL) != 0) {
        fprintf(stderr, "%s: no crash report: sigaltstack: %s\n", prog, strerror(errno));
        return;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = crash_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof crash_signals / sizeof crash_signals[0]; i++)
        if (sigaction(crash_signals[i], &sa, NULL) != 0)
            fprintf(stderr, "%s: no crash report for signal %d: sigaction: %s\n", prog,
                    crash_signals[i], strerror(errno));
}
