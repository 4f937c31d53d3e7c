#!/usr/bin/env python3
"""shards.py - standalone shard servers and libstrata (issue 18,
docs/shards.md): real `strata-worker --standalone` processes on loopback
(port 0, addresses read from their stdout), driven by `strata run --shards`,
the `shard_poke` tool and examples/chain.c built against the installed
library.

Cases:
- exact: shard [0, k) -> shard [k, L) with the local embedding and head, f32
  packets, on synth-s-f32 and l3-synth-q8_0: the ids equal `strata run`'s,
  greedy and sampled with a seed.
- failover: with a replacement of [k, L) configured, the client pauses
  after N tokens (its --pause-after hold point: nothing races the
  generation), the test SIGKILLs the serving [k, L) server, lets the client
  go on: the ids are still those of `strata run`, and one replay is
  reported. Without a replacement the same kill gives a clear error.
- bad_input: garbage, a wrong dtype, a packet of too many tokens, a step of
  an unknown session past position 0, another model's packet, and a frame
  beyond the receive limit each get their error (the last: the connection
  is dropped, no reply); after each, the server still serves a chain.
- pkgconfig: `meson install --destdir` into a temporary directory, then
  examples/chain.c compiled with `pkg-config --cflags --libs strata` from
  there; it runs against two servers and prints what `strata run --shards`
  prints after the prompt.
- rss: the peak resident memory of `strata run --shards` (the thin client:
  embedding, head and tokenizer) and of `strata run` (the whole model) on a
  TinyLlama-shaped Q8_0 model synthesized for the test; printed, and the
  client must need less than a quarter of the whole model's.

Usage: shards.py BUILD_DIR CASE...   Every process is killed at the end,
also on failure. Prints 'N passed, N failed' as its last line."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import BUILD, STRATA, TIMEOUT, WORKER, Proc, model, parse_ids  # noqa: E402

POKE = os.path.join(BUILD, "tests", "cluster", "shard_poke")
PROMPT = "Once upon a time"
N_GEN = 24
PAUSE_AT = 6
SAMPLED = ["--temp", "0.8", "--seed", "1234"]
GREEDY = ["--temp", "0"]
# (model, layers, split layer k)
MODELS = [("synth-s-f32.gguf", 6, 2), ("l3-synth-q8_0.gguf", 4, 1)]


class Servers:
    """Shard servers of one model; use as a context manager."""

    def __init__(self, model_path, extra=()):
        self.tmp = tempfile.mkdtemp(prefix="strata-shards-%d-" % os.getpid())
        self.model = model_path
        self.extra = list(extra)
        self.procs = []

    def start(self, first, last):
        """A server of [first, last); returns (proc, its address)."""
        p = Proc(self.tmp, "shard%d-%d-%d" % (first, last, len(self.procs)),
                 [WORKER, "--standalone", "--layers", "%d:%d" % (first, last), "--model",
                  self.model, "--threads", "1"] + self.extra)
        self.procs.append(p)
        return p, p.wait_line(r"listening on (tcp://\S+)").group(1)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
            p.p.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


def run(argv, check=True):
    r = subprocess.run([STRATA, "run"] + argv, capture_output=True, text=True, timeout=TIMEOUT)
    if check:
        assert r.returncode == 0, "strata run %s: %s" % (" ".join(argv), r.stderr)
    return r


def local_ids(model_path, sampling):
    return parse_ids(run([model_path, "--prompt", PROMPT, "-n", str(N_GEN), "--ids",
                          "--threads", "1"] + sampling).stdout)


def shard_ids(model_path, addrs, sampling):
    return parse_ids(run([model_path, "--prompt", PROMPT, "-n", str(N_GEN), "--ids",
                          "--threads", "1", "--shards", ",".join(addrs)] + sampling).stdout)


def case_exact():
    for name, n_layer, k in MODELS:
        m = model(name)
        with Servers(m) as s:
            a = s.start(0, k)[1]
            b = s.start(k, n_layer)[1]
            for label, sp in (("greedy", GREEDY), ("sampled", SAMPLED)):
                want = local_ids(m, sp)
                got = shard_ids(m, [a, b], sp)
                assert got == want, "%s %s: shards %s != strata run %s" % (name, label, got, want)
                print("%s: [0,%d) -> [%d,%d) %s: %d ids equal strata run's"
                      % (name, k, k, n_layer, label, len(got)))


def paused_run(model_path, addrs, sampling):
    """`strata run --shards` paused at PAUSE_AT tokens: the Popen, once the
    pause line came (stderr lines before it are returned too)."""
    p = subprocess.Popen([STRATA, "run", model_path, "--prompt", PROMPT, "-n", str(N_GEN),
                          "--ids", "--threads", "1", "--shards", ",".join(addrs),
                          "--pause-after", str(PAUSE_AT)] + sampling,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    seen = []
    for line in p.stderr:
        seen.append(line)
        if line.startswith("paused after %d tokens" % PAUSE_AT):
            return p, seen
    p.wait()
    raise AssertionError("the client did not pause: %s" % "".join(seen))


def case_failover():
    for name, n_layer, k in MODELS:
        m = model(name)
        for label, sp in (("greedy", GREEDY), ("sampled", SAMPLED)):
            want = local_ids(m, sp)
            with Servers(m) as s:
                a = s.start(0, k)[1]
                victim, b = s.start(k, n_layer)
                spare = s.start(k, n_layer)[1]
                p, _ = paused_run(m, [a, b, spare], sp)
                victim.kill(signal.SIGKILL)
                victim.p.wait()
                out, err = p.communicate("\n", timeout=TIMEOUT)
                assert p.returncode == 0, err
                got = parse_ids(out)
                assert got == want, "%s %s: after the kill %s != %s" % (name, label, got, want)
                assert "1 replays" in err, err
                print("%s %s: SIGKILL of [%d,%d) after %d tokens, replacement took over: ids "
                      "equal strata run's" % (name, label, k, n_layer, PAUSE_AT))
    name, n_layer, k = MODELS[0]
    m = model(name)
    with Servers(m) as s:
        a = s.start(0, k)[1]
        victim, b = s.start(k, n_layer)
        p, _ = paused_run(m, [a, b], GREEDY)
        victim.kill(signal.SIGKILL)
        victim.p.wait()
        out, err = p.communicate("\n", timeout=TIMEOUT)
        assert p.returncode != 0, "no replacement, yet it went on: %s" % out
        assert "no replacement is left" in err, err
        print("no replacement: %s" % err.strip().splitlines()[-2])


def poke(addr, case):
    r = subprocess.run([POKE, addr, case], capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, "shard_poke %s: %s" % (case, r.stderr)
    return r.stdout.strip()


def case_bad_input():
    name, n_layer, k = MODELS[0]
    m = model(name)
    want = local_ids(m, GREEDY)
    expect = [("garbage", "reply: error"), ("dtype", "reply: error 11 "),
              ("oversized", "reply: error 8 "), ("unknown", "reply: error 4 "),
              ("wrong-model", "reply: error 16 "), ("huge", "reply: none")]
    with Servers(m, ["--dtypes", "f32", "--max-tokens", "16"]) as s:
        a = s.start(0, k)[1]
        b = s.start(k, n_layer)[1]
        assert poke(b, "ok") == "reply: ok"
        for case, prefix in expect:
            got = poke(b, case)
            assert got.startswith(prefix), "%s: %r, expected %r..." % (case, got, prefix)
            assert shard_ids(m, [a, b], GREEDY) == want, "after %s the chain differs" % case
            print("%s: %s; the server still serves" % (case, got[:110]))
        r = run([m, "--prompt", PROMPT, "-n", "4", "--shards", a + "," + b, "--shard-dtype",
                 "bf16"], check=False)
        assert r.returncode != 0 and "not among those this server accepts" in r.stderr, r.stderr
        print("a client asking bf16 of an f32-only server: %s" % r.stderr.strip().splitlines()[-1])


def case_pkgconfig():
    if shutil.which("pkg-config") is None:
        raise AssertionError("pkg-config is not installed")
    name, n_layer, k = MODELS[0]
    m = model(name)
    dest = tempfile.mkdtemp(prefix="strata-install-")
    try:
        r = subprocess.run(["meson", "install", "-C", BUILD, "--destdir", dest, "--no-rebuild",
                            "--quiet"], capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
        pcs = [os.path.join(d, f) for d, _, fs in os.walk(dest) for f in fs if f == "strata.pc"]
        assert len(pcs) == 1, "strata.pc installed %d times" % len(pcs)
        env = dict(os.environ, PKG_CONFIG_PATH=os.path.dirname(pcs[0]))
        with open(pcs[0]) as f:  # the installed prefix, moved under dest
            prefix = next(x[7:].strip() for x in f if x.startswith("prefix="))
        flags = subprocess.run(["pkg-config", "--define-variable=prefix=" + dest + prefix,
                                "--cflags", "--libs", "strata"],
                               capture_output=True, text=True, env=env, check=True).stdout.split()
        assert any(dest in f for f in flags), "pkg-config did not point into %s: %s" % (dest, flags)
        exe = os.path.join(dest, "chain")
        src = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "chain.c")
        r = subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", src, "-o", exe] + flags,
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        libdir = [f[2:] for f in flags if f.startswith("-L")][0]
        with Servers(m) as s:
            a = s.start(0, k)[1]
            b = s.start(k, n_layer)[1]
            r = subprocess.run([exe, m, PROMPT, a, b], capture_output=True, text=True,
                               timeout=TIMEOUT, env=dict(os.environ, LD_LIBRARY_PATH=libdir))
            assert r.returncode == 0, r.stderr
            ref = run([m, "--prompt", PROMPT, "-n", "32", "--shards", a + "," + b] + GREEDY)
            assert ref.stdout.startswith(PROMPT)
            assert r.stdout == ref.stdout[len(PROMPT):], "%r != %r" % (r.stdout, ref.stdout)
            print("examples/chain.c built with pkg-config from the installed tree (%s): %r"
                  % (" ".join(flags), r.stdout.strip()[:60]))
    finally:
        shutil.rmtree(dest, ignore_errors=True)


def case_rss():
    """A TinyLlama-shaped Q8_0 model (22 layers, 2048 wide, 32,000 ids;
    synthesized here, or STRATA_RSS_MODEL) split over two servers."""
    tmp = tempfile.mkdtemp(prefix="strata-rss-")
    try:
        m = os.environ.get("STRATA_RSS_MODEL")
        if m is None:
            m = os.path.join(tmp, "tinyllama-shaped-q8_0.gguf")
            r = subprocess.run([STRATA, "convert", "synth", m, "--dim", "2048", "--layers", "22",
                                "--heads", "32", "--kv-heads", "4", "--ffn", "5632", "--vocab",
                                "32000", "--type", "q8_0"], capture_output=True, text=True,
                               timeout=600)
            assert r.returncode == 0, r.stderr
        res = {}
        with Servers(m) as s:
            a = s.start(0, 11)[1]
            b = s.start(11, 22)[1]
            for label, extra in (("strata run", []),
                                 ("strata run --shards", ["--shards", a + "," + b])):
                # a helper's ru_maxrss of its children: strata's peak alone
                code = ("import resource,subprocess,sys;"
                        "r=subprocess.run(sys.argv[1:],capture_output=True);"
                        "sys.exit(r.returncode) if r.returncode else "
                        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
                r = subprocess.run([sys.executable, "-c", code, STRATA, "run", m, "--prompt",
                                    PROMPT, "-n", str(N_GEN), "--ids", "--threads", "1"]
                                   + GREEDY + extra, capture_output=True, text=True,
                                   timeout=TIMEOUT * 5)
                assert r.returncode == 0, r.stderr
                res[label] = int(r.stdout.strip()) / 1024.0
        print("%s: peak RSS strata run %.1f MiB, strata run --shards (local embedding and head) "
              "%.1f MiB" % (os.path.basename(m), res["strata run"], res["strata run --shards"]))
        assert res["strata run --shards"] * 4 < res["strata run"], res
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


CASES = {"exact": case_exact, "failover": case_failover, "bad_input": case_bad_input,
         "pkgconfig": case_pkgconfig, "rss": case_rss}

if __name__ == "__main__":
    names = sys.argv[2:] or list(CASES)
    passed = failed = 0
    for n in names:
        try:
            CASES[n]()
            passed += 1
            print("ok: %s" % n)
        except Exception as e:  # report and go on with the next case
            failed += 1
            print("FAIL: %s: %s" % (n, e))
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)
