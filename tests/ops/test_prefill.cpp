// Operators of the quantized checkpoints' multi-row decoder pass (ops/vector_ops.hpp and the AMX causal attention
// behind ops::causal_attention over a bf16 cache), under each forced ISA (QASR_ISA; the AMX and AVX-512 kernels run
// under avx512, the others check the fallbacks).
#include "backend/cpu/bf16_gemm.hpp"
#include "backend/cpu/kernels.hpp"
#include "backend/cpu/tiling.hpp"
#include "core/dtype.hpp"
#include "ops/ops.hpp"
#include "ops/vector_ops.hpp"
#include "ops/weight.hpp"

#include "random_util.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace qasr;

namespace {

bool isa_missing() {
    const char* e = std::getenv("QASR_ISA");
    if (!e || !*e) return false;
    const std::string v = e;
    return !cpu::isa_supported(v == "avx2" ? cpu::Isa::Avx2 : v == "avx512" ? cpu::Isa::Avx512 : cpu::Isa::Portable);
}

} // namespace

// Causal attention of n queries over a head-major bf16 cache (cap > past + n, GQA 2:1) against a double-precision
// reference on the widened values: head sizes 64 and 128 (the AMX path) and 40 (sgemm), query counts with and
// without a 16-row tail, empty and long pasts, 1, 2 and 3 threads (3 > KV heads: one query head per unit). The
// AMX path splits q and p into two bf16 terms: ≈16 bits, within 2e-5 of the reference here (one bf16 term would be
// off by 2–4e-3).
TEST(Kernels, PrefillAttentionOverBf16CacheMatchesReference) {
    if (isa_missing()) GTEST_SKIP() << "forced ISA not supported here";
    const int64_t Hq = 4, Hkv = 2, group = Hq / Hkv;
    for (const int64_t hd : {64, 128, 40})
        for (const int threads : {1, 2, 3})
            for (const int64_t n : {2, 17, 48})
                for (const int64_t past : {0, 5, 70}) {
                    ops::set_num_threads(threads);
                    const int64_t total = past + n, cap = total + 9;
                    const auto kf = qasr::test::randn(size_t(Hkv * cap * hd), uint32_t(total * 3 + hd), 1.0f);
                    const auto vf = qasr::test::randn(kf.size(), uint32_t(total * 5 + hd), 1.0f);
                    std::vector<uint16_t> kb(kf.size()), vb(vf.size());
                    for (size_t i = 0; i < kf.size(); ++i)
                        kb[i] = f32_to_bf16(kf[i]), vb[i] = f32_to_bf16(vf[i]);
                    const auto q = qasr::test::randn(size_t(n * Hq * hd), uint32_t(n * 7 + past), 1.5f);
                    std::vector<float> o(size_t(n * Hq * hd), std::numeric_limits<float>::quiet_NaN());
                    ops::KvView kv;
                    kv.k = kb.data();
                    kv.v = vb.data();
                    kv.head_stride = cap * hd;
                    kv.pos_stride = hd;
                    kv.bf16 = true;
                    ops::causal_attention(q.data(), kv, o.data(), n, past, Hq, Hkv, hd);
                    const std::string what = "hd " + std::to_string(hd) + " threads " + std::to_string(threads) +
                                             " n " + std::to_string(n) + " past " + std::to_string(past);
                    double worst = 0;
                    for (int64_t h = 0; h < Hq; ++h)
                        for (int64_t i = 0; i < n; ++i) {
                            const int64_t len = past + i + 1, c = h / group;
                            std::vector<double> p(static_cast<size_t>(len));
                            double mx = -1e300, sum = 0;
                            for (int64_t j = 0; j < len; ++j) {
                                double s = 0;
                                for (int64_t d = 0; d < hd; ++d)
                                    s += double(q[size_t((i * Hq + h) * hd + d)]) *
                                         bf16_to_f32(kb[size_t((c * cap + j) * hd + d)]);
                                p[size_t(j)] = s / std::sqrt(double(hd));
                                mx = std::max(mx, p[size_t(j)]);
                            }
                            for (auto& x : p)
                                sum += (x = std::exp(x - mx));
                            for (int64_t d = 0; d < hd; ++d) {
                                double ref = 0;
                                for (int64_t j = 0; j < len; ++j)
                                    ref += p[size_t(j)] / sum * bf16_to_f32(vb[size_t((c * cap + j) * hd + d)]);
                                const double got = o[size_t((i * Hq + h) * hd + d)];
                                ASSERT_TRUE(std::isfinite(got)) << what;
                                worst = std::max(worst, std::fabs(got - ref) / (1 + std::fabs(ref)));
                            }
                        }
                    EXPECT_LE(worst, 2e-5) << what;
                }
    ops::set_num_threads(0);
}

