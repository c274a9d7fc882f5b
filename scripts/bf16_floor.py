#!/usr/bin/env python3
"""How far apart two bf16 runs of the reference itself are (GPU machine): the floor of the bf16 accuracy target.

  python3 scripts/bf16_floor.py --model DIR --audio WAV --ids prompt.json [--out floor.json]

`--ids`: the JSON of `qasr dev logits` (its `prompt_ids`; with `prefill_argmax` / `prefill_argmax_bf16` also
compared). The bf16 reference (transformers, SDPA) runs once as the base, then again with one thing changed at a
time — the attention implementation or SDPA backend, the batch (the same request twice: other product kernels, so
another accumulation order), cuBLAS's reduced-precision bf16 reductions — and each variant's prefill argmax is
compared with the base's. A variant that changes only the order of float32 sums shows how often bf16 rounding
alone flips an argmax on these checkpoints.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference import read_wav  # noqa: E402
from bf16_common import argmax_ties, feature_extractor, features, load_reference, prefill  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--audio", required=True)
    ap.add_argument("--ids", required=True)
    ap.add_argument("--out")
    a = ap.parse_args()

    import torch
    dev = "cuda"
    q = json.load(open(a.ids))
    ids = q["prompt_ids"]
    L = len(ids)
    feats, fmask = features(feature_extractor(), read_wav(a.audio), dev, torch.bfloat16)
    res = {"model": a.model, "prompt_len": L, "torch": torch.__version__}

    def run(model, batch=1):
        arg, tie = argmax_ties(prefill(model, ids, feats, fmask, batch).logits[0].float())
        return arg, sum(tie)

    def load(attn):
        return load_reference(a.model, torch.bfloat16, attn, dev)

    sdpa = load("sdpa")
    base, base_ties = run(sdpa)
    res["base_top2_ties"] = base_ties
    variants = {}

    def report(name, arg, ties):
        agree = sum(int(x == y) for x, y in zip(arg, base)) / L
        variants[name] = {"agree_with_base": agree, "top2_ties": ties}
        print(f"{name}: agrees with the base on {100 * agree:.2f}% ({round(agree * L)}/{L}), top-2 ties {ties}",
              flush=True)

    report("base again", *run(sdpa))
    from torch.nn.attention import SDPBackend, sdpa_kernel
    for name in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH"):
        if not hasattr(SDPBackend, name):
            continue
        try:
            with sdpa_kernel([getattr(SDPBackend, name)]):
                report(f"sdpa {name.lower()} only", *run(sdpa))
        except Exception as e:  # a backend that does not take these inputs (GQA, mask, dtype)
            print(f"sdpa {name.lower()} only: not available ({str(e).splitlines()[0][:120]})", flush=True)
    report("batch of 2 (row 0)", *run(sdpa, 2))
    report("batch of 3 (row 0)", *run(sdpa, 3))
    old = torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = not old
    report(f"bf16 reduced-precision reduction {'off' if old else 'on'}", *run(sdpa))
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = old
    del sdpa
    torch.cuda.empty_cache()
    report("eager attention", *run(load("eager")))
    for k in ("prefill_argmax", "prefill_argmax_bf16"):
        if k in q:
            agree = sum(int(x == y) for x, y in zip(q[k], base)) / L
            variants["qasr " + k] = {"agree_with_base": agree}
            print(f"qasr {k}: agrees with the base on {100 * agree:.2f}% ({round(agree * L)}/{L})", flush=True)
    res["variants"] = variants
    if a.out:
        with open(a.out, "w") as fo:
            json.dump(res, fo, indent=1)


if __name__ == "__main__":
    main()
