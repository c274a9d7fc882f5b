#!/usr/bin/env bash
# Quick CUDA iteration on the GPU machine, in one `run` call: the ops-tier CUDA tests, then `qasr bench` of the
# 0.6B random-weight bf16 checkpoint under each environment variant, interleaved over ROUNDS rounds (A/B in one
# process tree, same GPU, same audio, fixed decode length).
#   OUT=... VARIANTS="base QASR_CUDA_PERSISTENT=1" bash scripts/cuda_ab.sh BUILD_DIR AUDIO [PRESET] [TOKENS]
# A variant is `base` (no extra environment) or space-free VAR=VALUE[,VAR=VALUE...].
set -uo pipefail
b=${1:?build dir}; audio=${2:?audio}; p=${3:-0.6b}; tokens=${4:-40}
source "$(dirname "$0")/cuda_env.sh"
q="$b/tools/qasr"
if [ "${TESTS:-1}" = 1 ]; then
    timeout 120 "$b/tests/ops/qasr_cuda_tests" ${GTEST_FILTER:+--gtest_filter=$GTEST_FILTER} > "$out/cuda_tests.log" 2>&1
    log "ops.cuda rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' "$out/cuda_tests.log" | tr '\n' ' ')"
    grep -E '^\[  FAILED|Failure|error' "$out/cuda_tests.log" | head -20 | tee -a "$out/summary.txt"
fi
m=/tmp/qm/$p
[ -f "$m/bf16/model.safetensors" ] || "$q" dev make-random --preset "$p" --layout hf --tokenizer .cache/qasr/tokenizer "$m/bf16" > "$out/setup.log" 2>&1
# greedy tokens of each variant against the first one (same checkpoint, audio and decode length)
first=""
for v in ${VARIANTS:-base}; do
    env_args=(); [ "$v" = base ] || IFS=, read -r -a env_args <<< "$v"
    f="$out/tokens_${v//[^A-Za-z0-9_]/_}.json"
    timeout 60 env "${env_args[@]}" "$q" transcribe -m "$m/${VARIANT_WEIGHTS:-bf16}" --device cuda --ignore-eos --max-new-tokens "${CHECK_TOKENS:-200}" \
        --no-itn -q --format json "$audio" > "$f" 2>> "$out/errors.log"
    if [ -z "$first" ]; then first=$f; log "tokens $v: rc=$?"; continue; fi
    log "tokens $v vs ${first##*/}: $(python3 "$(dirname "$0")/cmp_tokens.py" "$first" "$f" 2>&1 | tail -1)"
done
for r in $(seq 1 "${ROUNDS:-2}"); do
    for v in ${VARIANTS:-base}; do
        env_args=(); [ "$v" = base ] || IFS=, read -r -a env_args <<< "$v"
        f="$out/ab_${r}_${v//[^A-Za-z0-9_]/_}.json"
        timeout 60 env "${env_args[@]}" "$q" bench -m "$m/${VARIANT_WEIGHTS:-bf16}" --device cuda --audio "$audio" --ignore-eos \
            --max-new-tokens "$tokens" --runs "${RUNS:-10}" --warmup 0 --api-warmup --json > "$f" 2>> "$out/errors.log"
        log "round $r $v rc=$? $(python3 -c "import json; j=json.load(open('$f')); print('total %.2f ms (first %.2f) enc %.2f prefill %.2f decode %.2f = %.3f ms/tok' % (j['total_ms'], j['first_total_ms'], j['encode_ms'], j['prefill_ms'], j['decode_ms'], j['ms_per_token']))" 2>&1 | tail -1)"
    done
done
