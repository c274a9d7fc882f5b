// Every SIMD kernel table against the portable one on random inputs of awkward sizes (odd lengths, tails,
// partial row ranges), plus ops::linear on WeightMatrix (M = 1 and M > 1, every format) against a float64
// reference, and the AMX bf16 GEMM where the CPU has it. The ctest entries run this binary once per forced ISA.
#include "backend/cpu/blas_core.hpp"
#include "backend/cpu/bf16_gemm.hpp"
#include "backend/cpu/kernels.hpp"
#include "core/dtype.hpp"
#include "model/decoder.hpp"
#include "ops/ops.hpp"
#include "ops/weight.hpp"

#include "random_util.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <limits>
#include <memory>
#include <random>
#include <vector>

using namespace qasr;
using qasr::test::randn;
using cpu::Isa;

namespace {

std::vector<const cpu::KernelTable*> simd_tables() {
    std::vector<const cpu::KernelTable*> t;
    for (Isa i : {Isa::Avx2, Isa::Avx512})
        if (cpu::isa_supported(i)) t.push_back(i == Isa::Avx2 ? cpu::avx2_kernels() : cpu::avx512_kernels());
    return t;
}

std::vector<uint16_t> rand_bf16(size_t n, uint32_t seed, float sd) {
    const auto f = randn(n, seed, sd);
    std::vector<uint16_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = f32_to_bf16(f[i]);
    return v;
}

std::vector<uint8_t> rand_bytes(size_t n, uint32_t seed) {
    std::mt19937 r(seed);
    std::vector<uint8_t> v(n);
    for (auto& b : v) b = uint8_t(r());
    return v;
}

// |a - b| ≤ tol · (scale of the terms), scale = Σ|w·x| computed by the caller.
void expect_close(float a, float b, double scale, double tol, const std::string& what) {
    EXPECT_LE(std::fabs(double(a) - double(b)), tol * scale + 1e-6) << what << ": " << a << " vs " << b;
}

struct QMat {
    int64_t N, K;
    int bits, gs;
    std::vector<uint8_t> codes;
    std::vector<uint16_t> s, b;
    QMat(int64_t n, int64_t k, int bits_, int gs_, uint32_t seed)
        : N(n), K(k), bits(bits_), gs(gs_), codes(rand_bytes(size_t(n * k * bits_ / 8), seed)),
          s(rand_bf16(size_t(n * k / gs_), seed + 1, 0.01f)), b(rand_bf16(size_t(n * k / gs_), seed + 2, 0.1f)) {}
    WeightMatrix view() const {
        WeightMatrix w;
        w.fmt = WFormat::Q;
        w.rows = N;
        w.cols = K;
        w.bits = bits;
        w.group_size = gs;
        w.data = codes.data();
        w.scales = s.data();
        w.biases = b.data();
        return w;
    }
};

// The ctest entries force an ISA with QASR_ISA; on a CPU without it the kernel tests are skipped.
bool forced_isa_missing() {
    const char* e = std::getenv("QASR_ISA");
    if (!e || !*e) return false;
    const std::string v = e;
    const Isa i = v == "avx2" ? Isa::Avx2 : v == "avx512" ? Isa::Avx512 : Isa::Portable;
    return !cpu::isa_supported(i);
}
#define SKIP_IF_FORCED_ISA_MISSING() \
    if (forced_isa_missing()) GTEST_SKIP() << "QASR_ISA=" << std::getenv("QASR_ISA") << " is not supported here"

} // namespace

TEST(Kernels, QuantizedGemvMatchesPortable) {
    SKIP_IF_FORCED_ISA_MISSING();
    const auto& P = cpu::portable_kernels();
    for (const cpu::KernelTable* T : simd_tables())
        for (int bits : {4, 6, 8})
            for (int gs : {32, 64, 128})
                for (int64_t groups : {1, 3, 5, 17}) // 17: a full vector of 16 groups' scales and a tail
                    for (int64_t N : {1, 7, 33}) {
                        const int64_t K = gs * groups;
                        const QMat q(N, K, bits, gs, uint32_t(bits * 1000 + gs * 10 + groups + N));
                        const auto x = randn(size_t(K), 9);
                        std::vector<float> xp(size_t(K), 0.0f), xs(size_t(groups), 0.0f), xq(size_t(K), 0.0f), xqs(size_t(groups), 0.0f);
                        P.q_prep(x.data(), K, bits, gs, xp.data(), xs.data());
                        T->q_prep(x.data(), K, bits, gs, xq.data(), xqs.data());
                        std::vector<float> yr(size_t(N), -1.0f), ys(size_t(N), -1.0f), deq(size_t(N * K));
                        P.q_gemv(q.codes.data(), q.s.data(), q.b.data(), K, bits, gs, xp.data(), xs.data(), yr.data(), 0, N);
                        // partial ranges: [0, N/2) then [N/2, N)
                        T->q_gemv(q.codes.data(), q.s.data(), q.b.data(), K, bits, gs, xq.data(), xqs.data(), ys.data(), 0, N / 2);
                        T->q_gemv(q.codes.data(), q.s.data(), q.b.data(), K, bits, gs, xq.data(), xqs.data(), ys.data(), N / 2, N);
                        P.q_dequant(q.codes.data(), q.s.data(), q.b.data(), K, bits, gs, deq.data(), 0, N);
                        for (int64_t r = 0; r < N; ++r) {
                            double scale = 0;
                            for (int64_t k = 0; k < K; ++k) scale += std::fabs(deq[size_t(r * K + k)] * x[size_t(k)]);
                            expect_close(ys[size_t(r)], yr[size_t(r)], scale, 2e-4, // int16 x on VNNI
                                         std::string(T->name) + " q" + std::to_string(bits) + " gs" + std::to_string(gs) +
                                             " K" + std::to_string(K) + " row " + std::to_string(r));
                        }
                        std::vector<float> dq2(size_t(N * K));
                        T->q_dequant(q.codes.data(), q.s.data(), q.b.data(), K, bits, gs, dq2.data(), 0, N);
                        EXPECT_EQ(dq2, deq) << T->name << " dequant q" << bits;
                    }
}

