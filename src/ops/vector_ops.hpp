// Operators for the multi-row decoder pass of quantized checkpoints (the bf16-compute path: prefill, draft
// verification), next to ops.hpp. Float checkpoints keep ops::silu_mul and the rest of the float32 reference
// arithmetic.
#pragma once
#include <cstddef>
#include <cstdint>

#include "ops/weight.hpp"

namespace qasr::ops {

// gate = silu(gate)·up (as ops::silu_mul) with a vectorized exp where the AVX-512 table is active (within a few
// ulp of std::exp), on the thread team for large n; ops::silu_mul otherwise.
void silu_mul_fast(float* gate, const float* up, size_t n);

// ys[i] = x·Ws[i]ᵀ (row-major [M, Ws[i]->rows]) for matrices of one input width, as ops::linear on each (same
// values); quantized matrices in the bf16 scope with AMX go through one parallel pass with x packed once.
void linear_multi_rows(const float* x, int64_t M, const WeightMatrix* const* Ws, float* const* ys, size_t count);

// y[i] = f32_to_bf16(x[i]) (nearest even, NaN quiet), bit for bit, vectorized where the AVX-512 table is active.
void round_to_bf16(const float* x, uint16_t* y, size_t n);

} // namespace qasr::ops
