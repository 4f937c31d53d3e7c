#!/usr/bin/env python3
"""http_ports.py - the coordinator's --http on a port of one of its own
listeners (issue 34): the weights server takes --listen's port + 1 by
default, so `--listen tcp://127.0.0.1:P --http 127.0.0.1:P+1` must say
that its own weights server holds the port and which flag sets it (it
said "cannot listen (address in use, or not local)" and nothing more).

Usage: http_ports.py BUILD_DIR CASE...   (CASE: see CASES at the bottom)
The coordinator refuses such a command line before it binds anything, so
no port is ever held here; P is a port the kernel gave this test (never a
fixed number). Prints 'N passed, N failed' last."""

import os
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402  (reads BUILD from sys.argv[1] like this script)
from cluster import COORD, TIMEOUT  # noqa: E402

MODEL = "l3-synth-q8_0.gguf"
USAGE = 2  # main.c's exit code for a command line it refuses


def free_port():
    """A port the kernel chose, below 65535 (its + 1 must be a port too)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        if p < 65535:
            return p


def two_ports():
    """Two distinct ports the kernel chose."""
    while True:
        a, b = free_port(), free_port()
        if a != b:
            return a, b


def refused(args, needle):
    """Runs the coordinator on args; asserts it exits with USAGE and
    stderr holds needle; returns stderr."""
    r = subprocess.run([COORD, "--model", cluster.model(MODEL)] + args, capture_output=True,
                       text=True, timeout=TIMEOUT)
    assert r.returncode == USAGE, "exit %d, stderr %r" % (r.returncode, r.stderr)
    assert needle in r.stderr, "%r lacks %r" % (r.stderr, needle)
    assert "cannot listen" not in r.stderr, r.stderr
    print("  %s" % r.stderr.strip())
    return r.stderr


def case_weights_default():
    p = free_port()
    refused(["--listen", "tcp://127.0.0.1:%d" % p, "--http", "127.0.0.1:%d" % (p + 1)],
            "--http 127.0.0.1:%d: port taken by this coordinator's weights server "
            "tcp://127.0.0.1:%d (--weights, default --listen's port + 1)" % (p + 1, p + 1))


def case_weights_given():
    p, w = two_ports()
    refused(["--listen", "tcp://127.0.0.1:%d" % p, "--weights", "tcp://127.0.0.1:%d" % w,
             "--http", "127.0.0.1:%d" % w],
            "--http 127.0.0.1:%d: port taken by this coordinator's weights server "
            "tcp://127.0.0.1:%d (--weights)" % (w, w))


def case_listen():
    p = free_port()
    refused(["--listen", "tcp://127.0.0.1:%d" % p, "--weights", cluster.WEIGHTS_ANY,
             "--http", "127.0.0.1:%d" % p],
            "--http 127.0.0.1:%d: port taken by this coordinator's control socket "
            "tcp://127.0.0.1:%d (--listen)" % (p, p))


def case_results():
    p, r = two_ports()
    refused(["--listen", "tcp://127.0.0.1:%d" % p, "--weights", cluster.WEIGHTS_ANY,
             "--results", "tcp://127.0.0.1:%d" % r, "--http", "127.0.0.1:%d" % r],
            "--http 127.0.0.1:%d: port taken by this coordinator's results socket "
            "tcp://127.0.0.1:%d (--results)" % (r, r))


CASES = {"weights_default": case_weights_default, "weights_given": case_weights_given,
         "listen": case_listen, "results": case_results}

if __name__ == "__main__":
    cluster.run_cases(CASES)
