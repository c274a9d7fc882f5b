#!/usr/bin/env bash
# README command 1: builds qasr and transcribes the bundled sample(s) with the bundled demo model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
if [ -f models/demo/config.json ]; then
  model=models/demo
  for f in tokenizer.json vocab.json merges.txt tokenizer_config.json; do
    cp -f .cache/qasr/tokenizer/$f models/demo/ 2>/dev/null || true
  done
  files=(samples/*.wav)
else
  # Until the trained demo model lands: a random-weight test checkpoint (the output is not meaningful text).
  model=build/tiny-random
  [ -f $model/model.safetensors ] || ./build/tools/qasr dev make-random --preset tiny --tokenizer .cache/qasr/tokenizer $model
  files=(tests/data/audio/t1p3s.wav)
fi
for f in "${files[@]}"; do
  echo "== $f"
  ./build/tools/qasr transcribe -m "$model" "$f"
done
