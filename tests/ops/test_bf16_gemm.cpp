// The fused quantized AMX product (bf16_q_gemm_rows: MLX affine codes dequantized to bf16 inside the kernel, 32
// rows at a time, column chunks in L1) and its dequantization (bf16_q_dequant, vectorized per width) against their
// definitions on awkward sizes: odd M on both sides of the 16/32-row tile blocks, N not a multiple of 32, K with
// a tail after the 256-column chunks, every width and group size, partial row ranges. Also the 16 × 16 register
// transpose of the output through bf16_gemm_rows.
#include "backend/cpu/bf16_gemm.hpp"
#include "core/dtype.hpp"

#include "random_util.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

using namespace qasr;
using qasr::test::randn;

namespace {

struct Q {
    int64_t N, K;
    int bits, gs;
    std::vector<uint8_t> codes;
    std::vector<uint16_t> s, b;
    Q(int64_t n, int64_t k, int bits_, int gs_, uint32_t seed) : N(n), K(k), bits(bits_), gs(gs_) {
        std::mt19937 r(seed);
        codes.resize(size_t(n * k * bits / 8));
        for (auto& c : codes) c = uint8_t(r());
        const auto fs = randn(size_t(n * k / gs), seed + 1), fb = randn(size_t(n * k / gs), seed + 2);
        for (size_t i = 0; i < fs.size(); ++i) {
            s.push_back(f32_to_bf16(0.01f * fs[i]));
            b.push_back(f32_to_bf16(0.1f * fb[i]));
        }
    }
    uint32_t code(int64_t r, int64_t k) const { // MLX packing: little-endian bit stream per row
        const uint8_t* row = codes.data() + r * K * bits / 8;
        const int64_t o = k * bits;
        uint32_t v = 0;
        for (int i = 0; i < bits; ++i) v |= uint32_t((row[(o + i) >> 3] >> ((o + i) & 7)) & 1u) << i;
        return v;
    }
    // The definition: float32 fma(s, q, b) rounded to bf16 (nearest even).
    uint16_t w_bf16(int64_t r, int64_t k) const {
        const int64_t g = r * (K / gs) + k / gs;
        return f32_to_bf16(std::fma(bf16_to_f32(s[size_t(g)]), float(code(r, k)), bf16_to_f32(b[size_t(g)])));
    }
};

} // namespace

TEST(Bf16QuantGemm, DequantToBf16IsBitExact) {
    if (!cpu::bf16_gemm_available()) GTEST_SKIP() << "neither AMX nor AVX512-BF16 on this CPU";
    for (int bits : {4, 6, 8})
        for (int gs : {32, 64, 128}) {
            const Q q(7, 384, bits, gs, 21);
            const int64_t r0 = 2, r1 = 7, ldo = 384 + 32;
            std::vector<uint16_t> out(size_t((r1 - r0) * ldo), 0xdead);
            cpu::bf16_q_dequant(q.codes.data(), q.s.data(), q.b.data(), q.K, bits, gs, out.data(), ldo, r0, r1);
            for (int64_t r = r0; r < r1; ++r)
                for (int64_t k = 0; k < q.K; ++k)
                    ASSERT_EQ(out[size_t((r - r0) * ldo + k)], q.w_bf16(r, k)) << bits << "-bit gs " << gs << " r " << r << " k " << k;
        }
}

