// MLX affine quantization (formats.md §1): per row, groups of `group_size` columns share a (scale, bias);
// codes are an LSB-first bit stream of `bits`-bit values; w = scale * q + bias.
#pragma once
#include "core/tensor.hpp"
#include "io/config.hpp"
#include "io/safetensors.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace qasr {

struct AffineLayout {
    int bits = 0;
    int group_size = 0;
};

// Validates `<base>.weight/.scales/.biases` against the float shape [out, in]; infers bits and group size from
// the stored shapes and cross-checks them with the config's quantization block. Throws on any mismatch.
AffineLayout describe_affine(const TensorStore& store, const std::string& base, const std::vector<int64_t>& shape,
                             const QuantHParams& q);
Tensor dequantize_affine(const TensorStore& store, const std::string& base, const std::vector<int64_t>& shape,
                         const QuantHParams& q);

// Code of column j in a packed row (universal LSB-first rule).
inline uint32_t affine_code(const uint8_t* row, int64_t j, int bits) {
    const uint64_t o = uint64_t(j) * uint64_t(bits);
    uint32_t lo = row[o >> 3];
    uint32_t hi = ((o & 7) + unsigned(bits) > 8) ? uint32_t(row[(o >> 3) + 1]) << 8 : 0u;
    return ((lo | hi) >> (o & 7)) & ((1u << bits) - 1u);
}

// Quantizes rows of w [out, in] exactly as MLX does; returns packed bytes, scales and biases (float, to be
// stored in the weight dtype).
struct AffineQuantized {
    std::vector<uint8_t> packed; // out * in * bits / 8
    std::vector<float> scales;   // out * in / group_size
    std::vector<float> biases;
};
AffineQuantized quantize_affine(const float* w, int64_t out, int64_t in, int bits, int group_size);

} // namespace qasr