// silu_mul_fast against ops::silu_mul: awkward lengths (vector tails, several chunks), gate values across the
// exp range including where it over/underflows, infinities and NaN.
TEST(Kernels, SiluMulFastMatchesSiluMul) {
    if (isa_missing()) GTEST_SKIP() << "forced ISA not supported here";
    for (const size_t n : {size_t(1), size_t(15), size_t(17), size_t(1000), size_t(70001)}) {
        auto g = qasr::test::randn(n, uint32_t(n), 8.0f);
        const auto up = qasr::test::randn(n, uint32_t(n + 1), 1.0f);
        const float specials[] = {-120.0f,
                                  -89.0f,
                                  -87.5f,
                                  0.0f,
                                  -0.0f,
                                  88.5f,
                                  100.0f,
                                  1e-30f,
                                  std::numeric_limits<float>::infinity(),
                                  -std::numeric_limits<float>::infinity(),
                                  std::numeric_limits<float>::quiet_NaN()};
        for (size_t i = 0; i < std::size(specials) && i < n; ++i)
            g[i * (n / std::size(specials) + 1) % n] = specials[i];
        auto ref = g, got = g;
        ops::silu_mul(ref.data(), up.data(), n);
        ops::silu_mul_fast(got.data(), up.data(), n);
        for (size_t i = 0; i < n; ++i) {
            const std::string what =
                "n " + std::to_string(n) + " at " + std::to_string(i) + " gate " + std::to_string(g[i]);
            if (std::isnan(ref[i]))
                EXPECT_TRUE(std::isnan(got[i])) << what;
            else if (std::isinf(ref[i]) || ref[i] == 0)
                EXPECT_EQ(got[i], ref[i]) << what;
            else
                EXPECT_NEAR(got[i], ref[i], 4e-7 * std::fabs(ref[i])) << what;
        }
    }
}

