#!/usr/bin/env bash
# Per-kernel GPU times of one transcription (mel, encoder, prefill, one token) with Nsight Compute on the GPU
# machine: every kernel timed alone (gpu__time_duration, clocks and caches left as they are), then summed per kernel
# name for the encoder (everything before the first embedding kernel) and the prefill. The kernels run one at a
# time, so the sums leave out launch gaps and overlap: they rank the kernels, the bench gives the wall time.
#   OUT=... bash scripts/cuda_ncu.sh BUILD_DIR AUDIO MODEL_DIR [env VAR=VALUE ...]
set -uo pipefail
b=${1:?build dir}; audio=${2:?audio}; m=${3:?model dir}; shift 3
source "$(dirname "$0")/cuda_env.sh"
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
if [ -z "$ncu" ]; then log "ncu: not on this machine"; exit 0; fi
tag=${TAG:-ncu}
timeout 300 env "$@" "$ncu" --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
    "$b/tools/qasr" bench -m "$m" --device cuda --audio "$audio" --ignore-eos --max-new-tokens 1 --runs 1 --warmup 0 \
    > "$out/$tag.csv" 2> "$out/$tag.err"
log "ncu $tag rc=$?"
python3 - "$out/$tag.csv" <<'PY' | tee -a "$out/summary.txt"
import csv, collections, re, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) == 15 and r[0] != 'ID']
seq = [(re.sub(r'\(.*', '', r[4]).replace('qasr::cuda::', '').replace('qasr::<unnamed>::', '').replace('(anonymous namespace)::', ''),
        float(r[14].replace(',', '')) / 1000) for r in rows]
cut = next((i for i, (n, _) in enumerate(seq) if 'k_embed' in n), len(seq))
for name, part in (('encoder (with mel)', seq[:cut]), ('prefill (with the head and argmax)', seq[cut:])):
    d = collections.defaultdict(lambda: [0, 0.0])
    for n, t in part:
        d[n][0] += 1; d[n][1] += t
    print('%s: %.1f us in %d kernels' % (name, sum(t for _, t in part), len(part)))
    for n, (c, t) in sorted(d.items(), key=lambda kv: -kv[1][1])[:14]:
        print('  %-70s x%-4d %8.1f us' % (n[:70], c, t))
PY