TEST(Kernels, FloatGemvAndVectorOpsMatchPortable) {
    SKIP_IF_FORCED_ISA_MISSING();
    const auto& P = cpu::portable_kernels();
    for (const cpu::KernelTable* T : simd_tables())
        for (int64_t K : {1, 3, 15, 16, 17, 31, 33, 63, 100, 1025}) {
            const int64_t N = 5;
            const auto wf = randn(size_t(N * K), uint32_t(K));
            const auto wb = rand_bf16(size_t(N * K), uint32_t(K + 1), 1.0f);
            const auto x = randn(size_t(K), uint32_t(K + 2));
            std::vector<float> a(size_t(N), 0.0f), b(size_t(N), 0.0f);
            P.f32_gemv(wf.data(), K, x.data(), a.data(), 0, N);
            T->f32_gemv(wf.data(), K, x.data(), b.data(), 1, N);
            T->f32_gemv(wf.data(), K, x.data(), b.data(), 0, 1);
            for (int64_t r = 0; r < N; ++r) {
                double sc = 0;
                for (int64_t k = 0; k < K; ++k) sc += std::fabs(wf[size_t(r * K + k)] * x[size_t(k)]);
                expect_close(b[size_t(r)], a[size_t(r)], sc, 1e-6, std::string(T->name) + " f32 K" + std::to_string(K));
            }
            P.bf16_gemv(wb.data(), K, x.data(), a.data(), 0, N);
            T->bf16_gemv(wb.data(), K, x.data(), b.data(), 0, N);
            for (int64_t r = 0; r < N; ++r) {
                double sc = 0;
                for (int64_t k = 0; k < K; ++k) sc += std::fabs(bf16_to_f32(wb[size_t(r * K + k)]) * x[size_t(k)]);
                expect_close(b[size_t(r)], a[size_t(r)], sc, 1e-6, std::string(T->name) + " bf16 K" + std::to_string(K));
            }
            std::vector<float> c1(size_t(K), 0.0f), c2(size_t(K), 0.0f);
            P.bf16_to_f32(wb.data(), c1.data(), size_t(K));
            T->bf16_to_f32(wb.data(), c2.data(), size_t(K));
            EXPECT_EQ(c1, c2);
            double sc = 0, ss = 0;
            for (int64_t k = 0; k < K; ++k) sc += std::fabs(wf[size_t(k)] * x[size_t(k)]), ss += std::fabs(x[size_t(k)]);
            expect_close(T->dot(wf.data(), x.data(), K), P.dot(wf.data(), x.data(), K), sc, 1e-6, "dot");
            expect_close(T->sum(x.data(), K), P.sum(x.data(), K), ss, 1e-6, "sum");
            std::vector<float> y1(x), y2(x);
            P.axpy(0.37f, wf.data(), y1.data(), K);
            T->axpy(0.37f, wf.data(), y2.data(), K);
            for (int64_t k = 0; k < K; ++k) EXPECT_NEAR(y1[size_t(k)], y2[size_t(k)], 1e-6 * (1 + std::fabs(y1[size_t(k)])));
        }
}

// The AVX-512 VNNI preparation of x (int16 per group with a float scale, group sums) against its definition:
// scale = max|x_g| / 32767, codes lrint(x / scale) (the even columns then the odd ones per 64), sums in column
// order.
TEST(Kernels, Int16PrepMatchesDefinition) {
    SKIP_IF_FORCED_ISA_MISSING();
#if defined(__x86_64__) || defined(__i386__)
    if (!cpu::isa_supported(Isa::Avx512) || !__builtin_cpu_supports("avx512vnni")) GTEST_SKIP() << "no AVX512-VNNI";
#else
    GTEST_SKIP() << "AVX512-VNNI: x86 only";
#endif
    const cpu::KernelTable* T = cpu::avx512_kernels();
    for (int bits : {4, 6, 8})
        for (int gs : {64, 128})
            for (int64_t groups : {1, 5, 16, 17, 40}) {
                const int64_t K = gs * groups;
                auto x = randn(size_t(K), uint32_t(K + bits));
                for (int64_t j = 0; j < gs; ++j) x[size_t(j)] = 0.0f; // an all-zero group
                std::vector<float> xp(size_t(K), 0.0f), xs(size_t(groups), 0.0f);
                T->q_prep(x.data(), K, bits, gs, xp.data(), xs.data());
                const int16_t* xi = reinterpret_cast<const int16_t*>(xp.data());
                for (int64_t g = 0; g < groups; ++g) {
                    float s = 0, m = 0;
                    for (int j = 0; j < gs; ++j) s += x[size_t(g * gs + j)], m = std::max(m, std::fabs(x[size_t(g * gs + j)]));
                    const float sc = m > 0 ? m / 32767.0f : 1.0f, inv = 1.0f / sc;
                    EXPECT_EQ(xs[size_t(g)], s);
                    EXPECT_EQ(xp[size_t(K / 2 + g)], sc);
                    for (int j = 0; j < gs; ++j) {
                        // 4- and 8-bit (gs % 64 == 0 here): per 64 columns the even ones, then the odd ones;
                        // 6-bit: the pairs (4i, 4i+1), then the pairs (4i+2, 4i+3)
                        const int jj = int(j % 64);
                        const int col = int(j / 64) * 64 +
                                        (bits == 6 ? 4 * ((jj % 32) / 2) + jj % 2 + (jj < 32 ? 0 : 2)
                                                   : jj < 32 ? 2 * jj : 2 * (jj - 32) + 1);
                        ASSERT_EQ(xi[g * gs + j], int16_t(std::lrint(x[size_t(g * gs + col)] * inv)))
                            << "q" << bits << " gs" << gs << " group " << g << " j " << j;
                    }
                }
            }
}

