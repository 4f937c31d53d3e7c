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

Nothing depends on speed: the pause is a hook at a chunk count, and every
wait is for a state with a generous deadline."""
import os
import re
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import (Cluster, TIMEOUT, WORKER, model, parse_ids, run_ids)  # noqa: E402

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


def start(extra_coord=(), min_workers=1):
    """A coordinator serving weights in chunks of CHUNK, its manifest cache
    in a directory of its own."""
    tmp = tempfile.mkdtemp(prefix="strata-stream-")
    c = Cluster(MODEL, ["--weights-chunk", str(CHUNK), "--cache-dir", os.path.join(tmp, "coord"),
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


def check_ids(c):
    r = c.cli("generate", "--prompt-ids", ",".join(map(str, PROMPT)), "-n", str(N_GEN),
              "--temp", "0", "--ids")
    got = parse_ids(r.stdout)
    ref = run_ids(MODEL, PROMPT, N_GEN, os.path.join(c.tmp, "run.logits"))
    assert got == ref, "cluster ids %s != strata run %s" % (got, ref)
    return got


def stage_done(w):
    """(have, need, fetched, cached, bad, twice) of the worker's stage fetch."""
    return tuple(int(x) for x in wait_log(w, DONE).groups())


def reported_done(c, name):
    """The worker's fetch as the status reports it once a heartbeat sent
    after its stage fetch ended has arrived (the state may turn serving
    before that heartbeat: no snapshot races it)."""
    deadline = time.time() + TIMEOUT
    while True:
        s = [x for x in c.status()["workers"] if x["name"] == name][0]
        f = s.get("fetch")
        if (f is not None and not f["active"]) or time.time() > deadline:
            return s
        time.sleep(0.1)


def case_basic():
    with start(["--split", "2,2"], min_workers=2) as c:
        ws = [add_streaming(c, os.path.join(c.tmp, "cache%d" % i)) for i in range(2)]
        st = c.wait_serving(2)
        size = os.path.getsize(MODEL)
        for w in ws:
            have, need, fetched, cached, bad, twice = stage_done(w)
            assert have == need and need <= size, (w.name, have, need, size)
            assert fetched + cached == need and bad == 0 and twice == 0, stage_done(w)
            print("basic: %s needed %d of %d bytes: fetched %d, from its cache %d"
                  % (w.name, need, size, fetched, cached))
        for s in (reported_done(c, x["name"]) for x in st["workers"]):
            f = s.get("fetch")
            assert f is not None and not f["active"] and f["have_bytes"] == f["need_bytes"], s
        ids = check_ids(c)
        print("basic: 2 streaming workers serve; ids equal strata run: %s" % ids)


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
        f = reported_done(c, w.name)["fetch"]
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
        assert re.search(r"from %s: .*test hook: chunk requests refused" % re.escape(c.weights),
                         log), log[-3000:]
        ids = check_ids(c)
        a.stop()
        served = wait_log(a, re.compile(r"chunks: served (\d+) chunks, (\d+) bytes"))
        assert int(served.group(2)) == hfetched + fetched, (served.group(0), hfetched, fetched)
        print("peer: the coordinator refused every chunk; b fetched %d header and %d stage bytes "
              "from a's chunk server (%s); ids equal strata run: %s"
              % (hfetched, fetched, served.group(0), ids))


def case_peerbad():
    with start() as c:
        bad_src = add_server(c, "bad", "--spare", "--test-hooks", "--test-serve-corrupt")
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
        f = reported_done(c, b.name)["fetch"]
        assert f["sources"] == 1, f
        ids = check_ids(c)
        print("peerbad: the corrupting source sent 2 bad chunks (%d header, %d stage), was "
              "dropped; %d bytes fetched from the coordinator; ids equal strata run: %s"
              % (hbad, bad, fetched, ids))


CASES = {"basic": case_basic, "resume": case_resume, "corrupt": case_corrupt, "peer": case_peer,
         "peerbad": case_peerbad}

if __name__ == "__main__":
    CASES[sys.argv[2]]()
