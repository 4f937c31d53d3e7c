#!/bin/sh
# fuzz.sh - builds the libFuzzer targets in build-fuzz (clang, -Dfuzz=true)
# and runs each target named on the command line for a bounded time,
# failing as soon as one finds a crash, a leak or a timeout.
# Usage: deploy/fuzz.sh [SECONDS] TARGET...    (SECONDS defaults to 60)
#   e.g. deploy/fuzz.sh 60 fuzz_gguf fuzz_wire
# Environment: STRATA_SHARED (default ../shared) for the seed corpus;
# FUZZ_JOBS, targets run at once (default: the CPUs online).
# Seeds: fuzz_gguf gets 64 KiB and 4 KiB prefixes of every shared .gguf plus
# a few tiny crafted files; any target also gets fuzz/seeds/TARGET/* if that
# folder exists. Crash inputs land in build-fuzz/artifacts/TARGET/.
set -eu
cd "$(dirname "$0")/.."
ROOT=$(pwd)
SHARED="${STRATA_SHARED:-$ROOT/../shared}"

SECONDS_PER=60
case "${1:-}" in
    ''|*[!0-9]*) ;;
    *) SECONDS_PER=$1; shift ;;
esac
if [ $# -eq 0 ]; then
    echo "usage: deploy/fuzz.sh [SECONDS] TARGET..." >&2
    exit 2
fi

if [ ! -f build-fuzz/build.ninja ]; then
    CC=clang meson setup build-fuzz -Dfuzz=true -Dtests=false -Db_lundef=false \
        --buildtype=debugoptimized
fi
for t in "$@"; do
    ninja -C build-fuzz "fuzz/$t"
done

# seeds_gguf DIR - writes the GGUF seed corpus into DIR.
seeds_gguf() {
    dir=$1
    for f in "$SHARED"/models/*.gguf; do
        [ -f "$f" ] || continue
        b=$(basename "$f" .gguf)
        head -c 65536 "$f" > "$dir/$b.64k"
        head -c 4096 "$f" > "$dir/$b.4k"
    done
    # a whole valid file: one pair (general.architecture = "llama"), one F32
    # tensor "t" of 8 elements at offset 0, data aligned to 32
    {
        printf 'GGUF\003\000\000\000'
        printf '\001\000\000\000\000\000\000\000\001\000\000\000\000\000\000\000'
        printf '\024\000\000\000\000\000\000\000general.architecture'
        printf '\010\000\000\000\005\000\000\000\000\000\000\000llama'
        printf '\001\000\000\000\000\000\000\000t\001\000\000\000'
        printf '\010\000\000\000\000\000\000\000\000\000\000\000'
        printf '\000\000\000\000\000\000\000\000'
        head -c 26 /dev/zero
        head -c 32 /dev/zero | tr '\000' '\077'
    } > "$dir/tiny-valid.gguf"
    # an empty file with no pairs and no tensors
    printf 'GGUF\003\000\000\000' > "$dir/empty.gguf"
    head -c 16 /dev/zero >> "$dir/empty.gguf"
    # an array of strings and an array of u32
    {
        printf 'GGUF\003\000\000\000\000\000\000\000\000\000\000\000'
        printf '\002\000\000\000\000\000\000\000'
        printf '\001\000\000\000\000\000\000\000a\011\000\000\000\010\000\000\000'
        printf '\002\000\000\000\000\000\000\000\001\000\000\000\000\000\000\000x'
        printf '\000\000\000\000\000\000\000\000'
        printf '\001\000\000\000\000\000\000\000b\011\000\000\000\004\000\000\000'
        printf '\002\000\000\000\000\000\000\000\007\000\000\000\011\000\000\000'
    } > "$dir/arrays.gguf"
}

# fuzz_one TARGET - one bounded run, its output in build-fuzz/logs/TARGET.log
# and its exit status in build-fuzz/logs/TARGET.rc.
fuzz_one() {
    t=$1
    corpus="build-fuzz/corpus/$t"
    art="build-fuzz/artifacts/$t"
    mkdir -p "$corpus" "$art"
    case "$t" in
        fuzz_gguf) seeds_gguf "$corpus" ;;
    esac
    if [ -d "fuzz/seeds/$t" ]; then
        cp -r "fuzz/seeds/$t/." "$corpus/"
    fi
    set +e
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        "build-fuzz/fuzz/$t" -max_total_time="$SECONDS_PER" -timeout=10 \
            -rss_limit_mb=2048 -max_len=1048576 -print_final_stats=1 \
            -artifact_prefix="$art/" "$corpus" > "build-fuzz/logs/$t.log" 2>&1
    echo $? > "build-fuzz/logs/$t.rc"
    set -e
}

# Targets run FUZZ_JOBS at a time (default: the CPUs online), each a
# single-threaded libFuzzer process with its own SECONDS_PER seconds, so
# the run takes ceil(targets / jobs) * SECONDS_PER seconds and every target
# gets the time it was given. Each target's output is printed when its
# batch ends.
JOBS=${FUZZ_JOBS:-$(getconf _NPROCESSORS_ONLN)}
mkdir -p build-fuzz/logs
status=0
batch=""
n=0
for t in "$@" ""; do
    if [ -n "$t" ]; then
        echo "=== $t: ${SECONDS_PER} s"
        fuzz_one "$t" &
        batch="$batch $t"
        n=$((n + 1))
    fi
    if [ "$n" -ge "$JOBS" ] || { [ -z "$t" ] && [ "$n" -gt 0 ]; }; then
        wait
        for b in $batch; do
            echo "--- $b"
            cat "build-fuzz/logs/$b.log"
            if [ "$(cat "build-fuzz/logs/$b.rc")" != 0 ]; then
                echo "fuzz.sh: $b FAILED; inputs in build-fuzz/artifacts/$b/" >&2
                status=1
            fi
        done
        batch=""
        n=0
    fi
done
exit $status
