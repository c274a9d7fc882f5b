#!/usr/bin/env python3
"""Train the qasr demo model: transformers' Qwen3ASRForConditionalGeneration with a small config (common.py) on
the synthetic data written by synth.py, with the official prompt (spec 5.1) and the target
`language X<asr_text>text<|im_end|>`; loss on the target tokens only.

    python3 training/train.py --data DIR --tokenizer TOKDIR --out MODELDIR [--seconds 360 | --steps N]

Writes MODELDIR/{config.json, model.safetensors (bf16), generation_config.json, preprocessor_config.json,
train_log.json}.
"""
import argparse
import json
import math
import os
import random
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402


def load_split(path, device):
    d = np.load(path)
    audio = torch.from_numpy(d["audio"].astype(np.int16)).to(device)
    offsets = torch.from_numpy(d["offsets"]).to(device)
    return dict(audio=audio, offsets=offsets, off_cpu=d["offsets"], lens=np.diff(d["offsets"]),
                texts=[str(t) for t in d["texts"]], langs=[str(l) for l in d["langs"]], ids=[str(i) for i in d["ids"]])


def batches(lens, bs, rng, group=64):
    idx = list(range(len(lens)))
    rng.shuffle(idx)
    out = []
    for g in range(0, len(idx), bs * group):
        chunk = sorted(idx[g:g + bs * group], key=lambda i: lens[i])
        out += [chunk[i:i + bs] for i in range(0, len(chunk), bs)]
    rng.shuffle(out)
    return out


def gather_wave(split, b_idx, device):
    off = split["offsets"][b_idx]
    lens = split["offsets"][b_idx + 1] - off
    N = int(lens.max().item())
    ar = torch.arange(N, device=device)
    pos = (off[:, None] + ar[None, :]).clamp(max=split["audio"].shape[0] - 1)
    wav = split["audio"][pos].float() / 32768.0
    wav = wav * (ar[None, :] < lens[:, None])
    return wav, lens


def make_batch(split, b, tgt_ids, mel, device):
    b_idx = torch.tensor(b, device=device)
    wav, lens = gather_wave(split, b_idx, device)
    feats, fmask, T = mel(wav, lens)
    T = T.tolist()
    seqs, pos_b, pos_p, tgt, As = [], [], [], [], []
    for j, i in enumerate(b):
        A = C.n_audio_tokens(T[j])
        As.append(A)
        p = C.prompt_ids(A)
        t = tgt_ids[i]
        seqs.append(p + t)
        for k, tok in enumerate(t):
            pos_b.append(j)
            pos_p.append(len(p) + k - 1)
            tgt.append(tok)
    L = max(len(s) for s in seqs)
    ids = torch.full((len(b), L), C.IM_END, dtype=torch.long)
    am = torch.zeros((len(b), L), dtype=torch.long)
    for j, s in enumerate(seqs):
        ids[j, :len(s)] = torch.tensor(s)
        am[j, :len(s)] = 1
    return dict(input_ids=ids.to(device), attention_mask=am.to(device), input_features=feats,
                input_features_mask=fmask, pos_b=torch.tensor(pos_b, device=device),
                pos_p=torch.tensor(pos_p, device=device), tgt=torch.tensor(tgt, device=device), A=As, b=b)


CTC_BLANK = 151677  # <blank1>, a reserved Qwen3-ASR token that the decoder never emits


