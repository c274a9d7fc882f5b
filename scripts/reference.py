#!/usr/bin/env python3
"""Reference side of the qasr parity tests (see docs/reference-dumps.md, the contract with the C++ side).

Writes deterministic random-weight Qwen3-ASR checkpoints (the `-hf` layout with save_pretrained and the original
nested `thinker.*` layout) and dumps transformers' fp32 tensors at the tap points of spec section 12.2 for every
test clip, plus manifest.json.

    python3 scripts/reference.py --presets tiny,0.6b,1.7b --out DIR [--compact] [--no-models]
                                 [--device cpu|cuda] [--seed 1] [--clips a.wav,b.wav]
    python3 scripts/reference.py --selftest          # generator check values; needs numpy only

Needs torch + transformers >= 5.17 + safetensors (the GPU machine has them); the weight generator needs numpy only.
"""
import argparse
import concurrent.futures
import json
import math
import os
import shutil
import time
import wave

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# ----------------------------------------------------------------------------------------------------------------
# Deterministic random weights (docs/reference-dumps.md). Pure numpy, uint64 wrap-around arithmetic.
# ----------------------------------------------------------------------------------------------------------------
MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
MIX1 = 0xBF58476D1CE4E5B9
MIX2 = 0x94D049BB133111EB
FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3


def fnv1a64(name):
    h = FNV_OFFSET
    for b in name.encode("utf-8"):
        h ^= b
        h = (h * FNV_PRIME) & MASK64
    return h


def tensor_key(name, seed):
    return fnv1a64(name) ^ ((seed * GOLDEN) & MASK64)


def uniform_scalar(name, seed, i):
    """Plain-Python version of one element (for the self-test)."""
    z = (tensor_key(name, seed) + (i + 1) * GOLDEN) & MASK64
    z = ((z ^ (z >> 30)) * MIX1) & MASK64
    z = ((z ^ (z >> 27)) * MIX2) & MASK64
    z = z ^ (z >> 31)
    return np.float32(np.float32(z >> 40) / np.float32(2.0 ** 23) - np.float32(1.0))


def uniform(name, seed, start, count):
    """u for elements start..start+count-1 of tensor `name`, float32 in [-1, 1)."""
    with np.errstate(over="ignore"):
        key = np.uint64(tensor_key(name, seed))
        z = np.arange(start + 1, start + count + 1, dtype=np.uint64)
        z *= np.uint64(GOLDEN)
        z += key
        z ^= z >> np.uint64(30)
        z *= np.uint64(MIX1)
        z ^= z >> np.uint64(27)
        z *= np.uint64(MIX2)
        z ^= z >> np.uint64(31)
        z >>= np.uint64(40)
    u = z.astype(np.float32)
    u /= np.float32(2.0 ** 23)
    u -= np.float32(1.0)
    return u


def round_bf16(x):
    """float32 -> nearest bf16 (ties to even), returned as float32 (no NaN/Inf handling needed here)."""
    b = x.view(np.uint32)
    b = (b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return b.view(np.float32)


def tensor_kind(name, shape):
    if len(shape) >= 2:
        return "embed" if name.endswith("embed_tokens.weight") else "matrix"
    if name.endswith(("norm.weight", "layer_norm.weight", "ln_post.weight")):
        return "gain"
    return "bias"


def _values_chunk(name, shape, seed, start, count):
    u = uniform(name, seed, start, count)
    kind = tensor_kind(name, shape)
    if kind == "matrix":
        fan_in = int(np.prod(shape[1:]))
        r = np.float32(1.0) / np.sqrt(np.float32(fan_in))  # float32: 1.0f / sqrtf(fan_in), then u * r; a = 1.0
        v = u * r
    elif kind == "embed":
        v = np.float32(EMBED_SCALE) * u
    elif kind == "gain":
        v = np.float32(1.0) + np.float32(0.1) * u
    else:
        v = np.float32(0.1) * u
    return round_bf16(v.astype(np.float32, copy=False))


# Scale of embed_tokens (tied lm_head). With 1.0 the random decoder's residual stream is dominated by the current
# token's own embedding and greedy decoding just repeats the last prompt token ("\n") forever; 0.1 lets the layers
# (and so the audio) decide the output while keeping healthy logit margins.
EMBED_SCALE = 0.1

_POOL = None


def tensor_values(name, shape, seed, chunk=1 << 22):
    """Full tensor (float32 holding bf16-exact values), computed in parallel chunks."""
    global _POOL
    n = int(np.prod(shape))
    if n <= chunk:
        return _values_chunk(name, shape, seed, 0, n).reshape(shape)
    if _POOL is None:
        _POOL = concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 4)
    out = np.empty(n, dtype=np.float32)

    def job(s):
        c = min(chunk, n - s)
        out[s:s + c] = _values_chunk(name, shape, seed, s, c)

    list(_POOL.map(job, range(0, n, chunk)))
    return out.reshape(shape)