// The decode attention loops of every table (portable included) against the table's own dot/axpy per (head,
// position), which they must match bit for bit, and against the portable table within rounding.
TEST(Kernels, DecodeAttentionLoopsMatchDotAxpy) {
    SKIP_IF_FORCED_ISA_MISSING();
    std::vector<const cpu::KernelTable*> tables = simd_tables();
    tables.push_back(&cpu::portable_kernels());
    for (const cpu::KernelTable* T : tables)
        for (int64_t hd : {8, 16, 40, 64, 128})
            for (int64_t nkv : {1, 3})
                for (int64_t group : {1, 2})
                    for (int64_t n : {1, 3, 4, 17, 33, 70}) {
                        const int64_t ld = (nkv + 2) * hd + 3, nh = nkv * group; // rows wider than the heads used
                        const auto k = randn(size_t(n * ld), uint32_t(hd + n));
                        const auto v = randn(size_t(n * ld), uint32_t(hd + n + 1));
                        const auto q = randn(size_t(nh * hd), uint32_t(hd + n + 2));
                        const auto p = randn(size_t(nh * n), uint32_t(hd + n + 3), 0.3f);
                        const float scale = 0.125f;
                        std::vector<float> s(size_t(nh * n)), s_ref(size_t(nh * n)), o(size_t(nh * hd), 7.0f),
                            o_ref(size_t(nh * hd), 0.0f), o_p(size_t(nh * hd));
                        T->attn_scores(q.data(), k.data(), ld, n, nkv, group, hd, scale, s.data());
                        T->attn_wsum(p.data(), v.data(), ld, n, nkv, group, hd, o.data());
                        for (int64_t h = 0; h < nh; ++h)
                            for (int64_t j = 0; j < n; ++j) {
                                s_ref[size_t(h * n + j)] = T->dot(q.data() + h * hd, k.data() + j * ld + (h / group) * hd, hd) * scale;
                                T->axpy(p[size_t(h * n + j)], v.data() + j * ld + (h / group) * hd, o_ref.data() + h * hd, hd);
                            }
                        const std::string what = std::string(T->name) + " hd" + std::to_string(hd) + " nkv" +
                                                 std::to_string(nkv) + " group" + std::to_string(group) + " n" + std::to_string(n);
                        EXPECT_EQ(s, s_ref) << what;
                        EXPECT_EQ(o, o_ref) << what;
                        cpu::portable_kernels().attn_wsum(p.data(), v.data(), ld, n, nkv, group, hd, o_p.data());
                        for (size_t i = 0; i < o.size(); ++i) EXPECT_NEAR(o[i], o_p[i], 1e-5 * (1 + std::fabs(o_p[i]))) << what;
                    }
}

// The bf16-cache attention loops of every table against the same table's float loops on the widened values: bit
// for bit (widening is exact), including hd > 256 and hd not a multiple of 16 (the fallback loops).
TEST(Kernels, DecodeAttentionBf16MatchesFloatOnWidenedValues) {
    SKIP_IF_FORCED_ISA_MISSING();
    std::vector<const cpu::KernelTable*> tables = simd_tables();
    tables.push_back(&cpu::portable_kernels());
    for (const cpu::KernelTable* T : tables)
        for (int64_t hd : {8, 16, 40, 64, 128, 264})
            for (int64_t nkv : {1, 3})
                for (int64_t group : {1, 2})
                    for (int64_t n : {1, 3, 4, 17, 33, 70}) {
                        const int64_t ld = (nkv + 1) * hd + 5, nh = nkv * group;
                        const auto kb = rand_bf16(size_t(n * ld), uint32_t(7 * hd + n), 1.0f);
                        const auto vb = rand_bf16(size_t(n * ld), uint32_t(7 * hd + n + 1), 1.0f);
                        std::vector<float> kf(kb.size()), vf(vb.size());
                        for (size_t i = 0; i < kb.size(); ++i) kf[i] = bf16_to_f32(kb[i]), vf[i] = bf16_to_f32(vb[i]);
                        const auto q = randn(size_t(nh * hd), uint32_t(hd + n + 2));
                        const auto p = randn(size_t(nh * n), uint32_t(hd + n + 3), 0.3f);
                        const float scale = 0.0883883f;
                        std::vector<float> s(size_t(nh * n)), s_f(size_t(nh * n)), o(size_t(nh * hd), 3.0f),
                            o_f(size_t(nh * hd), -3.0f);
                        T->attn_scores_bf16(q.data(), kb.data(), ld, n, nkv, group, hd, scale, s.data());
                        T->attn_scores(q.data(), kf.data(), ld, n, nkv, group, hd, scale, s_f.data());
                        T->attn_wsum_bf16(p.data(), vb.data(), ld, n, nkv, group, hd, o.data());
                        T->attn_wsum(p.data(), vf.data(), ld, n, nkv, group, hd, o_f.data());
                        const std::string what = std::string(T->name) + " hd" + std::to_string(hd) + " nkv" +
                                                 std::to_string(nkv) + " group" + std::to_string(group) + " n" + std::to_string(n);
                        EXPECT_EQ(s, s_f) << what;
                        EXPECT_EQ(o, o_f) << what;
                    }
}

