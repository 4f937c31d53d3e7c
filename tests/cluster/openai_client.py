#!/usr/bin/env python3
"""openai_client.py - the official `openai` npm client against Strata's
HTTP API, alone or side by side with llama.cpp's llama-server on the same
GGUF (issue 15's acceptance; the checks are in
tests/cluster/openai/compare.mjs).

Usage: openai_client.py BUILD_DIR alone|llama
Installs tests/cluster/openai/package.json into BUILD_DIR/tests/cluster/
openai-node with `npm install` (npm's registry only; a failed install FAILS
the test). `alone` (http-openai-client): every check the client makes of
Strata's answers, streams, usage chunks, errors and aborts; it needs no
reference, so it runs on every machine. `llama` (http-openai-llama): the
same and, against ~/.cache/llama-ref/bin/llama-server (built by
../shared/tools/build-llama-ref.sh; STRATA_LLAMA_SERVER overrides), equal
prompt_tokens and mostly equal greedy texts; when llama-server is absent it
says so loudly and exits 77 (skipped). Exits 0 when every check passed."""

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import BUILD, TIMEOUT, Proc, model  # noqa: E402
from http_api import MODEL, MODEL_ID, HttpCluster, free_port, write_keys  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
LLAMA = os.environ.get("STRATA_LLAMA_SERVER",
                       os.path.expanduser("~/.cache/llama-ref/bin/llama-server"))
KEY = "sk-test-openai-0001"
SKIP = 77
NPM_TIMEOUT = 600
NODE_TIMEOUT = 300


def npm_install():
    """The client package in the build dir; its directory. http-openai-client
    and http-openai-llama run at once and share it: an exclusive lock on
    openai-node.lock holds the copy and the install, the files are replaced
    whole (a node starting meanwhile reads the old or the new one), and a
    stamp written after a successful install (not node_modules/, which a
    broken install leaves behind) says that it is done."""
    dst = os.path.join(BUILD, "tests", "cluster", "openai-node")
    os.makedirs(dst, exist_ok=True)
    with open(dst + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for f in ("package.json", "compare.mjs"):
            tmp = os.path.join(dst, f + ".%d.tmp" % os.getpid())
            shutil.copyfile(os.path.join(HERE, "openai", f), tmp)
            os.replace(tmp, os.path.join(dst, f))
        stamp = os.path.join(dst, "installed.stamp")
        if not os.path.exists(stamp):
            r = subprocess.run(["npm", "install", "--no-audit", "--no-fund"], cwd=dst,
                               capture_output=True, text=True, timeout=NPM_TIMEOUT)
            if r.returncode != 0:
                raise AssertionError("npm install of the openai client failed (%d):\n%s%s"
                                     % (r.returncode, r.stdout[-2000:], r.stderr[-2000:]))
            with open(stamp, "w") as f:
                f.write("npm install done\n")
    return dst


def wait_http(port, proc, timeout=TIMEOUT):
    import http.client
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass  # not listening yet
        if proc.p.poll() is not None:
            with open(proc.err_path, encoding="utf-8", errors="replace") as f:
                raise AssertionError("llama-server exited: %s" % f.read()[-2000:])
        time.sleep(0.2)
    raise AssertionError("llama-server not healthy within %ss" % timeout)


def main(mode):
    if mode not in ("alone", "llama"):
        raise AssertionError("usage: openai_client.py BUILD_DIR alone|llama")
    if mode == "llama" and not os.access(LLAMA, os.X_OK):
        print("=" * 72)
        print("SKIPPED: llama-server, the reference, is not built at %s." % LLAMA)
        print("Build it with ../shared/tools/build-llama-ref.sh (or set STRATA_LLAMA_SERVER).")
        print("=" * 72)
        return SKIP
    node_dir = npm_install()
    tmp = tempfile.mkdtemp(prefix="strata-openai-%d-" % os.getpid())
    keys = write_keys(tmp, KEY + "\n", 0o600)
    # f32 boundaries and the reference's oracle settings (f32 KV, no flash
    # attention), so greedy texts part only where kernels round differently
    with HttpCluster(["--api-key-file", keys, "--wire", "f32"]) as c:
        if mode == "alone":
            compare(c, None, None, node_dir)
            return 0
        port = free_port()
        ref = Proc(tmp, "llama-server", [LLAMA, "-m", model(MODEL), "--host", "127.0.0.1",
                                         "--port", str(port), "-np", "1", "-t", "1",
                                         "--no-jinja", "--no-webui", "-ctk", "f32", "-ctv", "f32",
                                         "-fa", "off"])
        try:
            compare(c, ref, port, node_dir)
        finally:
            ref.kill()
            ref.p.wait()
    return 0


def compare(c, ref, port, node_dir):
    """Runs compare.mjs against the cluster c and llama-server ref (None:
    Strata alone)."""
    if ref is not None:
        wait_http(port, ref)
    r = subprocess.run(["node", "compare.mjs", "http://%s:%d" % (c.host, c.port), KEY,
                        "-" if ref is None else "http://127.0.0.1:%d" % port, MODEL_ID],
                       cwd=node_dir,
                       capture_output=True, encoding="utf-8", errors="replace",
                       timeout=NODE_TIMEOUT)
    print(r.stdout + r.stderr)
    if r.returncode != 0:
        raise AssertionError("compare.mjs failed (%d)" % r.returncode)
    deadline = time.time() + TIMEOUT
    while True:
        st = c.status()
        if st["requests"] == 0 and st["sched"]["running"] == 0 and st["sched"]["queued"] == 0:
            break
        assert time.time() < deadline, "requests left after the client test: %s" % st["sched"]
        time.sleep(0.1)
    print("no request left after the aborted streams")


if __name__ == "__main__":
    try:
        rc = main(sys.argv[2] if len(sys.argv) > 2 else "")
    except Exception as e:  # report like the other cluster tests
        print("FAIL: openai: %s: %s" % (type(e).__name__, e))
        print("0 passed, 1 failed")
        sys.exit(1)
    if rc == 0:
        print("1 passed, 0 failed")
    sys.exit(rc)
