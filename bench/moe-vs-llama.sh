#!/usr/bin/env bash
# moe-vs-llama.sh - Strata against llama.cpp on mixture-of-experts models
# (issue 36), one command for the side-by-side table:
#   Mixtral-shaped:   --arch mixtral,  8 experts of FFN 5632, top-2
#   Qwen3-MoE-shaped: --arch qwen3moe, 64 experts of width 768, top-8
# both dim 2048, 32 heads, 4 KV heads, vocab 32000, --layers L (default 8,
# so that the F16 file, about 4.5 GB, and its quantizations fit a 24 GiB
# machine and are quick to make), each at --types (default Q8_0 Q4_K_M).
# Runs bench/kquant-vs-llama.sh --moe for each shape (its --help says how
# the pairs alternate and which runs count); prints its tables one after the
# other, each with the share of the bandwidth ceiling strata's decode
# reached (the active experts' bytes per token, the router and attention
# included, against the read bandwidth bench run measures).
#
# Usage: bench/moe-vs-llama.sh [--types "Q8_0 Q4_K_M"] [--layers 8] [--shapes "mixtral qwen3moe"]
#                              [any other kquant-vs-llama.sh option: --runs, --repeat, ...]
# Environment: as kquant-vs-llama.sh (STRATA, BUILD_DIR, BENCH_DIR, LLAMA_REF).
# Not run by CI. Run it on an otherwise idle machine.
set -euo pipefail

types="Q8_0 Q4_K_M"
layers=8
shapes="mixtral qwen3moe"
rest=()
while [ $# -gt 0 ]; do
    case "$1" in
    --types) types="$2"; shift 2 ;;
    --layers) layers="$2"; shift 2 ;;
    --shapes) shapes="$2"; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) rest+=("$1"); shift ;;
    esac
done

here="$(cd "$(dirname "$0")" && pwd)"
for s in $shapes; do
    case "$s" in
    mixtral) moe="8 2 5632" ;;
    qwen3moe) moe="64 8 768" ;;
    *) echo "moe-vs-llama.sh: unknown shape '$s' (mixtral or qwen3moe)" >&2; exit 2 ;;
    esac
    echo "== $s: $moe (experts, used, expert FFN), $layers layers"
    "$here/kquant-vs-llama.sh" --arch "$s" --moe "$moe" --layers "$layers" --types "$types" \
        ${rest[@]+"${rest[@]}"}
    echo
done
