// CUDA backend against the CPU ops (fp32) on random inputs of awkward sizes, and end to end against the CPU
// path on a random tiny checkpoint. Every test skips with a message where no CUDA device is present.

#include "api/transcriber_impl.hpp"
#include "backend/cuda/gemm.hpp"
#include "backend/cuda/staged_upload.hpp"
#include "cuda_test_util.hpp"
#include "pipeline/align.hpp"

#include <cstring>
#include <functional>

using namespace qasr;
using namespace qasr::cuda;
using namespace qasr::cuda::test;

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
    NEED_PREFETCH_GPU();
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
    NEED_PREFETCH_GPU();
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

// Odd (1000) and the models' widths (1024, 896, 2048) with their row counts.
// Beam search's choice on the device (row_topk): each row's k best (ties → lower index) and their log-softmax, as
// the CPU's ops::top_logprobs gives them — for the vocabulary's width and a narrow one, with ties across slices.
TEST(Cuda, RowTopkMatchesCpu) {
    NEED_GPU();
    for (const auto& [B, V, k] : {std::tuple{5, 151936, 15}, std::tuple{16, 151936, 48}, std::tuple{3, 1000, 64},
                                   std::tuple{1, 200, 6}}) {
        SCOPED_TRACE("B " + std::to_string(B) + " V " + std::to_string(V) + " k " + std::to_string(k));
        std::vector<float> x = randv(size_t(B) * size_t(V), 11, 4.0f);
        for (int b = 0; b < B; ++b) { // ties: equal values in different slices and next to each other
            x[size_t(b) * V + 3] = x[size_t(b) * V + size_t(V) - 2] = x[size_t(b) * V + size_t(V) / 2] = 9.0f + float(b);
            x[size_t(b) * V + 4] = 8.5f + float(b);
            x[size_t(b) * V + 5] = 8.5f + float(b);
        }
        Dev dx(x), scratch(row_topk_scratch_floats(B, k) * 4), di(size_t(B) * size_t(k) * 4), dl(size_t(B) * size_t(k) * 4);
        row_topk(dx.p<float>(), B, V, k, scratch.p<float>(), di.p<int>(), dl.p<float>(), nullptr);
        QASR_CUDA(cudaDeviceSynchronize());
        std::vector<int> gi(size_t(B) * size_t(k));
        QASR_CUDA(cudaMemcpy(gi.data(), di.p<void>(), gi.size() * 4, cudaMemcpyDeviceToHost));
        const std::vector<float> gl = host(dl, size_t(B) * size_t(k));
        std::vector<int64_t> ci(static_cast<size_t>(k));
        std::vector<float> cl(static_cast<size_t>(k));
        for (int b = 0; b < B; ++b) {
            ops::top_logprobs(x.data() + size_t(b) * V, V, k, ci.data(), cl.data());
            for (int j = 0; j < k; ++j) {
                ASSERT_EQ(gi[size_t(b) * k + j], ci[size_t(j)]) << "row " << b << " rank " << j;
                EXPECT_NEAR(gl[size_t(b) * k + j], cl[size_t(j)], 1e-4) << "row " << b << " rank " << j;
            }
        }
    }
}

