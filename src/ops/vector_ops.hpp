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
// values); quantized matrices and bf16 ones of whole 32-row blocks (the encoder's), in the bf16 scope with AMX or
// AVX512-BF16, go through one parallel pass with x packed once.
void linear_multi_rows(const float* x, int64_t M, const WeightMatrix* const* Ws, float* const* ys, size_t count);

// h = silu(x·gateᵀ)·(x·upᵀ) [M, gate.rows] for two matrices of one shape: the values of linear_multi_rows on both
// followed by silu_mul_fast (bit for bit). Quantized matrices in the bf16 scope with AMX or AVX512-BF16 and the AVX-512 table
// are combined per 32-row block inside the product (cpu::bf16_q_swiglu_rows: neither product is written out);
// otherwise it runs exactly that sequence (with a scratch buffer for the up product).
void linear_swiglu_rows(const float* x, int64_t M, const WeightMatrix& gate, const WeightMatrix& up, float* h);

// Row-parallel pieces of the multi-row decoder pass, each bit for bit the per-op sequence it replaces (the same
// serial kernels per row; rows are independent): fewer parallel regions per layer and no serial stretches. In the
// bf16 scope with the AVX-512 table their RMSNorms sum the squares with 16 partial sums instead of 4 (the last bit
// of a row's scale may differ from ops::rms_norm, rarely); otherwise bit for bit.
// x[r] += a[r] (a may be null: no add), then, if u is not null, u[r] = rms_norm(x[r]) (w, eps), for rows r < n of
// width d: ops::add + a copy + ops::rms_norm.
void add_rms_norm_rows(float* x, const float* a, float* u, int64_t n, int64_t d, const float* w, float eps);
// Per row t < n of q [n, Hq·hd] and k [n, Hkv·hd]: the heads RMS-normalized (qw, kw: [hd]), then rotated with row t
// of the RoPE table cs [n, hd] (ops::rope_cs), then put(t) (e.g. the row's KV-cache write), on the team: the same
// values as ops::rms_norm over n·Hq and n·Hkv rows, ops::rope_cs on q and k, and put over all rows afterwards.
void qk_norm_rope_rows(float* q, float* k, int64_t n, int64_t Hq, int64_t Hkv, int64_t hd, const float* qw,
                       const float* kw, float eps, const float* cs, void (*put)(void* ctx, int64_t t), void* ctx);

// The same for the encoder layers (float32 arithmetic of ops::add / ops::layer_norm / ops::gelu_erf per row, on the
// team): per row r < n of width d, if y: h[r] += y[r] + bias (bias may be null: h[r] += y[r]); then, if out:
// out[r] = layer_norm(h[r]) (w, b, eps). And y[r] += bias (bias_rows), followed by the active table's GELU when
// gelu (as ops::linear's bias then ops::gelu_erf).
void residual_layer_norm_rows(float* h, const float* y, const float* bias, float* out, int64_t n, int64_t d,
                              const float* w, const float* b, float eps);
void bias_rows(float* y, const float* bias, int64_t n, int64_t d, bool gelu);

// y[i] = f32_to_bf16(x[i]) (nearest even, NaN quiet), bit for bit, vectorized where the AVX-512 table is active.
void round_to_bf16(const float* x, uint16_t* y, size_t n);

} // namespace qasr::ops
