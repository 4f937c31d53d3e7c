#!/usr/bin/env python3
"""Weight streaming (issue 19, docs/streaming.md): workers started without a
model file fetch their stages' chunks from the coordinator's weights server.

Cases (each its own meson test, `stream-<case>`):
  basic    two workers without model files serve with ids equal to
           `strata run`; every byte a worker needs is fetched once
  resume   a worker paused by the test hook after N chunks of its stage
           shows the fetch in `strata status`, is SIGKILLed, restarts on
           the same cache and fetches only the rest (bytes fetched twice: 0)
  corrupt  a chunk the coordinator sends corrupted (test hook) is detected,
           counted, dropped and fetched again; ids equal `strata run`
  peer     worker B fetches from worker A's chunk server (--serve-chunks over
           its model file) while the coordinator's weights server refuses
           every chunk (test hook); ids equal `strata run`
  peerbad  a second source that corrupts every chunk (test hook) is dropped
           after two bad chunks; the fetch completes from the coordinator
  peerlist worker B, without --weights-from naming A, fetches its stage from
           worker A's chunk server because the coordinator's Prepare names
           it (Prepare.chunk_sources) while the coordinator's weights server
           refuses every chunk after the header's; ids equal `strata run`
  silent   a source that accepts requests and never answers (inject silent),
           listed first in --weights-from: it is asked at most the number of
           times the set-aside rule allows for the requests the fetch made
           (docs/streaming.md, "Sources that do not answer"; 1 or 2 here,
           where each request used to try it: one timeout per chunk), the
           timeouts are counted in the log and `strata status`, and the
           fetch completes from the coordinator with ids equal to `strata run`
  startstop a worker whose only source never answers gets SIGTERM during
           its start-up header fetch (a request waits 30 s, the fetch 120 s):
           it exits 0 at once, saying so, and the source got one request
  back     worker A's chunk server is stopped (SIGSTOP) while worker B asks it
           for the manifest: a timeout, A set aside; B takes the manifest and
           header from the coordinator, A is continued, and the coordinator
           refuses every stage chunk: A, still aside (16 requests not yet
           sent), is asked since the other source failed the chunk, answers,
           is used again and serves the whole stage; ids equal `strata run`
  netns    three workers without model files, each in a network namespace,
           fetch from a coordinator whose egress is a 100 Mbit/s tbf link:
           ids equal `strata run`; the fetch rates against the link's are
           printed for the note, never asserted
  moe      two workers without model files fetch the stages of a mixture of
           experts (w3-mixtral-q8_0: 2 layers of 8 experts, in chunks of 64 KiB):
           each needs less than the file, no chunk is fetched twice or bad,
           and the ids equal `strata run`
  rss      a worker fetching a ~1.2 GB stage (a synthesized TinyLlama-shaped
           Q8_0 model, or STRATA_RSS_MODEL): its peak RSS (VmHWM) is printed
           beside a --model worker's of the same stage and bounded by it plus
           8 chunks (the fetch holds about two)

Nothing depends on speed: the pause is a hook at a chunk count, and every
wait is for a state with a generous deadline."""
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402
from cluster import (COORD, INJECT, STRATA, Cluster, Proc, Skip, TIMEOUT, WORKER, model,  # noqa: E402
                     netns_bridge, netns_cleanup, parse_ids, run_ids, sh)

MODEL = model("l3-synth-q8_0.gguf")
CHUNK = 1 << 20  # small chunks: a stage is many of them
PROMPT = [1, 15043, 29892, 920, 526, 366]
N_GEN = 12
DONE = re.compile(r"fetch: stage done: (\d+) of (\d+) bytes \([0-9.]+%\): fetched (\d+), "
                  r"cached (\d+), [0-9.]+ MB/s, ETA [-0-9.]+ s, bad chunks (\d+), "
                  r"bytes fetched twice (\d+)")
HEADER_DONE = re.compile(r"fetch: header done: (\d+) of (\d+) bytes \([0-9.]+%\): fetched (\d+), "
                         r"cached (\d+), [0-9.]+ MB/s, ETA [-0-9.]+ s, bad chunks (\d+),")
NOW = re.compile(r"fetch: stage now: (\d+) of (\d+) bytes \([0-9.]+%\): fetched (\d+), "
                 r"cached (\d+),")


