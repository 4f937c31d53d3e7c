#!/usr/bin/env python3
"""synth_vs_llama.py - files of every architecture `strata convert synth`
writes load in llama.cpp and give what `strata run` gives (issue 35).

Usage: synth_vs_llama.py BUILD_DIR [LABEL...]   (only the cases of those
labels, e.g. mixtral-16x4; default all)
For each architecture (llama, also with YaRN rope scaling, qwen2, also
with linear scaling, qwen3 with a head_dim other than dim/heads, gemma2
and gemma3 with a sliding window of 8, phi3) and dtype
(q8_0, f16): a 3-layer file made by `strata convert synth` into a
temporary directory; the same for mixtures of experts with more experts
than the shared files' 8 (so that the routing has choices): mixtral with
16 experts, 4 used, qwen3moe with 64 experts of width 64, 8 used, and
olmoe with 32 experts, 4 used; and a Q4_K_M file that llama-quantize
(beside refgen2) makes from an f16 mixtral of dim 256 (K-quants need rows
of 256), judged with Q8_0's bounds; `strata run` generates greedily from a 24-id prompt
(longer than the window); llama.cpp's refgen2 (~/.cache/llama-ref/bin,
built by ../shared/tools/build-llama-ref.sh; STRATA_REFGEN2 overrides)
evaluates the same ids teacher-forced (-F: Strata's ids fed back, so both
see the same contexts) and writes its logits of every step. Judged by
golden/wave3/README.md's rules: per-step cosine >= 0.998 for Q8_0, 0.9999
for F16, and the same argmax on every step whose margin exceeds 2% (Q8_0)
or 1% (F16) of the row's largest magnitude. Free-running llama.cpp ids are
printed beside Strata's (not judged: a near tie may go either way).
Without refgen2 it says so and exits 77 (skipped). Prints 'N passed, N
failed' as its last line."""

import array
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

BUILD = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else "build"
STRATA = os.path.join(BUILD, "cli", "strata")
REFGEN2 = os.environ.get("STRATA_REFGEN2", os.path.expanduser("~/.cache/llama-ref/bin/refgen2"))
SKIP = 77
TIMEOUT = 300
N_GEN = 16
PROMPT = [1] + [(37 * i + 11) % 2990 + 3 for i in range(23)]  # BOS + 23 ids below the vocab
DIMS = ["--dim", "128", "--layers", "3", "--heads", "4", "--kv-heads", "2", "--ffn", "384",
        "--vocab", "3000", "--seed", "11"]
# (label, arch, extra flags): YaRN by 4 over an original context of 32
# (the 40 positions of a case reach past it; its ramp mixes dims 0-3 of a
# head of 32) and linear scaling by 2
ARCHS = [("llama", "llama", []), ("llama-yarn", "llama", ["--rope-scaling", "yarn",
                                                         "--rope-factor", "4",
                                                         "--rope-orig-ctx", "32"]),
         ("qwen2", "qwen2", []), ("qwen2-linear", "qwen2", ["--rope-scaling", "linear",
                                                            "--rope-factor", "2"]),
         ("qwen3", "qwen3", ["--head-dim", "64"]),
         ("gemma2", "gemma2", ["--sliding-window", "8"]),
         ("gemma3", "gemma3", ["--sliding-window", "8"]), ("phi3", "phi3", [])]
# mixtures of experts: (label, arch, flags replacing DIMS)
MOE_COMMON = ["--layers", "3", "--heads", "4", "--vocab", "3000", "--seed", "11"]
MOE = [("mixtral-16x4", "mixtral", ["--dim", "128", "--kv-heads", "2", "--ffn", "128",
                                     "--experts", "16", "--experts-used", "4"] + MOE_COMMON),
       ("qwen3moe-64x8", "qwen3moe", ["--dim", "128", "--kv-heads", "2", "--head-dim", "64",
                                       "--ffn", "384", "--expert-ffn", "64", "--experts", "64",
                                       "--experts-used", "8"] + MOE_COMMON),
       ("olmoe-32x4", "olmoe", ["--dim", "128", "--kv-heads", "4", "--ffn", "128",
                                 "--experts", "32", "--experts-used", "4"] + MOE_COMMON)]
# the K-quant case: made at f16, then llama-quantize Q4_K_M
MOE_KQUANT = ("mixtral-16x4-d256", "mixtral", ["--dim", "256", "--kv-heads", "2", "--ffn", "256",
                                               "--experts", "16", "--experts-used", "4"] +
              MOE_COMMON)
QUANTIZE = os.path.join(os.path.dirname(REFGEN2), "llama-quantize")
# per dtype: (argmax margin fraction, min cosine) of golden/wave3/README.md
TOL = {"q8_0": (0.02, 0.998), "f16": (0.01, 0.9999), "q4_k_m": (0.02, 0.998)}