// ops::causal_attention over a KvView: a head-major float32 cache gives what the position-major overload gives
// (bit for bit for one query, the decode step; within rounding for several, where sgemm sees another leading
// dimension), and a bf16 cache what the float32 one gives on the widened values (bit for bit with the portable
// table; within rounding where the table's vectorized softmax runs), on 1 and 2 threads.
TEST(Kernels, CausalAttentionOnKvViews) {
    SKIP_IF_FORCED_ISA_MISSING();
    const int64_t Hq = 6, Hkv = 3, hd = 40, cap = 37;
    for (const int threads : {1, 2})
        for (const int64_t n : {1, 5})
            for (const int64_t past : {0, 1, 19, 31}) {
                ops::set_num_threads(threads);
                const int64_t total = past + n;
                const auto kb = rand_bf16(size_t(Hkv * cap * hd), uint32_t(total), 1.0f);
                const auto vb = rand_bf16(size_t(Hkv * cap * hd), uint32_t(total + 100), 1.0f);
                std::vector<float> kh(kb.size()), vh(vb.size()); // head-major [Hkv][cap][hd]
                for (size_t i = 0; i < kb.size(); ++i) kh[i] = bf16_to_f32(kb[i]), vh[i] = bf16_to_f32(vb[i]);
                std::vector<float> kp(size_t(total * Hkv * hd)), vp(kp.size()); // position-major [total][Hkv*hd]
                for (int64_t c = 0; c < Hkv; ++c)
                    for (int64_t j = 0; j < total; ++j)
                        for (int64_t i = 0; i < hd; ++i) {
                            kp[size_t((j * Hkv + c) * hd + i)] = kh[size_t((c * cap + j) * hd + i)];
                            vp[size_t((j * Hkv + c) * hd + i)] = vh[size_t((c * cap + j) * hd + i)];
                        }
                const auto q = randn(size_t(n * Hq * hd), uint32_t(total + 200));
                std::vector<float> o_ref(size_t(n * Hq * hd)), o_f(o_ref.size()), o_b(o_ref.size());
                ops::causal_attention(q.data(), kp.data(), vp.data(), o_ref.data(), n, past, Hq, Hkv, hd);
                ops::KvView kv;
                kv.k = kh.data();
                kv.v = vh.data();
                kv.head_stride = cap * hd;
                kv.pos_stride = hd;
                ops::causal_attention(q.data(), kv, o_f.data(), n, past, Hq, Hkv, hd);
                kv.k = kb.data();
                kv.v = vb.data();
                kv.bf16 = true;
                ops::causal_attention(q.data(), kv, o_b.data(), n, past, Hq, Hkv, hd);
                const std::string what = "threads " + std::to_string(threads) + " n " + std::to_string(n) + " past " +
                                         std::to_string(past);
                if (n == 1) {
                    EXPECT_EQ(o_f, o_ref) << what;
                }
                for (size_t i = 0; i < o_ref.size(); ++i)
                    EXPECT_NEAR(o_f[i], o_ref[i], 1e-5 * (1 + std::fabs(o_ref[i]))) << what << " at " << i;
                if (cpu::kernels().isa == Isa::Portable) { // the same softmax too: bit for bit
                    EXPECT_EQ(o_b, o_f) << what;
                } else { // the decode step over a bf16 cache takes the table's vectorized softmax
                    for (size_t i = 0; i < o_f.size(); ++i)
                        EXPECT_NEAR(o_b[i], o_f[i], 1e-5 * (1 + std::fabs(o_f[i]))) << what << " at " << i;
                }
            }
    ops::set_num_threads(0);
}

// The exp-sum of the greedy choice's log-softmax: every table against the portable one (std::exp summed in index
// order) on awkward lengths and on values down to where exp underflows.
TEST(Kernels, SumExpMatchesPortable) {
    SKIP_IF_FORCED_ISA_MISSING();
    for (const cpu::KernelTable* T : simd_tables())
        for (const int64_t n : {1, 15, 16, 17, 1000, 75968})
            for (const float sd : {1.0f, 30.0f}) {
                auto x = randn(size_t(n), uint32_t(n) + uint32_t(sd), sd);
                float m = x[0];
                for (float v : x) m = std::max(m, v);
                x[size_t(n / 2)] = m - 120.0f; // exp underflows to 0 in float
                const double ref = cpu::portable_kernels().sum_exp(x.data(), n, m);
                const double got = T->sum_exp(x.data(), n, m);
                EXPECT_NEAR(got, ref, 1e-6 * ref) << T->name << " n " << n << " sd " << sd;
            }
}

// The table softmax (decode attention over a bf16 cache) against ops::softmax_row, which the portable table
// reproduces bit for bit.
TEST(Kernels, SoftmaxMatchesSoftmaxRow) {
    SKIP_IF_FORCED_ISA_MISSING();
    std::vector<const cpu::KernelTable*> tables = simd_tables();
    tables.push_back(&cpu::portable_kernels());
    for (const cpu::KernelTable* T : tables)
        for (const int64_t n : {1, 2, 15, 16, 17, 175, 1000})
            for (const float sd : {0.5f, 20.0f}) {
                const auto x = randn(size_t(n), uint32_t(n) * 3 + uint32_t(sd), sd);
                std::vector<float> a = x, b = x;
                ops::softmax_row(a.data(), n);
                T->softmax(b.data(), n);
                if (T == &cpu::portable_kernels()) {
                    EXPECT_EQ(a, b) << n;
                } else {
                    for (int64_t i = 0; i < n; ++i)
                        EXPECT_NEAR(b[size_t(i)], a[size_t(i)], 2e-7 + 1e-6 * a[size_t(i)]) << T->name << " n " << n << " at " << i;
                }
            }
}

