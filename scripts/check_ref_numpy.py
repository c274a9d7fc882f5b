#!/usr/bin/env python3
"""Independent float64 numpy re-implementation of the Qwen3-ASR pipeline (spec sections 3, 4, 6), used to check
reference dumps (default: the committed tiny fixtures in tests/data/ref) without torch or transformers.

    python3 scripts/check_ref_numpy.py [--ref tests/data/ref] [--steps 8]

For every case: log-mel from the WAV file, conv stem (pre-GELU taps), conv_out, packed encoder input, windowed
encoder layers, ln_post, projector, merged decoder input, decoder layers, prompt logits (top-k), and the first
--steps forced greedy steps. Weights come from the generator in reference.py. Needs numpy only. Exit status 1 if
any difference exceeds its tolerance.
"""
import argparse
import json
import math
import os
import struct
import sys
import wave

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference as R  # noqa: E402

ROOT = R.ROOT


def load_safetensors(path):
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + n])
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        dt = {"F32": np.float32, "I64": np.int64}[v["dtype"]]
        s, e = v["data_offsets"]
        out[k] = np.frombuffer(b[8 + n + s:8 + n + e], dtype=dt).reshape(v["shape"])
    return out


_erf = np.vectorize(math.erf)


def gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def layer_norm(x, g, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def rms_norm(x, g, eps=1e-6):
    return g * (x / np.sqrt((x * x).mean(-1, keepdims=True) + eps))


def mel_filterbank():
    def hz2mel(f):
        return np.where(f < 1000, 3 * f / 200, 15 + np.log(np.maximum(f, 1e-9) / 1000) * 27 / np.log(6.4))

    def mel2hz(m):
        return np.where(m < 15, 200 * m / 3, 1000 * np.exp((m - 15) * np.log(6.4) / 27))

    f = mel2hz(np.linspace(0, hz2mel(np.array(8000.0)), 130))
    fk = np.linspace(0, 8000, 201)
    fb = np.zeros((201, 128))
    for j in range(128):
        lo, c, hi = f[j], f[j + 1], f[j + 2]
        fb[:, j] = np.maximum(0, np.minimum((fk - lo) / (c - lo), (hi - fk) / (hi - c))) * 2 / (hi - lo)
    return fb


def log_mel(x, fb):
    n = len(x)
    xp = np.concatenate([x[200:0:-1], x, x[-2:-202:-1]])  # reflect, edge sample excluded
    win = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(400) / 400)  # periodic Hann
    frames = np.stack([xp[160 * i:160 * i + 400] * win for i in range(1 + n // 160)])
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
    m = (power @ fb).T[:, :-1]
    lg = np.log10(np.maximum(m, 1e-10))
    lg = np.maximum(lg, lg.max() - 8.0)
    return (lg + 4.0) / 4.0


def conv3x3s2(x, w, b):
    cin, h, wd = x.shape
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1)))
    ho, wo = (h - 1) // 2 + 1, (wd - 1) // 2 + 1
    out = np.zeros((w.shape[0], ho, wo))
    for kh in range(3):
        for kw in range(3):
            out += np.einsum("oi,ihw->ohw", w[:, :, kh, kw], xp[:, kh:kh + 2 * ho:2, kw:kw + 2 * wo:2])
    return out + b[:, None, None]


