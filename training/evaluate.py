#!/usr/bin/env python3
"""Evaluate the demo model with the transformers reference (Qwen3ASRForConditionalGeneration + the reference
Qwen3ASRFeatureExtractor, explicit spec 5.1 prompt, greedy decoding) on the held-out test set.

    python3 training/evaluate.py --model MODELDIR --tokenizer TOKDIR --data DIR --out RESULTSDIR [--subset N]

Runs: batched GPU fp32 (TF32 off) and bf16 over the whole test set; single-clip (no padding) fp32 on GPU and on
CPU over a subset (the first N/2 English and N/2 German test clips) -> RESULTSDIR/report.json, hyps_*.tsv.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402


def load_test(path):
    d = np.load(path)
    off, audio = d["offsets"], d["audio"]
    clips = [audio[off[i]:off[i + 1]].astype(np.float32) / 32768.0 for i in range(len(off) - 1)]
    return dict(clips=clips, texts=[str(t) for t in d["texts"]], langs=[str(l) for l in d["langs"]],
                ids=[str(i) for i in d["ids"]])


def transcribe(model, fe, tok, clips, device, dtype, bs, max_new=160):
    """Greedy transcripts (raw decoded strings) of clips with the reference pipeline. bs=1 = single clip."""
    outs = [None] * len(clips)
    order = sorted(range(len(clips)), key=lambda i: len(clips[i]))
    for s in range(0, len(order), bs):
        idx = order[s:s + bs]
        feats = fe([clips[i] for i in idx], sampling_rate=16000, padding="longest", return_attention_mask=True,
                   return_tensors="pt")
        fmask = feats["attention_mask"]
        T = fmask.sum(-1).tolist()
        prompts = [C.prompt_ids(C.n_audio_tokens(int(t))) for t in T]
        L = max(len(p) for p in prompts)
        ids = torch.full((len(idx), L), C.IM_END, dtype=torch.long)
        am = torch.zeros((len(idx), L), dtype=torch.long)
        for j, p in enumerate(prompts):  # left padding
            ids[j, L - len(p):] = torch.tensor(p)
            am[j, L - len(p):] = 1
        with torch.no_grad():
            gen = model.generate(input_ids=ids.to(device), attention_mask=am.to(device),
                                 input_features=feats["input_features"].to(device, dtype),
                                 input_features_mask=fmask.to(device), max_new_tokens=max_new, do_sample=False,
                                 num_beams=1, eos_token_id=[C.EOT, C.IM_END], pad_token_id=C.IM_END)
        new = gen[:, L:].tolist()
        for j, i in enumerate(idx):
            seq = new[j]
            cut = [k for k, t in enumerate(seq) if t in (C.EOT, C.IM_END)]
            seq = seq[:cut[0]] if cut else seq
            outs[i] = tok.decode(seq, skip_special_tokens=True)
    return outs


def score(data, raws, sel=None):
    sel = list(range(len(raws))) if sel is None else sel
    res = {}
    for name, langs in [("all", ("en", "de")), ("en", ("en",)), ("de", ("de",))]:
        ii = [i for i in sel if data["langs"][i] in langs]
        if not ii:
            continue
        parsed = [C.parse_output(raws[i]) for i in ii]
        refs = [data["texts"][i] for i in ii]
        hyps = [p[1] for p in parsed]
        res[name] = dict(
            clips=len(ii),
            wer_normalized=round(C.wer(refs, hyps, True), 5),
            wer_exact=round(C.wer(refs, hyps, False), 5),
            sentence_exact=round(float(np.mean([r == h for r, h in zip(refs, hyps)])), 5),
            lid_accuracy=round(float(np.mean([p[0] == C.LANG_NAMES[data["langs"][i]] for p, i in zip(parsed, ii)])),
                               5))
    return res


def write_hyps(path, data, raws, sel=None):
    sel = list(range(len(raws))) if sel is None else sel
    with open(path, "w", encoding="utf-8") as f:
        f.write("id\tlang\tref\traw\n")
        for i in sel:
            f.write(f"{data['ids'][i]}\t{data['langs'][i]}\t{data['texts'][i]}\t{raws[i]}\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--subset", type=int, default=48)
    ap.add_argument("--bs", type=int, default=200)
    ap.add_argument("--max-new", type=int, default=160)
    ap.add_argument("--extra", default=None, help="npz of extra clips (samples) to transcribe single-clip fp32")
    a = ap.parse_args()
    from transformers import Qwen3ASRFeatureExtractor, Qwen3ASRForConditionalGeneration
    os.makedirs(a.out, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    tok = C.load_tokenizer(a.tokenizer)
    fe = Qwen3ASRFeatureExtractor.from_pretrained(a.model)
    data = load_test(os.path.join(a.data, "test.npz"))
    report = dict(test_clips=len(data["clips"]), test_hours=round(sum(len(c) for c in data["clips"]) / 16000 / 3600,
                                                                     3))
    half = a.subset // 2
    sub = [i for i in range(len(data["ids"])) if data["langs"][i] == "en"][:half] + \
          [i for i in range(len(data["ids"])) if data["langs"][i] == "de"][:half]
    report["subset_ids"] = [data["ids"][i] for i in sub]
    raws = {}
    for name, dtype in [("fp32", torch.float32), ("bf16", torch.bfloat16)]:
        t = time.time()
        model = Qwen3ASRForConditionalGeneration.from_pretrained(a.model, dtype=dtype).to("cuda").eval()
        r = transcribe(model, fe, tok, data["clips"], "cuda", dtype, a.bs, a.max_new)
        raws[f"gpu_{name}_batched"] = r
        report[f"gpu_{name}_batched"] = dict(score(data, r), seconds=round(time.time() - t, 1))
        write_hyps(os.path.join(a.out, f"hyps_gpu_{name}_batched.tsv"), data, r)
        print(name, json.dumps(report[f"gpu_{name}_batched"]), flush=True)
    # single clip (exactly what a streaming-free engine does: no batch padding)
    clips_sub = [data["clips"][i] for i in sub]
    for dev in ["cuda", "cpu"]:
        t = time.time()
        if dev == "cpu":
            torch.set_num_threads(max(1, os.cpu_count() or 1))
        model = Qwen3ASRForConditionalGeneration.from_pretrained(a.model, dtype=torch.float32).to(dev).eval()
        r_sub = transcribe(model, fe, tok, clips_sub, dev, torch.float32, 1, a.max_new)
        full = [None] * len(data["clips"])
        for j, i in enumerate(sub):
            full[i] = r_sub[j]
        key = f"{'gpu' if dev == 'cuda' else 'cpu'}_fp32_single"
        raws[key] = full
        report[key] = dict(score(data, full, sub), seconds=round(time.time() - t, 1))
        write_hyps(os.path.join(a.out, f"hyps_{key}.tsv"), data, full, sub)
        print(key, json.dumps(report[key]), flush=True)
        if a.extra and dev == "cpu":
            ex = load_test(a.extra)
            r_ex = transcribe(model, fe, tok, ex["clips"], dev, torch.float32, 1, a.max_new)
            write_hyps(os.path.join(a.out, "hyps_extra_cpu_fp32_single.tsv"), ex, r_ex)
            report["extra_cpu_fp32_single"] = score(ex, r_ex)
    agree = lambda x, y: float(np.mean([raws[x][i] == raws[y][i] for i in sub]))  # noqa: E731
    report["agreement_on_subset"] = dict(
        cpu_single_vs_gpu_single=agree("cpu_fp32_single", "gpu_fp32_single"),
        cpu_single_vs_gpu_fp32_batched=agree("cpu_fp32_single", "gpu_fp32_batched"),
        cpu_single_vs_gpu_bf16_batched=agree("cpu_fp32_single", "gpu_bf16_batched"))
    report["agreement_fp32_vs_bf16_batched_all"] = float(np.mean(
        [x == y for x, y in zip(raws["gpu_fp32_batched"], raws["gpu_bf16_batched"])]))
    with open(os.path.join(a.out, "report.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(json.dumps({k: v for k, v in report.items() if k != "subset_ids"}, indent=1), flush=True)


if __name__ == "__main__":
    main()
