#!/usr/bin/env python3
"""Reference side of the forced-aligner parity tests (spec section 9; docs/reference-dumps.md, "Aligner").

Builds a Qwen3-ForcedAligner with the project's deterministic random weights (reference.py's generator; the
classifier is `score.weight`) as transformers' Qwen3ASRForTokenClassification, runs it on the test clips with a
transcript each, and writes per case the aligner input ids, the top classes at every <timestamp> position, the
raw and repaired timestamps (transformers' own `_fix_timestamps`) and the words with their times
(`Qwen3ASRProcessor.decode_forced_alignment`). The word lists come from the reference's
`split_words_for_alignment` and are checked against spec 9.2's rule as written here.

    python3 scripts/reference_aligner.py --preset aligner-tiny --out DIR [--compact] [--device cuda]
                                         [--dtype float32|bfloat16] [--save-hf DIR]

Needs torch + transformers >= 5.17 (the GPU machine). The committed fixtures (tests/data/ref_aligner) are made with
    python3 scripts/reference_aligner.py --preset aligner-tiny --compact --out tests/data/ref_aligner
"""
import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import reference as R  # noqa: E402  (the weight generator, shapes, WAV reader)

TIMESTAMP = 151705
CLASSES = 5000
SEGMENT_MS = 80.0

PRESETS = {
    # tiny shapes with the aligner's vocabulary and classes
    "aligner-tiny": dict(audio=dict(R.PRESETS["tiny"]["audio"]),
                         text=dict(R.PRESETS["tiny"]["text"], vocab_size=152064)),
    # Qwen3-ForcedAligner-0.6B (spec section 1): the 1.7B encoder with output_dim 1024, the 0.6B decoder
    "aligner-0.6b": dict(audio=dict(R.PRESETS["1.7b"]["audio"], output_dim=1024),
                         text=dict(R.PRESETS["0.6b"]["text"], vocab_size=152064)),
}

CASES = [  # (clip, transcript, language)
    ("tests/data/audio/exact_1s.wav", "Hello world.", "English"),
    ("tests/data/audio/short_0p3s.wav", "Yes.", "English"),
    ("tests/data/audio/t1p3s.wav", "The quick test works.", "English"),
    ("tests/data/audio/t9s.wav", "This is a test of the speech recognition engine. It reads a short passage of "
     "English text, one sentence after another, so that the audio is a little longer than eight seconds.", "English"),
    ("tests/data/audio/t9s.wav", "今天天气很好，我们去公园散步吧。Qwen3 语音识别 test-case O'Neil's 2026!", "Chinese"),
    ("tests/data/audio/t30s.wav", "The north wind and the sun were disputing which was the stronger, when a traveler "
     "came along wrapped in a warm cloak. They agreed that the one who first succeeded in making the traveler take "
     "his cloak off should be considered stronger than the other.", "English"),
]


def split_words_spec(text):
    """Spec 9.2's default rule, written independently of the reference (checked against it)."""
    import unicodedata
    cjk = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
           (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)]
    is_cjk = lambda c: any(a <= ord(c) <= b for a, b in cjk)  # noqa: E731
    words = []
    for piece in text.split():
        kept = "".join(c for c in piece if c == "'" or unicodedata.category(c)[0] in "LN" or is_cjk(c))
        run = ""
        for c in kept:
            if is_cjk(c):
                if run:
                    words.append(run)
                    run = ""
                words.append(c)
            else:
                run += c
        if run:
            words.append(run)
    return words


def build_model(preset, seed, dtype, device, log):
    import torch
    from transformers import Qwen3ASRConfig, Qwen3ASRForTokenClassification
    a, t = PRESETS[preset]["audio"], PRESETS[preset]["text"]
    audio = dict(a, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, activation_function="gelu",
                 scale_embedding=False, max_position_embeddings=13)
    text = {k: v for k, v in t.items() if k != "rope_theta"}
    text.update(hidden_act="silu", max_position_embeddings=65536, attention_bias=False, attention_dropout=0.0,
                tie_word_embeddings=False, use_cache=False,
                rope_parameters={"rope_type": "default", "rope_theta": t["rope_theta"]})
    kw = dict(audio_config=audio, text_config=text, audio_token_id=R.AUDIO_TOKEN, pad_token_id=R.IM_END,
              eos_token_id=list(R.EOS_IDS), tie_word_embeddings=False, timestamp_token_id=TIMESTAMP)
    try:
        cfg = Qwen3ASRConfig(num_labels=CLASSES, **kw)
    except TypeError:
        cfg = Qwen3ASRConfig(**kw)
        cfg.num_labels = CLASSES
    assert cfg.num_labels == CLASSES, cfg.num_labels
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = Qwen3ASRForTokenClassification(cfg).float().eval()
    saved = R.PRESETS.get(preset)
    R.PRESETS[preset] = PRESETS[preset]  # expected_shapes reads reference.PRESETS
    try:
        want = R.expected_shapes(preset)
    finally:
        if saved is None:
            del R.PRESETS[preset]
    want["score.weight"] = (CLASSES, t["hidden_size"])
    params = dict(model.named_parameters())
    got = {k: tuple(v.shape) for k, v in params.items()}
    assert set(got) == set(want), f"names: missing {sorted(set(want) - set(got))[:5]} extra {sorted(set(got) - set(want))[:5]}"
    for k in want:
        assert got[k] == tuple(want[k]), (k, got[k], want[k])
    with torch.no_grad():
        for name, shape in want.items():
            params[name].copy_(torch.from_numpy(R.tensor_values(name, shape, seed)))
    assert getattr(model.score, "bias", None) is None, "the classifier has a bias"
    log(f"[{preset}] {sum(int(np.prod(s)) for s in want.values()) / 1e6:.1f} M parameters, classifier "
        f"{tuple(model.score.weight.shape)}, config num_labels {cfg.num_labels}")
    return model.to(device=device, dtype=getattr(torch, dtype)), cfg


