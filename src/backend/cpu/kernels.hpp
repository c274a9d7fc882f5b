// Per-ISA CPU kernel tables. Each ISA's kernels live in their own translation unit compiled with that ISA's
// flags (kernels_avx2.cpp: -mavx2 -mfma -mf16c; kernels_avx512.cpp: AVX-512 F/BW/VL/DQ); the portable table is
// plain C++. The table is chosen once at start-up from the CPU's features, or forced with QASR_ISA=portable|
// avx2|avx512 (tests run the suite with each).
#pragma once
#include <cstddef>
#include <cstdint>

namespace qasr::cpu {

enum class Isa { Portable = 0, Avx2 = 1, Avx512 = 2 };

// A matrix W [N, K] in its stored format (ops::WeightMatrix without the ownership), for the matrix-matrix kernels.
struct MatrixRef {
    enum Fmt { F32, BF16, Q } fmt = F32;
    const void* data = nullptr;        // F32: float; BF16: uint16 (bf16); Q: MLX codes, K·bits/8 bytes a row
    const uint16_t* scales = nullptr;  // Q: bf16 [N, K/gs]
    const uint16_t* biases = nullptr;  // Q: bf16 [N, K/gs]
    int64_t K = 0;
    int bits = 0, gs = 0;
};

struct KernelTable {
    Isa isa;
    const char* name;
    // Quantized matrix-vector product, rows [r0, r1) of y = W·x. x is first prepared by q_prep: xp [K] is x in
    // the order the kernel consumes codes, xs [K/gs] the per-group sums of x (for the bias term).
    void (*q_prep)(const float* x, int64_t K, int bits, int gs, float* xp, float* xs);
    void (*q_gemv)(const uint8_t* W, const uint16_t* scales, const uint16_t* biases, int64_t K, int bits, int gs,
                   const float* xp, const float* xs, float* y, int64_t r0, int64_t r1);
    // bf16 / f32 matrix-vector product, rows [r0, r1): y[r] = W[r,:]·x.
    void (*bf16_gemv)(const uint16_t* W, int64_t K, const float* x, float* y, int64_t r0, int64_t r1);
    void (*f32_gemv)(const float* W, int64_t K, const float* x, float* y, int64_t r0, int64_t r1);
    // Rows [r0, r1) of a quantized matrix as float32 into out[(r - r0) * K + k].
    void (*q_dequant)(const uint8_t* W, const uint16_t* scales, const uint16_t* biases, int64_t K, int bits, int gs,
                      float* out, int64_t r0, int64_t r1);
    void (*bf16_to_f32)(const uint16_t* in, float* out, size_t n);
    // Attention inner loops: dot product, y += a·x.
    float (*dot)(const float* a, const float* b, int64_t n);
    void (*axpy)(float a, const float* x, float* y, int64_t n);
    // Decode attention over nkv consecutive KV heads for one query: KV head c's row j is k + j·ld + c·hd (resp.
    // v), shared by the query heads c·group … c·group + group − 1 at q + h·hd. attn_scores: s[h·n + j] = scale ·
    // dot(q_h, k_j); attn_wsum: o[h·hd …] = Σ_j p[h·n + j] · v_j (overwritten). Per (head, position) the same
    // arithmetic in the same order as dot / axpy, so the results are bit-identical to those loops; the tables may
    // walk the positions in blocks (all heads of a block of rows at once) and prefetch the next block.
    void (*attn_scores)(const float* q, const float* k, int64_t ld, int64_t n, int64_t nkv, int64_t group,
                        int64_t hd, float scale, float* s);
    void (*attn_wsum)(const float* p, const float* v, int64_t ld, int64_t n, int64_t nkv, int64_t group, int64_t hd,
                      float* o);
    // Sum of n floats, streaming (the DRAM read-bandwidth probe of qasr bench).
    float (*sum)(const float* x, int64_t n);
    // attn_scores / attn_wsum over a bf16 cache (k, v: bf16 values at the same element offsets): bit-identical
    // to attn_scores / attn_wsum of the same table on the values widened to float32 (widening is exact).
    void (*attn_scores_bf16)(const float* q, const uint16_t* k, int64_t ld, int64_t n, int64_t nkv, int64_t group,
                             int64_t hd, float scale, float* s);
    void (*attn_wsum_bf16)(const float* p, const uint16_t* v, int64_t ld, int64_t n, int64_t nkv, int64_t group,
                           int64_t hd, float* o);
    // Σ exp(x[i] − m) over n values, accumulated in double (the log-softmax denominator of the greedy choice). The
    // portable table sums std::exp in index order; SIMD tables may use a vector exp (≤ 2 ulp) and several partial
    // sums.
    double (*sum_exp)(const float* x, int64_t n, float m);
    // In-place softmax of one row (the decode attention over a bf16 cache). The portable table computes it as
    // ops::softmax_row (std::exp, double sum); SIMD tables may use the vector exp of sum_exp.
    void (*softmax)(float* x, int64_t n);
    // x ← 0.5·x·(1 + erf(x·(1/√2))) in place (the encoder's exact-erf GELU). The portable table uses std::erf; the
    // SIMD tables the piecewise polynomial of cpu::erf_table (elementwise.hpp: ≤ 2 ulp from std::erf), with the
    // same float operations around it.
    void (*gelu_erf)(float* x, size_t n);
    // Several inputs at once (a batched decode step): y[b][r] = W[r,:]·x[b] for b < nb ≤ kMaxMulti, rows [r0, r1),
    // each weight block loaded and widened once for all inputs; row b's result bit for bit what bf16_gemv /
    // q_gemv give x[b] alone (the same operations per input in the same order). nullptr (or a format the kernel
    // declines by returning false): the caller runs the single-input kernel per input.
    void (*bf16_gemv_multi)(const uint16_t* W, int64_t K, const float* const* x, int nb, float* const* y, int64_t r0,
                            int64_t r1) = nullptr;
    bool (*q_gemv_multi)(const uint8_t* W, const uint16_t* scales, const uint16_t* biases, int64_t K, int bits, int gs,
                         const float* const* xp, const float* const* xs, int nb, float* const* y, int64_t r0,
                         int64_t r1) = nullptr;
    // Matrix-matrix product on the calling thread, W's rows [n0, n1): y[m·ldy + n] = Σ_k x[m·ldx + k] · W[n, k] for
    // m < M. Each y element one float32 chain over k in order (independent of M, n0, n1, ldx). nullptr: ops::gemm
    // converts tiles of W to float32 for sgemm instead (gemm_avx2.cpp says why the kernel is better where it exists).
    void (*gemm_rows)(const float* x, int64_t ldx, int64_t M, const MatrixRef& W, int64_t n0, int64_t n1, float* y,
                      int64_t ldy) = nullptr;
};
constexpr int kMaxMulti = 4;

const KernelTable& portable_kernels();
const KernelTable* avx2_kernels();   // nullptr when not compiled in
void avx2_gemm_rows(const float* x, int64_t ldx, int64_t M, const MatrixRef& W, int64_t n0, int64_t n1, float* y,
                    int64_t ldy); // the AVX2 table's gemm_rows (gemm_avx2.cpp)
const KernelTable* avx512_kernels(); // nullptr when not compiled in

bool isa_supported(Isa isa);        // compiled in and supported by this CPU
const KernelTable& kernels();       // the active table
void set_isa(Isa isa);              // throws when unsupported
Isa best_isa();
const char* isa_name(Isa isa);

} // namespace qasr::cpu
