// ops::head_argmax: the greedy tokens of several hidden rows under a quantized LM head, screened with the AMX bf16
// product and rescored exactly, must equal the first maximum of the float32 logits (ops::linear with bf16 compute
// off, 2 ≤ n ≤ 32: the few-row float32 product whose per-row values head_argmax reproduces) — also where the bf16
// screen cannot tell rows apart: exact ties (the first index wins), rows one code apart, and a head whose rows are
// all equal (more candidates than the rescoring takes: the whole row is rescored).
#include "backend/cpu/kernels.hpp"
#include "core/dtype.hpp"
#include "ops/ops.hpp"
#include "ops/weight.hpp"

#include "random_util.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

using namespace qasr;

namespace {

struct QHead {
    std::vector<uint8_t> codes;
    std::vector<uint16_t> s, b;
    WeightMatrix w;
    int64_t row_bytes = 0, ng = 0;

    QHead(int64_t V, int64_t K, int bits, int gs, uint32_t seed) {
        std::mt19937 r(seed);
        std::normal_distribution<float> sd(0, 0.01f), bd(0, 0.05f);
        row_bytes = K * bits / 8;
        ng = K / gs;
        codes.resize(size_t(V * row_bytes));
        for (auto& c : codes) c = uint8_t(r());
        for (int64_t i = 0; i < V * ng; ++i) s.push_back(f32_to_bf16(sd(r))), b.push_back(f32_to_bf16(bd(r)));
        w.fmt = WFormat::Q;
        w.rows = V;
        w.cols = K;
        w.bits = bits;
        w.group_size = gs;
        bind();
    }
    void bind() {
        w.data = codes.data();
        w.scales = s.data();
        w.biases = b.data();
    }
    void copy_row(int64_t from, int64_t to) {
        std::memcpy(codes.data() + to * row_bytes, codes.data() + from * row_bytes, size_t(row_bytes));
        std::copy_n(s.begin() + from * ng, ng, s.begin() + to * ng);
        std::copy_n(b.begin() + from * ng, ng, b.begin() + to * ng);
    }
    void scale_row(int64_t row, float f) {
        for (int64_t g = 0; g < ng; ++g) s[size_t(row * ng + g)] = f32_to_bf16(bf16_to_f32(s[size_t(row * ng + g)]) * f);
    }
};

std::vector<int> reference(const std::vector<float>& h, int64_t n, const WeightMatrix& W) {
    std::vector<float> logits(size_t(n * W.rows));
    ops::Bf16GemmScope f32(false);
    ops::linear(h.data(), n, W, nullptr, logits.data());
    std::vector<int> out;
    for (int64_t i = 0; i < n; ++i)
        out.push_back(int(std::max_element(logits.begin() + i * W.rows, logits.begin() + (i + 1) * W.rows) -
                          (logits.begin() + i * W.rows)));
    return out;
}

} // namespace

TEST(HeadArgmax, ScreenedEqualsFloat32Argmax) {
    const int64_t V = 5003, K = 256, n = 13;
    for (const int bits : {8, 4, 6}) {
        QHead q(V, K, bits, 64, uint32_t(bits));
        // Rows that dominate (larger scales), so the ties below decide the argmax for most hidden rows.
        for (const int64_t r : {17, 1234, 4321}) q.scale_row(r, 6.0f);
        q.copy_row(1234, 2500); // an exact tie with 1234, later in the vocabulary: 1234 must win
        q.copy_row(4321, 100);  // an exact tie with 4321, earlier: 100 must win
        q.copy_row(17, 4999);   // one code apart from row 17: below bf16's resolution, not the float32 one's
        q.codes[size_t(4999 * q.row_bytes + 5)] ^= 1;
        q.bind();
        const auto screen = ops::head_screen(q.w);
        if (!screen) GTEST_SKIP() << "no AMX + AVX-512 here: head_argmax takes the float32 logits themselves";
        std::vector<float> h = qasr::test::randn(size_t(n * K), 7u + uint32_t(bits));
        for (int64_t c = 0; c < K; ++c) h[size_t(12 * K + c)] = 1e-3f * float(c % 7); // a small row: tiny gaps
        std::vector<int> got(static_cast<size_t>(n));
        ops::head_argmax(h.data(), n, q.w, screen.get(), got.data());
        const std::vector<int> want = reference(h, n, q.w);
        EXPECT_EQ(got, want) << bits << "-bit";
        int ties = 0;
        for (int t : want) ties += t == 1234 || t == 100 || t == 17 || t == 4999;
        EXPECT_GT(ties, 3) << "the constructed ties and near-ties decide too few rows to test them";
        // one row at a time (n = 1) gives the same tokens
        for (int64_t i = 0; i < n; ++i) {
            int one = -1;
            ops::head_argmax(h.data() + i * K, 1, q.w, screen.get(), &one);
            EXPECT_EQ(one, want[size_t(i)]) << bits << "-bit, row " << i;
        }
    }
}

