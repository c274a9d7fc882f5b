#!/usr/bin/env python3
"""transformers' beam search: the reference for qasr's beam search (DecodeOptions::beam_size, --beam-size).

    python3 scripts/reference_beam.py --model models/demo --beams 2,5 --out ref_beam.json
                                      [--device cuda] [--dtype fp32|bf16] [--clips a.wav,b.wav]
                                      [--qasr build/tools/qasr --qasr-device cuda] [--max-clips N]
    python3 scripts/reference_beam.py --preset tiny [--seed 1] --beams 2,5 --out ref_beam_tiny.json

For every clip: the prompt qasr builds (no context, language detected; spec §5), the reference's
generate(num_beams=N, do_sample=False, max_new_tokens=cap, length_penalty=1.0, early_stopping=False) with qasr's
cap ⌈seconds·20⌉+64, its token ids (the ending EOS included) and its sequences_scores (Σ log p / length), plus
greedy for contrast. With --qasr, `qasr transcribe --format json --beam-size N` runs the same clips and the
agreement is reported. With --preset, the model is the project's deterministic random-weight checkpoint of that
preset (scripts/reference.py's generator; qasr writes the same one with `qasr dev make-random`) and the clips are
the parity suite's: its flat logits make the beams part from greedy decoding and fork often, which the trained demo
model (sure of every clip) never does. The committed fixtures tests/data/ref_beam/{demo,tiny}.json come from this
script (fp32, TF32 off, on the GPU machine); DemoModel.BeamSearchEqualsTransformers and
Beam.RandomTinyModelEqualsTransformers check qasr against them.
"""
import argparse
import glob
import json
import math
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from reference import DEFAULT_CLIPS, EOS_IDS, audio_tokens, build_model, build_prompt_ids, read_wav  # noqa: E402
from bf16_common import feature_extractor, features, load_reference  # noqa: E402


def default_clips():
    return sorted(glob.glob(os.path.join(ROOT, "samples", "demo_*.wav"))) + \
        sorted(glob.glob(os.path.join(ROOT, "tests", "data", "demo_testset", "*.wav")))


def qasr_beam(qasr, model, clips, beams, device):
    """qasr's token ids per clip (transcribe --format json, one process for all clips)."""
    out = subprocess.run([qasr, "transcribe", "-m", model, "--device", device, "--beam-size", str(beams), "--no-itn",
                          "--format", "json", "-q"] + clips, check=True, capture_output=True, text=True).stdout
    res = []
    dec = json.JSONDecoder()
    i = 0
    while i < len(out):
        while i < len(out) and out[i].isspace():
            i += 1
        if i >= len(out):
            break
        obj, i = dec.raw_decode(out, i)
        res.extend(obj if isinstance(obj, list) else [obj])
    assert len(res) == len(clips), (len(res), len(clips))
    return [[t["id"] for t in r["tokens"]] for r in res]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "demo"))
    ap.add_argument("--preset", help="a random-weight preset (tiny, 0.6b, ...) instead of --model")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--beams", default="2,5")
    ap.add_argument("--clips", default="")
    ap.add_argument("--max-clips", type=int, default=0)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--attn", default="eager")
    ap.add_argument("--out", required=True)
    ap.add_argument("--qasr")
    ap.add_argument("--qasr-device", default="cpu")
    a = ap.parse_args()

    import torch
    import transformers
    from transformers import AutoTokenizer
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[a.dtype]
    if a.preset:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        model = build_model(a.preset, a.seed, a.attn, print).to(a.device, dtype=dtype).eval()
    else:
        model = load_reference(a.model, dtype, a.attn, a.device)
    tok = AutoTokenizer.from_pretrained(os.path.join(ROOT, ".cache", "qasr", "tokenizer"))
    fe = feature_extractor()
    clips = [c for c in a.clips.split(",") if c] or \
        ([os.path.join(ROOT, c) for c in DEFAULT_CLIPS] if a.preset else default_clips())
    if a.max_clips:
        clips = clips[:a.max_clips]
    beams = [int(b) for b in a.beams.split(",")]
    res = {"model": f"random:{a.preset}:seed{a.seed}" if a.preset else os.path.relpath(os.path.abspath(a.model), ROOT),
           "dtype": a.dtype, "attn": a.attn,
           "device": a.device, "transformers": transformers.__version__, "torch": torch.__version__,
           "generate": "num_beams=N, do_sample=False, length_penalty=1.0, early_stopping=False, "
                       "max_new_tokens=ceil(seconds*20)+64", "beams": beams, "clips": []}
    t0 = time.time()
    for path in clips:
        pcm = read_wav(path)
        x, mask = features(fe, pcm, a.device, dtype)
        T = int(mask.sum())
        ids = build_prompt_ids(tok, "", None, audio_tokens(T))
        cap = math.ceil(len(pcm) / 16000 * 20) + 64
        input_ids = torch.tensor([ids], device=a.device)
        c = {"audio": os.path.relpath(os.path.abspath(path), ROOT), "prompt_len": len(ids), "cap": cap}

        def gen(n):
            with torch.no_grad():
                g = model.generate(input_ids=input_ids, input_features=x, input_features_mask=mask,
                                   attention_mask=torch.ones_like(input_ids), max_new_tokens=cap, do_sample=False,
                                   num_beams=n, length_penalty=1.0, early_stopping=False,
                                   return_dict_in_generate=True, output_scores=n > 1)
            seq = g.sequences[0, len(ids):].tolist()
            if any(t in EOS_IDS for t in seq):  # batch of one: nothing after the EOS but padding
                seq = seq[:next(k for k, t in enumerate(seq) if t in EOS_IDS) + 1]
            score = float(g.sequences_scores[0]) if n > 1 else None
            return seq, score
        c["greedy"], _ = gen(1)
        for n in beams:
            c[f"beam{n}"], c[f"beam{n}_score"] = gen(n)
            c[f"beam{n}_text"] = tok.decode(c[f"beam{n}"], skip_special_tokens=True)
        res["clips"].append(c)
        diff = [n for n in beams if c[f"beam{n}"] != c["greedy"]]
        print(f"{c['audio']}: greedy {len(c['greedy'])} tokens; beams differing from greedy: {diff}", flush=True)
    res["reference_seconds"] = time.time() - t0
    if a.qasr and not a.preset:
        rel = [os.path.join(ROOT, c["audio"]) for c in res["clips"]]
        for n in beams:
            t1 = time.time()
            got = qasr_beam(a.qasr, a.model, rel, n, a.qasr_device)
            same = sum(int(g == c[f"beam{n}"]) for g, c in zip(got, res["clips"]))
            res[f"qasr_{a.qasr_device}_beam{n}_identical"] = same
            res[f"qasr_{a.qasr_device}_beam{n}_seconds"] = time.time() - t1
            for g, c in zip(got, res["clips"]):
                if g != c[f"beam{n}"]:
                    k = next((i for i, (p, q) in enumerate(zip(g, c[f"beam{n}"])) if p != q), min(len(g), len(c[f"beam{n}"])))
                    print(f"beam {n} {c['audio']}: qasr differs from step {k}: {g[k:k + 5]} vs {c[f'beam{n}'][k:k + 5]}")
            print(f"qasr {a.qasr_device} beam {n}: {same}/{len(rel)} token sequences identical to transformers", flush=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
