// The decoder's single-position step (greedy decode) as one operation, so that a backend can run the whole layer
// stack without returning to the model code between products (CPU: backend/cpu/decode_step_cpu.cpp).
#pragma once
#include "io/config.hpp"
#include "model/decoder.hpp"
#include "model/weights.hpp"

namespace qasr::ops {

// x [D]: the embedded input at position cache.len, replaced by the final-normed hidden state; appends the
// position's keys and values to the cache. The same arithmetic as Decoder::forward on one row (bit for bit; for
// quantized checkpoints SiLU takes the vectorized exp of ops::silu_mul_fast): the products run the matrix-vector
// kernels, attention the single-query kernels (inv_freq [hd/2]: RoPE frequencies). Independent of the thread count.
void decode_step(const DecoderW& w, const TextHParams& hp, const float* inv_freq, float* x, KvCache& cache);

} // namespace qasr::ops
