#!/usr/bin/env python3
"""cluster.py - integration tests of a Strata cluster: real coordinator and
worker processes on loopback (port 0, addresses read from their stdout),
driven by the `strata` CLI and the `inject` tool.

Usage: cluster.py BUILD_DIR CASE      (CASE: see CASES at the bottom)
Every process is started in its own process group and killed at the end,
also on failure. Prints 'N passed, N failed' as its last line."""

import array
import contextlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

# the processes (procs.py); the test files import Proc and TIMEOUT from here
from procs import TIMEOUT, Proc, cpu_seconds, end_all  # noqa: F401

BUILD = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else "build"
SHARED = os.environ.get("STRATA_SHARED", os.path.join(os.path.dirname(__file__), "../../../shared"))
STRATA = os.path.join(BUILD, "cli", "strata")
COORD = os.path.join(BUILD, "coordinator", "strata-coordinator")
WORKER = os.path.join(BUILD, "worker", "strata-worker")
INJECT = os.path.join(BUILD, "tests", "cluster", "inject")


def model(name):
    return os.path.join(SHARED, "models", name)


def golden_cases():
    with open(os.path.join(SHARED, "golden", "generation.json")) as f:
        return json.load(f)["cases"]


def local_key_path(addr):
    """Where a keyless loopback coordinator listening on addr keeps its
    generated key (as common/net/exposure.c st_local_key_path names it)."""
    host, port = addr[len("tcp://"):].rsplit(":", 1)
    host = host.strip("[]").replace(":", "_").replace("/", "_")
    rt = os.environ.get("XDG_RUNTIME_DIR", "")
    d = os.path.join(rt, "strata") if rt.startswith("/") else "/tmp/strata-%d" % os.getuid()
    return os.path.join(d, "coordinator-%s-%s.key" % (host, port))


# On an explicit --listen port the weights server's default is the port after
# it (docs/streaming.md), maybe another process's here: such coordinators pass this.
WEIGHTS_ANY = "tcp://127.0.0.1:0"


# The KV cache type of the test clusters and of the `strata run` oracles:
# f32, the type the goldens were made with (golden/README.md: llama.cpp
# with an f32 KV cache). The default type (f16) changes greedy ids of the
# random-weight models against those goldens; case_kv runs it, against
# `strata run` at the same type.
GOLDEN_KV = ["--cache-type", "f32"]


class Cluster:
    """A coordinator and workers; use as a context manager. The coordinator
    runs with the flags kv (GOLDEN_KV; [] for its default cache type)."""

    def __init__(self, model_path, coord_args=(), key=None, encrypt=False,
                 listen="tcp://127.0.0.1:0", kv=GOLDEN_KV):
        self.tmp = tempfile.mkdtemp(prefix="strata-test-%d-" % os.getpid())
        self.model = model_path
        self.key = key
        self.encrypt = encrypt
        self.procs = []
        self.workers = []
        args = [COORD, "--model", model_path, "--listen", listen,
                "--heartbeat-ms", "200", "--heartbeat-timeout-ms", "1500"] + list(coord_args)
        args += kv
        if not listen.endswith(":0") and "--weights" not in coord_args:
            args += ["--weights", WEIGHTS_ANY]  # not the --listen port + 1 (see WEIGHTS_ANY)
        if key:
            args += ["--cluster-key", key]
        if encrypt:
            args += ["--encrypt"]
        self.coord = self.spawn("coordinator", args)
        self.addr = self.coord.wait_line(r"listening on (tcp://[0-9.]+:\d+)").group(1)

    def key_file(self):
        """The cluster key file: --cluster-key's, or the one a keyless
        loopback coordinator generated (common/net/exposure.h; it exists while
        the coordinator runs)."""
        if self.key:
            return self.key
        path = local_key_path(self.addr)
        assert os.path.exists(path), "keyless coordinator wrote no key at %s" % path
        return path

    def inject_key(self):
        """inject's arguments for frames a member would send: the key file."""
        return ["--key", self.key_file()]

    def spawn(self, name, argv, env=None):
        p = Proc(self.tmp, name, argv, env)
        self.procs.append(p)
        return p

    def add_worker(self, *extra, key=None, model_path=None, encrypt=None,
                   listen="tcp://127.0.0.1:0"):
        name = "worker%d" % len(self.workers)
        args = [WORKER, "--coordinator", self.addr, "--model", model_path or self.model,
                "--threads", "1", "--name", name, "--heartbeat-ms", "200"] + list(extra)
        if listen:
            args += ["--listen", listen]
        k = key or self.key
        if k:
            args += ["--cluster-key", k]
        if self.encrypt if encrypt is None else encrypt:
            args += ["--encrypt"]
        w = self.spawn(name, args)
        w.data_addr = w.wait_line(r"listening on (tcp://[0-9.]+:\d+)").group(1)
        self.workers.append(w)
        return w

    def cli(self, *args, check=True, timeout=TIMEOUT):
        argv = [STRATA] + list(args) + ["--coordinator", self.addr]
        if self.key:
            argv += ["--cluster-key", self.key]
        if self.encrypt:
            argv += ["--encrypt"]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError("strata %s failed (%d): %s%s" % (" ".join(args), r.returncode,
                                                                r.stdout, r.stderr))
        return r

    def status(self):
        return json.loads(self.cli("status", "--json").stdout)

    def wait_serving(self, n_workers, min_epoch=0, timeout=TIMEOUT):
        """Waits until a committed plan covers the model with n_workers
        serving workers and an epoch above min_epoch; returns the status."""
        deadline = time.time() + timeout
        st = None
        while time.time() < deadline:
            st = self.status()
            serving = [w for w in st["workers"] if w["state"] == "serving"]
            if st["epoch"] > min_epoch and len(serving) == n_workers and st.get("serving"):
                return st
            time.sleep(0.1)
        raise AssertionError("cluster not serving with %d workers (epoch > %d) in %ss: %s"
                             % (n_workers, min_epoch, timeout, json.dumps(st)[:2000]))

    def wait_joined(self, n_workers, timeout=TIMEOUT):
        """Waits until the coordinator lists n_workers workers, whatever
        their state: adding the next worker after this makes the join order
        (which --split follows) the order of add_worker calls; returns the
        status."""
        deadline = time.time() + timeout
        st = None
        while time.time() < deadline:
            st = self.status()
            if len(st["workers"]) >= n_workers:
                return st
            time.sleep(0.1)
        raise AssertionError("%d workers not listed in %ss: %s"
                             % (n_workers, timeout, json.dumps(st)[:2000]))

    def wait_placed(self, n_workers, timeout=TIMEOUT):
        """Waits until a committed plan serves and n_workers live workers are
        listed, each serving or left out as a spare: how many of them get a
        stage is the planner's choice from measured speeds and links, which
        depend on the machine (INV-9); returns the status."""
        deadline = time.time() + timeout
        st = None
        while time.time() < deadline:
            st = self.status()
            states = [w["state"] for w in st["workers"]]
            if st.get("serving") and len(states) == n_workers and \
                    all(x in ("serving", "spare") for x in states):
                return st
            time.sleep(0.1)
        raise AssertionError("no serving plan for %d workers in %ss: %s"
                             % (n_workers, timeout, json.dumps(st)[:2000]))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        failed = exc[0] is not None
        end_all(self.procs, self.tmp, failed)  # a failed case's diagnostics on stderr
        path = local_key_path(self.addr)
        if not self.key and os.path.exists(path):
            os.unlink(path)  # the generated key, which a coordinator keeps at exit
        if not failed:
            shutil.rmtree(self.tmp, ignore_errors=True)  # kept only when the case failed
        return False


