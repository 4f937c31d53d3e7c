#!/bin/sh
# chaos.sh - the long chaos run (issue 11): rounds of 16 concurrent streams
# (greedy and seeded sampling, f32 wire) through 3 stage workers and 2
# spares for 10 minutes, while a random fault strikes every 2 s (SIGKILL of a
# stage worker, SIGSTOP of one for 4 s, two SIGKILLs at once; new spares
# keep 5 workers running). Prints the streams equal to `strata run`, the
# faults, and the coordinator's fd and RSS drift from after the warm-up.
# Usage: bench/chaos.sh [--minutes M] [--streams N] [--every S] [--seed K]
set -eu
cd "$(dirname "$0")/.."
B=${BUILD_DIR:-build}
while [ $# -gt 0 ]; do
    case "$1" in
    --minutes) export CHAOS_MINUTES=$2; shift 2 ;;
    --streams) export CHAOS_STREAMS=$2; shift 2 ;;
    --every) export CHAOS_EVERY_S=$2; shift 2 ;;
    --seed) export CHAOS_SEED=$2; shift 2 ;;
    *) echo "chaos.sh: unknown flag $1" >&2; exit 2 ;;
    esac
done
export STRATA_SHARED=${STRATA_SHARED:-$(pwd)/../shared}
exec python3 tests/cluster/chaos.py "$B" bench
