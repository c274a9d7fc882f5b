// The AVX-512 table's quantized matrix-vector products (kernels_avx512_quant.cpp): q_prep, q_gemv and
// q_gemv_multi of the AVX-512 KernelTable (contracts in kernels.hpp).
#pragma once
#include <cstdint>

namespace qasr::cpu::a5 {

void q_prep(const float* x, int64_t K, int bits, int gs, float* xp, float* xs);
void q_gemv(const uint8_t* W, const uint16_t* scales, const uint16_t* biases, int64_t K, int bits, int gs,
            const float* xp, const float* xs, float* y, int64_t r0, int64_t r1);
bool q_gemv_multi(const uint8_t* W, const uint16_t* scales, const uint16_t* biases, int64_t K, int bits, int gs,
                  const float* const* xp, const float* const* xs, int nb, float* const* y, int64_t r0, int64_t r1);

} // namespace qasr::cpu::a5
