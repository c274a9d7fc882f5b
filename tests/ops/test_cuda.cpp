// CUDA backend against the CPU ops (fp32) on random inputs of awkward sizes, and end to end against the CPU
// path on a random tiny checkpoint. Every test skips with a message where no CUDA device is present.
#include "backend/cuda/check.hpp"
#include "backend/cuda/kernels.cuh"
#include "backend/device.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "model/quant.hpp"
#include "model/random_checkpoint.hpp"
#include "audio/mel.hpp"
#include "ops/ops.hpp"
#include "pipeline/session.hpp"
#include "pipeline/stream.hpp"
#include "audio/audio.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <cstdio>
#include <random>
#include <thread>
#include <unistd.h>

using namespace qasr;
using namespace qasr::cuda;

namespace {

// The test binary is carried to the GPU machine, where the tree may sit elsewhere: QASR_TOKENIZER_DIR overrides the
// build-time tokenizer path.
std::string tokenizer_dir() {
    const char* env = std::getenv("QASR_TOKENIZER_DIR");
    return env && *env ? env : QASR_TOKENIZER_DIR;
}

// A random checkpoint of `preset` in a per-process temporary folder (written once).
std::string random_checkpoint_dir(const std::string& preset, uint64_t seed, const std::string& tok_dir) {
    const std::string dir =
        (std::filesystem::temp_directory_path() / ("qasr_cuda_" + preset + "_" + std::to_string(::getpid()))).string();
    if (!std::filesystem::exists(dir + "/model.safetensors")) write_random_checkpoint(dir, preset, "hf", seed, tok_dir);
    return dir;
}

#define NEED_GPU()                                                                                                 \
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: the CUDA tests run on a GPU machine only"

std::vector<float> randv(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 g(seed);
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = u(g);
    return v;
}
uint16_t bf16_bits(float f) { return f32_to_bf16(f); }
float bf16_round(float f) { return bf16_to_f32(f32_to_bf16(f)); }

struct Dev {
    Buffer b;
    template <class T> explicit Dev(const std::vector<T>& v) : b(v.size() * sizeof(T)) {
        QASR_CUDA(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    }
    explicit Dev(size_t bytes) : b(bytes) { QASR_CUDA(cudaMemset(b.get(), 0, bytes)); }
    template <class T> T* p() const { return b.as<T>(); }
};
std::vector<float> host(const Dev& d, size_t n) {
    QASR_CUDA(cudaDeviceSynchronize());
    std::vector<float> v(n);
    QASR_CUDA(cudaMemcpy(v.data(), d.b.get(), n * 4, cudaMemcpyDeviceToHost));
    return v;
}
double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
        den += double(b[i]) * b[i];
    }
    return std::sqrt(num / std::max(den, 1e-30));
}

// A bf16 matrix: bits on the device, the same values as float32 for the CPU reference.
struct Bf16Mat {
    std::vector<float> f;
    std::vector<uint16_t> bits;
    Bf16Mat(int64_t n, int64_t k, uint32_t seed) : f(randv(size_t(n * k), seed, 0.1f)) {
        for (auto& x : f) x = bf16_round(x);
        for (float x : f) bits.push_back(bf16_bits(x));
    }
};

// An MLX affine-quantized matrix of w [rows, cols] on the device (codes, bf16 scales and biases) with its dequantized
// values for the CPU reference.
struct QuantDevMat {
    std::vector<float> f; // dequantized, as the device reads them
    Dev codes, scales, biases;
    DMat m;
    static std::vector<uint16_t> bits_of(const std::vector<float>& v) {
        std::vector<uint16_t> b;
        for (float x : v) b.push_back(bf16_bits(x));
        return b;
    }
    QuantDevMat(const AffineQuantized& q, std::vector<uint16_t> sc, std::vector<uint16_t> bi, int rows, int cols, int bits,
                int gs)
        : codes(q.packed), scales(sc), biases(bi) {
        WeightMatrix cw;
        cw.fmt = WFormat::Q, cw.rows = rows, cw.cols = cols, cw.bits = bits, cw.group_size = gs;
        cw.data = q.packed.data(), cw.scales = sc.data(), cw.biases = bi.data();
        f = cw.to_f32();
        m.bits = bits, m.rows = rows, m.cols = cols, m.gs = gs, m.data = codes.p<void>();
        m.scales = scales.p<bf16>(), m.biases = biases.p<bf16>();
    }
    QuantDevMat(const AffineQuantized& q, int rows, int cols, int bits, int gs)
        : QuantDevMat(q, bits_of(q.scales), bits_of(q.biases), rows, cols, bits, gs) {}
    QuantDevMat(const std::vector<float>& w, int rows, int cols, int bits, int gs)
        : QuantDevMat(quantize_affine(w.data(), rows, cols, bits, gs), rows, cols, bits, gs) {}
};

} // namespace

TEST(Cuda, MatvecBf16AllEpiloguesMatchCpu) {
    NEED_GPU();
    for (const auto& [N, K] : {std::pair<int, int>{300, 1040}, {17, 64}, {20000, 128}}) {
        const Bf16Mat W(2 * N, K, 1);
        const std::vector<float> x = randv(size_t(K), 2), nw = randv(size_t(K), 3), y0 = randv(size_t(2 * N), 4);
        Dev dw(W.bits), dx(x), dn(nw);
        DMat m;
        m.rows = 2 * N, m.cols = K, m.data = dw.p<void>();
        // CPU reference: y = W · rmsnorm(x)
        std::vector<float> xn = x;
        ops::rms_norm(xn.data(), 1, K, nw.data(), 1e-6f);
        std::vector<float> ref(size_t(2 * N));
        ops::linear(xn.data(), 1, K, W.f.data(), 2 * N, nullptr, ref.data());
        {
            Dev dy(y0);
            matvec(m, dx.p<float>(), dn.p<float>(), 1e-6f, dy.p<float>(), Epi::Store, nullptr);
            EXPECT_LT(rel_l2(host(dy, size_t(2 * N)), ref), 1e-5) << N << "x" << K << " store";
        }
        {
            Dev dy(y0);
            matvec(m, dx.p<float>(), dn.p<float>(), 1e-6f, dy.p<float>(), Epi::Add, nullptr);
            std::vector<float> want = ref;
            for (size_t i = 0; i < want.size(); ++i) want[i] += y0[i];
            EXPECT_LT(rel_l2(host(dy, size_t(2 * N)), want), 1e-5) << "add";
        }
        {
            Dev dy(size_t(N) * 4);
            matvec(m, dx.p<float>(), dn.p<float>(), 1e-6f, dy.p<float>(), Epi::SwiGLU, nullptr);
            std::vector<float> want(static_cast<size_t>(N));
            for (int i = 0; i < N; ++i) want[size_t(i)] = ref[size_t(i)] / (1 + std::exp(-ref[size_t(i)])) * ref[size_t(N + i)];
            EXPECT_LT(rel_l2(host(dy, size_t(N)), want), 1e-5) << "swiglu";
        }
    }
}

