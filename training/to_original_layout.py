#!/usr/bin/env python3
"""Convert the demo model from the transformers `-hf` layout to the original Qwen3-ASR layout (spec §2.1, §2.3):
`thinker.`-prefixed weight names, projector back inside the audio tower (`proj1`/`proj2`), an explicit
`thinker.lm_head.weight` (a copy of the tied embedding) and the nested `thinker_config`. Pure Python (no torch).

    python3 training/to_original_layout.py models/demo OUTDIR

The inverse of transformers' convert_qwen3_asr_to_hf.py mapping. Not checked against the official toolkit (no
network here); fields the spec marks UNCONFIRMED (thinker model_type string) follow the spec's best reading.
"""
import json
import os
import shutil
import struct
import sys

LANGS = ["Chinese", "English", "Cantonese", "Arabic", "German", "French", "Spanish", "Portuguese", "Indonesian",
         "Italian", "Korean", "Russian", "Thai", "Vietnamese", "Japanese", "Turkish", "Hindi", "Malay", "Dutch",
         "Swedish", "Danish", "Finnish", "Polish", "Czech", "Filipino", "Persian", "Greek", "Romanian", "Hungarian",
         "Macedonian"]


def rename(k):
    k = k.replace("model.multi_modal_projector.linear_1.", "model.audio_tower.proj1.")
    k = k.replace("model.multi_modal_projector.linear_2.", "model.audio_tower.proj2.")
    if k.startswith("model.language_model."):
        return "thinker.model." + k[len("model.language_model."):]
    if k.startswith("lm_head."):
        return "thinker." + k
    if k.startswith("model."):
        return "thinker." + k[len("model."):]
    raise ValueError(k)


def main():
    src, dst = sys.argv[1], sys.argv[2]
    os.makedirs(dst, exist_ok=True)
    with open(os.path.join(src, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {"format": "pt"})
    tensors = {}
    for k, v in header.items():
        a, b = v["data_offsets"]
        tensors[rename(k)] = (v["dtype"], v["shape"], data[a:b])
    emb = tensors["thinker.model.embed_tokens.weight"]
    tensors.setdefault("thinker.lm_head.weight", emb)
    out_h, blobs, off = {"__metadata__": meta}, [], 0
    for k in sorted(tensors):
        dt, shape, blob = tensors[k]
        out_h[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    hb = json.dumps(out_h, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(os.path.join(dst, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for b in blobs:
            f.write(b)

    hf = json.load(open(os.path.join(src, "config.json")))
    ac, tc = hf["audio_config"], hf["text_config"]
    heads = ac.get("encoder_attention_heads", ac.get("num_attention_heads"))
    audio = dict(num_mel_bins=ac["num_mel_bins"], encoder_layers=ac["encoder_layers"], encoder_attention_heads=heads,
                 encoder_ffn_dim=ac["encoder_ffn_dim"], d_model=ac["d_model"], dropout=ac["dropout"],
                 attention_dropout=ac["attention_dropout"], activation_function=ac["activation_function"],
                 activation_dropout=ac["activation_dropout"], scale_embedding=ac["scale_embedding"],
                 initializer_range=ac["initializer_range"], max_source_positions=1500, n_window=ac["n_window"],
                 output_dim=ac["output_dim"], n_window_infer=ac["n_window_infer"], conv_chunksize=500,
                 downsample_hidden_size=ac["downsample_hidden_size"])
    half = tc["head_dim"] // 2  # MRoPE sections must sum to head_dim/2 (real model: [24, 20, 20] for 128)
    sec = [half - 2 * (half * 5 // 16), half * 5 // 16, half * 5 // 16]
    theta = tc.get("rope_theta", (tc.get("rope_parameters") or {}).get("rope_theta"))
    text = dict(vocab_size=tc["vocab_size"], hidden_size=tc["hidden_size"], intermediate_size=tc["intermediate_size"],
                num_hidden_layers=tc["num_hidden_layers"], num_attention_heads=tc["num_attention_heads"],
                num_key_value_heads=tc["num_key_value_heads"], head_dim=tc["head_dim"], hidden_act=tc["hidden_act"],
                max_position_embeddings=tc["max_position_embeddings"], rms_norm_eps=tc["rms_norm_eps"],
                tie_word_embeddings=True, rope_theta=theta,
                rope_scaling=dict(rope_type="default", mrope_section=sec, interleaved=True, mrope_interleaved=True),
                attention_bias=tc["attention_bias"], attention_dropout=tc["attention_dropout"], use_cache=True)
    cfg = dict(architectures=["Qwen3ASRForConditionalGeneration"], model_type="qwen3_asr", support_languages=LANGS,
               thinker_config=dict(model_type="qwen3_asr_thinker", audio_config=audio, text_config=text,
                                   audio_token_id=151676, audio_start_token_id=151669, audio_end_token_id=151670,
                                   initializer_range=0.02, dtype="bfloat16"))
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    for fn in ["generation_config.json", "preprocessor_config.json"]:
        if os.path.exists(os.path.join(src, fn)):
            shutil.copy(os.path.join(src, fn), dst)
    print(f"{len(tensors)} tensors -> {dst}")


if __name__ == "__main__":
    main()