# ---- the test-only step gate (coordinator --test-hooks; docs/cluster.md "Hold") ----
# A test makes an event happen at a known step instead of racing the
# model's speed (INV-9): hold(c, K) parks every request once it has K
# generated ids (or the one of request=ID), wait_held waits until the
# requests are parked, the test acts (switch, drain, kill, cancel), then
# release(c) lets them go on and the outputs are compared with `strata run`.

def hold(c, after_tokens, request=None):
    """Sets (or moves) the step gate; returns its state."""
    args = ["hold", "--after-tokens", str(after_tokens), "--json"]
    if request is not None:
        args += ["--request", str(request)]
    return json.loads(c.cli(*args).stdout)


def release(c):
    """Opens the step gate: parked requests go on."""
    st = json.loads(c.cli("hold", "--release", "--json").stdout)
    assert not st["on"], st
    return st


def held(st):
    """The parked requests of a status: [{request_id, session_id, tokens, route}]."""
    return st["sched"]["hold"]["held"]


def wait_held(c, n, at=None, timeout=TIMEOUT, also=None):
    """Waits until the gate parks n requests (each with exactly `at`
    generated ids when given) and also(status) holds; returns the status."""
    deadline = time.time() + timeout
    st = None
    while time.time() < deadline:
        st = c.status()
        h = held(st)
        if len(h) == n and (at is None or all(x["tokens"] == at for x in h)) and \
                (also is None or also(st)):
            return st
        time.sleep(0.05)
    raise AssertionError("%d requests not parked%s in %ss: %s" % (
        n, "" if at is None else " at %d ids" % at, timeout,
        json.dumps(st["sched"] if st else None)[:1500]))