// The decode step's bf16 products with the weights bulk-copied into shared memory before the dependency wait
// (matvec_prefetch.cu): every epilogue, at the widths it takes (K = 1024, 2048, 3072), with partial last blocks.
TEST(Cuda, MatvecPrefetchedWeightsMatchCpu) {
    NEED_GPU();
    int dev = 0, major = 0;
    QASR_CUDA(cudaGetDevice(&dev));
    QASR_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    if (major < 9) GTEST_SKIP() << "the prefetching matrix-vector kernel needs sm_90 (bulk copies)";
    matvec_prefetch_prepare(dev);
    // the last two exceed shared memory per block (the 1.7B model's class of shapes): streamed through stage buffers
    for (const auto& [N, K] : {std::pair<int, int>{1536, 1024}, {300, 2048}, {512, 3072}, {1, 1024}, {2048, 4096}, {6144, 2048}}) {
        const Bf16Mat W(2 * N, K, 11);
        const std::vector<float> x = randv(size_t(K), 12), nw = randv(size_t(K), 13), y0 = randv(size_t(2 * N), 14);
        Dev dw(W.bits), dx(x), dn(nw);
        DMat m;
        m.rows = 2 * N, m.cols = K, m.data = dw.p<void>();
        for (const bool norm : {true, false}) {
            std::vector<float> xn = x;
            if (norm) ops::rms_norm(xn.data(), 1, K, nw.data(), 1e-6f);
            std::vector<float> ref(size_t(2 * N));
            ops::linear(xn.data(), 1, K, W.f.data(), 2 * N, nullptr, ref.data());
            const float* dnw = norm ? dn.p<float>() : nullptr;
            {
                Dev dy(y0);
                ASSERT_TRUE(matvec_prefetch(m, dx.p<float>(), dnw, 1e-6f, dy.p<float>(), Epi::Store, nullptr)) << N << "x" << K;
                EXPECT_LT(rel_l2(host(dy, size_t(2 * N)), ref), 1e-5) << N << "x" << K << " store, norm " << norm;
            }
            {
                Dev dy(y0);
                ASSERT_TRUE(matvec_prefetch(m, dx.p<float>(), dnw, 1e-6f, dy.p<float>(), Epi::Add, nullptr));
                std::vector<float> want = ref;
                for (size_t i = 0; i < want.size(); ++i) want[i] += y0[i];
                EXPECT_LT(rel_l2(host(dy, size_t(2 * N)), want), 1e-5) << N << "x" << K << " add, norm " << norm;
            }
            {
                Dev dy(size_t(N) * 4);
                ASSERT_TRUE(matvec_prefetch(m, dx.p<float>(), dnw, 1e-6f, dy.p<float>(), Epi::SwiGLU, nullptr));
                std::vector<float> want(static_cast<size_t>(N));
                for (int i = 0; i < N; ++i)
                    want[size_t(i)] = ref[size_t(i)] / (1 + std::exp(-ref[size_t(i)])) * ref[size_t(N + i)];
                EXPECT_LT(rel_l2(host(dy, size_t(N)), want), 1e-5) << N << "x" << K << " swiglu, norm " << norm;
            }
        }
    }
    { // the 1.7B model's down projection (K = 6144, added to the residual): streamed, one row per stage
        const int N = 2048, K = 6144;
        const Bf16Mat W(N, K, 25);
        const std::vector<float> x = randv(size_t(K), 26), y0 = randv(size_t(N), 27);
        std::vector<float> want(static_cast<size_t>(N));
        ops::linear(x.data(), 1, K, W.f.data(), N, nullptr, want.data());
        for (int i = 0; i < N; ++i) want[size_t(i)] += y0[size_t(i)];
        Dev dw(W.bits), dx(x), dy(y0);
        DMat m;
        m.rows = N, m.cols = K, m.data = dw.p<void>();
        ASSERT_TRUE(matvec_prefetch(m, dx.p<float>(), nullptr, 0.0f, dy.p<float>(), Epi::Add, nullptr));
        EXPECT_LT(rel_l2(host(dy, size_t(N)), want), 1e-5);
    }
    // Too large a slice for shared memory (the LM head's shape class): not taken, the caller uses k_matvec.
    DMat big;
    big.rows = 200000, big.cols = 1024, big.data = reinterpret_cast<void*>(uintptr_t(256));
    EXPECT_FALSE(matvec_prefetch(big, reinterpret_cast<float*>(uintptr_t(256)), nullptr, 0, nullptr, Epi::Store, nullptr));
}

TEST(Cuda, MatvecQuantizedMatchesCpuKernelsEveryWidth) {
    NEED_GPU();
    for (int bits : {4, 6, 8})
        for (const auto& [N, K] : {std::pair<int, int>{129, 1024}, {40000, 64}}) {
            const std::vector<float> w = randv(size_t(N) * K, 5, 0.2f), x = randv(size_t(K), 6);
            const QuantDevMat Q(w, N, K, bits, 64);
            // exact reference: the dequantized matrix in double (the CPU's VNNI kernels round x to int8)
            const std::vector<float>& wd = Q.f;
            std::vector<float> ref(static_cast<size_t>(N));
            for (int r = 0; r < N; ++r) {
                double acc = 0;
                for (int k = 0; k < K; ++k) acc += double(wd[size_t(r) * K + k]) * x[size_t(k)];
                ref[size_t(r)] = float(acc);
            }
            Dev dx(x), dy(size_t(N) * 4);
            matvec(Q.m, dx.p<float>(), nullptr, 0, dy.p<float>(), Epi::Store, nullptr);
            EXPECT_LT(rel_l2(host(dy, size_t(N)), ref), 1e-5) << bits << "-bit " << N << "x" << K;
            // the embedding gather and the bf16 dequantization decode the same codes
            const std::vector<int> ids{0, N - 1, N / 2};
            Dev di(ids), de(ids.size() * size_t(K) * 4);
            embed(Q.m, di.p<int>(), int(ids.size()), de.p<float>(), nullptr);
            const std::vector<float> got = host(de, ids.size() * size_t(K));
            for (size_t r = 0; r < ids.size(); ++r) {
                const float* row = Q.f.data() + size_t(ids[r]) * K;
                for (int k = 0; k < K; ++k) ASSERT_NEAR(got[r * size_t(K) + size_t(k)], row[k], 1e-6f);
            }
        }
}

