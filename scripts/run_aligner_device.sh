#!/usr/bin/env bash
# Forced-aligner parity on the GPU machine (one `run` call; carry as for run_cuda_device.sh, see scripts/README.md):
# transformers' Qwen3ASRForTokenClassification with the project's random weights against `qasr align`.
#   1. aligner-tiny fp32 dumps (compact: the committed tests/data/ref_aligner) and qasr CPU / CUDA on them;
#   2. aligner-0.6b (Qwen3-ForcedAligner-0.6B shapes): fp32 and bf16 references; qasr CPU (fp32) against the fp32
#      one and CUDA (bf16) against the bf16 one, on the C++-written original layout and on the -hf directory that
#      transformers' save_pretrained wrote; then the 8-bit MLX quantization through qasr quantize.
#   bash scripts/run_aligner_device.sh BUILD_DIR      (results in $OUT/aligner)
set -u
B=${1:-build-gpu}
Q=$B/tools/qasr
O=${OUT:-/tmp/out}/aligner
mkdir -p "$O"
W=/tmp/aligner-work
mkdir -p $W
log() { echo "[$(date +%T)] $*" | tee -a "$O/log.txt"; }
par() { # name manifest model device min
  python3 scripts/aligner_parity.py --manifest "$2" --qasr "$Q" --model "$3" --device "$4" --min-agree "$5" \
    --out "$O/$1.json" > "$O/$1.txt" 2>&1
  log "$1: rc $? $(tail -1 "$O/$1.txt")"
}
log "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
python3 scripts/reference_aligner.py --preset aligner-tiny --compact --device cuda --out "$O/ref_aligner" \
  > "$O/ref_tiny.txt" 2>&1; log "reference aligner-tiny: rc $? $(tail -1 "$O/ref_tiny.txt")"
for layout in original hf; do
  $Q dev make-random --preset aligner-tiny --layout $layout --tokenizer .cache/qasr/tokenizer $W/tiny-$layout
  par tiny-$layout-cpu "$O/ref_aligner/manifest.json" $W/tiny-$layout cpu 1.0
  # bf16 on the device against the fp32 reference: the tiny random model has near-ties (margins down to 0), so
  # this reports the agreement and the largest margin at a difference; the bf16 criterion is the 0.6B one below
  par tiny-$layout-cuda "$O/ref_aligner/manifest.json" $W/tiny-$layout cuda 0.0
done
python3 scripts/reference_aligner.py --preset aligner-0.6b --compact --device cuda --out $W/ref06-f32 \
  > "$O/ref06_f32.txt" 2>&1; log "reference aligner-0.6b fp32: rc $? $(tail -1 "$O/ref06_f32.txt")"
python3 scripts/reference_aligner.py --preset aligner-0.6b --compact --device cuda --dtype bfloat16 \
  --out $W/ref06-bf16 --save-hf $W/a06-hf > "$O/ref06_bf16.txt" 2>&1
log "reference aligner-0.6b bf16: rc $? $(tail -1 "$O/ref06_bf16.txt")"
cp $W/ref06-f32/manifest.json "$O/ref06_f32_manifest.json"; cp $W/ref06-bf16/manifest.json "$O/ref06_bf16_manifest.json"
cp $W/a06-hf/config.json "$O/a06-hf-config.json" 2>/dev/null
$Q dev make-random --preset aligner-0.6b --layout original --tokenizer .cache/qasr/tokenizer $W/a06-orig
par a06-orig-cpu-vs-f32 $W/ref06-f32/manifest.json $W/a06-orig cpu 1.0
par a06-hf-cpu-vs-f32 $W/ref06-f32/manifest.json $W/a06-hf cpu 1.0
par a06-orig-cuda-vs-bf16 $W/ref06-bf16/manifest.json $W/a06-orig cuda 0.99
par a06-hf-cuda-vs-bf16 $W/ref06-bf16/manifest.json $W/a06-hf cuda 0.99
par a06-orig-cuda-vs-f32 $W/ref06-f32/manifest.json $W/a06-orig cuda 0.0
$Q quantize --bits 8 $W/a06-orig $W/a06-q8 > "$O/quantize.txt" 2>&1; log "quantize 8-bit: rc $?"
par a06-q8-cpu-vs-f32 $W/ref06-f32/manifest.json $W/a06-q8 cpu 0.0
par a06-q8-cuda-vs-f32 $W/ref06-f32/manifest.json $W/a06-q8 cuda 0.0
# speed of one alignment (t30s, 30 s of audio): the 5th run in one process
python3 -c "import json;print(json.load(open('$W/ref06-f32/manifest.json'))['cases'][5]['text'])" > $W/t30s.txt
for d in cuda cpu; do
  $Q align -m $W/a06-orig --device $d --runs 5 --text-file $W/t30s.txt tests/data/audio/t30s.wav --format json \
    2>"$O/speed_$d.err" | python3 -c "import json,sys;j=json.load(sys.stdin);print('$d', j['n_tokens'], j['timings_ms'], round(j['rtf'],4))" > "$O/speed_$d.txt"
  log "speed $d: $(cat "$O/speed_$d.txt") $(tail -1 "$O/speed_$d.err")"
done
log done
