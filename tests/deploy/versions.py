#!/usr/bin/env python3
"""versions.py - integration tests of versions and upgrades (issue 19,
docs/deploy.md): real coordinator and worker processes on loopback, with
the f32 wire so outputs must equal `strata run`'s and the golden ids.

Usage: versions.py BUILD_DIR CASE...   (CASE: see CASES at the bottom)
Reuses tests/cluster/cluster.py's process helpers; every process is killed
at the end, also on failure. Prints 'N passed, N failed' as its last line.

Cases:
- versions: every binary's --version (release, commit, build type, kernel
  variants; one commit for all); a coordinator and a worker: `strata
  status` shows both builds and the protocol; a Join from a build of the
  future (protocol ST_PROTO_VERSION + 1 that cannot speak ours, `inject req
  ADDR join-future`) is refused with EVERSION naming both protocol
  versions and both builds, and the coordinator logs it; a Join of a newer
  build that still speaks ours (`join-newer`) is accepted at our protocol
  and listed with its own build; the cluster keeps serving the golden ids.
"""

import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cluster"))
import cluster  # noqa: E402  (reads BUILD from sys.argv[1] like this script)
from cluster import (COORD, INJECT, STRATA, WORKER, Cluster, check_generate_exact,  # noqa: E402
                     golden_cases, model)

EMBED = os.path.join(cluster.BUILD, "worker", "strata-embed")
EVERSION = 6  # common/base/err.h
FUTURE_LINE = "99.0.0 (commit inject, release)"  # tests/cluster/inject.c INJ_FUTURE_LINE


def version_of(binary):
    """{prog, release, commit, build, protocol, oldest, compiled, runs,
    selected} parsed from `binary --version`."""
    r = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, (binary, r.returncode, r.stderr)
    m = re.fullmatch(r"(\S+) (\S+)\ncommit (\S+)\nbuild (\S+)\n"
                     r"protocol (\d+) \(interoperates with (\d+)\.\.(\d+)\)\n"
                     r"kernels compiled: ([a-z0-9 ]+); this CPU runs: ([a-z0-9 ]+); "
                     r"selected: ([a-z0-9]+)\n", r.stdout)
    assert m, "%s --version: unexpected text %r" % (binary, r.stdout)
    v = dict(zip(["prog", "release", "commit", "build", "protocol", "oldest", "newest",
                  "compiled", "runs", "selected"], m.groups()))
    assert v["protocol"] == v["newest"], v
    assert "ref" in v["compiled"].split() and v["selected"] in v["runs"].split(), v
    assert set(v["runs"].split()) <= set(v["compiled"].split()), v
    v["line"] = "%s (commit %s, %s)" % (v["release"], v["commit"], v["build"])
    return v


def case_versions():
    progs = {STRATA: "strata", COORD: "strata-coordinator", WORKER: "strata-worker",
             EMBED: "strata-embed"}
    vs = [version_of(b) for b in progs]
    for b, v in zip(progs, vs):
        assert v["prog"] == progs[b], v
        assert (v["line"], v["protocol"]) == (vs[0]["line"], vs[0]["protocol"]), (vs[0], v)
    mine = vs[0]
    print("versions: 4 binaries say %s, protocol %s, kernels %s (selected %s)"
          % (mine["line"], mine["protocol"], mine["compiled"], mine["selected"]))
    name = "synth-s-f32.gguf"
    case = [x for x in golden_cases() if x["model"] == name][0]
    with Cluster(model(name), ["--wire", "f32"]) as c:
        c.add_worker()
        st = c.wait_serving(1)
        assert st["version"] == mine["line"], st["version"]
        assert (st["protocol"], st["protocol_oldest"]) == (int(mine["protocol"]),
                                                           int(mine["oldest"])), st
        w = st["workers"][0]
        assert (w["version"], w["protocol"]) == (mine["line"], int(mine["protocol"])), w
        text = c.cli("status").stdout
        want = "versions: coordinator strata %s, protocol %s" % (mine["line"], mine["protocol"])
        assert want in text and "every worker the same" in text, text

        future = int(mine["protocol"]) + 1
        r = subprocess.run([INJECT, "req", c.addr, "join-future"], capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 0, (r.stdout, r.stderr)
        want = ("reply: error %d unsupported version: protocol %d; coordinator speaks %s "
                "(peer strata %s; coordinator strata %s)"
                % (EVERSION, future, mine["protocol"], FUTURE_LINE, mine["line"]))
        assert r.stdout.strip() == want, "%r != %r" % (r.stdout.strip(), want)
        print("refused: %s" % r.stdout.strip())
        log = c.coord.stderr()
        assert "join refused: unsupported version: protocol %d; coordinator speaks" % future \
            in log, log[-2000:]

        r = subprocess.run([INJECT, "req", c.addr, "join-newer", c.model], capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 0, (r.stdout, r.stderr)
        want = "reply: join_reply protocol %s version %s" % (mine["protocol"], mine["line"])
        assert r.stdout.strip() == want, "%r != %r" % (r.stdout.strip(), want)
        print("accepted at our protocol: %s" % r.stdout.strip())
        st = c.status()
        newer = [x for x in st["workers"] if x["name"] == "inject-newer"]
        assert len(newer) == 1 and newer[0]["version"] == FUTURE_LINE and \
            newer[0]["protocol"] == int(mine["protocol"]), st["workers"]
        text = c.cli("status").stdout
        assert re.search(r"inject-newer +strata %s, protocol %s"
                         % (re.escape(FUTURE_LINE), mine["protocol"]), text), text
        assert re.search(r"worker0 +strata %s, protocol" % re.escape(mine["line"]), text), text
        check_generate_exact(c, case, c.tmp)
        for p in c.procs:
            assert p.p.poll() is None, "%s died" % p.name


CASES = {"versions": case_versions}

if __name__ == "__main__":
    cluster.run_cases(CASES)
