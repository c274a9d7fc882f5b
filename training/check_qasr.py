#!/usr/bin/env python3
"""Compare qasr's greedy transcripts with the transformers references in models/demo/expected.tsv.

    python3 training/check_qasr.py QASR_BINARY MODEL_DIR [--threads N] [--device cuda]

MODEL_DIR = models/demo plus the tokenizer files (scripts/setup_tokenizer.sh). Runs
`qasr transcribe -m MODEL_DIR --raw --no-itn` on every clip listed and prints mismatches; exit 1 if any.
"""
import argparse
import csv
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("qasr")
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--expected", default=os.path.join(ROOT, "models", "demo", "expected.tsv"))
    a = ap.parse_args()
    with open(a.expected, encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    paths = [os.path.join(ROOT, r["path"]) for r in rows]
    out = subprocess.run([a.qasr, "transcribe", "-m", a.model, "--raw", "--no-itn", "-q", "--threads",
                          str(a.threads), "--device", a.device] + paths, capture_output=True, text=True)
    lines = [l for l in out.stdout.split("\n") if l.strip()]
    if out.returncode != 0 or len(lines) != len(rows):
        print(out.stderr[-2000:], file=sys.stderr)
        print(f"qasr printed {len(lines)} lines for {len(rows)} files (rc {out.returncode})")
        return 1
    bad = 0
    for r, got in zip(rows, lines):
        if got.strip() != r["raw"].strip():
            bad += 1
            print(f"MISMATCH {r['path']}\n  expected: {r['raw']}\n  qasr:     {got}")
    print(f"{len(rows) - bad} identical, {bad} different (of {len(rows)})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