// The prefetching kernel for MLX 4/6/8-bit weights (the decode step's products of quantized checkpoints) against
// the exact product with the dequantized matrix, every epilogue, with and without the RMSNorm, two group sizes.
TEST(Cuda, MatvecPrefetchedQuantizedMatchesCpu) {
    NEED_GPU();
    int dev = 0, major = 0;
    QASR_CUDA(cudaGetDevice(&dev));
    QASR_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    if (major < 9) GTEST_SKIP() << "the prefetching matrix-vector kernel needs sm_90 (bulk copies)";
    matvec_prefetch_prepare(dev);
    for (const int bits : {4, 6, 8})
        for (const int gs : {64, 32})
            for (const auto& [N, K] : {std::pair<int, int>{1536, 1024}, {1024, 3072}, {700, 2048}}) {
                SCOPED_TRACE(std::to_string(bits) + "-bit, group " + std::to_string(gs) + ", " + std::to_string(N) + "x" +
                             std::to_string(K));
                const int R = 2 * N; // SwiGLU: gate rows, then up rows
                const std::vector<float> w = randv(size_t(R) * K, uint32_t(bits * 7 + gs), 0.2f), x = randv(size_t(K), 41),
                                         nw = randv(size_t(K), 42), y0 = randv(size_t(R), 43);
                const QuantDevMat Q(w, R, K, bits, gs);
                const std::vector<float>& wd = Q.f;
                const DMat& m = Q.m;
                Dev dx(x), dn(nw);
                for (const bool norm : {true, false}) {
                    std::vector<float> xn = x;
                    if (norm) ops::rms_norm(xn.data(), 1, K, nw.data(), 1e-6f);
                    std::vector<float> ref(static_cast<size_t>(R));
                    for (int r = 0; r < R; ++r) {
                        double acc = 0;
                        for (int k = 0; k < K; ++k) acc += double(wd[size_t(r) * K + k]) * xn[size_t(k)];
                        ref[size_t(r)] = float(acc);
                    }
                    const float* dnw = norm ? dn.p<float>() : nullptr;
                    {
                        Dev dy(size_t(R) * 4);
                        ASSERT_TRUE(matvec_prefetch(m, dx.p<float>(), dnw, 1e-6f, dy.p<float>(), Epi::Store, nullptr));
                        EXPECT_LT(rel_l2(host(dy, size_t(R)), ref), 1e-5) << "store, norm " << norm;
                    }
                    {
                        Dev dy(y0);
                        ASSERT_TRUE(matvec_prefetch(m, dx.p<float>(), dnw, 1e-6f, dy.p<float>(), Epi::Add, nullptr));
                        std::vector<float> want = ref;
                        for (size_t i = 0; i < want.size(); ++i) want[i] += y0[i];
                        EXPECT_LT(rel_l2(host(dy, size_t(R)), want), 1e-5) << "add, norm " << norm;
                    }
                    {
                        Dev dy(size_t(N) * 4);
                        ASSERT_TRUE(matvec_prefetch(m, dx.p<float>(), dnw, 1e-6f, dy.p<float>(), Epi::SwiGLU, nullptr));
                        std::vector<float> want(static_cast<size_t>(N));
                        for (int i = 0; i < N; ++i)
                            want[size_t(i)] = ref[size_t(i)] / (1 + std::exp(-ref[size_t(i)])) * ref[size_t(N + i)];
                        EXPECT_LT(rel_l2(host(dy, size_t(N)), want), 1e-5) << "swiglu, norm " << norm;
                    }
                }
            }
}