def run(argv):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, "%s: %s" % (" ".join(argv), r.stderr[-2000:])
    return r.stdout


def ids_of(out, label):
    m = re.search(r"^%s ?([0-9,]*)$" % label, out, re.M)
    assert m, "no '%s' line in %r" % (label, out[-500:])
    return [int(x) for x in m.group(1).split(",") if x]


def judge(st, ref, n_vocab, tol):
    """(min cosine, steps whose argmax differs above the margin) of two
    files of f32 rows."""
    margin_frac, _ = tol
    a, b = array.array("f", st), array.array("f", ref)
    assert len(a) == len(b) == N_GEN * n_vocab, (len(a), len(b))
    worst, flips = 1.0, []
    for s in range(N_GEN):
        x, y = a[s * n_vocab:(s + 1) * n_vocab], b[s * n_vocab:(s + 1) * n_vocab]
        dot = sum(p * q for p, q in zip(x, y))
        worst = min(worst, dot / math.sqrt(sum(p * p for p in x) * sum(q * q for q in y)))
        top = max(range(n_vocab), key=y.__getitem__)
        second = max(v for i, v in enumerate(y) if i != top)
        if (y[top] - second) > margin_frac * max(abs(v) for v in y) and \
                max(range(n_vocab), key=x.__getitem__) != top:
            flips.append(s)
    return worst, flips


def check(tmp, label, arch, flags, dtype):
    """The case of the file `strata convert synth --arch arch flags` makes
    (at f16 then quantized by llama-quantize for q4_k_m)."""
    path = os.path.join(tmp, "%s-%s.gguf" % (label, dtype))
    if dtype == "q4_k_m":
        f16 = os.path.join(tmp, "%s-f16-src.gguf" % label)
        run([STRATA, "convert", "synth", f16, "--arch", arch, "--type", "f16"] + flags)
        run([QUANTIZE, f16, path, "Q4_K_M", "2"])
    else:
        run([STRATA, "convert", "synth", path, "--arch", arch, "--type", dtype] + flags)
    prompt = ",".join(map(str, PROMPT))
    ls, lr = path + ".strata.f32", path + ".llama.f32"
    out = run([STRATA, "run", path, "--prompt-ids", prompt, "-n", str(N_GEN), "--temp", "0",
               "--ids", "--threads", "2", "--logits-out", ls])
    sids = ids_of(out, "ids:")
    run([REFGEN2, "-m", path, "-p", prompt, "-n", str(N_GEN), "-t", "2", "-F",
                  ",".join(map(str, sids)), "-L", lr])
    free = ids_of(run([REFGEN2, "-m", path, "-p", prompt, "-n", str(N_GEN), "-t", "2"]),
                  "gen_ids:")
    with open(ls, "rb") as f, open(lr, "rb") as g:
        worst, flips = judge(f.read(), g.read(), 3000, TOL[dtype])
    print("%s %s: teacher-forced min cosine %.7f, argmax differs above the margin on %s; "
          "strata ids %s, llama.cpp free-running %s (%s)"
          % (label, dtype, worst, flips or "no step", sids, free,
             "equal" if free == sids else "differ"))
    assert worst >= TOL[dtype][1], "%s %s: min cosine %.7f < %g" % (label, dtype, worst,
                                                                     TOL[dtype][1])
    assert not flips, "%s %s: argmax differs on steps %s" % (label, dtype, flips)


def main():
    if not os.access(REFGEN2, os.X_OK) or not os.access(QUANTIZE, os.X_OK):
        print("SKIPPED: no llama.cpp refgen2 and llama-quantize at %s (build them with "
              "../shared/tools/build-llama-ref.sh, or set STRATA_REFGEN2)" % REFGEN2)
        sys.exit(SKIP)
    tmp = tempfile.mkdtemp(prefix="strata-synth-llama-")
    passed = failed = 0
    try:
        cases = [(label, arch, DIMS + extra, dtype) for label, arch, extra in ARCHS
                 for dtype in ("q8_0", "f16")]
        cases += [(label, arch, flags, dtype) for label, arch, flags in MOE
                  for dtype in ("q8_0", "f16")]
        cases.append(MOE_KQUANT + ("q4_k_m",))
        only = sys.argv[2:]
        cases = [c for c in cases if not only or c[0] in only]
        assert cases, "no case labelled %s" % only
        for label, arch, flags, dtype in cases:
            try:
                check(tmp, label, arch, flags, dtype)
                passed += 1
            except Exception as e:  # report and go on
                failed += 1
                print("FAIL: %s %s: %s" % (label, dtype, e))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
