#!/usr/bin/env bash
# The decode step's timeline on the GPU machine (a profiling build, -DQASR_CUDA_TIMELINE, carried as
# build-gpu/tools/qasr-tl): per kernel kind and position in the layer, the critical path it adds (its dependency
# wait → the next kernel's), how far ahead it was launched, and how long it waited for its prefetched weights.
#   OUT=... VARIANTS="base QASR_CUDA_MV_PREFETCH=0" bash scripts/cuda_timeline.sh BUILD_DIR AUDIO MODEL_DIR
set -uo pipefail
b=${1:?build dir}; audio=${2:?audio}; m=${3:?model dir}
source "$(dirname "$0")/cuda_env.sh"
for v in ${VARIANTS:-base}; do
    env_args=(); [ "$v" = base ] || IFS=, read -r -a env_args <<< "$v"
    log "timeline $v"
    timeout 60 env "${env_args[@]}" "$b/tools/qasr-tl" bench -m "$m" --device cuda --audio "$audio" --ignore-eos \
        --max-new-tokens 40 --runs 10 --warmup 0 --api-warmup 2> "$out/tl.err" > /dev/null
    python3 - "$out/tl.err" <<'PY' | tee -a "$out/summary.txt"
import re, sys, collections
rows = [l.split() for l in open(sys.argv[1]) if re.match(r'^\s+\d+ \S+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s*$', l)]
n = max(int(r[0]) for r in rows)
agg = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0])
tot = 0.0
for r in rows:
    i, k, c, l, t = int(r[0]), r[1], float(r[2]), float(r[3]), float(r[4])
    if i == 0 or i >= n: continue          # the step's ends include the host's gaps between transcriptions
    key = ('layer %d %s' % ((i - 1) % 5, k)) if i < n - 2 else ('tail %s' % k)
    a = agg[key]; a[0] += 1; a[1] += c; a[2] += l; a[3] += t; tot += c
for key, (cnt, c, l, t) in sorted(agg.items()):
    print('  %-24s x%-3d crit %6.2f  ahead %6.2f  late %6.2f us  (sum crit %7.1f)' % (key, cnt, c / cnt, l / cnt, t / cnt, c))
print('  critical path of the layers + head: %.1f us per step' % tot)
PY
done
