// `qasr quantize`: writes an MLX affine-quantized checkpoint in the mlx-community layout (audio_tower.* / model.*
// names, OHWI convolutions, no lm_head, safetensors metadata {"format": "mlx"}, `quantization` and
// `quantization_config` blocks in config.json) from any checkpoint the loader reads, so the result also loads
// in MLX (mlx-audio / mlx-swift-asr).
#pragma once
#include <string>

namespace qasr {

struct QuantizeOptions {
    int bits = 8;            // 2, 3, 4, 5, 6 or 8
    int group_size = 64;     // 32, 64 or 128
    bool encoder = false;    // also quantize the audio tower's linears (and the projector)
    // mlx-lm's mixed-precision recipes (`mlx_lm.convert --quant-predicate`, after llama.cpp's Q4_K_M): "mixed_2_6",
    // "mixed_3_4", "mixed_3_6", "mixed_4_6" — low bits everywhere except v_proj and down_proj in the first and last
    // eighth of the decoder layers and every third between, which get the high bits; `bits` is then not used.
    // config.json gets an entry per module, as mlx-lm writes it. "" (default): every module at `bits`.
    std::string recipe;
};

struct QuantizeReport {
    int quantized = 0, kept_float = 0;
    int high_bits = 0; // modules at a recipe's high width
    size_t bytes_out = 0;
};

QuantizeReport quantize_checkpoint(const std::string& in_dir, const std::string& out_dir, const QuantizeOptions& o);

} // namespace qasr
