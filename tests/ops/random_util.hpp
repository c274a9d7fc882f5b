// Gaussian test data shared by the ops-tier tests: n values of N(0, sd²) from mt19937(seed).
#pragma once
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace qasr::test {

inline std::vector<float> randn(size_t n, uint32_t seed, float sd = 1.0f) {
    std::mt19937 r(seed);
    std::normal_distribution<float> d(0, sd);
    std::vector<float> v(n);
    for (auto& x : v) x = d(r);
    return v;
}

} // namespace qasr::test
