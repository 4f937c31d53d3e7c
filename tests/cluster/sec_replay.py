#!/usr/bin/env python3
"""sec_replay.py - captured frames replayed into a restarted coordinator
(issue 33, H2; docs/security.md "Replay") and the session namespaces of an
open cluster (issue 33; "Requests belong to their creator").

Usage: sec_replay.py BUILD_DIR CASE...   (CASE: see CASES at the bottom)

restart_keyed / restart_keyless: an admin's `strata replan --force` and
`strata generate` go through a recording proxy (`inject replay record`),
which keeps each frame's exact bytes, and an unbound admin (or member)
Replan(force) and Generate are made (`inject replay make`: what a
requester that never said Hello sends). The coordinator is killed and
started again on the same address with the same key (the keyless one
reuses its generated key file); once the worker rejoined, every frame is
sent again, well within the 60 s clock window: each is refused (EAUTH),
counted (auth_failed for the frames bound to the old coordinator,
unbound_refused for the unbound ones), the epoch does not move and no
generation runs; then the cluster serves `strata run`'s ids.

open_sessions: in an open cluster (--insecure on 0.0.0.0), two CLI
processes (two envelope senders) with the same session id share no KV
(PollReply.reused 0), while one sender's second turn on its own session
reuses its first turn's ids (loadgen, one connection, one sender).

Reuses cluster.py's process helpers; every process is killed at the end,
also on failure. Prints 'N passed, N failed' as its last line."""

import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402
from cluster import (INJECT, STRATA, TIMEOUT, Cluster, check_generate_exact,  # noqa: E402
                     model, parse_ids)
from sec_clients import SYNTH, Keys, golden_case  # noqa: E402

LOADGEN = os.path.join(cluster.BUILD, "tests", "cluster", "loadgen")
EAUTH = 15  # common/base/err.h
WINDOW_S = 60  # ST_ENV_WINDOW_US: a replay must come within it to test the binding
SESSION = "7"
ONE_SENDER = "4242"  # loadgen --sender: both turns from one envelope sender


def cli_via(addr, cred, *args, check=True):
    argv = [STRATA] + list(args) + ["--coordinator", addr] + cred
    r = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT)
    if check and r.returncode != 0:
        raise AssertionError("strata %s failed (%d): %s%s" % (" ".join(args), r.returncode,
                                                            r.stdout, r.stderr))
    return r


def status(addr, cred):
    return json.loads(cli_via(addr, cred, "status", "--json").stdout)


def restart(c, coord_args, key):
    """Kills the coordinator and starts a new one on the same address."""
    c.coord.kill(signal.SIGKILL)
    c.coord.p.wait(10)
    args = [cluster.COORD, "--model", c.model, "--listen", c.addr, "--heartbeat-ms", "200",
            "--heartbeat-timeout-ms", "1500", "--weights", cluster.WEIGHTS_ANY] + coord_args + \
        cluster.GOLDEN_KV
    if key:
        args += ["--cluster-key", key]
    c.coord = c.spawn("coordinator2", args)
    c.coord.wait_line(r"listening on (tcp://[0-9.]+:\d+)")


