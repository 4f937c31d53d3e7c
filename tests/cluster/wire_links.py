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
  skipped), the bridge's port to worker w3 limited by tbf to 20 Mbit/s
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
"""

import json
import os
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
# tbf towards w3 in case mixed: 2.5 MB/s, so that w1's and w2's 1 MiB link
# probes to w3 at the same time still end within the probe timeout (3 s);
# one f32 token (1 KiB) then takes ~400 us there, against a throttled
# stage compute near 0.7 ms (a 10% budget near 70 us), while veths carry
# 100s of MB/s to GB/s (one f32 token in a few us): ~6x and ~10x margins
SLOW_RATE = "20mbit"
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
        time.sleep(0.3)
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


def case_mixed():
    if os.geteuid() != 0:
        raise Skip("needs root for network namespaces")
    tag = "sw%d" % (os.getpid() % 100000)
    sub = os.getpid() % 250
    hosts = {"c": "10.232.%d.1", "w1": "10.232.%d.2", "w2": "10.232.%d.3", "w3": "10.232.%d.4"}
    br = tag + "br"
    made, procs = [], []
    tmp = tempfile.mkdtemp(prefix="strata-wire-%d-" % os.getpid())
    try:
        netns_bridge(tag, br, hosts, sub, made)
        # on the bridge's port to w3: what w3 receives is limited (w2 -> w3's
        # probes and packets), nothing on w1 -> w2's path, replies included;
        # the queue (rate x latency) holds a whole 1 MiB probe: tbf delays, not drops
        r = sh("tc", "-n", br, "qdisc", "add", "dev", "pw3", "root", "tbf", "rate",
               SLOW_RATE, "burst", "64kb", "latency", "3s", check=False)
        if r.returncode != 0:
            raise Skip("tbf unavailable: %s" % r.stderr.strip())

        def spawn(name, ns, argv):
            p = Proc(tmp, name, ["ip", "netns", "exec", tag + ns] + argv)
            procs.append(p)
            return p

        m = model(MODEL)
        key = os.path.join(tmp, "cluster.key")
        sh(STRATA, "keygen", key)
        coord = spawn("coordinator", "c", [COORD, "--model", m, "--listen",
                                          "tcp://%s:0" % (hosts["c"] % sub), "--wire", "auto",
                                          "--split", "2,2,2", "--min-workers", "3",
                                          "--heartbeat-ms", "200", "--cluster-key", key])
        addr = coord.wait_line(r"listening on (tcp://[0-9.]+:\d+)").group(1)

        def status():
            r = sh("ip", "netns", "exec", tag + "c", STRATA, "status", "--json", "--coordinator",
                   addr, "--cluster-key", key, check=False)
            return json.loads(r.stdout) if r.returncode == 0 else None

        for i, w in enumerate(("w1", "w2", "w3")):
            spawn(w, w, [WORKER, "--coordinator", addr, "--model", m, "--listen",
                         "tcp://%s:0" % (hosts[w] % sub), "--threads", "1", "--name", w,
                         "--heartbeat-ms", "200", "--cluster-key", key, "--throttle", THROTTLE,
                         "--probe-s", "5"])
            wait_status(status, lambda st, k=i + 1: len(st["workers"]) == k, "%s joined" % w)
        st = wait_status(status, lambda st: st.get("serving"), "a serving plan")
        names = {w["id"]: w["name"] for w in st["workers"]}
        order = [names[s["worker_ids"][0]] for s in st["plan"]["stages"]]
        assert order == ["w1", "w2", "w3"], order

        def measured(st):
            ls = {(x["from_name"], x["to_name"]) for x in st.get("links", []) if x["measured"]}
            return ("w1", "w2") in ls and ("w2", "w3") in ls

        def mixed(st):
            if not (st.get("serving") and measured(st)):
                return False
            b = boundaries(st)
            return b[0][0] == "f32" and b[1][0] in ("f16", "bf16") and "(measured)" in b[1][1]

        st = wait_status(status, mixed, "f32 on w1 -> w2 and a 16-bit dtype on w2 -> w3", 90)
        b = boundaries(st)
        links = {(x["from_name"], x["to_name"]): x for x in st["links"]}
        fast, slow = links[("w1", "w2")], links[("w2", "w3")]

        def generate():  # one prefill batch of ZPROMPT tokens, then GEN_STEPS - 1 decode steps
            r = sh("ip", "netns", "exec", tag + "c", STRATA, "generate", "--coordinator", addr,
                   "--cluster-key", key, "--prompt-ids", ZPROMPT, "-n", str(GEN_STEPS),
                   "--temp", "0", "--ids")
            ids = cluster.parse_ids(r.stdout)
            assert len(ids) == GEN_STEPS, r.stdout
            return ids

        def steps_seen(n):  # every stage worker's heartbeat reports n batches computed
            return lambda st: all(worker_of(st, w)["counters"]["steps"] == n
                                  for w in ("w1", "w2", "w3"))

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
        st = wait_status(status, zmixed, "zstd on w2 -> w3 only", 60)
        zb = boundaries(st)
        assert "zstd on: saves" in zb[1][1], zb
        # w1's measurement may come after the replan w2's caused: the fast boundary's
        # live reason then turns from 'not measured' to the figures, without a replan
        st = wait_status(status, lambda st: zmixed(st) and None not in lives(st)
                         and "zstd off: saves" in lives(st)[0]
                         and "zstd on: saves" in lives(st)[1], "both boundaries' zstd figures", 30)
        zb = list(zip([d for d, _ in boundaries(st)], lives(st)))
        w2z = {z["dtype"]: z for z in worker_of(st, "w2")["zstd"]}
        assert set(w2z) == {"f32", "f16", "bf16", "i8"}, w2z
        r = sh("ip", "netns", "exec", tag + "c", STRATA, "plan", "--coordinator", addr,
               "--cluster-key", key)
        assert " in %s+zstd (" % b[1][0] in r.stdout, r.stdout
        # the first generation's batches all reported (some of its packets may already
        # have been compressed: the plan switched while it ran); then a second one
        st = wait_status(status, steps_seen(GEN_STEPS), "the first generation's steps", 30)
        base = {n: worker_of(st, n)["counters"] for n in ("w1", "w2", "w3")}
        zids = generate()
        assert zids == ids, (zids, ids)  # the same dtypes, losslessly compressed
        st = wait_status(status, steps_seen(2 * GEN_STEPS), "the second generation's steps", 30)
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
    finally:
        cluster.netns_cleanup(procs, made)


CASES = {"exact": case_exact, "accept": case_accept, "mixed": case_mixed}

if __name__ == "__main__":
    cluster.run_cases(CASES)
