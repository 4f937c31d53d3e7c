#!/usr/bin/env python3
"""moe_stats.py - a mixture of experts through the coordinator and the
workers (issue 36): the planner's price of a token, the expert counts that
`strata plan --dry-run` and `strata status` show, and the per-expert load
the workers report in their heartbeats. Real coordinator and worker
processes on loopback, f32 wire, on w3-qwen3moe-q8_0 (2 layers, 8 experts,
2 used per token).

Usage: moe_stats.py BUILD_DIR CASE...   (CASE: see CASES at the bottom)
Reuses cluster.py's process helpers; every process is killed at the end,
also on failure. Prints 'N passed, N failed' as its last line.

Cases:
- stats: 2 workers, split [1, 1]: a 18-id prompt and 12 greedy ids (ids
  equal `strata run`'s). Every token the pipeline computed (prompt + each
  generated id fed back: the scheduler's token count, checked against
  len(prompt) + len(ids) - 1) goes through both layers and is routed to 2
  experts, so `strata status --json`'s expert load of each layer sums to
  exactly 2 x that; each worker reports only the layer of its stage, with
  the counts of the cluster's load for that layer. A second request adds
  its own tokens (the counts are cumulative). Then the same first request
  on one worker (split [2], the whole model as `strata run` computes it):
  each (layer, expert) count equals the 2-worker cluster's for that
  request, i.e. routing does not depend on the split. The text status
  names the experts per stage and the hottest experts.
- plan: `strata plan --dry-run --workers FILE --model M` on one worker of
  1e9 bytes/s: the MoE stage's compute is the bytes a token reads (each
  layer's non-expert tensors + 2/8 of its expert tensors, + the head's,
  computed here from the GGUF's tensor table), not its bytes; the stage
  line says "experts 8 (2 used per token)" and the JSON n_expert /
  n_expert_used. A dense model (w3-qwen3-q8_0) is priced by every byte of
  its layers and has no expert fields.
- shape: a coordinator of the MoE model and a fake member (`inject
  experts`, tests/cluster/inject_experts.c) whose heartbeats carry expert
  lists: one that fits is shown as the status's load; a layer beyond the
  model, a wrong count of experts and a layer twice are each ignored and
  counted (bad_experts), the rest of the heartbeat answered; a fitting one
  after them is taken again.
No verdict depends on the machine's speed: outcomes are ids and counts."""

import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402  (reads BUILD from sys.argv[1] like this script)
from cluster import INJECT, STRATA, TIMEOUT, Cluster, model, parse_ids, run_ids  # noqa: E402
from kquant import start  # noqa: E402

MOE = "w3-qwen3moe-q8_0.gguf"
N_EXPERT, N_USED, N_LAYER = 8, 2, 2
PROMPT = [2976, 2780, 1057, 2034, 311, 1288, 2265, 542, 1519, 2496, 773, 1750, 2727, 1004, 1981,
          258, 1235, 2212]  # golden/wave3's p1 prompt of this model
PROMPT2 = [2976, 5, 6, 7, 8, 9, 10]
N_GEN = 12


def generate(c, prompt, n):
    r = c.cli("generate", "--prompt-ids", ",".join(map(str, prompt)), "-n", str(n), "--temp",
              "0", "--ids")
    return parse_ids(r.stdout)


def load_of(st):
    """{layer: [count per expert]} of a status's expert load."""
    ex = st.get("experts")
    assert ex and ex["n_expert"] == N_EXPERT and ex["n_expert_used"] == N_USED, ex
    out = {}
    for x in ex["load"]:
        assert len(x["tokens"]) == N_EXPERT and x["total"] == sum(x["tokens"]), x
        out[x["layer"]] = x["tokens"]
    return out


def wait_load(c, tokens):
    """Waits until the status's expert load has both layers with at least
    N_USED x tokens routed (the heartbeats after the last step), then
    returns the status; the counts never shrink, so the caller's equality
    checks can fail."""
    deadline = time.time() + 30
    st = None
    while time.time() < deadline:
        st = c.status()
        ld = load_of(st)
        if len(ld) == N_LAYER and all(sum(v) >= N_USED * tokens for v in ld.values()):
            return st
        time.sleep(0.1)
    raise AssertionError("expert load of %d tokens not reported in 30 s: %s"
                         % (tokens, json.dumps(st.get("experts"))[:1500]))


