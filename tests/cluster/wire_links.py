#!/usr/bin/env python3
"""wire_links.py - integration tests of per-boundary wire dtypes (issue 17,
docs/wire-format.md section 6.1): a coordinator with `--wire auto` gives
each boundary its own dtype from the link's measured bandwidth, the
receiving stage's compute time and the dtypes the receiver accepts.

Usage: wire_links.py BUILD_DIR CASE...   (CASE: see CASES at the bottom)
Reuses cluster.py's process helpers; every process is killed at the end,
also on failure. Prints 'N passed, N failed' as its last line.

Cases:
- exact: synth-s-f32 on three workers (--split 2,2,2) on loopback: every
  boundary is f32 (a fast link) without zstd (a loopback link is faster
  than zstd), said with its reason in `strata status --json`; the golden
  cases' greedy ids equal the golden ids and `strata run`'s, with
  bit-identical logits. The boundary w2 -> w3 was planned on an assumed
  link (w3 joined last, the plan followed its join); once measured, its
  live reason says "measured" in the same epoch: no replan.
- accept: two workers, the second started with `--wire-accept bf16`: the
  boundary into it is bf16 in every plan seen, its status lists only bf16,
  it refused no packet (bad_packets 0) and generation works; a
  coordinator with the fixed `--wire f32` refuses such a worker at join.
- mixed: three hosts as network namespaces on a bridge (root only, else
  skipped), the bridge's port to worker w3 limited by tbf to 10 Mbit/s
  while the other links run at veth speed (over 100x faster, so the choice
  is not borderline); --split 2,2,2 puts w1 -> w2 (fast) and w2 -> w3 (slow)
  on the two boundaries: once both are measured, `auto` gives them
  different dtypes (f32 on the fast one, a 16-bit one on the slow one).
  After a generation w2 has sampled what zstd does to its activations
  (every dtype) and reports it; the plan then compresses the slow boundary
  and not the fast one, w2 sends zstd packets that w3 decodes (their
  counters) while w1 sends none, and the greedy ids equal those of the
  same dtypes without zstd (zstd is lossless). The assertions are on the
  choices and on counters, never on a timing.
- i8: the same bed with --allow-i8 and the accuracy gate held by a test
  hold point: pending, the slow boundary is 16-bit; released, the gate
  passes and the slow boundary alone moves to i8 with the gate in its
  reason; the outputs stay within the i8 gate of `strata run`; a restart
  reads the verdict from the cache.
- i8-fail: the gate fails (a test threshold above the model's figure):
  after a forced replan on measured links, no boundary is i8 and the
  reason says the gate failed.
- i8-fixed: --allow-i8 with a fixed --wire is a usage error (exit 2).
- i8-nobin, i8-signal, i8-child, i8-stop, i8-orphan: the gate's child
  process; wire_gate_child.py.
"""


import json
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402  (reads BUILD from sys.argv[1] like this script)
from cluster import (COORD, STRATA, TIMEOUT, WORKER, Cluster, Proc, Skip,  # noqa: E402
                     check_generate_exact, golden_cases, model, netns_bridge, sh)

