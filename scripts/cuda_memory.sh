#!/usr/bin/env bash
# Device memory of long requests on the GPU machine: the peak of nvidia-smi's memory.used (sampled every 20 ms) while
# `qasr bench` transcribes S seconds of generated audio with the default token cap, and what the session pool keeps
# once the request is over (bench's device_pooled_MB; a previous build prints -1 there).
#   OUT=... bash scripts/cuda_memory.sh QASR MODEL SECONDS...
set -uo pipefail
q=${1:?qasr binary}; m=${2:?model dir}; shift 2
source "$(dirname "$0")/cuda_env.sh"
for s in "$@"; do
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 20 > "$out/mem_samples.txt" &
    smi=$!
    sleep 0.5
    timeout 300 "$q" bench -m "$m" --device cuda --seconds "$s" --runs 1 --warmup 0 --bw-mb 0 --json \
        > "$out/mem_bench_$(basename "$q")_$s.json" 2>> "$out/errors.log"
    rc=$?
    sleep 0.3
    kill "$smi"
    wait "$smi" 2> /dev/null
    peak=$(sort -n "$out/mem_samples.txt" | tail -n 1)
    idle=$(head -n 1 "$out/mem_samples.txt")
    log "$(basename "$q") $s s: rc=$rc peak memory.used $peak MiB (before the process $idle MiB); $(python3 -c "
import json; j = json.load(open('$out/mem_bench_$(basename "$q")_$s.json'))
print('prompt %d, tokens %d, total %.0f ms, pooled after the request %.0f MB' % (j['prompt_tokens'], j['tokens'], j['total_ms'], j.get('device_pooled_MB', -1)))" 2>&1)"
done
