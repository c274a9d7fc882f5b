// Hyperparameters read from a checkpoint's config.json: the original nested layout (thinker_config), the
// flattened -hf layout, and the mlx-community files (either, plus a quantization block). Every field the engine
// uses is read from the file; missing or absurd values are reported together in one error.
#pragma once
#include <optional>
#include <map>
#include <string>
#include <vector>

namespace qasr {

struct AudioHParams {
    int n_mels = 0;           // num_mel_bins
    int d_model = 0;          // encoder width d
    int n_layers = 0;         // encoder_layers
    int n_heads = 0;          // encoder_attention_heads
    int ffn_dim = 0;          // encoder_ffn_dim
    int conv_channels = 0;    // downsample_hidden_size
    int output_dim = 0;       // projector output = decoder width
    int n_window = 0;         // half chunk, mel frames
    int n_window_infer = 0;   // attention window, mel frames
    int head_dim() const { return d_model / n_heads; }
    int chunk_frames() const { return 2 * n_window; }
    int freq_after_conv() const; // n_mels after three stride-2 convs
};

struct TextHParams {
    int vocab_size = 0;
    int hidden = 0;        // D
    int intermediate = 0;  // I
    int n_layers = 0;
    int n_heads = 0;
    int n_kv_heads = 0;
    int head_dim = 0;
    float rms_eps = 0;
    double rope_theta = 0;
    std::optional<bool> tie_word_embeddings;
    int max_positions = 0; // max_position_embeddings: the positions the decoder was trained for (0: not given)
};

struct QuantHParams {
    int bits = 0;        // 0: no global quantization block
    int group_size = 0;
    std::string mode;    // "affine"
    // Per-module entries of the same block (mlx-lm's mixed-precision recipes, formats.md §1.6), by module path
    // (the stored tensor name without ".weight"): their own bits, group size and mode; bits 0 = `false` (float).
    struct Module {
        int bits = 0, group_size = 0;
        std::string mode;
    };
    std::map<std::string, Module> modules;
};

// Qwen3-ForcedAligner (spec §9): a classifier of `classes` timestamp classes of `segment_ms` each replaces the LM
// head; classes == 0 for an ASR checkpoint.
struct AlignerHParams {
    int classes = 0;
    int timestamp_token_id = 151705;
    double segment_ms = 80;
};

struct HParams {
    std::string layout; // "original" | "hf" | "flat"
    AudioHParams audio;
    TextHParams text;
    AlignerHParams aligner;
    std::optional<int> audio_token_id, audio_start_token_id, audio_end_token_id;
    std::vector<int> eos_token_ids; // empty: take from the tokenizer
    QuantHParams quant;
};

HParams parse_config_json(const std::string& json_text, const std::string& what);
HParams load_config(const std::string& model_dir);

} // namespace qasr
