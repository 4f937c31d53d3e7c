#!/usr/bin/env python3
"""shards.py - standalone shard servers and libstrata (issue 18,
docs/shards.md): real `strata-worker --standalone` processes on loopback
(port 0, addresses read from their stdout), driven by `strata run --shards`,
the `shard_poke` tool and examples/chain.c built against the installed
library.

Cases:
- exact: shard [0, k) -> shard [k, L) with the local embedding and head, and
  with those of an embedding service (strata-embed --listen), f32 packets,
  on synth-s-f32, l3-synth-q8_0 and w3-gemma3-q8_0 (Gemma 3: a scaled
  embedding, q/k norms, sliding windows): the ids equal `strata run`'s,
  greedy and sampled with a seed.
- moe (issue 36): the mixtures of experts w3-mixtral-q8_0, w3-qwen3moe-q8_0
  and w3-olmoe-f16 as exact's [0, 1) -> [1, 2), and a 3-layer qwen3moe of
  64 experts (8 used) made by `strata convert synth` through three shards
  [0, 1) -> [1, 2) -> [2, 3): the ids equal `strata run`'s, greedy and
  sampled, with local ends and with the embedding service's; the service's
  /v1/embed rows of w3-mixtral-q8_0 equal its Q8_0 token_embd rows.
- failover: with two replacements of [k, L) configured, the client pauses
  after N tokens (its --pause-after hold point: nothing races the
  generation), the test SIGKILLs the serving [k, L) server, lets the client
  go on: the ids are still those of `strata run`, and one replay is
  reported. Without a replacement the same kill gives a clear error.
- sessions: a session evicted (--sessions 1, another client) or expired
  (--ttl-s 1) while its client is paused is replayed: the same ids.
- bad_input: garbage, a wrong dtype, a packet of too many tokens, a step of
  an unknown session past position 0, another model's packet, and a frame
  beyond the receive limit each get their error (the last: the connection
  is dropped, no reply); after each, the server still serves a chain.
  Odd flags: --dtypes with a trailing comma is refused (as the worker's
  --wire-accept); a wildcard --listen (tcp://*:0, and tcp://[::]:0 where
  the host has IPv6) is announced with the loopback host the worker daemon
  announces (127.0.0.1, [::1]) and its bound port, and serves there.
- embed: `strata-embed` on synth-s-f32: /v1/embed rows equal the file's
  token_embd rows bit for bit; GET /v1/embeddings/N has an ETag per model
  and id, is immutable, and answers 304 with no body to If-None-Match; bad
  row URLs 404, a bad body 400, a body over --max-body 413, a hidden state
  of the wrong size 422; /v1/logits gives sorted logprobs;
  tokenize/detokenize. On w3-gemma3-q8_0, /v1/embed rows equal its Q8_0
  token_embd rows times sqrt(n_embd) bit for bit (the hidden states
  entering layer 0).
- embed_url: a row of `strata-embed` has one URL (issue 33), sent as raw
  bytes on a socket: /v1/embeddings/1 is 200 with row 1 of the file; 01,
  00, %31, 1%00, +1, %2B1, 1%20, 0x1, 1/, 1?x, 1?, -1 are 404 for GET and
  HEAD; HEAD on the row is GET's status and headers with no byte of body
  (also 304 on If-None-Match), and adds nothing to the sent bytes; other
  methods 405 with Allow: GET, HEAD.
- embed_keys: `strata-embed --api-key-file`: 401 without a key and with a
  wrong one (WWW-Authenticate: Bearer), 429 with Retry-After past a key's
  rpm=1 while another key is served, /metrics counting exactly those
  answers, rows and refusals; the packet form: /v1/embed with Accept:
  application/x-strata-packet gives the JSON rows bit for bit (f32) and an
  f16 packet on ?dtype=f16; that row as a stage-n_layer packet to
  /v1/logits gives the JSON form's top_k; a corrupted packet is 400 with
  the wire decoder's text; without a key file a non-loopback --http is
  refused.
- pkgconfig: `meson install --destdir` into a temporary directory, then
  examples/chain.c compiled with `pkg-config --cflags --libs strata` from
  there; it runs against two servers and prints what `strata run --shards`
  prints after the prompt.
- rss: the peak resident memory of `strata run` (the whole model), of
  `strata run --shards` with local ends (embedding, head, tokenizer) and
  with an embedding service's (the tokenizer alone) on a TinyLlama-shaped
  Q8_0 model synthesized for the test: printed; local ends must need less
  than a quarter of the whole model's, remote ends less than 64 MiB.

Usage: shards.py BUILD_DIR CASE...   Every process is killed at the end,
also on failure. Prints 'N passed, N failed' as its last line."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402  (reads BUILD from sys.argv[1] like this script)
from cluster import BUILD, STRATA, TIMEOUT, WORKER, Proc, model, parse_ids  # noqa: E402
from stream import tinyllama_shaped  # noqa: E402

POKE = os.path.join(BUILD, "tests", "cluster", "shard_poke")
EMBED = os.path.join(BUILD, "worker", "strata-embed")
PROMPT = "Once upon a time"
N_GEN = 24
PAUSE_AT = 6
SAMPLED = ["--temp", "0.8", "--seed", "1234"]
GREEDY = ["--temp", "0"]
# the thin client's bound when the embedding and head are remote (issue 18)
RSS_THIN_MIB = 64
# (model, layers, split layer k)
# (model, layers, split layer k); w3-gemma3-q8_0 (issue 35): the embedding
# scaled by sqrt(n_embd), q/k norms, sliding windows, two rope bases
MODELS = [("synth-s-f32.gguf", 6, 2), ("l3-synth-q8_0.gguf", 4, 1), ("w3-gemma3-q8_0.gguf", 6, 3)]


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

    def embed(self):
        """An embedding service of the model with --listen; its NNG address."""
        p = Proc(self.tmp, "embed%d" % len(self.procs),
                 [EMBED, "--model", self.model, "--http", "127.0.0.1:0", "--listen",
                  "tcp://127.0.0.1:0", "--threads", "1"])
        self.procs.append(p)
        return p.wait_line(r"listening on (tcp://\S+)").group(1)

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


def shard_ids(model_path, addrs, sampling, embed=None):
    return parse_ids(run([model_path, "--prompt", PROMPT, "-n", str(N_GEN), "--ids",
                          "--threads", "1", "--shards", ",".join(addrs)] + sampling
                         + (["--embed", embed] if embed else [])).stdout)


def exact_chain(m, bounds):
    """Shards [bounds[i], bounds[i + 1]) of the model at m in a chain: its
    ids equal `strata run`'s, greedy and sampled, with local ends and with
    an embedding service's."""
    name = os.path.basename(m)
    with Servers(m) as s:
        addrs = [s.start(f, l)[1] for f, l in zip(bounds, bounds[1:])]
        e = s.embed()
        chain = " -> ".join("[%d,%d)" % x for x in zip(bounds, bounds[1:]))
        for label, sp in (("greedy", GREEDY), ("sampled", SAMPLED)):
            want = local_ids(m, sp)
            got = shard_ids(m, addrs, sp)
            assert got == want, "%s %s: shards %s != strata run %s" % (name, label, got, want)
            got = shard_ids(m, addrs, sp, embed=e)
            assert got == want, "%s %s: with the embedding service %s != strata run %s" % (
                name, label, got, want)
            print("%s: %s %s: %d ids equal strata run's, with local ends and with the embedding "
                  "service's" % (name, chain, label, len(got)))


