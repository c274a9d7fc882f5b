// Encoder forward. Shapes for the shipped config: chunk [1,128,100] → conv1 [480,64,50] → conv2 [480,32,25]
// → conv3 [480,16,13] → [13, 7680] → conv_out [13, d]; packed valid rows [A, d]; windows of 104 rows.
#include "model/encoder.hpp"

#include "core/error.hpp"
#include "ops/ops.hpp"
#include "ops/vector_ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <vector>

namespace qasr {
namespace {

int64_t conv_out_len(int64_t n) { return (n + 1) / 2; }
int64_t valid_after_stem(int64_t l) { return conv_out_len(conv_out_len(conv_out_len(l))); }

void gelu(Tensor& t) { ops::gelu_erf(t.ptr(), t.size()); }

// Per-thread activation buffers reused by every layer and call (the products and attention write their outputs
// whole; no zero fill or page faults per call). At most 32 MB are kept between calls.
// 64-byte aligned storage: the AMX products store 64-byte output rows, which straddle two cache lines at malloc's
// 16-byte alignment.
template <typename T> struct Align64 {
    using value_type = T;
    Align64() = default;
    template <typename U> Align64(const Align64<U>&) {}
    T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(64))); }
    void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t(64)); }
    template <typename U> bool operator==(const Align64<U>&) const { return true; }
};
using AVec = std::vector<float, Align64<float>>;

struct LayerBufs {
    AVec a, q, k, v, o, y, u;
    void fit(int64_t n, int64_t d, int64_t ffn) {
        for (auto* b : {&a, &q, &k, &v, &o, &y}) b->resize(size_t(n * d));
        u.resize(size_t(n * ffn));
    }
    void trim() {
        if (a.size() * 6 + u.size() > (size_t(8) << 20))
            for (auto* b : {&a, &q, &k, &v, &o, &y, &u}) AVec().swap(*b);
    }
};

const float* bias_of(const Linear& l) { return l.b.data.empty() ? nullptr : l.b.ptr(); }

// One layer; `a` holds layer_norm(h) (attn_norm) on entry. The biases, residual adds, norms and GELU run as
// row-parallel ops between the products (same float32 values as ops::linear with its bias, ops::add,
// ops::layer_norm and ops::gelu_erf op by op). With `next`, a leaves holding the next layer's attn_norm of h.
void encoder_layer(const EncoderLayerW& w, const EncoderLayerW* next, float* h, int64_t n, int64_t d, int64_t heads,
                   int64_t window, LayerBufs& B) {
    const int64_t ffn = w.fc1.w.rows;
    const WeightMatrix* qkv[3] = {&w.q.w, &w.k.w, &w.v.w}; // one packed x and one tile list on the bf16 engines
    float* qkv_out[3] = {B.q.data(), B.k.data(), B.v.data()};
    ops::linear_multi_rows(B.a.data(), n, qkv, qkv_out, 3);
    ops::bias_rows(B.q.data(), bias_of(w.q), n, d, false);
    ops::bias_rows(B.k.data(), bias_of(w.k), n, d, false);
    ops::bias_rows(B.v.data(), bias_of(w.v), n, d, false);
    ops::windowed_attention(B.q.data(), B.k.data(), B.v.data(), B.o.data(), n, heads, d / heads, window);
    ops::linear(B.o.data(), n, w.o.w, nullptr, B.y.data());
    ops::residual_layer_norm_rows(h, B.y.data(), bias_of(w.o), B.a.data(), n, d, w.ffn_norm.w.ptr(), w.ffn_norm.b.ptr(),
                                  1e-5f);
    ops::linear(B.a.data(), n, w.fc1.w, nullptr, B.u.data());
    ops::bias_rows(B.u.data(), bias_of(w.fc1), n, ffn, true);
    ops::linear(B.u.data(), n, w.fc2.w, nullptr, B.y.data());
    ops::residual_layer_norm_rows(h, B.y.data(), bias_of(w.fc2), next ? B.a.data() : nullptr, n, d,
                                  next ? next->attn_norm.w.ptr() : nullptr, next ? next->attn_norm.b.ptr() : nullptr,
                                  1e-5f);
}

} // namespace

int64_t audio_token_count(int64_t T, const AudioHParams& hp) {
    const int64_t cf = hp.chunk_frames();
    return (T / cf) * valid_after_stem(cf) + ((T % cf) ? valid_after_stem(T % cf) : 0);
}

int64_t encoder_window_rows(int64_t T, const AudioHParams& hp) {
    const int64_t cf = hp.chunk_frames();
    return valid_after_stem(std::min(cf, T)) * (hp.n_window_infer / cf); // the first chunk has the most rows
}