// The tile height that leaves the busiest thread the fewest rows (tiles dealt in order to the least busy thread), ties
// to the taller tile.
TEST(Kernels, BalancedTileRows) {
    using cpu::balanced_tile_rows;
    EXPECT_EQ(balanced_tile_rows(1024, 16, 128, 32), 64);  // 16 tiles, not 8 (half the team idle)
    EXPECT_EQ(balanced_tile_rows(1024, 8, 128, 32), 128);  // 8 tiles: one each
    EXPECT_EQ(balanced_tile_rows(1024, 2, 128, 32), 128);  // every height gives 512 rows: the tallest
    EXPECT_EQ(balanced_tile_rows(896, 2, 128, 32), 64);    // 14 tiles, 448 rows each (128: 7 tiles, 512)
    EXPECT_EQ(balanced_tile_rows(896, 16, 128, 32), 64);   // 64 rows each (14 tiles; 32-row tiles tie)
    EXPECT_EQ(balanced_tile_rows(3584, 16, 128, 32), 32);  // 112 tiles, 7 each: 224 rows (64 and 128: 256)
    EXPECT_EQ(balanced_tile_rows(3072, 16, 64, 32), 64);   // 48 tiles, 3 each
    const int64_t qkv[] = {2048, 1024, 1024};
    EXPECT_EQ(balanced_tile_rows(qkv, 3, 16, 128, 32), 128); // 32 tiles, 2 each
    EXPECT_EQ(balanced_tile_rows(qkv, 3, 12, 128, 32), 32);  // 352 rows (128: 384)
    const int64_t odd[] = {200, 72, 131}; // LinearMultiRowsEqualsOneLinearPerMatrix's matrices
    EXPECT_EQ(balanced_tile_rows(odd, 3, 1, 128, 32), 128); // one thread: every height is all 403 rows
    EXPECT_EQ(balanced_tile_rows(odd, 3, 2, 128, 32), 96);  // 203 rows (128: 256)
    EXPECT_EQ(balanced_tile_rows(odd, 3, 3, 128, 32), 64);
    EXPECT_EQ(balanced_tile_rows(odd, 3, 16, 128, 32), 32);
    EXPECT_EQ(balanced_tile_rows(20, 4, 128, 32), 128);    // fewer rows than any tile: one tile
    EXPECT_EQ(balanced_tile_rows(151936, 16, 128, 32), 128); // an LM head: 1187 tiles, balanced enough as they are
    EXPECT_EQ(balanced_tile_rows(1000, 0, 128, 32), 128);  // no team: one thread
}

// linear_multi_rows gives what ops::linear gives on each matrix, bit for bit (the decoder's bf16 scope; x packed
// once, one tile list over all matrices): 8- and 4-bit matrices of odd row counts (tiles of 128 rows with a tail),
// row counts of x on both sides of the 32-row blocking, 1, 2, 3 and 16 threads (tiles of 128, 96, 64 and 32 rows:
// cpu/tiling.hpp).
TEST(Kernels, LinearMultiRowsEqualsOneLinearPerMatrix) {
    if (isa_missing()) GTEST_SKIP() << "forced ISA not supported here";
    const int64_t K = 256;
    struct Mat {
        std::vector<uint8_t> codes;
        std::vector<uint16_t> s, b;
        WeightMatrix w;
    };
    std::vector<Mat> mats(3);
    const int64_t rows[] = {200, 72, 131};
    const int bits[] = {8, 4, 8};
    std::mt19937 r(11);
    for (size_t i = 0; i < mats.size(); ++i) {
        Mat& m = mats[i];
        m.codes.resize(size_t(rows[i] * K * bits[i] / 8));
        for (auto& c : m.codes)
            c = uint8_t(r());
        const auto sf = qasr::test::randn(size_t(rows[i] * K / 64), uint32_t(i + 1), 0.01f),
                   bf = qasr::test::randn(sf.size(), uint32_t(i + 9), 0.1f);
        for (size_t j = 0; j < sf.size(); ++j)
            m.s.push_back(f32_to_bf16(sf[j])), m.b.push_back(f32_to_bf16(bf[j]));
        m.w.fmt = WFormat::Q;
        m.w.rows = rows[i];
        m.w.cols = K;
        m.w.bits = bits[i];
        m.w.group_size = 64;
        m.w.data = m.codes.data();
        m.w.scales = m.s.data();
        m.w.biases = m.b.data();
    }
    ops::Bf16GemmScope scope(true);
    for (const int threads : {1, 2, 3, 16})
        for (const int64_t M : {2, 17, 33, 70}) {
            ops::set_num_threads(threads);
            const auto x = qasr::test::randn(size_t(M * K), uint32_t(M), 1.0f);
            std::vector<const WeightMatrix*> Ws;
            std::vector<std::vector<float>> ref(mats.size()), got(mats.size());
            std::vector<float*> ys;
            for (size_t i = 0; i < mats.size(); ++i) {
                Ws.push_back(&mats[i].w);
                ref[i].resize(size_t(M * rows[i]));
                got[i].assign(size_t(M * rows[i]), std::numeric_limits<float>::quiet_NaN());
                ops::linear(x.data(), M, mats[i].w, nullptr, ref[i].data());
                ys.push_back(got[i].data());
            }
            ops::linear_multi_rows(x.data(), M, Ws.data(), ys.data(), Ws.size());
            for (size_t i = 0; i < mats.size(); ++i)
                EXPECT_EQ(got[i], ref[i]) << "matrix " << i << " M " << M << " threads " << threads;
        }
    ops::set_num_threads(0);
}

