#!/usr/bin/env bash
# README command 2: builds qasr and runs the test suite (unit, ops, model parity vs committed reference dumps, e2e).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