def run_ids(model_path, prompt_ids, n, logits_out, kv=GOLDEN_KV):
    r = subprocess.run([STRATA, "run", model_path, "--prompt-ids", ",".join(map(str, prompt_ids)),
                        "-n", str(n), "--temp", "0", "--ids", "--threads", "1",
                        "--logits-out", logits_out] + kv, capture_output=True, text=True,
                       timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    return parse_ids(r.stdout)


def parse_ids(out):
    m = re.search(r"^ids: ([0-9,]*)$", out, re.M)
    assert m, "no ids line in %r" % out
    return [int(x) for x in m.group(1).split(",") if x]


# ---------------------------------------------------------------- cases

def check_generate_exact(c, case, tmp):
    """Greedy ids of a golden case through the cluster equal the golden ids,
    and the cluster's logits equal `strata run`'s bit for bit (INV-1)."""
    ids_in = ",".join(map(str, case["prompt_ids"]))
    lc = os.path.join(tmp, "cluster.logits")
    lr = os.path.join(tmp, "run.logits")
    r = c.cli("generate", "--prompt-ids", ids_in, "-n", str(case["n"]), "--temp", "0", "--ids",
              "--logits-out", lc)
    got = parse_ids(r.stdout)
    assert got == case["expected_ids"], "cluster ids %s != golden %s" % (got, case["expected_ids"])
    ref = run_ids(c.model, case["prompt_ids"], case["n"], lr)
    assert ref == got, "strata run ids differ from the cluster's"
    with open(lc, "rb") as a, open(lr, "rb") as b:
        la, lb = a.read(), b.read()
    assert len(la) == len(lb) == 4 * case["n"] * case["n_vocab"], (len(la), len(lb))
    assert la == lb, "cluster logits differ from strata run's"
    check_no_dropped_results(c)


def check_no_dropped_results(c):
    """Every worker's results link opens with a hello (st_msg_link_hello):
    the coordinator takes it as one, never as a malformed result. (A hello
    judged malformed left the link unproven, so the connection gate could
    evict the last stage's results link, and a request then hung.)"""
    dropped = [l for l in c.coord.stderr().splitlines() if "result dropped" in l]
    assert not dropped, "the coordinator dropped results: %s" % dropped


def case_inv1():
    """INV-1 with the f32 wire: 1, 2 and 3 workers, uneven splits."""
    configs = {"synth-s-f32.gguf": [[6], [2, 4], [1, 3, 2]],
               "stories260K.gguf": [[5], [1, 4], [2, 2, 1]]}
    cases = golden_cases()
    for name, splits in configs.items():
        for split in splits:
            with Cluster(model(name), ["--wire", "f32", "--split", ",".join(map(str, split)),
                                       "--min-workers", str(len(split))]) as c:
                for _ in split:
                    c.add_worker()
                st = c.wait_serving(len(split))
                layers = [s["last"] - s["first"] for s in st["plan"]["stages"]]
                assert layers == split, "plan layers %s != split %s" % (layers, split)
                for case in cases:
                    if case["model"] == name:
                        check_generate_exact(c, case, c.tmp)
                print("inv1: %s split %s: golden ids and bit-exact logits" % (name, split))


def case_membership():
    """A late join makes epoch + 1; kill -9 is detected by the heartbeat
    timeout (the worker is listed lost, not left) and the remaining workers
    get a new plan; generation goes on. (The time it took is printed, not
    asserted: it depends on the machine's load.)
    Both workers run with the same throttle (x20: each step takes 20 times
    its compute), so a stage's compute outweighs a hop on any machine and
    the planner's best plan for two equal workers is a split: unthrottled,
    this 0.06 ms-per-layer model's hop costs, which grow with the machine's
    load, could make one worker the better plan and leave the joiner out."""
    case = [x for x in golden_cases() if x["model"] == "synth-s-f32.gguf"][0]
    with Cluster(model("synth-s-f32.gguf"), ["--wire", "f32"]) as c:
        c.add_worker("--throttle", "20")
        e1 = c.wait_serving(1)["epoch"]
        check_generate_exact(c, case, c.tmp)
        c.add_worker("--throttle", "20")
        e2 = c.wait_serving(2, min_epoch=e1)["epoch"]
        assert e2 > e1
        check_generate_exact(c, case, c.tmp)
        t0 = time.time()
        c.workers[0].kill(signal.SIGKILL)
        st = c.wait_serving(1, min_epoch=e2)
        dt = time.time() - t0
        # detected by its missed heartbeats (it sent no Leave): listed lost
        lost = [w for w in st["workers"] if w["state"] == "lost"]
        assert [w["name"] for w in lost] == ["worker0"], st["workers"]
        print("membership: epochs %d -> %d -> %d; kill detected and replanned in %.2fs (%d lost)"
              % (e1, e2, st["epoch"], dt, len(lost)))
        check_generate_exact(c, case, c.tmp)


def case_stale_epoch():
    """INV-2: a packet of an older epoch is refused, counted, and reported
    with both epochs; serving goes on."""
    case = [x for x in golden_cases() if x["model"] == "synth-s-f32.gguf"][0]
    # (a fixed split: worker1 has a stage whatever the measured speeds)
    with Cluster(model("synth-s-f32.gguf"), ["--wire", "f32", "--min-workers", "2",
                                             "--split", "3,3"]) as c:
        c.add_worker()
        c.add_worker()
        st = c.wait_serving(2)
        epoch = st["epoch"]
        stale = epoch - 1
        key = c.inject_key()  # keyless still authenticated: the generated key
        auth0 = [w for w in st["workers"] if w["name"] == "worker1"][0]["counters"]["auth_failed"]
        refused0 = st["counters"]["refused_epoch"]
        r = subprocess.run([INJECT, "step", c.workers[1].data_addr, str(stale), "--no-key"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr  # a stranger's: refused by the MAC, counted
        deadline = time.time() + 10
        while time.time() < deadline:
            st = c.status()
            w1 = [w for w in st["workers"] if w["name"] == "worker1"][0]
            if w1["counters"]["auth_failed"] > auth0:
                break
            time.sleep(0.2)
        assert w1["counters"]["auth_failed"] > auth0, w1["counters"]
        assert st["counters"]["refused_epoch"] == refused0, st["counters"]  # not parsed
        r = subprocess.run([INJECT, "step", c.workers[1].data_addr, str(stale)] + key,
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        deadline = time.time() + 10
        while time.time() < deadline:
            st = c.status()
            if st["counters"]["refused_epoch"] >= 1:
                break
            time.sleep(0.2)
        assert st["counters"]["refused_epoch"] >= 1, st["counters"]
        log = c.coord.stderr() + c.workers[1].stderr()
        assert str(stale) in log and str(epoch) in log, "no log line names both epochs"
        print("stale: epoch %d refused while serving %d (refused_epoch=%d)"
              % (stale, epoch, st["counters"]["refused_epoch"]))
        # a batch of the right epoch and plan but the wrong route (a replica
        # this worker is not, or a route of the wrong length) gets an error
        # result and is counted; nothing is computed, serving goes on
        w1 = [w for w in st["workers"] if w["name"] == "worker1"][0]
        bad0 = st["counters"]["bad_packets"]
        for route in ([3 if k == w1["stage"] else 0 for k in range(2)], [0]):
            r = subprocess.run([INJECT, "step", c.workers[1].data_addr, str(epoch), "--hash",
                                st["plan"]["plan_hash"], "--route",
                                ",".join(str(x) for x in route)] + key,
                               capture_output=True, text=True, timeout=30)
            assert r.returncode == 0, r.stderr
        deadline = time.time() + 10
        while time.time() < deadline:
            st = c.status()
            if st["counters"]["bad_packets"] >= bad0 + 2:
                break
            time.sleep(0.2)
        assert st["counters"]["bad_packets"] >= bad0 + 2, st["counters"]
        log = c.coord.stderr()  # the error results in full (the worker rate-limits its log)
        assert "misrouted batch" in log and "route has 1 entries" in log, log[-2000:]
        print("stale: a misrouted batch and a route of the wrong length refused (bad_packets "
              "%d -> %d)" % (bad0, st["counters"]["bad_packets"]))
        check_generate_exact(c, case, c.tmp)


def case_cluster_key():
    """INV-5: with a cluster key, a worker with another key cannot join, a
    forged packet is dropped and counted, a readable key file is refused."""
    case = [x for x in golden_cases() if x["model"] == "synth-s-f32.gguf"][0]
    tmp = tempfile.mkdtemp(prefix="strata-key-%d-" % os.getpid())
    k1, k2 = os.path.join(tmp, "k1"), os.path.join(tmp, "k2")
    for k in (k1, k2):
        r = subprocess.run([STRATA, "keygen", k], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert os.stat(k).st_mode & 0o777 == 0o600
    loose = os.path.join(tmp, "loose")
    with open(k1, "rb") as a, open(loose, "wb") as b:
        b.write(a.read())
    os.chmod(loose, 0o644)
    r = subprocess.run([COORD, "--model", model("synth-s-f32.gguf"), "--cluster-key", loose],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "loose" in r.stderr, "a group-readable key was accepted"
    with Cluster(model("synth-s-f32.gguf"), ["--wire", "f32"], key=k1) as c:
        good = c.add_worker()
        c.add_worker(key=k2)
        deadline = time.time() + 20
        while time.time() < deadline:
            st = c.wait_serving(1)
            if st["counters"]["auth_failed"] >= 1:
                break
            time.sleep(0.2)
        names = [w["name"] for w in st["workers"]]
        assert names == ["worker0"], "members: %s" % names
        assert st["counters"]["auth_failed"] >= 1, st["counters"]
        # the wrong-key worker keeps retrying; after another refused attempt
        # (counted, however long they take) it must still be out
        failed = st["counters"]["auth_failed"]
        deadline = time.time() + TIMEOUT
        while st["counters"]["auth_failed"] < failed + 1 and time.time() < deadline:
            time.sleep(0.1)
            st = c.status()
        assert st["counters"]["auth_failed"] >= failed + 1, st["counters"]
        st = c.wait_serving(1)
        assert [w["name"] for w in st["workers"]] == ["worker0"], st["workers"]
        for args in ([good.data_addr, str(st["epoch"]), "--key", k2],
                     [good.data_addr, str(st["epoch"]), "--key", k1, "--bad-mac"],
                     [good.data_addr, str(st["epoch"])]):
            r = subprocess.run([INJECT, "step"] + args, capture_output=True, text=True, timeout=30)
            assert r.returncode == 0, r.stderr
        deadline = time.time() + 10
        while time.time() < deadline:
            w = [x for x in c.status()["workers"] if x["name"] == "worker0"][0]
            if w["counters"]["auth_failed"] >= 3:
                break
            time.sleep(0.2)
        assert w["counters"]["auth_failed"] >= 3, w["counters"]
        print("key: wrong-key worker kept out; 3 forged packets dropped and counted")
        check_generate_exact(c, case, c.tmp)


def case_bad_input():
    """INV-3: malformed and absurd requests get error replies; the
    processes keep serving."""
    case = [x for x in golden_cases() if x["model"] == "synth-s-f32.gguf"][0]
    expect = {"garbage": "EFORMAT", "empty-body": "EFORMAT", "join-version": "EVERSION",
              "join-absurd": "EINVAL", "join-bad-model": "", "gen-nan": "EINVAL",
              "gen-zero": "", "gen-huge": "", "gen-bad-id": "ERANGE",
              "heartbeat-unknown": "ENOENT"}
    codes = {"EFORMAT": 5, "EVERSION": 6, "EINVAL": 1, "ERANGE": 8, "ENOENT": 4}
    with Cluster(model("synth-s-f32.gguf"), ["--wire", "f32"]) as c:
        c.add_worker()
        c.wait_serving(1)
        for what, code in expect.items():
            r = subprocess.run([INJECT, "req", c.addr, what], capture_output=True, text=True,
                               timeout=30)
            assert r.returncode == 0, (what, r.stdout, r.stderr)
            m = re.search(r"reply: error (\d+)", r.stdout)
            assert m, "%s: no error reply: %s" % (what, r.stdout)
            if code:
                assert int(m.group(1)) == codes[code], "%s: %s" % (what, r.stdout.strip())
            print("bad input %-18s -> %s" % (what, r.stdout.strip()))
        r = subprocess.run([INJECT, "step", c.workers[0].data_addr, "0"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0
        for p in c.procs:
            assert p.p.poll() is None, "%s died" % p.name
        check_generate_exact(c, case, c.tmp)
    # a worker's address flags are checked before it listens: a clear error
    # naming the flag, a failing exit, no `listening on` line
    for flag, value in (("--advertise", "tcp://10.0.0.1"), ("--advertise", "udp://h:1"),
                        ("--advertise-control", "tcp://h:99999"), ("--control-port", "70000"),
                        ("--listen", "tcp://127.0.0.1"), ("--coordinator", "bogus")):
        args = {"--coordinator": "tcp://127.0.0.1:1", "--listen": "tcp://127.0.0.1:0"}
        args[flag] = value
        argv = [WORKER, "--model", model("synth-s-f32.gguf"), "--threads", "1"]
        for k, v in args.items():
            argv += [k, v]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert r.returncode != 0 and flag in r.stderr and "listening on" not in r.stdout, \
            (flag, value, r.returncode, r.stdout, r.stderr)
        print("bad worker flag %s %s -> exit %d: %s"
              % (flag, value, r.returncode, r.stderr.strip().splitlines()[-1]))


def case_shutdown():
    """SIGTERM ends every process cleanly (exit 0), workers leave."""
    with Cluster(model("synth-s-q8_0.gguf"), []) as c:
        c.add_worker()
        c.add_worker()
        c.wait_placed(2)
        c.cli("generate", "--prompt-ids", "1,2,3", "-n", "8", "--ids")
        # idle processes sleep: no thread may spin between steps (a timed
        # wait on the wrong clock once kept a worker at 100% of a core)
        procs = [c.coord] + c.workers
        t0 = [cpu_seconds(p.p.pid) for p in procs]
        time.sleep(2.5)
        used = [cpu_seconds(p.p.pid) - a for p, a in zip(procs, t0)]
        for p, u in zip(procs, used):
            assert u < 0.25, "%s used %.2f s of CPU in 2.5 s while idle" % (p.name, u)
        rc = c.workers[1].stop()
        assert rc == 0, "worker exit %s" % rc
        st = c.wait_serving(1)
        assert c.workers[0].stop() == 0
        assert c.coord.stop() == 0
        for p in procs:  # the exit guard (common/base/exit_guard.h) had nothing to end
            assert GUARD_FIRED not in p.stderr(), (p.name, p.stderr()[-2000:])
        print("shutdown: idle CPU %s s in 2.5 s; clean exits; after a leave the remaining worker "
              "served epoch %d" % (", ".join("%.3f" % u for u in used), st["epoch"]))


GUARD_FIRED = "did not end within"  # the exit guard's line (common/base/exit_guard.c)


def case_exit_guard():
    """A worker whose release after Leave never ends (--test-hang-release
    stands in for NNG 1.5.2's close, which can wait forever once a message
    arrived on a closing pipe: common/base/exit_guard.h) is ended by its exit
    guard: exit status 0, the coordinator got its Leave, the log says why."""
    with Cluster(model("synth-s-q8_0.gguf"), []) as c:
        w = c.add_worker("--test-hooks", "--test-hang-release")
        c.wait_placed(1)
        rc = w.stop(timeout=60)  # the guard's bound is 5 s; a hang fails here
        assert rc == 0, "worker exit %s" % rc
        line = re.search(r"\[error\] exit: the worker's release of its sockets and memory "
                         r"did not end within (\d+) ms: exiting without it \(status 0\)",
                         w.stderr())
        assert line, w.stderr()[-2000:]
        left = re.search(r"worker \d+ left: left: shutdown", c.coord.stderr())
        assert left, c.coord.stderr()[-2000:]
        print("exit_guard: a release that never ends: the worker left (%r), then its guard "
              "ended it after %s ms with status 0" % (left.group(0), line.group(1)))


class Skip(Exception):
    """The case cannot run here (reported as skipped, never as passed)."""


def sh(*argv, check=True):
    r = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise AssertionError("%s: %s" % (" ".join(argv), r.stderr.strip()))
    return r


def netns_bridge(tag, br, hosts, sub, made):
    """Namespace br with a bridge, and per host h (name -> address pattern
    with one %d for sub) a namespace tag + h whose eth0 is a veth to the
    bridge's port "p" + h; every namespace made is appended to made (for the
    caller to delete). Skip when namespaces are unavailable."""
    r = sh("ip", "netns", "add", br, check=False)
    if r.returncode != 0:
        raise Skip("ip netns unavailable: %s" % r.stderr.strip())
    made.append(br)
    sh("ip", "-n", br, "link", "add", "br0", "type", "bridge")
    sh("ip", "-n", br, "link", "set", "br0", "up")
    for h, addr in hosts.items():
        ns = tag + h
        sh("ip", "netns", "add", ns)
        made.append(ns)
        sh("ip", "link", "add", "v" + tag + h, "netns", ns, "type", "veth",
           "peer", "name", "p" + h, "netns", br)
        sh("ip", "-n", ns, "link", "set", "v" + tag + h, "name", "eth0")
        sh("ip", "-n", ns, "addr", "add", (addr % sub) + "/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", br, "link", "set", "p" + h, "master", "br0")
        sh("ip", "-n", br, "link", "set", "p" + h, "up")


def netns_cleanup(procs, made):  # kills procs (Proc), deletes made's namespaces newest first
    for p in procs:
        p.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.p.wait(5)
    for ns in reversed(made):
        sh("ip", "netns", "del", ns, check=False)


NETNS_LIMIT = "10mbit"  # tbf on w2's egress in case netns
NETNS_RATIO = 3.0       # the free link measures more than this times the limited one


def case_netns():
    """Multi-host: the coordinator and two workers each in their own network
    namespace, joined by a bridge in a fourth; one link limited with tbf.
    Greedy ids and logits through the cluster equal `strata run`'s. The
    workers' measured links, in `strata status --json`: the tbf-limited one
    (w2 -> w1) clearly below the free one (w1 -> w2), compared with each
    other only (INV-9). The addresses are not loopback, so the cluster runs
    with a key (`strata keygen`; protected mode refuses them without one),
    and encrypted: the receiver's authentication is part of each probe's
    round trip."""
    if os.geteuid() != 0:
        raise Skip("needs root for network namespaces")
    tag = "st%d" % (os.getpid() % 100000)
    hosts = {"c": "10.231.%d.1", "w1": "10.231.%d.2", "w2": "10.231.%d.3"}
    sub = os.getpid() % 250
    br = tag + "br"
    made = []
    procs = []
    tmp = tempfile.mkdtemp(prefix="strata-netns-%d-" % os.getpid())
    try:
        netns_bridge(tag, br, hosts, sub, made)
        # a limit far below what loopback-speed veths carry even on a loaded
        # or sanitized build (they measure above 1 Gbit/s there), so the
        # limited link is clearly the slower one on any machine; the queue
        # (latency) holds a whole 1 MiB probe, so tbf delays rather than drops
        r = sh("tc", "-n", tag + "w2", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate",
               NETNS_LIMIT, "burst", "64kb", "latency", "200ms", check=False)
        limited = r.returncode == 0  # (no sch_tbf here: the links are not compared)

        def spawn(name, ns, argv):
            p = Proc(tmp, name, ["ip", "netns", "exec", tag + ns] + argv)
            procs.append(p)
            return p

        m = model("synth-s-f32.gguf")
        key = os.path.join(tmp, "cluster.key")
        sh(STRATA, "keygen", key)
        caddr = hosts["c"] % sub
        coord = spawn("coordinator", "c", [COORD, "--model", m, "--listen",
                                          "tcp://%s:0" % caddr, "--wire", "f32",
                                          "--min-workers", "2", "--heartbeat-ms", "200",
                                          "--cluster-key", key, "--encrypt"] + GOLDEN_KV)
        addr = coord.wait_line(r"listening on (tcp://[0-9.]+:\d+)").group(1)
        for w in ("w1", "w2"):
            spawn(w, w, [WORKER, "--coordinator", addr, "--model", m, "--listen",
                         "tcp://%s:0" % (hosts[w] % sub), "--threads", "1", "--name", w,
                         "--heartbeat-ms", "200", "--cluster-key", key, "--encrypt"])
        deadline = time.time() + TIMEOUT
        st = None
        while time.time() < deadline:
            r = sh("ip", "netns", "exec", tag + "c", STRATA, "status", "--json", "--coordinator",
                   addr, "--cluster-key", key, "--encrypt", check=False)
            if r.returncode == 0:
                st = json.loads(r.stdout)
                if st.get("serving") and len(st["workers"]) == 2:
                    break
            time.sleep(0.2)
        assert st and st.get("serving"), "the namespaced cluster did not serve: %s" % st
        assert st["keyed"] and st["encrypted"], "the namespaced cluster is not keyed and encrypted"
        datas = sorted(w["data_addr"] if "data_addr" in w else w.get("cap", {}).get("data_addr", "")
                       for w in st["workers"])
        for case in golden_cases():
            if case["model"] != "synth-s-f32.gguf":
                continue
            lc, lr = os.path.join(tmp, "c.logits"), os.path.join(tmp, "r.logits")
            r = sh("ip", "netns", "exec", tag + "c", STRATA, "generate", "--coordinator", addr,
                   "--cluster-key", key, "--encrypt", "--prompt-ids",
                   ",".join(map(str, case["prompt_ids"])), "-n", str(case["n"]),
                   "--temp", "0", "--ids", "--logits-out", lc)
            got = parse_ids(r.stdout)
            assert got == case["expected_ids"], (got, case["expected_ids"])
            assert run_ids(m, case["prompt_ids"], case["n"], lr) == got
            with open(lc, "rb") as a, open(lr, "rb") as b:
                assert a.read() == b.read(), "logits across namespaces differ from strata run's"
        # measured links: w2's egress is limited by tbf (NETNS_LIMIT), w1's is not
        deadline = time.time() + 30
        links = {}
        while time.time() < deadline:
            r = sh("ip", "netns", "exec", tag + "c", STRATA, "status", "--json", "--coordinator",
                   addr, "--cluster-key", key, "--encrypt", check=False)
            if r.returncode == 0:
                st = json.loads(r.stdout)
                links = {(l["from_name"], l["to_name"]): l for l in st.get("links", [])
                         if l["measured"]}
                if ("w1", "w2") in links and ("w2", "w1") in links:
                    break
            time.sleep(0.2)
        assert ("w1", "w2") in links and ("w2", "w1") in links, \
            "links not measured in 30 s: %s" % st.get("links")
        slow, fast = links[("w2", "w1")], links[("w1", "w2")]
        gbit = lambda l: l["bandwidth_bytes_per_s"] * 8 / 1e9  # noqa: E731
        # the two measurements against each other only (no absolute rate:
        # what a free link carries depends on the machine and its load)
        assert not limited or gbit(fast) > NETNS_RATIO * gbit(slow), \
            "the free link (%.3f Gbit/s) is not %.0fx the limited one (%.3f)" % (
                gbit(fast), NETNS_RATIO, gbit(slow))
        assert slow["latency_ms"] > 0 and fast["latency_ms"] > 0, (slow, fast)
        print("netns: 3 hosts on a bridge (%s); golden ids and bit-exact logits" % ", ".join(
            h % sub for h in hosts.values()), datas)
        print("netns links: w2->w1 (tbf %s) %.3f Gbit/s %.3f ms; w1->w2 %.3f Gbit/s %.3f ms" % (
            NETNS_LIMIT if limited else "not available: not compared", gbit(slow),
            slow["latency_ms"], gbit(fast), fast["latency_ms"]))
    finally:
        netns_cleanup(procs, made)


def wave2_cases(model_name):
    with open(os.path.join(SHARED, "golden", "wave2", "generation.json")) as f:
        return [x for x in json.load(f)["cases"] if x["model"] == model_name]


def min_cosine(got, ref, n_vocab):
    """The smallest per-step cosine between two files of float32 rows."""
    a, b = array.array("f", got), array.array("f", ref)
    worst = 1.0
    for s in range(len(a) // n_vocab):
        x, y = a[s * n_vocab:(s + 1) * n_vocab], b[s * n_vocab:(s + 1) * n_vocab]
        dot = sum(p * q for p, q in zip(x, y))
        worst = min(worst, dot / math.sqrt(sum(p * p for p in x) * sum(q * q for q in y)))
    return worst


def check_wave2_splits(name, splits):
    """The wave-2 golden cases of model name through each split (f32 wire):
    the golden ids, logits within the Q8_0 tolerance of the reference
    (cosine >= 0.998), bit for bit `strata run`'s and the same whatever the
    split (INV-1). Prompts are ids; the coordinator needs no tokenizer for
    them (`strata run` loads the model's BPE vocabulary)."""
    cases = wave2_cases(name)
    assert len(cases) == 2, "wave2 has %d cases of %s" % (len(cases), name)
    first = {}
    for split in splits:
        with Cluster(model(name), ["--wire", "f32", "--split", ",".join(map(str, split)),
                                   "--min-workers", str(len(split))]) as c:
            for _ in split:
                c.add_worker()
            st = c.wait_serving(len(split))
            layers = [s["last"] - s["first"] for s in st["plan"]["stages"]]
            assert layers == split, "plan layers %s != split %s" % (layers, split)
            for i, case in enumerate(cases):
                lc = os.path.join(c.tmp, "c%d.logits" % i)
                r = c.cli("generate", "--prompt-ids", ",".join(map(str, case["prompt_ids"])),
                          "-n", str(case["n"]), "--temp", "0", "--ids", "--logits-out", lc)
                got = parse_ids(r.stdout)
                assert got == case["expected_ids"], "split %s: ids %s != golden %s" % (
                    split, got, case["expected_ids"])
                with open(lc, "rb") as f:
                    data = f.read()
                assert len(data) == 4 * case["n"] * case["n_vocab"], len(data)
                if i not in first:
                    with open(os.path.join(SHARED, "golden", "wave2", case["logits_file"]),
                              "rb") as f:
                        cosv = min_cosine(data, f.read(), case["n_vocab"])
                    assert cosv >= 0.998, "min cosine %.6f < 0.998" % cosv
                    lr = os.path.join(c.tmp, "r%d.logits" % i)
                    assert run_ids(c.model, case["prompt_ids"], case["n"], lr) == got
                    with open(lr, "rb") as f:
                        assert f.read() == data, "cluster logits differ from strata run's"
                    print("%s: %s min cosine vs reference %.7f; strata run's logits bit for bit"
                          % (name, case["logits_file"], cosv))
                    first[i] = data
                assert data == first[i], "split %s: logits differ from the first split's" % split
            check_no_dropped_results(c)
            print("%s: split %s: golden ids, logits bit-identical" % (name, split))


def case_kv():
    """The KV cache types through the cluster (f32 wire): the default (f16,
    no --cache-type) and q8_0, splits [6] and [2, 4] of synth-s-f32: greedy
    ids and logits bit for bit `strata run`'s at the same type; the status
    names the type and counts one session's KV as 6 layers x 512 positions
    x K and V x kv_dim 64 in it (2 bytes a value for f16, 34 per 32 for
    q8_0), and the workers' allocated KV after the one session is that."""
    name, n_ctx, n_layer, kv_dim = "synth-s-f32.gguf", 512, 6, 64
    row = {"f16": kv_dim * 2, "q8_0": kv_dim // 32 * 34}
    case = next(x for x in golden_cases() if x["model"] == name)
    for ct, args in (("f16", []), ("q8_0", ["--cache-type", "q8_0"])):
        for split in ([6], [2, 4]):
            with Cluster(model(name), ["--wire", "f32", "--split", ",".join(map(str, split)),
                                       "--min-workers", str(len(split))], kv=args) as c:
                for _ in split:
                    c.add_worker()
                c.wait_serving(len(split))
                lc, lr = os.path.join(c.tmp, "c.logits"), os.path.join(c.tmp, "r.logits")
                r = c.cli("generate", "--prompt-ids", ",".join(map(str, case["prompt_ids"])),
                          "-n", str(case["n"]), "--temp", "0", "--ids", "--logits-out", lc)
                got = parse_ids(r.stdout)
                ref = run_ids(c.model, case["prompt_ids"], case["n"], lr, kv=args)
                assert got == ref, "%s split %s: cluster ids %s != strata run's %s" % (
                    ct, split, got, ref)
                with open(lc, "rb") as a, open(lr, "rb") as b:
                    assert a.read() == b.read(), "%s split %s: logits differ" % (ct, split)
                want = n_layer * n_ctx * 2 * row[ct]
                deadline = time.time() + 5  # the workers' figure comes with their heartbeats
                while True:
                    sch = c.status()["sched"]
                    if int(sch["kv_bytes"]) > 0 or time.time() > deadline:
                        break
                    time.sleep(0.1)
                assert sch["kv_cache_type"] == ct, sch
                assert int(sch["kv_session_bytes"]) == want, (sch["kv_session_bytes"], want)
                # the one session generated: its caches over the stages, as the workers allocated
                assert int(sch["kv_bytes"]) == want, (sch["kv_bytes"], want)
                print("kv: %s split %s: strata run's ids and logits bit for bit; %d KV bytes "
                      "a session, %d on workers" % (ct, split, want, int(sch["kv_bytes"])))


def case_qwen2():
    """The qwen2 architecture (q/k/v biases, NEOX rope, tied head) through 1,
    2 and 3 workers (check_wave2_splits)."""
    check_wave2_splits("qw2-synth-q8_0.gguf", ([4], [2, 2], [1, 2, 1]))


def case_llama3():
    """The Llama 3 vocabulary llama (rope base 500000, tied head, 128,256
    ids) through 1 and 2 workers (check_wave2_splits)."""
    check_wave2_splits("l3-synth-q8_0.gguf", ([4], [1, 3]))

def case_poll_empty():
    """A poll answered without ids (nothing was generated while it waited:
    a plan switch, a held step, a long queue) is asked again, and the
    generation ends with `strata run`'s ids. The step gate parks the request
    at 2 ids for 1 s, 20 times `--poll-ms 50`, so the CLI gets empty
    answers however slow the machine is; under UBSan the CLI once failed on
    the first (memcpy from the reply's NULL id array: "null pointer passed
    as argument 2")."""
    case = [x for x in golden_cases() if x["model"] == "synth-s-f32.gguf"][0]
    prompt = ",".join(map(str, case["prompt_ids"]))
    n = 8
    with Cluster(model("synth-s-f32.gguf"), ["--wire", "f32", "--test-hooks"]) as c:
        c.add_worker()
        c.wait_serving(1)
        hold(c, 2)
        argv = [STRATA, "generate", "--prompt-ids", prompt, "-n", str(n), "--temp", "0", "--ids",
                "--poll-ms", "50", "--coordinator", c.addr]
        g = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_held(c, 1, at=2)
            time.sleep(1.0)  # (the request cannot go on while parked)
            assert g.poll() is None, "generate ended while its request was parked: %s" % (
                g.communicate(),)
            release(c)
            out, err = g.communicate(timeout=TIMEOUT)
        finally:
            if g.poll() is None:
                g.kill()
        assert g.returncode == 0, "generate failed (%d): %s" % (g.returncode, err)
        got = parse_ids(out)
        ref = run_ids(c.model, case["prompt_ids"], n, os.path.join(c.tmp, "run.logits"))
        assert got == ref, "ids %s differ from strata run's %s" % (got, ref)
        print("poll_empty: parked at 2 ids for 1 s with --poll-ms 50; ids %s equal strata run's"
              % got)



def run_cases(cases):
    """Runs the cases named on the command line (all by default), going on
    after a failure; prints 'N passed, N failed, N skipped' and exits 1 on a
    failure (77 when everything was skipped)."""
    names = sys.argv[2:] or list(cases)
    passed = failed = skipped = 0
    for n in names:
        t0 = time.time()
        try:
            cases[n]()
            passed += 1
            print("ok: %s (%.1fs)" % (n, time.time() - t0))
        except Skip as e:
            skipped += 1
            print("SKIP: %s: %s" % (n, e))
        except Exception as e:  # report and go on with the next case
            failed += 1
            print("FAIL: %s: %s" % (n, e))
    print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
    sys.exit(1 if failed else (77 if skipped and not passed else 0))


CASES = {"inv1": case_inv1, "kv": case_kv, "membership": case_membership, "stale": case_stale_epoch,
         "key": case_cluster_key, "bad_input": case_bad_input, "shutdown": case_shutdown,
         "exit_guard": case_exit_guard, "netns": case_netns, "qwen2": case_qwen2, "llama3": case_llama3,
         "poll_empty": case_poll_empty}

if __name__ == "__main__":
    run_cases(CASES)