Tensor sinusoid_table(int64_t n_pos, int64_t d) {
    const int64_t half = d / 2;
    Tensor t({n_pos, d});
    const float inc = float(std::log(10000.0) / double(half - 1));
    for (int64_t i = 0; i < half; ++i) {
        const float inv = std::exp(-inc * float(i));
        for (int64_t p = 0; p < n_pos; ++p) {
            const float s = float(p) * inv;
            t.data[size_t(p * d + i)] = std::sin(s);
            t.data[size_t(p * d + half + i)] = std::cos(s);
        }
    }
    return t;
}

Tensor encode_stem_chunk(const EncoderW& w, const AudioHParams& hp, const float* mel, int64_t stride, int64_t l,
                         StemTrace* trace) {
    ops::Bf16GemmScope precision(w.bf16_compute);
    const int64_t n_mels = hp.n_mels, cf = hp.chunk_frames(), Ch = hp.conv_channels, d = hp.d_model;
    if (l <= 0 || l > cf || stride < l) fail("encoder", "a stem chunk needs 1 to " + std::to_string(cf) + " frames");
    const int64_t H1 = conv_out_len(n_mels), W1 = conv_out_len(cf);
    const int64_t H2 = conv_out_len(H1), W2 = conv_out_len(W1);
    const int64_t H3 = conv_out_len(H2), W3 = conv_out_len(W2);
    const int64_t valid = valid_after_stem(l);
    // `in` starts zeroed: a shorter chunk is the zero-padded tail chunk (spec §4.1). The conv outputs (written whole
    // by the convolutions and the flatten) are per-thread buffers kept between calls: fresh ones cost ~8 MB of zero
    // fill and page faults per chunk.
    Tensor in({1, n_mels, cf});
    thread_local Tensor c1, c2, c3, flat;
    const auto shaped = [](Tensor& t, std::vector<int64_t> shape) -> Tensor& {
        t.data.resize(Tensor::count(shape));
        t.shape = std::move(shape);
        return t;
    };
    shaped(c1, {Ch, H1, W1});
    shaped(c2, {Ch, H2, W2});
    shaped(c3, {Ch, H3, W3});
    shaped(flat, {W3, Ch * H3});
    for (int64_t f = 0; f < n_mels; ++f) std::memcpy(in.ptr() + f * cf, mel + f * stride, size_t(l) * sizeof(float));
    ops::conv3x3_s2(in.ptr(), 1, n_mels, cf, w.conv1_w.ptr(), w.conv1_b.ptr(), Ch, c1.ptr());
    if (trace) trace->conv1 = c1;
    gelu(c1);
    ops::conv3x3_s2(c1.ptr(), Ch, H1, W1, w.conv2_w.ptr(), w.conv2_b.ptr(), Ch, c2.ptr());
    if (trace) trace->conv2 = c2;
    gelu(c2);
    ops::conv3x3_s2(c2.ptr(), Ch, H2, W2, w.conv3_w.ptr(), w.conv3_b.ptr(), Ch, c3.ptr());
    if (trace) trace->conv3 = c3;
    gelu(c3);
    for (int64_t t = 0; t < W3; ++t) // (time, channel, freq) flatten order (spec §4.3)
        for (int64_t ch = 0; ch < Ch; ++ch)
            for (int64_t f = 0; f < H3; ++f) flat.data[size_t(t * Ch * H3 + ch * H3 + f)] = c3.data[size_t((ch * H3 + f) * W3 + t)];
    Tensor co = ops::linear(flat, w.conv_out.w);
    if (trace) trace->conv_out = co;
    // positions restart in every chunk (spec §4.4): the same table for every chunk, computed once per thread
    thread_local Tensor pe;
    if (pe.shape != std::vector<int64_t>{W3, d}) pe = sinusoid_table(W3, d);
    Tensor x({valid, d});
    for (int64_t t = 0; t < valid; ++t)
        for (int64_t i = 0; i < d; ++i)
            x.data[size_t(t * d + i)] = co.data[size_t(t * d + i)] + pe.data[size_t(t * d + i)];
    return x;
}

