// Audio encoder (spec §4): 100-frame chunks → conv stem → conv_out → per-chunk sinusoids → windowed Transformer
// → ln_post → projector. Pure function of (weights, mel); taps report intermediates for parity tests.
#pragma once
#include "core/tensor.hpp"
#include "io/config.hpp"
#include "model/weights.hpp"

#include <functional>
#include <string>

namespace qasr {

using TapFn = std::function<void(const std::string& name, const Tensor& value)>;

// A(T) = 13·(T / 100) + ⌈(T mod 100) / 8⌉ for the shipped config (spec §4.9), general in chunk size.
int64_t audio_token_count(int64_t n_frames, const AudioHParams& hp);

// mel [n_mels, T] → [A, output_dim].
Tensor encode_audio(const EncoderW& w, const AudioHParams& hp, const Tensor& mel, const TapFn* tap = nullptr);

// Sinusoid table [n_pos, d] (spec §4.4).
Tensor sinusoid_table(int64_t n_pos, int64_t d);

} // namespace qasr