def case_exact():
    for name, n_layer, k in MODELS:
        exact_chain(model(name), [0, k, n_layer])


def case_moe():
    import json
    for name in ("w3-mixtral-q8_0.gguf", "w3-qwen3moe-q8_0.gguf", "w3-olmoe-f16.gguf"):
        exact_chain(model(name), [0, 1, 2])
    tmp = tempfile.mkdtemp(prefix="strata-shards-moe-")
    try:
        m = os.path.join(tmp, "qwen3moe-64x8.gguf")
        r = subprocess.run([STRATA, "convert", "synth", m, "--arch", "qwen3moe", "--type", "q8_0",
                            "--dim", "128", "--layers", "3", "--heads", "4", "--kv-heads", "2",
                            "--head-dim", "64", "--ffn", "384", "--expert-ffn", "64", "--experts",
                            "64", "--experts-used", "8", "--vocab", "3000"],
                           capture_output=True, text=True, timeout=TIMEOUT)
        assert r.returncode == 0, "convert synth: %s" % r.stderr
        exact_chain(m, [0, 1, 2, 3])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    m = model("w3-mixtral-q8_0.gguf")
    tmp = tempfile.mkdtemp(prefix="strata-embed-")
    p = Proc(tmp, "embed", [EMBED, "--model", m, "--http", "127.0.0.1:0", "--threads", "1"])
    try:
        u = p.wait_line(r"http on (http://\S+)").group(1)
        ids = [0, 5, 17, 2999]
        want = gguf_f32_rows(m, "token_embd.weight", ids)
        st, _, b = http(u + "/v1/embed", json.dumps({"token_ids": ids}).encode())
        assert st == 200, b
        got = [f32(x) for x in json.loads(b)["rows"]]
        assert got == want, "w3-mixtral /v1/embed rows differ from token_embd's"
        print("w3-mixtral-q8_0 /v1/embed: %d rows equal token_embd's (Q8_0) bit for bit"
              % len(got))
    finally:
        p.kill()
        p.p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


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
                spares = [s.start(k, n_layer)[1], s.start(k, n_layer)[1]]
                p, _ = paused_run(m, [a, b] + spares, sp)
                victim.kill(signal.SIGKILL)
                victim.p.wait()
                out, err = p.communicate("\n", timeout=TIMEOUT)
                assert p.returncode == 0, err
                got = parse_ids(out)
                assert got == want, "%s %s: after the kill %s != %s" % (name, label, got, want)
                assert "1 replays" in err, err
                print("%s %s: SIGKILL of [%d,%d) after %d tokens (two replacements), one took "
                      "over: ids equal strata run's" % (name, label, k, n_layer, PAUSE_AT))
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


