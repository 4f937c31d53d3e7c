#!/usr/bin/env python3
"""stream_ttft.py - time to first token of a cold streaming cluster against
a warm one (issue 19, docs/streaming.md "Figures"): a coordinator and three
workers without model files, each in a network namespace on a bridge, the
coordinator's egress (what the workers fetch) through a tbf link.

Usage (root): bench/stream_ttft.py BUILD [--model PATH] [--link RATE] [--rounds N]

Each round starts the three workers and measures, from their spawn, until
`strata generate -n 1` has returned its id: cold, on empty cache
directories (each worker fetches its header and stage through the link);
then the workers leave (SIGTERM), each cache directory is given the
verified chunks of the other two (so it holds the whole model whichever
stage the next plan gives it: the plan follows join order, which varies),
and warm, the same workers started again on those caches (every chunk
verified in the journal: no byte fetched, which is printed).
Both include the processes' start, the join, the plan, the load and the
first token; the difference is the fetch. Prints each round and the
medians. The coordinator keeps running (its manifest is computed once)."""
import argparse
import glob
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "cluster"))
import cluster  # noqa: E402  (reads BUILD from sys.argv[1])
from cluster import (COORD, STRATA, WORKER, Proc, model, netns_bridge, netns_cleanup,  # noqa: E402
                     parse_ids, sh)

PROMPT = [1, 15043, 29892, 920, 526, 366]
POLL_S = 0.05
DEADLINE_S = 600


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--model", default=model("l3-synth-q8_0.gguf"))
    ap.add_argument("--link", default="100mbit")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("stream_ttft.py: needs root for network namespaces")
    tag = "tt%d" % (os.getpid() % 100000)
    hosts = {"c": "10.233.%d.1", "w1": "10.233.%d.2", "w2": "10.233.%d.3", "w3": "10.233.%d.4"}
    sub = os.getpid() % 250
    made, procs = [], []
    tmp = tempfile.mkdtemp(prefix="strata-ttft-")

    def spawn(name, ns, argv):
        p = Proc(tmp, name, ["ip", "netns", "exec", tag + ns] + argv)
        procs.append(p)
        return p

    try:
        netns_bridge(tag, tag + "br", hosts, sub, made)
        sh("tc", "-n", tag + "c", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", a.link,
           "burst", "64kb", "latency", "200ms")
        key = os.path.join(tmp, "cluster.key")
        sh(STRATA, "keygen", key)
        coord = spawn("coordinator", "c", [
            COORD, "--model", a.model, "--listen", "tcp://%s:0" % (hosts["c"] % sub),
            "--cluster-key", key, "--cache-dir", os.path.join(tmp, "coord"), "--min-workers", "3",
            "--split", "1,1,2", "--heartbeat-ms", "200"])
        addr = coord.wait_line(r"listening on (tcp://[0-9.]+:\d+)").group(1)
        weights = coord.wait_line(r"weights on (tcp://[0-9.]+:\d+)").group(1)

        def in_c(*argv):
            return sh("ip", "netns", "exec", tag + "c", STRATA, *argv, "--coordinator", addr,
                      "--cluster-key", key, check=False)

        def first_token(cache, label):
            """Seconds from the workers' spawn to the first id; the workers."""
            t0 = time.time()
            ws = [spawn("%s-%s" % (label, h), h, [
                WORKER, "--coordinator", addr, "--weights-from", weights, "--cache-dir",
                os.path.join(cache, h), "--listen", "tcp://%s:0" % (hosts[h] % sub),
                "--threads", "1", "--name", h, "--heartbeat-ms", "200", "--cluster-key", key])
                for h in ("w1", "w2", "w3")]
            while True:
                assert time.time() - t0 < DEADLINE_S, "%s: not serving" % label
                r = in_c("status", "--json")
                if r.returncode == 0:
                    st = json.loads(r.stdout)
                    if st.get("serving") and sorted(
                            w["name"] for w in st["workers"] if w["state"] == "serving") == \
                            ["w1", "w2", "w3"]:
                        break
                time.sleep(POLL_S)
            r = in_c("generate", "--prompt-ids", ",".join(map(str, PROMPT)), "-n", "1",
                     "--temp", "0", "--ids")
            dt = time.time() - t0
            assert r.returncode == 0 and len(parse_ids(r.stdout)) == 1, r.stderr
            return dt, ws

        def leave(ws):
            for w in ws:
                w.p.terminate()
            for w in ws:
                w.p.wait(60)
            deadline = time.time() + 60
            while time.time() < deadline:  # the coordinator saw them leave
                r = in_c("status", "--json")
                if r.returncode == 0 and not [w for w in json.loads(r.stdout)["workers"]
                                              if w["state"] in ("serving", "preparing")]:
                    return
                time.sleep(POLL_S)

        def merge(cache):
            """Each worker's cache directory made complete: the verified chunks
            of the three (each holds its own stage's) copied into every one,
            so the warm start fetches nothing whichever stage it gets."""
            chunks = {}  # (model dir, chunk size, index) -> (hash hex, bytes)
            for h in ("w1", "w2", "w3"):
                for mdir in glob.glob(os.path.join(cache, h, "models", "*")):
                    with open(os.path.join(mdir, "model.gguf"), "rb") as f:
                        for line in open(os.path.join(mdir, "journal")):
                            size, idx, hx = line.split()
                            f.seek(int(idx) * int(size))
                            chunks[(os.path.basename(mdir), int(size), int(idx))] = (
                                hx, f.read(int(size)))
            for h in ("w1", "w2", "w3"):
                for (mid, size, idx), (hx, data) in sorted(chunks.items()):
                    mdir = os.path.join(cache, h, "models", mid)
                    with open(os.path.join(mdir, "model.gguf"), "r+b") as f:
                        f.seek(idx * size)
                        f.write(data)
                    with open(os.path.join(mdir, "journal"), "a") as j:
                        j.write("%d %d %s\n" % (size, idx, hx))

        cold, warm = [], []
        for i in range(a.rounds):
            cache = os.path.join(tmp, "cache%d" % i)
            c, ws = first_token(cache, "cold%d" % i)
            fetched = sum(int(m.group(1)) for w in ws for m in re.finditer(
                r"fetch: (?:header|stage) done: \d+ of \d+ bytes \([0-9.]+%\): fetched (\d+)",
                w.stderr()))
            leave(ws)
            merge(cache)
            t, ws = first_token(cache, "warm%d" % i)
            again = sum(int(m.group(1)) for w in ws for m in re.finditer(
                r"fetch: (?:header|stage) done: \d+ of \d+ bytes \([0-9.]+%\): fetched (\d+)",
                w.stderr()))
            leave(ws)
            cold.append(c)
            warm.append(t)
            print("round %d: cold %.2f s (%d bytes fetched through %s), warm %.2f s (%d bytes "
                  "fetched)" % (i + 1, c, fetched, a.link, t, again), flush=True)
        print("time to first token, 3 streaming workers, %s (%d bytes), link %s, medians of %d: "
              "cold %.2f s, warm %.2f s" % (os.path.basename(a.model), os.path.getsize(a.model),
                                            a.link, a.rounds, statistics.median(cold),
                                            statistics.median(warm)))
    finally:
        netns_cleanup(procs, made)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
