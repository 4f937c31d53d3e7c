#!/bin/sh
# quickstart.sh - sets Strata up (deploy/setup.sh) and generates text.
# With no MODEL, a small synthetic llama is written to build/demo.gguf
# first (its weights are random, so its text is too).
# Usage: deploy/quickstart.sh [MODEL.gguf] [PROMPT]
set -eu
cd "$(dirname "$0")/.."
deploy/setup.sh
STRATA=build/cli/strata
MODEL="${1:-}"
PROMPT="${2:-Once upon a time}"
if [ -z "$MODEL" ]; then
    MODEL=build/demo.gguf
    if [ ! -f "$MODEL" ]; then
        echo "quickstart: no model given; writing a synthetic one to $MODEL"
        $STRATA convert synth "$MODEL" --dim 256 --layers 4 --heads 8 --kv-heads 2 \
            --ffn 768 --vocab 2048 --type q8_0 --seed 1
    fi
fi
echo "quickstart: strata run $MODEL --prompt \"$PROMPT\" -n 48"
$STRATA run "$MODEL" --prompt "$PROMPT" -n 48 --temp 0.8 --seed 42