// The exact-erf GELU of each table against its definition in double (0.5·x·(1 + erf(x/√2))): for x ≥ 0 (no
// cancellation) within 3 ulp of the result; for x < 0, where 1 + erf cancels, within 3 ulp of |x|·2^-24 (the float
// rounding of erf near −1, which std::erf has as well). A dense sweep over every erf interval and its edges, tails
// of every length, and the special values; ops::gelu_erf (chunks over the team) equals the table's kernel.
TEST(Kernels, GeluErfMatchesDefinition) {
    SKIP_IF_FORCED_ISA_MISSING();
    std::vector<const cpu::KernelTable*> tables = simd_tables();
    tables.push_back(&cpu::portable_kernels());
    std::vector<float> x;
    for (float v = -9.0f; v <= 9.0f; v += 0.000377f) x.push_back(v);
    for (int i = 0; i <= 40; ++i) // interval edges of erf(x/√2) and their neighbours
        for (const float e : {float(i) / 8.0f * float(M_SQRT2)}) {
            x.push_back(e);
            x.push_back(std::nextafter(e, 100.0f));
            x.push_back(std::nextafter(e, -100.0f));
            x.push_back(-e);
        }
    for (const float v : {1e-30f, -1e-30f, 1e-6f, -1e-6f, 3e-39f, 0.0f, -0.0f, 1e30f, -1e30f}) x.push_back(v);
    for (const cpu::KernelTable* T : tables) {
        std::vector<float> y = x;
        T->gelu_erf(y.data(), y.size());
        double worst = 0;
        for (size_t i = 0; i < x.size(); ++i) {
            const double xd = x[i], ref = 0.5 * xd * (1.0 + std::erf(xd * M_SQRT1_2));
            const double ulp = std::ldexp(1.0, std::ilogb(std::max(std::fabs(xd >= 0 ? ref : xd), 1e-37)) - 23);
            const double err = std::fabs(double(y[i]) - ref) / ulp;
            worst = std::max(worst, err);
            EXPECT_LE(err, 3.0) << T->name << " x " << x[i] << ": " << y[i] << " vs " << ref;
            if (x[i] == 0.0f) {
                EXPECT_EQ(std::signbit(y[i]), std::signbit(x[i])) << T->name;
            }
        }
        RecordProperty(std::string("worst_ulp_") + T->name, std::to_string(worst));
        // the SIMD tables evaluate the same table with the same operations (AVX-512: vpermt2ps picks; AVX2: per-lane
        // records transposed): the same bits
        if (T != tables.front() && T->isa != Isa::Portable) {
            std::vector<float> y0 = x;
            tables.front()->gelu_erf(y0.data(), y0.size());
            EXPECT_EQ(0, std::memcmp(y0.data(), y.data(), y.size() * sizeof(float))) << T->name;
        }
        const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
        std::vector<float> sp = {inf, nan, -nan, 2.0f};
        T->gelu_erf(sp.data(), sp.size());
        EXPECT_EQ(sp[0], inf) << T->name;
        EXPECT_TRUE(std::isnan(sp[1]) && std::isnan(sp[2])) << T->name;
        // tails: every length up to 40 gives the same values as the long call, and nothing past n is written
        for (size_t n = 1; n <= 40; ++n) {
            std::vector<float> t(x.begin() + 1000, x.begin() + 1000 + long(n));
            t.push_back(123.0f);
            T->gelu_erf(t.data(), n);
            for (size_t i = 0; i < n; ++i) EXPECT_EQ(t[i], y[1000 + i]) << T->name << " n " << n;
            EXPECT_EQ(t[n], 123.0f) << T->name << " n " << n;
        }
    }
    // the op: the active table's kernel, also over the team (n > 65536, a partial last chunk)
    auto big = randn(200003, 77, 3.0f);
    std::vector<float> a = big;
    ops::gelu_erf(a.data(), a.size());
    cpu::kernels().gelu_erf(big.data(), big.size());
    EXPECT_EQ(a, big);
}

// RoPE through a table of the positions' cosines and sines (computed once per decoder step for every layer) is
// bit-identical to ops::rope.
TEST(Kernels, RopeTableMatchesRope) {
    for (const int64_t hd : {2, 6, 64, 128})
        for (const int64_t n : {1, 4})
            for (const int64_t pos0 : {0, 7, 4099}) {
                const int64_t heads = 3;
                std::vector<float> inv(size_t(hd / 2));
                for (int64_t i = 0; i < hd / 2; ++i) inv[size_t(i)] = float(1.0 / std::pow(1e6, double(2 * i) / double(hd)));
                const auto x = randn(size_t(n * heads * hd), uint32_t(hd + n + pos0));
                std::vector<float> a = x, b = x, cs(size_t(n * hd));
                ops::rope(a.data(), n, heads, hd, pos0, inv.data());
                ops::rope_table(n, hd, pos0, inv.data(), cs.data());
                ops::rope_cs(b.data(), n, heads, hd, cs.data());
                EXPECT_EQ(a, b) << "hd " << hd << " n " << n << " pos0 " << pos0;
            }
}

// The decoder's KV cache: positions written, kept across growth (reallocation) and truncation, rounded to bf16
// (nearest even) in a bf16 cache.
TEST(Kernels, KvCacheKeepsPositionsAcrossGrowth) {
    for (const bool bf16 : {false, true}) {
        const int64_t H = 3, hd = 24, row = H * hd;
        KvCache c;
        c.reset(2);
        std::vector<std::vector<float>> kref(2), vref(2); // position-major copies of what was written
        auto append = [&](int64_t n, uint32_t seed) {
            c.reserve(c.len + n, H, hd, bf16);
            for (size_t l = 0; l < 2; ++l) {
                const auto k = randn(size_t(n * row), seed + uint32_t(l)), v = randn(size_t(n * row), seed + 7 + uint32_t(l));
                c.write(l, k.data(), v.data(), c.len, n);
                kref[l].insert(kref[l].end(), k.begin(), k.end());
                vref[l].insert(vref[l].end(), v.begin(), v.end());
            }
            c.len += n;
        };
        auto check = [&](const std::string& what) {
            for (size_t l = 0; l < 2; ++l)
                for (int64_t j = 0; j < c.len; ++j)
                    for (int64_t h = 0; h < H; ++h)
                        for (int64_t i = 0; i < hd; ++i) {
                            const size_t at = size_t((h * c.cap + j) * hd + i), ref = size_t(j * row + h * hd + i);
                            const float want_k = bf16 ? bf16_to_f32(f32_to_bf16(kref[l][ref])) : kref[l][ref];
                            const float want_v = bf16 ? bf16_to_f32(f32_to_bf16(vref[l][ref])) : vref[l][ref];
                            const float got_k = bf16 ? bf16_to_f32(static_cast<const uint16_t*>(c.k[l])[at])
                                                     : static_cast<const float*>(c.k[l])[at];
                            const float got_v = bf16 ? bf16_to_f32(static_cast<const uint16_t*>(c.v[l])[at])
                                                     : static_cast<const float*>(c.v[l])[at];
                            ASSERT_EQ(got_k, want_k) << what << " layer " << l << " pos " << j;
                            ASSERT_EQ(got_v, want_v) << what << " layer " << l << " pos " << j;
                        }
        };
        append(50, 1);
        const int64_t cap0 = c.cap;
        check("prefill");
        for (int i = 0; c.cap == cap0; ++i) append(1, uint32_t(100 + 10 * i)); // steps until the arena grows
        EXPECT_GT(c.cap, cap0);
        check("after growth");
        c.truncate(20, row);
        for (auto* r : {&kref, &vref})
            for (auto& x : *r) x.resize(size_t(20 * row));
        EXPECT_EQ(c.len, 20);
        append(3, 999);
        check("after truncation");
        c.reset(2);
        EXPECT_EQ(c.len, 0);
        for (auto* r : {&kref, &vref})
            for (auto& x : *r) x.clear();
        append(4, 555);
        check("after reset");
    }
    // special values round as f32_to_bf16 does (NaN stays NaN, ties to even, overflow to infinity)
    const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 3.4028235e38f, 1e-40f, -1e-45f,
                              1.00390625f, 1.01171875f, -2.0078125f, 65504.0f};
    const int64_t m = int64_t(std::size(specials));
    KvCache c;
    c.reset(1);
    c.reserve(1, 1, m, true);
    c.write(0, specials, specials, 0, 1);
    for (int64_t i = 0; i < m; ++i)
        EXPECT_EQ(static_cast<const uint16_t*>(c.k[0])[i], f32_to_bf16(specials[i])) << specials[i];
}

