// WeightMatrix: a [rows, cols] matrix in its compute format — float32, bf16 (read straight from the
// memory-mapped checkpoint) or MLX affine-quantized (4/6/8-bit codes + bf16 scales and biases, also mapped).
// ops::linear dispatches on the format; model code stays format-neutral.
#pragma once
#include "core/tensor.hpp"

#include <cstdint>
#include <memory>
#include <vector>

namespace qasr {

enum class WFormat : uint8_t { F32, BF16, Q };

struct WeightMatrix {
    WFormat fmt = WFormat::F32;
    int64_t rows = 0, cols = 0;
    int bits = 0, group_size = 0;       // Q only
    const void* data = nullptr;         // F32: float[rows*cols]; BF16: uint16[rows*cols]; Q: rows*cols*bits/8 bytes
    const uint16_t* scales = nullptr;   // Q: bf16 [rows, cols/group_size]
    const uint16_t* biases = nullptr;   // Q: bf16 [rows, cols/group_size]
    std::shared_ptr<const void> owner;  // keeps owned storage (or the mapping) alive; copies share it

    bool empty() const { return rows == 0; }
    int64_t dim(int i) const { return i == 0 ? rows : cols; }
    std::vector<int64_t> shape() const { return {rows, cols}; }
    // Bytes one full matrix-vector product reads (codes + scales + biases).
    size_t bytes() const;
    const char* format_name() const; // "f32", "bf16", "q4", "q6", "q8"
    // Row r as float32 (the embedding lookup); out[cols].
    void row_f32(int64_t r, float* out) const;
    // Whole matrix as float32 (tests, tools).
    std::vector<float> to_f32() const;

    static WeightMatrix from_f32(std::vector<float> values, int64_t rows, int64_t cols); // owned
    static WeightMatrix from_tensor(Tensor t);                                            // owned, 2-D
};

} // namespace qasr
