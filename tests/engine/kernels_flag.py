#!/usr/bin/env python3
"""kernels_flag.py - `--kernels` of `strata run` and `strata bench run`:
every variant this CPU supports can be named, and each gives the golden
ids; a name that is no variant is refused.

Usage: kernels_flag.py BUILD_DIR
- the variants come from `strata bench run`'s "variants this CPU supports:"
  line (ref always; avx2 and avx512 where cpuid and xgetbv say so);
- for each: `strata bench run --kernels V` reports "kernels V", and
  `strata run MODEL --prompt-ids 1 -n 64 --temp 0 --ids --kernels V` prints
  golden/generation.json's expected ids for stories260K (llama.cpp's);
- `--kernels avx9`: exit 2 naming the accepted names, for both commands.
A variant the CPU does not support cannot be run here; the refusal of such
a variant ("not supported by this CPU or build") is only reachable on
another machine and is not claimed by this test."""

import json
import os
import re
import subprocess
import sys

BUILD = os.path.abspath(sys.argv[1])
SHARED = os.environ.get("STRATA_SHARED", os.path.join(os.path.dirname(__file__), "../../../shared"))
STRATA = os.path.join(BUILD, "cli", "strata")
MODEL_NAME = "stories260K.gguf"


def strata(*args):
    return subprocess.run([STRATA, *args], capture_output=True, text=True, timeout=300)


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def main():
    with open(os.path.join(SHARED, "golden", "generation.json")) as f:
        gen = json.load(f)
    case = next(c for c in gen["cases"] if c.get("model") == MODEL_NAME
                and c.get("prompt_ids") == [1])
    model = os.path.join(SHARED, "models", MODEL_NAME)
    want = case["expected_ids"]

    r = strata("bench", "run", model, "--prompt", "4", "--gen", "4", "--repeat", "1")
    m = re.search(r"variants this CPU supports: ([a-z0-9 ]+)\)", r.stdout)
    if r.returncode != 0 or m is None:
        fail("bench run printed no supported variants (exit %d): %s" % (r.returncode, r.stdout + r.stderr))
    variants = m.group(1).split()
    if "ref" not in variants:
        fail("the reference is not among the supported variants: %s" % variants)
    for v in variants:
        r = strata("bench", "run", model, "--prompt", "4", "--gen", "4", "--repeat", "1",
                   "--kernels", v)
        if r.returncode != 0 or not re.search(r"\bkernels %s\b" % v, r.stdout):
            fail("bench run --kernels %s: exit %d, no 'kernels %s' in: %s"
                 % (v, r.returncode, v, r.stdout.splitlines()[:1]))
        # the golden ids were made with an f32 KV cache (golden/README.md)
        r = strata("run", model, "--prompt-ids", "1", "-n", str(len(want)), "--temp", "0",
                   "--ids", "--kernels", v, "--cache-type", "f32")
        ids_line = [l for l in r.stdout.splitlines() if l.startswith("ids: ")]
        if r.returncode != 0 or not ids_line:
            fail("run --kernels %s: exit %d, no ids: %s" % (v, r.returncode, r.stderr))
        got = [int(x) for x in ids_line[0][5:].split(",")]
        if got != want:
            fail("run --kernels %s: ids %s differ from the golden %s" % (v, got, want))
        print("--kernels %s: bench run reports it; %d ids equal the golden ids" % (v, len(got)))
    for cmd in (["run", model, "--prompt-ids", "1", "-n", "2", "--kernels", "avx9"],
                ["bench", "run", model, "--kernels", "avx9"]):
        r = strata(*cmd)
        if r.returncode != 2 or "'avx9' is not ref, auto, avx2 or avx512" not in r.stderr:
            fail("%s --kernels avx9: exit %d, stderr %r" % (cmd[0], r.returncode, r.stderr))
    print("--kernels avx9: refused (exit 2) by run and bench run")
    print("OK: variants %s" % " ".join(variants))


main()