TEST(Cuda, NormsAndActivationsMatchCpu) {
    NEED_GPU();
    const int rows = 7, d = 1000;
    const std::vector<float> x = randv(size_t(rows * d), 7, 3.0f), w = randv(size_t(d), 8), b = randv(size_t(d), 9);
    Dev dx(x), dw(w), db(b), of(size_t(rows * d) * 4), ob(size_t(rows * d) * 2);
    std::vector<float> ref = x;
    ops::rms_norm(ref.data(), rows, d, w.data(), 1e-6f);
    rms_norm(dx.p<float>(), rows, d, dw.p<float>(), 1e-6f, of.p<float>(), nullptr, nullptr);
    EXPECT_LT(rel_l2(host(of, size_t(rows * d)), ref), 1e-6);
    // layer norm → bf16, GELU with bias
    ref = x;
    ops::layer_norm(ref.data(), rows, d, w.data(), b.data(), 1e-5f);
    layer_norm(dx.p<float>(), rows, d, dw.p<float>(), db.p<float>(), 1e-5f, ob.p<bf16>(), nullptr);
    std::vector<uint16_t> hb(size_t(rows * d));
    QASR_CUDA(cudaMemcpy(hb.data(), ob.p<void>(), hb.size() * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < hb.size(); ++i) {
        const uint32_t u = uint32_t(hb[i]) << 16;
        float f;
        std::memcpy(&f, &u, 4);
        ASSERT_NEAR(f, ref[i], std::fabs(ref[i]) * 8e-3 + 1e-5) << i;
    }
    Dev dy(x);
    bias_act(dy.p<float>(), rows, d, db.p<float>(), true, nullptr, nullptr);
    ref = x;
    for (int r = 0; r < rows; ++r)
        for (int k = 0; k < d; ++k) ref[size_t(r * d + k)] += b[size_t(k)];
    ops::gelu_erf(ref.data(), ref.size());
    EXPECT_LT(rel_l2(host(dy, ref.size()), ref), 1e-6);
    // a bias added by the layer norm itself (the encoder's residual biases): bit for bit the bias kernel, then the norm
    Dev x1(x), x2(x), ob1(size_t(rows * d) * 2), ob2(size_t(rows * d) * 2);
    const std::vector<float> add = randv(size_t(d), 10);
    Dev dadd(add);
    bias_act(x1.p<float>(), rows, d, dadd.p<float>(), false, nullptr, nullptr);
    layer_norm(x1.p<float>(), rows, d, dw.p<float>(), db.p<float>(), 1e-5f, ob1.p<bf16>(), nullptr);
    add_layer_norm(x2.p<float>(), rows, d, dadd.p<float>(), dw.p<float>(), db.p<float>(), 1e-5f, ob2.p<bf16>(), nullptr);
    EXPECT_EQ(host(x2, size_t(rows * d)), host(x1, size_t(rows * d)));
    std::vector<uint16_t> h1(size_t(rows * d)), h2(size_t(rows * d));
    QASR_CUDA(cudaMemcpy(h1.data(), ob1.p<void>(), h1.size() * 2, cudaMemcpyDeviceToHost));
    QASR_CUDA(cudaMemcpy(h2.data(), ob2.p<void>(), h2.size() * 2, cudaMemcpyDeviceToHost));
    EXPECT_EQ(h2, h1);
}

TEST(Cuda, QkNormRopeAndAttentionMatchCpu) {
    NEED_GPU();
    const int Hq = 4, Hkv = 2, hd = 64, n = 37, W = (Hq + 2 * Hkv) * hd;
    const std::vector<float> qkv = randv(size_t(n * W), 10), qn = randv(size_t(hd), 11), kn = randv(size_t(hd), 12);
    std::vector<float> inv(size_t(hd / 2));
    for (int i = 0; i < hd / 2; ++i) inv[size_t(i)] = float(1.0 / std::pow(1e6, 2.0 * i / hd));
    // CPU: split, q/k norm, RoPE at positions 0..n-1, causal attention
    std::vector<float> q(size_t(n * Hq * hd)), k(size_t(n * Hkv * hd)), v(size_t(n * Hkv * hd));
    for (int r = 0; r < n; ++r) {
        std::memcpy(&q[size_t(r * Hq * hd)], &qkv[size_t(r * W)], size_t(Hq * hd) * 4);
        std::memcpy(&k[size_t(r * Hkv * hd)], &qkv[size_t(r * W + Hq * hd)], size_t(Hkv * hd) * 4);
        std::memcpy(&v[size_t(r * Hkv * hd)], &qkv[size_t(r * W + (Hq + Hkv) * hd)], size_t(Hkv * hd) * 4);
    }
    ops::rms_norm(q.data(), n * Hq, hd, qn.data(), 1e-6f);
    ops::rms_norm(k.data(), n * Hkv, hd, kn.data(), 1e-6f);
    ops::rope(q.data(), n, Hq, hd, 0, inv.data());
    ops::rope(k.data(), n, Hkv, hd, 0, inv.data());
    std::vector<float> o(size_t(n * Hq * hd));
    ops::causal_attention(q.data(), k.data(), v.data(), o.data(), n, 0, Hq, Hkv, hd);

    Dev dqkv(qkv), dqn(qn), dkn(kn), dinv(inv), dq(q.size() * 4), dk(k.size() * 4), dv(v.size() * 4), dout(o.size() * 4);
    qk_norm_rope_kv(dqkv.p<float>(), n, nullptr, Hq, Hkv, hd, dqn.p<float>(), dkn.p<float>(), 1e-6f, dinv.p<float>(),
                    dq.p<float>(), dk.p<float>(), dv.p<float>(), nullptr);
    EXPECT_LT(rel_l2(host(dq, q.size()), q), 1e-5);
    EXPECT_LT(rel_l2(host(dk, k.size()), k), 1e-5);
    EXPECT_LT(rel_l2(host(dv, v.size()), v), 1e-7);
    AttnArgs a;
    a.q = dq.p<float>(), a.q_stride = Hq * hd, a.k = dk.p<float>(), a.v = dv.p<float>(), a.kv_stride = Hkv * hd;
    a.o = dout.p<float>(), a.o_stride = Hq * hd, a.n = n, a.heads = Hq, a.kv_heads = Hkv, a.hd = hd;
    attention(a, nullptr);
    EXPECT_LT(rel_l2(host(dout, o.size()), o), 1e-5);
    // decode form: the last row alone at position n-1 (past read from the device), keys split 16 ways
    const std::vector<int> past{n - 1};
    Dev dpast(past), dpart(size_t(Hq) * 16 * (hd + 2) * 4), d1(size_t(Hq * hd) * 4);
    a.q = dq.p<float>() + size_t(n - 1) * Hq * hd, a.n = 1, a.past = dpast.p<int>(), a.splits = 16;
    a.part = dpart.p<float>(), a.o = d1.p<float>();
    attention(a, nullptr);
    const std::vector<float> last(o.end() - Hq * hd, o.end());
    EXPECT_LT(rel_l2(host(d1, size_t(Hq * hd)), last), 1e-5);
    // windowed (encoder) form: windows of 10 rows, no GQA, q/k/v interleaved in one [n, 3·d] buffer
    const int heads = 2, ehd = 16, d = heads * ehd;
    const std::vector<float> x = randv(size_t(n * 3 * d), 13);
    std::vector<float> eq(size_t(n * d)), ek(size_t(n * d)), ev(size_t(n * d)), eo(size_t(n * d));
    for (int r = 0; r < n; ++r)
        for (int c = 0; c < d; ++c) {
            eq[size_t(r * d + c)] = x[size_t(r * 3 * d + c)];
            ek[size_t(r * d + c)] = x[size_t(r * 3 * d + d + c)];
            ev[size_t(r * d + c)] = x[size_t(r * 3 * d + 2 * d + c)];
        }
    ops::windowed_attention(eq.data(), ek.data(), ev.data(), eo.data(), n, heads, ehd, 10);
    Dev dx(x), deo(eo.size() * 4);
    AttnArgs w;
    w.q = dx.p<float>(), w.k = dx.p<float>() + d, w.v = dx.p<float>() + 2 * d, w.q_stride = w.kv_stride = 3 * d;
    w.o = deo.p<float>(), w.o_stride = d, w.n = n, w.heads = w.kv_heads = heads, w.hd = ehd, w.causal = false, w.window = 10;
    attention(w, nullptr);
    EXPECT_LT(rel_l2(host(deo, eo.size()), eo), 1e-5);
}

// The tiled many-row attention (prefill, encoder) against the CPU ops at the model's shapes: causal with GQA from
// position 0 and after earlier positions (extend), windowed with windows that do and do not align with its tiles.
TEST(Cuda, TiledAttentionMatchesCpu) {
    NEED_GPU();
    struct Case { int heads, kv_heads, hd, n, past, window; };
    for (const Case c : {Case{16, 8, 128, 158, 0, 0}, Case{16, 8, 128, 45, 149, 0}, Case{4, 2, 64, 37, 21, 0},
                         Case{14, 14, 64, 143, 0, 104}, Case{2, 2, 64, 61, 0, 13}, Case{16, 8, 128, 2, 5, 0},
                         Case{16, 8, 128, 300, 0, 0}, Case{4, 4, 64, 250, 0, 200}}) {
        SCOPED_TRACE("heads " + std::to_string(c.heads) + "/" + std::to_string(c.kv_heads) + " hd " + std::to_string(c.hd) +
                     " n " + std::to_string(c.n) + " past " + std::to_string(c.past) + " window " + std::to_string(c.window));
        const int tot = c.past + c.n, qw = c.heads * c.hd, kw = c.kv_heads * c.hd;
        const uint32_t sd = uint32_t(c.n * 7 + c.past + c.hd);
        const std::vector<float> q = randv(size_t(c.n * qw), sd, 2.0f), k = randv(size_t(tot * kw), sd + 1, 2.0f),
                                 v = randv(size_t(tot * kw), sd + 2);
        std::vector<float> o(size_t(c.n * qw));
        if (c.window) ops::windowed_attention(q.data(), k.data(), v.data(), o.data(), c.n, c.heads, c.hd, c.window);
        else ops::causal_attention(q.data(), k.data(), v.data(), o.data(), c.n, c.past, c.heads, c.kv_heads, c.hd);
        Dev dq(q), dk(k), dv(v), dpast(std::vector<int>{c.past}), dout(o.size() * 4);
        AttnArgs a;
        a.q = dq.p<float>(), a.q_stride = qw, a.k = dk.p<float>(), a.v = dv.p<float>(), a.kv_stride = kw;
        a.o = dout.p<float>(), a.o_stride = qw, a.n = c.n, a.heads = c.heads, a.kv_heads = c.kv_heads, a.hd = c.hd;
        if (c.window) a.causal = false, a.window = c.window;
        else a.past = dpast.p<int>();
        attention(a, nullptr);
        EXPECT_LT(rel_l2(host(dout, o.size()), o), 1e-5);
        // the host's count of keys (past + n) picks the key splits merged in a cluster (2–8 here for the longer
        // cases); the bf16 output is the float32 output rounded
        a.keys_hint = tot;
        attention(a, nullptr);
        const std::vector<float> o2 = host(dout, o.size());
        EXPECT_LT(rel_l2(o2, o), 1e-5) << "with the key count";
        Dev dob(o.size() * 2);
        a.ob = dob.p<__nv_bfloat16>();
        attention(a, nullptr);
        std::vector<uint16_t> ob(o.size());
        QASR_CUDA(cudaMemcpy(ob.data(), dob.b.get(), ob.size() * 2, cudaMemcpyDeviceToHost));
        size_t bad = 0;
        for (size_t i = 0; i < ob.size(); ++i) {
            const __nv_bfloat16 want = __float2bfloat16(o2[i]);
            uint16_t wb;
            std::memcpy(&wb, &want, 2);
            bad += ob[i] != wb;
        }
        EXPECT_EQ(bad, 0u) << "bf16 output differs from the rounded float32 output";
        // q/k/v biases added on load (the encoder's): bit for bit the attention over the biased rows
        const std::vector<float> bq = randv(size_t(qw), sd + 3), bk = randv(size_t(kw), sd + 4), bv = randv(size_t(kw), sd + 5);
        std::vector<float> q2 = q, k2 = k, v2 = v;
        for (size_t i = 0; i < q2.size(); ++i) q2[i] += bq[i % size_t(qw)];
        for (size_t i = 0; i < k2.size(); ++i) k2[i] += bk[i % size_t(kw)], v2[i] += bv[i % size_t(kw)];
        Dev dq2(q2), dk2(k2), dv2(v2), dbq(bq), dbk(bk), dbv(bv);
        AttnArgs b = a;
        b.ob = nullptr, b.q = dq2.p<float>(), b.k = dk2.p<float>(), b.v = dv2.p<float>();
        attention(b, nullptr);
        const std::vector<float> want = host(dout, o.size());
        a.ob = nullptr, a.bq = dbq.p<float>(), a.bk = dbk.p<float>(), a.bv = dbv.p<float>();
        ASSERT_TRUE(attention_tiled(a));
        attention(a, nullptr);
        EXPECT_EQ(host(dout, o.size()), want);
    }
    AttnArgs one; // one row: not the tiled kernel, so biases are refused
    one.n = 1, one.heads = one.kv_heads = 2, one.hd = 64, one.q_stride = one.kv_stride = one.o_stride = 128;
    one.bq = one.bk = one.bv = reinterpret_cast<const float*>(uintptr_t(256));
    EXPECT_FALSE(attention_tiled(one));
    EXPECT_ANY_THROW(attention(one, nullptr));
}

// The fused decode kernel (q/k norm + RoPE + KV write + split-key attention + merge) against the CPU ops, for
// several GQA ratios, head sizes, context lengths (empty splits, several key tiles) and split counts; each case
// runs twice to show the merge counter is left at zero for the next call.
TEST(Cuda, FusedDecodeAttentionMatchesCpu) {
    NEED_GPU();
    struct Case { int Hq, Hkv, hd, n, splits; };
    for (const Case c : {Case{4, 2, 64, 1, 16}, Case{4, 2, 64, 5, 16}, Case{16, 8, 128, 37, 16},
                         Case{8, 2, 128, 300, 4}, Case{4, 4, 64, 77, 1}, Case{16, 2, 128, 130, 3},
                         Case{16, 8, 128, 300, 32}}) {
        SCOPED_TRACE("Hq " + std::to_string(c.Hq) + " Hkv " + std::to_string(c.Hkv) + " hd " + std::to_string(c.hd) +
                     " n " + std::to_string(c.n) + " splits " + std::to_string(c.splits));
        ASSERT_TRUE(decode_attention_supported(c.Hq, c.Hkv, c.hd));
        const int hd = c.hd, W = (c.Hq + 2 * c.Hkv) * hd, row = c.Hkv * hd, p = c.n - 1;
        const uint32_t sd = uint32_t(c.n * 131 + c.hd + c.Hq);
        const std::vector<float> qkv = randv(size_t(W), sd), qn = randv(size_t(hd), sd + 1), kn = randv(size_t(hd), sd + 2);
        std::vector<float> kc = randv(size_t(c.n * row), sd + 3), vc = randv(size_t(c.n * row), sd + 4);
        std::vector<float> inv(size_t(hd / 2));
        for (int i = 0; i < hd / 2; ++i) inv[size_t(i)] = float(1.0 / std::pow(1e6, 2.0 * i / hd));
        Dev dqkv(qkv), dqn(qn), dkn(kn), dinv(inv), dkc(kc), dvc(vc), dpos(std::vector<int>{p});
        Dev dpart(size_t(c.Hq) * c.splits * decode_partial_floats(hd) * 4), dcnt(size_t(c.Hkv) * 4), dout(size_t(c.Hq * hd) * 4);
        std::vector<float> q(qkv.begin(), qkv.begin() + c.Hq * hd), k(qkv.begin() + c.Hq * hd, qkv.begin() + (c.Hq + c.Hkv) * hd);
        ops::rms_norm(q.data(), c.Hq, hd, qn.data(), 1e-6f);
        ops::rms_norm(k.data(), c.Hkv, hd, kn.data(), 1e-6f);
        ops::rope(q.data(), 1, c.Hq, hd, p, inv.data());
        ops::rope(k.data(), 1, c.Hkv, hd, p, inv.data());
        std::copy(k.begin(), k.end(), kc.begin() + size_t(p) * row);
        std::copy(qkv.begin() + (c.Hq + c.Hkv) * hd, qkv.end(), vc.begin() + size_t(p) * row);
        std::vector<float> o(size_t(c.Hq * hd));
        ops::causal_attention(q.data(), kc.data(), vc.data(), o.data(), 1, p, c.Hq, c.Hkv, hd);
        DecAttnArgs a;
        a.qkv = dqkv.p<float>(), a.pos = dpos.p<int>(), a.Hq = c.Hq, a.Hkv = c.Hkv, a.hd = hd;
        a.qn = dqn.p<float>(), a.kn = dkn.p<float>(), a.eps = 1e-6f, a.inv_freq = dinv.p<float>();
        a.kc = dkc.p<float>(), a.vc = dvc.p<float>(), a.o = dout.p<float>();
        a.splits = c.splits, a.part = dpart.p<float>(), a.counter = dcnt.p<unsigned>();
        decode_attention(a, nullptr);
        const std::vector<float> o1 = host(dout, o.size());
        EXPECT_LT(rel_l2(o1, o), 1e-5);
        EXPECT_LT(rel_l2(host(dkc, kc.size()), kc), 1e-6); // only row p changed, to the normalised, rotated k
        EXPECT_EQ(host(dvc, vc.size()), vc);
        QASR_CUDA(cudaMemset(dout.p<float>(), 0, o.size() * 4));
        a.pre_wait = true; // the cached keys/values loaded before the dependency wait: the same values, bit for bit
        decode_attention(a, nullptr);
        EXPECT_EQ(host(dout, o.size()), o1);
        EXPECT_EQ(host(dvc, vc.size()), vc);
        std::vector<unsigned> cnt(size_t(c.Hkv), 1u);
        QASR_CUDA(cudaMemcpy(cnt.data(), dcnt.p<unsigned>(), cnt.size() * 4, cudaMemcpyDeviceToHost));
        EXPECT_EQ(cnt, std::vector<unsigned>(size_t(c.Hkv), 0u));
        // The splits merged inside a cluster (2..16 splits; else the same path): the same merge arithmetic, but
        // the compiler contracts multiply-adds differently per kernel instance, so the results agree to an ulp or
        // two (H200: at most 6e-8 absolute), not always bit for bit.
        for (const bool pre : {false, true}) {
            SCOPED_TRACE(std::string("cluster merge, pre_wait ") + (pre ? "on" : "off"));
            QASR_CUDA(cudaMemset(dout.p<float>(), 0, o.size() * 4));
            a.pre_wait = pre, a.cluster = true;
            decode_attention(a, nullptr);
            const std::vector<float> oc = host(dout, o.size());
            float md = 0.0f;
            for (size_t i = 0; i < oc.size(); ++i) md = std::max(md, std::fabs(oc[i] - o1[i]));
            EXPECT_LT(md, 1e-6f) << "relative L2 " << rel_l2(oc, o1);
            EXPECT_LT(rel_l2(oc, o), 1e-5);
            EXPECT_EQ(host(dvc, vc.size()), vc);
            a.cluster = false;
        }
    }
    EXPECT_FALSE(decode_attention_supported(4, 2, 96));
    EXPECT_FALSE(decode_attention_supported(32, 2, 128));
}

TEST(Cuda, ArgmaxPicksLowestIdOnTiesAndItsLogProb) {
    NEED_GPU();
    std::vector<float> x = randv(151936, 14);
    x[777] = 9.0f;
    x[150000] = 9.0f;
    Dev dx(x), ints(std::vector<int>{0, 5, 0, 0}), scratch(size_t(3 * 256) * 4);
    int2* ring = nullptr;
    QASR_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&ring), sizeof(int2) * 4, cudaHostAllocMapped));
    argmax_token(dx.p<float>(), int(x.size()), scratch.p<float>(), ints.p<int>(), ints.p<int>() + 1, ints.p<int>() + 2, ring,
                 4, true, nullptr);
    QASR_CUDA(cudaDeviceSynchronize());
    std::vector<int> h(4);
    QASR_CUDA(cudaMemcpy(h.data(), ints.p<void>(), 16, cudaMemcpyDeviceToHost));
    EXPECT_EQ(h[0], 777);
    EXPECT_EQ(h[1], 6);
    EXPECT_EQ(h[2], 1);
    EXPECT_EQ(ring[0].x, 777);
    double s = 0;
    for (float v : x) s += std::exp(double(v) - 9.0);
    float lp;
    std::memcpy(&lp, &ring[0].y, 4);
    EXPECT_NEAR(lp, -std::log(s), 1e-4);
    // with an embedding table: the chosen row is written out too (the next decode step's input)
    const int K = 1024;
    const Bf16Mat E(1000, K, 15);
    Dev de(E.bits), dout(size_t(K) * 4);
    DMat emb;
    emb.rows = 1000, emb.cols = K, emb.data = de.p<void>();
    argmax_token(dx.p<float>(), 1000, scratch.p<float>(), ints.p<int>(), ints.p<int>() + 1, ints.p<int>() + 2, ring, 4,
                 true, nullptr, &emb, dout.p<float>());
    EXPECT_EQ(host(dout, size_t(K)), std::vector<float>(E.f.begin() + 777 * K, E.f.begin() + 778 * K));
    EXPECT_TRUE(argmax_can_embed(emb));
    DMat qe = emb; // a quantized table keeps the embedding kernel: refused with an error, nothing launched
    qe.bits = 8, qe.gs = 64;
    EXPECT_FALSE(argmax_can_embed(qe));
    EXPECT_ANY_THROW(argmax_token(dx.p<float>(), 1000, scratch.p<float>(), ints.p<int>(), ints.p<int>() + 1,
                                  ints.p<int>() + 2, ring, 4, true, nullptr, &qe, dout.p<float>()));
    cudaFreeHost(ring);
}

