#!/usr/bin/env python3
"""WER and language-ID accuracy of qasr (CPU) on the full held-out synthetic test set.

    python3 training/eval_qasr.py QASR_BINARY MODEL_DIR [--wav-dir /tmp/demo_test] [--threads N] [--limit N]
                                  [--qasr-args "--beam-size 4"]

The 1000 test clips are regenerated bit-exactly from the recipe (synth.py, espeak-ng 1.51 + numpy; the committed
subset in tests/data/demo_testset/ was checked byte-identical against the GPU machine's copy), then transcribed
with `qasr transcribe --raw --no-itn`. Scores use the same normalisation as training/evaluate.py (transformers).
Compare with training/results/<stage>/report.json (gpu_fp32_batched / gpu_bf16_batched).
"""
import argparse
import csv
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "training"))
import sentences  # noqa: E402


def edit_distance(a, b):
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1]))
        prev = cur
    return prev[len(b)]


def parse(raw):
    s = raw.strip()
    if "<asr_text>" not in s:
        return "", s
    meta, text = s.split("<asr_text>", 1)
    for line in meta.splitlines():
        if line.strip().lower().startswith("language "):
            v = line.strip()[9:].strip()
            return v[:1].upper() + v[1:].lower(), text.strip()
    return "", text.strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("qasr")
    ap.add_argument("model")
    ap.add_argument("--wav-dir", default="/tmp/demo_test")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--out", default=None, help="write per-clip results (TSV) here")
    ap.add_argument("--qasr-args", default="", help="more `qasr transcribe` options, e.g. \"--beam-size 4\"")
    a = ap.parse_args()
    with open(os.path.join(ROOT, "tests", "data", "demo_testset", "testset.tsv"), encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    if a.limit:
        rows = rows[:a.limit]
    if not all(os.path.exists(os.path.join(a.wav_dir, r["id"] + ".wav")) for r in rows):
        subprocess.run([sys.executable, os.path.join(ROOT, "training", "synth.py"), "--wav-dir", a.wav_dir,
                        "--split", "test", "--n-test", "1000", "--seed", "1234"], check=True)
    names = {"en": "English", "de": "German"}
    res = {}
    out_f = open(a.out, "w", encoding="utf-8") if a.out else None
    for i in range(0, len(rows), 50):
        chunk = rows[i:i + 50]
        p = subprocess.run([a.qasr, "transcribe", "-m", a.model, "--raw", "--no-itn", "-q", "--threads",
                            str(a.threads)] + a.qasr_args.split() + [os.path.join(a.wav_dir, r["id"] + ".wav") for r in chunk],
                           capture_output=True, text=True, check=True)
        lines = [l for l in p.stdout.split("\n") if l.strip()]
        assert len(lines) == len(chunk), p.stderr[-1000:]
        for r, raw in zip(chunk, lines):
            lang, text = parse(raw)
            for key in ("all", r["lang"]):
                s = res.setdefault(key, dict(clips=0, err_n=0, err_x=0, words=0, words_x=0, exact=0, lid=0))
                s["clips"] += 1
                s["err_n"] += edit_distance(sentences.normalize(r["text"]).split(), sentences.normalize(text).split())
                s["err_x"] += edit_distance(r["text"].split(), text.split())
                s["words"] += len(sentences.normalize(r["text"]).split())
                s["words_x"] += len(r["text"].split())
                s["exact"] += text == r["text"]
                s["lid"] += lang == names[r["lang"]]
            if out_f:
                out_f.write(f"{r['id']}\t{r['lang']}\t{r['text']}\t{raw}\n")
        print(f"{i + len(chunk)} clips", file=sys.stderr, flush=True)
    rep = {k: dict(clips=v["clips"], wer_normalized=round(v["err_n"] / v["words"], 5),
                   wer_exact=round(v["err_x"] / v["words_x"], 5), sentence_exact=round(v["exact"] / v["clips"], 5),
                   lid_accuracy=round(v["lid"] / v["clips"], 5)) for k, v in res.items()}
    print(json.dumps(rep, indent=1))


if __name__ == "__main__":
    main()