TEST(Cuda, NormsAndActivationsMatchCpu) {
    NEED_GPU();
    for (const auto& [rows, d] : {std::pair{7, 1000}, std::pair{158, 1024}, std::pair{143, 896}, std::pair{9, 2048}}) {
        SCOPED_TRACE("rows " + std::to_string(rows) + " d " + std::to_string(d));
        const std::vector<float> x = randv(size_t(rows * d), 7, 3.0f), w = randv(size_t(d), 8), b = randv(size_t(d), 9);
        Dev dx(x), dw(w), db(b), of(size_t(rows * d) * 4), ob(size_t(rows * d) * 2), ob0(size_t(rows * d) * 2);
        std::vector<float> ref = x;
        ops::rms_norm(ref.data(), rows, d, w.data(), 1e-6f);
        rms_norm(dx.p<float>(), rows, d, dw.p<float>(), 1e-6f, of.p<float>(), ob0.p<bf16>(), nullptr);
        const std::vector<float> got = host(of, size_t(rows * d));
        EXPECT_LT(rel_l2(got, ref), 1e-6);
        EXPECT_EQ(bf16_mismatches(ob0, got), 0u); // the bf16 output is the float32 output rounded
        std::vector<uint16_t> hb(size_t(rows * d));
        // layer norm → bf16, GELU with bias
        ref = x;
        ops::layer_norm(ref.data(), rows, d, w.data(), b.data(), 1e-5f);
        layer_norm(dx.p<float>(), rows, d, dw.p<float>(), db.p<float>(), 1e-5f, ob.p<bf16>(), nullptr);
        EXPECT_EQ(host(dx, size_t(rows * d)), x) << "layer_norm without a bias must not write x";
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
        const std::vector<float> gy = host(dy, ref.size());
        EXPECT_LT(rel_l2(gy, ref), 1e-6);
        // only the bf16 copy (write_y = false; rows of a multiple of 4): the float32 result rounded, y left as it was
        Dev dz(x), obz(size_t(rows * d) * 2);
        bias_act(dz.p<float>(), rows, d, db.p<float>(), true, obz.p<bf16>(), nullptr, false);
        EXPECT_EQ(host(dz, x.size()), x);
        EXPECT_EQ(bf16_mismatches(obz, gy), 0u);
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

// The row passes' products (backend/cuda/gemm.hpp): the first M of a band asks cuBLASLt's heuristic, the band's
// other M take that algorithm, a product queued on another stream (as a recording does) asks for its own M — every
// one of them equal to the CPU's float32 product, with β = 0 and β = 1.
TEST(Cuda, ProductPlansMatchCpuForEveryMOfABand) {
    NEED_GPU();
    const int N = 96, K = 160, maxM = 64;
    const Bf16Mat W(N, K, 41), A(maxM, K, 42);
    Dev dW(W.bits), dA(A.bits), dC(size_t(maxM) * N * 4);
    cudaStream_t s = nullptr, rec = nullptr;
    QASR_CUDA(cudaStreamCreate(&s));
    QASR_CUDA(cudaStreamCreate(&rec));
    cublasHandle_t h = nullptr;
    QASR_CUBLAS(cublasCreate(&h));
    QASR_CUBLAS(cublasSetStream(h, s));
    {
        detail::GemmPlans g(h, s);
        for (const int M : {40, 33, 64, 50}) {
            std::vector<float> ref(size_t(M) * N);
            for (int m = 0; m < M; ++m)
                for (int n = 0; n < N; ++n) {
                    double acc = 0;
                    for (int k = 0; k < K; ++k) acc += double(A.f[size_t(m) * K + k]) * W.f[size_t(n) * K + k];
                    ref[size_t(m) * N + n] = float(acc);
                }
            std::vector<float> twice = ref;
            for (auto& v : twice) v *= 2.0f;
            for (cudaStream_t st : {s, rec}) {
                SCOPED_TRACE("M " + std::to_string(M) + (st == s ? " on the session's stream" : " on another stream"));
                g.run(dA.p<bf16>(), M, K, dW.p<bf16>(), N, dC.p<float>(), 0.0f, st);
                EXPECT_LT(rel_l2(host(dC, ref.size()), ref), 1e-5);
                g.run(dA.p<bf16>(), M, K, dW.p<bf16>(), N, dC.p<float>(), 1.0f, st);
                EXPECT_LT(rel_l2(host(dC, ref.size()), twice), 1e-5);
            }
        }
        EXPECT_EQ(g.plans(), 4u);
    }
    cublasDestroy(h);
    cudaStreamDestroy(rec);
    cudaStreamDestroy(s);
}

TEST(Cuda, LogMelOnTheDeviceMatchesTheCpuFrontEnd) {
    NEED_GPU();
    // the last: 90 s, three blocks of frames (kLogMelBlock), the last one short, its loudest part in the second
    // (the clamp below the maximum of all blocks)
    for (const size_t n : {size_t(3000), size_t(16000 * 7 + 123), size_t(16000 * 90 + 77)}) {
        std::vector<float> audio = randv(n, 18, 0.3f);
        for (size_t i = 0; i < n; ++i) audio[i] *= float(std::sin(double(i) * 0.001)); // quiet and loud parts
        for (size_t i = 16000 * 50; i < std::min(n, size_t(16000 * 51)); ++i) audio[i] *= 3.0f;
        const MelFrontend fe(128);
        const Tensor ref = fe.compute(audio, 8000);
        const size_t N = std::max(n, size_t(8000));
        const int T = int(MelFrontend::n_frames(N));
        const std::vector<double> dft = mel_dft_basis();
        // the work buffer as allocated (products through cublasLt plans), and 8 bytes off (cublasDgemm)
        for (const size_t off : {size_t(0), size_t(8)}) {
            Dev dx(audio), dw(fe.window()), dd(dft), df(fe.filterbank_f64()), work(log_mel_work_bytes(T, 128) + off),
                out(size_t(T) * 128 * 4);
            cublasHandle_t h;
            QASR_CUBLAS(cublasCreate(&h));
            {
                detail::GemmPlans g(h, nullptr);
                log_mel(g, dx.p<float>(), int64_t(n), int64_t(N), T, 128, dw.p<double>(), dd.p<double>(), df.p<double>(),
                        reinterpret_cast<double*>(work.p<char>() + off), out.p<float>(), nullptr);
                const std::vector<float> got = host(out, size_t(T) * 128);
                double worst = 0;
                for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - ref.data[i]));
                EXPECT_LT(worst, 1e-4) << n << " samples, work offset " << off; // the CPU front end's parity bound (spec §12)
            }
            cublasDestroy(h);
        }
    }
}