// The decode step's LM head with the argmax's first stage fused (lm_head.cu) + the merge: logits, the token (the
// lowest index among equal maxima: a copy of the best row placed after it) and its log-probability against the CPU.
// lm_head_argmax of m over x (norm weights nw), then the argmax merge: the device logits, the chosen token, the
// position and count after it (from 5 and 0) and the ring's log-probability.
struct HeadRun {
    std::vector<float> logits;
    int tok = -1, pos = 0, count = 0;
    float lp = 0.0f;
};
HeadRun run_head_argmax(const DMat& m, const std::vector<float>& x, const std::vector<float>& nw, int V) {
    Dev dx(x), dn(nw), dlog(size_t(V) * 4), dpart(size_t(3 * 1024) * 4), ints(std::vector<int>{0, 5, 0, 0});
    HeadRun r;
    const int parts = lm_head_argmax(m, dx.p<float>(), dn.p<float>(), 1e-6f, dlog.p<float>(), dpart.p<float>(), 1024, nullptr);
    EXPECT_GT(parts, 0) << "the fused LM head applies to heads of width 1024 and 2048 on sm_90";
    if (parts <= 0) return r;
    int2* ring = nullptr;
    QASR_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&ring), sizeof(int2) * 4, cudaHostAllocMapped));
    argmax_merge(dlog.p<float>(), dpart.p<float>(), parts, ints.p<int>(), ints.p<int>() + 1, ints.p<int>() + 2, ring, 4,
                 true, nullptr);
    QASR_CUDA(cudaDeviceSynchronize());
    r.logits = host(dlog, size_t(V));
    std::vector<int> h(4);
    QASR_CUDA(cudaMemcpy(h.data(), ints.p<void>(), 16, cudaMemcpyDeviceToHost));
    r.tok = h[0], r.pos = h[1], r.count = h[2];
    std::memcpy(&r.lp, &ring[0].y, 4);
    cudaFreeHost(ring);
    return r;
}
// The token: the first maximum of the device logits; its log-probability; the counters advanced once.
void expect_head_choice(const HeadRun& r) {
    const std::vector<float>& got = r.logits;
    ASSERT_FALSE(got.empty());
    EXPECT_EQ(r.tok, int(std::max_element(got.begin(), got.end()) - got.begin()));
    EXPECT_EQ(r.pos, 6);
    EXPECT_EQ(r.count, 1);
    double se = 0;
    for (float v : got) se += std::exp(double(v) - double(got[size_t(r.tok)]));
    EXPECT_NEAR(r.lp, -std::log(se), 1e-4);
}

