#!/usr/bin/env bash
# CUDA backend on the GPU machine, in one `run` call: the ops-tier CUDA tests, then per preset a random-weight
# checkpoint (bf16 + MLX 8/6/4-bit), `qasr bench --device cuda` at a fixed decode length, cold-start timings,
# and scripts/cuda_reference.py (bf16 accuracy vs transformers + the reference's end-to-end time).
#   OUT=... [PREV_QASR=old/qasr] bash scripts/run_cuda_device.sh BUILD_DIR AUDIO [PRESETS] [TOKENS]
# PREV_QASR: a previous build's qasr, benched right after each width for a same-call comparison.
# Every GPU command has a time limit: a hang (session 13 lost 500 s of device time to one) costs minutes, not the call.
# Needs: BUILD_DIR with tools/qasr and tests/ops/qasr_cuda_tests (built here with -DQASR_CUDA=ON), their non-CUDA
# shared libraries in build-carry/lib (scripts/README.md), and the tokenizer in .cache/qasr/tokenizer.
set -uo pipefail
b=${1:?build dir}; audio=${2:?audio}; presets=${3:-0.6b}; tokens=${4:-40}
source "$(dirname "$0")/cuda_env.sh"
nvidia-smi -L | tee -a "$out/summary.txt"
ldd "$b/tools/qasr" | grep -i "not found\|cublas" | tee -a "$out/summary.txt"
q="$b/tools/qasr"
log "ops.cuda tests"
timeout 150 "$b/tests/ops/qasr_cuda_tests" > "$out/cuda_tests.log" 2>&1; log "ops.cuda rc=$?"
tail -n 3 "$out/cuda_tests.log" | tee -a "$out/summary.txt"
if [ -f models/demo/model.safetensors ]; then # the trained demo model: GPU transcripts vs transformers' (fp32)
    python3 training/check_qasr.py "$b/tools/qasr" models/demo --device cuda > "$out/demo_check.log" 2>&1
    log "demo model on cuda: rc=$? $(tail -n 1 "$out/demo_check.log")"
