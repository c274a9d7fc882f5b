#!/usr/bin/env bash
# One-shot pipeline on the GPU machine (one H200, 16 cores, torch 2.11, transformers 5.17, no network):
#   0. dry run on a tiny data set (model build, patched-attention and mel checks, 3 steps, save, eval code paths)
#   1. synthesise the data (espeak-ng, carried in .carry/espeak)   2. train for the time left
#   3. evaluate with transformers (fp32 + bf16, batched and single-clip, GPU and CPU)   4. pack results into $OUT
# Usage (repo root): OUT=/some/dir bash training/run_device.sh
# Knobs: TOTAL_S (wall budget of the whole script, default 560), NTRAIN (40000), NTEST (1000), SEED (1234),
#        EVAL_RESERVE_S (110), STEPS (fixed step count instead of the time budget), SKIP_DRY=1.
set -eo pipefail
START=$(date +%s)
TOTAL_S=${TOTAL_S:-560}
NTRAIN=${NTRAIN:-40000}
NTEST=${NTEST:-1000}
SEED=${SEED:-1234}
EVAL_RESERVE_S=${EVAL_RESERVE_S:-110}
OUT=${OUT:-/tmp/qasr_out}
TOK=${TOK:-.cache/qasr/tokenizer}
W=${W:-/tmp/qasr_demo}
JOBS=$(nproc)
export PYTHONUNBUFFERED=1
export ESPEAK_NG=${ESPEAK_NG:-$PWD/training/espeak_carried.sh}
mkdir -p "$W" "$OUT"
el() { echo $(( $(date +%s) - START )); }
log() { echo "[$(el)s] $*" | tee -a "$OUT/run.log"; }
log "start: $(nproc) cores"
"$ESPEAK_NG" --version | tee -a "$OUT/run.log"

if [ -z "$SKIP_DRY" ]; then
  log "dry run"
  python3 training/synth.py --out "$W/tiny" --n-train 64 --n-test 16 --jobs "$JOBS" --seed 7
  python3 training/synth.py --samples "$W/tiny/samples.npz" --seed 7
  python3 training/train.py --data "$W/tiny" --tokenizer "$TOK" --out "$W/tiny_model" --steps 3 --bs 16 --check \
    > "$OUT/dry_train.log" 2>&1 || { tail -40 "$OUT/dry_train.log"; exit 1; }
  grep -E "check|params|data:|config" "$OUT/dry_train.log" | cut -c1-1500
  python3 training/evaluate.py --model "$W/tiny_model" --tokenizer "$TOK" --data "$W/tiny" --out "$W/tiny_eval" \
    --subset 2 --bs 8 --max-new 8 --extra "$W/tiny/samples.npz" > "$OUT/dry_eval.log" 2>&1 \
    || { tail -40 "$OUT/dry_eval.log"; exit 1; }
  tail -3 "$OUT/dry_eval.log"
  ls -la "$W/tiny_model" | tee -a "$OUT/run.log"
  log "dry run ok"
fi

log "synth"
python3 training/synth.py --out "$W/data" --n-train "$NTRAIN" --n-test "$NTEST" --seed "$SEED" --jobs "$JOBS" \
  2>&1 | tee -a "$OUT/run.log"
python3 training/synth.py --samples "$W/data/samples.npz" --seed "$SEED"
log "synth done"

# training budget = what is left minus evaluation/packing reserve minus ~25 s of training set-up/saving
BUDGET=$(( TOTAL_S - $(el) - EVAL_RESERVE_S - 25 ))
if [ -n "$STEPS" ]; then STEPARG="--steps $STEPS"; else STEPARG="--seconds $BUDGET"; fi
if [ -n "$INIT" ]; then STEPARG="$STEPARG --init $INIT"; fi
STEPARG="$STEPARG $TRAIN_ARGS"
log "train ($STEPARG)"
python3 training/train.py --data "$W/data" --tokenizer "$TOK" --out "$W/model" --seed "$SEED" $STEPARG \
  > "$OUT/train.log" 2>&1 || { tail -40 "$OUT/train.log"; exit 1; }
grep -E '"step": (1|[0-9]*000|[0-9]*500),|step time|trained|params|data:' "$OUT/train.log" | cut -c1-300
log "train done"
# the model goes back first, in two parts (the transfer limit is 16 MiB a file)
split -b 15000000 -d "$W/model/model.safetensors" "$OUT/model.safetensors.part"
sha256sum "$W/model/model.safetensors" | tee -a "$OUT/run.log"

log "eval"
python3 training/evaluate.py --model "$W/model" --tokenizer "$TOK" --data "$W/data" --out "$W/eval" \
  --subset 48 --extra "$W/data/samples.npz" > "$OUT/eval.log" 2>&1 || log "EVAL FAILED"
tail -80 "$OUT/eval.log"
log "eval done"

# pack: small model files, reports, manifests; WAVs of the committed test subset and the sample candidates
mkdir -p "$W/pack/model" "$W/pack/eval" "$W/pack/data" "$W/pack/wav"
cp "$W"/model/*.json "$W/pack/model/" || true
cp "$W"/eval/* "$W/pack/eval/" 2>/dev/null || true
cp "$W"/data/*.tsv "$W/pack/data/"
if [ -f "$W/eval/report.json" ]; then
  IDS=$(python3 -c "import json; print(','.join(json.load(open('$W/eval/report.json'))['subset_ids']))")
  python3 training/export_wavs.py "$W/data/test.npz" "$W/pack/wav" "$IDS"
fi
python3 training/export_wavs.py "$W/data/samples.npz" "$W/pack/wav"
tar -C "$W/pack" -czf "$OUT/meta.tar.gz" model eval data
tar -C "$W/pack" -cf "$OUT/wav.tar" wav
ls -la "$OUT"
log "all done"