# ----------------------------------------------------------------------------------------------------------------
# Presets and checkpoint layouts (spec sections 1, 2)
# ----------------------------------------------------------------------------------------------------------------
PRESETS = {
    "tiny": dict(
        audio=dict(d_model=64, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=128,
                   downsample_hidden_size=16, output_dim=64, n_window=50, n_window_infer=800, num_mel_bins=128),
        text=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                  intermediate_size=128, vocab_size=151936, rope_theta=1e6, rms_norm_eps=1e-6),
        mrope_section=[24, 20, 20]),  # as in the real checkpoints (numerically irrelevant: all 3 components equal)
    "0.6b": dict(
        audio=dict(d_model=896, encoder_layers=18, encoder_attention_heads=14, encoder_ffn_dim=3584,
                   downsample_hidden_size=480, output_dim=1024, n_window=50, n_window_infer=800, num_mel_bins=128),
        text=dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                  head_dim=128, intermediate_size=3072, vocab_size=151936, rope_theta=1e6, rms_norm_eps=1e-6),
        mrope_section=[24, 20, 20]),
    "1.7b": dict(
        audio=dict(d_model=1024, encoder_layers=24, encoder_attention_heads=16, encoder_ffn_dim=4096,
                   downsample_hidden_size=480, output_dim=2048, n_window=50, n_window_infer=800, num_mel_bins=128),
        text=dict(hidden_size=2048, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                  head_dim=128, intermediate_size=6144, vocab_size=151936, rope_theta=1e6, rms_norm_eps=1e-6),
        mrope_section=[24, 20, 20]),
}

AUDIO_TOKEN, AUDIO_START, AUDIO_END = 151676, 151669, 151670
IM_START, IM_END, ENDOFTEXT, ASR_TEXT = 151644, 151645, 151643, 151704
EOS_IDS = (ENDOFTEXT, IM_END)
LANGUAGES = ["Chinese", "English", "Cantonese", "Arabic", "German", "French", "Spanish", "Portuguese", "Indonesian",
             "Italian", "Korean", "Russian", "Thai", "Vietnamese", "Japanese", "Turkish", "Hindi", "Malay", "Dutch",
             "Swedish", "Danish", "Finnish", "Polish", "Czech", "Filipino", "Persian", "Greek", "Romanian",
             "Hungarian", "Macedonian"]


