#!/usr/bin/env bash
# engine.sh - the engine's speed on TinyLlama-shaped synthetic models.
#
# Builds `strata` (unless STRATA points at a binary), makes the Q8_0, Q4_0
# and F16 models with `strata convert synth` (dim 2048, 22 layers, 32 heads,
# 4 KV heads, FFN 5632, vocab 32000, seed 1) under $BENCH_DIR (default
# /tmp/strata-bench; each about 0.6 to 2.2 GB, kept between runs), then runs
# `strata bench kernels` once and `strata bench run` on each model, and
# prints the prompt/decode lines of each model at the end.
#
# Usage: bench/engine.sh [--types "q8_0 q4_0 f16"] [--repeat N] [--threads N]
#                        [--prompt N] [--gen N] [--no-kernels]
# Environment: STRATA (binary), BENCH_DIR (models), BUILD_DIR (meson build
# folder, default build). Run it on an otherwise idle machine: `bench run`
# prints how much CPU other processes took during its timed rounds.
set -euo pipefail

types="q8_0 q4_0 f16"
repeat=5
threads=2
prompt=64
gen=128
kernels=1
while [ $# -gt 0 ]; do
    case "$1" in
    --types) types="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --prompt) prompt="$2"; shift 2 ;;
    --gen) gen="$2"; shift 2 ;;
    --no-kernels) kernels=0; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "engine.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
done

root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
if [ -z "${STRATA:-}" ]; then
    if [ ! -d "$build" ]; then
        meson setup "$build" "$root" >/dev/null
    fi
    ninja -C "$build" cli/strata >/dev/null
    STRATA="$build/cli/strata"
fi
dir="${BENCH_DIR:-/tmp/strata-bench}"
mkdir -p "$dir"

for t in $types; do
    m="$dir/tinyllama-$t.gguf"
    if [ ! -s "$m" ]; then
        echo "== making $m"
        "$STRATA" convert synth "$m" --dim 2048 --layers 22 --heads 32 --kv-heads 4 \
            --ffn 5632 --vocab 32000 --type "$t" --seed 1
    fi
done

if [ "$kernels" = 1 ]; then
    echo "== strata bench kernels --threads $threads"
    "$STRATA" bench kernels --threads "$threads"
fi

summary=""
for t in $types; do
    m="$dir/tinyllama-$t.gguf"
    echo "== strata bench run $m --prompt $prompt --gen $gen --threads $threads --repeat $repeat"
    out="$("$STRATA" bench run "$m" --prompt "$prompt" --gen "$gen" --threads "$threads" \
        --repeat "$repeat")"
    echo "$out"
    summary+="$t $(echo "$out" | grep -E '^(bandwidth|machine): ' | tr '\n' ' ')"$'\n'
    summary+="$t $(echo "$out" | grep '^prompt: ')"$'\n'
    summary+="$t $(echo "$out" | grep '^decode: ')"$'\n'
done
echo "== summary"
printf '%s' "$summary"