MODEL = "synth-s-f32.gguf"
# workers look this many times slower (--throttle): a stage's compute time,
# and with it the 10% transfer budget, is then far above what a fast link
# needs for one f32 token (1 KiB), whatever the machine's load
THROTTLE = "4"
# MixedBed: tbf towards w3 at 10 Mbit/s (1.25 MB/s), so that w1's and w2's
# 1 MiB link probes to w3 at the same time still end within the probe
# timeout (3 s, here ~1.7 s); one f16 token (512 B) then takes ~0.8 ms
# there, while veths carry 100s of MB/s (one f32 token, 1 KiB, in 2-5 us).
# The auto rule compares these with 10% of a stage's compute time, which
# moves with the kernels, the sanitizer and the load: MixedBed's workers
# are not throttled (MIXED_THROTTLE), putting the budget near 18 us on a
# quiet release build (the fast link's f32 within it 3-4x) and near 80-180
# us with the reference kernels or ASan under load (the slow link's f16
# 4x and more above 120% of it: out of the hysteresis band, so the slow
# boundary leaves f16 for i8 once the gate passes). With the workers
# throttled x4 and 20 Mbit/s, the reference kernels' budget (375 us) held
# f16 (408 us) within the band and wire-i8 failed.
SLOW_RATE = "10mbit"
MIXED_THROTTLE = "1"
# case mixed's generations: a prompt of 32 ids (one prefill packet of 32 tokens, 16 KiB as
# f16, that zstd shrinks by ~5%; a decode step's 512 B barely compress) and 8 tokens
ZPROMPT = ",".join(str(i) for i in range(1, 33))
GEN_STEPS = 8


def boundaries(st):
    """[(in_dtype, in_why)] of the stages after the first."""
    return [(s["in_dtype"], s["in_why"]) for s in st["plan"]["stages"][1:]]


def zstds(st):
    """[in_zstd] of the stages after the first."""
    return [s["in_zstd"] for s in st["plan"]["stages"][1:]]


def lives(st):
    """[live_why or None] of the stages after the first (--wire auto's latest check)."""
    return [s.get("live_why") for s in st["plan"]["stages"][1:]]


def worker_of(st, name):
    return [w for w in st["workers"] if w["name"] == name][0]


def wait_status(get, pred, what, timeout=TIMEOUT):
    deadline = time.time() + timeout
    st = None
    while time.time() < deadline:
        st = get()
        if st is not None and pred(st):
            return st
        time.sleep(0.2)
    raise AssertionError("%s not seen in %ss: %s\nstatus: %s" % (what, timeout, summary(st),
                                                                   json.dumps(st)[:3000]))


def summary(st):
    """The plan's boundaries and the links of a status, for a failure's message."""
    if not st:
        return "no status"
    out = "epoch %s serving %s" % (st.get("epoch"), st.get("serving"))
    if st.get("plan"):
        out += "; boundaries %s; live %s" % (boundaries(st), lives(st))
    for x in st.get("links", []):
        out += "; %s->%s %.3g MB/s %s" % (x.get("from_name"), x.get("to_name"),
                                         x["bandwidth_bytes_per_s"] / 1e6,
                                         "measured" if x["measured"] else "assumed")
    return out


def case_exact():
    with Cluster(model(MODEL), ["--wire", "auto", "--split", "2,2,2", "--min-workers", "3"]) as c:
        for _ in range(3):
            c.add_worker("--throttle", THROTTLE)
            time.sleep(0.3)  # join order is the split's order
        st = c.wait_serving(3)
        b = boundaries(st)
        epoch = st["epoch"]
        assert [d for d, _ in b] == ["f32", "f32"], b
        assert all(w.startswith("f32: the most precise within budget") for _, w in b), b
        assert "(assumed)" in b[1][1], b  # planned at w3's join: w2 -> w3 not measured yet
        # the measurement updates the reason shown, not the plan (nothing changed)
        st = wait_status(c.status, lambda st: st["epoch"] == epoch and lives(st)[1] is not None
                         and "(measured)" in lives(st)[1], "w2 -> w3's live reason 'measured'")
        assert boundaries(st)[1] == b[1], (boundaries(st), b)  # the plan's own reason stays
        assert "; zstd off: " in lives(st)[1], lives(st)
        for case in golden_cases():
            if case["model"] == MODEL:
                check_generate_exact(c, case, c.tmp)
        st = c.status()
        assert [d for d, _ in boundaries(st)] == ["f32", "f32"], boundaries(st)
        assert zstds(st) == [False, False], zstds(st)
        assert all(worker_of(st, n)["counters"]["zstd_packets_sent"] == 0
                   for n in ("worker0", "worker1")), st["workers"]
        out = c.cli("status").stdout
        assert "; in f32 (f32: " in out, out
        assert "s ago)" in out, out  # the live reason's age
        print("exact: boundaries %s; golden ids and bit-exact logits" % b)
        print("exact: w2 -> w3 now (epoch %d still): %s" % (st["epoch"], lives(st)[1]))


