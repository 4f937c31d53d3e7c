#!/usr/bin/env python3
"""batching.py - integration tests of continuous batching (issue 7): real
coordinator and worker processes on loopback, many concurrent clients
driven by the `loadgen` tool (tests/cluster/loadgen.c), outputs checked
against `strata run`.

Usage: batching.py BUILD_DIR CASE...   (CASE: see CASES at the bottom)
Reuses cluster.py's process helpers; every process is killed at the end,
also on failure. Prints 'N passed, N failed' as its last line."""

import json
import os
import re
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402  (reads BUILD from sys.argv[1] like this script)
from cluster import Cluster, STRATA, model  # noqa: E402

LOADGEN = os.path.join(cluster.BUILD, "tests", "cluster", "loadgen")


def err_code(name):
    """The numeric value of an st_err (its place in common/base/err.h's enum)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "common", "base", "err.h")
    with open(path) as f:
        body = f.read().split("typedef enum st_err {", 1)[1].split("}", 1)[0]
    return re.findall(r"^\s*(ST_[A-Z0-9_]+)", body, re.M).index(name)


EBUSY = err_code("ST_EBUSY")


_ref_cache = {}


def ref_ids(model_path, prompt, n, temp=0.0, seed=None):
    """The ids `strata run` generates for prompt (cached)."""
    key = (model_path, tuple(prompt), n, temp, seed)
    if key not in _ref_cache:
        argv = [STRATA, "run", model_path, "--prompt-ids", ",".join(map(str, prompt)), "-n",
                str(n), "--temp", str(temp), "--ids", "--threads", "1"] + cluster.GOLDEN_KV
        if seed is not None:
            argv += ["--seed", str(seed)]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        _ref_cache[key] = cluster.parse_ids(r.stdout)
    return _ref_cache[key]


def loadgen(c, reqs, timeout_ms=60000, concurrency=0):
    """Runs the requests concurrently; returns their results by index."""
    argv = [LOADGEN, c.addr, "--timeout-ms", str(timeout_ms)]
    if concurrency:
        argv += ["--concurrency", str(concurrency)]
    if c.key:
        argv += ["--key", c.key]
    inp = "".join(json.dumps(r) + "\n" for r in reqs)
    r = subprocess.run(argv, input=inp, capture_output=True, text=True,
                       timeout=timeout_ms / 1000 + 60)
    assert r.returncode == 0, "loadgen failed (%d): %s" % (r.returncode, r.stderr)
    out = [None] * len(reqs)
    for line in r.stdout.splitlines():
        o = json.loads(line)
        out[o["i"]] = o
    missing = [i for i, o in enumerate(out) if o is None]
    assert not missing, "loadgen reported nothing for requests %s" % missing
    return out


def prompt_of(k, length, vocab=512):
    """A distinct prompt: BOS, then ids that depend on k."""
    return [1] + [3 + (k * 37 + j * (k + 5)) % (vocab - 3) for j in range(length - 1)]


def check_ok(o, want, what):
    assert o["ok"], "%s: %s %s (%s)" % (what, o["stage"], o["error"], o["finish"])
    assert o["ids"] == want, "%s: ids %s != strata run's %s" % (what, o["ids"], want)


def reset_peak(pid):
    """Resets the process's peak RSS (VmHWM), so it measures what follows
    (start-up measurement buffers are not part of serving)."""
    with open("/proc/%d/clear_refs" % pid, "w") as f:
        f.write("5")


def sanitized(pid):
    """Whether the process runs under AddressSanitizer (whose shadow memory
    and quarantine inflate RSS beyond any budget)."""
    with open("/proc/%d/maps" % pid) as f:
        return "libasan" in f.read()


def proc_kib(pid, field):
    with open("/proc/%d/status" % pid) as f:
        m = re.search(r"^%s:\s+(\d+) kB" % field, f.read(), re.M)
    return int(m.group(1))


# ---------------------------------------------------------------- cases

def case_ragged():
    """Ragged batch equals independent runs (INV-1 per session): with the f32
    wire, concurrent greedy requests with different prompts and lengths (and
    one seeded sampled request) give exactly `strata run`'s ids, also while
    prefill chunks interleave with decode; 2 workers keep 2 batches in flight.
    The step gate starts the long prefill while request 0 decodes."""
    for name, split in (("synth-s-f32.gguf", [2, 4]), ("stories260K.gguf", [5])):
        m = model(name)
        with Cluster(m, ["--wire", "f32", "--split", ",".join(map(str, split)), "--min-workers",
                         str(len(split)), "--chunk", "16", "--max-tokens", "256",
                         "--max-sessions", "16", "--test-hooks",
                         # one batch per stage in flight whatever the cores (the
                         # default follows them: coordinator/planner/concurrency.h)
                         "--pipeline-depth", str(len(split))]) as c:
            for _ in split:
                c.add_worker()
            c.wait_serving(len(split))
            reqs = []
            for k in range(10):
                plen = [3, 90, 7, 41, 2, 130, 17, 64, 5, 33][k]
                n = [256, 9, 30, 12, 40, 6, 20, 15, 28, 18][k]
                r = {"prompt_ids": prompt_of(k, plen), "n": n, "delay_ms": 15 * k}
                if k == 4:
                    r.update({"temp": 0.8, "seed": 1234})
                reqs.append(r)
            # the long prompt (5) arrives while request 0 still has 255 ids
            # to decode (the 9 prefill chunks cannot outlast them), whatever
            # the machine's speed: the step gate parks the others at 1 id,
            # then every request at once (5 before its first chunk), and the
            # release lets them all go on; a timed delay alone raced on a
            # fast model (16 session slots: all 10 park with a session)
            del reqs[5]["delay_ms"]
            first = [k for k in range(10) if k != 5]
            # every one of them has a 2nd id (an EOS as 1st id would end it
            # instead of parking it, and 9 parked requests mean all arrived)
            assert all(len(ref_ids(m, reqs[k]["prompt_ids"], reqs[k]["n"],
                                   reqs[k].get("temp", 0.0), reqs[k].get("seed"))) > 1
                       for k in first)
            assert len(ref_ids(m, reqs[0]["prompt_ids"], reqs[0]["n"])) == 256
            cluster.hold(c, 1)
            box = {}
            t1 = threading.Thread(target=lambda: box.update(
                r1=loadgen(c, [reqs[k] for k in first])))
            t1.start()
            cluster.wait_held(c, 9, at=1)
            cluster.hold(c, 0)
            t2 = threading.Thread(target=lambda: box.update(r2=loadgen(c, [reqs[5]])))
            t2.start()
            cluster.wait_held(c, 10)
            cluster.release(c)
            t1.join(180)
            t2.join(180)
            assert "r1" in box and "r2" in box, "the requests did not end"
            res = [None] * 10
            for k, o in zip(first, box["r1"]):
                res[k] = o
            res[5] = box["r2"][0]
            for k, (r, o) in enumerate(zip(reqs, res)):
                want = ref_ids(m, r["prompt_ids"], r["n"], r.get("temp", 0.0), r.get("seed"))
                check_ok(o, want, "%s request %d" % (name, k))
            # prefill chunks interleaved with decode: while a long prompt was
            # being prefilled, other sessions received tokens
            long_k = max(range(10), key=lambda k: len(reqs[k]["prompt_ids"]))
            lo, hi = res[long_k]["start_ns"], res[long_k]["times_ns"][0]
            during = sum(1 for k in range(10) if k != long_k
                         for t in res[k]["times_ns"] if lo < t < hi)
            assert long_k == 5
            during0 = sum(1 for t in res[0]["times_ns"] if lo < t < hi)
            assert during0 > 0, "request 0 (decoding) got no token during the long prefill"
            assert res[long_k]["steps"] > 1 + len(reqs[long_k]["prompt_ids"]) // 16 - 1
            assert during > 0, "no other session got a token during the long prefill"
            sch = c.status()["sched"]
            assert int(sch["rows"]) > int(sch["batches"]), "no batch held two rows: %s" % sch
            assert sch["peak_in_flight"] == len(split), sch
            left0 = sum(1 for t in res[0]["times_ns"] if t > hi)
            print("ragged: %s split %s: 10 concurrent requests equal strata run; %s batches, "
                  "%s rows, %d tokens of others during a %d-id prefill (request 0 had %d "
                  "more to go), peak %d in flight"
                  % (name, split, sch["batches"], sch["rows"], during,
                     len(reqs[long_k]["prompt_ids"]), left0, sch["peak_in_flight"]))


def case_starvation():
    """A 1,000-token prefill does not starve decode: a session already
    decoding gets a token in every step of the long prefill (its missed-step
    count stays 0, and it receives one id per prefill chunk). The step gate
    starts the prefill while the decoding session has 37 ids to go."""
    tmp = os.path.join(os.environ.get("TMPDIR", "/tmp"), "strata-batch-%d" % os.getpid())
    os.makedirs(tmp, exist_ok=True)
    m = os.path.join(tmp, "long-ctx.gguf")
    r = subprocess.run([STRATA, "convert", "synth", m, "--dim", "128", "--layers", "4", "--heads",
                        "4", "--kv-heads", "2", "--ffn", "384", "--vocab", "512", "--type", "f32",
                        "--ctx", "2048", "--seed", "5"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    try:
        for split in ([4], [2, 2]):
            with Cluster(m, ["--wire", "f32", "--split", ",".join(map(str, split)),
                             "--min-workers", str(len(split)), "--test-hooks"]) as c:
                for _ in split:
                    c.add_worker()
                c.wait_serving(len(split))
                pa, pb = prompt_of(1, 5), prompt_of(2, 1000)
                # A decodes 3 ids and is parked; the gate then parks every
                # request at once (B before its first chunk); released, A
                # has 37 ids to go while B's 8 chunks are fed, whatever the
                # machine's speed or the clients' latency. B asks for one id
                # (its last chunk samples it), so A is the only decoding
                # session from start to end: two decoding sessions on one
                # route share its batches in turn, and which of them waits
                # for the next batch depends on when their results return
                cluster.hold(c, 3)
                box = {}
                ta = threading.Thread(target=lambda: box.update(
                    a=loadgen(c, [{"prompt_ids": pa, "n": 40}])[0]))
                ta.start()
                cluster.wait_held(c, 1, at=3)
                cluster.hold(c, 0)
                tb = threading.Thread(target=lambda: box.update(
                    b=loadgen(c, [{"prompt_ids": pb, "n": 1}])[0]))
                tb.start()
                cluster.wait_held(c, 2)
                cluster.release(c)
                ta.join(120)
                tb.join(120)
                assert "a" in box and "b" in box, "the requests did not end"
                a, b = box["a"], box["b"]
                check_ok(a, ref_ids(m, pa, 40), "decoding session")
                check_ok(b, ref_ids(m, pb, 1), "1000-token prompt")
                chunks = (1000 + 127) // 128
                lo, hi = b["start_ns"], b["times_ns"][0]
                during = [t for t in a["times_ns"] if lo < t <= hi]
                assert a["missed"] == 0, "the decoding session missed %d steps" % a["missed"]
                assert len(during) >= chunks - 1, (
                    "the decoding session got %d ids during the %d-chunk prefill" %
                    (len(during), chunks))
                gaps = [y - x for x, y in zip(a["times_ns"], a["times_ns"][1:])]
                print("starvation: %d worker(s): %d ids of the decoding session during the %d "
                      "prefill chunks (%.1f ms); missed steps %d; its largest gap %.1f ms"
                      % (len(split), len(during), chunks, (hi - lo) / 1e6, a["missed"],
                         max(gaps) / 1e6))
    finally:
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)


def case_cancel_reuse():
    """A cancelled slot and an abandoned one (the client stopped polling) are
    reused before the request that held them could have finished; the
    sessions that take them over produce exactly `strata run`'s ids (no KV
    of the previous session is visible); status counts the client that went
    away. One session slot; the step gate parks every request at 20 ids, so
    A (300 ids) and D (400 ids) cannot finish while B and E need the slot:
    B and E (20 and 12 ids, never parked) can only run in a slot freed by
    the cancel and by the client timeout, whatever the machine's speed."""
    m = model("synth-s-f32.gguf")
    gate = 20
    with Cluster(m, ["--wire", "f32", "--max-sessions", "1", "--client-timeout-ms", "2000",
                     "--test-hooks"]) as c:
        c.add_worker()
        c.wait_serving(1)
        # A and D would run their full length (no EOS within 400 ids)
        p = [prompt_of(4, 8), prompt_of(1, 9), prompt_of(9, 8), prompt_of(3, 15)]
        assert len(ref_ids(m, p[0], 300)) == 300 and len(ref_ids(m, p[2], 400)) == 400
        reqs = [{"prompt_ids": p[0], "n": 300, "cancel_after": 5},
                {"prompt_ids": p[1], "n": gate, "start_after": [0, 5]},
                {"prompt_ids": p[2], "n": 400, "abandon_after": 3, "start_after": [1, gate]},
                {"prompt_ids": p[3], "n": 12, "start_after": [2, 3]}]
        cluster.hold(c, gate)
        a, b, d, e = loadgen(c, reqs)
        st = c.status()
        assert st["sched"]["hold"]["on"], "the gate was released"  # it held A and D throughout
        cluster.release(c)
        assert a["finish"] == "cancelled", a
        assert 5 <= len(a["ids"]) <= gate < 300, "A has %d ids" % len(a["ids"])
        assert a["ids"] == ref_ids(m, p[0], 300)[:len(a["ids"])], "ids before the cancel differ"
        check_ok(b, ref_ids(m, p[1], gate), "the session after a cancel")
        assert b["start_ns"] >= a["times_ns"][4], "B started before A was cancelled"
        assert d["finish"] == "abandoned" and d["ids"] == ref_ids(m, p[2], 400)[:len(d["ids"])]
        check_ok(e, ref_ids(m, p[3], 12), "the session after an abandoned one")
        assert e["start_ns"] > d["start_ns"], "E started before D"
        assert int(st["sched"]["client_gone"]) == 1, st["sched"]
        # D had at most `gate` of its 400 ids when its client went away, and
        # the gate let it have no more: E got D's only slot while D could
        # not have finished, i.e. the client timeout freed it early
        print("cancel/reuse: cancelled slot reused after %.0f ms (A had %d of 300 ids); abandoned "
              "slot freed after %.2f s (D parked at most at %d of 400 ids); outputs equal strata "
              "run's" % ((b["start_ns"] - a["times_ns"][-1]) / 1e6, len(a["ids"]),
                         (e["start_ns"] - d["start_ns"]) / 1e9, gate))


