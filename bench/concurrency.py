#!/usr/bin/env python3
"""concurrency.py - aggregate decode speed of a Strata cluster under many
concurrent sessions (continuous batching, issue 7; see bench/README.md).

Usage: bench/concurrency.py [--model PATH] [--sessions 1,2,4,8,16] [--gen N]
                            [--prompt N] [--configs 1w,2w,pin] [--ctx N]
                            [--wire f16] [--build DIR] [--json FILE]

For each configuration it starts a coordinator and its workers on
loopback, warms them up, then for each session count N runs N concurrent
greedy requests (distinct prompts of --prompt ids, --gen ids each) with
tests/cluster/loadgen and reports
  - aggregate decode tok/s: the ids all sessions received in the window
    where every session was decoding (after the last first id, before the
    first session ended), divided by the window's length;
  - p50 / p99 time per output token: the gaps between consecutive ids of a
    session (coordinator clock), pooled over the sessions;
  - the ratio to the same configuration's 1-session rate.
Configurations:
  1w   one worker, 2 threads
  2w   two workers, 2 threads each (their pools pin to both cores; with 1
       thread each, both pools would pin to core 0)
  engine  the engine's own ceiling: `strata bench run --prompt N --gen 1`
       (2 threads), one forward pass of N tokens, in tok/s: what a batch
       of N rows can give at best (decode rows also need the output head
       each, a prompt pass only for its last token)
  pin  pipeline scaling at 8 sessions: 1 worker with 1 thread pinned to
       core 0 (taskset -c 0) against 2 workers with 1 thread, pinned to
       cores 0 and 1; reported with `strata bench run`'s memory bandwidth
       at 1 thread (core 0) and 2 threads, measured in the same run.
The model defaults to the TinyLlama-shaped Q8_0 synthetic model at
/tmp/tl-q8.gguf, made with `strata convert synth` if it is missing."""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def percentile(v, p):
    v = sorted(v)
    if not v:
        return float("nan")
    k = (len(v) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


class Proc:
    def __init__(self, tmp, name, argv):
        self.out_path = os.path.join(tmp, name + ".out")
        self.err_path = os.path.join(tmp, name + ".err")
        self.p = subprocess.Popen(argv, stdout=open(self.out_path, "w"),
                                  stderr=open(self.err_path, "w"), stdin=subprocess.DEVNULL,
                                  start_new_session=True)
        self.name = name

    def wait_line(self, pattern, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            with open(self.out_path) as f:
                m = re.search(pattern, f.read())
            if m:
                return m
            if self.p.poll() is not None:
                raise RuntimeError("%s exited: %s" % (self.name, open(self.err_path).read()[-2000:]))
            time.sleep(0.05)
        raise RuntimeError("%s did not print %r" % (self.name, pattern))

    def stop(self):
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGTERM)
            try:
                self.p.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait()


class Bench:
    def __init__(self, a):
        self.a = a
        self.b = a.build
        self.strata = os.path.join(self.b, "cli", "strata")
        self.coord_bin = os.path.join(self.b, "coordinator", "strata-coordinator")
        self.worker_bin = os.path.join(self.b, "worker", "strata-worker")
        self.loadgen = os.path.join(self.b, "tests", "cluster", "loadgen")
        self.tmp = tempfile.mkdtemp(prefix="strata-conc-")

    def bench_run(self, threads, cpus, prompt=16, gen=32):
        """`strata bench run`: bandwidth, decode tok/s and prompt tok/s."""
        argv = [self.strata, "bench", "run", self.a.model, "--prompt", str(prompt), "--gen",
                str(gen), "--repeat", "3", "--threads", str(threads)]
        if cpus:
            argv = ["taskset", "-c", cpus] + argv
        r = subprocess.run(argv, capture_output=True, text=True, timeout=900)
        out = r.stdout + r.stderr
        bw = re.search(r"^bandwidth: ([0-9.]+) GB/s", out, re.M)
        dec = re.search(r"^decode: ([0-9.]+) tok/s", out, re.M)
        pr = re.search(r"^prompt: ([0-9.]+) tok/s", out, re.M)
        return (float(bw.group(1)) if bw else float("nan"),
                float(dec.group(1)) if dec else float("nan"),
                float(pr.group(1)) if pr else float("nan"))

    def start(self, workers):
        """workers: list of (threads, cpus or None). Returns the procs and address."""
        n = len(workers)
        procs = []
        c = Proc(self.tmp, "coordinator", [
            self.coord_bin, "--model", self.a.model, "--min-workers", str(n), "--wire",
            self.a.wire, "--ctx", str(self.a.ctx), "--max-sessions", str(max(self.a.sessions)),
            "--heartbeat-ms", "500", "--step-timeout-ms", "120000"])
        procs.append(c)
        addr = c.wait_line(r"listening on (tcp://[0-9.]+:\d+)").group(1)
        for i, (threads, cpus) in enumerate(workers):
            argv = [self.worker_bin, "--coordinator", addr, "--model", self.a.model, "--listen",
                    "tcp://127.0.0.1:0", "--threads", str(threads), "--name", "w%d" % i,
                    "--log", "warn"]
            if cpus is not None:
                argv = ["taskset", "-c", cpus] + argv
            procs.append(Proc(self.tmp, "worker%d" % i, argv))
        deadline = time.time() + 300
        while time.time() < deadline:
            r = subprocess.run([self.strata, "status", "--json", "--coordinator", addr],
                               capture_output=True, text=True)
            if r.returncode == 0 and json.loads(r.stdout).get("serving"):
                return procs, addr
            time.sleep(0.3)
        raise RuntimeError("cluster not serving")

    def run(self, addr, n_sessions, gen=None):
        gen = gen or self.a.gen
        reqs = [{"prompt_ids": [1] + [100 + (k * 131 + j * 17) % 30000
                                      for j in range(self.a.prompt - 1)], "n": gen,
                 "temp": 0} for k in range(n_sessions)]
        r = subprocess.run([self.loadgen, addr, "--timeout-ms", "900000"],
                           input="".join(json.dumps(x) + "\n" for x in reqs),
                           capture_output=True, text=True, timeout=1000)
        res = [json.loads(line) for line in r.stdout.splitlines()]
        bad = [o for o in res if not o["ok"] or len(o["ids"]) != gen]
        if bad or len(res) != n_sessions:
            raise RuntimeError("requests failed: %s" % json.dumps(bad)[:1000])
        first = max(o["times_ns"][0] for o in res)
        last = min(o["times_ns"][-1] for o in res)
        toks = sum(1 for o in res for t in o["times_ns"] if first < t <= last)
        agg = toks / ((last - first) / 1e9) if last > first else float("nan")
        gaps = [(y - x) / 1e6 for o in res for x, y in zip(o["times_ns"], o["times_ns"][1:])]
        return {"sessions": n_sessions, "agg_tok_s": agg, "p50_ms": percentile(gaps, 50),
                "p99_ms": percentile(gaps, 99), "window_s": (last - first) / 1e9,
                "window_tokens": toks}

    def config(self, name, workers, sessions):
        procs, addr = self.start(workers)
        rows = []
        try:
            self.run(addr, 2, gen=8)  # warm-up: page in the weights, first KV
            for n in sessions:
                row = self.run(addr, n)
                row["config"] = name
                rows.append(row)
                print("  %-4s %3d sessions: %7.2f tok/s aggregate, p50 %7.1f ms, p99 %7.1f ms "
                      "per token (window %.1f s)" % (name, n, row["agg_tok_s"], row["p50_ms"],
                                                      row["p99_ms"], row["window_s"]),
                      flush=True)
        finally:
            for p in reversed(procs):
                p.stop()
        return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="/tmp/tl-q8.gguf")
    ap.add_argument("--sessions", default="1,2,4,8,16")
    ap.add_argument("--gen", type=int, default=48)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--configs", default="engine,1w,2w,pin")
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--wire", default="f16")
    ap.add_argument("--build", default=os.environ.get("BUILD_DIR", os.path.join(ROOT, "build")))
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    a.sessions = [int(x) for x in a.sessions.split(",")]
    b = Bench(a)
    if not os.path.exists(a.model):
        print("making %s (about 30 s)" % a.model, flush=True)
        subprocess.run([b.strata, "convert", "synth", a.model, "--dim", "2048", "--layers", "22",
                        "--heads", "32", "--kv-heads", "4", "--ffn", "5632", "--vocab", "32000",
                        "--type", "q8_0", "--seed", "1"], check=True)
    rows = []
    summary = {}
    configs = a.configs.split(",")
    if "engine" in configs:
        print("engine ceiling (one forward pass of N tokens, 2 threads):", flush=True)
        for n in a.sessions:
            bw, dec, pr = b.bench_run(2, None, prompt=n, gen=1)
            rows.append({"config": "engine", "sessions": n, "agg_tok_s": pr,
                         "p50_ms": 1000.0 * n / pr, "p99_ms": float("nan")})
            print("  engine %3d tokens: %7.2f tok/s (%.1f ms per pass)" % (n, pr, 1000.0 * n / pr),
                  flush=True)
    if "1w" in configs:
        print("1 worker, 2 threads:", flush=True)
        rows += b.config("1w", [(2, None)], a.sessions)
    if "2w" in configs:
        print("2 workers, 2 threads each:", flush=True)
        rows += b.config("2w", [(2, None), (2, None)], a.sessions)
    if "pin" in configs:
        print("pipeline scaling, 8 sessions:", flush=True)
        bw1, dec1, _ = b.bench_run(1, "0")
        bw2, dec2, _ = b.bench_run(2, None)
        one = b.config("pin1", [(1, "0")], [8])
        two = b.config("pin2", [(1, "0"), (1, "1")], [8])
        rows += one + two
        summary["pin"] = {"bw_1thread_GBs": bw1, "bw_2threads_GBs": bw2,
                          "strata_run_1thread_tok_s": dec1, "strata_run_2threads_tok_s": dec2,
                          "one_worker_one_core": one[0]["agg_tok_s"],
                          "two_workers_two_cores": two[0]["agg_tok_s"],
                          "ratio": two[0]["agg_tok_s"] / one[0]["agg_tok_s"]}
    print()
    print("| config | sessions | aggregate tok/s | x 1 session | p50 ms/token | p99 ms/token |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        base = [x for x in rows if x["config"] == r["config"] and x["sessions"] == 1]
        ratio = r["agg_tok_s"] / base[0]["agg_tok_s"] if base else float("nan")
        print("| %s | %d | %.2f | %s | %.1f | %.1f |" % (
            r["config"], r["sessions"], r["agg_tok_s"], "%.2f" % ratio if base else "-",
            r["p50_ms"], r["p99_ms"]))
    if "pin" in summary:
        s = summary["pin"]
        print("\npipeline scaling (8 sessions): 1 worker on core 0 %.2f tok/s, 2 workers on cores "
              "0 and 1 %.2f tok/s: %.2fx; memory bandwidth %.1f GB/s (1 thread, core 0), %.1f GB/s "
              "(2 threads); strata run decode %.2f tok/s (1 thread), %.2f tok/s (2 threads)"
              % (s["one_worker_one_core"], s["two_workers_two_cores"], s["ratio"],
                 s["bw_1thread_GBs"], s["bw_2threads_GBs"], s["strata_run_1thread_tok_s"],
                 s["strata_run_2threads_tok_s"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "summary": summary}, f, indent=1)


if __name__ == "__main__":
    main()