def case_sessions():
    """Eviction and expiry cost a replay, never the ids: with --sessions 1, a
    client paused mid-generation loses its caches to another client's
    generation; with --ttl-s 1, a client paused for longer than the TTL
    loses them to expiry. Each resumes (replaying its history) with the ids
    of `strata run` and reports one replay."""
    name, n_layer, k = MODELS[0]
    m = model(name)
    want = local_ids(m, SAMPLED)
    with Servers(m, ["--sessions", "1"]) as s:
        addrs = [s.start(0, k)[1], s.start(k, n_layer)[1]]
        p, _ = paused_run(m, addrs, SAMPLED)
        assert shard_ids(m, addrs, GREEDY) == local_ids(m, GREEDY)  # takes the only slot
        out, err = p.communicate("\n", timeout=TIMEOUT)
        assert p.returncode == 0 and parse_ids(out) == want, err
        assert "1 replays" in err, err
        print("--sessions 1: evicted while paused, replayed: ids equal strata run's")
    ttl = 1
    with Servers(m, ["--ttl-s", str(ttl)]) as s:
        addrs = [s.start(0, k)[1], s.start(k, n_layer)[1]]
        p, _ = paused_run(m, addrs, SAMPLED)
        time.sleep(2 * ttl)  # idle past the TTL (a lower bound: nothing races it)
        out, err = p.communicate("\n", timeout=TIMEOUT)
        assert p.returncode == 0 and parse_ids(out) == want, err
        assert "1 replays" in err, err
        print("--ttl-s %d: expired while paused, replayed: ids equal strata run's" % ttl)


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
    r = subprocess.run([WORKER, "--standalone", "--layers", "0:%d" % k, "--model", m, "--dtypes",
                        "f32,"], capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 2 and "'' is not one of f32, bf16, f16, i8" in r.stderr, r.stderr
    print("--dtypes f32,: %s" % r.stderr.strip().splitlines()[-1])
    wild = [("tcp://*:0", r"tcp://127\.0\.0\.1:[1-9][0-9]*")]
    try:
        with socket.socket(socket.AF_INET6) as t:
            t.bind(("::1", 0))
        wild.append(("tcp://[::]:0", r"tcp://\[::1\]:[1-9][0-9]*"))
    except OSError:
        print("no IPv6 on this host: tcp://[::]:0 not tried")
    for listen, pattern in wild:
        with Servers(m, ["--listen", listen, "--insecure"]) as s:
            a = s.start(0, k)[1]
            assert re.fullmatch(pattern, a), "--listen %s announced %s" % (listen, a)
            assert poke(a, "ok") == "reply: ok", a
            print("--listen %s: announced %s, which serves" % (listen, a))


def build_sanitize_flags():
    """-fsanitize=... when BUILD is a sanitizer build (meson's b_sanitize):
    a program linking a sanitized libstrata must load the sanitizer runtime
    first, so it is built with the same option, as any user of such a
    build would; [] otherwise."""
    with open(os.path.join(BUILD, "meson-info", "intro-buildoptions.json")) as f:
        opts = {o["name"]: o["value"] for o in json.load(f)}
    v = opts.get("b_sanitize", "none")
    return [] if v in ("none", "") else ["-fsanitize=" + v]


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
        r = subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", src, "-o", exe] + flags +
                           build_sanitize_flags(), capture_output=True, text=True)
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
    stream.tinyllama_shaped's) split over two servers."""
    m = tinyllama_shaped()
    res = {}
    with Servers(m) as s:
        a = s.start(0, 11)[1]
        b = s.start(11, 22)[1]
        e = s.embed()
        for label, extra in (("strata run", []),
                             ("strata run --shards", ["--shards", a + "," + b]),
                             ("strata run --shards --embed",
                              ["--shards", a + "," + b, "--embed", e])):
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
    print("%s: peak RSS strata run %.1f MiB; strata run --shards: local embedding and head "
          "%.1f MiB, the embedding service's %.1f MiB"
          % (os.path.basename(m), res["strata run"], res["strata run --shards"],
             res["strata run --shards --embed"]))
    assert res["strata run --shards"] * 4 < res["strata run"], res
    assert res["strata run --shards --embed"] < RSS_THIN_MIB, res