fi
for p in ${presets//,/ }; do
    m=/tmp/qm/$p
    mkdir -p "$m"
    [ -f "$m/bf16/model.safetensors" ] || "$q" dev make-random --preset "$p" --layout hf --tokenizer .cache/qasr/tokenizer "$m/bf16" >> "$out/setup.log" 2>&1
    log "$p checkpoint ready"
    for bits in ${QBITS:-8 6 4}; do
        [ -f "$m/q$bits/config.json" ] || "$q" quantize "$m/bf16" "$m/q$bits" --bits $bits >> "$out/setup.log" 2>&1
    done
    log "$p quantized"
    # cold start: process start → first transcript (page cache warm), without (the CLI default for one input) and
    # with the warm-up pass, three times each, with qasr's stage times
    RUNS=${COLD_RUNS:-3} BINS= TOKENS=$tokens timeout 300 bash "$(dirname "$0")/cuda_cold_start.sh" "$b" "$p" "$audio"
    for v in bf16 $(for b in ${QBITS:-8 6 4}; do echo q$b; done); do
        timeout 120 "$q" bench -m "$m/$v" --device cuda --audio "$audio" --ignore-eos --max-new-tokens "$tokens" --runs ${RUNS:-20} --warmup 0 \
            --api-warmup --json > "$out/bench_${p}_$v.json" 2>> "$out/errors.log"
        log "$p $v bench rc=$? $(python3 -c "import json,sys; j=json.load(open('$out/bench_${p}_$v.json')); print('total %.2f ms (first %.2f, max %.2f) mel %.2f enc %.2f prefill %.2f decode %.2f ms = %.3f ms/tok, warmup %.0f ms, load %.0f ms' % (j['total_ms'], j['first_total_ms'], j['max_total_ms'], j['mel_ms'], j['encode_ms'], j['prefill_ms'], j['decode_ms'], j['ms_per_token'], j['api_warmup_ms'], j['load_ms']))" 2>&1)"
        # PREV_QASR=binary: the same bench with a previous build, right after, so that a regression of any width
        # shows in the same call (the 8-bit slowdown of session 7 was found only by comparing across machines)
        if [ -n "${PREV_QASR:-}" ] && [ -x "$PREV_QASR" ]; then
            timeout 120 "$PREV_QASR" bench -m "$m/$v" --device cuda --audio "$audio" --ignore-eos --max-new-tokens "$tokens" --runs ${RUNS:-20} \
                --warmup 0 --api-warmup --json > "$out/bench_${p}_${v}_prev.json" 2>> "$out/errors.log"
            log "$p $v previous binary rc=$? $(python3 -c "import json; j=json.load(open('$out/bench_${p}_${v}_prev.json')); print('total %.2f ms = %.3f ms/tok' % (j['total_ms'], j['ms_per_token']))" 2>&1)"
        fi
        # bf16: the same bench without the screened greedy head (the full bf16 head every step), same call
        if [ "$v" = bf16 ]; then
            QASR_CUDA_HEAD_SCREEN=0 timeout 120 "$q" bench -m "$m/$v" --device cuda --audio "$audio" --ignore-eos --max-new-tokens "$tokens" \
                --runs ${RUNS:-20} --warmup 0 --api-warmup --json > "$out/bench_${p}_${v}_noscreen.json" 2>> "$out/errors.log"
            log "$p $v without the screened head (QASR_CUDA_HEAD_SCREEN=0) rc=$? $(python3 -c "import json; j=json.load(open('$out/bench_${p}_${v}_noscreen.json')); print('total %.2f ms decode %.2f ms = %.3f ms/tok' % (j['total_ms'], j['decode_ms'], j['ms_per_token']))" 2>&1)"
        fi
    done
    timeout 120 "$q" bench -m "$m/bf16" --device cuda --audio "$audio" --ignore-eos --max-new-tokens "$tokens" --runs 5 --warmup 0 \
        --json > "$out/bench_${p}_bf16_nowarmup.json" 2>> "$out/errors.log"
    [ "$p" = "${PROFILE_PRESET:-0.6b}" ] && QASR_CUDA_PDL=0 timeout 120 "$q" bench -m "$m/bf16" --device cuda --audio "$audio" --ignore-eos --max-new-tokens "$tokens" \
        --runs 10 --warmup 1 --json > "$out/bench_${p}_bf16_nopdl.json" 2>> "$out/errors.log"
    [ "$p" = "${PROFILE_PRESET:-0.6b}" ] && log "$p bf16 without PDL: $(python3 -c "import json; j=json.load(open('$out/bench_${p}_bf16_nopdl.json')); print('%.3f ms/tok, total %.1f ms' % (j['ms_per_token'], j['total_ms']))")"
    [ "$p" = "${PROFILE_PRESET:-0.6b}" ] && QASR_CUDA_FUSED_ATTN=0 timeout 120 "$q" bench -m "$m/bf16" --device cuda --audio "$audio" --ignore-eos \
        --max-new-tokens "$tokens" --runs 10 --warmup 1 --json > "$out/bench_${p}_bf16_unfused.json" 2>> "$out/errors.log"
    [ "$p" = "${PROFILE_PRESET:-0.6b}" ] && log "$p bf16 with the unfused decode attention (QASR_CUDA_FUSED_ATTN=0): $(python3 -c "import json; j=json.load(open('$out/bench_${p}_bf16_unfused.json')); print('%.3f ms/tok, total %.1f ms' % (j['ms_per_token'], j['total_ms']))")"
    QASR_CUDA_PERSISTENT=1 timeout 120 "$q" bench -m "$m/bf16" --device cuda --audio "$audio" --ignore-eos --max-new-tokens "$tokens" \
        --runs 15 --warmup 0 --api-warmup --json > "$out/bench_${p}_bf16_persistent.json" 2>> "$out/errors.log"
    log "$p bf16 persistent decode step (QASR_CUDA_PERSISTENT=1): rc=$? $(python3 -c "import json; j=json.load(open('$out/bench_${p}_bf16_persistent.json')); print('%.3f ms/tok, total %.1f ms' % (j['ms_per_token'], j['total_ms']))" 2>&1)"
    [ "$p" = "${PROFILE_PRESET:-0.6b}" ] && QASR_CUDA_PROFILE=1 timeout 120 "$q" bench -m "$m/bf16" --device cuda --audio "$audio" --ignore-eos --max-new-tokens "$tokens" \
        --runs 2 --warmup 1 --json 2>&1 >/dev/null | grep -A14 "cuda profile" | tail -n 14 | tee -a "$out/summary.txt"
    log "$p bf16 without warm-up: first $(python3 -c "import json; j=json.load(open('$out/bench_${p}_bf16_nowarmup.json')); print('%.1f ms, median %.1f ms' % (j['first_total_ms'], j['total_ms']))")"
    timeout 300 python3 scripts/cuda_reference.py --model "$m/bf16" --audio "$audio" --qasr "$q" --tokens "$tokens" --runs 10 --fp32-check \
        --out "$out/reference_$p.json" > "$out/reference_$p.log" 2>&1
    log "$p reference rc=$?"; grep -E "^accuracy|^reference|^fp32|^bf16 noise" "$out/reference_$p.log" | tee -a "$out/summary.txt"
done
log done
