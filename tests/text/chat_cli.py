#!/usr/bin/env python3
"""chat_cli.py - `strata chat` end to end on l3-synth-q8_0.gguf (Llama 3
template), stdin from a file, greedy.

Usage: chat_cli.py BUILD_DIR CASE   (CASE: local, coordinator, errors)

local:       two turns; the second turn reuses every id the KV cache holds
             (turn 1's prompt and all generated ids but the last sampled
             one, never evaluated) and prefills only the rest; the replies
             equal those of --no-reuse (every turn prefilled from 0).
coordinator: the same conversation through a coordinator and one worker:
             the same replies, and the coordinator reports the same reuse.
errors:      an unknown --chat-template lists the names; a model without
             template and no override says so."""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "cluster"))
from cluster import Cluster, STRATA, model  # noqa: E402

MODEL = model("l3-synth-q8_0.gguf")
N = "16"
TURNS = "Hello there\nTell me more, please.\n"
STAT = re.compile(r"^chat: turn (\d+): prompt (\d+) tokens, reused (\d+) tokens, prefilled (\d+); "
                  r"generated (\d+) tokens", re.M)
TIMEOUT = 120


def chat(*args, stdin=TURNS, check=True):
    r = subprocess.run([STRATA, "chat", MODEL, "-n", N, "--temp", "0", "--threads", "1"]
                       + list(args), input=stdin, capture_output=True, text=True, timeout=TIMEOUT)
    if check:
        assert r.returncode == 0, "strata chat failed (%d): %s" % (r.returncode, r.stderr)
    return r


def stats(stderr):
    s = [tuple(int(x) for x in m.groups()) for m in STAT.finditer(stderr)]
    assert len(s) == 2, "two stat lines expected in %r" % stderr
    return s


def check_reuse(s, what):
    (_, p1, r1, f1, g1), (_, p2, r2, f2, g2) = s
    assert r1 == 0 and f1 == p1, "%s: turn 1 %s" % (what, s[0])
    # the cache holds turn 1's prompt and its generated ids but the last
    assert r2 == p1 + g1 - 1, "%s: turn 2 reused %d, want %d + %d - 1" % (what, r2, p1, g1)
    assert f2 == p2 - r2
    new = p2 - (p1 + g1)  # the ids of the new turn (turn end, message, header)
    assert f2 <= new + 1, "%s: turn 2 prefilled %d for %d new ids" % (what, f2, new)
    print("%s: turn 1 prompt %d, generated %d; turn 2 prompt %d, reused %d, prefilled %d "
          "(%d new ids)" % (what, p1, g1, p2, r2, f2, new))


def case_local():
    a = chat()
    check_reuse(stats(a.stderr), "local")
    b = chat("--no-reuse")
    sb = stats(b.stderr)
    assert sb[1][2] == 0, "--no-reuse reused %s" % (sb[1],)
    assert a.stdout == b.stdout, "replies differ with and without reuse:\n%r\n%r" % (a.stdout,
                                                                                     b.stdout)
    assert a.stdout.count("\n") == 2, a.stdout
    print("local: replies equal with and without KV reuse (%d bytes)" % len(a.stdout))
    return a.stdout


def case_coordinator():
    local = chat()
    with Cluster(MODEL, ["--min-workers", "1"]) as c:
        c.add_worker()
        c.wait_serving(1)
        r = subprocess.run([STRATA, "chat", MODEL, "-n", N, "--temp", "0", "--coordinator",
                            c.addr], input=TURNS, capture_output=True, text=True, timeout=TIMEOUT)
        assert r.returncode == 0, "strata chat --coordinator failed: %s" % r.stderr
        check_reuse(stats(r.stderr), "coordinator")
        assert r.stdout == local.stdout, "coordinator replies differ from local:\n%r\n%r" % (
            r.stdout, local.stdout)
        print("coordinator: the replies equal the local ones")


def case_errors():
    r = chat("--chat-template", "nosuch", check=False)
    assert r.returncode == 1, r
    for name in ("chatml", "llama2", "mistral-v7", "phi3", "zephyr", "gemma", "llama3"):
        assert name in r.stderr, "%s not listed in %r" % (name, r.stderr)
    r = subprocess.run([STRATA, "chat", model("stories260K.gguf")], input="hi\n",
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 1 and "tokenizer.chat_template" in r.stderr, r.stderr
    r = subprocess.run([STRATA, "chat", model("stories260K.gguf"), "--chat-template", "llama2",
                        "-n", "4", "--temp", "0"], input="hi\n", capture_output=True, text=True,
                       timeout=TIMEOUT)
    assert r.returncode == 0 and "template llama2" in r.stderr, r.stderr
    print("errors: unknown template lists the names; missing template named; override works")


CASES = {"local": case_local, "coordinator": case_coordinator, "errors": case_errors}

if __name__ == "__main__":
    CASES[sys.argv[2]]()
    print("1 passed, 0 failed")