// A finished session's arena is kept for the next one (no fresh mapping, no first-touch zeroing): a cache of the
// same size gets the same memory back, the stale contents behind its len never read (the positions written since
// read back as written). QASR_KV_POOL=0 turns the pool off.
TEST(Kernels, KvCacheArenaIsReusedByTheNextSession) {
    const char* e = std::getenv("QASR_KV_POOL");
    if (e && !std::strcmp(e, "0")) GTEST_SKIP() << "QASR_KV_POOL=0";
    const int64_t H = 2, hd = 64, row = H * hd;
    const void* first = nullptr;
    for (int round = 0; round < 3; ++round) {
        KvCache c;
        c.reset(3);
        c.reserve(40, H, hd, true);
        if (round == 0) first = c.k[0];
        else EXPECT_EQ(c.k[0], first) << "round " << round;
        const auto k = randn(size_t(40 * row), uint32_t(10 + round)), v = randn(size_t(40 * row), uint32_t(20 + round));
        for (size_t l = 0; l < 3; ++l) c.write(l, k.data(), v.data(), 0, 40);
        c.len = 40;
        for (int64_t j = 0; j < 40; ++j)
            for (int64_t i = 0; i < row; ++i) {
                const size_t at = size_t(((i / hd) * c.cap + j) * hd + i % hd);
                ASSERT_EQ(static_cast<const uint16_t*>(c.v[2])[at], f32_to_bf16(v[size_t(j * row + i)]));
            }
    }
}

// Matrix-vector products large enough to be split over the threads (contiguous shares, blocks stolen from the
// back): every row computed exactly once, as by the kernel on the whole range.
TEST(Kernels, ParallelGemvCoversEveryRowOnce) {
    SKIP_IF_FORCED_ISA_MISSING();
    ops::set_num_threads(2);
    for (int64_t N : {129, 1000, 4099}) {
        const int64_t K = 256;
        const QMat q(N, K, 8, 64, uint32_t(N));
        const WeightMatrix W = q.view();
        const auto x = randn(size_t(K), 11);
        std::vector<float> y(size_t(N), -1.0f), ref(size_t(N), -2.0f), xp(size_t(K), 0.0f), xs(size_t(K / 64), 0.0f);
        ops::linear(x.data(), 1, W, nullptr, y.data());
        const cpu::KernelTable& T = cpu::kernels();
        T.q_prep(x.data(), K, 8, 64, xp.data(), xs.data());
        T.q_gemv(q.codes.data(), q.s.data(), q.b.data(), K, 8, 64, xp.data(), xs.data(), ref.data(), 0, N);
        EXPECT_EQ(y, ref) << "N " << N;
    }
}

// ops::linear on every format through the active ISA (forced per ctest entry) against a float64 reference of the
// dequantized matrix: M = 1 takes the gemv kernels, M > 1 the tiled sgemm (and AMX under Bf16GemmScope).
TEST(Kernels, LinearOnWeightMatrixMatchesReference) {
    SKIP_IF_FORCED_ISA_MISSING();
    ops::set_num_threads(2);
    for (int64_t M : {1, 2, 5, 37})
        for (const char* fmt : {"f32", "bf16", "q4", "q6", "q8"}) {
            const int64_t N = 45, K = 192;
            WeightMatrix W;
            std::vector<float> wf;
            std::vector<uint16_t> wb;
            std::unique_ptr<QMat> q;
            const std::string f = fmt;
            if (f == "f32") {
                wf = randn(size_t(N * K), 3);
                W = WeightMatrix::from_f32(wf, N, K);
            } else if (f == "bf16") {
                wb = rand_bf16(size_t(N * K), 4, 1.0f);
                W.fmt = WFormat::BF16;
                W.rows = N;
                W.cols = K;
                W.data = wb.data();
            } else {
                q = std::make_unique<QMat>(N, K, f[1] - '0', 64, 5);
                W = q->view();
            }
            const std::vector<float> ref_w = W.to_f32();
            const auto x = randn(size_t(M * K), 6);
            const auto bias = randn(size_t(N), 7);
            for (bool bf16 : {false, true}) {
                ops::Bf16GemmScope scope(bf16);
                std::vector<float> y(size_t(M * N));
                ops::linear(x.data(), M, W, bias.data(), y.data());
                const bool rounded = bf16 && M > 1 && ops::bf16_gemm_enabled() && cpu::bf16_gemm_available();
                for (int64_t m = 0; m < M; ++m)
                    for (int64_t n = 0; n < N; ++n) {
                        double acc = bias[size_t(n)], sc = std::fabs(bias[size_t(n)]);
                        for (int64_t k = 0; k < K; ++k) {
                            acc += double(x[size_t(m * K + k)]) * ref_w[size_t(n * K + k)];
                            sc += std::fabs(double(x[size_t(m * K + k)]) * ref_w[size_t(n * K + k)]);
                        }
                        const double tol = rounded ? 1e-2 : (f[0] == 'q' && M == 1) ? 2e-4 : 1e-5;
                        expect_close(y[size_t(m * N + n)], float(acc), sc, tol,
                                     f + " M" + std::to_string(M) + (bf16 ? " bf16" : ""));
                    }
            }
        }
}

