#!/usr/bin/env python3
"""chat_record.py - records the expected prompts of tests/text/chat_cases.json
from llama.cpp's llama-server (POST /apply-template), the oracle of
common/text/chat.c.

The conversations live in chat_cases.json itself (template, case, messages,
add_generation_prompt, optional model); this script replaces each case's
"expected" by what llama-server renders, or with --check only compares.
Templates are llama.cpp's built-in (non-Jinja) ones, as Strata renders
them: the server runs with --no-jinja. A case with "model" is rendered from
that model's own tokenizer.chat_template (recognition included); the others
use --chat-template NAME on the first model given.

The "detect" entries (template text -> the name llama.cpp recognises) are
checked, never rewritten: llama-server started with --chat-template TEXT
must render DETECT_CONVERSATION as it does with --chat-template NAME (the
text must parse as Jinja: the server parses it even with --no-jinja).

usage: tests/text/chat_record.py [--check] [--server PATH] [--models DIR]
                                 [--port N] [--version TEXT]

  --server   llama-server (default ~/.cache/llama-ref/bin/llama-server)
  --models   folder with l3-synth-q8_0.gguf and qw2-synth-q8_0.gguf
             (default $STRATA_SHARED/models, else ../shared/models)
  --port     loopback port to use (default 18431)
  --version  recorded as "recorded_from" (e.g. "node-llama-cpp 3.21.1 (b7xxx)")

Only the Python standard library is used; the server listens on 127.0.0.1
only and is stopped after each template."""
import argparse
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "chat_cases.json")
DEFAULT_MODEL = "l3-synth-q8_0.gguf"
READY_TIMEOUT_S = 300
DETECT_CONVERSATION = [{"role": "system", "content": "S"}, {"role": "user", "content": " A "},
                       {"role": "assistant", "content": " B "}, {"role": "user", "content": "C"}]


def post(port, path, body):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path),
                                 data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read().decode())


def wait_ready(port, proc):
    t0 = time.time()
    while time.time() - t0 < READY_TIMEOUT_S:
        if proc.poll() is not None:
            raise RuntimeError("llama-server exited with %d" % proc.returncode)
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=5) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        time.sleep(0.5)
    raise RuntimeError("llama-server not ready after %d s" % READY_TIMEOUT_S)


def render_group(args, model, template, cases):
    cmd = [args.server, "-m", os.path.join(args.models, model), "--host", "127.0.0.1",
           "--port", str(args.port), "--no-jinja", "--no-prefill-assistant", "-c", "256",
           "-np", "1"]
    if template:
        cmd += ["--chat-template", template]
    log = open("/tmp/chat_record-server.log", "ab")
    proc = subprocess.Popen(cmd, stdout=log, stderr=log)
    try:
        wait_ready(args.port, proc)
        for c in cases:
            r = post(args.port, "/apply-template",
                     {"messages": c["messages"],
                      "add_generation_prompt": c["add_generation_prompt"]})
            c["got"] = r["prompt"]
    finally:
        proc.terminate()
        proc.wait()
        log.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--server", default=os.path.expanduser("~/.cache/llama-ref/bin/llama-server"))
    shared = os.environ.get("STRATA_SHARED") or os.path.join(HERE, "..", "..", "..", "shared")
    ap.add_argument("--models", default=os.path.join(shared, "models"))
    ap.add_argument("--port", type=int, default=18431)
    ap.add_argument("--version", default="")
    args = ap.parse_args()
    with open(CASES, encoding="utf-8") as f:
        doc = json.load(f)
    groups = {}
    for c in doc["cases"]:
        key = (c["model"], None) if c.get("model") else (DEFAULT_MODEL, c["template"])
        groups.setdefault(key, []).append(c)
    for (model, template), cases in groups.items():
        print("recording %d cases: %s %s" % (len(cases), model, template or "(its own template)"))
        render_group(args, model, template, cases)
    bad = 0
    for d in doc.get("detect", []):
        probe = [{"messages": DETECT_CONVERSATION, "add_generation_prompt": True}]
        by_name = [dict(probe[0])]
        render_group(args, DEFAULT_MODEL, d["text"], probe)
        render_group(args, DEFAULT_MODEL, d["detected"], by_name)
        if probe[0]["got"] != by_name[0]["got"]:
            bad += 1
            print("DETECT %r: llama.cpp does not render it as %s" % (d["text"], d["detected"]))
    print("%d template texts checked" % len(doc.get("detect", [])))
    for c in doc["cases"]:
        got = c.pop("got")
        if got != c["expected"]:
            bad += 1
            print("DIFF %s/%s:\n  have %r\n  llama %r" % (c["template"], c["case"],
                                                          c["expected"], got))
        c["expected"] = got
    print("%d of %d cases and texts differ" % (bad, len(doc["cases"]) + len(doc.get("detect", []))))
    if args.check:
        return 1 if bad else 0
    doc["provenance"] = ("recorded from llama-server POST /apply-template (--no-jinja) by "
                         "tests/text/chat_record.py")
    doc["recorded_from"] = args.version or "llama-server"
    with open(CASES, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
