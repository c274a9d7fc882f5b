#!/usr/bin/env bash
# Interleaved A/B of qasr binaries (e.g. a build of an older commit against the current one) on the GPU machine, in
# one `run` call: `qasr bench --device cuda` of each binary over ROUNDS rounds on one checkpoint (made here if absent:
# random 0.6B/1.7B bf16, then `qasr quantize` for WEIGHTS=q8|q6|q4).
# Greedy tokens (CHECK_TOKENS, default 200) of each binary are compared with the first's.
# STOP=1: without --ignore-eos, so each request ends where qasr's stop rules end it (EOS, or 10 identical tokens —
# what random weights do), TOKENS being the cap: the cost of a stop (the step queued past it) is then in the times.
#   OUT=... BINS="build-gpu/tools/qasr build-gpu/tools/qasr-old" WEIGHTS=q8 bash scripts/cuda_bin_ab.sh AUDIO [PRESET] [TOKENS]
set -uo pipefail
audio=${1:?audio}; p=${2:-0.6b}; tokens=${3:-40}
source "$(dirname "$0")/cuda_env.sh"
read -r -a bins <<< "${BINS:?binaries}"
q=${bins[0]}
m=/tmp/qm/$p; w=${WEIGHTS:-bf16}
[ -f "$m/bf16/model.safetensors" ] || "$q" dev make-random --preset "$p" --layout hf --tokenizer .cache/qasr/tokenizer "$m/bf16" >> "$out/setup.log" 2>&1
if [ "$w" != bf16 ] && [ ! -f "$m/$w/config.json" ]; then "$q" quantize "$m/bf16" "$m/$w" --bits "${w#q}" >> "$out/setup.log" 2>&1; fi
# greedy tokens of each binary against the first one (same checkpoint, audio and decode length)
first=""
ie=--ignore-eos
[ "${STOP:-0}" = 1 ] && ie=
for b in "${bins[@]}"; do
    f="$out/bintok_${p}_${w}_$(basename "$b").json"
    timeout 60 "$b" transcribe -m "$m/$w" --device cuda --ignore-eos --max-new-tokens "${CHECK_TOKENS:-200}" \
        --no-itn -q --format json "$audio" > "$f" 2>> "$out/errors.log"
    if [ -z "$first" ]; then first=$f; continue; fi
    log "tokens $(basename "$b") vs $(basename "${bins[0]}"): $(python3 "$(dirname "$0")/cmp_tokens.py" "$first" "$f" 2>&1 | tail -1)"
done
for r in $(seq 1 "${ROUNDS:-2}"); do
    for b in "${bins[@]}"; do
        f="$out/binab_${p}_${w}_${r}_$(basename "$b").json"
        timeout 90 "$b" bench -m "$m/$w" --device cuda --audio "$audio" $ie --max-new-tokens "$tokens" \
            --runs "${RUNS:-10}" --warmup 0 --api-warmup --json > "$f" 2>> "$out/errors.log"
        log "$p $w round $r $(basename "$b") rc=$? $(python3 -c "import json; j=json.load(open('$f')); print('%d tokens, total %.2f ms (call %.2f, first %.2f) mel %.2f enc %.2f prefill %.2f decode %.2f = %.3f ms/tok' % (j['tokens'], j['total_ms'], j.get('call_ms', 0), j['first_total_ms'], j['mel_ms'], j['encode_ms'], j['prefill_ms'], j['decode_ms'], j['ms_per_token']))" 2>&1 | tail -1)"
    done
done
