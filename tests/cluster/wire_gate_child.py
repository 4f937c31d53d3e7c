#!/usr/bin/env python3
"""wire_gate_child.py - integration tests of the i8 accuracy gate's child
process (issue 17; coordinator/cluster/i8gate_child.h, worker/wire_gate_main.h):
the coordinator runs the gate in `strata-worker --wire-gate`, never in its
own process. Split from wire_links.py, whose model, status helpers and
gate bench it uses.

Usage: wire_gate_child.py BUILD_DIR CASE...   (CASE: see CASES at the bottom)
Every process is killed at the end, also on failure. Prints 'N passed,
N failed' as its last line.

Cases:
- i8-nobin: the gate runs in a child process, the worker binary's
  `strata-worker --wire-gate` (coordinator/cluster/i8gate_child.h): with
  `--worker-bin /nonexistent/...` it fails naming the path, the status
  says so and the cluster serves on without i8; a copy of the coordinator
  with no strata-worker beside it fails naming both paths it tried and
  --worker-bin; with one copied beside it, it runs that one and passes.
- i8-signal: the child killed by a signal (a script that sends itself
  SIGKILL): the gate failed, naming the signal and the child's last
  stderr line; the child was reaped (no zombie) and no pipe of it is left
  open in the coordinator.
- i8-child: `strata-worker --wire-gate` prints one line of JSON (exit 0;
  exit 1 with {"error"} when it cannot run); the coordinator refuses
  children that exit with a status (naming it and their stderr's last
  line), print bad JSON, a line over the limit, or figures out of range.
- i8-stop: the coordinator stopped (SIGTERM) while its gate's child runs
  (a script that sleeps): it exits 0 at once and the child is gone.
- i8-orphan: the coordinator passes its pid (--parent); the real
  `strata-worker --wire-gate` held at a known step (opening a FIFO as its
  model) dies with its parent killed by SIGKILL, and refuses to start for
  a parent that is not its own.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402  (reads BUILD from sys.argv[1] like this script)
from cluster import COORD, STRATA, TIMEOUT, WORKER, Cluster, Proc, model  # noqa: E402
from wire_links import MODEL, bench_i8, boundaries, wait_status  # noqa: E402


GATE_FAILED = "failed: the gate could not run ("
LINE_MAX = 4096  # ST_WGATE_LINE_MAX (common/wire/wire_gate_figs.h): the figures' line, '\n' included


def gate_script(tmp, name, body):
    """An executable /bin/sh script tmp/name standing in for strata-worker."""
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + body)
    os.chmod(path, 0o755)
    return path


def gate_settled(c):
    """The status once the gate has a verdict (not pending)."""
    return wait_status(c.status, lambda st: not st["i8_gate"].startswith("pending"),
                       "the i8 gate's verdict")


def gate_error(worker_bin, extra=()):
    """A coordinator whose gate runs worker_bin: its gate's state once settled."""
    tmp = tempfile.mkdtemp(prefix="strata-i8c-%d-" % os.getpid())
    with Cluster(model(MODEL), ["--allow-i8", "--cache-dir", os.path.join(tmp, "cache"),
                                "--worker-bin", worker_bin] + list(extra)) as c:
        return gate_settled(c)["i8_gate"]


