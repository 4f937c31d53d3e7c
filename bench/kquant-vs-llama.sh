#!/usr/bin/env bash
# kquant-vs-llama.sh - Strata against llama.cpp on K-quant models that
# llama.cpp's own quantizer wrote (a real _M mix), TinyLlama-shaped.
#
# Makes the F16 model with `strata convert synth` (dim 2048, 22 layers, 32
# heads, 4 KV heads, FFN 5632, vocab 32000, seed 1) under $BENCH_DIR
# (default /tmp/strata-bench; 2.2 GB, plus 0.7 to 0.9 GB per K-quant; kept
# between runs, never inside the repository), quantizes it with
# llama-quantize to each of --types, checks that `strata run` loads and
# decodes each file (greedy ids next to llama.cpp's, for information), then
# runs, --runs times alternately,
#     strata bench run MODEL --prompt P --gen G --threads T --repeat R --kernels K
#     llama-bench -m MODEL -p P -n G -t T -r R -mmp M -o csv
# and prints per type the median over the runs of each tool's prompt and
# decode tok/s (strata: its median of R rounds; llama-bench: its mean of R
# repetitions) and the ratios strata / llama.cpp. A pair of runs during which
# other processes used more than --quiet % (default 5) of the CPUs (from
# /proc/stat) is shown but not counted, and tried again (12 tries at most):
# on a shared 2-core machine both tools slow down, llama.cpp's spinning
# threads far more (decode 2 tok/s instead of 50 was seen).
# --llama-mmap 0 runs llama-bench with -mmp 0: weights read into its own
# buffers instead of served from the file's mapping (on a machine whose
# transparent huge pages are "madvise", that is llama.cpp's faster setting:
# TinyLlama-shaped F16 decode 13.3 -> 20.6 tok/s; Strata always copies its
# weights into huge-page memory). Default 1, llama-bench's own default.
# --arch A makes the F16 model with `strata convert synth --arch A` (llama,
# qwen2, qwen3, gemma2, gemma3 or phi3; default llama) and names the files
# tinyllama-A-TYPE.gguf (llama: tinyllama-TYPE.gguf, as before).
# --moe "N K F" makes a mixture of experts instead: `strata convert synth
# --experts N --experts-used K --expert-ffn F` (with --arch mixtral or
# qwen3moe), named tinyllama-A-eN-kK-fF-TYPE.gguf, and prints each type's
# strata decode as a share of its bandwidth ceiling (the bytes of the active
# experts only). --layers L sets the layer count (default 22).
# --kernels V passes `--kernels V` to strata bench run (default auto): with
# avx2 and LLAMA_REF pointing at a llama.cpp built without AVX-512 (see
# bench/README.md), one AVX-512 machine compares the two AVX2 builds.
#
# Usage: bench/kquant-vs-llama.sh [--types "Q4_K_M Q6_K"] [--runs 3] [--repeat 3]
#                                 [--threads 2] [--prompt 64] [--gen 128] [--quiet 5]
#                                 [--llama-mmap 1|0] [--kernels auto|avx2|avx512] [--arch A]
#                                 [--moe "N K F"] [--layers L]
# Environment: STRATA (binary; default BUILD_DIR/cli/strata), BUILD_DIR
# (default build), BENCH_DIR (models), LLAMA_REF (llama.cpp build made by
# shared/tools/build-llama-ref.sh; default ~/.cache/llama-ref). Not run by
# CI. Run it on an otherwise idle machine.
set -euo pipefail

types="Q4_K_M Q6_K"
runs=3
repeat=3
threads=2
prompt=64
gen=128
llama_mmap=1 # llama-bench -mmp
kernels=auto # strata bench run --kernels
arch=llama   # strata convert synth --arch
moe=""       # "N K F": --experts N --experts-used K --expert-ffn F
layers=22    # strata convert synth --layers
quiet=5      # a pair counts when other processes used at most this % of the CPUs
max_tries=12 # pairs tried per type before giving up
while [ $# -gt 0 ]; do
    case "$1" in
    --types) types="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --prompt) prompt="$2"; shift 2 ;;
    --gen) gen="$2"; shift 2 ;;
    --quiet) quiet="$2"; shift 2 ;;
    --llama-mmap) llama_mmap="$2"; shift 2 ;;
    --kernels) kernels="$2"; shift 2 ;;
    --arch) arch="$2"; shift 2 ;;
    --moe) moe="$2"; shift 2 ;;
    --layers) layers="$2"; shift 2 ;;
    -h|--help) sed -n '2,47p' "$0"; exit 0 ;;
    *) echo "kquant-vs-llama.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