// bf16 matrices in linear_multi_rows (the encoder's q/k/v): whole 32-row blocks join the one tile list, read in
// place, beside a quantized matrix; a matrix of a partial block sends the call to one ops::linear per matrix. Either
// way each output equals ops::linear's, bit for bit.
TEST(Kernels, LinearMultiRowsTakesBf16MatricesAlike) {
    if (isa_missing()) GTEST_SKIP() << "forced ISA not supported here";
    const int64_t K = 256;
    std::vector<std::vector<uint16_t>> bf(3);
    std::vector<WeightMatrix> w(4);
    const int64_t bf_rows[] = {96, 64, 100};
    for (size_t i = 0; i < 3; ++i) {
        const auto f = qasr::test::randn(size_t(bf_rows[i] * K), uint32_t(40 + i), 0.05f);
        for (const float v : f) bf[i].push_back(f32_to_bf16(v));
        w[i].fmt = WFormat::BF16;
        w[i].rows = bf_rows[i];
        w[i].cols = K;
        w[i].data = bf[i].data();
    }
    std::mt19937 r(5);
    std::vector<uint8_t> codes(size_t(131 * K));
    for (auto& c : codes) c = uint8_t(r());
    std::vector<uint16_t> sc, bi;
    const auto sf = qasr::test::randn(size_t(131 * K / 64), 3, 0.01f), bff = qasr::test::randn(sf.size(), 4, 0.1f);
    for (size_t j = 0; j < sf.size(); ++j) sc.push_back(f32_to_bf16(sf[j])), bi.push_back(f32_to_bf16(bff[j]));
    w[3].fmt = WFormat::Q;
    w[3].rows = 131;
    w[3].cols = K;
    w[3].bits = 8;
    w[3].group_size = 64;
    w[3].data = codes.data();
    w[3].scales = sc.data();
    w[3].biases = bi.data();
    ops::Bf16GemmScope scope(true);
    for (const auto& pick : {std::vector<size_t>{0, 3, 1}, std::vector<size_t>{0, 2, 3}})
        for (const int threads : {1, 2, 16})
            for (const int64_t M : {2, 33, 70}) {
                ops::set_num_threads(threads);
                const auto x = qasr::test::randn(size_t(M * K), uint32_t(M + 7), 1.0f);
                std::vector<const WeightMatrix*> Ws;
                std::vector<std::vector<float>> ref, got;
                std::vector<float*> ys;
                for (const size_t i : pick) {
                    Ws.push_back(&w[i]);
                    ref.emplace_back(size_t(M * w[i].rows));
                    got.emplace_back(size_t(M * w[i].rows), std::numeric_limits<float>::quiet_NaN());
                    ops::linear(x.data(), M, w[i], nullptr, ref.back().data());
                }
                for (auto& g : got) ys.push_back(g.data());
                ops::linear_multi_rows(x.data(), M, Ws.data(), ys.data(), Ws.size());
                for (size_t i = 0; i < pick.size(); ++i)
                    EXPECT_EQ(got[i], ref[i]) << "matrix " << pick[i] << " M " << M << " threads " << threads;
            }
    ops::set_num_threads(0);
}

