// CPUs other than x86-64 (ARM, ...): no bf16 engine is built (bf16_gemm.cpp holds AMX and AVX512-BF16 code), so
// the capability queries of bf16_gemm.hpp answer no and the products stay in float32.
#include "backend/cpu/bf16_gemm.hpp"

namespace qasr::cpu {

bool amx_available() { return false; }
bool avx512_bf16_available() { return false; }
bool bf16_gemm_available() { return false; }

} // namespace qasr::cpu