done

root="$(cd "$(dirname "$0")/.." && pwd)"
strata="${STRATA:-${BUILD_DIR:-$root/build}/cli/strata}"
ref="${LLAMA_REF:-${XDG_CACHE_HOME:-$HOME/.cache}/llama-ref}"
dir="${BENCH_DIR:-/tmp/strata-bench}"
[ -x "$strata" ] || { echo "kquant-vs-llama.sh: no $strata (build first or set STRATA)" >&2; exit 2; }
for b in llama-bench llama-quantize refgen2; do
    [ -x "$ref/bin/$b" ] || {
        echo "kquant-vs-llama.sh: no $ref/bin/$b: build llama.cpp with shared/tools/build-llama-ref.sh" \
             "or set LLAMA_REF" >&2
        exit 2
    }
done
mkdir -p "$dir"
stem="$dir/tinyllama"
[ "$arch" = llama ] || stem="$stem-$arch"
synth_moe=()
if [ -n "$moe" ]; then
    read -r n_exp n_used f_exp <<<"$moe"
    [ -n "$f_exp" ] || { echo "kquant-vs-llama.sh: --moe wants \"N K F\", got '$moe'" >&2; exit 2; }
    synth_moe=(--experts "$n_exp" --experts-used "$n_used" --expert-ffn "$f_exp")
    stem="$stem-e$n_exp-k$n_used-f$f_exp"
fi
[ "$layers" = 22 ] || stem="$stem-l$layers"
f16="$stem-f16.gguf"
if [ ! -f "$f16" ]; then
    "$strata" convert synth "$f16.tmp" --dim 2048 --layers "$layers" --heads 32 --kv-heads 4 \
        --ffn 5632 --vocab 32000 --type f16 --seed 1 --arch "$arch" ${synth_moe[@]+"${synth_moe[@]}"}
    mv "$f16.tmp" "$f16"
fi

log="$dir/kquant-vs-llama.$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$log"
echo "logs: $log"
# the first number of the line starting with $2 in file $1 (strata's "prompt:" / "decode:")
strata_ts() { awk -v k="$2" '$1 == k { print $2; exit }' "$1"; }
# llama-bench's avg_ts of the pp (n_gen 0) or tg (n_prompt 0) row of csv file $1
llama_ts() {
    python3 - "$1" "$2" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
want = [r for r in rows if (r["n_gen"] == "0") == (sys.argv[2] == "pp")]
print(want[0]["avg_ts"])
EOF
}
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# run OUT ERR CMD... - runs CMD (stdout to OUT, stderr to ERR) and prints the
# share of the machine's CPUs that other processes used meanwhile, in %
# (/proc/stat busy time less CMD's own user + system time)
run() {
    python3 -c '
import os, resource, subprocess, sys, time
def busy():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait
r0, b0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), busy(), time.monotonic()
with open(sys.argv[1], "w") as out, open(sys.argv[2], "w") as err:
    rc = subprocess.run(sys.argv[3:], stdout=out, stderr=err).returncode
r1, b1, t1 = resource.getrusage(resource.RUSAGE_CHILDREN), busy(), time.monotonic()
own = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
print("%.0f" % max(0.0, 100.0 * ((b1 - b0) - own) / ((t1 - t0) * os.cpu_count())))
sys.exit(rc)
' "$@"
}

# the share of the bandwidth ceiling in strata's "decode:" line of file $1
strata_ceiling() { sed -n 's/^decode: .* = \([0-9.]*\)% of the \([0-9.]*\) GB\/s.*(ceiling \([0-9.]*\) tok\/s).*/\1% of the ceiling \3 tok\/s (\2 GB\/s)/p' "$1"; }

