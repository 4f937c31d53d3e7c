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
# Usage: bench/http-load.sh [MODEL.gguf] [MAX_TOKENS] [CLIENTS]
set -eu
cd "$(dirname "$0")/.."
B=${BUILD:-build}
MODEL=${1:-${STRATA_SHARED:-../shared}/models/l3-synth-q8_0.gguf}
N=${2:-64}
CLIENTS=${3:-64}
PROMPT_LEN=16
SESSIONS=8
RUN=$(mktemp -d /tmp/strata-http-load.XXXXXX)
NAME=http-load
. deploy/procs.sh

$B/coordinator/strata-coordinator --model "$MODEL" --listen tcp://127.0.0.1:0 --min-workers 2 \
    --max-sessions $SESSIONS --http 127.0.0.1:0 --http-streams "$CLIENTS" \
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
node bench/http-load.mjs "$URL" 1 8 "$PROMPT_LEN" > /dev/null

T0=$(date +%s.%N)
$B/tests/cluster/loadgen "$COORD" --concurrency $SESSIONS < "$RUN/requests" > "$RUN/native"
T1=$(date +%s.%N)
NATIVE=$(node -e '
const fs = require("fs");
const rows = fs.readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
const bad = rows.filter((r) => !r.ok).length;
const toks = rows.reduce((a, r) => a + r.ids.length, 0);
const wall = Number(process.argv[3]) - Number(process.argv[2]);
console.log(JSON.stringify({ requests: rows.length, errors: bad, tokens: toks,
  wall_s: +wall.toFixed(3), tok_s: +(toks / wall).toFixed(1) }));
' "$RUN/native" "$T0" "$T1")
HTTP=$(node bench/http-load.mjs "$URL" "$CLIENTS" "$N" "$PROMPT_LEN")
echo "native ($SESSIONS in flight, loadgen): $NATIVE"
echo "http ($CLIENTS streaming clients):     $HTTP"
node -e '
const n = JSON.parse(process.argv[1]), h = JSON.parse(process.argv[2]);
console.log(`http-load: ${h.clients} clients, ${h.ok} ok, ${h.errors} errors; ` +
  `${h.tok_s} tok/s over HTTP vs ${n.tok_s} tok/s native at 8 sessions: ratio ` +
  `${(h.tok_s / n.tok_s).toFixed(3)}; inter-token p50 ${h.itl_p50_ms.toFixed(2)} ms, ` +
  `p99 ${h.itl_p99_ms.toFixed(2)} ms; time to first token p50 ${h.ttft_p50_ms.toFixed(1)} ms`);
' "$NATIVE" "$HTTP"
