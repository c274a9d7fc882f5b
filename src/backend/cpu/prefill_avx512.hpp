// AVX-512 / AMX kernels of the multi-row decoder pass of quantized checkpoints (bf16 compute): causal attention
// over a bf16 KV cache on AMX tiles, SiLU·up with a vector exp, exact float32 → bf16 rounding. Compiled with the
// AMX flags (prefill_avx512.cpp); call only where the AVX-512 table is active (and AMX granted, for attention).
#pragma once
#include <cstddef>
#include <cstdint>

namespace qasr::cpu {

// Causal attention of n queries (positions past..past+n−1) over a head-major bf16 cache: key j of KV head c at
// k + c·head_stride + j·hd (v alike), past+n positions. q, o: [n, Hq·hd]; query head h reads KV head h/(Hq/Hkv).
// Scores q·kᵀ and p·v run on AMX with q and p split into two bf16 terms (hi + lo, ≈16 significant bits; k and v
// are bf16 already) and float32 accumulation; scale and softmax (the `softmax` row function) in float32.
// Needs hd a multiple of 64. Parallel over KV heads (query heads, with more threads than KV heads) on the team.
void amx_causal_attention(const float* q, const uint16_t* k, const uint16_t* v, int64_t head_stride, float* o,
                          int64_t n, int64_t past, int64_t Hq, int64_t Hkv, int64_t hd,
                          void (*softmax)(float*, int64_t));

// gate[i] = silu(gate[i])·up[i] for i < n with a vector exp (a few ulp from std::exp). One thread.
void silu_mul_avx512(float* gate, const float* up, size_t n);

// RMSNorm of `rows` rows of d values in place (x ← w·(x·inv), inv = 1/√(mean(x²) + eps) from a double sum of
// squares), as cpu::rms_norm_serial but with 16 partial sums (two vectors of 8 doubles) instead of 4: the same
// exact squares summed in another order, so inv may differ in its last bit (rarely). One thread.
void rms_norm_rows_avx512(float* x, int64_t rows, int64_t d, const float* w, float eps);

// f32 → bf16 round to nearest even, NaN kept quiet: bit for bit qasr::f32_to_bf16 (denormals kept). One thread.
void f32_to_bf16_avx512(const float* x, uint16_t* y, size_t n);

} // namespace qasr::cpu