def gen(c, *args):
    r = c.cli("generate", *args)
    m = re.search(r"\((\d+) reused from the session\)", r.stderr)
    assert m, r.stderr
    return cluster.parse_ids(r.stdout), int(m.group(1))


def case_sessions():
    """Client sessions: a follow-up turn reuses the KV of the earlier ones
    (only the new suffix is prefilled) and equals `strata run` on the whole
    conversation; idle sessions are evicted least recently used when a slot
    is needed and expire after their TTL; status shows counts and bytes.
    The reuse and eviction part runs with a TTL no test outlasts (a slow
    turn must not expire a session it expects kept); expiry gets its own
    cluster with a short TTL."""
    m = model("synth-s-f32.gguf")
    with Cluster(m, ["--wire", "f32", "--max-sessions", "2", "--session-ttl-ms", "3600000"]) as c:
        c.add_worker()
        c.wait_serving(1)
        p1 = prompt_of(3, 12)
        ids1, reused = gen(c, "--session", "7", "--prompt-ids", ",".join(map(str, p1)), "-n", "8",
                           "--temp", "0", "--ids")
        assert reused == 0 and ids1 == ref_ids(m, p1, 8)
        p2 = p1 + ids1 + [40, 41, 42]
        ids2, reused = gen(c, "--session", "7", "--prompt-ids", ",".join(map(str, p2)), "-n", "8",
                           "--temp", "0", "--ids")
        assert reused == len(p1) + 8 - 1, "turn 2 reused %d ids" % reused
        assert ids2 == ref_ids(m, p2, 8), "turn 2 differs from strata run on the conversation"
        st = c.status()
        sch = st["sched"]
        assert sch["sessions"] == 1 and sch["idle_sessions"] == 1, sch
        assert int(sch["kv_session_bytes"]) > 0
        deadline = time.time() + cluster.TIMEOUT  # the workers' KV arrives with a heartbeat
        while int(c.status()["sched"]["kv_bytes"]) == 0 and time.time() < deadline:
            time.sleep(0.1)
        assert int(c.status()["sched"]["kv_bytes"]) > 0
        # a second client session, then a fresh request: the least recently
        # used idle session (7) makes room
        gen(c, "--session", "8", "--prompt-ids", "1,5,6", "-n", "4", "--temp", "0", "--ids")
        gen(c, "--prompt-ids", "1,9,9", "-n", "4", "--temp", "0", "--ids")
        sch = c.status()["sched"]
        assert int(sch["sessions_evicted"]) == 1, sch
        ids3, reused = gen(c, "--session", "8", "--prompt-ids", "1,5,6", "-n", "4", "--temp", "0",
                           "--ids")
        assert reused == 2, "session 8 should have kept its KV (reused %d)" % reused
        ids4, reused = gen(c, "--session", "7", "--prompt-ids", ",".join(map(str, p2)), "-n", "8",
                           "--temp", "0", "--ids")
        assert reused == 0 and ids4 == ids2, "evicted session 7 must be prefilled again"
        sch = c.status()["sched"]
        assert int(sch["sessions_expired"]) == 0 and sch["sessions"] == 2, sch
        reuse = {k: sch[k] for k in ("sessions", "reused_tokens", "sessions_evicted")}
    # TTL: idle sessions expire and the worker frees them (the bound only
    # stops a hang; the TTL is short, and anything slower just waits)
    with Cluster(m, ["--wire", "f32", "--max-sessions", "2", "--session-ttl-ms", "1000"]) as c:
        c.add_worker()
        c.wait_serving(1)
        for sid in ("7", "8"):
            gen(c, "--session", sid, "--prompt-ids", "1,5,6", "-n", "4", "--temp", "0", "--ids")
        deadline = time.time() + cluster.TIMEOUT
        while time.time() < deadline:
            st = c.status()
            w = st["workers"][0]
            if st["sched"]["sessions"] == 0 and w.get("sessions", 1) == 0:
                break
            time.sleep(0.2)
        assert st["sched"]["sessions"] == 0 and int(st["sched"]["sessions_expired"]) >= 2, \
            st["sched"]
        assert w["sessions"] == 0, "the worker still holds %d sessions" % w["sessions"]
        print("sessions: turn 2 reused %d ids; LRU eviction and TTL expiry (%s expired) reach the "
              "worker; status %s" % (len(p1) + 7, st["sched"]["sessions_expired"], reuse))


