// Matrix-matrix products of a checkpoint's decoder at small row counts (the streaming draft rows, prefill):
//   gemm_bench MODEL_DIR [THREADS] [M...]
// For each M: all decoder matrices once (ops::linear, as a decoder pass runs them), the LM head (in the decoder's
// precision scope, and as Decoder::logits runs it: float32 path), and a whole
// Decoder::forward of M positions after a 150-position cache. Best of 5 after one warm-up (ms).
// GEMM_BENCH_CHECKSUM=1: also a hash of the outputs (forward: and the cache rows written), to compare builds bit for bit.
#include "model/decoder.hpp"
#include "model/encoder.hpp"
#include "model/model.hpp"
#include "ops/ops.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

using namespace qasr;

namespace {
double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
uint64_t fnv_bytes(const void* p, size_t n, uint64_t h = 1469598103934665603ull) {
    for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
    return h;
}
uint64_t fnv(const Tensor& t) { return fnv_bytes(t.ptr(), t.size() * 4); }
template <typename F> double best_of(int n, F f) {
    f();
    double best = 1e30;
    for (int i = 0; i < n; ++i) {
        const double t0 = now_ms();
        f();
        best = std::min(best, now_ms() - t0);
    }
    return best;
}
} // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: gemm_bench MODEL_DIR [THREADS] [M...]\n");
        return 2;
    }
    const int threads = argc > 2 ? std::atoi(argv[2]) : 2;
    std::vector<int64_t> Ms;
    for (int i = 3; i < argc; ++i) Ms.push_back(std::atoll(argv[i]));
    if (Ms.empty()) Ms = {1, 2, 4, 8, 16, 32, 128};
    ops::set_num_threads(threads);
    auto model = Model::load(argv[1]);
    const DecoderW& dw = model->weights.dec;
    const TextHParams& hp = model->hp.text;
    const WeightMatrix& head = dw.lm_head.empty() ? dw.embed : dw.lm_head;
    Decoder dec(dw, hp);
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::printf("%6s %12s %10s %12s %12s\n", "M", "matrices_ms", "head_ms", "head_f32_ms", "forward_ms");
    if (std::getenv("GEMM_BENCH_STEM")) { // encode_stem_chunk of one 100-frame chunk (M: frames of the chunk)
        const AudioHParams& ahp = model->hp.audio;
        for (int64_t M : Ms) {
            const int64_t cf = ahp.chunk_frames();
            std::vector<float> mel(size_t(ahp.n_mels * cf));
            for (auto& v : mel) v = 0.5f * nd(rng);
            const double ms = best_of(5, [&] { encode_stem_chunk(model->weights.enc, ahp, mel.data(), cf, std::min(M, cf)); });
            std::printf("stem chunk %lld frames: %.1f ms", (long long)M, ms);
            if (std::getenv("GEMM_BENCH_CHECKSUM"))
                std::printf("  checksum %016llx", (unsigned long long)fnv(encode_stem_chunk(model->weights.enc, ahp, mel.data(), cf, std::min(M, cf))));
            std::printf("\n");
        }
        return 0;
    }
    if (std::getenv("GEMM_BENCH_ENCODER")) { // encode_rows over M packed stem rows (one attention window)
        const AudioHParams& ahp = model->hp.audio;
        for (int64_t M : Ms) {
            Tensor x({M, int64_t(ahp.d_model)});
            for (auto& v : x.data) v = 0.1f * nd(rng);
            const double ms = best_of(5, [&] { encode_rows(model->weights.enc, ahp, x, M); });
            std::printf("encoder rows %lld: %.1f ms", (long long)M, ms);
            if (std::getenv("GEMM_BENCH_CHECKSUM")) std::printf("  checksum %016llx", (unsigned long long)fnv(encode_rows(model->weights.enc, ahp, x, M)));
            std::printf("\n");
        }
        return 0;
    }
    for (int64_t M : Ms) {
        const int64_t D = hp.hidden, I = dw.layers[0].gate.w.rows, Q = dw.layers[0].q.w.rows;
        std::vector<float> x(size_t(M * std::max({D, I, Q}))), y(size_t(M * std::max({D, I, Q})));
        for (auto& v : x) v = nd(rng);
        ops::Bf16GemmScope scope(dw.bf16_compute);
        const bool only_fw = std::getenv("GEMM_BENCH_FORWARD_ONLY") != nullptr; // for profiling the pass
        const double mats = only_fw ? 0 : best_of(5, [&] {
            for (const auto& L : dw.layers)
                for (const Linear* l : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down})
                    ops::linear(x.data(), M, l->w, nullptr, y.data());
        });
        std::vector<float> logits(size_t(M * head.rows));
        const double hd = only_fw ? 0 : best_of(5, [&] { ops::linear(x.data(), M, head, nullptr, logits.data()); });
        double hd32 = 0; // as Decoder::logits runs it: outside the decoder's bf16 scope (float32 path)
        if (!only_fw) {
            ops::Bf16GemmScope f32(false);
            hd32 = best_of(5, [&] { ops::linear(x.data(), M, head, nullptr, logits.data()); });
        }
        Tensor prompt({150, D});
        for (auto& v : prompt.data) v = 0.1f * nd(rng);
        KvCache base;
        base.reset(dw.layers.size());
        dec.forward(prompt, base);
        Tensor in({M, D});
        for (auto& v : in.data) v = 0.1f * nd(rng);
        const int64_t kv_row = int64_t(hp.n_kv_heads) * hp.head_dim;
        const double fw = std::getenv("GEMM_BENCH_NO_FORWARD") ? 0 : best_of(5, [&] {
            dec.forward(in, base);
            base.truncate(150, kv_row);
        });
        std::printf("%6lld %12.1f %10.1f %12.1f %12.1f", (long long)M, mats, hd, hd32, fw);
        if (std::getenv("GEMM_BENCH_CHECKSUM")) { // the pass's output and the cache rows it wrote, bit for bit
            const Tensor out = dec.forward(in, base);
            uint64_t h = fnv(out);
            const size_t es = base.bf16 ? 2 : 4;
            for (size_t l = 0; l < base.k.size(); ++l)
                for (int64_t c = 0; c < base.heads; ++c)
                    for (const void* kv : {base.k[l], base.v[l]})
                        h = fnv_bytes(static_cast<const char*>(kv) + size_t((c * base.cap + 150) * base.head_dim) * es,
                                      size_t(M * base.head_dim) * es, h);
            base.truncate(150, kv_row);
            std::printf("  checksum %016llx", (unsigned long long)h);
        }
        std::printf("\n");
    }
}
