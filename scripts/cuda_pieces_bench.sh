#!/usr/bin/env bash
# `qasr transcribe --batch B` on the GPU machine, in one `run` call: one long file cut into pieces
# (`--segment-seconds`) and the same clips as many input files, each at batch 1 and at larger batches, alternating,
# on a random-weight checkpoint with a fixed decode length. Prints the transcription's own time (rtf × audio seconds:
# process start, model load and warm-up excluded; for many files the CLI's "N inputs ... in T s" line) and whether
# every output equals batch 1's.
#   OUT=... [ROUNDS=2] [CLIPS=24] [TOKENS=40] [BATCHES="1 8 24"] bash scripts/cuda_pieces_bench.sh BUILD_DIR CLIP.wav [PRESET]
set -uo pipefail
b=${1:?build dir}; clip=${2:?clip}; p=${3:-0.6b}
source "$(dirname "$0")/cuda_env.sh"
q="$b/tools/qasr"
m=$(checkpoint "$p" "$q")
n=${CLIPS:-24}
d=$(mktemp -d /tmp/pieces.XXXXXX)
python3 "$(dirname "$0")/concat_clips.py" "$d/long.wav" 0.75 $(for i in $(seq "$n"); do echo "$clip"; done) 2>> "$out/setup.log"
files=(); for i in $(seq "$n"); do cp "$clip" "$d/clip$i.wav"; files+=("$d/clip$i.wav"); done
common=(-m "$m" --device cuda --warmup --ignore-eos --max-new-tokens "${TOKENS:-40}" --format json)
for r in $(seq "${ROUNDS:-2}"); do
    for B in ${BATCHES:-1 8 24}; do
        timeout 120 "$q" transcribe "${common[@]}" --batch "$B" --segment-seconds 12 "$d/long.wav" > "$d/long_b$B.json" 2> "$d/long_b$B.err"
        rc1=$?
        timeout 120 "$q" transcribe "${common[@]}" --batch "$B" "${files[@]}" > "$d/files_b$B.json" 2> "$d/files_b$B.err"
        rc2=$?
        log "round $r batch $B rc=$rc1/$rc2 $(python3 - "$d" "$B" <<'PY'
import json, re, sys
d, B = sys.argv[1], sys.argv[2]
def rows(name):
    return [json.loads(l) for l in open("%s/%s_b%s.json" % (d, name, B)) if l.strip()]
def texts(rs):
    return [(r.get("text"), [s["text"] for s in r.get("segments", [])]) for r in rs]
out = []
for name in ("long", "files"):
    rs = rows(name)
    ms = sum(r["rtf"] * r["audio_seconds"] for r in rs) * 1000
    total = re.search(r"inputs, [0-9.]+ s of audio in ([0-9.]+) s", open("%s/%s_b%s.err" % (d, name, B)).read())
    if total: ms = float(total.group(1)) * 1000
    base = texts(rows(name)) if B == "1" else texts([json.loads(l) for l in open("%s/%s_b1.json" % (d, name)) if l.strip()])
    out.append("%s: %d results, %.0f ms of transcription, %d segments, same as batch 1: %s" % (
        name, len(rs), ms, sum(len(r.get("segments", [])) for r in rs), texts(rs) == base))
print("; ".join(out))
PY
)"
    done
done
cp "$d"/*.json "$d"/*.err "$out/" 2>/dev/null
rm -rf "$d"
