// Backend-neutral operator vocabulary used by the model code (encoder, decoder). Arguments are row-major
// float32 buffers; shapes in comments. The CPU implementations live in src/backend/cpu/.
#pragma once
#include "core/tensor.hpp"
#include "ops/weight.hpp"

#include <cstdint>
#include <memory>
#include <vector>

namespace qasr::ops {

// Threads used by the CPU kernels (OpenMP and, when present, OpenBLAS). n ≤ 0: all cores.
void set_num_threads(int n);
int num_threads();

// y[M,N] = x[M,K] · W[N,K]ᵀ (+ bias[N]).
void linear(const float* x, int64_t M, int64_t K, const float* W, int64_t N, const float* bias, float* y);
Tensor linear(const Tensor& x, const Tensor& W, const Tensor* bias = nullptr); // x [M,K], W [N,K] → [M,N]
// y[M,N] = x[M,K] · Wᵀ (+ bias) for a weight in any compute format (f32, bf16, MLX affine 4/6/8-bit): M = 1 runs
// the fused per-ISA matrix-vector kernels, M > 1 expands tiles of W to float32 for sgemm.
void linear(const float* x, int64_t M, const WeightMatrix& W, const float* bias, float* y);
Tensor linear(const Tensor& x, const WeightMatrix& W, const Tensor* bias = nullptr);
// *ys[i] = x · Ws[i]ᵀ for several matrices sharing x (no bias); one parallel region when x is one row.
void linear_multi(const Tensor& x, const std::vector<const WeightMatrix*>& Ws, const std::vector<Tensor*>& ys);
// y [B, N] = x [B, K] · Wᵀ for B independent rows (a batched decode step's LM head), each row bit for bit what
// linear() gives it alone (the matrix-vector kernels; linear() with M > 1 takes the matrix-matrix path), the
// weights streamed once for all rows.
void gemv_batch(const float* x, int64_t B, const WeightMatrix& W, float* y);
// The portable kernel (no BLAS, no bias), kept as the reference for kernel tests.
void linear_portable(const float* x, int64_t M, int64_t K, const float* W, int64_t N, float* y);
void linear_portable_serial(const float* x, int64_t M, int64_t K, const float* W, int64_t N, float* y); // 1 thread
// bf16 compute for matrix-matrix products (x and W rounded to bf16, float32 accumulation, on AMX or AVX512-BF16 where present):
// enabled for the calling thread while a Bf16GemmScope(true) lives (the model code opens one for quantized
// checkpoints). QASR_GEMM=f32 or QASR_GEMM=bf16 overrides it everywhere. Without either the float32 path runs.
bool bf16_gemm_enabled();
// Where bf16 products run on this CPU: "amx", "avx512-bf16", or "none" (the float32 path takes them).
const char* bf16_gemm_engine();
// What runs the float32 matrix-matrix products: "avx2" (the kernel table's own, backend/cpu/gemm_avx2.cpp),
// "sgemm" (OpenBLAS, W expanded to float32 tiles) or "portable" (no BLAS). QASR_PACKED_GEMM=0 takes the first away.
const char* f32_gemm_engine();
class Bf16GemmScope {
public:
    explicit Bf16GemmScope(bool on);
    ~Bf16GemmScope();
    Bf16GemmScope(const Bf16GemmScope&) = delete;
    Bf16GemmScope& operator=(const Bf16GemmScope&) = delete;

private:
    bool prev_;
};
// The matrix-matrix product behind linear() for M > 1 (tiles over the OpenMP team, sgemm per tile).
void gemm(const float* x, int64_t M, const WeightMatrix& W, float* y);

// Greedy choice over several hidden rows h [n, K] under an LM head W [V, K]: out[i] = the first index of the maximum
// of row i's float32 logits. With a screen (head_screen: MLX 4/6/8-bit heads on AVX-512 + AMX, else null) the
// logits are those of the float32 few-row product (s·q + b in float32, one row at a time, whatever n is), found
// without computing them all: a bf16 AMX pass over every row, a per-row error bound (from the head's row norms)
// that leaves a handful of candidates, and the candidates rescored exactly. Without one: linear() in float32.
struct HeadScreen;
std::shared_ptr<const HeadScreen> head_screen(const WeightMatrix& W); // per-row norms of W (one pass over it)
void head_argmax(const float* h, int64_t n, const WeightMatrix& W, const HeadScreen* screen, int* out);

void layer_norm(float* x, int64_t rows, int64_t d, const float* w, const float* b, float eps);  // in place
void rms_norm(float* x, int64_t rows, int64_t d, const float* w, float eps);                    // in place
void gelu_erf(float* x, size_t n);
void silu_mul(float* gate, const float* up, size_t n); // gate = silu(gate) * up
void add(float* y, const float* x, size_t n);           // y += x
void softmax_row(float* x, int64_t n);
// Greedy choice over one row of logits on the thread team: the argmax (ties → lowest index, as torch.argmax) and
// log-softmax at `at` (at < 0: at the argmax). Returns the index whose log-probability was computed.
int64_t argmax_logprob(const float* x, int64_t n, int64_t at, float& logprob);
// Beam search's view of one row of logits: the k largest (ties → lowest index first; k ≤ n) in descending order,
// with their log-softmax values computed as argmax_logprob computes one. ids and logprobs get k entries each.
void top_logprobs(const float* x, int64_t n, int k, int64_t* ids, float* logprobs);

// 3×3, stride 2, padding 1 convolution, OIHW weights. in [Cin, H, W] → out [Cout, ⌈H/2⌉, ⌈W/2⌉] (+bias).
void conv3x3_s2(const float* in, int64_t Cin, int64_t H, int64_t W, const float* w, const float* bias, int64_t Cout,
                float* out);

// Bidirectional attention inside consecutive windows of `window` rows. q,k,v,o: [n, heads*hd].
void windowed_attention(const float* q, const float* k, const float* v, float* o, int64_t n, int64_t heads,
                        int64_t hd, int64_t window);

// Causal attention of n new queries at positions [past, past+n) over a cache holding past+n keys.
// q [n, Hq*hd]; kc, vc [past+n, Hkv*hd]; o [n, Hq*hd]. Query head h uses KV head h / (Hq/Hkv).
void causal_attention(const float* q, const float* kc, const float* vc, float* o, int64_t n, int64_t past,
                      int64_t Hq, int64_t Hkv, int64_t hd);

// A KV cache in any layout: key (value) of KV head c at position j at k + c·head_stride + j·pos_stride (v …),
// counted in elements; float32 or bf16 elements (widened exactly before use).
struct KvView {
    const void* k = nullptr;
    const void* v = nullptr;
    int64_t head_stride = 0, pos_stride = 0;
    bool bf16 = false;
};
// causal_attention over such a cache (holding past+n positions); same arithmetic as the overload above on the
// same (widened) values.
void causal_attention(const float* q, const KvView& kv, float* o, int64_t n, int64_t past, int64_t Hq, int64_t Hkv,
                      int64_t hd);

// Rotate-half RoPE on `heads` head vectors of x [n, heads*hd] at positions pos0..pos0+n-1 (inv_freq [hd/2]).
void rope(float* x, int64_t n, int64_t heads, int64_t hd, int64_t pos0, const float* inv_freq);
// The angles' cosines and sines of rope() for positions pos0 … pos0+n-1: cs [n, hd] (per position hd/2 cosines,
// then hd/2 sines), computed as rope() does; rope_cs applies them (bit-identical to rope()). For several tensors
// at the same positions (q and k of every decoder layer) the table is computed once.
void rope_table(int64_t n, int64_t hd, int64_t pos0, const float* inv_freq, float* cs);
void rope_cs(float* x, int64_t n, int64_t heads, int64_t hd, const float* cs);

} // namespace qasr::ops
