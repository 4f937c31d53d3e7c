#!/usr/bin/env python3
"""http_api.py - integration tests of the coordinator's OpenAI-compatible HTTP
API (issue 15, docs/http-api.md): real coordinator and worker processes on
loopback (port 0), a 2-worker cluster on l3-synth-q8_0.gguf, driven over
HTTP with the standard library (no HTTP client of our own).

Usage: http.py BUILD_DIR CASE...   (CASE: see CASES at the bottom)
Reuses cluster.py's process helpers; every process is killed at the end,
also on failure. Waits are conditions with deadlines, never fixed sleeps
racing generation (INV-9); the abort case parks requests at a known token
with the test-only step gate. Prints 'N passed, N failed' last."""

import http.client
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402  (reads BUILD from sys.argv[1] like this script)
from cluster import (COORD, STRATA, TIMEOUT, Cluster, hold, model, release,  # noqa: E402
                     wait_held)

MODEL = "l3-synth-q8_0.gguf"
MODEL_ID = "l3-synth-q8_0"
HTTP_TIMEOUT = 60
IDLE = 2000  # idle connections of the hostile case


class HttpCluster(Cluster):
    """A Cluster whose coordinator serves --http on a free loopback port."""

    def __init__(self, coord_args=(), workers=2, wait=True, key=None, encrypt=False):
        super().__init__(model(MODEL), ["--http", "127.0.0.1:0", "--min-workers", str(workers),
                                        "--alias", "strata-test"] + list(coord_args),
                         key=key, encrypt=encrypt)
        m = self.coord.wait_line(r"http on http://([0-9.]+):(\d+)")
        self.host, self.port = m.group(1), int(m.group(2))
        if wait:
            for _ in range(workers):
                self.add_worker()
            self.wait_health()

    def conn(self, timeout=HTTP_TIMEOUT):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, raw=None):
        """(status, headers dict, body bytes) of one request on a new connection."""
        c = self.conn()
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        out = (r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
        c.close()
        return out

    def oversized(self, body):
        """(status, body) of a POST whose body the server refuses before
        reading it all: it answers and closes while we may still send."""
        k = socket.create_connection((self.host, self.port), timeout=HTTP_TIMEOUT)
        k.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                  b"application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
        try:
            k.sendall(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before the end: the answer is waiting
        r = http.client.HTTPResponse(k)
        r.begin()
        out = (r.status, r.read())
        k.close()
        return out

    def post(self, path, body, headers=None):
        s, h, b = self.request("POST", path, body, headers)
        return s, h, json.loads(b)

    def wait_health(self, timeout=TIMEOUT):
        deadline = time.time() + timeout
        while time.time() < deadline:
            s, _, _ = self.request("GET", "/health")
            if s == 200:
                return
            time.sleep(0.1)
        raise AssertionError("/health not 200 within %ss" % timeout)

    def stream(self, path, body, headers=None):
        """(status, events) of a streamed request: events are the parsed
        JSON of each data line, and the string '[DONE]'."""
        c = self.conn()
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        c.request("POST", path, body=json.dumps(body), headers=h)
        r = c.getresponse()
        if r.status != 200:
            out = (r.status, [json.loads(r.read())])
            c.close()
            return out
        assert r.getheader("Content-Type", "").startswith("text/event-stream"), r.getheaders()
        events = []
        for line in sse_lines(r):
            events.append("[DONE]" if line == "[DONE]" else json.loads(line))
        c.close()
        return 200, events


def sse_lines(resp):
    """The data payloads of an SSE response, in order (comments skipped)."""
    buf = b""
    while True:
        chunk = resp.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            for line in ev.decode().split("\n"):
                if line.startswith("data: "):
                    yield line[6:]
    assert buf.strip() == b"", "a partial event at the end: %r" % buf


def check_stream(events, kind):
    """Checks OpenAI's chunk structure; returns (text, finish, usage)."""
    assert events and events[-1] == "[DONE]", "no [DONE] at the end: %r" % events[-3:]
    assert events.count("[DONE]") == 1
    body = events[:-1]
    usage = None
    if body and body[-1]["choices"] == []:
        usage = body[-1]["usage"]
        body = body[:-1]
    obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
    text, finish = "", None
    for i, e in enumerate(body):
        assert "error" not in e, e
        assert e["object"] == obj, e
        ch = e["choices"]
        assert len(ch) == 1 and ch[0]["index"] == 0, e
        last = i == len(body) - 1
        if last:
            assert ch[0]["finish_reason"] in ("stop", "length"), e
            finish = ch[0]["finish_reason"]
        else:
            assert ch[0]["finish_reason"] is None, e
        if kind == "chat":
            d = ch[0]["delta"]
            if i == 0:
                assert d.get("role") == "assistant", e
            if last:
                assert d == {}, "the final chunk's delta is not empty: %r" % e
            text += d.get("content", "")
        else:
            text += ch[0]["text"]
    ids = {e["id"] for e in body}
    assert len(ids) == 1, "chunk ids differ: %r" % ids
    return text, finish, usage


CHAT = [{"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Name three colours."}]


def case_basic():
    with HttpCluster(wait=False) as c:
        s, h, b = c.post("/v1/chat/completions", {"messages": CHAT})
        assert s == 503 and b["error"]["code"] == "no_plan" and "retry-after" in h, (s, h, b)
        s, _, _ = c.request("GET", "/health")
        assert s == 503, s
        c.add_worker()
        c.add_worker()
        c.wait_health()
        s, _, b = c.request("GET", "/v1/models")
        ids = [m["id"] for m in json.loads(b)["data"]]
        assert s == 200 and ids == [MODEL_ID, "strata-test"], (s, b)
        # typed errors, each with its status and OpenAI's shape
        s, _, b = c.post("/v1/chat/completions", {"model": "gpt-9", "messages": CHAT})
        assert s == 404 and b["error"]["code"] == "model_not_found", (s, b)
        s, _, b = c.post("/v1/chat/completions", {"messages": CHAT, "max_tokens": "ten"})
        assert s == 400 and b["error"]["message"].startswith("max_tokens"), (s, b)
        assert b["error"]["type"] == "invalid_request_error", b
        s, _, b = c.post("/v1/chat/completions", {"messages": CHAT, "temperature": [1]})
        assert s == 400 and b["error"]["message"].startswith("temperature"), (s, b)
        s, _, b = c.post("/v1/chat/completions", {"messages": CHAT, "n": 2})
        assert s == 400 and "only n = 1" in b["error"]["message"], (s, b)
        s, _, b = c.request("POST", "/v1/completions", raw='{"prompt": "x",')
        assert s == 400 and json.loads(b)["error"]["code"] == "invalid_json", (s, b)
        s, b = c.oversized(json.dumps({"prompt": "a" * (2 << 20)}).encode())
        assert s == 413 and json.loads(b)["error"]["code"] == "body_too_large", (s, b)
        s, _, _ = c.request("GET", "/v1/nothing")
        assert s == 404, s
        s, _, _ = c.request("GET", "/v1/chat/completions")
        assert s == 405, s
        # streamed text equals the whole answer, greedy; the chunk structure
        req = {"model": "strata-test", "messages": CHAT, "max_tokens": 24, "temperature": 0}
        s, _, full = c.post("/v1/chat/completions", req)
        assert s == 200 and full["object"] == "chat.completion", full
        ch = full["choices"][0]
        assert ch["finish_reason"] in ("stop", "length") and ch["message"]["role"] == "assistant"
        s, ev = c.stream("/v1/chat/completions",
                         dict(req, stream=True, stream_options={"include_usage": True}))
        assert s == 200, ev
        text, finish, usage = check_stream(ev, "chat")
        assert text == ch["message"]["content"], (text, ch)
        assert finish == ch["finish_reason"] and usage == full["usage"], (finish, usage, full)
        assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
        s, ev = c.stream("/v1/chat/completions", dict(req, stream=True))
        assert check_stream(ev, "chat")[2] is None, "a usage chunk nobody asked for"
        print("chat: %d prompt tokens, %r (%s); streamed the same" % (
            usage["prompt_tokens"], text[:40], finish))
        # completions with a token-id array, streamed and not
        creq = {"prompt": [1, 450, 4996, 17354, 1701], "max_tokens": 16, "temperature": 0}
        s, _, cf = c.post("/v1/completions", creq)
        assert s == 200 and cf["object"] == "text_completion", cf
        assert cf["usage"]["prompt_tokens"] == 5, cf
        s, ev = c.stream("/v1/completions",
                         dict(creq, stream=True, stream_options={"include_usage": True}))
        text, finish, usage = check_stream(ev, "completion")
        assert text == cf["choices"][0]["text"] and usage == cf["usage"], (text, cf)
        s, _, b = c.post("/v1/completions", {"prompt": [10 ** 9]})
        assert s == 400 and b["error"]["message"].startswith("prompt[0]"), b
        # a stop string ends the text before it
        s, _, st = c.post("/v1/completions", dict(creq, max_tokens=16))
        whole = st["choices"][0]["text"]
        if len(whole) > 4:
            cut = whole[2:4]
            s, _, sb = c.post("/v1/completions", dict(creq, stop=[cut]))
            got = sb["choices"][0]
            assert got["finish_reason"] == "stop" and got["text"] == whole[:whole.index(cut)], (
                cut, whole, got)
        # session_id: the second turn reuses the first turn's KV
        before = c.status()["sched"]["reused_tokens"]
        turn = {"messages": CHAT, "max_tokens": 8, "temperature": 0, "session_id": "conv-1"}
        s, _, t1 = c.post("/v1/chat/completions", turn)
        conv = CHAT + [{"role": "assistant", "content": t1["choices"][0]["message"]["content"]},
                       {"role": "user", "content": "And three more."}]
        s, _, t2 = c.post("/v1/chat/completions", dict(turn, messages=conv))
        assert s == 200, t2
        reused = c.status()["sched"]["reused_tokens"] - before
        assert reused > 0, "no prompt tokens reused across turns of one session_id"
        print("session_id: %d prompt tokens reused by turn 2" % reused)
        m = wait_metrics(c, "strata_worker_layer_latency_ema_seconds{")  # from a heartbeat
        assert "strata_generated_tokens_total " in m, m[:500]
        assert 'strata_http_requests_total{endpoint="/v1/chat/completions",status="404"} 1' in m
        assert "strata_epoch %d\n" % c.status()["epoch"] in m, m


def wait_metrics(c, text, headers=None, timeout=TIMEOUT):
    """The /metrics text once it contains text (the gateway's copy of the
    coordinator's status is refreshed twice a second)."""
    deadline = time.time() + timeout
    while True:
        s, _, m = c.request("GET", "/metrics", headers=headers)
        m = m.decode()
        if s == 200 and text in m:
            return m
        assert time.time() < deadline, "no %r in /metrics: %s" % (text, m[-3000:])
        time.sleep(0.1)


def write_keys(tmp, text, mode):
    p = os.path.join(tmp, "keys-%o" % mode)
    with open(p, "w") as f:
        f.write(text)
    os.chmod(p, mode)
    return p


def case_keys():
    tmp = tempfile.mkdtemp(prefix="strata-http-%d-" % os.getpid())
    keys = "# test keys\nsk-test-aaaaaaaa\nsk-test-limited rpm=2\n"
    loose = write_keys(tmp, keys, 0o644)
    r = subprocess.run([COORD, "--model", model(MODEL), "--http", "127.0.0.1:0",
                        "--api-key-file", loose], capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode != 0 and "mode 644" in r.stderr, (r.returncode, r.stderr)
    r = subprocess.run([COORD, "--model", model(MODEL), "--http", "0.0.0.0:0"],
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 2 and "--api-key-file" in r.stderr, (r.returncode, r.stderr)
    good = write_keys(tmp, keys, 0o600)
    with HttpCluster(["--api-key-file", good]) as c:
        req = {"messages": CHAT, "max_tokens": 4}
        s, h, b = c.post("/v1/chat/completions", req)
        assert s == 401 and b["error"]["code"] == "invalid_api_key", (s, b)
        s, _, b = c.post("/v1/chat/completions", req, {"Authorization": "Bearer sk-test-aaaaaaab"})
        assert s == 401, (s, b)
        s, _, b = c.post("/v1/chat/completions", req, {"Authorization": "Bearer sk-test-aaaaaaaa"})
        assert s == 200, (s, b)
        s, _, _ = c.request("GET", "/health")
        assert s == 200, "/health must not need a key"
        s, _, _ = c.request("GET", "/v1/models")
        assert s == 401, s
        lim = {"Authorization": "Bearer sk-test-limited"}
        for _ in range(2):
            s, _, b = c.post("/v1/chat/completions", req, lim)
            assert s == 200, (s, b)
        s, h, b = c.post("/v1/chat/completions", req, lim)
        assert s == 429 and b["error"]["code"] == "rate_limit_exceeded", (s, b)
        assert int(h["retry-after"]) >= 1, h
        s, _, b = c.post("/v1/chat/completions", req, {"Authorization": "Bearer sk-test-aaaaaaaa"})
        assert s == 200, "another key is not limited by this one"
        m = c.request("GET", "/metrics", headers={"Authorization": "Bearer sk-test-aaaaaaaa"})[2]
        assert b"strata_http_auth_failures_total 3" in m, m[:2000]
        print("keys: 401 without or with a wrong key, 429 with Retry-After %s" % h["retry-after"])


def case_keyed():
    """A keyed, encrypted cluster: the gateway seals its frames with the
    cluster key like any client; 64 streams at once (each lane its own
    sender, so the replay window refuses nothing) and no frame refused."""
    tmp = tempfile.mkdtemp(prefix="strata-http-%d-" % os.getpid())
    key = os.path.join(tmp, "cluster.key")
    r = subprocess.run([STRATA, "keygen", key], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # --http-per-ip 0: 64 streams of one address, over the default cap of 32
    with HttpCluster(["--http-per-ip", "0"], key=key, encrypt=True) as c:
        assert c.status()["encrypted"] is True
        results = [None] * 64

        def one(i):
            results[i] = c.stream("/v1/completions", {"prompt": "n%d" % i, "max_tokens": 12,
                                                     "temperature": 0, "stream": True})
        ts = [threading.Thread(target=one, args=(i,)) for i in range(64)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        for s, ev in results:
            assert s == 200, ev
            check_stream(ev, "completion")
        st = c.status()
        assert st["counters"]["auth_failed"] == 0, st["counters"]
        print("keyed: 64 concurrent streams through an encrypted cluster, no frame refused")


def case_ping():
    """A stream that waits (parked by the step gate after its first token)
    gets SSE comment pings (--http-ping-s 1), then goes on to [DONE]."""
    with HttpCluster(["--test-hooks", "--http-ping-s", "1"]) as c:
        hold(c, 1)
        k = c.conn()
        k.request("POST", "/v1/chat/completions", body=json.dumps(
            {"messages": CHAT, "max_tokens": 6, "temperature": 0, "stream": True}),
            headers={"Content-Type": "application/json"})
        r = k.getresponse()
        assert r.status == 200, r.status
        wait_held(c, 1, at=1)
        raw = b""
        deadline = time.time() + TIMEOUT
        while raw.count(b": ping\n\n") < 2:
            assert time.time() < deadline, "no pings while waiting: %r" % raw
            raw += r.read1(65536)
        release(c)
        while not raw.endswith(b"data: [DONE]\n\n"):
            got = r.read1(65536)
            assert got, "the stream ended without [DONE]: %r" % raw
            raw += got
        k.close()
        events = [x[6:] for x in raw.decode().split("\n") if x.startswith("data: ")]
        text, finish, _ = check_stream(["[DONE]" if e == "[DONE]" else json.loads(e)
                                        for e in events], "chat")
        assert finish in ("stop", "length"), finish
        print("ping: %d pings while parked, then %d events to [DONE]" % (
            raw.count(b": ping"), len(events)))


def case_abort():
    """20 streams aborted mid-way (each after a token, parked by the step
    gate so none can finish first), then a normal request is served and no
    request is left."""
    with HttpCluster(["--test-hooks", "--max-sessions", "24"]) as c:
        hold(c, 2)
        conns = []
        for i in range(20):
            k = c.conn()
            k.request("POST", "/v1/completions", body=json.dumps(
                {"prompt": "story %d:" % i, "max_tokens": 64, "stream": True}),
                headers={"Content-Type": "application/json"})
            r = k.getresponse()
            assert r.status == 200, r.status
            conns.append((k, r))
        wait_held(c, 20, at=2)
        for k, r in conns:  # each has its first token; then the client goes away
            got = r.read1(65536)
            assert b'"text"' in got, got
            k.sock.shutdown(socket.SHUT_RDWR)
            k.close()
        release(c)
        deadline = time.time() + TIMEOUT
        while True:
            st = c.status()
            q = st["sched"]
            if st["requests"] == 0 and q["running"] == 0 and q["queued"] == 0:
                break
            assert time.time() < deadline, "requests left after the aborts: %s" % json.dumps(q)
            time.sleep(0.1)
        s, _, b = c.post("/v1/completions", {"prompt": "after", "max_tokens": 8})
        assert s == 200 and b["choices"][0]["finish_reason"] in ("stop", "length"), (s, b)
        m = c.request("GET", "/metrics")[2].decode()
        assert "strata_http_disconnects_total 20" in m, [x for x in m.split("\n") if "discon" in x]
        print("abort: 20 streams cancelled, nothing left, the next request served")


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def case_hostile():
    tmp = tempfile.mkdtemp(prefix="strata-http-%d-" % os.getpid())
    good = write_keys(tmp, "sk-test-aaaaaaaa\n", 0o600)
    auth = {"Authorization": "Bearer sk-test-aaaaaaaa"}
    # in a sanitizer build freed memory sits in ASan's quarantine (256 MiB by
    # default), which would count as growth below: keep it small
    os.environ["ASAN_OPTIONS"] = os.environ.get("ASAN_OPTIONS", "") + \
        ":quarantine_size_mb=1:thread_local_quarantine_size_kb=64"
    # --http-per-ip 0: IDLE connections from one address are the point here
    with HttpCluster(["--api-key-file", good, "--http-timeout-s", "5", "--http-per-ip", "0",
                      "--rate-table-size", "64"]) as c:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < IDLE + 256:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, IDLE + 256), hard))
        idle = []
        for _ in range(IDLE):  # connections that never send a byte
            idle.append(socket.create_connection((c.host, c.port)))
        trickle = socket.create_connection((c.host, c.port))
        stop = threading.Event()

        def drip():
            for ch in b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n":
                if stop.is_set():
                    return
                try:
                    trickle.send(bytes([ch]))
                except OSError:
                    return
                time.sleep(0.2)
        t = threading.Thread(target=drip)
        t.start()
        s, _, b = c.post("/v1/completions", {"prompt": "still here", "max_tokens": 4}, auth)
        assert s == 200, (s, b)
        print("hostile: served with %d idle connections and a trickled header; %d threads" % (
            IDLE, len(os.listdir("/proc/%d/task" % c.coord.p.pid))))
        assert len(os.listdir("/proc/%d/task" % c.coord.p.pid)) < 64, "a thread per connection?"
        # a 10 MiB chunked body (no declared length): 413, and the server serves on
        k = c.conn()
        k.putrequest("POST", "/v1/completions")
        k.putheader("Transfer-Encoding", "chunked")
        k.putheader("Authorization", auth["Authorization"])
        k.endheaders()
        piece = b"a" * (1 << 20)
        try:
            for _ in range(10):
                k.send(b"%x\r\n%s\r\n" % (len(piece), piece))
            k.send(b"0\r\n\r\n")
            r = k.getresponse()
            assert r.status == 413, r.status
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused while sending: also fine, if the server goes on serving
        k.close()
        for body in ('{"prompt": [1, 2', '[]', '{"prompt": "x", "max_tokens": -1}',
                     '{"prompt": "x", "stop": {}}'):
            s, _, b = c.request("POST", "/v1/completions", raw=body, headers=auth)
            assert s == 400, (body, s, b)
        # 10,000 distinct keys hammering: 401 each, memory bounded
        rss0 = rss_kib(c.coord.p.pid)
        k = c.conn()
        for i in range(10000):
            k.request("POST", "/v1/completions", body='{"prompt":"x"}',
                      headers={"Authorization": "Bearer sk-wrong-%08d" % i,
                               "Content-Type": "application/json"})
            r = k.getresponse()
            r.read()
            assert r.status == 401, r.status
        k.close()
        rss1 = rss_kib(c.coord.p.pid)
        print("hostile: 10000 wrong keys -> 401; coordinator RSS %d -> %d KiB" % (rss0, rss1))
        assert rss1 - rss0 < 64 * 1024, "RSS grew by %d KiB" % (rss1 - rss0)
        s, _, b = c.post("/v1/completions", {"prompt": "still here", "max_tokens": 4}, auth)
        assert s == 200, (s, b)
        # idle connections are closed after --http-timeout-s
        idle[0].settimeout(TIMEOUT)
        assert idle[0].recv(1) == b"", "an idle connection was not closed"
        stop.set()
        t.join()
        for x in idle + [trickle]:
            x.close()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def case_prometheus():
    prom = shutil.which("prometheus")
    if prom is None:
        raise AssertionError("prometheus is not installed (deploy/setup.sh installs it)")
    tmp = tempfile.mkdtemp(prefix="strata-prom-%d-" % os.getpid())
    with HttpCluster() as c:
        cfg = os.path.join(tmp, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: strata\n    static_configs:\n"
                    "      - targets: ['%s:%d']\n" % (c.host, c.port))
        port = free_port()
        p = c.spawn("prometheus", [prom, "--config.file", cfg, "--storage.tsdb.path",
                                   os.path.join(tmp, "data"), "--web.listen-address",
                                   "127.0.0.1:%d" % port])
        s, _, b = c.post("/v1/completions", {"prompt": "count me", "max_tokens": 6})
        assert s == 200, b
        want = b["usage"]["completion_tokens"]
        deadline = time.time() + TIMEOUT
        last = None
        while time.time() < deadline:
            try:
                q = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                q.request("GET", "/api/v1/query?query=strata_generated_tokens_total")
                last = json.loads(q.getresponse().read())
                q.close()
                res = last["data"]["result"]
                if res and float(res[0]["value"][1]) >= want:
                    print("prometheus: strata_generated_tokens_total = %s" % res[0]["value"][1])
                    return
            except (OSError, ValueError, KeyError):
                pass  # not up yet
            if p.p.poll() is not None:
                raise AssertionError("prometheus exited: %s" % p.stderr()[-2000:])
            time.sleep(0.2)
        raise AssertionError("prometheus never showed the token counter: %r" % last)


CASES = {"basic": case_basic, "keys": case_keys, "keyed": case_keyed, "ping": case_ping,
         "abort": case_abort, "hostile": case_hostile, "prometheus": case_prometheus}

if __name__ == "__main__":
    cluster.run_cases(CASES)
