// MLX affine quantization, bit-exact: hand-made groups whose codes, scales and biases are known in closed form
// (formats.md §1.2: edge anchoring, negative scales), packing checked against per-width byte formulas written
// out independently (formats.md §1.3) and literal bytes, and dequantize(quantize(w)) within the affine bound
// with the scales/biases rounded to bf16 as they are stored.
#include "core/dtype.hpp"
#include "model/quant.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

using namespace qasr;

namespace {

// Independent packer: the per-pack byte formulas of formats.md §1.3 (not the LSB-first loop of quant.cpp).
std::vector<uint8_t> pack_by_formula(const std::vector<uint32_t>& q, int bits) {
    std::vector<uint8_t> out;
    switch (bits) {
    case 8:
        for (uint32_t v : q) out.push_back(uint8_t(v));
        break;
    case 4:
        for (size_t i = 0; i < q.size(); i += 2) out.push_back(uint8_t(q[i] | q[i + 1] << 4));
        break;
    case 2:
        for (size_t i = 0; i < q.size(); i += 4) out.push_back(uint8_t(q[i] | q[i + 1] << 2 | q[i + 2] << 4 | q[i + 3] << 6));
        break;
    case 6:
        for (size_t i = 0; i < q.size(); i += 4) {
            out.push_back(uint8_t(q[i] | (q[i + 1] & 3) << 6));
            out.push_back(uint8_t(q[i + 1] >> 2 | (q[i + 2] & 15) << 4));
            out.push_back(uint8_t(q[i + 2] >> 4 | q[i + 3] << 2));
        }
        break;
    case 3:
        for (size_t i = 0; i < q.size(); i += 8) {
            out.push_back(uint8_t(q[i] | q[i + 1] << 3 | (q[i + 2] & 3) << 6));
            out.push_back(uint8_t(q[i + 2] >> 2 | q[i + 3] << 1 | q[i + 4] << 4 | (q[i + 5] & 1) << 7));
            out.push_back(uint8_t(q[i + 5] >> 1 | q[i + 6] << 2 | q[i + 7] << 5));
        }
        break;
    case 5:
        for (size_t i = 0; i < q.size(); i += 8) {
            out.push_back(uint8_t(q[i] | (q[i + 1] & 7) << 5));
            out.push_back(uint8_t(q[i + 1] >> 3 | q[i + 2] << 2 | (q[i + 3] & 1) << 7));
            out.push_back(uint8_t(q[i + 3] >> 1 | (q[i + 4] & 15) << 4));
            out.push_back(uint8_t(q[i + 4] >> 4 | q[i + 5] << 1 | (q[i + 6] & 3) << 6));
            out.push_back(uint8_t(q[i + 6] >> 2 | q[i + 7] << 3));
        }
        break;
    }
    return out;
}

} // namespace

// One group of 64 built from known codes c_j on an exact grid w = -1 + c/16: MLX must recover exactly those
// codes (min edge dominant: positive scale 1/16, bias -1) or their mirror n - c (max edge dominant: the scale
// is negative and the bias is the maximum), for every width.
TEST(QuantMlx, HandMadeGroupsEveryWidth) {
    for (int bits : {2, 3, 4, 5, 6, 8}) {
        const uint32_t n = (1u << bits) - 1;
        std::vector<uint32_t> c(64);
        for (int j = 0; j < 64; ++j) c[size_t(j)] = uint32_t(j * 7 + 3) % (n + 1);
        c[0] = 0;
        c[1] = n; // both ends present
        std::vector<float> w(64);
        for (int j = 0; j < 64; ++j) w[size_t(j)] = -1.0f + float(c[size_t(j)]) / 16.0f;
        const float wmax = -1.0f + float(n) / 16.0f;
        const bool min_edge = 1.0f > std::fabs(wmax);
        const AffineQuantized q = quantize_affine(w.data(), 1, 64, bits, 64);
        std::vector<uint32_t> want(64);
        for (int j = 0; j < 64; ++j) want[size_t(j)] = min_edge ? c[size_t(j)] : n - c[size_t(j)];
        if (min_edge) {
            EXPECT_EQ(q.scales[0], 1.0f / 16.0f) << bits;
            EXPECT_EQ(q.biases[0], -1.0f) << bits;
        } else {
            EXPECT_EQ(q.scales[0], -1.0f / 16.0f) << bits; // negative scale, bias = the max edge
            EXPECT_EQ(q.biases[0], wmax) << bits;
        }
        for (int j = 0; j < 64; ++j) EXPECT_EQ(affine_code(q.packed.data(), j, bits), want[size_t(j)]) << bits << " " << j;
        EXPECT_EQ(q.packed, pack_by_formula(want, bits)) << bits;
        // dequantization reproduces the grid exactly
        for (int j = 0; j < 64; ++j)
            EXPECT_EQ(q.scales[0] * float(want[size_t(j)]) + q.biases[0], w[size_t(j)]) << bits << " " << j;
    }
    // bits 2..5: the max edge is < 1 in magnitude, the min edge wins; bits 6 and 8: the max edge wins
}

