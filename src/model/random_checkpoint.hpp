// Deterministic random-weight checkpoints (docs/reference-dumps.md): every value is a pure function of
// (seed, canonical tensor name, index), identical to scripts/reference.py, so tests can rebuild the checkpoints
// that the reference dumps were made from instead of shipping them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace qasr {

// Uniform value in [-1, 1) for element i of tensor `name`.
float random_unit(uint64_t seed, const std::string& name, uint64_t i);
// The float32 value (before bf16 rounding) of element i of a tensor with this name and shape.
float random_weight_value(uint64_t seed, const std::string& name, const std::vector<int64_t>& shape, uint64_t i);

// Preset configs: "tiny", "0.6b", "1.7b". Returns config.json text in the given layout ("hf" | "original").
std::string preset_config_json(const std::string& preset, const std::string& layout);

// Writes config.json + model.safetensors (bf16) for the preset in the layout; copies tokenizer files from
// tokenizer_dir when it is non-empty.
void write_random_checkpoint(const std::string& out_dir, const std::string& preset, const std::string& layout,
                             uint64_t seed, const std::string& tokenizer_dir);

} // namespace qasr
