// Vectorized operators for the multi-row passes of quantized checkpoints (the bf16-compute path: decoder prefill,
// encoder), next to ops.hpp. Float checkpoints keep ops::silu_mul, ops::gelu_erf and the rest of the float32
// reference arithmetic.
#pragma once
#include <cstddef>
#include <cstdint>

namespace qasr::ops {

// gate = silu(gate)·up (as ops::silu_mul) with a vectorized exp where the AVX-512 table is active (within a few
// ulp of std::exp), on the thread team for large n; ops::silu_mul otherwise.
void silu_mul_fast(float* gate, const float* up, size_t n);

// x = gelu(x) = ½x(1 + erf(x/√2)) (as ops::gelu_erf) with a vectorized erfc where the AVX-512 table is active
// (relative error ≈ 2e-7), on the thread team for large n; ops::gelu_erf otherwise.
void gelu_erf_fast(float* x, size_t n);

// y[i] = f32_to_bf16(x[i]) (nearest even, NaN quiet), bit for bit, vectorized where the AVX-512 table is active.
void round_to_bf16(const float* x, uint16_t* y, size_t n);

} // namespace qasr::ops