// linear_swiglu_rows is linear_multi_rows on gate and up followed by silu_mul_fast, bit for bit (under avx512 with
// AMX the fused kernel, otherwise that very sequence): 8- and 4-bit pairs, group sizes 64 and 32, K = 256 and 96
// (a partial column chunk), row counts with a tail of the 64-row tiles and of the 32-row blocks, x row counts on
// both sides of the 32-row blocking (and 1: the matrix-vector path), 1, 2, 3 and 16 threads.
TEST(Kernels, LinearSwigluRowsEqualsProductsThenSiluMulFast) {
    if (isa_missing()) GTEST_SKIP() << "forced ISA not supported here";
    struct Case {
        int64_t N, K;
        int bits, gs;
    };
    std::mt19937 r(29);
    for (const Case c : {Case{200, 256, 8, 64}, Case{72, 256, 4, 64}, Case{45, 96, 8, 32}}) {
        std::vector<uint8_t> codes[2];
        std::vector<uint16_t> s[2], b[2];
        WeightMatrix w[2];
        for (int i = 0; i < 2; ++i) {
            codes[i].resize(size_t(c.N * c.K * c.bits / 8));
            for (auto& v : codes[i])
                v = uint8_t(r());
            const auto sf = qasr::test::randn(size_t(c.N * c.K / c.gs), uint32_t(c.N + i), 0.01f),
                       bf = qasr::test::randn(sf.size(), uint32_t(c.N + i + 7), 0.1f);
            for (size_t j = 0; j < sf.size(); ++j)
                s[i].push_back(f32_to_bf16(sf[j])), b[i].push_back(f32_to_bf16(bf[j]));
            w[i].fmt = WFormat::Q;
            w[i].rows = c.N;
            w[i].cols = c.K;
            w[i].bits = c.bits;
            w[i].group_size = c.gs;
            w[i].data = codes[i].data();
            w[i].scales = s[i].data();
            w[i].biases = b[i].data();
        }
        ops::Bf16GemmScope scope(true);
        for (const int threads : {1, 2, 3, 16})
            for (const int64_t M : {1, 2, 17, 33, 70}) {
                ops::set_num_threads(threads);
                const auto x = qasr::test::randn(size_t(M * c.K), uint32_t(M * 3 + c.N), 1.0f);
                std::vector<float> ref(size_t(M * c.N)), up(ref.size()),
                    got(ref.size() + 1, std::numeric_limits<float>::quiet_NaN());
                const WeightMatrix* Ws[2] = {&w[0], &w[1]};
                float* ys[2] = {ref.data(), up.data()};
                ops::linear_multi_rows(x.data(), M, Ws, ys, 2);
                ops::silu_mul_fast(ref.data(), up.data(), ref.size());
                ops::linear_swiglu_rows(x.data(), M, w[0], w[1], got.data());
                EXPECT_TRUE(std::isnan(got.back())) << "wrote past the end";
                got.pop_back();
                EXPECT_EQ(got, ref) << "N " << c.N << " K " << c.K << " bits " << c.bits << " M " << M << " threads "
                                    << threads;
            }
    }
    ops::set_num_threads(0);
}

