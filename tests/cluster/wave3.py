#!/usr/bin/env python3
"""wave3.py - the wave-3 architectures through the cluster (issue 35): real
coordinator and worker processes on loopback, f32 wire.

For each model, each split: the greedy ids and logits of every case equal
`strata run`'s bit for bit (INV-1), hence also each other's across splits.
Where the model passes tests/engine/test_golden.c, the ids and logits are
also judged against llama.cpp's golden/wave3 as kquant.py judges wave 2
(judge_golden: the golden ids up to a step whose golden margin is within
the README's argmax tolerance, and the README's cosine bound before it).
The cases are golden/wave3's three per model (p0: BOS alone, p1: 18 ids,
p2: a 640-token prompt, where the rope scaling and the sliding windows
show), 32 or 16 steps.

- gemma: w3-gemma2-f16 (4 layers) split [2, 2] and [1, 2, 1]; w3-gemma3-q8_0
  (6 layers) split [3, 3] and [2, 3, 1], both with the golden check.
- llama_qwen3_phi3: the 2-layer files w3-llama31-q8_0 (rope_freqs),
  w3-llamalin-f16 (linear rope scaling), w3-qwen3-q8_0 (q/k norms, head_dim
  128 while dim/heads is 64) and w3-phi3-q8_0 (fused attn_qkv and ffn_up)
  split [1, 1] with the golden check; then 3-layer files of qwen3 (with
  --head-dim 64 while dim/heads is 32) and phi3 made by `strata convert
  synth` into the test's directory, split [1, 1, 1], on the p1 prompt of
  the shared file of that architecture (ids below the synthetic files'
  vocabulary of 3000); and a 3-layer llama with YaRN rope scaling (factor
  4, original context 16: the 50 positions of the case reach past it)
  split [1, 1, 1] on w3-llamalin-f16's p1 prompt.
- moe (issue 36): the 2-layer mixtures of experts w3-mixtral-q8_0,
  w3-qwen3moe-q8_0 and w3-olmoe-f16 split [1, 1] with the golden check;
  an F32 one with each kernel variant; then a 3-layer synthetic one with
  more experts than those 8 (a mixtral of 16 experts, 4 used), split
  [2, 1] and [1, 1, 1], on w3-mixtral-q8_0's p1 prompt; and on each split
  of those, concurrent sessions in one batch: the step gate (--test-hooks)
  parks MOE_SESSIONS requests of different prompts (one sampled with a
  seed) at their first id and releases them together; each one's ids equal
  `strata run`'s, and the scheduler counts more rows than batches over the
  round (a batch held rows of several sessions, whose tokens the router
  sends to experts of its own choosing: which ones is not observed here).
- moe_wide: the same as moe's synthetic part for a qwen3moe of 64 experts
  of width 64, 8 used.

Usage: wave3.py BUILD_DIR CASE...   (CASE: see CASES at the bottom)
Reuses cluster.py's process helpers; every process is killed at the end,
also on failure. Prints 'N passed, N failed' as its last line."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402  (reads BUILD from sys.argv[1] like this script)
from cluster import SHARED, STRATA, TIMEOUT, Cluster, model, run_ids  # noqa: E402
from kquant import generate, judge_golden, start  # noqa: E402

LOADGEN = os.path.join(cluster.BUILD, "tests", "cluster", "loadgen")
MOE_SESSIONS = 6
# synthetic mixtures of experts: SYNTH_DIMS but the FFN, and per model
# (label, arch, flags of the FFN and experts)
MOE_DIMS = ["--dim", "128", "--layers", "3", "--heads", "4", "--kv-heads", "2", "--vocab", "3000",
            "--type", "q8_0"]
MOE_SYNTH = [("mixtral-16x4", "mixtral", ["--ffn", "128", "--experts", "16", "--experts-used",
                                          "4"]),
             ("qwen3moe-64x8", "qwen3moe", ["--ffn", "384", "--expert-ffn", "64", "--head-dim",
                                            "64", "--experts", "64", "--experts-used", "8"])]

# per file dtype: (argmax margin fraction, min cosine) of golden/wave3/README.md
W3_TOL = {"f16": (0.01, 0.9999), "q8_0": (0.02, 0.998)}
# the synthetic files' shape, as small as the shared ones
SYNTH_DIMS = ["--dim", "128", "--layers", "3", "--heads", "4", "--kv-heads", "2", "--ffn", "384",
              "--vocab", "3000", "--type", "q8_0"]


def wave3_all(name):
    """Every case of model name in golden/wave3."""
    with open(os.path.join(SHARED, "golden", "wave3", "generation.json")) as f:
        return [x for x in json.load(f)["cases"] if x["model"] == name]


def wave3_cases(name):
    """golden/wave3's cases of model name; with STRATA_GOLDEN_MAX_PROMPT=N
    (deploy/test.sh's sanitizer pass) only those whose prompt has at most N
    ids, the others printed as not run."""
    limit = int(os.environ.get("STRATA_GOLDEN_MAX_PROMPT", "0"))
    cases = wave3_all(name)
    if limit > 0:
        for x in cases:
            if len(x["prompt_ids"]) > limit:
                print("%s: not run in this pass (a prompt of %d ids, above "
                      "STRATA_GOLDEN_MAX_PROMPT %d)" % (x["logits_file"], len(x["prompt_ids"]),
                                                         limit))
        cases = [x for x in cases if len(x["prompt_ids"]) <= limit]
    return cases


def check_splits(path, cases, splits, tol, label):
    """cases (golden/wave3 rows: prompt_ids, n, ...) through each split of
    the model at path: ids and logits equal `strata run`'s bit for bit;
    judged against the golden when tol is not None."""
    ref = {}
    for split in splits:
        with start(path, "f32", split) as c:
            for i, case in enumerate(cases):
                ids, logits = generate(c, case, os.path.join(c.tmp, "c%d.logits" % i))
                if i not in ref:
                    lr = os.path.join(c.tmp, "r%d.logits" % i)
                    rids = run_ids(path, case["prompt_ids"], case["n"], lr)
                    with open(lr, "rb") as f:
                        ref[i] = (rids, f.read())
                assert ids == ref[i][0], "%s split %s case %d: ids %s != strata run's %s" % (
                    label, split, i, ids, ref[i][0])
                assert logits == ref[i][1], "%s split %s case %d: logits differ from strata " \
                    "run's" % (label, split, i)
                judged = "not judged against the golden"
                if tol is not None:
                    judged = judge_golden(case, ids, logits, tol, "wave3")
                print("%s split %s %s: %d ids and logits equal strata run's bit for bit; %s"
                      % (label, split, case.get("logits_file", "case %d" % i), len(ids), judged))
            cluster.check_no_dropped_results(c)


def check_shared(name, splits, golden):
    n_all = len(wave3_all(name))
    assert n_all == 3, "wave3 has %d cases of %s" % (n_all, name)
    cases = wave3_cases(name)  # fewer in the sanitizer pass, never none (p0, p1: short)
    assert cases, "no case of %s runs in this pass" % name
    tol = W3_TOL["f16" if name.endswith("-f16.gguf") else "q8_0"] if golden else None
    check_splits(model(name), cases, splits, tol, name)


def check_synth(arch, extra, prompt_of):
    """A 3-layer synthetic file of arch through [1, 1, 1], on the p1 prompt
    of the shared file prompt_of."""
    tmp = tempfile.mkdtemp(prefix="strata-wave3-%d-" % os.getpid())
    try:
        path = os.path.join(tmp, "%s.gguf" % arch)
        r = subprocess.run([STRATA, "convert", "synth", path, "--arch", arch] + SYNTH_DIMS + extra,
                           capture_output=True, text=True, timeout=TIMEOUT)
        assert r.returncode == 0, "convert synth --arch %s: %s" % (arch, r.stderr)
        p1 = [c for c in wave3_cases(prompt_of) if c["logits_file"].endswith(".p1.logits.f32")]
        assert len(p1) == 1, "no p1 case of %s" % prompt_of
        case = {"prompt_ids": p1[0]["prompt_ids"], "n": p1[0]["n"], "n_vocab": 3000}
        check_splits(path, [case], ([1, 1, 1],), None, "synth %s" % arch)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def moe_sessions(path, split, vocab):
    """MOE_SESSIONS concurrent requests through split, released together
    from the step gate at their first id: every one's ids equal `strata
    run`'s, and some batch of the round held several rows."""
    reqs = []
    for k in range(MOE_SESSIONS):
        prompt = [1] + [3 + (k * 131 + j * (k + 7)) % (vocab - 3) for j in range(4 + 5 * k)]
        r = {"prompt_ids": prompt, "n": 10 + k}
        if k == 3:
            r.update(temp=0.8, seed=77)
        reqs.append(r)
    want = []
    for r in reqs:
        argv = [STRATA, "run", path, "--prompt-ids", ",".join(map(str, r["prompt_ids"])), "-n",
                str(r["n"]), "--temp", str(r.get("temp", 0)), "--ids", "--threads", "1"] + \
            cluster.GOLDEN_KV + (["--seed", str(r["seed"])] if "seed" in r else [])
        p = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT)
        assert p.returncode == 0, p.stderr
        want.append(cluster.parse_ids(p.stdout))
        assert len(want[-1]) > 1, "request %d: an end of generation at its first id" % len(want)
    with Cluster(path, ["--wire", "f32", "--split", ",".join(map(str, split)), "--min-workers",
                        str(len(split)), "--chunk", "16", "--max-sessions", "16",
                        "--test-hooks"]) as c:
        for _ in split:
            c.add_worker()
        c.wait_serving(len(split))
        s0 = c.status()["sched"]
        cluster.hold(c, 1)
        box = {}

        def go():
            p = subprocess.run([LOADGEN, c.addr, "--timeout-ms", str(TIMEOUT * 1000)],
                               input="".join(json.dumps(r) + "\n" for r in reqs),
                               capture_output=True, text=True, timeout=TIMEOUT + 60)
            box["rc"], box["out"], box["err"] = p.returncode, p.stdout, p.stderr

        t = threading.Thread(target=go)
        t.start()
        try:
            cluster.wait_held(c, MOE_SESSIONS, at=1)
        finally:
            cluster.release(c)
            t.join(TIMEOUT + 90)
        assert box.get("rc") == 0, "loadgen: %s %s" % (box.get("rc"), box.get("err", "")[-1500:])
        res = [None] * len(reqs)
        for line in box["out"].splitlines():
            o = json.loads(line)
            res[o["i"]] = o
        for k, (o, w) in enumerate(zip(res, want)):
            assert o is not None and o["ok"], "request %d: %s" % (k, o)
            assert o["ids"] == w, "split %s request %d: ids %s != strata run's %s" % (
                split, k, o["ids"], w)
        s1 = c.status()["sched"]
        rows, batches = int(s1["rows"]) - int(s0["rows"]), int(s1["batches"]) - int(s0["batches"])
        assert rows > batches, "no batch held two rows: %d rows in %d batches" % (rows, batches)
        cluster.check_no_dropped_results(c)
    print("  split %s: %d concurrent sessions (released together at their first id) equal "
          "strata run's; %d rows in %d batches" % (split, MOE_SESSIONS, rows, batches))


def moe_f32_variants(tmp):
    """An F32 mixture of experts (its experts' inputs gathered as f32 rows)
    runs with every kernel variant the CPU has, each giving the reference's
    ids (it once read past the gathered rows' scratch)."""
    path = os.path.join(tmp, "mixtral-f32.gguf")
    dims = [a if a != "q8_0" else "f32" for a in MOE_DIMS]
    r = subprocess.run([STRATA, "convert", "synth", path, "--arch", "mixtral", "--ffn", "64",
                        "--experts", "16", "--experts-used", "4"] + dims,
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, "convert synth f32: %s" % r.stderr
    ids = {}
    for k in ("ref", "avx2", "avx512"):
        r = subprocess.run([STRATA, "run", path, "--prompt-ids", "1,17,291,1400,5", "-n", "8",
                            "--temp", "0", "--ids", "--threads", "2", "--kernels", k],
                           capture_output=True, text=True, timeout=TIMEOUT)
        if r.returncode != 0 and k != "ref" and "not supported" in r.stderr:
            continue  # this CPU lacks the variant
        assert r.returncode == 0, "strata run --kernels %s on an f32 MoE: %s" % (k, r.stderr)
        ids[k] = cluster.parse_ids(r.stdout)
    assert all(v == ids["ref"] for v in ids.values()), ids
    print("  f32 mixture of experts: ids %s with kernels %s" % (ids["ref"], ", ".join(ids)))


def moe_synth(labels):
    """The synthetic MoE files of MOE_SYNTH named in labels, each through
    [2, 1] and [1, 1, 1] on w3-mixtral's p1 prompt (bit for bit strata run's),
    then with concurrent sessions (moe_sessions)."""
    p1 = [c for c in wave3_cases("w3-mixtral-q8_0.gguf")
          if c["logits_file"].endswith(".p1.logits.f32")]
    assert len(p1) == 1, "no p1 case of w3-mixtral-q8_0"
    case = {"prompt_ids": p1[0]["prompt_ids"], "n": p1[0]["n"], "n_vocab": 3000}
    tmp = tempfile.mkdtemp(prefix="strata-wave3-moe-%d-" % os.getpid())
    try:
        if "mixtral-16x4" in labels:
            moe_f32_variants(tmp)
        for label, arch, extra in MOE_SYNTH:
            if label not in labels:
                continue
            path = os.path.join(tmp, "%s.gguf" % label)
            r = subprocess.run([STRATA, "convert", "synth", path, "--arch", arch] + MOE_DIMS + extra,
                               capture_output=True, text=True, timeout=TIMEOUT)
            assert r.returncode == 0, "convert synth %s: %s" % (label, r.stderr)
            splits = ([2, 1], [1, 1, 1])
            check_splits(path, [case], splits, None, "synth %s" % label)
            for split in splits:
                moe_sessions(path, split, 3000)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def case_moe():
    """The shared MoE models, an F32 one, and a 16-expert synthetic one."""
    for name in ("w3-mixtral-q8_0.gguf", "w3-qwen3moe-q8_0.gguf", "w3-olmoe-f16.gguf"):
        check_shared(name, ([1, 1],), golden=True)
    moe_synth(["mixtral-16x4"])


def case_moe_wide():
    """A 64-expert top-8 synthetic qwen3moe (the same cluster paths as moe's
    with a wider routing: suite 'variants')."""
    moe_synth(["qwen3moe-64x8"])


def case_gemma():
    check_shared("w3-gemma2-f16.gguf", ([2, 2], [1, 2, 1]), golden=True)
    check_shared("w3-gemma3-q8_0.gguf", ([3, 3], [2, 3, 1]), golden=True)


def case_llama_qwen3_phi3():
    for name in ("w3-llama31-q8_0.gguf", "w3-llamalin-f16.gguf", "w3-qwen3-q8_0.gguf",
                 "w3-phi3-q8_0.gguf"):
        check_shared(name, ([1, 1],), golden=True)
    check_synth("qwen3", ["--head-dim", "64"], "w3-qwen3-q8_0.gguf")
    check_synth("phi3", [], "w3-phi3-q8_0.gguf")
    check_synth("llama", ["--rope-scaling", "yarn", "--rope-factor", "4", "--rope-orig-ctx",
                          "16"], "w3-llamalin-f16.gguf")


CASES = {"gemma": case_gemma, "llama_qwen3_phi3": case_llama_qwen3_phi3, "moe": case_moe,
         "moe_wide": case_moe_wide}

if __name__ == "__main__":
    cluster.run_cases(CASES)
