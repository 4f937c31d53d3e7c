#!/usr/bin/env python3
"""sec_control.py - integration tests of issue 12, findings 1 and 2, on a
keyless loopback cluster of two workers (a fixed split, f32 wire): hostile
worker control (Prepare, Commit) and forged data frames (STEP, RESULT) are
refused and counted (`strata status --json` counters), and the cluster goes
on serving the ids of `strata run`. Each attack is made the way its check
must stop it: from a stranger's envelope sender id, or from the
coordinator's own id copied (without a key sender ids are not
authenticated, so the logic checks must hold on their own).

Usage: sec_control.py BUILD_DIR CASE...   (CASE: see CASES at the bottom)
Reuses cluster.py's process helpers; every process is killed at the end,
also on failure. Prints 'N passed, N failed' as its last line."""

import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import run_cases  # noqa: E402
from cluster import (INJECT, STRATA, TIMEOUT, Cluster, check_generate_exact,  # noqa: E402
                     golden_cases, hold, held, model, parse_ids, release, wait_held)
from security import wait_counter  # noqa: E402

SYNTH = "synth-s-f32.gguf"
U64_MAX = 2 ** 64 - 1
HOLD_AT = 3      # generated ids of the victim request when the attack is made
DISCARD = "tcp://127.0.0.1:9"  # where a rerouted worker would send (nothing listens)

# the workers log the coordinator's control sender id at join (INFO)
os.environ["STRATA_LOG"] = "info"


def golden_case():
    """The synth case with the longest prompt (a session with a long KV)."""
    return max((x for x in golden_cases() if x["model"] == SYNTH),
               key=lambda x: len(x["prompt_ids"]))


def cluster(extra=()):
    c = Cluster(model(SYNTH), ["--wire", "f32", "--min-workers", "2", "--split", "3,3"]
                + list(extra))
    c.add_worker()
    c.add_worker()
    return c


def worker(st, stage):
    """The status entry and process index of the worker of stage."""
    w = [x for x in st["workers"] if x["stage"] == stage][0]
    return w, int(w["name"][len("worker"):])


def counter(c, name, what):
    w = [x for x in c.status()["workers"] if x["name"] == name][0]
    return w.get("counters", {}).get(what, 0)


def control_sender(proc):
    """The coordinator's control sender id the worker learned at join."""
    m = re.findall(r"control sender (\d+)", proc.stderr())
    assert m, "worker logged no control sender: %s" % proc.stderr()[-2000:]
    return m[-1]


def inject(c, *args):
    """inject sec ARGS with the cluster's key (keyless still authenticated:
    the coordinator's generated one), unless ARGS say --no-key."""
    r = subprocess.run([INJECT, "sec"] + [str(a) for a in args] + c.inject_key(),
                       capture_output=True, text=True,
                       timeout=TIMEOUT)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r.stdout


def replies(out):
    return [ln for ln in out.splitlines() if ln.startswith("reply:")]


def refused_and_serving(c, st, w, case, tag, n=2):
    """Worker w counted n refused control requests; the epoch did not move;
    a forced replan still commits (the real coordinator's next plan) and
    the cluster serves the golden ids."""
    got = wait_counter(lambda: counter(c, w["name"], "refused_control"), n)
    assert got >= n, "refused_control %d" % got
    e0 = st["epoch"]
    assert c.status()["epoch"] == e0, "the epoch moved under the attack"
    c.cli("replan", "--force", "--json")
    e = c.wait_serving(2, min_epoch=e0)["epoch"]
    check_generate_exact(c, case, c.tmp)
    print("%s: refused_control %d; epoch %d -> %d committed; golden ids" % (tag, got, e0, e))