TEST(Cuda, OutOfMemoryIsAnErrorAndTheProcessGoesOn) {
    NEED_GPU();
    EXPECT_THROW(Buffer(size_t(1) << 50), qasr::OutOfMemory);
    const std::vector<float> x{1, 2, 3};
    Dev ok(x);
    EXPECT_EQ(host(ok, 3)[2], 3.0f);
}

// The weights' upload path: copies of every size (empty, odd, across the two 32 MiB staging slots, larger than
// both) to scattered destinations; the sources are overwritten as soon as copy() returns.
TEST(Cuda, StagedUploadDeliversEveryByte) {
    NEED_GPU();
    const std::vector<size_t> sizes{0, 1, 7, 4096, (size_t(3) << 20) + 5, (size_t(32) << 20) - 3, 11,
                                    (size_t(70) << 20) + 1, (size_t(5) << 20), 2};
    std::vector<Buffer> dst;
    std::vector<std::vector<uint8_t>> want;
    {
        StagedUpload up;
        std::vector<uint8_t> src;
        uint32_t r = 12345;
        for (size_t n : sizes) {
            src.resize(n);
            for (auto& b : src) b = uint8_t((r = r * 1664525u + 1013904223u) >> 24);
            want.push_back(src);
            dst.emplace_back(std::max<size_t>(n, 1));
            up.copy(dst.back().get(), src.data(), n);
            std::memset(src.data(), 0xAB, n); // the source may be reused at once
        }
        up.finish();
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
        std::vector<uint8_t> got(sizes[i]);
        if (sizes[i]) QASR_CUDA(cudaMemcpy(got.data(), dst[i].get(), sizes[i], cudaMemcpyDeviceToHost));
        EXPECT_TRUE(got == want[i]) << "copy " << i << " of " << sizes[i] << " bytes";
    }
}

