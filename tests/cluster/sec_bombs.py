#!/usr/bin/env python3
"""sec_bombs.py - integration tests of issue 12's findings 3 and 9 on a
keyless loopback cluster: decoder bombs (frames of millions of empty
repeated elements) leave the receiving process's peak RSS within
RSS_SLACK_MIB of its baseline, are refused and counted, and serving goes
on with the golden ids and `strata run`'s logits; a Join announcing an
ipc:// or inproc:// address is refused naming it, and counted.

A bomb larger than a socket's receive limit (RECVMAXSZ) is closed by NNG
from its length prefix, before anything is allocated: nothing decodes it,
so nothing counts it; the peak RSS is the assertion. A bomb under the
limit reaches the decoder, whose list limits and budget refuse it: counted.

Usage: sec_bombs.py BUILD_DIR CASE...   (CASE: see CASES at the bottom)
Prints 'N passed, N failed' as its last line."""

import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402  (reads BUILD from sys.argv[1] like this script)
from cluster import INJECT, Cluster, check_generate_exact, golden_cases, model  # noqa: E402

SYNTH = "synth-s-f32.gguf"
RSS_SLACK_MIB = 64   # issue 12: peak RSS within this of the baseline
UNDER_LIMIT_MIB = 3  # a bomb the worker's data socket lets through to its decoder
UNDER_CTL_LIMIT = "768k"  # one the coordinator's TCP control socket (1 MiB) lets through
SCALAR_MIB = 7       # a StepMeta under ST_STEP_META_MAX (8 MiB) of one scalar repeated
OVER_LIMIT_MIB = (32, 256)
COUNT_TIMEOUT_S = 30
ERANGE = 8
EINVAL = 1


def golden_case():
    return [x for x in golden_cases() if x["model"] == SYNTH][0]


def vm_hwm_mib(pid):
    """Peak resident set size of process pid (VmHWM), MiB."""
    with open("/proc/%d/status" % pid) as f:
        m = re.search(r"^VmHWM:\s+(\d+) kB", f.read(), re.M)
    assert m, "no VmHWM for pid %d" % pid
    return int(m.group(1)) / 1024.0


