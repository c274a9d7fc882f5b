#!/usr/bin/env python3
"""Synthetic speech for the qasr demo model: espeak-ng + resampling + augmentation (numpy only).

The recipe is fully determined by the seed: sentences (sentences.py), the voice/variant/rate/pitch of each clip and
its augmentation (extra silence, reverberation with a synthetic impulse response, white/pink/brown noise at a random
SNR, random gain) all come from seeded generators, and espeak-ng is deterministic, so the same command gives the
same audio on any machine with espeak-ng 1.51 (Debian bookworm) and numpy.

Splits: the held-out test sentences are drawn first from a dedicated sentence stream and every training sentence
whose normalised text equals a test sentence is dropped, so no test sentence occurs in training.

    python3 training/synth.py --out DIR --n-train 40000 --n-test 1000 --jobs 16      # writes DIR/{train,test}.npz
    python3 training/synth.py --wav-dir DIR --split test --n-test 1000 --only 0-9       # writes WAV files

Environment: ESPEAK_NG (binary, default espeak-ng); for a carried copy also set LD_LIBRARY_PATH and
ESPEAK_DATA_PATH (the folder that contains espeak-ng-data).
"""
import argparse
import os
import random
import subprocess
import sys
import wave

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sentences  # noqa: E402

SR = 16000
LANGS = {"en": "English", "de": "German"}
EN_VOICES = ["en-us", "en-us", "en-gb", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-029", "en-gb-x-gbclan",
             "en-gb-x-gbcwmd"]
DE_VOICES = ["de"]
VARIANTS = ([""] * 4 + [f"m{i}" for i in range(1, 9)] + [f"f{i}" for i in range(1, 6)] +
            ["klatt"] + [f"klatt{i}" for i in range(2, 7)] +
            """Alex Alicia Andrea Andy Annie Denis Diogo Gene Henrique Hugo Jacky Lee Marco Mario Michael Mike Nguyen
            adam anika announcer antonio aunty belinda benjamin boris caleb david ed edward grandma grandpa gustave
            iven iven2 iven3 iven4 john linda marcelo max michel miguel norbert pablo paul pedro quincy rob robert
            sandro shelby steph steph2 steph3 travis victor zac""".split())
MIN_S, MAX_S = 1.0, 10.0


# ------------------------------------------------------------------------------------------------ recipe (rows)
def make_rows(split, n_per_lang, seed, exclude=None):
    """Manifest rows for one split. Test rows come from sentence stream seed+1000, train rows from seed.
    Each row: dict(id, lang, text, voice, rate, pitch, aug_seed, clean). Rows are generated in excess (1.6x) so
    that clips outside [1 s, 10 s] can be dropped later while keeping the order deterministic."""
    rows = []
    base = seed + (1000 if split == "test" else 0)
    for li, lang in enumerate(["en", "de"]):
        n_gen = int(n_per_lang * 1.3) + 50
        sents = sentences.generate(lang, n_gen, base)
        if exclude is not None:
            sents = [s for s in sents if sentences.normalize(s) not in exclude]
        rng = random.Random(f"{split}-{lang}-{seed}-voices")
        for i, s in enumerate(sents):
            voice = rng.choice(EN_VOICES if lang == "en" else DE_VOICES)
            var = rng.choice(VARIANTS)
            rows.append(dict(id=f"{split}-{lang}-{i:06d}", lang=lang, text=s,
                             voice=voice + (f"+{var}" if var else ""),
                             rate=rng.randint(130, 220), pitch=rng.randint(30, 70),
                             aug_seed=rng.randrange(1 << 30), clean=0))
    en = [r for r in rows if r["lang"] == "en"]
    de = [r for r in rows if r["lang"] == "de"]
    out = []
    for i in range(max(len(en), len(de))):
        out += ([en[i]] if i < len(en) else []) + ([de[i]] if i < len(de) else [])
    return out


# ------------------------------------------------------------------------------------------------ audio
def espeak(text, voice, rate, pitch):
    exe = os.environ.get("ESPEAK_NG", "espeak-ng")
    out = subprocess.run([exe, "-v", voice, "-s", str(rate), "-p", str(pitch), "--stdout", text],
                         check=True, capture_output=True).stdout
    assert out[:4] == b"RIFF" and out[8:12] == b"WAVE", "espeak-ng did not return a WAV"
    sr = int.from_bytes(out[24:28], "little")
    pos = out.find(b"data", 12)
    pcm = np.frombuffer(out[pos + 8:len(out) - ((len(out) - pos - 8) % 2)], dtype="<i2")
    return pcm.astype(np.float64) / 32768.0, sr


