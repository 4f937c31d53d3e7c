# procs.sh - sourced by deploy/quickstart.sh and bench/http-load.sh: the
# processes a script starts, stopped on exit, and waiting for the address a
# process prints. Set RUN (a temporary folder, removed on exit) and NAME
# (for messages) before sourcing; add each started process's pid to PIDS.
PIDS=""
cleanup() {
    for p in $PIDS; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$RUN"
}
trap cleanup EXIT INT TERM

# wait_word FILE PREFIX - the word after "PREFIX " at the start of a line of
# FILE (an address a process printed), waiting up to 30 s for it
wait_word() {
    i=0
    while [ $i -lt 300 ]; do
        a=$(sed -n "s|^$2 \([^ ]*\).*|\1|p" "$1" 2>/dev/null | head -n 1)
        if [ -n "$a" ]; then echo "$a"; return 0; fi
        i=$((i + 1)); sleep 0.1
    done
    echo "$NAME: no '$2' line in $1" >&2; cat "$1" "$1.err" >&2 || true; return 1
}

# wait_health URL - waits up to 30 s for GET URL/health to answer 200 (the
# HTTP API of a coordinator whose plan serves)
wait_health() {
    i=0
    until curl -sf "$1/health" >/dev/null; do
        i=$((i + 1))
        if [ $i -gt 300 ]; then echo "$NAME: $1/health did not answer 200" >&2; return 1; fi
        sleep 0.1
    done
}
