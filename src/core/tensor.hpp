// Tensor: an owning, contiguous, row-major float32 array with a shape. The CPU engine computes in fp32;
// storage dtypes (bf16/f16/quantized) are converted at the weight layer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace qasr {

struct Tensor {
    std::vector<int64_t> shape;
    std::vector<float> data;

    Tensor() = default;
    explicit Tensor(std::vector<int64_t> s) : shape(std::move(s)), data(count(shape), 0.0f) {}
    Tensor(std::initializer_list<int64_t> s) : Tensor(std::vector<int64_t>(s)) {}

    static size_t count(const std::vector<int64_t>& s) {
        size_t n = 1;
        for (int64_t d : s) n *= size_t(d);
        return n;
    }
    size_t size() const { return data.size(); }
    int64_t dim(size_t i) const { return shape.at(i); }
    int64_t rows() const { return shape.empty() ? 0 : shape[0]; }
    int64_t cols() const { return shape.empty() ? 0 : int64_t(data.size() / size_t(shape[0])); }
    float* ptr() { return data.data(); }
    const float* ptr() const { return data.data(); }
    float* row(int64_t r) { return data.data() + size_t(r) * size_t(cols()); }
    const float* row(int64_t r) const { return data.data() + size_t(r) * size_t(cols()); }
};

std::string shape_str(const std::vector<int64_t>& shape);

} // namespace qasr