// The row-parallel pieces of the multi-row pass equal the op sequences they replace, bit for bit, and put() sees
// every row once: add + copy + rms_norm (with and without the add and the norm), q/k head norms + RoPE.
TEST(Kernels, RowFusedNormsEqualOpSequence) {
    if (isa_missing()) GTEST_SKIP() << "forced ISA not supported here";
    for (const int threads : {1, 2})
        for (const int64_t n : {1, 3, 40}) {
            ops::set_num_threads(threads);
            for (const int64_t d : {100, 1024}) {
                const auto x0 = qasr::test::randn(size_t(n * d), uint32_t(n + d), 2.0f), a = qasr::test::randn(x0.size(), uint32_t(n * d), 1.0f);
                const auto w = qasr::test::randn(size_t(d), uint32_t(d), 1.0f);
                for (const bool with_add : {false, true})
                    for (const bool with_norm : {false, true}) {
                        std::vector<float> xr = x0, ur(x0.size()), xg = x0, ug(x0.size(), -1.0f);
                        if (with_add) ops::add(xr.data(), a.data(), xr.size());
                        if (with_norm) {
                            ur = xr;
                            ops::rms_norm(ur.data(), n, d, w.data(), 1e-6f);
                        }
                        ops::add_rms_norm_rows(xg.data(), with_add ? a.data() : nullptr, with_norm ? ug.data() : nullptr,
                                               n, d, w.data(), 1e-6f);
                        EXPECT_EQ(xg, xr) << n << " " << d;
                        if (with_norm) {
                            EXPECT_EQ(ug, ur) << n << " " << d;
                        }
                    }
            }
            const int64_t Hq = 4, Hkv = 2, hd = 64;
            auto q = qasr::test::randn(size_t(n * Hq * hd), uint32_t(n), 3.0f), k = qasr::test::randn(size_t(n * Hkv * hd), uint32_t(n + 1), 3.0f);
            const auto qw = qasr::test::randn(size_t(hd), 5, 1.0f), kw = qasr::test::randn(size_t(hd), 6, 1.0f);
            std::vector<float> inv(size_t(hd / 2)), cs(size_t(n * hd));
            for (int64_t i = 0; i < hd / 2; ++i) inv[size_t(i)] = float(std::pow(1e6, -2.0 * double(i) / double(hd)));
            ops::rope_table(n, hd, 37, inv.data(), cs.data());
            auto qr = q, kr = k;
            ops::rms_norm(qr.data(), n * Hq, hd, qw.data(), 1e-6f);
            ops::rms_norm(kr.data(), n * Hkv, hd, kw.data(), 1e-6f);
            ops::rope_cs(qr.data(), n, Hq, hd, cs.data());
            ops::rope_cs(kr.data(), n, Hkv, hd, cs.data());
            std::vector<int> seen(size_t(n), 0);
            ops::qk_norm_rope_rows(q.data(), k.data(), n, Hq, Hkv, hd, qw.data(), kw.data(), 1e-6f, cs.data(),
                                   [](void* ctx, int64_t t) {
#pragma omp atomic
                                       ++(*static_cast<std::vector<int>*>(ctx))[size_t(t)];
                                   },
                                   &seen);
            EXPECT_EQ(q, qr) << n;
            EXPECT_EQ(k, kr) << n;
            EXPECT_EQ(seen, std::vector<int>(size_t(n), 1)) << n;
        }
    ops::set_num_threads(0);
}