def expected_shapes(preset):
    """Canonical (-hf) parameter names and shapes, without the tied lm_head.weight."""
    a, t = PRESETS[preset]["audio"], PRESETS[preset]["text"]
    d, F, O, ch, M = a["d_model"], a["encoder_ffn_dim"], a["output_dim"], a["downsample_hidden_size"], a["num_mel_bins"]
    D, I, V, hd = t["hidden_size"], t["intermediate_size"], t["vocab_size"], t["head_dim"]
    Hq, Hkv = t["num_attention_heads"] * hd, t["num_key_value_heads"] * hd
    freq = (((M + 1) // 2 + 1) // 2 + 1) // 2
    s = {}
    at = "model.audio_tower."
    s[at + "conv2d1.weight"], s[at + "conv2d1.bias"] = (ch, 1, 3, 3), (ch,)
    s[at + "conv2d2.weight"], s[at + "conv2d2.bias"] = (ch, ch, 3, 3), (ch,)
    s[at + "conv2d3.weight"], s[at + "conv2d3.bias"] = (ch, ch, 3, 3), (ch,)
    s[at + "conv_out.weight"] = (d, ch * freq)
    for i in range(a["encoder_layers"]):
        p = f"{at}layers.{i}."
        for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
            s[p + f"self_attn.{n}.weight"], s[p + f"self_attn.{n}.bias"] = (d, d), (d,)
        for n in ("self_attn_layer_norm", "final_layer_norm"):
            s[p + f"{n}.weight"], s[p + f"{n}.bias"] = (d,), (d,)
        s[p + "fc1.weight"], s[p + "fc1.bias"] = (F, d), (F,)
        s[p + "fc2.weight"], s[p + "fc2.bias"] = (d, F), (d,)
    s[at + "ln_post.weight"], s[at + "ln_post.bias"] = (d,), (d,)
    mp = "model.multi_modal_projector."
    s[mp + "linear_1.weight"], s[mp + "linear_1.bias"] = (d, d), (d,)
    s[mp + "linear_2.weight"], s[mp + "linear_2.bias"] = (O, d), (O,)
    lm = "model.language_model."
    s[lm + "embed_tokens.weight"] = (V, D)
    for j in range(t["num_hidden_layers"]):
        p = f"{lm}layers.{j}."
        s[p + "input_layernorm.weight"] = (D,)
        s[p + "self_attn.q_proj.weight"] = (Hq, D)
        s[p + "self_attn.k_proj.weight"] = (Hkv, D)
        s[p + "self_attn.v_proj.weight"] = (Hkv, D)
        s[p + "self_attn.o_proj.weight"] = (D, Hq)
        s[p + "self_attn.q_norm.weight"] = (hd,)
        s[p + "self_attn.k_norm.weight"] = (hd,)
        s[p + "post_attention_layernorm.weight"] = (D,)
        s[p + "mlp.gate_proj.weight"] = (I, D)
        s[p + "mlp.up_proj.weight"] = (I, D)
        s[p + "mlp.down_proj.weight"] = (D, I)
    s[lm + "norm.weight"] = (D,)
    return s


def hf_to_original(name):
    """Inverse of spec 2.3's mapping (-hf name -> original thinker.* name)."""
    for src, dst in (("model.multi_modal_projector.linear_1.", "thinker.audio_tower.proj1."),
                     ("model.multi_modal_projector.linear_2.", "thinker.audio_tower.proj2."),
                     ("model.language_model.", "thinker.model."),
                     ("model.audio_tower.", "thinker.audio_tower."),
                     ("lm_head.", "thinker.lm_head.")):
        if name.startswith(src):
            return dst + name[len(src):]
    raise ValueError(f"unmapped tensor name {name}")


def original_to_hf(name):
    """spec 2.3's mapping, as successive substring replacements (used to check the inverse)."""
    for src, dst in (("thinker.model.", "model.language_model."), ("thinker.lm_head.", "lm_head."),
                     ("thinker.", "model."), ("model.audio_tower.proj1.", "model.multi_modal_projector.linear_1."),
                     ("model.audio_tower.proj2.", "model.multi_modal_projector.linear_2.")):
        name = name.replace(src, dst)
    return name


def original_config(preset):
    a, t = PRESETS[preset]["audio"], PRESETS[preset]["text"]
    return {
        "architectures": ["Qwen3ASRForConditionalGeneration"],
        "model_type": "qwen3_asr",
        "support_languages": LANGUAGES,
        "thinker_config": {
            "model_type": "qwen3_asr_thinker",
            "audio_token_id": AUDIO_TOKEN, "audio_start_token_id": AUDIO_START, "audio_end_token_id": AUDIO_END,
            "initializer_range": 0.02, "dtype": "bfloat16",
            "audio_config": {
                "model_type": "qwen3_asr_audio_encoder",
                "num_mel_bins": a["num_mel_bins"], "encoder_layers": a["encoder_layers"],
                "encoder_attention_heads": a["encoder_attention_heads"], "encoder_ffn_dim": a["encoder_ffn_dim"],
                "d_model": a["d_model"], "dropout": 0.0, "attention_dropout": 0.0, "activation_function": "gelu",
                "activation_dropout": 0.0, "scale_embedding": False, "initializer_range": 0.02,
                "max_source_positions": 1500, "n_window": a["n_window"], "output_dim": a["output_dim"],
                "n_window_infer": a["n_window_infer"], "conv_chunksize": 500,
                "downsample_hidden_size": a["downsample_hidden_size"],
            },
            "text_config": {
                "model_type": "qwen3_asr_text",
                "vocab_size": t["vocab_size"], "hidden_size": t["hidden_size"],
                "intermediate_size": t["intermediate_size"], "num_hidden_layers": t["num_hidden_layers"],
                "num_attention_heads": t["num_attention_heads"], "num_key_value_heads": t["num_key_value_heads"],
                "head_dim": t["head_dim"], "hidden_act": "silu", "max_position_embeddings": 65536,
                "rms_norm_eps": t["rms_norm_eps"], "tie_word_embeddings": True, "rope_theta": t["rope_theta"],
                "rope_scaling": {"rope_type": "default", "mrope_section": PRESETS[preset]["mrope_section"],
                                 "interleaved": True, "mrope_interleaved": True},
                "attention_bias": False, "attention_dropout": 0.0, "use_cache": True,
            },
        },
        "tie_word_embeddings": True,
        "transformers_version": "4.57.0",  # what the original checkpoints were written with (toolkit era)
    }


# ----------------------------------------------------------------------------------------------------------------
# Output parsing (spec 7.3, 7.4)
# ----------------------------------------------------------------------------------------------------------------
def fix_repetitions(text, threshold=20):
    # pass 1: runs of one character longer than threshold -> one copy
    out, i, n = [], 0, len(text)
    while i < n:
        j = i
        while j < n and text[j] == text[i]:
            j += 1
        out.append(text[i] if j - i > threshold else text[i:j])
        i = j
    text = "".join(out)

    def pass2(s):
        n = len(s)
        if n < 2 * threshold:
            return s
        res, i = [], 0
        while i <= n - 2 * threshold:
            for k in range(1, threshold + 1):
                if i + threshold * k > n:
                    break
                pat = s[i:i + k]
                if all(s[i + r * k:i + (r + 1) * k] == pat for r in range(1, threshold)):
                    end = i + threshold * k
                    while end + k <= n and s[end:end + k] == pat:
                        end += k
                    res.append(pat)
                    res.append(pass2(s[end:]))
                    return "".join(res)
            res.append(s[i])
            i += 1
        res.append(s[i:])
        return "".join(res)

    return pass2(text)


def parse_asr_output(raw, forced_language=None):
    if raw is None or not raw.strip():
        return "", ""
    s = fix_repetitions(raw.strip())
    if forced_language:
        return forced_language, s
    if "<asr_text>" not in s:
        return "", s.strip()
    meta, text = s.split("<asr_text>", 1)
    if "language none" in meta.lower():
        return "", text.strip()
    lang = ""
    for line in meta.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.lower().startswith("language "):
            v = line[len("language "):].strip()
            lang = v[:1].upper() + v[1:].lower() if v else ""
            break
    return lang, text.strip()


# ----------------------------------------------------------------------------------------------------------------
# Audio and prompt
# ----------------------------------------------------------------------------------------------------------------
def read_wav(path):
    with wave.open(path, "rb") as w:
        if w.getframerate() != 16000 or w.getnchannels() != 1 or w.getsampwidth() != 2:
            raise ValueError(f"{path}: need 16 kHz mono 16-bit PCM")
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    return pcm.astype(np.float32) / np.float32(32768.0)


def audio_tokens(T, n_window=50):
    c = 2 * n_window
    return 13 * (T // c) + -(-(T % c) // 8)


def prompt_text(context, language):
    s = ("<|im_start|>system\n" + context + "<|im_end|>\n<|im_start|>user\n"
         "<|audio_start|><|audio_pad|><|audio_end|><|im_end|>\n<|im_start|>assistant\n")
    if language:
        s += "language " + language + "<asr_text>"
    return s


def build_prompt_ids(tok, context, language, A):
    ids = tok.encode(prompt_text(context, language), add_special_tokens=False)
    assert ids.count(AUDIO_TOKEN) == 1, ids
    k = ids.index(AUDIO_TOKEN)
    ids = ids[:k] + [AUDIO_TOKEN] * A + ids[k + 1:]
    # check against spec 5.1 / formats.md 3.5
    head = [IM_START, 8948, 198]
    mid = [IM_END, 198, IM_START, 872, 198, AUDIO_START] + [AUDIO_TOKEN] * A + [AUDIO_END, IM_END, 198,
                                                                               IM_START, 77091, 198]
    assert ids[:3] == head, ids[:8]
    K = len(ids) - 3 - len(mid) - (3 if language else 0)
    if context == "":
        assert K == 0, ids
    else:
        assert K > 0 and ids[3:3 + K] == tok.encode(context, add_special_tokens=False) or context[:1].isspace(), ids
    assert ids[3 + K:3 + K + len(mid)] == mid, ids
    if language == "English":
        assert ids[3 + K + len(mid):] == [11528, 6364, ASR_TEXT], ids
    elif language:
        assert ids[-1] == ASR_TEXT and ids[3 + K + len(mid)] == 11528, ids
    if context == "" and not language:
        assert ids == head + mid and len(ids) == 15 + A
    return ids


# ----------------------------------------------------------------------------------------------------------------
# Model construction and checkpoints (torch side)
# ----------------------------------------------------------------------------------------------------------------
def hf_config(preset, attn):
    from transformers import Qwen3ASRConfig
    a, t = PRESETS[preset]["audio"], PRESETS[preset]["text"]
    audio = dict(a)
    audio.update(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, activation_function="gelu",
                 scale_embedding=False, max_position_embeddings=13)
    text = {k: v for k, v in t.items() if k != "rope_theta"}
    text.update(hidden_act="silu", max_position_embeddings=65536, attention_bias=False, attention_dropout=0.0,
                tie_word_embeddings=True, use_cache=True,
                rope_parameters={"rope_type": "default", "rope_theta": t["rope_theta"]})
    cfg = Qwen3ASRConfig(audio_config=audio, text_config=text, audio_token_id=AUDIO_TOKEN,
                         pad_token_id=IM_END, eos_token_id=list(EOS_IDS), tie_word_embeddings=True)
    # sanity: the values must have arrived where the model reads them
    ac, tc = cfg.audio_config, cfg.text_config
    assert ac.d_model == a["d_model"] and ac.encoder_layers == a["encoder_layers"], ac
    assert ac.encoder_attention_heads == a["encoder_attention_heads"], ac
    assert ac.n_window == 50 and ac.n_window_infer == 800 and ac.output_dim == a["output_dim"], ac
    assert tc.hidden_size == t["hidden_size"] and tc.head_dim == t["head_dim"], tc
    assert tc.num_key_value_heads == t["num_key_value_heads"] and tc.vocab_size == t["vocab_size"], tc
    rp = getattr(tc, "rope_parameters", None) or {}
    theta = rp.get("rope_theta", getattr(tc, "rope_theta", None))
    assert theta == t["rope_theta"], (rp, theta)
    if attn:
        cfg._attn_implementation = attn
    return cfg


def build_model(preset, seed, attn, log):
    import torch
    from transformers import Qwen3ASRForConditionalGeneration
    cfg = hf_config(preset, attn)
    torch.manual_seed(0)
    t0 = time.time()
    try:
        model = Qwen3ASRForConditionalGeneration._from_config(cfg, attn_implementation=attn, dtype=torch.float32)
    except Exception as e:  # noqa: BLE001
        log(f"_from_config failed ({e}); constructing directly")
        model = Qwen3ASRForConditionalGeneration(cfg)
        if attn and hasattr(model, "set_attn_implementation"):
            model.set_attn_implementation(attn)
    model = model.float().eval()
    impl = (model.model.audio_tower.config._attn_implementation,
            model.model.language_model.config._attn_implementation)
    log(f"[{preset}] attention implementation (encoder, decoder): {impl}")
    if attn:
        assert impl == (attn, attn), impl
    want = expected_shapes(preset)
    params = dict(model.named_parameters())
    got = {k: tuple(v.shape) for k, v in params.items()}
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    assert not missing and not extra, f"parameter name mismatch: missing={missing[:5]} extra={extra[:5]}"
    for k in want:
        assert got[k] == want[k], (k, got[k], want[k])
    with torch.no_grad():
        for name, shape in want.items():
            params[name].copy_(torch.from_numpy(tensor_values(name, shape, seed)))
    emb = model.model.language_model.embed_tokens.weight
    if model.lm_head.weight.data_ptr() != emb.data_ptr():
        log("note: lm_head.weight is not tied by storage; copying the embedding into it")
        with torch.no_grad():
            model.lm_head.weight.copy_(emb)
    log(f"[{preset}] model built and filled in {time.time() - t0:.1f} s "
        f"({sum(int(np.prod(s)) for s in want.values()) / 1e6:.1f} M parameters)")
    return model


def write_checkpoints(model, preset, seed, out, log, verify=True):
    """Writes <out>/models/<preset>-hf (save_pretrained, bf16) and <out>/models/<preset>-orig. Converts model to bf16!"""
    import torch
    from safetensors.torch import save_file, load_file
    tok_dir = os.path.join(ROOT, ".cache", "qasr", "tokenizer")
    hf_dir = os.path.join(out, "models", f"{preset}-hf")
    orig_dir = os.path.join(out, "models", f"{preset}-orig")
    for d in (hf_dir, orig_dir):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    t0 = time.time()
    model.to(torch.bfloat16)
    model.config.dtype = torch.bfloat16
    model.save_pretrained(hf_dir)
    log(f"[{preset}] save_pretrained: {sorted(os.listdir(hf_dir))} in {time.time() - t0:.1f} s")
    # original layout: same values under thinker.* names, plus thinker.lm_head.weight = embedding
    want = expected_shapes(preset)
    sd = {n: p.detach().to("cpu") for n, p in model.named_parameters()}
    orig = {hf_to_original(n): sd[n].contiguous() for n in want}
    orig["thinker.lm_head.weight"] = sd["model.language_model.embed_tokens.weight"].clone()
    for n in orig:
        assert n == "thinker.lm_head.weight" or original_to_hf(n) in want, n
    shard_limit = 4 * 1000 ** 3  # bytes; the real 1.7B checkpoint comes in 2 shards, 0.6B in one file
    shards, cur, size = [], {}, 0
    for n in sorted(orig):
        b = orig[n].numel() * 2
        if cur and size + b > shard_limit:
            shards.append(cur)
            cur, size = {}, 0
        cur[n] = orig[n]
        size += b
    shards.append(cur)
    meta = {"format": "pt"}
    if len(shards) == 1:
        save_file(shards[0], os.path.join(orig_dir, "model.safetensors"), metadata=meta)
    else:
        wmap, total = {}, 0
        for k, sh in enumerate(shards):
            fn = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
            save_file(sh, os.path.join(orig_dir, fn), metadata=meta)
            for n, v in sh.items():
                wmap[n] = fn
                total += v.numel() * 2
        with open(os.path.join(orig_dir, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": wmap}, f, indent=2, sort_keys=True)
    with open(os.path.join(orig_dir, "config.json"), "w") as f:
        json.dump(original_config(preset), f, indent=2)
    with open(os.path.join(orig_dir, "generation_config.json"), "w") as f:
        json.dump({"do_sample": False, "eos_token_id": [IM_END, ENDOFTEXT], "pad_token_id": ENDOFTEXT}, f, indent=2)
    for d in (hf_dir, orig_dir):
        for fn in ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json"):
            shutil.copy(os.path.join(tok_dir, fn), os.path.join(d, fn))
    # verify: every stored tensor equals the generator's values bit for bit
    for d, to_hf in ((hf_dir, lambda n: n), (orig_dir, original_to_hf)) if verify else ():
        seen = set()
        for fn in sorted(os.listdir(d)):
            if not fn.endswith(".safetensors"):
                continue
            for n, v in load_file(os.path.join(d, fn)).items():
                h = to_hf(n)
                if h == "lm_head.weight":
                    h = "model.language_model.embed_tokens.weight"
                assert v.dtype == torch.bfloat16, (d, n, v.dtype)
                ref = torch.from_numpy(tensor_values(h, want[h], seed)).to(torch.bfloat16)
                assert torch.equal(v, ref), (d, n)
                seen.add(to_hf(n))
        missing = set(want) - seen
        assert not missing, (d, sorted(missing)[:5])
        log(f"[{preset}] verified {d}: {len(seen)} tensors, extra keys: {sorted(seen - set(want))}")
    return hf_dir, orig_dir


# ----------------------------------------------------------------------------------------------------------------
# Reference run for one case
# ----------------------------------------------------------------------------------------------------------------
class Taps:
    def __init__(self):
        self.t, self.handles = {}, []

    def put(self, name, x):
        self.t[name] = x.detach().float().cpu().clone()

    def out_hook(self, name, first=False):
        def h(mod, args, out):
            self.put(name, out[0] if isinstance(out, (tuple, list)) else out)
        return h

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []


def run_case(model, fe, tok, case, device, compact, log):
    import torch
    at = model.model.audio_tower
    lm = model.model.language_model
    pcm = read_wav(os.path.join(ROOT, case["audio"]))
    n0 = len(pcm)
    min_samples = case["min_samples"]
    if n0 < min_samples:  # processor behaviour: zero-pad to the minimum (padding counts as valid audio)
        pcm = np.concatenate([pcm, np.zeros(min_samples - n0, dtype=np.float32)])
    feats = fe(pcm, sampling_rate=16000, padding="longest", return_attention_mask=True, return_tensors="pt")
    x = feats["input_features"].float()
    mask = feats.get("attention_mask", feats.get("input_features_mask"))
    T = int(mask.sum())
    assert T == len(pcm) // 160, (T, len(pcm))
    assert x.shape[-1] % 100 == 0 and x.shape[-1] >= T, x.shape
    A = audio_tokens(T)
    ids = build_prompt_ids(tok, case["context"], case["language"], A)
    L = len(ids)
    taps = Taps()
    taps.put("mel_filters", torch.from_numpy(np.asarray(fe.mel_filters)))
    taps.put("mel", x[0, :, :T])
    for k in (1, 2, 3):
        taps.handles.append(getattr(at, f"conv2d{k}").register_forward_hook(taps.out_hook(f"conv{k}")))
    taps.handles.append(at.conv_out.register_forward_hook(taps.out_hook("conv_out")))  # clone before the in-place PE add

    def enc_in(mod, args, kwargs):
        taps.put("enc_in", args[0] if args else kwargs["hidden_states"])
    taps.handles.append(at.layers[0].register_forward_pre_hook(enc_in, with_kwargs=True))
    for i, layer in enumerate(at.layers):
        taps.handles.append(layer.register_forward_hook(taps.out_hook(f"enc_layer.{i}")))
    taps.handles.append(at.ln_post.register_forward_hook(taps.out_hook("enc_out")))
    taps.handles.append(model.model.multi_modal_projector.register_forward_hook(taps.out_hook("proj_out")))

    def dec_in(mod, args, kwargs):
        taps.put("dec_in", kwargs["inputs_embeds"] if kwargs.get("inputs_embeds") is not None else args[0])
    taps.handles.append(lm.register_forward_pre_hook(dec_in, with_kwargs=True))
    for j, layer in enumerate(lm.layers):
        taps.handles.append(layer.register_forward_hook(taps.out_hook(f"dec_layer.{j}")))

    input_ids = torch.tensor([ids], dtype=torch.long, device=device)
    seconds = n0 / 16000.0
    cap = math.ceil(seconds * 20) + 64
    with torch.no_grad():
        out = model(input_ids=input_ids, input_features=x.to(device), input_features_mask=mask.to(device),
                    attention_mask=torch.ones_like(input_ids), use_cache=True, logits_to_keep=0)
        taps.remove()
        logits = out.logits[0].float()
        assert logits.shape[0] == L, logits.shape
        past = out.past_key_values
        last = logits[-1]
        seq, step_logits, margins = [], [], []
        while True:
            if len(seq) < 64:
                step_logits.append(last.detach().cpu().clone())
            top2 = torch.topk(last, 2).values
            margins.append(float(top2[0] - top2[1]))
            nxt = int(torch.argmax(last))
            seq.append(nxt)
            eos_at = next((k for k, v in enumerate(seq) if v in EOS_IDS), None)
            done_greedy = eos_at is not None or len(seq) >= cap
            if len(seq) >= 64 and done_greedy:
                break
            step = model(input_ids=torch.tensor([[nxt]], device=device), past_key_values=past, use_cache=True,
                         attention_mask=torch.ones((1, L + len(seq)), dtype=torch.long, device=device))
            past = step.past_key_values
            last = step.logits[0, -1].float()
    # tap tensors
    C = x.shape[-1] // 100
    assert taps.t["conv1"].shape[0] == C and taps.t["conv_out"].shape[:2] == (C, 13), taps.t["conv_out"].shape
    assert taps.t["enc_in"].shape[0] == A and taps.t["proj_out"].shape[0] == A and taps.t["dec_in"].shape[0 if taps.t["dec_in"].dim() == 2 else 1] == L
    for k in list(taps.t):
        if k.startswith("dec_") and taps.t[k].dim() == 3:
            taps.t[k] = taps.t[k][0]
    forced = seq[:64]
    greedy = seq[:eos_at] if eos_at is not None else seq[:cap]
    n_greedy_steps = eos_at + 1 if eos_at is not None else cap
    stop = "eos" if eos_at is not None else "cap"
    sl = torch.stack(step_logits)
    if compact:
        for k in ("conv1", "conv2", "conv3"):
            taps.t[k] = taps.t[k][:2].clone()
        v, i = torch.topk(logits.cpu(), 32, dim=-1)
        taps.t["logits_topk"], taps.t["logits_topk_ids"] = v.contiguous(), i.to(torch.int64).contiguous()
        v, i = torch.topk(sl, 32, dim=-1)
        taps.t["step_topk"], taps.t["step_topk_ids"] = v.contiguous(), i.to(torch.int64).contiguous()
    else:
        taps.t["logits"] = logits.cpu()
        taps.t["step_logits"] = sl
    raw = tok.decode(greedy, skip_special_tokens=True, clean_up_tokenization_spaces=False)
    lang_out, text = parse_asr_output(raw, case["language"])
    case.update(prompt_ids=ids, n_audio_tokens=A, n_samples=n0, n_samples_padded=len(pcm), n_frames=T,
                n_chunks=C, greedy_cap=cap, greedy_forced_ids=forced, greedy_ids=greedy, greedy_stop=stop,
                forced_min_margin=min(margins[:64]), greedy_min_margin=min(margins[:n_greedy_steps]),
                raw_text=raw, language_out=lang_out, text=text)
    return taps.t


# ----------------------------------------------------------------------------------------------------------------
def default_cases(preset, clips):
    cases = []
    for c in clips:
        stem = os.path.splitext(os.path.basename(c))[0]
        cases.append(dict(name=f"{preset}_{stem}", audio=c, context="", language=None))
    if preset == "tiny":
        c13 = next((c for c in clips if "t1p3s" in c), clips[0])
        cases.append(dict(name=f"{preset}_t1p3s_lang_en", audio=c13, context="", language="English"))
        cases.append(dict(name=f"{preset}_t1p3s_context", audio=c13, context="Names: Qwen, qasr.", language=None))
    return cases


DEFAULT_CLIPS = ["tests/data/audio/short_0p3s.wav", "tests/data/audio/exact_1s.wav", "tests/data/audio/t1p3s.wav",
                 "tests/data/audio/t9s.wav", "tests/data/audio/t30s.wav", "tests/data/audio/silence_2s.wav"]


def selftest():
    vals = [uniform_scalar("a", 1, i) for i in range(4)]
    vec = uniform("a", 1, 0, 4)
    assert np.array_equal(np.array(vals, dtype=np.float32), vec), (vals, vec)
    print("fnv1a64('a') = 0x%016X" % fnv1a64("a"))
    print("key('a', seed 1) = 0x%016X" % tensor_key("a", 1))
    for i, v in enumerate(vals):
        print(f"u('a', seed 1, i={i}) = {float(v):.9g}  (0x{np.float32(v).view(np.uint32):08X})")
    # a value of each kind, seed 1
    for name, shape in (("model.audio_tower.conv2d2.weight", (480, 480, 3, 3)),
                        ("model.language_model.embed_tokens.weight", (151936, 1024)),
                        ("model.language_model.layers.0.self_attn.q_norm.weight", (128,)),
                        ("model.multi_modal_projector.linear_2.weight", (2048, 1024)),
                        ("model.language_model.norm.weight", (1024,)),
                        ("model.audio_tower.conv2d1.bias", (480,))):
        v = _values_chunk(name, shape, 1, 0, 3)
        print(f"{name} {shape}: first values {[float(t) for t in v]}  "
              f"bits {['0x%08X' % b for b in v.view(np.uint32)]}")
    # chunked == unchunked
    a = tensor_values("x.weight", (3, 1000), 7, chunk=1000)
    b = _values_chunk("x.weight", (3, 1000), 7, 0, 3000).reshape(3, 1000)
    assert np.array_equal(a, b)
    assert np.all(a.view(np.uint32) & 0xFFFF == 0)
    # mapping round trip
    for p in ("tiny", "0.6b", "1.7b"):
        for n in expected_shapes(p):
            assert original_to_hf(hf_to_original(n)) == n, n
    assert parse_asr_output("language English<asr_text>Hello.") == ("English", "Hello.")
    assert parse_asr_output("language None<asr_text>") == ("", "")
    assert fix_repetitions("a" * 25 + "b") == "ab"
    assert fix_repetitions("xy" * 30 + "z") == "xyz"
    print("selftest ok")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--presets", default="tiny")
    ap.add_argument("--out")
    ap.add_argument("--compact", action="store_true", help="small dumps for committing (see docs)")
    ap.add_argument("--no-models", action="store_true", help="do not write checkpoint directories")
    ap.add_argument("--no-verify", action="store_true", help="skip re-reading the written checkpoints")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--attn", default="eager", help="attention implementation (eager or sdpa)")
    ap.add_argument("--clips", default=",".join(DEFAULT_CLIPS))
    ap.add_argument("--min-samples", type=int, default=8000)
    ap.add_argument("--selftest", action="store_true")
    args = ap.parse_args()
    if args.selftest:
        selftest()
        return
    if not args.out:
        ap.error("--out is required")
    import torch
    import transformers
    from safetensors.torch import save_file
    from transformers import AutoTokenizer
    try:
        from transformers import Qwen3ASRFeatureExtractor
    except ImportError:
        from transformers.models.qwen3_asr.feature_extraction_qwen3_asr import Qwen3ASRFeatureExtractor
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    os.makedirs(os.path.join(args.out, "cases"), exist_ok=True)
    logf = open(os.path.join(args.out, "reference.log"), "a")

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    tok_dir = os.path.join(ROOT, ".cache", "qasr", "tokenizer")
    tok = AutoTokenizer.from_pretrained(tok_dir)
    fe = Qwen3ASRFeatureExtractor()
    assert fe.feature_size == 128 and fe.sampling_rate == 16000
    clips = [c for c in args.clips.split(",") if c]
    manifest = {"transformers": transformers.__version__, "torch": torch.__version__, "seed": args.seed,
                "device": args.device, "attn_implementation": args.attn, "compact": args.compact,
                "models": {}, "cases": []}
    mpath = os.path.join(args.out, "manifest.json")
    for preset in args.presets.split(","):
        t0 = time.time()
        model = build_model(preset, args.seed, args.attn, log).to(args.device)
        hf_cfg = model.config.to_dict()
        for layout in ("hf", "orig"):
            manifest["models"][f"{preset}-{layout}"] = {
                "dir": None if args.no_models else f"models/{preset}-{layout}",
                "layout": "hf" if layout == "hf" else "original", "preset": preset}
        manifest["models"][f"{preset}-hf"]["config"] = json.loads(json.dumps(hf_cfg, default=str))
        manifest["models"][f"{preset}-orig"]["config"] = original_config(preset)
        for case in default_cases(preset, clips):
            case.update(model=f"{preset}-hf", preset=preset, min_samples=args.min_samples,
                        file=f"cases/{case['name']}.safetensors")
            t1 = time.time()
            tensors = run_case(model, fe, tok, case, args.device, args.compact, log)
            save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(args.out, case["file"]))
            log(f"[{preset}] {case['name']}: L={len(case['prompt_ids'])} A={case['n_audio_tokens']} "
                f"greedy {len(case['greedy_ids'])} ({case['greedy_stop']}) in {time.time() - t1:.1f} s; "
                f"raw={case['raw_text'][:60]!r}")
            manifest["cases"].append(case)
            with open(mpath, "w") as f:
                json.dump(manifest, f, indent=1, ensure_ascii=False)
        if not args.no_models:
            model.to("cpu")
            write_checkpoints(model, preset, args.seed, args.out, log, verify=not args.no_verify)
        del model
        log(f"[{preset}] done in {time.time() - t0:.1f} s")
    with open(mpath, "w") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False)
    log("all done")


if __name__ == "__main__":
    main()
