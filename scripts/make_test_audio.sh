#!/usr/bin/env bash
# Regenerates the synthetic test clips in tests/data/audio/ (16 kHz, mono, 16-bit PCM WAV).
# Speech is synthesized with espeak-ng (voice en-us, pitch 50, a fixed rate per clip), resampled to 16 kHz with sox (no dither),
# then zero-padded or cut to an exact sample count. Deterministic for a given espeak-ng/sox version
# (made with eSpeak NG 1.51 and SoX 14.4.2). The committed files are the reference; rerun only to recreate them.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dest=${1:-"$here/../tests/data/audio"}
mkdir -p "$dest"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# make NAME SAMPLES WPM LEAD TEXT: speech of TEXT at WPM words/min, leading/trailing silence removed, LEAD seconds
# of zeros in front, then zero-padded (or cut) to exactly SAMPLES samples.
make() {
  local name=$1 samples=$2 wpm=$3 lead=$4 text=$5
  espeak-ng -v en-us -s "$wpm" -p 50 -a 100 -w "$tmp/raw.wav" "$text"
  sox "$tmp/raw.wav" "$tmp/trim.wav" silence 1 0.01 0.1% reverse silence 1 0.01 0.1% reverse
  # to 16 kHz mono 16-bit; -D: no dither (keeps the output deterministic); pad generously, then cut exactly
  sox -D "$tmp/trim.wav" -r 16000 -c 1 -b 16 -e signed-integer "$tmp/rs.wav" pad "$lead" 40
  sox -D "$tmp/rs.wav" -r 16000 -c 1 -b 16 -e signed-integer "$dest/$name" trim 0s "${samples}s"
  local speech; speech=$(soxi -D "$tmp/trim.wav")
  local got; got=$(soxi -s "$dest/$name")
  [ "$got" = "$samples" ] || { echo "make_test_audio: $name has $got samples, wanted $samples" >&2; exit 1; }
  echo "$name: $samples samples, speech ${speech} s"
}

make short_0p3s.wav 4800 280 0.01 "Yes."
make exact_1s.wav 16000 175 0.05 "Hello world."
make t1p3s.wav 20800 190 0.04 "The quick test works."
make t9s.wav 147200 185 0.1 "This is a test of the speech recognition engine. It reads a short passage of English text, \
one sentence after another, so that the audio is a little longer than eight seconds."
make t30s.wav 487000 190 0.2 "The north wind and the sun were disputing which was the stronger, when a traveler came along \
wrapped in a warm cloak. They agreed that the one who first succeeded in making the traveler take his cloak off \
should be considered stronger than the other. Then the north wind blew as hard as he could, but the more he blew \
the more closely did the traveler fold his cloak around him; and at last the north wind gave up the attempt. \
Then the sun shined out warmly, and immediately the traveler took off his cloak. And so the north wind was obliged \
to confess that the sun was the stronger of the two."
# digital silence: 2 s of zeros
python3 - "$dest/silence_2s.wav" <<'PY'
import sys, wave
with wave.open(sys.argv[1], "wb") as w:
    w.setnchannels(1); w.setsampwidth(2); w.setframerate(16000); w.writeframes(b"\0\0" * 32000)
PY
echo "silence_2s.wav: $(soxi -s "$dest/silence_2s.wav") samples"