// In the bf16 scope (quantized checkpoints) the row norms of the multi-row pass take the AVX-512 kernel where that
// table is active (16 partial sums): within 2 ulp of ops::rms_norm for widths with and without vector tails;
// outside the scope (float checkpoints) they stay bit for bit (RowFusedNormsEqualOpSequence).
TEST(Kernels, RowNormsInBf16ScopeMatchRmsNorm) {
    if (isa_missing()) GTEST_SKIP() << "forced ISA not supported here";
    ops::Bf16GemmScope scope(true);
    for (const int64_t d : {1, 7, 16, 17, 100, 128, 1024})
        for (const float sd : {1e-3f, 1.0f, 300.0f}) {
            const int64_t n = 5;
            const auto x0 = qasr::test::randn(size_t(n * d), uint32_t(d * 13) + uint32_t(sd), sd);
            const auto w = qasr::test::randn(size_t(d), uint32_t(d), 1.0f);
            std::vector<float> ref = x0, x = x0, u(x0.size());
            ops::rms_norm(ref.data(), n, d, w.data(), 1e-6f);
            ops::add_rms_norm_rows(x.data(), nullptr, u.data(), n, d, w.data(), 1e-6f);
            EXPECT_EQ(x, x0);
            for (size_t i = 0; i < u.size(); ++i)
                ASSERT_NEAR(u[i], ref[i], 2.4e-7 * std::fabs(ref[i])) << "d " << d << " sd " << sd << " at " << i;
            // the head norms alike (n rows of 2 + 1 heads of width d)
            auto q = qasr::test::randn(size_t(n * 2 * d), uint32_t(d) + 5, sd), k = qasr::test::randn(size_t(n * d), uint32_t(d) + 6, sd);
            if (d % 2 == 0) {
                std::vector<float> inv(size_t(d / 2), 0.0f), cs(size_t(n * d));
                ops::rope_table(n, d, 0, inv.data(), cs.data()); // angle 0: cos 1, sin 0 (the rotation is exact)
                auto qr = q, kr = k;
                ops::rms_norm(qr.data(), n * 2, d, w.data(), 1e-6f);
                ops::rms_norm(kr.data(), n, d, w.data(), 1e-6f);
                ops::qk_norm_rope_rows(q.data(), k.data(), n, 2, 1, d, w.data(), w.data(), 1e-6f, cs.data(), nullptr,
                                       nullptr);
                for (size_t i = 0; i < q.size(); ++i)
                    ASSERT_NEAR(q[i], qr[i], 2.4e-7 * std::fabs(qr[i])) << "q d " << d << " at " << i;
                for (size_t i = 0; i < k.size(); ++i)
                    ASSERT_NEAR(k[i], kr[i], 2.4e-7 * std::fabs(kr[i])) << "k d " << d << " at " << i;
            }
        }
}

#ifdef QASR_TEST_BF16_ENGINES // x86-64 only (bf16_gemm.cpp)
// bf16_pack_x (on the team for large x) writes the tile layout of its definition: tile (mb, kb) row p holds, for the
// 16 x rows of block mb, bf16(x[m][32kb + 2p]) and bf16(x[m][32kb + 2p + 1]) (zero past M and K); the same bytes
// with 1 and 2 threads.
TEST(Kernels, Bf16PackXLayoutOnTheTeam) {
    if (isa_missing()) GTEST_SKIP() << "forced ISA not supported here";
    if (!cpu::bf16_gemm_available()) GTEST_SKIP() << "neither AMX nor AVX512-BF16 on this CPU";
    for (const auto& [M, K] : {std::pair<int64_t, int64_t>{150, 1000}, {17, 3072}, {3, 64}}) {
        const auto x = qasr::test::randn(size_t(M * K), uint32_t(M + K), 2.0f);
        std::vector<uint16_t> b1(cpu::bf16_packed_x_size(M, K)), b2(b1.size());
        cpu::Bf16PackedX p1, p2;
        ops::set_num_threads(1);
        cpu::bf16_pack_x(x.data(), M, K, b1.data(), p1);
        ops::set_num_threads(2);
        cpu::bf16_pack_x(x.data(), M, K, b2.data(), p2);
        ops::set_num_threads(0);
        ASSERT_EQ(p1.Mp, p2.Mp);
        const int64_t KB = p1.Kp / 32;
        EXPECT_EQ(0, std::memcmp(p1.data, p2.data, size_t(p1.Mp * p1.Kp) * 2)) << M << " " << K;
        for (int64_t m = 0; m < p1.Mp; ++m)
            for (int64_t k = 0; k < p1.Kp; ++k) {
                const int64_t mb = m / 16, kb = k / 32, p = (k % 32) / 2;
                const uint16_t got = p2.data[(mb * KB + kb) * 512 + p * 32 + (m % 16) * 2 + (k % 2)];
                const uint16_t want = m < M && k < K ? f32_to_bf16(x[size_t(m * K + k)]) : uint16_t(0);
                ASSERT_EQ(got, want) << "M " << M << " K " << K << " m " << m << " k " << k;
            }
    }
}
#endif