def children_of(pid):
    """[(pid, state)] of the processes whose parent is pid."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/status" % d) as f:
                st = dict(x.split(":\t", 1) for x in f.read().splitlines() if ":\t" in x)
        except OSError:
            continue
        if st.get("PPid", "").strip() == str(pid):
            out.append((int(d), st.get("State", "").strip()))
    return out


def pipes_of(pid):
    """The pipe inodes open in process pid."""
    found = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            t = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if t.startswith("pipe:"):
            found.add(t)
    return found


def case_i8_nobin():
    """--worker-bin /nonexistent/...: the gate fails naming the path; the
    cluster serves on (two workers, one boundary) with no i8, the boundary's
    reason saying the gate could not run. A copy of the coordinator in a
    directory of its own, with no strata-worker beside it nor at
    ../worker/strata-worker: the gate fails at start naming both paths and
    --worker-bin. With a strata-worker copied beside it: it runs that one
    (its log names it) and passes."""
    tmp = tempfile.mkdtemp(prefix="strata-i8n-%d-" % os.getpid())
    bogus = "/nonexistent/strata-worker"
    args = ["--allow-i8", "--cache-dir", os.path.join(tmp, "cache"), "--worker-bin", bogus,
            "--split", "3,3", "--min-workers", "2", "--log", "info"]
    with Cluster(model(MODEL), args) as c:
        st = gate_settled(c)
        assert st["i8_gate"].startswith(GATE_FAILED) and bogus in st["i8_gate"] and \
            "No such file or directory" in st["i8_gate"], st["i8_gate"]
        out = c.cli("status").stdout
        assert "i8 gate: " + GATE_FAILED in out and bogus in out, out
        c.add_worker()
        time.sleep(0.3)  # join order is the split's order
        c.add_worker()
        st = c.wait_serving(2)
        b = boundaries(st)
        assert [d for d, _ in b] == ["f32"], b
        assert b[0][1].endswith("; i8 gate failed (could not run)"), b
        r = c.cli("generate", "--prompt-ids", "1,2,3,4", "-n", "8", "--temp", "0", "--ids")
        assert len(cluster.parse_ids(r.stdout)) == 8, r.stdout
        assert "i8 accuracy gate failed: it could not run" in c.coord.stderr(), c.coord.stderr()
        print("i8-nobin: %s; serving %s" % (st["i8_gate"], b))
    # the default: beside the coordinator's own executable, else ../worker/
    alone = os.path.join(tmp, "bin")
    os.mkdir(alone)
    coord = os.path.join(alone, "strata-coordinator")
    shutil.copy2(COORD, coord)
    for beside in (False, True):
        if beside:
            shutil.copy2(WORKER, os.path.join(alone, "strata-worker"))
        p = Proc(tmp, "alone%d" % beside, [coord, "--model", model(MODEL), "--allow-i8",
                                           "--cache-dir", os.path.join(tmp, "c%d" % beside),
                                           "--log", "info"])
        try:
            addr = p.wait_line(r"listening on (tcp://[0-9.]+:\d+)").group(1)

            def get():
                r = subprocess.run([STRATA, "status", "--json", "--coordinator", addr],
                                   capture_output=True, text=True, timeout=TIMEOUT)
                return json.loads(r.stdout) if r.returncode == 0 else None
            st = wait_status(get, lambda st: not st["i8_gate"].startswith("pending"),
                             "the i8 gate's verdict")
        finally:
            p.stop()
            key = cluster.local_key_path(addr)  # the generated key, kept at exit
            if os.path.exists(key):
                os.unlink(key)
        g = st["i8_gate"]
        if beside:
            assert g.startswith("passed: top1 "), g
            assert "`%s/strata-worker --wire-gate MODEL" % alone in p.stderr(), p.stderr()
        else:
            assert g.startswith(GATE_FAILED) and "tried %s/strata-worker and %s/../worker/" \
                "strata-worker" % (alone, alone) in g and "--worker-bin" in g, g
        print("i8-nobin: a lone coordinator, %s: %s" % (
            "strata-worker beside it" if beside else "no strata-worker", g))


def case_i8_signal():
    """The gate's child killed by a signal (SIGKILL, sent by itself after a
    line on stderr): the gate failed, naming the signal and that line; the
    coordinator has no child left (reaped: no zombie) and no pipe more than
    a coordinator without the gate."""
    tmp = tempfile.mkdtemp(prefix="strata-i8s-%d-" % os.getpid())
    die = gate_script(tmp, "die.sh", "echo 'about to die' >&2\nkill -KILL $$\n")
    with Cluster(model(MODEL), []) as ref:
        base = len(pipes_of(ref.coord.p.pid))
    with Cluster(model(MODEL), ["--allow-i8", "--cache-dir", os.path.join(tmp, "cache"),
                                "--worker-bin", die]) as c:
        g = gate_settled(c)["i8_gate"]
        assert g.startswith(GATE_FAILED) and "%s was killed by signal 9 (Killed)" % die in g \
            and "its stderr's last line: about to die" in g, g
        assert "signal" in c.cli("status").stdout, c.cli("status").stdout
        assert children_of(c.coord.p.pid) == [], children_of(c.coord.p.pid)
        n = len(pipes_of(c.coord.p.pid))
        assert n <= base, (n, base)
        print("i8-signal: %s; %d pipes open (%d without the gate), no child" % (g, n, base))


def case_i8_child():
    """`strata-worker --wire-gate`: one line of JSON with the figures and
    exit 0; {"error"} on stdout, the error on stderr and exit 1 for a model
    it cannot open. Then children that go wrong, each the gate's
    failure: an exit status (with the last stderr line), bad JSON, a line
    over the limit, a figure out of range, two lines."""
    r = subprocess.run([WORKER, "--wire-gate", model(MODEL), "--threads", "1"],
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0 and r.stdout.count("\n") == 1, (r.returncode, r.stdout, r.stderr)
    figs = json.loads(r.stdout)
    assert figs["dtype"] == "i8" and figs["steps"] == 64, figs
    pct = bench_i8()
    assert "%.1f" % (100.0 * figs["top1_agree"] / 64) == pct, (figs, pct)
    r = subprocess.run([WORKER, "--wire-gate", "/nonexistent.gguf"], capture_output=True,
                       text=True, timeout=TIMEOUT)
    assert r.returncode == 1 and "/nonexistent.gguf" in json.loads(r.stdout)["error"] and \
        "/nonexistent.gguf" in r.stderr, (r.returncode, r.stdout, r.stderr)
    tmp = tempfile.mkdtemp(prefix="strata-i8c-%d-" % os.getpid())
    good = json.dumps(figs)
    bad = dict(figs, steps=63)
    cases = [
        ("exit3.sh", "echo first >&2\necho 'the last line' >&2\nexit 3\n",
         "exited with status 3: the last line"),
        ("notjson.sh", "echo 'figures: none'\n", "bad JSON from "),
        ("long.sh", "head -c %d /dev/zero | tr '\\0' x\necho\n" % LINE_MAX,
         "printed a line over %d bytes" % LINE_MAX),
        ("range.sh", "echo '%s'\n" % json.dumps(bad), "a figure missing or out of range"),
        ("twice.sh", "echo '%s'\necho '%s'\n" % (good, good), "not one line of JSON"),
        ("error.sh", "echo '{\"error\": \"no model here\"}'\n", ": no model here"),
    ]
    for name, body, want in cases:
        path = gate_script(tmp, name, body)
        g = gate_error(path)
        assert g.startswith(GATE_FAILED) and want in g and path in g, (name, g)
        print("i8-child: %s: %s" % (name, g))
    # the good line itself, from a script: the coordinator takes it
    g = gate_error(gate_script(tmp, "good.sh", "echo '%s'\n" % good))
    assert g.startswith("passed: top1 %s%%" % pct), g
    print("i8-child: good.sh: %s" % g)


def case_i8_stop():
    """The coordinator stopped (SIGTERM to it alone) while its gate's child
    runs (a script that writes its pid, then becomes `sleep`): it exits 0,
    and the child is gone (sent SIGTERM by the coordinator, not left
    running). A second child ignores SIGTERM: the coordinator ends it with
    SIGKILL after its grace time and still exits 0."""
    for ignore in (False, True):
        i8_stop_once(ignore)


def i8_stop_once(ignore):
    tmp = tempfile.mkdtemp(prefix="strata-i8t-%d-" % os.getpid())
    pidf = os.path.join(tmp, "child.pid")
    sleeper = gate_script(tmp, "sleep.sh", "%secho $$ > %s.tmp\nmv %s.tmp %s\nexec sleep 600\n"
                          % ("trap '' TERM\n" if ignore else "", pidf, pidf, pidf))
    c = Cluster(model(MODEL), ["--allow-i8", "--cache-dir", os.path.join(tmp, "cache"),
                               "--worker-bin", sleeper])
    with c:
        deadline = time.time() + TIMEOUT
        while not os.path.exists(pidf) and time.time() < deadline:
            time.sleep(0.05)
        with open(pidf) as f:
            child = int(f.read())
        assert c.status()["i8_gate"].startswith("pending"), c.status()["i8_gate"]
        assert [p for p, _ in children_of(c.coord.p.pid)] == [child], children_of(c.coord.p.pid)
        # SIGTERM to the coordinator alone (Proc.stop signals its process
        # group, the child included): the child ends only if the coordinator ends it
        os.kill(c.coord.p.pid, signal.SIGTERM)
        try:
            rc = c.coord.p.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            raise AssertionError("the coordinator did not exit within %ss of SIGTERM" % TIMEOUT)
        assert rc == 0, rc
        try:
            os.kill(child, 0)
            alive = True
        except ProcessLookupError:
            alive = False
        assert not alive, "the gate's child %d outlived the coordinator" % child
        print("i8-stop: the coordinator exited %d; its gate's child %d%s is gone" % (
            rc, child, " (ignoring SIGTERM)" if ignore else ""))


# the parent of i8-orphan's gate: starts argv with --parent (its own pid)
# appended, prints the child's pid, waits
ORPHAN_PARENT = ("import os, subprocess, sys\n"
                 "p = subprocess.Popen(sys.argv[1:] + ['--parent', str(os.getpid())])\n"
                 "print(p.pid, flush=True)\n"
                 "p.wait()\n")


def blocked_in_fifo_open(pid):
    """Whether process pid sleeps in the kernel opening a FIFO (no writer yet)."""
    try:
        with open("/proc/%d/wchan" % pid) as f:
            return f.read().strip() in ("fifo_open", "wait_for_partner")
    except OSError:
        return False


def case_i8_orphan():
    """The coordinator gives its gate's child its pid: a script standing in
    for the worker binary records its arguments. The real binary, held at a
    known step (its model a FIFO nobody writes, so it sleeps opening it
    after it asked for PR_SET_PDEATHSIG), dies when its parent is killed
    with SIGKILL; told a parent that is not its own, it exits 1 at once."""
    tmp = tempfile.mkdtemp(prefix="strata-i8o-%d-" % os.getpid())
    argf = os.path.join(tmp, "args")
    rec = gate_script(tmp, "rec.sh", 'echo "$@" > %s.tmp\nmv %s.tmp %s\nexec sleep 600\n'
                      % (argf, argf, argf))
    with Cluster(model(MODEL), ["--allow-i8", "--cache-dir", os.path.join(tmp, "cache"),
                                "--worker-bin", rec]) as c:
        deadline = time.time() + TIMEOUT
        while not os.path.exists(argf) and time.time() < deadline:
            time.sleep(0.05)
        with open(argf) as f:
            args = f.read().split()
        want = ["--parent", str(c.coord.p.pid)]
        assert any(args[i:i + 2] == want for i in range(len(args))), args
    fifo = os.path.join(tmp, "model.gguf")
    os.mkfifo(fifo)
    parent = subprocess.Popen([sys.executable, "-c", ORPHAN_PARENT, WORKER, "--wire-gate", fifo,
                               "--threads", "1"], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        deadline = time.time() + TIMEOUT
        while not blocked_in_fifo_open(child) and time.time() < deadline:
            time.sleep(0.05)
        assert blocked_in_fifo_open(child), "the gate %d never blocked opening the FIFO" % child
        parent.kill()  # SIGKILL: the parent runs nothing more
        parent.wait()
        deadline = time.time() + TIMEOUT
        while time.time() < deadline:
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            os.kill(child, signal.SIGKILL)
            raise AssertionError("the gate %d outlived its parent killed by SIGKILL" % child)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    # a --parent that is not its parent: refused before anything else
    r = subprocess.run([WORKER, "--wire-gate", fifo, "--threads", "1", "--parent", "1"],
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 1 and "--parent 1 is not this process's parent" in r.stderr, (r.returncode,
                                                                             r.stderr)
    print("i8-orphan: the coordinator passed %s; the gate %d, held opening a FIFO, died with "
          "its parent (SIGKILL); --parent 1: exit 1, %r" % (" ".join(want), child,
                                                            r.stderr.strip()))
    shutil.rmtree(tmp, ignore_errors=True)


CASES = {"i8-nobin": case_i8_nobin, "i8-signal": case_i8_signal, "i8-child": case_i8_child,
         "i8-stop": case_i8_stop, "i8-orphan": case_i8_orphan}

if __name__ == "__main__":
    cluster.run_cases(CASES)
