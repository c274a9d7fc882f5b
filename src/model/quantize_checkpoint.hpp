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
};

struct QuantizeReport {
    int quantized = 0, kept_float = 0;
    size_t bytes_out = 0;
};

QuantizeReport quantize_checkpoint(const std::string& in_dir, const std::string& out_dir, const QuantizeOptions& o);

} // namespace qasr