def start(extra_coord=(), min_workers=1, model_path=MODEL, chunk=CHUNK):
    """A coordinator serving weights in chunks of CHUNK, its manifest cache
    in a directory of its own."""
    tmp = tempfile.mkdtemp(prefix="strata-stream-")
    c = Cluster(model_path, ["--weights-chunk", str(chunk), "--cache-dir", os.path.join(tmp, "coord"),
                             "--min-workers", str(min_workers)] + list(extra_coord))
    c.weights = c.coord.wait_line(r"weights on (tcp://[0-9.]+:\d+)").group(1)
    return c


def add_streaming(c, cache, *extra, name=None):
    """A worker without --model, fetching from the coordinator into cache."""
    name = name or "sworker%d" % len(c.workers)
    args = [WORKER, "--coordinator", c.addr, "--weights-from", c.weights, "--cache-dir", cache,
            "--threads", "1", "--name", name, "--heartbeat-ms", "200",
            "--listen", "tcp://127.0.0.1:0"] + list(extra)
    w = c.spawn(name, args)
    w.data_addr = w.wait_line(r"listening on (tcp://[0-9.]+:\d+)").group(1)
    c.workers.append(w)
    return w


def wait_log(w, regex, timeout=TIMEOUT):
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = regex.search(w.stderr())
        if m:
            return m
        time.sleep(0.1)
    raise AssertionError("%s: no line matching %s in %ss:\n%s" % (w.name, regex.pattern, timeout,
                                                                   w.stderr()[-3000:]))


def check_ids(c, model_path=MODEL, prompt=PROMPT):
    r = c.cli("generate", "--prompt-ids", ",".join(map(str, prompt)), "-n", str(N_GEN),
              "--temp", "0", "--ids")
    got = parse_ids(r.stdout)
    ref = run_ids(model_path, prompt, N_GEN, os.path.join(c.tmp, "run.logits"))
    assert got == ref, "cluster ids %s != strata run %s" % (got, ref)
    return got


def stage_done(w):
    """(have, need, fetched, cached, bad, twice) of the worker's stage fetch."""
    return tuple(int(x) for x in wait_log(w, DONE).groups())


def reported_done(c, name, need=None):
    """The worker's fetch as the status reports it once a heartbeat sent
    after its stage fetch ended has arrived (the state may turn serving
    before that heartbeat: no snapshot races it). need: the stage fetch's
    byte count (stage_done's): a worker whose header fetch ended before its
    stage's began reports that ended header fetch meanwhile, which is not
    the one asked for."""
    deadline = time.time() + TIMEOUT
    while True:
        s = [x for x in c.status()["workers"] if x["name"] == name][0]
        f = s.get("fetch")
        if (f is not None and not f["active"] and (need is None or f["need_bytes"] == need)) \
                or time.time() > deadline:
            return s
        time.sleep(0.1)


def case_basic():
    with start(["--split", "2,2"], min_workers=2) as c:
        ws = [add_streaming(c, os.path.join(c.tmp, "cache%d" % i)) for i in range(2)]
        st = c.wait_serving(2)
        size = os.path.getsize(MODEL)
        needs = {}
        for w in ws:
            have, need, fetched, cached, bad, twice = stage_done(w)
            needs[w.name] = need
            assert have == need and need <= size, (w.name, have, need, size)
            assert fetched + cached == need and bad == 0 and twice == 0, stage_done(w)
            print("basic: %s needed %d of %d bytes: fetched %d, from its cache %d"
                  % (w.name, need, size, fetched, cached))
        for s in (reported_done(c, x["name"], needs.get(x["name"])) for x in st["workers"]):
            f = s.get("fetch")
            assert f is not None and not f["active"] and f["have_bytes"] == f["need_bytes"], s
        ids = check_ids(c)
        print("basic: 2 streaming workers serve; ids equal strata run: %s" % ids)


MOE_MODEL = model("w3-mixtral-q8_0.gguf")
MOE_CHUNK = 64 << 10  # the smallest chunk: a stage of this 2.7 MB model is many of them
MOE_PROMPT = [1, 17, 291, 1400, 2999, 5]  # within its vocabulary of 3000


def case_moe():
    with start(["--split", "1,1"], min_workers=2, model_path=MOE_MODEL, chunk=MOE_CHUNK) as c:
        ws = [add_streaming(c, os.path.join(c.tmp, "cache%d" % i)) for i in range(2)]
        c.wait_serving(2)
        size = os.path.getsize(MOE_MODEL)
        for w in ws:
            have, need, fetched, cached, bad, twice = stage_done(w)
            assert have == need and need < size, (w.name, have, need, size)
            assert fetched + cached == need and bad == 0 and twice == 0, stage_done(w)
            print("moe: %s needed %d of %d bytes: fetched %d, from its cache %d (the header's "
                  "chunks)" % (w.name, need, size, fetched, cached))
        ids = check_ids(c, MOE_MODEL, MOE_PROMPT)
        print("moe: 2 streaming workers serve a mixture of experts; ids equal strata run: %s"
              % ids)