Tensor encode_rows(const EncoderW& w, const AudioHParams& hp, Tensor x, int64_t window, const TapFn* tap,
                   const PassHook* stop) {
    ops::Bf16GemmScope precision(w.bf16_compute);
    const int64_t A = x.rows(), d = hp.d_model;
    if (x.cols() != d) fail("encoder", "stem rows have " + std::to_string(x.cols()) + " columns, model wants " +
                                           std::to_string(d));
    if (tap) (*tap)("enc_in", x);
    thread_local LayerBufs B;
    // rows of whole windows per block (a long piece's 15600 rows at once took ~0.5 GB of activations)
    const int64_t block = A > kEncoderRowBlock && !tap && window > 0 ? std::max<int64_t>(1, kEncoderRowBlock / window) * window : A;
    for (int64_t r0 = 0; r0 < A && !w.layers.empty(); r0 += block) {
        const int64_t n = std::min(block, A - r0);
        float* h = x.ptr() + r0 * d;
        B.fit(n, d, w.layers[0].fc1.w.rows);
        const EncoderLayerW& l0 = w.layers[0];
        ops::residual_layer_norm_rows(h, nullptr, nullptr, B.a.data(), n, d, l0.attn_norm.w.ptr(), l0.attn_norm.b.ptr(),
                                      1e-5f);
        for (size_t i = 0; i < w.layers.size(); ++i) {
            const EncoderLayerW* next = i + 1 < w.layers.size() ? &w.layers[i + 1] : nullptr;
            encoder_layer(w.layers[i], next, h, n, d, hp.n_heads, window, B);
            if (tap) (*tap)("enc_layer." + std::to_string(i), x);
            if ((next || r0 + n < A) && ask(stop, (double(r0) + double(n) * double(i + 1) / double(w.layers.size())) / double(A))) {
                B.trim();
                return Tensor();
            }
        }
    }
    B.trim();
    ops::layer_norm(x.ptr(), A, d, w.ln_post.w.ptr(), w.ln_post.b.ptr(), 1e-5f);
    if (tap) (*tap)("enc_out", x);
    Tensor p({A, w.proj1.w.rows});
    ops::linear(x.ptr(), A, w.proj1.w, nullptr, p.ptr());
    ops::bias_rows(p.ptr(), w.proj1.b.data.empty() ? nullptr : w.proj1.b.ptr(), A, w.proj1.w.rows, true);
    Tensor out = ops::linear(p, w.proj2.w, &w.proj2.b);
    if (tap) (*tap)("proj_out", out);
    return out;
}

// The stem's share of the encoder pass as its stop hook is told (a progress estimate: ~1/5 of the CPU time)
constexpr double kStemShare = 0.2;

Tensor encode_audio(const EncoderW& w, const AudioHParams& hp, const Tensor& mel, const TapFn* tap,
                    const PassHook* stop) {
    const int64_t n_mels = hp.n_mels, T = mel.dim(1), cf = hp.chunk_frames(), C = (T + cf - 1) / cf;
    if (mel.dim(0) != n_mels) fail("encoder", "mel has " + std::to_string(mel.dim(0)) + " bins, model wants " +
                                                  std::to_string(n_mels));
    if (T <= 0) fail("encoder", "no mel frames");
    const int64_t d = hp.d_model;
    Tensor x({audio_token_count(T, hp), d});
    std::vector<StemTrace> traces(tap ? size_t(C) : 0);
    int64_t row = 0;
    for (int64_t c = 0; c < C; ++c) {
        if (c && ask(stop, kStemShare * double(c) / double(C))) return Tensor(); // cancelled between the stem's chunks
        const Tensor rows = encode_stem_chunk(w, hp, mel.ptr() + c * cf, T, std::min(cf, T - c * cf),
                                              tap ? &traces[size_t(c)] : nullptr);
        std::memcpy(x.ptr() + row * d, rows.ptr(), rows.size() * sizeof(float));
        row += rows.rows();
    }
    if (tap) // per-chunk intermediates stacked [C, ...]
        for (const auto& [name, part] : {std::pair{"conv1", &StemTrace::conv1}, std::pair{"conv2", &StemTrace::conv2},
                                         std::pair{"conv3", &StemTrace::conv3},
                                         std::pair{"conv_out", &StemTrace::conv_out}}) {
            std::vector<int64_t> shape = {C};
            for (int64_t k : (traces[0].*part).shape) shape.push_back(k);
            Tensor all(shape);
            for (int64_t c = 0; c < C; ++c) {
                const Tensor& t = traces[size_t(c)].*part;
                std::copy(t.data.begin(), t.data.end(), all.data.begin() + c * int64_t(t.size()));
            }
            (*tap)(name, all);
        }
    const PassHook layers = sub_hook(stop, kStemShare, 1.0 - kStemShare);
    return encode_rows(w, hp, std::move(x), encoder_window_rows(T, hp), tap, &layers);
}

} // namespace qasr
