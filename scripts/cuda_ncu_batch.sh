#!/usr/bin/env bash
# Per-kernel GPU times of the batched decode step (DeviceBatch) with Nsight Compute on the GPU machine: `qasr bench
# --clients 2 --batch B` under ncu, every kernel timed alone; the step benchmark's last steps (B rows, each step
# ending with the per-row argmax kernel) are split out and summed per kernel name. The kernels run one at a time, so
# the sums leave out launch gaps: set against the bench's step time they show what the kernel boundaries cost.
#   OUT=... bash scripts/cuda_ncu_batch.sh BUILD_DIR AUDIO MODEL_DIR [B]
set -uo pipefail
b=${1:?build dir}; audio=${2:?audio}; m=${3:?model dir}; B=${4:-16}
source "$(dirname "$0")/cuda_env.sh"
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
if [ -z "$ncu" ]; then log "ncu: not on this machine"; exit 0; fi
# NCU_ARGS: e.g. "--kernel-name regex:rows_product|decode_attention|argmax_rows --launch-skip 10000" (the step
# benchmark's last shapes only: far less device time than every kernel of the run)
timeout 400 "$ncu" --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv ${NCU_ARGS:-} \
    "$b/tools/qasr" bench -m "$m" --device cuda --audio "$audio" --ignore-eos --max-new-tokens 2 --runs 1 --warmup 0 \
    --clients 2 --batch "$B" > "$out/ncu_batch.csv" 2> "$out/ncu_batch.err"
log "ncu batch rc=$?"
python3 - "$out/ncu_batch.csv" <<'PY' | tee -a "$out/summary.txt"
import csv, collections, re, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) == 15 and r[0] != 'ID']
seq = [(re.sub(r'\(.*', '', r[4]).replace('qasr::cuda::', '').replace('qasr::<unnamed>::', '').replace('(anonymous namespace)::', ''),
        float(r[14].replace(',', '')) / 1000) for r in rows]
ends = [i for i, (n, _) in enumerate(seq) if 'k_argmax_rows_final' in n]
steps = [seq[a + 1:b + 1] for a, b in zip(ends[-11:-1], ends[-10:])]
d = collections.defaultdict(lambda: [0, 0.0])
for st in steps:
    for n, t in st:
        d[n][0] += 1; d[n][1] += t
ns = len(steps)
print('batched step (last %d steps): %.1f us of kernels in %d kernels per step' % (ns, sum(t for st in steps for _, t in st) / ns, len(steps[0]) if steps else 0))
for n, (c, t) in sorted(d.items(), key=lambda kv: -kv[1][1]):
    print('  %-80s x%-4d %8.1f us per step' % (n[:80], c // ns, t / ns))
PY
