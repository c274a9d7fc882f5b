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

// B independent sequences one step each (a batch of requests decoding together): x [B, D], row b the input of the
// sequence whose cache is caches[b] (B distinct caches of any lengths). Each block of weights is multiplied with
// every row while it is in the CPU's cache, with the single-row kernels, so row b's result and cache are bit for bit
// what decode_step gives it alone; the weights stream from memory once per step instead of B times.
void decode_step_batch(const DecoderW& w, const TextHParams& hp, const float* inv_freq, float* x, int64_t B,
                       KvCache* const* caches);

} // namespace qasr::ops