class CtcAux:
    """Auxiliary CTC loss on the projector output (the audio rows that replace <|audio_pad|>), with logits against
    the tied token embeddings restricted to the tokens of the training transcripts plus <blank1> as the CTC blank.
    A training aid only (it adds no parameters): it makes the audio embeddings line up with the token embeddings
    of the words spoken, which speeds up learning the decoder's audio-to-text attention."""

    def __init__(self, text_ids, device, scale=0.0):
        self.scale = scale
        vocab = sorted({t for ids in text_ids for t in ids} | {CTC_BLANK})
        self.vocab = torch.tensor(vocab, device=device)
        lut = torch.full((151936,), -1, dtype=torch.long)
        lut[torch.tensor(vocab)] = torch.arange(len(vocab))
        self.blank = int(lut[CTC_BLANK])
        self.text_cls = [lut[torch.tensor(ids, dtype=torch.long)].tolist() for ids in text_ids]

    def __call__(self, model, audio_embeds, bt):
        A = torch.tensor(bt["A"], device=audio_embeds.device)
        cum = torch.cumsum(A, 0) - A
        mA = int(max(bt["A"]))
        ar = torch.arange(mA, device=A.device)
        valid = ar[None, :] < A[:, None]
        pos = (cum[:, None] + ar[None, :]).clamp(max=audio_embeds.shape[0] - 1)
        E = model.model.language_model.embed_tokens.weight[self.vocab]
        h = audio_embeds[pos]
        if self.scale > 0:  # cosine logits with a fixed temperature: healthy gradients from the first step
            h = torch.nn.functional.normalize(h.float(), dim=-1)
            E = torch.nn.functional.normalize(E.float(), dim=-1)
            logits = self.scale * torch.matmul(h, E.T)
        else:
            logits = torch.matmul(h, E.T).float()                          # [B, mA, Vu]
        lp = torch.log_softmax(logits, -1).transpose(0, 1)                 # [mA, B, Vu]
        tg = [self.text_cls[i] for i in bt["b"]]
        tl = torch.tensor([len(t) for t in tg], device=A.device)
        flat = torch.tensor([c for t in tg for c in t], device=A.device)
        return torch.nn.functional.ctc_loss(lp, flat, A, tl, blank=self.blank, reduction="mean",
                                            zero_infinity=True)