def case_accept():
    with Cluster(model(MODEL), ["--wire", "auto", "--split", "3,3", "--min-workers", "2"]) as c:
        c.add_worker("--throttle", THROTTLE)
        c.wait_joined(1)  # worker0 joins first: stage 0; worker1 receives the boundary
        c.add_worker("--throttle", THROTTLE, "--wire-accept", "bf16")
        st = c.wait_serving(2)
        seen = set()
        deadline = time.time() + 5  # across the links' first measurements and their replans
        n = 0
        while True:
            st = c.status()
            if st.get("plan"):
                seen.add((st["epoch"], boundaries(st)[0][0]))
            r = c.cli("generate", "--prompt-ids", "1,2,3,4", "-n", "8", "--temp", "0", "--ids")
            assert len(cluster.parse_ids(r.stdout)) == 8, r.stdout
            n += 1
            if time.time() > deadline and n >= 3:
                break
        assert {d for _, d in seen} == {"bf16"}, seen
        w = [x for x in st["workers"] if x["name"] == "worker1"][0]
        assert w["wire_dtypes"] == ["bf16"], w["wire_dtypes"]
        assert w["counters"]["bad_packets"] == 0, w["counters"]
        assert "the receiver accepts bf16" in boundaries(st)[0][1], boundaries(st)
        w0 = [x for x in st["workers"] if x["name"] == "worker0"][0]
        assert w0["wire_dtypes"] == ["f32", "f16", "bf16", "i8"], w0["wire_dtypes"]
        print("accept: epochs and boundary dtypes seen %s over %d requests" % (sorted(seen), n))
    # a fixed --wire the worker does not accept: refused at join, by name
    with Cluster(model(MODEL), ["--wire", "f32"]) as c:
        w = c.add_worker("--wire-accept", "bf16")
        deadline = time.time() + TIMEOUT
        while time.time() < deadline and "does not accept the cluster's wire dtype f32" \
                not in w.stderr():
            time.sleep(0.1)
        assert "does not accept the cluster's wire dtype f32" in w.stderr(), w.stderr()[-2000:]
        print("accept: --wire f32 refuses a worker that accepts bf16 only")


