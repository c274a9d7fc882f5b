"""Shared by the GPU machine's accuracy scripts (cuda_reference.py, bf16_floor.py, cuda_accuracy_clips.py): the
reference's features for a clip, its prefill logits over given prompt ids, its forced greedy steps, and `qasr dev
logits`."""
import json
import subprocess

import numpy as np


def load_reference(path, dtype, attn, dev="cuda"):
    """transformers' Qwen3-ASR from `path` in `dtype` with attention `attn`, on `dev`, in eval mode; TF32 off (fp32
    products must be fp32)."""
    import torch
    from transformers import Qwen3ASRForConditionalGeneration
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return Qwen3ASRForConditionalGeneration.from_pretrained(path, dtype=dtype, attn_implementation=attn).to(dev).eval()


def feature_extractor():
    try:
        from transformers import Qwen3ASRFeatureExtractor
    except ImportError:
        from transformers.models.qwen3_asr.feature_extraction_qwen3_asr import Qwen3ASRFeatureExtractor
    return Qwen3ASRFeatureExtractor()


def features(fe, pcm, dev, dtype):
    """Log-mel features and their mask as the processor gives them (clips under 0.5 s padded with zeros)."""
    if len(pcm) < 8000:
        pcm = np.concatenate([pcm, np.zeros(8000 - len(pcm), dtype=np.float32)])
    f = fe(pcm, sampling_rate=16000, padding="longest", return_attention_mask=True, return_tensors="pt")
    m = f.get("attention_mask", f.get("input_features_mask"))
    return f["input_features"].to(dev, dtype=dtype), m.to(dev)


def prefill(model, ids, x, mask, batch=1, cache=False):
    """The model's output over the prompt ids (the request repeated `batch` times; row 0 is returned)."""
    import torch
    t = torch.tensor([ids] * batch, device=x.device)
    with torch.no_grad():
        return model(input_ids=t, input_features=x.repeat(batch, 1, 1), input_features_mask=mask.repeat(batch, 1),
                     attention_mask=torch.ones_like(t), use_cache=cache, logits_to_keep=0)


def argmax_ties(lg):
    """Per row: argmax (the lowest id among equal values) and whether the two largest values are equal."""
    t2 = lg.topk(2, dim=-1).values
    return lg.argmax(-1).tolist(), (t2[:, 0] == t2[:, 1]).tolist()


def resolved(lg):
    """Per row: whether the two largest values are more than one bf16 step (at the larger one's magnitude) apart —
    positions where bf16 logits order the two best tokens by more than their own rounding."""
    import torch
    t2 = lg.topk(2, dim=-1).values
    ulp = torch.exp2(torch.floor(torch.log2(t2[:, 0].abs().clamp_min(1e-30))) - 7)
    return ((t2[:, 0] - t2[:, 1]) > ulp).tolist()


def forced_greedy(model, out, L, steps):
    """`steps` greedy tokens after the prefill `out` (plain argmax, no stop rule) and the top-2 gap at each."""
    import torch
    past, last, seq, margins = out.past_key_values, out.logits[0, -1].float(), [], []
    with torch.no_grad():
        for n in range(steps):
            t2 = last.topk(2).values
            margins.append(float(t2[0] - t2[1]))
            seq.append(int(last.argmax()))
            if n + 1 < steps:
                st = model(input_ids=torch.tensor([[seq[-1]]], device=last.device), past_key_values=past,
                           use_cache=True, attention_mask=torch.ones((1, L + len(seq)), dtype=torch.long,
                                                                     device=last.device))
                past, last = st.past_key_values, st.logits[0, -1].float()
    return seq, margins


def qasr_logits(qasr, model_dir, audio, steps):
    """`qasr dev logits --device cuda` as a dict (prompt_ids, prefill_argmax[_bf16], prefill_top, forced_ids, …)."""
    return json.loads(subprocess.run([qasr, "dev", "logits", "-m", model_dir, "--device", "cuda", "--steps",
                                      str(steps), audio], check=True, capture_output=True, text=True).stdout)
