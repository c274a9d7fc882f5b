#!/usr/bin/env bash
# Full-size parity (0.6B and 1.7B, both layouts) on the GPU machine in one call, overlapping the work:
# reference 0.6b → [qasr_parity 0.6b ‖ reference 1.7b] → qasr_parity 1.7b. Reference on CUDA (fp32, TF32 off),
# qasr on the machine's CPU. Needs the carried comparer (build-carry/, see scripts/README.md) and tokenizer.
#   OUT=... [THREADS=N] [CASES=a,b] bash scripts/run_full_parity.sh [GREEDY_MAX]
# Dumps go to build-parity/ref_<preset> (kept while the machine stays warm: a second call skips a preset whose
# dumps are complete). THREADS defaults to the CPUs the cgroup quota grants (nproc can see the whole host, and
# an oversubscribed OpenMP team spinning on too few CPUs was what made an earlier run 10x slower).
set -uo pipefail
out=${OUT:-/tmp/qasr_out}
gmax=${1:-64}
mkdir -p "$out" build-parity
export LD_LIBRARY_PATH="$PWD/build-carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" PYTHONUNBUFFERED=1 GOMP_SPINCOUNT=10000
quota=$(awk '$1 != "max" { printf "%d", $1 / $2 }' /sys/fs/cgroup/cpu.max 2>/dev/null)
threads=${THREADS:-${quota:-$(nproc)}}
[ "${threads:-0}" -gt 0 ] 2>/dev/null || threads=$(nproc)
echo "nproc $(nproc), cgroup quota ${quota:-none}, threads $threads" | tee -a "$out/status.txt"
device=cpu
python3 -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)' && device=cuda
ref() {
    if [ -f "build-parity/ref_$1/done" ]; then echo "reference $1 reused" >> "$out/status.txt"; return; fi
    timeout "$2" python3 scripts/reference.py --presets "$1" --out "build-parity/ref_$1" --device "$device" --no-verify \
        > "$out/reference_$1.log" 2>&1
    rc=$?; echo "reference $1 rc=$rc" >> "$out/status.txt"; [ $rc = 0 ] && touch "build-parity/ref_$1/done"
}
par() {
    local cases=()
    [ -n "${CASES:-}" ] && cases=(--cases "$CASES")
    timeout "$2" build-carry/qasr_parity --dumps "build-parity/ref_$1" --work "build-parity/pw_$1" \
        --tokenizer .cache/qasr/tokenizer --repo "$PWD" --greedy-max "$gmax" --threads "$3" "${cases[@]}" \
        >> "$out/parity_$1.log" 2>&1
    echo "parity $1 rc=$? ($(( $(date +%s) - t0 )) s)" >> "$out/status.txt"
}
t0=$(date +%s)
ref 0.6b 200
par 0.6b 330 $(( threads > 2 ? threads - 1 : threads )) &   # one CPU left for the reference's generator
ref 1.7b 330
wait
par 1.7b $(( 590 - ($(date +%s) - t0) )) "$threads"
echo "total $(( $(date +%s) - t0 )) s" >> "$out/status.txt"
cat "$out/status.txt"; tail -n 15 "$out"/parity_*.log
