#!/usr/bin/env python3
"""Concatenates 16 kHz mono 16-bit WAV clips with pauses of digital silence between them (segmentation and batching
benchmarks, docs/benchmarks.md "Session 22").
  python3 scripts/concat_clips.py OUT.wav PAUSE_SECONDS CLIP.wav...
"""
import sys
import wave


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    out, pause, clips = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
    gap = b"\x00\x00" * int(round(pause * 16000))
    frames = b""
    for c in clips:
        with wave.open(c) as w:
            if (w.getframerate(), w.getnchannels(), w.getsampwidth()) != (16000, 1, 2):
                sys.exit(f"{c}: not 16 kHz mono 16-bit")
            frames += w.readframes(w.getnframes()) + gap
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(frames)
    print(f"{out}: {len(clips)} clips, {len(frames) / 32000:.1f} s")


if __name__ == "__main__":
    main()