def case_memory():
    """INV-6: 200 concurrent short requests against a small KV budget (4
    sessions): the worker's peak RSS stays under its budget plus a fixed
    overhead and grows by at most the KV of 4 sessions; requests beyond
    capacity wait or get "busy"; none hangs; every accepted one completes
    with `strata run`'s ids. The step gate keeps the first 48 in progress
    until all 200 were submitted, so exactly 48 wait or run and 152 are
    refused, whatever the machine's speed."""
    m = model("synth-s-q8_0.gguf")
    budget = 24 << 20
    with Cluster(m, ["--max-sessions", "4", "--ctx", "128", "--max-requests", "48",
                     "--queue-timeout-ms", "40000", "--test-hooks"]) as c:
        w = c.add_worker("--memory", str(budget))
        c.wait_serving(1)
        prompts = [prompt_of(k, 3 + k % 5) for k in range(8)]
        warm = loadgen(c, [{"prompt_ids": prompts[0], "n": 4}])[0]
        assert warm["ok"], warm
        for pid in (w.p.pid, c.coord.p.pid):
            reset_peak(pid)
        base = proc_kib(w.p.pid, "VmHWM")
        cbase = proc_kib(c.coord.p.pid, "VmHWM")
        samples = []
        stop = threading.Event()

        def watch():
            while not stop.is_set():
                try:
                    st = c.status()
                    samples.append((st["sched"]["sessions"], st["workers"][0].get("sessions", 0),
                                    int(st["workers"][0].get("kv_bytes", 0))))
                except Exception:  # a status call may time out under load
                    pass
                time.sleep(0.1)

        th = threading.Thread(target=watch)
        th.start()
        t0 = time.time()
        # every request is parked after its first id until all 200 were
        # submitted: 4 hold a session, 44 wait for one, and the other 152
        # find max_requests in progress and are refused busy, on any machine
        # (each prompt has a 2nd id: none ends by EOS before the gate)
        assert all(len(ref_ids(m, pr, 6)) > 1 for pr in prompts)
        cluster.hold(c, 1)
        box = {}
        try:
            reqs = [{"prompt_ids": prompts[k % 8], "n": 6 + k % 7} for k in range(200)]
            lg = threading.Thread(target=lambda: box.update(
                res=loadgen(c, reqs, timeout_ms=120000)))
            lg.start()
            cluster.wait_held(c, 4, at=1, also=lambda s: int(s["sched"]["busy_refused"]) == 152 and
                              s["sched"]["queued"] == 44)
            cluster.release(c)
            lg.join(300)
            assert "res" in box, "loadgen did not end"
            res = box["res"]
        finally:
            stop.set()
            th.join()
        dt = time.time() - t0
        ok = busy = 0
        for k, o in enumerate(res):
            if o["ok"]:  # one stage: no boundary, so exactly strata run's ids
                check_ok(o, ref_ids(m, prompts[k % 8], 6 + k % 7), "request %d" % k)
                ok += 1
            else:
                assert o["code"] == EBUSY and "busy" in o["error"] or \
                    "maximum queue wait" in o["error"], "request %d: %s" % (k, o)
                assert o["stage"] != "poll", "request %d did not end: %s" % (k, o)
                busy += 1
        peak = proc_kib(w.p.pid, "VmHWM")
        cpeak = proc_kib(c.coord.p.pid, "VmHWM")
        kv_one = int(c.status()["sched"]["kv_session_bytes"])
        assert ok == 48 and busy == 152, "accepted %d, busy %d" % (ok, busy)
        assert max(s[0] for s in samples) <= 4 and max(s[1] for s in samples) <= 4, samples[-5:]
        assert max(s[2] for s in samples) <= 4 * kv_one, (max(s[2] for s in samples), kv_one)
        growth = (peak - base) * 1024
        asan = sanitized(w.p.pid)
        slack = (64 if asan else 8) << 20  # ASan's quarantine keeps freed blocks
        assert growth <= 4 * kv_one + slack, "worker peak RSS grew by %d bytes" % growth
        if not asan:
            assert peak * 1024 <= budget + (32 << 20), "worker peak RSS %d KiB" % peak
        assert (cpeak - cbase) * 1024 <= (4 if asan else 1) * (32 << 20), \
            "coordinator peak RSS grew %d KiB" % (cpeak - cbase)
        print("memory: 200 requests in %.1fs: %d accepted and correct, %d busy; worker peak RSS "
              "%.1f MiB (budget %.0f MiB, +%.2f MiB under load, KV %d x %.0f KiB); coordinator "
              "+%.1f MiB" % (dt, ok, busy, peak / 1024, budget / 2**20, growth / 2**20, 4,
                             kv_one / 1024, (cpeak - cbase) / 1024))


CASES = {"ragged": case_ragged, "starvation": case_starvation, "cancel_reuse": case_cancel_reuse,
         "sessions": case_sessions, "memory": case_memory}

if __name__ == "__main__":
    cluster.run_cases(CASES)