TEST(Cuda, LmHeadArgmaxMatchesCpu) {
    NEED_GPU();
    for (const auto& [V, K] : {std::pair<int, int>{20011, 1024}, {9000, 2048}}) {
        SCOPED_TRACE(std::to_string(V) + "x" + std::to_string(K));
        Bf16Mat W(V, K, uint32_t(V + K));
        const std::vector<float> x = randv(size_t(K), 31), nw = randv(size_t(K), 32);
        std::vector<float> xn = x;
        ops::rms_norm(xn.data(), 1, K, nw.data(), 1e-6f);
        auto logits_of = [&] {
            std::vector<float> ref(static_cast<size_t>(V));
            ops::linear(xn.data(), 1, K, W.f.data(), V, nullptr, ref.data());
            return ref;
        };
        std::vector<float> ref = logits_of();
        const int best = int(std::max_element(ref.begin(), ref.end()) - ref.begin());
        const int copy = best + 1 + (V - best - 1) / 2; // a later row equal to the best one: the tie goes to `best`
        ASSERT_LT(copy, V);
        std::copy(W.f.begin() + int64_t(best) * K, W.f.begin() + int64_t(best + 1) * K, W.f.begin() + int64_t(copy) * K);
        std::copy(W.bits.begin() + int64_t(best) * K, W.bits.begin() + int64_t(best + 1) * K, W.bits.begin() + int64_t(copy) * K);
        ref = logits_of();
        Dev dw(W.bits);
        DMat m;
        m.rows = V, m.cols = K, m.data = dw.p<void>();
        const HeadRun r = run_head_argmax(m, x, nw, V);
        EXPECT_LT(rel_l2(r.logits, ref), 1e-5);
        expect_head_choice(r);
        ASSERT_FALSE(r.logits.empty());
        EXPECT_EQ(r.logits[size_t(best)], r.logits[size_t(copy)]);
        EXPECT_EQ(r.tok, best);
    }
}

