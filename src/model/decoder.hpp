// Qwen3 text decoder (spec §6): RMSNorm, GQA attention with per-head q/k RMSNorm and rotate-half RoPE, SwiGLU,
// tied (or separate) LM head. The KV cache belongs to the caller (a Session), the weights are shared.
#pragma once
#include "core/tensor.hpp"
#include "io/config.hpp"
#include "model/encoder.hpp"
#include "model/weights.hpp"

#include <vector>

namespace qasr {

struct KvCache {
    std::vector<std::vector<float>> k, v; // per layer: [len, Hkv*hd]
    int64_t len = 0;
    void reset(size_t n_layers) {
        k.assign(n_layers, {});
        v.assign(n_layers, {});
        len = 0;
    }
    void truncate(int64_t n, int64_t row); // keep the first n positions (row = Hkv*hd floats)
};

class Decoder {
public:
    Decoder(const DecoderW& w, const TextHParams& hp);
    // Runs x [n, D] (embedded inputs at positions cache.len …) through the stack, appends to the cache and
    // returns the final-normed hidden states [n, D].
    Tensor forward(Tensor x, KvCache& cache, const TapFn* tap = nullptr) const;
    // logits [n, V] for hidden rows h [n, D].
    Tensor logits(const Tensor& h) const;
    // Embeds token ids → [n, D].
    Tensor embed(const std::vector<int>& ids) const;
    const TextHParams& hparams() const { return hp_; }

private:
    const DecoderW& w_;
    const TextHParams& hp_;
    std::vector<float> inv_freq_; // [head_dim/2]
};

} // namespace qasr
