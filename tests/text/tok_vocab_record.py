#!/usr/bin/env python3
"""tok_vocab_record.py - records the ids of tests/text/tok_vocab_special.json
with llama.cpp's llama-tokenize, the oracle of the tokenizer-vocab test's
special-token cases.

Each case names a vocabulary of the llama.cpp source
(models/ggml-vocab-VOCAB.gguf) and a text; llama-tokenize encodes the text
with special-token parsing (its default) and without BOS (--no-bos --ids,
the text read from a file so that nothing is unescaped but what
llama-tokenize itself unescapes: the texts hold no backslash). This script
replaces each case's "ids" by what llama-tokenize prints, or with --check
only compares.

usage: tests/text/tok_vocab_record.py [--check] [--tokenize PATH] [--src DIR]
                                      [--version TEXT]

  --tokenize  llama-tokenize (default ~/.cache/llama-ref/bin/llama-tokenize)
  --src       the llama.cpp source (default $STRATA_LLAMA_SRC, else
              ~/.cache/llama-ref/work/src)
  --version   recorded as "recorded_from"

Only the Python standard library is used."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "tok_vocab_special.json")


def tokenize(args, vocab, text):
    model = os.path.join(args.src, "models", "ggml-vocab-%s.gguf" % vocab)
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
        f.write(text.encode("utf-8"))
        path = f.name
    try:
        r = subprocess.run([args.tokenize, "-m", model, "-f", path, "--ids", "--no-bos",
                            "--log-disable"],
                           capture_output=True, text=True, timeout=120, check=True)
    finally:
        os.unlink(path)
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("[")][-1]
    return json.loads(line)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--tokenize",
                    default=os.path.expanduser("~/.cache/llama-ref/bin/llama-tokenize"))
    ap.add_argument("--src", default=os.environ.get("STRATA_LLAMA_SRC") or
                    os.path.expanduser("~/.cache/llama-ref/work/src"))
    ap.add_argument("--version", default="")
    args = ap.parse_args()
    with open(CASES, encoding="utf-8") as f:
        doc = json.load(f)
    bad = 0
    for c in doc["cases"]:
        assert "\\" not in c["text"], "a text with a backslash would be unescaped"
        got = tokenize(args, c["vocab"], c["text"])
        if got != c.get("ids"):
            bad += 1
            print("DIFF %s %r:\n  have %r\n  llama %r" % (c["vocab"], c["text"], c.get("ids"),
                                                          got))
        c["ids"] = got
    print("%d of %d cases differ" % (bad, len(doc["cases"])))
    if args.check:
        return 1 if bad else 0
    doc["provenance"] = ("recorded with llama-tokenize --no-bos --ids (special tokens parsed) by "
                         "tests/text/tok_vocab_record.py")
    doc["recorded_from"] = args.version or "llama-tokenize"
    with open(CASES, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
