#!/usr/bin/env python3
"""qasr's CUDA backend against transformers in bf16 over many clips (GPU machine): prefill argmax agreement and
greedy transcripts, with the reference's own floor beside it.

  python3 scripts/cuda_accuracy_clips.py --model DIR --qasr QASR --tsv models/demo/expected.tsv [--steps 48]
                                         [--out result.json]

Meant for a trained checkpoint (the demo model), whose logits have real margins, as a complement to
cuda_reference.py on the random-weight checkpoints (near-ties everywhere). Per clip (the `path` column of the TSV):
`qasr dev logits --device cuda` against the bf16 reference (SDPA) at every prompt position; the same reference
with the request batched twice (another product kernel, so another order of float32 sums: the floor two bf16 runs
of transformers itself reach); the fp32 reference (TF32 off). Greedy: both sides' forced tokens up to the
reference's first end-of-sequence token.
"""
import argparse
import csv
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference import read_wav  # noqa: E402
from bf16_common import (argmax_ties, feature_extractor, features, forced_greedy, load_reference, prefill,  # noqa: E402
                         qasr_logits, resolved)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EOS = (151643, 151645)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--qasr", required=True)
    ap.add_argument("--tsv", required=True)
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--out")
    a = ap.parse_args()

    import torch
    dev = "cuda"
    m16 = load_reference(a.model, torch.bfloat16, "sdpa", dev)
    m32 = load_reference(a.model, torch.float32, "eager", dev)
    fe = feature_extractor()
    with open(a.tsv, encoding="utf-8") as f:
        clips = [r["path"] for r in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]
    n = {k: 0 for k in ("positions", "qasr", "qasr_bf16_logits", "ref_batch2", "qasr_fp32", "ref_fp32", "ref_ties",
                        "resolved", "qasr_resolved", "greedy_identical", "greedy_clips")}
    per_clip = []
    for c in clips:
        path = os.path.join(ROOT, c)
        q = qasr_logits(a.qasr, a.model, path, a.steps)
        ids, L = q["prompt_ids"], len(q["prompt_ids"])
        pcm = read_wav(path)
        x, mask = features(fe, pcm, dev, torch.bfloat16)
        out = prefill(m16, ids, x, mask, cache=True)
        ref, tie = argmax_ties(out.logits[0].float())
        rv = resolved(out.logits[0].float())
        seq, _ = forced_greedy(m16, out, L, a.steps)
        b2, _ = argmax_ties(prefill(m16, ids, x, mask, batch=2).logits[0].float())
        x32, mask32 = features(fe, pcm, dev, torch.float32)
        f32, _ = argmax_ties(prefill(m32, ids, x32, mask32).logits[0].float())
        same = lambda u, v: sum(int(i == j) for i, j in zip(u, v))  # noqa: E731
        end = next((i + 1 for i, t in enumerate(seq) if t in EOS), len(seq))
        row = {"clip": c, "positions": L, "qasr": same(q["prefill_argmax"], ref),
               "qasr_bf16_logits": same(q["prefill_argmax_bf16"], ref), "ref_batch2": same(b2, ref),
               "qasr_fp32": same(q["prefill_argmax"], f32), "ref_fp32": same(ref, f32), "ref_ties": sum(tie),
               "resolved": sum(rv), "qasr_resolved": sum(int(r and i == j) for r, i, j in zip(rv, q["prefill_argmax"], ref)),
               "greedy_identical": int(seq[:end] == q["forced_ids"][:end]), "greedy_clips": 1, "greedy_len": end}
        per_clip.append(row)
        for k in n:
            n[k] += row[k]
        if row["qasr"] < L or not row["greedy_identical"]:
            print(f"{c}: qasr {row['qasr']}/{L}, reference batched twice {row['ref_batch2']}/{L}, greedy "
                  f"{'identical' if row['greedy_identical'] else 'differs'} over {end} tokens", flush=True)
    P = n["positions"]
    pct = lambda k: 100.0 * n[k] / P  # noqa: E731
    print(f"{len(clips)} clips, {P} prefill positions: qasr (CUDA) vs transformers bf16 {n['qasr']}/{P} = "
          f"{pct('qasr'):.2f}% (qasr's logits rounded to bf16: {pct('qasr_bf16_logits'):.2f}%); transformers bf16 "
          f"batched twice vs once {n['ref_batch2']}/{P} = {pct('ref_batch2'):.2f}%; vs fp32: qasr {pct('qasr_fp32'):.2f}%, "
          f"bf16 reference {pct('ref_fp32'):.2f}%; equal top-2 bf16 logits at {n['ref_ties']} positions; where the "
          f"reference's top-2 are more than one bf16 step apart: qasr {n['qasr_resolved']}/{n['resolved']}; greedy "
          f"transcripts identical {n['greedy_identical']}/{n['greedy_clips']}", flush=True)
    if a.out:
        with open(a.out, "w") as fo:
            json.dump({"model": a.model, "totals": n, "clips": per_clip}, fo, indent=1)


if __name__ == "__main__":
    main()
