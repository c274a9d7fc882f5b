#!/usr/bin/env bash
# Last step of a `run` command on the GPU machine: the tool brings back at most 8 files from $OUT, and one
# run_cuda_device.sh call writes ~25, so everything under $OUT goes into one $OUT/out.tgz.
#   ...; bash scripts/pack_out.sh
set -euo pipefail
out=${OUT:?OUT}
tmp=$(mktemp /tmp/out.XXXXXX.tgz)
tar czf "$tmp" -C "$out" .
find "$out" -mindepth 1 -delete
mv "$tmp" "$out/out.tgz"
