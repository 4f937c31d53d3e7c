#!/usr/bin/env python3
"""upgrade.py - a rolling-upgrade rehearsal (issue 19, docs/deploy.md
"Rolling upgrade"): real coordinator and worker processes on loopback, the
f32 wire, so outputs must equal `strata run`'s.

Usage: upgrade.py BUILD_DIR [CASE...]   (CASE: see CASES at the bottom)

Build B, the one each worker is upgraded to, is $STRATA_OTHER_BUILD: the
directory of a second meson build of the same commit (deploy/test.sh makes
`build`, release, and `build-asan`, debugoptimized with AddressSanitizer
and UBSan, before any suite, and gives each pass the other: the release
pass upgrades to the sanitized worker, the sanitizer pass to the release
one). Both `--version`s must name the same commit; their lines are printed
(they differ by build type). The sanitized worker runs under the tests'
ASAN_OPTIONS/UBSAN_OPTIONS (tests/meson.build: leaks checked, halting on
the first error; set here when absent), so a leak or an error in it fails
its exit status: build B's workers are stopped with SIGTERM at the end and
must exit 0 (build A's, drained, must too). Without the
variable (`meson test` alone) build B is a copy of this build's
strata-worker in the test's directory, and the test prints one line saying
so.

Case rolling: two workers from build A serve a model split in two; a
generation is parked after K ids by the step gate (`strata hold`, no
sleeps); then, one worker at a time: `strata drain` commits a plan without
it, the drained worker exits 0 by itself, it is started again from build B
under its name and waits until the coordinator lists it again; the parked
stream stays alive throughout (the gate still holds it at K ids after
every step). Released at the end, its ids equal `strata run`'s.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cluster"))
import cluster  # noqa: E402  (reads BUILD from sys.argv[1] like this script)
from cluster import (TIMEOUT, WORKER, Cluster, model, parse_ids, run_ids)  # noqa: E402
from placement import wait_until  # noqa: E402

MODEL = model("synth-s-f32.gguf")
PROMPT = [1, 5, 9, 300, 17]  # within the vocabulary of 512
N_GEN = 64
K = 8  # ids before the gate parks the stream


def generate_in_background(c, out):
    """A greedy `strata generate` in a thread; its result in out."""
    def run():
        r = c.cli("generate", "--prompt-ids", ",".join(map(str, PROMPT)), "-n", str(N_GEN),
                  "--temp", "0", "--ids", check=False, timeout=10 * TIMEOUT)
        out["rc"], out["stdout"], out["stderr"] = r.returncode, r.stdout, r.stderr

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def version(binary):
    r = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout.replace(os.path.basename(binary), "")


def commit(ver):
    """The commit a --version names."""
    m = re.search(r"^commit (\S+)$", ver, re.M)
    assert m, ver
    return m.group(1)


# the sanitizers' settings of tests/meson.build, for a sanitized build B run
# from a test that did not set them (a hand-run release test)
SANITIZER_ENV = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1",
                 "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"}


def status_version(ver):
    """What `strata status` shows of the build whose --version is ver:
    "RELEASE (commit C, BUILDTYPE)" (common/base/version.h)."""
    release = ver.splitlines()[0].split()[-1]
    build = re.search(r"^build (\S+)$", ver, re.M)
    assert build, ver
    return "%s (commit %s, %s)" % (release, commit(ver), build.group(1))


def build_b(tmp):
    """Build B's strata-worker: $STRATA_OTHER_BUILD's, or a copy of this
    build's (said on one line)."""
    other_dir = os.environ.get("STRATA_OTHER_BUILD")
    if not other_dir:
        other = os.path.join(tmp, "build-b", "strata-worker")
        os.makedirs(os.path.dirname(other))
        shutil.copy2(WORKER, other)
        print("rolling: STRATA_OTHER_BUILD is not set: build B is a copy of %s (deploy/test.sh "
              "sets it to a second build of this commit)" % WORKER)
        return other
    other = os.path.join(os.path.abspath(other_dir), "worker", "strata-worker")
    assert os.access(other, os.X_OK), "STRATA_OTHER_BUILD=%s: no %s" % (other_dir, other)
    assert os.path.realpath(other) != os.path.realpath(WORKER), \
        "STRATA_OTHER_BUILD names this build (%s)" % other_dir
    return other