TEST(Bf16QuantGemm, MatchesDefinitionOnAwkwardSizes) {
    if (!cpu::bf16_gemm_available()) GTEST_SKIP() << "neither AMX nor AVX512-BF16 on this CPU";
    for (int bits : {4, 6, 8})
        for (int gs : {32, 64, 128})
            for (int64_t K : {128, 384, 640}) // 640 = 2 chunks of 256 + a 128 tail
                for (int64_t M : {1, 2, 3, 15, 16, 17, 31, 32, 33, 47, 70}) {
                    if (K % gs) continue;
                    const int64_t N = 77, n0 = 5, rows = 67; // blocks of 32, 32, 3 rows, starting mid-matrix
                    const Q q(N, K, bits, gs, uint32_t(100 + bits + gs + M));
                    const auto x = randn(size_t(M * K), uint32_t(7 + M));
                    std::vector<uint16_t> xb(cpu::bf16_packed_x_size(M, K));
                    cpu::Bf16PackedX px;
                    cpu::bf16_pack_x(x.data(), M, K, xb.data(), px);
                    const int64_t ldy = rows + 3;
                    std::vector<float> y(size_t(M * ldy), -7.0f);
                    cpu::bf16_q_gemm_rows(q.codes.data(), q.s.data(), q.b.data(), K, bits, gs, n0, rows, px, y.data(), ldy);
                    for (int64_t m = 0; m < M; ++m) {
                        for (int64_t r = 0; r < rows; ++r) {
                            double acc = 0, sc = 0;
                            for (int64_t k = 0; k < K; ++k) {
                                const double t = double(bf16_to_f32(f32_to_bf16(x[size_t(m * K + k)]))) *
                                                 bf16_to_f32(q.w_bf16(n0 + r, k));
                                acc += t;
                                sc += std::fabs(t);
                            }
                            ASSERT_NEAR(y[size_t(m * ldy + r)], acc, 1e-5 * sc + 1e-6)
                                << bits << "-bit gs " << gs << " K " << K << " M " << M << " m " << m << " r " << r;
                        }
                        for (int64_t r = rows; r < ldy; ++r) ASSERT_EQ(y[size_t(m * ldy + r)], -7.0f) << "wrote past the rows";
                    }
                }
}

TEST(Bf16QuantGemm, SmallRowsFloat32MatchesDefinition) {
    if (!cpu::bf16_gemm_available()) GTEST_SKIP() << "neither AMX nor AVX512-BF16 on this CPU";
    for (int bits : {4, 6, 8})
        for (int gs : {32, 64, 128})
            for (int64_t M : {1, 2, 3, 7, 8, 9, 17, 33}) {
                const int64_t K = 384, N = 41, n0 = 3, n1 = 38; // odd row range: a last single row
                const Q q(N, K, bits, gs, uint32_t(300 + bits + gs + M));
                const auto x = randn(size_t(M * K), uint32_t(9 + M));
                const int64_t ldy = 40;
                std::vector<float> y(size_t(M * ldy), -7.0f);
                cpu::q_gemm_f32_rows(q.codes.data(), q.s.data(), q.b.data(), K, bits, gs, n0, n1, x.data(), M, y.data(), ldy);
                for (int64_t m = 0; m < M; ++m) {
                    for (int64_t r = n0; r < n1; ++r) {
                        double acc = 0, sc = 0;
                        for (int64_t k = 0; k < K; ++k) {
                            const int64_t g = r * (K / gs) + k / gs;
                            const float w = std::fma(bf16_to_f32(q.s[size_t(g)]), float(q.code(r, k)), bf16_to_f32(q.b[size_t(g)]));
                            acc += double(x[size_t(m * K + k)]) * w;
                            sc += std::fabs(double(x[size_t(m * K + k)]) * w);
                        }
                        ASSERT_NEAR(y[size_t(m * ldy + r - n0)], acc, 2e-6 * sc + 1e-6)
                            << bits << "-bit gs " << gs << " M " << M << " m " << m << " r " << r;
                    }
                    for (int64_t r = n1 - n0; r < ldy; ++r) ASSERT_EQ(y[size_t(m * ldy + r)], -7.0f) << "wrote past the rows";
                }
            }
}