summary=()
ceilings=()
for t in $types; do
    lt=$(echo "$t" | tr 'A-Z' 'a-z')
    m="$stem-$lt.gguf"
    if [ ! -f "$m" ]; then
        "$ref/bin/llama-quantize" "$f16" "$m.tmp" "$t" "$threads" >"$log/quantize-$lt.log" 2>&1
        mv "$m.tmp" "$m"
    fi
    # strata loads and decodes llama.cpp's file; the ids are printed beside
    # llama.cpp's for information (random weights: near-ties are common)
    ids="1,450,4996,17354"
    "$strata" run "$m" --prompt-ids "$ids" -n 16 --temp 0 --ids --threads "$threads" --kernels "$kernels" \
        >"$log/run-$lt.txt" 2>"$log/run-$lt.err"
    "$ref/bin/refgen2" -m "$m" -p "$ids" -n 16 -t "$threads" >"$log/refgen-$lt.txt" 2>"$log/refgen-$lt.err"
    a=$(sed -n 's/^ids: //p' "$log/run-$lt.txt")
    b=$(sed -n 's/^gen_ids: //p' "$log/refgen-$lt.txt")
    [ -n "$a" ] || { echo "kquant-vs-llama.sh: strata run printed no ids for $m" >&2; exit 1; }
    echo "$t greedy ids from $ids: strata $a; llama.cpp $b ($( [ "$a" = "$b" ] && echo equal || echo differ))"
    sp=() sd=() lp=() ld=()
    r=0 tries=0
    while [ "$r" -lt "$runs" ]; do
        tries=$((tries + 1))
        n=$((r + 1))
        os=$(run "$log/strata-$lt-$n.txt" "$log/strata-$lt-$n.err" "$strata" bench run "$m" \
            --prompt "$prompt" --gen "$gen" --threads "$threads" --repeat "$repeat" --kernels "$kernels")
        ol=$(run "$log/llama-$lt-$n.csv" "$log/llama-$lt-$n.err" "$ref/bin/llama-bench" -m "$m" \
            -p "$prompt" -n "$gen" -t "$threads" -r "$repeat" -mmp "$llama_mmap" -o csv)
        line="strata prompt $(strata_ts "$log/strata-$lt-$n.txt" prompt:) decode"
        line="$line $(strata_ts "$log/strata-$lt-$n.txt" decode:) tok/s (others used $os% of the CPUs);"
        line="$line llama.cpp prompt $(llama_ts "$log/llama-$lt-$n.csv" pp) decode"
        line="$line $(llama_ts "$log/llama-$lt-$n.csv" tg) tok/s (others $ol%)"
        if [ "$os" -gt "$quiet" ] || [ "$ol" -gt "$quiet" ]; then
            echo "$t pair $tries: $line: disturbed (> $quiet%), not counted"
            [ "$tries" -lt "$max_tries" ] || { echo "kquant-vs-llama.sh: $t: no quiet pair in" \
                "$max_tries tries; run it on an idle machine" >&2; exit 1; }
            continue
        fi
        r=$n
        echo "$t pair $tries: $line: run $r"
        sp+=("$(strata_ts "$log/strata-$lt-$r.txt" prompt:)")
        sd+=("$(strata_ts "$log/strata-$lt-$r.txt" decode:)")
        lp+=("$(llama_ts "$log/llama-$lt-$r.csv" pp)")
        ld+=("$(llama_ts "$log/llama-$lt-$r.csv" tg)")
        ceilings+=("$t run $r: strata decode $(strata_ceiling "$log/strata-$lt-$r.txt")")
    done
    msp=$(median "${sp[@]}") msd=$(median "${sd[@]}") mlp=$(median "${lp[@]}") mld=$(median "${ld[@]}")
    summary+=("$(awk -v t="$t" -v a="$msp" -v b="$mlp" -v c="$msd" -v d="$mld" -v n="$runs" 'BEGIN {
        printf "| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %d |", t, a, b, a / b, c, d, c / d, n }')")
    label="$arch"
    [ -z "$moe" ] || label="$arch ${n_exp}x$f_exp top-$n_used L$layers"
    [ "$label" = llama ] || summary[-1]="| $label ${summary[-1]#| }"
done
echo
echo "| type | strata prompt tok/s | llama.cpp prompt tok/s | ratio | strata decode tok/s | llama.cpp decode tok/s | ratio | runs |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
printf '%s\n' "${summary[@]}"
if [ -n "$moe" ]; then
    echo
    echo "bandwidth ceiling (weights of the active experts per decoded token, read bandwidth measured in each run):"
    printf '%s\n' "${ceilings[@]}"
fi
