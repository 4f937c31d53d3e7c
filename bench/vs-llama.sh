#!/usr/bin/env bash
# vs-llama.sh - Strata against llama.cpp on every weight type of issue 16
# (F16, BF16, Q8_0, Q4_0, Q4_K_M, Q6_K), TinyLlama-shaped, one table.
#
# Finds llama.cpp's build in $LLAMA_REF (default ~/.cache/llama-ref) or
# builds it with $SHARED_DIR/tools/build-llama-ref.sh (SHARED_DIR default
# ../shared beside the repository; 10-15 minutes on 2 cores, once), then
# hands the work to bench/kquant-vs-llama.sh: the F16 model from `strata
# convert synth` (seed 1), the other types from it with llama-quantize,
# both tools' greedy ids on each file, and --runs alternated pairs of
#     strata bench run MODEL --prompt P --gen G --threads T --repeat R
#     llama-bench -m MODEL -p P -n G -t T -r R
# per type, counting only pairs during which other processes stayed under
# --quiet % of the CPUs. To that script's table of medians this adds, per
# type, the spread of the pair-by-pair ratios (min..max of strata /
# llama.cpp over the counted pairs), read from its log directory.
#
# Usage: bench/vs-llama.sh [--types "F16 BF16 Q8_0 Q4_0 Q4_K_M Q6_K"] [--runs 5]
#                          [other options of bench/kquant-vs-llama.sh]
# Environment: as bench/kquant-vs-llama.sh (STRATA, BUILD_DIR, BENCH_DIR,
# LLAMA_REF), plus SHARED_DIR. Not run by CI; run it on an idle machine.
set -euo pipefail

types="F16 BF16 Q8_0 Q4_0 Q4_K_M Q6_K"
runs=5
pass=()
while [ $# -gt 0 ]; do
    case "$1" in
    --types) types="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    --*) [ $# -ge 2 ] || { echo "vs-llama.sh: $1 needs a value" >&2; exit 2; }
         pass+=("$1" "$2"); shift 2 ;;
    *) echo "vs-llama.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
done

root="$(cd "$(dirname "$0")/.." && pwd)"
ref="${LLAMA_REF:-${XDG_CACHE_HOME:-$HOME/.cache}/llama-ref}"
shared="${SHARED_DIR:-$root/../shared}"
if [ ! -x "$ref/bin/llama-bench" ] || [ ! -x "$ref/bin/refgen2" ]; then
    [ -x "$shared/tools/build-llama-ref.sh" ] || {
        echo "vs-llama.sh: no llama.cpp build in $ref and no $shared/tools/build-llama-ref.sh" \
             "(set LLAMA_REF or SHARED_DIR)" >&2
        exit 2
    }
    PREFIX="$ref" "$shared/tools/build-llama-ref.sh"
fi

out="$(mktemp)"
trap 'rm -f "$out"' EXIT
LLAMA_REF="$ref" "$root/bench/kquant-vs-llama.sh" --types "$types" --runs "$runs" \
    ${pass[@]+"${pass[@]}"} | tee "$out"

log=$(sed -n 's/^logs: //p' "$out")
[ -d "$log" ] || { echo "vs-llama.sh: no log directory in kquant-vs-llama.sh's output" >&2; exit 1; }
echo
echo "pair-by-pair ratios strata / llama.cpp (min .. max over the $runs counted pairs):"
echo
echo "| type | prompt ratio min | prompt ratio max | decode ratio min | decode ratio max |"
echo "| --- | ---: | ---: | ---: | ---: |"
for t in $types; do
    lt=$(echo "$t" | tr 'A-Z' 'a-z')
    python3 - "$log" "$lt" "$runs" "$t" <<'EOF'
import csv, sys
log, lt, runs, t = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
def strata(path, key):
    for line in open(path):
        f = line.split()
        if f and f[0] == key:
            return float(f[1])
    raise SystemExit("vs-llama.sh: no '%s' line in %s" % (key, path))
def llama(path, pp):
    rows = list(csv.DictReader(open(path)))
    return float([r for r in rows if (r["n_gen"] == "0") == pp][0]["avg_ts"])
rp, rd = [], []
for n in range(1, runs + 1):
    s, l = "%s/strata-%s-%d.txt" % (log, lt, n), "%s/llama-%s-%d.csv" % (log, lt, n)
    rp.append(strata(s, "prompt:") / llama(l, True))
    rd.append(strata(s, "decode:") / llama(l, False))
print("| %s | %.2f | %.2f | %.2f | %.2f |" % (t, min(rp), max(rp), min(rd), max(rd)))
EOF
done