class MixedBed:
    """Three hosts as network namespaces on a bridge (root only, else Skip),
    the bridge's port to w3 limited by tbf to SLOW_RATE while the other
    links run at veth speed; a coordinator (with coord_extra) and workers
    w1, w2, w3 (--split 2,2,2, in that order) serving. Use as a context
    manager: every process is killed and every namespace deleted at the end."""

    def __init__(self, coord_extra=()):
        self.coord_extra = list(coord_extra)

    def __enter__(self):
        if os.geteuid() != 0:
            raise Skip("needs root for network namespaces")
        self.tag = tag = "sw%d" % (os.getpid() % 100000)
        sub = os.getpid() % 250
        hosts = {"c": "10.232.%d.1", "w1": "10.232.%d.2", "w2": "10.232.%d.3",
                 "w3": "10.232.%d.4"}
        br = tag + "br"
        self.made, self.procs = [], []
        self.tmp = tempfile.mkdtemp(prefix="strata-wire-%d-" % os.getpid())
        try:
            self._up(tag, sub, hosts, br)
        except BaseException:
            cluster.netns_cleanup(self.procs, self.made)
            raise
        return self

    def __exit__(self, *exc):
        cluster.netns_cleanup(self.procs, self.made)

    def _up(self, tag, sub, hosts, br):
        netns_bridge(tag, br, hosts, sub, self.made)
        # on the bridge's port to w3: what w3 receives is limited (w2 -> w3's
        # probes and packets), nothing on w1 -> w2's path, replies included;
        # the queue (rate x latency) holds a whole 1 MiB probe: tbf delays, not drops
        r = sh("tc", "-n", br, "qdisc", "add", "dev", "pw3", "root", "tbf", "rate",
               SLOW_RATE, "burst", "64kb", "latency", "3s", check=False)
        if r.returncode != 0:
            raise Skip("tbf unavailable: %s" % r.stderr.strip())
        m = model(MODEL)
        self.key = os.path.join(self.tmp, "cluster.key")
        sh(STRATA, "keygen", self.key)
        self.coord = self.spawn("coordinator", "c", [
            COORD, "--model", m, "--listen", "tcp://%s:0" % (hosts["c"] % sub), "--wire", "auto",
            "--split", "2,2,2", "--min-workers", "3", "--heartbeat-ms", "200",
            "--cluster-key", self.key] + self.coord_extra)
        self.addr = self.coord.wait_line(r"listening on (tcp://[0-9.]+:\d+)").group(1)
        for i, w in enumerate(("w1", "w2", "w3")):
            self.spawn(w, w, [WORKER, "--coordinator", self.addr, "--model", m, "--listen",
                              "tcp://%s:0" % (hosts[w] % sub), "--threads", "1", "--name", w,
                              "--heartbeat-ms", "200", "--cluster-key", self.key, "--throttle",
                              MIXED_THROTTLE, "--probe-s", "5"])
            wait_status(self.status, lambda st, k=i + 1: len(st["workers"]) == k,
                        "%s joined" % w)
        st = wait_status(self.status, lambda st: st.get("serving"), "a serving plan")
        names = {w["id"]: w["name"] for w in st["workers"]}
        order = [names[s["worker_ids"][0]] for s in st["plan"]["stages"]]
        assert order == ["w1", "w2", "w3"], order

    def spawn(self, name, ns, argv):
        p = Proc(self.tmp, name, ["ip", "netns", "exec", self.tag + ns] + argv)
        self.procs.append(p)
        return p

    def cli(self, *args, check=True):
        """`strata ARGS` in the coordinator's namespace, with its address and key."""
        return sh("ip", "netns", "exec", self.tag + "c", STRATA, *args, "--coordinator",
                  self.addr, "--cluster-key", self.key, check=check)

    def status(self):
        r = self.cli("status", "--json", check=False)
        return json.loads(r.stdout) if r.returncode == 0 else None


def measured(st):
    """Both boundaries' links (w1 -> w2, w2 -> w3) measured."""
    ls = {(x["from_name"], x["to_name"]) for x in st.get("links", []) if x["measured"]}
    return ("w1", "w2") in ls and ("w2", "w3") in ls


def mixed(st, slow=("f16", "bf16")):
    """Serving on measured links with f32 on the fast boundary and a dtype
    of slow on the slow one, chosen from its measurement."""
    if not (st.get("serving") and measured(st)):
        return False
    b = boundaries(st)
    return b[0][0] == "f32" and b[1][0] in slow and "(measured)" in b[1][1]


