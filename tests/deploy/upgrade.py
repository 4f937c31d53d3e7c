#!/usr/bin/env python3
"""upgrade.py - a rolling-upgrade rehearsal (issue 19, docs/deploy.md
"Rolling upgrade"): real coordinator and worker processes on loopback, the
f32 wire, so outputs must equal `strata run`'s.

Usage: upgrade.py BUILD_DIR [CASE...]   (CASE: see CASES at the bottom)

The "other build" is the build's strata-worker copied into a directory of
the test's own (a second meson build of the same commit takes minutes on
a small machine; the copy runs the same code from another path, which is
what a rehearsal of the procedure needs; --version of both must agree).

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


def start_worker(c, name, binary):
    """A worker from binary under name, the same flags as Cluster.add_worker's."""
    w = c.spawn(name + "-" + str(len(c.procs)), [
        binary, "--coordinator", c.addr, "--model", MODEL, "--threads", "1", "--name", name,
        "--heartbeat-ms", "200", "--listen", "tcp://127.0.0.1:0"])
    w.wait_line(r"listening on (tcp://[0-9.]+:\d+)")
    return w


def states(st):
    return {w["name"]: w["state"] for w in st["workers"]}


def case_rolling():
    tmp = tempfile.mkdtemp(prefix="strata-upgrade-")
    try:
        other = os.path.join(tmp, "build-b", "strata-worker")
        os.makedirs(os.path.dirname(other))
        shutil.copy2(WORKER, other)
        assert version(other) == version(WORKER), (version(other), version(WORKER))
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
                rc = procs[n].p.wait(TIMEOUT)
                assert rc == 0, "%s exited %s after its drain: %s" % (
                    n, rc, procs[n].stderr()[-1500:])
                st = cluster.wait_held(c, 1, at=K)
                assert gen.is_alive(), "the parked stream ended during the drain of %s" % n
                assert d["epoch"] > epoch, (d, epoch)
                procs[n] = start_worker(c, n, other)
                st = wait_until(c, lambda s: states(s).get(n) in ("serving", "spare") and
                                s.get("serving"), TIMEOUT, "%s back from build B" % n)
                mine = [w for w in st["workers"] if w["name"] == n][0]
                assert mine.get("version", st.get("version")) == st.get("version"), mine
                assert gen.is_alive() and len(cluster.held(st)) == 1, st["sched"]
                print("rolling: %s drained (epoch %d), exited 0, rejoined from %s: %s; the "
                      "stream stays parked at %d ids" % (n, d["epoch"], other, states(st)[n], K))
            cluster.release(c)
            gen.join(10 * TIMEOUT)
            assert not gen.is_alive(), "the stream did not end after the release"
            assert out["rc"] == 0, out["stderr"]
            got = parse_ids(out["stdout"])
            ref = run_ids(MODEL, PROMPT, N_GEN, os.path.join(tmp, "run.logits"))
            assert got == ref, "ids %s differ from strata run's %s" % (got, ref)
            for n in names:
                assert procs[n].p.poll() is None, "%s (build B) is not running" % n
            print("rolling: both workers upgraded one at a time; the stream lived through both "
                  "drains and its %d ids equal strata run's" % len(got))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


CASES = {"rolling": case_rolling}

if __name__ == "__main__":
    cluster.run_cases(CASES)
