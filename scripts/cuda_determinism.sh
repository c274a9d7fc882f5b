#!/usr/bin/env bash
# Same audio, same greedy tokens and log-probabilities, whatever ran before (GPU machine): per audio, one process
# transcribes it three times after the warm-up (first sighting of its length: eager passes; then recorded graphs),
# another once without the warm-up; every transcription is compared with the latter (scripts/cmp_tokens.py).
#   OUT=... bash scripts/cuda_determinism.sh BUILD_DIR PRESET AUDIO...
set -uo pipefail
b=${1:?build dir}; p=${2:?preset}; shift 2
source "$(dirname "$0")/cuda_env.sh"
q="$b/tools/qasr"
m=$(checkpoint "$p" "$q")
for f in "$@"; do
    n=$(basename "$f" .wav)
    opts=(-m "$m" --device cuda --format json --ignore-eos --max-new-tokens "${TOKENS:-200}" --no-itn -q)
    timeout 120 "$q" transcribe "${opts[@]}" --no-warmup "$f" > "$out/det_${n}_cold.json" 2>> "$out/errors.log"
    timeout 120 "$q" transcribe "${opts[@]}" --warmup "$f" "$f" "$f" > "$out/det_${n}_warm.jsonl" 2>> "$out/errors.log"
    for i in 1 2 3; do
        sed -n "${i}p" "$out/det_${n}_warm.jsonl" > "$out/det_${n}_warm$i.json"
        log "$n: transcription $i after the warm-up vs a process without it: $(python3 "$(dirname "$0")/cmp_tokens.py" "$out/det_${n}_cold.json" "$out/det_${n}_warm$i.json" 2>&1 | tail -1)"
    done
done
