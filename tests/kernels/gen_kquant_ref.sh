#!/bin/sh
# gen_kquant_ref.sh - regenerates tests/kernels/data/kquant_dequant_ref.json:
# llama.cpp's dequantization (ggml's to_float) of every K-quant, BF16,
# legacy and IQ4 quant tensor of the shared synth-s and w3-qwen3 files, one
# FNV-1a 64 digest per tensor, and the digest of ggml's Q8_1 reference
# quantizer on a fixed input (see gen_kquant_ref.c). Needs the reference build of llama.cpp in
# $LLAMA_REF (default ~/.cache/llama-ref, made by shared/tools/build-llama-ref.sh)
# and the shared models in $STRATA_SHARED (default ../shared beside the
# repository). Not run by the suite or CI; the JSON it writes is committed.
#
#   tests/kernels/gen_kquant_ref.sh            # rewrites the JSON in place
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
REF=${LLAMA_REF:-${XDG_CACHE_HOME:-$HOME/.cache}/llama-ref}
SHARED=${STRATA_SHARED:-$ROOT/../shared}
W=$REF/work
if [ ! -f "$W/src/ggml/include/ggml.h" ] || [ ! -f "$W/build/bin/libggml-base.so" ]; then
  echo "gen_kquant_ref.sh: no llama.cpp build in $REF (expected $W/src and $W/build/bin);" >&2
  echo "  build it with shared/tools/build-llama-ref.sh or set LLAMA_REF" >&2
  exit 2
fi
[ -d "$SHARED/models" ] || { echo "gen_kquant_ref.sh: no $SHARED/models (set STRATA_SHARED)" >&2; exit 2; }
NLC=$(sed -n 's/.*"version": *"\([^"]*\)".*/\1/p' "$W/npm/node_modules/node-llama-cpp/package.json" | head -n 1)
COMMIT=$(git -C "$W/src" rev-parse --short=12 HEAD)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cc -std=c11 -O2 -Wall -Wextra -Werror -o "$TMP/gen_kquant_ref" "$HERE/gen_kquant_ref.c" \
  -I"$W/src/ggml/include" -L"$W/build/bin" -lggml-base -Wl,-rpath,"$W/build/bin"
"$TMP/gen_kquant_ref" "llama.cpp bundled in node-llama-cpp $NLC (source commit $COMMIT), ggml to_float" \
  "$SHARED/models" synth-s-q2_k.gguf synth-s-q3_k_m.gguf synth-s-q4_k_m.gguf \
  synth-s-q5_k_m.gguf synth-s-q6_k.gguf synth-s-bf16.gguf w3-qwen3-q4_1.gguf \
  w3-qwen3-q5_0.gguf w3-qwen3-q5_1.gguf w3-qwen3-iq4_nl.gguf w3-qwen3-iq4_xs.gguf >"$TMP/out.json"
mkdir -p "$HERE/data"
mv "$TMP/out.json" "$HERE/data/kquant_dequant_ref.json"
echo "gen_kquant_ref.sh: wrote $HERE/data/kquant_dequant_ref.json"