// The persistent decode step (one cooperative kernel per token, QASR_CUDA_PERSISTENT=1) against the per-layer
// kernels on a random checkpoint with head_dim 64: same greedy tokens, same log-probabilities and step logits.
TEST(Cuda, PersistentDecodeStepEqualsPerLayerKernels) {
    NEED_GPU_CHECKPOINT(dir, "small", 3);
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
// The forced aligner on the device (the head's rows are the 5000 classes, the input ids reach past them): every
// timestamp's class is the CPU's where the CPU's two best classes are apart by more than the bf16 noise, and the
// words are the same.
TEST(Cuda, AlignerOnTheDeviceAgreesWithCpu) {
    NEED_GPU_CHECKPOINT(dir, "aligner-tiny", 1);
    const auto cpu = Model::load(dir, "cpu"), gpu = Model::load(dir, "cuda");
    ASSERT_TRUE(gpu->device);
    ASSERT_EQ(gpu->hp.aligner.classes, 5000);
    const std::vector<float> audio = randv(16000 * 7, 23, 0.1f);
    const std::string text = "The quick brown fox jumps over the lazy dog, 今天天气很好 O'Neil 2026.";
    Session sc(cpu);
    Timings t;
    const Tensor rows = sc.encode_samples(audio, 8000, t);
    const AlignInput in = build_align_input(*cpu, rows.rows(), split_alignment_words(text));
    const Tensor lc = sc.prefill(in.prompt, rows, true);
    const Alignment ac = align_audio(cpu, audio, text, {}), ag = align_audio(gpu, audio, text, {});
    ASSERT_EQ(ag.words.size(), ac.words.size());
    ASSERT_EQ(ag.classes.size(), in.positions.size());
    for (size_t w = 0; w < ac.words.size(); ++w) EXPECT_EQ(ag.words[w].text, ac.words[w].text);
    int compared = 0;
    for (size_t k = 0; k < in.positions.size(); ++k) {
        std::vector<float> row(lc.row(in.positions[k]), lc.row(in.positions[k]) + lc.cols());
        std::nth_element(row.begin(), row.begin() + 1, row.end(), std::greater<float>());
        // a near-tie (the tiny random model's logits are ≈ 2, where one bf16 step is 0.0156): either may win
        if (row[0] - row[1] < 0.02f) continue;
        ++compared;
        EXPECT_EQ(ag.classes[k], ac.classes[k]) << "timestamp " << k << " (margin " << row[0] - row[1] << ")";
    }
    EXPECT_GE(compared, 10) << "of " << in.positions.size() << " timestamps"; // 19 of 34 on the CPU
}

// Beam search on the device (pipeline/beam_search.hpp: one device session per beam, KV caches copied on the device
// where beams fork, every beam advanced by one batched step): on the trained demo model the beams' texts equal the
// CPU's; on the random tiny checkpoint (flat logits: the beams fork at nearly every step, and a token's
// log-probability depends on its whole context) the winning tokens decoded again one by one in a fresh device
// session give the same log-probabilities, within the batched products' rounding (a stale or wrong cache would not).
TEST(Cuda, BeamSearchOnTheDeviceDecodesItsTokensAlike) {
    NEED_GPU();
    const char* env = std::getenv("QASR_DEMO_DIR");
    const std::string dir = env && *env ? env : std::string(QASR_SOURCE_DIR) + "/models/demo";
    if (!std::filesystem::exists(dir + "/tokenizer.json") || !std::filesystem::exists(dir + "/model.safetensors"))
        GTEST_SKIP() << "demo model with tokenizer not found in " << dir << " (set QASR_DEMO_DIR)";
    const auto gpu = Model::load(dir, "cuda"), cpu = Model::load(dir, "cpu");
    for (const char* name : {"demo_en", "demo_de"}) {
        const std::vector<float> audio = load_audio_file(dir + "/../../samples/" + name + ".wav");
        for (int beams : {2, 5}) {
            TranscribeOptions o;
            o.decode.beam_size = beams;
            Session g(gpu), c(cpu);
            const TranscriptionResult rg = g.run(audio, o), rc = c.run(audio, o);
            EXPECT_EQ(rg.text, rc.text) << name << " beams " << beams;
            EXPECT_EQ(rg.finish, FinishReason::Eos) << name;
        }
    }
    const std::string tiny = random_checkpoint_dir("tiny", 1, tokenizer_dir());
    const auto tg = Model::load(tiny, "cuda");
    const std::vector<float> audio = randv(16000 * 5, 31, 0.1f);
    TranscribeOptions o;
    o.decode.beam_size = 4;
    o.decode.repetition_limit = 0;
    o.decode.max_new_tokens = 1100; // past 1024 positions: the beams' device KV caches grow during the search
    Session g(tg);
    const TranscriptionResult r = g.run(audio, o);
    ASSERT_EQ(r.tokens.size(), 1100u); // no EOS from random weights: the cap
    Session alone(tg);
    Timings t;
    const Tensor rows = alone.encode_samples(audio, o.min_samples, t);
    Tensor lg = alone.prefill(alone.prompt(rows.rows(), o), rows);
    double worst = 0;
    for (size_t i = 0; i < r.tokens.size(); ++i) {
        float lp = 0;
        ops::argmax_logprob(lg.ptr(), lg.cols(), r.tokens[i].id, lp);
        worst = std::max(worst, std::abs(double(lp) - double(r.tokens[i].logprob)));
        EXPECT_NEAR(lp, r.tokens[i].logprob, 0.01) << "token " << i;
        if (i + 1 < r.tokens.size()) lg = alone.step(r.tokens[i].id);
    }
    std::printf("tiny random model, 4 beams, 1100 tokens: largest log-probability difference to the lone decode %.2e\n", worst);
}

TEST(Cuda, TinyCheckpointEndToEndAgreesWithCpu) {
    NEED_GPU_CHECKPOINT(dir, "tiny", 1);
    struct PassGraphs { // the row passes as graphs (opt-in) for this test's sessions: checked against eager runs below
        PassGraphs() { setenv("QASR_CUDA_PASS_GRAPHS", "1", 1); }
        ~PassGraphs() { unsetenv("QASR_CUDA_PASS_GRAPHS"); }
    } pass_graphs;
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
    // a prefill of device-resident rows needs encode_audio_resident() before it: an error, not stale rows
    EXPECT_ANY_THROW(gpu->device->open()->prefill_resident(p.ids, p.audio_begin));
    // greedy on the device (graph + one-step-behind readback; the encoder's rows handed to the prefill on the device:
    // encode_audio_resident + prefill_resident) equals host-driven steps on the device
    o.decode.ignore_eos = true;
    o.decode.max_new_tokens = 24;
    o.itn = false;
    const TranscriptionResult a = sg.run(audio, o);
    ASSERT_EQ(a.tokens.size(), 24u);
    // with QASR_CUDA_PASS_GRAPHS=1 the row passes of the first run are recorded as CUDA graphs on a second thread while
    // its greedy loop runs, then replayed: the same tokens and log-probabilities, bit for bit, as the eager passes
    for (int rep = 0; rep < 2; ++rep) {
        const TranscriptionResult again = sg.run(audio, o);
        ASSERT_EQ(again.tokens.size(), a.tokens.size());
        for (size_t n = 0; n < a.tokens.size(); ++n) {
            EXPECT_EQ(again.tokens[n].id, a.tokens[n].id) << "run " << rep + 2 << " step " << n;
            EXPECT_EQ(again.tokens[n].logprob, a.tokens[n].logprob) << "run " << rep + 2 << " step " << n;
        }
    }
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

// A greedy loop that stops (EOS, a guard) leaves the step it queued past the stop running: neither greedy() nor the
// request's end waits for it, the session's next use does. Host-driven steps right after a stop continue the
// uninterrupted sequence, and the session, back from the pool with that step possibly still queued, decodes a full
// request exactly as before (tokens and log-probabilities bit for bit).
TEST(Cuda, AStoppedGreedyLoopLeavesTheSessionReadyForItsNextUse) {
    NEED_GPU_CHECKPOINT(dir, "tiny", 1);
    const auto cpu = Model::load(dir, "cpu"), gpu = Model::load(dir, "cuda");
    ASSERT_TRUE(gpu->device);
    Session sc(cpu);
    const Tensor rows = sc.encode(sc.mel(randv(16000 * 2, 23, 0.1f), 8000));
    const Prompt p = sc.prompt(rows.rows(), TranscribeOptions{});
    constexpr int kTokens = 16, kStop = 5;
    const auto decode = [&](DeviceSession& d, int stop_after, std::vector<int>* ids, std::vector<float>* lps) {
        d.prefill(p.ids, p.audio_begin, rows, 0);
        d.greedy(kTokens, [&](int id, float lp) {
            ids->push_back(id);
            lps->push_back(lp);
            return int(ids->size()) < stop_after;
        });
    };
    std::vector<int> ref;
    std::vector<float> ref_lp;
    DeviceSession* pooled = nullptr;
    {
        auto d = gpu->device->open();
        pooled = d->inner();
        decode(*d, kTokens, &ref, &ref_lp);
        ASSERT_EQ(ref.size(), size_t(kTokens));
    }
    {
        auto d = gpu->device->open(); // the pooled session again
        ASSERT_EQ(d->inner(), pooled);
        std::vector<int> ids;
        std::vector<float> lps;
        decode(*d, kStop, &ids, &lps); // stops with token kStop's step queued
        ASSERT_EQ(ids, std::vector<int>(ref.begin(), ref.begin() + kStop));
        EXPECT_EQ(d->length(), int64_t(p.ids.size()) + kStop);
        for (int n = kStop; n + 1 < kTokens; ++n) { // token n at the next position: the uninterrupted run's n+1
            const Tensor lg = d->step(ref[size_t(n)]);
            EXPECT_EQ(int(std::max_element(lg.ptr(), lg.ptr() + lg.cols()) - lg.ptr()), ref[size_t(n) + 1]) << "step " << n;
        }
        ids.clear();
        lps.clear();
        decode(*d, kStop, &ids, &lps); // and stops again: the request ends with the step queued
        ASSERT_EQ(ids.size(), size_t(kStop));
    }
    for (int rep = 0; rep < 2; ++rep) {
        auto d = gpu->device->open();
        ASSERT_EQ(d->inner(), pooled);
        std::vector<int> ids;
        std::vector<float> lps;
        decode(*d, kTokens, &ids, &lps);
        EXPECT_EQ(ids, ref) << "request " << rep;
        EXPECT_EQ(lps, ref_lp) << "request " << rep;
    }
}

// The conv stem runs its chunks in groups (CudaSession::kStemGroup, which bounds its scratch on the device): audio of
// two full groups and a short last chunk gives the CPU encoder's rows, every group's as close as one group's.
TEST(Cuda, LongAudioStemInChunkGroupsMatchesCpu) {
    NEED_GPU_CHECKPOINT(dir, "tiny", 1);
    const auto cpu = Model::load(dir, "cpu"), gpu = Model::load(dir, "cuda");
    Session sc(cpu), sg(gpu);
    const Tensor mel = sc.mel(randv(16000 * 75 + 4800, 18, 0.1f), 8000); // 7530 frames: 76 chunks
    const int64_t per_chunk = audio_token_count(cpu->hp.audio.chunk_frames(), cpu->hp.audio);
    const int64_t group = 32 * per_chunk; // rows of CudaSession::kStemGroup chunks
    const Tensor rc = sc.encode(mel), rg = sg.encode(mel);
    ASSERT_EQ(rc.shape, rg.shape);
    ASSERT_GT(rc.rows(), 2 * group);
    for (int64_t r0 = 0; r0 < rc.rows(); r0 += group) { // group by group
        const int64_t r1 = std::min(rc.rows(), r0 + group);
        const std::vector<float> c(rc.row(r0), rc.row(0) + r1 * rc.cols()), g(rg.row(r0), rg.row(0) + r1 * rg.cols());
        EXPECT_LT(rel_l2(g, c), 2e-2) << "rows " << r0 << ".." << r1;
    }
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
