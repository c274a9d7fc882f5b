#!/usr/bin/env bash
# compute-sanitizer over the CUDA ops tests on the GPU machine, in one `run` call: memcheck (out-of-bounds and
# misaligned accesses; the two cudaMalloc "errors" it lists are the deliberate out-of-memory test), racecheck
# (shared-memory hazards, warnings included) and synccheck.
#   OUT=... [SKIP_ALL=1] [RACE_EACH=SECONDS] bash scripts/cuda_sanitize.sh BUILD_DIR
set -uo pipefail
b=${1:?build dir}
source "$(dirname "$0")/cuda_env.sh"
cs=/usr/local/cuda/bin/compute-sanitizer
t="$b/tests/ops/qasr_cuda_tests"
if [ -z "${SKIP_ALL:-}" ]; then
    timeout 500 "$cs" --tool memcheck --leak-check no "$t" > "$out/memcheck.log" 2>&1
    log "memcheck rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$out/memcheck.log" | tr '\n' ' ') $(grep -c 'Invalid' "$out/memcheck.log") invalid accesses; $(grep 'ERROR SUMMARY' "$out/memcheck.log")"
    # synccheck (~10 s) before racecheck (~3 min since session 13: the attention test runs both key-tile widths), so a
    # call that runs out of time loses the end of racecheck only
    timeout 200 "$cs" --tool synccheck "$t" --gtest_filter='*FusedDecode*:*Matvec*:*Tiny*:*Screened*' > "$out/synccheck.log" 2>&1
    log "synccheck rc=$? $(grep 'ERROR SUMMARY' "$out/synccheck.log")"
    timeout 300 "$cs" --tool racecheck --racecheck-report hazard "$t" --gtest_filter='-*Persistent*:*Stream*' > "$out/racecheck.log" 2>&1
    log "racecheck rc=$? $(grep 'RACECHECK SUMMARY' "$out/racecheck.log") $(grep -c '^\[       OK' "$out/racecheck.log") tests passed"
fi
# The batched-step tests, one racecheck each (RACE_EACH=120 seconds apiece): they prefill through cuBLASLt, whose
# sm_90 kernels (nvjet_*, TMA and mbarriers) racecheck runs slowly and reports on; the summary counts qasr's kernels
# apart from cuBLAS's.
if [ -n "${RACE_EACH:-}" ]; then
    for f in RowProducts RowPerWarpAttention CublasPath Quantized TinyHeads; do
        l="$out/racecheck_batch_$f.log"
        timeout "$RACE_EACH" "$cs" --tool racecheck --racecheck-report hazard "$t" --gtest_filter="Cuda.BatchedStep$f*" > "$l" 2>&1
        rc=$?
        own=$(grep -E '^=========[[:space:]]+(Read|Write|Access).* at ' "$l" | grep -vc nvjet)
        log "racecheck $f rc=$rc $(grep 'RACECHECK SUMMARY' "$l") $(grep -c '^\[       OK' "$l") passed; hazard lines outside cuBLAS: $own; in nvjet: $(grep -c nvjet "$l")"
    done
fi
