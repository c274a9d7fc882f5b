#!/usr/bin/env bash
# Full-size parity run on the GPU machine (the `run` tool), from the repository root:
#   bash scripts/run_parity_remote.sh [PRESETS] [DUMP_DIR]
# extra reference.py arguments via REF_ARGS (default "--no-verify": skip re-reading the written checkpoints, which
# was done once for tiny and 0.6b; it costs ~1-2 min for 1.7b). If one 10-minute call is not enough, run one preset
# per call (tiny,0.6b first, then 1.7b with another DUMP_DIR).
# carry: [".cache/qasr/tokenizer", "build-carry"]   (build-carry/qasr_parity = the C++ comparer, optional)
# 1. writes random-weight checkpoints + fp32 reference dumps for PRESETS (default tiny,0.6b,1.7b) into DUMP_DIR
#    (default /tmp/qasr_ref; not $OUT: they are several GB),
# 2. runs build-carry/qasr_parity DUMP_DIR if that binary exists,
# 3. leaves a short summary (and the logs) in $OUT.
set -uo pipefail
presets=${1:-tiny,0.6b,1.7b}
dump=${2:-/tmp/qasr_ref}
out=${OUT:-/tmp/qasr_out}
mkdir -p "$out" "$dump"
export PYTHONUNBUFFERED=1
device=cpu
python3 -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)' && device=cuda
t0=$(date +%s)
python3 scripts/reference.py --presets "$presets" --out "$dump" --device "$device" ${REF_ARGS---no-verify} 2>&1 | tee "$out/reference.log"
ref_rc=${PIPESTATUS[0]}
t1=$(date +%s)
par_rc=skipped
if [ -x build-carry/qasr_parity ]; then
  build-carry/qasr_parity --dumps "$dump" --work /tmp/qasr_parity_work --tokenizer .cache/qasr/tokenizer \
    --repo "$PWD" 2>&1 | tee "$out/parity.log"
  par_rc=${PIPESTATUS[0]}
fi
t2=$(date +%s)
{
  echo "presets: $presets  device: $device  dump: $dump"
  echo "reference.py rc=$ref_rc ($((t1 - t0)) s)   qasr_parity rc=$par_rc ($((t2 - t1)) s)"
  du -sh "$dump" "$dump"/models/* 2>/dev/null
  python3 - "$dump/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
print("transformers", m["transformers"], "torch", m["torch"])
for c in m["cases"]:
    print(f'{c["name"]:28s} L={len(c["prompt_ids"]):4d} A={c["n_audio_tokens"]:4d} '
          f'greedy={len(c["greedy_ids"]):4d} ({c["greedy_stop"]}) raw={c["raw_text"][:40]!r}')
PY
  [ -f "$out/parity.log" ] && tail -n 40 "$out/parity.log"
} > "$out/summary.txt" 2>&1
cp "$dump/manifest.json" "$out/manifest.json" 2>/dev/null
cat "$out/summary.txt"
[ "$ref_rc" = 0 ] && { [ "$par_rc" = skipped ] || [ "$par_rc" = 0 ]; }