# ---- the embedding service

# GGUF value types with a fixed size (bytes), by type number
GGUF_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
GGUF_STRING, GGUF_ARRAY, GGUF_F32 = 8, 9, 0
GGML_F32, GGML_Q8_0 = 0, 8  # tensor types
Q8_0_BLOCK = 32  # values per Q8_0 block: f16 d, then 32 int8 q; x = d * q


def gguf_f32_rows(path, name, ids):
    """The rows ids of the f32 or Q8_0 matrix `name` of a GGUF file as f32
    (Q8_0: d * q per value, as ggml dequantizes; a reader of just what this
    needs: the header, the key/values skipped, the tensor table, the
    alignment)."""
    import struct
    with open(path, "rb") as f:
        data = f.read()
    off = 0

    def take(fmt):
        nonlocal off
        v = struct.unpack_from("<" + fmt, data, off)
        off += struct.calcsize("<" + fmt)
        return v[0] if len(v) == 1 else v

    def string():
        nonlocal off
        n = take("Q")
        off += n
        return data[off - n:off].decode("utf-8", "replace")

    def skip(t):
        nonlocal off
        if t == GGUF_STRING:
            string()
        elif t == GGUF_ARRAY:
            at, n = take("I"), take("Q")
            for _ in range(n):
                skip(at)
        else:
            off += GGUF_FIXED[t]

    assert data[:4] == b"GGUF"
    off = 8
    n_t, n_kv = take("Q"), take("Q")
    align = 32
    for _ in range(n_kv):
        k, t = string(), take("I")
        if k == "general.alignment":
            align = take("I")
        else:
            skip(t)
    info = {}
    for _ in range(n_t):
        nm = string()
        nd = take("I")
        ne = [take("Q") for _ in range(nd)]
        info[nm] = (ne, take("I"), take("Q"))
    base = (off + align - 1) // align * align
    ne, typ, toff = info[name]
    w = ne[0]
    if typ == GGML_F32:
        return [list(struct.unpack_from("<%df" % w, data, base + toff + 4 * w * i)) for i in ids]
    assert typ == GGML_Q8_0 and w % Q8_0_BLOCK == 0, "%s is neither f32 nor q8_0" % name
    bsize = 2 + Q8_0_BLOCK
    rows = []
    for i in ids:
        row = []
        for b in range(w // Q8_0_BLOCK):
            o = base + toff + bsize * (w // Q8_0_BLOCK * i + b)
            d = struct.unpack_from("<e", data, o)[0]
            row += [d * q for q in struct.unpack_from("<%db" % Q8_0_BLOCK, data, o + 2)]
        rows.append(f32(row))  # d * q is exact in a double: one rounding, as in f32
    return rows


def f32(row):
    """JSON numbers read as f32 (the service prints each so that it reads
    back to the same f32, not to the same double)."""
    import struct
    return list(struct.unpack("<%df" % len(row), struct.pack("<%df" % len(row), *row)))


def http(url, body=None, headers=None):
    """(status, headers, body bytes) of a request; errors too."""
    import urllib.error
    import urllib.request
    req = urllib.request.Request(url, data=body, headers=headers or {},
                                 method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def case_embed():
    import json
    m = model("synth-s-f32.gguf")
    tmp = tempfile.mkdtemp(prefix="strata-embed-")
    p = Proc(tmp, "embed", [EMBED, "--model", m, "--http", "127.0.0.1:0", "--threads", "1",
                            "--max-body", "64k"])
    try:
        u = p.wait_line(r"http on (http://\S+)").group(1)
        ids = [0, 5, 17, 255]
        want = gguf_f32_rows(m, "token_embd.weight", ids)
        st, _, b = http(u + "/v1/embed", json.dumps({"token_ids": ids}).encode())
        assert st == 200, b
        rows = json.loads(b)["rows"]
        assert [f32(r) for r in rows] == want, "/v1/embed rows differ from token_embd's"
        print("/v1/embed: %d rows equal token_embd's bit for bit" % len(rows))
        st, h, b = http(u + "/v1/embeddings/17")
        assert st == 200 and f32(json.loads(b)["row"]) == want[2], (st, b[:100])
        etag = h["ETag"]
        assert h["Cache-Control"] == "public, max-age=31536000, immutable", h["Cache-Control"]
        st, h2, b = http(u + "/v1/embeddings/17", headers={"If-None-Match": etag})
        assert st == 304 and b == b"" and h2["ETag"] == etag, (st, b)
        st, _, b = http(u + "/v1/embeddings/17", headers={"If-None-Match": '"other-17"'})
        assert st == 200, st
        st18 = http(u + "/v1/embeddings/18")[1]["ETag"]
        assert st18 != etag, "two ids share an ETag"
        print("GET /v1/embeddings/17: ETag %s, immutable; 304 with no body on If-None-Match"
              % etag)
        bad = [("/v1/embeddings/abc", None, 404), ("/v1/embeddings/-1", None, 404),
               ("/v1/embeddings/99999999", None, 404), ("/v1/embed", b"[1,", 400),
               ("/v1/embed", json.dumps({"token_ids": [1, 1 << 30]}).encode(), 400),
               ("/v1/embed", b"{" + b" " * 70000 + b"}", 413),
               ("/v1/logits", json.dumps({"hidden": [0.5] * 7, "top_k": 3}).encode(), 422),
               ("/v1/nothing", b"{}", 404)]
        for path, body, code in bad:
            st, _, b = http(u + path, body)
            assert st == code, "%s: %d, expected %d: %s" % (path, st, code, b[:200])
            assert "error" in json.loads(b), b
        print("bad ids, sizes and bodies: %s" % ", ".join("%s %d" % (x[0], x[2]) for x in bad))
        hidden = want[1] * 1  # any width-sized vector
        st, _, b = http(u + "/v1/logits",
                        json.dumps({"hidden": hidden, "top_k": 5, "temperature": 1}).encode())
        assert st == 200, b
        top = json.loads(b)["top_k"]
        lp = [t["logprob"] for t in top]
        assert len(top) == 5 and lp == sorted(lp, reverse=True) and lp[0] <= 0, top
        st, _, b = http(u + "/v1/tokenize", json.dumps({"text": PROMPT}).encode())
        toks = json.loads(b)["tokens"]
        st, _, b = http(u + "/v1/detokenize", json.dumps({"tokens": toks}).encode())
        assert st == 200 and PROMPT in json.loads(b)["text"], b
        print("/v1/logits top 5 %s; tokenize/detokenize round trip" % [t["id"] for t in top])
        assert p.p.poll() is None, "the service died"
    finally:
        p.kill()
        p.p.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    embed_scaled_rows()


def embed_scaled_rows():
    """Gemma's embedding (issue 35): w3-gemma3-q8_0's /v1/embed rows are
    the hidden states entering layer 0, the file's Q8_0 rows times
    sqrt(n_embd) (f32, as llama.cpp's ggml_scale), bit for bit."""
    import json
    import math
    m = model("w3-gemma3-q8_0.gguf")
    tmp = tempfile.mkdtemp(prefix="strata-embed-")
    p = Proc(tmp, "embed", [EMBED, "--model", m, "--http", "127.0.0.1:0", "--threads", "1"])
    try:
        u = p.wait_line(r"http on (http://\S+)").group(1)
        ids = [0, 5, 17, 2999]
        rows = gguf_f32_rows(m, "token_embd.weight", ids)
        scale = f32([math.sqrt(len(rows[0]))])[0]  # sqrtf: a double sqrt rounded once more
        want = [f32([x * scale for x in r]) for r in rows]
        st, _, b = http(u + "/v1/embed", json.dumps({"token_ids": ids}).encode())
        assert st == 200, b
        got = [f32(r) for r in json.loads(b)["rows"]]
        assert got == want, "w3-gemma3 /v1/embed rows differ from token_embd's x sqrt(%d)" % (
            len(rows[0]))
        print("w3-gemma3-q8_0 /v1/embed: %d rows equal token_embd's (Q8_0) x sqrt(%d) bit for bit"
              % (len(got), len(rows[0])))
    finally:
        p.kill()
        p.p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


# ---- the one URL of a row (issue 33)

# Spellings of row 1 (and 0) other than its URL, as sent on the wire: a
# leading zero, percent-escapes (of the digit, of NUL, of '+', of a space),
# a sign, hex, a trailing slash, a query (the canonical URL has none: a
# cache keys on it), a negative number.
ROW_OTHER_SPELLINGS = ["01", "00", "%31", "1%00", "+1", "%2B1", "1%20", "0x1", "1/", "1?x", "1?",
                       "-1"]


def raw_http(port, method, target, headers=None):
    """(status, {header: value}, body bytes up to the close) of one request
    whose target is sent byte for byte (no client-side quoting), so that
    the body read is what the server sent, also for HEAD."""
    import socket
    s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    try:
        lines = ["%s %s HTTP/1.1" % (method, target), "Host: 127.0.0.1",
                 "Connection: close"]
        lines += ["%s: %s" % kv for kv in (headers or {}).items()]
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        data = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    finally:
        s.close()
    head, sep, body = data.partition(b"\r\n\r\n")
    assert sep, "no end of headers in %r" % data[:200]
    status_line, *hl = head.decode("latin-1").split("\r\n")
    hdrs = {}
    for line in hl:
        k, _, v = line.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    return int(status_line.split()[1]), hdrs, body


def metric(port, name):
    """(value of the counter name, length of the /metrics body)."""
    st, _, b = raw_http(port, "GET", "/metrics")
    assert st == 200, st
    return int(re.search(r"^%s (\d+)$" % name, b.decode(), re.M).group(1)), len(b)


def case_embed_url():
    m = model("synth-s-f32.gguf")
    tmp = tempfile.mkdtemp(prefix="strata-embed-url-")
    # --http-timeout-s: the server closes the request cut after its line below
    p = Proc(tmp, "embed", [EMBED, "--model", m, "--http", "127.0.0.1:0", "--threads", "1",
                            "--http-timeout-s", "2"])
    try:
        port = int(p.wait_line(r"http on http://[^:]+:(\d+)").group(1))
        want = gguf_f32_rows(m, "token_embd.weight", [0, 1])
        st, g, body = raw_http(port, "GET", "/v1/embeddings/1")
        j = json.loads(body)
        assert st == 200 and j["id"] == 1 and f32(j["row"]) == want[1], (st, body[:100])
        st, _, b0 = raw_http(port, "GET", "/v1/embeddings/0")
        assert st == 200 and f32(json.loads(b0)["row"]) == want[0], (st, b0[:100])
        print("GET /v1/embeddings/1: 200, row 1 of token_embd (%d bytes); /0: 200, row 0"
              % len(body))
        for t in ROW_OTHER_SPELLINGS:
            for method in ("GET", "HEAD"):
                st, h, b = raw_http(port, method, "/v1/embeddings/" + t)
                assert st == 404, "%s /v1/embeddings/%s: %d, expected 404: %r" % (
                    method, t, st, b[:200])
                assert "etag" not in h, (method, t, h)
                if method == "GET":
                    msg = json.loads(b)["error"]["message"]
                    assert "no such row URL" in msg, (t, msg)
                    n404 = len(b)
                else:
                    assert b == b"" and int(h["content-length"]) == n404, (t, h, b)
        print("GET and HEAD 404 (HEAD without a body): %s" % ", ".join(ROW_OTHER_SPELLINGS))
        for t in ("99999999", "12345678901"):
            st, _, b = raw_http(port, "GET", "/v1/embeddings/" + t)
            assert st == 404 and "outside the vocabulary" in json.loads(b)["error"]["message"], (
                t, st, b)
        print("ids past the vocabulary: 404 'the id is outside the vocabulary'")
        rows0, _ = metric(port, "strata_embed_rows_total")
        sent0, mlen = metric(port, "strata_http_sent_bytes_total")
        st, h, b = raw_http(port, "HEAD", "/v1/embeddings/1")
        assert st == 200 and b == b"", (st, b[:100])
        for k in ("content-type", "content-length", "etag", "cache-control"):
            assert h.get(k) == g.get(k), "HEAD %s %r, GET %r" % (k, h.get(k), g.get(k))
        assert int(h["content-length"]) == len(body), h
        sent1, _ = metric(port, "strata_http_sent_bytes_total")
        rows1, _ = metric(port, "strata_embed_rows_total")
        # sent1 counts the first /metrics body and the HEAD's nothing
        assert sent1 - sent0 == mlen, (
            "sent bytes grew by %d, expected %d (the /metrics body; a HEAD sends none)"
            % (sent1 - sent0, mlen))
        assert rows1 - rows0 == 1, "rows grew by %d, expected 1" % (rows1 - rows0)
        print("HEAD /v1/embeddings/1: 200, no body; Content-Type, Content-Length %s, ETag %s, "
              "Cache-Control as GET's; 0 bytes counted sent" % (h["content-length"], h["etag"]))
        st, h, b = raw_http(port, "HEAD", "/v1/embeddings/1", {"If-None-Match": g["etag"]})
        assert st == 304 and b == b"" and h["etag"] == g["etag"], (st, h, b)
        st, h, b = raw_http(port, "HEAD", "/v1/embeddings/01", {"If-None-Match": g["etag"]})
        assert st == 404, st
        print("HEAD with If-None-Match: 304, no body; on /01: 404")
        for method in ("POST", "PUT", "DELETE"):
            st, h, b = raw_http(port, method, "/v1/embeddings/1", {"Content-Length": "0"})
            assert st == 405 and h.get("allow") == "GET, HEAD", (method, st, h)
        st, h, b = raw_http(port, "GET", "/v1/embed")
        assert st == 405 and h.get("allow") == "POST", (st, h)
        print("POST, PUT, DELETE on a row: 405, Allow: GET, HEAD; GET /v1/embed: Allow: POST")
        # two requests on one connection: each is read from its own target
        import socket
        with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as c:
            c.sendall(b"GET /v1/embeddings/1 HTTP/1.1\r\nHost: h\r\n\r\n"
                      b"GET /v1/embeddings/01 HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
            data = b""
            while True:
                b = c.recv(65536)
                if not b:
                    break
                data += b
        # the second status line follows the first body directly
        codes = [int(x) for x in re.findall(rb"HTTP/1\.1 (\d{3}) ", data)]
        assert codes == [200, 404], codes
        # requests that end before they are answered: a request line alone
        # (closed by the server after --http-timeout-s), a malformed header
        # (the request made by the URI callback is freed either way; under
        # ASan the exit's leak check sees it)
        for raw in (b"GET /v1/embeddings/1 HTTP/1.1\r\n",
                    b"GET /v1/embeddings/01 HTTP/1.1\r\nno colon here\r\n\r\n"):
            with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as c:
                c.sendall(raw)
                c.shutdown(socket.SHUT_WR)
                while c.recv(65536):
                    pass
        print("pipelined /1 then /01 on one connection: %s; cut and malformed requests" % codes)
        assert p.p.poll() is None, "the service died"
        rc = p.stop()
        assert rc == 0, "strata-embed exited %s on SIGTERM (under ASan: a leak?)" % rc
    finally:
        p.kill()
        p.p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


# ---- keys, limits, metrics and packets of the embedding service

WIRE_HDR, WIRE_ROW = 128, 16
WIRE_OFF = {"dtype": 12, "stage": 14, "n_rows": 72, "hidden": 76, "n_tokens": 80, "tag": 104}


def crc32c(data, crc=0):
    """CRC-32C (Castagnoli, reflected; docs/wire-format.md section 4)."""
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def packet_f32_rows(pkt):
    """(header fields, rows of f32) of an uncompressed f32 packet."""
    import struct
    f = {k: struct.unpack_from("<H" if k == "stage" else "<B" if k == "dtype" else "<I",
                               pkt, o)[0] for k, o in WIRE_OFF.items() if k != "tag"}
    off = WIRE_HDR + WIRE_ROW * f["n_rows"]
    n = f["n_tokens"] * f["hidden"]
    vals = struct.unpack_from("<%df" % n, pkt, off) if f["dtype"] == 0 else ()
    return f, [list(vals[i * f["hidden"]:(i + 1) * f["hidden"]]) for i in range(f["n_tokens"])]


def packet_reseal(pkt):
    """pkt with its CRC tag recomputed (payload, rows, header with a zero tag)."""
    import struct
    b = bytearray(pkt)
    b[WIRE_OFF["tag"]:WIRE_OFF["tag"] + 16] = bytes(16)
    off = WIRE_HDR + WIRE_ROW * struct.unpack_from("<I", b, WIRE_OFF["n_rows"])[0]
    crc = crc32c(bytes(b[:WIRE_HDR]), crc32c(bytes(b[WIRE_HDR:off]), crc32c(bytes(b[off:]))))
    struct.pack_into("<I", b, WIRE_OFF["tag"], crc)
    return bytes(b)


def case_embed_keys():
    import json
    import struct
    m = model("synth-s-f32.gguf")
    tmp = tempfile.mkdtemp(prefix="strata-embed-keys-")
    r = subprocess.run([EMBED, "--model", m, "--http", "0.0.0.0:0"], capture_output=True,
                       text=True, timeout=TIMEOUT)
    assert r.returncode == 2 and "--api-key-file" in r.stderr, (r.returncode, r.stderr)
    keys = os.path.join(tmp, "keys")
    with open(keys, "w") as f:
        f.write("# embed keys\nsk-embed-aaaaaaaa\nsk-embed-limited rpm=1\n")
    os.chmod(keys, 0o600)
    p = Proc(tmp, "embed", [EMBED, "--model", m, "--http", "127.0.0.1:0", "--threads", "1",
                            "--api-key-file", keys])
    good = {"Authorization": "Bearer sk-embed-aaaaaaaa"}
    try:
        u = p.wait_line(r"http on (http://\S+)").group(1)
        ids = [3, 17, 200]
        body = json.dumps({"token_ids": ids}).encode()
        st, h, b = http(u + "/v1/embed", body)
        assert st == 401 and h["WWW-Authenticate"] == "Bearer", (st, b)
        st, _, b = http(u + "/v1/embed", body, {"Authorization": "Bearer sk-embed-aaaaaaab"})
        assert st == 401 and "error" in json.loads(b), (st, b)
        st, _, b = http(u + "/v1/embed", body, good)
        assert st == 200, (st, b)
        rows = [f32(x) for x in json.loads(b)["rows"]]
        lim = {"Authorization": "Bearer sk-embed-limited"}
        st, _, b = http(u + "/v1/embeddings/5", None, lim)
        assert st == 200, (st, b)
        st, h, b = http(u + "/v1/embeddings/5", None, lim)
        assert st == 429 and int(h["Retry-After"]) >= 1, (st, h, b)
        print("keys: 401 without or with a wrong key, 429 with Retry-After %s past rpm=1"
              % h["Retry-After"])
        # the packet form of /v1/embed
        pk = dict(good, Accept="application/x-strata-packet")
        st, h, pkt = http(u + "/v1/embed", body, pk)
        assert st == 200 and h["Content-Type"] == "application/x-strata-packet", (st, pkt[:200])
        f, prow = packet_f32_rows(pkt)
        assert f["dtype"] == 0 and f["n_tokens"] == len(ids) and f["stage"] == 0, f
        assert prow == rows, "the packet's rows differ from the JSON rows"
        st, _, p16 = http(u + "/v1/embed?dtype=f16", body, pk)
        assert st == 200 and p16[WIRE_OFF["dtype"]] == 2, (st, p16[:200])
        assert len(p16) == WIRE_HDR + WIRE_ROW + 2 * len(ids) * f["hidden"], len(p16)
        for path, hdr in (("/v1/embed?dtype=f64", pk), ("/v1/embed?dtype=f16", good)):
            st, _, b = http(u + path, body, hdr)
            assert st == 400, (path, st, b)
        print("/v1/embed packet: %d rows equal the JSON rows bit for bit; f16 on ?dtype=f16"
              % len(prow))
        # one row as the head's input, as a packet and as JSON
        one = json.dumps({"token_ids": [ids[1]]}).encode()
        st, _, pkt1 = http(u + "/v1/embed", one, pk)
        assert st == 200, st
        n_layer = MODELS[0][1]
        head_pkt = bytearray(pkt1)
        struct.pack_into("<H", head_pkt, WIRE_OFF["stage"], n_layer)
        head_pkt = packet_reseal(head_pkt)
        lj = json.dumps({"hidden": rows[1], "top_k": 4, "temperature": 0.7}).encode()
        st, _, want = http(u + "/v1/logits", lj, good)
        assert st == 200, (st, want)
        ph = dict(good)
        ph["Content-Type"] = "application/x-strata-packet"
        st, _, got = http(u + "/v1/logits?top_k=4&temperature=0.7", head_pkt, ph)
        assert st == 200 and json.loads(got) == json.loads(want), (st, got, want)
        bad = bytearray(head_pkt)
        bad[-1] ^= 1
        st, _, b = http(u + "/v1/logits", bytes(bad), ph)
        assert st == 400 and (b"CRC" in b or b"checksum" in b), (st, b)
        st, _, b = http(u + "/v1/logits", bytes(pkt1), ph)
        assert st == 400 and b"stage" in b, (st, b)
        print("/v1/logits packet: top 4 %s as the JSON form's; bad packets 400: %s"
              % ([t["id"] for t in json.loads(got)["top_k"]], json.loads(b)["error"]["message"]))
        st, h, met = http(u + "/metrics", None, good)
        assert st == 200 and h["Content-Type"].startswith("text/plain"), (st, h)
        met = met.decode()
        want_lines = [
            'strata_http_requests_total{endpoint="/v1/embed",status="401"} 2',
            'strata_http_requests_total{endpoint="/v1/embed",status="200"} 4',
            'strata_http_requests_total{endpoint="/v1/embed",status="400"} 2',
            'strata_http_requests_total{endpoint="/v1/embeddings",status="200"} 1',
            'strata_http_requests_total{endpoint="/v1/embeddings",status="429"} 1',
            'strata_http_requests_total{endpoint="/v1/logits",status="200"} 2',
            'strata_http_requests_total{endpoint="/v1/logits",status="400"} 2',
            "strata_http_auth_failures_total 2",
            "strata_http_rate_limited_total 1",
            "strata_embed_rows_total %d" % (3 * len(ids) + 1 + 1),
            "strata_embed_head_rows_total 2",
        ]
        for line in want_lines:
            assert line + "\n" in met, "missing %r in\n%s" % (line, met)
        sent = int(re.search(r"^strata_http_sent_bytes_total (\d+)$", met, re.M).group(1))
        assert sent >= len(pkt) + len(p16) + len(pkt1), sent
        print("/metrics: requests by endpoint and status, refusals, rows, %d bytes sent" % sent)
        assert p.p.poll() is None, "the service died"
    finally:
        p.kill()
        p.p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


CASES = {"exact": case_exact, "moe": case_moe, "failover": case_failover, "sessions": case_sessions,
         "bad_input": case_bad_input,
         "pkgconfig": case_pkgconfig, "rss": case_rss, "embed": case_embed,
         "embed_url": case_embed_url, "embed_keys": case_embed_keys}

if __name__ == "__main__":
    cluster.run_cases(CASES)
