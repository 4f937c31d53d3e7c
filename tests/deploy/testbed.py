#!/usr/bin/env python3
"""deploy/testbed.sh with its delays added by strata-delayer (docs/testbed.md).

Usage: testbed.py BUILD_DIR

`deploy/testbed.sh up 3 --link 0:20ms --delay-by delayer` on the golden
case's model (a coordinator and two workers, each in its own network
namespace, every data-plane listener behind a delayer holding its sender
host's 20 ms), then:
  - greedy ids through the test bed equal the golden ids (the delayers pass
    every activation and result byte on, in order);
  - each worker's measured link latency (status --json) is at least the
    delay its sender adds (the probe's bytes wait it), and a generation of
    N ids takes at least (N - 1) x 2 x 20 ms: each decode step crosses
    worker 1 -> worker 2 and worker 2 -> the coordinator's results, each
    held 20 ms. Only floors: a slow machine makes them larger, never
    smaller;
  - `testbed.sh delay` fronts another service with the host's delay;
  - `down` removes the namespaces and stops every process.
The namespaces are testbed.sh's fixed ones (stb-*): nothing else on the
machine may use the test bed meanwhile. Needs root; skipped (77) without.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "cluster"))
import cluster  # noqa: E402
from cluster import STRATA, TIMEOUT, golden_cases, model, parse_ids  # noqa: E402

ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
TB = os.path.join(ROOT, "deploy", "testbed.sh")
DELAY_MS = 20  # each worker host's egress delay
N_IDS = 12     # ids generated through the test bed
ECHO_PORT = 7200  # host 1: the echo server; its delayer on ECHO_PORT + 1

# an echo server on HOST PORT: prints "echoing" once listening, echoes one
# connection at a time until killed
ECHO = """import socket, sys
s = socket.create_server((sys.argv[1], int(sys.argv[2])))
print("echoing", flush=True)
while True:
    c, _ = s.accept()
    while True:
        b = c.recv(65536)
        if not b:
            break
        c.sendall(b)
    c.close()
"""
# one round trip of 1000 bytes to HOST PORT: prints "SECONDS intact|changed"
ROUND_TRIP = """import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=60)
msg = bytes(range(250)) * 4
t = time.monotonic()
s.sendall(msg)
got = b""
while len(got) < len(msg):
    b = s.recv(65536)
    if not b:
        break
    got += b