def sched_tokens(st):
    return int(st["sched"]["tokens"])


def case_stats():
    tmp = tempfile.mkdtemp(prefix="strata-moe-")
    ref = run_ids(model(MOE), PROMPT, N_GEN, os.path.join(tmp, "r.logits"))
    with start(MOE, "f32", [1, 1]) as c:
        ids = generate(c, PROMPT, N_GEN)
        assert ids == ref, "ids %s != strata run's %s" % (ids, ref)
        fed = len(PROMPT) + len(ids) - 1  # the last id is returned, not fed back
        st = wait_load(c, fed)
        assert sched_tokens(st) == fed, "the scheduler computed %d tokens, not %d" % (
            sched_tokens(st), fed)
        first = load_of(st)
        for layer, v in first.items():
            assert sum(v) == N_USED * fed, "layer %d: %d routed, not %d x %d" % (
                layer, sum(v), N_USED, fed)
        # each worker reports the layer of its stage only, with the cluster's counts
        for w in st["workers"]:
            ex = w.get("experts", [])
            assert [x["layer"] for x in ex] == list(range(w["first"], w["last"])), w
            for x in ex:
                assert [int(t) for t in x["tokens"]] == first[x["layer"]], (x, first)
        # a second request: cumulative
        ids2 = generate(c, PROMPT2, 4)
        fed2 = len(PROMPT2) + len(ids2) - 1
        st = wait_load(c, fed + fed2)
        assert sched_tokens(st) == fed + fed2, st["sched"]
        second = load_of(st)
        for layer in range(N_LAYER):
            assert sum(second[layer]) == N_USED * (fed + fed2), second
            assert all(b >= a for a, b in zip(first[layer], second[layer])), (first, second)
        assert st["counters"]["bad_experts"] == 0, st["counters"]
        text = c.cli("status").stdout
        assert text.count("experts 8 (2 used per token)") == 2, text
        hot = re.findall(r"expert load \(hottest per layer\): L(\d) e(\d+) (\d+)", text)
        assert [h[0] for h in hot] == ["0", "1"], text
        for layer, e, n in hot:
            assert int(n) == max(second[int(layer)]) == second[int(layer)][int(e)], (hot, second)
        print("stats [1, 1]: %d + %d tokens, per layer %s routed (2 per token); layer 0 %s, "
              "layer 1 %s" % (fed, fed2, [sum(second[l]) for l in range(N_LAYER)],
                              second[0], second[1]))
        for line in text.splitlines():
            if "expert" in line:
                print("  status: " + line.strip())
    with start(MOE, "f32", [2]) as c:
        ids = generate(c, PROMPT, N_GEN)
        assert ids == ref, ids
        one = load_of(wait_load(c, fed))
        assert one == first, "one worker routed %s, two workers %s" % (one, first)
        print("stats [2]: the same request routes the same tokens to each expert: %s" % one)


# ---- the GGUF's tensor table: the bytes a token reads ----

GGML_BYTES = {0: (1, 4), 1: (1, 2), 8: (32, 34), 30: (1, 2)}  # f32, f16, q8_0, bf16


def gguf_tensors(path):
    """{name: bytes} of the tensors of a GGUF (f32, f16, bf16, q8_0)."""
    with open(path, "rb") as f:
        data = f.read(1 << 22)
    assert data[:4] == b"GGUF", path
    at = [8]

    def take(fmt):
        v = struct.unpack_from("<" + fmt, data, at[0])
        at[0] += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        n = take("Q")
        at[0] += n
        return data[at[0] - n:at[0]].decode()

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
              12: "d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        return take(scalar[t])

    n_t, n_kv = take("Q"), take("Q")
    for _ in range(n_kv):
        string()
        value(take("I"))
    out = {}
    for _ in range(n_t):
        name = string()
        dims = [take("Q") for _ in range(take("I"))]
        t = take("I")
        take("Q")
        blk, size = GGML_BYTES[t]
        n = 1
        for d in dims:
            n *= d
        out[name] = n // blk * size
    return out


