#!/usr/bin/env bash
# CPU benchmark of docs/benchmarks.md: a 0.6B random-weight checkpoint in bf16 and MLX 8/6/4-bit, `qasr bench` on
# the same audio with a fixed decode length. The variants are run round-robin (ROUNDS rounds, each `qasr bench`
# call doing WARMUP + RUNS runs) so that the load of a shared machine hits them alike; the table gives medians
# over the rounds. antirez/qwen-asr joins each round when ANTIREZ_BIN points to a binary built outside this
# repository (docs/benchmarks.md: the local patch that fixes its decode length through QWEN_FIXED_TOKENS).
#
#   scripts/bench_cpu.sh [BUILD_DIR] [WORK_DIR]
#   env: AUDIO (default ../shared/audio/jfk.wav), TOKENS (32), ROUNDS (5), RUNS (1), WARMUP (1), THREADS (2),
#        VARIANTS ("bf16 q8 q6 q4"; "m46" = mlx-lm's mixed_4_6 recipe; "q8+hp" = q8 with QASR_WEIGHTS=hugepages; "q8+novec" = q8 with
#        QASR_BF16_VECTOR=0, i.e. float32 sgemm instead of the AVX512-BF16 products), ANTIREZ_BIN,
#        EVICT (1: drop the checkpoints from the page cache first, so that qasr's mapping reads them in as huge
#        folios, as on a first load after boot; 0: keep the page cache as it is)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
W=${2:-/tmp/qasr-bench}
AUDIO=${AUDIO:-../shared/audio/jfk.wav}
TOKENS=${TOKENS:-32}
ROUNDS=${ROUNDS:-5}
RUNS=${RUNS:-1}
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
case " $VARIANTS " in *" m46"*) [ -f "$W/m46/model.safetensors" ] || "$Q" quantize "$W/bf16" "$W/m46" --recipe mixed_4_6 ;; esac
if [ -n "${ANTIREZ_BIN:-}" ] && [ ! -f "$W/orig/model.safetensors" ]; then
  "$Q" dev make-random --preset 0.6b --layout original --tokenizer "$TOK" "$W/orig"
fi

if [ "${EVICT:-1}" = 1 ]; then
  for d in bf16 q8 q6 q4 m46 orig; do
    f="$W/$d/model.safetensors"
    [ -f "$f" ] && python3 -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$(readlink -f "$f")"
  done
fi

R="$W/rounds.jsonl"
: > "$R"
for round in $(seq 1 "$ROUNDS"); do
  for v in $VARIANTS; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    d=${v%%+*}; hp=""; novec=""  # "q8+hp": QASR_WEIGHTS=hugepages; "q8+novec": QASR_BF16_VECTOR=0
    case "$v" in *+hp*) hp=hugepages ;; esac
    case "$v" in *+novec*) novec=0 ;; esac
    QASR_WEIGHTS=$hp QASR_BF16_VECTOR=$novec "$Q" bench -m "$W/$d" --audio "$AUDIO" --threads "$THREADS" --ignore-eos --max-new-tokens "$TOKENS" \
      --runs "$RUNS" --warmup "$WARMUP" --json | jq -c --arg v "$v" --arg load "$load" --arg round "$round" \
      --arg mb "$(stat -c %s "$W/$d/model.safetensors")" '. + {variant: $v, load: ($load|tonumber),
        round: ($round|tonumber), file_MB: (($mb|tonumber)/1e6)}' >> "$R"
  done
  if [ -n "${ANTIREZ_BIN:-}" ]; then
    load=$(cut -d' ' -f1 /proc/loadavg)
    out=$( { /usr/bin/time -f "peak_rss_kb %M" env QWEN_FIXED_TOKENS="$TOKENS" "$ANTIREZ_BIN" -d "$W/orig" \
             -i "$AUDIO" -t "$THREADS" --debug >/dev/null; } 2>&1 )
    echo "$out" | python3 -c '
import json, re, sys
t = sys.stdin.read()
g = lambda p: float(re.search(p, t).group(1))
print(json.dumps({"variant": "antirez", "load": float(sys.argv[1]), "round": int(sys.argv[2]),
  "mel_ms": g(r"Mel: \d+ frames \(([\d.]+) ms"), "encode_ms": g(r"Encoder: \d+ tokens \(([\d.]+) ms"),
  "prefill_ms": g(r"Prefill: \d+ tokens \(([\d.]+) ms"), "decode_ms": g(r"Decode: \d+ tokens \(([\d.]+) ms"),
  "tokens": g(r"Decode: (\d+) tokens"), "ms_per_token_own": g(r"([\d.]+) ms/token"),
  "peak_rss_MB": g(r"peak_rss_kb (\d+)") / 1024, "file_MB": float(sys.argv[3]) / 1e6}))' \
      "$load" "$round" "$(stat -c %s "$W/orig/model.safetensors")" >> "$R"
  fi
done

python3 - "$R" "$TOKENS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
tokens = int(sys.argv[2])
med = lambda v, k: statistics.median(r[k] for r in rows if r["variant"] == v)
order = [v for v in dict.fromkeys(r["variant"] for r in rows)]
print("| weights | file MB | mel ms | encode ms | prefill ms | decode ms | ms/token | tok/s | RTF | decode GB/s | DRAM GB/s | % of DRAM | peak RSS MB | load avg |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for v in order:
    n = sum(1 for r in rows if r["variant"] == v)
    if v == "antirez":
        steps = tokens  # its decode loop runs one forward per generated token
        ms_tok = med(v, "decode_ms") / steps
        total = med(v, "mel_ms") + med(v, "encode_ms") + med(v, "prefill_ms") + med(v, "decode_ms")
        print(f"| antirez/qwen-asr (original layout, bf16) | {med(v,'file_MB'):.0f} | {med(v,'mel_ms'):.0f} | {med(v,'encode_ms'):.0f} | "
              f"{med(v,'prefill_ms'):.0f} | {med(v,'decode_ms'):.0f} | {ms_tok:.1f} | {1000/ms_tok:.1f} | {total/11000:.3f} | "
              f"– | – | – | {med(v,'peak_rss_MB'):.0f} | {med(v,'load'):.2f} |")
        continue
    r0 = next(r for r in rows if r["variant"] == v)
    w = r0["weights"]
    print(f"| {v} (dec {w['decoder']}, head {w['head']}, enc {w['encoder']}) | {med(v,'file_MB'):.0f} | "
          f"{med(v,'mel_ms'):.0f} | {med(v,'encode_ms'):.0f} | {med(v,'prefill_ms'):.0f} | {med(v,'decode_ms'):.0f} | "
          f"{med(v,'ms_per_token'):.1f} | {med(v,'tokens_per_s'):.1f} | {med(v,'rtf'):.3f} | {med(v,'decode_GBps'):.2f} | "
          f"{med(v,'dram_read_GBps'):.2f} | {100*med(v,'decode_bw_fraction'):.0f} | {med(v,'peak_rss_MB'):.0f} | "
          f"{med(v,'load'):.2f} |")
print(f"\n(medians over {n} rounds; load avg = 1-min load average when each run started)")
PY