def cu_seqlens_for(A_list, device, window=104):
    """Encoder attention windows (spec 4.6) from the per-clip audio-token counts; equals what the reference
    get_audio_cu_seqlens computes when every clip has a full 100-frame chunk (all clips are >= 1 s)."""
    lens = []
    for A in A_list:
        lens += [window] * (A // window) + ([A % window] if A % window else [])
    return torch.tensor([0] + lens, device=device).cumsum(0, dtype=torch.int32)


FAST = {"on": True}


def forward_model(model, bt):
    """Qwen3ASRModel.forward, spelled out so that the encoder windows (cu_seqlens) are passed in precomputed
    instead of being rebuilt in a Python loop with device syncs. Same math as model.model(...)."""
    if not FAST["on"]:
        out = model.model(input_ids=bt["input_ids"], input_features=bt["input_features"],
                          input_features_mask=bt["input_features_mask"], attention_mask=bt["attention_mask"],
                          use_cache=False)
        return out.last_hidden_state, out.audio_hidden_states
    m = model.model
    cu = cu_seqlens_for(bt["A"], bt["input_ids"].device)
    audio = m.get_audio_features(bt["input_features"], bt["input_features_mask"], cu_seqlens=cu).pooler_output
    emb = m.get_input_embeddings()(bt["input_ids"])
    mask = (bt["input_ids"] == C.AUDIO_PAD).unsqueeze(-1).expand_as(emb)
    emb = emb.masked_scatter(mask, audio.to(emb.dtype))
    out = m.language_model(inputs_embeds=emb, attention_mask=bt["attention_mask"], use_cache=False)
    return out.last_hidden_state, audio


def loss_fn(model, bt, ctc=None):
    last, audio = forward_model(model, bt)
    h = last[bt["pos_b"], bt["pos_p"]]
    logits = model.lm_head(h).float()
    loss = torch.nn.functional.cross_entropy(logits, bt["tgt"])
    acc = (logits.argmax(-1) == bt["tgt"]).float().mean()
    lctc = ctc(model, audio, bt) if ctc is not None else torch.zeros((), device=loss.device)
    return loss, acc, lctc


def build_model(seed, device):
    from transformers import Qwen3ASRForConditionalGeneration
    torch.manual_seed(seed)
    cfg = C.make_config()
    model = Qwen3ASRForConditionalGeneration(cfg).to(device)
    emb = model.model.language_model.embed_tokens.weight
    if model.lm_head.weight.data_ptr() != emb.data_ptr():
        model.tie_weights()
    assert model.lm_head.weight.data_ptr() == emb.data_ptr(), "lm_head not tied"
    return model


def save_model(model, out_dir):
    from transformers import GenerationConfig, Qwen3ASRFeatureExtractor
    os.makedirs(out_dir, exist_ok=True)
    m = model.to(torch.bfloat16)
    m.generation_config = GenerationConfig(do_sample=False, max_new_tokens=512, eos_token_id=[C.EOT, C.IM_END],
                                           pad_token_id=C.IM_END)
    m.save_pretrained(out_dir, safe_serialization=True)
    Qwen3ASRFeatureExtractor().save_pretrained(out_dir)
    model.to(torch.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--seconds", type=float, default=360.0, help="training time budget (sets --steps)")
    ap.add_argument("--steps", type=int, default=0, help="fixed number of steps (overrides --seconds)")
    ap.add_argument("--bs", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=250)
    ap.add_argument("--ctc", type=float, default=0.3, help="weight of the auxiliary CTC loss (0 = off)")
    ap.add_argument("--ctc-scale", type=float, default=12.0, help="cosine-logit scale of the CTC aid (0 = raw dot)")
    ap.add_argument("--init", default=None, help="start from these weights (safetensors, -hf names)")
    ap.add_argument("--check", action="store_true", help="also check the patched attention against the reference")
    a = ap.parse_args()

    t0 = time.time()
    device = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    random.seed(a.seed)
    np.random.seed(a.seed)
    tok = C.load_tokenizer(a.tokenizer)
    split = load_split(os.path.join(a.data, "train.npz"), device)
    tgt_ids = [e.ids for e in tok.encode_batch([C.target_string(l, t) for l, t in zip(split["langs"], split["texts"])])]
    # the target tokenises the same way inside the full sequence as on its own
    for i in range(min(50, len(tgt_ids))):
        full = tok.encode(C.PROMPT_TAIL + C.target_string(split["langs"][i], split["texts"][i])).ids
        assert full == C.TAIL_IDS + tgt_ids[i], (split["texts"][i], full)
    print(f"data: {len(tgt_ids)} clips, {split['lens'].sum() / 16000 / 3600:.2f} h, "
          f"target tokens/clip {np.mean([len(t) for t in tgt_ids]):.1f}, load {time.time() - t0:.1f}s", flush=True)

    model = build_model(a.seed, device)
    if a.init:
        from safetensors.torch import load_file
        sd = load_file(a.init)
        missing, unexpected = model.load_state_dict({k: v.float() for k, v in sd.items()}, strict=False)
        print(f"init from {a.init}: missing {missing}, unexpected {unexpected}", flush=True)
        assert set(missing) <= {"lm_head.weight"} and not unexpected
        if model.lm_head.weight.data_ptr() != model.model.language_model.embed_tokens.weight.data_ptr():
            model.tie_weights()
        assert model.lm_head.weight.data_ptr() == model.model.language_model.embed_tokens.weight.data_ptr()
    n_par = sum(p.numel() for p in model.parameters())
    import transformers
    print(f"torch {torch.__version__} transformers {transformers.__version__}", flush=True)
    print(f"params {n_par / 1e6:.2f} M; attn impl {model.config._attn_implementation}", flush=True)
    mel = C.GpuMel(device)
    rng = random.Random(a.seed)
    ctc = None
    if a.ctc > 0:
        text_ids = [e.ids for e in tok.encode_batch(split["texts"])]
        ctc = CtcAux(text_ids, device, a.ctc_scale)
        print(f"ctc aux: {len(ctc.vocab)} classes, weight {a.ctc}", flush=True)

    if a.check:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        model.eval()
        bt = make_batch(split, list(range(min(16, len(tgt_ids)))), tgt_ids, mel, device)
        with torch.no_grad():
            ref = model.model.get_audio_features(bt["input_features"], bt["input_features_mask"]).pooler_output
            C.patch_encoder_attention()
            new = model.model.get_audio_features(bt["input_features"], bt["input_features_mask"]).pooler_output
            C.unpatch_encoder_attention()
        print(f"check: patched encoder attention max|diff| = {(ref - new).abs().max().item():.3e}", flush=True)
        assert (ref - new).abs().max().item() < 1e-3
        # GPU mel vs the reference feature extractor on one clip
        from transformers import Qwen3ASRFeatureExtractor
        fe = Qwen3ASRFeatureExtractor()
        o, n = split["off_cpu"][0], split["lens"][0]
        x = split["audio"][o:o + n].float().cpu().numpy() / 32768.0
        r = fe(x, sampling_rate=16000, padding="longest", return_attention_mask=True, return_tensors="pt")
        g, gm, _ = mel(torch.from_numpy(x)[None].to(device), torch.tensor([n], device=device))
        T = int(r["attention_mask"].sum())
        dm = (r["input_features"][0, :, :T] - g[0, :, :T].cpu()).abs().max().item()
        print(f"check: GPU mel vs feature extractor max|diff| = {dm:.3e} (T={T}, gpu T={int(gm.sum())})", flush=True)
        print("config:", model.config.to_json_string()[:3000], flush=True)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        model.train()

    C.patch_encoder_attention()
    try:
        bt = make_batch(split, list(range(8)), tgt_ids, mel, device)
        with torch.no_grad():
            FAST["on"] = False
            r0, a0 = forward_model(model, bt)
            FAST["on"] = True
            r1, a1 = forward_model(model, bt)
        print(f"fast path: max|diff| hidden {(r0 - r1).abs().max().item():.2e} audio {(a0 - a1).abs().max().item():.2e}",
              flush=True)
        assert (a0 - a1).abs().max().item() < 1e-3
    except Exception as e:  # fall back to the plain forward
        FAST["on"] = False
        print(f"fast path disabled: {e!r}", flush=True)
    model.train()
    decay = [p for n_, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n_, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.98), eps=1e-8, fused=True)
    total = a.steps if a.steps else 10 ** 9
    log, step, ep = [], 0, 0
    t_train = time.time()
    budget_set = bool(a.steps)
    loss_ema = acc_ema = None
    while step < total:
        for b in batches(split["lens"], a.bs, rng):
            if step >= total:
                break
            if not a.steps and (step in (40, 300) or (step > 300 and step % 100 == 0)):
                # time budget -> step count: provisional at 40, then re-estimated every 100 steps from the rate
                # since step 300 (the first steps are slow: kernel selection for new shapes)
                torch.cuda.synchronize()
                if step == 40:
                    t40 = time.time()
                    per = (t40 - t_train) / 40
                elif step == 300:
                    t300 = time.time()
                    per = (t300 - t40) / 260
                else:
                    per = (time.time() - t300) / (step - 300)
                total = max(step + 20, step + int((a.seconds - (time.time() - t_train)) / per))
                budget_set = True
                if step in (40, 300) or step % 500 == 0:
                    print(f"step {step}: step time {per * 1000:.1f} ms -> total steps {total}", flush=True)
            lr = a.lr * min(1.0, (step + 1) / a.warmup)
            if budget_set and step > a.warmup:
                prog = (step - a.warmup) / max(1, total - a.warmup)
                lr = a.lr * (0.03 + 0.97 * 0.5 * (1 + math.cos(math.pi * min(1.0, prog))))
            for g in opt.param_groups:
                g["lr"] = lr
            bt = make_batch(split, b, tgt_ids, mel, device)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss, acc, lctc = loss_fn(model, bt, ctc)
            opt.zero_grad(set_to_none=True)
            (loss + a.ctc * lctc).backward()
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            if step % 50 == 0 or step == 1:
                l_, a_ = loss.item(), acc.item()
                loss_ema = l_ if loss_ema is None else 0.8 * loss_ema + 0.2 * l_
                acc_ema = a_ if acc_ema is None else 0.8 * acc_ema + 0.2 * a_
                rec = dict(step=step, epoch=ep, loss=round(l_, 4), acc=round(a_, 4), ctc=round(lctc.item(), 4), lr=lr, gnorm=round(gn.item(), 3),
                           t=round(time.time() - t_train, 1))
                log.append(rec)
                print(json.dumps(rec), flush=True)
        ep += 1
    torch.cuda.synchronize()
    train_s = time.time() - t_train
    C.unpatch_encoder_attention()
    model.eval()
    save_model(model, a.out)
    info = dict(steps=step, epochs=round(step * a.bs / len(tgt_ids), 2), train_seconds=round(train_s, 1),
                batch_size=a.bs, lr=a.lr, warmup=a.warmup, ctc_weight=a.ctc, ctc_scale=a.ctc_scale, init=a.init, seed=a.seed, params=n_par, clips=len(tgt_ids),
                hours=round(float(split["lens"].sum()) / 16000 / 3600, 2), final_loss_ema=loss_ema,
                final_acc_ema=acc_ema, log=log)
    with open(os.path.join(a.out, "train_log.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(f"trained {step} steps in {train_s:.0f}s; saved to {a.out}", flush=True)


if __name__ == "__main__":
    main()