print("%.4f %s" % (time.monotonic() - t, "intact" if got == msg else "changed"))
"""


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def tb(env, *args, check=True, timeout=TIMEOUT):
    r = subprocess.run([TB] + list(args), capture_output=True, text=True, env=env,
                       timeout=timeout)
    if check and r.returncode != 0:
        fail("testbed.sh %s: exit %d: %s %s" % (" ".join(args), r.returncode, r.stdout[-800:],
                                                r.stderr[-800:]))
    return r


def namespaces():
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
    return [l.split()[0] for l in r.stdout.splitlines() if l.startswith("stb-")]


def main():
    if os.geteuid() != 0:
        print("skip: needs root for network namespaces")
        sys.exit(77)
    if namespaces():
        fail("the test bed's namespaces exist already (%s): another test bed is up" %
             namespaces())
    tmp = tempfile.mkdtemp(prefix="strata-testbed-")
    env = dict(os.environ, STRATA_TESTBED=tmp, BUILD_DIR=cluster.BUILD,
               STRATA=STRATA)
    case = [c for c in golden_cases() if c["model"] == "stories260K.gguf"][0]
    up = False
    procs, pid = [], None
    try:
        r = tb(env, "up", "3", "--link", "0:%dms" % DELAY_MS, "--model", model(case["model"]),
               "--build", cluster.BUILD, "--delay-by", "delayer", "--threads", "1",
               "--", "--split", "3,2")
        up = True
        links = open(os.path.join(tmp, "links")).read()
        if links.count("(strata-delayer)") != 2:
            fail("the links do not say strata-delayer: %r" % links)
        print("up: %s" % " | ".join(links.strip().splitlines()))
        addr = open(os.path.join(tmp, "addr")).read().strip()
        key = os.path.join(tmp, "cluster.key")

        deadline, st = time.time() + TIMEOUT, None
        while time.time() < deadline:
            r = tb(env, "status", "--json", check=False)
            if r.returncode == 0:
                st = json.loads(r.stdout)
                ls = st.get("links") or []
                if st.get("serving") and ls and all(l.get("measured") for l in ls):
                    break
            time.sleep(0.5)
        else:
            fail("not serving on measured links in %d s: %s" % (TIMEOUT, st))
        for l in st["links"]:
            # the probe's bytes leave a worker host: they wait its delay
            if l["latency_ms"] < DELAY_MS:
                fail("link %s -> %s measured %.3f ms < the %d ms delay" %
                     (l.get("from_name"), l.get("to_name"), l["latency_ms"], DELAY_MS))
        print("links measured: %s" % ", ".join("%s->%s %.1f ms" % (
            l.get("from_name"), l.get("to_name"), l["latency_ms"]) for l in st["links"]))

        ids_in = ",".join(map(str, case["prompt_ids"]))
        t0 = time.monotonic()
        r = tb(env, "exec", "0", STRATA, "generate", "--coordinator", addr, "--cluster-key", key,
               "--prompt-ids", ids_in, "-n", str(N_IDS), "--temp", "0", "--ids")
        took = time.monotonic() - t0
        got = parse_ids(r.stdout)
        if got != case["expected_ids"][:N_IDS]:
            fail("ids through the test bed %s != golden %s" % (got, case["expected_ids"][:N_IDS]))
        floor = (N_IDS - 1) * 2 * DELAY_MS / 1e3
        if took < floor:
            fail("%d ids in %.3f s: under the %.3f s the delays alone take" % (N_IDS, took, floor))
        print("generate: %d ids equal the golden ids, in %.2f s (the delays' floor %.2f s)" %
              (N_IDS, took, floor))

        # `delay`: an echo server in host 1 behind a delayer there; a round trip
        # from host 0 waits host 1's delay on the way back (host 0 adds none)
        echo = subprocess.Popen([TB, "exec", "1", sys.executable, "-c", ECHO, "10.233.0.2",
                                 str(ECHO_PORT)], env=env, stdout=subprocess.PIPE, text=True)
        procs.append(echo)
        if echo.stdout.readline().strip() != "echoing":
            fail("the echo server in host 1 did not start")
        r = tb(env, "delay", "1", str(ECHO_PORT + 1), str(ECHO_PORT))
        pid = int(r.stdout.strip().splitlines()[-1])
        r = tb(env, "exec", "0", sys.executable, "-c", ROUND_TRIP, "10.233.0.2",
               str(ECHO_PORT + 1))
        rtt = float(r.stdout.split()[0])
        if r.stdout.split()[1] != "intact":
            fail("delay: bytes through the delayer changed: %r" % r.stdout)
        if rtt < DELAY_MS / 1e3:
            fail("delay: a round trip through host 1's delayer took %.4f s < %d ms" %
                 (rtt, DELAY_MS))
        print("delay: echo in host 1 behind a delayer (pid %d): round trip %.1f ms, bytes "
              "intact (floor %d ms)" % (pid, rtt * 1e3, DELAY_MS))
    finally:
        for p in procs:
            p.kill()
            p.wait()
        if up or namespaces():
            r = tb(env, "down", check=False)
            print("down: %s" % r.stdout.strip())
        shutil.rmtree(tmp, ignore_errors=True)
    left = namespaces()
    if left:
        fail("namespaces left after down: %s" % left)
    if pid is not None:
        try:
            os.kill(pid, 0)
            fail("the delayer %d outlived down" % pid)
        except ProcessLookupError:
            pass
    print("ok: testbed with strata-delayer")


if __name__ == "__main__":
    main()