def start_worker(c, name, binary):
    """A worker from binary under name, the same flags as Cluster.add_worker's."""
    env = {k: v for k, v in SANITIZER_ENV.items() if k not in os.environ}
    w = c.spawn(name + "-" + str(len(c.procs)), [
        binary, "--coordinator", c.addr, "--model", MODEL, "--threads", "1", "--name", name,
        "--heartbeat-ms", "200", "--listen", "tcp://127.0.0.1:0",
        # one announced speed for both: the plan splits the model in two
        # whatever the start-up measurement saw on a loaded machine (a
        # preempted one once left worker0 out of the plan)
        "--test-hooks", "--test-speed", "2G"], env=env)
    w.wait_line(r"listening on (tcp://[0-9.]+:\d+)")
    return w


def states(st):
    return {w["name"]: w["state"] for w in st["workers"]}


def case_rolling():
    tmp = tempfile.mkdtemp(prefix="strata-upgrade-")
    try:
        other = build_b(tmp)
        va, vb = version(WORKER), version(other)
        assert commit(va) == commit(vb), "build A is %s, build B %s" % (va, vb)
        for tag, b, v in (("A", WORKER, va), ("B", other, vb)):
            print("rolling: build %s %s: %s" % (tag, b, " | ".join(v.strip().splitlines())))
        with Cluster(MODEL, ["--wire", "f32", "--min-workers", "2", "--no-imbalance",
                             "--test-hooks"]) as c:
            names = ["worker0", "worker1"]
            procs = {n: start_worker(c, n, WORKER) for n in names}
            st = c.wait_serving(2)
            cluster.hold(c, K)
            out = {}
            gen = generate_in_background(c, out)
            cluster.wait_held(c, 1, at=K)
            for n in names:
                epoch = c.status()["epoch"]
                r = c.cli("drain", n, "--json", "--timeout-ms", "60000")
                d = json.loads(r.stdout)
                assert d["drained"], d
                # a member with no stage (the plan after the previous upgrade may give
                # every layer to the other build, e.g. a release worker beside a
                # sanitized one) is drained at once, without a new plan
                had_stage = d.get("message") != "it has no stage: drained"
                rc = procs[n].p.wait(TIMEOUT)
                assert rc == 0, "%s exited %s after its drain: %s" % (
                    n, rc, procs[n].stderr()[-1500:])
                st = cluster.wait_held(c, 1, at=K)
                assert gen.is_alive(), "the parked stream ended during the drain of %s" % n
                assert d["epoch"] > epoch if had_stage else d["epoch"] == epoch, (d, epoch,
                                                                                  had_stage)
                procs[n] = start_worker(c, n, other)
                st = wait_until(c, lambda s: states(s).get(n) in ("serving", "spare") and
                                s.get("serving"), TIMEOUT, "%s back from build B" % n)
                # the rejoined member (the drained one is still listed, as left)
                mine = [w for w in st["workers"] if w["name"] == n and
                        w["state"] in ("serving", "spare")][-1]
                assert mine.get("version") == status_version(vb), (mine, vb)
                assert gen.is_alive() and len(cluster.held(st)) == 1, st["sched"]
                print("rolling: %s (%s) drained (epoch %d), exited 0, rejoined from %s "
                      "(status: %s): %s; the stream stays parked at %d ids"
                      % (n, "serving" if had_stage else "no stage: no new plan", d["epoch"],
                         other, mine["version"], states(st)[n], K))
            cluster.release(c)
            gen.join(10 * TIMEOUT)
            assert not gen.is_alive(), "the stream did not end after the release"
            assert out["rc"] == 0, out["stderr"]
            got = parse_ids(out["stdout"])
            ref = run_ids(MODEL, PROMPT, N_GEN, os.path.join(tmp, "run.logits"))
            assert got == ref, "ids %s differ from strata run's %s" % (got, ref)
            for n in names:
                assert procs[n].p.poll() is None, "%s (build B) is not running" % n
            for n in names:  # build B's exit too: a sanitized one checks for leaks there
                procs[n].p.terminate()
                rc = procs[n].p.wait(TIMEOUT)
                assert rc == 0, "%s (build B) exited %s after SIGTERM: %s" % (
                    n, rc, procs[n].stderr()[-3000:])
            print("rolling: both workers upgraded one at a time; the stream lived through both "
                  "drains and its %d ids equal strata run's; build B's workers exited 0 on "
                  "SIGTERM" % len(got))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


CASES = {"rolling": case_rolling}

if __name__ == "__main__":
    cluster.run_cases(CASES)
