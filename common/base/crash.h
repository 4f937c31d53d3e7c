/* crash.h - a crash report on stderr for a process killed by a fault.
 *
 * A Strata program (worker, coordinator, embedding service, the strata
 * CLI; never the library libstrata, whose host owns its signals) that
 * faults (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) writes one report to
 * stderr before it dies: the program, the
 * signal, the faulting address, the thread's name and the call chain as
 * glibc's backtrace_symbols_fd prints it (shared libraries as
 * "libnng.so.1(+0x1b9bb)", so a fault inside a library without symbols can
 * be placed with objdump). The handler then restores the default action and
 * re-raises, so the exit status, a core dump and the kernel's log line are
 * what they would have been without it.
 *
 * It uses only async-signal-safe calls (write, prctl, sigaction, raise) plus
 * backtrace(), whose library st_crash_install loads in advance; it runs on
 * its own alternate stack (a stack overflow is reported too). Not installed
 * under AddressSanitizer, whose own fault report is better. One install per
 * process, from main before any thread starts (the alternate stack is the
 * installing thread's; other threads' faults run the handler on their own
 * stacks). */
#ifndef ST_CRASH_H
#define ST_CRASH_H

/* st_crash_install - installs the report for program prog (a string that
 * lives as long as the process). The report is diagnostic: if a handler
 * cannot be set, one line on stderr says why and the process runs on
 * without it. */
void st_crash_install(const char *prog);

#endif
