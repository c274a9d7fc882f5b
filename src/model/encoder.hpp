// Audio encoder (spec §4): 100-frame chunks → conv stem → conv_out → per-chunk sinusoids → windowed Transformer
// → ln_post → projector. Pure function of (weights, mel); taps report intermediates for parity tests.
// The two stages are also exposed on their own: the stem rows of a chunk depend only on that chunk's frames, so a
// caller (streaming) can keep them and run only the Transformer stage again.
#pragma once
#include "core/pass_hook.hpp"
#include "core/tensor.hpp"
#include "io/config.hpp"
#include "model/weights.hpp"

#include <functional>
#include <string>

namespace qasr {

using TapFn = std::function<void(const std::string& name, const Tensor& value)>;

// A(T) = 13·(T / 100) + ⌈(T mod 100) / 8⌉ for the shipped config (spec §4.9), general in chunk size.
int64_t audio_token_count(int64_t n_frames, const AudioHParams& hp);

// mel [n_mels, T] → [A, output_dim]. Same as the stem of every chunk, packed, then encode_rows. stop: asked
// between the stem's chunks (the first fifth of the pass) too (an empty tensor when it answered true).
Tensor encode_audio(const EncoderW& w, const AudioHParams& hp, const Tensor& mel, const TapFn* tap = nullptr,
                    const PassHook* stop = nullptr);

// Conv-stem intermediates of one chunk (pre-GELU conv outputs, conv_out before the sinusoids), for parity taps.
struct StemTrace {
    Tensor conv1, conv2, conv3, conv_out;
};

// Conv stem of one chunk (spec §4.1–4.4): `mel` points at the chunk's first frame inside a normalized mel matrix
// with row stride `stride` (frames per bin row); 1 ≤ frames ≤ chunk_frames (a shorter chunk is zero-padded, spec
// §4.1). → rows [audio_token_count(frames), d] after conv_out and the per-chunk sinusoids.
Tensor encode_stem_chunk(const EncoderW& w, const AudioHParams& hp, const float* mel, int64_t stride, int64_t frames,
                         StemTrace* trace = nullptr);

// Attention window in rows for the packed rows of an encoder input of n_frames (spec §4.6).
int64_t encoder_window_rows(int64_t n_frames, const AudioHParams& hp);

// Transformer layers, ln_post and projector over packed stem rows x [A, d] → [A, output_dim] (spec §4.5–4.8).
// More than kEncoderRowBlock rows (without taps) go through the layers in blocks of whole attention windows, each
// block through every layer (no window attends across blocks): the activations stay those of one block.
// Taps: enc_in, enc_layer.i, enc_out, proj_out. stop: asked after each layer (of each block) but the very last;
// when it returns true the pass ends there and an empty tensor is returned.
constexpr int64_t kEncoderRowBlock = 1024;
Tensor encode_rows(const EncoderW& w, const AudioHParams& hp, Tensor x, int64_t window_rows,
                   const TapFn* tap = nullptr, const PassHook* stop = nullptr);

// Sinusoid table [n_pos, d] (spec §4.4).
Tensor sinusoid_table(int64_t n_pos, int64_t d);

} // namespace qasr
