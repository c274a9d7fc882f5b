// Upload of a loaded Model's weights to a CUDA device (see device_weights.hpp).
#include "backend/cuda/device_weights.hpp"

#include "backend/cuda/staged_upload.hpp"

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"
#include "model/encoder.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace qasr::cuda {
namespace {

class Uploader {
public:
    explicit Uploader(DeviceWeights& w) : w_(w) {}

    // Device storage of n bytes, owned by the weights.
    char* alloc(size_t n) {
        Buffer b(n);
        char* p = b.as<char>();
        w_.bytes += n;
        w_.storage.push_back(std::move(b));
        return p;
    }
    const void* bytes(const void* src, size_t n) {
        char* p = alloc(n);
        st_.copy(p, src, n);
        return p;
    }
    // Every copy has reached the device (before kernels read the weights).
    void finish() { st_.finish(); }
    const StagedUpload& stager() const { return st_; }
    const float* f32(const Tensor& t) { return static_cast<const float*>(bytes(t.ptr(), t.size() * 4)); }
    const float* f32(const std::vector<float>& v) { return static_cast<const float*>(bytes(v.data(), v.size() * 4)); }
    const bf16* bf16_of(const std::vector<float>& v) {
        std::vector<uint16_t> h(v.size());
        for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_bf16(v[i]);
        return static_cast<const bf16*>(bytes(h.data(), h.size() * 2));
    }

    // Several matrices with the same column count, stacked row-wise. Quantized ones keep their codes when all
    // share bits and group size and keep_q; everything else becomes bf16.
    DMat stack(const std::vector<const WeightMatrix*>& ms, bool keep_q) {
        const int64_t K = ms[0]->cols;
        int64_t R = 0;
        bool all_q = keep_q;
        for (const WeightMatrix* m : ms) {
            if (m->cols != K) fail("cuda", "stacked matrices differ in width");
            R += m->rows;
            all_q = all_q && m->fmt == WFormat::Q && m->bits == ms[0]->bits && m->group_size == ms[0]->group_size &&
                    (m->bits == 4 || m->bits == 6 || m->bits == 8);
        }
        DMat d;
        d.rows = R;
        d.cols = K;
        if (all_q) { // codes, scales and biases of the parts, each stacked in place
            const int bits = ms[0]->bits, gs = ms[0]->group_size;
            const size_t row_b = size_t(K) * size_t(bits) / 8, ng = size_t(K / gs);
            char* codes = alloc(size_t(R) * row_b);
            char* sc = alloc(size_t(R) * ng * 2);
            char* bi = alloc(size_t(R) * ng * 2);
            for (const WeightMatrix* m : ms) {
                st_.copy(codes, m->data, size_t(m->rows) * row_b);
                st_.copy(sc, m->scales, size_t(m->rows) * ng * 2);
                st_.copy(bi, m->biases, size_t(m->rows) * ng * 2);
                codes += size_t(m->rows) * row_b;
                sc += size_t(m->rows) * ng * 2;
                bi += size_t(m->rows) * ng * 2;
            }
            d.bits = bits;
            d.gs = gs;
            d.data = codes - size_t(R) * row_b;
            d.scales = reinterpret_cast<const bf16*>(sc - size_t(R) * ng * 2);
            d.biases = reinterpret_cast<const bf16*>(bi - size_t(R) * ng * 2);
            return d;
        }
        d.bits = 16;
        char* out = alloc(size_t(R * K) * 2);
        d.data = out;
        for (const WeightMatrix* m : ms) { // bf16 parts go as they are, others through a bf16 copy
            const size_t n = size_t(m->rows * m->cols);
            if (m->fmt == WFormat::BF16) {
                st_.copy(out, m->data, n * 2);
            } else {
                const std::vector<float> f = m->to_f32();
                std::vector<uint16_t> h(n);
                for (size_t i = 0; i < n; ++i) h[i] = f32_to_bf16(f[i]);
                st_.copy(out, h.data(), n * 2);
            }
            out += n * 2;
        }
        return d;
    }
    DMat mat(const WeightMatrix& m, bool keep_q) { return stack({&m}, keep_q); }
    // Concatenated biases (empty ones as zeros).
    const float* biases(const std::vector<const Linear*>& ls) {
        std::vector<float> b;
        for (const Linear* l : ls) {
            if (l->b.size()) b.insert(b.end(), l->b.data.begin(), l->b.data.end());
            else b.insert(b.end(), size_t(l->out()), 0.0f);
        }
        return f32(b);
    }
    // OIHW conv weight [Cout, Cin, 3, 3] → bf16 [Cout, kpad] (zero columns beyond Cin·9).
    const bf16* conv(const Tensor& w, int kpad) {
        const int64_t Co = w.dim(0), K = w.dim(1) * 9;
        std::vector<float> v(size_t(Co * kpad), 0.0f);
        for (int64_t o = 0; o < Co; ++o)
            for (int64_t k = 0; k < K; ++k) v[size_t(o * kpad + k)] = w.data[size_t(o * K + k)];
        return bf16_of(v);
    }

private:
    DeviceWeights& w_;
    StagedUpload st_; // destroyed (waiting for copies in flight) before an unfinished upload's storage is freed
};

} // namespace