// The quantized LM head (MLX 4/6/8-bit) with the argmax partials, against the dequantized weights on the CPU.
TEST(Cuda, LmHeadArgmaxQuantizedMatchesCpu) {
    NEED_GPU();
    for (const int bits : {8, 6, 4})
        for (const auto& [V, K] : {std::pair<int, int>{20011, 1024}, {9000, 2048}}) {
            SCOPED_TRACE(std::to_string(bits) + "-bit " + std::to_string(V) + "x" + std::to_string(K));
            const int gs = 64;
            const std::vector<float> w = randv(size_t(V) * K, uint32_t(V + bits), 0.2f), x = randv(size_t(K), 61),
                                     nw = randv(size_t(K), 62);
            const QuantDevMat Q(w, V, K, bits, gs);
            std::vector<float> xn = x;
            ops::rms_norm(xn.data(), 1, K, nw.data(), 1e-6f);
            std::vector<float> ref(static_cast<size_t>(V));
            for (int r = 0; r < V; ++r) {
                double acc = 0;
                for (int k = 0; k < K; ++k) acc += double(Q.f[size_t(r) * K + k]) * xn[size_t(k)];
                ref[size_t(r)] = float(acc);
            }
            const HeadRun r = run_head_argmax(Q.m, x, nw, V);
            EXPECT_LT(rel_l2(r.logits, ref), 1e-5);
            expect_head_choice(r);
        }
}

TEST(Cuda, ConvStemAsIm2colGemmMatchesCpu) {
    NEED_GPU();
    for (const int Ch : {8, 5}) { // 16-byte column groups; one column per thread
        SCOPED_TRACE("channels " + std::to_string(Ch));
        const int H = 11, Wd = 9, C = 2;
        const std::vector<float> in = randv(size_t(C * H * Wd * Ch), 15), w = randv(size_t(Ch * Ch * 9), 16, 0.3f);
        std::vector<float> wb = w, inb = in;
        for (auto& v : wb)
            v = bf16_round(v);
        for (auto& v : inb)
            v = bf16_round(v);
        const int Ho = (H + 1) / 2, Wo = (Wd + 1) / 2;
        // CPU: per chunk, CHW layout
        std::vector<float> ref(size_t(C * Ho * Wo * Ch));
        for (int c = 0; c < C; ++c) {
            std::vector<float> chw(size_t(Ch * H * Wd)), out(size_t(Ch * Ho * Wo));
            for (int h = 0; h < H; ++h)
                for (int x = 0; x < Wd; ++x)
                    for (int ch = 0; ch < Ch; ++ch)
                        chw[size_t((ch * H + h) * Wd + x)] = inb[size_t(((c * H + h) * Wd + x) * Ch + ch)];
            ops::conv3x3_s2(chw.data(), Ch, H, Wd, wb.data(), nullptr, Ch, out.data());
            for (int ch = 0; ch < Ch; ++ch)
                for (int p = 0; p < Ho * Wo; ++p)
                    ref[size_t((c * Ho * Wo + p) * Ch + ch)] = out[size_t(ch * Ho * Wo + p)];
        }
        std::vector<uint16_t> wbits;
        for (float v : wb)
            wbits.push_back(bf16_bits(v));
        Dev din(in), dw(wbits), cols(size_t(C * Ho * Wo * Ch * 9) * 2), dout(ref.size() * 4);
        im2col(din.p<float>(), C, H, Wd, Ch, cols.p<bf16>(), nullptr);
        cublasHandle_t h;
        QASR_CUBLAS(cublasCreate(&h));
        gemm(h, cols.p<bf16>(), C * Ho * Wo, Ch * 9, dw.p<bf16>(), Ch, dout.p<float>(), 0.0f);
        EXPECT_LT(rel_l2(host(dout, ref.size()), ref), 1e-5);
        cublasDestroy(h);
    }
}

TEST(Cuda, LogMelOnTheDeviceMatchesTheCpuFrontEnd) {
    NEED_GPU();
    for (const size_t n : {size_t(3000), size_t(16000 * 7 + 123)}) {
        std::vector<float> audio = randv(n, 18, 0.3f);
        for (size_t i = 0; i < n; ++i) audio[i] *= float(std::sin(double(i) * 0.001)); // quiet and loud parts
        const MelFrontend fe(128);
        const Tensor ref = fe.compute(audio, 8000);
        const size_t N = std::max(n, size_t(8000));
        const int T = int(MelFrontend::n_frames(N));
        const std::vector<double> dft = mel_dft_basis();
        Dev dx(audio), dw(fe.window()), dd(dft), df(fe.filterbank_f64()), work(log_mel_work_bytes(T, 128)),
            out(size_t(T) * 128 * 4);
        cublasHandle_t h;
        QASR_CUBLAS(cublasCreate(&h));
        log_mel(h, dx.p<float>(), int64_t(n), int64_t(N), T, 128, dw.p<double>(), dd.p<double>(), df.p<double>(),
                work.p<double>(), out.p<float>(), nullptr);
        const std::vector<float> got = host(out, size_t(T) * 128);
        cublasDestroy(h);
        double worst = 0;
        for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - ref.data[i]));
        EXPECT_LT(worst, 1e-4) << n << " samples"; // the parity bound of the CPU front end (spec §12)
    }
}

TEST(Cuda, OutOfMemoryIsAnErrorAndTheProcessGoesOn) {
    NEED_GPU();
    EXPECT_THROW(Buffer(size_t(1) << 50), qasr::Error);
    const std::vector<float> x{1, 2, 3};
    Dev ok(x);
    EXPECT_EQ(host(ok, 3)[2], 3.0f);
}

// The persistent decode step (one cooperative kernel per token, QASR_CUDA_PERSISTENT=1) against the per-layer
// kernels on a random checkpoint with head_dim 64: same greedy tokens, same log-probabilities and step logits.
TEST(Cuda, PersistentDecodeStepEqualsPerLayerKernels) {
    NEED_GPU();
    const std::string tok_dir = tokenizer_dir();
    if (!std::filesystem::exists(tok_dir + "/tokenizer.json"))
        GTEST_SKIP() << "tokenizer not set up (scripts/setup_tokenizer.sh) in " << tok_dir;
    const std::string dir = random_checkpoint_dir("small", 3, tok_dir);
    unsetenv("QASR_CUDA_PERSISTENT");
    const auto ref_model = Model::load(dir, "cuda");
    Session ref(ref_model);
    setenv("QASR_CUDA_PERSISTENT", "1", 1);
    const auto per_model = Model::load(dir, "cuda");
    Session per(per_model);
    unsetenv("QASR_CUDA_PERSISTENT");
    const std::vector<float> audio = randv(16000 * 4, 23, 0.1f);
    TranscribeOptions o;
    o.decode.ignore_eos = true;
    o.decode.max_new_tokens = 40;
    o.itn = false;
    const TranscriptionResult a = ref.run(audio, o), b = per.run(audio, o);
    ASSERT_EQ(a.tokens.size(), 40u);
    ASSERT_EQ(b.tokens.size(), 40u);
    for (size_t n = 0; n < a.tokens.size(); ++n) {
        EXPECT_EQ(a.tokens[n].id, b.tokens[n].id) << "token " << n;
        EXPECT_NEAR(a.tokens[n].logprob, b.tokens[n].logprob, 1e-3) << "token " << n;
    }
    // host-driven steps: logits of every step
    const Tensor mel = ref.mel(audio, 8000);
    const Tensor rows = ref.encode(mel);
    const Prompt p = ref.prompt(rows.rows(), o);
    Tensor la = ref.prefill(p, rows), lb = per.prefill(p, rows);
    for (int n = 0; n < 12; ++n) {
        const int tok = int(std::max_element(la.ptr(), la.ptr() + la.cols()) - la.ptr());
        la = ref.step(tok);
        lb = per.step(tok);
        EXPECT_LT(rel_l2(lb.data, la.data), 1e-4) << "step " << n;
    }
}

