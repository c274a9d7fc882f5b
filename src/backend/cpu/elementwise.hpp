// Single-threaded forms of the elementwise ops (ops::rms_norm, ops::silu_mul run them per row / chunk on the thread
// team): for callers already inside a parallel region (the fused decode step), where the ops' own `omp parallel`
// would open a nested one-thread region per call (≈1 µs each, 80 of them per layer).
#pragma once
#include <cstddef>
#include <cstdint>

namespace qasr::cpu {

void rms_norm_serial(float* x, int64_t rows, int64_t d, const float* w, float eps); // in place, as ops::rms_norm
void silu_mul_serial(float* gate, const float* up, size_t n);                        // as ops::silu_mul

} // namespace qasr::cpu