def case_mixed():
    with MixedBed() as bed:
        st = wait_status(bed.status, mixed, "f32 on w1 -> w2 and a 16-bit dtype on w2 -> w3", 90)
        b = boundaries(st)
        links = {(x["from_name"], x["to_name"]): x for x in st["links"]}
        fast, slow = links[("w1", "w2")], links[("w2", "w3")]

        def generate():  # one prefill batch of ZPROMPT tokens, then GEN_STEPS - 1 decode steps
            r = bed.cli("generate", "--prompt-ids", ZPROMPT, "-n", str(GEN_STEPS), "--temp", "0",
                        "--ids")
            ids = cluster.parse_ids(r.stdout)
            assert len(ids) == GEN_STEPS, r.stdout
            return ids

        def steps_seen(n):  # every stage worker's heartbeat reports n batches computed
            return lambda st: all(worker_of(st, w)["counters"]["steps"] == n
                                  for w in ("w1", "w2", "w3"))

        assert st["i8_gate"] == "not asked (no --allow-i8)", st["i8_gate"]
        assert all(w.endswith("; i8 gate not asked") for _, w in b), b
        # no worker has sent an activation yet: zstd unknown, off everywhere
        assert zstds(st) == [False, False], zstds(st)
        assert "zstd off: its ratio on" in b[1][1], b
        ids = generate()  # w1 and w2 sample their first packets
        print("mixed: w1->w2 %.1f MB/s: %s" % (fast["bandwidth_bytes_per_s"] / 1e6, b[0][1]))
        print("mixed: w2->w3 %.2f MB/s (tbf %s): %s" % (slow["bandwidth_bytes_per_s"] / 1e6,
                                                      SLOW_RATE, b[1][1]))

        # w2's zstd measurement arrives: the slow boundary is compressed, the fast one not
        def zmixed(st):
            return st.get("serving") and [d for d, _ in boundaries(st)] == [b[0][0], b[1][0]] \
                and zstds(st) == [False, True]
        st = wait_status(bed.status, zmixed, "zstd on w2 -> w3 only", 60)
        zb = boundaries(st)
        assert "zstd on: saves" in zb[1][1], zb
        # w1's measurement may come after the replan w2's caused: the fast boundary's
        # live reason then turns from 'not measured' to the figures, without a replan
        st = wait_status(bed.status, lambda st: zmixed(st) and None not in lives(st)
                         and "zstd off: saves" in lives(st)[0]
                         and "zstd on: saves" in lives(st)[1], "both boundaries' zstd figures", 30)
        zb = list(zip([d for d, _ in boundaries(st)], lives(st)))
        w2z = {z["dtype"]: z for z in worker_of(st, "w2")["zstd"]}
        assert set(w2z) == {"f32", "f16", "bf16", "i8"}, w2z
        r = bed.cli("plan")
        assert " in %s+zstd (" % b[1][0] in r.stdout, r.stdout
        # the first generation's batches all reported (some of its packets may already
        # have been compressed: the plan switched while it ran); then a second one
        st = wait_status(bed.status, steps_seen(GEN_STEPS), "the first generation's steps", 30)
        base = {n: worker_of(st, n)["counters"] for n in ("w1", "w2", "w3")}
        zids = generate()
        assert zids == ids, (zids, ids)  # the same dtypes, losslessly compressed
        st = wait_status(bed.status, steps_seen(2 * GEN_STEPS), "the second generation's steps", 30)
        w1c, w2c, w3c = ({k: v - base[n][k] for k, v in worker_of(st, n)["counters"].items()}
                         for n in ("w1", "w2", "w3"))
        # every packet of the second generation on w2 -> w3 is a zstd frame, none on w1 -> w2
        assert w2c["zstd_packets_sent"] == GEN_STEPS, w2c
        assert w3c["zstd_packets_received"] == GEN_STEPS, w3c
        assert w1c["zstd_packets_sent"] == 0 and w2c["zstd_packets_received"] == 0, (w1c, w2c)
        # the prefill's frame gains more than the decode steps' frame overheads lose
        assert w2c["zstd_wire_bytes_sent"] < w2c["zstd_raw_bytes_sent"], w2c
        assert w3c["bad_packets"] == 0, w3c
        print("mixed: w2 measured %s" % ", ".join(
            "%s ratio %.3f codec %.2f+%.2f ns/B" % (d, z["ratio"], z["compress_ns_per_byte"],
                                                    z["decompress_ns_per_byte"])
            for d, z in sorted(w2z.items())))
        print("mixed: w2->w3 %s" % zb[1][1])
        print("mixed: w1->w2 %s" % zb[0][1])
        print("mixed: 2nd generation: w2 sent %d zstd packets (%d -> %d payload bytes), "
              "w3 decoded %d; ids %s"
              % (w2c["zstd_packets_sent"], w2c["zstd_raw_bytes_sent"],
                 w2c["zstd_wire_bytes_sent"], w3c["zstd_packets_received"], zids))