// The encoder's windowed attention against a double-precision reference: float32 scope (ops::softmax_row) and the
// bf16 scope of quantized checkpoints (the table's softmax, vector exp); windows with a short last one, 1 and 2
// threads. Outside the bf16 scope the result does not depend on the table.
TEST(Kernels, WindowedAttentionMatchesReference) {
    if (isa_missing()) GTEST_SKIP() << "forced ISA not supported here";
    const int64_t heads = 3, hd = 64, D = heads * hd;
    for (const int threads : {1, 2})
        for (const int64_t n : {5, 37})
            for (const int64_t window : {16, 104}) {
                ops::set_num_threads(threads);
                const auto q = qasr::test::randn(size_t(n * D), uint32_t(n + window), 1.0f), k = qasr::test::randn(q.size(), uint32_t(n * 7), 1.0f),
                           v = qasr::test::randn(q.size(), uint32_t(n * 11), 1.0f);
                std::vector<double> ref(q.size());
                for (int64_t h = 0; h < heads; ++h)
                    for (int64_t i = 0; i < n; ++i) {
                        const int64_t w0 = i / window * window, w1 = std::min(n, w0 + window);
                        std::vector<double> p(size_t(w1 - w0));
                        double mx = -1e300, sum = 0;
                        for (int64_t j = w0; j < w1; ++j) {
                            double dot = 0;
                            for (int64_t c = 0; c < hd; ++c) dot += double(q[size_t(i * D + h * hd + c)]) * k[size_t(j * D + h * hd + c)];
                            p[size_t(j - w0)] = dot / std::sqrt(double(hd));
                            mx = std::max(mx, p[size_t(j - w0)]);
                        }
                        for (double& x : p) sum += (x = std::exp(x - mx));
                        for (int64_t c = 0; c < hd; ++c) {
                            double acc = 0;
                            for (int64_t j = w0; j < w1; ++j) acc += p[size_t(j - w0)] / sum * v[size_t(j * D + h * hd + c)];
                            ref[size_t(i * D + h * hd + c)] = acc;
                        }
                    }
                for (const bool bf16 : {false, true}) {
                    ops::Bf16GemmScope scope(bf16);
                    std::vector<float> o(q.size(), std::numeric_limits<float>::quiet_NaN());
                    ops::windowed_attention(q.data(), k.data(), v.data(), o.data(), n, heads, hd, window);
                    for (size_t i = 0; i < o.size(); ++i)
                        ASSERT_NEAR(o[i], ref[i], 2e-6 + 2e-6 * std::fabs(ref[i]))
                            << "n " << n << " window " << window << " bf16 " << bf16 << " at " << i;
                }
            }
    ops::set_num_threads(0);
}

// round_to_bf16 is f32_to_bf16 bit for bit: ties to even both ways, denormals, infinities, NaN (kept quiet).
TEST(Kernels, RoundToBf16IsExact) {
    if (isa_missing()) GTEST_SKIP() << "forced ISA not supported here";
    std::vector<uint32_t> bits = {0x3f808000u, 0x3f818000u, 0x3f80c000u, 0x00008000u, 0x00018000u,
                                  0x807fffffu, 0x7f7fffffu, 0x7f800000u, 0xff800000u, 0x7f800001u,
                                  0xffc00001u, 0x7fbfffffu, 0u};
    std::mt19937 r(3);
    while (bits.size() < 1000 + 13)
        bits.push_back(uint32_t(r()));
    for (const size_t n : {size_t(1), size_t(13), size_t(16), size_t(31), bits.size()}) {
        std::vector<float> x(n);
        std::memcpy(x.data(), bits.data(), n * 4);
        std::vector<uint16_t> y(n, 0xdead);
        ops::round_to_bf16(x.data(), y.data(), n);
        for (size_t i = 0; i < n; ++i)
            EXPECT_EQ(y[i], f32_to_bf16(x[i])) << "n " << n << " bits " << std::hex << bits[i];
    }
}
