// The model-directory fuzz target (fuzz_model.cpp) and its seeds, shared by the libFuzzer binary and the driver.
#pragma once
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace qasr_fuzz {

// Input: [checkpoint: 0 bf16 -hf layout, 1 bf16 original layout, 2 MLX 4-bit, 3 mixed_4_6] config.json '\0'
// safetensors header.
// Returns whether the checkpoint loaded and transcribed (false: a qasr::Error, or an input of another shape).
bool model_dir(const uint8_t* data, size_t size);
// Writes the tiny checkpoints the model-directory and stream targets use (otherwise the first input of either does;
// libFuzzer calls this before the first input: their set-up took longer than a 60 s -timeout under ASan).
void prepare_models();
// A seed (target byte, checkpoint byte, config, header) with 1-3 structural edits: a dimension, the shape's order,
// the element type, the byte range, a tensor missing or renamed, a config number (the byte mutations of the
// driver mostly break the JSON; these reach the checks behind the parser).
std::vector<uint8_t> mutate_model_input(const std::vector<uint8_t>& seed, std::mt19937_64& rng);
// One seed per checkpoint (the real config and header), each prefixed with `target`; none without the tokenizer.
std::vector<std::vector<uint8_t>> model_dir_seeds(uint8_t target);

// A live stream on the tiny model (fuzz_model.cpp): [options: chunk seconds, pause steps, speculative, exact final,
// rollback tokens, unfixed chunks]
// [audio length], then per byte a push of 0–4000 samples, 0xfe a poll, 0xff an interrupt. Its final must equal the
// offline transcript's text where it decodes without a text prefix (speculative or exact_final), else keep the
// partials' stable text; a partial's stable text only grows. Returns false where it did not run.
bool stream(const uint8_t* data, size_t size);
std::vector<std::vector<uint8_t>> stream_seeds(uint8_t target);

} // namespace qasr_fuzz
