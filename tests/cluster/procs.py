"""procs.py - the cluster harness's processes (cluster.py imports and
re-exports these, so the test files take them from cluster).

Proc is a child process in its own process group whose stdout and stderr go
to files in a case's directory; end_all ends a case's processes and, when
the case failed, says what each one was doing: its stderr tail, how it had
ended when it was already gone (a crash shows as a signal, which its own log
cannot say) and the thread stacks of those still alive (stacks.py).
cpu_seconds is what a process has used of the CPU."""

import os
import re
import signal
import subprocess
import sys
import time

from stacks import dump as stacks_dump

TIMEOUT = 60  # the harness's bound on a wait (it only stops a hang: INV-9)
STDERR_TAIL = 3000  # characters of each process's stderr shown for a failed case


class Proc:
    """A child process whose stdout and stderr go to files in tmp."""

    def __init__(self, tmp, name, argv, env=None):
        self.name = name
        self.out_path = os.path.join(tmp, name + ".out")
        self.err_path = os.path.join(tmp, name + ".err")
        self.out = open(self.out_path, "w")
        self.err = open(self.err_path, "w")
        e = dict(os.environ)
        e.update(env or {})
        self.p = subprocess.Popen(argv, stdout=self.out, stderr=self.err, stdin=subprocess.DEVNULL,
                                  start_new_session=True, env=e)

    def wait_line(self, pattern, timeout=TIMEOUT):
        """The first match of regex pattern in stdout, waiting for it."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            with open(self.out_path) as f:
                m = re.search(pattern, f.read())
            if m:
                return m
            if self.p.poll() is not None:
                raise AssertionError("%s exited (%s) before printing %r; stderr:\n%s"
                                     % (self.name, self.p.returncode, pattern, self.stderr()))
            time.sleep(0.05)
        raise AssertionError("%s did not print %r in %ss" % (self.name, pattern, timeout))

    def stderr(self):
        with open(self.err_path) as f:
            return f.read()

    def stdout(self):
        with open(self.out_path) as f:
            return f.read()

    def kill(self, sig=signal.SIGKILL):
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, sig)
            except ProcessLookupError:
                pass

    def stop(self, timeout=10):
        """SIGTERM, then wait; returns the exit status (SIGKILL after timeout)."""
        self.kill(signal.SIGTERM)
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            # where it hangs, before the SIGKILL takes the evidence away
            path = os.path.join(os.path.dirname(self.err_path), self.name + ".stop.stacks")
            stacks = stacks_dump(self.p.pid, path)
            self.kill()
            self.p.wait()
            raise AssertionError("%s did not stop within %ss of SIGTERM; its threads then (all in "
                                 "%s):\n%s" % (self.name, timeout, path, stacks))


def end_all(procs, tmp, failed):
    """Kills every process of procs (newest first) and waits a little for
    each. When failed: first writes each live one's stacks to tmp/NAME.stacks
    and notes how each one already gone ended; then prints on stderr, per
    process, its stderr tail, that ending and its stacks' top frames, and
    that tmp is kept (the caller keeps it)."""
    stacks = {p.name: stacks_dump(p.p.pid, os.path.join(tmp, p.name + ".stacks"))
              for p in procs if failed and p.p.poll() is None}
    # how each process that was gone before the cleanup ended (a crash
    # shows as a signal, which its own log cannot say)
    ended = {p.name: p.p.returncode for p in procs if p.p.poll() is not None}
    for p in reversed(procs):
        p.kill()
    for p in procs:
        try:
            p.p.wait(5)
        except subprocess.TimeoutExpired:
            pass
    if not failed:
        return
    for p in procs:
        sys.stderr.write("---- %s stderr (tail) ----\n%s\n" % (p.name, p.stderr()[-STDERR_TAIL:]))
        if p.name in ended:
            rc = ended[p.name]
            sys.stderr.write("---- %s had ended before the cleanup: %s ----\n" % (
                p.name, "signal %s" % signal.Signals(-rc).name if rc < 0 else
                "exit status %d" % rc))
        if p.name in stacks:
            sys.stderr.write("---- %s threads (alive at the failure) ----\n%s\n"
                             % (p.name, stacks[p.name]))
    sys.stderr.write("(the processes' files are kept in %s)\n" % tmp)


def cpu_seconds(pid):
    """User + system CPU seconds process pid has used (all its threads)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
