#!/usr/bin/env bash
# Full-size parity (0.6B and 1.7B, both layouts) on the GPU machine in one call, overlapping the work:
# reference 0.6b → [qasr_parity 0.6b ‖ reference 1.7b] → qasr_parity 1.7b. Reference on CUDA (fp32, TF32 off),
# qasr on the machine's CPU. Needs the carried comparer (build-carry/, see scripts/README.md) and tokenizer.
#   OUT=... bash scripts/run_full_parity.sh [GREEDY_MAX]
set -uo pipefail
out=${OUT:-/tmp/qasr_out}
gmax=${1:-64}
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/build-carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" PYTHONUNBUFFERED=1
device=cpu
python3 -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)' && device=cuda
ref() { timeout "$2" python3 scripts/reference.py --presets "$1" --out "/tmp/ref_$1" --device "$device" --no-verify \
          > "$out/reference_$1.log" 2>&1; echo "reference $1 rc=$?" >> "$out/status.txt"; }
par() { timeout "$2" build-carry/qasr_parity --dumps "/tmp/ref_$1" --work "/tmp/pw_$1" --tokenizer .cache/qasr/tokenizer \
          --repo "$PWD" --greedy-max "$gmax" > "$out/parity_$1.log" 2>&1; echo "parity $1 rc=$?" >> "$out/status.txt"; }
t0=$(date +%s)
ref 0.6b 200
par 0.6b 260 &
ref 1.7b 330
wait
par 1.7b 240
echo "total $(( $(date +%s) - t0 )) s" >> "$out/status.txt"
cat "$out/status.txt"; tail -n 15 "$out"/parity_*.log