// End to end on the tiny random checkpoint: the GPU path (bf16 products) against the CPU path (fp32).
TEST(Cuda, TinyCheckpointEndToEndAgreesWithCpu) {
    NEED_GPU();
    const std::string tok_dir = tokenizer_dir();
    if (!std::filesystem::exists(tok_dir + "/tokenizer.json"))
        GTEST_SKIP() << "tokenizer not set up (scripts/setup_tokenizer.sh) in " << tok_dir;
    const std::string dir = random_checkpoint_dir("tiny", 1, tok_dir);
    const auto cpu = Model::load(dir, "cpu"), gpu = Model::load(dir, "cuda");
    ASSERT_TRUE(gpu->device);
    std::vector<float> audio = randv(16000 * 3, 17, 0.1f);
    Session sc(cpu), sg(gpu);
    const Tensor mel = sc.mel(audio, 8000);
    const Tensor rc = sc.encode(mel), rg = sg.encode(mel);
    ASSERT_EQ(rc.shape, rg.shape);
    EXPECT_LT(rel_l2(rg.data, rc.data), 2e-2);
    TranscribeOptions o;
    const Prompt p = sc.prompt(rc.rows(), o);
    const Tensor lc = sc.prefill(p, rc, true), lg = sg.prefill(p, rc, true);
    ASSERT_EQ(lc.shape, lg.shape);
    EXPECT_LT(rel_l2(lg.data, lc.data), 2e-2);
    int agree = 0;
    for (int64_t r = 0; r < lc.rows(); ++r)
        agree += std::max_element(lc.row(r), lc.row(r) + lc.cols()) - lc.row(r) ==
                 std::max_element(lg.row(r), lg.row(r) + lg.cols()) - lg.row(r);
    EXPECT_GE(double(agree) / double(lc.rows()), 0.9) << agree << "/" << lc.rows();
    // greedy on the device (graph + one-step-behind readback) equals host-driven steps on the device
    o.decode.ignore_eos = true;
    o.decode.max_new_tokens = 24;
    o.itn = false;
    const TranscriptionResult a = sg.run(audio, o);
    ASSERT_EQ(a.tokens.size(), 24u);
    Tensor logits = sg.prefill(p, sg.encode(mel));
    for (size_t n = 0; n < a.tokens.size(); ++n) {
        const int tok = int(std::max_element(logits.ptr(), logits.ptr() + logits.cols()) - logits.ptr());
        ASSERT_EQ(tok, a.tokens[n].id) << "step " << n;
        if (n + 1 < a.tokens.size()) logits = sg.step(tok);
    }
    // the guardrails hold on the device path too: EOS/repetition stop, caps, empty audio
    TranscribeOptions g;
    g.decode.max_new_tokens = 30;
    const TranscriptionResult b = sg.run(audio, g);
    EXPECT_LE(b.tokens.size(), 30u);
    EXPECT_EQ(sg.run(std::vector<float>(300, 0.0f), g).finish, FinishReason::Empty);
}

int main(int argc, char** argv) {
    if (cuda_device_count() == 0) {
        std::printf("SKIP: no CUDA device or driver here; the CUDA tests run on a GPU machine (docs/benchmarks.md)\n");
        return 77;
    }
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}

// Streaming on the GPU (pipeline/stream_engine.hpp: encoder layers and a persistent KV cache on the device): with
// the trained demo model, the streamed finals equal the offline CUDA transcripts of both bundled samples, for
// the default (speculative) policy and for exact finals, and later steps reuse the cached prefix.
// QASR_DEMO_DIR: models/demo with its tokenizer files (run_cuda_device.sh copies them there).
TEST(Cuda, StreamFinalsEqualOfflineOnTheDemoModel) {
    NEED_GPU();
    const char* env = std::getenv("QASR_DEMO_DIR");
    const std::string dir = env && *env ? env : std::string(QASR_SOURCE_DIR) + "/models/demo";
    if (!std::filesystem::exists(dir + "/tokenizer.json") || !std::filesystem::exists(dir + "/model.safetensors"))
        GTEST_SKIP() << "demo model with tokenizer not found in " << dir << " (set QASR_DEMO_DIR)";
    const auto model = Model::load(dir, "cuda");
    Session offline(model);
    TranscribeOptions o;
    o.itn = false;
    for (const char* name : {"demo_en", "demo_de"}) {
        const std::string wav = dir + "/../../samples/" + name + ".wav";
        ASSERT_TRUE(std::filesystem::exists(wav)) << wav;
        const std::vector<float> audio = load_audio_file(wav);
        const TranscriptionResult ref = offline.run(audio, o);
        ASSERT_FALSE(ref.text.empty());
        for (const bool exact : {false, true}) {
            StreamOptions so;
            so.itn = false;
            so.exact_final = exact;
            StreamSession s(model, so);
            for (size_t i = 0; i < audio.size(); i += 1600) s.push(audio.data() + i, std::min<size_t>(1600, audio.size() - i));
            const TranscriptionResult fin = s.finish();
            EXPECT_EQ(fin.text, ref.text) << name << (exact ? " (exact final)" : " (speculative)");
            ASSERT_GE(s.stats().size(), 2u) << name;
            // the final step reused the cached positions of the prompt's head (prefilled = prompt − reused + draft)
            const StreamChunkStats& last = s.stats().back();
            EXPECT_LT(last.prefilled_tokens - last.draft_tokens, ref.n_prompt_tokens) << name;
        }
    }
    // concurrent streams on the one device model (each takes its own pooled device session): same finals
    std::vector<std::string> texts(4), want(4);
    std::vector<std::thread> th;
    for (int k = 0; k < 4; ++k) {
        const std::string wav = dir + "/../../samples/" + (k % 2 ? "demo_de" : "demo_en") + ".wav";
        const std::vector<float> audio = load_audio_file(wav);
        want[size_t(k)] = offline.run(audio, o).text;
        th.emplace_back([&, k, audio] {
            try {
                StreamOptions so;
                so.itn = false;
                StreamSession s(model, so);
                for (size_t i = 0; i < audio.size(); i += 3200)
                    s.push(audio.data() + i, std::min<size_t>(3200, audio.size() - i));
                texts[size_t(k)] = s.finish().text;
            } catch (const std::exception& e) {
                texts[size_t(k)] = std::string("error: ") + e.what();
            }
        });
    }
    for (auto& t : th) t.join();
    EXPECT_EQ(texts, want);
}
