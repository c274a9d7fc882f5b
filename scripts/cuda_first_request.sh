#!/usr/bin/env bash
# The first transcription after the warm-up, per audio length and environment variant (GPU machine): `qasr bench
# --api-warmup` in a fresh process per (variant, audio), its first timed run's stages beside the median of the rest.
#   OUT=... [VARIANTS="base CUDA_MODULE_LOADING=EAGER"] [BINS="a/qasr b/qasr"] bash scripts/cuda_first_request.sh BUILD_DIR PRESET AUDIO...
# BINS: binaries to compare (default BUILD_DIR/tools/qasr), each run per variant and audio.
set -uo pipefail
b=${1:?build dir}; p=${2:?preset}; shift 2
source "$(dirname "$0")/cuda_env.sh"
q="$b/tools/qasr"
m=$(checkpoint "$p" "$q")
for v in ${VARIANTS:-base}; do
  for q in ${BINS:-$q}; do
    for f in "$@"; do
        j="$out/first_${v//[^A-Za-z0-9_]/_}_$(basename "$q")_$(basename "$f" .wav).json"
        ( [ "$v" = base ] || export "$v"; timeout 120 "$q" bench -m "$m" --device cuda --audio "$f" --ignore-eos \
            --max-new-tokens 40 --runs ${RUNS:-10} --warmup 0 --api-warmup --json > "$j" 2>> "$out/errors.log" )
        log "$v $(basename "$q") $(basename "$f"): $(python3 -c "
import json; j=json.load(open('$j')); f=j.get('first_ms') or dict(mel=0, encode=0, prefill=0, decode=0)
print('first %.2f ms (mel %.2f enc %.2f prefill %.2f decode %.2f), median %.2f ms (enc %.2f prefill %.2f decode %.2f), warm-up %.0f ms, load %.0f ms' % (
    j['first_total_ms'], f['mel'], f['encode'], f['prefill'], f['decode'], j['total_ms'], j['encode_ms'], j['prefill_ms'], j['decode_ms'], j['api_warmup_ms'], j['load_ms']))" 2>&1)"
    done
  done
done
