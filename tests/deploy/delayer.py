#!/usr/bin/env python3
"""delayer.py - deploy/delayer.c (strata-delayer, the test bed's TCP delay
proxy) against an echo server on 127.0.0.1.

Usage: delayer.py BUILD_DIR

Cases, each printing a line with its figures:
- integrity: 8 MiB of random bytes through the delayer and back, in order;
- delay floor: a small round trip takes at least the two one-way delays
  (--peer-delay 127.0.0.1=3 towards the target, --delay-ms 2 back); only a
  lower bound is checked, never an upper one (no dependence on speed);
- half-close: 100 bytes then shutdown(SHUT_WR): those 100 bytes then EOF;
- target down: the client's connection is closed (EOF or reset), not left
  hanging, and the delayer stays up;
- bad arguments: exit 2 with a message on stderr;
- many connections: 64 at once, 10 KiB each, echoed intact.
The delayer must end with status 0 on SIGTERM."""

import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

BUILD = os.path.abspath(sys.argv[1])
DELAYER = os.path.join(BUILD, "deploy", "strata-delayer")
HOST = "127.0.0.1"
PEER_DELAY_MS = 3
DELAY_MS = 2
INTEGRITY_BYTES = 8 << 20
ROUND_TRIPS = 5
ROUND_TRIP_BYTES = 16
HALF_CLOSE_BYTES = 100
MANY_CONNECTIONS = 64
MANY_BYTES = 10 << 10
IO_CHUNK = 64 << 10
SOCKET_TIMEOUT_S = 10   # generous: a timeout is a failure, never a measure
STARTUP_TIMEOUT_S = 10  # for the "delaying on" line
EXIT_TIMEOUT_S = 10
EXIT_USAGE = 2

procs = []


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr, flush=True)
    for p, _ in procs:
        if p.poll() is None:
            p.kill()
    sys.exit(1)


def echo_server():
    """An echo server on HOST:0 (a thread per connection; it echoes until
    EOF, then closes); returns its port."""
    ls = socket.socket()
    ls.bind((HOST, 0))
    ls.listen(2 * MANY_CONNECTIONS)

    def serve(c):
        with c:
            try:
                while True:
                    b = c.recv(IO_CHUNK)
                    if not b:
                        break
                    c.sendall(b)
            except OSError:
                pass

    def accept_loop():
        while True:
            c, _ = ls.accept()
            threading.Thread(target=serve, args=(c,), daemon=True).start()

    threading.Thread(target=accept_loop, daemon=True).start()
    return ls.getsockname()[1]


def start_delayer(*args):
    """strata-delayer with args, its stderr in a file; returns (proc, port)."""
    err = tempfile.TemporaryFile()
    p = subprocess.Popen([DELAYER, "--listen", HOST + ":0", *args], stdout=subprocess.PIPE,
                         stderr=err)
    procs.append((p, err))
    ready, _, _ = select.select([p.stdout], [], [], STARTUP_TIMEOUT_S)
    line = p.stdout.readline().decode() if ready else ""
    if not line.startswith("delaying on " + HOST + ":"):
        err.seek(0)
        fail("no 'delaying on' line from %s (got %r; stderr %r)" % (args, line, err.read()))
    return p, int(line.split(":")[-1])


def stderr_of(p):
    for q, err in procs:
        if q is p:
            err.seek(0)
            return err.read().decode(errors="replace")
    return ""


def connect(port):
    s = socket.create_connection((HOST, port), timeout=SOCKET_TIMEOUT_S)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def recv_all(s):
    """Everything until EOF."""
    parts = []
    while True:
        b = s.recv(IO_CHUNK)
        if not b:
            return b"".join(parts)
        parts.append(b)


def recv_exact(s, n):
    parts, got = [], 0
    while got < n:
        b = s.recv(n - got)
        if not b:
            fail("EOF after %d of %d bytes" % (got, n))
        parts.append(b)
        got += len(b)
    return b"".join(parts)


def case_integrity(port):
    data = os.urandom(INTEGRITY_BYTES)
    s = connect(port)
    errors = []

    def send():
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError as e:
            errors.append(e)

    t0 = time.monotonic()
    th = threading.Thread(target=send)
    th.start()
    got = recv_all(s)
    th.join()
    s.close()
    if errors:
        fail("integrity: send failed: %s" % errors[0])
    if got != data:
        diff = next((i for i, (a, b) in enumerate(zip(got, data)) if a != b), min(len(got), len(data)))
        fail("integrity: received %d bytes of %d, first difference at byte %d"
             % (len(got), len(data), diff))
    print("integrity: %d bytes echoed intact in order (%.2f s)"
          % (len(data), time.monotonic() - t0), flush=True)


