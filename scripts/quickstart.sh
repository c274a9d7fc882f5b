#!/usr/bin/env bash
# README command 1: builds qasr and transcribes the bundled sample(s) with the bundled demo model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
for f in samples/*.wav; do
  echo "== $f"
  ./build/tools/qasr transcribe -m models/demo "$f"
done