// KernelTable::gemm_rows (AVX2: gemm_avx2.cpp) for every format and awkward sizes (rows of x past a multiple of 6,
// rows of W past a multiple of 16, k past a multiple of 8 and over several 256-column blocks): close to the
// double-precision product, and every element the same bits whether its row of x came alone or with others and
// whatever range of W's rows the call covered.
TEST(Kernels, GemmRowsMatchesReferenceAndDependsOnNoTiling) {
    int tested = 0;
    for (const cpu::KernelTable* t : simd_tables()) {
        if (!t->gemm_rows) continue;
        ++tested;
        struct Case {
            std::string fmt;
            int bits, gs;
            std::vector<int64_t> Ks;
        };
        const std::vector<Case> cases = {{"f32", 0, 0, {9, 200, 520}},   {"bf16", 0, 0, {9, 200, 520}},
                                         {"q8", 8, 64, {320}},           {"q6", 6, 32, {160, 544}},
                                         {"q4", 4, 128, {640}},          {"q3", 3, 64, {320}},
                                         {"q8 gs 32", 8, 32, {96}}};
        const int64_t N = 37;
        for (const Case& c : cases)
            for (int64_t K : c.Ks) {
                WeightMatrix W;
                std::vector<float> wf;
                std::vector<uint16_t> wb;
                std::unique_ptr<QMat> q;
                cpu::MatrixRef ref;
                ref.K = K;
                if (c.fmt == "f32") {
                    wf = randn(size_t(N * K), 11);
                    W = WeightMatrix::from_f32(wf, N, K);
                    ref.fmt = cpu::MatrixRef::F32, ref.data = wf.data();
                } else if (c.fmt == "bf16") {
                    wb = rand_bf16(size_t(N * K), 12, 1.0f);
                    W.fmt = WFormat::BF16, W.rows = N, W.cols = K, W.data = wb.data();
                    ref.fmt = cpu::MatrixRef::BF16, ref.data = wb.data();
                } else {
                    q = std::make_unique<QMat>(N, K, c.bits, c.gs, 13);
                    W = q->view();
                    ref.fmt = cpu::MatrixRef::Q, ref.data = q->codes.data(), ref.scales = q->s.data();
                    ref.biases = q->b.data(), ref.bits = c.bits, ref.gs = c.gs;
                }
                const std::vector<float> w = W.to_f32();
                for (int64_t M : {1, 5, 6, 7, 8, 13, 17}) {
                    const std::string what = std::string(t->name) + " " + c.fmt + " M" + std::to_string(M) + " K" +
                                             std::to_string(K);
                    const auto x = randn(size_t(M * K), 14);
                    std::vector<float> y(size_t(M * N), -1.0f);
                    t->gemm_rows(x.data(), K, M, ref, 0, N, y.data(), N);
                    for (int64_t m = 0; m < M; ++m)
                        for (int64_t n = 0; n < N; ++n) {
                            double acc = 0, sc = 0;
                            for (int64_t k = 0; k < K; ++k) {
                                const double p = double(x[size_t(m * K + k)]) * w[size_t(n * K + k)];
                                acc += p, sc += std::fabs(p);
                            }
                            expect_close(y[size_t(m * N + n)], float(acc), sc, 1e-5, what);
                        }
                    // W's rows in three calls (a partial panel in the middle), into a wider y
                    const int64_t ld = N + 3;
                    std::vector<float> y3(size_t(M * ld), -1.0f);
                    for (auto [a, b] : {std::pair<int64_t, int64_t>{0, 16}, {16, 21}, {21, N}})
                        t->gemm_rows(x.data(), K, M, ref, a, b, y3.data(), ld);
                    // each row of x alone, from a copy of x with another row stride
                    const int64_t ldx = K + 5;
                    std::vector<float> xs(size_t(M * ldx), 7.0f);
                    for (int64_t m = 0; m < M; ++m) std::copy_n(&x[size_t(m * K)], K, &xs[size_t(m * ldx)]);
                    std::vector<float> y1(size_t(M * N), -1.0f), y2(size_t(M * N), -1.0f);
                    for (int64_t m = 0; m < M; ++m)
                        t->gemm_rows(xs.data() + m * ldx, ldx, 1, ref, 0, N, y1.data() + m * N, N);
                    t->gemm_rows(xs.data(), ldx, M, ref, 0, N, y2.data(), N);
                    EXPECT_EQ(0, std::memcmp(y.data(), y2.data(), y.size() * 4)) << what << ": another row stride of x";
                    for (int64_t m = 0; m < M; ++m) {
                        EXPECT_EQ(0, std::memcmp(&y[size_t(m * N)], &y3[size_t(m * ld)], size_t(N) * 4)) << what << " row " << m;
                        EXPECT_EQ(0, std::memcmp(&y[size_t(m * N)], &y1[size_t(m * N)], size_t(N) * 4)) << what << " row " << m;
                        EXPECT_EQ(y3[size_t(m * ld + N)], -1.0f) << what << ": wrote past its rows";
                    }
                }
            }
    }
    if (!tested) GTEST_SKIP() << "no kernel table here has a gemm_rows kernel (AVX2)";
}

