#!/usr/bin/env bash
# Dependencies, tokenizer and a release build in build/ (shared by the quick start and the test command).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/setup_tokenizer.sh
shared=$(cd .. && pwd)/shared
cmake --preset release -DQASR_SHARED_DIR="$shared" >/dev/null
cmake --build build -j"$(nproc)"