def token_bytes(path, n_expert, n_used):
    """(bytes one token reads in the layers and head, every byte of them)."""
    t = gguf_tensors(path)
    active = total = 0
    for name, b in t.items():
        if name.startswith("blk."):
            total += b
            active += b * n_used // n_expert if "_exps." in name else b
    head = t.get("output_norm.weight", 0) + t.get("output.weight", t["token_embd.weight"])
    return active + head, total + head


def dry_run(tmp, path, json_out):
    spec = {"workers": [{"name": "a", "memory": "1G", "bytes_per_s": 1e9}], "ctx": 16,
            "sessions": 1}
    wf = os.path.join(tmp, "w.json")
    with open(wf, "w") as f:
        json.dump(spec, f)
    r = subprocess.run([STRATA, "plan", "--dry-run", "--workers", wf, "--model", path] +
                       (["--json"] if json_out else []), capture_output=True, text=True,
                       timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout) if json_out else r.stdout


def case_plan():
    tmp = tempfile.mkdtemp(prefix="strata-moe-plan-")
    active, total = token_bytes(model(MOE), N_EXPERT, N_USED)
    assert active < total, (active, total)
    got = dry_run(tmp, model(MOE), True)
    s = got["stages"]
    assert len(s) == 1 and s[0]["n_expert"] == N_EXPERT and s[0]["n_expert_used"] == N_USED, s
    # 1e9 bytes/s: compute_ms = bytes x 1e-6
    assert abs(s[0]["compute_ms"] - active * 1e-6) < 1e-9, (s[0]["compute_ms"], active, total)
    text = dry_run(tmp, model(MOE), False)
    assert re.search(r"^stage 0: layers \[0, 2\).*experts 8 \(2 used per token\)$", text, re.M), \
        text
    print("plan %s: a token reads %d of %d bytes (layers + head): compute %.6f ms"
          % (MOE, active, total, s[0]["compute_ms"]))
    print("  " + [x for x in text.splitlines() if x.startswith("stage 0")][0])
    dense = model("w3-qwen3-q8_0.gguf")
    active, total = token_bytes(dense, 1, 1)
    assert active == total
    got = dry_run(tmp, dense, True)
    s = got["stages"]
    assert "n_expert" not in s[0], s
    assert abs(s[0]["compute_ms"] - total * 1e-6) < 1e-9, (s[0]["compute_ms"], total)
    assert "experts" not in dry_run(tmp, dense, False)
    print("plan w3-qwen3-q8_0 (dense): a token reads all %d bytes: compute %.6f ms"
          % (total, s[0]["compute_ms"]))


def case_shape():
    with Cluster(model(MOE), ["--min-workers", "1"]) as c:
        r = subprocess.run([INJECT, "experts", c.addr, model(MOE), str(N_LAYER), str(N_EXPERT)],
                           capture_output=True, text=True, timeout=TIMEOUT)
        assert r.returncode == 0, (r.stdout, r.stderr)
        good = ",".join(str(k + 1) for k in range(N_EXPERT))
        again = ",".join(str(2 * (k + 1)) for k in range(N_EXPERT))
        want = [("good", 0, "0:" + good), ("layer-out", 1, "none"), ("counts", 2, "none"),
                ("twice", 3, "none"), ("good-again", 3, "0:" + again)]
        got = re.findall(r"^([a-z-]+): reply (\S+); bad_experts (\d+); load (.*)$", r.stdout, re.M)
        assert [(g[0], int(g[2]), g[3].strip()) for g in got] == want, r.stdout
        assert all(g[1] == "heartbeat_reply" for g in got), r.stdout
        st = c.status()
        assert int(st["counters"]["bad_experts"]) == 3, st["counters"]
        for line in r.stdout.strip().splitlines():
            print("shape: " + line)


CASES = {"stats": case_stats, "plan": case_plan, "shape": case_shape}

if __name__ == "__main__":
    cluster.run_cases(CASES)