def inject(*argv):
    r = subprocess.run([INJECT] + [str(a) for a in argv], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, "inject %s: %s%s" % (" ".join(map(str, argv)), r.stdout, r.stderr)
    return r.stdout.strip()


def count(c, name, worker=None):
    """The coordinator's counter `name` (its own plus the workers' sums),
    or worker `worker`'s own from its last heartbeat."""
    st = c.status()
    if worker is None:
        return st["counters"][name]
    w = [x for x in st["workers"] if x["name"] == worker][0]
    return w["counters"][name]


def wait_count(c, name, at_least, worker=None):
    deadline = time.time() + COUNT_TIMEOUT_S
    v = count(c, name, worker)
    while time.time() < deadline and v < at_least:
        time.sleep(0.2)
        v = count(c, name, worker)
    assert v >= at_least, "%s %d, expected at least %d" % (name, v, at_least)
    return v


def bad_packets(c, worker=None):
    return count(c, "bad_packets", worker)


def wait_bad(c, at_least, worker=None):
    return wait_count(c, "bad_packets", at_least, worker)


def auth_failed(c, worker=None):
    return count(c, "auth_failed", worker)


def wait_auth_failed(c, at_least, worker=None):
    return wait_count(c, "auth_failed", at_least, worker)


def check_rss(proc, base, what):
    now = vm_hwm_mib(proc.p.pid)
    assert now <= base + RSS_SLACK_MIB, "%s: peak RSS %.1f MiB after %s, baseline %.1f MiB" % (
        proc.name, now, what, base)
    return now


def serve(c):
    """One worker serving; a first generation (the baseline includes it)."""
    c.add_worker()
    c.wait_serving(1)
    check_generate_exact(c, golden_case(), c.tmp)


def case_step_rows():
    """STEP frames of empty StepMeta rows to the worker's data socket: 32
    and 256 MiB (over its receive limit: closed unread) and one under the
    limit (refused by the row count before decoding, counted); then a
    StepMeta of one scalar field repeated millions of times (refused by the
    decoding budget, counted); the worker's and the coordinator's peak RSS
    stay within 64 MiB of their baselines."""
    with Cluster(model(SYNTH), ["--wire", "f32"]) as c:
        serve(c)
        w = c.workers[0]
        base = {p.name: vm_hwm_mib(p.p.pid) for p in (w, c.coord)}
        print("step rows: baseline peak RSS worker %.1f MiB, coordinator %.1f MiB"
              % (base[w.name], base[c.coord.name]))
        key = c.inject_key()  # keyless still authenticated: the generated key
        for size in OVER_LIMIT_MIB:
            print("step rows: " + inject("step-rows-bomb", w.data_addr, size, *key))
            rss = check_rss(w, base[w.name], "a %d MiB bomb" % size)
            print("step rows: after %d MiB: worker peak RSS %.1f MiB" % (size, rss))
        # without the key the frame is refused by its MAC before any decoding
        auth0, bad0 = auth_failed(c, w.name), bad_packets(c, w.name)
        print("step rows: " + inject("step-rows-bomb", w.data_addr, UNDER_LIMIT_MIB, "--no-key"))
        auth = wait_auth_failed(c, auth0 + 1, w.name)
        assert bad_packets(c, w.name) == bad0, "a keyless frame reached the decoder"
        print("step rows: a keyless %d MiB bomb refused by the MAC (worker auth_failed %d -> %d)"
              % (UNDER_LIMIT_MIB, auth0, auth))
        print("step rows: " + inject("step-rows-bomb", w.data_addr, UNDER_LIMIT_MIB, *key))
        bad = wait_bad(c, bad0 + 1, w.name)
        rss = check_rss(w, base[w.name], "a %d MiB bomb" % UNDER_LIMIT_MIB)
        assert re.search(r"StepMeta of \d+ bytes from sender \d+ has \d+ rows; at most",
                         w.stderr()), w.stderr()[-2000:]
        print("step rows: after %d MiB: refused by the row count, worker bad_packets %d -> %d, "
              "peak RSS %.1f MiB" % (UNDER_LIMIT_MIB, bad0, bad, rss))
        bad0 = bad
        print("step rows: " + inject("step-scalar-bomb", w.data_addr, SCALAR_MIB, *key))
        bad = wait_bad(c, bad0 + 1, w.name)
        rss = check_rss(w, base[w.name], "a %d MiB scalar bomb" % SCALAR_MIB)
        assert re.search(r"StepMeta of \d+ bytes from sender \d+ would decode to more than its "
                         r"budget", w.stderr()), w.stderr()[-2000:]
        print("step rows: after a %d MiB scalar bomb: refused by the decoding budget, worker "
              "bad_packets %d -> %d, peak RSS %.1f MiB" % (SCALAR_MIB, bad0, bad, rss))
        crss = check_rss(c.coord, base[c.coord.name], "the bombs")
        assert w.p.poll() is None and c.coord.p.poll() is None, "a process died"
        check_generate_exact(c, golden_case(), c.tmp)
        print("step rows: coordinator peak RSS %.1f MiB; serving goes on with golden ids and "
              "bit-exact logits" % crss)


def case_control():
    """Join (millions of empty kernel names) and Heartbeat (millions of
    empty layers) bombs to the coordinator's control socket: under its
    receive limit they get ERANGE naming the list and are counted; 32 and
    256 MiB ones are closed unread (no reply); peak RSS within 64 MiB."""
    with Cluster(model(SYNTH), ["--wire", "f32"]) as c:
        serve(c)
        base = vm_hwm_mib(c.coord.p.pid)
        print("control: baseline coordinator peak RSS %.1f MiB" % base)
        # without the generated key: no reply, refused by the MAC and counted
        auth0 = auth_failed(c)
        out = inject("req-bomb", c.addr, "join", UNDER_CTL_LIMIT, "--no-key")
        assert "reply: none" in out, out
        auth = wait_auth_failed(c, auth0 + 1)
        print("control: a keyless %s join bomb refused by the MAC (auth_failed %d -> %d)"
              % (UNDER_CTL_LIMIT, auth0, auth))
        bad0 = bad_packets(c)
        for kind, names in (("join", "Join capability kernels"), ("heartbeat", "Heartbeat layers")):
            out = inject("req-bomb", c.addr, kind, UNDER_CTL_LIMIT)
            m = re.search(r"reply: error (\d+) [^:]*: (.*)", out)
            assert m and int(m.group(1)) == ERANGE and names in m.group(2), out
            print("control: %s %s bomb -> %s" % (UNDER_CTL_LIMIT, kind, m.group(0)))
            for size in OVER_LIMIT_MIB:
                out = inject("req-bomb", c.addr, kind, size)
                assert "reply: none" in out, out
                rss = check_rss(c.coord, base, "a %d MiB %s bomb" % (size, kind))
                print("control: %d MiB %s bomb closed unread; coordinator peak RSS %.1f MiB"
                      % (size, kind, rss))
        bad = wait_bad(c, bad0 + 2)
        rss = check_rss(c.coord, base, "the bombs")
        assert c.coord.p.poll() is None, "the coordinator died"
        check_generate_exact(c, golden_case(), c.tmp)
        print("control: bad_packets %d -> %d; peak RSS %.1f MiB; serving goes on with golden ids "
              "and bit-exact logits" % (bad0, bad, rss))


def case_join_transport():
    """A Join announcing ipc:///tmp/x (control) or inproc://x (data) is
    refused with EINVAL naming the address and the one transport allowed,
    and counted; the cluster serves on."""
    with Cluster(model(SYNTH), ["--wire", "f32"]) as c:
        serve(c)
        bad0 = bad_packets(c)
        for what, addr in (("join-ipc", "ipc:///tmp/x"), ("join-inproc", "inproc://x")):
            out = inject("req", c.addr, what)
            m = re.search(r"reply: error (\d+) [^:]*: (.*)", out)
            assert m and int(m.group(1)) == EINVAL, out
            assert addr in m.group(2) and "tcp://" in m.group(2), out
            print("join transport: %s -> %s" % (what, m.group(0)))
        auth0 = auth_failed(c)  # a stranger's keyless Join: no reply, refused by the MAC
        r = subprocess.run([INJECT, "req", c.addr, "join-ipc", "--no-key"], capture_output=True,
                           text=True, timeout=120)  # (exits 1: no reply came)
        assert "reply: none" in r.stdout, (r.stdout, r.stderr)
        auth = wait_auth_failed(c, auth0 + 1)
        print("join transport: a keyless join-ipc refused by the MAC (auth_failed %d -> %d)"
              % (auth0, auth))
        bad = wait_bad(c, bad0 + 2)
        st = c.status()
        assert len(st["workers"]) == 1, st["workers"]
        check_generate_exact(c, golden_case(), c.tmp)
        print("join transport: bad_packets %d -> %d; no member added; serving goes on" % (
            bad0, bad))


CASES = {"step_rows": case_step_rows, "control": case_control,
         "join_transport": case_join_transport}

if __name__ == "__main__":
    cluster.run_cases(CASES)