def replay_restart(keyed):
    k = Keys()
    case = golden_case()
    short = dict(case, n=4, expected_ids=case["expected_ids"][:4])
    coord_args = ["--wire", "f32"] + (k.coord_args() if keyed else [])
    with Cluster(model(SYNTH), coord_args, key=k.cluster if keyed else None) as c:
        tag = "keyed" if keyed else "keyless"
        c.add_worker()
        st = c.wait_serving(1)
        key_file = c.key_file()  # the keyless coordinator's generated key
        cred = ["--admin-key", k.admin] if keyed else ["--cluster-key", key_file]
        make_cred = ["--admin-key", k.admin] if keyed else ["--key", key_file]
        rec = os.path.join(c.tmp, "frames")
        os.mkdir(rec)
        proxy = c.spawn("proxy", [INJECT, "replay", "record", "tcp://127.0.0.1:0", c.addr, rec,
                                  "--no-key"])
        via = proxy.wait_line(r"recording on (tcp://[0-9.]+:\d+)").group(1)
        t_capture = time.time()
        cli_via(via, cred, "replan", "--force", "--json")
        st = c.wait_serving(1, min_epoch=st["epoch"])
        r = cli_via(via, cred, "generate", "--prompt-ids", ",".join(map(str, case["prompt_ids"])),
                    "-n", "4", "--temp", "0", "--ids")
        assert parse_ids(r.stdout) == short["expected_ids"], r.stdout
        frames = re.findall(r"frame (\d+): (\S+) (bound|unbound) \d+", proxy.stdout())
        kinds = [(kind, b) for _, kind, b in frames]
        print("%s: recorded through the proxy: %s" % (tag, kinds))
        made = []
        for what in ("replan-force", "generate"):
            path = os.path.join(c.tmp, "made-%s.bin" % what)
            m = subprocess.run([INJECT, "replay", "make", path, what] + make_cred,
                               capture_output=True, text=True, timeout=TIMEOUT)
            assert m.returncode == 0 and "made:" in m.stdout, (m.stdout, m.stderr)
            made.append(path)
        restart(c, coord_args, k.cluster if keyed else None)
        st = c.wait_serving(1)
        epoch, sec0 = st["epoch"], st["security"]
        auth0, tokens0, req0 = st["counters"]["auth_failed"], st["sched"]["tokens"], st["requests"]
        files = [os.path.join(rec, "frame-%s.bin" % n) for n, _, _ in frames] + made
        # the precondition of the attack, not a speed assertion: past the
        # window the clock check would refuse the frames whatever the binding
        age = time.time() - t_capture
        assert age < WINDOW_S - 10, "the replay comes %.0f s after the capture" % age
        rp = subprocess.run([INJECT, "replay", "send", c.addr] + files, capture_output=True,
                            text=True, timeout=TIMEOUT)
        print("%s: replayed %.0f s after the capture, into the restarted coordinator:\n  %s"
              % (tag, age, rp.stdout.strip().replace("\n", "\n  ")))
        replies = dict(re.findall(r"^(\S+): reply (.*)$", rp.stdout, re.M))
        assert len(replies) == len(files), (rp.stdout, rp.stderr)
        bound = unbound = 0
        for f, (kind, b) in zip(files, kinds + [("replan", "unbound"), ("generate", "unbound")]):
            if kind == "hello":
                assert replies[f] == "ack", (f, replies[f])  # changes nothing
                continue
            assert replies[f].startswith("error %d:" % EAUTH), \
                "a replayed %s (%s) was taken: %s" % (kind, b, replies[f])
            bound += b == "bound"
            unbound += b == "unbound"
        assert ("replan", "bound") in kinds and ("generate", "bound") in kinds, \
            "the CLI's Replan and Generate were not bound: %s" % kinds
        st = c.status()
        sec = st["security"]
        assert st["epoch"] == epoch, "a replay moved the epoch %d -> %d" % (epoch, st["epoch"])
        assert st["sched"]["tokens"] == tokens0 and st["requests"] == req0, \
            "a replayed generation ran: %s" % st["sched"]
        assert sec["unbound_refused"] == sec0["unbound_refused"] + unbound, (sec0, sec)
        assert st["counters"]["auth_failed"] >= auth0 + bound, (auth0, st["counters"])
        print("%s: %d bound frames refused by the MAC (auth_failed %d -> %d), %d unbound ones "
              "refused (unbound_refused %d -> %d); epoch %d unchanged; no tokens generated"
              % (tag, bound, auth0, st["counters"]["auth_failed"], unbound,
                 sec0["unbound_refused"], sec["unbound_refused"], epoch))
        check_generate_exact(c, case, c.tmp)


def case_restart_keyed():
    replay_restart(True)


def case_restart_keyless():
    replay_restart(False)


def reused_of(stderr):
    m = re.search(r"\((\d+) reused from the session\)", stderr)
    assert m, stderr
    return int(m.group(1))


def case_open_sessions():
    case = golden_case()
    ids = ",".join(map(str, case["prompt_ids"]))
    with Cluster(model(SYNTH), ["--wire", "f32", "--insecure", "--session-ttl-ms", "3600000"],
                 listen="tcp://0.0.0.0:0") as c:
        c.add_worker()
        c.wait_serving(1)
        assert c.status()["security"]["role"] == "open"
        # two CLI processes: two senders, the same session id
        r1 = c.cli("generate", "--session", SESSION, "--prompt-ids", ids, "-n", "4", "--temp", "0",
                   "--ids")
        r2 = c.cli("generate", "--session", SESSION, "--prompt-ids", ids, "-n", "4", "--temp", "0",
                   "--ids")
        got = [reused_of(r.stderr) for r in (r1, r2)]
        assert got == [0, 0], "another sender's session %s was shared: reused %s" % (SESSION, got)
        assert parse_ids(r1.stdout) == parse_ids(r2.stdout) == case["expected_ids"][:4]
        # one sender (loadgen, one connection), two turns of its own session
        reqs = os.path.join(c.tmp, "turns.jsonl")
        with open(reqs, "w") as f:
            for _ in range(2):
                f.write(json.dumps({"prompt_ids": case["prompt_ids"], "n": 4, "temp": 0,
                                    "session": int(SESSION)}) + "\n")
        with open(reqs) as f:
            r = subprocess.run([LOADGEN, c.addr, "--concurrency", "1", "--sender", ONE_SENDER],
                               stdin=f, capture_output=True, text=True, timeout=TIMEOUT)
        assert r.returncode == 0, (r.stdout, r.stderr)
        res = [json.loads(x) for x in r.stdout.splitlines()]
        assert len(res) == 2 and all(o["ok"] for o in res), res
        turns = [o["reused"] for o in sorted(res, key=lambda o: o["i"])]
        assert turns[0] == 0, "the first turn of a new sender reused %d ids" % turns[0]
        assert turns[1] > 0, "one sender's second turn reused nothing of its session"
        assert all(o["ids"] == case["expected_ids"][:4] for o in res), res
        print("open sessions: two CLI senders on session %s reused %s; one sender's two turns "
              "reused %s" % (SESSION, got, turns))
        check_generate_exact(c, case, c.tmp)


CASES = {"restart_keyed": case_restart_keyed, "restart_keyless": case_restart_keyless,
         "open_sessions": case_open_sessions}

if __name__ == "__main__":
    cluster.run_cases(CASES)
