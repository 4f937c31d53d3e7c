#!/bin/sh
# http-load.sh - Strata's HTTP API under 64 concurrent streaming clients,
# against the native path (`strata generate`'s Generate + long polls, one
# REQ socket per request: tests/cluster/loadgen) at 8 sessions, on one
# 2-worker loopback cluster (issue 15). Both runs do the same work: 64
# greedy requests of the same prompts; the coordinator serves 8 sessions at
# a time (--max-sessions 8), so the native run keeps 8 requests in flight
# and the HTTP run lets all 64 clients wait on the gateway at once.
# Prints aggregate tok/s of each (tokens / wall time), the HTTP clients'
# p50/p99 inter-token latency and time to first token, and the ratio.
# The HTTP clients are bench/http_loadgen (C, libcurl; CLIENT=c, the
# default) or bench/http-load.mjs (Node's fetch; CLIENT=node): the same
# requests and output; on a small machine the client shares the cores with
# the server, and the 64 Node readers cost several times the C ones.
# Usage: [ROUNDS=5] [CLIENT=c|node] bench/http-load.sh [MODEL.gguf] [MAX_TOKENS] [CLIENTS]
set -eu
cd "$(dirname "$0")/.."
B=${BUILD:-build}
MODEL=${1:-}
MODEL=${MODEL:-${STRATA_SHARED:-../shared}/models/l3-synth-q8_0.gguf}
N=${2:-64}
CLIENTS=${3:-64}
PROMPT_LEN=16
SESSIONS=8
CLIENT=${CLIENT:-c}
case "$CLIENT" in
c)
    [ -x "$B/bench/http_loadgen" ] || {
        echo "http-load: $B/bench/http_loadgen is not built (libcurl missing: apt install libcurl4-openssl-dev, then ninja -C $B), or run with CLIENT=node" >&2
        exit 1
    }
    HTTP_CLIENT="$B/bench/http_loadgen" ;;
node) HTTP_CLIENT="node bench/http-load.mjs" ;; # word-split below: no spaces in these paths
*) echo "http-load: CLIENT is c or node, not $CLIENT" >&2; exit 1 ;;
esac
RUN=$(mktemp -d /tmp/strata-http-load.XXXXXX)
NAME=http-load
. deploy/procs.sh

$B/coordinator/strata-coordinator --model "$MODEL" --listen tcp://127.0.0.1:0 --min-workers 2 \
    --max-sessions $SESSIONS --http 127.0.0.1:0 --http-streams "$CLIENTS" --http-per-ip 0 \
    >"$RUN/coord" 2>"$RUN/coord.err" &
PIDS="$PIDS $!"
COORD=$(wait_word "$RUN/coord" "listening on")
URL=$(wait_word "$RUN/coord" "http on")
for w in 0 1; do
    $B/worker/strata-worker --coordinator "$COORD" --model "$MODEL" --listen tcp://127.0.0.1:0 \
        --threads 1 --name "w$w" >"$RUN/w$w" 2>"$RUN/w$w.err" &
    PIDS="$PIDS $!"
done
wait_health "$URL"
# the same prompts as http-load.mjs makes
node -e '
const [c, n, len] = process.argv.slice(1).map(Number);
for (let i = 0; i < c; i++)
  console.log(JSON.stringify({ prompt_ids: Array.from({ length: len },
    (_, k) => 1 + ((i * 7919 + k * 104729) % 1000)), n, temp: 0 }));
' "$CLIENTS" "$N" "$PROMPT_LEN" > "$RUN/requests"
# warm-up: one request each way
head -n 1 "$RUN/requests" | $B/tests/cluster/loadgen "$COORD" > /dev/null
$HTTP_CLIENT "$URL" 1 8 "$PROMPT_LEN" > /dev/null

# ROUNDS pairs, alternated (native first in odd rounds, HTTP first in even
# ones); each round's ratio is HTTP / native of that pair; the summary is
# the median of the pair ratios. Each run also gives its load generator's
# CPU seconds (user + sys, from /usr/bin/time): on a small machine the
# clients share the cores with the workers, and Node's 64 SSE readers cost
# more than the C loadgen.
native_run() {
    /usr/bin/time -f '%U %S' -o "$RUN/cpu" $B/tests/cluster/loadgen "$COORD" \
        --concurrency $SESSIONS < "$RUN/requests" > "$RUN/native"
}
ROUNDS=${ROUNDS:-5}
r=1
: > "$RUN/pairs"
while [ $r -le "$ROUNDS" ]; do
    for side in $(if [ $((r % 2)) -eq 1 ]; then echo native http; else echo http native; fi); do
        if [ "$side" = native ]; then
            T0=$(date +%s.%N); native_run; T1=$(date +%s.%N)
            NCPU=$(cat "$RUN/cpu")
            NATIVE=$(node -e '
const fs = require("fs");
const rows = fs.readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
const bad = rows.filter((r) => !r.ok).length;
const toks = rows.reduce((a, r) => a + r.ids.length, 0);
const wall = Number(process.argv[3]) - Number(process.argv[2]);
const [u, s] = process.argv[4].split(" ").map(Number);
console.log(JSON.stringify({ requests: rows.length, errors: bad, tokens: toks,
  wall_s: +wall.toFixed(3), tok_s: +(toks / wall).toFixed(1), client_cpu_s: +(u + s).toFixed(2) }));
' "$RUN/native" "$T0" "$T1" "$NCPU")
        else
            HTTP=$(/usr/bin/time -f '%U %S' -o "$RUN/cpu" $HTTP_CLIENT "$URL" "$CLIENTS" "$N" "$PROMPT_LEN")
            HCPU=$(cat "$RUN/cpu")
        fi
    done
    echo "round $r native ($SESSIONS in flight, loadgen): $NATIVE"
    echo "round $r http ($CLIENTS streaming clients):     $HTTP (client cpu $HCPU)"
    echo "$NATIVE|$HTTP|$HCPU" >> "$RUN/pairs"
    r=$((r + 1))
done
node -e '
const rows = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map((l) => {
  const [n, h, c] = l.split("|");
  const [u, s] = c.split(" ").map(Number);
  return { n: JSON.parse(n), h: JSON.parse(h), hcpu: u + s };
});
const med = (v) => { const s = [...v].sort((a, b) => a - b); const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
const ratios = rows.map((r) => r.h.tok_s / r.n.tok_s);
const bad = rows.reduce((a, r) => a + r.h.errors + r.n.errors, 0);
console.log(`http-load: ${rows.length} alternated pairs, ${rows[0].h.clients} clients each, ${bad} errors; ` +
  `HTTP ${med(rows.map((r) => r.h.tok_s)).toFixed(1)} tok/s vs native ${med(rows.map((r) => r.n.tok_s)).toFixed(1)} ` +
  `tok/s at 8 sessions (medians); pair ratios ${ratios.map((x) => x.toFixed(3)).join(" ")}: median ` +
  `${med(ratios).toFixed(3)}; inter-token p50 ${med(rows.map((r) => r.h.itl_p50_ms)).toFixed(2)} ms, ` +
  `p99 ${med(rows.map((r) => r.h.itl_p99_ms)).toFixed(2)} ms; time to first token p50 ` +
  `${med(rows.map((r) => r.h.ttft_p50_ms)).toFixed(1)} ms; client CPU per run: ${process.argv[2]} ` +
  `${med(rows.map((r) => r.hcpu)).toFixed(2)} s, loadgen ${med(rows.map((r) => r.n.client_cpu_s)).toFixed(2)} s`);
' "$RUN/pairs" "$([ "$CLIENT" = c ] && echo http_loadgen || echo node)"