def case_delay_floor(port):
    floor_ms = PEER_DELAY_MS + DELAY_MS
    msg = b"d" * ROUND_TRIP_BYTES
    s = connect(port)
    times = []
    for _ in range(ROUND_TRIPS):
        t0 = time.monotonic()
        s.sendall(msg)
        got = recv_exact(s, len(msg))
        times.append((time.monotonic() - t0) * 1000)
        if got != msg:
            fail("delay floor: echoed %r, sent %r" % (got, msg))
    s.close()
    times.sort()
    print("delay floor: %d round trips, min %.2f ms, median %.2f ms (floor %d ms)"
          % (len(times), times[0], times[len(times) // 2], floor_ms), flush=True)
    if times[0] < floor_ms:
        fail("delay floor: a round trip took %.3f ms < %d ms (%s)"
             % (times[0], floor_ms, ["%.3f" % t for t in times]))


def echoed(s, msg, what):
    """Reads s to EOF and closes it; fails unless the bytes are msg."""
    try:
        got = recv_all(s)
    except socket.timeout:
        fail("%s: no EOF within %d s" % (what, SOCKET_TIMEOUT_S))
    s.close()
    if got != msg:
        fail("%s: got %d bytes back (equal: %s), sent %d" % (what, len(got), got == msg, len(msg)))
    return got


def case_half_close(port):
    msg = os.urandom(HALF_CLOSE_BYTES)
    s = connect(port)
    s.sendall(msg)
    s.shutdown(socket.SHUT_WR)
    got = echoed(s, msg, "half-close")
    print("half-close: %d bytes then EOF" % len(got), flush=True)


def free_port():
    s = socket.socket()
    s.bind((HOST, 0))
    port = s.getsockname()[1]
    s.close()
    return port


def case_target_down():
    dead = free_port()
    p, port = start_delayer("--to", "%s:%d" % (HOST, dead), "--delay-ms", str(DELAY_MS))
    s = connect(port)
    try:
        got = s.recv(IO_CHUNK)
        how = "EOF" if got == b"" else None
        if got:
            fail("target down: received %r from a dead target" % got)
    except ConnectionResetError:
        how = "reset"
    except socket.timeout:
        fail("target down: the connection hung for %d s" % SOCKET_TIMEOUT_S)
    s.close()
    if p.poll() is not None:
        fail("target down: the delayer exited (%s): %s" % (p.returncode, stderr_of(p)))
    # a second connection is handled the same way: it keeps serving
    s = connect(port)
    try:
        s.recv(IO_CHUNK)
    except ConnectionResetError:
        pass
    except socket.timeout:
        fail("target down: the second connection hung for %d s" % SOCKET_TIMEOUT_S)
    s.close()
    stop(p)
    log = stderr_of(p).strip().splitlines()
    if not log or "connect" not in log[0]:
        fail("target down: no connect failure logged: %r" % log)
    print("target down: client closed (%s), delayer alive, logged %r" % (how, log[0]), flush=True)


def case_bad_args(echo_port):
    to = "%s:%d" % (HOST, echo_port)
    cases = [["--listen", HOST + ":0", "--to", to, "--delay-ms", "-1"],
             ["--listen", HOST + ":0", "--to", to, "--delay-ms", "abc"],
             ["--listen", HOST + ":0"],
             ["--listen", HOST + ":0", "--to", to, "--peer-delay", "1.2.3.4"],
             ["--listen", HOST + ":0", "--to", to, "--delay-ms", "10001"],
             ["--listen", HOST + ":0", "--to", to, "--bogus", "1"]]
    for args in cases:
        r = subprocess.run([DELAYER, *args], capture_output=True, timeout=EXIT_TIMEOUT_S)
        msg = r.stderr.decode(errors="replace").strip()
        if r.returncode != EXIT_USAGE or not msg:
            fail("bad arguments %s: exit %d, stderr %r (expected %d and a message)"
                 % (args, r.returncode, msg, EXIT_USAGE))
        print("bad arguments %s: exit %d, %r" % (" ".join(args), r.returncode,
                                                msg.splitlines()[0]), flush=True)


def case_many(port):
    socks = [connect(port) for _ in range(MANY_CONNECTIONS)]
    sent = [os.urandom(MANY_BYTES) for _ in socks]
    for s, d in zip(socks, sent):
        s.sendall(d)
        s.shutdown(socket.SHUT_WR)
    for i, (s, d) in enumerate(zip(socks, sent)):
        echoed(s, d, "many: connection %d" % i)
    print("many connections: %d at once, %d bytes each, echoed intact"
          % (len(socks), MANY_BYTES), flush=True)


def stop(p):
    p.send_signal(signal.SIGTERM)
    try:
        rc = p.wait(timeout=EXIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        fail("the delayer did not end within %d s of SIGTERM" % EXIT_TIMEOUT_S)
    if rc != 0:
        fail("the delayer ended with %d on SIGTERM: %s" % (rc, stderr_of(p)))
    return rc


def main():
    if not os.access(DELAYER, os.X_OK):
        fail("no %s" % DELAYER)
    echo_port = echo_server()
    p, port = start_delayer("--to", "%s:%d" % (HOST, echo_port), "--delay-ms", str(DELAY_MS),
                            "--peer-delay", "%s=%d" % (HOST, PEER_DELAY_MS))
    print("delayer on port %d towards echo port %d" % (port, echo_port), flush=True)
    case_integrity(port)
    case_delay_floor(port)
    case_half_close(port)
    case_many(port)
    case_target_down()
    case_bad_args(echo_port)
    if p.poll() is not None:
        fail("the delayer exited early (%s): %s" % (p.returncode, stderr_of(p)))
    stop(p)
    log = stderr_of(p).strip()
    print("SIGTERM: exit 0%s" % (", stderr: " + log if log else ""), flush=True)


if __name__ == "__main__":
    try:
        main()
    except (OSError, subprocess.SubprocessError) as e:  # socket.timeout is an OSError
        fail("%s: %s" % (type(e).__name__, e))