TEST(QuantMlx, LiteralBytes) {
    // 4-bit: codes 15,14,...,0 repeated, min-edge grid → bytes 0xEF 0xCD 0xAB 0x89 0x67 0x45 0x23 0x01
    std::vector<float> w(64);
    for (int j = 0; j < 64; ++j) w[size_t(j)] = -1.0f + float(15 - j % 16) / 16.0f;
    AffineQuantized q = quantize_affine(w.data(), 1, 64, 4, 64);
    const uint8_t want4[8] = {0xEF, 0xCD, 0xAB, 0x89, 0x67, 0x45, 0x23, 0x01};
    for (int i = 0; i < 32; ++i) EXPECT_EQ(q.packed[size_t(i)], want4[i % 8]) << i;
    // 6-bit: the worked example of formats.md §1.4 — codes 5, 60, 33, 18 pack to 05 1F 4A.
    std::vector<float> w6(64, -1.0f);
    const uint32_t codes[4] = {5, 60, 33, 18};
    for (int j = 0; j < 4; ++j) w6[size_t(j)] = -1.0f + float(codes[j]) / 64.0f;
    w6[63] = -1.0f + 63.0f / 64.0f; // both edges: min -1 (dominant), max -1/64
    q = quantize_affine(w6.data(), 1, 64, 6, 64);
    EXPECT_EQ(q.scales[0], 1.0f / 64.0f);
    EXPECT_EQ(q.packed[0], 0x05);
    EXPECT_EQ(q.packed[1], 0x1F);
    EXPECT_EQ(q.packed[2], 0x4A);
    // 8-bit: byte j = code j
    std::vector<float> w8(64);
    for (int j = 0; j < 64; ++j) w8[size_t(j)] = -1.0f + float(j == 0 ? 0 : 4 * j + 3) / 16.0f; // max 14.9375 wins
    q = quantize_affine(w8.data(), 1, 64, 8, 64);
    EXPECT_EQ(q.scales[0], -1.0f / 16.0f);
    EXPECT_EQ(q.biases[0], 14.9375f);
    for (int j = 0; j < 64; ++j) EXPECT_EQ(q.packed[size_t(j)], uint8_t(j == 0 ? 255 : 252 - 4 * j)) << j;
}

TEST(QuantMlx, ConstantGroups) {
    // max = min: the scale floors at 1e-7 (negated), the bias is the value, every code 0 → exact.
    for (int bits : {2, 3, 4, 5, 6, 8}) {
        std::vector<float> cst(64, 0.25f);
        const AffineQuantized qc = quantize_affine(cst.data(), 1, 64, bits, 64);
        EXPECT_EQ(qc.biases[0], 0.25f) << bits;
        for (int j = 0; j < 64; ++j) EXPECT_EQ(affine_code(qc.packed.data(), j, bits), 0u) << bits;
    }
}

// dequantize(quantize(w)) with the stored (bf16-rounded) scale and bias: |w - ŵ| ≤ |s|/2 + bf16 rounding of
// s·q and b (+ the distance to the grid for values the edge rescaling leaves outside it), every width and
// group size.
TEST(QuantMlx, RoundTripWithBf16ScalesWithinAffineBound) {
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0, 0.05f);
    for (int gs : {32, 64, 128})
        for (int bits : {2, 3, 4, 5, 6, 8}) {
            const int64_t out = 4, in = 256;
            std::vector<float> w(size_t(out * in));
            for (auto& v : w) v = nd(rng);
            const AffineQuantized q = quantize_affine(w.data(), out, in, bits, gs);
            double max_rel = 0;
            for (int64_t r = 0; r < out; ++r)
                for (int64_t j = 0; j < in; ++j) {
                    const size_t g = size_t(r * (in / gs) + j / gs);
                    const float s = bf16_to_f32(f32_to_bf16(q.scales[g])), b = bf16_to_f32(f32_to_bf16(q.biases[g]));
                    const float code = float(affine_code(q.packed.data() + size_t(r * in * bits / 8), j, bits));
                    const float deq = s * code + b, x = w[size_t(r * in + j)];
                    // outside the grid [lo, hi] (the edge rescaling can shrink it) values clamp to its end
                    const float n = float((1 << bits) - 1), lo = std::min(b, b + s * n), hi = std::max(b, b + s * n);
                    const float outside = x < lo ? lo - x : x > hi ? x - hi : 0.0f;
                    const float bound = std::fabs(q.scales[g]) * 0.5f + outside + std::fabs(s * code) * 0.0079f +
                                        std::fabs(b) * 0.0079f + 1e-6f;
                    EXPECT_LE(std::fabs(deq - x), bound) << bits << " gs" << gs;
                    if (outside == 0.0f) max_rel = std::max(max_rel, double(std::fabs(deq - x) / std::fabs(q.scales[g])));
                }
            EXPECT_LT(max_rel, 0.5 + 0.0079 * (1 << bits) + 0.02) << bits; // half a step + bf16 rounding
        }
}