#ifdef QASR_TEST_BF16_ENGINES // x86-64 only (bf16_gemm.cpp)
TEST(Kernels, Bf16GemmAwkwardSizes) {
    SKIP_IF_FORCED_ISA_MISSING();
    if (!cpu::bf16_gemm_available()) GTEST_SKIP() << "neither AMX nor AVX512-BF16 on this CPU";
    for (int64_t M : {1, 15, 17, 33})
        for (int64_t K : {32, 33, 96, 130})
            for (int64_t N : {32, 45}) {
                const auto x = randn(size_t(M * K), 11), w = randn(size_t(N * K), 12);
                const int64_t Kp = (K + 31) / 32 * 32, nb = (N + 31) / 32 * 32;
                std::vector<uint16_t> xb(cpu::bf16_packed_x_size(M, K)), wb(size_t(nb * Kp), 0);
                cpu::Bf16PackedX px;
                cpu::bf16_pack_x(x.data(), M, K, xb.data(), px);
                for (int64_t r = 0; r < N; ++r)
                    for (int64_t k = 0; k < K; ++k) wb[size_t(r * Kp + k)] = f32_to_bf16(w[size_t(r * K + k)]);
                std::vector<float> y(size_t(M * N), -7.0f);
                cpu::bf16_gemm_rows(wb.data(), Kp, nb, N, px, y.data(), N);
                for (int64_t m = 0; m < M; ++m)
                    for (int64_t n = 0; n < N; ++n) {
                        double acc = 0;
                        for (int64_t k = 0; k < K; ++k)
                            acc += double(bf16_to_f32(f32_to_bf16(x[size_t(m * K + k)]))) *
                                   bf16_to_f32(wb[size_t(n * Kp + k)]);
                        EXPECT_NEAR(y[size_t(m * N + n)], acc, 1e-4 * (1 + std::fabs(acc))) << M << " " << K << " " << N;
                    }
            }
}
#endif

TEST(Kernels, IsaSelection) {
    SKIP_IF_FORCED_ISA_MISSING();
    EXPECT_TRUE(cpu::isa_supported(Isa::Portable));
    const char* e = std::getenv("QASR_ISA");
    if (e && *e) EXPECT_STREQ(cpu::kernels().name, e);
    else EXPECT_EQ(cpu::kernels().isa, cpu::best_isa());
}

// The decode's greedy choice: argmax with ties to the lowest index and the log-softmax, on 1 and 2 threads and
// for sizes that do and do not split across the team — bit for bit the same whatever the threads (beam search
// computes its rows' log-probabilities inside a parallel loop, greedy decoding at the top level).
TEST(Kernels, ArgmaxLogprobMatchesDefinition) {
    std::uniform_real_distribution<float> u(-8.0f, 8.0f);
    for (const int64_t n : {int64_t(7), int64_t(40000), int64_t(151936)}) {
        float first = 0;
        for (const int threads : {1, 2}) {
            std::mt19937 g(21 + unsigned(n));
            std::vector<float> x(static_cast<size_t>(n));
            for (auto& v : x) v = u(g);
            x[size_t(n / 3)] = 9.5f;
            x[size_t(n - 1)] = 9.5f; // a tie: the lower index wins
            qasr::ops::set_num_threads(threads);
            float lp = 0;
            const int64_t id = qasr::ops::argmax_logprob(x.data(), n, -1, lp);
            EXPECT_EQ(id, n / 3) << n;
            double s = 0;
            for (float v : x) s += std::exp(double(v) - 9.5);
            EXPECT_NEAR(lp, -std::log(s), 1e-5) << n;
            float lp2 = 0;
            EXPECT_EQ(qasr::ops::argmax_logprob(x.data(), n, 0, lp2), 0);
            EXPECT_NEAR(lp2, double(x[0]) - 9.5 - std::log(s), 1e-5);
            if (threads == 1) first = lp;
            else EXPECT_EQ(lp, first) << n;
            int64_t top[2];
            float tlp[2];
            qasr::ops::top_logprobs(x.data(), n, 2, top, tlp);
            EXPECT_EQ(top[0], n / 3) << n;
            EXPECT_EQ(top[1], n - 1) << n;
            EXPECT_EQ(tlp[0], lp) << n;
        }
    }
    qasr::ops::set_num_threads(0);
}

// Which OPENBLAS_CORETYPE the qasr command re-runs with: only where OpenBLAS runs kernels from before AVX on a CPU
// with AVX2 + FMA (a model newer than the library) and the user did not choose.
TEST(Kernels, OpenBlasCoreAdvice) {
    using cpu::blas_core_advice_for;
    EXPECT_EQ(blas_core_advice_for("Prescott", true, true, false), "SkylakeX");
    EXPECT_EQ(blas_core_advice_for("Prescott", true, false, false), "Haswell");
    EXPECT_EQ(blas_core_advice_for("PRESCOTT", true, true, false), "SkylakeX"); // OpenBLAS's names, any case
    EXPECT_EQ(blas_core_advice_for("Nehalem", true, false, false), "Haswell");
    EXPECT_EQ(blas_core_advice_for("Core2", true, false, false), "Haswell");
    EXPECT_EQ(blas_core_advice_for("Prescott", true, true, true), "");   // OPENBLAS_CORETYPE set: the user chose
    EXPECT_EQ(blas_core_advice_for("Prescott", false, false, false), ""); // an old CPU: its kernels are right
    EXPECT_EQ(blas_core_advice_for("Zen", true, false, false), "");       // OpenBLAS knows the CPU
    EXPECT_EQ(blas_core_advice_for("Haswell", true, true, false), "");
    EXPECT_EQ(blas_core_advice_for("SkylakeX", true, true, false), "");
    EXPECT_EQ(blas_core_advice_for("Sandybridge", true, false, false), ""); // AVX kernels: left as chosen
    EXPECT_EQ(blas_core_advice_for("", true, true, false), "");           // a build without OpenBLAS
}