def run_case(model, fe, tok, clip, text, language, device, dtype, min_samples):
    import torch
    from transformers import Qwen3ASRProcessor
    from transformers.models.qwen3_asr import processing_qwen3_asr as P
    pcm = R.read_wav(os.path.join(R.ROOT, clip))
    n0 = len(pcm)
    if n0 < min_samples:
        pcm = np.concatenate([pcm, np.zeros(min_samples - n0, dtype=np.float32)])
    feats = fe(pcm, sampling_rate=16000, padding="longest", return_attention_mask=True, return_tensors="pt")
    x = feats["input_features"]
    mask = feats.get("attention_mask", feats.get("input_features_mask"))
    T = int(mask.sum())
    A = R.audio_tokens(T)
    words = Qwen3ASRProcessor.split_words_for_alignment(None, text, None)  # the reference's default splitter
    assert words == split_words_spec(text), (words, split_words_spec(text))
    ids = [R.AUDIO_START] + [R.AUDIO_TOKEN] * A + [R.AUDIO_END]
    for w in words:
        ids += tok.encode(w, add_special_tokens=False) + [TIMESTAMP, TIMESTAMP]
    input_ids = torch.tensor([ids], dtype=torch.long, device=device)
    with torch.no_grad():
        out = model(input_ids=input_ids, input_features=x.to(device=device, dtype=getattr(torch, dtype)),
                    input_features_mask=mask.to(device), attention_mask=torch.ones_like(input_ids))
    logits = out.logits[0].float().cpu()
    assert logits.shape == (len(ids), CLASSES), logits.shape
    pos = [i for i, t in enumerate(ids) if t == TIMESTAMP]
    ts = logits[pos]
    top2 = torch.topk(ts, 2, dim=-1).values
    classes = ts.argmax(dim=-1)
    raw_ms = (classes.float() * SEGMENT_MS).numpy()
    fixed = P._fix_timestamps(raw_ms)
    items = Qwen3ASRProcessor.decode_forced_alignment(None, logits[None], input_ids.cpu(), [words], TIMESTAMP,
                                                      SEGMENT_MS)[0]
    return dict(ids=ids, words=words, positions=pos, n_samples=n0, n_audio_tokens=A, classes=classes.tolist(),
                raw_ms=raw_ms.tolist(), fixed_ms=fixed, items=items,
                margins=(top2[:, 0] - top2[:, 1]).tolist()), ts


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="aligner-tiny", choices=sorted(PRESETS))
    ap.add_argument("--out", required=True)
    ap.add_argument("--compact", action="store_true", help="top-8 classes per timestamp instead of all logits")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--min-samples", type=int, default=8000)
    ap.add_argument("--save-hf", help="also save the model (bf16) with save_pretrained into this directory")
    args = ap.parse_args()
    import torch
    import transformers
    from safetensors.torch import save_file
    from transformers import AutoTokenizer
    from transformers.models.qwen3_asr.feature_extraction_qwen3_asr import Qwen3ASRFeatureExtractor
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    os.makedirs(os.path.join(args.out, "cases"), exist_ok=True)
    log = lambda m: print(m, flush=True)  # noqa: E731
    tok = AutoTokenizer.from_pretrained(os.path.join(R.ROOT, ".cache", "qasr", "tokenizer"))
    assert tok.convert_tokens_to_ids("<timestamp>") == TIMESTAMP
    fe = Qwen3ASRFeatureExtractor()
    model, cfg = build_model(args.preset, args.seed, args.dtype, args.device, log)
    manifest = {"transformers": transformers.__version__, "torch": torch.__version__, "seed": args.seed,
                "preset": args.preset, "dtype": args.dtype, "device": args.device, "compact": args.compact,
                "min_samples": args.min_samples, "classes": CLASSES, "segment_ms": SEGMENT_MS, "cases": []}
    for k, (clip, text, lang) in enumerate(CASES):
        t0 = time.time()
        name = f"{args.preset}_{k}_{os.path.splitext(os.path.basename(clip))[0]}"
        case, ts = run_case(model, fe, tok, clip, text, lang, args.device, args.dtype, args.min_samples)
        case.update(name=name, audio=clip, text=text, language=lang, file=f"cases/{name}.safetensors")
        if args.compact:
            v, i = torch.topk(ts, 8, dim=-1)
            tensors = {"ts_topk": v.contiguous(), "ts_topk_ids": i.to(torch.int64).contiguous()}
        else:
            tensors = {"ts_logits": ts.contiguous()}
        tensors["input_ids"] = torch.tensor(case["ids"], dtype=torch.int64)
        save_file(tensors, os.path.join(args.out, case["file"]))
        manifest["cases"].append(case)
        log(f"{name}: L={len(case['ids'])} A={case['n_audio_tokens']} words={len(case['words'])} "
            f"min margin {min(case['margins']):.4f} in {time.time() - t0:.1f} s")
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False)
    if args.save_hf:
        model.to(torch.bfloat16).save_pretrained(args.save_hf)
        for fn in ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json"):
            import shutil
            shutil.copy(os.path.join(R.ROOT, ".cache", "qasr", "tokenizer", fn), os.path.join(args.save_hf, fn))
        log(f"saved {args.save_hf}: {sorted(os.listdir(args.save_hf))}")
    log("all done")


if __name__ == "__main__":
    main()