def _smooth(n):
    """Smallest 2^a 3^b 5^c >= n."""
    best = 1 << (n - 1).bit_length()
    p5 = 1
    while p5 < 2 * n:
        p35 = p5
        while p35 < 2 * n:
            p = p35
            while p < n:
                p *= 2
            best = min(best, p)
            p35 *= 3
        p5 *= 5
    return best


def resample(x, sr_in, sr_out=SR):
    """Band-limited FFT resampling (ideal low-pass at the lower Nyquist), float64, deterministic."""
    if sr_in == sr_out:
        return x.copy()
    from math import gcd
    g = gcd(sr_in, sr_out)
    up, down = sr_out // g, sr_in // g
    n_out = (len(x) * up) // down
    k = _smooth(-(-(len(x) + 2048) // down))
    X = np.fft.rfft(x, down * k)
    nb = min(len(X), up * k // 2 + 1)
    y = np.fft.irfft(X[:nb], up * k) * (up / down)
    return y[:n_out]


def _fft_conv(x, h):
    n = len(x) + len(h) - 1
    nfft = 1 << (n - 1).bit_length()
    return np.fft.irfft(np.fft.rfft(x, nfft) * np.fft.rfft(h, nfft), nfft)[:n]


def augment(x, seed):
    """Silence padding, reverb (p .3), noise (p .55), gain. Returns float64 in [-1, 1]."""
    rng = np.random.default_rng(seed)
    pre, post = rng.integers(0, int(0.25 * SR)), rng.integers(0, int(0.25 * SR))
    x = np.concatenate([np.zeros(pre), x, np.zeros(post)])
    rms0 = np.sqrt(np.mean(x ** 2)) + 1e-9
    if rng.random() < 0.3:
        rt60 = rng.uniform(0.15, 0.7)
        L = int(rt60 * SR)
        t = np.arange(L) / SR
        tail = rng.standard_normal(L) * np.exp(-6.9078 * t / rt60)
        tail[:40] = 0.0
        tail *= 10 ** (rng.uniform(-12, 0) / 20) / (np.sqrt(np.sum(tail ** 2)) + 1e-9)
        tail[0] = 1.0
        x = _fft_conv(x, tail)[:len(x)]
        x *= rms0 / (np.sqrt(np.mean(x ** 2)) + 1e-9)
    if rng.random() < 0.55:
        kind = rng.integers(0, 3)
        nz = rng.standard_normal(len(x))
        if kind > 0:  # pink (1/f power) or brown (1/f^2 power)
            spec = np.fft.rfft(nz)
            f = np.arange(len(spec)) + 1.0
            spec /= f ** (0.5 * kind)
            nz = np.fft.irfft(spec, len(nz))
        active = x[np.abs(x) > 0.02 * np.max(np.abs(x))]
        srms = np.sqrt(np.mean(active ** 2)) if len(active) else rms0
        snr = rng.uniform(8, 35)
        nz *= srms / (np.sqrt(np.mean(nz ** 2)) + 1e-12) * 10 ** (-snr / 20)
        x = x + nz
    peak = 10 ** (rng.uniform(-26, -1) / 20)
    x = x * (peak / (np.max(np.abs(x)) + 1e-9))
    return np.clip(x, -1.0, 1.0)


def render(row):
    """Row -> int16 16 kHz clip (or None if the duration is outside [1 s, 10 s])."""
    x, sr = espeak(row["text"], row["voice"], row["rate"], row["pitch"])
    x = resample(x, sr)
    if row.get("clean"):
        x = x * (10 ** (-3 / 20) / (np.max(np.abs(x)) + 1e-9))
    else:
        x = augment(x, row["aug_seed"])
    if not (MIN_S * SR <= len(x) <= MAX_S * SR):
        return None
    return np.round(x * 32767.0).astype(np.int16)


def _render_idx(args):
    i, row = args
    return i, render(row)


def render_all(rows, n_per_lang, jobs):
    """Render rows in parallel (in row order) and keep the first n_per_lang valid clips per language."""
    import multiprocessing as mp
    kept, audio, count = [], [], {"en": 0, "de": 0}
    pool = mp.Pool(jobs)
    try:
        for i, a in pool.imap(_render_idx, list(enumerate(rows)), chunksize=8):
            row = rows[i]
            if a is None or count[row["lang"]] >= n_per_lang:
                continue
            count[row["lang"]] += 1
            kept.append(row)
            audio.append(a)
            if min(count.values()) >= n_per_lang:
                break
    finally:
        pool.terminate()
    if min(count.values()) < n_per_lang:
        raise RuntimeError(f"not enough valid clips: {count}")
    return kept, audio


def build_splits(n_train, n_test, seed):
    test_rows = make_rows("test", n_test // 2, seed)
    # all candidate test sentences are excluded from training (not only the kept ones)
    excl = {sentences.normalize(r["text"]) for r in test_rows}
    train_rows = make_rows("train", n_train // 2, seed, exclude=excl)
    return train_rows, test_rows


def save_npz(path, rows, audio):
    lens = np.array([len(a) for a in audio], dtype=np.int64)
    np.savez(path, audio=np.concatenate(audio), offsets=np.concatenate([[0], np.cumsum(lens)]),
             ids=np.array([r["id"] for r in rows]), langs=np.array([r["lang"] for r in rows]),
             texts=np.array([r["text"] for r in rows]))
    with open(path.replace(".npz", ".tsv"), "w", encoding="utf-8") as f:
        f.write("id\tlang\tvoice\trate\tpitch\taug_seed\tclean\tseconds\ttext\n")
        for r, a in zip(rows, audio):
            f.write(f"{r['id']}\t{r['lang']}\t{r['voice']}\t{r['rate']}\t{r['pitch']}\t{r['aug_seed']}\t"
                    f"{r['clean']}\t{len(a) / SR:.3f}\t{r['text']}\n")


def sample_rows(seed, k=4):
    """Candidate demo clips: clean renderings (default voices, no augmentation) of held-out test sentences that
    contain digits (first k per language of the test sentence stream)."""
    rows = []
    test_rows = make_rows("test", 200, seed)
    for lang, voice in [("en", "en-us"), ("de", "de")]:
        cand = [r for r in test_rows if r["lang"] == lang and any(ch.isdigit() for ch in r["text"])
                and 7 <= len(r["text"].split()) <= 14][:k]
        for j, r in enumerate(cand):
            rows.append(dict(r, id=f"sample-{lang}-{j}", voice=voice, rate=160, pitch=50, clean=1))
    return rows


def write_wav(path, a):
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SR)
        w.writeframes(a.astype("<i2").tobytes())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", help="write train.npz/test.npz (+ .tsv manifests) here")
    ap.add_argument("--wav-dir", help="write WAV files of --split here instead")
    ap.add_argument("--split", default="test", choices=["train", "test"])
    ap.add_argument("--only", default=None, help="with --wav-dir: comma list of kept-clip ids to write")
    ap.add_argument("--samples", help="write the demo-sample candidates to this .npz")
    ap.add_argument("--n-train", type=int, default=40000)
    ap.add_argument("--n-test", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--jobs", type=int, default=os.cpu_count())
    a = ap.parse_args()
    if a.samples:
        rows = sample_rows(a.seed)
        audio = [render(r) for r in rows]
        save_npz(a.samples, rows, audio)
        return
    train_rows, test_rows = build_splits(a.n_train, a.n_test, a.seed)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        for name, rows, n in [("test", test_rows, a.n_test // 2), ("train", train_rows, a.n_train // 2)]:
            kept, audio = render_all(rows, n, a.jobs)
            save_npz(os.path.join(a.out, f"{name}.npz"), kept, audio)
            secs = sum(len(x) for x in audio) / SR
            print(f"{name}: {len(kept)} clips, {secs / 3600:.2f} h", flush=True)
    if a.wav_dir:
        rows = test_rows if a.split == "test" else train_rows
        n = (a.n_test if a.split == "test" else a.n_train) // 2
        kept, audio = render_all(rows, n, a.jobs)
        want = set(a.only.split(",")) if a.only else None
        os.makedirs(a.wav_dir, exist_ok=True)
        for r, x in zip(kept, audio):
            if want is None or r["id"] in want:
                write_wav(os.path.join(a.wav_dir, r["id"] + ".wav"), x)


if __name__ == "__main__":
    main()
