#!/usr/bin/env python3
"""placement.py - integration tests of heterogeneous placement (issue 6):
the plan changes of a live cluster (a forced replan, a drain, a lost
replica) while sessions stream. Real coordinator and worker processes on
loopback, with the f32 wire so outputs must equal `strata run`'s and the
golden ids exactly (INV-1, INV-4). What the planner plans from (measured
speeds and links, a workers file) is placement_measure.py's; it imports the
helpers here (Gen, wait_until, layers_of, add_joined).

Usage: placement.py BUILD_DIR CASE...   (CASE: see CASES at the bottom)
Reuses cluster.py's process helpers; every process is killed at the end,
also on failure. Prints 'N passed, N failed' as its last line.

Cases:
- switch: synth-s-f32 on three workers; a long greedy generation is parked
  by the step gate (coordinator --test-hooks, `strata hold`) after 16 ids,
  `strata replan --force --objective latency` moves every layer to one
  worker, the gate moves to 48 ids (the stream goes on in that plan) and
  `--objective throughput` spreads the layers again; released, the ids
  equal the golden ids and `strata run`'s.
- drain: synth-s-f32 on two workers and a slow spare; while two sessions
  are parked by the step gate after 24 ids, `strata drain worker0`: the
  plan without it needs the spare (the other worker's memory holds 4 of 6
  layers), worker0 ends drained, leaves and exits 0 by itself, both outputs equal `strata run`'s
  and the golden ids; a spare with --stay-after-drain stays drained and
  `strata drain --undo` makes it placeable again.
- replicas: synth-tied-q8_0 (2 layers and a 32000-id tied head, so the
  stage with the head is the bottleneck whatever the split) on three
  workers with `--replicas`: the committed plan gives the head's stage two
  workers; 6 concurrent greedy sessions (f32 wire) equal `strata run`'s
  ids, both replicas computed steps, both routes carried batches and more
  than one batch was in flight (the step gate parks the 6 after their
  first id until all run, so they overlap on any machine); then, while 4
  long sessions are parked after 10 ids on both routes, one replica is
  killed: the plan is made again without it; when
  it keeps the other route's workers, that route's sessions keep their KV
  (`kv_kept` in the status), and, released, all 4 and 3 new sessions equal
  `strata run`.
- keep: synth-s-f32 on two workers with a fixed split; while a stream is
  parked by the step gate after 12 ids, `strata replan --force` switches to
  a new epoch with the same layer ranges: each worker keeps its resident
  weights (one "placed in huge-page memory" line and one "kept the
  resident weights" line in its log) and the session keeps its KV;
  released, the ids equal the golden ids and `strata run`'s. The status
  says the two workers share this host's cores (pipeline depth rule).
No verdict depends on the machine's speed (INV-9): events happen at known
steps through the step gate (tests/cluster/cluster.py: hold, wait_held,
release), outcomes are ids, counters and states, and time bounds only stop
a hang.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402  (reads BUILD from sys.argv[1] like this script)
from cluster import Cluster, STRATA, TIMEOUT, model, golden_cases, parse_ids  # noqa: E402

_ref_cache = {}


def ref_ids(model_path, prompt, n):
    """The greedy ids `strata run` generates for prompt (cached)."""
    key = (model_path, tuple(prompt), n)
    if key not in _ref_cache:
        r = subprocess.run([STRATA, "run", model_path, "--prompt-ids", ",".join(map(str, prompt)),
                            "-n", str(n), "--temp", "0", "--ids", "--threads", "1"] +
                           cluster.GOLDEN_KV,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        _ref_cache[key] = parse_ids(r.stdout)
    return _ref_cache[key]


class Gen(threading.Thread):
    """A greedy `strata generate` running in the background."""

    def __init__(self, c, prompt, n):
        super().__init__(daemon=True)
        self.c, self.prompt, self.n = c, prompt, n
        self.ids, self.err = None, None
        self.t0 = self.t1 = None

    def run(self):
        self.t0 = time.time()
        r = self.c.cli("generate", "--prompt-ids", ",".join(map(str, self.prompt)), "-n",
                       str(self.n), "--temp", "0", "--ids", check=False, timeout=120)
        self.t1 = time.time()
        if r.returncode != 0:
            self.err = r.stderr
        else:
            self.ids = parse_ids(r.stdout)

    def check(self, golden=None):
        if self.ident is not None:
            self.join(120)
        assert self.t1 is not None, "generation did not end"
        assert self.err is None, "generation failed: %s" % self.err
        ref = ref_ids(self.c.model, self.prompt, self.n)
        assert self.ids == ref, "ids %s... differ from strata run's %s..." % (self.ids[:40],
                                                                             ref[:40])
        if golden is not None:
            assert self.ids[:len(golden)] == golden, "ids differ from the golden ids"


def layers_of(st):
    """{name: layer count} of the serving plan in a status."""
    return {w["name"]: (w["last"] - w["first"] if w["stage"] >= 0 else 0) for w in st["workers"]}


def wait_until(c, pred, timeout, what):
    deadline = time.time() + timeout
    st = None
    while time.time() < deadline:
        st = c.status()
        if pred(st):
            return st
        time.sleep(0.1)
    raise AssertionError("%s not reached in %ss: %s" % (what, timeout, json.dumps(st)[:1500]))


def add_joined(c, *extra):
    """Starts a worker and waits until the coordinator lists it."""
    n = len(c.workers)
    c.add_worker(*extra)
    wait_until(c, lambda s: len(s["workers"]) > n, 30, "worker %d joined" % n)


# ---------------------------------------------------------------- cases

def case_switch():
    name = "synth-s-f32.gguf"
    cases = [x for x in golden_cases() if x["model"] == name]
    with Cluster(model(name), ["--wire", "f32", "--min-workers", "3", "--no-imbalance",
                               "--test-hooks"]) as c:
        # (the throttle makes compute outweigh the loopback links, so the
        # throughput objective spreads the layers; the stream's timing does
        # not depend on it: the step gate places the switches)
        for _ in range(3):
            c.add_worker("--throttle", "4")
        st = wait_until(c, lambda s: s["serving"] and len(s["workers"]) == 3, TIMEOUT,
                        "a plan for the 3 workers")
        e0 = st["epoch"]
        case = cases[-1]
        n = 512 - len(case["prompt_ids"])
        # the stream is parked (between two steps, nothing in flight) at k1
        # ids for the first switch and at k2 for the second, so it spans
        # both whatever the machine's speed, with ids computed in each plan
        k1, k2 = 16, 48
        assert len(ref_ids(c.model, case["prompt_ids"], n)) > k2, "the stream ends before k2"
        cluster.hold(c, k1)
        g = Gen(c, case["prompt_ids"], n)
        g.start()
        cluster.wait_held(c, 1, at=k1)
        t0 = time.time()
        r = json.loads(c.cli("replan", "--force", "--objective", "latency", "--json").stdout)
        assert r["started"], r
        st = wait_until(c, lambda s: s["epoch"] > e0 and s["serving"], 30, "the latency plan")
        e1 = st["epoch"]
        print("switch: latency plan serving after %.2f s" % (time.time() - t0))
        stages = st["plan"]["stages"]
        assert len(stages) == 1, "latency objective: %d stages" % len(stages)
        assert [x["tokens"] for x in cluster.held(st)] == [k1], "the stream moved on: %s" % \
            st["sched"]
        cluster.hold(c, k2)  # the stream goes on in the 1-stage plan up to k2 ids
        cluster.wait_held(c, 1, at=k2)
        r = json.loads(c.cli("replan", "--force", "--objective", "throughput", "--json").stdout)
        assert r["started"], r
        st = wait_until(c, lambda s: s["epoch"] > e1 and s["serving"], 30, "the throughput plan")
        alive = g.is_alive()
        assert [x["tokens"] for x in cluster.held(st)] == [k2], st["sched"]
        cluster.release(c)
        g.check(golden=case["expected_ids"])
        assert alive, "the generation ended before the second switch"
        assert len(st["plan"]["stages"]) >= 2, st["plan"]
        print("switch: epochs %d -> %d (1 stage) at id %d -> %d (%d stages) at id %d during one "
              "stream of %d ids: golden and strata run ids" % (
                  e0, e1, k1, st["epoch"], len(st["plan"]["stages"]), k2, n))
        for case in cases:
            cluster.check_generate_exact(c, case, c.tmp)


def case_drain():
    name = "synth-s-f32.gguf"
    cases = [x for x in golden_cases() if x["model"] == name]
    with Cluster(model(name), ["--wire", "f32", "--min-workers", "2", "--no-imbalance",
                               "--test-hooks"]) as c:
        # one at a time, so their start-up measurements do not compete for the cores
        add_joined(c)
        add_joined(c, "--memory", "22M")
        # the spare must stay out until the drain: its cost is its start-up
        # measurement times the throttle, and a worker measured while other
        # tests load the cores reads several times slower than it is, so
        # the throttle leaves a wide margin (12 was once not enough); once
        # it is out, its throttle file brings it to the others' 1, so the
        # streams after the drain do not crawl (no imbalance replans here)
        tfile = os.path.join(c.tmp, "spare-throttle")
        with open(tfile, "w") as f:
            f.write("30\n")
        add_joined(c, "--spare", "--throttle", "30", "--throttle-file", tfile)
        # worker0 (no memory limit) holds a stage in any plan; whether
        # worker1 gets one too is the planner's choice from measured speeds
        st = wait_until(c, lambda s: len(s["workers"]) == 3 and s["serving"] and
                        layers_of(s)["worker0"] > 0 and
                        {w["name"]: w["state"] for w in s["workers"]}["worker2"] == "spare",
                        TIMEOUT, "the spare joined")
        names = {w["id"]: w["name"] for w in st["workers"]}
        assert layers_of(st)["worker2"] == 0, layers_of(st)
        dry = json.loads(c.cli("plan", "--dry-run", "--json").stdout)
        spare = [w for w in dry["workers"] if w["name"] == "worker2"][0]
        assert spare["left_out"] and "spare" in spare["left_out"], spare
        with open(tfile, "w") as f:
            f.write("1\n")
        # both sessions are parked after k ids (between steps, nothing in
        # flight), so they span the drain whatever the machine's speed
        k = 24
        cluster.hold(c, k)
        gens = [Gen(c, cases[1]["prompt_ids"], 400), Gen(c, [1, 5, 9], 400)]
        for x in gens:
            x.start()
        cluster.wait_held(c, 2, at=k)
        t0 = time.time()
        r = c.cli("drain", "worker0", "--json", "--timeout-ms", "60000")
        dt = time.time() - t0
        d = json.loads(r.stdout)
        assert d["drained"], d
        alive = [x.is_alive() for x in gens]
        st = c.wait_serving(2, min_epoch=d["epoch"] - 1)
        assert [x["tokens"] for x in cluster.held(st)] == [k, k], st["sched"]
        states = {w["name"]: w["state"] for w in st["workers"]}
        assert states["worker0"] in ("drained", "left"), states
        plan_workers = [names[int(i)] for s in st["plan"]["stages"] for i in s["worker_ids"]]
        assert "worker0" not in plan_workers and "worker2" in plan_workers, plan_workers
        # the drained worker leaves by itself: Leave, then exit status 0
        # (its next heartbeat's reply says leave; the bound only stops a hang)
        w0 = c.workers[0]
        try:
            rc = w0.p.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            raise AssertionError("worker0 still runs %d s after its drain: %s"
                                 % (TIMEOUT, w0.stderr()[-1500:]))
        t_exit = time.time() - t0
        assert rc == 0, "worker0 exited %s: %s" % (rc, w0.stderr()[-1500:])
        assert "drained at epoch %d" % d["epoch"] in w0.stderr() and "leaving" in w0.stderr(), \
            w0.stderr()[-1500:]
        st = wait_until(c, lambda s: {w["name"]: w["state"] for w in s["workers"]}["worker0"] ==
                        "left", 30, "worker0 listed as left")
        # asked again once it left (and before the coordinator forgets it,
        # 60 s later): still reported drained
        r = c.cli("drain", "worker0", "--json")
        assert json.loads(r.stdout)["drained"], r.stdout
        cluster.release(c)
        gens[0].check(golden=cases[1]["expected_ids"])
        gens[1].check()
        assert all(alive), "a session ended before the drain completed (%.2f s; %s)" % (
            dt, [(x.t0 - t0, (x.t1 or 0) - t0) for x in gens])
        print("drain: worker0 drained in %.2f s (epoch %d, layers %s) while %d sessions were "
              "parked at id %d; it left and exited 0 %.2f s after the drain began; both outputs "
              "equal strata run and the golden ids" % (dt, d["epoch"], layers_of(st), sum(alive),
                                                       k, t_exit))
        r = c.cli("drain", "nosuch", check=False)
        assert r.returncode == 1 and "no live worker named 'nosuch'" in r.stderr, r.stderr
        # --stay-after-drain: a drained spare stays joined, and --undo makes it placeable
        add_joined(c, "--spare", "--stay-after-drain")
        # (the join may replan and give the fresh, faster worker a stage: either will do)
        wait_until(c, lambda s: s["serving"] and {w["name"]: w["state"] for w in s["workers"]}
                   .get("worker3") in ("spare", "serving"), 30, "worker3 a spare or serving")
        d3 = json.loads(c.cli("drain", "worker3", "--json", "--timeout-ms", "60000").stdout)
        assert d3["drained"], d3
        # it got a heartbeat reply that says leave and logged that it stays
        # (every later reply takes the same branch): it must still run
        w3 = c.workers[3]
        deadline = time.time() + TIMEOUT
        while "staying as a spare" not in w3.stderr() and time.time() < deadline:
            time.sleep(0.05)
        assert "staying as a spare" in w3.stderr(), w3.stderr()[-1500:]
        assert w3.p.poll() is None, "worker3 left despite --stay-after-drain"
        st = c.status()
        assert {w["name"]: w["state"] for w in st["workers"]}["worker3"] == "drained", st
        u = json.loads(c.cli("drain", "worker3", "--undo", "--json").stdout)
        assert not u["drained"] and "undrained" in u["message"], u
        wait_until(c, lambda s: {w["name"]: w["state"] for w in s["workers"]}["worker3"] in
                   ("spare", "serving", "preparing"), 10, "worker3 placeable again")
        dry = json.loads(c.cli("plan", "--dry-run", "--json").stdout)
        w3 = [w for w in dry["workers"] if w["name"] == "worker3"][0]
        assert "drain" not in (w3["left_out"] or ""), w3
        cluster.check_generate_exact(c, cases[0], c.tmp)


def settled_plan(c, placed, timeout=TIMEOUT):
    """Waits until every listed worker has heartbeated (it is placeable)
    and the serving plan is the planner's choice for them: a non-forced
    replan starts no new round and no worker is preparing one. Returns the
    status. (A plan change after a join is then done, not merely due.)"""
    deadline = time.time() + timeout
    wait_until(c, lambda s: all("load" in w for w in s["workers"] if w["state"] != "lost"),
               timeout, "a heartbeat from every worker")
    while time.time() < deadline:
        r = json.loads(c.cli("replan", "--json").stdout)
        # a round in progress defers the replan: "deferred until epoch E is switched to"
        m = re.match(r"deferred until epoch (\d+)", r["message"])
        epoch = int(m.group(1)) if m else r["epoch"]
        st = wait_until(c, lambda s: s["serving"] and s["epoch"] >= epoch and placed(s) and
                        "preparing" not in [w["state"] for w in s["workers"]], timeout,
                        "the plan of epoch %d" % epoch)
        if not r["started"] and not m and st["epoch"] == r["epoch"]:
            return st
    raise AssertionError("the plan did not settle in %ss" % timeout)


def case_replicas():
    import batching  # the loadgen helpers (reads BUILD from sys.argv[1] too)
    m = model("synth-tied-q8_0.gguf")
    tmp = tempfile.mkdtemp(prefix="strata-rep-%d-" % os.getpid())
    try:
        replicas_in(m, os.path.join(tmp, "throttle"), batching)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def replicas_in(m, tfile, batching):
    with open(tfile, "w") as f:
        f.write("1\n")
    with Cluster(m, ["--wire", "f32", "--min-workers", "3", "--replicas", "--no-imbalance",
                     "--objective", "throughput", "--chunk", "16", "--max-tokens", "512",
                     "--test-hooks",
                     # two batches in flight whatever the cores (the default
                     # follows them: coordinator/planner/concurrency.h)
                     "--pipeline-depth", "2"]) as c:
        def placed(s):  # a serving plan, and every live worker serves or was left out
            return s["serving"] and [w["state"] for w in s["workers"]
                                     if w["state"] != "lost"].count("serving") + \
                [w["state"] for w in s["workers"]].count("spare") == 3

        # A replica of the head's stage halves its time only if it is less
        # than twice as slow as the stage's worker. The start-up measurement
        # is disturbed by other load on the cores, so every worker announces
        # the same speed (--test-speed) and the plan does not depend on how
        # busy the machine is.
        for _ in range(3):
            add_joined(c, "--throttle-file", tfile, "--test-hooks", "--test-speed", "2G")
        st = settled_plan(c, placed)
        names = {w["id"]: w["name"] for w in st["workers"]}
        stages = st["plan"]["stages"]
        rep = [s for s in stages if len(s["worker_ids"]) == 2]
        assert len(stages) == 2 and len(rep) == 1 and rep[0]["last"] == st["plan"]["n_layer"], \
            "no stage with two workers (the head's): %s; speeds %s" % (
                stages, [(w["name"], w["sec_per_byte"]) for w in
                         json.loads(c.cli("plan", "--dry-run", "--json").stdout)["workers"]])
        replicas = [names[int(i)] for i in rep[0]["worker_ids"]]
        text = c.cli("plan").stdout
        assert "2 replicas" in text, text
        text = c.cli("status").stdout
        assert "stage 1 [1,2): replicas %s, %s" % tuple(replicas) in text, text
        dry = json.loads(c.cli("plan", "--dry-run", "--json").stdout)
        assert dry["replicas_served"] and dry["note"] == "", dry
        reqs = [{"prompt_ids": batching.prompt_of(k, [3, 21, 9, 40, 5, 14][k], 32000),
                 "n": [30, 18, 26, 12, 34, 22][k], "delay_ms": 5 * k} for k in range(6)]
        # the 6 sessions run at the same time whatever the machine's speed:
        # each is parked after its first id until all 6 are (3 per route),
        # then they go on together
        cluster.hold(c, 1)
        t0 = time.time()
        box = {}
        t = threading.Thread(target=lambda: box.update(res=batching.loadgen(c, reqs)))
        t.start()
        st = cluster.wait_held(c, 6, at=1)
        routes_held = sorted(x["route"] for x in cluster.held(st))
        cluster.release(c)
        t.join(180)
        assert not t.is_alive() and "res" in box, "the 6 sessions did not end"
        res = box["res"]
        dt = time.time() - t0
        for k, (r, o) in enumerate(zip(reqs, res)):
            batching.check_ok(o, batching.ref_ids(m, r["prompt_ids"], r["n"]), "request %d" % k)
        assert routes_held == [0, 0, 0, 1, 1, 1], "sessions per route %s" % routes_held
        assert "failed batch" not in c.coord.stderr(), \
            "a batch failed (misrouted?): %s" % c.coord.stderr()[-2000:]
        first = [names[int(i)] for s in stages for i in s["worker_ids"] if s is not rep[0]][0]

        def counted(s):  # every batch formed reached the workers' step counters (heartbeats)
            steps = {w["name"]: int(w["counters"]["steps"]) for w in s["workers"]}
            b = int(s["sched"]["batches"])
            return steps[first] >= b and steps[replicas[0]] + steps[replicas[1]] >= b
        st = wait_until(c, counted, 30, "the step counters of every batch")
        steps = {w["name"]: int(w["counters"]["steps"]) for w in st["workers"]}
        sch = st["sched"]
        assert all(steps[x] > 0 for x in replicas), "a replica computed no step: %s" % steps
        assert sch["routes"] == 2 and all(int(b) > 0 for b in sch["route_batches"]), sch
        assert sch["peak_in_flight"] >= 2, sch
        assert steps[first] >= steps[replicas[0]] + steps[replicas[1]] - 2, steps
        print("replicas: stage [%d, %d) on %s; 6 concurrent sessions equal strata run in %.2f s; "
              "steps %s; route batches %s; peak %d in flight"
              % (rep[0]["first"], rep[0]["last"], replicas, dt, steps, sch["route_batches"],
                 sch["peak_in_flight"]))
        # a lost replica while 4 sessions stream: they are parked after k ids
        # on both routes (between steps, nothing in flight) until the plan
        # is made again from the workers left, so they span the loss
        # whatever the machine's speed; the sessions on the surviving route
        # keep their KV when the new plan runs their layers on the same
        # workers, the others re-prefill; every output equals strata run's
        e0 = st["epoch"]
        kept0 = int(sch["kv_kept"])
        k = 10
        long_reqs = [{"prompt_ids": batching.prompt_of(10 + j, 6 + 3 * j, 32000), "n": 300}
                     for j in range(4)]
        cluster.hold(c, k)
        t_kill = time.time()
        box = {}
        t = threading.Thread(target=lambda: box.update(res=batching.loadgen(c, long_reqs)))
        t.start()
        st = cluster.wait_held(c, 4, at=k)
        assert sorted(x["route"] for x in cluster.held(st)) == [0, 0, 1, 1], st["sched"]
        gone = [w for w in c.workers if w.name == replicas[1]][0]
        gone.kill()
        st = wait_until(c, lambda s: s["epoch"] > e0 and s["serving"] and
                        replicas[1] not in [names.get(int(i)) for x in s["plan"]["stages"]
                                            for i in x["worker_ids"]], 60,
                        "a plan without the lost replica")
        t_plan = time.time() - t_kill
        sch = st["sched"]
        assert [x["tokens"] for x in cluster.held(st)] == [k] * 4, sch
        kept_layout = [(x["first"], x["last"]) for x in st["plan"]["stages"]] == \
            [(x["first"], x["last"]) for x in stages] and \
            [names[int(i)] for x in st["plan"]["stages"] for i in x["worker_ids"]] == \
            [names[int(i)] for x in stages for i in x["worker_ids"] if names[int(i)] != replicas[1]]
        kept = int(sch["kv_kept"]) - kept0
        # the 2 sessions of the surviving route keep their KV exactly when
        # the new plan keeps that route's workers
        assert (kept > 0) == kept_layout and (kept >= 2 or not kept_layout), \
            "layout kept %s, but %d sessions kept their KV" % (kept_layout, kept)
        cluster.release(c)
        t.join(180)
        assert not t.is_alive() and "res" in box, "the streams did not end"
        t_end = time.time() - t_kill
        for j, (r, o) in enumerate(zip(long_reqs, box["res"])):
            batching.check_ok(o, batching.ref_ids(m, r["prompt_ids"], r["n"]),
                              "streaming request %d across the loss" % j)
        res = batching.loadgen(c, reqs[:3])
        for j, (r, o) in enumerate(zip(reqs, res)):
            batching.check_ok(o, batching.ref_ids(m, r["prompt_ids"], r["n"]),
                              "request %d after the loss" % j)
        print("replicas: %s lost while 4 sessions were parked at id %d -> epoch %d stages %s; at "
              "the switch %d sessions kept their KV (%s re-prefilled in all); all 4 and 3 more "
              "sessions equal strata run (new plan %.1f s, streams done %.1f s after the start)"
              % (replicas[1], k, st["epoch"], [[names[int(i)] for i in x["worker_ids"]]
                                               for x in st["plan"]["stages"]],
                 kept, sch["kv_reprefilled"], t_plan, t_end))


def case_keep():
    name = "synth-s-f32.gguf"
    case = [x for x in golden_cases() if x["model"] == name][-1]
    with Cluster(model(name), ["--wire", "f32", "--min-workers", "2", "--no-imbalance",
                               "--split", "3,3", "--test-hooks"]) as c:
        add_joined(c)
        add_joined(c)
        st = wait_until(c, lambda s: s["serving"] and len(s["plan"]["stages"]) == 2, TIMEOUT,
                        "a plan for the 2 workers")
        e0, ranges = st["epoch"], [(x["first"], x["last"]) for x in st["plan"]["stages"]]
        kept0 = int(st["sched"]["kv_kept"])
        # both workers run on this machine: they announced one host and
        # intersecting CPU lists, so the depth rule groups them (docs/batching.md)
        why = st["sched"]["depth_why"]
        assert "2 workers (worker0, worker1) share" in why, why
        n, k = 64, 12
        cluster.hold(c, k)
        g = Gen(c, case["prompt_ids"], n)
        g.start()
        cluster.wait_held(c, 1, at=k)
        r = json.loads(c.cli("replan", "--force", "--json").stdout)
        assert r["started"], r
        st = wait_until(c, lambda s: s["epoch"] > e0 and s["serving"], 30, "the forced plan")
        assert [(x["first"], x["last"]) for x in st["plan"]["stages"]] == ranges, st["plan"]
        kept = int(st["sched"]["kv_kept"]) - kept0
        cluster.release(c)
        g.check(golden=case["expected_ids"])
        for w in c.workers:
            log = w.stderr()
            placed = log.count("placed in huge-page memory")
            reused = len(re.findall(r"layers \[\d+, \d+\): kept the resident weights", log))
            assert placed == 1 and reused == 1, \
                "%s: %d loads and %d reuses of its weights over two epochs of the same range:\n%s" \
                % (w.name, placed, reused, log[-3000:])
        assert kept == 1, "%d sessions kept their KV at the switch" % kept
        for w in c.workers:  # the shared weights' last holder frees them (LeakSanitizer)
            rc = w.stop(timeout=60)
            err = w.stderr()
            assert rc == 0, "%s exited with %d: %s" % (w.name, rc, err[-2000:])
            for bad in ("LeakSanitizer", "AddressSanitizer", "runtime error"):
                assert bad not in err, "%s: %s" % (w.name, err[err.index(bad) - 200:][:3000])
        print("keep: epoch %d -> %d, ranges %s kept: each worker placed its weights once and "
              "reused them; the parked session kept its KV; golden and strata run ids"
              % (e0, st["epoch"], ranges))


CASES = {"switch": case_switch, "drain": case_drain, "replicas": case_replicas,
         "keep": case_keep}

if __name__ == "__main__":
    cluster.run_cases(CASES)
