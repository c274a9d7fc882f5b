#!/usr/bin/env bash
# Batched decoding across requests on the GPU machine, in one `run` call: `qasr bench --clients N --batch B` on a
# random-weight checkpoint — rounds of N concurrent requests decoding alone (each its own session and stream), then
# the same rounds through the batch engine (LoadOptions::max_batch), side by side in one process, and the batched
# step's time by batch size.
#   OUT=... [RUNS=5] [TOKENS=40] [WIDTHS="bf16 q8"] bash scripts/cuda_batch_bench.sh BUILD_DIR AUDIO [PRESET] [CLIENTS] [BATCH]
set -uo pipefail
b=${1:?build dir}; audio=${2:?audio}; p=${3:-0.6b}; clients=${4:-16}; batch=${5:-16}
source "$(dirname "$0")/cuda_env.sh"
q="$b/tools/qasr"
m=$(dirname "$(checkpoint "$p" "$q")")
for v in ${WIDTHS:-bf16}; do
    if [ "$v" != bf16 ] && [ ! -f "$m/$v/config.json" ]; then
        "$q" quantize "$m/bf16" "$m/$v" --bits "${v#q}" >> "$out/setup.log" 2>&1
    fi
    f="$out/batch_${p}_${v}_c${clients}_b${batch}.json"
    timeout 240 "$q" bench -m "$m/$v" --device cuda --audio "$audio" --ignore-eos --max-new-tokens "${TOKENS:-40}" \
        --runs "${RUNS:-5}" --warmup 1 --api-warmup --clients "$clients" --batch "$batch" --json > "$f" 2>> "$out/errors.log"
    log "$p $v clients $clients batch $batch rc=$? $(python3 - "$f" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
c, bj = j["clients"], j["clients_batched"]
print("one request %.2f ms; unbatched: request median %.2f ms, round %.2f ms, %.0fx real time; batched: request median %.2f ms, "
      "round %.2f ms, %.0fx real time = %.2fx unbatched, %.2f rows/step, tokens as one client %s/%s; step ms by batch %s" % (
      j["total_ms"], c["request_ms_median"], c["round_ms_median"], c["throughput_x_realtime"], bj["request_ms_median"],
      bj["round_ms_median"], bj["throughput_x_realtime"], bj["throughput_vs_unbatched"], bj["rows_per_step"],
      bj["requests_with_one_clients_tokens"], bj["requests"],
      " ".join("%s:%.3f" % (k, v) for k, v in sorted(bj["step_ms_by_batch"].items(), key=lambda kv: int(kv[0])))))
PY
)"
done