std::unique_ptr<DeviceWeights> DeviceWeights::upload(const Model& m, int ordinal) {
    Stopwatch sw;
    auto w = std::make_unique<DeviceWeights>();
    w->ordinal = ordinal;
    QASR_CUDA(cudaSetDevice(ordinal));
    Uploader up(*w);
    const ModelWeights& mw = m.weights;
    const EncoderW& e = mw.enc;
    const AudioHParams& ha = m.hp.audio;
    const TextHParams& ht = m.hp.text;
    for (int hd : {ht.head_dim, ha.head_dim()})
        if (hd % 4 != 0 || hd > 256) fail("cuda", "the CUDA backend needs head dimensions that are multiples of 4, at most 256");
    if (ha.d_model % 4 != 0) fail("cuda", "the CUDA backend needs an encoder width that is a multiple of 4");
    if (ht.hidden % 16 || ht.intermediate % 16 || (ht.n_heads * ht.head_dim) % 16)
        fail("cuda", "the CUDA backend needs decoder widths that are multiples of 16");

    w->conv1_w = up.conv(e.conv1_w, 16);
    w->conv2_w = up.conv(e.conv2_w, int(e.conv2_w.dim(1) * 9));
    w->conv3_w = up.conv(e.conv3_w, int(e.conv3_w.dim(1) * 9));
    w->conv1_b = up.f32(e.conv1_b);
    w->conv2_b = up.f32(e.conv2_b);
    w->conv3_b = up.f32(e.conv3_b);
    w->conv_out = up.mat(e.conv_out.w, false);
    for (const EncoderLayerW& l : e.layers) {
        DevEncLayer d{};
        d.qkv = up.stack({&l.q.w, &l.k.w, &l.v.w}, false);
        d.qkv_b = up.biases({&l.q, &l.k, &l.v});
        d.o = up.mat(l.o.w, false);
        d.o_b = up.biases({&l.o});
        d.fc1 = up.mat(l.fc1.w, false);
        d.fc1_b = up.biases({&l.fc1});
        d.fc2 = up.mat(l.fc2.w, false);
        d.fc2_b = up.biases({&l.fc2});
        d.ln1_w = up.f32(l.attn_norm.w);
        d.ln1_b = up.f32(l.attn_norm.b);
        d.ln2_w = up.f32(l.ffn_norm.w);
        d.ln2_b = up.f32(l.ffn_norm.b);
        w->enc.push_back(d);
    }
    w->ln_post_w = up.f32(e.ln_post.w);
    w->ln_post_b = up.f32(e.ln_post.b);
    w->proj1 = up.mat(e.proj1.w, false);
    w->proj1_b = up.biases({&e.proj1});
    w->proj2 = up.mat(e.proj2.w, false);
    w->proj2_b = up.biases({&e.proj2});
    const int W3 = int(audio_token_count(ha.chunk_frames(), ha));
    w->pe = up.f32(sinusoid_table(W3, ha.d_model));
    {
        const std::vector<double> dft = mel_dft_basis();
        const std::vector<double> fb = m.mel.filterbank_f64();
        w->mel_window = static_cast<const double*>(up.bytes(m.mel.window().data(), 400 * 8));
        w->mel_dft = static_cast<const double*>(up.bytes(dft.data(), dft.size() * 8));
        w->mel_filters = static_cast<const double*>(up.bytes(fb.data(), fb.size() * 8));
    }

    const DecoderW& d = mw.dec;
    w->embed = up.mat(d.embed, true);
    w->head = d.lm_head.empty() ? w->embed : up.mat(d.lm_head, true);
    const char* hs = std::getenv("QASR_CUDA_HEAD_SCREEN");
    up.finish(); // the screen's kernels read the head
    double t_screen = sw.ms();
    if (!(hs && std::string(hs) == "0") && !m.hp.aligner.classes) w->head_screen = build_head_screen(w->head, w->storage, w->bytes);
    t_screen = sw.ms() - t_screen;
    for (const DecoderLayerW& l : d.layers) {
        DevDecLayer x{};
        x.qkv = up.stack({&l.q.w, &l.k.w, &l.v.w}, true);
        x.o = up.mat(l.o.w, true);
        x.gateup = up.stack({&l.gate.w, &l.up.w}, true);
        x.down = up.mat(l.down.w, true);
        x.in_norm = up.f32(l.in_norm);
        x.post_norm = up.f32(l.post_norm);
        x.q_norm = up.f32(l.q_norm);
        x.k_norm = up.f32(l.k_norm);
        w->dec.push_back(x);
    }
    w->norm = up.f32(d.norm);
    std::vector<float> inv(size_t(ht.head_dim / 2));
    for (size_t i = 0; i < inv.size(); ++i)
        inv[i] = float(1.0 / std::pow(ht.rope_theta, double(2 * i) / double(ht.head_dim)));
    w->inv_freq = up.f32(inv);
    up.finish();
    char msg[200];
    std::snprintf(msg, sizeof msg,
                  "cuda: %.0f MiB of weights on cuda:%d in %.0f ms (staging copies %.0f ms, waits %.0f ms; LM head screen "
                  "%.0f ms), %zu buffers",
                  double(w->bytes) / (1 << 20), ordinal, sw.ms(), up.stager().fill_ms(), up.stager().wait_ms(), t_screen,
                  w->storage.size());
    log(LogLevel::Info, msg);
    return w;
}

} // namespace qasr::cuda
