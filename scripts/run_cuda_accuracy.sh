#!/usr/bin/env bash
# The accuracy half of run_cuda_device.sh, with the analysis behind the bf16 figure (GPU machine, one `run` call):
# per preset, scripts/cuda_reference.py without the timing (prefill argmax vs transformers bf16 and fp32, exact ties
# among the bf16 reference's logits, 64 forced greedy steps), then scripts/bf16_floor.py (the reference against
# itself with one thing changed at a time). VARIANTS="QASR_CUDA_ATTN_MMA=0 ...": cuda_reference.py again with qasr
# under each environment setting (first preset only). Then the trained demo model over its 50 clips
# (scripts/cuda_accuracy_clips.py), and FIRST_AUDIO="a.wav b.wav": the first transcription after the warm-up on
# lengths the warm-up does not use (0.6B bf16, scripts/cuda_first_request.sh).
#   OUT=... bash scripts/run_cuda_accuracy.sh BUILD_DIR AUDIO [PRESETS]
set -uo pipefail
b=${1:?build dir}; audio=${2:?audio}; presets=${3:-0.6b}
source "$(dirname "$0")/cuda_env.sh"
q="$b/tools/qasr"
first=1
for p in ${presets//,/ }; do
    m=$(checkpoint "$p" "$q")
    log "$p checkpoint ready"
    timeout 300 python3 scripts/cuda_reference.py --model "$m" --audio "$audio" --qasr "$q" --skip-speed --fp32-check \
        --out "$out/accuracy_$p.json" > "$out/accuracy_$p.log" 2>&1
    log "$p cuda_reference rc=$?"; grep -vE "^\s*$" "$out/accuracy_$p.log" | grep -vi "warn\|loading" | tee -a "$out/summary.txt"
    timeout 60 "$q" dev logits -m "$m" --device cuda --steps 1 "$audio" > "$out/logits_$p.json" 2>> "$out/errors.log"
    timeout 300 python3 scripts/bf16_floor.py --model "$m" --audio "$audio" --ids "$out/logits_$p.json" \
        --out "$out/floor_$p.json" > "$out/floor_$p.log" 2>&1
    log "$p bf16_floor rc=$?"; grep -E "agrees|not available" "$out/floor_$p.log" | tee -a "$out/summary.txt"
    if [ $first = 1 ]; then
        for v in ${VARIANTS:-}; do
            env "$v" timeout 300 python3 scripts/cuda_reference.py --model "$m" --audio "$audio" --qasr "$q" --skip-speed \
                --out "$out/accuracy_${p}_$v.json" > "$out/accuracy_${p}_$v.log" 2>&1
            log "$p $v: $(grep -E "^accuracy" "$out/accuracy_${p}_$v.log" | tr '\n' ' ')"
        done
    fi
    first=0
done
if [ -f models/demo/model.safetensors ]; then
    timeout 400 python3 scripts/cuda_accuracy_clips.py --model models/demo --qasr "$q" --tsv models/demo/expected.tsv \
        --out "$out/accuracy_demo.json" > "$out/accuracy_demo.log" 2>&1
    log "demo model rc=$?"; grep -vi "warn\|loading" "$out/accuracy_demo.log" | tail -n 12 | tee -a "$out/summary.txt"
fi
# the first transcription after the warm-up at lengths it does not run: cuda_first_request.sh
[ -n "${FIRST_AUDIO:-}" ] && RUNS=15 bash "$(dirname "$0")/cuda_first_request.sh" "$b" 0.6b $FIRST_AUDIO
log done
