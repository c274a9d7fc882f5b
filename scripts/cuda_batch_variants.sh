#!/usr/bin/env bash
# Batched decoding under environment variants in one `run` call on the GPU machine (A/B of the batched step's
# kernels: QASR_CUDA_ROWS_* switches): scripts/cuda_batch_bench.sh once per variant and weight width, each into
# $OUT/<variant>/, its summary line prefixed with the variant. "base" = no variable set.
#   OUT=... VARIANTS="base QASR_CUDA_ROWS_ATTN=0" [WIDTHS="bf16 q8"] [RUNS=3] bash scripts/cuda_batch_variants.sh BUILD_DIR AUDIO [PRESET] [CLIENTS] [BATCH]
set -uo pipefail
here=$(dirname "$0")
top=${OUT:-/tmp/qasr_out}
for v in ${VARIANTS:-base}; do
    for w in ${WIDTHS:-bf16}; do
        d="$top/$v"
        mkdir -p "$d"
        if [ "$v" = base ]; then e=(); else e=("$v"); fi
        env "${e[@]}" OUT="$d" RUNS="${RUNS:-3}" WIDTHS="$w" bash "$here/cuda_batch_bench.sh" "$@" | sed "s/^/[$v] /" | tee -a "$top/summary.txt"
    done
done