// Weights 1 + 0.001·q: steps far below bf16's resolution near 1 (2⁻⁷), so the bf16 screen orders the top rows
// differently from the float32 logits for some hidden rows (checked), and the rescoring has to find the exact one.
TEST(HeadArgmax, FindsTheFloat32ArgmaxWhereBf16OrdersRowsDifferently) {
    for (const int64_t K : {256, 2048}) { // the 0.6B head's width is 1024, the 1.7B one's 2048
        const int64_t V = 5003, n = 24;
        QHead q(V, K, 8, 64, 21);
        std::fill(q.s.begin(), q.s.end(), f32_to_bf16(0.001f));
        std::fill(q.b.begin(), q.b.end(), f32_to_bf16(1.0f));
        const auto screen = ops::head_screen(q.w);
        if (!screen) GTEST_SKIP() << "no AMX + AVX-512 here";
        const std::vector<float> h = qasr::test::randn(size_t(n * K), 8);
        std::vector<int> got(static_cast<size_t>(n));
        ops::head_argmax(h.data(), n, q.w, screen.get(), got.data());
        const std::vector<int> want = reference(h, n, q.w);
        EXPECT_EQ(got, want) << "K " << K;
        std::vector<float> approx(size_t(n * V));
        {
            ops::Bf16GemmScope bf16(true);
            ops::linear(h.data(), n, q.w, nullptr, approx.data());
        }
        int differ = 0;
        for (int64_t i = 0; i < n; ++i)
            differ += int(std::max_element(approx.begin() + i * V, approx.begin() + (i + 1) * V) -
                          (approx.begin() + i * V)) != want[size_t(i)];
        EXPECT_GT(differ, 0) << "K " << K << ": the bf16 product picks the float32 argmax on every row: this test "
                                "would not see a screen that keeps only the bf16 maximum";
    }
}

TEST(HeadArgmax, AllRowsEqualRescoresTheWholeRow) {
    const int64_t V = 4500, K = 128, n = 3; // more equal rows than the rescoring takes as candidates
    QHead q(V, K, 8, 64, 5);
    for (int64_t r = 1; r < V; ++r) q.copy_row(0, r);
    q.bind();
    const auto screen = ops::head_screen(q.w);
    if (!screen) GTEST_SKIP() << "no AMX + AVX-512 here";
    const std::vector<float> h = qasr::test::randn(size_t(n * K), 3);
    std::vector<int> got(static_cast<size_t>(n));
    ops::head_argmax(h.data(), n, q.w, screen.get(), got.data());
    EXPECT_EQ(got, reference(h, n, q.w));
    EXPECT_EQ(got, std::vector<int>(size_t(n), 0));
}

TEST(HeadArgmax, WithoutScreenTakesTheLogits) {
    const int64_t V = 300, K = 64, n = 4;
    QHead q(V, K, 8, 32, 9);
    const std::vector<float> h = qasr::test::randn(size_t(n * K), 4);
    std::vector<int> got(static_cast<size_t>(n));
    ops::head_argmax(h.data(), n, q.w, nullptr, got.data());
    EXPECT_EQ(got, reference(h, n, q.w));
}
