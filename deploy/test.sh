#!/bin/sh
# test.sh - the whole test suite: a release build (-O3, -Werror) and its
# tests, the same tests again under AddressSanitizer + UBSan (halting on
# error), the tests with the reference kernels forced, and bounded libFuzzer
# runs of every fuzz target.
# Usage: deploy/test.sh [--quick]   (--quick: release build tests only)
# Environment: STRATA_SHARED (default ../shared), FUZZ_SECONDS (per target,
# default 50: six targets share the 300 s five targets of 60 s had).
set -eu
cd "$(dirname "$0")/.."
ROOT=$(pwd)
SHARED="${STRATA_SHARED:-$ROOT/../shared}"
SHARED=$(cd "$SHARED" && pwd)
export STRATA_SHARED="$SHARED"
JOBS=2

step() { echo; echo "=== $*"; }

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

step "release build"
[ -d build ] || meson setup build --buildtype=release -Dshared_dir="$SHARED"
meson configure build -Dshared_dir="$SHARED" >/dev/null
ninja -C build
step "tests (release, default kernels)"
suite release meson test -C build --print-errorlogs --num-processes $JOBS

if [ "${1:-}" = "--quick" ]; then
    awk '{p += $2; f += $3; s += $4} END {printf "tests: %d passed, %d failed, %d skipped\n", p, f, s}' "$SUMMARY"
    exit 0
fi

step "tests (release, STRATA_KERNELS=ref)"
suite ref env STRATA_KERNELS=ref meson test -C build --print-errorlogs --num-processes $JOBS

step "sanitizer build (address,undefined)"
[ -d build-asan ] || meson setup build-asan --buildtype=debugoptimized \
    -Db_sanitize=address,undefined -Db_lundef=false -Dshared_dir="$SHARED"
meson configure build-asan -Dshared_dir="$SHARED" >/dev/null
ninja -C build-asan
step "tests (address,undefined)"
suite asan env UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    meson test -C build-asan --print-errorlogs --num-processes $JOBS --timeout-multiplier 3

step "fuzzing (${FUZZ_SECONDS:-50} s per target)"
if deploy/fuzz.sh "${FUZZ_SECONDS:-50}" fuzz_gguf fuzz_wire fuzz_envelope fuzz_step fuzz_http_body \
        fuzz_msg; then
    echo "fuzz 6 0 0" >> "$SUMMARY"
else
    echo "fuzz 0 1 0" >> "$SUMMARY"
fi

echo
echo "per suite (passed failed skipped):"
cat "$SUMMARY"
awk '{p += $2; f += $3; s += $4} END {printf "tests: %d passed, %d failed, %d skipped\n", p, f, s}' "$SUMMARY"
! awk '{f += $3} END {exit f > 0 ? 0 : 1}' "$SUMMARY"
