#!/bin/sh
# test.sh - the whole test suite: a release build (-O3, -Werror) and its
# tests, the same tests again under AddressSanitizer + UBSan (halting on
# error), the tests with the reference kernels forced, and bounded libFuzzer
# runs of every fuzz target.
# Usage: deploy/test.sh [--quick]   (--quick: release build tests only)
# Environment: STRATA_SHARED (default ../shared), FUZZ_SECONDS (default 60).
set -eu
cd "$(dirname "$0")/.."
ROOT=$(pwd)
SHARED="${STRATA_SHARED:-$ROOT/../shared}"
SHARED=$(cd "$SHARED" && pwd)
export STRATA_SHARED="$SHARED"
JOBS=2

step() { echo; echo "=== $*"; }

step "release build"
[ -d build ] || meson setup build --buildtype=release -Dshared_dir="$SHARED"
meson configure build -Dshared_dir="$SHARED" >/dev/null
ninja -C build
step "tests (release, default kernels)"
meson test -C build --print-errorlogs --num-processes $JOBS

if [ "${1:-}" = "--quick" ]; then
    exit 0
fi

step "tests (release, STRATA_KERNELS=ref)"
STRATA_KERNELS=ref meson test -C build --print-errorlogs --num-processes $JOBS

step "sanitizer build (address,undefined)"
[ -d build-asan ] || meson setup build-asan --buildtype=debugoptimized \
    -Db_sanitize=address,undefined -Db_lundef=false -Dshared_dir="$SHARED"
meson configure build-asan -Dshared_dir="$SHARED" >/dev/null
ninja -C build-asan
step "tests (address,undefined)"
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    meson test -C build-asan --print-errorlogs --num-processes $JOBS --timeout-multiplier 3

step "fuzzing (${FUZZ_SECONDS:-60} s per target)"
deploy/fuzz.sh "${FUZZ_SECONDS:-60}" fuzz_gguf fuzz_wire

echo
echo "test.sh: all suites passed"
