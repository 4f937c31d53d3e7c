#!/bin/sh
# test.sh - the whole test suite: a release build (-O3, -Werror) and its
# tests, the one-home check of the sources (deploy/one_home.sh), the same
# tests again under AddressSanitizer + UBSan (halting on
# error), the unit and end-to-end engine tests with the reference kernels
# forced, and bounded libFuzzer runs of every fuzz target.
# Usage: deploy/test.sh [--quick]   (--quick: release build tests only)
# Environment: STRATA_SHARED (default ../shared), FUZZ_SECONDS (per target,
# default 25: seven targets two at a time in 100 s, so the whole run stays
# under 30 minutes on 2 cores; deploy/fuzz.sh 600 for a long run).
set -eu
cd "$(dirname "$0")/.."
ROOT=$(pwd)
SHARED="${STRATA_SHARED:-$ROOT/../shared}"
SHARED=$(cd "$SHARED" && pwd)
export STRATA_SHARED="$SHARED"
# Tests at once: one more than the CPUs. The tests mostly wait (on
# processes starting, sockets, heartbeats), so with one per CPU the CPUs
# stood 41% idle (/proc/stat over eight cluster tests under ASan), and the
# release pass took 7:30 at 2 at once against 6:00 at 3 on 2 cores. No test
# depends on speed (the suite is also run beside a process spinning on one
# core before each submission), so the extra one is load, not risk.
JOBS=$(( $(nproc) + 1 ))

step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }

# Each suite's meson summary is kept, so the last line can add them up.
SUMMARY=$(mktemp)
trap 'rm -f "$SUMMARY"' EXIT
# suite NAME ARGS... - runs `meson test ARGS`, failing the script if it fails.
suite() {
    name=$1
    shift
    out=$(mktemp)
    set +e
    "$@" 2>&1 | tee "$out"
    set -e
    ok=$(sed -n 's/^Ok: *\([0-9]*\).*/\1/p' "$out" | tail -n 1)
    fail=$(sed -n 's/^Fail: *\([0-9]*\).*/\1/p' "$out" | tail -n 1)
    timeo=$(sed -n 's/^Timeout: *\([0-9]*\).*/\1/p' "$out" | tail -n 1)
    skip=$(sed -n 's/^Skipped: *\([0-9]*\).*/\1/p' "$out" | tail -n 1)
    echo "$name ${ok:-0} $((${fail:-1} + ${timeo:-0})) ${skip:-0}" >> "$SUMMARY"
    rm -f "$out"
    if [ "${fail:-1}" != 0 ] || [ "${timeo:-0}" != 0 ]; then
        echo "test.sh: $name failed"
        awk '{p += $2; f += $3; s += $4} END {printf "tests: %d passed, %d failed, %d skipped\n", p, f, s}' "$SUMMARY"
        exit 1
    fi
}

# Both builds come first: they are two builds of the same commit, and the
# rolling-upgrade rehearsal (deploy-upgrade, tests/deploy/upgrade.py)
# upgrades each worker of one pass to the other build's (STRATA_OTHER_BUILD:
# the release pass gets build-asan, the sanitizer pass build). --quick makes
# the release build alone (the rehearsal then upgrades to a copy of it).
# One home per concept (docs/architecture.md's table): a few seconds of
# git grep, before the builds, so a concept spelled outside its home fails
# the run at once.
step "one home per concept (deploy/one_home.sh)"
if deploy/one_home.sh; then
    echo "homes 1 0 0" >> "$SUMMARY"
else
    echo "homes 0 1 0" >> "$SUMMARY"
    echo "test.sh: deploy/one_home.sh failed"
    exit 1
fi

step "release build"
[ -d build ] || meson setup build --buildtype=release -Dshared_dir="$SHARED"
meson configure build -Dshared_dir="$SHARED" >/dev/null
ninja -C build
if [ "${1:-}" != "--quick" ]; then
    step "sanitizer build (address,undefined)"
    [ -d build-asan ] || meson setup build-asan --buildtype=debugoptimized \
        -Db_sanitize=address,undefined -Db_lundef=false -Dshared_dir="$SHARED"
    meson configure build-asan -Dshared_dir="$SHARED" >/dev/null
    ninja -C build-asan
    OTHER_OF_RELEASE="$ROOT/build-asan"
else
    OTHER_OF_RELEASE=
fi
step "tests (release, default kernels)"
suite release env STRATA_OTHER_BUILD="$OTHER_OF_RELEASE" \
    meson test -C build --print-errorlogs --num-processes $JOBS

