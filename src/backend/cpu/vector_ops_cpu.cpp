// Dispatch of the operators in ops/vector_ops.hpp: the AVX-512 kernels (prefill_avx512.cpp) where that table is
// active, the portable definitions otherwise (QASR_ISA=portable|avx2, other CPUs).
#include "ops/vector_ops.hpp"

#include "backend/cpu/kernels.hpp"
#include "core/dtype.hpp"
#include "ops/ops.hpp"
#ifdef QASR_HAVE_AMX
#include "backend/cpu/prefill_avx512.hpp"
#endif

#include <algorithm>

namespace qasr::ops {

namespace {

// fn(i0, count) over chunks of [0, n) on the thread team; one thread for a few chunks (the fork/join costs ~µs).
template <typename F> void over_chunks(size_t n, F fn) {
    constexpr size_t kChunk = 16384;
    const int64_t chunks = int64_t((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static) if (chunks > 2)
    for (int64_t c = 0; c < chunks; ++c)
        fn(size_t(c) * kChunk, std::min(kChunk, n - size_t(c) * kChunk));
}

} // namespace

void silu_mul_fast(float* gate, const float* up, size_t n) {
#ifdef QASR_HAVE_AMX
    if (cpu::kernels().isa == cpu::Isa::Avx512)
        return over_chunks(n, [&](size_t i0, size_t m) { cpu::silu_mul_avx512(gate + i0, up + i0, m); });
#endif
    silu_mul(gate, up, n);
}

void round_to_bf16(const float* x, uint16_t* y, size_t n) {
#ifdef QASR_HAVE_AMX
    if (cpu::kernels().isa == cpu::Isa::Avx512) return cpu::f32_to_bf16_avx512(x, y, n);
#endif
    for (size_t i = 0; i < n; ++i)
        y[i] = f32_to_bf16(x[i]);
}

} // namespace qasr::ops
