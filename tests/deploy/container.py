#!/usr/bin/env python3
"""container.py - the container image (deploy/container/build.sh) running a
cluster: opt-in (STRATA_CONTAINER_TEST=1; it builds an image, which takes a
minute or more and needs network access to Debian's archive).

Usage: container.py BUILD_DIR SOURCE_DIR

Builds localhost/strata:test-PID with build.sh, creates a podman network,
starts a coordinator and two workers as containers on it (the workers
find the coordinator by its container name, the cluster key and the model
mounted read-only), waits until `strata status` (a container too) says
serving, generates the golden cases of synth-s-f32 with greedy sampling
from a container and compares the ids with the golden ids and `strata
run`'s on this host; then removes the containers, the network and the
image. Exit 77 when not asked for or when podman, buildah or mmdebstrap is
missing, saying which.

Environment:
  STRATA_CONTAINER_TEST=1     run it
  STRATA_PODMAN_RUN_ARGS      extra `podman run` arguments, split on spaces
                              (e.g. "--ulimit nofile=1024:1024" where the
                              container may not raise its limits)
  STRATA_PODMAN_ARGS          extra global podman arguments (e.g. "--runtime
                              runc" where crun refuses hybrid cgroups)"""

import json
import os
import re
import shutil
import subprocess
import sys
import time

BUILD = os.path.abspath(sys.argv[1])
SRC = os.path.abspath(sys.argv[2])
SHARED = os.environ.get("STRATA_SHARED", os.path.join(SRC, "..", "shared"))
STRATA = os.path.join(BUILD, "cli", "strata")
MODEL = "synth-s-f32.gguf"
TIMEOUT = 120
TAG = "localhost/strata:test-%d" % os.getpid()
NET = "strata-test-%d" % os.getpid()
NAMES = ["strata-coord-%d" % os.getpid()] + ["strata-w%d-%d" % (i, os.getpid()) for i in (0, 1)]
KEY_IN = "/etc/strata/key/cluster.key"


def podman(*args, check=True, timeout=TIMEOUT):
    argv = ["podman"] + os.environ.get("STRATA_PODMAN_ARGS", "").split() + list(args)
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError("%s failed (%d): %s" % (" ".join(argv), r.returncode, r.stderr))
    return r


def run_args(name, key, entry):
    return (["run", "--network", NET, "-v", "%s:%s:ro" % (key, KEY_IN),
             "-v", "%s:/models:ro" % os.path.join(SHARED, "models")] +
            os.environ.get("STRATA_PODMAN_RUN_ARGS", "").split() +
            (["-d", "--name", name] if name else ["--rm"]) +
            ["--entrypoint", "/usr/local/bin/" + entry, TAG])


def cli(key, *args):
    r = podman(*run_args(None, key, "strata"), *args, "--coordinator",
               "tcp://%s:7400" % NAMES[0], "--cluster-key", KEY_IN, check=False)
    return r


def main():
    if os.environ.get("STRATA_CONTAINER_TEST") != "1":
        print("SKIP: opt-in: set STRATA_CONTAINER_TEST=1 (builds an image from Debian's archive)")
        return 77
    missing = [t for t in ("podman", "buildah", "mmdebstrap") if shutil.which(t) is None]
    if missing:
        print("SKIP: not installed: %s (Debian packages of the same names)" % " ".join(missing))
        return 77
    tmp = "/tmp/strata-container-%d" % os.getpid()
    os.makedirs(tmp)
    key = os.path.join(tmp, "cluster.key")
    subprocess.run([STRATA, "keygen", key], check=True, capture_output=True)
    t0 = time.time()
    r = subprocess.run([os.path.join(SRC, "deploy", "container", "build.sh"), BUILD, TAG],
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, "build.sh failed:\n%s%s" % (r.stdout[-3000:], r.stderr[-3000:])
    size = podman("image", "inspect", TAG, "--format", "{{.Size}}").stdout.strip()
    print("ok: build.sh built %s in %.0f s, %.1f MB" % (TAG, time.time() - t0, int(size) / 1e6))
    try:
        podman("network", "create", NET)
        model = "/models/" + MODEL
        podman(*run_args(NAMES[0], key, "strata-coordinator"), "--model", model,
               "--listen", "tcp://0.0.0.0:7400", "--results", "tcp://0.0.0.0:7401", "--no-weights",
               "--advertise", NAMES[0], "--cluster-key", KEY_IN, "--wire", "f32",
               "--min-workers", "2", "--split", "3,3")
        for n in NAMES[1:]:
            podman(*run_args(n, key, "strata-worker"), "--coordinator",
                   "tcp://%s:7400" % NAMES[0], "--model", model, "--listen", "tcp://0.0.0.0:7500",
                   "--advertise", "tcp://%s:7500" % n, "--name", n, "--cluster-key", KEY_IN,
                   "--threads", "1")
        deadline, st = time.time() + TIMEOUT, None
        while time.time() < deadline:
            r = cli(key, "status", "--json")
            st = json.loads(r.stdout) if r.returncode == 0 else None
            if st and st["serving"] and len(st["workers"]) == 2:
                break
            time.sleep(0.5)
        assert st and st["serving"], "not serving in %d s: %s" % (TIMEOUT, st)
        print("ok: coordinator and 2 workers serving in containers on network %s: %s"
              % (NET, ", ".join("%s [%d,%d)" % (w["name"], w["first"], w["last"])
                                for w in st["workers"])))
        with open(os.path.join(SHARED, "golden", "generation.json")) as f:
            cases = [c for c in json.load(f)["cases"] if c["model"] == MODEL]
        for c in cases:
            ids = ",".join(map(str, c["prompt_ids"]))
            r = cli(key, "generate", "--prompt-ids", ids, "-n", str(c["n"]), "--temp", "0",
                    "--ids")
            assert r.returncode == 0, r.stderr
            got = [int(x) for x in re.search(r"^ids: ([0-9,]*)$", r.stdout, re.M)
                   .group(1).split(",") if x]
            ref = subprocess.run([STRATA, "run", os.path.join(SHARED, "models", MODEL),
                                  "--prompt-ids", ids, "-n", str(c["n"]), "--temp", "0",
                                  "--ids", "--threads", "1"], capture_output=True, text=True,
                                 timeout=TIMEOUT)
            want = [int(x) for x in re.search(r"^ids: ([0-9,]*)$", ref.stdout, re.M)
                    .group(1).split(",") if x]
            assert got == c["expected_ids"] == want, (got, c["expected_ids"], want)
            print("ok: prompt %s: %d ids equal the golden ids and strata run's"
                  % (ids[:20], len(got)))
    finally:
        for n in NAMES:
            r = podman("logs", n, check=False)
            if r.returncode == 0:
                sys.stderr.write("---- %s (tail) ----\n%s\n" % (n, (r.stdout + r.stderr)[-1500:]))
            podman("rm", "-f", n, check=False)
        podman("network", "rm", "-f", NET, check=False)
        podman("rmi", "-f", TAG, check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    print("passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
