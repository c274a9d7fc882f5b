// Qwen3 text decoder (spec §6): RMSNorm, GQA attention with per-head q/k RMSNorm and rotate-half RoPE, SwiGLU,
// tied (or separate) LM head. The KV cache belongs to the caller (a Session), the weights are shared.
#pragma once
#include "core/pass_hook.hpp"
#include "core/tensor.hpp"
#include "io/config.hpp"
#include "model/encoder.hpp"
#include "model/weights.hpp"

#include <functional>
#include <memory>
#include <vector>

namespace qasr {

// Whether the KV cache holds bf16 for a model with the given DecoderW::bf16_compute (QASR_KV=f32|bf16 overrides).
bool kv_cache_bf16(bool model_bf16_compute);

struct KvArenaUnmap { // unmaps the KV cache arena (the aligned pointer lies inside [base, base + bytes))
    void* base = nullptr;
    size_t bytes = 0;
    void operator()(void* p) const;
};

// Keys and values of every decoder layer for positions [0, len), owned by the caller (a Session). One arena on
// transparent huge pages holds all layers, head-major per layer and kind (KV head c, position j at element
// (c·cap + j)·head_dim of k[layer] / v[layer]): a decode step appends without allocating, and the decode attention
// streams each head's positions as one contiguous range. The arena grows by doubling (copying the positions held).
// Elements are float32, or bf16 (rounded to nearest even when appended) where the model computes in bf16
// (quantized checkpoints, DecoderW::bf16_compute; QASR_KV=f32|bf16 overrides).
struct KvCache {
    std::vector<void*> k, v; // per layer: base of its keys / values in the arena (empty before reset())
    int64_t len = 0;
    int64_t cap = 0; // positions per layer the arena holds
    int64_t heads = 0, head_dim = 0;
    bool bf16 = false;

    void reset(size_t n_layers); // no positions (an arena of the right size is kept for reuse)
    void truncate(int64_t n, int64_t row); // keep the first n positions (row = Hkv*hd, as the caller sees it)
    // Room for `need` positions of heads × head_dim elements of the given type; positions [0, len) are kept.
    void reserve(int64_t need, int64_t heads, int64_t head_dim, bool bf16);
    // Writes rows [0, n) of k and v ([n, heads·head_dim] float32) at positions pos … pos+n-1 of `layer`.
    void write(size_t layer, const float* k, const float* v, int64_t pos, int64_t n);
    // Makes this cache hold src's positions: copies positions [from, src.len) of every layer; the first `from`
    // are taken to hold src's already (beam search: both continue one prefix). from ≤ len and ≤ src.len.
    void copy_from(const KvCache& src, int64_t from);

private:
    std::unique_ptr<void, KvArenaUnmap> arena_;
};

class Decoder {
public:
    Decoder(const DecoderW& w, const TextHParams& hp);
    // Runs x [n, D] (embedded inputs at positions cache.len …) through the stack, appends to the cache and
    // returns the final-normed hidden states [n, D]; more than kRowBlock rows (without taps) go through in blocks.
    // stop (multi-row passes): asked after each layer (of each block); when it returns true the pass ends there,
    // the cache keeps its length (rows written for the new positions are not counted) and an empty tensor is
    // returned.
    Tensor forward(Tensor x, KvCache& cache, const TapFn* tap = nullptr,
                   const PassHook* stop = nullptr) const;
    // Room in `cache` for `positions` positions of this model (kept: those it holds). A request that reserves its
    // prompt and the decoding it expects up front spares the arena a growth (a copy of every position, and both
    // arenas mapped at once) when its decoding starts; untouched room costs address space, not memory.
    void reserve(KvCache& cache, int64_t positions) const;
    // One decode step of B independent sequences: x [B, D] (row b embedded at position caches[b]->len), each
    // appended to its own cache; returns the final-normed hidden states [B, D], row b bit for bit what forward()
    // gives that sequence alone (ops::decode_step_batch).
    Tensor forward_batch(Tensor x, KvCache* const* caches) const;
    // logits [n, V] for hidden rows h [n, D].
    Tensor logits(const Tensor& h) const;
    // logits [B, V] of B independent rows, each as logits() computes a single row (ops::gemv_batch).
    Tensor logits_batch(const Tensor& h) const;
    const WeightMatrix& head() const { return w_.lm_head.empty() ? w_.embed : w_.lm_head; } // [V, D]
    // Embeds token ids → [n, D].
    Tensor embed(const std::vector<int>& ids) const;
    const TextHParams& hparams() const { return hp_; }

    static constexpr int64_t kRowBlock = 1024; // forward() runs longer passes in blocks of this many rows

private:
    Tensor forward_rows(Tensor x, KvCache& cache, const TapFn* tap, const PassHook* stop) const;
    const DecoderW& w_;
    const TextHParams& hp_;
    std::vector<float> inv_freq_; // [head_dim/2]
};

} // namespace qasr