class Model:
    def __init__(self, preset, seed):
        self.a, self.t = R.PRESETS[preset]["audio"], R.PRESETS[preset]["text"]
        self.W = {k: R.tensor_values(k, s, seed).astype(np.float64) for k, s in R.expected_shapes(preset).items()}
        d = self.a["d_model"]
        half = d // 2
        inv = np.exp(-np.log(10000.0) / (half - 1) * np.arange(half))
        self.pe = np.concatenate([np.sin(np.arange(13)[:, None] * inv), np.cos(np.arange(13)[:, None] * inv)], 1)
        hd = self.t["head_dim"]
        self.inv_freq = 1.0 / (self.t["rope_theta"] ** (np.arange(0, hd, 2) / hd))

    def lin(self, x, p):
        y = x @ self.W[p + ".weight"].T
        return y + self.W[p + ".bias"] if p + ".bias" in self.W else y

    def encode(self, mel, taps):
        W, at = self.W, "model.audio_tower."
        T = mel.shape[1]
        C = -(-T // 100)
        mp = np.pad(mel, ((0, 0), (0, C * 100 - T)))
        rows = []
        for c in range(C):
            h1 = conv3x3s2(mp[None, :, c * 100:(c + 1) * 100], W[at + "conv2d1.weight"], W[at + "conv2d1.bias"])
            h2 = conv3x3s2(gelu(h1), W[at + "conv2d2.weight"], W[at + "conv2d2.bias"])
            h3 = conv3x3s2(gelu(h2), W[at + "conv2d3.weight"], W[at + "conv2d3.bias"])
            for k, h in ((1, h1), (2, h2), (3, h3)):
                taps.setdefault(f"conv{k}", []).append(h)
            co = gelu(h3).transpose(2, 0, 1).reshape(13, -1) @ W[at + "conv_out.weight"].T
            taps.setdefault("conv_out", []).append(co)
            valid = min(100, T - c * 100)
            rows.append((co + self.pe)[:-(-valid // 8)])
        for k in ("conv1", "conv2", "conv3", "conv_out"):
            taps[k] = np.stack(taps[k])
        h = np.concatenate(rows)
        taps["enc_in"] = h
        A, heads = h.shape[0], self.a["encoder_attention_heads"]
        win = 13 * (self.a["n_window_infer"] // (2 * self.a["n_window"]))
        for i in range(self.a["encoder_layers"]):
            p = f"{at}layers.{i}."
            u = layer_norm(h, W[p + "self_attn_layer_norm.weight"], W[p + "self_attn_layer_norm.bias"])
            q, k, v = (self.lin(u, p + f"self_attn.{n}_proj").reshape(A, heads, -1) for n in "qkv")
            o = np.zeros_like(q)
            for s in range(0, A, win):
                e = min(A, s + win)
                sc = np.einsum("qhd,khd->hqk", q[s:e], k[s:e]) / math.sqrt(q.shape[-1])
                sc = np.exp(sc - sc.max(-1, keepdims=True))
                sc /= sc.sum(-1, keepdims=True)
                o[s:e] = np.einsum("hqk,khd->qhd", sc, v[s:e])
            h = h + self.lin(o.reshape(A, -1), p + "self_attn.out_proj")
            f = layer_norm(h, W[p + "final_layer_norm.weight"], W[p + "final_layer_norm.bias"])
            h = h + self.lin(gelu(self.lin(f, p + "fc1")), p + "fc2")
            taps[f"enc_layer.{i}"] = h
        h = layer_norm(h, W[at + "ln_post.weight"], W[at + "ln_post.bias"])
        taps["enc_out"] = h
        y = self.lin(gelu(self.lin(h, "model.multi_modal_projector.linear_1")), "model.multi_modal_projector.linear_2")
        taps["proj_out"] = y
        return y

    def rope(self, x, pos):
        ang = pos[:, None] * self.inv_freq[None]
        ang = np.concatenate([ang, ang], -1)[:, None]
        hh = x.shape[-1] // 2
        return x * np.cos(ang) + np.concatenate([-x[..., hh:], x[..., :hh]], -1) * np.sin(ang)

    def decode(self, h, taps=None):
        """Full causal forward over the embeddings h [L, D]; returns logits [L, V]."""
        W, t, lm = self.W, self.t, "model.language_model."
        L = h.shape[0]
        H, KV, hd = t["num_attention_heads"], t["num_key_value_heads"], t["head_dim"]
        pos = np.arange(L, dtype=np.float64)
        mask = np.triu(np.full((L, L), -np.inf), 1)
        for j in range(t["num_hidden_layers"]):
            p = f"{lm}layers.{j}."
            u = rms_norm(h, W[p + "input_layernorm.weight"])
            q = (u @ W[p + "self_attn.q_proj.weight"].T).reshape(L, H, hd)
            k = (u @ W[p + "self_attn.k_proj.weight"].T).reshape(L, KV, hd)
            v = (u @ W[p + "self_attn.v_proj.weight"].T).reshape(L, KV, hd)
            q = self.rope(rms_norm(q, W[p + "self_attn.q_norm.weight"]), pos)
            k = self.rope(rms_norm(k, W[p + "self_attn.k_norm.weight"]), pos)
            o = np.zeros((L, H, hd))
            for qh in range(H):
                kv = qh // (H // KV)
                sc = q[:, qh] @ k[:, kv].T / math.sqrt(hd) + mask
                sc = np.exp(sc - sc.max(-1, keepdims=True))
                sc /= sc.sum(-1, keepdims=True)
                o[:, qh] = sc @ v[:, kv]
            h = h + o.reshape(L, -1) @ W[p + "self_attn.o_proj.weight"].T
            w = rms_norm(h, W[p + "post_attention_layernorm.weight"])
            g = w @ W[p + "mlp.gate_proj.weight"].T
            h = h + (g / (1 + np.exp(-g)) * (w @ W[p + "mlp.up_proj.weight"].T)) @ W[p + "mlp.down_proj.weight"].T
            if taps is not None:
                taps[f"dec_layer.{j}"] = h
        return rms_norm(h, W[lm + "norm.weight"]) @ W[lm + "embed_tokens.weight"].T


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ref", default=os.path.join(ROOT, "tests", "data", "ref"))
    ap.add_argument("--steps", type=int, default=8, help="forced greedy steps to check (full recompute each)")
    ap.add_argument("--cases", default="")
    args = ap.parse_args()
    with open(os.path.join(args.ref, "manifest.json")) as f:
        man = json.load(f)
    only = set(x for x in args.cases.split(",") if x)
    fb = mel_filterbank()
    models, bad = {}, 0
    tol = {"mel_filters": 1e-7, "mel": 1e-4}
    for c in man["cases"]:
        if only and c["name"] not in only:
            continue
        if c["preset"] not in models:
            models = {c["preset"]: Model(c["preset"], man["seed"])}
        m = models[c["preset"]]
        ref = load_safetensors(os.path.join(args.ref, c["file"]))
        res = {"mel_filters": np.abs(fb - ref["mel_filters"]).max()}
        x = R.read_wav(os.path.join(ROOT, c["audio"])).astype(np.float64)
        x = np.concatenate([x, np.zeros(max(0, c["min_samples"] - len(x)))])
        res["mel"] = np.abs(log_mel(x, fb) - ref["mel"]).max()
        taps = {}
        m.encode(ref["mel"].astype(np.float64), taps)  # encoder from the reference mel, as the C++ side does
        for k, v in taps.items():
            r = ref[k].astype(np.float64)
            v = v[:r.shape[0]]  # compact dumps keep the first conv chunks
            res[k] = np.linalg.norm(v - r) / max(np.linalg.norm(r), 1e-30)  # relative L2
            tol[k] = 1e-5
        ids = np.array(c["prompt_ids"])
        E = m.W["model.language_model.embed_tokens.weight"]
        h = E[ids].copy()
        h[ids == R.AUDIO_TOKEN] = ref["proj_out"]
        res["dec_in"] = np.abs(h - ref["dec_in"]).max()
        dtaps = {}
        logits = m.decode(h, dtaps)
        for k, v in dtaps.items():
            res[k] = np.linalg.norm(v - ref[k]) / np.linalg.norm(ref[k])
            tol[k] = 1e-5
        tol["dec_in"] = 1e-5
        if "logits" in ref:
            res["logits"] = np.abs(logits - ref["logits"]).max()
            am = (logits.argmax(1) == ref["logits"].argmax(1)).all()
        else:
            res["logits"] = np.abs(np.take_along_axis(logits, ref["logits_topk_ids"], 1) - ref["logits_topk"]).max()
            am = (logits.argmax(1) == ref["logits_topk_ids"][:, 0]).all()
        tol["logits"] = 1e-4
        seq = []
        for s in range(min(args.steps, len(c["greedy_forced_ids"]))):
            if s:
                h = np.concatenate([h, E[seq[-1]][None]], 0)
                logits = m.decode(h)
            seq.append(int(logits[-1].argmax()))
        forced_ok = seq == c["greedy_forced_ids"][:len(seq)]
        fails = [k for k, v in res.items() if not v <= tol[k]] + ([] if am else ["logits argmax"]) + \
            ([] if forced_ok else ["forced ids"])
        bad += bool(fails)
        worst = max((v for k, v in res.items() if k not in ("mel", "mel_filters", "logits")), default=0)
        print(f"{'FAIL' if fails else 'ok  '} {c['name']:26s} mel {res['mel']:.1e}  worst tap {worst:.1e}  "
              f"logits {res['logits']:.1e}  forced {len(seq)} steps {'ok' if forced_ok else 'DIFFER'} {fails}",
              flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