def golden_case():
    return [c for c in golden_cases() if c["model"] == MODEL][0]


I8_TOP1_MIN = 0.9  # the i8 wire gate: top-1 agreement with f32 (worker/engine/wire_gate.h)


def i8_agreement(bed, tmp):
    """The i8 wire gate's figure for the serving plan: along `strata run`'s
    greedy path of the golden case (teacher-forced), how many of the
    cluster's next ids (one greedy step after prompt + the path so far)
    equal `strata run`'s; (agreeing, steps). Free-running ids diverge for
    good at their first difference, so they are not compared."""
    case = golden_case()
    ref = cluster.run_ids(model(MODEL), case["prompt_ids"], case["n"],
                          os.path.join(tmp, "run.logits"))
    agree = 0
    for k in range(len(ref)):
        ids = case["prompt_ids"] + ref[:k]
        r = bed.cli("generate", "--prompt-ids", ",".join(map(str, ids)), "-n", "1", "--temp",
                    "0", "--ids")
        agree += cluster.parse_ids(r.stdout) == [ref[k]]
    print("i8: teacher-forced along strata run's path: top-1 %d/%d" % (agree, len(ref)))
    return agree, len(ref)


def bench_i8():
    """The i8 top-1 figure `strata bench wire` prints for MODEL on this
    machine's kernels ("98.4%" with avx2 and avx512, "96.9%" with the
    reference ones: the figure depends on the kernels' order of sums), the
    oracle of the coordinator's gate, which runs the same calibration."""
    r = subprocess.run([STRATA, "bench", "wire", model(MODEL), "--wire", "i8", "--threads", "1"],
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, (r.returncode, r.stderr)
    m = re.search(r"^i8 +(\d+\.\d)% ", r.stdout, re.M)
    assert m, r.stdout
    return m.group(1)


def case_i8():
    """--allow-i8 on the mixed links: while the accuracy gate is held
    (--test-i8-gate-hold) it is pending and the slow boundary keeps a 16-bit
    dtype; once released it passes on synth-s-f32 (top1 98.4% with the avx2
    and avx512 kernels, with the figure `strata bench wire` prints), and the
    coordinator plans again: i8 on the slow boundary only, the reason saying
    the gate passed. Through that plan, along `strata run`'s greedy path of
    the golden case, the next ids agree with `strata run`'s within the i8
    gate (top-1 >= 90%). A restart on the same cache reads the verdict from
    it."""
    pct = bench_i8()
    assert float(pct) >= 90.0, pct  # synth-s-f32 passes the i8 gate
    tmp = tempfile.mkdtemp(prefix="strata-i8-%d-" % os.getpid())
    cache, hold = os.path.join(tmp, "cache"), os.path.join(tmp, "release-the-gate")
    args = ["--allow-i8", "--cache-dir", cache, "--test-hooks", "--test-i8-gate-hold", hold,
            "--log", "info"]
    with MixedBed(args) as bed:
        st = wait_status(bed.status, lambda st: mixed(st) and "i8 gate pending" in
                         boundaries(st)[1][1], "a 16-bit slow boundary while the gate is pending",
                         90)
        assert st["i8_gate"].startswith("pending"), st["i8_gate"]
        epoch = st["epoch"]
        print("i8: gate pending, epoch %d: %s" % (epoch, boundaries(st)))
        with open(hold, "w"):
            pass  # the hold point: the gate may start now

        def moved(st):
            return st["i8_gate"].startswith("passed") and mixed(st, slow=("i8",))

        st = wait_status(bed.status, moved, "i8 on the slow boundary after the gate passed", 90)
        b = boundaries(st)
        assert st["epoch"] != epoch, st["epoch"]
        assert b[0][0] == "f32", b
        assert b[1][1].startswith("i8: ") and b[1][1].endswith(
            "; i8 gate passed (top1 %s%% >= 90%%)" % pct), (b[1][1], pct)
        steps = re.search(r"top1 %s%% >= 90%% \((\d+)/64 steps\)" % re.escape(pct),
                          st["i8_gate"])
        assert steps and "%.1f" % (100.0 * int(steps.group(1)) / 64) == pct, (st["i8_gate"], pct)
        agree, n = i8_agreement(bed, tmp)
        assert agree >= I8_TOP1_MIN * n, "i8 on one boundary: top-1 %d/%d" % (agree, n)
        err = bed.coord.stderr()
        assert re.search(r"i8 accuracy gate passed: top1 %s%% >= 90%% .*computed in [0-9.e+-]+ s"
                         % re.escape(pct), err), err[-3000:]
        print("i8: epoch %d after the gate passed: %s" % (st["epoch"], b))
        print("i8: %s" % st["i8_gate"])
    # a restart on the same model file and cache: the verdict from the cache
    with Cluster(model(MODEL), ["--allow-i8", "--cache-dir", cache]) as c:
        st = c.status()
        assert st["i8_gate"].startswith("passed: top1 %s%%" % pct) and \
            st["i8_gate"].endswith("from the cache"), st["i8_gate"]
        print("i8: restarted: %s" % st["i8_gate"])


def case_i8_fail():
    """The gate fails (a test threshold of 99.5% against synth-s-f32's
    98.4%, the figure of `strata bench wire`): i8 is never chosen; after a
    forced replan on measured links the slow boundary has a 16-bit dtype and
    its reason says the gate failed."""
    pct = bench_i8()
    assert float(pct) < 99.5, pct  # the test threshold is above the figure
    tmp = tempfile.mkdtemp(prefix="strata-i8-%d-" % os.getpid())
    args = ["--allow-i8", "--cache-dir", os.path.join(tmp, "cache"), "--test-hooks",
            "--test-i8-gate-top1", "99.5"]
    with MixedBed(args) as bed:
        st = wait_status(bed.status, lambda st: st["i8_gate"].startswith("failed") and
                         mixed(st), "the gate failed and the links measured", 90)
        assert "top1 %s%% < 99.5%%" % pct in st["i8_gate"], (st["i8_gate"], pct)
        r = bed.cli("replan", "--force", "--json")
        assert json.loads(r.stdout)["started"], r.stdout
        new = json.loads(r.stdout)["epoch"]
        st = wait_status(bed.status, lambda st: st["epoch"] == new and mixed(st),
                         "the forced plan serving", 90)
        b = boundaries(st)
        assert b[1][1].endswith("; i8 gate failed (top1 %s%% < 99.5%%)" % pct), (b[1][1], pct)
        assert "i8" not in [d for d, _ in b], b
        print("i8-fail: %s; epoch %d: %s" % (st["i8_gate"], st["epoch"], b))


def case_i8_fixed():
    """--allow-i8 goes with --wire auto only: with a fixed --wire it is a
    usage error naming both."""
    r = subprocess.run([COORD, "--model", model(MODEL), "--wire", "f16", "--allow-i8"],
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "--allow-i8 goes with --wire auto" in r.stderr and "--wire f16" in r.stderr, r.stderr
    r = subprocess.run([COORD, "--model", model(MODEL), "--test-i8-gate-top1", "50"],
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 2 and "need --test-hooks" in r.stderr, (r.returncode, r.stderr)
    print("i8-fixed: %s" % r.stderr.strip())


# ---- the gate's child process (coordinator/cluster/i8gate_child.h) ----

CASES = {"exact": case_exact, "accept": case_accept, "mixed": case_mixed, "i8": case_i8,
         "i8-fail": case_i8_fail, "i8-fixed": case_i8_fixed}

if __name__ == "__main__":
    cluster.run_cases(CASES)
