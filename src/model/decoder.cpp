// Decoder forward over n new positions with a KV cache (prefill: n = prompt length; step: n = 1).
#include "model/decoder.hpp"

#include "core/error.hpp"
#include "ops/ops.hpp"

#include <cmath>
#include <cstring>

namespace qasr {

void KvCache::truncate(int64_t n, int64_t row) {
    if (n >= len) return;
    for (auto& x : k) x.resize(size_t(n * row));
    for (auto& x : v) x.resize(size_t(n * row));
    len = n;
}

Decoder::Decoder(const DecoderW& w, const TextHParams& hp) : w_(w), hp_(hp) {
    const int64_t half = hp.head_dim / 2;
    inv_freq_.resize(size_t(half));
    for (int64_t i = 0; i < half; ++i)
        inv_freq_[size_t(i)] = float(1.0 / std::pow(hp.rope_theta, double(2 * i) / double(hp.head_dim)));
}

Tensor Decoder::embed(const std::vector<int>& ids) const {
    const int64_t D = hp_.hidden;
    Tensor x({int64_t(ids.size()), D});
    for (size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] < 0 || ids[i] >= hp_.vocab_size)
            fail("decoder", "token id " + std::to_string(ids[i]) + " is outside the vocabulary of " +
                                std::to_string(hp_.vocab_size));
        w_.embed.row_f32(ids[i], x.ptr() + int64_t(i) * D);
    }
    return x;
}

Tensor Decoder::forward(Tensor x, KvCache& cache, const TapFn* tap) const {
    const int64_t n = x.rows(), D = hp_.hidden, hd = hp_.head_dim, Hq = hp_.n_heads, Hkv = hp_.n_kv_heads;
    const int64_t past = cache.len, kv_row = Hkv * hd;
    ops::Bf16GemmScope precision(w_.bf16_compute);
    if (cache.k.size() != w_.layers.size()) cache.reset(w_.layers.size());
    for (size_t li = 0; li < w_.layers.size(); ++li) {
        const DecoderLayerW& l = w_.layers[li];
        Tensor u = x;
        ops::rms_norm(u.ptr(), n, D, l.in_norm.ptr(), hp_.rms_eps);
        Tensor q, k, v;
        ops::linear_multi(u, {&l.q.w, &l.k.w, &l.v.w}, {&q, &k, &v});
        ops::rms_norm(q.ptr(), n * Hq, hd, l.q_norm.ptr(), hp_.rms_eps);
        ops::rms_norm(k.ptr(), n * Hkv, hd, l.k_norm.ptr(), hp_.rms_eps);
        ops::rope(q.ptr(), n, Hq, hd, past, inv_freq_.data());
        ops::rope(k.ptr(), n, Hkv, hd, past, inv_freq_.data());
        auto& kc = cache.k[li];
        auto& vc = cache.v[li];
        kc.insert(kc.end(), k.data.begin(), k.data.end());
        vc.insert(vc.end(), v.data.begin(), v.data.end());
        if (int64_t(kc.size()) != (past + n) * kv_row) fail("decoder", "KV cache out of step");
        Tensor o({n, Hq * hd});
        ops::causal_attention(q.ptr(), kc.data(), vc.data(), o.ptr(), n, past, Hq, Hkv, hd);
        Tensor a = ops::linear(o, l.o.w);
        ops::add(x.ptr(), a.ptr(), x.size());
        Tensor m = x;
        ops::rms_norm(m.ptr(), n, D, l.post_norm.ptr(), hp_.rms_eps);
        Tensor g, up;
        ops::linear_multi(m, {&l.gate.w, &l.up.w}, {&g, &up});
        ops::silu_mul(g.ptr(), up.ptr(), g.size());
        Tensor dn = ops::linear(g, l.down.w);
        ops::add(x.ptr(), dn.ptr(), x.size());
        if (tap) (*tap)("dec_layer." + std::to_string(li), x);
    }
    cache.len = past + n;
    ops::rms_norm(x.ptr(), n, D, w_.norm.ptr(), hp_.rms_eps);
    return x;
}

Tensor Decoder::logits(const Tensor& h) const {
    const WeightMatrix& head = w_.lm_head.empty() ? w_.embed : w_.lm_head;
    return ops::linear(h, head);
}

} // namespace qasr
