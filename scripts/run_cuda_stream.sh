#!/usr/bin/env bash
# Streaming on the GPU machine, in one `run` call: the CUDA stream test, then `qasr bench --stream --device cuda`
# (finalization latency, per-chunk compute, streamed-vs-offline) on the 0.6B random-weight checkpoint at 8-bit and
# bf16 over the utterances, and on the trained demo model over its held-out clips (finals vs offline).
#   OUT=... bash scripts/run_cuda_stream.sh BUILD_DIR UTTERANCE_DIR
set -uo pipefail
b=${1:?build dir}; utt=${2:?utterance dir}
source "$(dirname "$0")/cuda_env.sh"
q="$b/tools/qasr"
summ() { python3 -c "
import json,sys
j=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
b=j['finalization_breakdown_ms_median']
print('finalization median %.1f ms, worst %.1f ms (encoder %.1f, prefill %.1f, decode %.1f); chunk median %.1f, worst %.1f ms; identical %d/%d' % (
  j['finalization_ms_median'], j['finalization_ms_worst'], b['encoder'], b['prefill'], b['decode'], j['chunk_ms_median'],
  j['chunk_ms_worst'], sum(f['identical'] for f in j['files']), len(j['files'])))" "$1" 2>&1 | tail -1; }
timeout 180 "$b/tests/ops/qasr_cuda_tests" --gtest_filter="${GTEST_FILTER:-*}" > "$out/cuda_tests.log" 2>&1
log "ops.cuda rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' "$out/cuda_tests.log" | tr '\n' ' ')"
grep -E 'Failure|Expected|Which is|actual' "$out/cuda_tests.log" | head -20 | tee -a "$out/summary.txt"
m=/tmp/qm/0.6b
[ -f "$m/bf16/model.safetensors" ] || "$q" dev make-random --preset 0.6b --layout hf --tokenizer .cache/qasr/tokenizer "$m/bf16" > "$out/setup.log" 2>&1
[ -f "$m/q8/config.json" ] || "$q" quantize "$m/bf16" "$m/q8" --bits 8 >> "$out/setup.log" 2>&1
log "checkpoints ready"
files=$(ls "$utt"/*.wav | tr '\n' ' ')
for v in ${STREAM_VARIANTS:-q8 bf16}; do
    for r in $(seq 1 "${ROUNDS:-2}"); do
        timeout 240 "$q" bench --stream -m "$m/$v" --device cuda --threads "$(nproc)" --tokens-per-second 3.5 $files \
            > "$out/stream_${v}_$r.txt" 2>> "$out/errors.log"
        log "stream 0.6B $v round $r rc=$?: $(summ "$out/stream_${v}_$r.txt")"
    done
done
timeout 240 "$q" bench --stream -m models/demo --device cuda --threads "$(nproc)" tests/data/demo_testset/*.wav $files \
    > "$out/stream_demo.txt" 2>> "$out/errors.log"
log "demo model stream on cuda rc=$?: $(grep -c '(identical)' "$out/stream_demo.txt") identical of $(ls tests/data/demo_testset/*.wav $utt/*.wav | wc -l); $(summ "$out/stream_demo.txt")"
# bounded cost: an 11-minute stream (the held-out demo clips concatenated) on the demo model; per-chunk compute
# medians per minute of stream position should stay flat
if [ "${LONG:-1}" = 1 ]; then
    python3 - "$out/long.wav" tests/data/demo_testset/*.wav <<'PY'
import sys, wave
out, files = sys.argv[1], sys.argv[2:]
frames, params = [], None
total = 0
while total < 16000 * 660:
    for f in files:
        with wave.open(f) as w:
            params = params or w.getparams()
            d = w.readframes(w.getnframes())
            frames.append(d)
            total += len(d) // 2
with wave.open(out, "wb") as w:
    w.setparams(params)
    w.writeframes(b"".join(frames))
PY
    timeout 300 "$q" bench --stream -m models/demo --device cuda --threads "$(nproc)" --pause-seconds 0.3 "$out/long.wav" \
        > "$out/stream_long.txt" 2>> "$out/errors.log"
    log "demo model, 11-minute stream on cuda rc=$?: $(python3 -c "
import json,sys
j=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
f=j['files'][0]
print('%.0f s audio; per-chunk compute median per minute:' % f['audio_seconds'], ' '.join('%.1f' % x for x in f['chunk_ms_median_per_minute']), 'ms; worst %.1f ms' % f['chunk_ms_worst'])" "$out/stream_long.txt" 2>&1 | tail -1)"
    rm -f "$out/long.wav"
fi
log done
