#!/usr/bin/env bash
# CPU benchmark of docs/benchmarks.md: a 0.6B random-weight checkpoint in bf16 and MLX 8/6/4-bit, `qasr bench` on
# the same audio with a fixed decode length, one markdown table row per variant (plus antirez/qwen-asr when
# ANTIREZ_BIN points to a binary built outside this repository; see docs/benchmarks.md for the local patch that
# fixes its decode length through QWEN_FIXED_TOKENS).
#
#   scripts/bench_cpu.sh [BUILD_DIR] [WORK_DIR]
#   env: AUDIO (default ../shared/audio/jfk.wav), TOKENS (32), RUNS (3), WARMUP (1), THREADS (2), VARIANTS
#        ("bf16 q8 q6 q4"), ANTIREZ_BIN, ANTIREZ_RUNS (3)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
W=${2:-/tmp/qasr-bench}
AUDIO=${AUDIO:-../shared/audio/jfk.wav}
TOKENS=${TOKENS:-32}
RUNS=${RUNS:-3}
WARMUP=${WARMUP:-1}
THREADS=${THREADS:-2}
VARIANTS=${VARIANTS:-"bf16 q8 q6 q4"}
Q="$B/tools/qasr"
TOK=.cache/qasr/tokenizer

mkdir -p "$W"
[ -f "$W/bf16/model.safetensors" ] || "$Q" dev make-random --preset 0.6b --layout hf --tokenizer "$TOK" "$W/bf16"
for b in 8 6 4; do
  [ -f "$W/q$b/model.safetensors" ] || "$Q" quantize "$W/bf16" "$W/q$b" --bits "$b"
done

echo "| weights | file MB | load ms | mel ms | encode ms | prefill ms | decode ms (tokens) | ms/token | tok/s | RTF | decode GB/s | DRAM GB/s | % of DRAM | peak RSS MB |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for v in $VARIANTS; do
  j=$("$Q" bench -m "$W/$v" --audio "$AUDIO" --threads "$THREADS" --ignore-eos --max-new-tokens "$TOKENS" \
        --runs "$RUNS" --warmup "$WARMUP" --json)
  echo "$j" > "$W/bench_$v.json"
  mb=$(( $(stat -c %s "$W/$v/model.safetensors") / 1000000 ))
  echo "$j" | jq -r --arg v "$v" --arg mb "$mb" \
    '"| \($v) (dec \(.weights.decoder), head \(.weights.head), enc \(.weights.encoder)) | \($mb) | \(.load_ms|floor) | \(.mel_ms*10|floor/10) | \(.encode_ms|floor) | \(.prefill_ms|floor) | \(.decode_ms|floor) (\(.tokens)) | \(.ms_per_token*100|floor/100) | \(.tokens_per_s*10|floor/10) | \(.rtf*1000|floor/1000) | \(.decode_GBps*100|floor/100) | \(.dram_read_GBps*100|floor/100) | \(.decode_bw_fraction*1000|floor/10) | \(.peak_rss_MB|floor) |"'
done

if [ -n "${ANTIREZ_BIN:-}" ]; then
  [ -f "$W/orig/model.safetensors" ] || "$Q" dev make-random --preset 0.6b --layout original --tokenizer "$TOK" "$W/orig"
  for i in $(seq 1 "${ANTIREZ_RUNS:-3}"); do
    /usr/bin/time -f "peak_rss_kb %M" env QWEN_FIXED_TOKENS="$TOKENS" "$ANTIREZ_BIN" -d "$W/orig" -i "$AUDIO" \
      -t "$THREADS" --debug 2>&1 >/dev/null | grep -E "Mel:|Encoder:|Prefill:|Decode:|peak_rss_kb" | tr '\n' ' '
    echo
  done
fi
