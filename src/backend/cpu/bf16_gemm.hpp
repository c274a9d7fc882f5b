// bf16 matrix-matrix products: y[M, N] (row stride ldy) = x[M, K] · W[N, K]ᵀ with x and W rounded to bf16 and
// float32 accumulation, on Intel AMX tiles (TMUL) where the kernel grants them, else on AVX512-BF16 vectors
// (vdpbf16ps: AMD Zen 4 and later, Intel Cooper Lake) — the same operands in the same layouts, two engines. Used
// for M > 1 products when bf16 compute is enabled (quantized checkpoints, or QASR_GEMM=bf16); the float32 sgemm
// path stays the default for float checkpoints. A row's result never depends on M (on either engine).
#pragma once
#include <cstddef>
#include <cstdint>

namespace qasr::cpu {

// True when the CPU has AMX-BF16 and the kernel granted this process the tile state (arch_prctl); QASR_AMX=0
// pretends it has not.
bool amx_available();

// True when the CPU has AVX512-BF16 (vdpbf16ps).
bool avx512_bf16_available();

// True when the bf16 products below can run: on AMX tiles, or else on AVX512-BF16 vectors with the AVX-512 kernel
// table active (QASR_BF16_VECTOR=0 turns the vector engine off). The callers gate on this; only amx_causal_attention
// (prefill_avx512.hpp) needs the tiles themselves.
bool bf16_gemm_available();

// Loads the tile configuration every AMX kernel here uses (8 tiles of 16 rows × 64 bytes) on this thread, once.
void amx_load_tile_config();

// x packed once per product for bf16_gemm_rows: bf16 in the tile layout (the VNNI pair layout both engines read) (see bf16_gemm.cpp), M padded to Mp (a
// multiple of 16) with zero rows. bf16_packed_x_size includes 64 bytes of slack: bf16_pack_x puts the tiles at the
// first 64-byte boundary of `out` (px.data), since unaligned tile loads cost ~5× as much.
struct Bf16PackedX {
    uint16_t* data = nullptr;
    int64_t M = 0, Mp = 0, Kp = 0;
};
size_t bf16_packed_x_size(int64_t M, int64_t K); // uint16 count
void bf16_pack_x(const float* x, int64_t M, int64_t K, uint16_t* out, Bf16PackedX& px);

// Rows [0, nb) of bf16 weights Wt (row stride ldw elements, K padded with zeros to px.Kp, nb a multiple of 32
// rows, padded with zero rows) times packed x → y[m, r] for r < n_valid, m < px.M. Wt needs no alignment: for more
// than 32 x rows it is copied 32 rows × 256 columns at a time into an aligned buffer.
void bf16_gemm_rows(const uint16_t* Wt, int64_t ldw, int64_t nb, int64_t n_valid, const Bf16PackedX& px, float* y,
                   int64_t ldy);

// Rows [n0, n0 + rows) of an MLX affine matrix (gs a multiple of 32) times packed x → y[m, r] (row stride ldy)
// for r < rows, m < px.M: 32 rows × 256 columns at a time are dequantized to bf16 (as bf16_q_dequant) into an
// aligned per-thread buffer and multiplied while it is in L1.
void bf16_q_gemm_rows(const uint8_t* W, const uint16_t* scales, const uint16_t* biases, int64_t K, int bits, int gs,
                     int64_t n0, int64_t rows, const Bf16PackedX& px, float* y, int64_t ldy);

// SwiGLU of two MLX affine matrices of one shape (gate, up: same K, bits, gs; gs a multiple of 32 dividing K):
// h[m, r] = silu(x·gateᵀ)[m, n0 + r]·(x·upᵀ)[m, n0 + r] (row stride ldh) for r < rows, m < px.M. Per 32-row block
// the gate and up products run as bf16_q_gemm_rows runs them (same float32 values) and are combined on the way out
// with the vector exp of ops::silu_mul_fast, so h equals bf16_q_gemm_rows of both followed by silu_mul_avx512, bit
// for bit, without writing the two products out.
struct QMatrixRef {
    const uint8_t* W;
    const uint16_t *scales, *biases;
    int bits, gs;
};
void bf16_q_swiglu_rows(const QMatrixRef& gate, const QMatrixRef& up, int64_t K, int64_t n0, int64_t rows,
                       const Bf16PackedX& px, float* h, int64_t ldh);

// Rows [r0, r1) of an MLX affine matrix (gs a multiple of 32) dequantized straight to bf16, row stride ldo
// (float32 s·q + b rounded to nearest even; vectorized for 8 and 4 bits).
void bf16_q_dequant(const uint8_t* W, const uint16_t* scales, const uint16_t* biases, int64_t K, int bits, int gs,
                   uint16_t* out, int64_t ldo, int64_t r0, int64_t r1);

// float32 product with an MLX affine matrix (gs a multiple of 16), for few x rows: rows [n0, n1) of W are
// dequantized two at a time to float32 (s·q + b, as the float32 path does) into an L1 buffer and multiplied with
// every x row in registers (AVX-512 FMA, 8 x rows × 2 W rows per pass) → y[m, n − n0] (row stride ldy). Needs only
// AVX-512F (compiled here with the AMX flags).
void q_gemm_f32_rows(const uint8_t* W, const uint16_t* scales, const uint16_t* biases, int64_t K, int bits, int gs,
                     int64_t n0, int64_t n1, const float* x, int64_t M, float* y, int64_t ldy);

// float32 → bf16 (round to nearest even) for n values.
void f32_to_bf16_rows(const float* in, uint16_t* out, size_t n);

} // namespace qasr::cpu
