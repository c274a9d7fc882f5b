#!/usr/bin/env bash
# Cold start on the GPU machine: process start → first transcript line on stdout (page cache warm: the checkpoint
# is read once first), with and without the warm-up pass, RUNS times each, with qasr's own stage times (-v: load
# stages, the warm-up's passes) beside each figure.
#   OUT=... [RUNS=3] [BINS="a/qasr b/qasr"] [VARIANTS="base CUDA_MODULE_LOADING=EAGER"] [TOKENS=40] \
#       bash scripts/cuda_cold_start.sh BUILD_DIR PRESET AUDIO
set -uo pipefail
b=${1:?build dir}; p=${2:?preset}; audio=${3:?audio}
source "$(dirname "$0")/cuda_env.sh"
q="$b/tools/qasr"
m=$(checkpoint "$p" "$q")
cat "$m"/* > /dev/null # the page cache holds the checkpoint, as on a machine that has run qasr before
# the process alone: start (dynamic libraries, including cuBLAS) and exit, no model
log "process start + exit (qasr help): $(python3 -c "
import subprocess, sys, time
ts = []
for _ in range(3):
    t0 = time.time(); subprocess.run([sys.argv[1], 'help'], stdout=subprocess.DEVNULL); ts.append((time.time() - t0) * 1e3)
print(' '.join('%.0f ms' % t for t in ts))" "$q")"
for v in ${VARIANTS:-base}; do
for bin in ${BINS:-$q}; do
  for w in --no-warmup --warmup; do
    for r in $(seq ${RUNS:-3}); do
        verbose=$("$bin" transcribe --help | grep -q -- --verbose && echo -v || echo -q) # older binaries: no stage times
        log "$p $v $(basename "$bin") cold start $w: $( ( [ "$v" = base ] || export "$v"; python3 - "$bin" "$m" "$w" "${TOKENS:-40}" "$audio" "$verbose" 2>> "$out/errors.log" <<'PY'
import subprocess, sys, time
q, m, w, n, audio, verbose = sys.argv[1:]
t0 = time.time()
p = subprocess.Popen([q, "transcribe", "-m", m, "--device", "cuda", w, "--ignore-eos", "--max-new-tokens", n, "--no-itn",
                      "-q", verbose, audio], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
p.stdout.readline()
t1 = time.time()
_, err = p.communicate()
stages = " | ".join(l[6:] for l in err.splitlines() if l.startswith("qasr: load:") or l.startswith("qasr: warm-up:")
                    or l.startswith("qasr: cuda:"))
print("first transcript %.0f ms, process exit %.0f ms (rc=%d) [%s]" % ((t1 - t0) * 1e3, (time.time() - t0) * 1e3,
                                                                      p.returncode, stages))
PY
) )"
    done
  done
done
done