// bf16_gemm_rows over more than 32 x rows (weights copied in 256-column chunks into the aligned buffer, C tiles
// stored and reloaded between chunks) and over at most 32 (A tiles read where the weights lie), with the weights
// and the packed-x buffer both off 64-byte alignment as a checkpoint's tensors are: against the definition, K with
// a tail after the 256-column chunks and a K padded to 32, N not a multiple of 32. Each output row must not depend
// on how many x rows are multiplied with it (the streaming finals rely on it): row m of a product of M rows equals,
// bit for bit, the same row in a product of its first 16 rows.
TEST(Bf16QuantGemm, Bf16RowsUnalignedMatchDefinition) {
    if (!cpu::bf16_gemm_available()) GTEST_SKIP() << "neither AMX nor AVX512-BF16 on this CPU";
    for (int64_t K : {100, 640, 896})
        for (int64_t M : {1, 17, 33, 47, 70, 146}) {
            const int64_t N = 45, Kp = (K + 31) / 32 * 32, nb = (N + 31) / 32 * 32;
            const auto x = randn(size_t(M * K), uint32_t(31 + M)), w = randn(size_t(N * K), uint32_t(41 + K));
            std::vector<uint16_t> wstore(size_t(nb * Kp) + 64, 0);
            uint16_t* wb = wstore.data() + 4; // 8 bytes off whatever alignment the vector has
            if (reinterpret_cast<uintptr_t>(wb) % 64 == 0) wb += 4;
            for (int64_t r = 0; r < N; ++r)
                for (int64_t k = 0; k < K; ++k) wb[r * Kp + k] = f32_to_bf16(w[size_t(r * K + k)]);
            std::vector<uint16_t> xstore(cpu::bf16_packed_x_size(M, K) + 8);
            cpu::Bf16PackedX px;
            cpu::bf16_pack_x(x.data(), M, K, xstore.data() + 3, px); // the packer aligns inside its buffer
            ASSERT_EQ(reinterpret_cast<uintptr_t>(px.data) % 64, 0u);
            const int64_t ldy = N + 3;
            std::vector<float> y(size_t(M * ldy), -7.0f);
            cpu::bf16_gemm_rows(wb, Kp, nb, N, px, y.data(), ldy);
            for (int64_t m = 0; m < M; ++m) {
                for (int64_t n = 0; n < N; ++n) {
                    double acc = 0, sc = 0;
                    for (int64_t k = 0; k < K; ++k) {
                        const double t = double(bf16_to_f32(f32_to_bf16(x[size_t(m * K + k)]))) * bf16_to_f32(wb[n * Kp + k]);
                        acc += t;
                        sc += std::fabs(t);
                    }
                    ASSERT_NEAR(y[size_t(m * ldy + n)], acc, 1e-5 * sc + 1e-6) << "K " << K << " M " << M << " m " << m << " n " << n;
                }
                for (int64_t n = N; n < ldy; ++n) ASSERT_EQ(y[size_t(m * ldy + n)], -7.0f) << "wrote past the rows";
            }
            const int64_t M16 = std::min<int64_t>(M, 16);
            std::vector<uint16_t> xb16(cpu::bf16_packed_x_size(M16, K));
            cpu::Bf16PackedX px16;
            cpu::bf16_pack_x(x.data(), M16, K, xb16.data(), px16);
            std::vector<float> y16(size_t(M16 * ldy), -7.0f);
            cpu::bf16_gemm_rows(wb, Kp, nb, N, px16, y16.data(), ldy);
            for (int64_t m = 0; m < M16; ++m)
                for (int64_t n = 0; n < N; ++n)
                    ASSERT_EQ(y16[size_t(m * ldy + n)], y[size_t(m * ldy + n)]) << "K " << K << " M " << M << " m " << m << " n " << n;
        }
}

// The quantized product's rows likewise do not depend on the number of x rows (C tiles kept in registers for ≤ 32
// rows, stored and reloaded between column chunks for more).
TEST(Bf16QuantGemm, RowsDoNotDependOnM) {
    if (!cpu::bf16_gemm_available()) GTEST_SKIP() << "neither AMX nor AVX512-BF16 on this CPU";
    for (int bits : {4, 8}) {
        const int64_t K = 640, N = 70, n0 = 3, rows = 67, gs = 64;
        const Q q(N, K, bits, gs, uint32_t(500 + bits));
        const auto x = randn(size_t(146 * K), 77);
        std::vector<float> ref;
        for (int64_t M : {146, 60, 33, 16, 9, 8, 5, 2, 1}) {
            std::vector<uint16_t> xb(cpu::bf16_packed_x_size(M, K));
            cpu::Bf16PackedX px;
            cpu::bf16_pack_x(x.data(), M, K, xb.data(), px);
            std::vector<float> y(size_t(M * rows));
            cpu::bf16_q_gemm_rows(q.codes.data(), q.s.data(), q.b.data(), K, bits, int(gs), n0, rows, px, y.data(), rows);
            if (ref.empty()) ref = y;
            for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], ref[i]) << bits << "-bit M " << M << " at " << i;
        }
    }
}