def bad_journal_lines(cache):
    """Appends to the killed worker's journal the lines a restart must skip:
    another chunk size, a wrong hash, an index past the manifest, garbage,
    and last a torn line (no newline) naming an unfetched chunk with its
    right hash: none of them may count as cached."""
    journals = [os.path.join(d, "journal") for d, _, fs in os.walk(cache) if "journal" in fs]
    assert len(journals) == 1, journals
    with open(journals[0]) as f:
        rows = [line.split() for line in f.read().splitlines()]
    have = {int(r[1]) for r in rows}
    cs, h0 = int(rows[0][0]), rows[0][2]
    todo = min(set(range(os.path.getsize(MODEL) // cs)) - have)
    with open(MODEL, "rb") as f:
        f.seek(todo * cs)
        right = hashlib.blake2b(f.read(cs), digest_size=32).hexdigest()
    with open(journals[0], "a") as f:
        f.write("%d %d %s\n" % (cs * 2, todo, right))    # another chunk size
        f.write("%d %d %s\n" % (cs, todo, h0))           # a wrong hash
        f.write("%d %d %s\n" % (cs, 1 << 40, right))     # past the manifest
        f.write("not a journal line\n")
        f.write("%d %d %s" % (cs, todo, right))           # torn: no newline


def case_resume():
    pause = 4
    with start() as c:
        cache = os.path.join(c.tmp, "cache")
        w = add_streaming(c, cache, "--test-hooks", "--test-fetch-pause-after", str(pause))
        wait_log(w, re.compile(r"test hook: paused after %d fetched chunks" % pause))
        have1, need1, fetched1, cached1 = (int(x) for x in wait_log(w, NOW).groups())
        assert fetched1 == pause * CHUNK and have1 < need1, (have1, need1, fetched1)
        # (d) the fetch is visible in `strata status` while it is paused
        deadline = time.time() + TIMEOUT
        f = None
        while time.time() < deadline:
            ws = [x for x in c.status()["workers"] if x["name"] == w.name]
            f = ws[0].get("fetch") if ws else None
            if f is not None and f["active"] and f["have_bytes"] == have1:
                break
            time.sleep(0.1)
        assert f is not None and f["active"] and f["have_bytes"] == have1 and \
            f["need_bytes"] == need1 and f["fetched_bytes"] == fetched1, f
        text = c.cli("status").stdout
        assert re.search(r"fetching: .* \([0-9.]+%\)", text), text
        print("resume: status while paused: %.1f%% (%d of %d bytes), fetched %d"
              % (f["percent"], f["have_bytes"], f["need_bytes"], f["fetched_bytes"]))
        # (b) SIGKILL during the fetch, restart on the same cache
        w.kill(signal.SIGKILL)
        w.p.wait(10)
        c.workers.remove(w)
        bad_journal_lines(cache)
        w2 = add_streaming(c, cache, name="again")
        c.wait_serving(1)
        have2, need2, fetched2, cached2, bad2, twice2 = stage_done(w2)
        assert need2 == need1 and have2 == need2, (need1, need2, have2)
        assert cached2 == have1, "the restart found %d bytes cached; %d were verified" % (
            cached2, have1)
        refetched = (fetched1 + cached1 + fetched2) - need1
        assert refetched == 0 and twice2 == 0, (fetched1, cached1, fetched2, need1)
        check_ids(c)
        print("resume: killed after %d bytes fetched; the restart took %d from the cache and "
              "fetched %d; bytes fetched twice: %d" % (fetched1, cached2, fetched2, refetched))


def case_corrupt():
    size = os.path.getsize(MODEL)
    k = (size - 1) // CHUNK  # the last chunk: the head's, which the one stage needs
    with start(["--test-hooks", "--test-corrupt-chunk", str(k)]) as c:
        w = add_streaming(c, os.path.join(c.tmp, "cache"))
        c.wait_serving(1)
        have, need, fetched, cached, bad, twice = stage_done(w)
        assert bad == 1 and have == need and fetched + cached == need, stage_done(w)
        log = w.stderr()
        assert re.search(r"sent a bad chunk \(dropped, fetched again\): chunk %d " % k, log), log
        f = reported_done(c, w.name, need)["fetch"]
        assert f["bad_chunks"] == 1 and f["sources"] == 1, f
        ids = check_ids(c)
        print("corrupt: chunk %d sent corrupted once: detected, counted (%d), fetched again; "
              "ids equal strata run: %s" % (k, f["bad_chunks"], ids))


def add_server(c, name, *extra):
    """A worker with the model file serving its chunks (--serve-chunks);
    its chunk server's address in w.chunks."""
    w = c.add_worker("--serve-chunks", "tcp://127.0.0.1:0", "--cache-dir",
                     os.path.join(c.tmp, name), *extra)
    w.chunks = wait_log(w, re.compile(r"chunks on (tcp://[0-9.]+:\d+)")).group(1)
    return w


def case_peer():
    with start(["--split", "2,2", "--test-hooks", "--test-refuse-chunks", "0"],
               min_workers=2) as c:
        a = add_server(c, "a")
        b = add_streaming(c, os.path.join(c.tmp, "cache-b"), "--weights-from",
                          "%s,%s" % (c.weights, a.chunks), name="b")
        c.wait_serving(2)
        hhave, hneed, hfetched, _, hbad = (int(x) for x in wait_log(b, HEADER_DONE).groups())
        have, need, fetched, cached, bad, twice = stage_done(b)
        # the stage's chunks include the header's, fetched before joining
        assert hhave == hneed == hfetched and hbad == 0, (hhave, hneed, hfetched, hbad)
        assert have == need and fetched + cached == need and cached == hneed and bad == 0, \
            stage_done(b)
        log = b.stderr()
        assert re.search(r"from %s: busy: test hook: chunk requests refused" %
                         re.escape(c.weights), log), log[-3000:]  # the code's name once
        ids = check_ids(c)
        a.stop()
        served = wait_log(a, re.compile(r"chunks: served (\d+) chunks, (\d+) bytes"))
        assert int(served.group(2)) == hfetched + fetched, (served.group(0), hfetched, fetched)
        print("peer: the coordinator refused every chunk; b fetched %d header and %d stage bytes "
              "from a's chunk server (%s); ids equal strata run: %s"
              % (hfetched, fetched, served.group(0), ids))


def case_peerbad():
    with start() as c:
        # a spare whose budget holds no stage: never placed, whoever joins first
        bad_src = add_server(c, "bad", "--spare", "--memory", "1M", "--test-hooks",
                             "--test-serve-corrupt")
        b = add_streaming(c, os.path.join(c.tmp, "cache-b"), "--weights-from",
                          "%s,%s" % (c.weights, bad_src.chunks), name="b")
        c.wait_serving(1)
        hhave, hneed, _, _, hbad = (int(x) for x in wait_log(b, HEADER_DONE).groups())
        have, need, fetched, cached, bad, twice = stage_done(b)
        assert hhave == hneed and have == need and fetched + cached == need, stage_done(b)
        assert hbad + bad == 2, "bad chunks: %d in the header, %d in the stage" % (hbad, bad)
        log = b.stderr()
        assert re.search(r"source %s sent bad data 2 times: no longer used"
                         % re.escape(bad_src.chunks), log), log[-3000:]
        assert len(re.findall(r"source %s sent a bad chunk" % re.escape(bad_src.chunks), log)) == 2
        f = reported_done(c, b.name, need)["fetch"]
        assert f["sources"] == 1, f
        ids = check_ids(c)
        print("peerbad: the corrupting source sent 2 bad chunks (%d header, %d stage), was "
              "dropped; %d bytes fetched from the coordinator; ids equal strata run: %s"
              % (hbad, bad, fetched, ids))


def gguf_data_offset(path):
    """Where a GGUF v3 file's tensor data starts: after the metadata and the
    tensor table, aligned to general.alignment (32 by default)."""
    with open(path, "rb") as f:
        buf = f.read(1 << 24)
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, buf, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("Q")
        pos += n
        return buf[pos - n:pos]

    sizes = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
             12: "d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        return take(sizes[t])

    assert buf[:4] == b"GGUF" and take("4s") and take("I") == 3, path
    n_tensors, n_kv = take("Q"), take("Q")
    align = 32
    for _ in range(n_kv):
        k = string()
        v = value(take("I"))
        if k == b"general.alignment":
            align = v
    for _ in range(n_tensors):
        string()
        n_dims = take("I")
        pos += 8 * n_dims + 4 + 8  # dims, type, offset
    return (pos + align - 1) // align * align


def case_peerlist():
    header = (gguf_data_offset(MODEL) + CHUNK - 1) // CHUNK  # the chunks below the tensor data
    with start(["--split", "2,2", "--test-hooks", "--test-refuse-chunks", str(header),
                "--log", "info"], min_workers=2) as c:
        a = add_server(c, "a")
        b = add_streaming(c, os.path.join(c.tmp, "cache-b"), name="b")  # --weights-from: c's
        c.wait_serving(2)
        hhave, hneed, hfetched, _, hbad = (int(x) for x in wait_log(b, HEADER_DONE).groups())
        have, need, fetched, cached, bad, twice = stage_done(b)
        assert hneed == hfetched == header * CHUNK and hbad == 0, (hneed, hfetched, header)
        assert have == need and fetched + cached == need and cached == hneed and bad == 0, \
            stage_done(b)
        assert fetched > 0, stage_done(b)
        log = b.stderr()
        named = re.search(r"fetch: epoch \d+: the coordinator names (\d+) chunk source\(s\): (.*)",
                          log)
        assert named and a.chunks in named.group(2).split(", "), log[-3000:]
        assert re.search(r"from %s: busy: test hook: chunk requests refused" %
                         re.escape(c.weights), log), log[-3000:]
        # the coordinator named sources to b alone (a has its model file)
        ids_of = {x["name"]: x["id"] for x in c.status()["workers"]}
        to = set(int(x) for x in re.findall(r"Prepare of epoch \d+ to worker (\d+) names \d+ "
                                            r"chunk source", c.coord.stderr()))
        assert to == {ids_of["b"]}, (to, ids_of)
        ids = check_ids(c)
        a.stop()
        served = wait_log(a, re.compile(r"chunks: served (\d+) chunks, (\d+) bytes"))
        assert int(served.group(2)) == fetched, (served.group(0), fetched)
        print("peerlist: the coordinator served the %d header chunks (%d bytes) and refused the "
              "rest; its Prepare named %s to b, which fetched its %d stage bytes there (%s); "
              "ids equal strata run: %s" % (header, hfetched, named.group(2), fetched,
                                            served.group(0), ids))


# worker/fetch/fetch.c: a timeout sets a source aside for FETCH_ASIDE_TURNS
# requests (and time), doubled per timeout in a row up to DOUBLINGS times
ASIDE_TURNS = 16
ASIDE_DOUBLINGS = 6
CALL_MS = 4000  # --test-fetch-call-ms: a request's wait (the default is 30 s)


def aside_bound(requests):
    """The most timeouts one silent source can cost a fetch that sent
    `requests` requests in all while another source answers: the k-th
    timeout sets it aside for ASIDE_TURNS << min(k - 1, ASIDE_DOUBLINGS)
    requests, so timeout k + 1 is request t_k + span + 1 at the earliest."""
    n, t = 1, 1
    while True:
        t += (ASIDE_TURNS << min(n - 1, ASIDE_DOUBLINGS)) + 1
        if t > requests:
            return n
        n += 1


def case_silent():
    with start() as c:
        silent = c.spawn("silent", [INJECT, "silent", "tcp://127.0.0.1:0"])
        saddr = silent.wait_line(r"silent on (tcp://[0-9.]+:\d+)").group(1)
        b = add_streaming(c, os.path.join(c.tmp, "cache-b"), "--weights-from",
                          "%s,%s" % (saddr, c.weights), "--test-hooks", "--test-fetch-call-ms",
                          str(CALL_MS), name="b")
        # generous: a fetch that tried the silent source for every chunk (one
        # CALL_MS each, ~27) still serves in time, and fails on the count below
        c.wait_serving(1, timeout=5 * TIMEOUT)
        have, need, fetched, cached, bad, twice = stage_done(b)
        assert have == need and fetched + cached == need and bad == 0, stage_done(b)
        f = reported_done(c, b.name, need)["fetch"]
        src = {x["addr"]: x for x in f["source_stats"]}
        assert set(src) == {saddr, c.weights}, f
        asked = len(re.findall(r"^request \d+ ", open(silent.out_path).read(), re.M))
        total = sum(x["requests"] for x in src.values())
        bound = aside_bound(total)
        assert src[c.weights]["timeouts"] == 0, f  # the other source answered every request
        assert src[saddr]["requests"] == src[saddr]["timeouts"] == asked, (asked, f)
        assert 1 <= asked <= bound, \
            "the silent source was asked %d times in %d requests (the rule allows %d)" % (
                asked, total, bound)
        log = b.stderr()
        assert re.search(r"source %s did not answer in %d ms \(timeout 1 of this source, 1 in a "
                         r"row\): set aside for %d requests" % (re.escape(saddr), CALL_MS,
                                                                 ASIDE_TURNS), log), log[-3000:]
        r = c.cli("status")
        assert re.search(r"source %s: %d requests, %d timeouts" % (re.escape(saddr), asked, asked),
                         r.stdout), r.stdout
        ids = check_ids(c)
        print("silent: a source that never answers, listed first, was asked %d time(s) in the "
              "fetch's %d requests (the set-aside rule allows %d; before it, once per chunk); "
              "%d stage bytes fetched from the coordinator; ids equal strata run: %s"
              % (asked, total, bound, fetched, ids))


def case_startstop():
    with start() as c:
        silent = c.spawn("silent", [INJECT, "silent", "tcp://127.0.0.1:0"])
        saddr = silent.wait_line(r"silent on (tcp://[0-9.]+:\d+)").group(1)
        # the only source never answers: the header fetch at start-up would
        # wait 30 s per request and 120 s in all; a SIGTERM must end it
        b = c.spawn("b", [WORKER, "--coordinator", c.addr, "--weights-from", saddr,
                          "--cache-dir", os.path.join(c.tmp, "cache-b"), "--threads", "1",
                          "--name", "b", "--listen", "tcp://127.0.0.1:0"])
        silent.wait_line(r"request 1 \(")  # the known step: b's first request is out
        rc = b.stop()  # 10 s, a third of one request's wait
        assert rc == 0, "b ended with %s:\n%s" % (rc, b.stderr()[-2000:])
        line = re.search(r"Terminated during start-up: .*the fetch was stopped.*; exit 0",
                         b.stderr())
        assert line, b.stderr()[-2000:]
        asked = len(re.findall(r"request \d+ ", open(silent.out_path).read()))
        assert asked == 1, "the silent source got %d requests" % asked
        print("startstop: SIGTERM during the start-up header fetch, its only source silent: "
              "exit 0 at once (%r); the source got %d request" % (line.group(0), asked))


def case_back():
    header = (gguf_data_offset(MODEL) + CHUNK - 1) // CHUNK  # the chunks below the tensor data
    # three members: the plan, and so B's stage fetch, waits for the third,
    # started once A is continued; A's stop must not make it lost
    with start(["--split", "1,2,1", "--test-hooks", "--test-refuse-chunks", str(header),
                "--heartbeat-timeout-ms", "60000"], min_workers=3) as c:
        a = add_server(c, "a")
        os.kill(a.p.pid, signal.SIGSTOP)
        try:
            b = add_streaming(c, os.path.join(c.tmp, "cache-b"), "--weights-from",
                              "%s,%s" % (a.chunks, c.weights), "--test-hooks",
                              "--test-fetch-call-ms", str(CALL_MS), name="b")
            wait_log(b, re.compile(r"source %s did not answer in %d ms \(timeout 1 of this "
                                   r"source, 1 in a row\)" % (re.escape(a.chunks), CALL_MS)))
            hhave, hneed, hfetched, _, hbad = (int(x) for x in wait_log(b, HEADER_DONE).groups())
        finally:
            os.kill(a.p.pid, signal.SIGCONT)
        assert hneed == hfetched == header * CHUNK and hbad == 0, (hneed, hfetched, header)
        c.add_worker()
        c.wait_serving(3)
        have, need, fetched, cached, bad, twice = stage_done(b)
        assert have == need and fetched + cached == need and bad == 0 and fetched > 0, \
            stage_done(b)
        log = b.stderr()
        assert re.search(r"source %s answers again after 1 timeout\(s\) in a row" %
                         re.escape(a.chunks), log), log[-3000:]
        f = reported_done(c, b.name, need)["fetch"]
        src = {x["addr"]: x for x in f["source_stats"]}
        assert src[a.chunks]["timeouts"] == 1 and not src[a.chunks]["aside"], f
        assert src[c.weights]["timeouts"] == 0, f
        ids = check_ids(c)
        a.stop()
        served = wait_log(a, re.compile(r"chunks: served (\d+) chunks, (\d+) bytes"))
        assert int(served.group(2)) == fetched, (served.group(0), fetched)
        print("back: a's chunk server timed out once (stopped) and was set aside; continued, it "
              "was asked when the coordinator refused a stage chunk, answered, and served the "
              "whole stage (%s; b fetched %d bytes); sources: %s; ids equal strata run: %s"
              % (served.group(0), fetched, ", ".join("%s %d requests %d timeouts" % (
                  x["addr"], x["requests"], x["timeouts"]) for x in f["source_stats"]), ids))


LINK = "100mbit"
LINK_BYTES = 100e6 / 8
RATE = re.compile(r"fetch: (header|stage) done: \d+ of \d+ bytes \([0-9.]+%\): fetched (\d+), "
                  r"cached \d+, ([0-9.]+) MB/s")


def case_netns():
    """The coordinator and three streaming workers in network namespaces on
    a bridge; the coordinator's egress (what the workers fetch) through tbf
    at LINK. Keyed: the addresses are not loopback."""
    if os.geteuid() != 0:
        raise Skip("needs root for network namespaces")
    tag = "sf%d" % (os.getpid() % 100000)
    hosts = {"c": "10.232.%d.1", "w1": "10.232.%d.2", "w2": "10.232.%d.3", "w3": "10.232.%d.4"}
    sub = os.getpid() % 250
    made, procs = [], []
    tmp = tempfile.mkdtemp(prefix="strata-stream-netns-%d-" % os.getpid())

    def spawn(name, ns, argv):
        p = Proc(tmp, name, ["ip", "netns", "exec", tag + ns] + argv)
        procs.append(p)
        return p

    def in_c(*argv, check=True):
        return sh("ip", "netns", "exec", tag + "c", STRATA, *argv, "--coordinator", addr,
                  "--cluster-key", key, check=check)

    try:
        netns_bridge(tag, tag + "br", hosts, sub, made)
        r = sh("tc", "-n", tag + "c", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", LINK,
               "burst", "64kb", "latency", "200ms", check=False)
        if r.returncode != 0:
            raise Skip("no tbf qdisc: %s" % r.stderr.strip())
        key = os.path.join(tmp, "cluster.key")
        sh(STRATA, "keygen", key)
        caddr = hosts["c"] % sub
        coord = spawn("coordinator", "c", [
            COORD, "--model", MODEL, "--listen", "tcp://%s:0" % caddr, "--cluster-key", key,
            "--cache-dir", os.path.join(tmp, "coord"), "--min-workers", "3", "--split", "1,1,2",
            "--heartbeat-ms", "200"])
        addr = coord.wait_line(r"listening on (tcp://[0-9.]+:\d+)").group(1)
        weights = coord.wait_line(r"weights on (tcp://[0-9.]+:\d+)").group(1)
        ws = []
        for h in ("w1", "w2", "w3"):
            ws.append(spawn(h, h, [
                WORKER, "--coordinator", addr, "--weights-from", weights, "--cache-dir",
                os.path.join(tmp, "cache-" + h), "--listen", "tcp://%s:0" % (hosts[h] % sub),
                "--threads", "1", "--name", h, "--heartbeat-ms", "200", "--cluster-key", key]))
            if h == "w1":  # its header alone on the link: the clean figure
                wait_log(ws[0], re.compile(r"fetch: header done"))
        deadline = time.time() + 3 * TIMEOUT
        st = None
        while time.time() < deadline:
            r = in_c("status", "--json", check=False)
            if r.returncode == 0:
                st = json.loads(r.stdout)
                if st.get("serving") and len(st["workers"]) == 3:
                    break
            time.sleep(0.2)
        assert st and st.get("serving") and len(st["workers"]) == 3, st
        got = parse_ids(in_c("generate", "--prompt-ids", ",".join(map(str, PROMPT)), "-n",
                             str(N_GEN), "--temp", "0", "--ids").stdout)
        ref = run_ids(MODEL, PROMPT, N_GEN, os.path.join(tmp, "run.logits"))
        assert got == ref, "cluster ids %s != strata run %s" % (got, ref)
        rates = {"header": [], "stage": []}  # (bytes, seconds) of each fetch
        for w in ws:
            for what, fetched, mbs in (m.groups() for m in RATE.finditer(wait_log(
                    w, re.compile(r"fetch: stage done")).string)):
                if int(fetched) > 0:
                    rates[what].append((int(fetched), int(fetched) / (float(mbs) * 1e6)))
        alone = rates["header"][0]
        print("netns: w1's header alone through tbf %s (%.2f MB/s): %.2f MB/s = %.0f%% of the "
              "link" % (LINK, LINK_BYTES / 1e6, alone[0] / alone[1] / 1e6,
                        100 * alone[0] / alone[1] / LINK_BYTES))
        # the stages' fetches begin together (one Prepare round): their bytes
        # over the longest one's time is a lower bound of the link's use
        st_bytes = sum(b for b, _ in rates["stage"])
        st_time = max(t for _, t in rates["stage"])
        each = " + ".join("%.2f" % (b / t / 1e6) for b, t in rates["stage"])
        together = st_bytes / st_time
        print("netns: %d stage fetches at once: %s MB/s each; %d bytes in %.2f s = %.2f MB/s "
              "together (at least), %.0f%% of the link" % (
                  len(rates["stage"]), each, st_bytes, st_time, together / 1e6,
                  100 * together / LINK_BYTES))
        print("netns: 3 streaming workers in namespaces serve; ids equal strata run: %s" % got)
    finally:
        netns_cleanup(procs, made)
        shutil.rmtree(tmp, ignore_errors=True)


def tinyllama_shaped():
    """A TinyLlama-shaped Q8_0 model (22 layers, 2048 wide, 32,000 ids,
    1.1 GB): STRATA_RSS_MODEL, or the one synthesized once per strata
    binary into the build tree's test-models/ (also shards.py's). Cases
    asking at once wait on one lock, so the model is made once, not once per
    case; a binary built later (its mtime in the name) makes it anew and
    removes the old one."""
    m = os.environ.get("STRATA_RSS_MODEL")
    if m is not None:
        return m
    cache = os.path.join(cluster.BUILD, "test-models")
    os.makedirs(cache, exist_ok=True)
    name = "tinyllama-shaped-q8_0-%d.gguf" % os.stat(STRATA).st_mtime_ns
    m = os.path.join(cache, name)
    with open(os.path.join(cache, "lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not os.path.exists(m):
            for old in os.listdir(cache):
                if old.startswith("tinyllama-shaped-") and old.endswith(".gguf"):
                    os.unlink(os.path.join(cache, old))
            part = m + ".part"
            r = subprocess.run([STRATA, "convert", "synth", part, "--dim", "2048", "--layers",
                                "22", "--heads", "32", "--kv-heads", "4", "--ffn", "5632",
                                "--vocab", "32000", "--type", "q8_0"], capture_output=True,
                               text=True, timeout=600)
            assert r.returncode == 0, r.stderr
            os.rename(part, m)
    return m


RSS_CHUNKS = 8  # the bound, in chunks, beyond a --model worker's peak (the fetch holds about 2)


def vm_hwm(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"VmHWM:\s+(\d+) kB", f.read()).group(1)) * 1024


def case_rss():
    tmp = tempfile.mkdtemp(prefix="strata-stream-rss-")
    # In a sanitizer build freed chunk buffers sit in ASan's quarantine (256
    # MiB by default) and count as RSS; a small quarantine makes the peak
    # measure live memory, as http_api's hostile case does. A release build
    # ignores the variable.
    asan = os.environ.get("ASAN_OPTIONS", "")
    os.environ["ASAN_OPTIONS"] = (asan + ":" if asan else "") + \
        "quarantine_size_mb=1:thread_local_quarantine_size_kb=64"
    try:
        m = tinyllama_shaped()
        chunk = 4 << 20
        hwm = {}
        for label in ("local", "stream"):
            with Cluster(m, ["--weights-chunk", str(chunk), "--cache-dir",
                             os.path.join(tmp, "coord")]) as c:
                if label == "local":
                    w = c.add_worker()
                else:
                    c.weights = c.coord.wait_line(r"weights on (tcp://[0-9.]+:\d+)").group(1)
                    w = add_streaming(c, os.path.join(tmp, "cache"))
                c.wait_serving(1, timeout=10 * TIMEOUT)
                hwm[label] = vm_hwm(w.p.pid)
                if label == "stream":
                    have, need, fetched, cached, bad, twice = stage_done(w)
                    assert have == need and fetched + cached == need, stage_done(w)
        size = os.path.getsize(m)
        bound = hwm["local"] + RSS_CHUNKS * chunk
        print("rss: a %.2f GB stage (%s): peak RSS (VmHWM) of the streaming worker %.1f MiB, of a "
              "--model worker %.1f MiB: %+.1f MiB (%.2f chunks of 4 MiB); bound %.1f MiB" % (
                  size / 1e9, os.path.basename(m), hwm["stream"] / 2**20, hwm["local"] / 2**20,
                  (hwm["stream"] - hwm["local"]) / 2**20, (hwm["stream"] - hwm["local"]) / chunk,
                  bound / 2**20))
        assert hwm["stream"] < bound, hwm
    finally:
        os.environ["ASAN_OPTIONS"] = asan
        shutil.rmtree(tmp, ignore_errors=True)


CASES = {"basic": case_basic, "resume": case_resume, "corrupt": case_corrupt, "peer": case_peer,
         "peerbad": case_peerbad, "peerlist": case_peerlist, "silent": case_silent,
         "startstop": case_startstop,
         "back": case_back,
         "netns": case_netns, "rss": case_rss, "moe": case_moe}

if __name__ == "__main__":
    cluster.run_cases(CASES)