if [ "${1:-}" = "--quick" ]; then
    awk '{p += $2; f += $3; s += $4} END {printf "tests: %d passed, %d failed, %d skipped\n", p, f, s}' "$SUMMARY"
    exit 0
fi

# The reference kernels change only the stage engine's arithmetic, so the
# second pass runs the tests that compute with it: every unit test (the
# kernels, engine, goldens, model files, tokenizer, sampling) and the
# end-to-end ones that compare a cluster's or a shard chain's ids with
# `strata run` per architecture and dtype. The other integration tests
# (membership, security, HTTP, placement, streaming, deployment) exercise
# sockets and state that no kernel choice reaches; they run in the release
# and sanitizer passes; wire_exhaustive (the wire codec over every value of
# each dtype: no stage engine) in the release pass. gguf_synth_vs_llama (Strata's
# default kernels against llama.cpp on synthetic files of every
# architecture) runs in the release pass only: the reference kernels'
# agreement with llama.cpp is the golden test's, in this pass too. Of the
# wave-3 cluster tests wave3-moe runs here (a cluster's ids with the
# reference kernels); wave3-gemma and -llama_qwen3_phi3 take its cluster
# paths with other families, whose reference engine code golden runs here.
REF_E2E='^(cluster-inv1|cluster-qwen2|cluster-llama3|kquant-.*|wave3-moe|shards-exact|wire-exact)$'
INTEGRATION='^(cluster|batching|placement|security|chaos|http|shards|stream|wire|deploy|kquant|wave3)-'
ref_tests() {
    meson test -C build --list 2>/dev/null | sed -n 's#^strata\(:[a-z]*\)\{0,1\} / ##p' |
        while read -r t; do
            [ "$t" = wire_exhaustive ] || [ "$t" = gguf_synth_vs_llama ] && continue
            if echo "$t" | grep -qE "$REF_E2E" || ! echo "$t" | grep -qE "$INTEGRATION"; then
                echo "$t"
            fi
        done
}
step "tests (release, STRATA_KERNELS=ref: unit tests and the end-to-end ids)"
suite ref env STRATA_KERNELS=ref meson test -C build --print-errorlogs --num-processes $JOBS \
    $(ref_tests)

# The sanitizer pass runs every test but suites 'rss', 'slow' and
# 'variants' (tests/cluster/meson.build: cluster tests that repeat another
# test's cluster paths with another model family or dtype, whose engine
# code golden, engine-* and kernels run under the sanitizers).
# shards-rss and stream-rss assert peak resident memory, which ASan's
# shadow memory and quarantine distort, on a 1.2 GB model whose making and
# streaming take 3 of this pass's minutes; the code they run (a stage
# streamed, a shard chain) runs under ASan in stream-basic/resume/netns and
# shards-exact. wire_exhaustive (suite 'slow') compares the SIMD f16/bf16
# encoders with the references on every f32 value: arithmetic over the
# same buffers for each value, a minute under ASan that finds nothing the
# 'wire' test's sizes and edge cases under ASan would not; gguf_synth_vs_llama
# (suite 'slow') runs the same engine code as the golden and wave3-moe tests,
# which the sanitizer pass runs, on bigger files.
step "tests (address,undefined; suites rss, slow and variants not in this pass)"
# The golden test and wave3-moe run there on golden prompts of up to 64 ids:
# wave 3's 640-id prompts (the rope scaling and sliding windows at length)
# run in the release and reference passes.
suite asan env UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 STRATA_OTHER_BUILD="$ROOT/build" \
    STRATA_GOLDEN_MAX_PROMPT=64 \
    meson test -C build-asan --print-errorlogs --num-processes $JOBS --timeout-multiplier 3 \
    --no-suite rss --no-suite slow --no-suite variants

step "fuzzing (${FUZZ_SECONDS:-25} s per target)"
if deploy/fuzz.sh "${FUZZ_SECONDS:-25}" fuzz_gguf fuzz_wire fuzz_envelope fuzz_replay fuzz_step \
        fuzz_http_body fuzz_msg; then
    echo "fuzz 7 0 0" >> "$SUMMARY"
else
    echo "fuzz 0 1 0" >> "$SUMMARY"
fi

echo
echo "per suite (passed failed skipped):"
cat "$SUMMARY"
awk '{p += $2; f += $3; s += $4} END {printf "tests: %d passed, %d failed, %d skipped\n", p, f, s}' "$SUMMARY"
! awk '{f += $3} END {exit f > 0 ? 0 : 1}' "$SUMMARY"
