"""Thread stacks of a failed case's live processes (gdb, when installed).

A case that fails while a process is still running (a worker that stopped
heartbeating, a coordinator that stopped answering) is easiest to explain
from where its threads are: Cluster writes every live process's stacks to
NAME.stacks in the case's kept directory and prints each thread's top
frames under the stderr tail, so a CI log shows them too."""
import re
import shutil
import subprocess

FRAMES = 6  # top frames printed per thread


def dump(pid, path):
    """Writes pid's stacks to path; returns a short summary (top frames of
    each thread) or a line saying why there is none."""
    gdb = shutil.which("gdb")
    if gdb is None:
        return "(no stacks: gdb is not installed)"
    try:
        r = subprocess.run([gdb, "-p", str(pid), "-batch", "-nx", "-ex", "thread apply all bt"],
                           capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return "(no stacks: gdb did not finish within 60 s)"
    with open(path, "w") as f:
        f.write(r.stdout + r.stderr)
    out, n = [], 0
    for line in r.stdout.splitlines():
        if line.startswith("Thread "):
            name = re.search(r'"([^"]*)"\)?\s*:?\s*$', line)
            out.append("thread %s%s:" % (line.split()[1], " (%s)" % name.group(1) if name else ""))
            n = 0
            continue
        m = re.match(r"#\d+\s+(?:0x[0-9a-f]+ in )?(\S+) \(.*?\)(?: from .*/([^/]+))?", line)
        if m and n < FRAMES and not m.group(1).startswith("_"):  # glibc's internals left out
            out.append("  %s%s" % (m.group(1), " (%s)" % m.group(2) if m.group(2) else ""))
            n += 1
    return "\n".join(out) if out else "(no stacks: %s)" % (r.stderr.strip()[-200:] or "empty")
