#!/usr/bin/env python3
"""security.py - integration tests of protected mode and encryption
(issue 11): without a cluster key nothing listens beyond loopback unless
--insecure (which warns once); --encrypt seals every frame, and every
member (workers, CLI) must agree on it; frames of another key or mode are
dropped and counted; `strata status` says whether the cluster is keyed and
encrypted; a keyless loopback coordinator still authenticates every frame
with a key it generates (issue 12).

Usage: security.py BUILD_DIR CASE...   (CASE: see CASES at the bottom)
Reuses cluster.py's process helpers; every process is killed at the end,
also on failure. Prints 'N passed, N failed' as its last line."""

import os
import re
import socket
import stat
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402  (reads BUILD from sys.argv[1] like this script)
from cluster import (COORD, INJECT, STRATA, WORKER, Cluster, check_generate_exact,  # noqa: E402
                     golden_cases, local_key_path, model, WEIGHTS_ANY)

SYNTH = "synth-s-f32.gguf"
START_S = 30  # a refused start must end well within this


def golden_case():
    return [x for x in golden_cases() if x["model"] == SYNTH][0]


def keygen(tmp, name):
    path = os.path.join(tmp, name)
    r = subprocess.run([STRATA, "keygen", path], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert os.stat(path).st_mode & 0o777 == 0o600
    r = subprocess.run([STRATA, "keygen", path], capture_output=True, text=True)
    assert r.returncode != 0, "keygen overwrote an existing key"
    return path


def refused(argv, what):
    """argv must exit at once with a message naming --cluster-key and --insecure."""
    r = subprocess.run(argv, capture_output=True, text=True, timeout=START_S)
    assert r.returncode != 0, "%s started: %s" % (what, r.stdout)
    assert "--cluster-key" in r.stderr and "--insecure" in r.stderr, \
        "%s: message does not name --cluster-key and --insecure: %s" % (what, r.stderr)
    return r.stderr.strip()


def insecure_warnings(proc):
    return [ln for ln in proc.stderr().splitlines() if "--insecure:" in ln]


def wait_counter(get, at_least, timeout=10):
    deadline = time.time() + timeout
    v = get()
    while time.time() < deadline and v < at_least:
        time.sleep(0.2)
        v = get()
    return v


def case_protected():
    """INV-8: keyless listeners beyond loopback are refused (coordinator
    --listen and --results, worker --listen); --insecure starts them with one
    warning each and the cluster serves the golden ids; the default listen
    address is loopback; a keyed coordinator may listen anywhere."""
    m = model(SYNTH)
    msg = refused([COORD, "--model", m, "--listen", "tcp://0.0.0.0:0"], "coordinator 0.0.0.0")
    print("protected: coordinator refused: %s" % msg)
    refused([COORD, "--model", m, "--results", "tcp://0.0.0.0:0"], "coordinator --results")
    refused([COORD, "--model", m, "--listen", "tcp://[::]:0"], "coordinator [::]")
    msg = refused([WORKER, "--coordinator", "tcp://127.0.0.1:1", "--model", m, "--listen",
                   "tcp://0.0.0.0:0"], "worker 0.0.0.0")
    print("protected: worker refused: %s" % msg)
    tmp = tempfile.mkdtemp(prefix="strata-sec-%d-" % os.getpid())
    key = keygen(tmp, "k")
    case = golden_case()
    # a fixed split, so both workers (the --insecure one and the default one)
    # serve whatever their measured speeds (INV-9)
    with Cluster(m, ["--wire", "f32", "--insecure", "--min-workers", "2", "--split", "3,3"],
                 listen="tcp://0.0.0.0:0") as c:
        w = c.add_worker("--insecure", listen="tcp://0.0.0.0:0")
        d = c.add_worker()  # no --listen: the default must be loopback
        assert d.data_addr.startswith("tcp://127.0.0.1:"), d.data_addr
        st = c.wait_serving(2)
        assert st["keyed"] is False and st["encrypted"] is False, st
        check_generate_exact(c, case, c.tmp)
        for p in (c.coord, w):
            n = len(insecure_warnings(p))
            assert n == 1, "%s logged %d --insecure warnings:\n%s" % (p.name, n, p.stderr())
        assert not insecure_warnings(d), d.stderr()
        print("protected: --insecure on 0.0.0.0 serves golden ids; one warning each: %s"
              % insecure_warnings(c.coord)[0])
        r = subprocess.run([STRATA, "status", "--coordinator", c.addr], capture_output=True,
                           text=True, timeout=30)
        assert "security: open" in r.stdout, r.stdout
    with Cluster(m, ["--wire", "f32"], key=key, listen="tcp://0.0.0.0:0") as c:
        w = c.add_worker(listen="tcp://0.0.0.0:0")
        st = c.wait_serving(1)
        assert st["keyed"] is True and st["encrypted"] is False, st
        assert not insecure_warnings(c.coord) and not insecure_warnings(w)
        r = c.cli("status")
        assert "security: keyed (every frame MACed; not encrypted)" in r.stdout, r.stdout
        check_generate_exact(c, case, c.tmp)
        print("protected: a keyed cluster on 0.0.0.0 starts without --insecure")


def case_encrypt():
    """A keyed + encrypted cluster (f32 wire, two stages) gives the golden
    ids and `strata run`'s logits bit for bit; status says keyed and
    encrypted; a worker or CLI without --encrypt gets an error naming it and
    stays out; frames sealed with another key, MAC-only, or with a broken
    tag are dropped and counted; serving goes on."""
    tmp = tempfile.mkdtemp(prefix="strata-sec-%d-" % os.getpid())
    k1, k2 = keygen(tmp, "k1"), keygen(tmp, "k2")
    m = model(SYNTH)
    r = subprocess.run([WORKER, "--coordinator", "tcp://127.0.0.1:1", "--model", m,
                        "--encrypt"], capture_output=True, text=True, timeout=START_S)
    assert r.returncode != 0 and "--cluster-key" in r.stderr, r.stderr
    r = subprocess.run([STRATA, "status", "--coordinator", "tcp://127.0.0.1:1", "--encrypt"],
                       capture_output=True, text=True, timeout=START_S)
    assert r.returncode != 0 and "--cluster-key" in r.stderr, r.stderr
    case = golden_case()
    with Cluster(m, ["--wire", "f32", "--min-workers", "2", "--split", "3,3"], key=k1,
                 encrypt=True) as c:
        good = c.add_worker()
        c.add_worker()
        st = c.wait_serving(2)
        assert st["keyed"] is True and st["encrypted"] is True, st
        r = c.cli("status")
        assert "security: keyed and encrypted" in r.stdout, r.stdout
        check_generate_exact(c, case, c.tmp)
        print("encrypt: f32 wire, 2 stages: golden ids and bit-exact logits; status: %s"
              % re.search(r"security: .*", r.stdout).group(0))
        a0 = st["counters"]["auth_failed"]
        plain = c.add_worker(encrypt=False)
        deadline = time.time() + 20
        while time.time() < deadline and "--encrypt" not in plain.stderr():
            time.sleep(0.2)
        line = [ln for ln in plain.stderr().splitlines() if "--encrypt" in ln]
        assert line, "the worker without --encrypt says nothing: %s" % plain.stderr()
        assert plain.p.poll() is None, "the worker without --encrypt died"
        st = c.status()
        assert sorted(w["name"] for w in st["workers"]) == ["worker0", "worker1"], st["workers"]
        assert st["counters"]["auth_failed"] > a0, st["counters"]
        print("encrypt: worker without --encrypt kept out: %s" % line[0])
        r = subprocess.run([STRATA, "status", "--coordinator", c.addr, "--cluster-key", k1],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode != 0 and "--encrypt" in r.stderr, (r.stdout, r.stderr)
        print("encrypt: CLI without --encrypt: %s" % r.stderr.strip())
        plain.kill()

        def good_auth():
            w = [x for x in c.status()["workers"] if x["name"] == "worker0"][0]
            return w["counters"]["auth_failed"]
        b0 = good_auth()
        for args in (["--key", k2, "--encrypt"], ["--key", k1], ["--key", k1, "--encrypt",
                                                                  "--bad-mac"]):
            r = subprocess.run([INJECT, "step", good.data_addr, str(st["epoch"])] + args,
                               capture_output=True, text=True, timeout=30)
            assert r.returncode == 0, r.stderr
        got = wait_counter(good_auth, b0 + 3)
        assert got >= b0 + 3, "worker0 counted %d of 3 refused frames" % (got - b0)
        print("encrypt: frames sealed with another key, MAC-only, and with a broken tag: "
              "dropped and counted (worker0 auth_failed %d -> %d)" % (b0, got))
        check_generate_exact(c, case, c.tmp)


def generate_ids(c, case, tmp, tag):
    lc = os.path.join(tmp, tag + ".logits")
    r = c.cli("generate", "--prompt-ids", ",".join(map(str, case["prompt_ids"])), "-n",
              str(case["n"]), "--temp", "0", "--ids", "--logits-out", lc)
    ids = [int(x) for x in re.search(r"^ids: ([0-9,]*)$", r.stdout, re.M).group(1).split(",")]
    with open(lc, "rb") as f:
        return ids, f.read()


def case_encrypt_wires():
    """Encryption changes no bit: for the f16, bf16, i8 and bf16 + zstd
    wires, an encrypted two-stage cluster gives the same ids and logits as a
    keyed (MAC-only) one, and (on this model) the golden ids of `strata run`."""
    tmp = tempfile.mkdtemp(prefix="strata-sec-%d-" % os.getpid())
    key = keygen(tmp, "k")
    case = golden_case()
    for wire in ("f16", "bf16", "i8", "bf16+zstd"):
        args = ["--wire", wire.split("+")[0], "--min-workers", "2", "--split", "3,3"]
        if wire.endswith("+zstd"):
            args.append("--zstd")
        out = {}
        for enc in (False, True):
            with Cluster(model(SYNTH), args, key=key, encrypt=enc) as c:
                c.add_worker()
                c.add_worker()
                st = c.wait_serving(2)
                assert st["encrypted"] is enc, st
                out[enc] = generate_ids(c, case, tmp, "%s-%d" % (wire, enc))
        assert out[True][0] == out[False][0], "%s: ids %s encrypted, %s not" % (
            wire, out[True][0], out[False][0])
        assert out[True][1] == out[False][1], "%s: logits differ with encryption" % wire
        assert out[True][0] == case["expected_ids"], "%s: ids %s != golden %s" % (
            wire, out[True][0], case["expected_ids"])
        print("encrypt %s wire: golden ids; ids and logits equal with and without encryption"
              % wire)


def case_keyless():
    """Keyless still authenticated (issue 12): a loopback coordinator
    without --cluster-key writes a 0600 key in a 0700 directory of this
    user's, named after its address; the worker and the CLI read it (status
    keyed); a keyless request is refused by the MAC and counted; a restart
    on the same address keeps the key, and the worker rejoins and serves."""
    with socket.socket() as s:  # a fixed address, to restart on
        s.bind(("127.0.0.1", 0))
        addr = "tcp://127.0.0.1:%d" % s.getsockname()[1]
    path = local_key_path(addr)
    if os.path.exists(path):
        os.unlink(path)  # a key of an earlier run on this port
    args = ["--wire", "f32"]
    case = golden_case()
    with Cluster(model(SYNTH), args, listen=addr) as c:
        assert c.key_file() == path
        f, d = os.stat(path), os.stat(os.path.dirname(path))
        assert stat.S_IMODE(f.st_mode) == 0o600 and f.st_size == 32, oct(f.st_mode)
        assert stat.S_IMODE(d.st_mode) == 0o700 and d.st_uid == os.getuid(), oct(d.st_mode)
        with open(path, "rb") as fh:
            key = fh.read()
        c.add_worker()
        st = c.wait_serving(1)
        assert st["keyed"] is True, st
        assert "using the local coordinator's key" in c.workers[0].stderr()
        assert "security: keyed" in c.cli("status").stdout
        auth0 = st["counters"]["auth_failed"]
        r = subprocess.run([INJECT, "req", c.addr, "status", "--no-key"], capture_output=True,
                           text=True, timeout=60)
        assert "reply: none" in r.stdout, (r.stdout, r.stderr)
        auth = wait_counter(lambda: c.status()["counters"]["auth_failed"], auth0 + 1)
        assert auth >= auth0 + 1, "auth_failed %d" % auth
        r = subprocess.run([INJECT, "req", c.addr, "status"], capture_output=True, text=True,
                           timeout=60)  # the generated key found by address
        assert "reply: status" in r.stdout, (r.stdout, r.stderr)
        print("keyless: %s (0600, 32 bytes); worker and CLI keyed; a keyless status refused "
              "by the MAC (auth_failed %d -> %d)" % (path, auth0, auth))
        assert c.coord.stop() == 0
        c.coord = c.spawn("coordinator2", [COORD, "--model", model(SYNTH), "--listen", addr,
                                           "--heartbeat-ms", "200", "--heartbeat-timeout-ms",
                                           "1500", "--weights", WEIGHTS_ANY] + args +
                           cluster.GOLDEN_KV)
        c.coord.wait_line(r"listening on (tcp://[0-9.]+:\d+)")
        with open(path, "rb") as fh:
            assert fh.read() == key, "the restarted coordinator changed the key"
        c.wait_serving(1)
        check_generate_exact(c, case, c.tmp)
        print("keyless: restarted on %s with the same key; the worker rejoined; golden ids"
              % addr)


CASES = {"protected": case_protected, "encrypt": case_encrypt, "encrypt_wires": case_encrypt_wires,
         "keyless": case_keyless}

if __name__ == "__main__":
    cluster.run_cases(CASES)
