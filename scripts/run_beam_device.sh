#!/usr/bin/env bash
# Beam search on the GPU machine, in one `run` call: the CUDA tests (Cuda.BeamSearch* among them), transformers'
# beam search on the demo model in fp32 (scripts/reference_beam.py: the fixture tests/data/ref_beam/demo.json) with
# qasr's CUDA beams compared on the same clips, and the beam sizes' speed on the random-weight 0.6B bf16 checkpoint
# (greedy and beams 2/4/8 in the same call, decode capped at TOKENS).
#   OUT=... bash scripts/run_beam_device.sh BUILD_DIR AUDIO [TOKENS]
set -uo pipefail
b=${1:?build dir}; audio=${2:?audio}; tokens=${3:-40}
source "$(dirname "$0")/cuda_env.sh"
q="$b/tools/qasr"
nvidia-smi -L | tee -a "$out/summary.txt"
timeout 200 "$b/tests/ops/qasr_cuda_tests" > "$out/cuda_tests.log" 2>&1; log "ops.cuda rc=$?"
grep -E "^\[  (FAILED|PASSED) |Beam" "$out/cuda_tests.log" | tail -n 6 | tee -a "$out/summary.txt"
timeout 300 python3 "$(dirname "$0")/reference_beam.py" --model models/demo --beams 2,5 --out "$out/demo.json" \
    --qasr "$q" --qasr-device cuda > "$out/reference_beam.log" 2>&1
log "reference beams rc=$?: $(grep -E '^qasr ' "$out/reference_beam.log" | tr '\n' ' ')"
m=$(checkpoint 0.6b "$q")
for n in 1 2 4 8; do
    timeout 90 "$q" bench -m "$m" --device cuda --audio "$audio" --max-new-tokens "$tokens" --beam-size $n --runs 10 \
        --warmup 1 --json -v > "$out/bench_beam$n.json" 2> "$out/bench_beam$n.log"
    log "0.6b bf16 beam $n rc=$? $(python3 -c "import json; j=json.load(open('$out/bench_beam$n.json')); print('total %.2f ms, decode %.2f ms, %d tokens = %.3f ms/token' % (j['total_ms'], j['decode_ms'], j['tokens'], j['ms_per_token']))" 2>&1)"
    grep "beam search" "$out/bench_beam$n.log" | tail -n 1 | tee -a "$out/summary.txt"
done
