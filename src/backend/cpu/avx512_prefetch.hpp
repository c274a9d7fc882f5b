// Shared by the AVX-512 kernel files (kernels_avx512.cpp, kernels_avx512_quant.cpp): weight-stream prefetching.
// Include only from files compiled with the AVX-512 flags.
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace qasr::cpu::a5 {

constexpr int64_t kPrefetch = 2048; // bytes ahead for the bandwidth probe's stream (prefetcht0)
// Weight streams are prefetched into L2 (prefetcht1) kPrefetchFar bytes ahead: far enough to cross into the next
// 4 KiB page before the loads get there (the hardware prefetchers stop at page boundaries), and into L2 only, so
// the prefetches do not hold L1 fill buffers for the whole memory latency. Measured on the 8-bit decode of the
// 0.6B model: prefetcht0 2 KiB ahead 34 ms of matrix-vector products per token, prefetcht1 2 KiB 34, 4–8 KiB
// 29–30, 16 KiB 30 (4 KiB-page mapping); with huge pages 26 (t0, 2 KiB) against 23–24 (t1, 3–12 KiB).
constexpr int64_t kPrefetchFar = 6144;
inline void prefetch_far(const void* p) { _mm_prefetch(static_cast<const char*>(p) + kPrefetchFar, _MM_HINT_T1); }

} // namespace qasr::cpu::a5
