"""Shared pieces of the demo-model training and evaluation: model config, prompt ids, log-mel on GPU, parsing,
WER. Needs torch + transformers >= 5.17 (Qwen3ASRForConditionalGeneration) + tokenizers."""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sentences  # noqa: E402

LANG_NAMES = {"en": "English", "de": "German"}
AUDIO_PAD, AUDIO_START, AUDIO_END = 151676, 151669, 151670
IM_START, IM_END, EOT = 151644, 151645, 151643
ASR_TEXT = 151704
PROMPT_HEAD = "<|im_start|>system\n<|im_end|>\n<|im_start|>user\n<|audio_start|>"
PROMPT_TAIL = "<|audio_end|><|im_end|>\n<|im_start|>assistant\n"
HEAD_IDS = [151644, 8948, 198, 151645, 198, 151644, 872, 198, 151669]
TAIL_IDS = [151670, 151645, 198, 151644, 77091, 198]

# The demo model: real Qwen3-ASR schema, scaled down. n_window / n_window_infer / mel bins / vocab / special ids
# are the real values; widths and depths are small. Embedding (151936 x 48) dominates the size.
AUDIO_CONFIG = dict(
    num_mel_bins=128, encoder_layers=6, encoder_attention_heads=4, encoder_ffn_dim=640, d_model=160,
    dropout=0.0, attention_dropout=0.0, activation_function="gelu", activation_dropout=0.0,
    scale_embedding=False, initializer_range=0.02, n_window=50, output_dim=48, n_window_infer=800,
    conv_chunksize=500, downsample_hidden_size=32, max_source_positions=1500,
)
TEXT_CONFIG = dict(
    vocab_size=151936, hidden_size=48, intermediate_size=192, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=2, head_dim=32, hidden_act="silu", max_position_embeddings=65536, rms_norm_eps=1e-6,
    tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
    attention_bias=False, attention_dropout=0.0, use_cache=True, initializer_range=0.02,
)


def make_config():
    from transformers import Qwen3ASRConfig
    cfg = Qwen3ASRConfig(audio_config=dict(AUDIO_CONFIG), text_config=dict(TEXT_CONFIG), audio_token_id=AUDIO_PAD,
                         tie_word_embeddings=True, pad_token_id=IM_END, eos_token_id=[EOT, IM_END])
    return cfg


def n_audio_tokens(T):
    """A(T) per spec 4.9 (T = valid mel frames)."""
    return 13 * (T // 100) + (T % 100 + 7) // 8


def load_tokenizer(path):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
    assert tok.encode(PROMPT_HEAD).ids == HEAD_IDS, tok.encode(PROMPT_HEAD).ids
    assert tok.encode(PROMPT_TAIL).ids == TAIL_IDS, tok.encode(PROMPT_TAIL).ids
    return tok


def target_string(lang, text):
    return f"language {LANG_NAMES[lang]}<asr_text>{text}<|im_end|>"


def prompt_ids(A):
    return HEAD_IDS + [AUDIO_PAD] * A + TAIL_IDS


def parse_output(raw):
    """Official parse (spec 7.3) without the repetition fixer: returns (language, text)."""
    if raw is None or not raw.strip():
        return "", ""
    s = raw.strip()
    if "<asr_text>" not in s:
        return "", s
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
            lang = v[:1].upper() + v[1:].lower()
            break
    return lang, text.strip()


def edit_distance(a, b):
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1]))
        prev = cur
    return prev[len(b)]


def wer(refs, hyps, normalize=True):
    errs = words = 0
    for r, h in zip(refs, hyps):
        rw = (sentences.normalize(r) if normalize else r).split()
        hw = (sentences.normalize(h) if normalize else h).split()
        errs += edit_distance(rw, hw)
        words += len(rw)
    return errs / max(1, words)


class GpuMel:
    """Log-mel exactly as Qwen3ASRFeatureExtractor computes it (periodic Hann, centred reflect STFT, drop last
    frame, Slaney mel, log10 floor 1e-10, per-clip max-8 clamp over the clip's own frames, (x+4)/4), batched on the
    GPU; frames past a clip's T = N//160 are zeroed and the time axis is padded to a multiple of 100."""

    def __init__(self, device):
        import torch
        from transformers import Qwen3ASRFeatureExtractor
        fe = Qwen3ASRFeatureExtractor()
        self.filters = torch.from_numpy(fe.mel_filters).to(device, torch.float32)  # [201, 128]
        self.window = torch.hann_window(400, device=device)
        self.device = device

    def __call__(self, wav, lens):
        import torch
        spec = torch.stft(wav, 400, 160, window=self.window, return_complex=True)
        power = spec[..., :-1].abs() ** 2                                   # [B, 201, F]
        mel = torch.matmul(self.filters.T, power)                           # [B, 128, F]
        log = torch.clamp(mel, min=1e-10).log10()
        F_ = log.shape[-1]
        T = lens // 160
        valid = torch.arange(F_, device=wav.device)[None, :] < T[:, None]  # [B, F]
        mx = log.masked_fill(~valid[:, None, :], float("-inf")).amax(dim=(1, 2))
        log = torch.maximum(log, (mx - 8.0)[:, None, None])
        log = (log + 4.0) / 4.0
        log = log * valid[:, None, :]
        Fp = int(math.ceil(max(F_, 1) / 100.0)) * 100
        if Fp > F_:
            log = torch.nn.functional.pad(log, (0, Fp - F_))
            valid = torch.nn.functional.pad(valid, (0, Fp - F_))
        return log, valid.long(), T


def patch_encoder_attention():
    """Training-speed patch: the reference encoder (sdpa/eager path) loops over attention windows in Python.
    This computes the same windowed attention (block-diagonal over cu_seqlens windows, no mask inside a window)
    with one padded batched SDPA call. Used for training only; evaluation uses the unpatched reference."""
    import torch
    import torch.nn.functional as F
    from transformers.models.qwen3_asr import modeling_qwen3_asr as M

    def forward(self, hidden_states, cu_seqlens, max_seqlen=None, **kwargs):
        S, d = hidden_states.shape
        H = self.num_heads
        hd = d // H
        q = self.q_proj(hidden_states).view(S, H, hd)
        k = self.k_proj(hidden_states).view(S, H, hd)
        v = self.v_proj(hidden_states).view(S, H, hd)
        cu = cu_seqlens.to(torch.long)
        lens = cu[1:] - cu[:-1]
        W = int(lens.max().item())
        ar = torch.arange(W, device=hidden_states.device)
        valid = ar[None, :] < lens[:, None]                                # [nW, W]
        idx = (cu[:-1, None] + ar[None, :]).clamp(max=S - 1)               # [nW, W]
        qw, kw, vw = (t[idx].permute(0, 2, 1, 3) for t in (q, k, v))      # [nW, H, W, hd]
        o = F.scaled_dot_product_attention(qw, kw, vw, attn_mask=valid[:, None, None, :], scale=self.scaling)
        o = o.permute(0, 2, 1, 3).reshape(-1, W, d)[valid]                 # [S, d] in packed order
        return self.out_proj(o)

    M.Qwen3ASRAudioAttention._orig_forward = M.Qwen3ASRAudioAttention.forward
    M.Qwen3ASRAudioAttention.forward = forward


def unpatch_encoder_attention():
    from transformers.models.qwen3_asr import modeling_qwen3_asr as M
    if hasattr(M.Qwen3ASRAudioAttention, "_orig_forward"):
        M.Qwen3ASRAudioAttention.forward = M.Qwen3ASRAudioAttention._orig_forward
        del M.Qwen3ASRAudioAttention._orig_forward
