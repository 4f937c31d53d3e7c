#!/bin/sh
# pipeline.sh - what splitting a model costs on one machine: single-session
# greedy decode tok/s of `strata run` (2 threads), of a cluster with 1 worker
# (2 threads) and of one with 2 workers (2 threads each; in single-session
# decode they take turns on the two cores), with f32 and f16 boundaries; and
# the per-hop overhead derived from them:
#   hop = (cluster time per token - strata run time per token) / hops,
# hops = workers + 1 (coordinator -> stage 0 -> ... -> last stage ->
# coordinator). Compute is the same in both (same kernels, same threads), so
# the difference is what the pipeline adds: encode/decode, NNG, scheduling.
# Medians of --repeat runs. Needs the TinyLlama-shaped model (bench/engine.sh
# makes it) or any MODEL given.
# Each cluster gets an even fixed split (--split): with the default
# placement the coordinator rebalances the layers once the workers' latency
# arrives, and that replan (every worker loading its new range) would fall
# inside the timed runs.
# Usage: bench/pipeline.sh [MODEL] [--repeat N] [--gen N] [--threads T]
#                          [--workers "1 2 3"] [--layers N]
# --layers: the model's layer count, for the split (default 22, the
# TinyLlama shape this script makes; give it with any other MODEL).
set -eu
cd "$(dirname "$0")/.."
B=${BUILD_DIR:-build}
MODEL=${BENCH_DIR:-/tmp/strata-bench}/tinyllama-q8_0.gguf
REPEAT=3
GEN=128
THREADS=2
WORKERS="1 2"
LAYERS=22
while [ $# -gt 0 ]; do
    case "$1" in
    --repeat) REPEAT=$2; shift 2 ;;
    --gen) GEN=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --workers) WORKERS=$2; shift 2 ;;
    --layers) LAYERS=$2; shift 2 ;;
    -*) echo "pipeline.sh: unknown flag $1" >&2; exit 2 ;;
    *) MODEL=$1; shift ;;
    esac
done
if [ ! -f "$MODEL" ]; then
    mkdir -p "$(dirname "$MODEL")"
    $B/cli/strata convert synth "$MODEL" --dim 2048 --layers 22 --heads 32 --kv-heads 4 \
        --ffn 5632 --vocab 32000 --type q8_0 --seed 1
fi
PROMPT=1  # one token: the rates below are decode rates (the CLI times from the request)
RUN=$(mktemp -d /tmp/strata-pipeline.XXXXXX)
PIDS=""
stop_all() {
    for p in $PIDS; do kill "$p" 2>/dev/null || true; done
    for p in $PIDS; do wait "$p" 2>/dev/null || true; done
    PIDS=""
}
trap 'stop_all; rm -rf "$RUN"' EXIT INT TERM

median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
rate() { sed -n 's/.*generation: [0-9]* tokens in [0-9.]* s (\([0-9.]*\) tok\/s).*/\1/p'; }

addr_of() {
    i=0
    while [ $i -lt 600 ]; do
        a=$(sed -n "s|^$2 \(tcp://[^ ]*\).*|\1|p" "$1" 2>/dev/null | head -n 1)
        [ -n "$a" ] && { echo "$a"; return 0; }
        i=$((i + 1)); sleep 0.1
    done
    echo "pipeline.sh: no address in $1" >&2; return 1
}

# even_split N - the model's layers in N ranges as even as they go, "a,b,..."
even_split() {
    awk -v l="$LAYERS" -v n="$1" 'BEGIN { for (i = 0; i < n; i++) printf "%s%d", i ? "," : "", int(l / n) + (i < l % n) }'
}

# cluster WORKERS WIRE - median decode tok/s through a fresh cluster
cluster() {
    $B/coordinator/strata-coordinator --model "$MODEL" --listen tcp://127.0.0.1:0 \
        --wire "$2" --min-workers "$1" --split "$(even_split "$1")" >"$RUN/c" 2>"$RUN/c.err" &
    PIDS="$PIDS $!"
    C=$(addr_of "$RUN/c" "listening on")
    w=0
    while [ $w -lt "$1" ]; do
        $B/worker/strata-worker --coordinator "$C" --model "$MODEL" --listen tcp://127.0.0.1:0 \
            --threads "$THREADS" --name "w$w" >"$RUN/w$w" 2>"$RUN/w$w.err" &
        PIDS="$PIDS $!"
        w=$((w + 1))
    done
    i=0
    until $B/cli/strata status --json --coordinator "$C" 2>/dev/null |
        grep -Eq '"serving":[[:space:]]*true'; do
        i=$((i + 1)); [ $i -lt 1200 ] || { echo "pipeline.sh: cluster not serving" >&2; exit 1; }
        sleep 0.1
    done
    $B/cli/strata generate --coordinator "$C" --prompt-ids "$PROMPT" -n 8 --temp 0 --ids \
        >/dev/null 2>&1
    r=0
    while [ $r -lt "$REPEAT" ]; do
        $B/cli/strata generate --coordinator "$C" --prompt-ids "$PROMPT" -n "$GEN" --temp 0 \
            --ids 2>&1 >/dev/null | rate
        r=$((r + 1))
    done | median
    stop_all
}

echo "model $MODEL, 1-token prompt, $GEN greedy tokens, median of $REPEAT"
$B/cli/strata bench run "$MODEL" --prompt 8 --gen 8 --repeat 1 --threads "$THREADS" 2>/dev/null |
    grep '^bandwidth' || true
R=$(r=0; while [ $r -lt "$REPEAT" ]; do
    $B/cli/strata run "$MODEL" --prompt-ids "$PROMPT" -n "$GEN" --temp 0 --ids --threads "$THREADS" \
        2>&1 >/dev/null | rate
    r=$((r + 1)); done | median)
echo "strata run ($THREADS threads):          $R tok/s"
for cfg in $(for w in $WORKERS; do [ "$w" = 1 ] && echo "1:f16" || echo "$w:f32 $w:f16"; done); do
    cfg=$(echo "$cfg" | tr : ' ')
    set -- $cfg
    T=$(cluster "$1" "$2")
    HOP=$(awk -v r="$R" -v t="$T" -v k="$1" 'BEGIN {printf "%.0f", (1000000 / t - 1000000 / r) / (k + 1)}')
    REL=$(awk -v r="$R" -v t="$T" 'BEGIN {printf "%.3f", t / r}')
    printf "cluster %s worker(s), %s wire:   %s tok/s = %sx strata run; per-hop overhead %s us\n" \
        "$1" "$2" "$T" "$REL" "$HOP"
done