def start_generate(c, case):
    return subprocess.Popen([STRATA, "generate", "--prompt-ids",
                             ",".join(map(str, case["prompt_ids"])), "-n", str(case["n"]),
                             "--temp", "0", "--ids", "--coordinator", c.addr],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish_generate(p, case):
    out, err = p.communicate(timeout=TIMEOUT)
    assert p.returncode == 0, err
    got = parse_ids(out)
    assert got == case["expected_ids"], "ids %s != golden %s" % (got, case["expected_ids"])


def case_commit_unprepared():
    """A Commit of an unprepared epoch (2^64-1) is refused: from a stranger
    (not the joined coordinator), and with the coordinator's sender id
    copied (no matching Prepare); both counted; the real coordinator's next
    plan commits and the cluster serves."""
    case = golden_case()
    with cluster() as c:
        st = c.wait_serving(2)
        w, i = worker(st, 0)
        out = inject(c, "commit-unprepared", w["ctl_addr"], U64_MAX)
        assert "only the coordinator this worker joined" in out, out
        print("commit-unprepared: stranger: %s" % replies(out)[0])
        # without the cluster key: no reply, refused by the MAC and counted
        # (the counter is the evidence; the reply is not waited for long)
        auth0 = counter(c, w["name"], "auth_failed")
        r = subprocess.run([INJECT, "sec", "commit-unprepared", w["ctl_addr"], str(U64_MAX),
                            "--no-key", "--reply-ms", "3000"], capture_output=True, text=True,
                           timeout=TIMEOUT)
        out = r.stdout  # (inject exits 1: no reply came)
        assert replies(out) and replies(out)[0].startswith("reply: none"), (out, r.stderr)
        auth = wait_counter(lambda: counter(c, w["name"], "auth_failed"), auth0 + 1)
        assert auth >= auth0 + 1, "auth_failed %d" % auth
        print("commit-unprepared: keyless: refused by the MAC (auth_failed %d -> %d)"
              % (auth0, auth))
        out = inject(c, "commit-unprepared", w["ctl_addr"], U64_MAX, "--sender",
                     control_sender(c.workers[i]))
        assert "without a matching Prepare" in out, out
        print("commit-unprepared: coordinator's id copied: %s" % replies(out)[0])
        refused_and_serving(c, st, w, case, "commit-unprepared")


def case_prepare_commit_reroute():
    """A stranger's Prepare of the serving plan as epoch + 1 with every
    data and result address its own (correctly hashed, right incarnation),
    then its Commit: both refused (not the joined coordinator) and counted;
    nothing is rerouted."""
    case = golden_case()
    with cluster() as c:
        st = c.wait_serving(2)
        w, _ = worker(st, 1)
        out = inject(c, "prepare-commit-reroute", c.addr, w["ctl_addr"], DISCARD)
        r = replies(out)
        assert len(r) == 2 and all("only the coordinator this worker joined" in x for x in r), out
        print("prepare-commit-reroute: %s" % " / ".join(r))
        refused_and_serving(c, st, w, case, "prepare-commit-reroute")


def case_commit_bad_hash():
    """With the coordinator's sender id copied: a Prepare whose plan hash
    is not the plan's is refused (not only logged), and the Commit of that
    hash then has no matching Prepare; both counted."""
    case = golden_case()
    with cluster() as c:
        st = c.wait_serving(2)
        w, i = worker(st, 1)
        out = inject(c, "commit-bad-hash", c.addr, w["ctl_addr"], "--sender",
                     control_sender(c.workers[i]))
        r = replies(out)
        assert len(r) == 2, out
        assert r[0].startswith("reply: refuse:") and "is not BLAKE2b-256 of the plan" in r[0], out
        assert "without a matching Prepare" in r[1], out
        print("commit-bad-hash: %s / %s" % (r[0], r[1]))
        refused_and_serving(c, st, w, case, "commit-bad-hash")


def case_step_forged_session():
    """A STEP of the serving epoch and plan hash naming a running session
    (its id read from the test hook: ids are random) and rewriting its KV
    positions, sent to stage 0 by a stranger (not the coordinator): refused
    and counted; the victim's ids equal the golden ones (with the check
    removed they differ after the hold point: its KV was rewritten)."""
    case = golden_case()
    with cluster(["--test-hooks"]) as c:
        st = c.wait_serving(2)
        w, _ = worker(st, 0)
        hold(c, HOLD_AT)
        p = start_generate(c, case)
        try:
            victim = held(wait_held(c, 1, at=HOLD_AT))[0]
            filled = len(case["prompt_ids"]) + HOLD_AT - 1  # KV positions the session holds
            out = inject(c, "step-forged-session", w["data_addr"], st["epoch"],
                         st["plan"]["plan_hash"], victim["session_id"], 0, filled)
            got = wait_counter(lambda: counter(c, w["name"], "refused_step"), 1)
            assert got >= 1, "refused_step %d" % got
            print("step-forged-session: %s; refused_step %d" % (out.strip(), got))
        finally:
            release(c)
        finish_generate(p, case)
        check_generate_exact(c, case, c.tmp)
        print("step-forged-session: the victim's ids are the golden ids")


def case_result_forged():
    """A RESULT from a stranger naming a batch in flight (its id and rows
    read from the test hook; the last stage is stopped so the batch stays in
    flight) and giving its sessions another id: refused and counted; the
    real result completes the batch and the ids equal the golden ones."""
    case = golden_case()
    with cluster(["--test-hooks", "--heartbeat-timeout-ms", "600000", "--step-timeout-ms",
                  "600000"]) as c:
        st = c.wait_serving(2)
        results = c.coord.wait_line(r"results on (tcp://\S+)").group(1)
        _, last = worker(st, 1)
        c.workers[last].kill(signal.SIGSTOP)
        p = None
        try:
            p = start_generate(c, case)
            deadline = TIMEOUT
            st2 = wait_held(c, 0, also=lambda s: len(s["sched"]["hold"]["in_flight"]) > 0,
                            timeout=deadline)
            b = st2["sched"]["hold"]["in_flight"][0]
            token = (case["expected_ids"][0] + 1) % case["n_vocab"]
            f0 = c.status()["counters"]["forged_results"]
            out = inject(c, "result-forged", results, st["epoch"], b["batch_id"],
                         ",".join(str(x) for x in b["session_ids"]), token)
            got = wait_counter(lambda: c.status()["counters"]["forged_results"], f0 + 1)
            assert got >= f0 + 1, "forged_results %d" % got
            print("result-forged: %s; forged_results %d -> %d" % (out.strip(), f0, got))
        finally:
            c.workers[last].kill(signal.SIGCONT)
        finish_generate(p, case)
        check_generate_exact(c, case, c.tmp)
        print("result-forged: the real result applied; golden ids")


def case_control_bound():
    """Finding 8: worker control is bound to its receiver. An EndSessions
    sealed for worker A by the joined coordinator's id (the cluster key held)
    is dropped by worker B, which holds the same key (auth_failed counted),
    and the same bytes are taken by A; a Commit not bound to any worker is
    refused before its Prepare is looked for (refused_control); the
    cluster serves the golden ids."""
    case = golden_case()
    with cluster() as c:
        st = c.wait_serving(2)
        wa, ia = worker(st, 0)
        wb, _ = worker(st, 1)
        coord = control_sender(c.workers[ia])
        a0 = counter(c, wb["name"], "auth_failed")
        out = inject(c, "end-sessions-bound", wa["ctl_addr"], wb["ctl_addr"], "--sender", coord)
        assert re.search(r"^B: reply: none", out, re.M), out
        assert re.search(r"^A: reply: ack$", out, re.M), out
        got = wait_counter(lambda: counter(c, wb["name"], "auth_failed"), a0 + 1)
        assert got >= a0 + 1, "auth_failed of %s: %d -> %d" % (wb["name"], a0, got)
        print("control-bound: %s; auth_failed of %s %d -> %d"
              % (" | ".join(out.strip().splitlines()), wb["name"], a0, got))
        out = inject(c, "commit-unprepared", wa["ctl_addr"], U64_MAX, "--sender", coord,
                     "--unbound")
        assert "is not bound to this worker" in out, out
        print("control-bound: unbound Commit as the coordinator: %s" % out.strip())
        st1 = c.status()  # the counters only logged before are in the status (finding 9)
        assert st1["counters"]["reply_failures"] == 0, st1["counters"]
        for w in st1["workers"]:
            assert w["counters"]["reply_failures"] == 0 and \
                w["counters"]["probe_refused"] == 0, w["counters"]
        refused_and_serving(c, st, wa, case, "control-bound", n=1)


def join_sender(c, name):
    """The worker id of worker `name` and the envelope sender of its
    control requests, from the coordinator's join line (INFO)."""
    deadline = time.time() + TIMEOUT
    while time.time() < deadline:
        m = re.search(r"worker (\d+) '%s' joined \(sender (\d+)\)" % name, c.coord.stderr())
        if m:
            return m.group(1), m.group(2)
        time.sleep(0.05)
    raise AssertionError("no join line for %s" % name)


def case_stale_off_route():
    """Finding 4 (routes): a StaleReport from a live member speaking for
    itself (a spare worker: on no route) naming a batch in flight (read
    from the test hook; the last stage is stopped so it stays in flight) is
    refused (EAUTH) and counted (stale_refused); the batch completes and
    the ids are the golden ones."""
    case = golden_case()
    with cluster(["--test-hooks", "--heartbeat-timeout-ms", "600000", "--step-timeout-ms",
                  "600000"]) as c:
        st = c.wait_serving(2)
        spare = c.add_worker("--spare")
        sid, ssender = join_sender(c, spare.name)
        _, last = worker(st, 1)
        c.workers[last].kill(signal.SIGSTOP)
        p = None
        try:
            p = start_generate(c, case)
            st2 = wait_held(c, 0, also=lambda s: len(s["sched"]["hold"]["in_flight"]) > 0)
            b = st2["sched"]["hold"]["in_flight"][0]
            s0 = c.status()["security"]["stale_refused"]
            r = subprocess.run([INJECT, "role", c.addr, "stale-as", "--id", sid, "--sender",
                                ssender, "--batch", str(b["batch_id"])] + c.inject_key(),
                               capture_output=True, text=True, timeout=TIMEOUT)
            assert r.returncode == 0, r.stderr
            assert "does not pass through worker %s" % sid in r.stdout, r.stdout
            s1 = c.status()["security"]["stale_refused"]
            assert s1 == s0 + 1, "stale_refused %d -> %d" % (s0, s1)
            print("stale-off-route: %s; stale_refused %d -> %d" % (r.stdout.strip(), s0, s1))
        finally:
            c.workers[last].kill(signal.SIGCONT)
        finish_generate(p, case)
        check_generate_exact(c, case, c.tmp)
        print("stale-off-route: the batch completed; golden ids")


CASES = {
    "control_bound": case_control_bound,
    "stale_off_route": case_stale_off_route,
    "commit_unprepared": case_commit_unprepared,
    "prepare_commit_reroute": case_prepare_commit_reroute,
    "commit_bad_hash": case_commit_bad_hash,
    "step_forged_session": case_step_forged_session,
    "result_forged": case_result_forged,
}

if __name__ == "__main__":
    run_cases(CASES)
