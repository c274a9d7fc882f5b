#!/usr/bin/env bash
# Streaming finalization benchmark of docs/benchmarks.md (Streaming): the six utterances of 5.1–14.7 s built from
# audio in this repository (and ../shared/audio/jfk.wav) with sox, a 0.6B random-weight checkpoint quantized to
# 8-bit, then `qasr bench --stream` RUNS times, a pause apart (the VM's speed drifts: report every run).
#
#   scripts/bench_stream.sh [BUILD_DIR] [WORK_DIR]
#   env: RUNS (3), PAUSE (45 s), THREADS (2), REALTIME (1: --realtime), JFK (../shared/audio/jfk.wav)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
W=${2:-/tmp/qasr-stream-bench}
RUNS=${RUNS:-3}
PAUSE=${PAUSE:-45}
THREADS=${THREADS:-2}
JFK=${JFK:-../shared/audio/jfk.wav}
Q="$B/tools/qasr"
TOK=.cache/qasr/tokenizer
D=tests/data/demo_testset
command -v sox > /dev/null || { echo "bench_stream.sh: needs sox (apt install sox)" >&2; exit 1; }

mkdir -p "$W/utt"
[ -f "$W/bf16/model.safetensors" ] || "$Q" dev make-random --preset 0.6b --layout hf --tokenizer "$TOK" "$W/bf16"
[ -f "$W/q8/model.safetensors" ] || "$Q" quantize "$W/bf16" "$W/q8" --bits 8
# the utterances (sample-exact concatenations of held-out demo clips)
sox "$D/test-de-000009.wav" "$W/utt/u05.wav"
sox "$D/test-en-000000.wav" "$D/test-en-000001.wav" "$D/test-en-000003.wav" "$W/utt/u07.wav"
sox tests/data/audio/t9s.wav "$W/utt/t9.wav"
sox "$D/test-en-000004.wav" "$D/test-en-000005.wav" "$D/test-en-000002.wav" "$D/test-en-000000.wav" "$W/utt/u10.wav"
files="$W/utt/u05.wav $W/utt/u07.wav $W/utt/t9.wav $W/utt/u10.wav"
if [ -f "$JFK" ]; then
  sox "$JFK" "$W/utt/jfk11.wav"
  files="$files $W/utt/jfk11.wav"
else
  echo "bench_stream.sh: $JFK not found, running without jfk11" >&2
fi
sox "$D/test-de-000003.wav" "$D/test-de-000006.wav" "$D/test-de-000009.wav" "$W/utt/u15.wav"
files="$files $W/utt/u15.wav"

for r in $(seq 1 "$RUNS"); do
  [ "$r" = 1 ] || sleep "$PAUSE"
  out="$W/stream_$r.txt"
  # shellcheck disable=SC2086
  "$Q" bench --stream -m "$W/q8" --threads "$THREADS" --tokens-per-second 3.5 ${REALTIME:+--realtime} $files > "$out"
  python3 - "$out" <<'PY'
import json, sys, time
lines = open(sys.argv[1]).read().strip().splitlines()
j = json.loads(lines[-1])
b = j["finalization_breakdown_ms_median"]
per = " ".join("%s %.1f" % (f["file"].rsplit("/", 1)[-1][:-4], f["finalization_ms"]) for f in j["files"])
print("%s  finalization median %.1f ms, worst %.1f ms (%s); encoder %.1f, prefill %.1f, decode %.1f; identical %d/%d"
      % (time.strftime("%H:%M:%S"), j["finalization_ms_median"], j["finalization_ms_worst"], per, b["encoder"],
         b["prefill"], b["decode"], sum(f["identical"] for f in j["files"]), len(j["files"])))
PY
done
