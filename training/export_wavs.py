#!/usr/bin/env python3
"""Write clips of a synth.py .npz as 16 kHz 16-bit mono WAV files: export_wavs.py NPZ OUTDIR [id,id,...]"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from synth import write_wav  # noqa: E402

npz, out = sys.argv[1], sys.argv[2]
want = set(sys.argv[3].split(",")) if len(sys.argv) > 3 else None
d = np.load(npz)
off, audio = d["offsets"], d["audio"]
os.makedirs(out, exist_ok=True)
for i, cid in enumerate(d["ids"]):
    if want is None or str(cid) in want:
        write_wav(os.path.join(out, f"{cid}.wav"), audio[off[i]:off[i + 1]])
