#!/bin/sh
# quickstart.sh - sets Strata up (deploy/setup.sh), starts a local cluster
# (a coordinator and two workers on loopback, each given a port by the
# kernel), generates text through it, and stops the cluster again. The
# cluster is keyed and encrypted: `strata keygen` makes a fresh key (mode
# 0600) that the coordinator, the workers and the CLI all use, with
# --encrypt (docs/cluster.md "Security"). The coordinator also serves the
# OpenAI-compatible HTTP API on 127.0.0.1:8080 (docs/http-api.md); the
# script ends by showing a curl chat request against it (and, on a
# terminal, keeps the cluster up until Enter so you can send your own).
# With no MODEL, a small synthetic llama is written to build/demo.gguf
# first (its weights are random, so its text is too).
# Usage: deploy/quickstart.sh [MODEL.gguf] [PROMPT]
set -eu
cd "$(dirname "$0")/.."
deploy/setup.sh
B=build
MODEL="${1:-}"
PROMPT="${2:-Once upon a time}"
if [ -z "$MODEL" ]; then
    MODEL=$B/demo.gguf
    if [ ! -f "$MODEL" ]; then
        echo "quickstart: no model given; writing a synthetic one to $MODEL"
        $B/cli/strata convert synth "$MODEL" --dim 256 --layers 4 --heads 8 --kv-heads 2 \
            --ffn 768 --vocab 2048 --type q8_0 --seed 1
    fi
fi

RUN=$(mktemp -d /tmp/strata-quickstart.XXXXXX)
NAME=quickstart
. deploy/procs.sh
KEY="$RUN/cluster.key"
$B/cli/strata keygen "$KEY"
SEC="--cluster-key $KEY --encrypt"

HTTP=127.0.0.1:8080
# the synthetic model has no chat template of its own: ChatML renders its chats
TMPL=""
[ -n "${1:-}" ] || TMPL="--chat-template chatml"
$B/coordinator/strata-coordinator --model "$MODEL" --listen tcp://127.0.0.1:0 --min-workers 2 \
    --http "$HTTP" $TMPL $SEC >"$RUN/coord" 2>"$RUN/coord.err" &
PIDS="$PIDS $!"
COORD=$(wait_word "$RUN/coord" "listening on")
echo "quickstart: coordinator at $COORD"
for w in 1 2; do
    $B/worker/strata-worker --coordinator "$COORD" --model "$MODEL" --listen tcp://127.0.0.1:0 \
        --threads 1 --name "worker$w" $SEC >"$RUN/w$w" 2>"$RUN/w$w.err" &
    PIDS="$PIDS $!"
    echo "quickstart: worker$w data plane at $(wait_word "$RUN/w$w" "listening on")"
done
i=0
until $B/cli/strata status --json --coordinator "$COORD" $SEC 2>/dev/null | grep -Eq '"serving":[[:space:]]*true'; do
    i=$((i + 1))
    if [ $i -gt 300 ]; then echo "quickstart: the cluster did not start serving" >&2; exit 1; fi
    sleep 0.1
done
$B/cli/strata status --coordinator "$COORD" $SEC
echo "quickstart: strata generate --prompt \"$PROMPT\" -n 48"
$B/cli/strata generate --coordinator "$COORD" $SEC --prompt "$PROMPT" -n 48 --temp 0.8 --seed 42
wait_health "http://$HTTP"
CURL="curl -s http://$HTTP/v1/chat/completions -H 'Content-Type: application/json' -d '{\"messages\": [{\"role\": \"user\", \"content\": \"Hello!\"}], \"max_tokens\": 32}'"
echo "quickstart: the OpenAI-compatible API: $CURL"
sh -c "$CURL"
echo
if [ -t 0 ]; then
    echo "quickstart: the cluster serves http://$HTTP/v1 until you press Enter; try:"
    echo "  $CURL"
    read -r _
fi
echo "quickstart: stopping the cluster"
